"""Validating and recovering one segment's ``.log``, and rebuilding its indexes from it (Kafka's LogSegment.recover).

Recovery treats damage as LevelDB's log reader does: a torn tail (the file ends inside a batch) ends the scan
silently; a batch that fails validation (size, magic, CRC, or offsets that step back, which the CRC does not cover)
ends it with a reason. Either way everything from there on is *moved aside* into ``<base>.log.<ms>.quarantine``
beside the segment before the ``.log`` is cut, so recovery never destroys bytes (docs/storage.md, "Rules worth
knowing"). The offset and time indexes are rebuilt from the valid prefix. :func:`scan_segment` does the reading alone,
for ``logfs check``.

Transactions: given the producer state at the segment's base offset, :func:`recover_segment` replays the batches
into it and rebuilds the ``.txnindex`` from the aborts they complete. That coupling lives here, not in
``LogSegment``: :func:`txn_index_writer` is the one way a completed transaction becomes a ``.txnindex`` entry, for
recovery and for the follower's append alike, so both write the entries the leader wrote.

Threads: the writer thread of the log (the loader's, or ``logfs check``'s on a store no one has open).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from logfs.core.durable import fsync_dir
from logfs.core.durable import now_ms as wall_clock_ms
from logfs.core.errors import CorruptRecord, InvalidRecord
from logfs.core.format.batch import BatchHeader
from logfs.core.format.framewalk import FrameWalk
from logfs.core.format.validate import validate_batch
from logfs.core.log.index import NO_TIMESTAMP, TimestampOffset
from logfs.core.log.logfile import BatchPosition
from logfs.core.log.segment import QUARANTINE_SUFFIX, LogSegment
from logfs.core.txn.index import AbortedTxn
from logfs.core.txn.producerentry import CompletedTxn
from logfs.core.txn.producerreplay import apply_replicated
from logfs.core.txn.producerstate import ProducerStateManager

_log = logging.getLogger(__name__)

# How much of the .log one recovery read validates at a time: large enough that the per-read cost vanishes
# (~1 ms per 8 MiB at the disk's speed), small enough to bound memory during a store load.
RECOVERY_READ_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What a validation scan of a ``.log`` found: the valid prefix, and what ends it when it is not all."""

    valid_bytes: int
    total_bytes: int
    reason: str | None  # None: the scan reached the end, or a torn tail (see torn_tail)
    torn_tail: bool
    batches: int
    next_offset: int

    @property
    def damaged_bytes(self) -> int:
        return self.total_bytes - self.valid_bytes


class EpochCache(Protocol):
    def latest_epoch(self) -> int | None: ...
    def assign(self, epoch: int, start_offset: int) -> None: ...


def scan_segment(
    segment: LogSegment,
    on_batch: Callable[[BatchPosition], None] | None = None,
    on_producer_batch: Callable[[BatchHeader, bytes, int], None] | None = None,
) -> ScanResult:
    """Validate every batch from the start of ``segment``'s ``.log``: size, magic and CRC, as Kafka's
    ``ensureValid``, and offsets (see :func:`_check_offsets`).

    A torn tail ends the scan silently; an invalid batch ends it with a reason. Reads the file once, in
    8 MiB chunks, through the framing walk every reader of a ``.log`` shares (``core/format/framewalk.py``).
    Changes nothing.
    """
    segment.touch()
    log = segment.log_file
    total = log.size_bytes
    batches = 0
    next_offset = segment.base_offset
    walk = FrameWalk(log.read, 0, total, first_read=RECOVERY_READ_BYTES)
    try:
        for data, at, size, position, _ in walk:
            h = validate_batch(data, at, client=False, size=size, deep=False).header
            _check_offsets(segment, h, next_offset)
            if on_producer_batch is not None and h.producer_id >= 0:
                on_producer_batch(h, data, at)
            if on_batch is not None:
                on_batch(BatchPosition(position, size, h.base_offset, h.last_offset, h.max_timestamp,
                                       h.partition_leader_epoch))  # fmt: skip
            next_offset = h.last_offset + 1
            batches += 1
    except (CorruptRecord, InvalidRecord) as exc:  # walk.end: where the last batch that passed ends
        return ScanResult(walk.end, total, exc.reason, False, batches, next_offset)
    return ScanResult(walk.end, total, None, walk.torn, batches, next_offset)


def _check_offsets(segment: LogSegment, h: BatchHeader, next_offset: int) -> None:
    """InvalidRecord unless the batch starts at or after ``next_offset`` (where the batch before it ended, or the
    segment's base offset), its last offset fits a relative offset, and its leader epoch is at least -1: the rules
    of the read-side check (``core/log/batchcheck.py``) that hold without the rest of the log, so a tail that a read
    would refuse is quarantined at start instead (issue 23). An epoch above the epoch cache's is not refused here:
    the cache is assigned after a batch is appended, so a crash between the two leaves a good batch with a newer
    epoch than the checkpoint, which recovery then assigns (as Kafka's does).

    Gaps are allowed (a follower may roll past missing offsets); a step back is not. The base offset lies
    outside the CRC, so damage to it passes ``validate_batch``: Kafka's recovery then fails to append the
    index entry and empties the whole segment, where this check cuts it at that batch.
    """
    if h.base_offset < next_offset:
        raise InvalidRecord(
            f"base offset {h.base_offset} is below {next_offset}, where the batch before it ended or the segment "
            "starts: offsets must ascend"
        )
    if not segment.can_convert_to_relative_offset(h.last_offset):
        raise InvalidRecord(f"offset {h.last_offset} cannot be stored relative to base offset {segment.base_offset}")
    if h.partition_leader_epoch < -1:  # the read check's rule too (core/log/batchcheck.py): no epoch is -1
        raise InvalidRecord(f"partition leader epoch {h.partition_leader_epoch} is below -1 (no epoch)")


