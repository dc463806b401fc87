"""Fast renderings of many stored batches at once, for the mount's readers (spec §4's plain and JSON-lines text).

:mod:`logfs.core.format.render` renders one batch with a loop over its records: the reference. Readers of the mount
render
whole chunks of a segment, so the functions here take every batch of a span of stored bytes at once and give the
reference's bytes (tests/core/format/test_render_stored.py holds them to it on generated batches of every kind):

* :func:`walk_stored` finds every record of every uncompressed batch in the span with one set of numpy calls (a
  compressed batch is inflated and walked alone), the reference walker's checks vectorised; anything it does not
  handle (headers, a fault, varints wider than two bytes for lengths) goes to the reference, batch by batch, which
  gives the same bytes or the precise error.
* A run of records that all have one layout (same size, key and value at the same places, one value length: fixed
  schemas, benchmarks, the `append` of equal lines) renders as one 2-D numpy block: each output line is a row,
  constant text is broadcast into its columns, the values are copied through a strided view of the stored bytes and
  the offsets and timestamps are written as digit columns. JSON lines take that path only when every key and
  value byte is printable ASCII other than ``"`` and ``\\`` (their JSON string is then the bytes in quotes).
  Blocks are written straight into the one output array (no intermediate copies).
* Other records are joined from slices (plain) or formatted per record from the columns (JSON lines, when their
  bytes are that plain ASCII), else encoded field by field as the reference does (UTF-8 text, escapes, base64).

Read-committed renderings (the mount's ``committed/`` views) pass an :class:`AbortedBatches`: a batch it covers
(transactional, and inside an aborted transaction of its producer) is left out like a control batch, before any of
its records is walked. It is one test per batch, made only when such a filter is given, so renderings of partitions
without aborted transactions cost what they did.

Measured on the development machine with 100-byte records in 1,000-record batches: the reference ~2.5 M records/s
plain and ~0.35-0.55 M/s JSON lines; these ~7 M/s plain and ~3 M/s JSON lines, sizes alone ~12 M/s and ~6 M/s.
Any thread may call them.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator, Sequence
from json.encoder import encode_basestring  # the C string encoder that leaves non-ASCII as is
from typing import NamedTuple, TypeAlias

import numpy as np
import numpy.typing as npt

from logfs.core.format.batch import RECORDS_OFFSET, BatchHeader, TimestampType, read_header, record_columns
from logfs.core.format.compression import Compression, decompress
from logfs.core.format.recordruns import RECORD_BODY_MIN_BYTES, RecordRun, chain_records, record_runs
from logfs.core.format.records import IntArray, RecordColumns, decode_keys_and_values, decode_varints, walk
from logfs.core.format.render import (
    first_index,
    json_bytes,
    jsonl_from_columns,
    plain_from_columns,
)
from logfs.core.format.varint import VARINT_MAX_BYTES, VARLONG_MAX_BYTES
from logfs.core.txn.index import AbortedTxn

# Printable ASCII that JSON writes as is (no escape): 0x20-0x7f less '"' and '\\'.
_JSON_PLAIN_BYTES = bytes(b for b in range(0x20, 0x80) if b not in (0x22, 0x5C))
_HIGH_BYTES = bytes(range(0x80, 0x100))  # UTF-8 beyond ASCII, written as is when valid
# Fewer records than this in a uniform batch go through the per-record paths (numpy's fixed cost dominates).
_BLOCK_MIN_RECORDS = 8
_POW10 = np.array([10**k for k in range(19)], dtype=np.int64)
# The constant text of a JSON line, less the lead (topic and partition), the timestamp type and the key and value.
_JSONL_MIDDLE = b',"timestamp":,"timestampType":0,"key":,"value":'
_JSONL_TAIL = b',"headers":[]}\n'


class AbortedBatches:
    """Which stored batches a read_committed reader never sees, besides control batches: a transactional batch whose
    producer has an aborted transaction ``(producer_id, first_offset, last_offset = ABORT marker offset)`` with
    ``first_offset <= base offset <= last_offset`` (a producer has one transaction open at a time, so the batches
    between its first offset and its marker are that transaction's).

    Built from the aborted transactions of a range (``Log.collect_aborted_transactions``), it is right for the
    batches of that range: complete there, and an extra transaction (one outside the range) only ever covers its own
    batches. So a filter collected for a larger range leaves every batch of the smaller one as it was, which is what
    lets an index built with the one be extended with the other. Immutable; any thread.
    """

    __slots__ = ("_by_producer", "_lasts", "_min_first_after", "_set", "transactions")

    def __init__(self, aborted: Sequence[AbortedTxn]) -> None:
        self._set = frozenset(aborted)
        self.transactions = tuple(sorted(self._set, key=lambda t: (t.last_offset, t.producer_id)))
        by_producer: dict[int, tuple[list[int], list[int]]] = {}
        for t in sorted(self.transactions, key=lambda t: (t.producer_id, t.first_offset)):
            firsts, lasts = by_producer.setdefault(t.producer_id, ([], []))
            firsts.append(t.first_offset)
            lasts.append(t.last_offset)
        self._by_producer = by_producer
        # For touches(): marker offsets ascending, and the least first offset of the transactions from each on.
        self._lasts = [t.last_offset for t in self.transactions]
        least = [0] * len(self.transactions)
        running: int | None = None
        for i in range(len(self.transactions) - 1, -1, -1):
            first = self.transactions[i].first_offset
            running = first if running is None else min(running, first)
            least[i] = running
        self._min_first_after = least

    def __bool__(self) -> bool:
        return bool(self.transactions)

    def __len__(self) -> int:
        return len(self.transactions)

    def __repr__(self) -> str:
        return f"AbortedBatches({list(self.transactions)!r})"

    def touches(self, lo: int, hi: int) -> bool:
        """Does any of these transactions overlap offsets ``[lo, hi)`` (so that it may cover a batch there)?
        O(log n)."""
        i = bisect.bisect_left(self._lasts, lo)
        return i < len(self._lasts) and self._min_first_after[i] < hi

    def kept_in(self, other: AbortedBatches, lo: int, hi: int) -> bool:
        """Is every one of these transactions that overlaps ``[lo, hi)`` in ``other`` too? False means the log lost
        an ABORT marker in between (a truncation): what was built with this filter is stale."""
        start = bisect.bisect_left(self._lasts, lo)
        return all(t in other._set for t in self.transactions[start:] if t.first_offset < hi)

    def covers(self, header: BatchHeader) -> bool:
        """Is the batch of ``header`` (not a control batch) one of an aborted transaction?"""
        if not header.is_transactional:
            return False
        found = self._by_producer.get(header.producer_id)
        if found is None:
            return False
        firsts, lasts = found
        i = bisect.bisect_right(firsts, header.base_offset) - 1
        return i >= 0 and header.base_offset <= lasts[i]

    def leaves_out(self, header: BatchHeader) -> bool:
        """Does a read_committed reader skip this batch: a control batch, or one this filter covers?"""
        return header.is_control or self.covers(header)


class StoredLayout(NamedTuple):
    """Where the records of several stored batches lie in one buffer (from :func:`walk_stored`), concatenated batch
    after batch: every column is a numpy array indexed by record. The records also form *runs*, each inside one
    batch: run ``r`` holds records ``run_first[r]`` to ``run_first[r + 1] - 1`` of batch ``run_batch[r]``, each of
    them ``run_step[r]`` bytes long (their starts step evenly), or of varying sizes when ``run_step[r]`` is 0."""

    starts: IntArray
    timestamp_delta: IntArray
    offset_delta: IntArray
    key_position: IntArray
    key_length: IntArray
    value_position: IntArray
    value_length: IntArray
    run_first: list[int]
    run_step: list[int]
    run_batch: list[int]


def walk_stored(data: bytes, sections: Sequence[tuple[int, int, int, int]]) -> StoredLayout | None:
    """The records of several stored batches in ``data`` walked at once, for reading: ``sections`` gives each
    batch's ``(start, end, count, last_offset_delta)`` (its records section, ``count >= 1``). The checks are
    ``records.walk_numpy``'s with the stored-batch rule for offset deltas, vectorised over all the batches together,
    so a span of small batches costs one set of numpy calls rather than one per batch.

    Returns None when any batch holds something left to the reference walker (headers, a varint wider than the fast
    path reads, any fault): the caller then walks the batches one by one with ``records.walk``, which gives the same
    columns or the precise error. Any thread.
    """
    n = len(sections)
    if n == 0:
        return None
    counts = [c for _, _, c, _ in sections]
    total = sum(counts)
    # 1. The record starts, as runs of records of one size (records.record_runs, which checks every length prefix
    #    and counts a run of equal prefixes at C speed). Records of one size (or of a few sizes in long runs: the
    #    offset delta's varint grows at record 64) cost next to nothing. A batch whose sizes vary is chained record
    #    by record instead and kept as one run of step 0 ("not of one size"). The chain ends exactly where each
    #    section ends, or the span goes to the reference.
    run_first: list[int] = []
    run_start: list[int] = []
    run_step: list[int] = []
    run_width: list[int] = []
    run_batch: list[int] = []
    chained: dict[int, list[int]] = {}  # batch → the starts of its records, for batches of varying sizes
    index = 0
    for j, (start, end, count, _) in enumerate(sections):
        if count < 1 or count > (end - start) // (1 + RECORD_BODY_MIN_BYTES):
            return None
        runs = record_runs(data, start, end, count, max_runs=max(4, count // 32))
        if runs is None:
            return None
        if not runs:  # sizes vary: chain this batch record by record, one run of step 0
            chained_batch = chain_records(data, start, end, count)
            if chained_batch is None:
                return None
            chained[j] = chained_batch[0].tolist()
            runs = [RecordRun(start, 0, 0, count)]
        for run in runs:
            run_first.append(index)
            run_start.append(run.start)
            run_step.append(run.step)
            run_width.append(run.head)
            run_batch.append(j)
            index += run.records
    run_first.append(total)
    counts_a = np.array(counts, dtype=np.int64)
    first = np.cumsum(counts_a) - counts_a  # each batch's first record
    last = first + counts_a - 1
    batch_end = max(e for _, e, _, _ in sections)
    buf = np.frombuffer(data, dtype=np.uint8, count=batch_end)
    if not chained:
        bounds = np.array(run_first, dtype=np.int64)
        run_len = bounds[1:] - bounds[:-1]
        within = np.arange(total, dtype=np.int64) - np.repeat(bounds[:-1], run_len)
        steps = np.repeat(np.array(run_step, dtype=np.int64), run_len)
        s = np.repeat(np.array(run_start, dtype=np.int64), run_len) + within * steps
        ends = s + steps
        body = s + np.repeat(np.array(run_width, dtype=np.int64), run_len)
    else:
        every: list[int] = []
        for r, step in enumerate(run_step):
            if step:
                every.extend(range(run_start[r], run_start[r] + step * (run_first[r + 1] - run_first[r]), step))
            else:
                every.extend(chained[run_batch[r]])
        s = np.array(every, dtype=np.int64)
        body = s + 1 + (buf[s] >= 0x80)
        ends = np.empty_like(s)
        ends[:-1] = s[1:]
        ends[last] = np.array([e for _, e, _, _ in sections], dtype=np.int64)
    # 3. Every field of every record at once.
    p = body + 1
    ts_delta, p = decode_varints(buf, p, VARLONG_MAX_BYTES)
    if ts_delta is None:
        return None
    od, p = decode_varints(buf, p, VARINT_MAX_BYTES)
    if od is None:
        return None
    lod = np.array([d for _, _, _, d in sections], dtype=np.int64)
    if bool((od[first] < 0).any()) or bool((od > np.repeat(lod, counts_a)).any()):
        return None
    if total > 1:
        rising = np.diff(od) > 0
        rising[last[:-1]] = True  # a batch's first delta is not compared with the previous batch's last
        if not bool(rising.all()):
            return None
    key_value = decode_keys_and_values(buf, p, ends)
    if key_value is None:
        return None  # a header count other than zero (or a fault): the reference renders headers
    key_pos, key_len, value_pos, value_len = key_value
    return StoredLayout(s, ts_delta, od, key_pos, key_len, value_pos, value_len, run_first, run_step, run_batch)


class _Group(NamedTuple):
    """Consecutive batches walked together by :func:`walk_stored`: their headers, where each one's records begin in
    the columns, and each record's absolute offset and timestamp (offsets ascend through the group)."""

    data: bytes
    headers: list[BatchHeader]
    indexes: list[int]  # of each batch in the positions given
    first: list[int]  # record index where each batch begins, and the total at the end
    layout: StoredLayout
    offsets: IntArray
    timestamps: IntArray


class _Single(NamedTuple):
    """A batch the reference renders: its header and its columns from ``batch.record_columns``."""

    header: BatchHeader
    cols: RecordColumns
    number: int  # of the batch in the positions given


def _stored_pieces(
    buf: bytes,
    positions: Sequence[int],
    from_offset: int | None,
    until_offset: int | None,
    aborted: AbortedBatches | None = None,
) -> list[_Group | _Single]:
    """The batches at ``positions`` of ``buf`` that hold records to render, walked: fast groups where possible.
    ``aborted``: the batches it covers hold none (read_committed)."""
    pieces: list[_Group | _Single] = []
    pending: list[tuple[int, BatchHeader]] = []
    sections: list[tuple[int, int, int, int]] = []
    previous_last = None

    def flush() -> None:
        if pending:
            _walk_pending(buf, pending, sections, pieces)
            pending.clear()
            sections.clear()

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
            pieces.append(_Single(*record_columns(buf, at), index))  # raises the reference's error
            continue
        if header.compression != Compression.NONE:
            flush()
            data = decompress(header.compression, memoryview(buf)[at + RECORDS_OFFSET : at + header.size])
            section = (0, len(data), header.records_count, header.last_offset_delta)
            _walk_pending(data, [(index, header)], [section], pieces)
            previous_last = header.last_offset
            continue
        if previous_last is not None and header.base_offset <= previous_last:
            flush()  # offsets must ascend through a group (they do in any log)
        pending.append((index, header))
        sections.append((at + RECORDS_OFFSET, at + header.size, header.records_count, header.last_offset_delta))
        previous_last = header.last_offset
    flush()
    return pieces


def _walk_pending(
    data: bytes,
    batches: list[tuple[int, BatchHeader]],
    sections: list[tuple[int, int, int, int]],
    pieces: list[_Group | _Single],
) -> None:
    layout = walk_stored(data, sections)
    if layout is not None:
        pieces.append(_group(data, list(batches), layout))
        return
    for batch, section in zip(batches, sections, strict=True):
        single = walk_stored(data, [section]) if len(batches) > 1 else None
        if single is not None:
            pieces.append(_group(data, [batch], single))
            continue
        start, end, count, lod = section
        _, cols = walk(data, start, end, count, lod, client=False)
        assert cols is not None
        pieces.append(_Single(batch[1], cols, batch[0]))


def _group(data: bytes, batches: list[tuple[int, BatchHeader]], layout: StoredLayout) -> _Group:
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
    return _Group(data, headers, [i for i, _ in batches], first, layout, offsets, timestamps)


def _cut(offsets: IntArray, from_offset: int | None, until_offset: int | None) -> tuple[int, int]:
    """Record indexes ``[i0, i1)`` of the offsets in ``[from_offset, until_offset)`` (offsets ascend)."""
    i0 = 0 if from_offset is None else int(np.searchsorted(offsets, from_offset, side="left"))
    i1 = len(offsets) if until_offset is None else int(np.searchsorted(offsets, until_offset, side="left"))
    return i0, max(i0, i1)


def _block_runs(g: _Group, i0: int, i1: int) -> Iterator[tuple[int, int, int, int] | tuple[None, int, int, int]]:
    """The records ``[i0, i1)`` of ``g`` in order, as ``(run, lo, hi, batch)`` for each block (at least
    _BLOCK_MIN_RECORDS records of one layout: size, key and value places and lengths) and ``(None, lo, hi, -1)`` for
    what lies between blocks."""
    lay = g.layout
    rf = lay.run_first
    nruns = len(rf) - 1
    candidates = [
        r for r in range(nruns) if lay.run_step[r] and min(rf[r + 1], i1) - max(rf[r], i0) >= _BLOCK_MIN_RECORDS
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


def _strided(arr: npt.NDArray[np.uint8], position: int, rows: int, width: int, step: int) -> npt.NDArray[np.uint8]:
    """Rows of ``width`` bytes from ``position`` on, ``step`` bytes apart: a view, no copy."""
    return np.lib.stride_tricks.as_strided(arr[position:], shape=(rows, width), strides=(step, 1), writeable=False)


def _batch_ranges(g: _Group, i0: int, i1: int) -> Iterator[tuple[int, int, int]]:
    """``(batch number, lo, hi)`` of each batch's records within ``[i0, i1)``, in order."""
    for j in range(len(g.headers)):
        lo, hi = max(g.first[j], i0), min(g.first[j + 1], i1)
        if lo < hi:
            yield j, lo, hi


def _reference(
    single: _Single, jsonl: bool, topic: str, partition: int, from_offset: int | None, until_offset: int | None
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


def render_stored(
    buf: bytes,
    positions: Sequence[int],
    jsonl: bool,
    topic: str,
    partition: int,
    from_offset: int | None = None,
    until_offset: int | None = None,
    aborted: AbortedBatches | None = None,
) -> bytes | memoryview:
    """The plain (or JSON-lines) rendering of the whole batches at ``positions`` of ``buf``, in order, each cut to
    the records with offsets in ``[from_offset, until_offset)`` (None: unbounded): byte for byte what rendering
    each batch with :func:`render_plain` / :func:`render_jsonl` and cutting it gives. The batches ``aborted``
    covers render as nothing (read_committed). Any thread."""
    parts: list[_Part] = []
    for piece in _stored_pieces(buf, positions, from_offset, until_offset, aborted):
        if isinstance(piece, _Single):
            parts.append(_reference(piece, jsonl, topic, partition, from_offset, until_offset))
            continue
        i0, i1 = _cut(piece.offsets, from_offset, until_offset)
        if i0 < i1:
            if jsonl:
                _jsonl_group(piece, i0, i1, topic, partition, parts)
            else:
                _plain_group(piece, i0, i1, parts)
    return _assemble(parts)


class _PlainBlock(NamedTuple):
    """Plain lines still to write: ``rows`` values of ``width`` bytes, ``step`` bytes apart from ``position`` of
    ``source``, each followed by a newline. Written straight into the output (no intermediate array)."""

    source: npt.NDArray[np.uint8]
    position: int
    rows: int
    width: int
    step: int

    @property
    def nbytes(self) -> int:
        return self.rows * (self.width + 1)


_Part: TypeAlias = "bytes | npt.NDArray[np.uint8] | _PlainBlock | _Rows"


def _assemble(parts: list[_Part]) -> bytes | memoryview:
    """The parts one after the other: bytes, byte matrices (row after row) and plain blocks written in place."""
    if len(parts) == 1 and isinstance(parts[0], bytes):
        return parts[0]
    if not any(isinstance(p, (_PlainBlock, _Rows)) for p in parts):
        return b"".join(parts)  # type: ignore[arg-type]  # (numpy arrays are buffers)
    out = np.empty(sum(len(p) if isinstance(p, bytes) else p.nbytes for p in parts), dtype=np.uint8)
    at = 0
    for p in parts:
        if isinstance(p, _PlainBlock):
            rows = out[at : at + p.nbytes].reshape(p.rows, p.width + 1)
            if p.width:
                rows[:, : p.width] = _strided(p.source, p.position, p.rows, p.width, p.step)
            rows[:, p.width] = 0x0A
            at += p.nbytes
        elif isinstance(p, _Rows):
            p.write(out[at : at + p.nbytes])
            at += p.nbytes
        elif isinstance(p, bytes):
            out[at : at + len(p)] = np.frombuffer(p, dtype=np.uint8)
            at += len(p)
        else:
            out[at : at + p.nbytes] = p.reshape(-1)
            at += p.nbytes
    return out.data


def stored_size(
    buf: bytes,
    positions: Sequence[int],
    jsonl: bool,
    topic: str,
    partition: int,
    from_offset: int | None = None,
    until_offset: int | None = None,
    aborted: AbortedBatches | None = None,
) -> int:
    """``len(render_stored(...))``, computed from the columns where the format allows (plain text always; JSON lines
    when the keys and values need no escaping), nothing joined."""
    total = 0
    for piece in _stored_pieces(buf, positions, from_offset, until_offset, aborted):
        if isinstance(piece, _Single):
            total += len(_reference(piece, jsonl, topic, partition, from_offset, until_offset))
            continue
        i0, i1 = _cut(piece.offsets, from_offset, until_offset)
        if i0 < i1:
            total += int(_record_sizes(piece, i0, i1, jsonl, topic, partition).sum())
    return total


def stored_sizes(
    buf: bytes,
    positions: Sequence[int],
    jsonl: bool,
    topic: str,
    partition: int,
    aborted: AbortedBatches | None = None,
) -> list[int]:
    """The size of the whole rendering of each batch at ``positions`` (0 for control and empty batches, and for
    those ``aborted`` covers), all walked at once: what an index of rendered sizes needs. Any thread."""
    sizes = [0] * len(positions)
    for piece in _stored_pieces(buf, positions, None, None, aborted):
        if isinstance(piece, _Single):
            sizes[piece.number] = len(_reference(piece, jsonl, topic, partition, None, None))
            continue
        per_record = _record_sizes(piece, 0, piece.first[-1], jsonl, topic, partition)
        per_batch = np.add.reduceat(per_record, np.array(piece.first[:-1], dtype=np.int64))
        for index, size in zip(piece.indexes, per_batch.tolist(), strict=True):
            sizes[index] = size
    return sizes


def _record_sizes(g: _Group, i0: int, i1: int, jsonl: bool, topic: str, partition: int) -> IntArray:
    """The rendered size of each record ``i0…i1-1`` of ``g``."""
    lay = g.layout
    if not jsonl:
        return np.maximum(lay.value_length[i0:i1], 0) + 1
    lead = _lead(topic, partition)
    if int(g.timestamps[i0:i1].min()) >= 0 and all(
        _json_plain(g, lo, hi, None if run is None else lay.run_step[run]) for run, lo, hi, _ in _block_runs(g, i0, i1)
    ):
        # Every key and value is its bytes in quotes (or null): each line's length is a sum of column lengths.
        kl, vl = lay.key_length[i0:i1], lay.value_length[i0:i1]
        fixed = len(lead) + len(_JSONL_MIDDLE) + len(_JSONL_TAIL)
        return (
            fixed
            + _width(g.offsets[i0:i1])
            + _width(g.timestamps[i0:i1])
            + np.where(kl < 0, 4, kl + 2)
            + np.where(vl < 0, 4, vl + 2)
        )
    parts: list[_Part] = []
    _jsonl_group(g, i0, i1, topic, partition, parts)
    ends = np.flatnonzero(np.frombuffer(_assemble(parts), dtype=np.uint8) == 0x0A)  # JSON lines hold no raw newline
    return np.diff(ends, prepend=-1)


def _width(values: IntArray) -> IntArray:
    """Decimal digits of each non-negative value."""
    return np.maximum(np.searchsorted(_POW10, values, side="right"), 1)


# --- plain ---


def _plain_group(g: _Group, i0: int, i1: int, parts: list[_Part]) -> None:
    arr = np.frombuffer(g.data, dtype=np.uint8)
    lay = g.layout
    for run, lo, hi, _ in _block_runs(g, i0, i1):
        if run is None:
            parts.append(_plain_joined(g, lo, hi))
        else:
            width = max(int(lay.value_length[lo]), 0)
            parts.append(_PlainBlock(arr, int(lay.value_position[lo]), hi - lo, width, lay.run_step[run]))


def _plain_joined(g: _Group, lo: int, hi: int) -> bytes:
    starts = g.layout.value_position[lo:hi]
    ends = starts + np.maximum(g.layout.value_length[lo:hi], 0)
    data = g.data
    values = [data[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    values.append(b"")
    return b"\n".join(values)


# --- JSON lines ---


def _jsonl_group(g: _Group, i0: int, i1: int, topic: str, partition: int, parts: list[_Part]) -> None:
    lead = _lead(topic, partition)
    pending = i0  # records [pending, lo) wait to be formatted one by one
    for run, lo, hi, batch in _block_runs(g, i0, i1):
        block = None if run is None else _jsonl_block(g, batch, g.layout.run_step[run], lo, hi, lead)
        if not isinstance(block, list):
            continue
        if pending < lo:
            parts.append(_jsonl_records(g, pending, lo, lead))
        parts.extend(block)
        pending = hi
    if pending < i1:
        parts.append(_jsonl_records(g, pending, i1, lead))


def _lead(topic: str, partition: int) -> bytes:
    """The start of every JSON line of a partition, up to its offset."""
    return ('{"topic":' + encode_basestring(topic) + ',"partition":' + str(partition) + ',"offset":').encode()


def _json_plain(g: _Group, lo: int, hi: int, step: int | None) -> bool:
    """Is every key and value of records ``lo…hi-1`` its JSON string text in quotes? ``step``: they form one block
    of records that many bytes apart (checked through strided views, for plain ASCII only), else they are gathered
    and checked (:func:`_unescaped`)."""
    lay = g.layout
    if step is not None:
        arr = np.frombuffer(g.data, dtype=np.uint8)
        n = hi - lo
        kl, vl = int(lay.key_length[lo]), int(lay.value_length[lo])
        return (kl < 0 or _plain_ascii(_strided(arr, int(lay.key_position[lo]), n, kl, step))) and (
            vl < 0 or _plain_ascii(_strided(arr, int(lay.value_position[lo]), n, vl, step))
        )
    data = g.data
    spans = [
        (p, p + n)
        for ps, ns in ((lay.key_position, lay.key_length), (lay.value_position, lay.value_length))
        for p, n in zip(ps[lo:hi].tolist(), ns[lo:hi].tolist(), strict=True)
        if n > 0
    ]
    return _unescaped([data[a:b] for a, b in spans])


def _unescaped(texts: list[bytes]) -> bool:
    """Is each of these keys and values its own JSON string text (in quotes)? True when no byte needs an escape
    (none below 0x20, no ``"`` or ``\\``) and each is valid UTF-8: the reference then writes its bytes as they
    are (``encode_basestring`` leaves non-ASCII text alone)."""
    text = b"".join(texts)
    rest = text.translate(None, _JSON_PLAIN_BYTES)  # what is not printable ASCII
    if not rest:
        return True
    if rest.translate(None, _HIGH_BYTES):
        return False  # control bytes, quotes or backslashes
    try:
        for t in texts:
            t.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _plain_ascii(view: npt.NDArray[np.uint8]) -> bool:
    """Are all these bytes JSON-plain (printable ASCII but ``"`` and ``\\``)? (A contiguous copy first: numpy's
    reductions run several times faster on it than on a strided view.)"""
    if view.size == 0:
        return True
    c = np.ascontiguousarray(view)
    return bool(c.min() >= 0x20 and c.max() < 0x80 and not (c == 0x22).any() and not (c == 0x5C).any())


def _jsonl_block(
    g: _Group, j: int, step: int, lo: int, hi: int, lead: bytes, *, size_only: bool = False
) -> list[_Rows] | int | None:
    """Records ``lo…hi-1`` of batch ``j`` (one layout, ``step`` bytes each) as rows of one matrix per digit width
    (or, ``size_only``, the size of those rows), or None when their keys or values need escaping or encoding, or a
    timestamp is negative (the per-record paths handle those)."""
    lay = g.layout
    arr = np.frombuffer(g.data, dtype=np.uint8)
    n = hi - lo
    kl, vl = int(lay.key_length[lo]), int(lay.value_length[lo])
    keys = _strided(arr, int(lay.key_position[lo]), n, kl, step) if kl >= 0 else None
    values = _strided(arr, int(lay.value_position[lo]), n, vl, step) if vl >= 0 else None
    if (keys is not None and not _plain_ascii(keys)) or (values is not None and not _plain_ascii(values)):
        return None
    offsets, timestamps = g.offsets[lo:hi], g.timestamps[lo:hi]
    if int(timestamps.min()) < 0:
        return None
    w_off = np.maximum(np.searchsorted(_POW10, offsets, side="right"), 1)
    w_ts = np.maximum(np.searchsorted(_POW10, timestamps, side="right"), 1)
    ts_type = b"1" if g.headers[j].timestamp_type == TimestampType.LOG_APPEND_TIME else b"0"
    # One row: lead, offset, ',"timestamp":', timestamp, ',"timestampType":T,"key":', key, ',"value":', value, tail.
    pieces: list[bytes | IntArray | npt.NDArray[np.uint8]] = [
        lead,
        offsets,
        b',"timestamp":',
        timestamps,
        b',"timestampType":' + ts_type + b',"key":',
    ]
    pieces += [b"null"] if keys is None else [b'"', keys, b'"']
    pieces.append(b',"value":')
    pieces += [b"null"] if values is None else [b'"', values, b'"']
    pieces.append(b',"headers":[]}\n')
    if size_only:
        fixed = sum(
            len(p) if isinstance(p, bytes) else p.shape[1] for p in pieces if isinstance(p, bytes) or p.ndim == 2
        )
        return n * fixed + int(w_off.sum()) + int(w_ts.sum())
    cuts = [0, *(np.flatnonzero(np.diff(w_off * 32 + w_ts)) + 1).tolist(), n]
    if len(cuts) > 2 + n // _BLOCK_MIN_RECORDS:
        return None
    return [
        _rows([p if isinstance(p, bytes) else p[a:b] for p in pieces], int(w_off[a]), int(w_ts[a]))
        for a, b in itertools.pairwise(cuts)
    ]


class _Rows(NamedTuple):
    """Lines still to write, one row per record, all as long: a ``template`` row (the constant text, and the digits
    the numbers share at their head) broadcast to every row, then ``fills``: ``(column, what, k)`` writes the byte
    matrix ``what`` at ``column`` (k = -1) or the last ``k`` digits of the numbers ``what``. Written straight into
    the output."""

    template: bytes
    fills: list[tuple[int, IntArray | npt.NDArray[np.uint8], int]]
    rows: int

    @property
    def nbytes(self) -> int:
        return self.rows * len(self.template)

    def write(self, out: npt.NDArray[np.uint8]) -> None:
        rows = out.reshape(self.rows, len(self.template))
        rows[:] = np.frombuffer(self.template, dtype=np.uint8)
        for column, what, k in self.fills:
            if k < 0:
                if what.shape[1]:
                    rows[:, column : column + what.shape[1]] = what
                continue
            rest = what
            for i in range(k - 1, -1, -1):
                rest, digit = np.divmod(rest, 10)
                rows[:, column + i] = digit + 0x30


def _rows(pieces: list[bytes | IntArray | npt.NDArray[np.uint8]], *widths: int) -> _Rows:
    """One row per record from constant ``bytes`` pieces, numbers (1-D, one per row, each as many digits as the next
    of ``widths``) and byte matrices (2-D, one row per record), side by side."""
    template = bytearray()
    fills: list[tuple[int, IntArray | npt.NDArray[np.uint8], int]] = []
    digit_widths = iter(widths)
    n = 0
    for p in pieces:
        if isinstance(p, bytes):
            template += p
            continue
        n = len(p)
        if p.ndim == 2:
            fills.append((len(template), p, -1))
            template += bytes(p.shape[1])
            continue
        width = next(digit_widths)
        low, high = int(p.min()), int(p.max())
        k = 0  # the last k digits differ between the numbers; the others are the same for all
        while k < width and low // 10**k != high // 10**k:
            k += 1
        head = low // 10**k
        if k < width:
            template += str(head).encode()
        fills.append((len(template), p - head * 10**k if k else p, k))
        template += bytes(k)
    return _Rows(bytes(template), fills, n)


def _jsonl_records(g: _Group, lo: int, hi: int, lead: bytes) -> bytes:
    """Records ``lo…hi-1`` of ``g`` formatted one by one: bytes formatting when no key or value needs escaping or
    base64 (:func:`_unescaped`), else the reference's per-field encoding."""
    lay = g.layout
    data = g.data
    kps, kls = lay.key_position[lo:hi].tolist(), lay.key_length[lo:hi].tolist()
    vps, vls = lay.value_position[lo:hi].tolist(), lay.value_length[lo:hi].tolist()
    keys = [None if n < 0 else data[p : p + n] for p, n in zip(kps, kls, strict=True)]
    values = [None if n < 0 else data[p : p + n] for p, n in zip(vps, vls, strict=True)]
    offsets, timestamps = g.offsets[lo:hi].tolist(), g.timestamps[lo:hi].tolist()
    types = []
    for j, a, b in _batch_ranges(g, lo, hi):
        t = b"1" if g.headers[j].timestamp_type == TimestampType.LOG_APPEND_TIME else b"0"
        types += [t] * (b - a)
    if _unescaped([k for k in keys if k] + [v for v in values if v]):
        keys_j = [b"null" if k is None else b'"' + k + b'"' for k in keys]
        values_j = [b"null" if v is None else b'"' + v + b'"' for v in values]
        return b"".join(
            [
                b'%b%d,"timestamp":%d,"timestampType":%b,"key":%b,"value":%b,"headers":[]}\n' % fields
                for fields in zip(
                    itertools.repeat(lead, hi - lo), offsets, timestamps, types, keys_j, values_j, strict=False
                )
            ]
        )
    lead_s = lead.decode()
    lines = [
        lead_s
        + str(o)
        + ',"timestamp":'
        + str(t)
        + ',"timestampType":'
        + tt.decode()
        + ',"key":'
        + json_bytes(k, "key")
        + ',"value":'
        + json_bytes(v, "value")
        + ',"headers":[]}\n'
        for o, t, tt, k, v in zip(offsets, timestamps, types, keys, values, strict=True)
    ]
    return "".join(lines).encode("utf-8")
