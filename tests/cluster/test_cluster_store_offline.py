"""A node whose store goes offline (issue 16's storage faults: a failed write through tests/helpers/faultfs.py under
that node's store) leaves the cluster (issue 17): a follower stops fetching and leaves the ISR recorded in ZooKeeper, a
leader gives leadership up at once — another ISR member leads well before any session could expire — and every
record acknowledged before is on the new leader."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_topic
from faultstore import FaultFS
from zkcluster import Cluster, append_acked, wait_until
from zkserver import ZooKeeperServer

SESSION_MS = 6000  # a leader that leaves is replaced well within it: leaving closes the session at once
TOPIC = "t"
WAIT_S = 20.0
FAIL_EVERY_SEGMENT_WRITE = [{"op": "pwrite", "path": "*.log", "times": 0}]


@pytest.fixture
def faulty_cluster(tmp_path: Path, zookeeper: ZooKeeperServer) -> Iterator[tuple[Cluster, dict[int, FaultFS]]]:
    """Three nodes, each store on its own fault filesystem (mounted where the cluster puts the node's store);
    the nodes are stopped before their filesystems, whatever the test did."""
    root = tmp_path / "cluster"
    disks = {i: FaultFS(tmp_path / f"disk{i}", root / f"n{i}" / "store", tmp_path / f"control{i}") for i in (1, 2, 3)}
    try:
        for disk in disks.values():
            disk.start()
        with Cluster(root, 3, session_timeout_ms=SESSION_MS, min_insync_replicas=1, zookeeper=zookeeper) as c:
            yield c, disks
            c.close()
    finally:
        for disk in disks.values():
            disk.stop()


def test_offline_stores_make_a_follower_leave_the_isr_and_a_leader_give_up_leadership(
    faulty_cluster: tuple[Cluster, dict[int, FaultFS]],
) -> None:
    cluster, disks = faulty_cluster
    leader, info = cluster.wait_leader(WAIT_S)
    follower, other = (cluster.nodes[i] for i in cluster.ids if i != leader.node_id)
    make_topic(leader.mount, TOPIC)
    append_acked(leader.mount, TOPIC, 0, ["a", "b"])
    isr = lambda: sorted((cluster.partition_znode(TOPIC, 0) or {"isr": []})["isr"])  # noqa: E731
    wait_until("every node in the ISR", lambda: isr() == [1, 2, 3], WAIT_S, logs=cluster.logs)

    # a follower's disk fails: its next append of fetched records takes its store offline; it leaves
    disks[follower.node_id].schedule(FAIL_EVERY_SEGMENT_WRITE)
    append_acked(leader.mount, TOPIC, 0, ["c"])
    gone = sorted([leader.node_id, other.node_id])
    wait_until("the follower unregistered", lambda: cluster.registered() == gone, WAIT_S, logs=cluster.logs)
    wait_until("the follower out of the ISR", lambda: isr() == gone, WAIT_S, logs=cluster.logs)
    assert "leaves the cluster: store" in follower.log_text()
    assert cluster.partition_znode(TOPIC, 0)["leader"] == leader.node_id  # type: ignore[index]
    append_acked(leader.mount, TOPIC, 0, ["d"])  # the leader acks on with the rest of the ISR

    # the leader's disk fails: the write fails (EIO), its store is offline, it gives leadership up at once
    disks[leader.node_id].schedule(FAIL_EVERY_SEGMENT_WRITE)
    failed = time.monotonic()
    with pytest.raises(OSError) as refused:
        append_acked(leader.mount, TOPIC, 0, ["never-acked"])
    assert refused.value.errno == errno.EIO
    new, _ = cluster.wait_leader(WAIT_S, min_epoch=info.leader_epoch + 1, exclude=[leader.node_id], settled=False)
    took = time.monotonic() - failed
    assert new.node_id == other.node_id and took < SESSION_MS / 1000 / 2, f"{took:.2f} s"
    assert leader.node_id not in cluster.registered()
    assert (cluster.partition_znode(TOPIC, 0) or {})["leader"] == other.node_id
    append_acked(new.mount, TOPIC, 0, ["e"])
    assert (new.mount / TOPIC / "0/at/earliest").read_bytes() == b"a\nb\nc\nd\ne\n"  # every acknowledged record
    assert _write_errno(leader.mount) == errno.EROFS  # the old leader takes no write any more


def _write_errno(mount: Path) -> int:
    try:
        os.open(mount / TOPIC / "0/append", os.O_WRONLY)
    except OSError as exc:
        return exc.errno or 0
    return 0
