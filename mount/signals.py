"""Does a process have a signal waiting that would interrupt a blocked read? (docs/mount.md, "Reads", ``follow/``)

pyfuse3 has no interrupt hook: when a reader blocked in a FUSE read gets Ctrl-C, the kernel's INTERRUPT request is
dropped and the read waits until the handler returns (measured: even SIGKILL waits). So the mount watches the
process that opened each waiting ``follow/`` handle (``open()``'s ``ctx.pid``; a read has no caller context): one
watcher task (``Operations.watch_signals``, ``mount/follow.py``) asks, every :func:`check_interval` seconds, the
:class:`SignalProbe` of each process with a waiting reader (one probe per process, however many readers it holds)
whether that process has a pending signal that it neither blocks nor ignores, and wakes its readers with EINTR; the
kernel returns it and the signal is delivered as usual.

A check costs little because a waiting reader does not run: its thread sleeps in the kernel's FUSE read until the
mount answers or a signal wakes it (the kernel then sends the INTERRUPT that pyfuse3 drops, and sleeps again until
the answer). So a probe first reads the thread's ``/proc/<pid>/schedstat`` (~1 µs of the kernel's CPU here), whose
last number counts the times the thread was put on a CPU; while it is the same as before the last ``status`` read
that found nothing, the thread has not been woken, so no signal has arrived, and the ``status`` read (~8 µs here,
and ~20–30 µs of the trio thread's time on a busy machine) is skipped. Any other wake-up (a thread that is not
waiting, a multi-threaded opener) only means the ``status`` is read, as it always was before this shortcut.

The interval grows with the number of processes watched, as their square root: 50 ms up to 39 processes (EINTR well
within 100 ms), 80 ms at 100, 179 ms at 500 (~2,800 checks a second), 358 ms at 2,000. The bound on EINTR after a
signal is the interval plus one sweep: :func:`eintr_bound` (100 ms up to 100 waiting processes, 100 ms × √(n/100)
beyond: 224 ms at 500, 447 ms at 2,000), which docs/mount.md states.

Linux's ``/proc/<pid>/status`` has the masks as hex: ``SigPnd`` (pending for the thread), ``ShdPnd`` (pending for
the process), ``SigBlk`` (blocked), ``SigIgn`` (ignored). Pending-and-deliverable is
``(SigPnd | ShdPnd) & ~SigBlk & ~SigIgn``. A probe keeps the file open and re-reads it with ``pread``, where
open-read-close costs ~3 times as much. The open descriptor also names that one process: once it has exited, reads
fail (ESRCH) and the probe reports it gone, even if its pid is reused. A process that is gone counts as signalled
(its reader is gone).

Reading /proc touches no disk, so it runs on the trio thread. Any thread; one probe per watched process.
"""

from __future__ import annotations

import math
import os
import re

CHECK_INTERVAL_MIN_S = 0.05  # the interval while few processes wait: EINTR well within 100 ms, with room to spare
CHECK_INTERVAL_AT_100_S = 0.08  # the interval at 100 waiting processes; it grows as √n beyond (see check_interval)
EINTR_BOUND_AT_100_S = 0.1  # the documented bound at up to 100 waiting processes; √n beyond (see eintr_bound)
STATUS_READ_BYTES = 4096  # /proc/<pid>/status is ~1.4 KiB
SCHEDSTAT_READ_BYTES = 128  # /proc/<pid>/schedstat: three decimal numbers

_MASKS = re.compile(rb"SigPnd:\s*([0-9a-f]+)\nShdPnd:\s*([0-9a-f]+)\nSigBlk:\s*([0-9a-f]+)\nSigIgn:\s*([0-9a-f]+)")


def check_interval(processes: int) -> float:
    """Seconds between two checks of ``processes`` waiting processes: :data:`CHECK_INTERVAL_MIN_S`, or
    :data:`CHECK_INTERVAL_AT_100_S` × √(processes/100) when that is longer, so the checks cost √n reads a second
    (~2,800 at 500) rather than n (10,000 at 500 every 50 ms: ~10 % of a core)."""
    return max(CHECK_INTERVAL_MIN_S, CHECK_INTERVAL_AT_100_S * math.sqrt(processes / 100))


def eintr_bound(processes: int) -> float:
    """The promised bound on EINTR after a signal to one of ``processes`` waiting processes: 100 ms up to 100,
    100 ms × √(n/100) beyond. :func:`check_interval` is at most four fifths of it: the rest (20 ms or more) is room
    for the sweep and for the reply to reach the reader."""
    return max(EINTR_BOUND_AT_100_S, EINTR_BOUND_AT_100_S * math.sqrt(processes / 100))


class SignalProbe:
    """Watches one process's pending signals through its ``/proc/<pid>/status``, skipping that read while the
    thread has not run since the last one found nothing (its ``/proc/<pid>/schedstat``; see the module docstring)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.users = 0  # handles that share this probe (mount/follow.py: one probe per opening process)
        self._fd: int | None = None
        self._sched_fd: int | None = None
        self._quiet: bytes | None = None  # the schedstat read before the last status read that found no signal
        self._gone = False
        if pid > 0:
            try:
                self._fd = os.open(f"/proc/{pid}/status", os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                self._gone = True
            except OSError:
                pass  # unknown: never report a signal
        if self._fd is not None:
            try:
                self._sched_fd = os.open(f"/proc/{pid}/schedstat", os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                pass  # no shortcut: every check reads the status

    def pending(self) -> bool:
        """True when the process has a deliverable signal pending, or is gone; False when unknown."""
        if self._gone:
            return True
        if self._fd is None:
            return False
        ran = self._schedstat()
        if ran is not None and ran == self._quiet:
            return False  # not woken since a check that found nothing: no signal has arrived
        self._quiet = None
        try:
            text = os.pread(self._fd, STATUS_READ_BYTES, 0)
        except ProcessLookupError:
            self._gone = True
            return True
        except OSError:
            return False
        if not text:
            self._gone = True
            return True
        m = _MASKS.search(text)
        if m is None:
            return False
        pending = int(m[1], 16) | int(m[2], 16)
        if pending & ~int(m[3], 16) & ~int(m[4], 16):
            return True
        self._quiet = ran
        return False

    def _schedstat(self) -> bytes | None:
        """The thread's ``schedstat`` (run time, wait time, times run), or None when it tells nothing: unreadable,
        or a kernel without scheduler statistics (``0 0 0``, and a thread that ran has run at least once)."""
        if self._sched_fd is None:
            return None
        try:
            ran = os.pread(self._sched_fd, SCHEDSTAT_READ_BYTES, 0)
        except OSError:
            return None  # gone, perhaps: the status read says
        return None if not ran or ran.endswith(b" 0\n") else ran

    def alive(self) -> bool:
        """Whether the process is still there (a read of its status succeeds); True when unknown."""
        self._quiet = None
        self.pending()
        return not self._gone

    def close(self) -> None:
        for fd in (self._fd, self._sched_fd):
            if fd is not None:
                os.close(fd)
        self._fd = self._sched_fd = None


def signal_pending(pid: int) -> bool:
    """One-off check of process ``pid`` (see :class:`SignalProbe`). False for pid 0 (unknown)."""
    probe = SignalProbe(pid)
    try:
        return probe.pending()
    finally:
        probe.close()
