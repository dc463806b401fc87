"""Stored batches (``.kafka`` range files) decoded into Arrow batches of Spark's Kafka schema, against kafka-python's
reading of the same bytes: every codec, kafka-python-built batches, nulls, headers, LogAppendTime, control batches,
ranges that cut batches, and batches that cross read blocks. No Spark session: pyarrow only.
"""

from __future__ import annotations

import io
import random
from typing import Any

import pyarrow as pa
import pytest
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatchBuilder

from logfs.core import cext
from logfs.core.format.batch import Header, Record, TimestampType, assign_offset_and_epoch
from logfs.core.format.compression import Compression
from logfs.core.format.control import ControlType
from logfs.core.format.encode import encode_batch, encode_end_txn_marker
from logfs.spark import arrow as arrow_module
from logfs.spark.arrow import decode_block, kafka_arrow_schema, read_range
from logfs.spark.offsets import OffsetRange

NOW_MS = 1_790_000_000_000


def seeded(seed: int) -> random.Random:
    print(f"seed {seed}")
    return random.Random(seed)


def records(rng: random.Random, count: int, base: int = 0) -> list[Record]:
    out = []
    for i in range(count):
        key = rng.choice([None, b"", b"user-%d" % rng.randint(1, 9), rng.randbytes(5)])
        value = rng.choice([None, b"", b'{"n": %d}' % i, rng.randbytes(rng.randint(1, 300))])
        hdrs: tuple[Header, ...] = ()
        if rng.random() < 0.3:
            hdrs = tuple(Header(rng.choice(["h", "trace", "ключ"]), rng.choice([None, b"", b"v"])) for _ in range(2))
        out.append(Record(base + i, NOW_MS + rng.randint(-5000, 5000), key, value, hdrs))
    return out


def kafka_python_batch(recs: list[Record], codec: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=16 * 1024 * 1024,
    )  # fmt: skip
    for r in recs:
        assert builder.append(r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers])
    return bytes(builder.build())


def stored(batches: list[bytes]) -> bytes:
    """Producer batches as a leader stores them: consecutive offsets assigned in place."""
    out = bytearray()
    offset = 0
    for raw in batches:
        b = bytearray(raw)
        count = int.from_bytes(b[57:61], "big")
        assign_offset_and_epoch(b, 0, offset, 0)
        offset += count
        out += b
    return bytes(out)


def oracle(data: bytes, start: int, end: int) -> list[dict[str, Any]]:
    """kafka-python's reading of stored bytes, as rows of Spark's Kafka schema (with headers)."""
    rows = []
    mr = MemoryRecords(data)
    while (batch := mr.next_batch()) is not None:
        if batch.is_control_batch:
            continue
        for rec in batch:
            if start <= rec.offset < end:
                rows.append(
                    {
                        "key": rec.key, "value": rec.value, "topic": "t", "partition": 3, "offset": rec.offset,
                        "timestamp": rec.timestamp, "timestampType": rec.timestamp_type,
                        "headers": [{"key": k, "value": v} for k, v in rec.headers] or None,
                    }
                )  # fmt: skip
    return rows


