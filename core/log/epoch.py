"""The leader epoch cache: at which offset each leader epoch began (Kafka's LeaderEpochFileCache).

A leader stamps its epoch on every batch it appends (``partitionLeaderEpoch``), and the log remembers where each
epoch started: ``assign(epoch, start_offset)`` on every leader change (at the log end offset, before any record is
written) and on every appended batch (its epoch and base offset). A follower compares its last epoch with the
leader's history to find where the two logs diverge: :meth:`LeaderEpochFileCache.end_offset_for` answers "where did
epoch E end on this replica", which is the start offset of the next epoch, or the log end offset for the current one.

Invariant: entries strictly increase in both epoch and start offset. ``assign`` restores it by first dropping, from
the newest end, every entry whose epoch or start offset is not below the new one's (a follower that learns of a
newer leader's history overwrites its own divergent tail); re-assigning the latest epoch at a later offset changes
nothing. ``truncate_from_end(o)`` drops the epochs that start at or after ``o`` (the log was truncated to ``o``);
``truncate_from_start(o)`` drops the epochs that start at or before ``o`` and keeps the last of them as starting at
``o`` (the log start offset moved to ``o``)::

    (0,0) (1,7) (2,10)   truncate_from_start(5) -> (0,5) (1,7) (2,10)
    (0,0) (1,10) (2,16)  truncate_from_end(11)  -> (0,0) (1,10)

Persistence: every change is written to the partition's ``leader-epoch-checkpoint``. ``assign`` writes it before it
returns, so the file never misses an epoch the log holds. Truncations may defer their write, as Kafka's do, to keep an
fsync off the replication path: pass ``schedule_flush`` and the cache hands it the write to run later. A stale file
after a crash is harmless, because loading a log truncates the cache to the log again.

Threads: one writer thread (the log's, holding its lock) calls assign, the truncations and clear; any thread may
query at the same time. Each call is atomic under a per-cache lock; checkpoint writes hold a second lock, so queries
never wait for an fsync, and each write takes its snapshot under that lock so a later state is never overwritten by
an earlier one.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable
from typing import NamedTuple

from logfs.core.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from logfs.core.errors import InvalidOffset

UNDEFINED_EPOCH = -1  # OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH
UNDEFINED_EPOCH_OFFSET = -1  # OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET

_log = logging.getLogger(__name__)


class EpochEndOffset(NamedTuple):
    """The answer to "where did this epoch end": the epoch found at or below the one asked for, and its end offset."""

    leader_epoch: int
    end_offset: int


UNDEFINED_EPOCH_END_OFFSET = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def _epoch(entry: EpochEntry) -> int:
    return entry.epoch


def _start_offset(entry: EpochEntry) -> int:
    return entry.start_offset


class LeaderEpochFileCache:
    """The (leader epoch -> start offset) history of one partition, kept in memory and in its checkpoint file.

    Loading reads the checkpoint and replays it through the same rule as :meth:`assign` (without writing back).
    ``schedule_flush``, if given, receives the deferred checkpoint write of a truncation; without it the write is
    done before the truncation returns.
    """

    def __init__(
        self,
        checkpoint: LeaderEpochCheckpointFile,
        *,
        schedule_flush: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        """Load the epochs from ``checkpoint``; CorruptCheckpoint if it is damaged. Writer thread, before any query."""
        self._checkpoint = checkpoint
        self._schedule_flush = schedule_flush
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._epochs: list[EpochEntry] = []
        for entry in checkpoint.read():
            self._assign(entry)

    def __len__(self) -> int:
        """The number of epochs held. Any thread."""
        with self._lock:
            return len(self._epochs)

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({str(self._checkpoint.path)!r}, {self.epoch_entries()})"

    @property
    def checkpoint(self) -> LeaderEpochCheckpointFile:
        """The file the epochs are persisted to. Any thread."""
        return self._checkpoint

    # --- changes -----------------------------------------------------------------------------------------------------

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` began at ``start_offset``, and write the checkpoint if that changed anything.

        A no-op when ``epoch`` is the latest and ``start_offset`` is not below its start. Otherwise every entry with
        an epoch or a start offset not below the new one is dropped first. A negative epoch or offset raises
        InvalidOffset. Writer thread only.
        """
        with self._lock:
            changed = self._assign(EpochEntry(epoch, start_offset))
        if changed:
            self.flush()

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop every epoch that starts at or after ``end_offset`` (the log was truncated there). Writer thread only.

        A negative ``end_offset`` (UNDEFINED_EPOCH_OFFSET) changes nothing.
        """
        with self._lock:
            if end_offset < 0 or not self._epochs or self._epochs[-1].start_offset < end_offset:
                return
            keep = bisect.bisect_left(self._epochs, end_offset, key=_start_offset)
            removed = self._epochs[keep:]
            del self._epochs[keep:]
        _log.debug("%s: dropped %s truncating to end offset %d", self._checkpoint.path, removed, end_offset)
        self._flush_after_truncation()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop the epochs that start at or before ``start_offset``, keeping the last of them as starting there.

        For a log start offset that moved to ``start_offset``; the epoch that ``start_offset`` belongs to is kept, so
        ``truncate_from_start(6)`` keeps an entry at offset 6. Writer thread only.
        """
        with self._lock:
            drop = bisect.bisect_right(self._epochs, start_offset, key=_start_offset)
            if drop == 0:
                return
            first = EpochEntry(self._epochs[drop - 1].epoch, start_offset)
            if drop == 1 and self._epochs[0] == first:
                return
            removed = self._epochs[:drop]
            self._epochs[:drop] = [first]
        _log.debug(
            "%s: dropped %s and kept %s for log start offset %d", self._checkpoint.path, removed, first, start_offset
        )
        self._flush_after_truncation()

    def clear_and_flush(self) -> None:
        """Drop every epoch and write the empty checkpoint. Writer thread only."""
        with self._lock:
            self._epochs.clear()
        self.flush()

    def clear(self) -> None:
        """Drop every epoch from memory only; the checkpoint keeps them until the next write. Writer thread only."""
        with self._lock:
            self._epochs.clear()

    def flush(self) -> None:
        """Write the checkpoint now, fsynced, with the epochs as they are when the write begins. Any thread."""
        with self._write_lock:
            self._checkpoint.write(self.epoch_entries())

    # --- queries -----------------------------------------------------------------------------------------------------

    def epoch_entries(self) -> list[EpochEntry]:
        """Every epoch, oldest first (a copy). Any thread."""
        with self._lock:
            return list(self._epochs)

    def latest_entry(self) -> EpochEntry | None:
        """The newest epoch, or None when there is none. Any thread."""
        with self._lock:
            return self._epochs[-1] if self._epochs else None

    def latest_epoch(self) -> int | None:
        """The newest epoch number: the current leader's epoch on a leader. Any thread."""
        entry = self.latest_entry()
        return None if entry is None else entry.epoch

    def earliest_entry(self) -> EpochEntry | None:
        """The oldest epoch, or None when there is none. Any thread."""
        with self._lock:
            return self._epochs[0] if self._epochs else None

    def epoch_entry(self, epoch: int) -> EpochEntry | None:
        """The entry of exactly ``epoch``, or None. Any thread."""
        with self._lock:
            i = bisect.bisect_left(self._epochs, epoch, key=_epoch)
            return self._epochs[i] if i < len(self._epochs) and self._epochs[i].epoch == epoch else None

    def previous_entry(self, epoch: int) -> EpochEntry | None:
        """The entry of the largest epoch below ``epoch``, or None. Any thread."""
        with self._lock:
            i = bisect.bisect_left(self._epochs, epoch, key=_epoch)
            return self._epochs[i - 1] if i > 0 else None

    def previous_epoch(self, epoch: int | None = None) -> int | None:
        """The largest epoch below ``epoch`` (below the latest epoch when None is given), or None. Any thread."""
        with self._lock:
            if epoch is None:
                return self._epochs[-2].epoch if len(self._epochs) >= 2 else None
            i = bisect.bisect_left(self._epochs, epoch, key=_epoch)
            return self._epochs[i - 1].epoch if i > 0 else None

    def next_epoch(self, epoch: int) -> int | None:
        """The smallest epoch above ``epoch``, or None. Any thread."""
        with self._lock:
            i = bisect.bisect_right(self._epochs, epoch, key=_epoch)
            return self._epochs[i].epoch if i < len(self._epochs) else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote ``offset``: the last one to start at or before it; None before the first. Any thread."""
        with self._lock:
            i = bisect.bisect_right(self._epochs, offset, key=_start_offset)
            return self._epochs[i - 1].epoch if i > 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> EpochEndOffset:
        """The largest epoch at or below ``requested_epoch`` and the offset where it ended (Kafka's endOffsetFor).

        The end of an epoch is the start offset of the first epoch above the one requested, or ``log_end_offset``
        when the latest epoch is asked for (the leader is still writing it). A requested epoch below every epoch held
        answers itself with the start of the first one: the data in between is gone, and the follower only needs to
        start at the leader's start. UNDEFINED_EPOCH, an empty cache, or an epoch above every epoch held answer
        UNDEFINED_EPOCH_END_OFFSET, so the follower falls back to its high watermark. Any thread.
        """
        with self._lock:
            if requested_epoch == UNDEFINED_EPOCH or not self._epochs:
                return UNDEFINED_EPOCH_END_OFFSET
            if self._epochs[-1].epoch == requested_epoch:
                return EpochEndOffset(requested_epoch, log_end_offset)
            higher = bisect.bisect_right(self._epochs, requested_epoch, key=_epoch)
            if higher == len(self._epochs):
                return UNDEFINED_EPOCH_END_OFFSET
            end_offset = self._epochs[higher].start_offset
            if higher == 0:
                return EpochEndOffset(requested_epoch, end_offset)
            return EpochEndOffset(self._epochs[higher - 1].epoch, end_offset)

    # --- inside ------------------------------------------------------------------------------------------------------

    def _assign(self, entry: EpochEntry) -> bool:
        """Apply the assign rule to memory; True if anything changed. Caller holds the lock."""
        if entry.epoch < 0 or entry.start_offset < 0:
            raise InvalidOffset(
                f"cannot assign leader epoch {entry.epoch} at offset {entry.start_offset} in "
                f"{self._checkpoint.path}: both must be at least 0"
            )
        if self._epochs:
            latest = self._epochs[-1]
            if entry.epoch == latest.epoch and entry.start_offset >= latest.start_offset:
                return False
        keep = len(self._epochs)
        while keep and (
            self._epochs[keep - 1].epoch >= entry.epoch or self._epochs[keep - 1].start_offset >= entry.start_offset
        ):
            keep -= 1
        removed = self._epochs[keep:]
        self._epochs[keep:] = [entry]
        # Dropping one entry that started at the same offset is expected (a new leader epoch before any record of the
        # old one was written); anything else means this replica's history diverged from the leader's.
        if len(removed) > 1 or (removed and removed[0].start_offset != entry.start_offset):
            _log.warning(
                "%s: new epoch entry %s truncated conflicting entries %s", self._checkpoint.path, entry, removed
            )
        return True

    def _flush_after_truncation(self) -> None:
        if self._schedule_flush is None:
            self._flush_if_dir_exists()
        else:
            self._schedule_flush(self._flush_if_dir_exists)

    def _flush_if_dir_exists(self) -> None:
        """The deferred write of a truncation: skipped when the partition directory was deleted meanwhile."""
        with self._write_lock:
            self._checkpoint.write_if_dir_exists(self.epoch_entries())
