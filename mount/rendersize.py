"""Rendered sizes of stored batches, and the index that finds any byte of a rendering without rendering up to it.

The problem (spec §5). A file under ``at/`` or ``hw/`` reports its exact size at lookup (``stat``; Spark plans its
splits from it, ``tail -f`` polls it) and serves reads at any byte position. Its bytes are the plain or JSON-lines
rendering of stored batches (``core/format/renderstored.py``), which is a pure function of those bytes: a batch's
rendered size
never changes once computed, so it is computed once and kept.

Rules:

* Rendering of a range ``[start, end)`` is the concatenation, batch by batch, of each batch's records with offsets in
  ``[start, end)``. Only the first batch can hold records below ``start`` and only the last records at or after
  ``end``; every batch in between renders *whole*, so its size does not depend on the range.
* The index is kept per segment (and format, and for JSON lines per topic and partition, which every line names).
  It cuts the segment's ``.log`` into *chunks*: runs of whole batches of at least ``chunk_bytes`` (64 KiB) stored
  bytes, each with the rendered size of all its batches. A chunk, not a batch, is one entry: a partition written one
  record per batch (``echo >> append``) has ~15 M batches per GiB, which no per-batch table could keep; chunks give
  16,384 entries per GiB whatever the batch size (fewer when batches are larger than a chunk: then a chunk is a
  batch).
* Entries form *runs* of adjacent chunks, each with prefix sums of the rendered sizes (``cum``), so a byte position
  of a view is found by bisection: O(log n) per seek. A run starts where a view first needed it (so a view near the
  end of a 1 GiB segment does not render the segment's start) and grows forward as views need more; a run that grows
  into the next run merges with it. Only whole chunks are indexed, so the active segment's index grows in steps of
  ``chunk_bytes`` as the HW moves rather than in one tiny entry per lookup; a closed segment's last, shorter chunk is
  indexed too.
* What the index does not cover — a view's first and last partial batch, and the few KiB after the last whole chunk
  of an active segment — is rendered at open (at most about one chunk and two batches per view) and its size kept in
  a small per-segment table keyed by the bounds, so a repeated lookup of the same name renders nothing.
* Views hold *snapshots* of runs (the arrays and a slice of chunk numbers): growth appends to the arrays and never
  changes an entry below the end; a merge builds new arrays. So a view reads without any lock, and an open view's
  bytes never change.
* Rendered bytes of recently read chunks are shared by all views in a byte-bounded LRU (64 MiB): a sequential
  reader's view renders the chunks ahead of its read (READ_AHEAD_BYTES of stored bytes, in one call) and keeps them
  here for its next reads, and readers of the same data share them.
* Sizes and renderings come from ``core.render`` (``stored_sizes``, ``render_stored``), which walks every batch of
  a buffer at once (vectorised) and gives the same bytes as rendering each batch alone.

Read-committed views (``committed/``). A segment whose batches include aborted transactions gets a second index,
keyed apart (``committed=True``) with a token of its own, that sizes and renders those batches as nothing through an
``core.renderstored.AbortedBatches`` filter. The filter is only known to be right below the last stable offset of the
lookup that built it (past it, a transaction may still abort); so is everything the index holds, because views never
reach past the LSO. As the LSO moves, :meth:`SegmentIndex.admit` takes the filter of the larger range. Each abort in a
filter covers only real batches of an aborted transaction, and the old filter already held every abort covering a
batch below the old bound, so the new one changes no entry below it: the index is extended, not rebuilt, like the
active segment's (unless a truncation took away an ABORT marker the old filter knew: then it starts over). Segments
without aborted transactions use the ordinary index: their committed views are the same bytes. ``.kafka`` views
leave out whole batches instead (:class:`LeftOutBatches`: the byte spans of a segment's control batches and aborted
batches, found by one walk of the batch headers).

Memory is bounded by ``max_entries`` chunks in all (one million: ~16 MB of arrays, covering ~64 GiB of stored
batches), evicted a whole segment index at a time, least recently used first; evicting never disturbs an open view.

Staleness. Positions in a ``.log`` only change when a segment is truncated (a follower's truncation to a leader's
epoch end offset). Each segment index remembers the header of the last batch it indexed and checks it (one 21-byte
pread) before each use: a truncation makes it start over. A view opened *before* a truncation that cuts below its
end cannot keep its promise: its reads fail with StorageError (rendered sizes no longer match) rather than return
different bytes.

Threads: every function and method may be called from any thread. Building an index is serialised per segment (a
second opener waits for the first instead of rendering the same batches); reads take no lock but the LRU's.
"""

