"""The log cleaner: compaction of ``cleanup.policy=compact`` topics, as Kafka's LogCleaner and LogCleanerManager do
it (reference ``kafka-compaction.md``; docs/compaction.md tells the user's side).

API (what the mount's cleaner task and ``state`` call; everything here is real, nothing is a stub)::

    cleaner = LogCleaner(store, store.config)       # store: anything with .path and .logs() (core.store.Store);
                                                    # LogCleaner.for_store(store) is the same
    stats = cleaner.clean_once(now_ms)              # pick the dirtiest log, clean it: CleanStats | None
    info = cleaner.dirty_info(tp, log, now_ms)      # DirtyInfo: first_dirty_offset, dirty_ratio (state's
                                                    # "cleaner" object), both bounds, the byte counts, the lag
    cleaner.clean_log(log, now_ms)                  # clean this log now, whatever its ratio (tests, tools)
    cleaner.abort()                                 # stop the rounds in progress (between chunks, or in a
                                                    # throttle's sleep; nothing swapped)
    cleaner.metrics()                               # Kafka's cleaner gauges (CleanerMetrics), by Kafka's names
    cleaner.max_dirty_ratio, cleaner.max_compaction_delay_ms, cleaner.uncleanable_partitions()
    cleaner.forget(tp)                              # a partition left the store (its checkpoint entry goes)
    cleaner.throttler                               # the shared Throttler (log.cleaner.io.max.bytes.per.second)

``clean_once`` is what one of Kafka's ``CleanerThread``s does per pass: it returns None when no log is eligible,
and then the caller waits ``log.cleaner.backoff.ms`` (``StoreConfig.log_cleaner_backoff_ms``) before calling it
again. Run ``log.cleaner.threads`` such loops, each on a worker thread (never the trio thread: a round reads and
writes whole segments); the cleaner keeps them on different logs. Nothing runs when ``log.cleaner.enable`` is
false (:attr:`enabled`); the caller checks it.

Choosing (:meth:`dirty_info`; docs/compaction.md, "How a log is cleaned"): a log's first dirty offset is its
``cleaner-offset-checkpoint`` entry (reset to the log start offset when below it or past the LEO); its first uncleanable
offset is the smallest of its last stable offset (never above the HW), the active segment's base and, with
``min.compaction.lag.ms``, the base of the first segment holding a record younger than the lag, rounded down to a
segment base. Its dirty ratio is the cleanable bytes (segments from the one holding the first dirty offset to the
uncleanable one) over those plus the clean bytes (segments below the first dirty offset). The dirtiest log whose ratio
is above ``min.cleanable.dirty.ratio``, or that holds a segment older than ``max.compaction.lag.ms`` with cleanable
bytes, is cleaned (``clean.py``), and its checkpoint entry becomes the round's end offset.

Files: ``cleaner-offset-checkpoint`` at the store root, in Kafka's checkpoint format (``core/checkpoint.py``),
rewritten after every round with the entries of the partitions the store holds; ``….cleaned``, ``….swap`` and
``cleaner-swap.intent`` in a partition directory during a swap (``swap.py``).

Errors: a round that finds the log changed under it is aborted (nothing swapped, no checkpoint), and the log is
picked again later. A store that is offline (or goes offline during the round: every file operation of a round
goes through the failure channel, ``core/logdirfailure.py``) ends the round with None and marks nothing: the disk,
not the partition, failed, and the channel has logged it once. Any other failure marks the partition *uncleanable*
(Kafka's rule: never retried while the process runs; counted in the ``uncleanable-partitions-count`` metric and
logged), and ``clean_once`` returns None.

Threads: any; several threads may call :meth:`clean_once` at once (selection is under a lock, each log is cleaned
by one thread at a time). The logs' appends and reads go on meanwhile: a round holds a log's lock only to read its
producers at the start and for each swap.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple, Protocol

from logfs.core.checkpoint import OffsetCheckpointFile, TopicPartition
from logfs.core.config import LONG_MAX
from logfs.core.durable import now_ms as wall_clock_ms
from logfs.core.errors import CorruptCheckpoint, StorageError, StoreOffline
from logfs.core.log.cleaner.clean import CleaningAborted, CleanStats, clean_log
from logfs.core.log.cleaner.filtering import ProducerLast
from logfs.core.log.cleaner.offsetmap import OffsetMap
from logfs.core.log.cleaner.throttler import Throttler
from logfs.core.log.log import Log
from logfs.core.log.segment import LogSegment
from logfs.core.storeconfig import StoreConfig

_log = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
MAX_MAP_BYTES_PER_THREAD = 2**31 - 1  # Kafka's cap on one thread's share of the dedupe buffer

__all__ = ["CLEANER_CHECKPOINT", "CleanStats", "CleanerMetrics", "DirtyInfo", "LogCleaner", "Throttler"]


class DirtyInfo(NamedTuple):
    """How dirty one log is (Kafka's ``LogToClean`` and ``maxCompactionDelay``)."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    dirty_ratio: float  # cleanable / (clean + cleanable); 0.0 for an empty log
    compaction_delay_ms: int  # how far past max.compaction.lag.ms its oldest dirty segment is; 0 if not
    needs_compaction_now: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes


class CleanerMetrics(NamedTuple):
    """Kafka's cleaner gauges (LogCleaner.scala, LogCleanerManager.scala), named in :meth:`as_dict` as Kafka names
    them."""

    max_buffer_utilization_percent: float
    cleaner_recopy_percent: float
    max_clean_time_secs: int
    max_compaction_delay_secs: int
    dead_thread_count: int
    max_dirty_percent: float
    time_since_last_run_ms: int
    uncleanable_partitions_count: int
    uncleanable_bytes: int
    cleaner_io_bytes: int

    def as_dict(self) -> dict[str, float]:
        """``{Kafka's metric name: value}`` (names as in the MBeans' ``name=`` part)."""
        names = {"dead_thread_count": "DeadThreadCount", "cleaner_io_bytes": "cleaner-io"}
        return {names.get(k, k.replace("_", "-")): float(v) for k, v in self._asdict().items()}


LogsView = Callable[[], Iterable[tuple[TopicPartition, Log]]]


class LogCleaner:
    """The cleaner of one store. See the module docstring."""

    def __init__(
        self,
        store: StoreLike,
        config: StoreConfig | None = None,
        *,
        throttler: Throttler | None = None,
        map_memory: int | None = None,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        """The cleaner of ``store`` (its ``path`` holds the checkpoint; ``logs()`` lists its partitions as they are
        now) under ``config`` (default: the store's). ``map_memory`` overrides each round's offset map size
        (default: ``log.cleaner.dedupe.buffer.size`` over ``log.cleaner.threads``, at most 2^31 - 1)."""
        config = config if config is not None else store.config
        self.root = store.path
        self._logs: LogsView = store.logs
        self.config = config
        self.enabled = config.log_cleaner_enable and config.log_cleaner_threads > 0
        per_thread = config.log_cleaner_dedupe_buffer_size // max(config.log_cleaner_threads, 1)
        if per_thread > MAX_MAP_BYTES_PER_THREAD:
            _log.warning(
                "Cannot use more than 2G of cleaner buffer space per cleaner thread, ignoring excess buffer space..."
            )
        self.map_memory = map_memory if map_memory is not None else min(per_thread, MAX_MAP_BYTES_PER_THREAD)
        OffsetMap(self.map_memory)  # Kafka's check that the map holds at least one key, at start
        self.throttler = throttler or Throttler(config.log_cleaner_io_max_bytes_per_second)
        self._clock = clock
        self._lock = threading.Lock()
        self._abort = threading.Event()
        self._checkpoint_file = OffsetCheckpointFile(self.root / CLEANER_CHECKPOINT)
        self._checkpoints = self._read_checkpoints()
        self._in_progress: set[TopicPartition] = set()
        self._uncleanable: dict[TopicPartition, str] = {}
        self.last_stats: dict[int, CleanStats] = {}  # by thread id: each thread's last round
        self._last_run_ms = clock()
        self.max_dirty_ratio = 0.0  # the highest ratio at the last selection (max-dirty-percent / 100)
        self.max_compaction_delay_ms = 0  # the most overdue log's delay at the last selection

    @classmethod
    def for_store(
        cls, store: StoreLike, *, throttler: Throttler | None = None, map_memory: int | None = None
    ) -> LogCleaner:
        """``LogCleaner(store, store.config)``."""
        return cls(store, store.config, throttler=throttler, map_memory=map_memory)

    def uncleanable_partitions(self) -> dict[TopicPartition, str]:
        """The partitions a failed round marked uncleanable, with the error (a copy). Any thread."""
        with self._lock:
            return dict(self._uncleanable)

    def abort(self) -> None:
        """Stop every round in progress at its next chunk: its ``.cleaned`` segment is deleted, nothing of the merge
        is swapped, the checkpoint stays (Kafka's LogCleaningAbortedException). A round starting later runs."""
        self._abort.set()

    def _tp_of(self, log: Log) -> TopicPartition:
        for tp, candidate in self._logs():
            if candidate is log:
                return tp
        topic, _, partition = log.directory.name.rpartition("-")
        return TopicPartition(topic, int(partition))

    # --- the checkpoint ------------------------------------------------------------------------------------------

    def _read_checkpoints(self) -> dict[TopicPartition, int]:
        try:
            return self._checkpoint_file.read()
        except CorruptCheckpoint as exc:
            _log.warning(
                "%s is damaged (%s): compacted logs are cleaned from their start", self._checkpoint_file.path, exc
            )
            return {}

    def checkpoints(self) -> dict[TopicPartition, int]:
        """The first dirty offset of each partition the cleaner has recorded (a copy). Any thread."""
        with self._lock:
            return dict(self._checkpoints)

    def _write_checkpoints(self) -> None:
        """Under ``_lock``: rewrite the file with the entries of the partitions the store holds."""
        hosted = {tp for tp, _ in self._logs()}
        self._checkpoints = {tp: o for tp, o in self._checkpoints.items() if tp in hosted}
        self._checkpoint_file.write(self._checkpoints)

    def forget(self, tp: TopicPartition) -> None:
        """A partition was deleted: drop its checkpoint entry and uncleanable mark."""
        with self._lock:
            self._uncleanable.pop(tp, None)
            if self._checkpoints.pop(tp, None) is not None:
                self._checkpoint_file.write(self._checkpoints)

    # --- choosing -----------------------------------------------------------------------------------------------

    def dirty_info(self, tp: TopicPartition, log: Log, now_ms: int | None = None) -> DirtyInfo:
        """How dirty partition ``tp`` (its ``log``) is now (module docstring): ``state``'s ``cleaner`` object is its
        ``first_dirty_offset`` and ``dirty_ratio``. Any thread; reads segment headers for the lag rules (a worker
        thread)."""
        now = self._clock() if now_ms is None else now_ms
        with self._lock:
            first_dirty, _ = self._first_dirty(tp, log)
        return _dirty_info(log, first_dirty, now)

    def _first_dirty(self, tp: TopicPartition, log: Log) -> tuple[int, bool]:
        """Under ``_lock``: the first dirty offset, and whether the checkpoint needed a reset (Kafka's
        ``cleanableOffsets``)."""
        log_start = log.log_start_offset
        checkpoint = self._checkpoints.get(tp)
        if checkpoint is None:
            return log_start, False
        if checkpoint < log_start or checkpoint > log.log_end_offset:
            return log_start, True
        return checkpoint, False

    def _grab_filthiest(self, now: int) -> tuple[TopicPartition, Log, DirtyInfo] | None:
        """Kafka's ``grabFilthiestCompactedLog``: the eligible log with the highest ratio, marked in progress."""
        with self._lock:
            self._last_run_ms = now
            best: tuple[TopicPartition, Log, DirtyInfo] | None = None
            max_ratio, max_delay, reset = 0.0, 0, False
            for tp, log in self._logs():
                if not log.config.compact or tp in self._in_progress or tp in self._uncleanable:
                    continue
                first_dirty, needs_reset = self._first_dirty(tp, log)
                if needs_reset:
                    self._checkpoints[tp] = first_dirty
                    reset = True
                info = _dirty_info(log, first_dirty, now)
                if info.total_bytes == 0:
                    continue
                max_ratio = max(max_ratio, info.dirty_ratio)
                max_delay = max(max_delay, info.compaction_delay_ms)
                eligible = (info.needs_compaction_now and info.cleanable_bytes > 0) or (
                    info.dirty_ratio > log.config.min_cleanable_dirty_ratio
                )
                if eligible and (best is None or info.dirty_ratio > best[2].dirty_ratio):
                    best = (tp, log, info)
            if reset:
                self._write_checkpoints()
            self.max_dirty_ratio, self.max_compaction_delay_ms = max_ratio, max_delay
            if best is not None:
                self._in_progress.add(best[0])
            return best

    # --- cleaning -----------------------------------------------------------------------------------------------

    def clean_once(self, now_ms: int | None = None) -> CleanStats | None:
        """Clean the dirtiest eligible log (one of Kafka's cleaner thread passes); None when none is eligible, or
        when the round was aborted or failed (see the module docstring). Blocking."""
        now = self._clock() if now_ms is None else now_ms
        picked = self._grab_filthiest(now)
        if picked is None:
            return None
        tp, log, info = picked
        return self._clean(tp, log, info, now)

    def clean_log(self, log: Log, now_ms: int | None = None) -> CleanStats | None:
        """Clean ``log`` now, whatever its ratio (still within its cleanable range). None when another thread is
        cleaning it, it has nothing cleanable, or the round was aborted; raises what a failed round raised (and marks
        the partition uncleanable)."""
        now = self._clock() if now_ms is None else now_ms
        tp = self._tp_of(log)
        with self._lock:
            if tp in self._in_progress:
                return None
            first_dirty, needs_reset = self._first_dirty(tp, log)
            if needs_reset:
                self._checkpoints[tp] = first_dirty
                self._write_checkpoints()
            self._in_progress.add(tp)
        return self._clean(tp, log, _dirty_info(log, first_dirty, now), now, raise_errors=True)

    def _clean(
        self, tp: TopicPartition, log: Log, info: DirtyInfo, now: int, *, raise_errors: bool = False
    ) -> CleanStats | None:
        try:
            if info.first_uncleanable_offset <= info.first_dirty_offset:
                return None
            _log.info("Beginning cleaning of %s-%d (dirty section = [%d, %d))", tp.topic, tp.partition,
                      info.first_dirty_offset, info.first_uncleanable_offset)  # fmt: skip
            with log.local.lock:  # Kafka's lastRecordsOfActiveProducers, taken once per round
                producers: dict[int, ProducerLast] = {
                    pid: (entry.last_data_offset, entry.producer_epoch)
                    for pid, entry in log.producer_state.producers.items()
                }
            stats = clean_log(
                log, info.first_dirty_offset, info.first_uncleanable_offset, OffsetMap(self.map_memory), now,
                self._charge, producers,
            )  # fmt: skip
            if stats.end_offset <= info.first_dirty_offset:
                raise StorageError(
                    f"{log.directory.name}: the offset map ({self.map_memory} bytes) cannot hold the keys of one batch "
                    f"at {info.first_dirty_offset}; increase log.cleaner.dedupe.buffer.size"
                )
            with self._lock:
                self._checkpoints[tp] = stats.end_offset
                self._write_checkpoints()
                self.last_stats[threading.get_ident()] = stats
            _log.info(
                "cleaned %s-%d (dirty section = [%d, %d)): %.1f MB read, %.1f MB written in %.3f s, %d of %d "
                "records kept, %d segments -> %d",
                tp.topic, tp.partition, stats.first_dirty_offset, stats.end_offset,
                (stats.map_bytes_read + stats.bytes_read) / 1e6, stats.bytes_written / 1e6, stats.elapsed_s,
                stats.messages_written, stats.messages_read, stats.segments_before, stats.segments_after,
            )  # fmt: skip
            return stats
        except CleaningAborted as exc:
            _log.info("%s-%d: clean aborted: %s", tp.topic, tp.partition, exc)
            return None
        except StoreOffline:  # logged once, at ERROR, by the failure channel; the partition is not to blame
            return None
        except Exception as exc:
            with self._lock:
                self._uncleanable[tp] = str(exc)
            _log.warning("Unexpected exception thrown when cleaning log %s. Marking its partition (%s-%d) as "
                         "uncleanable", log.directory, tp.topic, tp.partition, exc_info=True)  # fmt: skip
            if raise_errors:
                raise
            return None
        finally:
            with self._lock:
                self._in_progress.discard(tp)
                if not self._in_progress:
                    self._abort.clear()

    def _charge(self, observed: int) -> None:
        """Each chunk a round reads or writes: the abort check (Kafka's ``checkDone``), then the throttle."""
        if self._abort.is_set():
            raise CleaningAborted("the cleaner was asked to stop")
        self.throttler.maybe_throttle(observed, self._abort)
        if self._abort.is_set():  # asked while the throttle slept
            raise CleaningAborted("the cleaner was asked to stop")

    # --- metrics ------------------------------------------------------------------------------------------------

    def metrics(self, now_ms: int | None = None) -> CleanerMetrics:
        """Kafka's cleaner gauges as they are now (docs/mount.md, "Compacted topics"). Any thread."""
        now = self._clock() if now_ms is None else now_ms
        with self._lock:
            stats = list(self.last_stats.values())
            uncleanable = dict(self._uncleanable)
            logs = dict(self._logs())
            read = sum(s.bytes_read for s in stats)
            written = sum(s.bytes_written for s in stats)
            return CleanerMetrics(
                max_buffer_utilization_percent=100 * max((s.buffer_utilization for s in stats), default=0.0),
                cleaner_recopy_percent=100 * written / max(read, 1),
                max_clean_time_secs=int(max((s.elapsed_s for s in stats), default=0.0)),
                max_compaction_delay_secs=self.max_compaction_delay_ms // 1000,
                dead_thread_count=0,
                max_dirty_percent=100 * self.max_dirty_ratio,
                time_since_last_run_ms=now - self._last_run_ms,
                uncleanable_partitions_count=len(uncleanable),
                uncleanable_bytes=sum(
                    _dirty_info(logs[tp], self._first_dirty(tp, logs[tp])[0], now).cleanable_bytes
                    for tp in uncleanable
                    if tp in logs
                ),
                cleaner_io_bytes=self.throttler.total_bytes,
            )


class StoreLike(Protocol):
    """What :meth:`LogCleaner.for_store` reads of a store (``core.store.Store`` has it)."""

    @property
    def path(self) -> Path: ...

    @property
    def config(self) -> StoreConfig: ...

    def logs(self) -> Iterator[tuple[TopicPartition, Log]]: ...


def _dirty_info(log: Log, first_dirty: int, now: int) -> DirtyInfo:
    """Kafka's ``cleanableOffsets`` bound, ``calculateCleanableBytes`` and ``maxCompactionDelay`` for a log whose
    first dirty offset is ``first_dirty``."""
    view = log.segment_snapshot
    segments, bases = view.segments, view.bases
    config = log.config
    bound = min(log.last_stable_offset, bases[-1])
    start_index = max(0, view.floor_index(first_dirty))
    if config.min_compaction_lag_ms > 0:
        for segment in segments[start_index:-1]:
            if segment.largest_timestamp > now - config.min_compaction_lag_ms:
                bound = min(bound, segment.base_offset)
                break
    bound = max(bound, first_dirty)
    uncleanable_index = min(max(0, view.floor_index(bound)), len(segments) - 1)
    first_uncleanable = bases[uncleanable_index]
    # A first dirty offset inside a segment counts that segment in both sums, as Kafka's logSegments ranges do.
    clean_bytes = sum(s.size_bytes for s, b in zip(segments, bases, strict=True) if b < first_dirty)
    low = min(first_dirty, first_uncleanable)
    cleanable_bytes = sum(s.size_bytes for s in segments[max(0, view.floor_index(low)) : uncleanable_index])
    total = clean_bytes + cleanable_bytes
    ratio = cleanable_bytes / total if total else 0.0
    delay = 0
    max_lag = max(config.max_compaction_lag_ms, 0)
    if max_lag < LONG_MAX and now - max_lag > 0:
        clean_until = now - max_lag
        firsts = [_first_batch_timestamp(s) for s in segments[start_index:-1]]
        earliest = min((t for t in firsts if 0 < t < LONG_MAX), default=LONG_MAX)
        if earliest < clean_until:
            delay = clean_until - earliest
    return DirtyInfo(first_dirty, first_uncleanable, clean_bytes, cleanable_bytes, ratio, delay, delay > 0)


def _first_batch_timestamp(segment: LogSegment) -> int:
    """The max timestamp of the segment's first batch (Kafka's ``getFirstBatchTimestampForSegments``); -1 if none."""
    for batch in segment.batches():
        return batch.max_timestamp
    return -1
