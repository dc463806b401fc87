"""A partition's local log: its segments, log end offset, reads, rolls, flushes, truncations and deferred deletions
(Kafka's LocalLog, under the rules of ``core/log/log.py``'s :class:`~logfs.core.log.log.Log`, Kafka's UnifiedLog).

State and its single owner (this class):

* the segments, by base offset, as an immutable :class:`~logfs.core.log.scan.Segments` snapshot replaced on every
  roll, deletion and truncation, so readers on other threads never lock: they read the snapshot they got;
* the log end offset (LEO) with its position (``LogOffsetMetadata``), published after each append;
* the recovery point (everything below it is flushed), what is durable beyond it (``flush_records``), the records
  appended since the last flush, and the rolled segments still to flush;
* the segments renamed ``.deleted``, unlinked once ``file.delete.delay.ms`` has passed.

Reads (Kafka's ``LocalLog.read``, ``convertToOffsetMetadataOrThrow``) walk the snapshot and the LEO this class
publishes, without the lock: they are plain functions in ``core/log/localread.py``.

Retention (Kafka's ``deletableSegments`` and ``removeAndDeleteSegments``): the Log picks the rule and gives the HW;
:meth:`deletable_segments` walks the oldest segments under it and :meth:`remove_and_delete_segments` renames them
``.deleted``. A flush (:meth:`flush`: a rolled segment's, :meth:`flush_rolled`, or every ``flush.messages`` records
by :meth:`append`) fsyncs with its segments the producer snapshots the Log wrote up to there.

What the log *means* is not here: validation, producers and the LSO, the high watermark, leader epochs and the log
start offset are the Log's; it decides, and this class keeps the files in step.

Threads: like Kafka's LocalLog this class is not thread-safe on its own. Every method that changes state runs under
the owning Log's lock (``lock``, shared: the Log passes it in), except the fsyncs of :meth:`flush` and
:meth:`flush_records` and the unlinks of :meth:`delete_expired_files`, which run outside it so that appends and
HW-bounded reads never wait for the disk. Reads of the snapshot and of the offset properties are safe from any
thread at any time.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from logfs.core.config import LogConfig
from logfs.core.durable import fsync_dir
from logfs.core.durable import now_ms as wall_clock_ms
from logfs.core.errors import StorageError
from logfs.core.log.changes import Change, ChangeSink, ignore_changes
from logfs.core.log.handles import HandleCache
from logfs.core.log.retention import Rule, SegmentSummary, deletable_prefix
from logfs.core.log.roll import RollBounds, roll_jitter
from logfs.core.log.scan import Segments
from logfs.core.log.segment import DELETED_SUFFIX, LogSegment, SegmentPart
from logfs.core.logdirfailure import channel_for_dir
from logfs.core.offsets import LogOffsetMetadata
from logfs.core.txn.producersnapshot import sync_snapshot_files

_log = logging.getLogger(__name__)

NO_LIMIT = 2**63 - 1


class LocalLog:
    """The segments of one partition and their offsets. Built by the Log; see the module docstring."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        handles: HandleCache,
        segments: Sequence[LogSegment],
        lock: threading.RLock,
        *,
        recovery_point: int,
        log_end_offset: int | None = None,
        snapshots_to_sync: Callable[[int], list[Path]] = lambda _up_to: [],
    ) -> None:
        """Adopt loaded segments; ``log_end_offset``, when the loader knows it, saves a scan of the active tail;
        ``snapshots_to_sync(offset)`` hands over the producer snapshots at or below ``offset`` written without an
        fsync, which a :meth:`flush` to ``offset`` fsyncs with the segments (the Log's producer state keeps them)."""
        if not segments:
            raise StorageError(f"{directory}: a log needs at least one segment")
        self.directory = directory
        self.config = config  # the Log replaces it when the topic's config changes
        self.lock = lock
        self._handles = handles
        self._snapshots_to_sync = snapshots_to_sync
        self._segments = Segments.of(sorted(segments, key=lambda s: s.base_offset))
        active = self._segments.segments[-1]
        leo = active.read_next_offset() if log_end_offset is None else log_end_offset
        self._leo = LogOffsetMetadata(leo, active.base_offset, active.size_bytes)
        self._recovery_point = min(recovery_point, leo)
        self._unflushed_records = 0
        self._records_synced = 0  # records below it are on disk (flush_records), the recovery point aside
        self._last_flush_ms = wall_clock_ms()
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._rolled_upto = 0  # base of the newest rolled-to segment: everything below awaits a flush
        # Segment names created in the directory, and how many of them a completed directory fsync covers: a flush or
        # flush_records fsyncs the directory after its segments, before it returns, unless a directory fsync that
        # *began* after the newest name its records need has completed (POSIX: a new name is durable only then;
        # issue 16). A count, not a flag taken by the first flush: a second flush_records must not return while the
        # first one's directory fsync is still to come (tests/core/log/test_directory_sync_race.py).
        self._names_created = 0
        self._names_synced = 0
        self._failure = channel_for_dir(directory)  # the store's offline state (core/logdirfailure.py)
        # Who hears that this log needs a flush, has deletions pending or moved an offset the store checkpoints
        # (core/log/changes.py): the store sets it when it adopts the log. Called under the lock.
        self.on_change: ChangeSink = ignore_changes

    # --- what it holds (any thread) --------------------------------------------------------------------------------

    @property
    def snapshot(self) -> Segments:
        """The segments as they are now: immutable, for a reader to walk without the lock."""
        return self._segments

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._segments.segments

    @property
    def handles(self) -> HandleCache:
        """The store's cache of open segment files (a new segment registers with it)."""
        return self._handles

    @property
    def active_segment(self) -> LogSegment:
        return self._segments.segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments.segments)

    @property
    def log_end_offset(self) -> int:
        return self._leo.message_offset

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        return self._leo

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def durable_offset(self) -> int:
        """Records below it are on disk: flushed (the recovery point) or fsynced as records (:meth:`flush_records`)."""
        return max(self._recovery_point, self._records_synced)

    @property
    def unflushed_records(self) -> int:
        return self._unflushed_records

    def ms_since_last_flush(self, now_ms: int | None = None) -> int:
        return (wall_clock_ms() if now_ms is None else now_ms) - self._last_flush_ms

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def needs_flush(self) -> bool:
        """Records appended since the last flush, or a rolled segment not flushed yet (what ``Change.FLUSH`` said)."""
        return bool(self._unflushed_records) or self._rolled_upto > self._recovery_point

    @property
    def has_pending_deletes(self) -> bool:
        return bool(self._pending_deletes)

    # --- appends and rolls (under the lock) ---------------------------------------------------------------------------

    def append(self, last_offset: int, max_timestamp: int, offset_of_max_timestamp: int, data: bytes | bytearray
               | memoryview, records: int) -> None:  # fmt: skip
        """Append validated batches with assigned offsets to the active segment (:meth:`append_parts` of one part)."""
        self.append_parts(((data, last_offset, max_timestamp, offset_of_max_timestamp),), records)

    def append_parts(self, parts: Sequence[SegmentPart], records: int) -> None:
        """Append the batches of one request, offsets assigned, to the active segment in one write
        (``LogSegment.append_parts``), publish the new LEO, and flush once ``flush.messages`` records are unflushed
        (after the whole append, as Kafka's UnifiedLog.append checks once per append; the count is this class's).

        The LEO is published as soon as the bytes are in the segment, so that a failure of what the Log does next
        (the epoch checkpoint's write) can never make the next append reuse these offsets."""
        active = self._segments.segments[-1]
        active.append_parts(parts)
        last_offset = parts[-1][1]
        self._leo = LogOffsetMetadata(last_offset + 1, active.base_offset, active.size_bytes)
        if not self._unflushed_records:
            self.on_change(Change.FLUSH)  # from now on the store's tick looks at this log, until it is flushed
        self._unflushed_records += records
        if self._unflushed_records >= self.config.flush_messages:
            self.flush(last_offset + 1)

    def should_roll(self, size: int, max_timestamp: int, last_offset: int, now: int, *, by_time: bool = True) -> bool:
        """Whether an append of ``size`` bytes ending at ``last_offset`` needs a new active segment first."""
        return self.roll_bounds(now, by_time=by_time).rolls(size, max_timestamp, last_offset)

    def roll_bounds(self, now: int, *, by_time: bool = True) -> RollBounds:
        """The roll rules of the active segment as bounds (``SegmentRoll.roll_bounds``), valid until it changes."""
        segment_ms = self.config.segment_ms if by_time else NO_LIMIT
        if by_time and self.config.compact:  # Kafka's LogConfig.maxSegmentMs: max.compaction.lag.ms rolls too
            segment_ms = min(segment_ms, self.config.max_compaction_lag_ms)
        return self.active_segment.roll.roll_bounds(self.config.segment_bytes, segment_ms, now)

    def roll(self, expected_next_offset: int | None = None, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at ``max(expected_next_offset, LEO)``; the old one gets its final time index
        entry and trimmed indexes, and is flushed later (:meth:`flush_rolled`), not here.

        The new segment counts as created at ``now_ms`` (default: the wall clock) for segment.ms. Rolling onto the
        base of an empty active segment re-creates it (its files go as a deletion does)."""
        new_base = max(expected_next_offset or 0, self._leo.message_offset)
        active = self.active_segment
        if active.base_offset == new_base:
            if active.size_bytes:
                raise StorageError(f"cannot roll onto {new_base}: segment {active.log_path} already holds offsets")
            # An empty active segment asks for this roll when an index of it has no slot left (KAFKA-6388: an
            # index resized to 0 bytes); the new one gets full-size indexes.
            self._schedule_delete(active)
            segment = self._new_segment(new_base, now_ms)
            self._segments = Segments.of([*self._segments.segments[:-1], segment])
            return segment
        if new_base < active.base_offset:
            raise StorageError(f"cannot roll to {new_base}, below the active segment's base {active.base_offset}")
        active.on_become_inactive_segment()
        segment = self._new_segment(new_base, now_ms)
        self._segments = Segments.of([*self._segments.segments, segment])
        self._leo = LogOffsetMetadata(self._leo.message_offset, new_base, 0)
        # Kafka flushes the rolled segment asynchronously; so do we: the store's tick calls flush_rolled() on a
        # worker thread, so an append that rolls never waits for an fsync of the segment it leaves.
        self._rolled_upto = max(self._rolled_upto, new_base)
        self.on_change(Change.FLUSH)
        return segment

    def _new_segment(self, base_offset: int, now_ms: int | None = None) -> LogSegment:
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            stale = self.directory / f"{base_offset:020d}{suffix}"
            if stale.exists():
                _log.warning("deleting stale %s before creating a segment at %d", stale, base_offset)
                stale.unlink()
        segment = new_segment(self.directory, base_offset, self.config, self._handles, created_ms=now_ms)
        # An empty segment that leaves no file behind would be forgotten by a restart, which would then start the log
        # over at the log start offset checkpoint (absent when it equals the first segment's base): offsets reused.
        segment.log_file.create()
        self._names_created += 1
        return segment

    # --- flush and recovery point ---------------------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets below ``offset`` (default: the LEO), and the producer snapshots up to
        there (``snapshots_to_sync``), then raise the recovery point.

        Blocking disk work: call it off the trio thread. Takes the lock around its bookkeeping; the fsyncs run
        *outside* it, so appends and HW-bounded reads never wait for the disk; the recovery point only rises once
        they are done, and never above the LEO of that moment (a truncation meanwhile lowers what it may reach).
        """
        self._failure.check()  # offline: no flush succeeds, so the recovery point stays where the last good one was
        with self.lock:
            target = self._leo.message_offset if offset is None else min(offset, self._leo.message_offset)
            if target <= self._recovery_point:
                return
            unflushed = self._segments_holding(self._recovery_point, target)
            unflushed_records = self._unflushed_records
            snapshots = self._snapshots_to_sync(target)
            names = self._names_created
        for segment in unflushed:
            if segment in self._segments.segments:  # a truncation or retention may have removed it meanwhile
                segment.flush()
        sync_snapshot_files(snapshots, self.directory)
        with contextlib.suppress(FileNotFoundError):  # a deleted partition: nothing to make durable
            self._sync_directory(names)
        with self.lock:
            target = min(target, self._leo.message_offset)
            if target > self._recovery_point:
                self._recovery_point = target
                self.on_change(Change.CHECKPOINT)
            if target >= self._leo.message_offset:
                self._unflushed_records = max(0, self._unflushed_records - unflushed_records)
            self._last_flush_ms = wall_clock_ms()

    def flush_rolled(self) -> None:
        """fsync the segments left by rolls since the last call and raise the recovery point to them."""
        rolled_upto = self._rolled_upto
        if rolled_upto > self._recovery_point:
            self.flush(rolled_upto)

    def raise_recovery_point(self, offset: int) -> None:
        """Under the lock: nothing below ``offset`` needs recovery any more (the log start offset passed it)."""
        if self._recovery_point < offset:
            self._recovery_point = offset
            self.on_change(Change.CHECKPOINT)

    def flush_records(self, offset: int | None = None) -> None:
        """Make the records below ``offset`` (default: the LEO) durable: fsync the ``.log`` files holding them, not
        their indexes, and leave the recovery point where it is (an fsync(2) through the mount, acks=all).

        Half the cost of a flush on ext4 (each fsync'd file is a journal commit of its own). Safe because what the
        recovery point has not passed is recovered after a crash — its indexes rebuilt from the durable ``.log``.
        Blocking; off the trio thread; takes the lock around its bookkeeping, the fsyncs run outside it.
        """
        # offline: every fsync fails, even one with nothing new to sync (docs/storage.md, "Storage faults")
        self._failure.check()
        with self.lock:
            target = self._leo.message_offset if offset is None else min(offset, self._leo.message_offset)
            done = max(self._recovery_point, self._records_synced)
            if target <= done:
                return
            unsynced = self._segments_holding(done, target)
            names = self._names_created
        for segment in unsynced:
            if segment in self._segments.segments:  # a truncation or retention may have removed it meanwhile
                segment.flush_records()
        self._sync_directory(names)  # a roll's new .log, before the ack
        with self.lock:
            self._records_synced = max(self._records_synced, min(target, self._leo.message_offset))

    def _sync_directory(self, names: int) -> None:
        """fsync the partition directory unless a completed directory fsync already covers the first ``names``
        segment names created (``_names_created`` read with the flush's target). Two flushes at once may both fsync
        it; neither returns before one that began after their names did has completed. An index file, named later at
        its first entry, is not covered: a crash that loses it only means the segment is recovered and the index
        rebuilt."""
        if names <= self._names_synced:
            return
        fsync_dir(self.directory)
        with self.lock:
            self._names_synced = max(self._names_synced, names)

    def _segments_holding(self, start: int, end: int) -> list[LogSegment]:
        """The segments holding offsets in ``[start, end)`` (the ones a flush from ``start`` to ``end`` fsyncs)."""
        view = self._segments
        return [
            segment
            for i, segment in enumerate(view.segments)
            if segment.base_offset < end and (i + 1 == len(view.bases) or view.bases[i + 1] > start)
        ]

    # --- truncation and deletion (under the lock) -------------------------------------------------------------------

    def truncate_to(self, target_offset: int) -> None:
        """Remove everything at or after ``target_offset``, which the first segment's base must not pass."""
        keep = [s for s in self._segments.segments if s.base_offset <= target_offset]
        drop = [s for s in self._segments.segments if s.base_offset > target_offset]
        self._segments = Segments.of(keep)
        for segment in drop:
            self._schedule_delete(segment)
        active = self.active_segment
        active.truncate_to(target_offset)
        self._leo = LogOffsetMetadata(target_offset, active.base_offset, active.size_bytes)
        self._recovery_point = min(self._recovery_point, target_offset)
        self._records_synced = min(self._records_synced, target_offset)
        self._rolled_upto = min(self._rolled_upto, target_offset)  # else flush_rolled could pass the new LEO
        self._unflushed_records = 0 if self._recovery_point >= target_offset else self._unflushed_records
        self.on_change(Change.CHECKPOINT)

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and start empty at ``new_offset`` (LEO = recovery point)."""
        for segment in self._segments.segments:
            self._schedule_delete(segment)
        segment = self._new_segment(new_offset)
        self._segments = Segments.of([segment])
        self._leo = LogOffsetMetadata(new_offset, new_offset, 0)
        self._recovery_point = new_offset
        self._records_synced = new_offset
        self._rolled_upto = min(self._rolled_upto, new_offset)
        self._unflushed_records = 0
        self.on_change(Change.CHECKPOINT)

    def deletable_segments(self, rule: Rule, high_watermark: int) -> int:
        """How many of the oldest segments retention may delete under ``rule`` (Kafka's
        ``LocalLog.deletableSegments``): none that the HW has not passed (``core/log/retention.py``)."""
        summaries = [SegmentSummary(s.base_offset, s.size_bytes, s.largest_timestamp) for s in self._segments.segments]
        return deletable_prefix(summaries, rule, high_watermark, self._leo.message_offset)

    def remove_and_delete_segments(self, count: int, now: int) -> int:
        """Remove the first ``count`` segments (retention; never the active one: the Log rolls first) and schedule
        their files' deletion (Kafka's ``removeAndDeleteSegments``); returns the new first segment's base offset."""
        doomed = self._segments.segments[:count]
        self._segments = Segments.of(self._segments.segments[count:])
        for segment in doomed:
            self._schedule_delete(segment, now)
        return self._segments.bases[0]

    def replace_segments(self, new: LogSegment, old: Sequence[LogSegment], now: int | None = None) -> None:
        """The log cleaner's swap (``core/log/cleaner/swap.py`` holds the protocol): ``new`` takes the place of the
        consecutive non-active segments ``old`` in the snapshot, whose files are renamed ``.deleted`` and unlinked
        after ``file.delete.delay.ms`` (a reader that pinned one keeps reading it). Under the lock."""
        segments = list(self._segments.segments)
        first = segments.index(old[0])
        self._segments = Segments.of([*segments[:first], new, *segments[first + len(old) :]])
        for segment in old:
            self._schedule_delete(segment, now)

    def _schedule_delete(self, segment: LogSegment, now: int | None = None) -> None:
        """Rename the segment's files ``.deleted``; unlink them ``file.delete.delay.ms`` after ``now``."""
        segment.close()
        segment.change_file_suffixes("", DELETED_SUFFIX)
        start = wall_clock_ms() if now is None else now
        self._pending_deletes.append((start + self.config.file_delete_delay_ms, segment))
        self.on_change(Change.DELETE)

    def delete_expired_files(self, now_ms: int | None = None) -> int:
        """Unlink ``.deleted`` segments whose delay has passed; returns how many. Takes the lock to pick them, unlinks
        outside it."""
        now = wall_clock_ms() if now_ms is None else now_ms
        with self.lock:
            due = [s for t, s in self._pending_deletes if t <= now]
            self._pending_deletes = [(t, s) for t, s in self._pending_deletes if t > now]
        for segment in due:
            segment.delete_if_exists()
        return len(due)

    def close(self) -> None:
        """Trim and close every segment; unlink pending deletions. Under the lock, after the Log's last flush.

        The active segment is flushed first when it holds records but has never written its offset index: the log
        start offset passed its records (delete-records raises the recovery point with it, as Kafka's
        ``updateLogStartOffset`` does) before any flush reached it, so the Log's last flush found nothing to do.
        Kafka's clean shutdown flushes the active segment whatever the recovery point says
        (``flush(forceFlushActiveSegment = true)``); here only a segment that needs it is, so an idle store's close
        costs no fsync, and the next open finds every index and recovers nothing."""
        segments = self._segments.segments
        try:
            if segments and segments[-1].size_bytes and segments[-1].offset_index_missing():
                segments[-1].flush()
        finally:  # a failing disk: the segments still give back their descriptors
            for segment in segments:
                segment.close()
        self.delete_expired_files(NO_LIMIT)


def new_segment(
    directory: Path,
    base_offset: int,
    config: LogConfig,
    handles: HandleCache,
    *,
    created_ms: int | None = None,
    log_size_bytes: int | None = 0,
    file_suffix: str = "",
) -> LogSegment:
    """A segment described by ``config`` (its roll jitter drawn now); opens nothing. ``file_suffix``: see
    ``LogSegment``."""
    return LogSegment(
        directory,
        base_offset,
        index_interval_bytes=config.index_interval_bytes,
        max_index_bytes=config.segment_index_bytes,
        handles=handles,
        roll_jitter_ms=roll_jitter(config.segment_jitter_ms, config.segment_ms),
        created_ms=created_ms,
        log_size_bytes=log_size_bytes,
        file_suffix=file_suffix,
    )
