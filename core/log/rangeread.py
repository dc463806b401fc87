"""One range read: offsets ``[start, end)`` of a partition at an isolation level, as checked stored batches per segment.

Why. A reader above the log (the mount's ``at/``, ``hw/``, ``committed/`` and ``follow/`` files) must not decide
what the log decides: where a read ends for its isolation level (the log end offset, the high watermark, or for
read_committed the last stable offset), which transactions were aborted, where in each segment the range's first
and last batches lie, whether a batch left out past the end is damage, which segments stay pinned while it reads
them, and whether bytes were replaced under it. :meth:`Log.read_range <logfs.core.log.log.Log.read_range>` answers
all of that with a :class:`RangeRead`; the reader keeps rendering, sizes and caches.

How a read is cut. The range is walked as one scan (``core/log/scan.py``: a snapshot of the segments, each pinned,
the retention rule). In each segment it is the batches from the one holding ``start`` (found by the offset index:
``scan.batch_at``) to the last one with a base offset below ``end``; a batch whose base offset is at or past ``end``
is checked against its segment's bounds before it is left out (issue 23: ``batchcheck.check_left_out``). Each
segment's part is a :class:`SegmentPart`: its byte span, the offsets to cut its first and last batch at (plain and
JSON lines start and end exactly at ``start`` and ``end``, inside a batch if need be), and the span of whole batches
in between. The bytes themselves come through the part's :class:`~logfs.core.log.storedbatches.StoredBatches`,
checked (CRC and framing) on every read.

Read committed. ``Isolation.TXN_COMMITTED`` ends at the last stable offset and carries the aborted transactions of
the range (:attr:`RangeRead.aborted`, one collection from the first segment's base: a filter that holds more aborted
transactions than a segment needs changes nothing, each covers only its own producer's batches); renderers leave
out what it covers, and ``StoredBatches.kept_spans`` gives the stored spans without those batches and the control
batches (``.kafka``).

Threads: any. Iterating reads index and log files (blocking: a worker thread, never the trio thread).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING, NamedTuple

from logfs.core.errors import OffsetOutOfRange, StorageError
from logfs.core.format.abortedbatches import AbortedBatches
from logfs.core.log.batchcheck import check_left_out
from logfs.core.log.scan import RangeScan, batch_at
from logfs.core.log.storedbatches import StoredBatches
from logfs.core.offsets import FetchDataInfo, Isolation, LogOffsetMetadata

if TYPE_CHECKING:
    from logfs.core.log.log import Log


class SegmentPart(NamedTuple):
    """One segment's part of a range read: the batches in ``[lo, hi)`` of its ``.log`` (batch boundaries).

    ``from_offset`` / ``until_offset``: where the first / last batch is cut (the range's start / end, inside that
    batch), None when it is whole. ``[full_lo, full_hi)``: the span of batches in between, every one whole in the
    range (empty when ``full_lo >= full_hi``). ``closed``: a later segment exists, so this one no longer grows.
    ``filter_until``: every batch of the part is below it (the range's end, or the next segment's base), the bound up
    to which :attr:`RangeRead.aborted` must be right for it.
    """

    stored: StoredBatches
    lo: int
    hi: int
    from_offset: int | None
    until_offset: int | None
    full_lo: int
    full_hi: int
    closed: bool
    filter_until: int


class RangeRead:
    """One read of offsets ``[start, end)`` of a log (see the module docstring); made by ``Log.read_range``.

    Use it as a context manager around everything that reads the range::

        with log.read_range(start, isolation=Isolation.HIGH_WATERMARK) as read:
            for part in read:
                ...  # part.stored.buffers(part.lo, part.hi), rendered

    Leaving the ``with`` releases the pins of segments it walked (unless ``pins`` keeps them for the caller) and
    turns a StorageError into OffsetOutOfRange when retention passed :attr:`offset` meanwhile. A reader that moves on
    through the range sets :attr:`offset` to where it has got.
    """

    __slots__ = ("_aborted", "_log", "_scan", "end", "isolation", "start")

    def __init__(self, log: Log, start: int, end: int, isolation: Isolation, pins: contextlib.ExitStack | None) -> None:
        self._log = log
        self.start = start
        self.end = end
        self.isolation = isolation
        self._aborted: AbortedBatches | None = None
        self._scan = RangeScan(log, log.segment_snapshot, start, end, pins=pins) if end > start else None

    def __repr__(self) -> str:
        return f"RangeRead([{self.start}, {self.end}), {self.isolation.name})"

    @property
    def offset(self) -> int:
        """Where the reader has got to (the retention rule's offset)."""
        return self._scan.offset if self._scan is not None else self.start

    @offset.setter
    def offset(self, value: int) -> None:
        if self._scan is not None:
            self._scan.offset = value

    @property
    def committed(self) -> bool:
        return self.isolation is Isolation.TXN_COMMITTED

    @property
    def aborted(self) -> AbortedBatches | None:
        """Read committed: the aborted transactions overlapping the range from its first segment's base on (the
        filter every part's batches are rendered through). None for the other isolation levels."""
        if not self.committed or self._scan is None:
            return None
        if self._aborted is None:
            floor = self._log.segment_snapshot.floor(self.start)
            first = floor.base_offset if floor is not None else self.start
            self._aborted = AbortedBatches(self._log.collect_aborted_transactions(first, self.end))
        return self._aborted

    def __iter__(self) -> Iterator[SegmentPart]:
        scan = self._scan
        if scan is None:
            return
        log, start, end = self._log, self.start, self.end
        for segment, nxt in scan:
            # The first batch: the one holding start (which may hold records before it), or the segment's first.
            head = None
            if start > segment.base_offset:
                head = batch_at(segment, start)
                if head is None:
                    continue  # start lies after this segment's last batch
                lo = head.position
            else:
                lo = 0
            # The end: after the last batch with a base offset below end; `straddle` is that batch if it holds end.
            straddle = None
            if nxt is not None and nxt <= end:
                hi = segment.size_bytes  # a closed segment, wholly below end
            else:
                last = batch_at(segment, end - 1)
                if last is None:
                    hi = segment.size_bytes  # not the active segment: it holds the LEO's batch
                elif last.base_offset >= end:
                    check_left_out(log, segment, last.position, last.base_offset, last.last_offset)  # not damage
                    hi = last.position
                else:
                    hi = last.position + last.size
                    straddle = last if last.last_offset >= end else None
            if hi <= lo:
                continue
            from_offset = start if head is not None and head.base_offset < start else None
            until_offset = end if straddle is not None else None
            full_lo = lo + head.size if head is not None and from_offset is not None else lo
            full_hi = straddle.position if straddle is not None else hi
            filter_until = min(end, nxt) if nxt is not None else end
            yield SegmentPart(
                segment.stored, lo, hi, from_offset, until_offset, full_lo, full_hi, nxt is not None, filter_until
            )

    def __enter__(self) -> RangeRead:
        if self._scan is not None:
            self._scan.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._scan is not None:
            self._scan.__exit__(kind, error, traceback)


def open_range_read(
    log: Log,
    start: int,
    end: int | None,
    isolation: Isolation,
    pins: contextlib.ExitStack | None = None,
) -> RangeRead:
    """The read behind ``Log.read_range``: ``end`` (None: the isolation bound) is cut to the isolation bound;
    OffsetOutOfRange when ``start`` lies outside ``[log start, log end]``."""
    log_start, leo = log.log_start_offset, log.log_end_offset
    if start < log_start or start > leo:
        raise OffsetOutOfRange(start, log_start, leo)
    bound = log.bound(isolation)
    end = bound if end is None else min(end, bound)
    return RangeRead(log, start, end, isolation, pins)


def read_fetch(log: Log, start: int, max_bytes: int, isolation: Isolation, min_one_message: bool) -> FetchDataInfo:
    """Kafka's answer to a read (``LocalLog.read``) taken from the range read: the stored bytes from the batch holding
    ``start``, at most ``max_bytes`` (at least that whole batch with ``min_one_message``), never into the batch that
    holds the isolation bound (with its position: Kafka's read stops before that batch), from one segment.

    Empty at the bound, or between it and the log end (then with ``start``'s own metadata); OffsetOutOfRange past the
    log end. The bytes are checked like every range read's (``StoredBatches.read``): a fetch never returns bad bytes.
    The ``Log.read`` of Kafka's shape (the follower's probe before a truncation, the ported scenarios of Kafka's log
    tests) is this function, so there is one read of stored batches.
    """
    if isolation is Isolation.HIGH_WATERMARK:
        bound = log.fetch_high_watermark_metadata()
    elif isolation is Isolation.LOG_END:
        bound = log.log_end_offset_metadata
    else:
        bound = log.fetch_last_stable_offset_metadata()
    if start == bound.message_offset:
        return FetchDataInfo(bound, b"")
    leo = log.log_end_offset_metadata
    if start > leo.message_offset:
        raise OffsetOutOfRange(start, log.log_start_offset, leo.message_offset)
    if start > bound.message_offset or bound.message_offset_only:
        return FetchDataInfo(log.offset_metadata(start), b"")
    with RangeRead(log, start, bound.message_offset, isolation, None) as read:
        for part in read:  # the first segment with a batch at or after start
            stored = part.stored
            if bound.segment_base_offset < stored.base_offset:  # a bound known on an older segment: Kafka's case 4
                return FetchDataInfo(log.offset_metadata(start), b"")
            first = next(iter(stored.headers(part.lo, part.hi)), None)
            if first is None:  # the span's bytes went under the read (a truncation)
                raise StorageError(f"{stored.path}: no batch at byte {part.lo} (truncated under a read?)")
            metadata = LogOffsetMetadata(start, stored.base_offset, part.lo)
            adjusted = max(max_bytes, first.size) if min_one_message else max_bytes
            if adjusted == 0:
                return FetchDataInfo(metadata, b"")
            # Never into the batch holding the bound (its position, when the bound lies in this segment).
            limit = bound.relative_position if bound.segment_base_offset == stored.base_offset else part.hi
            size = min(limit - part.lo, adjusted)
            data = stored.read(part.lo, limit, part.lo, size) if size > 0 else b""
            return FetchDataInfo(metadata, data, first_entry_incomplete=adjusted < first.size)
    return FetchDataInfo(leo, b"")
