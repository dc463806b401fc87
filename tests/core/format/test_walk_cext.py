"""The compiled record walker (``core/cext/recordwalk.c`` through ``records.walk_c`` and ``_helpers.walk_sections``)
equals the reference (``records.walk_python``) on valid and damaged records sections: the same max timestamp delta and
columns, or the same error type and message.

The extension must be built here (``scripts/setup`` builds it; the import below fails otherwise): these tests hold
the compiled path to the reference whatever ``LOGFS_NO_CEXT`` says, which only chooses what ``records.walk`` uses.
Damage is drawn from a seed that hypothesis prints with any failure.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logfs.core import cext
from logfs.core.cext import _helpers  # (fails the file when the extension is not built)
from logfs.core.errors import InvalidRecord
from logfs.core.format.batch import RECORDS_OFFSET, Header, Record, assign_offset_and_epoch, iter_batch_positions
from logfs.core.format.compression import Compression
from logfs.core.format.decode import record_columns
from logfs.core.format.encode import encode_batch
from logfs.core.format.records import CEXT_LISTS_MAX_RECORDS, walk_c, walk_python
from logfs.core.format.render import render_jsonl, render_plain
from logfs.core.format.renderstored import render_stored
from logfs.core.format.storedjsonl import compiled_columns, jsonl_lead
from logfs.core.format.storedpieces import Walked, stored_pieces
from logfs.core.format.storedsize import stored_size, stored_sizes
from logfs.core.format.varint import decode_varint, encode_varint

SETTINGS: dict[str, Any] = {
    "derandomize": True,
    "database": None,
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


def outcome(walker: Any, data: Any, start: int, end: int, count: int, lod: int, client: bool, columns: bool) -> Any:
    """What a walker gives: its max timestamp delta and columns as lists, or its error's type, message, position."""
    try:
        max_ts, cols = walker(data, start, end, count, lod, client=client, columns=columns)
    except InvalidRecord as exc:
        return ("error", type(exc), str(exc), exc.position)
    return ("ok", max_ts, None if cols is None else cols.lists())


def assert_same(data: Any, start: int, end: int, count: int, lod: int, context: str) -> Any:
    """Both walkers, every rule set and mode, on one input."""
    result = None
    for client in (True, False):
        for columns in (True, False):
            expected = outcome(walk_python, data, start, end, count, lod, client, columns)
            got = outcome(walk_c, data, start, end, count, lod, client, columns)
            assert got == expected, f"{context} client={client} columns={columns}"
            if not client and columns:
                result = expected
    return result


@st.composite
def varied_records(draw: st.DrawFn) -> list[Record]:
    """Records as producers write them: keys or none, values of 0-1,600 bytes or none, 0-3 headers with null or
    non-null values, timestamp deltas small or wide, counts on both sides of the list/array switch."""
    count = draw(st.sampled_from([0, 1, 2, 5, CEXT_LISTS_MAX_RECORDS, CEXT_LISTS_MAX_RECORDS + 1, 60, 200]))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    base = draw(st.integers(-(2**40), 2**40))
    wide = draw(st.booleans())
    out = []
    for i in range(count):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.randint(0, 32))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice([rng.randint(0, 60), rng.randint(150, 1600)]))
        headers = tuple(
            Header(rng.choice(["trace", "", "ü-key", "x" * 70]), None if rng.random() < 0.3 else rng.randbytes(9))
            for _ in range(rng.choice([0, 0, 1, 1, 2, 3]))
        )
        delta = rng.randint(-(2**62), 2**62) if wide and rng.random() < 0.3 else rng.randint(-1000, 1000)
        out.append(Record(i, base + delta, key, value, headers))
    return out