from __future__ import annotations

import bisect
import enum
import itertools
import threading
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from logfs.core.errors import StorageError
from logfs.core.format.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    CRC_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    TRANSACTIONAL_MASK,
    iter_batch_positions,
    read_header,
)
from logfs.core.format.renderstored import AbortedBatches, render_stored, stored_size, stored_sizes
from logfs.core.log.logfile import LogFile
from logfs.core.log.segment import LogSegment

# --- limits ---------------------------------------------------------------------------------------------------------

# Stored bytes per index entry. A read at a random byte renders one chunk (or one batch when batches are larger),
# so this sets the cost of a seek; the table costs 16,384 entries per GiB of log. Measured (scripts/bench_views.py,
# 100-byte records in 100-record batches): random 4 KiB reads 411/s plain and 175/s JSON lines with 256 KiB chunks,
# 1,579/s and 584/s with 64 KiB; sequential reads the same either way.
CHUNK_BYTES_DEFAULT = 64 * 1024
# Chunks kept in all (two 8-byte integers each, ~16 MB): ~64 GiB of log indexed at the default chunk size.
MAX_ENTRIES_DEFAULT = 1_000_000
# Rendered bytes of recently read chunks, shared by all views.
RENDERED_BYTES_DEFAULT = 64 * 1024 * 1024
# Sizes of partial pieces (a view's first and last batch, an active segment's unindexed tail) kept per segment index.
PIECE_SIZES_PER_SEGMENT = 256
# Segments whose left-out batches (committed .kafka views) are remembered.
LEFT_OUT_SEGMENTS = 4096
# Stored bytes a sequential reader's view renders in one call when a read misses the LRU: the chunks after the one
# read are rendered with it and kept for the reads that follow (one walk of their records, not one a chunk).
READ_AHEAD_BYTES = 1024 * 1024
# One pread while scanning batches to index them: large enough that syscalls vanish, small enough to bound memory.
SCAN_READ_BYTES = 1024 * 1024

assert CHUNK_BYTES_DEFAULT <= SCAN_READ_BYTES

_tokens = itertools.count(1)
_ATTRIBUTES_LOW = ATTRIBUTES_OFFSET + 1  # the low byte of the big-endian attributes, which holds both flags
_TRANSACTIONAL_OR_CONTROL = TRANSACTIONAL_MASK | CONTROL_MASK


class Format(enum.Enum):
    """The renderings a view can have (spec §4); the value is the name suffix under ``at/`` and ``follow/``."""

    PLAIN = ""  # values one per line
    JSONL = ".jsonl"  # JSON lines
    KAFKA = ".kafka"  # the stored RecordBatch bytes, whole batches (the first may hold records before start)


# --- rendering one batch and a span of batches -----------------------------------------------------------------------


def render_batch(
    buf: bytes, at: int, fmt: Format, topic: str, partition: int, from_offset: int | None, until_offset: int | None
) -> bytes | memoryview:
    """The rendering of the records of the batch at ``buf[at:]`` with offsets in ``[from_offset, until_offset)``
    (None: unbounded on that side). Control batches render as nothing. Not for KAFKA."""
    return render_batches(buf, [at], fmt, topic, partition, from_offset, until_offset)


def render_batches(
    buf: bytes,
    positions: list[int],
    fmt: Format,
    topic: str,
    partition: int,
    from_offset: int | None = None,
    until_offset: int | None = None,
    aborted: AbortedBatches | None = None,
) -> bytes | memoryview:
    """The renderings of the whole batches at ``positions`` of ``buf``, concatenated, each cut to ``[from_offset,
    until_offset)``: all of them at once (``core.renderstored.render_stored``); those ``aborted`` covers render as
    nothing. Not for KAFKA."""
    return render_stored(buf, positions, fmt is Format.JSONL, topic, partition, from_offset, until_offset, aborted)


