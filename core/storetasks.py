"""A store's periodic work (Kafka's LogManager scheduler tasks): retention, unlinking ``.deleted`` files, ``flush.ms``
flushes and checkpoint writes, and the flush of every log before a clean close.

The core has no threads of its own: :meth:`Store.tick` (core/store.py) runs what is due here (retention every
``log.retention.check.interval.ms``, unlinking ``.deleted`` files, ``flush.ms`` flushes, checkpoint writes every 5 s
for HWs and 60 s for the others) and the process that owns the store calls it from a worker thread. Only retention
walks every log; the rest visits the logs that reported work (``core/dirtylogs.py``), and a checkpoint file is
rewritten only when a value in it may have changed, so an idle store of 10,000 partitions costs a tick nothing
(docs/storage.md, "Many partitions").

:class:`StoreTasks` owns what that needs: the due times, the logs that reported work, the checkpoints' versions. The
store owns which logs there are; the tasks read its registry and never change it.

Threads: one run at a time (``_tick_lock``); checkpoint writes are serialised (``_checkpoint_lock``), as the store
writes them from other threads too (deleteRecords, topic deletion, close).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from logfs.core.checkpoint import OffsetCheckpointFile, TopicPartition
from logfs.core.dirtylogs import DirtyLogs
from logfs.core.durable import PARALLEL_FSYNCS, PARALLEL_FSYNCS_FROM
from logfs.core.durable import now_ms as wall_clock_ms
from logfs.core.log.changes import Change
from logfs.core.log.log import Log
from logfs.core.storeconfig import StoreConfig
from logfs.core.storedir import HIGH_WATERMARK_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT
from logfs.core.topicnames import parse_partition_dir

# Kafka's checkpoint intervals: replica.high.watermark.checkpoint.interval.ms and
# log.flush.offset.checkpoint.interval.ms / log.flush.start.offset.checkpoint.interval.ms.
HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS = 5_000
OFFSET_CHECKPOINT_INTERVAL_MS = 60_000
# How often a tick looks for .deleted files whose file.delete.delay.ms has passed.
DELETE_EXPIRED_INTERVAL_MS = 1_000


@dataclass
class _Due:
    """The next time each periodic job runs (ms since the epoch)."""

    retention: int = 0
    delete_expired: int = 0
    hw_checkpoint: int = 0
    offset_checkpoint: int = 0


class StoreTasks:
    """The periodic work of one store (see the module docstring), run by its :class:`Store`."""

    def __init__(self, path: Path, config: StoreConfig, logs: dict[TopicPartition, Log]) -> None:
        self._path = path
        self._config = config
        self._logs = logs  # the store's registry, read here (Store._add_log and _drop_log change it)
        # The logs a run must visit, as they report themselves (core/dirtylogs.py): an idle log costs a run
        # nothing. The store feeds it (Log.on_change) and drops a log from it when the log's partition goes. The
        # checkpoint versions are the change counter's value at each file's last write (-1: write once after the
        # open, which recovery may have changed).
        self.dirty: DirtyLogs[Log] = DirtyLogs()
        self._due = _Due()
        self._hw_written = -1
        self._offsets_written = -1
        self._tick_lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()
        self.tick_visits = 0  # how many logs the last run looked at (tests/core/test_store_scale.py counts them)

    def run_due(self, now_ms: int | None) -> None:
        """Run the jobs that are due at ``now_ms`` (default: now): :meth:`Store.tick` without its offline check."""
        with self._tick_lock:  # one tick at a time: the flush queue and the due times have one owner
            self.tick_visits = 0
            now = wall_clock_ms() if now_ms is None else now_ms
            due = self._due
            if now >= due.retention:  # minutes apart: the one job that walks every log (cheap per log)
                logs = list(self._logs.values())
                for log in logs:
                    log.delete_old_segments(now)
                    log.remove_expired_producers(now)  # idle for producer.id.expiration.ms (a day): forgotten
                self.tick_visits += len(logs)
                due.retention = now + self._config.log_retention_check_interval_ms
            if now >= due.delete_expired:
                for log in self.dirty.take_deletes():
                    self.tick_visits += 1
                    log.delete_expired_files(now)
                    if log.local.has_pending_deletes:
                        self.dirty.changed(log, Change.DELETE)  # not due yet: look again next time
                due.delete_expired = now + DELETE_EXPIRED_INTERVAL_MS
            for log in [*self.dirty.take_flushes(), *self.dirty.due_flushes(now)]:
                self.tick_visits += 1
                self._flush_if_due(log, now)
            write_hw = now >= due.hw_checkpoint
            write_offsets = now >= due.offset_checkpoint
            if write_hw or write_offsets:
                self.write_checkpoints(hw=write_hw, offsets=write_offsets, only_if_changed=True)
                if write_hw:
                    due.hw_checkpoint = now + HIGH_WATERMARK_CHECKPOINT_INTERVAL_MS
                if write_offsets:
                    due.offset_checkpoint = now + OFFSET_CHECKPOINT_INTERVAL_MS

    def _flush_if_due(self, log: Log, now: int) -> None:
        """Flush what rolls left, and the records once ``flush.ms`` has passed; queue the log for when it will
        have passed otherwise. A log that has nothing unflushed left is dropped: its next append reports it again."""
        if self._dirty_log_is_gone(log):
            return
        log.flush_rolled()
        if not log.unflushed_records:
            return
        flush_ms = log.config.flush_ms
        if log.ms_since_last_flush(now) >= flush_ms:
            log.flush()
            if not log.unflushed_records:
                return
        self.dirty.schedule_flush(log, log.local.last_flush_ms + flush_ms)

    def _dirty_log_is_gone(self, log: Log) -> bool:
        """A log reported before its topic was deleted (its partition is gone or is another log now)."""
        tp = parse_partition_dir(log.directory.name)
        return tp is None or self._logs.get(tp) is not log

    def write_checkpoints(self, *, hw: bool, offsets: bool, only_if_changed: bool = False) -> None:
        """Write the HW and (``offsets``) the recovery point and log start checkpoints; ``only_if_changed``: skip a
        file when no log reported a change of its values since its last write (the tick's periodic writes: at
        10,000 partitions an unchanged file is ~300 KB rewritten and fsynced for nothing)."""
        with self._checkpoint_lock:  # tick and delete_records run on different threads; one .tmp per file
            version = self.dirty.version  # read before the values: a change after this is written next time
            if only_if_changed:
                hw = hw and version != self._hw_written
                offsets = offsets and version != self._offsets_written
            if not (hw or offsets):
                return
            self._write_checkpoints_locked(hw=hw, offsets=offsets)
            if hw:
                self._hw_written = version
            if offsets:
                self._offsets_written = version

    def _write_checkpoints_locked(self, *, hw: bool, offsets: bool) -> None:
        items = list(self._logs.items())
        if hw:
            OffsetCheckpointFile(self._path / HIGH_WATERMARK_CHECKPOINT).write(
                {tp: log.high_watermark for tp, log in items}
            )
        if offsets:
            OffsetCheckpointFile(self._path / RECOVERY_POINT_CHECKPOINT).write(
                {tp: log.recovery_point for tp, log in items}
            )
            OffsetCheckpointFile(self._path / LOG_START_OFFSET_CHECKPOINT).write(
                {tp: log.log_start_offset for tp, log in items if log.log_start_offset > log.segments[0].base_offset}
            )


def flush_all(logs: list[Log]) -> None:
    """Flush ``logs`` several at once before a clean close (each flush is a few fsyncs that wait for journal
    commits, which the file system merges when they overlap: 10,000 partitions written since their last flush are
    50,000 fsyncs, one after another the longest part of an unmount). The threads are this call's own, all joined
    before it returns; the first failure (StoreOffline) is raised."""
    if len(logs) < PARALLEL_FSYNCS_FROM:
        for log in logs:
            log.flush()
        return
    with ThreadPoolExecutor(min(PARALLEL_FSYNCS, len(logs)), thread_name_prefix="logfs-flush") as pool:
        for done in [pool.submit(log.flush) for log in logs]:
            done.result()
