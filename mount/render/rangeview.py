"""The ``at/``, ``hw/`` and ``committed/`` files of a partition: :func:`open_range` plans a :class:`RangeView`, an
immutable rendering of offsets ``[start, end)`` in one format whose exact size is known at open (docs/mount.md,
"Reads"). No pyfuse3, no trio. Where a view starts and ends, and the ``follow/`` and ``state`` files, are
``mount/render/views.py``'s.

How a view is built. The range ``[start, end)`` is asked of the core as one range read (``Log.read_range``,
``core/log/rangeread.py``), which cuts it at segment boundaries and ends it at the isolation bound; in each segment it
is the batches from the one holding ``start`` to the last one with a base offset below ``end`` (a ``SegmentPart``,
whose bytes come checked through ``core/log/storedbatches.py``). For ``.kafka``
that is a byte span of the ``.log`` (whole batches, unchanged). For plain and JSON lines a segment's part becomes up to
three pieces: a *head* span holding the batch cut by ``start`` (and what precedes the first indexed chunk), a slice of
whole chunks from the segment's rendered-size index (``mount/render/rendersize.py``), and a *tail* span holding the
batch cut by ``end`` (and what follows the last whole chunk). The view's size is the sum of its pieces; a read bisects
the pieces, then the chunk prefix sums, and renders only the chunks it touches (shared, recently rendered chunks come
from the cache). Opening costs O(segments covered + log n) once the index is warm, plus rendering at most about one
chunk and two batches per end; a cold index walks each batch once (``format.storedsize.stored_sizes``: sizes from the
record columns, nothing rendered, for plain text always and for JSON lines whose keys and values need no escaping;
other JSON lines are counted by the compiled renderer without being written, or rendered without the helper).

Sequential readers. A read that starts near where the view's previous read ended (``cat``, and the kernel's readahead,
which sends 128-256 KiB requests a few at a time, not always in order) renders the chunk it misses and the chunks after
it, up to READ_AHEAD_BYTES (1 MiB) of stored bytes, in one ``render_stored`` call (``core/format/renderstored.py``; one
vectorised walk of all their records), and keeps each chunk in the shared LRU: the reads that follow find their chunks
there. One render runs at a time per view, so concurrent requests of one reader wait for the render that covers them
instead of rendering the same chunks again. :meth:`RangeView.read_cached` answers a read from the LRU alone (never the
disk), so the mount can serve those reads on the trio thread without the hop to a worker thread.

Read committed (``committed/``; docs/mount.md, "Files, modes and caching"). ``open_range(..., committed=True)``
(``committed/at/`` and ``committed/hw/``) is bounded by the caller at the last stable offset
(``mount/render/views.py``'s ``view_end``) and leaves out the batches a read_committed consumer skips: control batches
(which plain and JSON lines never show anyway) and transactional batches of aborted transactions
(``core.format.abortedbatches.AbortedBatches``, from one ``Log.collect_aborted_transactions`` call per open). Below the
LSO every transaction is decided, so committed views keep the HW views' promises: exact sizes, snapshots that never
change, ``hw/`` files that only grow. A segment with no aborted transaction in range is planned exactly as for the HW
views (same index, same cached chunks); one with aborts uses a committed index (``mount/render/rendersize.py``);
``.kafka`` cuts the left-out batches out of its byte spans.

Retention (docs/mount.md, "Reads"). A view pins every segment it covers (the range read keeps the pins in the view's
ExitStack) until :meth:`RangeView.close`, so a segment deleted meanwhile stays readable through it. Each pin keeps one
descriptor open: a view over thousands of segments holds thousands of descriptors.

Threads: :func:`open_range` and :meth:`RangeView.read` may be called from any thread and do blocking disk I/O (call them
from a worker thread, never the trio thread); :meth:`RangeView.read_cached` any thread may call. A view may be read from
several threads at once.

Known limitations:

* The first open of a range learns its size by walking every record once: about 0.1 s per million 100-byte
  records as plain text, 0.25 s as JSON lines (scripts/bench_views.py; JSON lines whose keys or values need
  escaping, base64 or headers are counted in C, ~0.2 s per 100 MB of realistic producer batches, half of it
  inflating the compressed ones; without the compiled helper they are rendered, several times slower); later opens
  of any range in the same segments use the index, which lives in memory only (a new mount walks again).
* A segment truncated below an open view's end (a follower's truncation below its HW) makes the view's reads fail
  with StorageError; views opened afterwards are right.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import threading
from collections.abc import Sequence
from typing import NamedTuple

from logfs.core.errors import StorageError
from logfs.core.log.log import Log
from logfs.core.log.rangeread import RangeRead
from logfs.core.log.storedbatches import StoredBatches
from logfs.core.offsets import Isolation
from logfs.mount.render.rendersize import RAW_BLOCK_BYTES, READ_AHEAD_BYTES, RenderCache
from logfs.mount.render.renderspan import Format, render_span
from logfs.mount.render.segmentindex import RunSlice, SegmentIndex


class _Raw(NamedTuple):
    """Stored bytes ``[lo, hi)`` of a segment's ``.log`` (``.kafka`` views)."""

    stored: StoredBatches
    lo: int
    hi: int

    @property
    def size(self) -> int:
        return self.hi - self.lo


