"""The ZooKeeper rows of scripts/bench_replication.py (issue 17): failover time and acks=all throughput with
automatic failover against without it.

* :func:`bench_zk_failovers`: three nodes (``logfs mount`` with ``zookeeper.connect``, ``min.insync.replicas=2``) on
  a standalone ZooKeeper with tickTime 200 ms. Each failover: every node in the ISR, a writer appending with acks=all
  (write(2) then fsync(2)) in a loop to whichever node ``.logfs/leader`` names; the leader is killed (SIGKILL); the
  time is from the kill to the first acknowledged write on the new leader. The old leader restarts and rejoins
  before the next one. Target: ≤ session timeout + 1 s.
* :func:`bench_zk_throughput`: the same 1 MiB batches + fsync as the acks=all rows, into a three-node cluster with
  ZooKeeper and into today's static cluster (a leader ``logfs mount`` with two ``logfs follow`` followers, the same
  replica count and ``min.insync.replicas``), both up at once, rounds alternating. Target: ≥ 95 % of without.

The cluster helpers are the failover tests' (tests/helpers/zkserver.py, tests/cluster/zkcluster.py,
tests/cluster/ackcheck.py).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "helpers"), str(ROOT / "tests" / "cluster")]

from ackcheck import append_acked  # noqa: E402
from zkcluster import Cluster, ClusterError, wait_until  # noqa: E402

TOPIC = "t"
MB = 1e6


def _full_isr(cluster: Cluster, partitions: int = 1) -> bool:
    want = len(cluster.ids)
    return all((z := cluster.partition_znode(TOPIC, p)) and len(z["isr"]) == want for p in range(partitions))


def _cluster(root: Path, session_ms: int) -> Cluster:
    cluster = Cluster(root, 3, session_timeout_ms=session_ms).start()
    try:
        leader, _ = cluster.wait_leader(30)
        (leader.mount / TOPIC).mkdir()
        wait_until("every node in the ISR", lambda: _full_isr(cluster), 30)
    except BaseException:
        cluster.close()
        raise
    return cluster


def bench_zk_failovers(root: Path, count: int, session_ms: int) -> list[float]:
    """Seconds from the leader's SIGKILL to the first acknowledged write on its successor, ``count`` times."""
    times: list[float] = []
    cluster = _cluster(root / "zk-failover", session_ms)
    try:
        seq = 0
        for _ in range(count):
            wait_until("every node in the ISR", lambda: _full_isr(cluster), 60)
            old, info = cluster.wait_leader(30)
            killed = time.monotonic()
            old.kill()
            while True:
                if time.monotonic() - killed > 60:
                    raise ClusterError(f"no acknowledged write 60 s after the kill\n{cluster.logs()}")
                found = cluster.current_leader()
                if found is None or found[0] is old or found[1].leader_epoch <= info.leader_epoch:
                    time.sleep(0.005)
                    continue
                seq += 1
                try:
                    append_acked(Path(found[1].mount), TOPIC, 0, [f"f{seq}"])
                except OSError:
                    time.sleep(0.005)
                    continue
                times.append(time.monotonic() - killed)
                break
            cluster.restart(old.node_id)
    finally:
        cluster.close()
    return times


@contextlib.contextmanager
def zk_leader(root: Path, session_ms: int) -> Iterator[Path]:
    """The leader's mount of a three-node cluster with ZooKeeper (for the throughput rounds)."""
    cluster = _cluster(root, session_ms)
    try:
        yield cluster.wait_leader(30)[0].mount
    finally:
        cluster.close()


def bench_zk_throughput(
    root: Path,
    data: list[bytes],
    rounds: int,
    session_ms: int,
    static_cluster: Callable[[Path, int], Any],
    produce: Callable[[Path, list[bytes]], float],
) -> tuple[list[float], list[float]]:
    """MB/s of acks=all produce of ``data`` in each of ``rounds`` alternating rounds: (without ZooKeeper, with).

    ``static_cluster(base, followers)`` and ``produce(mount, data)`` are bench_replication's own (a context manager
    giving the leader's mount of a leader with ``followers`` ``logfs follow`` followers; one round's seconds)."""
    size = sum(map(len, data))
    with contextlib.ExitStack() as stack:
        base = root / "zk-static"
        base.mkdir()
        static_mount, _ = stack.enter_context(static_cluster(base, 2))
        zk_mount = stack.enter_context(zk_leader(root / "zk-auto", session_ms))
        mounts = [static_mount, zk_mount]
        for mount in mounts:
            produce(mount, data[:4])  # warm up
        results: list[list[float]] = [[], []]
        for _ in range(rounds):
            for side, mount in enumerate(mounts):
                results[side].append(size / produce(mount, data) / MB)
    return results[0], results[1]


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="zkbench-", dir=os.environ.get("TMPDIR")) as tmp:
        print(bench_zk_failovers(Path(tmp), int(sys.argv[1]) if len(sys.argv) > 1 else 3, 1500))
