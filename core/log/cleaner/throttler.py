"""A byte-rate throttle for the log cleaner (Kafka's ``org.apache.kafka.storage.internals.utils.Throttler``).

All cleaner threads share one, at ``log.cleaner.io.max.bytes.per.second``; it is charged with every byte the
cleaner reads (building the offset map, recopying) and writes. Kafka's rule (its ``Throttler``): bytes are counted over
periods of at least 300 ms; at the end of a period whose rate exceeded the desired one, the caller sleeps as long as
brings the period's rate down to it, and a new period begins. The sleep happens in the calling (cleaner) thread,
never under a log's lock.

One addition to Kafka's: a throttled cleaner (a rate below Double.MAX_VALUE) also pauses :data:`PAUSE_S` at every
call that does not sleep. Kafka's rule lets the cleaner run at full speed for a whole 300 ms period before it sleeps;
in CPython that burst holds the GIL, which an append through the mount (its trio thread, a worker thread) needs
several times per write, so the appends of other partitions waited up to the switch interval (5 ms) each time.
Measured through a mount (scripts/bench_compaction.py, same runs, interleaved idle/cleaning/idle): append p99 with
the cleaner at 50 MB/s 1.9-2.6x the idle one without the pause (four runs), 0.4-1.8x with it (six runs, most
below 1x; docs/compaction.md has them). An unthrottled cleaner (Kafka's default) does not pause: on a loaded machine
a 100 µs sleep costs a thread its time slice (~1.6 ms measured), which took the unthrottled cleaner from ~450 to
70-110 MB/s; docs/compaction.md says to throttle a cleaner beside latency-sensitive appends.

Threads: any; the counters are guarded by a lock, the sleep is outside it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

CHECK_INTERVAL_MS = 300  # Kafka's Throttler checkIntervalMs for the cleaner
PAUSE_S = 0.0001  # a throttled caller's pause between periods' sleeps: the GIL to other threads (module docstring)
UNLIMITED = sys.float_info.max  # Kafka's default rate, Double.MAX_VALUE: no throttle


class Throttler:
    """Keeps the callers of :meth:`maybe_throttle` together at or below ``bytes_per_second`` on average."""

    def __init__(
        self,
        bytes_per_second: float,
        *,
        check_interval_ms: int = CHECK_INTERVAL_MS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        pause_s: float = PAUSE_S,
    ) -> None:
        self.bytes_per_second = bytes_per_second
        self._interval_s = check_interval_ms / 1000
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._period_start = clock()
        self._observed = 0.0
        self.total_bytes = 0  # the cleaner-io meter's count
        self.total_sleep_s = 0.0  # the throttling sleeps (pauses not counted)
        self.pause_s = pause_s

    def maybe_throttle(self, observed: float, interrupt: threading.Event | None = None) -> None:
        """Count ``observed`` bytes; sleep if the current period is over and its rate was too high, else pause
        :attr:`pause_s` when throttled (module docstring). A sleep ends early when ``interrupt`` is set (the
        cleaner's abort: an unmount must not wait out a throttled round)."""
        sleep_s = 0.0
        with self._lock:
            self.total_bytes += int(observed)
            self._observed += observed
            now = self._clock()
            elapsed = now - self._period_start
            if elapsed >= self._interval_s:
                rate = self._observed / elapsed if elapsed > 0 else float("inf")
                if rate > self.bytes_per_second:
                    sleep_s = self._observed / self.bytes_per_second - elapsed
                self._period_start = now + max(sleep_s, 0.0)
                self._observed = 0.0
        if sleep_s > 0:
            self.total_sleep_s += sleep_s
        elif self.pause_s and self.bytes_per_second < UNLIMITED:
            sleep_s = self.pause_s
        else:
            return
        if interrupt is None:
            self._sleep(sleep_s)
        else:
            interrupt.wait(sleep_s)
