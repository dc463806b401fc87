"""Records of a ``.kafka`` range file as Arrow record batches in the schema of Spark's Kafka source.

An executor of the ``logfs`` source reads ``at/<start>-<end>.kafka`` (whole stored batches, the first and the last
possibly holding records outside the range) in blocks of READ_BYTES, and turns the whole batches of each block into
one ``pyarrow.RecordBatch``:

* ``format.storedpieces.stored_pieces`` (what the mount's renderers walk with) decompresses and walks the block's
  batches, several together where it can (with the compiled walker, ``core/cext/recordwalk.c``, one C walk for the whole
  block, headers included), giving every record's offset and timestamp and the position and length of its key and
  value; control batches (transaction markers) and batches outside ``[start, end)`` are skipped, and records
  outside it are cut off;
* the walked buffers (the block itself, or the records sections laid end to end) are joined into one, so positions
  grow monotonically through it;
* a key or value column is then made without a Python loop over records: a binary array over that buffer whose
  offsets alternate ``position, position + length`` has the values at its even indexes (the odd ones are the bytes
  between them), and Arrow's ``take`` of the even indexes copies them out contiguously. Measured: ~0.05 µs a
  record for 100-byte values, where slicing and joining in Python costs ~0.4 µs;
* offsets, timestamps (ms → µs, UTC) and the constant columns are numpy arrays;
* headers, only when ``includeHeaders`` asks and only for blocks that have any: with the compiled walker, the
  ``list<struct<key string, value binary>>`` column is built from buffers (``_helpers.header_columns`` gives where each
  header's key and value lie; list offsets from the per-record counts, keys and values as the columns above, keys
  checked as UTF-8 by Arrow): no Python object per record. Batches walked alone by the reference (and header keys
  that are not UTF-8, which the reference decodes with replacement) build theirs from Python lists.

Measured without Spark (decode_block alone; 2 shared cores, noisy): realistic producer data (scripts/realdata.py:
16 KiB batches, keys, one header, half of them lz4 or zstd), no headers asked, ~0.12-0.3 M rows/s on the pure-Python
walkers and ~0.55-0.9 M on the compiled one, where inflating the compressed half is now most of the time; events in
uncompressed 1 MiB batches (what ``append`` stores), ~1.4-2 M and ~10 M rows/s (~5 GB/s of batches).

Columns, names and types are those of Spark's Kafka source: ``key binary, value binary, topic string, partition int,
offset long, timestamp timestamp, timestampType int[, headers array<struct<key string, value binary>>]``; a record
without headers has null ``headers``, as in Spark. The Arrow types are taken from the schema the caller passes
(pyspark's own conversion of the Spark schema), so they always equal what Spark checks.

Threads: any (pure functions of the bytes read).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from logfs.core.cext import CEXT
from logfs.core.errors import CorruptRecord
from logfs.core.format.batch import RECORDS_OFFSET, BatchHeader, TimestampType, iter_batch_positions
from logfs.core.format.columns import RecordColumns
from logfs.core.format.storedpieces import Walked, cut, has_headers, stored_pieces
from logfs.spark.offsets import OffsetRange

READ_BYTES = 4 * 1024 * 1024  # stored bytes per read and per Arrow batch (~40,000 records of 100 bytes)
INT32_MAX = 2**31 - 1

KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
HEADERS_TYPE = pa.list_(pa.field("element", pa.struct([("key", pa.string()), ("value", pa.binary())])))


def kafka_arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema pyspark makes of the Kafka source's Spark schema (UTC timestamps in µs)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


def read_range(f: BinaryIO, rng: OffsetRange, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The records ``[rng.start, rng.end)`` of the open ``.kafka`` file ``f``, one Arrow batch per block read."""
    tail = b""
    while True:
        chunk = f.read(READ_BYTES)
        if not chunk:
            break
        buf = tail + chunk if tail else chunk
        batch, used = decode_block(buf, rng, schema)
        tail = buf[used:]
        if batch is not None:
            yield batch
    if tail:
        raise CorruptRecord(f"the range file of {rng.topic}-{rng.partition} ends inside a batch ({len(tail)} bytes)")


@dataclass
class _WalkedHeaders:
    """The headers of walked records, as the compiled walker left them: where each record's headers begin and how
    many it has, in ``data``."""

    data: bytes
    positions: npt.NDArray[np.int64]
    counts: npt.NDArray[np.int64]


# A run of records' headers: none (how many records), walked (compiled), or Python lists (the reference's).
_HeaderPiece = int | _WalkedHeaders | list[list[tuple[str, bytes | None]] | None]