def batches_rendered_size(
    buf: bytes,
    positions: list[int],
    fmt: Format,
    topic: str,
    partition: int,
    from_offset: int | None = None,
    until_offset: int | None = None,
    aborted: AbortedBatches | None = None,
) -> int:
    """``len(render_batches(...))``; plain text from the value lengths alone. Not for KAFKA."""
    return stored_size(buf, positions, fmt is Format.JSONL, topic, partition, from_offset, until_offset, aborted)


def batch_rendered_size(
    buf: bytes, at: int, fmt: Format, topic: str, partition: int, from_offset: int | None, until_offset: int | None
) -> int:
    """``len(render_batch(...))``; for plain text computed from the value lengths alone (no bytes are joined)."""
    if fmt is Format.KAFKA:
        return read_header(buf, at).size
    return batches_rendered_size(buf, [at], fmt, topic, partition, from_offset, until_offset)


def batch_sizes(
    buf: bytes,
    positions: list[int],
    fmt: Format,
    topic: str,
    partition: int,
    aborted: AbortedBatches | None = None,
) -> list[int]:
    """The rendered size of each whole batch at ``positions`` of ``buf`` (0 for those ``aborted`` covers), all walked
    at once. Not for KAFKA."""
    return stored_sizes(buf, positions, fmt is Format.JSONL, topic, partition, aborted)


def iter_stored_batches(log_file: LogFile, lo: int, hi: int) -> Iterator[tuple[bytes, int, int, int]]:
    """``(buffer, at, size, position)`` of each batch in ``[lo, hi)`` of a ``.log`` (both batch boundaries), read in
    pieces of SCAN_READ_BYTES (or one whole batch when it is larger). StorageError if the bytes are not there."""
    position = lo
    while position < hi:
        buf = log_file.read(position, min(SCAN_READ_BYTES, hi - position))
        used = 0
        for at, size in iter_batch_positions(buf):
            yield buf, at, size, position + at
            used = at + size
        if used == 0:
            declared = int.from_bytes(buf[LENGTH_OFFSET:LOG_OVERHEAD], "big", signed=True) + LOG_OVERHEAD
            if len(buf) < LOG_OVERHEAD or declared <= len(buf) or position + declared > hi:
                raise StorageError(
                    f"{log_file.path}: no whole batch at byte {position} before byte {hi} (truncated under a view?)"
                )
            buf = log_file.read(position, declared)
            if len(buf) != declared:
                raise StorageError(f"{log_file.path}: batch at byte {position} is cut short (truncated under a view?)")
            yield buf, 0, declared, position
            used = declared
        position += used


def render_span(
    log_file: LogFile,
    lo: int,
    hi: int,
    fmt: Format,
    topic: str,
    partition: int,
    from_offset: int | None = None,
    until_offset: int | None = None,
    aborted: AbortedBatches | None = None,
) -> bytes | memoryview:
    """The rendering of the batches in ``[lo, hi)`` of a ``.log``, each cut to ``[from_offset, until_offset)``; the
    batches ``aborted`` covers render as nothing (not for KAFKA: its committed views leave out byte spans)."""
    if fmt is Format.KAFKA:
        data = log_file.read(lo, hi - lo)
        if len(data) != hi - lo:
            raise StorageError(f"{log_file.path}: {hi - lo} bytes at {lo} are not there (truncated under a view?)")
        return data
    parts = [
        render_batches(buf, positions, fmt, topic, partition, from_offset, until_offset, aborted)
        for buf, _, positions in _batches_by_buffer(log_file, lo, hi)
    ]
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _batches_by_buffer(log_file: LogFile, lo: int, hi: int) -> Iterator[tuple[bytes, int, list[int]]]:
    """The batches of ``[lo, hi)`` as ``(buffer, its position in the file, batch positions in it)``, one triple per
    read (see iter_stored_batches)."""
    current: bytes | None = None
    base = 0
    positions: list[int] = []
    for buf, at, _, position in iter_stored_batches(log_file, lo, hi):
        if buf is not current:
            if current is not None:
                yield current, base, positions
            current, base, positions = buf, position - at, []
        positions.append(at)
    if current is not None:
        yield current, base, positions


