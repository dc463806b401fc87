"""The Spark contract (docs/spark.md, "Plain files" and "The `logfs` data source") with a real local Spark session over
a real mount.

One ``local[2]`` session and one mount serve the whole module (each test uses topics of its own). kafka-python is the
oracle: every partition's ``at/earliest.kafka`` parsed by ``kafka.record.MemoryRecords`` is what Spark must return,
and the records the tests wrote must be what kafka-python finds there.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Mount, finish_mount, make_topic, running_mount, start_mount, write_all
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

from logfs.core.format.compression import Compression
from logfs.core.format.partitioner import partition_for_key

pyspark = pytest.importorskip("pyspark")

SEED = 6006
NOW_MS = time.time_ns() // 1_000_000  # recent: the mount's retention.ms (7 days) must not delete the test's records
Row = dict[str, Any]


# --- fixtures -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mount]:
    root = tmp_path_factory.mktemp("spark")
    with running_mount(
        root / "store", root / "mnt", "log.retention.check.interval.ms=100", "file.delete.delay.ms=0"
    ) as m:
        yield m


# --- writing and reading back without Spark --------------------------------------------------------------------------


def kafka_python_batch(records: list[tuple[int, bytes | None, bytes | None, list[Any]]], codec: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=16 * 1024 * 1024,
    )  # fmt: skip
    for i, (ts, key, value, headers) in enumerate(records):
        assert builder.append(i, ts, key, value, headers)
    return bytes(builder.build())


def oracle(mnt: Path, topic: str, partition: int) -> list[Row]:
    """kafka-python's reading of a partition's stored batches, as rows of the source's schema with headers."""
    rows = []
    records = MemoryRecords((mnt / topic / str(partition) / "at" / "earliest.kafka").read_bytes())
    while (batch := records.next_batch()) is not None:
        if batch.is_control_batch:
            continue
        for r in batch:
            rows.append(
                {
                    "key": r.key, "value": r.value, "topic": topic, "partition": partition, "offset": r.offset,
                    "ts": r.timestamp, "timestampType": r.timestamp_type,
                    "headers": [(k, v) for k, v in r.headers] or None,
                }
            )  # fmt: skip
    return rows


def oracle_all(mnt: Path, topics: dict[str, int]) -> list[Row]:
    return sorted((row for t, n in topics.items() for p in range(n) for row in oracle(mnt, t, p)), key=row_key)


def row_key(row: Row) -> tuple[str, int, int]:
    return row["topic"], row["partition"], row["offset"]


def spark_rows(df: Any) -> list[Row]:
    """A DataFrame of the source's schema as sorted rows comparable with :func:`oracle`."""
    cols = df.columns
    rows = []
    for r in df.selectExpr("*", "unix_millis(timestamp) AS ts").drop("timestamp").collect():
        row = r.asDict()
        row["key"] = None if row["key"] is None else bytes(row["key"])
        row["value"] = None if row["value"] is None else bytes(row["value"])
        if "headers" in cols:
            h = row["headers"]
            row["headers"] = (
                None if h is None else [(x["key"], None if x["value"] is None else bytes(x["value"])) for x in h]
            )
        rows.append(row)
    return sorted(rows, key=row_key)


def read(spark: Any, mnt: Path, **options: Any) -> Any:
    reader = spark.read.format("logfs")
    for k, v in options.items():
        reader = reader.option(k, v if isinstance(v, str) else json.dumps(v))
    return reader.load(str(mnt))


def state(mnt: Path, topic: str, partition: int) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((mnt / topic / str(partition) / "state").read_bytes())
    return result


# --- the data most tests read: kafka-python batches of every codec, JSON lines and text -------------------------------


