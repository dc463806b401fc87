"""The logs the store's periodic work must visit, fed by the logs themselves (``core/log/changes.py``).

The once-a-second tick used to walk every partition to find the few with something to do; at 10,000 partitions
that walk alone was a quarter of a core, idle. Here each log reports when it becomes interesting, and the tick takes
only those (docs/storage.md, "Periodic work"):

* logs to flush: a log that reported ``Change.FLUSH`` is taken by the next tick, which flushes its rolled segments
  and, when ``flush.ms`` has passed, its records; one whose ``flush.ms`` is still to come waits in a queue ordered
  by when it falls due (none at all for the default ``flush.ms``, which never comes): a log with unflushed records
  is always in the set or in the queue, because only the tick drops it, and only once it has none;
* logs with ``.deleted`` files pending;
* a change counter for the checkpoint files: bumped after any HW, recovery point or log start offset moves, so that
  a checkpoint is rewritten only when a value in it may have changed since the last write.

Threads: ``changed`` runs on any thread (under the reporting log's lock); ``take_*``, ``schedule_flush`` and
``due_flushes`` run on the tick's thread. One lock guards the sets and the queue; the counter is a plain int whose
increments may race, which can only make a checkpoint be written once more, never skipped: the writer reads it
*before* it reads the values, and a change bumps it *after* the value moved.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from typing import Generic, TypeVar

from logfs.core.log.changes import Change

L = TypeVar("L")

# flush.ms at or past this never comes (Kafka's default is Long.MAX_VALUE): such a log is not queued.
NEVER_MS = 2**62


class DirtyLogs(Generic[L]):
    """See the module docstring. ``L`` is the log type (the store's Log); any hashable object works."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flush: set[L] = set()
        self._deletes: set[L] = set()
        self._queue: list[tuple[int, int, L]] = []  # (due ms, tie-break, log): flush.ms still to come
        self._queued: dict[L, int] = {}  # the earliest due of each queued log (older entries are stale)
        self._seq = itertools.count()
        self.version = 0  # bumped by every Change.CHECKPOINT

    def changed(self, log: L, change: Change) -> None:
        """A log's report (its ``on_change`` sink, bound to the log). Any thread; cheap."""
        if change & Change.CHECKPOINT:
            self.version += 1
        if change & (Change.FLUSH | Change.DELETE):
            with self._lock:
                if change & Change.FLUSH:
                    self._flush.add(log)
                if change & Change.DELETE:
                    self._deletes.add(log)

    def take_flushes(self) -> set[L]:
        """The logs that reported ``FLUSH`` since the last call (the tick decides and re-queues what it keeps)."""
        with self._lock:
            taken, self._flush = self._flush, set()
        return taken

    def take_deletes(self) -> set[L]:
        with self._lock:
            taken, self._deletes = self._deletes, set()
        return taken

    def schedule_flush(self, log: L, due_ms: int) -> None:
        """Visit ``log`` again at ``due_ms`` (its ``flush.ms``); nothing when that never comes."""
        if due_ms >= NEVER_MS:
            return
        with self._lock:
            queued = self._queued.get(log)
            if queued is not None and queued <= due_ms:
                return
            self._queued[log] = due_ms
            heapq.heappush(self._queue, (due_ms, next(self._seq), log))

    def due_flushes(self, now_ms: int) -> list[L]:
        """The queued logs whose ``flush.ms`` has come (each once), out of the queue."""
        due: list[L] = []
        with self._lock:
            while self._queue and self._queue[0][0] <= now_ms:
                at, _, log = heapq.heappop(self._queue)
                if self._queued.get(log) == at:
                    del self._queued[log]
                    due.append(log)
        return due

    def requeue_all_flushes(self, logs: list[L]) -> None:
        """Look at ``logs`` again at the next tick (their ``flush.ms`` changed: a queued due time may be wrong)."""
        with self._lock:
            self._flush.update(logs)

    def forget(self, log: L) -> None:
        """The log is closed and gone (a deleted topic): never visit it again."""
        with self._lock:
            self._flush.discard(log)
            self._deletes.discard(log)
            self._queued.pop(log, None)  # its queue entries are stale from now on

    def __len__(self) -> int:
        """How many logs are waiting for a visit (in a set or the queue), for tests and metrics."""
        with self._lock:
            return len(self._flush | self._deletes | set(self._queued))
