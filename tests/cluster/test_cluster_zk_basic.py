"""Three real ``logfs mount`` processes and a real ZooKeeper (tests/helpers/zkserver.py): the election,
``.logfs/leader`` on every node, EROFS on followers for writes forwarded to them, the znodes in Kafka's layout, a
leader killed with -9 replaced within the session timeout + 1 s with every acknowledged record, and the old leader
rejoining as a follower. The scenario list and the campaign are tests/cluster/test_failover_*.py."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conftest import Mount, clear_mount, errno_of, finish_mount, start_mount, state
from follower_procs import wait_for

SESSION_MS = 2000
REPLICAS = "1,2,3"


def node_config(node_id: int, connect: str) -> list[str]:
    return [f"node.id={node_id}", f"replica.ids={REPLICAS}", "min.insync.replicas=2",
            f"zookeeper.connect={connect}/logfs", f"zookeeper.session.timeout.ms={SESSION_MS}",
            "replica.lag.time.max.ms=3000"]  # fmt: skip


def leader_of(mount: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((mount / ".logfs" / "leader").read_text())
    return doc


def ack(mount: Path, data: bytes, topic: str = "t") -> None:
    """Append ``data`` to partition 0 and fsync: acks=all."""
    fd = os.open(mount / topic / "0" / "append", os.O_WRONLY)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def three_nodes(tmp_path: Path, connect: str) -> Iterator[dict[int, Mount]]:
    nodes: dict[int, Mount] = {}
    try:
        for i in (1, 2, 3):
            nodes[i] = start_mount(tmp_path / f"store{i}", tmp_path / f"mnt{i}", *node_config(i, connect))
        yield nodes
    finally:
        failures = []
        for mount in nodes.values():  # every node is stopped and unmounted, whatever fails
            try:
                if mount.proc.poll() is None:
                    finish_mount(mount)
                else:
                    clear_mount(mount.path)
            except AssertionError as exc:
                failures.append(str(exc))
        assert not failures, "\n".join(failures)


def test_three_nodes_elect_fail_over_and_rejoin(tmp_path: Path, zookeeper: Any) -> None:
    from kazoo.client import KazooClient

    with three_nodes(tmp_path, zookeeper.connect) as nodes:
        for mount in nodes.values():  # a follower whose leader goes away says so; fencing is expected here
            mount.allow_log(r"leader .* unreachable|no leader in epoch|fetch failed")
            mount.allow_refusals(r"/(\.logfs/forward/t/0/append|u)")  # EROFS on purpose, below
        m1, m2, m3 = (nodes[i].path for i in (1, 2, 3))
        # node 1 leads (first in replica.ids), in epoch 0 of a fresh cluster; every node says so
        for m in (m1, m2, m3):
            wait_for(f"{m} names node 1", lambda m=m: leader_of(m)["node_id"] == 1)
        assert leader_of(m2) == {"node_id": 1, "mount": str(m1), "leader_epoch": 0, "shared": False}
        (m1 / "t").mkdir()
        ack(m1, b"a\nb\nc\n")
        for m in (m2, m3):
            wait_for(f"{m} holds the records", lambda m=m: (m / "t/0/at/earliest").read_bytes() == b"a\nb\nc\n")
            # a follower forwards writes to the leader (tests/cluster/test_cluster_forwarding.py), but never one that
            # was forwarded to it: a node that does not lead refuses those
            assert errno_of(os.open, m / ".logfs/forward/t/0/append", os.O_WRONLY) == errno.EROFS
            # mkdir through a follower makes the topic on the leader, for the whole cluster (the second: EEXIST)
            assert errno_of(os.mkdir, m / "u") == (None if m == m2 else errno.EEXIST)
            assert (m1 / "u").is_dir() and (m2 / "u").is_dir()
        s1, s2 = state(m1, "t"), state(m2, "t")
        assert (s1["role"], s2["role"]) == ("leader", "follower")
        assert s1["zookeeper_session"] == s2["zookeeper_session"] == "connected"
        assert s1["controller"] == s2["controller"] == 1
        assert 'logfs_cluster_role{role="leader"} 1' in (m1 / ".logfs/metrics").read_text()
        assert 'logfs_cluster_role{role="follower"} 1' in (m2 / ".logfs/metrics").read_text()

        zk = KazooClient(hosts=zookeeper.connect)
        zk.start(timeout=10)
        try:
            assert sorted(zk.get_children("/logfs/brokers/ids")) == ["1", "2", "3"]
            assert json.loads(zk.get("/logfs/controller")[0])["brokerid"] == 1
            assert zk.get("/logfs/controller_epoch")[0] == b"1"
            recorded = wait_for("the ISR recorded", lambda: _isr_is(zk, [1, 2, 3]))
            assert (recorded["leader"], recorded["leader_epoch"]) == (1, 0)

            # kill -9 the leader: node 2 leads within the session timeout + 1 s, in the next epoch
            killed = time.monotonic()
            nodes[1].proc.send_signal(signal.SIGKILL)
            nodes[1].proc.wait(10)
            info = wait_for("node 2 leads", lambda: leader_of(m2)["node_id"] == 2 and leader_of(m2), timeout_s=10)
            took = time.monotonic() - killed
            assert took <= SESSION_MS / 1000 + 1.0, f"failover took {took:.2f} s"
            assert info == {"node_id": 2, "mount": str(m2), "leader_epoch": 1, "shared": False}
            wait_for("node 3 follows node 2", lambda: leader_of(m3)["node_id"] == 2)
            ack(m2, b"d\n")  # acks=all continues on the new leader (ISR 2, 3 >= min.insync.replicas)
            assert (m2 / "t/0/at/earliest").read_bytes() == b"a\nb\nc\nd\n"  # every acknowledged record
            state2 = _isr_is(zk, [2, 3])
            assert state2 is not None and (state2["leader"], state2["leader_epoch"]) == (2, 1)

            # the old leader restarts: it follows node 2, catches up and re-enters the ISR
            clear_mount(m1)
            nodes[1] = start_mount(tmp_path / "store1", m1, *node_config(1, zookeeper.connect))
            nodes[1].allow_log(r"stale mount|leader .* unreachable")
            nodes[1].allow_refusals(r"/\.logfs/forward/t/0/append")
            wait_for("node 1 follows node 2", lambda: leader_of(m1)["node_id"] == 2)
            wait_for("node 1 caught up", lambda: (m1 / "t/0/at/earliest").read_bytes() == b"a\nb\nc\nd\n")
            wait_for("node 1 back in the ISR", lambda: _isr_is(zk, [1, 2, 3]))
            assert errno_of(os.open, m1 / ".logfs/forward/t/0/append", os.O_WRONLY) == errno.EROFS
        finally:
            zk.stop()
            zk.close()


def _isr_is(zk: Any, isr: list[int]) -> dict[str, Any] | None:
    data, stat = zk.get("/logfs/brokers/topics/t/partitions/0/state")
    doc: dict[str, Any] = json.loads(data)
    doc["version"] = stat.version
    return doc if doc["isr"] == isr else None


def test_without_zookeeper_the_leader_file_names_the_mount_itself(tmp_path: Path) -> None:
    mount = start_mount(tmp_path / "store", tmp_path / "mnt", "node.id=4")
    try:
        assert leader_of(mount.path) == {
            "node_id": 4, "mount": os.path.realpath(mount.path), "leader_epoch": 0, "shared": False
        }
        assert "zookeeper_session" not in (mount.path / ".logfs" / "metrics").read_text()
    finally:
        finish_mount(mount)


def test_a_bad_zookeeper_config_is_refused(tmp_path: Path) -> None:
    import subprocess
    import sys

    logfs = str(Path(sys.executable).with_name("logfs"))
    (tmp_path / "mnt").mkdir()
    done = subprocess.run(
        [logfs, "mount", str(tmp_path / "store"), str(tmp_path / "mnt"), "--config", "zookeeper.connect=x:1",
         "--config", "unclean.leader.election.enable=maybe"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "unclean.leader.election.enable" in done.stderr
    assert not (tmp_path / "store").exists()


def test_a_deletion_is_kept_in_zookeeper_until_every_replica_applied_it(tmp_path: Path, zookeeper: Any) -> None:
    """A topic deleted on the leader while node 3 is down: /admin/delete_topics/<t> holds it; node 3 deletes its copy
    when it returns (it never comes back on the leader), and then the record goes."""
    from kazoo.client import KazooClient

    with three_nodes(tmp_path, zookeeper.connect) as nodes:
        for mount in nodes.values():
            mount.allow_log(r"leader .* unreachable|fetch failed")
        m1, m3 = nodes[1].path, nodes[3].path
        wait_for("node 1 leads", lambda: leader_of(m1)["node_id"] == 1 and leader_of(m3)["node_id"] == 1)
        (m1 / "gone").mkdir()
        ack(m1, b"x\n", topic="gone")
        wait_for("node 3 holds the topic", lambda: (m3 / "gone/0/at/earliest").read_bytes() == b"x\n")
        nodes[3].proc.send_signal(signal.SIGKILL)
        nodes[3].proc.wait(10)
        clear_mount(m3)
        (m1 / ".logfs/delete-topic").write_text("gone\n")
        zk = KazooClient(hosts=zookeeper.connect)
        zk.start(timeout=10)
        try:
            recorded = wait_for("the deletion recorded", lambda: zk.exists("/logfs/admin/delete_topics/gone"))
            assert recorded is not None
            assert (tmp_path / "store3" / "gone-0").is_dir()  # node 3 still has its copy
            nodes[3] = start_mount(tmp_path / "store3", m3, *node_config(3, zookeeper.connect))
            nodes[3].allow_log(r"stale mount|leader .* unreachable")
            wait_for("node 3 deleted its copy", lambda: not (tmp_path / "store3" / "gone-0").exists())
            wait_for("the record gone", lambda: zk.exists("/logfs/admin/delete_topics/gone") is None)
            assert not (m1 / "gone").exists() and not (m3 / "gone").exists()
            assert zk.exists("/logfs/brokers/topics/gone") is None
        finally:
            zk.stop()
            zk.close()