@pytest.fixture(scope="module")
def orders(mount: Mount) -> list[Row]:
    """Topics ``orders`` (3 partitions: kafka-python batches of every codec, keys, headers, nulls; JSON lines
    spread by key) and ``payments`` (1 partition: text lines). Returns kafka-python's reading of both."""
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    mnt = mount.path
    make_topic(mnt, "orders", 3)
    make_topic(mnt, "payments", 1)
    written: dict[int, list[tuple[Any, ...]]] = {0: [], 1: [], 2: []}
    for n, codec in enumerate([*Compression, *Compression]):
        p = n % 3
        records = []
        for i in range(rng.choice([1, 3, 150, 400])):
            key = rng.choice([None, b"", b"customer-%d" % rng.randint(1, 20), rng.randbytes(6)])
            value = rng.choice([None, b"", b'{"order": %d, "total": %d}' % (i, rng.randint(1, 999)), rng.randbytes(40)])
            headers = [("source", b"test"), ("trace", rng.choice([None, rng.randbytes(4)]))] if i % 3 == 0 else []
            records.append((NOW_MS - rng.randint(0, 10_000), key, value, headers))
        write_all(mnt / "orders" / str(p) / "batches", kafka_python_batch(records, int(codec)))
        written[p] += records
    lines = [json.dumps({"key": f"customer-{i % 7}", "value": {"late": i}}) for i in range(40)]
    write_all(mnt / "orders" / "append.jsonl", ("\n".join(lines) + "\n").encode())
    write_all(mnt / "payments" / "0" / "append", b"".join(b"payment %d\n" % i for i in range(25)))
    rows = oracle_all(mnt, {"orders": 3, "payments": 1})
    for p, records in written.items():  # kafka-python finds what was written, in order, then the JSON lines
        found = [
            (r["ts"], r["key"], r["value"], r["headers"] or [])
            for r in rows
            if r["topic"] == "orders" and r["partition"] == p
        ]
        assert found[: len(records)] == [(ts, k, v, [tuple(h) for h in hs]) for ts, k, v, hs in records]
    assert len(rows) == sum(len(r) for r in written.values()) + 40 + 25
    return rows


# --- plain files (docs/spark.md, "Plain files") --------------------------------------------------------------------


def test_spark_read_json_of_hw_files_returns_every_committed_record_once(spark: Any, mount: Mount) -> None:
    """Many small splits over several segments per partition; text, base64 values and headers; no _corrupt_record."""
    from logfs.spark.schema import JSONL_SCHEMA

    mnt = mount.path
    make_topic(mnt, "pages", 3, segment_bytes=8192)
    rng = random.Random(SEED + 1)
    lines = []
    for i in range(3000):
        record: dict[str, Any] = {"key": f"user-{rng.randint(1, 50)}", "value": {"page": f"/p/{i}", "ms": i}}
        if i % 10 == 0:
            record.update(value=base64.b64encode(rng.randbytes(12)).decode(), valueEncoding="base64")
        if i % 7 == 0:
            record["headers"] = [{"key": "h", "value": "é"}]
        lines.append(json.dumps(record))
    for i in range(0, len(lines), 100):  # several write requests: several batches, several segments
        write_all(mnt / "pages" / "append.jsonl", ("\n".join(lines[i : i + 100]) + "\n").encode())
    hw_files = [f for p in range(3) for f in os.listdir(mnt / "pages" / str(p) / "hw")]
    assert len(hw_files) > 9, hw_files
    assert all(re.fullmatch(r"[0-9]{20}\.jsonl", f) for f in hw_files)  # nothing Spark would skip or choke on
    expected = oracle_all(mnt, {"pages": 3})
    assert len(expected) == 3000
    assert not os.path.exists(mnt / "pages" / "0" / "hw" / f".{hw_files[0]}.crc")
    assert not os.path.exists(mnt / "pages" / "0" / "hw" / "_spark_metadata")

    spark.conf.set("spark.sql.files.maxPartitionBytes", "16384")
    spark.conf.set("spark.sql.files.openCostInBytes", "1024")
    try:
        df = spark.read.json(str(mnt / "pages" / "*" / "hw"), schema=JSONL_SCHEMA)
        assert df.rdd.getNumPartitions() > len(hw_files)  # files split
        got = df.collect()
        inferred = spark.read.json(str(mnt / "pages" / "*" / "hw"))
        assert "_corrupt_record" not in inferred.columns and inferred.count() == 3000
        assert spark.read.text(str(mnt / "pages" / "*" / "hw")).count() == 3000
        assert spark.read.text(str(mnt / "pages" / "*" / "committed" / "hw")).count() == 3000
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
        spark.conf.unset("spark.sql.files.openCostInBytes")
    assert len(got) == 3000 and all(r.topic == "pages" for r in got)
    by_offset = {(r.partition, r.offset): r for r in got}
    assert len(by_offset) == 3000
    for e in expected:
        r = by_offset[(e["partition"], e["offset"])]
        value = base64.b64decode(r.value) if r.valueEncoding == "base64" else r.value.encode()
        assert (r.key.encode(), value, r.timestamp, r.timestampType) == (
            e["key"],
            e["value"],
            e["ts"],
            e["timestampType"],
        )
        assert [(h.key, h.value.encode()) for h in r.headers] == (e["headers"] or [])


