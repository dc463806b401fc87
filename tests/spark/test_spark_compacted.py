"""The Spark data source over a compacted topic with gaps (issue 18; docs/spark.md, "Compacted topics": Spark users meet
these with Kafka): batch and streaming reads return every record that exists, with its offset, and nothing for the
offsets the cleaner removed — no error, no missing row; ``failOnDataLoss`` is about the log start offset only, which
compaction never moves. A range pinned across a gap (what a retried task reads after a clean) gets exactly the records
in it.

The store is written with the core before it is mounted (tests/helpers/compacted_store.py): a cleaned first segment with
gaps, then an active segment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from compacted_store import END, KEPT, TOPIC, build_store, value
from conftest import Mount, finish_mount, start_mount

pyspark = pytest.importorskip("pyspark")


@pytest.fixture(scope="module")
def mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mount]:
    root = tmp_path_factory.mktemp("spark-compacted")
    build_store(root / "store")
    m = start_mount(root / "store", root / "mnt")
    try:
        yield m
    finally:
        finish_mount(m)


def rows(df: Any) -> list[tuple[int, bytes]]:
    return sorted((r["offset"], bytes(r["value"])) for r in df.select("offset", "value").collect())


def test_batch_reads_over_gaps_return_exactly_the_records_that_exist(spark: Any, mount: Mount) -> None:
    mnt = str(mount.path)
    read = spark.read.format("logfs").option("subscribe", TOPIC)
    assert rows(read.load(mnt)) == [(o, value(o)) for o in KEPT]
    # ranges that start, end and are split (minPartitions) inside gaps; failOnDataLoss stays true
    for start, end in [(3, 16), (0, 2), (6, 10), (16, END)]:
        bounds = {"startingOffsets": f'{{"{TOPIC}":{{"0":{start}}}}}', "endingOffsets": f'{{"{TOPIC}":{{"0":{end}}}}}'}
        df = read.options(**bounds, minPartitions="4", failOnDataLoss="true").load(mnt)
        assert rows(df) == [(o, value(o)) for o in KEPT if start <= o < end], (start, end)


def test_a_stream_over_gaps_reads_every_record_once(spark: Any, mount: Mount, tmp_path: Path) -> None:
    stream = (
        spark.readStream.format("logfs").option("subscribe", TOPIC).option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "4").load(str(mount.path)).select("offset", "value")
    )  # fmt: skip
    query = (
        stream.writeStream.format("memory").queryName("compacted_stream")
        .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start()
    )  # fmt: skip
    try:
        assert query.awaitTermination(120), "the availableNow query did not finish"
        got = rows(spark.table("compacted_stream"))
        assert got == [(o, value(o)) for o in KEPT]
        assert len(query.recentProgress) >= 3  # several micro-batches, some of them over gaps only
    finally:
        query.stop()
