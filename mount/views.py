"""What the read files of a partition hold (spec §2, §4, §5), as pure functions and objects: no pyfuse3, no trio.

The mount (``mount/operations.py``) resolves a name under ``<topic>/<partition>/`` and calls in here:

* ``at/<name>``: :func:`parse_view_name` splits the name into a stem and a :class:`Format`; :func:`resolve_start`
  (or :func:`parse_range` for ``<start>-<end>``) gives the start offset; the end is the HW at lookup; then
  :func:`open_range` fixes a :class:`RangeView`, an immutable snapshot whose exact size is known at once.
* ``hw/``: :func:`hw_files` lists one file per segment, each again a :func:`open_range` per lookup.
* ``follow/<name>``: :func:`render_follow_chunk` renders whole records from the reader's offset up to the HW.
* ``state``: :func:`render_state`.

How a view is built. The range ``[start, end)`` is cut at segment boundaries; in each segment it is the batches
from the one holding ``start`` to the last one with a base offset below ``end``. For ``.kafka`` that is a byte
span of the ``.log`` (whole batches, unchanged). For plain and JSON lines a segment's part becomes up to three
pieces: a *head* span holding the batch cut by ``start`` (and what precedes the first indexed chunk), a slice of
whole chunks from the segment's rendered-size index (``mount/rendersize.py``), and a *tail* span holding the batch
cut by ``end`` (and what follows the last whole chunk). The view's size is the sum of its pieces; a read bisects
the pieces, then the chunk prefix sums, and renders only the chunks it touches (shared, recently rendered chunks
come from the cache). Opening costs O(segments covered + log n) once the index is warm, plus rendering at most about
one chunk and two batches per end; a cold index walks each batch once (``core.renderstored.stored_sizes``: sizes from
the record columns, nothing rendered, for plain text always and for JSON lines whose keys and values need no
escaping).

Sequential readers. A read that starts near where the view's previous read ended (``cat``, and the kernel's
readahead, which sends 128-256 KiB requests a few at a time, not always in order) renders the chunk it misses and the
chunks after it, up to READ_AHEAD_BYTES (1 MiB) of stored bytes, in one ``core.renderstored.render_stored`` call (one
vectorised walk of all their records), and keeps each chunk in the shared LRU: the reads that follow find their
chunks there. One render runs at a time per view, so concurrent requests of one reader wait for the render that
covers them instead of rendering the same chunks again. :meth:`RangeView.read_cached` answers a read from the LRU
alone (never the disk), so the mount can serve those reads on the trio thread without the hop to a worker thread.

Read committed (``committed/``, spec §2). ``open_range(..., committed=True)``, ``hw_files(log, committed=True)`` and
``render_follow_chunk(..., committed=True)`` are bounded by the caller at the last stable offset (:func:`view_end`)
and leave out the batches a read_committed consumer skips: control batches (which plain and JSON lines never show
anyway) and transactional batches of aborted transactions (``core.renderstored.AbortedBatches``, from one
``Log.collect_aborted_transactions`` call per open). Below the LSO every transaction is decided, so committed views
keep the HW views' promises: exact sizes, snapshots that never change, ``hw/`` files that only grow. A segment with
no aborted transaction in range is planned exactly as for the HW views (same index, same cached chunks); one with
aborts uses a committed index (``mount/rendersize.py``); ``.kafka`` cuts the left-out batches out of its byte spans.

Retention (spec §5). A view pins every segment it covers (``LogSegment.pin``) until :meth:`RangeView.close`, so a
segment deleted meanwhile stays readable through it. Each pin keeps one descriptor open: a view over thousands of
segments holds thousands of descriptors.

Threads: every function may be called from any thread and does blocking disk I/O (call it from a worker thread,
never the trio thread), except :meth:`RangeView.read_cached`, which any thread may call. A view may be read from
several threads at once.

Known limitations:

* The first open of a range learns its size by walking every record once: about 0.1 s per million 100-byte
  records as plain text, 0.25 s as JSON lines (scripts/bench_views.py; JSON lines whose keys or values need
  escaping, base64 or headers are rendered instead, several times slower); later opens of any range in the same
  segments use the index, which lives in memory only (a new mount walks again).
* Pins cost a descriptor each, and ``core/log/handles.py`` retries every pinned segment beyond ``max_open_segments``
  (256) on each use of any segment: opening a view over 1,500 segments took 1.7 s, nearly all of it there.
* A segment truncated below an open view's end (a follower's truncation below its HW) makes the view's reads fail
  with StorageError; views opened afterwards are right.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import json
import re
import threading
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from logfs.core.errors import OffsetOutOfRange, StorageError
from logfs.core.format.batch import read_header
from logfs.core.format.renderstored import AbortedBatches
from logfs.core.log.log import Log
from logfs.core.log.segment import LogSegment
from logfs.mount.rendersize import (
    READ_AHEAD_BYTES,
    SCAN_READ_BYTES,
    Format,
    RenderCache,
    RenderCacheStatistics,
    RunSlice,
    SegmentIndex,
    iter_stored_batches,
    render_batch,
    render_span,
)

# --- names ----------------------------------------------------------------------------------------------------------

_STEM = re.compile(r"earliest|latest|[0-9]+|@[0-9]+|[0-9]+-[0-9]+")
_RANGE = re.compile(r"([0-9]+)-([0-9]+)")


def parse_view_name(name: str) -> tuple[str, Format]:
    """Split an ``at/`` or ``follow/`` name into its stem and format: ``"42.jsonl"`` → ``("42", JSONL)``,
    ``"earliest"`` → ``("earliest", PLAIN)``, ``"@1700000000000.kafka"`` → ``("@1700000000000", KAFKA)``,
    ``"10-20"`` → ``("10-20", PLAIN)``; ``"latest"`` (for ``follow/``) too. ValueError for anything else.

    Which stems a directory accepts (``follow/`` has no ranges, ``at/`` no ``latest``) is the caller's rule.
    """
    stem, fmt = name, Format.PLAIN
    for suffixed in (Format.JSONL, Format.KAFKA):
        if name.endswith(suffixed.value):
            stem, fmt = name[: -len(suffixed.value)], suffixed
            break
    if not _STEM.fullmatch(stem):
        raise ValueError(f"{name!r} is not a view name (<offset>, earliest, @<epoch-ms>, <start>-<end>, latest)")
    return stem, fmt


def parse_range(stem: str) -> tuple[int, int] | None:
    """``"10-20"`` → ``(10, 20)``; None for a stem that is not a range."""
    m = _RANGE.fullmatch(stem)
    return None if m is None else (int(m[1]), int(m[2]))


def view_end(log: Log, committed: bool) -> int:
    """Where the views of a partition end now: the HW, or under ``committed/`` the last stable offset (never above
    the HW). Any thread."""
    return log.last_stable_offset if committed else log.high_watermark


def resolve_start(log: Log, stem: str, committed: bool = False) -> int:
    """The start offset a stem names: ``earliest`` → the log start offset; ``<digits>`` → that offset;
    ``@<epoch-ms>`` → the offset of the first record with timestamp ≥ epoch-ms (time index lookup), or the HW when
    none is that late (an empty view); ``latest`` → the HW. ``committed``: the LSO where the HW is said. ValueError
    for anything else (ranges included: see :func:`parse_range`). Any thread; the ``@`` lookup reads indexes and
    batches."""
    if stem == "earliest":
        return log.log_start_offset
    if stem == "latest":
        return view_end(log, committed)
    if stem.isascii() and stem.isdigit():
        return int(stem)
    if stem.startswith("@") and stem[1:].isascii() and stem[1:].isdigit():
        found = log.fetch_offset_by_timestamp(int(stem[1:]))
        return view_end(log, committed) if found is None else found.offset
    raise ValueError(f"{stem!r} names no start offset")


# --- pieces of a view -----------------------------------------------------------------------------------------------


class _Raw(NamedTuple):
    """Stored bytes ``[lo, hi)`` of a segment's ``.log`` (``.kafka`` views)."""

    segment: LogSegment
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


