"""The one owner of a store's "offline" state (Kafka's ``LogDirFailureChannel``), and of the read-failure counts.

Why. A disk that fails while the process lives must never turn into an acknowledged loss (issue 16; docs/storage.md,
"Storage faults"). After an fsync fails, Linux may drop the dirty pages it could not write, and a retried fsync then
*succeeds* with the data gone ("fsyncgate"). Kafka's answer, and ours: the first I/O error writing, syncing, renaming or
truncating any file of the store takes the whole store offline. From then on every write, roll, flush, checkpoint and
fsync is refused with :class:`~logfs.core.errors.StoreOffline` (EIO through the mount), so nothing written since the
last successful sync is ever reported durable: the recovery point and the durable offset stop where the last good sync
left them. Reads keep working from what is there. Only a restart (on a healthy disk) brings the store back, through
recovery.

The exception: ENOSPC (or EDQUOT) from a *write that stored nothing* (the caller cut the file back) is a refusal, not
a failure of the disk: :meth:`LogDirFailureChannel.write_error` answers DiskFull and the store stays online. ENOSPC
from fsync counts as a failure: the kernel may have dropped the pages.

One channel per store root, found by path. Every file of a store lies in its root or one directory below it
(``<topic>-<partition>/``), so :func:`channel_for` finds a file's channel from its path, and the modules that write
files (``logfile.py``, ``indexfile.py``, ``durable.py``, ``txn/log.py``, ``txn/index.py``) need no new parameter
threaded through every constructor. :meth:`Store.open <logfs.core.store.Store.open>` registers its root before it
loads anything and unregisters it on close. A file outside every registered store (a Log opened on its own, as the
unit tests and ``logfs check`` do) gets the channel of its own directory, shared by that directory's files while any
of them holds it.

Reads: an I/O error from ``pread`` fails that read (:class:`~logfs.core.errors.ReadFailed`), and a stored batch
that fails its CRC or framing (:class:`~logfs.core.errors.CorruptStoredBatch`) fails the read that met it; both are
counted here (``.logfs/metrics``) and logged at most once per file every READ_LOG_INTERVAL_S.

Threads: any. The first failure wins (a lock guards the transition); reading :attr:`offline` takes no lock.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from logfs.core.errors import CorruptStoredBatch, DiskFull, ReadFailed, StoreOffline

_log = logging.getLogger(__name__)

# At most one log line per file this often for read failures (a reader retrying a bad sector must not flood the log).
READ_LOG_INTERVAL_S = 10.0
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


@dataclass(frozen=True)
class Failure:
    """The failure that took a store offline: which file, which operation (write, fsync, rename, truncate, create,
    open), the errno, and when (ms since the epoch)."""

    file: str
    operation: str
    errno: int
    time_ms: int

    @property
    def errno_name(self) -> str:
        return errno.errorcode.get(self.errno, str(self.errno))

    def as_state(self) -> dict[str, str]:
        """The ``offline`` object of the ``state`` file: ``{"file", "operation", "errno"}`` (errno by name)."""
        return {"file": self.file, "operation": self.operation, "errno": self.errno_name}

    def describe(self) -> str:
        return f"{self.operation} of {self.file} failed with {self.errno_name}"


class LogDirFailureChannel:
    """The offline state of one store root, and its read-failure counts. See the module docstring."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._failure: Failure | None = None
        self._lock = threading.Lock()
        self.read_errors = 0  # reads that met an I/O error
        self.corrupt_batches = 0  # reads that met a stored batch failing its CRC or framing
        self._read_logged: dict[str, float] = {}

    def __repr__(self) -> str:
        return f"LogDirFailureChannel({str(self.root)!r}, offline={self._failure})"

    @property
    def offline(self) -> Failure | None:
        """The failure that took the store offline, or None while it is online. Any thread, no lock."""
        return self._failure

    def check(self) -> None:
        """Raise StoreOffline when the store is offline: the first line of every write of a store file."""
        failure = self._failure
        if failure is not None:
            raise self._refusal(failure)

    def fail(self, path: Path | str, operation: str, exc: OSError) -> StoreOffline:
        """Take the store offline for ``operation`` on ``path`` failing with ``exc`` (the first failure is kept and
        logged once, at ERROR); returns the StoreOffline to raise (``raise channel.fail(...) from exc``)."""
        code = exc.errno if exc.errno is not None else errno.EIO
        with self._lock:
            first = self._failure is None
            if first:
                self._failure = Failure(str(path), operation, code, time.time_ns() // 1_000_000)
            failure = self._failure
        assert failure is not None
        if first:
            _log.error(
                "store %s is offline: %s of %s failed with %s (%s); every later write and fsync fails with EIO, "
                "reads go on; restart on a healthy disk to recover",
                self.root, operation, path, errno.errorcode.get(code, str(code)), exc.strerror or exc,
            )  # fmt: skip
        reason = exc.strerror or errno.errorcode.get(code, str(code))
        return StoreOffline(failure, f"cannot {operation} {path}: {reason}; store {self.root} is offline")

    def write_error(self, path: Path | str, exc: OSError, *, stored_nothing: bool) -> DiskFull | StoreOffline:
        """The error for a failed write: DiskFull when the disk is full and the caller cut back what it wrote (the
        store stays online), else the store goes offline."""
        if stored_nothing and exc.errno in _NO_SPACE:
            return DiskFull(f"no space left to write {path}")
        return self.fail(path, "write", exc)

    @contextmanager
    def guard(self, path: Path | str, operation: str) -> Iterator[None]:
        """Refuse when offline, and take the store offline when the block raises OSError (FileNotFoundError
        included: a store file that vanished is a failure of the store). For the paths off the hot one."""
        self.check()
        try:
            yield
        except OSError as exc:
            raise self.fail(path, operation, exc) from exc

    def _refusal(self, failure: Failure) -> StoreOffline:
        return StoreOffline(failure, f"store {self.root} is offline since {failure.describe()}")

    # --- reads ------------------------------------------------------------------------------------------------------

    def read_failed(self, path: Path | str, exc: OSError) -> ReadFailed:
        """Count a read that met an I/O error and log it (rate-limited per file); returns the error to raise."""
        code = exc.errno if exc.errno is not None else errno.EIO
        self.read_errors += 1
        name = errno.errorcode.get(code, str(code))
        if self._should_log(str(path)):
            _log.error("read of %s failed with %s (%s); that read fails with EIO", path, name, exc.strerror or exc)
        return ReadFailed(str(path), code, f"cannot read {path}: {exc.strerror or name}")

    def corrupt_batch(self, path: Path | str, position: int, reason: str) -> CorruptStoredBatch:
        """Count a read that met a bad stored batch and log segment and position (rate-limited per file)."""
        self.corrupt_batches += 1
        if self._should_log(str(path)):
            _log.error("%s: stored batch at byte %d %s; the read fails with EIO", path, position, reason)
        return CorruptStoredBatch(str(path), position, reason)

    def _should_log(self, key: str) -> bool:
        now = time.monotonic()
        with self._lock:
            last = self._read_logged.get(key)
            if last is not None and now - last < READ_LOG_INTERVAL_S:
                return False
            self._read_logged[key] = now
            return True


# --- finding a file's channel -----------------------------------------------------------------------------------------

_registry_lock = threading.Lock()
_stores: dict[str, LogDirFailureChannel] = {}
_detached: weakref.WeakValueDictionary[str, LogDirFailureChannel] = weakref.WeakValueDictionary()


def _key(path: Path | str) -> str:
    # Every file of a store asks this (four times per segment as a store opens: 10,000 partitions mean 40,000
    # calls), so a path that is already absolute and plain (no "." or ".." part, no doubled or trailing slash: what
    # Store.open's absolute root and Path joins give) skips os.path.abspath's normalisation.
    text = os.fspath(path)
    if text.startswith("/") and "/." not in text and "//" not in text and not text.endswith("/"):
        return text
    return os.path.abspath(text)


def register(root: Path) -> LogDirFailureChannel:
    """A fresh channel for the store at ``root`` (Store.open, before it loads a file), replacing any earlier one."""
    channel = LogDirFailureChannel(root)
    with _registry_lock:
        _stores[_key(root)] = channel
    return channel


def unregister(channel: LogDirFailureChannel) -> None:
    """Forget ``channel`` (its store closed); a later open of the root gets a fresh, online one."""
    with _registry_lock:
        key = _key(channel.root)
        if _stores.get(key) is channel:
            del _stores[key]


def channel_for_dir(directory: Path | str) -> LogDirFailureChannel:
    """The channel of the store holding ``directory`` (the root or a partition directory), else the directory's own."""
    key = _key(directory)
    parent = os.path.dirname(key)
    with _registry_lock:
        found = _stores.get(key) or _stores.get(parent)
        if found is None:
            found = _detached.get(key)
            if found is None:
                found = _detached[key] = LogDirFailureChannel(Path(key))
        return found


def channel_for(path: Path | str) -> LogDirFailureChannel:
    """The channel of the store that ``path`` (a file of the root or of a partition directory) belongs to."""
    return channel_for_dir(os.path.dirname(_key(path)))


def offline_state(directory: Path | str) -> dict[str, str] | bool:
    """``state``'s ``offline`` for a partition in ``directory``: False, or the failure's file, operation and errno."""
    failure = channel_for_dir(directory).offline
    return False if failure is None else failure.as_state()
