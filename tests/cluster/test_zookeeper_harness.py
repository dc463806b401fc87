"""The failover tests' harness on its own: the standalone ZooKeeper server (tests/helpers/zkserver.py) and the cuttable
TCP proxy (tests/helpers/tcpproxy.py), driven with a plain kazoo client, so that a failover test that fails points at
the product and not at its tools."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NoNodeError
from tcpproxy import TcpProxy
from zkserver import ZooKeeperServer, four_letter


def client(hosts: str, timeout_s: float = 1.0) -> KazooClient:
    # Reconnect attempts at most a fifth of the session apart, as logfs/cluster/zksession.py does: kazoo's default
    # backoff doubles to 60 s, and a server restarted after a 2.5 s outage gives a session only its timeout to come
    # back.
    retry = {"max_tries": -1, "delay": 0.05, "backoff": 2, "max_jitter": 0.1, "max_delay": max(0.05, timeout_s / 5)}
    zk = KazooClient(hosts=hosts, timeout=timeout_s, connection_retry=retry)
    zk.start(timeout=10)
    return zk


def test_the_server_restarts_on_its_port_and_keeps_data_and_sessions(zookeeper: ZooKeeperServer) -> None:
    """kill -9 and start again: same port, the persistent znode kept, and a session shorter-lived than the outage
    survives (the server reloads sessions and restarts their timers), so its ephemeral node is still there."""
    assert four_letter(zookeeper.port, "ruok") == "imok"
    zk = client(zookeeper.connect, 2.0)
    try:
        zk.create("/kept", b"1")
        zk.create("/mine", b"", ephemeral=True)
        session = zk.client_id[0]
        zookeeper.restart(down_s=2.5)  # longer than the session timeout
        assert zk.get("/kept")[0] == b"1"
        assert zk.exists("/mine") is not None
        assert zk.client_id[0] == session
    finally:
        zk.stop()
        zk.close()
    assert zookeeper.starts == 2


def test_a_session_timeout_is_negotiated_within_the_servers_ticks(zookeeper: ZooKeeperServer) -> None:
    """tickTime 200 and minSessionTimeout 400: a 1500 ms session is granted as asked (Debian's defaults would clamp
    it to 4 s), and a clean stop deletes the ephemeral node at once."""
    zk = client(zookeeper.connect, 1.5)
    watcher = client(zookeeper.connect, 5.0)
    try:
        assert zk._session_timeout == 1500
        zk.create("/e", b"", ephemeral=True)
        zk.stop()
        assert watcher.exists("/e") is None
    finally:
        zk.close()
        watcher.stop()
        watcher.close()


def test_the_server_refuses_to_start_when_its_port_is_taken(tmp_path: Path) -> None:
    """A start that cannot serve fails with the log's tail instead of waiting forever, and leaves nothing running."""
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        server = ZooKeeperServer(tmp_path / "zk", port=blocker.getsockname()[1])
        with pytest.raises(Exception, match="ZooKeeper"):
            server.start(timeout_s=15)
        assert not server.running()


@pytest.mark.parametrize("mode", ["refuse", "blackhole"])
def test_a_cut_proxy_expires_one_session_and_heals(zookeeper: ZooKeeperServer, mode: str) -> None:
    """One client through the proxy, one direct: cutting the proxy suspends the first and the server expires its
    session (its ephemeral node goes) while the direct one is untouched; healed, the first gets a new session."""
    with TcpProxy(("127.0.0.1", zookeeper.port)) as proxy:
        cut_off = client(proxy.address, 1.0)
        direct = client(zookeeper.connect, 5.0)
        states: list[str] = []
        lost = threading.Event()

        def listen(state: str) -> None:
            states.append(state)
            if state == KazooState.LOST:
                lost.set()

        cut_off.add_listener(listen)
        try:
            cut_off.create("/brokers/ids/7", b"{}", ephemeral=True, makepath=True)
            old_session = cut_off.client_id[0]
            proxy.cut(mode)  # type: ignore[arg-type]
            deadline = time.monotonic() + 10
            while direct.exists("/brokers/ids/7") is not None:
                assert time.monotonic() < deadline, "the server did not expire the cut session"
                time.sleep(0.05)
            assert KazooState.SUSPENDED in states and not lost.is_set()  # it cannot learn of the expiry while cut
            proxy.heal()
            assert lost.wait(10), states
            deadline = time.monotonic() + 10
            while cut_off.state != KazooState.CONNECTED:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert cut_off.client_id[0] != old_session
            with pytest.raises(NoNodeError):
                direct.get("/brokers/ids/7")
        finally:
            cut_off.stop()
            cut_off.close()
            direct.stop()
            direct.close()
