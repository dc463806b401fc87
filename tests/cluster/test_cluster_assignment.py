"""Replica assignments in a cluster (issue 27, "Assignment"), through three real ``logfs mount`` nodes and a real
ZooKeeper (tests/cluster/zkcluster.py): a topic made on the leader gets Kafka's ``/brokers/topics/<t>`` JSON, its
preferred leaders round robin over the nodes; a partition added later continues the pattern; every node shows each
partition's replicas in assignment order and its leader (``state``, ``<topic>/<p>/leader``); a topic recorded
without an assignment (an earlier logfs) gets one from the next leader, and the others keep theirs across the
failover. The znodes are read with the test's own kazoo client, not through logfs.

Every process is stopped and every mount unmounted when the test ends, failed or not (``Cluster.close``).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import LOGFS
from zkcluster import Cluster, Node, checked_cluster, wait_until
from zkserver import ZooKeeperServer

from logfs.cluster.assignment import leaders_per_node

SESSION_MS = 1500
WAIT_S = 30.0
PARTITIONS = 6


@pytest.fixture
def cluster(tmp_path: Path, zookeeper: ZooKeeperServer) -> Iterator[Cluster]:
    with checked_cluster(tmp_path / "cluster", zookeeper, 3, session_timeout_ms=SESSION_MS) as c:
        yield c


def recorded(cluster: Cluster, topic: str, partitions: int) -> dict[int, list[int]] | None:
    """``/brokers/topics/<topic>``'s partitions once it covers ``partitions`` of them (the JSON checked whole)."""
    doc: Any = cluster.znode_json(f"/brokers/topics/{topic}")
    if doc is None or len(doc.get("partitions", {})) < partitions:
        return None
    assert set(doc) == {"version", "partitions", "adding_replicas", "removing_replicas"}, doc
    assert (doc["version"], doc["adding_replicas"], doc["removing_replicas"]) == (3, {}, {}), doc
    return {int(p): replicas for p, replicas in doc["partitions"].items()}


def shown(node: Node, topic: str, partition: int) -> tuple[list[int], int, dict[str, Any]] | None:
    """What the node's mount shows of a partition: its replicas in ``state``'s order, ``state``'s leader, and its
    ``leader`` file."""
    try:
        state = json.loads((node.mount / topic / str(partition) / "state").read_text())
        leader = json.loads((node.mount / topic / str(partition) / "leader").read_text())
    except (OSError, ValueError):
        return None
    return [int(r) for r in state["replicas"]], int(state["leader"]), leader


def test_assignments_are_kafkas_spread_shown_on_every_node_and_kept_across_a_failover(cluster: Cluster) -> None:
    leader, info = cluster.wait_leader(WAIT_S)
    done = subprocess.run([LOGFS, "create-topic", str(leader.mount), "t", "--partitions", str(PARTITIONS)],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assignment = wait_until("t's assignment in ZooKeeper", lambda: recorded(cluster, "t", PARTITIONS), WAIT_S,
                            logs=cluster.logs)  # fmt: skip
    assert sorted(assignment) == list(range(PARTITIONS))
    for replicas in assignment.values():
        assert sorted(replicas) == [1, 2, 3]  # a copy on every node (default.replication.factor: every node)
    # the preferred leaders go round robin: 6 partitions over 3 nodes, two each; the followers are shifted
    assert leaders_per_node({p: tuple(r) for p, r in assignment.items()}) == {1: 2, 2: 2, 3: 2}
    first = assignment[0][0]
    assert [assignment[p][0] for p in range(PARTITIONS)] == [(first - 1 + p) % 3 + 1 for p in range(PARTITIONS)]

    for node in cluster.nodes.values():
        for p in range(PARTITIONS):
            seen = wait_until(f"node {node.node_id} showing t/{p}'s replicas",
                              lambda n=node, p=p: (s := shown(n, "t", p)) and s[0] == assignment[p] and s, WAIT_S,
                              logs=cluster.logs)  # fmt: skip
            _, state_leader, leader_file = seen
            assert state_leader == info.node_id
            assert (leader_file["node_id"], leader_file["leader_epoch"]) == (info.node_id, info.leader_epoch)
            assert leader_file["mount"] == str(leader.mount)

    # a partition added later continues the round robin where partition 0 started it
    os.mkdir(leader.mount / "t" / str(PARTITIONS))
    grown = wait_until("t/6 in the assignment", lambda: recorded(cluster, "t", PARTITIONS + 1), WAIT_S,
                       logs=cluster.logs)  # fmt: skip
    assert {p: grown[p] for p in range(PARTITIONS)} == assignment  # the others unchanged
    assert grown[PARTITIONS][0] == assignment[0][0] and sorted(grown[PARTITIONS]) == [1, 2, 3]
    for node in cluster.nodes.values():
        wait_until(f"node {node.node_id} showing t/6's replicas",
                   lambda n=node: (s := shown(n, "t", PARTITIONS)) and s[0] == grown[PARTITIONS], WAIT_S,
                   logs=cluster.logs)  # fmt: skip

    # a topic recorded without an assignment (by an earlier logfs) gets one from the next leader; the others keep
    # theirs (one cluster for both parts: CI's minutes)
    for topic in ("old", "kept"):
        os.mkdir(leader.mount / topic)
        os.mkdir(leader.mount / topic / "1")
    kept = wait_until("kept's assignment", lambda: recorded(cluster, "kept", 2), WAIT_S, logs=cluster.logs)
    wait_until("old's assignment", lambda: recorded(cluster, "old", 2), WAIT_S, logs=cluster.logs)
    # what an earlier logfs left: the topic's znode, empty
    cluster.kazoo().set("/brokers/topics/old", b"")
    leader.kill()
    cluster.wait_leader(WAIT_S + cluster.session_timeout_s, min_epoch=info.leader_epoch + 1,
                        exclude=[leader.node_id])  # fmt: skip
    old = wait_until("old's assignment, written by the new leader", lambda: recorded(cluster, "old", 2), WAIT_S,
                     logs=cluster.logs)  # fmt: skip
    assert all(sorted(r) == [1, 2, 3] for r in old.values()) and old[0][0] != old[1][0]
    assert recorded(cluster, "kept", 2) == kept  # an assignment is never made again
    assert recorded(cluster, "t", PARTITIONS + 1) == grown
