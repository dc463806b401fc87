"""A cluster of ``logfs mount`` nodes with automatic failover through a real ZooKeeper (issue 17), for tests,
scripts/cluster-demo and scripts/bench_replication.py.

Every piece is a real process: a standalone ZooKeeper (tests/helpers/zkserver.py) and N ``logfs mount STORE MP --config
node.id=N --config zookeeper.connect=… --config replica.ids=1,2,3 …`` nodes, each with its own store and mount point
under one directory. Each node reaches ZooKeeper through its own TCP proxy (tests/helpers/tcpproxy.py), so a test can
cut one node from ZooKeeper while the others keep their sessions.

The contract the helpers rely on is issue 17's: ``MP/.logfs/leader`` is ``{"node_id", "mount", "leader_epoch"}``
(node_id -1 while there is no leader) on every node; the leader's mount takes writes, followers' mounts refuse them;
acknowledged means an fsync (or O_SYNC write) returned success; ZooKeeper holds Kafka's znodes.

A paused (SIGSTOP) node's mount blocks every access until SIGCONT, so the helpers never touch the mount of a node
they paused (``Node.reachable``); a writer that was already inside such a mount waits there, which is what a real
client of a zombie leader does. :meth:`Cluster.close` resumes paused nodes before it stops anything.

No pytest here: the demo and the benchmark use the module too; failures raise :class:`ClusterError`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from tcpproxy import TcpProxy
from zkserver import ZooKeeperServer

LOGFS = str(Path(sys.executable).with_name("logfs"))
START_TIMEOUT_S = 30.0
EXIT_TIMEOUT_S = 20.0
KILL_EXIT_S = 5.0  # a SIGKILLed node's process is gone by then (it has no cleanup to do)
T = TypeVar("T")


class ClusterError(AssertionError):
    """A cluster helper gave up waiting, or a node misbehaved; the message has the logs' tails."""


def wait_until(what: str, probe: Callable[[], T | None], timeout_s: float, poll_s: float = 0.05,
               logs: Callable[[], str] | None = None) -> T:  # fmt: skip
    """Poll ``probe`` until it returns something truthy (an OSError, or a ZooKeeper error while the test's client
    reconnects, counts as not yet); ClusterError on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = probe()
        except (OSError, *_transient()):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            tail = f"\n{logs()}" if logs else ""
            raise ClusterError(f"timed out after {timeout_s:.1f} s waiting for {what}{tail}")
        time.sleep(poll_s)


def _transient() -> tuple[type[Exception], ...]:
    """kazoo's error base class when kazoo is installed (the demo may run without the test extras)."""
    try:
        from kazoo.exceptions import KazooException
    except ImportError:
        return ()
    return (KazooException,)


def _mount_minor(path: Path) -> int | None:
    """The FUSE connection number (the device minor) of a mount at ``path``, from /proc/self/mountinfo: never a
    stat(2), which would hang on a mount whose daemon cannot answer."""
    wanted = str(path)
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as info:
        for line in info:
            fields = line.split()
            point = fields[4].replace("\\040", " ")
            if point == wanted and fields[2].startswith("0:"):
                return int(fields[2].split(":")[1])
    return None


def abort_fuse(path: Path) -> bool:
    """Abort the FUSE connection of the mount at ``path`` (``echo 1 > /sys/fs/fuse/connections/N/abort``), as an
    administrator does for a hung mount: every request waiting on it fails with ENOTCONN at once.

    Only the cleanup of a failed :meth:`Node._end`: a killed node whose process cannot finish exiting (as a leader
    could once, when a thread of it waited in a reverse invalidation for a directory lock held by a follower's
    long-polling lookup; fixed, see docs/replication.md) is freed so later tests can run, and the test fails.
    Mounts fusectl when it is not mounted (root only); False when the connection could not be aborted."""
    minor = _mount_minor(path)
    if minor is None:
        return False
    connections = Path("/sys/fs/fuse/connections")
    if not (connections / str(minor)).exists():
        subprocess.run(["mount", "-t", "fusectl", "fusectl", str(connections)], capture_output=True, check=False)
    try:
        (connections / str(minor) / "abort").write_text("1")
    except OSError:
        return False
    return True


def clear_mount(path: Path) -> None:
    """``fusermount3 -u -z`` of a mount point a dead node left mounted (found in /proc/self/mountinfo, not by
    stat(2), which could hang)."""
    if _mount_minor(path) is not None:
        subprocess.run(["fusermount3", "-u", "-z", str(path)], capture_output=True, check=False)


@dataclass(frozen=True)
class LeaderInfo:
    """A node's ``.logfs/leader``: who it believes leads, where that leader's mount is, and at which epoch."""

    node_id: int
    mount: str
    leader_epoch: int

    @classmethod
    def parse(cls, text: str | bytes) -> LeaderInfo:
        doc = json.loads(text)
        return cls(int(doc["node_id"]), str(doc.get("mount") or ""), int(doc["leader_epoch"]))


