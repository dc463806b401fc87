"""The store directory's own files, apart from its partitions: the lock, ``meta.properties``, the checkpoint files'
names and their lenient read, and making a new store directory's name durable.

These are what a process needs to claim a store and to tell whose it is before it loads a partition: Store.open
(core/store.py) and the offline check (core/check.py, which locks a store without opening it) share them, and the
mount's stale-mount handling (mount/predecessor.py) reads the lock file's holder. The layout of the whole directory
is in core/store.py's docstring.

Threads: each function blocks on the disk; any thread.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import time
import uuid
from pathlib import Path

from logfs.core.checkpoint import OffsetCheckpointFile, TopicPartition
from logfs.core.durable import replace_file
from logfs.core.errors import ConfigError, CorruptCheckpoint, LinkInStore, StoreLocked
from logfs.core.logdirfailure import LogDirFailureChannel

_log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"
META_PROPERTIES = "meta.properties"


def lock_store(root: Path) -> int:
    """Take the store's exclusive lock (flock on ``.lock``, which then holds our pid); the descriptor holds it.

    StoreLocked, naming the holder's pid, when another process has it; LinkInStore when ``.lock`` is a link.
    """
    if not root.is_dir():
        raise FileNotFoundError(f"no store at {root}")
    try:  # never through a link: it is opened before the listing that refuses links (core/storelinks.py)
        fd = os.open(root / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise LinkInStore(str(root / LOCK_FILE)) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = None
        with contextlib.suppress(OSError, ValueError):
            holder = int(os.pread(fd, 32, 0).decode().strip())
        os.close(fd)
        raise StoreLocked(str(root), holder) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def sync_new_store_directory(root: Path, failure: LogDirFailureChannel) -> None:
    """Make a new store's own name durable: fsync the directory holding the store directory, and every directory
    above it on the same file system (Kafka's LogManager flushes the parent of a log directory it creates).

    Every file of the store is fsynced into the store directory (``durable.replace_file``, ``_create_partition``),
    but nothing else makes the store directory's entry in its parent durable: a power cut after the first
    acknowledged writes to a new store lost all of them (issue 23). A directory found empty is as fragile as one
    made here — a script's ``mkdir -p a/b/store`` a moment before leaves ``a`` and ``b`` unsynced too, and which
    ancestors it made cannot be told afterwards — so every ancestor up to the file system's root is synced, once per
    new store. An ancestor that cannot be opened (no read permission) is skipped; any other failure fails the open.
    Blocking: Store.open runs before the mount's trio loop starts."""
    real = root.resolve()
    device = os.stat(real).st_dev
    for directory in real.parents:
        if os.stat(directory).st_dev != device:
            break  # a mount point: the directory above belongs to another file system, which nothing here changed
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except PermissionError:
            _log.debug("cannot open %s to fsync it: skipped", directory)
            continue
        with failure.guard(directory, "fsync"):
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def check_meta_properties(root: Path, node_id: int) -> bool:
    """Write meta.properties on first use; refuse a different node.id later (Kafka's format). True when it wrote
    the file (the store is new)."""
    path = root / META_PROPERTIES
    if path.exists():
        stored = stored_node_id(root)
        if stored != node_id:
            raise ConfigError(f"store {root} belongs to node.id={stored}; refusing node.id={node_id}")
        return False
    cluster = uuid.uuid4().hex
    directory = uuid.uuid4().hex
    text = (
        f"#\n#{time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())}\n"
        f"cluster.id={cluster}\ndirectory.id={directory}\nnode.id={node_id}\nversion=1\n"
    )
    replace_file(path, text.encode())
    return True


def stored_node_id(root: Path) -> int:
    """The node.id in the store's meta.properties (0 when the file or the key is absent)."""
    try:
        text = (root / META_PROPERTIES).read_text()
    except FileNotFoundError:
        return 0
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#") and key.strip() == "node.id":
            try:
                return int(value.strip())
            except ValueError:
                raise ConfigError(f"{root / META_PROPERTIES}: node.id={value.strip()!r} is not a number") from None
    return 0


def read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    try:
        return OffsetCheckpointFile(path).read()
    except CorruptCheckpoint as exc:
        _log.warning("%s is damaged (%s): treating it as empty, as Kafka does", path, exc)
        return {}
