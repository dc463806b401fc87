"""``logfs mount`` of a store whose owner was killed but cannot finish exiting stops at once (no stat of the mount
point, which could hang) and says exactly what to do: the abort file of the FUSE connection at the mount point.

The stuck owner is imitated: a process that takes the store's lock and then ends its main thread alone
(pthread_exit), so its main thread is a zombie while another thread lives and the lock stays held, as a killed
daemon's with a thread stuck in the kernel.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import LOGFS, running_mount

HOLDER = r"""
import ctypes, fcntl, os, sys, threading, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
threading.Thread(target=time.sleep, args=(60,)).start()
print("locked", flush=True)
ctypes.CDLL(None).pthread_exit(None)
"""


def _main_thread_state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2]


def test_a_stuck_owner_is_named_with_the_connection_abort_file(tmp_path: Path) -> None:
    store, mnt = tmp_path / "store", tmp_path / "mnt"
    with running_mount(tmp_path / "other", mnt):  # a mount at the mount point: its connection is the one named
        minor = os.minor(os.stat(mnt).st_dev)  # a live mount: stat is safe here
        store.mkdir()
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(store / ".lock")], stdout=subprocess.PIPE)
        try:
            assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
            deadline = time.monotonic() + 5
            while _main_thread_state(holder.pid) != "Z":
                assert time.monotonic() < deadline, "the holder's main thread did not end"
                time.sleep(0.02)
            started = time.monotonic()
            done = subprocess.run([LOGFS, "mount", str(store), str(mnt)], capture_output=True, text=True, timeout=60)
            assert done.returncode == 1, done.stderr
            assert f"held by process {holder.pid}, which was killed but cannot finish exiting" in done.stderr
            assert f"echo 1 > /sys/fs/fuse/connections/{minor}/abort" in done.stderr
            assert time.monotonic() - started < 30
        finally:
            holder.kill()
            holder.wait(10)
        # its owner gone, the lock is free: no message (the mount point is still busy, and says so)
        done = subprocess.run([LOGFS, "mount", str(store), str(mnt)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 1 and "already a mount point" in done.stderr, done.stderr
        assert "cannot finish exiting" not in done.stderr
