"""The fast renderings of many stored batches (``core/format/renderstored.py``: ``render_stored``, ``stored_size``,
``walk_stored``) against the one-batch reference renderers (``render_plain``, ``render_jsonl``), byte for byte.

Batches vary in everything the renderings depend on: record counts (1 to thousands: the per-record and the 2-D block
paths), one layout per batch or mixed sizes, null and empty keys and values, headers, control batches, every codec,
LOG_APPEND_TIME, negative timestamps, offset gaps (compaction), offsets crossing a power of ten inside a batch,
values needing JSON escapes, non-ASCII UTF-8 and non-UTF-8 bytes. Every span is also cut at random offsets.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logfs.core.format.batch import (
    Header,
    Record,
    TimestampType,
    assign_offset_and_epoch,
    iter_batch_positions,
    read_header,
)
from logfs.core.format.compression import Compression
from logfs.core.format.control import ControlType
from logfs.core.format.decode import record_columns
from logfs.core.format.encode import encode_batch, encode_end_txn_marker, encode_values
from logfs.core.format.numpywalk import walk_stored
from logfs.core.format.records import walk
from logfs.core.format.render import render_jsonl, render_plain
from logfs.core.format.renderstored import render_stored
from logfs.core.format.storedsize import stored_size

TOPIC = "t"
PARTITION = 3
TS = 1_700_000_000_000


def reference(buf: bytes, jsonl: bool, lo: int | None, hi: int | None) -> bytes:
    """Each batch rendered alone by the reference, cut to ``[lo, hi)`` by decoding (an independent cut)."""
    out = []
    for at, _ in iter_batch_positions(buf):
        header = read_header(buf, at)
        if header.is_control or header.records_count == 0:
            continue
        _, cols = record_columns(buf, at)
        c = cols.lists()
        if jsonl:
            lines = [line + b"\n" for line in render_jsonl(buf, TOPIC, PARTITION, at).split(b"\n")[:-1]]
        else:
            spans = zip(c.value_position, c.value_length, strict=True)
            lines = [(bytes(c.data[p : p + n]) if n > 0 else b"") + b"\n" for p, n in spans]
            assert b"".join(lines) == render_plain(buf, at)
        offsets = [header.base_offset + d for d in c.offset_delta]
        assert len(lines) == len(offsets)
        for offset, line in zip(offsets, lines, strict=True):
            if (lo is None or offset >= lo) and (hi is None or offset < hi):
                out.append(line)
    return b"".join(out)


def check(buf: bytes, rng: random.Random, cuts: int = 4) -> None:
    positions = [at for at, _ in iter_batch_positions(buf)]
    headers = [read_header(buf, at) for at in positions]
    first = headers[0].base_offset if headers else 0
    last = headers[-1].last_offset + 1 if headers else 1
    bounds: list[tuple[int | None, int | None]] = [(None, None)]
    for _ in range(cuts):
        a, b = rng.randint(first - 1, last + 1), rng.randint(first - 1, last + 1)
        bounds.append((min(a, b), max(a, b)))
        bounds.append((a, None))
        bounds.append((None, b))
    for jsonl in (False, True):
        for lo, hi in bounds:
            want = reference(buf, jsonl, lo, hi)
            got = render_stored(buf, positions, jsonl, TOPIC, PARTITION, lo, hi)
            assert got == want, (jsonl, lo, hi)
            assert stored_size(buf, positions, jsonl, TOPIC, PARTITION, lo, hi) == len(want)


# --- generated batches ----------------------------------------------------------------------------------------------

TEXT = [
    b"",
    b"plain",
    b'quote " and back\\slash',
    b"tab\tnew\nline\x00\x1f",
    "h\u00e9llo w\u00f6rld \u2603".encode(),
    b"\xff\xfe not utf-8 \xc3",
    b"\xed\xa0\x80",  # an encoded surrogate: not UTF-8 for Python
    b"\x7f del",
    b"x" * 300,  # a two-byte length varint
    b"y" * 9000,  # a three-byte length (records over 8 KiB go to the reference walker)
]


def make_records(rng: random.Random, n: int, base: int, kind: str) -> list[Record]:
    """``kind``: uniform (one layout, fast block path), mixed (sizes vary), or wild (anything)."""
    size = rng.choice([0, 1, 5, 63, 64, 100, 200])
    fill = rng.choice([bytes([rng.choice(b"abcXYZ09 .,:{}-_~")]) * size] * 3 + [b"\xc3\xa9" * size, b'"\\\x01' * size])
    key = rng.choice([None, b"", b"k" * rng.randint(1, 20)])
    records = []
    offset = base
    for i in range(n):
        if kind == "uniform":
            value: bytes | None = fill
            k = key
        elif kind == "mixed":
            value = (b"%d" % i) * rng.randint(0, 12)
            k = rng.choice([None, b"key-%d" % i])
        else:
            value = rng.choice([*TEXT, None])
            k = rng.choice([None, *TEXT[:7]])
        headers: tuple[Header, ...] = ()
        if kind == "wild" and rng.random() < 0.2:
            headers = (Header("h", rng.choice([None, b"v", b"\xff"])), Header("\u00fc", b""))
        ts = TS + rng.randint(-5, 5) * 1000
        if kind == "wild" and rng.random() < 0.1:
            ts = rng.choice([-1, 0, 7])
        records.append(Record(offset, ts, k, value, headers))
        offset += 1 if kind != "wild" or rng.random() < 0.8 else rng.randint(2, 5)
    return records


def txn_marker(control: ControlType, offset: int) -> bytes:
    """A transaction marker of producer 1 at ``offset`` (a control batch: renders as nothing)."""
    return encode_end_txn_marker(
        control, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=TS, base_offset=offset
    )


def make_span(rng: random.Random, batches: int, max_records: int, kinds: list[str]) -> bytes:
    out = []
    offset = rng.choice([0, 5, 990, 99_990, 10**12 - 3])
    for _ in range(batches):
        roll = rng.random()
        if roll < 0.1:
            out.append(txn_marker(ControlType.COMMIT, offset))
            offset += 1
            continue
        n = rng.randint(1, max_records)
        kind = rng.choice(kinds)
        if kind == "values":
            batch = bytearray(encode_values([b"v%07d" % i for i in range(n)], TS, base_offset=offset))
        else:
            records = make_records(rng, n, offset, kind)
            batch = bytearray(
                encode_batch(
                    records,
                    base_offset=offset,
                    compression=rng.choice([Compression.NONE] * 4 + list(Compression)),
                    timestamp_type=rng.choice(list(TimestampType)),
                    max_timestamp=TS + 12345,
                )
            )
            n = records[-1].offset - offset + 1
        assign_offset_and_epoch(batch, 0, offset, 0)
        out.append(bytes(batch))
        offset += n + rng.choice([0, 0, 0, 3])
    return b"".join(out)


@pytest.mark.parametrize("kinds", [["uniform"], ["mixed"], ["wild"], ["values"], ["uniform", "mixed", "wild"]])
@pytest.mark.parametrize("max_records", [1, 12, 300])
def test_spans_render_as_the_reference(kinds: list[str], max_records: int) -> None:
    seed = random.randrange(2**32)
    print("seed", seed)
    rng = random.Random(seed)
    for _ in range(6):
        check(make_span(rng, rng.randint(1, 12), max_records, kinds), rng)


def test_a_large_uniform_batch_crossing_powers_of_ten() -> None:
    rng = random.Random(1)
    for base in (0, 9_990, 999_999_000):
        records = [Record(base + i, TS + i, None, b"x" * 100) for i in range(2000)]
        check(encode_batch(records, base_offset=base), rng)


def test_an_empty_span_and_only_control_batches_render_nothing() -> None:
    assert render_stored(b"", [], True, TOPIC, PARTITION) == b""
    marker = txn_marker(ControlType.ABORT, 0)
    assert render_stored(marker, [0], False, TOPIC, PARTITION) == b""
    assert stored_size(marker, [0], True, TOPIC, PARTITION) == 0


HEADERS = st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=6))), max_size=2)
ROW = st.tuples(
    st.one_of(st.none(), st.binary(max_size=12)),  # key
    st.one_of(st.none(), st.binary(max_size=80), st.sampled_from(TEXT)),  # value
    st.integers(-3, 3),  # timestamp step
    st.one_of(st.just([]), HEADERS),
)
BATCH = st.tuples(
    st.one_of(st.lists(ROW, min_size=1, max_size=40), st.lists(ROW, min_size=1, max_size=1).map(lambda r: r * 30)),
    st.sampled_from(list(Compression)),
    st.sampled_from(list(TimestampType)),
    st.booleans(),  # a control batch (a transaction marker) before it
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(BATCH, min_size=1, max_size=4), st.randoms(use_true_random=False))
def test_hypothesis_batches_render_as_the_reference(
    batches: list[
        tuple[list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]], int, TimestampType, bool]
    ],
    rng: random.Random,
) -> None:
    out = []
    offset = 7
    for rows, codec, ts_type, marker in batches:
        if marker:
            out.append(txn_marker(ControlType.ABORT, offset))
            offset += 1
        records = [
            Record(offset + i, TS + d, k, v, tuple(Header(hk, hv) for hk, hv in h))
            for i, (k, v, d, h) in enumerate(rows)
        ]
        out.append(encode_batch(records, base_offset=offset, compression=codec, timestamp_type=ts_type))
        offset += len(rows)
    check(b"".join(out), rng, cuts=2)


def test_walk_stored_agrees_with_the_reference_walker_or_declines() -> None:
    rng = random.Random(7)
    for _ in range(40):
        buf = make_span(rng, rng.randint(1, 6), 50, ["uniform", "mixed", "wild", "values"])
        sections = []
        for at, size in iter_batch_positions(buf):
            h = read_header(buf, at)
            if h.compression == Compression.NONE and h.records_count:
                sections.append((at + 61, at + size, h.records_count, h.last_offset_delta))
        layout = walk_stored(buf, sections)
        if layout is None:
            continue
        i = 0
        for start, end, count, lod in sections:
            _, cols = walk(buf, start, end, count, lod, client=False)
            assert cols is not None
            c = cols.lists()
            assert layout.offset_delta[i : i + count].tolist() == c.offset_delta
            assert layout.timestamp_delta[i : i + count].tolist() == c.timestamp_delta
            assert layout.key_position[i : i + count].tolist() == c.key_position
            assert layout.key_length[i : i + count].tolist() == c.key_length
            assert layout.value_position[i : i + count].tolist() == c.value_position
            assert layout.value_length[i : i + count].tolist() == c.value_length
            i += count
        assert i == len(layout.starts)


def test_corrupt_records_raise_as_the_reference_does() -> None:
    buf = bytearray(encode_values([b"abc"] * 200, TS))
    buf[61 + 5 * 50] = 0x7F  # a length varint in the middle: the chain breaks
    with pytest.raises(Exception) as want:
        render_plain(bytes(buf), 0)
    with pytest.raises(type(want.value)):
        render_stored(bytes(buf), [0], False, TOPIC, PARTITION)


@pytest.mark.parametrize(
    "values",
    [
        [b"a\xc3", b"\xa9b"],  # joined they are valid UTF-8, each alone is not: base64 both
        ["d\u00e9j\u00e0 vu \u2603".encode()] * 20,  # UTF-8 text written as is, one layout (not a block: not ASCII)
        [b"tab\there", b'quote"', b"back\\slash", b"\x7f", b"nul\x00"],  # escapes
        [b"\xf0\x9f\x98\x80 emoji", b"\xed\xa0\x80 surrogate"],
    ],
)
def test_text_that_needs_escapes_or_base64_renders_as_the_reference(values: list[bytes]) -> None:
    rng = random.Random(3)
    for keyed in (False, True):
        records = [Record(i, TS, v if keyed else None, v) for i, v in enumerate(values)]
        check(encode_batch(records) + encode_values(values, TS, base_offset=len(values)), rng, cuts=1)