# --- the data source: batch (docs/spark.md, "The `logfs` data source") ---------------------------------------------


def test_batch_read_returns_every_record_as_written(spark: Any, mount: Mount, orders: list[Row]) -> None:
    from logfs.spark.schema import HEADERS_COLUMN, KAFKA_SCHEMA

    df = read(spark, mount.path, subscribe="orders,payments", includeHeaders="true")
    assert (
        df.schema.simpleString() == spark.createDataFrame([], f"{KAFKA_SCHEMA}, {HEADERS_COLUMN}").schema.simpleString()
    )
    assert df.rdd.getNumPartitions() == 4  # one per topic-partition
    assert spark_rows(df) == orders
    without = read(spark, mount.path, subscribePattern="ord.*")
    assert without.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert spark_rows(without) == [
        {k: v for k, v in r.items() if k != "headers"} for r in orders if r["topic"] == "orders"
    ]


def test_json_offsets_select_exactly_the_range_and_min_partitions_splits_it(
    spark: Any, mount: Mount, orders: list[Row]
) -> None:
    hw = {p: state(mount.path, "orders", p)["high_watermark"] for p in range(3)}
    starting = {"orders": {"0": 3, "1": -2, "2": 10}, "payments": {"0": 1}}
    ending = {"orders": {"0": hw[0] - 2, "1": -1, "2": 11}, "payments": {"0": -1}}
    bounds = {
        ("orders", 0): (3, hw[0] - 2),
        ("orders", 1): (0, hw[1]),
        ("orders", 2): (10, 11),
        ("payments", 0): (1, 25),
    }
    expected = [
        r
        for r in orders
        if bounds[(r["topic"], r["partition"])][0] <= r["offset"] < bounds[(r["topic"], r["partition"])][1]
    ]
    df = read(
        spark,
        mount.path,
        subscribe="orders,payments",
        includeHeaders="true",
        startingOffsets=starting,
        endingOffsets=ending,
    )
    assert spark_rows(df) == expected
    split = read(spark, mount.path, subscribe="orders,payments", includeHeaders="true", startingOffsets=starting,
                 endingOffsets=ending, minPartitions="9")  # fmt: skip
    assert split.rdd.getNumPartitions() >= 8
    assert spark_rows(split) == expected
    capped = read(spark, mount.path, subscribe="orders,payments", includeHeaders="true", startingOffsets=starting,
                  endingOffsets=ending, maxRecordsPerPartition="5")  # fmt: skip
    sizes = capped.rdd.glom().map(len).collect()
    assert max(sizes) <= 5 and len(sizes) >= len(expected) // 5 and sum(sizes) == len(expected)
    assert spark_rows(capped) == expected
    with pytest.raises(Exception, match="must name every subscribed partition"):
        read(spark, mount.path, subscribe="orders", startingOffsets={"orders": {"0": 1}}).collect()


