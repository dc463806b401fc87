"""Small durable-file helpers shared by every module that writes metadata: one way to replace a file atomically.

``replace_file`` is the write-temp, fsync, rename, fsync-directory sequence of Kafka's ``CheckpointFile`` and
``Utils.atomicMoveWithFallback``: after a crash the file holds either its old bytes or the new ones, never a mix,
and nothing partial stays behind when the disk fails. All of it blocks: call it off the trio thread.

Both go through the store's failure channel (``core/logdirfailure.py``): they refuse with StoreOffline once the store
is offline, and any OSError of theirs takes it offline — except ENOSPC/EDQUOT while writing the temporary file, which
is removed again (nothing stored): that one is raised as it is, and the store stays online.
"""

from __future__ import annotations

import contextlib
import errno
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from logfs.core.logdirfailure import channel_for, channel_for_dir

TEMP_SUFFIX = ".tmp"

# fsync_dirs: how many directory fsyncs run at once, and from how many directories on it uses threads at all.
PARALLEL_FSYNCS = 16
PARALLEL_FSYNCS_FROM = 8


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch, the unit of every Kafka timestamp."""
    return time.time_ns() // 1_000_000


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (a create, rename or unlink in it) durable. StoreOffline when it fails (or did)."""
    channel = channel_for_dir(directory)
    channel.check()
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except FileNotFoundError:
        raise  # the directory was removed on purpose (a deleted partition): not a failure of the disk
    except OSError as exc:
        raise channel.fail(directory, "fsync", exc) from exc


def fsync_dirs(directories: Sequence[Path]) -> None:
    """:func:`fsync_dir` of every directory, several at once: a directory fsync waits for a journal commit, and
    commits that overlap are merged by the file system (ext4: 500 new partition directories took about eight
    times less with 16 at once than one after another on a development machine). The threads are this call's
    own: all joined before it returns, the first failure raised. Blocking: call it off the trio thread."""
    if len(directories) < PARALLEL_FSYNCS_FROM:
        for directory in directories:
            fsync_dir(directory)
        return
    with ThreadPoolExecutor(min(PARALLEL_FSYNCS, len(directories)), thread_name_prefix="logfs-fsync") as pool:
        for done in [pool.submit(fsync_dir, directory) for directory in directories]:
            done.result()


def replace_file(
    path: Path, data: bytes, *, sync: bool = True, make_parents: bool = False, sync_dir: bool = True
) -> None:
    """Atomically replace ``path`` with ``data`` (``<path>.tmp``, fsync, rename, fsync of the directory).

    ``sync_dir=False`` leaves the directory's fsync to the caller, who makes many files and syncs their directory
    once (a follower's first round of thousands of topics, each with its owner file: core/store.py).
    ``make_parents`` creates missing parent directories (and makes their entries durable too). The temporary file is
    removed on failure. Raises OSError for a full disk while writing (nothing stored) or a directory that is gone,
    StoreOffline for every other failure (see the module docstring).
    """
    channel = channel_for(path)
    channel.check()
    missing = [d for d in (path.parent, *path.parent.parents) if not d.exists()] if make_parents else []
    if missing:
        with channel.guard(path.parent, "create"):
            path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(path.name + TEMP_SUFFIX)
    operation = "write"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                operation = "fsync"
                os.fsync(fd)
        finally:
            os.close(fd)
        operation = "rename"
        os.replace(temp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        if operation == "write" and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise  # nothing stored: a full disk refuses the write, the store stays online
        if isinstance(exc, FileNotFoundError) and not path.parent.is_dir():
            raise  # the directory was removed on purpose (a deleted partition): not a failure of the disk
        raise channel.fail(temp if operation != "rename" else path, operation, exc) from exc
    if sync and sync_dir:
        for directory in (path.parent, *(d.parent for d in missing)):
            fsync_dir(directory)