def span_size(
    log_file: LogFile,
    lo: int,
    hi: int,
    fmt: Format,
    topic: str,
    partition: int,
    from_offset: int | None = None,
    until_offset: int | None = None,
    aborted: AbortedBatches | None = None,
) -> int:
    """``len(render_span(...))``, without joining bytes where the format allows."""
    if fmt is Format.KAFKA:
        return hi - lo
    return sum(
        batches_rendered_size(buf, positions, fmt, topic, partition, from_offset, until_offset, aborted)
        for buf, _, positions in _batches_by_buffer(log_file, lo, hi)
    )


# --- the per-segment index ------------------------------------------------------------------------------------------


class RunSlice(NamedTuple):
    """A view's snapshot of chunks ``k0…k1-1`` of a run: chunk k spans ``[bounds[k], bounds[k+1])`` of the ``.log``
    and its rendering ``[cum[k], cum[k+1])`` (origin arbitrary). Entries below ``k1 + 1`` never change."""

    bounds: array[int]
    cum: array[int]
    k0: int
    k1: int

    @property
    def lo(self) -> int:
        return self.bounds[self.k0]

    @property
    def hi(self) -> int:
        return self.bounds[self.k1]

    @property
    def size(self) -> int:
        return self.cum[self.k1] - self.cum[self.k0]

    def chunk_at(self, rel: int) -> int:
        """The chunk holding byte ``rel`` of this slice's rendering (0 <= rel < size)."""
        return bisect.bisect_right(self.cum, self.cum[self.k0] + rel, self.k0, self.k1) - 1


class _Run:
    """Adjacent chunks of one segment: ``bounds`` (n + 1 positions) and ``cum`` (n + 1 prefix sums)."""

    __slots__ = ("bounds", "cum", "tail")

    def __init__(self, bounds: array[int], cum: array[int], tail: tuple[int, bytes] | None = None) -> None:
        self.bounds = bounds
        self.cum = cum
        self.tail = tail  # (position, signature) of the last batch indexed, for the staleness check

    @property
    def start(self) -> int:
        return self.bounds[0]

    @property
    def end(self) -> int:
        return self.bounds[-1]

    @property
    def chunks(self) -> int:
        return len(self.bounds) - 1


def _signature(log_file: LogFile, position: int) -> bytes:
    """baseOffset, batchLength and CRC of the batch at ``position``: what its rendering depends on (the leader
    epoch in between is not rendered)."""
    head = log_file.read(position, CRC_OFFSET + 4)
    return head[:LOG_OVERHEAD] + head[CRC_OFFSET:]


