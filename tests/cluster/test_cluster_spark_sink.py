"""The ``logfs`` sink on a cluster (issue 27, "Spark: the sink writes through any node and survives a change of
leader"), through three real ``logfs mount`` nodes and a real ZooKeeper (tests/cluster/zkcluster.py):

* a real Spark write (``df.write.format("logfs")``) given a follower's mount creates its topic and appends through
  it: every row on every node, once; with ``exactlyOnce``, its transactions go through the follower to the
  coordinator (docs/mount.md, "Transactions through any node"): every row once in every node's committed view;
* the sink's delivery (``logfs/spark/sink.py``): a task that wrote through a follower, unacknowledged, when the
  leader is killed -9 writes what was not acknowledged again through the new leader once its fsync is refused, and
  reports success only once acknowledged: no row lost (at-least-once: a row the old leader passed on before dying
  may be stored twice, never none).

Every process is stopped and every mount unmounted when the test ends, failed or not (``Cluster.close``).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import make_topic
from zkcluster import Cluster, checked_cluster, wait_until
from zkserver import ZooKeeperServer

from logfs.spark.sink import WRITE_BYTES, MountWriter

SESSION_MS = 1500
WAIT_S = 30.0


@pytest.fixture
def cluster(tmp_path: Path, zookeeper: ZooKeeperServer) -> Iterator[Cluster]:
    with checked_cluster(tmp_path / "cluster", zookeeper, 3, session_timeout_ms=SESSION_MS) as c:
        yield c


def values(mount: Path, topic: str, partitions: int, view: str = "at") -> list[str]:
    return [v for p in range(partitions) for v in (mount / topic / str(p) / view / "earliest").read_text().split()]


def test_a_spark_write_through_a_follower_and_a_task_that_outlives_its_leader(cluster: Cluster, spark: Any) -> None:
    leader, _ = cluster.wait_leader(WAIT_S)
    follower = next(n for n in cluster.nodes.values() if n is not leader)

    # Spark, given a follower's mount: the topic is made through it (forwarded mkdir), the rows appended through it
    rows = [f"row-{i:05d}" for i in range(3000)]
    df = spark.createDataFrame([(r,) for r in rows], "value string").repartition(4)
    df.write.format("logfs").option("topic", "made-by-spark").mode("append").save(str(follower.mount))
    count = len(list((leader.mount / "made-by-spark").glob("[0-9]*")))
    for node in cluster.reachable():  # acknowledged (each task fsyncs): on every node, each row once
        wait_until(f"node {node.node_id} holding every row", lambda n=node: sorted(values(n.mount, "made-by-spark",
                   count)) == rows, WAIT_S, logs=cluster.logs)  # fmt: skip

    # exactlyOnce through a follower: each task's transaction begun, written and committed on the coordinator (the
    # leader) through the follower's mount: every row once in every node's committed view, no transaction left open
    df.write.format("logfs").option("topic", "once").option("exactlyOnce", "true") \
        .option("transactional.id", "cluster-once").mode("append").save(str(follower.mount))  # fmt: skip
    count = len(list((leader.mount / "once").glob("[0-9]*")))
    for node in cluster.reachable():
        wait_until(f"node {node.node_id} holding every row committed", lambda n=node: sorted(values(n.mount, "once",
                   count, "committed/at")) == rows, WAIT_S, logs=cluster.logs)  # fmt: skip
    assert os.listdir(follower.mount / ".logfs/transactions") == os.listdir(leader.mount / ".logfs/transactions") == []

    # A task's writes through a follower, unacknowledged when the leader dies: delivered again, none lost
    make_topic(leader.mount, "r")
    wait_until("the follower showing r", lambda: (follower.mount / "r/0/append").exists(), WAIT_S)
    pad = "x" * 400
    first = [f"a{i:05d}-{pad}" for i in range(3 * WRITE_BYTES // 400)]  # three writes' worth: written, not acked
    second = [f"b{i:05d}-{pad}" for i in range(100)]
    writer = MountWriter(follower.mount, topic="r")
    try:
        writer.write(pa.record_batch({"value": first}))
        leader.kill()
        writer.write(pa.record_batch({"value": second}))
        appended = writer.close()  # the fsync the dead leader cannot answer, then the delivery through the new one
    finally:
        writer.abort()
    assert sum(a.records for a in appended) >= len(first) + len(second)
    wanted = set(first + second)
    for node in cluster.reachable():
        wait_until(f"node {node.node_id} holding every row of the task", lambda n=node: wanted <= set(values(n.mount,
                   "r", 1)), WAIT_S, logs=cluster.logs)  # fmt: skip
    stored = Counter(values(cluster.reachable()[0].mount, "r", 1))
    assert set(stored) == wanted  # nothing else; a row may be there twice (at-least-once), never not at all