def damage(rng: random.Random, section: bytes) -> tuple[bytes, str]:
    """One random damage: truncation, a byte set to a varint-significant value, bytes inserted or deleted."""
    buf = bytearray(section)
    kind = rng.choice(["truncate", "set", "insert", "delete", "flip"])
    if not buf or kind == "insert":
        at = rng.randrange(len(buf) + 1)
        extra = rng.choice([b"\x00", b"\x80", b"\xff\xff\xff\xff\xff\xff", rng.randbytes(3)])
        return bytes(buf[:at] + extra + buf[at:]), f"insert {extra.hex()} at {at}"
    at = rng.randrange(len(buf))
    if kind == "truncate":
        return bytes(buf[:at]), f"truncate at {at}"
    if kind == "delete":
        return bytes(buf[:at] + buf[at + rng.randint(1, 4) :]), f"delete at {at}"
    if kind == "set":
        buf[at] = rng.choice([0x00, 0x01, 0x03, 0x7F, 0x80, 0x81, 0xFE, 0xFF])
        return bytes(buf), f"set byte {at} to {buf[at]:#x}"
    buf[at] ^= rng.randrange(1, 256)
    return bytes(buf), f"flip byte {at}"


@settings(max_examples=300, **SETTINGS)
@given(records=varied_records(), framing=st.integers(0, 3), as_view=st.booleans())
def test_compiled_walker_equals_the_reference_on_valid_records(
    records: list[Record], framing: int, as_view: bool
) -> None:
    buf = encode_batch(records) if records else b""
    section = buf[RECORDS_OFFSET:] if records else b""
    count = len(records)
    data: Any = b"\x80" * framing + section + b"\x81" * framing
    if as_view:
        data = memoryview(bytearray(data))
    result = assert_same(data, framing, framing + len(section), count, count - 1, "valid")
    assert result[0] == "ok"
    cols = result[2]
    assert [h or [] for h in cols.headers] == [[(h.key, h.value) for h in r.headers] for r in records]


@settings(max_examples=1500, **SETTINGS)
@given(
    records=varied_records(),
    seed=st.integers(0, 2**32 - 1),
    count_change=st.sampled_from([0, 0, 0, -1, 1, 2**31 - 1]),
    lod_change=st.sampled_from([0, 0, -1, 1, 5]),
)
def test_compiled_walker_equals_the_reference_on_damaged_records(
    records: list[Record], seed: int, count_change: int, lod_change: int
) -> None:
    rng = random.Random(seed)
    section = encode_batch(records)[RECORDS_OFFSET:] if records else b""
    damaged, what = damage(rng, section)
    if rng.random() < 0.3:
        damaged, more = damage(rng, damaged)
        what += "; " + more
    count = len(records) + (count_change if count_change < 2**31 - 1 else 2**31 - 1 - len(records))
    data = b"\x00" + damaged + b"\x81\x01"
    assert_same(data, 1, 1 + len(damaged), count, len(records) - 1 + lod_change, f"seed {seed}: {what}")


def record(ts: bytes, od: bytes, rest: bytes) -> bytes:
    """A record from raw field bytes (attributes 0), its length prefix computed."""
    body = b"\x00" + ts + od + rest
    return encode_varint(len(body)) + body