class _Span(NamedTuple):
    """The rendering of the batches in ``[lo, hi)``, cut to ``[from_offset, until_offset)``; its size known."""

    seg_index: SegmentIndex
    token: int
    lo: int
    hi: int
    from_offset: int | None
    until_offset: int | None
    size: int


class _Chunks(NamedTuple):
    """Whole chunks of a segment index: a run slice."""

    seg_index: SegmentIndex
    token: int
    run: RunSlice

    @property
    def size(self) -> int:
        return self.run.size


_Piece = _Raw | _Span | _Chunks


class RangeView:
    """An immutable rendering of offsets ``[start_offset, end_offset)`` of one partition in one format, fixed when
    opened (by :func:`open_range`). Holds pins on the segments it covers until :meth:`close`.

    Threads: :meth:`read` from any thread, concurrently; it does blocking disk I/O.
    """

    def __init__(
        self,
        cache: RenderCache,
        topic: str,
        partition: int,
        fmt: Format,
        start_offset: int,
        end_offset: int,
        pieces: Sequence[_Piece] = (),
        pins: contextlib.ExitStack | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.fmt = fmt
        self.start_offset = start_offset
        self.end_offset = end_offset
        self._cache = cache
        self._pieces = [p for p in pieces if p.size > 0]
        self._starts: list[int] = []
        total = 0
        for p in self._pieces:
            self._starts.append(total)
            total += p.size
        self._size = total
        self._pins = pins
        self._lock = threading.Lock()
        self._next = -1  # where the last read ended (racy across threads, and only a hint)
        self._render_lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"RangeView({self.topic!r}, {self.partition}, {self.fmt.name}, [{self.start_offset}, {self.end_offset}), "
            f"size={self._size}, pieces={len(self._pieces)})"
        )

    @property
    def size(self) -> int:
        """The exact byte length, known at open."""
        return self._size

    @property
    def closed(self) -> bool:
        return self._pins is None

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from byte ``position`` (fewer only at the end). Blocking disk I/O; any thread.

        StorageError when the stored bytes no longer render as they did at open (a truncation under the view).
        """
        data = self._read(position, size, cached_only=False)
        assert data is not None
        return data

    def read_cached(self, position: int, size: int) -> bytes | None:
        """What :meth:`read` answers, when every rendering it needs is already kept in the shared LRU (a sequential
        reader's next reads usually are: see :meth:`_chunk`), else None. Never touches the disk and takes only the
        LRU's lock for short moments, so the trio thread may call it and save the hop to a worker thread; on None,
        call :meth:`read` in a worker thread (``.kafka`` views: a sequential reader's blocks, see
        :meth:`_read_raw_blocks`)."""
        try:
            return self._read(position, size, cached_only=True)
        except _NotKept:
            return None

    def _read(self, position: int, size: int, *, cached_only: bool) -> bytes | None:
        if position < 0 or size < 0:
            raise ValueError(f"negative position {position} or size {size}")
        end = min(self._size, position + size)
        if position >= end:
            return b""
        parts: list[bytes | memoryview] = []
        i = bisect.bisect_right(self._starts, position) - 1
        pos = position
        # A read near where the last one ended is taken for a sequential reader's (the kernel's readahead sends a
        # few at once, not always in order).
        ahead = self._next >= 0 and abs(position - self._next) <= 4 * size
        while pos < end:
            piece, base = self._pieces[i], self._starts[i]
            want = min(end, base + piece.size) - pos
            self._read_piece(piece, pos - base, want, parts, ahead, cached_only)
            pos += want
            i += 1
        self._next = end
        return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)

    def _read_piece(
        self,
        piece: _Piece,
        rel: int,
        want: int,
        parts: list[bytes | memoryview],
        ahead: bool = False,
        cached_only: bool = False,
    ) -> None:
        data: bytes | memoryview
        if isinstance(piece, _Raw):
            if ahead or cached_only:
                self._read_raw_blocks(piece, rel, want, parts, cached_only)
            else:  # a random read: only its bytes, CRC-checked (issue 16)
                parts.append(piece.stored.read(piece.lo, piece.hi, piece.lo + rel, want))
        elif isinstance(piece, _Span):
            key = (piece.token, piece.lo, piece.hi, piece.from_offset, piece.until_offset)
            kept = self._cache.get(key) if cached_only else None
            if cached_only and kept is None:
                raise _NotKept
            data = kept if kept is not None else self._rendered(piece.seg_index, *key)
            if len(data) != piece.size:
                raise _changed(piece.seg_index, piece.lo, piece.size, len(data))
            parts.append(memoryview(data)[rel : rel + want])
        else:
            run = piece.run
            k = run.chunk_at(rel)
            inner = run.cum[run.k0] + rel - run.cum[k]
            while want > 0:
                expected = run.cum[k + 1] - run.cum[k]
                data = self._chunk(piece, k, ahead, cached_only)
                take = min(want, expected - inner)
                parts.append(memoryview(data)[inner : inner + take])
                want -= take
                inner = 0
                k += 1

    def _read_raw_blocks(
        self, piece: _Raw, rel: int, want: int, parts: list[bytes | memoryview], cached_only: bool
    ) -> None:
        """A sequential reader's bytes of a ``.kafka`` piece, by RAW_BLOCK_BYTES blocks kept in the shared LRU: the
        block a read misses is read whole (CRC-checked, in the worker thread), so the kernel's next readahead
        requests inside it are answered by :meth:`read_cached` on the trio thread, without the hop to a worker."""
        stored, lo = piece.stored, piece.lo
        while want > 0:
            k, inner = divmod(rel, RAW_BLOCK_BYTES)
            b_lo = lo + k * RAW_BLOCK_BYTES
            b_hi = min(piece.hi, b_lo + RAW_BLOCK_BYTES)
            key = ("raw", stored.serial, stored.generation, b_lo, b_hi)
            data = self._cache.get(key)
            if data is None:
                if cached_only:
                    raise _NotKept
                data = stored.read(lo, piece.hi, b_lo, b_hi - b_lo)  # CRC-checked (issue 16)
                self._cache.put(key, data)
            take = min(want, b_hi - b_lo - inner)
            parts.append(memoryview(data)[inner : inner + take])
            rel += take
            want -= take

    def _chunk(self, piece: _Chunks, k: int, ahead: bool, cached_only: bool = False) -> bytes | memoryview:
        """The rendering of chunk ``k`` of a run slice: from the shared LRU, or rendered now. For a sequential
        reader (``ahead``) the chunks after it, up to READ_AHEAD_BYTES of stored bytes, are rendered in the same call
        and kept in the LRU for the reads that follow (one walk of all their records instead of one a chunk)."""
        key = _chunk_key(piece, k)
        data = self._cache.get(key)
        if data is None and cached_only:
            raise _NotKept
        if data is None:
            # One render at a time per view: a read that needs a chunk another read is rendering waits for it instead
            # of rendering it again (rendering holds the GIL most of the time anyway).
            with self._render_lock:
                data = self._cache.get(key)
                if data is None:
                    data = self._render_chunks(piece, k, READ_AHEAD_BYTES if ahead else 0)
        return data

    def _render_chunks(self, piece: _Chunks, k: int, ahead_bytes: int) -> memoryview:
        """Render chunk ``k`` and the chunks after it not yet kept, up to ``ahead_bytes`` of stored bytes, in one
        call; keep each in the LRU; return chunk ``k``'s. Caller holds ``_render_lock``."""
        run, index = piece.run, piece.seg_index
        lo = run.bounds[k]
        k2 = k + 1
        while k2 < run.k1 and run.bounds[k2 + 1] - lo <= ahead_bytes and not self._cache.holds(_chunk_key(piece, k2)):
            k2 += 1
        rendered = render_span(
            index.stored, lo, run.bounds[k2], self.fmt, self.topic, self.partition, aborted=index.aborted
        )
        expected = run.cum[k2] - run.cum[k]
        if len(rendered) != expected:
            raise _changed(index, lo, expected, len(rendered))
        whole = memoryview(rendered)
        for j in range(k, k2):
            a, b = run.cum[j] - run.cum[k], run.cum[j + 1] - run.cum[k]
            if a < b and whole[b - 1] != 0x0A:  # every chunk's rendering ends a line: the cut is where it was
                raise StorageError(
                    f"{index.stored.path}: the batches at byte {run.bounds[j]} no longer render as they did when "
                    "the view was opened (the segment was truncated under an open view)"
                )
        for j in range(k + 1, k2):
            self._cache.put(_chunk_key(piece, j), whole[run.cum[j] - run.cum[k] : run.cum[j + 1] - run.cum[k]])
        first = whole[: run.cum[k + 1] - run.cum[k]]
        self._cache.put(_chunk_key(piece, k), first)
        return first

    def _rendered(
        self, index: SegmentIndex, token: int, lo: int, hi: int, from_offset: int | None, until_offset: int | None
    ) -> bytes | memoryview:
        render = functools.partial(render_span, index.stored, lo, hi, self.fmt, self.topic, self.partition,
                                   from_offset, until_offset, index.aborted)  # fmt: skip
        return self._cache.rendered((token, lo, hi, from_offset, until_offset), render)

    def close(self) -> None:
        """Release the pins (retention may then remove the segments). Idempotent; any thread."""
        with self._lock:
            pins, self._pins = self._pins, None
        if pins is not None:
            pins.close()

    def __enter__(self) -> RangeView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _NotKept(Exception):
    """A read_cached() needs a rendering the LRU does not hold."""


def _chunk_key(piece: _Chunks, k: int) -> tuple[object, ...]:
    """The LRU key of chunk ``k``'s rendering (that of a span of whole batches: see RangeView._rendered)."""
    return (piece.token, piece.run.bounds[k], piece.run.bounds[k + 1], None, None)


def _changed(index: SegmentIndex, lo: int, expected: int, got: int) -> StorageError:
    return StorageError(
        f"{index.stored.path}: the batches at byte {lo} render as {got} bytes where the view was opened with "
        f"{expected} (the segment was truncated under an open view)"
    )


def open_range(
    log: Log,
    cache: RenderCache,
    topic: str,
    partition: int,
    fmt: Format,
    start_offset: int,
    end_offset: int | None = None,
    committed: bool = False,
) -> RangeView:
    """A view of offsets ``[start_offset, end_offset)`` of ``log`` in ``fmt``, ``end_offset`` cut to the HW (under
    ``committed``, the last stable offset; None: that bound). Blocking disk I/O; any thread.

    ``start_offset`` below the log start or above the LEO → OffsetOutOfRange (the mount answers ENOENT); an end at
    or below the start → an empty view. Plain and JSON lines start exactly at ``start_offset`` even inside a batch and
    end before the end even inside one; control batches render as nothing. ``.kafka`` gives the whole stored batches
    that hold offsets in the range (the first may hold records before it, the last records after it), control
    batches included.

    ``committed`` (read_committed, ``committed/``): the batches of aborted transactions are left out too, and
    ``.kafka`` leaves out control batches and those of aborted transactions (whole batches). Segments with no aborted
    transaction in the range render as without it.
    """
    isolation = Isolation.TXN_COMMITTED if committed else Isolation.HIGH_WATERMARK
    pins = contextlib.ExitStack()
    try:
        # The pins outlive the read: the view holds them until it is closed. Retention removing the start while we
        # open is OffsetOutOfRange (the core's rule).
        with log.read_range(start_offset, end_offset, isolation, pins=pins) as read:
            pieces = _plan(read, cache, topic, partition, fmt)
    except BaseException:
        pins.close()
        raise
    if not pieces:
        pins.close()
    return RangeView(cache, topic, partition, fmt, start_offset, max(read.end, start_offset), pieces, pins)


def _plan(read: RangeRead, cache: RenderCache, topic: str, partition: int, fmt: Format) -> list[_Piece]:
    """The pieces of the read's parts, segment by segment (the read pins each)."""
    pieces: list[_Piece] = []
    aborted = read.aborted  # read committed: one filter serves every segment (core/log/rangeread.py)
    for part in read:
        stored, lo, hi = part.stored, part.lo, part.hi
        if fmt is Format.KAFKA:
            if aborted is not None:  # control batches and aborted transactions' batches cut out
                pieces.extend(_Raw(stored, a, b) for a, b in stored.kept_spans(lo, hi, aborted, part.filter_until))
            else:
                pieces.append(_Raw(stored, lo, hi))
            continue
        if aborted is not None and aborted.touches(stored.base_offset, part.filter_until):
            # Aborted transactions here: the committed index (their batches sized and rendered as nothing).
            index = cache.segment_index(stored, fmt, topic, partition, committed=True)
            cache.admit(index, aborted, part.filter_until)
        else:
            index = cache.segment_index(stored, fmt, topic, partition)
        full_lo, full_hi = part.full_lo, part.full_hi
        run = cache.cover(index, full_lo, full_hi, closed=part.closed) if full_lo < full_hi else None
        token = index.token
        from_offset, until_offset = part.from_offset, part.until_offset
        if run is None:
            size = index.piece_size(lo, hi, from_offset, until_offset)
            pieces.append(_Span(index, token, lo, hi, from_offset, until_offset, size))
            continue
        if run.lo > lo:
            size = index.piece_size(lo, run.lo, from_offset, None)
            pieces.append(_Span(index, token, lo, run.lo, from_offset, None, size))
        pieces.append(_Chunks(index, token, run))
        if hi > run.hi:
            size = index.piece_size(run.hi, hi, None, until_offset)
            pieces.append(_Span(index, token, run.hi, hi, None, until_offset, size))
    return pieces
