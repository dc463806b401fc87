"""One partition's log: the rules over its local log (Kafka's UnifiedLog over LocalLog, without UnifiedLog's bulk).

The storage (segments, log end offset, rolls, flushes and the recovery point, truncation, deferred deletes, and the
reads of a range of offsets) is a :class:`~logfs.core.log.local.LocalLog`, :attr:`Log.local`. This class holds what
the bytes mean, each piece with one owner under ``_lock``:

* what an append must pass (``core/log/appendcheck.py``), and the offsets and leader epoch it is given;
* the log start offset, the high watermark (``core/log/highwatermark.py``) and the leader-epoch cache
  (``core/log/epoch.py``);
* the producer state and the last stable offset (``core/log/producers.py``), and retention.

Appends. :meth:`append_as_leader` (one producer batch), :meth:`append_batches_as_leader` (a request's batches),
:meth:`append_as_follower` (offsets the leader assigned) and :meth:`append_end_txn_marker` check their batches
(``core/log/appendcheck.py``) outside the lock, then write them under it through the write path,
``core/log/appends.py``, which orders what an append changes.

Reads. Every read of stored batches is the one range read (:meth:`read_range`, ``core/log/rangeread.py``), up to
the isolation bound this class gives (:meth:`bound`: the HW, the LSO for read_committed, the LEO for replicas);
:meth:`read` is Kafka's answer shape over it. Below the log start offset is OffsetOutOfRange.

Retention (:meth:`delete_old_segments`) never deletes at or above the HW; deleted segments are renamed
``.deleted`` and unlinked by :meth:`delete_expired_files` after ``file.delete.delay.ms``. A reader that pinned a
segment keeps reading it.

Threads: appends, rolls, truncations, flushes of the recovery point, retention and close are the writer's (any
thread, serialised by ``_lock``, which the LocalLog shares; the mount calls them from worker threads, never the trio
thread). Reads and the offset properties are safe from any thread at any time.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from pathlib import Path

from logfs.core.config import LogConfig
from logfs.core.durable import now_ms as wall_clock_ms
from logfs.core.errors import LockBusy, OffsetOutOfRange
from logfs.core.format.batch import TimestampType
from logfs.core.log import localread
from logfs.core.log.appendcheck import check_follower_append, check_leader_batch, check_leader_request
from logfs.core.log.appends import Appender
from logfs.core.log.batchcheck import ReadBounds
from logfs.core.log.batchcheck import register as register_bounds
from logfs.core.log.changes import Change, ChangeSink
from logfs.core.log.epoch import LeaderEpochFileCache
from logfs.core.log.handles import HandleCache
from logfs.core.log.highwatermark import HighWatermark
from logfs.core.log.index import TimestampOffset
from logfs.core.log.local import LocalLog
from logfs.core.log.logfile import LogFile
from logfs.core.log.producers import LogProducers
from logfs.core.log.rangeread import RangeRead, open_range_read, read_fetch
from logfs.core.log.retention import Rule, log_start_rule, retention_bytes_rule, retention_ms_rule
from logfs.core.log.scan import Segments
from logfs.core.log.segment import LogSegment
from logfs.core.log.storedbatches import StoredBatches
from logfs.core.offsets import AppendInfo, FetchDataInfo, Isolation, LogOffsetMetadata
from logfs.core.txn.index import AbortedTxn
from logfs.core.txn.producerstate import PRODUCER_ID_EXPIRATION_MS, ProducerStateManager

_log = logging.getLogger(__name__)


class Log:
    """One partition's log. Built by ``core/log/loader.py`` from a partition directory; see the module docstring."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        handles: HandleCache,
        epoch_cache: LeaderEpochFileCache,
        segments: Sequence[LogSegment],
        *,
        log_start_offset: int,
        recovery_point: int,
        high_watermark: int = 0,
        log_end_offset: int | None = None,
        producer_state: ProducerStateManager | None = None,
    ) -> None:
        """Adopt loaded segments; ``log_end_offset``, when the loader knows it, saves a scan of the active tail;
        ``producer_state`` is the state at the LEO (the loader rebuilds it; default: no producers)."""
        self._dir = directory
        self._lock = threading.RLock()
        self.local = LocalLog(
            directory, config, handles, segments, self._lock, recovery_point=recovery_point,
            log_end_offset=log_end_offset,
            snapshots_to_sync=lambda up_to: self._producers.state.take_unsynced_snapshots(up_to),
        )  # fmt: skip
        self.epoch_cache = epoch_cache
        leo = self.local.log_end_offset_metadata
        self._log_start_offset = max(log_start_offset, self.local.snapshot.bases[0])
        self._hw = HighWatermark(LogOffsetMetadata(self._log_start_offset))
        self._hw.update(LogOffsetMetadata(high_watermark), self._log_start_offset, leo)
        if producer_state is None:
            producer_state = ProducerStateManager(directory, leo.message_offset)
        self._producers = LogProducers(directory, producer_state, self._hw.offset, self._log_start_offset)
        self._appender = Appender(self.local, epoch_cache, self._producers, self._update_lso)
        register_bounds(directory, self)  # reads check batch offsets and epochs against this log

    @property
    def read_lock(self) -> threading.RLock:
        """The lock an append holds from its bytes to its log end offset and epoch (``core/log/batchcheck.py``
        takes it to look again at a batch that seems to exceed them)."""
        return self._lock

    def read_bounds(self, segment_base: int, log_file: LogFile, position: int) -> ReadBounds:
        """The bounds of the batches of the segment at ``segment_base`` from byte ``position`` on, for the read-side
        check of the header fields the CRC does not cover (``core/log/batchcheck.py``, issue 23): base offsets from
        the segment's base (or above the offset index's entry before the one at or below ``position``), last offsets
        below the next segment's base (the log end offset for the last segment, and never past what a relative
        offset can hold), the first batch's last offset at most the index entry at ``position`` when there is one,
        and the leader-epoch cache. Any thread, no lock: the snapshot of segments and the cache's copy are
        consistent enough because every bound only grows while a segment's bytes exist (a truncation below a reader
        makes its read fail, as it does anyway)."""
        return localread.read_bounds(self.local, self.epoch_cache, segment_base, log_file, position)

    def __repr__(self) -> str:
        return (
            f"Log({str(self._dir)!r}, start={self._log_start_offset}, hw={self.high_watermark}, "
            f"leo={self.log_end_offset}, segments={len(self.local.snapshot.bases)})"
        )

    # --- offsets (any thread) --------------------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def on_change(self) -> ChangeSink:
        """Who hears what this log reports about itself (``core/log/changes.py``); the store sets it."""
        return self.local.on_change

    @on_change.setter
    def on_change(self, sink: ChangeSink) -> None:
        self.local.on_change = sink

    def _checkpoint_changed(self) -> None:
        self.local.on_change(Change.CHECKPOINT)

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def config(self) -> LogConfig:
        return self.local.config

    @config.setter
    def config(self, config: LogConfig) -> None:
        """A topic's config changed (the store applies it under no append: its next roll or flush rule uses it)."""
        self.local.config = config

    @property
    def log_end_offset(self) -> int:
        return self.local.log_end_offset

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        return self.local.log_end_offset_metadata

    @property
    def high_watermark(self) -> int:
        return self._hw.offset

    @property
    def durable_offset(self) -> int:
        """Records below it are on disk: flushed (the recovery point) or fsynced as records (:meth:`flush_records`).
        Any thread."""
        return self.local.durable_offset

    @property
    def recovery_point(self) -> int:
        return self.local.recovery_point

    @property
    def last_stable_offset(self) -> int:
        """The offset below which every transaction is decided and replicated, never above the HW. Any thread."""
        return self._producers.stable.last_stable_offset

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open or not-yet-replicated transaction, at least the log start offset;
        None when there is none. Any thread."""
        return self._producers.stable.first_unstable_offset

    @property
    def producer_state(self) -> ProducerStateManager:
        """The producer state (writer thread only: it is not safe to read while appends run)."""
        return self._producers.state

    def remove_expired_producers(
        self, now_ms: int | None = None, expiration_ms: int = PRODUCER_ID_EXPIRATION_MS
    ) -> int:
        """Forget idle producers (``producer.id.expiration.ms``); how many went. Writer (the store's periodic work)."""
        with self._lock:
            return self._producers.state.remove_expired_producers(
                wall_clock_ms() if now_ms is None else now_ms, expiration_ms
            )

    def open_transactions(self) -> list[tuple[int, int]]:
        """``(producer id, first offset)`` of every open transaction. Writer (or any thread, under no appends)."""
        with self._lock:
            return self._producers.state.open_transactions()

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self.local.segments

    @property
    def active_segment(self) -> LogSegment:
        return self.local.active_segment

    @property
    def size_bytes(self) -> int:
        return self.local.size_bytes

    @property
    def unflushed_records(self) -> int:
        return self.local.unflushed_records

    @property
    def segment_snapshot(self) -> Segments:
        """The segments as they are now, immutable (``core/log/scan.py``). Any thread."""
        return self.local.snapshot

    def segment_for(self, offset: int) -> LogSegment | None:
        """The segment whose range holds ``offset`` (the floor by base offset). Any thread."""
        return self.local.snapshot.floor(offset)

    # --- appends (writer) ------------------------------------------------------------------------------------------

    def append_as_leader(
        self, batch: bytes | bytearray | memoryview, leader_epoch: int, now_ms: int | None = None
    ) -> AppendInfo:
        """Validate one producer batch, give it offsets from the LEO and the leader epoch, and append it.

        A ``bytearray`` or a writable ``memoryview`` (a batch inside a larger buffer, as the mount's write requests
        bring them) is taken over and stamped in place (no copy: at 1 MiB a batch a copy costs ~10 % of the append);
        ``bytes`` and read-only views are copied first.
        """
        now = wall_clock_ms() if now_ms is None else now_ms
        checked = check_leader_batch(batch, leader_epoch, self.config, now)
        with self._lock:
            return self._appender.one(checked, leader_epoch, now)

    def append_batches_as_leader(
        self, batches: Sequence[bytes | bytearray | memoryview], leader_epoch: int, now_ms: int | None = None
    ) -> tuple[list[AppendInfo], Exception | None]:
        """Append the producer batches of one request (Kafka appends a produce request's whole MemoryRecords at
        once): what each append pays once is paid once per request. Returns the appends in order and the error that
        stopped them (None when every batch went in).

        The batches are checked first, outside the lock (``appendcheck.check_leader_request``: the rules of
        :meth:`append_as_leader`, the common batches in one compiled call); those before the first that fails are
        appended, the rest not (as one :meth:`append_as_leader` per batch would). Then, under the lock, they are
        stamped and written in runs (``appendruns.append_request``: a run to one segment in one ``pwritev``, its
        index entries in one go, the LEO published and the epoch recorded once; a producer's batches checked in
        order against the state the run's earlier ones leave); a batch the producer rules refuse, or one the roll
        rules roll for, goes alone (``Appender.one``, core/log/appends.py) after the run before it. A run that fails
        to be written (a full disk) leaves nothing of itself in the log; the runs before it stay.
        """
        now = wall_clock_ms() if now_ms is None else now_ms
        config = self.config
        checked, error = check_leader_request(batches, leader_epoch, config, now)
        if not checked:
            return [], error
        log_append = config.message_timestamp_type == TimestampType.LOG_APPEND_TIME
        with self._lock:
            infos, failed = self._appender.request(checked, leader_epoch, now, log_append)
        return infos, failed or error

    def append_end_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        coordinator_epoch: int,
        leader_epoch: int,
        now_ms: int | None = None,
    ) -> AppendInfo:
        """Write a COMMIT or ABORT marker for ``producer_id`` at the LEO (Kafka's coordinator-origin append).

        It ends the producer's open transaction (if any); an abort is recorded in the active segment's
        ``.txnindex`` with the LSO of that moment. An older producer epoch is ProducerFenced, an older coordinator
        epoch CoordinatorFenced; nothing is written then. Writer.
        """
        now = wall_clock_ms() if now_ms is None else now_ms
        with self._lock:
            return self._appender.marker(producer_id, producer_epoch, commit, coordinator_epoch, leader_epoch, now)

    def _update_lso(self) -> None:
        """Recompute and publish the first unstable offset and the LSO. Writer, under the lock."""
        self._producers.update_lso(self._hw.offset, self._log_start_offset)

    def append_as_follower(
        self, data: bytes | bytearray | memoryview, now_ms: int | None = None, *, roll: bool = True
    ) -> AppendInfo | None:
        """Append batches whose offsets the leader assigned (one or more, back to back, checked as Kafka's follower
        does: ``core/log/appendcheck.py``); None for no batch.

        ``roll=False`` leaves rolling to the caller (a follower rolls where its leader's segments start, so that its
        segment files stay identical even when segment.jitter.ms or time-based rolls would decide otherwise); only a
        batch that cannot fit the active segment (relative-offset overflow, a full index, segment.bytes) still rolls.
        """
        now = wall_clock_ms() if now_ms is None else now_ms
        checked = check_follower_append(data, self.config)
        if checked is None:
            return None
        with self._lock:
            return self._appender.follower(checked, data, now, roll)

    def roll(self, expected_next_offset: int | None = None, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at ``max(expected_next_offset, LEO)`` (``LocalLog.roll``: the old one is
        trimmed, and flushed later by :meth:`flush_rolled`) and snapshot the producer state at its base.

        The new segment counts as created at ``now_ms`` (default: the wall clock) for segment.ms. Rolling onto the
        base of an empty active segment re-creates it (its files go as a deletion does). Writer.
        """
        with self._lock:
            return self._appender.roll(expected_next_offset, now_ms)

    def flush_rolled(self) -> None:
        """fsync the segments left by rolls since the last call and raise the recovery point to them
        (``LocalLog.flush_rolled``). Writer."""
        self.local.flush_rolled()

    # --- reads (any thread) ---------------------------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        isolation: Isolation = Isolation.HIGH_WATERMARK,
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """Kafka's read (``UnifiedLog.read``; docs/storage.md, "Rules worth knowing"): OffsetOutOfRange below the log
        start offset, then the bytes up to the isolation bound, taken from the one range read
        (``rangeread.read_fetch``); TXN_COMMITTED reads stop at the LSO and carry the aborted transactions of the
        fetched range (docs/storage.md, "Idempotent producers and transactions"). Any thread."""
        log_start = self._log_start_offset
        if start_offset < log_start:
            raise OffsetOutOfRange(start_offset, log_start, self.local.log_end_offset)
        fetched = read_fetch(self, start_offset, max_bytes, isolation, min_one_message)
        if isolation is Isolation.TXN_COMMITTED:
            return localread.add_aborted_transactions(self.local, fetched)
        return fetched

    def bound(self, isolation: Isolation) -> int:
        """Where a read at ``isolation`` ends now: the log end offset, the HW, or the last stable offset (never above
        the HW). Any thread."""
        if isolation is Isolation.HIGH_WATERMARK:
            return self.high_watermark
        if isolation is Isolation.LOG_END:
            return self.local.log_end_offset
        return self.last_stable_offset

    def read_range(
        self,
        start_offset: int,
        end_offset: int | None = None,
        isolation: Isolation = Isolation.HIGH_WATERMARK,
        *,
        pins: contextlib.ExitStack | None = None,
    ) -> RangeRead:
        """The checked stored batches of offsets ``[start_offset, end_offset)`` segment by segment, ``end_offset``
        (None: no bound of the caller's) cut to the isolation bound; read_committed carries the aborted transactions.
        OffsetOutOfRange when ``start_offset`` lies outside the log. The read every view renders: see
        ``core/log/rangeread.py``. Any thread."""
        return open_range_read(self, start_offset, end_offset, isolation, pins)

    def stored_for(self, offset: int) -> StoredBatches | None:
        """The stored batches of the segment holding ``offset`` (the floor by base offset), or None below the first.
        One object per segment: a cache may key on it (a cleaned segment is a new one). Any thread."""
        segment = self.local.snapshot.floor(offset)
        return None if segment is None else segment.stored

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound_offset)``, from the segment holding
        ``start_offset`` on. Any thread."""
        return localread.collect_aborted_transactions(self.local, start_offset, upper_bound_offset)

    def fetch_last_stable_offset_metadata(self) -> LogOffsetMetadata:
        """The LSO with its position (the HW's when they are equal). Any thread."""
        lso = self._producers.stable.last_stable_offset
        hw = self.fetch_high_watermark_metadata()
        if lso >= hw.message_offset:
            return hw
        return self.offset_metadata(lso)

    def offset_metadata(self, offset: int) -> LogOffsetMetadata:
        """Where ``offset`` lies (segment and position of its batch), for a bound; the LEO's when at the end.

        The lookup a reader of ``at/<offset>`` starts with (offset index, then a short forward scan of headers): what
        Kafka's ``convertToOffsetMetadataOrThrow`` answers, without the one byte its read fetches. OffsetOutOfRange
        below the log start offset. Any thread."""
        log_start = self._log_start_offset
        if offset < log_start:
            raise OffsetOutOfRange(offset, log_start, self.local.log_end_offset)
        return localread.offset_metadata(self.local, offset, log_start)

    def fetch_high_watermark_metadata(self) -> LogOffsetMetadata:
        """The HW with its position, materialised from a message-only value the first time it is needed.

        The position is looked up without the log's lock (a read) and published only if the HW did not move
        meanwhile, so a reader never waits behind an append. Any thread.
        """
        hw = self._hw.metadata
        if not hw.message_offset_only:
            return hw
        full = self.offset_metadata(hw.message_offset)
        if full.message_offset != hw.message_offset:
            return hw
        with self._lock:
            if self._hw.metadata is hw:
                self._hw.metadata = full
        return full

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The first record with timestamp ≥ ``timestamp`` at or after the log start offset (Kafka's
        ``UnifiedLog.fetchOffsetByTimestamp``). Any thread."""
        return localread.fetch_offset_by_timestamp(self.local, timestamp, self._log_start_offset)

    # --- the high watermark (writer) ---------------------------------------------------------------------------------

    def update_high_watermark(self, hw: int) -> int:
        """Set the HW clamped to ``[log start, LEO]`` (it may move back). Returns the new HW. Writer."""
        with self._lock:
            new = self._hw.update(LogOffsetMetadata(hw), self._log_start_offset, self.local.log_end_offset_metadata)
            self._update_lso()
            self._checkpoint_changed()
            return new

    def maybe_increment_high_watermark(
        self, hw: LogOffsetMetadata, *, blocking: bool = True
    ) -> LogOffsetMetadata | None:
        """The leader's forward-only HW move (OffsetOutOfRange past the LEO). Any thread; ``blocking=False`` raises
        LockBusy instead of waiting for an append to let go of the log (the trio thread must never wait for one)."""
        if not self._lock.acquire(blocking=blocking):
            raise LockBusy(f"{self.directory.name}: the log is busy")
        try:
            moved = self._hw.maybe_increment(hw, self.local.log_end_offset_metadata)
            if moved is not None:
                self._update_lso()
                self._checkpoint_changed()
            return moved
        finally:
            self._lock.release()

    def maybe_update_high_watermark(self, hw: int) -> int | None:
        """The follower's HW move: clamped, returns the new HW if it changed. Writer."""
        with self._lock:
            moved = self._hw.maybe_update_as_follower(hw, self._log_start_offset, self.local.log_end_offset_metadata)
            if moved is not None:
                self._update_lso()
                self._checkpoint_changed()
            return moved

    # --- flush and recovery point (writer) -------------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets below ``offset`` (default: the LEO), and the producer snapshots up to
        there, and raise the recovery point (``LocalLog.flush``). Blocking disk work: call it off the trio thread;
        the fsyncs run *outside* the log's lock, so appends and HW-bounded reads never wait for the disk."""
        self.local.flush(offset)

    def flush_records(self, offset: int | None = None) -> None:
        """Make the records below ``offset`` (default: the LEO) durable, the recovery point left where it is
        (``LocalLog.flush_records``: an fsync(2) through the mount, acks=all). Blocking; off the trio thread."""
        self.local.flush_records(offset)

    def ms_since_last_flush(self, now_ms: int | None = None) -> int:
        return self.local.ms_since_last_flush(now_ms)

    # --- truncation (writer) ---------------------------------------------------------------------------------------

    def truncate_to(self, target_offset: int) -> bool:
        """Remove everything at or after ``target_offset``; False if the log already ends there. Writer."""
        if target_offset < 0:
            raise OffsetOutOfRange(target_offset, self._log_start_offset, self.log_end_offset, what="truncation")
        with self._lock:
            if target_offset >= self.local.log_end_offset:
                return False
            if self.local.snapshot.bases[0] > target_offset:
                self.truncate_fully_and_start_at(target_offset)
                return True
            self.local.truncate_to(target_offset)
            self._log_start_offset = min(self._log_start_offset, target_offset)
            self.epoch_cache.truncate_from_end(target_offset)
            if self._hw.offset >= target_offset:
                leo = self.local.log_end_offset_metadata
                self._hw.update(leo, self._log_start_offset, leo)
            self._producers.rebuild(target_offset, self._log_start_offset, self.local.segments)
            self._update_lso()
            self._checkpoint_changed()  # after the HW and the log start moved: the store reads them after the call
            return True

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and start empty at ``new_offset`` (LEO = log start = HW = recovery point). Writer."""
        with self._lock:
            self.local.truncate_fully_and_start_at(new_offset)
            self._log_start_offset = new_offset
            self.epoch_cache.clear_and_flush()
            leo = self.local.log_end_offset_metadata
            self._hw.update(leo, new_offset, leo)
            self._producers.start_at(new_offset)
            self._update_lso()
            self._checkpoint_changed()

    # --- log start offset and retention (writer) ----------------------------------------------------------------------

    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        """Raise the log start offset (Kafka's deleteRecords); never past the HW. True if it moved. Writer."""
        with self._lock:
            if new_start > self._hw.offset:
                raise OffsetOutOfRange(
                    new_start, self._log_start_offset, self._hw.offset, what="log start offset increment past the HW"
                )
            if new_start <= self._log_start_offset:
                return False
            self._raise_log_start_offset(new_start)
            return True

    def _raise_log_start_offset(self, new_start: int) -> None:
        """Everything below ``new_start`` is gone: the epochs, the recovery, the producers and the LSO follow."""
        self._log_start_offset = new_start
        self._checkpoint_changed()
        self.epoch_cache.truncate_from_start(new_start)
        self.local.raise_recovery_point(new_start)
        self._producers.state.truncate_head(new_start)
        self._update_lso()

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Apply the log start offset, retention.ms and retention.bytes (Kafka's ``UnifiedLog.deleteOldSegments``); the
        segments deleted."""
        now = wall_clock_ms() if now_ms is None else now_ms
        deleted = 0
        with self._lock:
            deleted += self._delete_segments(log_start_rule(self._log_start_offset), now)
            if not self.config.delete:  # cleanup.policy=compact: only what lies below the log start offset goes
                return deleted
            if self.config.retention_ms >= 0:
                deleted += self._delete_segments(retention_ms_rule(now, self.config.retention_ms), now)
            retention_bytes = self.config.retention_bytes
            if retention_bytes >= 0 and self.size_bytes >= retention_bytes:
                deleted += self._delete_segments(retention_bytes_rule(self.size_bytes, retention_bytes), now)
        return deleted

    def _delete_segments(self, rule: Rule, now: int) -> int:
        """Delete the oldest segments ``rule`` lets go (``LocalLog.deletable_segments``, never past the HW) and
        raise the log start offset to the first left. Under the lock."""
        count = self.local.deletable_segments(rule, self._hw.offset)
        if count == 0:
            return 0
        if count == len(self.local.segments):
            self.roll()
        new_start = self.local.remove_and_delete_segments(count, now)
        self._producers.state.delete_snapshots_before(new_start)  # the snapshots of deleted segments go with them
        if new_start > self._log_start_offset:
            self._raise_log_start_offset(new_start)
        _log.info("%s: retention deleted %d segment(s); log start offset %d", self._dir.name, count, new_start)
        return count

    def delete_expired_files(self, now_ms: int | None = None) -> int:
        """Unlink ``.deleted`` segments whose delay has passed; returns how many. Writer."""
        return self.local.delete_expired_files(now_ms)

    # --- lifecycle -------------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush, snapshot the producer state at the LEO (so the next load replays nothing), trim and close every
        segment; unlink pending deletions. Writer."""
        with self._lock:
            self.flush()
            if self._producers.state.producers or self._producers.state.snapshot_offsets():
                self._producers.snapshot_at(self.local.log_end_offset, sync=True)
            self.local.close()
