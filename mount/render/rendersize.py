"""Rendered sizes of stored batches, and the index that finds any byte of a rendering without rendering up to it.

The problem (docs/mount.md, "Files, modes and caching"). A file under ``at/`` or ``hw/`` reports its exact size at
lookup (``stat``; Spark plans its splits from it, ``tail -f`` polls it) and serves reads at any byte position. Its bytes
are the plain or JSON-lines rendering of stored batches (``core/format/renderstored.py``), which is a pure function of
those bytes: a batch's rendered size never changes once computed, so it is computed once and kept.

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
* Sizes and renderings come from ``core/format/storedsize.py`` (``stored_sizes``, ``stored_size``) and
  ``core/format/renderstored.py`` (``render_stored``), which walk every batch of a buffer at once (vectorised) and
  give the same bytes as rendering each batch alone; ``mount/render/renderspan.py`` renders the checked batches the
  core hands out for a span of a ``.log`` (``core/log/storedbatches.py``).

Read-committed views (``committed/``). A segment whose batches include aborted transactions gets a second index, keyed
apart (``committed=True``) with a token of its own, that sizes and renders those batches as nothing through an
``core.format.abortedbatches.AbortedBatches`` filter. The filter is only known to be right below the last stable offset
of the lookup that built it (past it, a transaction may still abort); so is everything the index holds, because views
never reach past the LSO. As the LSO moves, ``SegmentIndex.admit`` takes the filter of the larger range. Each abort in a
filter covers only real batches of an aborted transaction, and the old filter already held every abort covering a batch
below the old bound, so the new one changes no entry below it: the index is extended, not rebuilt, like the active
segment's (unless a truncation took away an ABORT marker the old filter knew: then it starts over). Segments without
aborted transactions use the ordinary index: their committed views are the same bytes. ``.kafka`` views leave out whole
batches instead (the core's ``StoredBatches.kept_spans``, ``core/log/leftout.py``: the byte spans of a segment's
control batches and aborted batches, found by one walk of the batch headers).

Memory is bounded by ``max_entries`` chunks in all (one million: ~16 MB of arrays, covering ~64 GiB of stored
batches), evicted a whole segment index at a time, least recently used first; evicting never disturbs an open view.

Staleness. Positions in a ``.log`` only change when a segment is truncated (a follower's truncation to a leader's epoch
end offset). Each segment index remembers the segment's generation (``StoredBatches.generation``, a count of its
truncations) and compares it before each use: a truncation makes it start over, without a read. A view opened *before* a
truncation that cuts below its end cannot keep its promise: its reads fail with StorageError (rendered sizes no longer
match) rather than return different bytes.

Modules, one part each: this one holds the store-wide :class:`RenderCache` (the segment indexes, LRU by entries, and the
rendered chunks, LRU by bytes) and the limits; ``mount/render/segmentindex.py`` the per-segment index and the run slices
views read; ``mount/render/renderspan.py`` the rendering and sizing of a span of a ``.log``.

Threads: every function and method may be called from any thread. Building an index is serialised per segment (a
second opener waits for the first instead of rendering the same batches); reads take no lock but the LRU's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from logfs.core.format.abortedbatches import AbortedBatches
from logfs.core.log.storedbatches import SCAN_READ_BYTES, StoredBatches
from logfs.mount.render.renderspan import Format
from logfs.mount.render.segmentindex import RunSlice, SegmentIndex

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
# Stored bytes a sequential reader's view renders in one call when a read misses the LRU: the chunks after the one
# read are rendered with it and kept for the reads that follow (one walk of their records, not one a chunk).
READ_AHEAD_BYTES = 1024 * 1024
# Stored bytes a sequential reader's ``.kafka`` view reads at once and keeps in the LRU (the kernel asks 128-256 KiB at
# a time: the next requests then find their bytes there, on the trio thread).
RAW_BLOCK_BYTES = 1024 * 1024

assert CHUNK_BYTES_DEFAULT <= SCAN_READ_BYTES


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
        self._entries = 0
        self._rendered: OrderedDict[tuple[object, ...], bytes | memoryview] = OrderedDict()
        self._rendered_bytes = 0
        self._hits = 0
        self._misses = 0
        self._evictions = 0

    def segment_index(
        self, stored: StoredBatches, fmt: Format, topic: str, partition: int, committed: bool = False
    ) -> SegmentIndex:
        """The index of a segment's ``stored`` batches in ``fmt`` (JSON lines: for that topic and partition), created
        when missing; ``committed``: the one that leaves aborted transactions out (see SegmentIndex)."""
        key = self._key(stored, fmt, topic, partition, committed)
        with self._lock:
            index = self._indexes.get(key)
            if index is not None and index.stored is stored:
                self._indexes.move_to_end(key)
                return index
            if index is not None:
                self._entries -= index.entries
            index = SegmentIndex(stored, fmt, topic, partition, self.chunk_bytes, committed)
            self._indexes[key] = index
            return index

    def admit(self, index: SegmentIndex, aborted: AbortedBatches, until: int) -> None:
        """``index.admit`` under its lock."""
        with index.lock:
            index.admit(aborted, until)

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
            key = self._key(index.stored, index.fmt, index.topic, index.partition, index.committed)
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
        stored: StoredBatches, fmt: Format, topic: str, partition: int, committed: bool
    ) -> tuple[int, Format, str, int, bool]:
        # Plain text does not name the topic and partition; JSON lines do in every line.
        if fmt is Format.JSONL:
            return (id(stored), fmt, topic, partition, committed)
        return (id(stored), fmt, "", -1, committed)

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
    "RenderCache",
    "RenderCacheStatistics",
]
