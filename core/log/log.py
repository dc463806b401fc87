"""One partition's log: its segments, offsets and appends (Kafka's LocalLog with the log-level rules of UnifiedLog).

State and its single owner (this class, under ``_lock``):

* the segments, by base offset, as an immutable snapshot replaced on every roll, deletion and truncation, so
  readers on other threads never lock: they read the snapshot they got;
* the log end offset (LEO) with its position (``LogOffsetMetadata``), published after each append;
* the log start offset, the recovery point (everything below it is flushed), the high watermark
  (``core/log/highwatermark.py``) and the leader-epoch cache (``core/log/epoch.py``).

Appends. :meth:`append_as_leader` takes one producer batch (Kafka's v2 produce carries exactly one per
partition): it is validated deeply (``validate_batch(client=True)``), its offsets start at the LEO and its leader
epoch is stamped in place, its maxTimestamp corrected (or set to now for LOG_APPEND_TIME), and it is appended to the
active segment, rolling first when a roll rule says so (``LogSegment.should_roll``). :meth:`append_as_follower`
takes batches whose offsets the leader assigned: they must ascend (OffsetsOutOfOrder) and start at or above the LEO
(UnexpectedAppendOffset); a gap rolls to a new segment based at the incoming first offset.

Reads (:meth:`read`) follow reference §5 exactly: below the log start offset or above the LEO is
OffsetOutOfRange; at the isolation bound or between it and the LEO an empty result; otherwise bytes from the start
of the batch holding the offset, at most ``max_bytes`` (at least one batch with ``min_one_message``) and never past
the bound (the HW for HIGH_WATERMARK, the LEO for LOG_END).

Producers and transactions (``core/txn/producerstate.py``): a batch with a producer id is checked against its producer's
state before anything is written (fenced epoch, sequence, duplicate: a retry answers with the original's offsets and
stores nothing); a batch without one costs a single comparison. :meth:`append_end_txn_marker` writes COMMIT and
ABORT markers; an abort also goes into the active segment's ``.txnindex``. The last stable offset (LSO) is the first
offset of the earliest transaction that is open or whose marker the HW has not passed, never above the HW; it is
recomputed on every HW move and published as one frozen value (``core/txn/stableoffset.py``), so any thread reads it.
TXN_COMMITTED reads stop at it and carry the aborted transactions of the fetched range. A producer snapshot is
written at every roll (fsynced by :meth:`flush_rolled`) and at close.

Retention (:meth:`delete_old_segments`) never deletes at or above the HW; deleted segments are renamed
``.deleted`` and unlinked by :meth:`delete_expired_files` after ``file.delete.delay.ms``. A reader that pinned a
segment keeps reading it.

Threads: appends, rolls, truncations, flushes of the recovery point, retention and close are the writer's (any
thread, serialised by ``_lock``; the mount calls them from worker threads, never the trio thread). Reads and the
offset properties are safe from any thread at any time.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import random
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from logfs.core.config import LogConfig
from logfs.core.durable import now_ms as wall_clock_ms
from logfs.core.errors import (
    InvalidOffset,
    InvalidTimestamp,
    LockBusy,
    OffsetOutOfRange,
    OffsetsOutOfOrder,
    RecordBatchTooLarge,
    RecordTooLarge,
    StorageError,
    UnexpectedAppendOffset,
)
from logfs.core.format.batch import (
    TimestampType,
    assign_offset_and_epoch,
    encode_end_txn_marker,
    iter_batch_positions,
    set_max_timestamp,
    validate_batch,
)
from logfs.core.format.control import ControlType
from logfs.core.log.epoch import LeaderEpochFileCache
from logfs.core.log.handles import HandleCache
from logfs.core.log.highwatermark import HighWatermark
from logfs.core.log.index import TimestampOffset
from logfs.core.log.retention import (
    Rule,
    SegmentSummary,
    deletable_prefix,
    log_start_rule,
    retention_bytes_rule,
    retention_ms_rule,
)
from logfs.core.log.segment import DELETED_SUFFIX, LogSegment
from logfs.core.offsets import AppendInfo, FetchDataInfo, Isolation, LogOffsetMetadata, LogOffsetPosition
from logfs.core.txn.index import AbortedTxn, collect_aborted
from logfs.core.txn.producerstate import (
    PRODUCER_ID_EXPIRATION_MS,
    BatchMetadata,
    ProducerStateManager,
    ProducerUpdate,
    apply_replicated,
    read_marker,
    replay,
    sync_snapshot_files,
)
from logfs.core.txn.stableoffset import StableOffsets, stable_offsets, with_aborted_transactions

_log = logging.getLogger(__name__)

NO_LIMIT = 2**63 - 1


@dataclass(frozen=True, slots=True)
class _Segments:
    """An immutable view of the segments: base offsets ascending and the segments in the same order."""

    bases: tuple[int, ...]
    segments: tuple[LogSegment, ...]

    def floor(self, offset: int) -> LogSegment | None:
        i = bisect.bisect_right(self.bases, offset) - 1
        return self.segments[i] if i >= 0 else None

    def index_of(self, base_offset: int) -> int:
        return bisect.bisect_left(self.bases, base_offset)


def _view(segments: Sequence[LogSegment]) -> _Segments:
    return _Segments(tuple(s.base_offset for s in segments), tuple(segments))


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
        if not segments:
            raise StorageError(f"{directory}: a log needs at least one segment")
        self._dir = directory
        self.config = config
        self._handles = handles
        self._lock = threading.RLock()
        self._segments = _view(sorted(segments, key=lambda s: s.base_offset))
        self.epoch_cache = epoch_cache
        active = self._segments.segments[-1]
        leo = active.read_next_offset() if log_end_offset is None else log_end_offset
        self._leo = LogOffsetMetadata(leo, active.base_offset, active.size_bytes)
        self._log_start_offset = max(log_start_offset, self._segments.bases[0])
        self._recovery_point = min(recovery_point, self._leo.message_offset)
        self._hw = HighWatermark(LogOffsetMetadata(self._log_start_offset))
        self._hw.update(LogOffsetMetadata(high_watermark), self._log_start_offset, self._leo)
        self._unflushed_records = 0
        self._records_synced = 0  # records below it are on disk (flush_records), the recovery point aside
        self._last_flush_ms = wall_clock_ms()
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        self._rolled_upto = 0  # base of the newest rolled-to segment: everything below awaits flush_rolled()
        if producer_state is None:
            producer_state = ProducerStateManager(directory, self._leo.message_offset)
        self._producer_state = producer_state
        self._stable = StableOffsets(None, self._hw.offset)  # published: see _update_lso
        self._update_lso()

    def __repr__(self) -> str:
        return (
            f"Log({str(self._dir)!r}, start={self._log_start_offset}, hw={self.high_watermark}, "
            f"leo={self.log_end_offset}, segments={len(self._segments.bases)})"
        )

    # --- offsets (any thread) --------------------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        return self._dir

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._leo.message_offset

    @property
    def log_end_offset_metadata(self) -> LogOffsetMetadata:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw.offset

    @property
    def durable_offset(self) -> int:
        """Records below it are on disk: flushed (the recovery point) or fsynced as records (:meth:`flush_records`).
        Any thread."""
        return max(self._recovery_point, self._records_synced)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def last_stable_offset(self) -> int:
        """The offset below which every transaction is decided and replicated, never above the HW. Any thread."""
        return self._stable.last_stable_offset

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest open or not-yet-replicated transaction, at least the log start offset;
        None when there is none. Any thread."""
        return self._stable.first_unstable_offset

    @property
    def producer_state(self) -> ProducerStateManager:
        """The producer state (writer thread only: it is not safe to read while appends run)."""
        return self._producer_state

    def remove_expired_producers(
        self, now_ms: int | None = None, expiration_ms: int = PRODUCER_ID_EXPIRATION_MS
    ) -> int:
        """Forget idle producers (``producer.id.expiration.ms``); how many went. Writer (the store's periodic work)."""
        with self._lock:
            return self._producer_state.remove_expired_producers(
                wall_clock_ms() if now_ms is None else now_ms, expiration_ms
            )

    def open_transactions(self) -> list[tuple[int, int]]:
        """``(producer id, first offset)`` of every open transaction. Writer (or any thread, under no appends)."""
        with self._lock:
            return self._producer_state.open_transactions()

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._segments.segments

    @property
    def active_segment(self) -> LogSegment:
        return self._segments.segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments.segments)

    @property
    def unflushed_records(self) -> int:
        return self._unflushed_records

    def segment_for(self, offset: int) -> LogSegment | None:
        """The segment whose range holds ``offset`` (the floor by base offset). Any thread."""
        return self._segments.floor(offset)

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
        if leader_epoch < 0:
            raise InvalidOffset(f"leader epoch {leader_epoch} is negative: a leader always has an epoch")
        if isinstance(batch, memoryview) and (batch.itemsize != 1 or not batch.c_contiguous):
            batch = batch.tobytes()  # sizes and positions below are bytes of one contiguous run
        size = len(batch)
        if size > self.config.max_message_bytes:
            raise RecordTooLarge(size, self.config.max_message_bytes)
        if size > self.config.segment_bytes:
            raise RecordBatchTooLarge(size, self.config.segment_bytes)
        valid = validate_batch(batch, 0, client=True, size=size)
        header = valid.header
        log_append = self.config.message_timestamp_type == TimestampType.LOG_APPEND_TIME
        if not log_append:
            self._check_timestamp(valid.max_timestamp, now)
        data: bytearray | memoryview
        if isinstance(batch, bytearray) or (isinstance(batch, memoryview) and not batch.readonly):
            data = batch
        else:
            data = bytearray(batch)
        max_ts = now if log_append else valid.max_timestamp
        with self._lock:
            first = self._leo.message_offset
            update = None
            if header.producer_id >= 0:  # the one check a non-idempotent batch pays
                found = self._producer_state.prepare_client_batch(header, first, max_ts)
                if isinstance(found, BatchMetadata):
                    return AppendInfo(
                        found.first_offset, found.last_offset, found.timestamp, found.last_offset,
                        found.timestamp if log_append else -1, 0, 0, duplicate=True,
                    )  # fmt: skip
                update = found
            ts_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
            set_max_timestamp(data, 0, size, ts_type, max_ts)
            assign_offset_and_epoch(data, 0, first, leader_epoch)
            last = first + header.last_offset_delta
            rolled = self._maybe_roll(size, max_ts, last, first, now)
            self.active_segment.append(last, max_ts, last, data)
            # The LEO is published as soon as the bytes are in the segment, so that a failure of what follows
            # (the epoch checkpoint's write) can never make the next append reuse these offsets.
            self._advance_leo(last + 1, header.records_count)
            if update is not None:
                self._apply_producer_update(update)
            self.epoch_cache.assign(leader_epoch, first)
            return AppendInfo(first, last, max_ts, last, now if log_append else -1, header.records_count, size, rolled)

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
            offset = self._leo.message_offset
            update = self._producer_state.prepare_marker(
                producer_id, producer_epoch, offset, commit=commit, coordinator_epoch=coordinator_epoch, timestamp=now
            )
            data = encode_end_txn_marker(
                ControlType.COMMIT if commit else ControlType.ABORT, producer_id=producer_id,
                producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch, timestamp=now,
                base_offset=offset, partition_leader_epoch=leader_epoch,
            )  # fmt: skip
            rolled = self._maybe_roll(len(data), now, offset, offset, now)
            self.active_segment.append(offset, now, offset, data)
            self._advance_leo(offset + 1, 1)
            self._apply_producer_update(update)
            self.epoch_cache.assign(leader_epoch, offset)
            return AppendInfo(offset, offset, now, offset, -1, 1, len(data), rolled)

    def _apply_producer_update(self, update: ProducerUpdate) -> None:
        """Install a checked update whose bytes are stored; an abort it completes goes into the .txnindex."""
        state = self._producer_state
        state.apply(update)
        completed = update.completed
        if completed is not None:
            self.active_segment.update_txn_index(completed, state.last_stable_offset_for(completed))
            state.complete_txn(completed)
        if completed is not None or update.started_txn >= 0:
            self._update_lso()

    def _update_lso(self) -> None:
        """Recompute and publish the first unstable offset and the LSO. Writer, under the lock."""
        self._stable = stable_offsets(self._producer_state, self._hw.offset, self._log_start_offset)

    def _check_timestamp(self, timestamp: int, now: int) -> None:
        if timestamp < 0:
            return
        before, after = self.config.message_timestamp_before_max_ms, self.config.message_timestamp_after_max_ms
        if now - timestamp > before or timestamp - now > after:
            raise InvalidTimestamp(
                f"timestamp {timestamp} is outside [now - {before}, now + {after}] "
                "(message.timestamp.before.max.ms, message.timestamp.after.max.ms)"
            )

    def append_as_follower(
        self, data: bytes | bytearray | memoryview, now_ms: int | None = None, *, roll: bool = True
    ) -> AppendInfo | None:
        """Append batches whose offsets the leader assigned (one or more, back to back); None for no batch.

        As Kafka's follower does, each batch is checked for size, magic and CRC only (the leader validated its
        records when it appended them) and ``max.message.bytes`` is not applied (a topic whose limit was lowered
        must still replicate the larger batches it already holds). ``roll=False`` leaves rolling to the caller (a
        follower rolls where its leader's segments start, so that its segment files stay identical even when
        segment.jitter.ms or time-based rolls would decide otherwise); only a batch that cannot fit the active
        segment (relative-offset overflow, a full index, segment.bytes) still rolls.
        """
        now = wall_clock_ms() if now_ms is None else now_ms
        headers = []
        positions = []
        producers = False
        for position, size in iter_batch_positions(data):
            h = validate_batch(data, position, client=False, size=size, deep=False).header
            headers.append(h)
            positions.append(position)
            producers = producers or h.producer_id >= 0
        if not headers:
            return None
        consumed = sum(h.size for h in headers)
        if consumed != len(data):
            raise StorageError(f"follower append carries {len(data) - consumed} bytes after its last whole batch")
        for prev, cur in itertools.pairwise(headers):
            if cur.base_offset <= prev.last_offset:
                raise OffsetsOutOfOrder(
                    f"batch at offset {cur.base_offset} follows one ending at {prev.last_offset}: offsets must ascend"
                )
        first, last = headers[0].base_offset, headers[-1].last_offset
        # A marker's record is read before anything is written, so a malformed one refuses the whole append.
        markers = {}
        if producers:
            markers = {p: read_marker(data, p) for h, p in zip(headers, positions, strict=True) if h.is_control}
        if consumed > self.config.segment_bytes:
            raise RecordBatchTooLarge(consumed, self.config.segment_bytes)
        max_h = max(headers, key=lambda h: h.max_timestamp)
        with self._lock:
            if first < self._leo.message_offset:
                raise UnexpectedAppendOffset(first, last, self._leo.message_offset)
            rolled = self._maybe_roll(consumed, max_h.max_timestamp, last, first, now, by_time=roll)
            self.active_segment.append(last, max_h.max_timestamp, max_h.last_offset, data)
            records = sum(h.records_count for h in headers)
            self._advance_leo(last + 1, records)  # before the epoch checkpoint: see append_as_leader
            if producers:
                # One batch at a time, as the leader appended them, so the .txnindex entries (their LSOs
                # included) come out identical to the leader's.
                state = self._producer_state
                on_completed = self.active_segment.update_txn_index_for(state)
                for h, position in zip(headers, positions, strict=True):
                    apply_replicated(state, h, data, position, on_completed, markers.get(position))
                self._update_lso()
            for h in headers:
                if h.partition_leader_epoch >= 0:
                    self.epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
            return AppendInfo(
                first, last, max_h.max_timestamp, max_h.last_offset, -1, records, consumed, rolled
            )  # fmt: skip

    def _advance_leo(self, next_offset: int, records: int) -> None:
        active = self.active_segment
        self._leo = LogOffsetMetadata(next_offset, active.base_offset, active.size_bytes)
        self._unflushed_records += records
        if self._unflushed_records >= self.config.flush_messages:
            self.flush(next_offset)

    def _maybe_roll(
        self, size: int, max_ts: int, last_offset: int, first_offset: int, now: int, *, by_time: bool = True
    ) -> bool:
        active = self.active_segment
        if active.should_roll(
            segment_bytes=self.config.segment_bytes,
            segment_ms=self.config.segment_ms if by_time else NO_LIMIT,
            messages_bytes=size,
            max_timestamp_in_messages=max_ts,
            max_offset_in_messages=last_offset,
            now_ms=now,
        ):
            self.roll(max(first_offset, self._leo.message_offset), now)
            return True
        return False

    def roll(self, expected_next_offset: int | None = None, now_ms: int | None = None) -> LogSegment:
        """Start a new active segment at ``max(expected_next_offset, LEO)``; the old one is trimmed and flushed.

        The new segment counts as created at ``now_ms`` (default: the wall clock) for segment.ms. Rolling onto the
        base of an empty active segment re-creates it (its files go as a deletion does). Writer.
        """
        with self._lock:
            new_base = max(expected_next_offset or 0, self._leo.message_offset)
            active = self.active_segment
            if active.base_offset == new_base:
                if active.size_bytes:
                    raise StorageError(f"cannot roll onto {new_base}: segment {active.log_path} already holds offsets")
                # An empty active segment asks for this roll when an index of it has no slot left (KAFKA-6388: an
                # index resized to 0 bytes); the new one gets full-size indexes.
                self._schedule_delete(active)
                segment = self._new_segment(new_base, now_ms)
                self._segments = _view([*self._segments.segments[:-1], segment])
                return segment
            if new_base < active.base_offset:
                raise StorageError(f"cannot roll to {new_base}, below the active segment's base {active.base_offset}")
            active.on_become_inactive_segment()
            segment = self._new_segment(new_base, now_ms)
            self._segments = _view([*self._segments.segments, segment])
            self._leo = LogOffsetMetadata(self._leo.message_offset, new_base, 0)
            # Kafka's roll snapshot: recovering the new segment can start from it. Not fsynced here: flush_rolled
            # does it with the rolled segment (a snapshot lost to a crash is only a longer replay).
            self._producer_state.update_map_end_offset(new_base)
            self._take_snapshot(sync=False)
            # Kafka flushes the rolled segment asynchronously; so do we: the store's tick calls flush_rolled() on
            # a worker thread, so an append that rolls never waits for an fsync of the segment it leaves.
            self._rolled_upto = max(self._rolled_upto, new_base)
            return segment

    def _take_snapshot(self, *, sync: bool) -> None:
        """A producer snapshot at the state's map end offset. A failure only costs the next load a longer replay,
        so it is logged, never raised (the append that rolled must not fail for it)."""
        try:
            self._producer_state.take_snapshot(sync=sync)
        except OSError as exc:
            _log.warning(
                "%s: producer snapshot at %d not written: %s", self._dir, self._producer_state.map_end_offset, exc
            )

    def flush_rolled(self) -> None:
        """fsync the segments left by rolls since the last call and raise the recovery point to them. Writer."""
        if self._rolled_upto > self._recovery_point:
            self.flush(self._rolled_upto)

    def _new_segment(self, base_offset: int, now_ms: int | None = None) -> LogSegment:
        for suffix in (".log", ".index", ".timeindex", ".txnindex"):
            stale = self._dir / f"{base_offset:020d}{suffix}"
            if stale.exists():
                _log.warning("deleting stale %s before creating a segment at %d", stale, base_offset)
                stale.unlink()
        jitter = self.config.segment_jitter_ms
        segment = LogSegment(
            self._dir,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
            handles=self._handles,
            roll_jitter_ms=roll_jitter(jitter, self.config.segment_ms),
            created_ms=now_ms,
            log_size_bytes=0,
        )
        # An empty segment that leaves no file behind would be forgotten by a restart, which would then start the log
        # over at the log start offset checkpoint (absent when it equals the first segment's base): offsets reused.
        segment.log_file.create()
        return segment

    # --- reads (any thread) ---------------------------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        isolation: Isolation = Isolation.HIGH_WATERMARK,
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """Kafka's read (reference §5); TXN_COMMITTED reads stop at the LSO and carry the aborted transactions of the
        fetched range (reference §7). Any thread."""
        fetched = self._read(start_offset, max_bytes, isolation, min_one_message)
        if isolation is not Isolation.TXN_COMMITTED:
            return fetched
        view = self._segments
        return with_aborted_transactions(view.bases, view.segments, fetched, self._leo.message_offset)

    def _read(self, start_offset: int, max_bytes: int, isolation: Isolation, min_one_message: bool) -> FetchDataInfo:
        if start_offset < self._log_start_offset:
            raise OffsetOutOfRange(start_offset, self._log_start_offset, self._leo.message_offset)
        end = self._leo
        if isolation is Isolation.LOG_END:
            bound = end
        elif isolation is Isolation.HIGH_WATERMARK:
            bound = self.fetch_high_watermark_metadata()
        else:
            bound = self.fetch_last_stable_offset_metadata()
        view = self._segments
        if start_offset == bound.message_offset:
            return FetchDataInfo(bound, b"")
        if start_offset > end.message_offset:
            raise OffsetOutOfRange(start_offset, self._log_start_offset, end.message_offset)
        if start_offset > bound.message_offset:
            return FetchDataInfo(self.offset_metadata(start_offset), b"")
        segment = view.floor(start_offset)
        if segment is None:
            raise OffsetOutOfRange(start_offset, self._log_start_offset, end.message_offset)
        i = view.index_of(segment.base_offset)
        while i < len(view.segments):
            segment = view.segments[i]
            if bound.message_offset_only or bound.segment_base_offset < segment.base_offset:
                return FetchDataInfo(self.offset_metadata(start_offset), b"")
            max_position = bound.relative_position if bound.segment_base_offset == segment.base_offset else None
            fetched = segment.read(start_offset, max_bytes, max_position, min_one_message)
            if fetched is not None:
                return fetched
            i += 1
        return FetchDataInfo(end, b"")

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[start_offset, upper_bound_offset)``, from the segment holding
        ``start_offset`` on. Any thread."""
        view = self._segments
        segment = view.floor(start_offset)
        i = view.index_of(segment.base_offset) if segment is not None else 0
        return collect_aborted(view.segments[i:], start_offset, upper_bound_offset)

    def fetch_last_stable_offset_metadata(self) -> LogOffsetMetadata:
        """The LSO with its position (the HW's when they are equal). Any thread."""
        lso = self._stable.last_stable_offset
        hw = self.fetch_high_watermark_metadata()
        if lso >= hw.message_offset:
            return hw
        return self.offset_metadata(lso)

    def offset_metadata(self, offset: int) -> LogOffsetMetadata:
        """Where ``offset`` lies (segment and position of its batch), for a bound; the LEO's when at the end."""
        end = self._leo
        if offset >= end.message_offset:
            return end
        fetched = self.read(offset, 1, Isolation.LOG_END, min_one_message=False)
        return fetched.fetch_offset_metadata

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

    def locate(self, offset: int) -> tuple[LogSegment, LogOffsetPosition] | None:
        """The segment and batch holding ``offset`` (no bytes read beyond batch headers), or None past the LEO.

        This is the lookup a reader of ``at/<offset>`` starts with: offset index, then a short forward scan.
        Any thread.
        """
        view = self._segments
        segment = view.floor(offset)
        if segment is None or offset >= self._leo.message_offset:
            return None
        i = view.index_of(segment.base_offset)
        for seg in view.segments[i:]:
            found = seg.translate_offset(offset)
            if found is not None:
                return seg, found
        return None

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The first record with timestamp ≥ ``timestamp`` at or after the log start offset (reference §5)."""
        for segment in self._segments.segments:
            if segment.largest_timestamp < timestamp:
                continue
            found = segment.find_offset_by_timestamp(timestamp, self._log_start_offset)
            if found is not None:
                return found
        return None

    def batches_from(self, start_offset: int, end_offset: int | None = None) -> Iterator[tuple[LogSegment, int, int]]:
        """``(segment, position, size)`` of each stored batch holding offsets in ``[start_offset, end_offset)``."""
        end = self._leo.message_offset if end_offset is None else end_offset
        view = self._segments
        segment = view.floor(start_offset)
        i = view.index_of(segment.base_offset) if segment is not None else 0
        for seg in view.segments[i:]:
            found = seg.translate_offset(start_offset)
            if found is None:
                continue
            for b in seg.batches(found.position):
                if b.base_offset >= end:
                    return
                yield seg, b.position, b.size

    # --- the high watermark (writer) ---------------------------------------------------------------------------------

    def update_high_watermark(self, hw: int) -> int:
        """Set the HW clamped to ``[log start, LEO]`` (it may move back). Returns the new HW. Writer."""
        with self._lock:
            new = self._hw.update(LogOffsetMetadata(hw), self._log_start_offset, self._leo)
            self._update_lso()
            return new

    def maybe_increment_high_watermark(
        self, hw: LogOffsetMetadata, *, blocking: bool = True
    ) -> LogOffsetMetadata | None:
        """The leader's forward-only HW move (OffsetOutOfRange past the LEO). Any thread; ``blocking=False`` raises
        LockBusy instead of waiting for an append to let go of the log (the trio thread must never wait for one)."""
        if not self._lock.acquire(blocking=blocking):
            raise LockBusy(f"{self.directory.name}: the log is busy")
        try:
            moved = self._hw.maybe_increment(hw, self._leo)
            if moved is not None:
                self._update_lso()
            return moved
        finally:
            self._lock.release()

    def maybe_update_high_watermark(self, hw: int) -> int | None:
        """The follower's HW move: clamped, returns the new HW if it changed. Writer."""
        with self._lock:
            moved = self._hw.maybe_update_as_follower(hw, self._log_start_offset, self._leo)
            if moved is not None:
                self._update_lso()
            return moved

    # --- flush and recovery point (writer) -------------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding offsets below ``offset`` (default: the LEO) and raise the recovery point.

        Blocking disk work: call it off the trio thread. The fsyncs run *outside* the log's lock, so appends and
        HW-bounded reads never wait for the disk; the recovery point only rises once they are done, and never
        above the LEO of that moment (a truncation meanwhile lowers what it may reach).
        """
        with self._lock:
            target = self._leo.message_offset if offset is None else min(offset, self._leo.message_offset)
            if target <= self._recovery_point:
                return
            view = self._segments
            unflushed = [
                segment
                for i, segment in enumerate(view.segments)
                if segment.base_offset < target
                and (i + 1 == len(view.bases) or view.bases[i + 1] > self._recovery_point)
            ]
            unflushed_records = self._unflushed_records
            snapshots = self._producer_state.take_unsynced_snapshots(target)
        for segment in unflushed:
            if segment in self._segments.segments:  # a truncation or retention may have removed it meanwhile
                segment.flush()
        sync_snapshot_files(snapshots, self._dir)
        with self._lock:
            target = min(target, self._leo.message_offset)
            if target > self._recovery_point:
                self._recovery_point = target
            if target >= self._leo.message_offset:
                self._unflushed_records = max(0, self._unflushed_records - unflushed_records)
            self._last_flush_ms = wall_clock_ms()

    def flush_records(self, offset: int | None = None) -> None:
        """Make the records below ``offset`` (default: the LEO) durable: fsync the ``.log`` files holding them, not
        their indexes, and leave the recovery point where it is (an fsync(2) through the mount, acks=all).

        Half the cost of :meth:`flush` on ext4 (each fsync'd file is a journal commit of its own). Safe because
        what the recovery point has not passed is recovered after a crash — its indexes rebuilt from the durable
        ``.log``. Blocking; off the trio thread; the fsyncs run outside the lock, as :meth:`flush`'s do.
        """
        with self._lock:
            target = self._leo.message_offset if offset is None else min(offset, self._leo.message_offset)
            done = max(self._recovery_point, self._records_synced)
            if target <= done:
                return
            view = self._segments
            unsynced = [
                segment
                for i, segment in enumerate(view.segments)
                if segment.base_offset < target and (i + 1 == len(view.bases) or view.bases[i + 1] > done)
            ]
        for segment in unsynced:
            if segment in self._segments.segments:  # a truncation or retention may have removed it meanwhile
                segment.flush_records()
        with self._lock:
            self._records_synced = max(self._records_synced, min(target, self._leo.message_offset))

    def ms_since_last_flush(self, now_ms: int | None = None) -> int:
        return (wall_clock_ms() if now_ms is None else now_ms) - self._last_flush_ms

    # --- truncation (writer) ---------------------------------------------------------------------------------------

    def truncate_to(self, target_offset: int) -> bool:
        """Remove everything at or after ``target_offset``; False if the log already ends there. Writer."""
        if target_offset < 0:
            raise OffsetOutOfRange(target_offset, self._log_start_offset, self.log_end_offset, what="truncation")
        with self._lock:
            if target_offset >= self._leo.message_offset:
                return False
            if self._segments.bases[0] > target_offset:
                self.truncate_fully_and_start_at(target_offset)
                return True
            keep = [s for s in self._segments.segments if s.base_offset <= target_offset]
            drop = [s for s in self._segments.segments if s.base_offset > target_offset]
            self._segments = _view(keep)
            for segment in drop:
                self._schedule_delete(segment)
            active = self.active_segment
            active.truncate_to(target_offset)
            self._leo = LogOffsetMetadata(target_offset, active.base_offset, active.size_bytes)
            self._recovery_point = min(self._recovery_point, target_offset)
            self._records_synced = min(self._records_synced, target_offset)
            self._rolled_upto = min(self._rolled_upto, target_offset)  # else flush_rolled could pass the new LEO
            self._unflushed_records = 0 if self._recovery_point >= target_offset else self._unflushed_records
            self._log_start_offset = min(self._log_start_offset, target_offset)
            self.epoch_cache.truncate_from_end(target_offset)
            if self._hw.offset >= target_offset:
                self._hw.update(self._leo, self._log_start_offset, self._leo)
            self._rebuild_producer_state(target_offset)
            return True

    def _rebuild_producer_state(self, end_offset: int) -> None:
        """The producer state at ``end_offset``: its snapshots above go, the newest below is loaded and the log
        replayed from there (from the log start offset without one), as Kafka's ``rebuildProducerState``."""
        state = self._producer_state
        state.delete_snapshots_above(end_offset)
        if not state.producers:  # no producer above the target either: nothing to replay (a follower's usual case)
            state.clear(end_offset)
            self._update_lso()
            return
        loaded = state.load_snapshot(end_offset)
        start = self._log_start_offset if loaded is None else max(loaded, self._log_start_offset)
        replay(state, self._segments.segments, start, end_offset)
        self._update_lso()

    def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Delete every segment and start empty at ``new_offset`` (LEO = log start = HW = recovery point). Writer."""
        with self._lock:
            old = self._segments.segments
            for segment in old:
                self._schedule_delete(segment)
            segment = self._new_segment(new_offset)
            self._segments = _view([segment])
            self._leo = LogOffsetMetadata(new_offset, new_offset, 0)
            self._log_start_offset = new_offset
            self._recovery_point = new_offset
            self._records_synced = new_offset
            self._rolled_upto = min(self._rolled_upto, new_offset)
            self._unflushed_records = 0
            self.epoch_cache.clear_and_flush()
            self._hw.update(self._leo, new_offset, self._leo)
            self._producer_state.delete_snapshots_above(-1)
            self._producer_state.clear(new_offset)
            self._update_lso()

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
            self._log_start_offset = new_start
            self.epoch_cache.truncate_from_start(new_start)
            if self._recovery_point < new_start:
                self._recovery_point = new_start
            self._producer_state.truncate_head(new_start)
            self._update_lso()
            return True

    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Apply the log start offset, retention.ms and retention.bytes (reference §8); the segments deleted."""
        now = wall_clock_ms() if now_ms is None else now_ms
        deleted = 0
        with self._lock:
            deleted += self._delete_prefix(lambda segs: log_start_rule(self._log_start_offset), now)
            if self.config.retention_ms >= 0:
                deleted += self._delete_prefix(lambda segs: retention_ms_rule(now, self.config.retention_ms), now)
            retention_bytes = self.config.retention_bytes
            if retention_bytes >= 0 and self.size_bytes >= retention_bytes:
                deleted += self._delete_prefix(lambda segs: retention_bytes_rule(segs, retention_bytes), now)
        return deleted

    def _delete_prefix(self, make_rule: Callable[[list[SegmentSummary]], Rule], now: int) -> int:
        summaries = [SegmentSummary(s.base_offset, s.size_bytes, s.largest_timestamp) for s in self.segments]
        rule = make_rule(summaries)
        count = deletable_prefix(summaries, rule, self._hw.offset, self._leo.message_offset)
        if count == 0:
            return 0
        if count == len(self._segments.segments):
            self.roll()
        doomed = self._segments.segments[:count]
        self._segments = _view(self._segments.segments[count:])
        for segment in doomed:
            self._schedule_delete(segment, now)
        new_start = self._segments.bases[0]
        self._producer_state.delete_snapshots_before(new_start)  # the snapshots of deleted segments go with them
        if new_start > self._log_start_offset:
            self._log_start_offset = new_start
            self.epoch_cache.truncate_from_start(new_start)
            if self._recovery_point < new_start:
                self._recovery_point = new_start
            self._producer_state.truncate_head(new_start)
            self._update_lso()
        _log.info("%s: retention deleted %d segment(s); log start offset %d", self._dir.name, count, new_start)
        return count

    def _schedule_delete(self, segment: LogSegment, now: int | None = None) -> None:
        """Rename the segment's files ``.deleted``; unlink them ``file.delete.delay.ms`` after ``now``."""
        segment.close()
        segment.change_file_suffixes("", DELETED_SUFFIX)
        start = wall_clock_ms() if now is None else now
        self._pending_deletes.append((start + self.config.file_delete_delay_ms, segment))

    def delete_expired_files(self, now_ms: int | None = None) -> int:
        """Unlink ``.deleted`` segments whose delay has passed; returns how many. Writer."""
        now = wall_clock_ms() if now_ms is None else now_ms
        with self._lock:
            due = [s for t, s in self._pending_deletes if t <= now]
            self._pending_deletes = [(t, s) for t, s in self._pending_deletes if t > now]
        for segment in due:
            segment.delete_if_exists()
        return len(due)

    # --- lifecycle -------------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Flush, snapshot the producer state at the LEO (so the next load replays nothing), trim and close every
        segment; unlink pending deletions. Writer."""
        with self._lock:
            self.flush()
            if self._producer_state.producers or self._producer_state.snapshot_offsets():
                self._producer_state.update_map_end_offset(self._leo.message_offset)
                self._take_snapshot(sync=True)
            for segment in self._segments.segments:
                segment.close()
            self.delete_expired_files(NO_LIMIT)


def roll_jitter(jitter_ms: int, segment_ms: int) -> int:
    """Kafka's ``abs(random) % min(segment.jitter.ms, segment.ms)``, fixed per segment."""
    bound = min(jitter_ms, segment_ms)
    return random.randrange(bound) if bound > 0 else 0