class SegmentIndex:
    """The rendered-size index of one segment in one format (see the module docstring). Any thread.

    A *committed* index (``committed/`` views of a segment with aborted transactions) sizes and renders the batches
    of aborted transactions as nothing (``aborted``, a filter valid for the batches below the offset
    ``aborted_until``: the last stable offset of some lookup). Below the LSO nothing changes any more (every
    transaction there is decided), so its entries stay valid as the LSO moves; :meth:`admit` takes the filter of a
    larger range, which changes nothing below the old bound.
    """

    def __init__(
        self, segment: LogSegment, fmt: Format, topic: str, partition: int, chunk_bytes: int, committed: bool = False
    ) -> None:
        assert fmt is not Format.KAFKA
        self.segment = segment  # a strong reference: the key's id() cannot be reused while this index lives
        self.fmt = fmt
        self.topic = topic
        self.partition = partition
        self.chunk_bytes = chunk_bytes
        self.committed = committed
        self.aborted: AbortedBatches | None = AbortedBatches(()) if committed else None
        self.aborted_until = -1  # the filter is right for the batches below this offset
        self.token = next(_tokens)  # names this index's renderings in the shared LRU; changes when it starts over
        self.lock = threading.Lock()
        self._runs: list[_Run] = []
        self._piece_sizes: OrderedDict[tuple[int, int, int | None, int | None], int] = OrderedDict()
        self.entries = 0

    def __repr__(self) -> str:
        return (
            f"SegmentIndex({self.segment.base_offset}, {self.fmt.name}, runs={len(self._runs)}, chunks={self.entries})"
        )

    def validate(self) -> None:
        """Start over when the segment was truncated below what is indexed. Caller holds ``lock``."""
        if not self._runs:
            return
        last = self._runs[-1]
        log_file = self.segment.log_file
        ok = log_file.size_bytes >= last.end
        if ok and last.tail is not None:
            position, signature = last.tail
            ok = _signature(log_file, position) == signature
        if not ok:
            self._start_over()

    def _start_over(self) -> None:
        self._runs = []
        self._piece_sizes.clear()
        self.entries = 0
        self.token = next(_tokens)
        self.aborted_until = -1  # the next admit() replaces the filter, whatever its range

    def admit(self, aborted: AbortedBatches, until: int) -> None:
        """Take ``aborted`` (the aborted transactions of this segment's offsets below ``until``, the LSO of a lookup)
        when it reaches further than the filter held. Only for a committed index. Caller holds ``lock``.

        A truncation can take an ABORT marker below the old bound away (the transaction may then commit): when an
        abort of the held filter that overlaps this segment below both bounds is missing from ``aborted``, the index
        starts over."""
        assert self.committed and self.aborted is not None
        self.validate()
        if self.aborted_until >= 0 and not self.aborted.kept_in(
            aborted, self.segment.base_offset, min(until, self.aborted_until)
        ):
            self._start_over()
        if until > self.aborted_until:
            self.aborted, self.aborted_until = aborted, until

    def piece_size(self, lo: int, hi: int, from_offset: int | None, until_offset: int | None) -> int:
        """Rendered size of ``[lo, hi)`` cut to ``[from_offset, until_offset)``, from the table or computed once."""
        key = (lo, hi, from_offset, until_offset)
        with self.lock:
            size = self._piece_sizes.get(key)
            if size is not None:
                self._piece_sizes.move_to_end(key)
                return size
            token, aborted = self.token, self.aborted
        size = span_size(
            self.segment.log_file, lo, hi, self.fmt, self.topic, self.partition, from_offset, until_offset, aborted
        )
        with self.lock:
            if token != self.token:  # the segment was truncated meanwhile: do not keep what may be stale
                return size
            self._piece_sizes[key] = size
            while len(self._piece_sizes) > PIECE_SIZES_PER_SEGMENT:
                self._piece_sizes.popitem(last=False)
        return size

    def cover(self, lo: int, hi: int, *, closed: bool) -> RunSlice | None:
        """Index whole chunks of ``[lo, hi)`` (batch boundaries; every batch in it renders whole) and return the
        largest run slice inside it, or None when not one whole chunk fits. ``closed``: the segment no longer grows,
        so a shorter last chunk ending at its end is indexed too. Caller holds ``lock``."""
        self.validate()
        runs = self._runs
        i = bisect.bisect_right(runs, lo, key=lambda r: r.start) - 1
        if i >= 0 and lo <= runs[i].end:
            run = runs[i]
        else:
            i += 1
            run = _Run(array("q", [lo]), array("q", [0]))
            runs.insert(i, run)
        while run.end < hi:
            nxt = runs[i + 1] if i + 1 < len(runs) else None
            limit = hi if nxt is None else min(hi, nxt.start)
            self._extend(run, limit, closed=closed, abut=nxt is not None and limit == nxt.start)
            if nxt is None or run.end != nxt.start:
                break
            run = self._merge(i)
        if run.chunks == 0:
            del runs[i]
            return None
        k0 = bisect.bisect_left(run.bounds, lo)
        k1 = bisect.bisect_right(run.bounds, hi) - 1
        return RunSlice(run.bounds, run.cum, k0, k1) if k1 > k0 else None

    def _extend(self, run: _Run, limit: int, *, closed: bool, abut: bool) -> None:
        """Append whole chunks from ``run.end`` up to ``limit``; the remainder too when it ends at the next run or
        at the end of a closed segment."""
        log_file = self.segment.log_file
        forced = abut or (closed and limit == log_file.size_bytes)  # the remainder up to limit is a chunk too
        if not forced and limit - run.end < self.chunk_bytes:
            return  # not one whole chunk to add: render nothing
        chunk_start, rendered, added = run.end, 0, 0
        for buf, at, size, position, batch_size in self._sized_batches(run.end, limit):
            rendered += batch_size
            end = position + size
            if end - chunk_start >= self.chunk_bytes or (forced and end == limit):
                run.bounds.append(end)
                run.cum.append(run.cum[-1] + rendered)
                run.tail = (position, buf[at : at + LOG_OVERHEAD] + buf[at + CRC_OFFSET : at + CRC_OFFSET + 4])
                chunk_start, rendered = end, 0
                added += 1
                if not forced and limit - end < self.chunk_bytes:
                    break  # what is left cannot make a whole chunk: the view renders it as its tail
        self.entries += added

    def _sized_batches(self, lo: int, hi: int) -> Iterator[tuple[bytes, int, int, int, int]]:
        """``(buffer, at, size, position, rendered size)`` of each batch in ``[lo, hi)``: the batches of each read
        are sized together (one walk of all their records)."""
        for buf, base, positions in _batches_by_buffer(self.segment.log_file, lo, hi):
            sizes = batch_sizes(buf, positions, self.fmt, self.topic, self.partition, self.aborted)
            for at, rendered in zip(positions, sizes, strict=True):
                size = int.from_bytes(buf[at + LENGTH_OFFSET : at + LOG_OVERHEAD], "big") + LOG_OVERHEAD
                yield buf, at, size, base + at, rendered

    def _merge(self, i: int) -> _Run:
        """Join run ``i`` and the run after it (which starts where it ends) into new arrays."""
        a, b = self._runs[i], self._runs[i + 1]
        shift = a.cum[-1] - b.cum[0]
        cum = array("q", a.cum)
        cum.frombytes((np.frombuffer(b.cum.tobytes(), dtype=np.int64)[1:] + shift).tobytes())
        bounds = array("q", a.bounds)
        bounds.extend(b.bounds[1:])
        merged = _Run(bounds, cum, b.tail if b.tail is not None else a.tail)
        self._runs[i : i + 2] = [merged]
        return merged


