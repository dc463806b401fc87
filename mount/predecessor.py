"""A predecessor that was killed but cannot finish exiting: tell the user how to free it, before anything waits on it.

A FUSE daemon killed with SIGKILL exits once all its threads do. A thread that waits in the kernel without a
timeout on something only its own mount could grant never does: the classic case is a reverse invalidation
(``invalidate_entry``, which takes a directory's lock) while another process's lookup in that directory holds the
lock and waits for the dead daemon's answer. logfs no longer invalidates on any path whose lookups wait (the
fetch files, docs/replication.md), but the remaining invalidations (a deleted topic's, an ended transaction's) can
in principle meet a lookup in flight at the very moment of a kill. Such a process keeps its /dev/fuse descriptor,
so its mount hangs (a stat of the mount point would wait for ever), and its store lock. Only aborting the FUSE
connection (``echo 1 > /sys/fs/fuse/connections/N/abort``, root) frees it.

``logfs mount`` checks for this first, from /proc only (no stat of the mount point, which could hang): the pid in
the store's lock file, a process whose main thread has exited (zombie) while another thread of it lives. It then
stops with a message naming the process and the exact abort file of the mount at the mount point. It does not abort
by itself: /proc cannot tell which FUSE connection a process serves, and aborting a live mount would fail all its
readers and writers.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from logfs.core.storedir import LOCK_FILE

FUSECTL = Path("/sys/fs/fuse/connections")


def lock_holder(store: Path) -> int | None:
    """The pid the store's lock file names while its lock is held, None when nobody holds it (tried without waiting,
    and let go at once: Store.open takes it again)."""
    try:
        fd = os.open(store / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            with contextlib.suppress(OSError, ValueError):
                return int(os.pread(fd, 32, 0).decode().strip())
            return None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def is_stuck_exiting(pid: int) -> bool:
    """True when process ``pid`` is dying but cannot finish: its main thread is a zombie and another thread lives
    (a process that exited whole is a zombie with no other thread, or gone)."""
    task = Path(f"/proc/{pid}/task")
    try:
        leader_state = _state(task / str(pid) / "stat")
        others = [t for t in task.iterdir() if t.name != str(pid)]
    except OSError:
        return False
    return leader_state == "Z" and any(_state_or_none(t / "stat") not in (None, "Z", "X") for t in others)


def fuse_connection(mountpoint: Path) -> int | None:
    """The FUSE connection number (the mount's minor device number) of a FUSE mount at ``mountpoint``, from
    /proc/self/mountinfo (never a stat: the mount may hang)."""
    wanted = str(mountpoint.absolute())
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as info:
        for line in info:
            fields = line.split()
            point = fields[4].replace("\\040", " ")
            fstype = fields[fields.index("-") + 1] if "-" in fields else ""
            if point == wanted and fstype.startswith("fuse") and fields[2].startswith("0:"):
                return int(fields[2].split(":")[1])
    return None


def stuck_predecessor_message(store: Path, mountpoint: Path) -> str | None:
    """What to tell the user when the store's last owner was killed but cannot exit; None when it is not so."""
    pid = lock_holder(store)
    if pid is None or not is_stuck_exiting(pid):
        return None
    connection = fuse_connection(mountpoint)
    where = (
        f"abort its FUSE connection: `echo 1 > {FUSECTL}/{connection}/abort` (as root; mount fusectl on {FUSECTL} "
        f"first if it is empty), then `fusermount3 -u -z {mountpoint}`"
        if connection is not None
        else f"abort the FUSE connection of the mount it served: `echo 1 > {FUSECTL}/N/abort` (as root), N the "
        "minor device number of that mount in /proc/self/mountinfo"
    )
    return (
        f"store {store} is held by process {pid}, which was killed but cannot finish exiting (a thread of it waits in "
        f"the kernel for an answer of its own FUSE mount); {where}, and start this mount again"
    )


def _state(stat_path: Path) -> str:
    text = stat_path.read_text()
    return text[text.rindex(")") + 2]  # the field after "(comm)", which may hold spaces and parentheses


def _state_or_none(stat_path: Path) -> str | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        return _state(stat_path)
    return None