@pytest.mark.parametrize(
    ("name", "section", "message"),
    [
        ("10-byte varlong of 2**63-1", record(b"\xfe" + b"\xff" * 8 + b"\x01", b"\x00", b"\x01\x01\x00"), None),
        ("tenth byte past int64", record(b"\xfe" + b"\xff" * 8 + b"\x03", b"\x00", b"\x01\x01\x00"), "int64"),
        ("11-byte varlong", record(b"\xff" * 10 + b"\x01", b"\x00", b"\x01\x01\x00"), "longer than 10"),
        ("offset delta past int32", record(b"\x00", b"\x80\x80\x80\x80\x10", b"\x01\x01\x00"), "int32"),
        ("6-byte varint", record(b"\x00", b"\x80\x80\x80\x80\x80\x00", b"\x01\x01\x00"), "longer than 5"),
        ("header key past the record", record(b"\x00", b"\x00", b"\x01\x01\x02\x10ab\x00"), "header 0: key of 8"),
        ("headers past the record", record(b"\x00", b"\x00", b"\x01\x01\x04\x00\x01"), "header 1 of 2"),
        ("null header value", record(b"\x00", b"\x00", b"\x01\x01\x02\x02k\x01"), None),
        ("header value below -1", record(b"\x00", b"\x00", b"\x01\x01\x02\x02k\x03"), "negative value length -2"),
        ("non-UTF-8 header key", record(b"\x00", b"\x00", b"\x01\x01\x02\x02\xff\x00"), None),
        ("length in 3 bytes", record(b"\x00", b"\x00", b"\x01\x80\x80\x01" + b"v" * 8192 + b"\x00"), None),
    ],
)
def test_compiled_walker_equals_the_reference_on_edge_fields(name: str, section: bytes, message: str | None) -> None:
    result = assert_same(section, 0, len(section), 1, 0, name)
    if message is None:
        assert result[0] == "ok", result
    else:
        assert result[0] == "error" and message in result[2], result


def test_compiled_walker_refuses_a_section_outside_the_buffer() -> None:
    with pytest.raises(ValueError):
        _helpers.walk(b"abc", 1, 4, 1, 0, False, True, True)


def walk_sections(data: bytes, sections: list[tuple[int, int, int, int]]) -> Any:
    total = sum(c for _, _, c, _ in sections)
    out = np.empty(9 * total, dtype=np.int64)
    _helpers.walk_sections(data, np.array(sections, dtype=np.int64).reshape(-1), out)
    return out.reshape(9, total)


@settings(max_examples=200, **SETTINGS)
@given(batches=st.lists(varied_records(), min_size=1, max_size=4), seed=st.integers(0, 2**32 - 1))
def test_walk_sections_equals_the_reference_batch_by_batch(batches: list[list[Record]], seed: int) -> None:
    rng = random.Random(seed)
    data = b""
    sections = []
    for batch_records in batches:
        if not batch_records:
            continue
        buf = encode_batch(batch_records)
        n = len(batch_records)
        sections.append((len(data) + RECORDS_OFFSET, len(data) + len(buf), n, n - 1))
        data += buf
    if not sections:
        return
    damaged = rng.random() < 0.5
    if damaged:
        data, _ = damage(rng, data)
        data += bytes(max(0, sections[-1][1] - len(data)))  # keep every section inside the buffer
    expected: list[Any] = []
    starts: list[int] = []
    error = None
    for start, end, count, lod in sections:
        try:
            _, cols = walk_python(data, start, end, count, lod, client=False)
        except InvalidRecord as exc:
            error = str(exc)
            break
        assert cols is not None
        expected.append(cols.lists())
    if error is not None:
        with pytest.raises(InvalidRecord) as raised:
            walk_sections(data, sections)
        assert str(raised.value) == error
        return
    for start, _, count, _ in sections:  # record starts, by their (valid) length prefixes
        pos = start
        for _ in range(count):
            starts.append(pos)
            length, pos = decode_varint(data, pos, 5)
            pos += length
    got = walk_sections(data, sections)
    at = 0
    for cols in expected:
        n = len(cols)
        fields = (cols.timestamp_delta, cols.offset_delta, cols.key_position, cols.key_length)
        for k, column in enumerate((*fields, cols.value_position, cols.value_length)):
            assert got[k, at : at + n].tolist() == column
        assert got[7, at : at + n].tolist() == [len(h or ()) for h in cols.headers]
        at += n
    assert got[8].tolist() == starts


@contextlib.contextmanager
def walker(compiled: bool) -> Iterator[None]:
    """records.walk and the stored-batch renderers on the compiled walker, or on the pure-Python ones (the switch
    they read at each call, ``logfs.core.cext.USE_CEXT``)."""
    saved = cext.USE_CEXT
    cext.USE_CEXT = compiled
    try:
        yield
    finally:
        cext.USE_CEXT = saved