@dataclass
class _Parts:
    """Column pieces of the selected records of one block, batch by batch."""

    sections: list[bytes | bytearray | memoryview] = field(default_factory=list)
    size: int = 0
    offset: list[npt.NDArray[np.int64]] = field(default_factory=list)
    timestamp: list[npt.NDArray[np.int64]] = field(default_factory=list)
    timestamp_type: list[npt.NDArray[np.int32]] = field(default_factory=list)
    key_position: list[npt.NDArray[np.int64]] = field(default_factory=list)
    key_length: list[npt.NDArray[np.int64]] = field(default_factory=list)
    value_position: list[npt.NDArray[np.int64]] = field(default_factory=list)
    value_length: list[npt.NDArray[np.int64]] = field(default_factory=list)
    headers: list[_HeaderPiece] = field(default_factory=list)
    any_headers: bool = False


def decode_block(buf: bytes, rng: OffsetRange, schema: pa.Schema) -> tuple[pa.RecordBatch | None, int]:
    """The records in ``rng`` of the whole batches at the start of ``buf`` as one Arrow batch (None when there is
    none), and how many bytes of ``buf`` those whole batches take (the rest is an incomplete batch)."""
    want_headers = "headers" in schema.names
    parts = _Parts()
    positions = []
    used = 0
    for position, size in iter_batch_positions(buf):
        positions.append(position)
        used = position + size
    for piece in stored_pieces(buf, positions, rng.start, rng.end):
        if isinstance(piece, Walked):
            _add_walked(parts, piece, rng, want_headers)
        else:
            _add_single(parts, buf, positions[piece.number], piece.header, piece.cols, rng, want_headers)
    if not parts.offset:
        return None, used
    return _record_batch(parts, rng, schema), used


def _add_walked(parts: _Parts, g: Walked, rng: OffsetRange, want_headers: bool) -> None:
    """The records of batches walked together (``storedpieces``) that lie in ``rng``."""
    i0, i1 = cut(g.offsets, rng.start, rng.end)
    if i0 >= i1:
        return
    lay = g.layout
    shift = parts.size
    parts.sections.append(g.data)
    parts.size += len(g.data)
    first = np.array(g.first, dtype=np.int64)
    appended = [h.timestamp_type == TimestampType.LOG_APPEND_TIME for h in g.headers]
    types = np.repeat(np.array(appended, dtype=np.int32), first[1:] - first[:-1])
    parts.offset.append(g.offsets[i0:i1])
    parts.timestamp.append(g.timestamps[i0:i1])
    parts.timestamp_type.append(types[i0:i1])
    parts.key_position.append(lay.key_position[i0:i1] + shift)
    parts.key_length.append(lay.key_length[i0:i1])
    parts.value_position.append(lay.value_position[i0:i1] + shift)
    parts.value_length.append(lay.value_length[i0:i1])
    if want_headers:
        if has_headers(g, i0, i1):
            assert lay.header_position is not None and lay.header_count is not None
            hp = np.ascontiguousarray(lay.header_position[i0:i1])
            parts.headers.append(_WalkedHeaders(g.data, hp, np.ascontiguousarray(lay.header_count[i0:i1])))
            parts.any_headers = True
        else:
            parts.headers.append(i1 - i0)


def _add_single(
    parts: _Parts,
    buf: bytes,
    position: int,
    header: BatchHeader,
    cols: RecordColumns,
    rng: OffsetRange,
    want_headers: bool,
) -> None:
    """The records of one batch walked alone (``storedpieces.Single``) that lie in ``rng``."""
    if not len(cols):
        return
    offsets = header.base_offset + np.asarray(cols.offset_delta, dtype=np.int64)
    keep: npt.NDArray[np.bool_] | None = None
    if header.base_offset < rng.start or header.last_offset >= rng.end:
        keep = (offsets >= rng.start) & (offsets < rng.end)
        if not keep.any():
            return
    # Lay this batch's records section after the previous ones; shift its positions to match.
    if cols.data is buf:
        section_start = position + RECORDS_OFFSET
        parts.sections.append(memoryview(buf)[section_start : position + header.size])
    else:
        section_start = 0
        parts.sections.append(cols.data)
    shift = parts.size - section_start
    parts.size += len(parts.sections[-1])
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        ts = np.full(len(cols), header.max_timestamp, dtype=np.int64)
        ts_type = int(TimestampType.LOG_APPEND_TIME)
    else:
        ts = header.base_timestamp + np.asarray(cols.timestamp_delta, dtype=np.int64)
        ts_type = int(TimestampType.CREATE_TIME)
    columns = [
        offsets,
        ts,
        np.asarray(cols.key_position, dtype=np.int64) + shift,
        np.asarray(cols.key_length, dtype=np.int64),
        np.asarray(cols.value_position, dtype=np.int64) + shift,
        np.asarray(cols.value_length, dtype=np.int64),
    ]
    hdrs = list(cols.headers)
    if keep is not None:
        columns = [c[keep] for c in columns]
        hdrs = [h for h, k in zip(hdrs, keep.tolist(), strict=True) if k]
    parts.offset.append(columns[0])
    parts.timestamp.append(columns[1])
    parts.key_position.append(columns[2])
    parts.key_length.append(columns[3])
    parts.value_position.append(columns[4])
    parts.value_length.append(columns[5])
    parts.timestamp_type.append(np.full(len(columns[0]), ts_type, dtype=np.int32))
    if want_headers:
        parts.headers.append(hdrs)
        parts.any_headers = parts.any_headers or any(hdrs)


