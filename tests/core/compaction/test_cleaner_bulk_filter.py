"""The cleaner's chunk-at-once record rule (``BatchFilter.prepare`` over ``scan.walk_batches``, and the
retained batches built by slicing the kept records' bytes) equals its record-by-record reference (``BatchFilter``
without ``prepare``, which decodes and re-encodes), on any batches and any offset map (hypothesis).

Equal means: the same batches dropped, kept whole or emptied; for a rebuilt batch the same records (offset,
timestamp, key, value, headers) and header fields, the base timestamp aside (the sliced batch keeps the original's,
the re-encoded one takes its first kept record's: both give every record its timestamp); the same counts. Every
sliced batch passes the full validation a stored batch gets (CRC included). The ``LOGFS_NO_CEXT=1`` pass runs the
same tests over the pure-Python walk of ``core/log/cleaner/scan.py``.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logfs.core.errors import InvalidRecord
from logfs.core.format.batch import (
    DELETE_HORIZON_MASK,
    Header,
    Record,
    TimestampType,
    iter_batch_positions,
    read_header,
)
from logfs.core.format.compression import Compression
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_batch
from logfs.core.format.validate import validate_batch
from logfs.core.log.cleaner.filtering import BatchFilter
from logfs.core.log.cleaner.offsetmap import OffsetMap
from logfs.core.log.cleaner.scan import walk_batches
from logfs.core.log.cleaner.transactions import CleanedTransactionMetadata

EXAMPLES = int(os.environ.get("LOGFS_CLEANER_BULK_EXAMPLES", "150"))
NOW = 1_700_000_000_000
KEYS = [b"a", b"b", b"c", b"k" * 17, b"long-key-" * 3, None]  # short keys, keys hashed by MD5, no key

records = st.lists(
    st.tuples(
        st.sampled_from(KEYS),
        st.one_of(st.none(), st.binary(max_size=40)),
        st.integers(-5000, 5000),  # timestamp around NOW
        st.lists(st.tuples(st.sampled_from(["h", "x"]), st.one_of(st.none(), st.binary(max_size=3))), max_size=2),
        st.integers(1, 3),  # gap before the record (offsets a cleaned log already skips)
    ),
    min_size=1,
    max_size=20,
)
batch_kinds = st.tuples(
    st.sampled_from([TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME]),
    st.sampled_from([None, NOW - 1, NOW + 1]),  # no delete horizon, one passed, one to come
    st.sampled_from([Compression.NONE, Compression.NONE, Compression.GZIP]),
)


def build_chunk(draws: list[tuple[list[tuple[object, ...]], tuple[object, ...]]]) -> bytes:
    chunk = bytearray()
    offset = 0
    for recs, (ts_type, horizon, codec) in draws:
        out = []
        for key, value, ts, headers, gap in recs:
            offset += gap
            out.append(Record(offset, NOW + ts, key, value, tuple(Header(k, v) for k, v in headers)))  # type: ignore[arg-type]
        base = out[0].offset
        chunk += encode_batch(
            out, base_offset=base, timestamp_type=ts_type, compression=codec,  # type: ignore[arg-type]
            max_timestamp=NOW if ts_type == TimestampType.LOG_APPEND_TIME else None,
            base_timestamp=horizon, delete_horizon=horizon is not None,  # type: ignore[arg-type]
            last_offset_delta=out[-1].offset - base + 1,
        )  # fmt: skip
        offset += 2
    return bytes(chunk)


def run(chunk: bytes, latest: dict[bytes, int], latest_offset: int, bulk: bool) -> tuple[list[object], object]:
    offset_map = OffsetMap.with_capacity(100)
    for key, offset in latest.items():
        offset_map.put(key, offset)
    offset_map.latest_offset = latest_offset
    batch_filter = BatchFilter(offset_map, CleanedTransactionMetadata(), {}, 1 << 40, NOW, 1000)
    batches = [(p, read_header(chunk, p)) for p, _ in iter_batch_positions(chunk)]
    if bulk:
        batch_filter.prepare(chunk, batches)
    return [batch_filter.filter(chunk, p, h) for p, h in batches], batch_filter.counts


def comparable(out: object) -> object:
    if out is None:
        return None
    data = bytes(out)  # type: ignore[call-overload]
    h = read_header(data)
    fields = (h.base_offset, h.attributes, h.last_offset_delta, h.max_timestamp, h.producer_id, h.records_count)
    return fields, decode_records(data), h.base_timestamp if h.attributes & DELETE_HORIZON_MASK else None


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    st.lists(st.tuples(records, batch_kinds), min_size=1, max_size=6),
    st.dictionaries(st.sampled_from([k for k in KEYS if k is not None]), st.integers(0, 200), max_size=5),
    st.integers(-1, 200),
)
def test_the_bulk_filter_equals_the_record_by_record_reference(
    draws: list[tuple[list[tuple[object, ...]], tuple[object, ...]]], latest: dict[bytes, int], latest_offset: int
) -> None:
    chunk = build_chunk(draws)
    got, got_counts = run(chunk, latest, latest_offset, bulk=True)
    want, want_counts = run(chunk, latest, latest_offset, bulk=False)
    assert [comparable(o) for o in got] == [comparable(o) for o in want]
    assert got_counts == want_counts
    for out in got:
        if out is not None:
            validate_batch(bytes(out), client=False)


def test_a_sliced_batch_keeps_its_base_timestamp_and_the_kept_records_bytes() -> None:
    batch = encode_batch([Record(o, NOW + o, k, b"v%d" % o) for o, k in enumerate([b"a", b"b", b"a", b"c"])],
                         base_offset=0)  # fmt: skip
    (out,), _ = run(batch, {b"a": 2, b"b": 1, b"c": 9}, 3, bulk=True)
    assert isinstance(out, bytes)
    header = read_header(out)
    assert header.base_timestamp == NOW  # the first record (offset 0) is gone, its timestamp stays the base
    assert header.max_timestamp == NOW + 2
    assert [(r.offset, r.timestamp, r.key) for r in decode_records(out)] == [(1, NOW + 1, b"b"), (2, NOW + 2, b"a")]
    validate_batch(out, client=False)


def test_a_damaged_record_is_refused_with_the_reference_s_error() -> None:
    batch = bytearray(encode_batch([Record(0, NOW, b"a", b"value"), Record(1, NOW, b"b", b"value")]))
    batch[61] = 0x7F  # the first record's length varint: far past the batch's end
    header = read_header(batch)
    with pytest.raises(InvalidRecord):
        walk_batches(bytes(batch), [(0, header)])
