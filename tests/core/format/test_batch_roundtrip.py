"""Property tests of the RecordBatch v2 codec: round trips, the two walkers, and the two renderings.

* ``decode_records(encode_batch(x)) == x`` over keys, values, headers, timestamps, codecs, producer fields and
  batch sizes, and ``validate_batch`` accepts what ``encode_batch`` writes.
* ``encode_values`` is byte-identical to ``encode_batch`` of the same null-key, header-less records.
* ``walk_numpy`` and ``walk_runs`` agree with ``walk_python`` on valid and on damaged records sections: same result
  when they answer, and None whenever the reference raises.
* ``render_plain`` and ``render_jsonl`` match renderings built independently from the decoded records.

Hypothesis runs derandomized (a fixed seed derived from each test), so every run explores the same examples and a
failure replays; the seed of each hand-rolled random test is printed (``pytest -s`` shows it).
"""

from __future__ import annotations

import base64
import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from logfs.core.errors import InvalidRecord
from logfs.core.format.batch import Header, Record, TimestampType, read_header
from logfs.core.format.compression import Compression
from logfs.core.format.control import ControlType as CT
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_batch, encode_end_txn_marker, encode_values
from logfs.core.format.numpywalk import walk_numpy
from logfs.core.format.recordruns import record_runs
from logfs.core.format.records import NUMPY_WALK_MIN_RECORDS, walk_python, walk_runs
from logfs.core.format.render import render_jsonl, render_plain
from logfs.core.format.validate import validate_batch
from logfs.core.format.varint import INT64_MAX, INT64_MIN, decode_varint, encode_varint, size_of_varint

SETTINGS = {
    "derandomize": True,
    "database": None,
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
}

CODECS = list(Compression)

# --- strategies -------------------------------------------------------------------------------------------------------


def seeded_bytes(min_size: int, max_size: int) -> st.SearchStrategy[bytes]:
    """Large byte strings from a drawn seed: hypothesis would otherwise spend its whole budget generating them."""
    return st.builds(
        lambda size, seed: random.Random(seed).randbytes(size), st.integers(min_size, max_size), st.integers(0, 2**32)
    )


small_bytes = st.one_of(st.just(b""), st.binary(min_size=1, max_size=40), st.binary(min_size=60, max_size=300))
nullable_bytes = st.one_of(st.none(), small_bytes)
# Values long enough for 3-byte length varints (>= 8192 bytes) and records past the 2-byte record-length limit.
large_bytes = seeded_bytes(8192, 20_000)
headers_strategy = st.lists(
    st.builds(Header, st.text(max_size=12), st.one_of(st.none(), st.binary(max_size=24))), max_size=3
).map(tuple)


HEADER_KEYS = ["", "k", "trace-id", "ключ", "鍵", "🔑", "a\x00b", "é" * 40]


def timestamp_bounds(base: int) -> tuple[int, int]:
    """The timestamps whose delta from ``base`` fits an int64 (and that are int64 themselves)."""
    return max(INT64_MIN, base + INT64_MIN), min(INT64_MAX, base + INT64_MAX)


def random_timestamp(rng: random.Random, base: int) -> int:
    low, high = timestamp_bounds(base)
    roll = rng.random()
    if roll < 0.75:  # near the first record, before or after it
        return rng.randint(max(low, base - 10**6), min(high, base + 10**6))
    if roll < 0.9:
        return rng.randint(low, high)
    return rng.choice([low, high])


def random_bytes(rng: random.Random) -> bytes | None:
    roll = rng.random()
    if roll < 0.15:
        return None
    if roll < 0.25:
        return b""
    if roll < 0.85:
        return rng.randbytes(rng.randint(1, 40))
    return rng.randbytes(rng.randint(60, 300))


def random_headers(rng: random.Random) -> tuple[Header, ...]:
    if rng.random() < 0.7:
        return ()
    return tuple(
        Header(rng.choice(HEADER_KEYS), None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 24)))
        for _ in range(rng.randint(1, 3))
    )


