"""The logfs source and consumer groups (issue 19) with a real local Spark session over a real mount:
``commitToGroup`` commits each completed micro-batch's end offsets (the group's lag falls to 0 as the query catches
up), a restarted query that replays its last batch never moves the group backwards (every commit record of the
group in ``__consumer_offsets`` is non-decreasing), and ``startingOffsets=group:<group>`` starts there."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Mount, make_topic, running_mount, write_all

from logfs.core.format.decode import decode_records
from logfs.core.groups.records import OFFSETS_TOPIC, decode_key, decode_value, partition_for_group

pyspark = pytest.importorskip("pyspark")

GROUP = "spark-report"


@pytest.fixture(scope="module")
def mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mount]:
    root = tmp_path_factory.mktemp("spark-groups")
    with running_mount(root / "store", root / "mnt") as m:
        yield m


def produce(mnt: Path, partition: int, start: int, count: int) -> None:
    write_all(
        mnt / "t" / str(partition) / "append",
        b"".join(b"v-%d-%d\n" % (partition, i) for i in range(start, start + count)),
    )


def lag(mnt: Path) -> dict[int, int]:
    """Partition → lag, from the group's lag file."""
    rows = [line.split() for line in (mnt / ".logfs" / "groups" / GROUP / "lag").read_text().splitlines()]
    return {int(r[1]): int(r[5]) for r in rows if r[0] == "t"}


def committed(mnt: Path) -> dict[int, int]:
    rows = [line.split() for line in (mnt / ".logfs" / "groups" / GROUP / "lag").read_text().splitlines()]
    return {int(r[1]): int(r[2]) for r in rows if r[0] == "t"}


def commit_history(mnt: Path) -> dict[int, list[int]]:
    """Every offset ever committed for the group, per partition of t, in log order (the stored records)."""
    raw = (mnt / OFFSETS_TOPIC / str(partition_for_group(GROUP)) / "at" / "earliest.kafka").read_bytes()
    out: dict[int, list[int]] = {}
    position = 0
    while position < len(raw):
        size = int.from_bytes(raw[position + 8 : position + 12], "big") + 12
        for record in decode_records(raw[position : position + size]):
            assert record.key is not None and record.value is not None
            key = decode_key(record.key)
            if key is not None and key.group == GROUP and key.topic == "t":
                out.setdefault(key.partition, []).append(decode_value(record.value).offset)
        position += size
    return out


def stream(spark: Any, mnt: Path, **options: str) -> Any:
    reader = spark.readStream.format("logfs").option("subscribe", "t")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load(str(mnt)).selectExpr("CAST(value AS STRING) AS value")


def test_commit_to_group_lag_falls_to_zero_and_a_restart_never_moves_it_back(
    spark: Any, mount: Mount, tmp_path: Path
) -> None:
    mnt = mount.path
    make_topic(mnt, "t", 2)
    produce(mnt, 0, 0, 30)
    produce(mnt, 1, 0, 10)
    checkpoint = tmp_path / "checkpoint"
    df = stream(spark, mnt, startingOffsets="earliest", commitToGroup=GROUP, maxOffsetsPerTrigger="8")
    query = (
        df.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds").start()
    )  # fmt: skip
    seen: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while True:
            assert time.monotonic() < deadline, f"lag never reached 0: {seen}"
            assert query.exception() is None
            try:
                now = lag(mnt)
            except FileNotFoundError:
                now = {}
            if len(now) == 2:
                seen.append(sum(now.values()))
                if seen[-1] == 0:
                    break
            time.sleep(0.05)
        assert len(set(seen)) >= 2 and seen == sorted(seen, reverse=True), seen  # fell in steps, never rose
        produce(mnt, 0, 30, 4)  # new records: lag rises, then falls to 0 again
        deadline = time.monotonic() + 60
        while committed(mnt) != {0: 34, 1: 10}:
            assert time.monotonic() < deadline, committed(mnt)
            time.sleep(0.05)
        assert lag(mnt) == {0: 0, 1: 0}
    finally:
        query.stop()
    assert sum(p["numInputRows"] for p in query.recentProgress) == 44

    # Spark replays the last batch after a crash between its offset log and its commit log: drop the last commit
    # entry; the restarted query commits that batch's end again (no record written: the group is there already).
    last = max(int(f.name) for f in (checkpoint / "offsets").iterdir() if f.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    produce(mnt, 1, 10, 3)
    df = stream(spark, mnt, startingOffsets="earliest", commitToGroup=GROUP)
    again = (
        df.writeStream.format("noop").option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    try:
        assert again.awaitTermination(120), "the availableNow query did not finish"
        assert again.exception() is None
    finally:
        again.stop()
    assert committed(mnt) == {0: 34, 1: 13}
    for partition, offsets in commit_history(mnt).items():
        assert offsets == sorted(offsets), (partition, offsets)  # never backwards

    # startingOffsets=group:<group>: a new query (its own checkpoint) starts at the group's offsets
    produce(mnt, 0, 34, 2)
    df = stream(spark, mnt, startingOffsets=f"group:{GROUP}")
    fresh = df.writeStream.format("memory").queryName("from_group").option(
        "checkpointLocation", str(tmp_path / "other")).trigger(availableNow=True).start()  # fmt: skip
    try:
        assert fresh.awaitTermination(120)
        assert fresh.exception() is None
    finally:
        fresh.stop()
    rows = sorted(r["value"] for r in spark.sql("SELECT value FROM from_group").collect())
    assert rows == ["v-0-34", "v-0-35"]


def test_patterns_skip_the_internal_topic_and_bad_group_options_are_refused(spark: Any, mount: Mount) -> None:
    mnt = mount.path
    make_topic(mnt, "pat", 1)
    write_all(mnt / "pat" / "0" / "append", b"a\nb\nc\n")
    (mnt / ".logfs" / "groups" / "x" / "pat" / "0" / "offset").write_text("1\n")  # creates __consumer_offsets
    os.mkdir(mnt / ".logfs" / "transactions" / "j")  # a labelled commit creates __transaction_state
    (mnt / ".logfs" / "transactions" / "j" / "control").write_text("commit j.0\n")
    from logfs.spark.mount import list_topics

    assert {OFFSETS_TOPIC, "__transaction_state"} <= {p.name for p in mnt.iterdir()}
    assert "pat" in list_topics(mnt) and not {OFFSETS_TOPIC, "__transaction_state"} & set(list_topics(mnt))
    df = spark.read.format("logfs").option("subscribePattern", "pat|__.*").load(str(mnt))
    assert df.count() == 3  # pat's records only: neither internal topic is read
    grouped = spark.read.format("logfs").option("subscribe", "pat").option("startingOffsets", "group:x").load(str(mnt))
    assert sorted(r["value"] for r in grouped.selectExpr("CAST(value AS STRING) AS value").collect()) == ["b", "c"]
    with pytest.raises(Exception, match="commitToGroup is for streaming queries only"):
        spark.read.format("logfs").option("subscribe", "pat").option("commitToGroup", "g").load(str(mnt)).count()
    with pytest.raises(Exception, match="does not name a consumer group"):
        spark.read.format("logfs").option("subscribe", "pat").option("startingOffsets", "group:").load(str(mnt)).count()
