"""The signal check behind EINTR for waiting ``follow/`` readers (``mount/signals.py``), without a mount."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from logfs.mount.signals import SignalProbe, signal_pending


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
