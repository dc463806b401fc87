"""Planning through ``.logfs/partitions`` (issue 24): the Spark source learns every partition's offsets from one
file instead of one ``state`` file per partition (logfs/spark/mount.py). Both ways give the same catalog on a real
mount; a real Spark session plans a ``subscribePattern`` batch and stream over 300 partitions without the mount
opening a single ``state`` file (``logfs_read_opens_total``, counted by the mount)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Mount, running_mount, write_all

from logfs.spark.mount import load_catalog

TOPICS = 60  # × 5 partitions (num.partitions=5): 300 partitions
WRITTEN = {("scale-007", 0): 3, ("scale-007", 4): 1, ("scale-031", 2): 5, ("scale-059", 1): 2}


@pytest.fixture(scope="module")
def mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mount]:
    root = tmp_path_factory.mktemp("spark-planning")
    with running_mount(root / "store", root / "mnt", "num.partitions=5") as m:
        mnt = m.path
        for i in range(TOPICS):
            os.mkdir(mnt / f"scale-{i:03d}")
        os.mkdir(mnt / "other")  # matches no pattern below
        for (topic, partition), count in WRITTEN.items():
            write_all(mnt / topic / str(partition) / "append", b"".join(b"%s-%d-%d\n" % (topic.encode(), partition, i)
                                                                         for i in range(count)))  # fmt: skip
        write_all(mnt / "other" / "1" / "append", b"not matched\n")
        yield m


def read_opens(mnt: Path, kind: str) -> int:
    found = re.search(rf'^logfs_read_opens_total\{{file="{kind}"\}} (\d+)$', (mnt / ".logfs/metrics").read_text(), re.M)
    return int(found.group(1)) if found else 0


def test_the_listing_and_the_state_files_give_the_same_catalog(mount: Mount) -> None:
    mnt = mount.path
    write_all(mnt / "other" / "0" / "append", b"a\nb\n")
    (mnt / ".logfs" / "delete-records").write_text("other 0 1\n")
    states, listings = read_opens(mnt, "state"), read_opens(mnt, "partitions")
    fast = load_catalog(mnt)
    assert fast.listing is not None
    topics = fast.topics()
    assert topics == sorted([f"scale-{i:03d}" for i in range(TOPICS)] + ["other"])
    fast_states = fast.states(fast.partitions_of(topics))
    assert (read_opens(mnt, "state"), read_opens(mnt, "partitions")) == (states, listings + 1)
    slow = load_catalog(mnt, use_listing=False)
    assert slow.listing is None
    assert slow.topics() == topics and slow.partitions_of(topics) == fast.partitions_of(topics)
    assert slow.states(slow.partitions_of(topics)) == fast_states
    assert read_opens(mnt, "state") - states == len(fast_states) == (TOPICS + 1) * 5
    s = fast_states[("other", 0)]
    assert (s.log_start_offset, s.high_watermark, s.last_stable_offset) == (1, 2, 2)
    assert fast.has_topic("other") and not fast.has_topic("nope") and not slow.has_topic("nope")
    assert fast.states([("other", 1), ("other", 7)]) == slow.states([("other", 1), ("other", 7)])


def test_subscribe_pattern_over_300_partitions_plans_without_a_state_file(
    spark: Any, mount: Mount, tmp_path: Path
) -> None:
    mnt = mount.path
    states = read_opens(mnt, "state")
    listings = read_opens(mnt, "partitions")
    rows = (
        spark.read.format("logfs").option("subscribePattern", "scale-.*")
        .option("startingOffsets", "earliest").load(str(mnt))
        .selectExpr("topic", "partition", "CAST(value AS STRING) AS value").collect()
    )  # fmt: skip
    expected = {f"{t}-{p}-{i}" for (t, p), n in WRITTEN.items() for i in range(n)}
    assert {r.value for r in rows} == expected and len(rows) == len(expected)
    assert all(r.value.startswith(f"{r.topic}-{r.partition}-") for r in rows)
    planned = read_opens(mnt, "partitions") - listings
    assert 1 <= planned <= 4  # Spark may ask for the partitions more than once, never once per partition
    # A stream over the same pattern: every trigger plans from the file too.
    query = (
        spark.readStream.format("logfs").option("subscribePattern", "scale-.*").option("startingOffsets", "earliest")
        .load(str(mnt)).selectExpr("CAST(value AS STRING) AS value")
        .writeStream.format("memory").queryName("planning").trigger(availableNow=True)
        .option("checkpointLocation", str(tmp_path / "checkpoint")).start()
    )  # fmt: skip
    try:
        assert query.awaitTermination(120)
    finally:
        query.stop()
    streamed = [r.value for r in spark.sql("SELECT value FROM planning").collect()]
    assert sorted(streamed) == sorted(expected)
    assert read_opens(mnt, "state") == states
    assert read_opens(mnt, "partitions") - listings - planned <= 10