def as_rows(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    rows = pa.Table.from_batches(batches, schema=kafka_arrow_schema(True)).to_pylist() if batches else []
    for row in rows:
        row["timestamp"] = int(row["timestamp"].timestamp() * 1000)
    return rows


def read_all(data: bytes, rng: OffsetRange, headers: bool = True) -> list[pa.RecordBatch]:
    return list(read_range(io.BytesIO(data), rng, kafka_arrow_schema(headers)))


@pytest.mark.parametrize("codec", list(Compression), ids=[c.name.lower() for c in Compression])
def test_kafka_python_batches_of_every_codec_decode_as_kafka_python_reads_them(codec: Compression) -> None:
    rng = seeded(100 + int(codec))
    batches, base = [], 0
    for size in (1, 7, 300, 2):  # 300 takes the numpy walk, the others the reference one
        recs = records(rng, size, base)
        batches.append(kafka_python_batch([Record(r.offset - base, *vars_of(r)) for r in recs], codec))
        base += size
    data = stored(batches)
    got = read_all(data, OffsetRange("t", 3, 0, base))
    assert all(b.schema == kafka_arrow_schema(True) for b in got)
    expected = oracle(data, 0, base)
    assert len(expected) == base
    assert as_rows(got) == expected


def vars_of(r: Record) -> tuple[int, bytes | None, bytes | None, tuple[Header, ...]]:
    return r.timestamp, r.key, r.value, r.headers


def test_a_range_cutting_batches_gets_exactly_its_records() -> None:
    rng = seeded(7)
    sizes = [5, 200, 1, 50]
    batches = [encode_batch(records(rng, n), compression=Compression.LZ4 if i % 2 else Compression.NONE)
               for i, n in enumerate(sizes)]  # fmt: skip
    data = stored(batches)
    total = sum(sizes)
    for start, end in [(0, total), (3, 4), (3, 205), (5, 205), (204, 206), (100, 101), (206, total), (0, 1)]:
        expected = oracle(data, start, end)
        assert len(expected) == end - start
        assert as_rows(read_all(data, OffsetRange("t", 3, start, end))) == expected, (start, end)


def test_control_batches_are_skipped_and_log_append_time_reads_the_batch_time() -> None:
    rng = seeded(8)
    first = encode_batch(records(rng, 3), timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=NOW_MS + 1)
    marker = encode_end_txn_marker(
        ControlType.COMMIT, producer_id=5, producer_epoch=0, coordinator_epoch=0, timestamp=NOW_MS
    )
    last = encode_batch(records(rng, 2))
    data = stored([first, marker, last])
    got = as_rows(read_all(data, OffsetRange("t", 3, 0, 6)))
    assert [r["offset"] for r in got] == [0, 1, 2, 4, 5]
    assert [r["timestampType"] for r in got] == [1, 1, 1, 0, 0]
    assert {r["timestamp"] for r in got[:3]} == {NOW_MS + 1}
    assert got == oracle(data, 0, 6)


def test_batches_crossing_read_blocks_and_larger_than_a_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("logfs.spark.arrow.READ_BYTES", 1000)
    rng = seeded(9)
    batches = [encode_batch(records(rng, n), compression=Compression.ZSTD if n == 40 else Compression.NONE)
               for n in (3, 40, 1, 25, 2)]  # fmt: skip
    data = stored(batches)
    got = read_all(data, OffsetRange("t", 3, 1, 70))
    assert len(got) > 2  # several blocks
    assert as_rows(got) == oracle(data, 1, 70)


def test_without_include_headers_there_is_no_headers_column_and_empty_blocks_yield_nothing() -> None:
    data = stored([encode_batch([Record(0, NOW_MS, b"k", b"v", (Header("h", b"x"),))])])
    (batch,) = read_all(data, OffsetRange("t", 3, 0, 1), headers=False)
    assert batch.schema == kafka_arrow_schema(False)
    assert batch.to_pylist()[0]["value"] == b"v"
    assert decode_block(data, OffsetRange("t", 3, 5, 9), kafka_arrow_schema(False)) == (None, len(data))


def test_a_file_ending_inside_a_batch_is_an_error() -> None:
    data = stored([encode_batch([Record(0, NOW_MS, None, b"v")])])
    with pytest.raises(Exception, match="ends inside a batch"):
        read_all(data[:-3], OffsetRange("t", 3, 0, 1))


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
def test_headers_built_from_buffers_equal_kafka_python_and_the_lists_built_column(
    compiled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The headers column (from the compiled walker's buffers, else from the reference's lists) equals kafka-python's
    reading and, cell for cell and type for type, the column built from Python lists: records with 0-5 headers (empty
    and non-ASCII keys, null and empty values), every codec in one block (one compiled group, pieces concatenated),
    ranges that cut batches."""
    monkeypatch.setattr(cext, "USE_CEXT", compiled and cext.CEXT is not None)
    rng = seeded(31)
    batches, base = [], 0
    for i, size in enumerate([40, 1, 300, 17, 120]):
        recs = []
        for r in records(rng, size, base):
            hdrs = tuple(
                Header(
                    rng.choice(["", "h", "trace", "ключ", "x" * 40]), rng.choice([None, b"", b"v", rng.randbytes(30)])
                )
                for _ in range(rng.choice([0, 1, 1, 2, 5]))
            )
            recs.append(Record(r.offset - base, r.timestamp, r.key, r.value, hdrs))
        codec = list(Compression)[i % len(Compression)]
        batches.append(kafka_python_batch(recs, codec))
        base += size
    data = stored(batches)
    schema = kafka_arrow_schema(True)
    for start, end in [(0, base), (10, 350), (41, 42), (399, base)]:
        got = read_all(data, OffsetRange("t", 3, start, end))
        assert as_rows(got) == oracle(data, start, end), (start, end)
        monkeypatch.setattr(arrow_module, "_walked_headers", lambda w, htype: None)  # the lists' path
        want = read_all(data, OffsetRange("t", 3, start, end))
        monkeypatch.undo()
        monkeypatch.setattr(cext, "USE_CEXT", compiled and cext.CEXT is not None)
        assert [b.schema for b in got] == [schema] * len(got)
        assert pa.Table.from_batches(got, schema).equals(pa.Table.from_batches(want, schema)), (start, end)


@pytest.mark.skipif(cext.CEXT is None, reason="the compiled walker is not built")
def test_a_header_key_that_is_not_utf8_is_decoded_with_replacement_as_the_reference_does() -> None:
    """Arrow strings must be UTF-8: a block whose header key is not falls back to the lists' path, which decodes it
    with replacement as the reference walker does; the other records of the block keep their headers."""
    recs = [Record(i, NOW_MS, None, b"v", (Header("trace", b"x"),)) for i in range(20)]
    raw = bytearray(encode_batch(recs))
    at = raw.find(b"trace")
    raw[at : at + 2] = b"\xff\xc3"  # (the CRC is not checked when reading)
    data = stored([bytes(raw)])
    (batch,) = read_all(data, OffsetRange("t", 3, 0, 20))
    headers = batch.column("headers").to_pylist()
    assert headers[0] == [{"key": "\ufffd\ufffdace", "value": b"x"}]
    assert headers[1:] == [[{"key": "trace", "value": b"x"}]] * 19