@st.composite
def record_lists(draw: st.DrawFn, min_size: int = 1, max_size: int = 300) -> list[Record]:
    """Records whose first few are chosen by hypothesis (so it can aim at edge cases and shrink them) and whose
    bulk comes from a drawn seed (drawing hundreds of records one by one would take the whole time budget)."""
    count = draw(st.integers(min_size, max_size))
    base = draw(
        st.one_of(
            st.sampled_from([INT64_MIN, INT64_MAX, -1, 0]), st.integers(INT64_MIN, INT64_MAX), st.integers(0, 2**42)
        )
    )
    low, high = timestamp_bounds(base)
    chosen = draw(
        st.lists(
            st.tuples(
                nullable_bytes,
                nullable_bytes,
                headers_strategy,
                st.one_of(st.integers(max(low, base - 1000), min(high, base + 1000)), st.sampled_from([low, high])),
            ),
            max_size=min(count - 1, 4),
        )
    )
    seed = draw(st.integers(0, 2**32 - 1))
    rng = random.Random(seed)
    records = [Record(0, base, random_bytes(rng), random_bytes(rng), random_headers(rng))]
    records += [Record(1 + i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(chosen)]
    while len(records) < count:
        records.append(
            Record(len(records), random_timestamp(rng, base), random_bytes(rng), random_bytes(rng), random_headers(rng))
        )
    # A few large keys or values: enough for 3-byte varints without megabytes per example.
    for _ in range(draw(st.integers(0, 2))):
        big = draw(large_bytes)
        i = draw(st.integers(0, count - 1))
        r = records[i]
        if draw(st.booleans()):
            records[i] = Record(r.offset, r.timestamp, r.key, big, r.headers)
        else:
            records[i] = Record(r.offset, r.timestamp, big, r.value, r.headers)
    return records


@st.composite
def producer_fields(draw: st.DrawFn) -> dict[str, Any]:
    """Producer id, epoch, base sequence and transactional flag that a client may send (docs/records.md,
    "Validation")."""
    if draw(st.booleans()):
        return {"producer_id": -1, "producer_epoch": -1, "base_sequence": -1, "is_transactional": False}
    return {
        "producer_id": draw(st.one_of(st.integers(0, 2**63 - 1), st.sampled_from([0, 2**63 - 1]))),
        "producer_epoch": draw(st.integers(0, 2**15 - 1)),
        "base_sequence": draw(st.integers(0, 2**31 - 1)),
        "is_transactional": draw(st.booleans()),
    }


# --- round trips ------------------------------------------------------------------------------------------------------


def with_offsets(records: list[Record], base_offset: int) -> list[Record]:
    return [Record(base_offset + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(records)]


@settings(max_examples=250, **SETTINGS)
@given(
    records=record_lists(),
    codec=st.sampled_from(CODECS),
    base_offset=st.one_of(st.just(0), st.integers(0, 2**62)),
    leader_epoch=st.integers(-1, 2**31 - 1),
    producer=producer_fields(),
)
def test_decode_of_encode_is_identity_and_validates(
    records: list[Record], codec: int, base_offset: int, leader_epoch: int, producer: dict[str, Any]
) -> None:
    records = with_offsets(records, base_offset)
    buf = encode_batch(
        records, base_offset=base_offset, compression=codec, partition_leader_epoch=leader_epoch, **producer
    )
    assert decode_records(buf) == records
    header = read_header(buf)
    assert header.size == len(buf)
    assert (header.base_offset, header.partition_leader_epoch, header.compression) == (base_offset, leader_epoch, codec)
    assert (header.records_count, header.last_offset_delta) == (len(records), len(records) - 1)
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert header.producer_id == producer["producer_id"] and header.producer_epoch == producer["producer_epoch"]
    assert header.base_sequence == producer["base_sequence"]
    assert header.is_transactional == producer["is_transactional"] and not header.is_control
    assert header.timestamp_type is TimestampType.CREATE_TIME
    # a producer's batch (client=True) must carry baseOffset 0; a stored one may have any base
    for client in (True, False) if base_offset == 0 else (False,):
        valid = validate_batch(buf, client=client)
        assert valid.max_timestamp == max(r.timestamp for r in records) and valid.size == len(buf)
    if base_offset != 0:
        with pytest.raises(InvalidRecord, match="baseOffset 0"):
            validate_batch(buf, client=True)


@settings(max_examples=60, **SETTINGS)
@given(
    records=record_lists(max_size=60),
    codec=st.sampled_from(CODECS),
    append_time=st.integers(INT64_MIN, INT64_MAX),
)
def test_log_append_time_batch_reads_every_timestamp_as_max_timestamp(
    records: list[Record], codec: int, append_time: int
) -> None:
    buf = encode_batch(
        records, compression=codec, timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=append_time
    )
    decoded = decode_records(buf)
    assert [r.timestamp for r in decoded] == [append_time] * len(records)
    assert [(r.offset, r.key, r.value, r.headers) for r in decoded] == [
        (r.offset, r.key, r.value, r.headers) for r in records
    ]
    header = read_header(buf)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME and header.max_timestamp == append_time
    assert validate_batch(buf).max_timestamp == append_time


@settings(max_examples=60, **SETTINGS)
@given(
    records=record_lists(min_size=2, max_size=80),
    data=st.data(),
)
def test_compacted_batch_with_offset_gaps_round_trips(records: list[Record], data: st.DataObject) -> None:
    gaps = data.draw(st.lists(st.integers(1, 1000), min_size=len(records), max_size=len(records)))
    offsets = [sum(gaps[: i + 1]) - gaps[0] for i in range(len(records))]
    records = [Record(o, r.timestamp, r.key, r.value, r.headers) for o, r in zip(offsets, records, strict=True)]
    buf = encode_batch(records)
    assert decode_records(buf) == records
    validate_batch(buf, client=False)
    if offsets[-1] != len(records) - 1:
        with pytest.raises(InvalidRecord, match=r"does not match lastOffsetDelta|offsetDelta"):
            validate_batch(buf, client=True)


@settings(max_examples=100, **SETTINGS)
@given(
    values=st.lists(st.one_of(small_bytes, st.binary(min_size=100, max_size=9000)), min_size=1, max_size=300),
    timestamp=st.integers(INT64_MIN, INT64_MAX),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 2**62),
    leader_epoch=st.integers(-1, 2**31 - 1),
    timestamp_type=st.sampled_from(TimestampType),
)
def test_encode_values_is_byte_identical_to_encode_batch(
    values: list[bytes], timestamp: int, codec: int, base_offset: int, leader_epoch: int, timestamp_type: TimestampType
) -> None:
    records = [Record(base_offset + i, timestamp, None, v) for i, v in enumerate(values)]
    expected = encode_batch(
        records,
        base_offset=base_offset,
        compression=codec,
        timestamp_type=timestamp_type,
        partition_leader_epoch=leader_epoch,
    )
    got = encode_values(
        values,
        timestamp,
        base_offset=base_offset,
        compression=codec,
        timestamp_type=timestamp_type,
        partition_leader_epoch=leader_epoch,
    )
    assert got == expected


def test_encode_values_slow_path_is_byte_identical_to_encode_batch() -> None:
    """Past the varint table (65,536 records, or a value of 65,520 bytes) encode_values takes its general loop."""
    for values in ([b"x"] * 65_537, [b"a", b"v" * 65_520, b""]):
        records = [Record(i, 7, None, v) for i, v in enumerate(values)]
        assert encode_values(values, 7) == encode_batch(records)
        assert decode_records(encode_values(values, 7)) == records


def test_encode_batch_refuses_an_empty_batch() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        encode_batch([])
    with pytest.raises(ValueError, match="at least one record"):
        encode_values([], 0)


# --- the two walkers --------------------------------------------------------------------------------------------------


def record_starts(section: bytes) -> list[int]:
    """Start of every record in a valid records section, read with the reference varint decoder."""
    starts, pos = [], 0
    while pos < len(section):
        starts.append(pos)
        length, pos = decode_varint(section, pos, 5)
        pos += length
    return starts


RECORD_FIELDS = ("timestampDelta", "offsetDelta", "keyLength", "valueLength", "headersCount")


def set_record_field(section: bytes, start: int, name: str, new: int, *, keep_length: bool = False) -> bytes:
    """Set one varint field of the record at ``start`` to ``new``, re-encoding the record's length to match (or
    keeping the old length). Key, value and header bytes stay as they were."""
    length, body = decode_varint(section, start, 5)
    end = body + length
    values = {}
    pos = body + 1  # attributes
    for field in RECORD_FIELDS[:3]:
        values[field], pos = decode_varint(section, pos)
    key = section[pos : pos + max(values["keyLength"], 0)]
    pos += len(key)
    values["valueLength"], pos = decode_varint(section, pos)
    value = section[pos : pos + max(values["valueLength"], 0)]
    pos += len(value)
    values["headersCount"], pos = decode_varint(section, pos)
    rest = section[pos:end]
    values[name] = new
    new_body = b"".join(
        [
            section[body : body + 1],
            *(encode_varint(values[f]) for f in RECORD_FIELDS[:3]),
            key,
            encode_varint(values["valueLength"]),
            value,
            encode_varint(values["headersCount"]),
            rest,
        ]
    )
    record = encode_varint(length if keep_length else len(new_body)) + new_body
    return section[:start] + record + section[end:]


def rewrite_record_field(rng: random.Random, section: bytes, start: int, index: int) -> tuple[bytes, str]:
    """A random field of record ``index`` set to a value a walker must judge."""
    name = rng.choice(RECORD_FIELDS)
    new = rng.choice(
        [-2, -2, -2, -1, 0, 1, index - 1, index + 1, 63, 64, 8191, 8192, 2**31 - 1, -(2**31), 2**35, 2**62, -(2**63)]
    )
    keep = rng.random() < 0.2
    return set_record_field(section, start, name, new, keep_length=keep), f"record {index} {name} = {new} ({keep=})"


def mutate(rng: random.Random, section: bytes, starts: list[int]) -> tuple[bytes, str]:
    """One random damage to a records section, and a description for the failure message.

    ``starts`` are record starts of the undamaged section; after an earlier damage they may no longer be record
    starts, which only makes the damage less regular.
    """
    buf = bytearray(section)
    kinds = ["flip", "set", "truncate", "insert", "delete", "length", "length_varint", "length_sign", "field"]
    kind = rng.choice([*kinds, "record_field", "record_field", "record_field"])
    if kind == "record_field":  # only on an undamaged section: it parses the record
        index = rng.choice([0, 0, len(starts) - 1, rng.randrange(len(starts))])
        try:
            return rewrite_record_field(rng, section, starts[index], index)
        except (ValueError, IndexError):
            kind = "flip"
    starts = [s for s in starts if s < len(buf)]
    if kind == "length_sign" and starts:  # zigzag bit 0: the same magnitude, now negative
        start = rng.choice(starts)
        buf[start] ^= 0x01
        return bytes(buf), f"length sign flipped at {start}"
    if kind in ("length", "length_varint", "field") and starts:
        start = rng.choice(starts)
        try:
            length, body = decode_varint(section, start, 5)
        except ValueError:
            kind = "flip"
        else:
            if kind == "length":  # change one record's declared length
                encoded = encode_varint(max(0, length + rng.choice([-2, -1, 1, 2])))
                return bytes(buf[:start] + encoded + buf[body:]), f"length {length} changed at {start}"
            if kind == "length_varint":  # the same length in a longer (non-canonical) varint
                encoded = bytearray(section[start:body])
                encoded[-1] |= 0x80
                encoded.append(0)
                return bytes(buf[:start] + encoded + buf[body:]), f"length {length} padded at {start}"
            # field: overwrite one byte of a record's body with a varint-significant value
            body_end = min(body + length, len(buf))
            pos = rng.randrange(body, body_end) if body < body_end else start
            buf[pos] = rng.choice([0x01, 0x03, 0x80, 0x81, 0xFE, 0xFF])
            return bytes(buf), f"field byte {pos} of record at {start} set to {buf[pos]:#x}"
    if kind == "truncate":
        pos = rng.randrange(len(buf))
        return bytes(buf[:pos]), f"truncate at {pos}"
    if kind == "insert":
        pos = rng.randrange(len(buf) + 1)
        extra = rng.randbytes(rng.randint(1, 4))
        return bytes(buf[:pos] + extra + buf[pos:]), f"insert {extra.hex()} at {pos}"
    if kind == "delete":
        pos = rng.randrange(len(buf))
        n = rng.randint(1, 4)
        return bytes(buf[:pos] + buf[pos + n :]), f"delete {n} at {pos}"
    if kind == "set":
        pos = rng.randrange(len(buf))
        buf[pos] = rng.choice([0x00, 0x01, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        return bytes(buf), f"set byte {pos} to {buf[pos]:#x}"
    pos = rng.randrange(len(buf))
    buf[pos] ^= rng.randrange(1, 256)
    return bytes(buf), f"flip byte {pos}"


def assert_walkers_agree(
    data: bytes, start: int, end: int, count: int, last_offset_delta: int, client: bool, columns: bool, context: str
) -> tuple[Any, Any]:
    try:
        expected = walk_python(data, start, end, count, last_offset_delta, client=client, columns=columns)
    except InvalidRecord:
        expected = None
    got = walk_numpy(data, start, end, count, last_offset_delta, client=client, columns=columns)
    if client and count > 0:  # the run walker: producer batches, no columns
        by_runs = walk_runs(data, start, end, count)
        if expected is None:
            assert by_runs is None, f"walk_python raised but walk_runs answered ({context})"
        elif by_runs is not None:
            assert by_runs == expected[0], context
    if currently_in_test_context():  # hypothesis --hypothesis-show-statistics: how often each path is taken
        reference = "raised" if expected is None else "answered"
        event(f"reference {reference}, numpy {'declined' if got is None else 'answered'}")
    if expected is None:
        assert got is None, f"walk_python raised but walk_numpy answered ({context})"
    elif got is not None:
        assert got[0] == expected[0], context
        if columns:
            assert got[1].lists() == expected[1], context
        else:
            assert got[1] is None and expected[1] is None, context
    return expected, got


@st.composite
def walker_batches(draw: st.DrawFn) -> list[Record]:
    """48-140 records (the fast walker's range) from a drawn seed; now and then a header or a record past 8 KiB,
    which walk_numpy leaves to the reference."""
    count = draw(st.integers(NUMPY_WALK_MIN_RECORDS, 140))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    base_ts = draw(st.integers(-(2**40), 2**40))
    wide_deltas = draw(st.booleans())
    # Records of one size, as fixed-schema producers write them, now and then broken by a different one: the
    # runs the fast walker's chain takes in one step.
    uniform = draw(st.booleans())
    value_size = rng.choice([rng.randint(0, 12), rng.randint(60, 200)])
    key_size = rng.choice([None, rng.randint(0, 8)])
    records = []
    for i in range(count):
        if uniform and rng.random() > 0.02:
            value: bytes | None = rng.randbytes(value_size)
            key = None if key_size is None else rng.randbytes(key_size)
            records.append(Record(i, base_ts + rng.randint(-60, 60), key, value))
            continue
        delta = rng.randint(-(2**40), 2**40) if wide_deltas and rng.random() < 0.3 else rng.randint(-100, 100)
        value = None if rng.random() < 0.2 else rng.randbytes(rng.choice([rng.randint(0, 12), rng.randint(60, 200)]))
        key = None if rng.random() < 0.5 else rng.randbytes(rng.randint(0, 8))
        records.append(Record(i, base_ts + delta, key, value))
    if rng.random() < 0.1:
        i = rng.randrange(count)
        records[i] = Record(i, records[i].timestamp, records[i].key, records[i].value, (Header("h", b"v"),))
    if rng.random() < 0.1:
        i = rng.randrange(count)
        records[i] = Record(i, records[i].timestamp, records[i].key, b"L" * rng.randint(8192, 9000))
    return records


@settings(max_examples=200, **SETTINGS)
@given(records=walker_batches(), client=st.booleans(), columns=st.booleans(), framing=st.integers(0, 3))
def test_walk_numpy_equals_walk_python_on_valid_records(
    records: list[Record], client: bool, columns: bool, framing: int
) -> None:
    buf = encode_batch(records)
    header = read_header(buf)
    section = buf[61:]
    # The section where it lies in a bigger buffer (framing 1-3: bytes before and after it, as in a segment).
    prefix, suffix = b"\x80" * framing, b"\x80\x81" * framing
    data = prefix + section + suffix
    expected, got = assert_walkers_agree(
        data,
        len(prefix),
        len(prefix) + len(section),
        header.records_count,
        header.last_offset_delta,
        client,
        columns,
        "valid batch",
    )
    assert expected is not None
    # walk_numpy must take the batches it was written for: no headers, every record and field under its width.
    lengths_fit = all(section[s] < 0x80 or section[s + 1] < 0x80 for s in record_starts(section))
    deltas_fit = all(size_of_varint(r.timestamp - records[0].timestamp) <= 9 for r in records)
    if lengths_fit and deltas_fit and not any(r.headers for r in records):
        assert got is not None, "walk_numpy declined a plain valid batch"


@settings(max_examples=1500, **SETTINGS)
@given(
    records=walker_batches(),
    seed=st.integers(0, 2**32 - 1),
    client=st.booleans(),
    columns=st.booleans(),
    count_change=st.sampled_from([0, 0, 0, -1, 1]),
    lod_change=st.sampled_from([0, 0, 0, -1, 1, 5]),
)
def test_walk_numpy_agrees_with_walk_python_on_damaged_records(
    records: list[Record], seed: int, client: bool, columns: bool, count_change: int, lod_change: int
) -> None:
    rng = random.Random(seed)
    buf = encode_batch(records)
    header = read_header(buf)
    section = buf[61:]
    starts = record_starts(section)
    damaged, what = mutate(rng, section, starts)
    if damaged and rng.random() < 0.3:  # sometimes a second damage on top
        damaged, more = mutate(rng, damaged, starts)
        what += "; " + more
    assume(damaged)
    data = b"\x00" + damaged + b"\x81\x01"
    count = header.records_count + count_change
    lod = header.last_offset_delta + lod_change
    assert_walkers_agree(
        data, 1, 1 + len(damaged), count, lod, client, columns, f"seed {seed}: {what}, count {count}, lod {lod}"
    )


# One named damage each, aimed at every check walk_numpy makes (the random damages above hit some only rarely).
# (record, field, value, keep the old length); record -1 is the last one.
TARGETED_DAMAGES = [
    (0, "offsetDelta", -1, False),
    (5, "offsetDelta", 4, False),  # equal to the previous record's
    (5, "offsetDelta", 7, False),  # a gap: fine in a stored batch, wrong in a producer's
    (-1, "offsetDelta", 60, False),  # past lastOffsetDelta
    (3, "offsetDelta", 2**31 - 1, False),  # a 5-byte varint
    (3, "offsetDelta", 2**31, False),  # does not fit an int32
    (7, "keyLength", -2, False),
    (7, "keyLength", 0, False),
    (8, "valueLength", -2, False),
    (8, "valueLength", -1, False),
    (9, "headersCount", -1, False),
    (9, "headersCount", 1, False),  # a header count with no header bytes
    (10, "timestampDelta", 2**62, False),  # a 10-byte varlong: valid
    (10, "timestampDelta", -(2**63), False),
    (11, "timestampDelta", 2**40, True),  # fields longer than the declared length
    (12, "valueLength", 1, True),  # a value shorter than its bytes
]


@pytest.mark.parametrize("columns", [True, False], ids=["columns", "no-columns"])
@pytest.mark.parametrize("client", [True, False], ids=["client", "stored"])
@pytest.mark.parametrize(("index", "field", "value", "keep_length"), TARGETED_DAMAGES)
def test_walk_numpy_agrees_with_walk_python_on_one_damaged_field(
    index: int, field: str, value: int, keep_length: bool, client: bool, columns: bool
) -> None:
    values: list[bytes | None] = [b"v%d" % i for i in range(60)]
    values[8] = b""  # an empty value, so a negative value length leaves no stray bytes
    buf = encode_batch([Record(i, 1000 + i, None, v) for i, v in enumerate(values)])
    section = buf[61:]
    starts = record_starts(section)
    damaged = set_record_field(section, starts[index], field, value, keep_length=keep_length)
    assert damaged != section
    expected, _ = assert_walkers_agree(damaged, 0, len(damaged), 60, 59, client, columns, f"{field} = {value}")
    if field == "timestampDelta" and not keep_length:
        assert expected is not None  # a valid batch: the reference must take it


@pytest.mark.parametrize("damage", ["negative length", "length below 6", "trailing byte", "record missing"])
@pytest.mark.parametrize("client", [True, False], ids=["client", "stored"])
def test_walk_numpy_agrees_with_walk_python_on_one_framing_damage(damage: str, client: bool) -> None:
    buf = encode_values([b"v%d" % i for i in range(60)], 1000)
    section = bytearray(buf[61:])
    count = 60
    start = record_starts(bytes(section))[20]
    if damage == "negative length":
        section[start] ^= 0x01  # zigzag: the same magnitude, negative
    elif damage == "length below 6":
        section[start : start + 1 + section[start] // 2] = b"\x0a\x00\x00\x28\x01\x00"  # length 5, 5-byte body
    elif damage == "trailing byte":
        section += b"\x00"
    else:
        count = 61
    try:
        walk_python(bytes(section), 0, len(section), count, count - 1, client=client)
    except InvalidRecord:
        pass
    else:
        raise AssertionError(f"walk_python accepted a {damage}")
    assert walk_numpy(bytes(section), 0, len(section), count, count - 1, client=client) is None


def test_walk_numpy_handles_a_plain_100_record_batch() -> None:
    """The fast path is actually taken (and agrees) for the batches it exists for."""
    buf = encode_values([b"value %d" % i for i in range(100)], 1000)
    for client in (True, False):
        got = walk_numpy(buf, 61, len(buf), 100, 99, client=client)
        assert got is not None
        assert got[1] is not None and got[1].lists() == walk_python(buf, 61, len(buf), 100, 99, client=client)[1]


def test_walk_numpy_of_zero_records_agrees_with_walk_python() -> None:
    """An empty records section (a compacted-away batch) and one with stray bytes."""
    assert walk_python(b"", 0, 0, 0, -1, client=False)[0] == 0
    got = walk_numpy(b"", 0, 0, 0, -1, client=False)
    assert got is None or got[0] == 0
    with pytest.raises(InvalidRecord, match="1 trailing bytes"):
        walk_python(b"\x00", 0, 1, 0, -1, client=False)
    assert walk_numpy(b"\x00", 0, 1, 0, -1, client=False) is None


# --- renderings -------------------------------------------------------------------------------------------------------


def expected_plain(records: list[Record]) -> bytes:
    return b"".join((r.value or b"") + b"\n" for r in records)


def json_text(raw: bytes | None, field: str) -> dict[str, Any]:
    if raw is None:
        return {field: None}
    try:
        return {field: raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {field: base64.b64encode(raw).decode("ascii"), field + "Encoding": "base64"}


def expected_json_object(topic: str, partition: int, r: Record, timestamp_type: int) -> dict[str, Any]:
    return {
        "topic": topic,
        "partition": partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "timestampType": timestamp_type,
        **json_text(r.key, "key"),
        **json_text(r.value, "value"),
        "headers": [{"key": h.key, **json_text(h.value, "value")} for h in r.headers],
    }


text_or_bytes = st.one_of(st.none(), st.text(max_size=20).map(lambda s: s.encode("utf-8")), st.binary(max_size=20))


@settings(max_examples=80, **SETTINGS)
@given(
    values=st.lists(text_or_bytes, min_size=1, max_size=120),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(0, 2**40),
)
def test_render_plain_is_values_one_per_line_from_any_offset(
    values: list[bytes | None], codec: int, base_offset: int
) -> None:
    records = [Record(base_offset + i, 5, None, v) for i, v in enumerate(values)]
    buf = encode_batch(records, base_offset=base_offset, compression=codec)
    assert render_plain(buf) == expected_plain(records)
    for from_offset in {
        base_offset - 1,
        base_offset,
        base_offset + 1,
        base_offset + len(values) // 2,
        base_offset + len(values) - 1,
        base_offset + len(values),
        base_offset + len(values) + 9,
    }:
        assert render_plain(buf, from_offset=from_offset) == expected_plain(
            records[max(0, from_offset - base_offset) :]
        )


@settings(max_examples=100, **SETTINGS)
@given(
    records=st.lists(
        st.tuples(text_or_bytes, text_or_bytes, st.lists(st.tuples(st.text(max_size=8), text_or_bytes), max_size=3)),
        min_size=1,
        max_size=60,
    ),
    timestamp_type=st.sampled_from(TimestampType),
    topic=st.text(min_size=1, max_size=12),
    partition=st.integers(0, 2**31 - 1),
    base_ts=st.integers(0, 2**41),
)
def test_render_jsonl_lines_are_compact_ordered_utf8_json(
    records: list[Any], timestamp_type: TimestampType, topic: str, partition: int, base_ts: int
) -> None:
    recs = [
        Record(i, base_ts + i, k, v, tuple(Header(hk, hv) for hk, hv in hs)) for i, (k, v, hs) in enumerate(records)
    ]
    buf = encode_batch(recs, timestamp_type=timestamp_type, max_timestamp=base_ts + 10**6)
    out = render_jsonl(buf, topic, partition)
    lines = out.split(b"\n")
    assert lines[-1] == b"" and len(lines) == len(recs) + 1
    decoded = decode_records(buf)
    for line, r in zip(lines, decoded, strict=False):
        obj = json.loads(line)
        expected = expected_json_object(topic, partition, r, int(timestamp_type))
        assert obj == expected
        assert list(obj) == list(expected)  # keys in the spec's order
        assert [list(h) for h in obj["headers"]] == [list(h) for h in expected["headers"]]
        # Compact separators and UTF-8 as is: exactly what json.dumps writes with those options.
        assert line == json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if timestamp_type is TimestampType.LOG_APPEND_TIME:
        assert {json.loads(line)["timestamp"] for line in lines[:-1]} == {base_ts + 10**6}


def test_render_jsonl_writes_non_ascii_as_is_and_invalid_utf8_as_base64() -> None:
    buf = encode_batch(
        [
            Record(0, 1, "clé".encode(), "naïve ☃".encode(), (Header("ü", b"\xff\xfe"), Header("n", None))),
            Record(1, 2, b"\xc3", None),
        ]
    )
    out = render_jsonl(buf, "tøpic", 3)
    assert b"\\u" not in out
    assert (
        out
        == (
            '{"topic":"tøpic","partition":3,"offset":0,"timestamp":1,"timestampType":0,"key":"clé","value":"naïve ☃",'
            '"headers":[{"key":"ü","value":"//4=","valueEncoding":"base64"},{"key":"n","value":null}]}\n'
            '{"topic":"tøpic","partition":3,"offset":1,"timestamp":2,"timestampType":0,"key":"ww==",'
            '"keyEncoding":"base64","value":null,"headers":[]}\n'
        ).encode()
    )


def test_render_jsonl_from_offset_starts_inside_the_batch() -> None:
    buf = encode_values([b"a", b"b", b"c", b"d"], 50, base_offset=100)
    lines = render_jsonl(buf, "t", 0, from_offset=102).splitlines()
    assert [json.loads(line)["value"] for line in lines] == ["c", "d"]
    assert render_jsonl(buf, "t", 0, from_offset=104) == b""


@pytest.mark.parametrize("control_type", [CT.COMMIT, CT.ABORT])
def test_control_batches_render_as_nothing(control_type: CT) -> None:
    marker = encode_end_txn_marker(control_type, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=5)
    assert render_plain(marker) == b""
    assert render_jsonl(marker, "t", 0) == b""
    # The same record in a data batch does render: it is the control attribute that hides it.
    (record,) = decode_records(marker)
    assert render_plain(encode_batch([record])) == record.value + b"\n"


def test_renderings_of_a_numpy_walked_batch_match_the_reference() -> None:
    """Batches of >= 48 records go through walk_numpy; the renderings must not notice."""
    seed = 20240611
    print(f"seed {seed}")
    rng = random.Random(seed)
    values = [rng.randbytes(rng.randint(0, 30)) if rng.random() < 0.5 else b"line %d" % i for i in range(200)]
    records = [Record(10 + i, 99, None, v) for i, v in enumerate(values)]
    buf = encode_values(values, 99, base_offset=10)
    assert render_plain(buf) == expected_plain(records)
    assert render_plain(buf, from_offset=150) == expected_plain(records[140:])
    lines = render_jsonl(buf, "t", 1, from_offset=60).splitlines()
    assert [json.loads(line) for line in lines] == [expected_json_object("t", 1, r, 0) for r in records[50:]]


@pytest.mark.parametrize("value_size", [20, 100, 300], ids=["1-byte-lengths", "2-byte-lengths", "2-byte-wide"])
@pytest.mark.parametrize("prefix_byte", [0, 1], ids=["first-byte", "second-byte"])
def test_walk_numpy_checks_every_record_of_a_run_of_equal_sizes(value_size: int, prefix_byte: int) -> None:
    """The fast walker takes a run of equal-size records in one step; a length prefix changed anywhere in the run
    (the record's bytes unchanged) must still be caught, as the reference catches it."""
    records = [Record(i, 1_000 + i % 7, None, bytes([65 + i % 26]) * value_size) for i in range(200)]
    buf = encode_batch(records)
    header = read_header(buf)
    section = buf[61:]
    starts = record_starts(section)
    prefix_len = 1 if section[starts[100]] < 0x80 else 2
    if prefix_byte >= prefix_len:
        pytest.skip("the lengths of these records take one byte")
    assert walk_numpy(section, 0, len(section), 200, 199, client=True, columns=False) is not None
    for index in (1, 2, 63, 64, 65, 100, 198, 199):
        for new in {section[starts[index] + prefix_byte] ^ 0x02, section[starts[index] + prefix_byte] ^ 0x40}:
            damaged = bytearray(section)
            damaged[starts[index] + prefix_byte] = new
            for client in (True, False):
                expected, got = assert_walkers_agree(
                    bytes(damaged), 0, len(damaged), header.records_count, header.last_offset_delta, client, False,
                    f"record {index} byte {prefix_byte} set to {new:#x}",
                )  # fmt: skip
                assert expected is None and got is None


def test_a_padded_length_prefix_starts_a_run_of_its_own() -> None:
    """A record whose length prefix is padded to two bytes (9 as ``92 00``) is as long as its neighbours with a
    one-byte prefix and one more body byte: the chain must not count it as one more of their run (its body starts a
    byte later), and both walkers must agree on the batch."""
    records = [Record(i, 1_000, None, b"abc" if i == 10 else b"abcd") for i in range(200)]
    section = bytearray(encode_batch(records)[61:])
    starts = record_starts(bytes(section))
    assert section[starts[10]] == 9 * 2 and section[starts[9]] == 10 * 2
    section[starts[10] : starts[10] + 1] = b"\x92\x00"  # 9, padded: the record is now 11 bytes, as record 9
    data = bytes(section)
    runs = record_runs(data, 0, len(data), 200)
    assert runs is not None
    assert [(r.step, r.head, r.records) for r in runs[:3]] == [(11, 1, 10), (11, 2, 1), (11, 1, 53)]
    for client in (True, False):
        expected, _ = assert_walkers_agree(data, 0, len(data), 200, 199, client, True, "padded length of record 10")
        assert expected is not None  # the reference takes a padded varint


# --- the run walker: a producer's batch of records of one layout, checked column by column ---------------------


def uniform_section(count: int, ts_deltas: tuple[int, int], key: bytes | None = None) -> bytes:
    """A producer's records section of ``count`` records of 100-byte values, timestamp deltas drawn from
    ``ts_deltas`` (inclusive) but the first record's, 0 as a producer writes it: with wider deltas it is a run of its
    own."""
    rng = random.Random(count * 31 + ts_deltas[1])
    lo, hi = ts_deltas
    records = [
        Record(i, 1_000_000 + (0 if i == 0 else rng.randint(lo, hi)), key, b"%010d" % i + b"." * 90)
        for i in range(count)
    ]
    return encode_batch(records)[61:]


TS_DELTAS = {"one-ts": (0, 0), "1-byte-ts": (0, 31), "2-byte-ts": (64, 4000), "6-byte-ts": (2**40, 2**40 + 10**6)}


@pytest.mark.parametrize("ts_deltas", list(TS_DELTAS.values()), ids=list(TS_DELTAS))
@pytest.mark.parametrize("count", [24, 64, 65, 1000, 9000])
@pytest.mark.parametrize("key", [None, b"k", b"key-of-ten"], ids=["null-key", "1-byte-key", "10-byte-key"])
def test_walk_runs_takes_a_producers_batch_of_one_layout(
    ts_deltas: tuple[int, int], count: int, key: bytes | None
) -> None:
    """The batches the run walker exists for: it answers, with the reference's largest timestamp delta. Counts
    across the offset-delta width changes at 64 and 8192 (record sizes change there: new runs)."""
    section = uniform_section(count, ts_deltas, key)
    got = walk_runs(section, 0, len(section), count)
    assert got is not None
    assert got == walk_python(section, 0, len(section), count, count - 1, client=True, columns=False)[0]


# (field, the new value; the record's length is kept, so only the column check can notice)
RUN_DAMAGES: list[tuple[str, int | None]] = [
    ("offsetDelta", None),  # the next record's: the same width
    ("offsetDelta", 0),
    ("offsetDelta", 1),
    ("keyLength", 0),
    ("keyLength", -2),
    ("valueLength", 99),
    ("valueLength", -1),
    ("headersCount", 1),
    ("headersCount", -1),
    ("timestampDelta", 64),  # a two-byte timestamp delta in a run of one-byte ones
]


@pytest.mark.parametrize("index", [1, 2, 63, 64, 65, 500, 998, 999])
@pytest.mark.parametrize(("field", "value"), RUN_DAMAGES)
def test_walk_runs_catches_one_damaged_field_anywhere_in_a_run(index: int, field: str, value: int | None) -> None:
    """Every column the run walker checks, damaged in one record at the edges and the middle of both runs of a
    1,000-record batch (the record's length prefix untouched, so the chain still holds): the walker declines, as
    it must when the reference raises, and agrees when the damage leaves a valid batch."""
    section = uniform_section(1000, (0, 31))
    starts = record_starts(section)
    value = index + 1 if value is None else value
    damaged = set_record_field(section, starts[index], field, value, keep_length=True)
    expected, _ = assert_walkers_agree(damaged, 0, len(damaged), 1000, 999, True, False, f"{field} = {value} @{index}")
    if expected is None:
        assert walk_runs(damaged, 0, len(damaged), 1000) is None


def test_walk_runs_accepts_what_the_reference_accepts_in_columns_it_does_not_fix() -> None:
    """The attributes byte (unused: any value) and value bytes may differ from record to record."""
    section = bytearray(uniform_section(1000, (0, 31)))
    starts = record_starts(bytes(section))
    for index in (1, 500, 999):
        section[starts[index] + 2] = 0x7F  # attributes, after a two-byte length prefix
        section[starts[index] + 20] ^= 0xFF  # inside the value
    data = bytes(section)
    expected, _ = assert_walkers_agree(data, 0, len(data), 1000, 999, True, False, "attributes and values")
    assert expected is not None
    assert walk_runs(data, 0, len(data), 1000) == expected[0]


def test_walk_runs_declines_batches_of_varied_sizes_and_headers() -> None:
    """More than a few runs, or records with headers: left to the other walkers."""
    varied = encode_batch([Record(i, 1000, None, b"v" * (i % 50)) for i in range(200)])[61:]
    assert walk_runs(varied, 0, len(varied), 200) is None
    headers = encode_batch([Record(i, 1000, None, b"v", (Header("h", b"x"),)) for i in range(200)])[61:]
    assert walk_runs(headers, 0, len(headers), 200) is None
    assert walk_python(headers, 0, len(headers), 200, 199, client=True, columns=False) is not None


@pytest.mark.parametrize("index", [1, 63, 64, 500, 999])
def test_walk_runs_catches_a_continuation_bit_on_a_timestamp_delta(index: int) -> None:
    """A timestamp delta whose last byte says "more follows": the reference reads the next field as part of it and
    fails; the run walker must not let the unchanged offset-delta column vouch for the record."""
    section = bytearray(uniform_section(1000, (0, 31)))
    starts = record_starts(bytes(section))
    section[starts[index] + 3] |= 0x80  # after the two-byte length prefix and the attributes byte
    data = bytes(section)
    expected, _ = assert_walkers_agree(data, 0, len(data), 1000, 999, True, False, f"continuation bit @{index}")
    assert expected is None
    assert walk_runs(data, 0, len(data), 1000) is None
