"""Small durable-file helpers shared by every module that writes metadata: one way to replace a file atomically.

``replace_file`` is the write-temp, fsync, rename, fsync-directory sequence of Kafka's ``CheckpointFile`` and
``Utils.atomicMoveWithFallback``: after a crash the file holds either its old bytes or the new ones, never a mix,
and nothing partial stays behind when the disk fails. All of it blocks: call it off the trio thread.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

TEMP_SUFFIX = ".tmp"


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch, the unit of every Kafka timestamp."""
    return time.time_ns() // 1_000_000


def fsync_dir(directory: Path) -> None:
    """Make a directory's entries (a create, rename or unlink in it) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(path: Path, data: bytes, *, sync: bool = True, make_parents: bool = False) -> None:
    """Atomically replace ``path`` with ``data`` (``<path>.tmp``, fsync, rename, fsync of the directory).

    ``make_parents`` creates missing parent directories (and makes their entries durable too). Raises OSError; the
    temporary file is removed on failure.
    """
    missing = [d for d in (path.parent, *path.parent.parents) if not d.exists()] if make_parents else []
    if missing:
        path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(path.name + TEMP_SUFFIX)
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    if sync:
        for directory in (path.parent, *(d.parent for d in missing)):
            fsync_dir(directory)
