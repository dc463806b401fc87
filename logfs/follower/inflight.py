"""The follower's calls into the leader's mount that are still running, so that shutdown can wait for them.

Why: a fetch (or a listing) is a system call on the leader's FUSE mount, made in a worker thread that trio abandons
when the follower is cancelled. If the follower then exits while such a call is still queued in the kernel (sent, not
yet read by the leader), the exit withdraws it, and the leader's FUSE loop can lose the wake-up that announced it:
pyfuse3 waits until ``/dev/fuse`` is readable and then reads it with a blocking ``read(2)`` on the trio thread, so a
request withdrawn between the two leaves the whole leader mount blocked in that read (holding the GIL) until some
other request arrives. The follower's other calls, already read by the leader and long-polling there, then never get
their answer, and the follower's exit waits for them for ever (a thread in a FUSE request ends only when the daemon
answers it): ``logfs follow`` did not exit on SIGTERM (docs/replication.md, "Shutdown").

So the follower counts the leader calls in flight and, at shutdown, waits for them to come back (each is bounded
by the leader's long poll) before it exits: nothing of it is then left queued in the leader's mount to withdraw.

Threads: :meth:`LeaderCalls.run` in worker threads; :meth:`LeaderCalls.wait_idle` in a worker thread too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class LeaderCalls:
    """How many calls into the leader's mount are running, and a wait until none is."""

    def __init__(self) -> None:
        self._idle = threading.Condition()
        self._running = 0

    @property
    def running(self) -> int:
        return self._running

    def run(self, fn: Callable[[], T]) -> T:
        """Call ``fn`` (a worker thread's call into the leader's mount), counted while it runs."""
        with self._idle:
            self._running += 1
        try:
            return fn()
        finally:
            with self._idle:
                self._running -= 1
                if self._running == 0:
                    self._idle.notify_all()

    def wait_idle(self, timeout_s: float) -> int:
        """Block until no call runs, or ``timeout_s`` passed (a hung leader mount: its calls may never return);
        how many still run."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while self._running:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._idle.wait(left)
            return self._running