def test_timestamp_offsets_start_and_end_at_the_first_record_at_or_after_them(spark: Any, mount: Mount) -> None:
    """startingTimestamp / startingOffsetsByTimestamp / endingTimestamp (Spark's Kafka source options): each
    partition starts (ends) at its first record whose timestamp is at or after the one given (the mount's time
    index, at/@<ms>). No record that late: a start fails by default, or takes the latest offset with
    startingOffsetsByTimestampStrategy=latest; an end takes the latest offset. A stream starts there too."""
    mnt = mount.path
    make_topic(mnt, "timed", 2)
    base = NOW_MS - 60_000
    for p in range(2):  # partition p: offset i has timestamp base + 1000 * i + p
        lines = [json.dumps({"value": f"t{p}-{i}", "timestamp": base + 1000 * i + p}) for i in range(10)]
        write_all(mnt / "timed" / str(p) / "append.jsonl", "".join(line + "\n" for line in lines).encode())

    def offsets(df: Any) -> list[tuple[int, int]]:
        return sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())

    # every partition from base + 3000: offset 3 in partition 0 (ts base + 3000), 3 in 1 (base + 3001 ≥ base + 3000)
    df = read(spark, mnt, subscribe="timed", startingTimestamp=str(base + 3000), endingTimestamp=str(base + 6000))
    assert offsets(df) == [(p, i) for p in range(2) for i in range(3, 6)]
    # per partition; base + 4001 falls between partition 0's offsets 4 (base + 4000) and 5; precedence over offsets
    by = {"timed": {"0": base + 4001, "1": base + 2000}}
    df = read(spark, mnt, subscribe="timed", startingOffsetsByTimestamp=by, startingOffsets="earliest",
              endingOffsetsByTimestamp={"timed": {"0": base + 99_000, "1": base + 3001}})  # fmt: skip
    assert offsets(df) == [(0, i) for i in range(5, 10)] + [(1, 2)]  # no record at base + 99000: to the end
    late = str(base + 99_000)
    with pytest.raises(Exception, match="no record at or after"):
        read(spark, mnt, subscribe="timed", startingTimestamp=late).collect()
    assert read(spark, mnt, subscribe="timed", startingTimestamp=late,
                startingOffsetsByTimestampStrategy="latest").count() == 0  # fmt: skip
    stream = (
        spark.readStream.format("logfs").option("subscribe", "timed").option("startingTimestamp", str(base + 8000))
        .load(str(mnt)).select("partition", "offset")
    )  # fmt: skip
    query = stream.writeStream.format("memory").queryName("timed_stream").trigger(availableNow=True).start()
    try:
        assert query.awaitTermination(120), "the availableNow query did not finish"
        assert offsets(spark.table("timed_stream")) == [(p, i) for p in range(2) for i in (8, 9)]
    finally:
        query.stop()


def test_read_committed_equals_read_uncommitted_until_transactions_exist(
    spark: Any, mount: Mount, orders: list[Row]
) -> None:
    committed = read(spark, mount.path, subscribe="orders", **{"kafka.isolation.level": "read_committed"})
    uncommitted = read(spark, mount.path, subscribe="orders", **{"isolation.level": "read_uncommitted"})
    assert (
        spark_rows(committed)
        == spark_rows(uncommitted)
        == [{k: v for k, v in r.items() if k != "headers"} for r in orders if r["topic"] == "orders"]
    )
    make_topic(mount.path, "empty", 2)  # nothing to read: Spark still runs one task, which reads nothing
    assert read(spark, mount.path, subscribe="empty", **{"kafka.isolation.level": "read_committed"}).count() == 0


def test_fail_on_data_loss_both_ways_after_retention_removed_the_start(spark: Any, mount: Mount) -> None:
    mnt = mount.path
    make_topic(mnt, "old", 1, segment_bytes=2048)
    for i in range(20):  # one batch per write: segments of a few batches each
        write_all(mnt / "old" / "0" / "append", b"".join(b"old %02d %02d %s\n" % (i, j, b"x" * 40) for j in range(5)))
    (mnt / "old" / "config").write_text("retention.bytes=4096\n")
    deadline = time.monotonic() + 15
    seen = [0]
    while seen[-1] == 0 or seen[-3:] != [seen[-1]] * 3:  # moved, then steady over two retention checks
        assert time.monotonic() < deadline, f"retention did not remove the start of the log: {seen}"
        time.sleep(0.15)
        seen.append(state(mnt, "old", 0)["log_start_offset"])
    log_start = seen[-1]
    hw = state(mnt, "old", 0)["high_watermark"]
    with pytest.raises(Exception, match=rf"old-0: offsets 0\.\.{log_start - 1} are gone .*failOnDataLoss=false"):
        read(spark, mnt, subscribe="old", startingOffsets={"old": {"0": 0}}).collect()
    skipped = read(spark, mnt, subscribe="old", startingOffsets={"old": {"0": 0}}, failOnDataLoss="false")
    assert [r.offset for r in skipped.select("offset").collect()] == list(range(log_start, hw))
    assert read(spark, mnt, subscribe="old").count() == hw - log_start  # earliest is the log start