def recover_segment(
    segment: LogSegment,
    epoch_cache: EpochCache | None = None,
    *,
    quarantine: bool = True,
    before_cut: Callable[[ScanResult], None] | None = None,
    producer_state: ProducerStateManager | None = None,
    stays_active: bool = False,
) -> ScanResult:
    """Rebuild ``segment``'s indexes from its ``.log``, cut it after the last valid batch, and return what was found.

    With ``producer_state`` (positioned at the segment's base offset: the state after every earlier batch), the
    batches are replayed into it and the ``.txnindex`` is rebuilt from the aborts it completes; without, the
    ``.txnindex`` is kept (it could not be rebuilt).

    When there is something to cut, ``before_cut`` runs first (the loader moves the later segments aside there:
    a crash before the cut then finds the same damage again, where one after it would find this segment whole
    and keep the later ones, leaving a hole); then the cut bytes are copied into a quarantine file beside the
    segment (unless ``quarantine`` is False); then the ``.log`` is cut. Leader epochs seen in the batches are
    assigned to ``epoch_cache``. ``stays_active``: the segment is the log's last, whose indexes keep their full size
    (not trimmed only to be grown again).
    """
    segment.begin_recovery(rebuild_txn_index=producer_state is not None)
    offset_index, time_index = segment.offset_index, segment.time_index
    interval = segment.index_interval_bytes
    last_index_entry = 0
    max_ts = TimestampOffset(NO_TIMESTAMP, segment.base_offset)

    def full() -> bool:
        # Only when segment.index.bytes shrank or index.interval.bytes fell since the segment was written
        # (appends roll before an index fills): the rebuilt index stays sparser, lookups scan further, and
        # the next append rolls. Kafka fails the load instead.
        return offset_index.is_full() or time_index.is_full()

    def rebuild(b: BatchPosition) -> None:
        nonlocal last_index_entry, max_ts
        if b.max_timestamp > max_ts.timestamp:
            max_ts = TimestampOffset(b.max_timestamp, b.last_offset)
        if b.position - last_index_entry > interval and not full():
            offset_index.append(b.last_offset, b.position)
            time_index.maybe_append(max_ts.timestamp, max_ts.offset)
            last_index_entry = b.position
        if epoch_cache is not None and b.partition_leader_epoch >= 0:
            latest = epoch_cache.latest_epoch()
            if latest is None or b.partition_leader_epoch > latest:
                epoch_cache.assign(b.partition_leader_epoch, b.base_offset)

    on_producer_batch = None
    if producer_state is not None:
        state = producer_state
        on_completed = txn_index_writer(segment, state)

        def on_producer_batch(h: BatchHeader, data: bytes, position: int) -> None:
            apply_replicated(state, h, data, position, on_completed)
            state.update_map_end_offset(h.last_offset + 1)

    result = scan_segment(segment, rebuild, on_producer_batch)
    if producer_state is not None:
        producer_state.update_map_end_offset(result.next_offset)
    if result.damaged_bytes > 0:
        if before_cut is not None:
            before_cut(result)
        what = result.reason or "a torn tail (the file ends inside a batch)"
        kept = quarantine_tail(segment, result.valid_bytes) if quarantine else None
        _log.warning(
            "segment %s: %s at byte %d; %d bytes cut%s",
            segment.log_path, what, result.valid_bytes, result.damaged_bytes,
            f" and kept in {kept}" if kept else "",
        )  # fmt: skip
        segment.log_file.truncate_to(result.valid_bytes)
    segment.end_recovery(max_ts, last_index_entry, trim=not stays_active)
    return result


def txn_index_writer(segment: LogSegment, state: ProducerStateManager) -> Callable[[CompletedTxn], None]:
    """The ``on_completed`` of a replay into ``segment``: an abort goes into its ``.txnindex`` with the LSO ``state``
    gives it (before it completes); a commit records nothing."""

    def on_completed(completed: CompletedTxn) -> None:
        index_completed_txn(segment, completed, state.last_stable_offset_for(completed))

    return on_completed


def index_completed_txn(segment: LogSegment, completed: CompletedTxn, last_stable_offset: int) -> None:
    """Record ``completed`` in ``segment``'s ``.txnindex`` if it was aborted (a commit records nothing)."""
    if completed.is_aborted:
        segment.append_aborted_txn(
            AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, last_stable_offset)
        )


def quarantine_tail(segment: LogSegment, from_position: int) -> Path | None:
    """Copy ``segment``'s ``.log`` bytes from ``from_position`` on into a quarantine file, fsynced."""
    log = segment.log_file
    size = log.size_bytes
    if from_position >= size:
        return None
    target = quarantine_path(log.path)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        position = from_position
        while position < size:
            chunk = log.read(position, min(RECOVERY_READ_BYTES, size - position))
            if not chunk:
                break
            written = 0
            while written < len(chunk):
                written += os.write(fd, chunk[written:])
            position += len(chunk)
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(log.path.parent)
    return target


def quarantine_path(path: Path) -> Path:
    """A free name for quarantined bytes of ``path``: ``<name>.<ms>.quarantine``, the ms moved on past any taken.

    Two recoveries of one segment within a millisecond (a repair right after a mount, a test) must neither
    overwrite the first quarantine file nor fail on it. Writer thread (the store's lock keeps other processes out).
    """
    ms = wall_clock_ms()
    while (target := path.with_name(f"{path.name}.{ms}{QUARANTINE_SUFFIX}")).exists():
        ms += 1
    return target
