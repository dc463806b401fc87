"""The log cleaner as a trio task (issue 18): one piece of code that both ``logfs mount`` and the follower daemon run
in their nursery, so a leader and its replicas clean their own logs the same way (Kafka's cleaner runs on every
replica: LogCleaner.scala's ``CleanerThread``; docs/replication.md, "Compacted topics").

Theory of operation (Kafka's ``CleanerThread.doWork``):

* **Rounds in worker threads.** :meth:`CleanerTask.run` runs ``log.cleaner.threads`` loops (Kafka's cleaner threads),
  each calling the core's ``LogCleaner.clean_once`` (core/log/cleaner/logcleaner.py: pick the dirtiest compacted log
  past its dirty ratio, or past ``max.compaction.lag.ms``, clean it, swap the segments in) in a worker thread under a
  CapacityLimiter of the cleaner's own (apart from the mount's read and write runners), so the trio thread never blocks
  on the cleaner's reads, writes or fsyncs, and appends and reads of every partition go on meanwhile (the core takes a
  log's lock only to read its producers and for each swap). After a pass that cleaned nothing a loop sleeps
  ``log.cleaner.backoff.ms``; after one that cleaned, it looks again at once, as Kafka's thread does.
* **Throttled** by ``log.cleaner.io.max.bytes.per.second``: the core's Throttler, shared by the loops, sleeps in the
  worker thread.
* **Cancellable.** Cancelling the task (an unmount, a signal, the follower's shutdown) stops the rounds in progress
  at their next chunk (``LogCleaner.abort``; a throttling sleep wakes at once), so the core deletes the round's
  ``.cleaned`` segment and leaves the checkpoint as it was (Kafka's ``LogCleaningAbortedException``). The task
  waits for the threads to return: no thread is abandoned, and the store is never closed under a round. A swap in
  progress finishes first (it is short and never interrupted half way).
* **A pass that fails** outside a round (the core already catches a round's own failures and marks that partition
  uncleanable) is logged with its traceback and counted in ``DeadThreadCount``; the loop goes on after the backoff.
* ``log.cleaner.enable=false`` (or ``log.cleaner.threads=0``): no loop runs; compacted logs are never cleaned, and
  ``state`` still shows how dirty they are.

What the mount shows: :meth:`CleanerTask.state_of` (``state``'s ``cleaner``), :meth:`CleanerTask.metrics_text`
(``.logfs/metrics``: Kafka's cleaner gauges in Prometheus form).

Threads: the trio thread runs the task and reads the statistics; rounds run in a worker thread.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import trio

from logfs.core.checkpoint import TopicPartition
from logfs.core.durable import now_ms
from logfs.core.log.cleaner.logcleaner import CleanStats, LogCleaner, Throttler
from logfs.core.log.log import Log
from logfs.core.store import Store

_log = logging.getLogger(__name__)

# Kafka's MBean (type, name) of each gauge of LogCleaner.metrics(), by its field: the Prometheus name is
# kafka_log_<type>_<name> in lower case with "-" as "_" (what Prometheus's JMX exporter makes of them).
GAUGES: dict[str, tuple[str, str, str]] = {
    "max_buffer_utilization_percent": ("LogCleaner", "max-buffer-utilization-percent",
                                       "Use of the offset map by the last round, percent (max over threads)."),
    "cleaner_recopy_percent": ("LogCleaner", "cleaner-recopy-percent",
                               "Bytes written over bytes read by the last rounds, percent."),
    "max_clean_time_secs": ("LogCleaner", "max-clean-time-secs", "Duration of the last round, seconds (max over "
                            "threads)."),
    "max_compaction_delay_secs": ("LogCleaner", "max-compaction-delay-secs",
                                  "How far past max.compaction.lag.ms the most overdue log was, seconds."),
    "dead_thread_count": ("LogCleaner", "DeadThreadCount", "Cleaner passes that died of an unexpected error."),
    "max_dirty_percent": ("LogCleanerManager", "max-dirty-percent", "Highest dirty ratio at the last selection, "
                          "percent."),
    "time_since_last_run_ms": ("LogCleanerManager", "time-since-last-run-ms",
                               "Milliseconds since the cleaner last looked for a log to clean."),
    "uncleanable_partitions_count": ("LogCleanerManager", "uncleanable-partitions-count",
                                     "Partitions the cleaner gave up on (a round failed): never retried."),
    "uncleanable_bytes": ("LogCleanerManager", "uncleanable-bytes", "Cleanable bytes of the uncleanable partitions."),
}  # fmt: skip


class StoppableThrottler(Throttler):
    """The cleaner's Throttler with a sleep that :attr:`stop` ends at once (a stopping cleaner must not sleep out
    a throttling period first). Any thread."""

    def __init__(self, bytes_per_second: float) -> None:
        self.stop = threading.Event()
        super().__init__(bytes_per_second, sleep=self._sleep_unless_stopped)

    def _sleep_unless_stopped(self, seconds: float) -> None:
        self.stop.wait(seconds)


class CleanerTask:
    """The cleaner of one store, run by :meth:`run` in a nursery. Trio thread."""

    def __init__(self, store: Store) -> None:
        self.store = store
        config = store.config
        self.throttler = StoppableThrottler(config.log_cleaner_io_max_bytes_per_second)
        self.cleaner = LogCleaner(store, config, throttler=self.throttler)
        self.threads = config.log_cleaner_threads if config.log_cleaner_enable else 0
        self.dead_threads = 0
        self._measured = (now_ms(), self.cleaner.metrics())  # the gauges as the last pass left them, and when
        self._limiter = trio.CapacityLimiter(max(self.threads, 1))  # the cleaner's own: never a reader's turn

    async def run(self) -> None:
        """Clean until cancelled (see the module docstring)."""
        if self.threads == 0:
            _log.info("log cleaner off (log.cleaner.enable=false or log.cleaner.threads=0)")
            return
        self.throttler.stop.clear()
        try:
            async with trio.open_nursery() as nursery:
                for _ in range(self.threads):
                    nursery.start_soon(self._loop)
        finally:
            self._stop()

    def _stop(self) -> None:
        """End the rounds in progress at their next chunk (and any throttling sleep now). Any thread."""
        self.throttler.stop.set()
        self.cleaner.abort()

    async def _loop(self) -> None:
        backoff_s = self.store.config.log_cleaner_backoff_ms / 1000
        while True:
            try:
                stats = await self._pass()
            except Exception:
                self.dead_threads += 1
                _log.exception("a log cleaner pass failed (the next in %g s)", backoff_s)
                stats = None
            if stats is None:
                await trio.sleep(backoff_s)
            else:
                await trio.sleep(0)  # a checkpoint between rounds: cancellation, and the other tasks

    async def _pass(self) -> CleanStats | None:
        """One ``clean_once`` in a worker thread. A cancellation meanwhile sets the stop, which ends the round at its
        next chunk, and then waits for the thread (``abandon_on_cancel=False``)."""
        done = False

        async def stop_on_cancel() -> None:
            try:
                await trio.sleep_forever()
            finally:
                if not done:
                    self._stop()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_on_cancel)
            try:
                return await trio.to_thread.run_sync(self._clean_once, limiter=self._limiter)
            finally:
                done = True
                nursery.cancel_scope.cancel()

    def _clean_once(self) -> CleanStats | None:
        """Worker thread: one pass, then the gauges measured (their uncleanable bytes read segment headers)."""
        try:
            return self.cleaner.clean_once()
        finally:
            self._measured = (now_ms(), self.cleaner.metrics())

    # --- what the mount shows ---------------------------------------------------------------------------------------

    def state_of(self, topic: str, partition: int, log: Log) -> dict[str, Any] | None:
        """``state``'s ``cleaner`` object: where the dirty section starts and its share of the cleanable bytes
        (Kafka's ``LogToClean``); None for a topic that is not compacted. Worker thread (the lag rules read segment
        headers)."""
        if not log.config.compact:
            return None
        info = self.cleaner.dirty_info(TopicPartition(topic, partition), log)
        return {"first_dirty_offset": info.first_dirty_offset, "dirty_ratio": round(info.dirty_ratio, 6)}

    def metrics_text(self) -> str:
        """Kafka's cleaner gauges (docs/mount.md, "Compacted topics") and the cleaner-io meter in Prometheus text form,
        as the last pass measured them (``time-since-last-run-ms`` as of now). Any thread; reads no file."""
        measured_ms, gauges = self._measured
        since = gauges.time_since_last_run_ms + max(0, now_ms() - measured_ms)
        values = gauges._replace(dead_thread_count=self.dead_threads, time_since_last_run_ms=since)._asdict()
        lines: list[str] = []
        for field, (kind, name, help_text) in GAUGES.items():
            metric = f"kafka_log_{kind}_{name}".lower().replace("-", "_")
            lines += [f"# HELP {metric} {help_text} Kafka: kafka.log:type={kind},name={name}.",
                      f"# TYPE {metric} gauge", f"{metric} {_number(values[field])}"]  # fmt: skip
        metric = "kafka_utils_throttler_cleaner_io_total"
        help_text = "Bytes the cleaner read and wrote. Kafka: kafka.utils:type=Throttler,name=cleaner-io."
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} counter", f"{metric} {values['cleaner_io_bytes']}"]
        return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"