# --- the sink (docs/spark.md, "The `logfs` sink") -------------------------------------------------------------------


def test_batch_sink_appends_rows_partitioned_like_kafka_read_back_through_at(spark: Any, mount: Mount) -> None:
    mnt = mount.path
    make_topic(mnt, "sunk", 3)
    rng = random.Random(SEED + 2)
    rows = []
    for i in range(300):
        key = rng.choice([None, f"k{rng.randint(1, 30)}".encode(), rng.randbytes(3)])
        headers = [("n", str(i).encode()), ("none", None)] if i % 4 == 0 else None
        partition = 2 if i % 50 == 0 else None
        rows.append((key, b"v%d" % i, headers, partition))
    df = spark.createDataFrame(
        rows, "key BINARY, value BINARY, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, partition INT"
    )
    df.repartition(3).write.format("logfs").option("topic", "sunk").option("kafka.compression.type", "lz4").mode(
        "append"
    ).save(str(mnt))
    found = {r["value"]: r for p in range(3) for r in oracle(mnt, "sunk", p)}
    assert len(found) == 300
    for key, value, headers, partition in rows:
        r = found[value]
        assert (r["key"], r["headers"] or None, r["timestampType"]) == (key, headers, 0)
        if partition is not None:
            assert r["partition"] == partition
        elif key is not None:
            assert r["partition"] == partition_for_key(key, 3)
    assert all(abs(r["ts"] - time.time() * 1000) < 600_000 for r in found.values())
    # strings, a topic column, and a topic the sink creates
    strings = spark.createDataFrame([("a", "x", "made"), (None, "y", "made")], "key STRING, value STRING, topic STRING")
    strings.write.format("logfs").mode("append").save(str(mnt))
    assert sorted((r["value"], r["key"]) for r in oracle(mnt, "made", 0)) == [(b"x", b"a"), (b"y", None)]


def test_the_sink_refuses_what_spark_kafka_refuses(spark: Any, mount: Mount) -> None:
    no_value = spark.createDataFrame([("k",)], "key STRING")
    with pytest.raises(Exception, match="needs a value column"):
        no_value.write.format("logfs").option("topic", "x").mode("append").save(str(mount.path))
    bad_type = spark.createDataFrame([(1,)], "value INT")
    with pytest.raises(Exception, match="binary or string"):
        bad_type.write.format("logfs").option("topic", "x").mode("append").save(str(mount.path))
    with pytest.raises(Exception, match="only appends"):
        spark.createDataFrame([("v",)], "value STRING").write.format("logfs").option("topic", "x").mode(
            "overwrite"
        ).save(str(mount.path))
    assert not (mount.path / "x").exists()


# --- streaming (docs/spark.md, "The `logfs` data source") ----------------------------------------------------------


