"""The batches of a span of stored bytes walked for rendering: runs of batches walked together (a :class:`Walked`),
single batches left to the reference.

:func:`stored_pieces` reads every batch header of the span, skips what renders as nothing (control, empty, outside
the offset range, covered by an :class:`~logfs.core.format.abortedbatches.AbortedBatches` filter) and walks the rest:
consecutive uncompressed batches together with ``numpywalk.walk_stored`` (one set of numpy calls for all) or, when
the compiled walker is built, ``numpywalk.walk_stored_c`` (one C walk for all, headers included), a compressed batch
inflated and walked alone. What the walker leaves (headers for numpy, any fault) becomes a
:class:`Single`, which :func:`render_single` renders with the reference (``core/format/render.py``): the same bytes
or the precise error. The plain, JSON-lines and sizing code (``renderstored``, ``storedjsonl``, ``storedsize``)
read a :class:`Walked` through :func:`cut` and :func:`block_runs`. Any thread.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import numpy as np

from logfs.core import cext
from logfs.core.format.abortedbatches import AbortedBatches
from logfs.core.format.batch import RECORDS_OFFSET, BatchHeader, TimestampType, read_header
from logfs.core.format.columns import IntArray, RecordColumns
from logfs.core.format.compression import Compression, decompress
from logfs.core.format.decode import record_columns
from logfs.core.format.numpywalk import StoredLayout, walk_stored, walk_stored_c
from logfs.core.format.records import walk
from logfs.core.format.render import first_index, jsonl_from_columns, plain_from_columns

# Fewer records than this in a uniform batch go through the per-record paths (numpy's fixed cost dominates).
BLOCK_MIN_RECORDS = 8


class Walked(NamedTuple):
    """Consecutive batches walked together by ``numpywalk.walk_stored``: their headers, where each one's records
    begin in the columns, and each record's absolute offset and timestamp (offsets ascend through them)."""

    data: bytes
    headers: list[BatchHeader]
    indexes: list[int]  # of each batch in the positions given
    first: list[int]  # record index where each batch begins, and the total at the end
    layout: StoredLayout
    offsets: IntArray
    timestamps: IntArray


class Single(NamedTuple):
    """A batch the reference renders: its header and its columns from ``decode.record_columns``."""

    header: BatchHeader
    cols: RecordColumns
    number: int  # of the batch in the positions given


def stored_pieces(
    buf: bytes,
    positions: Sequence[int],
    from_offset: int | None,
    until_offset: int | None,
    aborted: AbortedBatches | None = None,
) -> list[Walked | Single]:
    """The batches at ``positions`` of ``buf`` that hold records to render, walked: together where possible.
    ``aborted``: the batches it covers hold none (read_committed)."""
    pieces: list[Walked | Single] = []
    pending: list[tuple[int, BatchHeader]] = []
    sections: list[tuple[int, int, int, int]] = []
    previous_last = None
    # With the compiled walker, a span holding compressed batches is walked in one piece: the records sections of
    # all its batches, inflated or not, laid end to end here (a copy of the uncompressed ones, ~2 µs per 16 KiB),
    # so that a producer's span of small batches costs one walk and one rendering instead of one per batch.
    joined: bytearray | None = None

    def flush() -> None:
        nonlocal joined
        if pending:
            _walk_pending(buf if joined is None else bytes(joined), pending, sections, pieces)
            pending.clear()
            sections.clear()
        joined = None

    def join(records_section: bytes | memoryview, header: BatchHeader) -> None:
        nonlocal joined
        if joined is None:
            joined = bytearray()
            for k, (start, end, count, lod) in enumerate(sections):
                sections[k] = (len(joined), len(joined) + end - start, count, lod)
                joined += memoryview(buf)[start:end]
        at = len(joined)
        sections.append((at, at + len(records_section), header.records_count, header.last_offset_delta))
        joined += records_section

    for index, at in enumerate(positions):
        header = read_header(buf, at)
        if header.is_control or header.records_count == 0:
            continue
        if (until_offset is not None and header.base_offset >= until_offset) or (
            from_offset is not None and header.last_offset < from_offset
        ):
            continue
        if aborted is not None and aborted.covers(header):
            continue
        if at + header.size > len(buf):
            flush()
            pieces.append(Single(*record_columns(buf, at), index))  # raises the reference's error
            continue
        if previous_last is not None and header.base_offset <= previous_last:
            flush()  # offsets must ascend through batches walked together (they do in any log)
        previous_last = header.last_offset
        if header.compression != Compression.NONE:
            data = decompress(header.compression, memoryview(buf)[at + RECORDS_OFFSET : at + header.size])
            if cext.USE_CEXT:
                pending.append((index, header))
                join(data, header)
                continue
            flush()
            section = (0, len(data), header.records_count, header.last_offset_delta)
            _walk_pending(data, [(index, header)], [section], pieces)
            continue
        pending.append((index, header))
        if joined is not None:
            join(memoryview(buf)[at + RECORDS_OFFSET : at + header.size], header)
        else:
            sections.append((at + RECORDS_OFFSET, at + header.size, header.records_count, header.last_offset_delta))
    flush()
    return pieces