# Keys and values: escapes, non-ASCII UTF-8, not UTF-8 (a surrogate, an overlong form: base64).
TEXTS = [b"", b"plain", b'{"a":"q\\"uote"}\n\t\x01\x1f\x7f', "ü ☃ 𝄞".encode(), b"\xff\xfe", b"\xed\xa0\x80"]
TEXTS.append(b"\xc0\xaf")


def with_texts(rng: random.Random, records_: list[Record]) -> list[Record]:
    """``records_`` with about a third of their keys and values replaced by TEXTS (escapes, non-UTF-8 …)."""
    text = [rng.choice(TEXTS) for _ in range(3)]
    return [
        Record(r.offset, r.timestamp, text[0] if rng.random() < 0.3 else r.key, text[1] if rng.random() < 0.3
               else r.value, r.headers)
        for r in records_
    ]  # fmt: skip


@settings(max_examples=150, **SETTINGS)
@given(batches=st.lists(varied_records(), min_size=1, max_size=5), seed=st.integers(0, 2**32 - 1))
def test_compiled_renderings_equal_the_reference(batches: list[list[Record]], seed: int) -> None:
    """render_stored and stored_size on the compiled walk and JSON-lines renderer equal the reference renderers on
    the pure-Python walk: keys, values and header keys that need escapes, are not UTF-8 (base64; a header key is
    decoded with replacement), codecs mixed, cut at random offsets."""
    rng = random.Random(seed)
    buf = b""
    offset = 0
    for records_ in batches:
        if not records_:
            continue
        records_ = with_texts(rng, records_)
        batch = bytearray(encode_batch(records_, compression=rng.choice(list(Compression))))
        assign_offset_and_epoch(batch, 0, offset, 0)
        if rng.random() < 0.3 and any(r.headers for r in records_) and batch[21 + 1] & 0x07 == 0:
            at = batch.find(b"trace")  # a header key that is not UTF-8 (the CRC is not checked when reading)
            if at > 0:
                batch[at : at + 2] = b"\xff\xc3"
        buf += bytes(batch)
        offset += len(records_) + rng.randint(0, 3)
    positions = [at for at, _ in iter_batch_positions(buf)]
    bounds = [(None, None), (rng.randint(0, offset), None), (None, rng.randint(0, offset))]
    for jsonl in (False, True):
        for lo, hi in bounds:
            with walker(False):
                want = render_stored(buf, positions, jsonl, "t\u00e9", 3, lo, hi)
                assert want == reference_rendering(buf, jsonl, lo, hi)
            with walker(True):
                got = render_stored(buf, positions, jsonl, "t\u00e9", 3, lo, hi)
                size = stored_size(buf, positions, jsonl, "t\u00e9", 3, lo, hi)
            assert bytes(got) == bytes(want), (jsonl, lo, hi)
            assert size == len(want)


def reference_rendering(buf: bytes, jsonl: bool, lo: int | None, hi: int | None) -> bytes:
    """Each batch by the one-batch reference renderer, cut by offset."""
    out = []
    for at, _ in iter_batch_positions(buf):
        header, cols = record_columns(buf, at)
        c = cols.lists()
        if jsonl:  # JSON lines hold no raw newline; plain values may
            lines = [line + b"\n" for line in render_jsonl(buf, "t\u00e9", 3, at).split(b"\n")[:-1]]
        else:
            spans = zip(c.value_position, c.value_length, strict=True)
            lines = [(bytes(c.data[p : p + n]) if n > 0 else b"") + b"\n" for p, n in spans]
            assert header.is_control or b"".join(lines) == render_plain(buf, at)
        if header.is_control:
            continue
        for delta, line in zip(c.offset_delta, lines, strict=True):
            offset = header.base_offset + delta
            if (lo is None or offset >= lo) and (hi is None or offset < hi):
                out.append(line)
    return b"".join(out)


