"""Two edges of a ZooKeeper cluster (issue 23, points 6 and 10), through three real ``logfs mount`` nodes and a
real ZooKeeper (tests/cluster/zkcluster.py):

* A topic created on the leader starts with every registered replica in its ISR (Kafka's controller creates a
  partition with the ISR equal to its live assigned replicas), so ``logfs create-topic`` followed at once by a write
  and fsync (acks=all, ``min.insync.replicas=2``) succeeds and every node holds the record; a killed node (its
  session expired, no longer under ``/brokers/ids``) is not in a new topic's ISR and does not stall it.
* A transaction left open by a leader that is killed is aborted by the new leader (its own transaction log never
  knew it: it is an orphan), so the last stable offset returns to the log end and ``committed/`` leaves the
  transaction's records out, within ``transaction.timeout.ms`` of the failover.

Every process is stopped and every mount unmounted when the test ends, failed or not (``Cluster.close``).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import LOGFS, make_topic
from zkcluster import Cluster, Node, append_acked, checked_cluster, wait_until
from zkserver import ZooKeeperServer

SESSION_MS = 1500
TXN_TIMEOUT_MS = 3000
WAIT_S = 30.0
#: A failover takes the session timeout + 1 s (tests/cluster/test_failover_scenarios.py); on a busy two-core machine
#: the new leader's first steps (reading ZooKeeper, taking every partition) may take seconds more.
FAILOVER_SLACK_S = 10.0


@pytest.fixture
def cluster(tmp_path: Path, zookeeper: ZooKeeperServer) -> Iterator[Cluster]:
    """Three nodes on one ZooKeeper; stopped after the test, and each node still running must exit 0."""
    config = [f"transaction.timeout.ms={TXN_TIMEOUT_MS}"]
    with checked_cluster(tmp_path / "cluster", zookeeper, 3, session_timeout_ms=SESSION_MS, config=config) as c:
        yield c


def create_topic(mount: Path, topic: str) -> None:
    """``logfs create-topic MOUNT TOPIC --partitions 1``, as a user runs it."""
    done = subprocess.run([LOGFS, "create-topic", str(mount), topic, "--partitions", "1"], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, f"create-topic {topic}: {done.stderr}"


def records(node: Node, topic: str, view: str = "at") -> list[str] | None:
    """The values of partition 0 up to the node's HW (``view``: ``at`` or ``committed/at``); None if unreachable."""
    if not node.reachable:
        return None
    try:
        return (node.mount / topic / "0" / view / "earliest").read_text().split()
    except OSError:
        return None


def isr_of(node: Node, topic: str) -> list[int] | None:
    st = node.partition_state(topic, 0)
    return None if st is None else list(st["isr"])


def test_create_topic_then_acks_all_at_once_on_a_zookeeper_leader(cluster: Cluster) -> None:
    leader, _ = cluster.wait_leader(WAIT_S)
    wait_until("every node registered", lambda: cluster.registered() == [1, 2, 3], WAIT_S, logs=cluster.logs)
    for i in range(10):
        topic = f"new{i}"
        create_topic(leader.mount, topic)
        assert isr_of(leader, topic) == [1, 2, 3]  # every registered replica, before any of them fetched it
        append_acked(leader.mount, topic, 0, [f"first-{i}"])  # raises EIO when refused
    followers = [n for n in cluster.nodes.values() if n is not leader]
    for i in range(10):
        for node in followers:
            wait_until(f"new{i} on node {node.node_id}", lambda n=node, i=i: records(n, f"new{i}") == [f"first-{i}"],
                       WAIT_S, logs=cluster.logs)  # fmt: skip
    # A killed node's session expires: it is no longer registered, and a new topic does not wait for it.
    dead = followers[-1]
    dead.kill()

    def dead_left() -> bool:  # the controller took it out of the ISRs, and the leader adopted that
        isr = isr_of(leader, "new0")
        return isr is not None and dead.node_id not in isr

    wait_until(f"node {dead.node_id} out of new0's ISR on the leader", dead_left, WAIT_S, logs=cluster.logs)
    create_topic(leader.mount, "after")
    live = sorted(n.node_id for n in cluster.nodes.values() if n is not dead)
    assert isr_of(leader, "after") == live
    started = time.monotonic()
    append_acked(leader.mount, "after", 0, ["without the dead node"])
    assert time.monotonic() - started < 5.0, "acks=all on a new topic waited for a node that is not registered"