class _Batch(NamedTuple):
    base_offset: int
    last_offset: int
    position: int
    size: int


def _batch_at(segment: LogSegment, offset: int) -> _Batch | None:
    """The first batch of ``segment`` whose last offset is at or after ``offset`` (offset index, then a scan)."""
    found = segment.translate_offset(offset)
    if found is None:
        return None
    base = int.from_bytes(segment.log_file.read(found.position, 8), "big", signed=True)
    return _Batch(base, found.offset, found.position, found.size)


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
        call :meth:`read` in a worker thread. ``.kafka`` views always answer None."""
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
            if cached_only:
                raise _NotKept
            data = piece.segment.log_file.read(piece.lo + rel, want)
            if len(data) != want:
                raise StorageError(f"{piece.segment.log_path}: {want} bytes at {piece.lo + rel} are not there")
            parts.append(data)
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
            index.segment.log_file, lo, run.bounds[k2], self.fmt, self.topic, self.partition, aborted=index.aborted
        )
        expected = run.cum[k2] - run.cum[k]
        if len(rendered) != expected:
            raise _changed(index, lo, expected, len(rendered))
        whole = memoryview(rendered)
        for j in range(k, k2):
            a, b = run.cum[j] - run.cum[k], run.cum[j + 1] - run.cum[k]
            if a < b and whole[b - 1] != 0x0A:  # every chunk's rendering ends a line: the cut is where it was
                raise StorageError(
                    f"{index.segment.log_path}: the batches at byte {run.bounds[j]} no longer render as they did when "
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
        render = functools.partial(render_span, index.segment.log_file, lo, hi, self.fmt, self.topic, self.partition,
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
        f"{index.segment.log_path}: the batches at byte {lo} render as {got} bytes where the view was opened with "
        f"{expected} (the segment was truncated under an open view)"
    )


def open_range(
    log: Log,
    cache: RenderCache,
    topic: str,
    partition: int,
    fmt: Format,
    start_offset: int,
    end_offset: int,
    committed: bool = False,
) -> RangeView:
    """A view of offsets ``[start_offset, end_offset)`` of ``log`` in ``fmt``. Blocking disk I/O; any thread.

    ``start_offset`` below the log start or above the LEO → OffsetOutOfRange (the mount answers ENOENT); so is an
    ``end_offset`` above the LEO (callers bound it by the HW, or the LSO). ``end_offset <= start_offset`` → an empty
    view. Plain and JSON lines start exactly at ``start_offset`` even inside a batch and end before ``end_offset``
    even inside one; control batches render as nothing. ``.kafka`` gives the whole stored batches that hold offsets
    in the range (the first may hold records before it, the last records after it), control batches included.

    ``committed`` (read_committed, ``committed/``; ``end_offset`` must then be at most the LSO): the batches of
    aborted transactions are left out too, and ``.kafka`` leaves out control batches and those of aborted
    transactions (whole batches). Segments with no aborted transaction in the range render as without it.
    """
    log_start, leo = log.log_start_offset, log.log_end_offset
    if start_offset < log_start or start_offset > leo:
        raise OffsetOutOfRange(start_offset, log_start, leo)
    if end_offset <= start_offset:
        return RangeView(cache, topic, partition, fmt, start_offset, end_offset)
    if end_offset > leo:
        raise OffsetOutOfRange(end_offset, log_start, leo, what="range end")
    pins = contextlib.ExitStack()
    try:
        pieces = _plan(log, cache, topic, partition, fmt, start_offset, end_offset, pins, committed)
    except StorageError:
        pins.close()
        if start_offset < log.log_start_offset:  # retention removed the start while we opened
            raise OffsetOutOfRange(start_offset, log.log_start_offset, log.log_end_offset) from None
        raise
    except BaseException:
        pins.close()
        raise
    return RangeView(cache, topic, partition, fmt, start_offset, end_offset, pieces, pins)


def _plan(
    log: Log,
    cache: RenderCache,
    topic: str,
    partition: int,
    fmt: Format,
    start: int,
    end: int,
    pins: contextlib.ExitStack,
    committed: bool = False,
) -> list[_Piece]:
    """The pieces of ``[start, end)``, segment by segment; pins each segment it reads. ``committed``: see
    open_range."""
    segments = log.segments
    i = max(0, bisect.bisect_right(segments, start, key=lambda s: s.base_offset) - 1)
    pieces: list[_Piece] = []
    # One collection for the whole view, from its first segment's base (a committed index's filter must be right for
    # every batch of its segment below the bound, not only from start on): a partition without aborted transactions
    # finds none and renders as the HW views do. One filter serves every segment: holding more aborted transactions
    # than a segment needs changes nothing (each one covers only its own producer's batches), holding all it needs is
    # what matters.
    aborted = None
    if committed and segments:
        aborted = AbortedBatches(log.collect_aborted_transactions(segments[i].base_offset, end))
    for n in range(i, len(segments)):
        segment = segments[n]
        if segment.base_offset >= end:
            break
        nxt = segments[n + 1] if n + 1 < len(segments) else None
        pins.enter_context(segment.pin())
        # The first batch: the one holding start (which may hold records before it), or the segment's first.
        head: _Batch | None = None
        if start > segment.base_offset:
            head = _batch_at(segment, start)
            if head is None:
                continue  # start lies after this segment's last batch
            lo = head.position
        else:
            lo = 0
        # The end: after the last batch with a base offset below end; `straddle` is that batch if it holds end.
        straddle: _Batch | None = None
        if nxt is not None and nxt.base_offset <= end:
            hi = segment.size_bytes  # a closed segment, wholly below end
        else:
            last = _batch_at(segment, end - 1)
            if last is None:
                hi = segment.size_bytes  # not the active segment: it holds the LEO's batch
            elif last.base_offset >= end:
                hi = last.position
            else:
                hi = last.position + last.size
                straddle = last if last.last_offset >= end else None
        if hi <= lo:
            continue
        filter_until = min(end, nxt.base_offset) if nxt is not None else end
        if fmt is Format.KAFKA:
            if aborted is not None:  # control batches and aborted transactions' batches cut out
                kept = cache.left_out(segment).kept(lo, hi, aborted, filter_until)
                pieces.extend(_Raw(segment, a, b) for a, b in kept)
            else:
                pieces.append(_Raw(segment, lo, hi))
            continue
        from_offset = start if head is not None and head.base_offset < start else None
        until_offset = end if straddle is not None else None
        full_lo = lo + head.size if head is not None and from_offset is not None else lo
        full_hi = straddle.position if straddle is not None else hi
        if aborted is not None and aborted.touches(segment.base_offset, filter_until):
            # Aborted transactions here: the committed index (their batches sized and rendered as nothing).
            index = cache.segment_index(segment, fmt, topic, partition, committed=True)
            cache.admit(index, aborted, filter_until)
        else:
            index = cache.segment_index(segment, fmt, topic, partition)
        run = cache.cover(index, full_lo, full_hi, closed=nxt is not None) if full_lo < full_hi else None
        token = index.token
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


# --- hw/ ------------------------------------------------------------------------------------------------------------


def hw_files(log: Log, committed: bool = False) -> list[tuple[str, int, int]]:
    """The ``hw/`` directory: one ``(name, start, end)`` per segment holding committed records at or after the log
    start offset, ``name = <20-digit base offset>.jsonl``, ``start = max(base, log start)``,
    ``end = min(next segment's base, HW)`` (the LSO for ``committed/hw/``: a segment whose offsets below it are all
    aborted or markers has a file, empty). Any thread; reads no file."""
    segments = log.segments
    log_start, hw = log.log_start_offset, view_end(log, committed)
    files = []
    for n, segment in enumerate(segments):
        start = max(segment.base_offset, log_start)
        end = min(segments[n + 1].base_offset, hw) if n + 1 < len(segments) else hw
        if start < end:
            files.append((f"{segment.base_offset:020d}{Format.JSONL.value}", start, end))
    return files


# --- follow/ --------------------------------------------------------------------------------------------------------


def render_follow_chunk(
    log: Log,
    cache: RenderCache,
    topic: str,
    partition: int,
    fmt: Format,
    offset: int,
    end_offset: int,
    max_bytes: int,
    committed: bool = False,
) -> tuple[bytes, int]:
    """Whole rendered records from ``offset`` up to ``end_offset`` (the HW a follow reader saw), at most about
    ``max_bytes`` but at least one batch's worth when there is one, and the offset to continue from.

    ``committed`` (``end_offset`` then at most the LSO): the batches of aborted transactions are passed over like
    control batches, and ``.kafka`` passes over control batches too.

    Plain and JSON lines start exactly at ``offset`` and stop before ``end_offset``; ``.kafka`` gives whole batches
    (the next offset is then after the last batch). Control batches render as nothing but are passed over, so
    ``(b"", next)`` with ``next > offset`` means "call again". ``offset >= end_offset`` → ``(b"", offset)``.
    OffsetOutOfRange below the log start or above the LEO. Renderings go through the cache's shared LRU, so many
    followers at the same position render each batch once. Blocking disk I/O; any thread.
    """
    log_start, leo = log.log_start_offset, log.log_end_offset
    if offset < log_start or offset > leo:
        raise OffsetOutOfRange(offset, log_start, leo)
    end = min(end_offset, leo)
    if offset >= end:
        return b"", offset
    parts: list[bytes | memoryview] = []
    total = scanned = 0
    next_offset = offset
    skip: AbortedBatches | None = None
    if committed:
        skip = AbortedBatches(log.collect_aborted_transactions(offset, end))
        if not skip and fmt is not Format.KAFKA:
            skip = None  # control batches render as nothing anyway: the HW path as it is
    segments = log.segments
    i = max(0, bisect.bisect_right(segments, offset, key=lambda s: s.base_offset) - 1)
    try:
        for segment in segments[i:]:
            if segment.base_offset >= end:
                break
            with segment.pin():
                found = segment.translate_offset(next_offset)
                if found is None:
                    continue
                index = None if fmt is Format.KAFKA else cache.segment_index(segment, fmt, topic, partition)
                for buf, at, size, position in iter_stored_batches(
                    segment.log_file, found.position, segment.size_bytes
                ):
                    header = read_header(buf, at)
                    if header.base_offset >= end:
                        return b"".join(parts), next_offset
                    data: bytes | memoryview
                    if skip is not None and skip.leaves_out(header):
                        data = b""
                        after = header.last_offset + 1 if index is None else min(header.last_offset + 1, end)
                    elif index is None:
                        data, after = buf[at : at + size], header.last_offset + 1
                    else:
                        lo = next_offset if next_offset > header.base_offset else None
                        hi = end if end <= header.last_offset else None
                        data = cache.rendered(
                            (index.token, position, position + size, lo, hi),
                            functools.partial(render_batch, buf, at, fmt, topic, partition, lo, hi),
                        )
                        after = min(header.last_offset + 1, end)
                    if parts and total + len(data) > max_bytes:
                        return b"".join(parts), next_offset
                    if data:
                        parts.append(data)
                    total += len(data)
                    scanned += size
                    next_offset = after
                    if total >= max_bytes or scanned >= max(max_bytes, SCAN_READ_BYTES) or next_offset >= end:
                        return b"".join(parts), next_offset
    except StorageError:
        if next_offset < log.log_start_offset:  # retention removed the segment under the reader
            raise OffsetOutOfRange(next_offset, log.log_start_offset, log.log_end_offset) from None
        raise
    return b"".join(parts), next_offset


# --- state ----------------------------------------------------------------------------------------------------------


def render_state(
    log: Log,
    topic: str,
    partition: int,
    *,
    role: str = "leader",
    leader_epoch: int | None = None,
    isr: Sequence[int] = (0,),
    replicas: Mapping[int, Mapping[str, int]] | None = None,
    open_transactions: Sequence[Mapping[str, int]] | None = None,
    last_stable_offset: int | None = None,
) -> bytes:
    """The ``state`` file (spec §2): one compact JSON object and a newline.

    ``leader_epoch`` defaults to the latest epoch of the log's leader-epoch cache (-1 when it has none);
    ``last_stable_offset`` to the log's, ``open_transactions`` to the log's open transactions (``producer_id``,
    ``first_offset``, by first offset). Each segment gives ``base_offset``, ``size_bytes`` and
    ``largest_timestamp`` (-1 when its records carry none). Any thread; reads each segment's time index once (then
    cached by the segment).
    """
    if open_transactions is None:
        open_transactions = [
            {"producer_id": pid, "first_offset": first}
            for pid, first in sorted(log.open_transactions(), key=lambda t: (t[1], t[0]))
        ]
    if last_stable_offset is None:
        last_stable_offset = log.last_stable_offset
    hw = log.high_watermark
    if leader_epoch is None:
        latest = log.epoch_cache.latest_epoch()
        leader_epoch = -1 if latest is None else latest
    state = {
        "topic": topic,
        "partition": partition,
        "role": role,
        "leader_epoch": leader_epoch,
        "log_start_offset": log.log_start_offset,
        "high_watermark": hw,
        "last_stable_offset": last_stable_offset,
        "log_end_offset": log.log_end_offset,
        "isr": list(isr),
        "replicas": {str(k): dict(v) for k, v in (replicas or {}).items()},
        "open_transactions": [dict(t) for t in open_transactions],
        "segments": [
            {"base_offset": s.base_offset, "size_bytes": s.size_bytes, "largest_timestamp": s.max_timestamp_so_far}
            for s in log.segments
        ],
    }
    return json.dumps(state, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


__all__ = [
    "Format",
    "RangeView",
    "RenderCache",
    "RenderCacheStatistics",
    "hw_files",
    "open_range",
    "parse_range",
    "parse_view_name",
    "render_follow_chunk",
    "render_state",
    "resolve_start",
    "view_end",
]