def uniform_records(rng: random.Random, count: int) -> list[Record]:
    """A block of one layout (what the numpy size path takes), its bytes plain ASCII or not, its timestamps maybe
    negative (which the block path leaves to the per-record paths)."""
    width = rng.choice([0, 5, 100])
    text = rng.choice([b"a", b'"', b"\x01", "ü".encode()[:1], b"\xc3"])
    key = rng.choice([None, b"k" * 4])
    base = rng.choice([0, 10**12, -5])
    return [Record(i, base + i, key, (text * width)[:width], ()) for i in range(count)]


@settings(max_examples=150, **SETTINGS)
@given(batches=st.lists(varied_records(), min_size=1, max_size=5), seed=st.integers(0, 2**32 - 1))
def test_jsonl_sizes_equal_the_rendered_lengths_both_ways(batches: list[list[Record]], seed: int) -> None:
    """The size-only mode (``_helpers.jsonl_sizes`` under ``stored_sizes``/``stored_size``) gives exactly the length of
    the rendering, per batch and per cut span, on the compiled walker and on the pure-Python one (LOGFS_NO_CEXT=1's
    path): varied records (escapes, non-UTF-8 keys and values in base64, headers with null values, wide and negative
    timestamps, every codec) and uniform blocks of plain and non-plain bytes."""
    rng = random.Random(seed)
    buf = b""
    offset = 0
    for records_ in [*batches, uniform_records(rng, rng.choice([8, 30]))]:
        if not records_:
            continue
        if rng.random() < 0.7:
            records_ = with_texts(rng, records_)
        batch = bytearray(encode_batch(records_, compression=rng.choice(list(Compression))))
        assign_offset_and_epoch(batch, 0, offset, 0)
        buf += bytes(batch)
        offset += len(records_) + rng.randint(0, 3)
    positions = [at for at, _ in iter_batch_positions(buf)]
    for compiled in (True, False):
        with walker(compiled):
            per_batch = stored_sizes(buf, positions, True, "t\u00e9", 3)
            for k, at in enumerate(positions):
                assert per_batch[k] == len(render_stored(buf, [at], True, "t\u00e9", 3)), (compiled, k)
            lo, hi = rng.randint(0, offset), rng.randint(0, offset)
            whole = render_stored(buf, positions, True, "t\u00e9", 3, lo, hi)
            assert stored_size(buf, positions, True, "t\u00e9", 3, lo, hi) == len(whole), (compiled, lo, hi)


def test_jsonl_sizes_gives_each_line_length_and_refuses_bad_buffers() -> None:
    """The compiled counter directly: one length per record, equal to its rendered line; an output buffer too
    short or read-only, or a record outside the data, is refused."""
    records_ = [Record(i, 5 - i, b"k\x00" if i % 2 else None, TEXTS[i % len(TEXTS)], ()) for i in range(7)]
    buf = bytearray(encode_batch(records_))
    assign_offset_and_epoch(buf, 0, 10**15, 0)
    data = bytes(buf)
    (walked,) = stored_pieces(data, [0], None, None)
    assert isinstance(walked, Walked)
    lead = jsonl_lead("t", 0)
    columns = compiled_columns(walked, 0, 7)
    lines = _helpers.render_jsonl(walked.data, lead, columns, 7).splitlines(keepends=True)
    sizes = np.full(7, -1, dtype=np.int64)
    _helpers.jsonl_sizes(walked.data, lead, columns, 7, sizes)
    assert sizes.tolist() == [len(line) for line in lines]
    with pytest.raises(ValueError, match="shorter"):
        _helpers.jsonl_sizes(walked.data, lead, columns, 7, np.empty(6, dtype=np.int64))
    with pytest.raises((BufferError, TypeError)):
        _helpers.jsonl_sizes(walked.data, lead, columns, 7, bytes(56))
    moved = list(columns)
    moved[5] = columns[5] + len(data)  # value positions past the data
    with pytest.raises(ValueError, match="outside"):
        _helpers.jsonl_sizes(walked.data, lead, tuple(moved), 7, sizes)