def test_a_topic_made_the_moment_a_paused_leader_wakes_counts_the_nodes_registered_while_it_slept(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    """The leader's view of the registered nodes is refreshed by its reconcile loop, a watch and a dozen ZooKeeper
    round trips behind: a topic made before that loop caught up (here: the followers registered while the leader was
    stopped, and the topic is made the moment it runs again) must still start with them in its ISR, or its first
    acks=all write is refused at once (EIO: the ISR below min.insync.replicas). A session long enough for the pause."""
    with checked_cluster(tmp_path / "cluster", zookeeper, 3, session_timeout_ms=20_000) as cluster:
        leader, _ = cluster.wait_leader(WAIT_S)
        followers = [n for n in cluster.nodes.values() if n is not leader]
        for node in followers:
            assert node.stop() == 0, node.log_text()[-4000:]
        wait_until("the followers' registrations gone", lambda: cluster.registered() == [leader.node_id], WAIT_S,
                   logs=cluster.logs)  # fmt: skip
        time.sleep(2.0)  # the leader's loop (RECONCILE_S = 1 s) sees that: it knows of itself alone
        leader.pause()
        paused = time.monotonic()
        try:
            for node in followers:
                node.spawn()
            for node in followers:
                node.wait_mounted()
            wait_until("every node registered", lambda: cluster.registered() == [1, 2, 3], 15.0, logs=cluster.logs)
        finally:
            leader.resume()
        slept = time.monotonic() - paused
        assert slept < 16.0, f"the leader slept {slept:.1f} s, near its 20 s session: the test did not run as meant"
        make_topic(leader.mount, "woke", 1)
        try:
            append_acked(leader.mount, "woke", 0, ["first"])
        except OSError as exc:
            state = leader.partition_state("woke", 0)
            raise AssertionError(f"{exc}; the leader's state: {state}\n{cluster.logs()}") from exc
        assert isr_of(leader, "woke") == [1, 2, 3]
        for node in followers:
            wait_until(f"the record on node {node.node_id}", lambda n=node: records(n, "woke") == ["first"], WAIT_S,
                       logs=cluster.logs)  # fmt: skip


def test_an_open_transaction_of_a_killed_leader_is_aborted_by_the_new_leader(cluster: Cluster) -> None:
    leader, info = cluster.wait_leader(WAIT_S)
    make_topic(leader.mount, "t", 1)
    wait_until("every node in t's ISR", lambda: isr_of(leader, "t") == [1, 2, 3], WAIT_S, logs=cluster.logs)
    append_acked(leader.mount, "t", 0, ["before"])
    txn = leader.mount / ".logfs" / "transactions" / "job"
    os.mkdir(txn)
    fd = os.open(txn / "t" / "0" / "append", os.O_WRONLY)
    try:
        os.write(fd, b"open-1\nopen-2\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    append_acked(leader.mount, "t", 0, ["during"])  # acknowledged by every ISR member: so are the batches before it
    st: dict[str, Any] | None = leader.partition_state("t", 0)
    assert st is not None and st["log_end_offset"] == 4 and st["last_stable_offset"] == 1  # pinned by the open one
    assert records(leader, "t", "committed/at") == ["before"]
    # a commit with a label (the Spark sink's exactly-once) acknowledged before the kill: the label is a record of
    # __transaction_state, replicated, so the new leader, whose transaction log never knew it, shows it too
    make_topic(leader.mount, "u", 1)
    labelled = leader.mount / ".logfs" / "transactions" / "lab"
    os.mkdir(labelled)
    for path, line in ((labelled / "u" / "0" / "append", b"labelled\n"), (labelled / "control", b"commit q.7.1\n")):
        fd = os.open(path, os.O_WRONLY)
        try:
            assert os.write(fd, line) == len(line)
        finally:
            os.close(fd)
    assert (leader.mount / ".logfs" / "labels" / "q.7.1").exists()

    killed = time.monotonic()
    leader.kill()
    new, _ = cluster.wait_leader(WAIT_S, min_epoch=info.leader_epoch + 1, exclude=[leader.node_id], settled=False)

    def settled() -> dict[str, Any] | None:
        st = new.partition_state("t", 0)
        if st is None or st["open_transactions"] or st["last_stable_offset"] != st["log_end_offset"]:
            return None
        return st

    st = wait_until("the new leader's LSO back at its LEO", settled, WAIT_S, logs=cluster.logs)
    took = time.monotonic() - killed
    bound = SESSION_MS / 1000 + 1.0 + TXN_TIMEOUT_MS / 1000 + FAILOVER_SLACK_S
    assert took <= bound, f"the open transaction pinned the LSO for {took:.1f} s after the kill (bound {bound} s)"
    assert st["log_end_offset"] == 5  # before, open-1, open-2, during, and the abort marker
    assert records(new, "t") == ["before", "open-1", "open-2", "during"]
    assert records(new, "t", "committed/at") == ["before", "during"]
    assert os.listdir(new.mount / ".logfs" / "transactions") == []
    for node in (n for n in cluster.nodes.values() if n is not leader):  # the follower asks the new leader
        label = node.mount / ".logfs" / "labels" / "q.7.1"
        wait_until(f"label q.7.1 through node {node.node_id}", label.exists, WAIT_S, logs=cluster.logs)
        assert not (node.mount / ".logfs" / "labels" / "q.7.2").exists()
    append_acked(new.mount, "t", 0, ["after"])  # the new leader acknowledges, with the LSO following the HW
    assert records(new, "t", "committed/at") == ["before", "during", "after"]
    # the old leader comes back as a follower and agrees (the marker replicates like any batch)
    cluster.restart(leader.node_id)
    wait_until("the old leader's committed view", lambda: records(leader, "t", "committed/at") ==
               ["before", "during", "after"], WAIT_S, logs=cluster.logs)  # fmt: skip
