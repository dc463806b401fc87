"""The signal check behind EINTR for waiting ``follow/`` readers (``mount/signals.py``), without a mount."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from logfs.mount import signals
from logfs.mount.signals import SignalProbe, check_interval, eintr_bound, signal_pending


def _child(code: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def test_signal_pending_sees_deliverable_signals_only() -> None:
    """Also through one long-lived probe, as the watcher uses it."""
    blocking = _child(
        "import os, signal, time; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1}); "
        "os.kill(os.getpid(), signal.SIGUSR1); print('ready', flush=True); time.sleep(30)"
    )
    ignoring = _child("import signal, time; signal.signal(signal.SIGUSR1, signal.SIG_IGN); "
                      "print('ready', flush=True); time.sleep(30)")  # fmt: skip
    stopped = _child("import time; print('ready', flush=True); time.sleep(30)")
    try:
        ignoring.send_signal(signal.SIGUSR1)
        assert not signal_pending(blocking.pid)  # pending but blocked
        assert not signal_pending(ignoring.pid)  # ignored
        probe = SignalProbe(stopped.pid)
        assert not probe.pending()
        stopped.send_signal(signal.SIGSTOP)
        time.sleep(0.05)
        stopped.send_signal(signal.SIGTERM)  # stays pending while the process is stopped
        assert probe.pending() and signal_pending(stopped.pid)
    finally:
        for proc in (blocking, ignoring, stopped):
            proc.kill()
            proc.wait()
    assert probe.pending()  # a process that is gone: its reader is gone too
    probe.close()
    assert signal_pending(stopped.pid)


def test_a_quiet_process_costs_no_status_read_and_a_woken_one_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shortcut of mount/signals.py: while the watched thread has not run since a check that found nothing, a
    check reads its schedstat only; once it ran (a signal wakes it), the status is read again."""
    with open("/proc/self/schedstat", "rb") as f:
        if f.read().endswith(b" 0\n"):
            pytest.skip("this kernel keeps no scheduler statistics: every check reads the status")
    sleeper = _child("import time; print('ready', flush=True); time.sleep(30)")
    reads: list[int] = []
    pread = os.pread

    def counting(fd: int, n: int, offset: int) -> bytes:
        reads.append(n)
        return pread(fd, n, offset)

    probe = SignalProbe(sleeper.pid)
    try:
        monkeypatch.setattr(signals.os, "pread", counting)
        assert not probe.pending()  # the first check reads the status
        assert signals.STATUS_READ_BYTES in reads
        reads.clear()
        for _ in range(20):
            assert not probe.pending()
        assert signals.STATUS_READ_BYTES not in reads  # asleep all along: no status read
        assert len(reads) == 20
        sleeper.send_signal(signal.SIGSTOP)  # wakes it (to stop) …
        time.sleep(0.05)
        sleeper.send_signal(signal.SIGTERM)  # … and this stays pending while it is stopped
        reads.clear()
        assert probe.pending()
        assert signals.STATUS_READ_BYTES in reads
    finally:
        monkeypatch.undo()
        probe.close()
        sleeper.kill()
        sleeper.wait()


def test_the_check_interval_keeps_the_documented_eintr_bound() -> None:
    """docs/mount.md: EINTR within 100 ms up to 100 waiting processes, 100 ms × √(n/100) beyond (at most 500 ms at
    2,000); the checks themselves cost √n /proc reads a second, not n."""
    assert eintr_bound(1) == eintr_bound(100) == 0.1
    assert round(eintr_bound(500), 3) == 0.224
    assert eintr_bound(2000) <= 0.5
    for n in (0, 1, 10, 39, 40, 100, 101, 250, 500, 1000, 2000, 5000):
        assert check_interval(n) <= 0.8 * eintr_bound(n) + 1e-9  # the rest: the sweep and the reply
        assert eintr_bound(n) - check_interval(n) >= 0.02 - 1e-9
    assert check_interval(1) == 0.05
    assert 500 / check_interval(500) < 3000  # reads a second at 500 waiting processes (every 50 ms: 10,000)