def _walk_pending(
    data: bytes,
    batches: list[tuple[int, BatchHeader]],
    sections: list[tuple[int, int, int, int]],
    pieces: list[Walked | Single],
) -> None:
    layout = _walk_stored(data, sections)
    if layout is not None:
        pieces.append(_walked(data, list(batches), layout))
        return
    for batch, section in zip(batches, sections, strict=True):
        single = _walk_stored(data, [section]) if len(batches) > 1 else None
        if single is not None:
            pieces.append(_walked(data, [batch], single))
            continue
        start, end, count, lod = section
        _, cols = walk(data, start, end, count, lod, client=False)
        assert cols is not None
        pieces.append(Single(batch[1], cols, batch[0]))


def _walk_stored(data: bytes, sections: list[tuple[int, int, int, int]]) -> StoredLayout | None:
    """The batches walked together: by the compiled walker when it is in use (records with headers too), else by
    numpy (``numpywalk.walk_stored``: no headers)."""
    if cext.USE_CEXT:
        return walk_stored_c(data, sections, BLOCK_MIN_RECORDS)
    return walk_stored(data, sections)


def has_headers(g: Walked, i0: int, i1: int) -> bool:
    """Does any of the records ``[i0, i1)`` of ``g`` have a header? (Only a compiled walk takes such records.)"""
    counts = g.layout.header_count
    return counts is not None and bool(counts[i0:i1].any())


def _walked(data: bytes, batches: list[tuple[int, BatchHeader]], layout: StoredLayout) -> Walked:
    headers = [h for _, h in batches]
    counts = np.array([h.records_count for h in headers], dtype=np.int64)
    first = [0]
    for h in headers:
        first.append(first[-1] + h.records_count)
    base = np.repeat(np.array([h.base_offset for h in headers], dtype=np.int64), counts)
    offsets = base + layout.offset_delta
    ts_base = np.repeat(np.array([h.base_timestamp for h in headers], dtype=np.int64), counts)
    timestamps = ts_base + layout.timestamp_delta
    appended = [h.timestamp_type == TimestampType.LOG_APPEND_TIME for h in headers]
    if any(appended):
        log_append = np.repeat(np.array(appended), counts)
        max_ts = np.repeat(np.array([h.max_timestamp for h in headers], dtype=np.int64), counts)
        timestamps = np.where(log_append, max_ts, timestamps)
    return Walked(data, headers, [i for i, _ in batches], first, layout, offsets, timestamps)


def cut(offsets: IntArray, from_offset: int | None, until_offset: int | None) -> tuple[int, int]:
    """Record indexes ``[i0, i1)`` of the offsets in ``[from_offset, until_offset)`` (offsets ascend)."""
    i0 = 0 if from_offset is None else int(np.searchsorted(offsets, from_offset, side="left"))
    i1 = len(offsets) if until_offset is None else int(np.searchsorted(offsets, until_offset, side="left"))
    return i0, max(i0, i1)


def block_runs(g: Walked, i0: int, i1: int) -> Iterator[tuple[int, int, int, int] | tuple[None, int, int, int]]:
    """The records ``[i0, i1)`` of ``g`` in order, as ``(run, lo, hi, batch)`` for each block (at least
    BLOCK_MIN_RECORDS records of one layout: size, key and value places and lengths) and ``(None, lo, hi, -1)`` for
    what lies between blocks."""
    lay = g.layout
    rf = lay.run_first
    nruns = len(rf) - 1
    candidates = [
        r for r in range(nruns) if lay.run_step[r] and min(rf[r + 1], i1) - max(rf[r], i0) >= BLOCK_MIN_RECORDS
    ]
    if not candidates:
        yield None, i0, i1, -1
        return
    f = np.array(rf[:-1], dtype=np.int64)
    counts = np.array(rf[1:], dtype=np.int64) - f
    rel_k = lay.key_position - lay.starts
    rel_v = lay.value_position - lay.starts
    same = (rel_v == np.repeat(rel_v[f], counts)) & (lay.value_length == np.repeat(lay.value_length[f], counts))
    same &= (rel_k == np.repeat(rel_k[f], counts)) & (lay.key_length == np.repeat(lay.key_length[f], counts))
    uniform = np.logical_and.reduceat(same, f).tolist()
    pending = i0
    for r in candidates:
        if not uniform[r]:
            continue
        lo, hi = max(rf[r], i0), min(rf[r + 1], i1)
        if pending < lo:
            yield None, pending, lo, -1
        yield r, lo, hi, lay.run_batch[r]
        pending = hi
    if pending < i1:
        yield None, pending, i1, -1


def render_single(
    single: Single, jsonl: bool, topic: str, partition: int, from_offset: int | None, until_offset: int | None
) -> bytes:
    """The reference rendering of one batch cut to ``[from_offset, until_offset)``."""
    header, cols, _ = single
    lo = -1 if from_offset is None else from_offset
    out = jsonl_from_columns(header, cols, topic, partition, lo) if jsonl else plain_from_columns(header, cols, lo)
    if until_offset is None or until_offset > header.last_offset:
        return out
    first = first_index(header, cols, lo)
    stop = max(first, first_index(header, cols, until_offset))
    if not jsonl:
        vl = cols.lists().value_length[first:stop]
        return out[: sum(n for n in vl if n > 0) + (stop - first)]
    end = -1
    for _ in range(stop - first):  # JSON lines hold no raw newline: the n-th b"\n" ends the n-th line
        end = out.index(b"\n", end + 1)
    return out[: end + 1]