def _record_batch(parts: _Parts, rng: OffsetRange, schema: pa.Schema) -> pa.RecordBatch:
    data = b"".join(parts.sections)
    offset = np.concatenate(parts.offset)
    n = len(offset)
    arrays: dict[str, pa.Array] = {
        "key": _binary(data, np.concatenate(parts.key_position), np.concatenate(parts.key_length)),
        "value": _binary(data, np.concatenate(parts.value_position), np.concatenate(parts.value_length)),
        "topic": _repeat_string(rng.topic, n),
        "partition": pa.array(np.full(n, rng.partition, dtype=np.int32), type=pa.int32()),
        "offset": pa.array(offset, type=pa.int64()),
        "timestamp": pa.array(np.concatenate(parts.timestamp) * 1000, type=pa.int64()).cast(
            schema.field("timestamp").type
        ),
        "timestampType": pa.array(np.concatenate(parts.timestamp_type), type=pa.int32()),
    }
    if "headers" in schema.names:
        htype = schema.field("headers").type
        if parts.any_headers:
            pieces = [_headers(piece, htype) for piece in parts.headers]
            arrays["headers"] = pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)
        else:
            arrays["headers"] = pa.nulls(n, type=htype)
    return pa.RecordBatch.from_arrays([arrays[name] for name in schema.names], schema=schema)


def _headers(piece: _HeaderPiece, htype: pa.DataType) -> pa.Array:
    """The ``headers`` column of one run of records (null for a record without headers, as Spark has it)."""
    if isinstance(piece, int):
        return pa.nulls(piece, type=htype)
    if isinstance(piece, _WalkedHeaders):
        walked = _walked_headers(piece, htype)
        if walked is not None:
            return walked
        assert CEXT is not None
        rows = CEXT.header_lists(piece.data, piece.positions, piece.counts, len(piece.counts))
    else:
        rows = piece
    return pa.array([[{"key": k, "value": v} for k, v in h] if h else None for h in rows], type=htype)


def _walked_headers(w: _WalkedHeaders, htype: pa.DataType) -> pa.Array | None:
    """The headers column built from buffers: offsets from the counts, keys and values located by the compiled
    walker and copied as the key and value columns are. None when a header key is not UTF-8 (the reference decodes
    it with replacement: the caller takes the lists' path)."""
    assert CEXT is not None
    n = len(w.counts)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(w.counts, out=offsets[1:])
    total = int(offsets[-1])
    kp, kl, vp, vl = (np.empty(total, dtype=np.int64) for _ in range(4))
    CEXT.header_columns(w.data, w.positions, w.counts, n, kp, kl, vp, vl)
    keys = _binary(w.data, kp, kl).view(pa.string())
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid:
        return None
    entries = pa.StructArray.from_arrays([keys, _binary(w.data, vp, vl)], fields=list(htype.value_type))
    # (int32 list offsets: a block of READ_BYTES holds far fewer than 2**31 headers)
    return pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)), entries, type=htype, mask=pa.array(w.counts == 0)
    )


def _binary(data: bytes, position: npt.NDArray[np.int64], length: npt.NDArray[np.int64]) -> pa.Array:
    """``data[position[i] : position[i] + length[i]]`` for each i as a binary array, null where length is -1.

    Positions must ascend with no overlap (they do: records lie in order in ``data``).
    """
    n = len(position)
    valid = length >= 0
    if not valid.any():
        return pa.nulls(n, type=pa.binary())
    bounds = np.empty(2 * n, dtype=np.int64)
    bounds[0::2] = position
    bounds[1::2] = position + np.maximum(length, 0)
    if len(data) <= INT32_MAX:
        interleaved = pa.Array.from_buffers(
            pa.binary(), 2 * n - 1, [None, pa.py_buffer(bounds.astype(np.int32)), pa.py_buffer(data)]
        )
        values = interleaved.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int32)))
    else:  # over 2 GiB of inflated records in one block: 64-bit offsets, then back to binary
        interleaved = pa.Array.from_buffers(
            pa.large_binary(), 2 * n - 1, [None, pa.py_buffer(bounds), pa.py_buffer(data)]
        )
        values = interleaved.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64))).cast(pa.binary())
    if valid.all():
        return values
    validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    buffers = values.buffers()
    return pa.Array.from_buffers(pa.binary(), n, [validity, buffers[1], buffers[2]], offset=values.offset)


def _repeat_string(text: str, n: int) -> pa.Array:
    raw = text.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int64) * len(raw)
    if offsets[-1] > INT32_MAX:
        return pa.array([text] * n, type=pa.string())
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(raw * n)])
