"""The rendered-size index of one segment in one format: runs of chunks with prefix sums, found by bisection.

See ``mount/render/rendersize.py`` for the design (chunks, runs, snapshots, staleness, committed indexes); this module
is the per-segment part: :class:`SegmentIndex` (its runs, the table of partial-piece sizes, the staleness check) and
:class:`RunSlice`, the snapshot of a run a view keeps and reads without a lock. Any thread (building serialised by
``SegmentIndex.lock``).
"""

from __future__ import annotations

import bisect
import itertools
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterator
from typing import NamedTuple

import numpy as np

from logfs.core.format.abortedbatches import AbortedBatches
from logfs.core.format.storedsize import stored_sizes
from logfs.core.log.storedbatches import StoredBatches
from logfs.mount.render.renderspan import Format, span_size

# Sizes of partial pieces (a view's first and last batch, an active segment's unindexed tail) kept per segment index.
PIECE_SIZES_PER_SEGMENT = 256

_tokens = itertools.count(1)


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

    __slots__ = ("bounds", "cum")

    def __init__(self, bounds: array[int], cum: array[int]) -> None:
        self.bounds = bounds
        self.cum = cum

    @property
    def start(self) -> int:
        return self.bounds[0]

    @property
    def end(self) -> int:
        return self.bounds[-1]

    @property
    def chunks(self) -> int:
        return len(self.bounds) - 1


class SegmentIndex:
    """The rendered-size index of one segment in one format (see ``mount/render/rendersize.py``). Any thread.

    A *committed* index (``committed/`` views of a segment with aborted transactions) sizes and renders the batches
    of aborted transactions as nothing (``aborted``, a filter valid for the batches below the offset
    ``aborted_until``: the last stable offset of some lookup). Below the LSO nothing changes any more (every
    transaction there is decided), so its entries stay valid as the LSO moves; :meth:`admit` takes the filter of a
    larger range, which changes nothing below the old bound.
    """

    def __init__(
        self, stored: StoredBatches, fmt: Format, topic: str, partition: int, chunk_bytes: int, committed: bool = False
    ) -> None:
        assert fmt is not Format.KAFKA
        self.stored = stored  # a strong reference: the key's id() cannot be reused while this index lives
        self.fmt = fmt
        self.topic = topic
        self.partition = partition
        self.chunk_bytes = chunk_bytes
        self.committed = committed
        self.aborted: AbortedBatches | None = AbortedBatches(()) if committed else None
        self.aborted_until = -1  # the filter is right for the batches below this offset
        self.token = next(_tokens)  # names this index's renderings in the shared LRU; changes when it starts over
        self._generation = stored.generation  # the segment's truncations when this index began (storedbatches.py)
        self.lock = threading.Lock()
        self._runs: list[_Run] = []
        self._piece_sizes: OrderedDict[tuple[int, int, int | None, int | None], int] = OrderedDict()
        self.entries = 0

    def __repr__(self) -> str:
        return (
            f"SegmentIndex({self.stored.base_offset}, {self.fmt.name}, runs={len(self._runs)}, chunks={self.entries})"
        )

    def validate(self) -> None:
        """Start over when the segment was truncated since this index began (its generation moved: positions and
        renderings may be stale). Caller holds ``lock``."""
        if self.stored.generation != self._generation:
            self._start_over()

    def _start_over(self) -> None:
        self._generation = self.stored.generation
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
            aborted, self.stored.base_offset, min(until, self.aborted_until)
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
        size = span_size(self.stored, lo, hi, self.fmt, self.topic, self.partition, from_offset, until_offset, aborted)
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
        forced = abut or (closed and limit == self.stored.size_bytes)  # the remainder up to limit is a chunk too
        if not forced and limit - run.end < self.chunk_bytes:
            return  # not one whole chunk to add: render nothing
        chunk_start, rendered, added = run.end, 0, 0
        for end, batch_size in self._sized_batches(run.end, limit):
            rendered += batch_size
            if end - chunk_start >= self.chunk_bytes or (forced and end == limit):
                run.bounds.append(end)
                run.cum.append(run.cum[-1] + rendered)
                chunk_start, rendered = end, 0
                added += 1
                if not forced and limit - end < self.chunk_bytes:
                    break  # what is left cannot make a whole chunk: the view renders it as its tail
        self.entries += added

    def _sized_batches(self, lo: int, hi: int) -> Iterator[tuple[int, int]]:
        """``(end position, rendered size)`` of each batch in ``[lo, hi)``: the batches of each read are sized
        together (one walk of all their records)."""
        jsonl = self.fmt is Format.JSONL
        for buf, base, positions, sizes in self.stored.buffers(lo, hi):
            rendered = stored_sizes(buf, positions, jsonl, self.topic, self.partition, self.aborted)
            for at, size, batch_size in zip(positions, sizes, rendered, strict=True):
                yield base + at + size, batch_size

    def _merge(self, i: int) -> _Run:
        """Join run ``i`` and the run after it (which starts where it ends) into new arrays."""
        a, b = self._runs[i], self._runs[i + 1]
        shift = a.cum[-1] - b.cum[0]
        cum = array("q", a.cum)
        cum.frombytes((np.frombuffer(b.cum.tobytes(), dtype=np.int64)[1:] + shift).tobytes())
        bounds = array("q", a.bounds)
        bounds.extend(b.bounds[1:])
        merged = _Run(bounds, cum)
        self._runs[i : i + 2] = [merged]
        return merged