class LeftOutBatches:
    """Where the batches a read_committed reader never sees lie in one segment's ``.log`` (control batches and those
    of aborted transactions): what ``committed/…/*.kafka`` views cut out of the stored bytes (aborted-ness is a
    property of a whole batch, so they leave out whole batches). Found by one walk of the batch headers up to where
    views have needed, extended as they need more; kept as sorted byte spans (one per left-out batch: a control
    batch per transaction, so few). The filter rules are those of :class:`SegmentIndex`'s committed indexes.
    Any thread (serialised by ``lock``).
    """

    def __init__(self, segment: LogSegment) -> None:
        self.segment = segment  # a strong reference: the key's id() cannot be reused while this lives
        self.lock = threading.Lock()
        self.aborted = AbortedBatches(())
        self.aborted_until = -1
        self._scanned = 0  # batches below this byte position are walked
        self._tail: tuple[int, bytes] | None = None  # (position, signature) of the last batch walked
        self._starts: list[int] = []
        self._ends: list[int] = []

    def kept(self, lo: int, hi: int, aborted: AbortedBatches, until: int) -> list[tuple[int, int]]:
        """The byte spans of ``[lo, hi)`` (batch boundaries; every batch in it below offset ``until``) that hold
        batches a read_committed reader sees, given the aborted transactions below ``until``."""
        with self.lock:
            self._validate()
            if self.aborted_until >= 0 and not self.aborted.kept_in(
                aborted, self.segment.base_offset, min(until, self.aborted_until)
            ):
                self._start_over()  # an ABORT marker was truncated away (see SegmentIndex.admit)
            if until > self.aborted_until:
                self.aborted, self.aborted_until = aborted, until
            if hi > self._scanned:
                self._scan(hi)
            i = bisect.bisect_left(self._ends, lo + 1)  # the first left-out batch ending after lo
            spans: list[tuple[int, int]] = []
            at = lo
            while i < len(self._starts) and self._starts[i] < hi:
                if self._starts[i] > at:
                    spans.append((at, self._starts[i]))
                at = max(at, self._ends[i])
                i += 1
            if at < hi:
                spans.append((at, hi))
            return spans

    def _validate(self) -> None:
        log_file = self.segment.log_file
        ok = log_file.size_bytes >= self._scanned
        if ok and self._tail is not None:
            ok = _signature(log_file, self._tail[0]) == self._tail[1]
        if not ok:  # truncated: walk again
            self._start_over()

    def _start_over(self) -> None:
        self._scanned, self._tail = 0, None
        self._starts.clear()
        self._ends.clear()
        self.aborted_until = -1

    def _scan(self, hi: int) -> None:
        aborted = self.aborted
        last: tuple[bytes, int, int, int] | None = None
        for buf, at, size, position in iter_stored_batches(self.segment.log_file, self._scanned, hi):
            # Only a transactional batch can be left out (control batches are transactional too): one byte decides
            # for all the others, so a segment without transactions costs the walk alone.
            if buf[at + _ATTRIBUTES_LOW] & _TRANSACTIONAL_OR_CONTROL and aborted.leaves_out(read_header(buf, at)):
                self._starts.append(position)
                self._ends.append(position + size)
            last = (buf, at, size, position)
        if last is not None:
            buf, at, size, position = last
            self._tail = (position, buf[at : at + LOG_OVERHEAD] + buf[at + CRC_OFFSET : at + CRC_OFFSET + 4])
            self._scanned = position + size