def test_stream_available_now_then_restart_from_checkpoint_exactly_once(
    spark: Any, mount: Mount, tmp_path: Path
) -> None:
    """A backlog in several micro-batches (maxOffsetsPerTrigger) through the streaming sink, then new records
    after a restart from the checkpoint: the output topic holds every input record exactly once."""
    mnt = mount.path
    make_topic(mnt, "events", 2)
    checkpoint = tmp_path / "checkpoint"

    def produce(start: int, count: int) -> None:
        for p in range(2):
            write_all(
                mnt / "events" / str(p) / "append", b"".join(b"e-%d-%d\n" % (p, i) for i in range(start, start + count))
            )

    def run() -> Any:
        stream = (
            spark.readStream.format("logfs").option("subscribe", "events").option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "150").load(str(mnt))
            .selectExpr("CAST(value AS STRING) AS value", "CAST(partition AS STRING) AS key")
        )  # fmt: skip
        query = (
            stream.writeStream.format("logfs").option("topic", "events-out")
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start(str(mnt))
        )  # fmt: skip
        assert query.awaitTermination(120), "the availableNow query did not finish"
        assert query.exception() is None
        return query

    def output() -> list[bytes]:
        return sorted(r["value"] for r in oracle(mnt, "events-out", 0))

    produce(0, 200)
    first = run()
    assert len([p for p in first.recentProgress if p["numInputRows"]]) >= 3  # 400 records, 150 per trigger
    assert output() == sorted(b"e-%d-%d" % (p, i) for p in range(2) for i in range(200))
    produce(200, 60)
    second = run()
    assert sum(p["numInputRows"] for p in second.recentProgress) == 120
    assert output() == sorted(b"e-%d-%d" % (p, i) for p in range(2) for i in range(260))
    last = max((f for f in (checkpoint / "offsets").iterdir() if f.name.isdigit()), key=lambda f: int(f.name))
    assert json.loads(last.read_text().splitlines()[-1]) == {"events": {"0": 260, "1": 260}}


# --- a follower's mount (docs/spark.md, "The `logfs` data source") --------------------------------------------------


def test_a_follower_mount_reads_the_same_and_a_follower_behind_is_waited_for(spark: Any, tmp_path: Path) -> None:
    """An executor's read pinned on the leader, against a follower started just then, waits and returns every row;
    a range the follower does not reach in time fails the task; Spark on the caught-up follower equals the leader."""
    from follower_procs import following, wait_for

    from logfs.spark.mount import MountBehind
    from logfs.spark.offsets import OffsetRange
    from logfs.spark.options import source_options
    from logfs.spark.schema import kafka_struct
    from logfs.spark.source import LogfsBatchReader, RangePartition

    lead = start_mount(tmp_path / "L", tmp_path / "L.mnt", "node.id=1", "replica.ids=1,2")
    try:
        make_topic(lead.path, "rep", 2)
        for p in range(2):
            records = [(NOW_MS + i, b"k%d" % i, b"rep-%d-%d" % (p, i), [("h", b"v")]) for i in range(500)]
            write_all(lead.path / "rep" / str(p) / "batches", kafka_python_batch(records, int(Compression.GZIP)))
            write_all(lead.path / "rep" / str(p) / "append", b"".join(b"text-%d\n" % i for i in range(50)))
        hw = [state(lead.path, "rep", p)["high_watermark"] for p in range(2)]
        assert hw == [550, 550]
        fmnt = tmp_path / "F.mnt"
        with following(lead.path, tmp_path / "F", 2, mount=fmnt) as follower:

            def reader(timeout_ms: int) -> Any:
                options = {"path": str(fmnt), "subscribe": "rep", "kafkaConsumer.pollTimeoutMs": str(timeout_ms)}
                return LogfsBatchReader(source_options(options, streaming=False), kafka_struct(False))

            patient = reader(30_000)
            got = [b for p in range(2) for b in patient.read(RangePartition(OffsetRange("rep", p, 0, hw[p])))]
            assert sum(b.num_rows for b in got) == 1100
            with pytest.raises(MountBehind, match=r"rep-0: .* pinned \[0, 560\); waited 1 s"):
                list(reader(1000).read(RangePartition(OffsetRange("rep", 0, 0, 560))))
            wait_for("the follower's HW", lambda: all(state(fmnt, "rep", p)["high_watermark"] == 550 for p in range(2)),
                     lead, follower)  # fmt: skip
            on_follower = spark_rows(read(spark, fmnt, subscribe="rep", includeHeaders="true"))
            assert len(on_follower) == 1100
            assert on_follower == spark_rows(read(spark, lead.path, subscribe="rep", includeHeaders="true"))
    finally:
        finish_mount(lead)