@dataclass
class Node:
    """One ``logfs mount`` node of the cluster; started, killed, paused and restarted by the test."""

    node_id: int
    store: Path
    mount: Path
    log_path: Path
    config: list[str]
    proxy: TcpProxy
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False
    starts: int = 0
    exits: list[int | None] = field(default_factory=list)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def reachable(self) -> bool:
        """Running and not paused: its mount answers (a paused node's mount would block the caller)."""
        return self.alive() and not self.paused

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start (or restart) ``logfs mount`` and wait until the mount point is a mount."""
        self.spawn()
        self.wait_mounted(timeout_s)

    def spawn(self) -> None:
        """Start ``logfs mount`` without waiting (:meth:`wait_mounted` waits)."""
        if self.alive():
            return
        clear_mount(self.mount)
        self.store.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            self.mount.mkdir(parents=True)
        args = [LOGFS, "--log-level", "info", "mount", str(self.store), str(self.mount)]
        for pair in self.config:
            args += ["--config", pair]
        with open(self.log_path, "ab") as log:
            log.write(f"--- start {self.starts + 1}: {' '.join(args)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, cwd="/")
        self.starts += 1
        self.paused = False

    def wait_mounted(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until the mount point is a mount; ClusterError (the process stopped) when it exits or takes too long."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while _mount_minor(self.mount) is None:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise ClusterError(f"node {self.node_id} exited {code} before it mounted:\n{self.log_text()[-6000:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise ClusterError(f"node {self.node_id} did not mount in {timeout_s} s:\n{self.log_text()[-6000:]}")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL, as a crash (works on a paused process too); its stale mount point is cleared."""
        self._end(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: a zombie that keeps its state, its mount and (until ZooKeeper expires it) its session."""
        if self.alive() and not self.paused:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self.paused and self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> int | None:
        """A clean stop: SIGTERM (the mount unmounts and exits 0; SIGKILL as the last resort); the exit code, None
        when it had to be killed or was not running. SIGTERM rather than ``logfs umount``: the same clean shutdown
        without starting one more Python per node on a busy 2-core machine."""
        self.resume()
        if not self.alive():
            self._reap()
            return None
        return self._end(signal.SIGTERM)

    def _end(self, sig: int | None) -> int | None:
        """Signal (unless ``sig`` is None), wait, SIGKILL if it does not end. The exit code (None when killed).
        ClusterError when the process does not exit within KILL_EXIT_S of its SIGKILL: a killed node must go alone
        (its FUSE connection is then aborted, see :func:`abort_fuse`, so the failure hangs nothing after it)."""
        proc = self.proc
        code: int | None = None
        stuck = False
        if proc is not None:
            if sig is not None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(sig)
            try:
                code = proc.wait(KILL_EXIT_S if sig == signal.SIGKILL else EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                try:
                    proc.wait(KILL_EXIT_S)
                except subprocess.TimeoutExpired:
                    stuck = True
                    abort_fuse(self.mount)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(EXIT_TIMEOUT_S)
                code = None
            self.paused = False
            self.exits.append(code)
        self._reap()
        if stuck:
            raise ClusterError(f"node {self.node_id} did not exit within {KILL_EXIT_S} s of SIGKILL (its FUSE "
                               "connection was aborted to free it)")  # fmt: skip
        return code

    def _reap(self) -> None:
        self.proc = None
        clear_mount(self.mount)

    def leader(self) -> LeaderInfo | None:
        """This node's ``.logfs/leader`` (None when unreachable, missing or not JSON yet)."""
        if not self.reachable:
            return None
        try:
            return LeaderInfo.parse((self.mount / ".logfs" / "leader").read_bytes())
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def partition_state(self, topic: str, partition: int) -> dict[str, Any] | None:
        """The ``state`` file of a partition on this node's mount (None when unreachable or missing)."""
        if not self.reachable:
            return None
        try:
            result: dict[str, Any] = json.loads((self.mount / topic / str(partition) / "state").read_bytes())
        except (OSError, ValueError):
            return None
        return result


class Cluster:
    """ZooKeeper plus ``size`` nodes (ids 1..size) under ``root``; use as a context manager (always stopped)."""

    def __init__(
        self,
        root: Path,
        size: int = 3,
        *,
        session_timeout_ms: int = 1500,
        min_insync_replicas: int = 2,
        config: Iterable[str] = (),
        zookeeper: ZooKeeperServer | None = None,
        chroot: str = "",
    ) -> None:
        self.root = root
        self.chroot = chroot  # under which the nodes keep their znodes ("/name"; "": none), and the test's client
        root.mkdir(parents=True, exist_ok=True)
        self.session_timeout_ms = session_timeout_ms
        self.zk = zookeeper if zookeeper is not None else ZooKeeperServer(root / "zookeeper")
        self._own_zk = zookeeper is None
        self.ids = list(range(1, size + 1))
        self.nodes: dict[int, Node] = {}
        self._kazoo: Any = None
        self._extra = list(config)
        self.min_insync_replicas = min_insync_replicas

    # --- lifecycle --------------------------------------------------------------------------------------------------

    def start(self) -> Cluster:
        """Start ZooKeeper (unless given one already running) and every node, node 1 first."""
        self.zk.start()
        for node_id in self.ids:
            proxy = TcpProxy(("127.0.0.1", self.zk.port))
            self.nodes[node_id] = Node(
                node_id,
                self.root / f"n{node_id}" / "store",
                self.root / f"n{node_id}" / "mnt",
                self.root / f"n{node_id}" / "mount.log",
                self.node_config(node_id, proxy.address),
                proxy,
            )
        for node in self.nodes.values():
            node.spawn()
        for node in self.nodes.values():
            node.wait_mounted()
        return self

    def node_config(self, node_id: int, connect: str) -> list[str]:
        return [
            f"node.id={node_id}",
            f"zookeeper.connect={connect}{self.chroot}",
            "replica.ids=" + ",".join(map(str, self.ids)),
            f"min.insync.replicas={self.min_insync_replicas}",
            f"zookeeper.session.timeout.ms={self.session_timeout_ms}",
            # Kafka's 30 s would keep a writer's fsync waiting that long when the ISR cannot move (a dead follower
            # before its session expires); a failure then shows within the tests' waits.
            "request.timeout.ms=8000",
            *self._extra,
        ]

    def close(self) -> dict[int, int | None]:
        """Resume paused nodes, stop every node, the proxies, the test's ZooKeeper client and ZooKeeper; the exit
        code of each node that was running (None: it had to be killed)."""
        for node in self.nodes.values():
            node.resume()
        codes: dict[int, int | None] = {}

        def stop(node: Node) -> None:
            try:
                codes[node.node_id] = node.stop()
            except Exception:
                codes[node.node_id] = None

        stoppers = [threading.Thread(target=stop, args=(n,)) for n in self.nodes.values() if n.alive()]
        for thread in stoppers:  # at once: one by one, each stop would make the next node's role change first
            thread.start()
        for thread in stoppers:
            thread.join()
        for node in self.nodes.values():
            node.proxy.close()
        if self._kazoo is not None:
            with contextlib.suppress(Exception):
                self._kazoo.stop()
                self._kazoo.close()
            self._kazoo = None
        if self._own_zk:
            self.zk.stop()
        return codes

    def __enter__(self) -> Cluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def session_timeout_s(self) -> float:
        return self.session_timeout_ms / 1000

    def reachable(self) -> list[Node]:
        return [n for n in list(self.nodes.values()) if n.reachable]

    def logs(self, tail: int = 4000) -> str:
        """Every node's log tail and ZooKeeper's, for a failure message."""
        parts = [f"--- node {n.node_id} ({n.log_path}):\n{n.log_text()[-tail:]}" for n in self.nodes.values()]
        return "\n".join(parts)

    # --- who leads -------------------------------------------------------------------------------------------------

    def views(self) -> dict[int, LeaderInfo]:
        """Every reachable node's ``.logfs/leader``."""
        out = {}
        for node in self.reachable():
            info = node.leader()
            if info is not None:
                out[node.node_id] = info
        return out

    def current_leader(self) -> tuple[Node, LeaderInfo] | None:
        """The leader a writer would pick now: the newest epoch any reachable node reports, if it names a node the
        test has running (paused or not: a writer cannot tell a zombie from a slow leader)."""
        best: LeaderInfo | None = None
        for info in self.views().values():
            if info.node_id >= 0 and (best is None or info.leader_epoch > best.leader_epoch):
                best = info
        if best is None:
            return None
        node = self.nodes.get(best.node_id)
        if node is None or not node.alive():
            return None
        return node, best

    def settled_leader(self, *, min_epoch: int = 0, exclude: Iterable[int] = ()) -> tuple[Node, LeaderInfo] | None:
        """The leader once every reachable node agrees on it: same node id (not excluded, reachable) and epoch
        ≥ ``min_epoch``, and that node names itself. None while they disagree."""
        views = self.views()
        reachable = {n.node_id for n in self.reachable()}
        if not views or set(views) != reachable:
            return None
        infos = set(views.values())
        if len(infos) != 1:
            return None
        info = infos.pop()
        if info.node_id < 0 or info.node_id in set(exclude) or info.node_id not in reachable:
            return None
        if info.leader_epoch < min_epoch:
            return None
        return self.nodes[info.node_id], info

    def wait_leader(
        self, timeout_s: float = 30.0, *, min_epoch: int = 0, exclude: Iterable[int] = (), settled: bool = True
    ) -> tuple[Node, LeaderInfo]:
        """Wait for a leader (by default one every reachable node agrees on); ClusterError with the logs if none."""
        excluded = tuple(exclude)

        def probe() -> tuple[Node, LeaderInfo] | None:
            if settled:
                return self.settled_leader(min_epoch=min_epoch, exclude=excluded)
            found = self.current_leader()
            if found is None or found[1].leader_epoch < min_epoch or found[0].node_id in excluded:
                return None
            if not found[0].reachable or found[0].leader() != found[1]:
                return None
            return found

        return wait_until(
            f"a leader (epoch >= {min_epoch}, not {list(excluded)}; views {self.views()})",
            probe,
            timeout_s,
            logs=self.logs,
        )

    # --- ZooKeeper, as the test's own client sees it ---------------------------------------------------------------

    def kazoo(self) -> Any:
        """The test's kazoo client (started on first use, stopped by :meth:`close`), under the chroot, without
        credentials; reconnects by itself after a ZooKeeper restart."""
        if self._kazoo is None:
            from kazoo.client import KazooClient

            client = KazooClient(hosts=self.zk.connect + self.chroot, timeout=10.0)
            client.start(timeout=15)
            self._kazoo = client
        return self._kazoo

    def znode_json(self, path: str) -> Any:
        """The JSON of a znode (None when it does not exist)."""
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.kazoo().get(path)
        except NoNodeError:
            return None
        return json.loads(data) if data else None

    def partition_znode(self, topic: str, partition: int) -> dict[str, Any] | None:
        """``/brokers/topics/<t>/partitions/<p>/state``: ``leader``, ``leader_epoch``, ``isr``, …"""
        result: dict[str, Any] | None = self.znode_json(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return result

    def controller_id(self) -> int | None:
        doc = self.znode_json("/controller")
        return None if doc is None else int(doc["brokerid"])

    def registered(self) -> list[int]:
        """The node ids under ``/brokers/ids`` (live sessions)."""
        from kazoo.exceptions import NoNodeError

        try:
            return sorted(int(c) for c in self.kazoo().get_children("/brokers/ids"))
        except NoNodeError:
            return []

    # --- faults ----------------------------------------------------------------------------------------------------

    def restart(self, node_id: int) -> Node:
        node = self.nodes[node_id]
        if node.alive():
            node.kill()
        node.start()
        return node

    def restart_zookeeper(self, down_s: float, *, refuse_until_serving: bool = False) -> None:
        """kill -9 ZooKeeper, keep it down ``down_s`` seconds, start it on the same port and data.

        ``refuse_until_serving``: every node's proxy refuses connections until the restarted server serves. Without
        it, a node's reconnect that lands while the JVM has bound its port but not loaded its data can go unanswered
        for the client's whole connect timeout (the session timeout, in kazoo as in ZooKeeper's Java client), and
        that session then expires although the outage was shorter than its timeout."""
        if refuse_until_serving:
            for node in self.nodes.values():
                node.proxy.cut("refuse")
        try:
            self.zk.restart(down_s)
        finally:
            if refuse_until_serving:
                for node in self.nodes.values():
                    node.proxy.heal()


@contextlib.contextmanager
def checked_cluster(root: Path, zookeeper: ZooKeeperServer, size: int = 3, **options: Any) -> Iterator[Cluster]:
    """A started cluster of ``size`` nodes on ``zookeeper`` (a test fixture's body): stopped when the test ends, and
    every node still running then must exit 0."""
    with Cluster(root, size, zookeeper=zookeeper, **options) as c:
        yield c
        codes = c.close()
    assert all(code == 0 for code in codes.values()), f"exit codes {codes}\n{c.logs()}"


def is_refusal(exc: OSError) -> bool:
    """The errors a writer expects from a mount that is not (or no longer) the leader, or is gone."""
    return exc.errno in (errno.EROFS, errno.EIO, errno.ENOTCONN, errno.ENOENT, errno.ECONNABORTED, errno.EAGAIN,
                         errno.ENOTSUP, errno.EPERM, errno.EACCES)  # fmt: skip


def append_acked(mount: Path, topic: str, partition: int, values: list[str], *, o_sync: bool = False) -> None:
    """One acks=all produce: the lines in one write(2) to ``<topic>/<p>/append``, then fsync(2) (or the write with
    O_SYNC). Returns only when acknowledged; raises the OSError otherwise."""
    flags = os.O_WRONLY | (os.O_SYNC if o_sync else 0)
    fd = os.open(mount / topic / str(partition) / "append", flags)
    try:
        data = "".join(f"{v}\n" for v in values).encode()
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(errno.EIO, f"short write {written} of {len(data)}")
        if not o_sync:
            os.fsync(fd)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