# --- the store-wide cache -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RenderCacheStatistics:
    """For ``.logfs/metrics``."""

    segment_indexes: int
    entries: int
    rendered_bytes: int
    rendered_hits: int
    rendered_misses: int
    evictions: int


class RenderCache:
    """Store-wide, thread-safe, bounded cache of rendered sizes (segment indexes of chunks, LRU by entry count) and
    of recently rendered chunks (LRU by bytes). See the module docstring. Any thread."""

    def __init__(
        self,
        max_entries: int = MAX_ENTRIES_DEFAULT,
        *,
        max_rendered_bytes: int = RENDERED_BYTES_DEFAULT,
        chunk_bytes: int = CHUNK_BYTES_DEFAULT,
    ) -> None:
        if max_entries < 1 or chunk_bytes < 1 or max_rendered_bytes < 0:
            raise ValueError("max_entries and chunk_bytes must be positive, max_rendered_bytes not negative")
        self.max_entries = max_entries
        self.max_rendered_bytes = max_rendered_bytes
        self.chunk_bytes = chunk_bytes
        self._lock = threading.Lock()
        self._indexes: OrderedDict[tuple[int, Format, str, int, bool], SegmentIndex] = OrderedDict()
        self._left_out: OrderedDict[int, LeftOutBatches] = OrderedDict()
        self._entries = 0
        self._rendered: OrderedDict[tuple[object, ...], bytes | memoryview] = OrderedDict()
        self._rendered_bytes = 0
        self._hits = 0
        self._misses = 0
        self._evictions = 0

    def segment_index(
        self, segment: LogSegment, fmt: Format, topic: str, partition: int, committed: bool = False
    ) -> SegmentIndex:
        """The index of ``segment`` in ``fmt`` (JSON lines: for that topic and partition), created when missing;
        ``committed``: the one that leaves aborted transactions out (see SegmentIndex)."""
        key = self._key(segment, fmt, topic, partition, committed)
        with self._lock:
            index = self._indexes.get(key)
            if index is not None and index.segment is segment:
                self._indexes.move_to_end(key)
                return index
            if index is not None:
                self._entries -= index.entries
            index = SegmentIndex(segment, fmt, topic, partition, self.chunk_bytes, committed)
            self._indexes[key] = index
            return index

    def admit(self, index: SegmentIndex, aborted: AbortedBatches, until: int) -> None:
        """``index.admit`` under its lock."""
        with index.lock:
            index.admit(aborted, until)

    def left_out(self, segment: LogSegment) -> LeftOutBatches:
        """The left-out batches of ``segment`` (committed ``.kafka`` views), created when missing; the least recently
        used are forgotten beyond LEFT_OUT_SEGMENTS."""
        key = id(segment)
        with self._lock:
            found = self._left_out.get(key)
            if found is not None and found.segment is segment:
                self._left_out.move_to_end(key)
                return found
            found = self._left_out[key] = LeftOutBatches(segment)
            while len(self._left_out) > LEFT_OUT_SEGMENTS:
                self._left_out.popitem(last=False)
            return found

    def cover(self, index: SegmentIndex, lo: int, hi: int, *, closed: bool) -> RunSlice | None:
        """``index.cover`` under its lock, then the entry budget enforced (never evicting ``index`` itself)."""
        with index.lock:
            before = index.entries
            found = index.cover(lo, hi, closed=closed)
            grown = index.entries - before
        if grown:
            self._account(index, grown)
        return found

    def _account(self, index: SegmentIndex, grown: int) -> None:
        with self._lock:
            key = self._key(index.segment, index.fmt, index.topic, index.partition, index.committed)
            if self._indexes.get(key) is index:
                self._entries += grown  # (an index evicted meanwhile counts no more)
            while self._entries > self.max_entries and len(self._indexes) > 1:
                key, victim = next(iter(self._indexes.items()))
                if victim is index:
                    self._indexes.move_to_end(key)
                    key, victim = next(iter(self._indexes.items()))
                del self._indexes[key]
                self._entries -= victim.entries
                self._evictions += 1

    @staticmethod
    def _key(
        segment: LogSegment, fmt: Format, topic: str, partition: int, committed: bool
    ) -> tuple[int, Format, str, int, bool]:
        # Plain text does not name the topic and partition; JSON lines do in every line.
        if fmt is Format.JSONL:
            return (id(segment), fmt, topic, partition, committed)
        return (id(segment), fmt, "", -1, committed)

    def rendered(self, key: tuple[object, ...], render: Callable[[], bytes | memoryview]) -> bytes | memoryview:
        """The bytes ``render()`` gives for ``key``, from the shared LRU or rendered now (outside the lock)."""
        data = self.get(key)
        if data is None:
            data = render()
            self.put(key, data)
        return data

    def get(self, key: tuple[object, ...]) -> bytes | memoryview | None:
        """The bytes kept for ``key``, or None (counted as a miss)."""
        with self._lock:
            data = self._rendered.get(key)
            if data is None:
                self._misses += 1
                return None
            self._rendered.move_to_end(key)
            self._hits += 1
            return data

    def holds(self, key: tuple[object, ...]) -> bool:
        """Is a rendering kept for ``key``? (Counts nothing, moves nothing.)"""
        with self._lock:
            return key in self._rendered

    def put(self, key: tuple[object, ...], data: bytes | memoryview) -> None:
        """Keep ``data`` for ``key`` (least recently used renderings make room)."""
        if len(data) > self.max_rendered_bytes // 4:
            return
        with self._lock:
            if key in self._rendered:
                return
            self._rendered[key] = data
            self._rendered_bytes += len(data)
            while self._rendered_bytes > self.max_rendered_bytes:
                _, old = self._rendered.popitem(last=False)
                self._rendered_bytes -= len(old)

    def statistics(self) -> RenderCacheStatistics:
        with self._lock:
            return RenderCacheStatistics(
                len(self._indexes), self._entries, self._rendered_bytes, self._hits, self._misses, self._evictions
            )


__all__ = [
    "CHUNK_BYTES_DEFAULT",
    "MAX_ENTRIES_DEFAULT",
    "READ_AHEAD_BYTES",
    "SCAN_READ_BYTES",
    "Format",
    "LeftOutBatches",
    "RenderCache",
    "RenderCacheStatistics",
    "RunSlice",
    "SegmentIndex",
    "batch_rendered_size",
    "batch_sizes",
    "batches_rendered_size",
    "iter_stored_batches",
    "render_batch",
    "render_batches",
    "render_span",
    "span_size",
]
