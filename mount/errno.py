"""The one table from error types to errno values, and the one decorator that applies it (Kafka's Errors.java).

Rules:

* Every core error (``logfs.core.errors``) that can reach a FUSE handler, and every refusal the mount makes on its
  own (``logfs.mount.errors``: an unknown name, a wrong open mode, a read-only mount …), maps to exactly one errno in
  :data:`ERRNO_TABLE`; a type is looked up along its class hierarchy (``__mro__``), so a subclass without a row of
  its own answers as its nearest ancestor with one (``CorruptRecord`` → ``RecordError`` → EBADMSG). The table is
  checked at import: no type twice, every errno a real one.
* Each row also says how loud the event is: a refusal the user caused (a bad batch, an unknown offset) is logged at
  INFO, one line; a failure of logfs or its disk at ERROR; the mount's routine refusals (a name that does not
  exist, which shells and Spark probe all the time) and those already logged where they are raised at DEBUG.
* A refusal of a change the user asked for (a write, flush or fsync of a write file, an open for writing, a mkdir,
  an rmdir) is louder than its row: ``mount/refusals.py`` logs it at WARNING, rate-limited, with its reason (the
  exception's message) and keeps it in ``.logfs/errors``; its row's level is then only used when that level is
  ERROR (the ERROR line stays, the refusal is kept without a second line). ``Operations.refusal_target`` says what
  a failed request refused; lookups, reads and opens for reading never count.
* :func:`handler` wraps every ``Operations`` method. A mapped error becomes ``FUSEError(errno)`` with its one-line
  log message; an ``OSError`` from the disk keeps ENOSPC/EDQUOT as ENOSPC
  and otherwise counts as EIO; anything else is a logfs bug and answers EIO with the traceback logged. So no
  exception other than FUSEError ever leaves a handler: pyfuse3 ends the whole filesystem on any other (measured,
  ``shared/reference/fuse-and-spark-notes.md``). A ``FUSEError`` raised by pyfuse3 itself passes through.
  ``forget`` must not raise at all (it has no reply): its errors are logged and dropped.
* ``trio.Cancelled`` and ``KeyboardInterrupt`` are BaseExceptions and pass untouched: they end the mount on purpose.
* Every errno a handler answers is counted (``Operations.count_error``) for ``logfs_errors_total`` in
  ``.logfs/metrics``.

docs/mount.md holds :func:`render_table`'s output; tests/mount/test_errno_table.py checks that it is current.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import pyfuse3

from logfs.core import errors as core
from logfs.mount import errors as mount

_log = logging.getLogger(__name__)

DEBUG: Final = logging.DEBUG
INFO: Final = logging.INFO
ERROR: Final = logging.ERROR

# (error type, errno, log level): the whole mapping. Order is documentation order, most general last.
ERRNO_TABLE: Final[tuple[tuple[type[BaseException], int, int], ...]] = (
    (mount.NoEntry, errno.ENOENT, DEBUG),
    (mount.NotPermitted, errno.EPERM, DEBUG),
    (mount.ReadOnlyMount, errno.EROFS, DEBUG),
    (mount.NoLeader, errno.EAGAIN, INFO),
    (mount.NotShownHere, errno.ETIMEDOUT, INFO),
    (mount.NotRecorded, errno.ETIMEDOUT, ERROR),
    (mount.ForwardFailed, errno.EIO, INFO),  # the leader's own errno, passed through (lookup)
    (mount.BadFileHandle, errno.EBADF, DEBUG),
    (mount.NotADirectory, errno.ENOTDIR, DEBUG),
    (mount.IsADirectory, errno.EISDIR, DEBUG),
    (mount.WrongAccessMode, errno.EACCES, DEBUG),
    (mount.AccessDenied, errno.EACCES, DEBUG),
    (mount.TooManyReaders, errno.EMFILE, DEBUG),
    (mount.ReadInProgress, errno.EBUSY, DEBUG),
    (mount.Interrupted, errno.EINTR, DEBUG),
    (mount.InvalidName, errno.EINVAL, DEBUG),
    (mount.InvalidCommand, errno.EINVAL, DEBUG),
    (mount.KeylessLines, errno.EINVAL, INFO),
    (mount.UnfinishedBatch, errno.EBADMSG, DEBUG),
    (mount.BrokenByTooLarge, errno.EFBIG, DEBUG),
    (mount.BrokenFraming, errno.EBADMSG, DEBUG),
    (core.UnknownReplica, errno.EPERM, DEBUG),
    (core.NotLeaderOrFollower, errno.EROFS, DEBUG),
    (core.OffsetOutOfRange, errno.ENOENT, INFO),
    (core.UnknownTopicOrPartition, errno.ENOENT, INFO),
    (core.RecordError, errno.EBADMSG, INFO),
    (core.RecordTooLarge, errno.EFBIG, INFO),
    (core.RecordBatchTooLarge, errno.EFBIG, INFO),
    (core.TopicNameTooLong, errno.ENAMETOOLONG, INFO),
    (core.InvalidTopic, errno.EINVAL, INFO),
    (core.TopicExists, errno.EEXIST, INFO),
    (core.TopicNotEmpty, errno.ENOTEMPTY, INFO),
    (core.InvalidPartitions, errno.EINVAL, INFO),
    (core.InvalidReplicationFactor, errno.EINVAL, INFO),
    (core.ConfigError, errno.EINVAL, INFO),
    (core.InvalidJsonRecord, errno.EINVAL, INFO),
    (core.InvalidOffsetCommit, errno.EINVAL, INFO),
    (core.GroupIdTooLong, errno.ENAMETOOLONG, INFO),
    (core.InvalidGroupId, errno.EINVAL, INFO),
    (core.DiskFull, errno.ENOSPC, ERROR),
    (core.NotEnoughReplicas, errno.EAGAIN, INFO),
    (core.NotEnoughReplicasAfterAppend, errno.EIO, ERROR),
    (core.ReplicationTimeout, errno.EIO, ERROR),
    (core.OutOfOrderSequence, errno.EILSEQ, INFO),
    (core.ProducerFenced, errno.ESTALE, INFO),
    (core.InvalidTxnState, errno.ESTALE, INFO),
    (core.TransactionInProgress, errno.EEXIST, INFO),
    (core.TransactionalIdTooLong, errno.ENAMETOOLONG, INFO),
    (core.InvalidTransactionalId, errno.EINVAL, INFO),
    (core.CoordinatorFenced, errno.ESTALE, INFO),
    (core.InvalidLeaderEpoch, errno.EIO, ERROR),
    (core.StoreOffline, errno.EIO, DEBUG),  # the failure is logged once, at ERROR, where it happened
    (core.ReadFailed, errno.EIO, DEBUG),  # logged where it happened, rate-limited per file
    (core.CorruptStoredBatch, errno.EIO, DEBUG),  # logged where it happened (segment, position), rate-limited
    (core.StorageError, errno.EIO, ERROR),
    (core.LogfsError, errno.EIO, ERROR),
)

_BY_TYPE: Final[dict[type[BaseException], tuple[int, int]]] = {}
for _type, _errno, _level in ERRNO_TABLE:
    if _type in _BY_TYPE:
        raise AssertionError(f"mount/errno.py maps {_type.__name__} twice")
    if _errno not in errno.errorcode:
        raise AssertionError(f"mount/errno.py maps {_type.__name__} to {_errno}, which is not an errno")
    _BY_TYPE[_type] = (_errno, _level)
assert core.LogfsError in _BY_TYPE, "the root of the core's exception tree must have a row"

# Handlers whose errors have nowhere to go (no reply to the kernel): log, never raise.
_NO_REPLY: Final = frozenset({"forget"})


def lookup(exc: BaseException) -> tuple[int, int] | None:
    """``(errno, log level)`` for ``exc``: its own type's row, else its nearest ancestor's; None when unmapped. A
    forwarded request's refusal answers the leader's errno (its row's level)."""
    if isinstance(exc, mount.ForwardFailed):
        return exc.code, INFO
    for klass in type(exc).__mro__:
        found = _BY_TYPE.get(klass)
        if found is not None:
            return found
    return None


def errno_for(exc: BaseException) -> int:
    """The errno a handler answers for ``exc`` (EIO when unmapped)."""
    if isinstance(exc, pyfuse3.FUSEError):
        return exc.errno
    if isinstance(exc, OSError):
        return errno.ENOSPC if exc.errno in (errno.ENOSPC, errno.EDQUOT) else errno.EIO
    found = lookup(exc)
    return errno.EIO if found is None else found[0]


def errno_name(code: int) -> str:
    return errno.errorcode.get(code, str(code))


F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def handler(fn: F) -> F:
    """Wrap an async ``Operations`` method so that only ``FUSEError`` ever leaves it (see the module docstring)."""
    name = fn.__name__
    no_reply = name in _NO_REPLY

    @functools.wraps(fn)
    async def wrapper(self: Any, *args: Any) -> Any:
        try:
            return await fn(self, *args)
        except pyfuse3.FUSEError as exc:
            if no_reply:
                _log.debug("%s: %s (dropped: no reply)", name, exc)
                return None
            _count(self, exc.errno)
            refused = _refused(self, name, args, exc.errno, os.strerror(exc.errno), logged=False)
            if not refused and _log.isEnabledFor(logging.DEBUG):
                _log.debug("%s%s: %s", name, _brief(args), errno_name(exc.errno))
            raise
        except Exception as exc:
            code, level, traceback = _classify(exc)
            loud = level >= logging.WARNING or traceback
            if loud:
                _log.log(
                    ERROR, "%s%s failed with %s: %s: %s", name, _brief(args), errno_name(code), type(exc).__name__,
                    exc, exc_info=traceback,
                )  # fmt: skip
            refused = not no_reply and _refused(self, name, args, code, _reason(exc, traceback), logged=loud)
            if not refused and not loud and _log.isEnabledFor(level):  # a lookup: no formatting unless shown
                _log.log(level, "%s%s: %s (%s)", name, _brief(args), exc, errno_name(code))
            if no_reply:
                return None
            _count(self, code)
            raise pyfuse3.FUSEError(code) from None

    return wrapper  # type: ignore[return-value]


def _classify(exc: Exception) -> tuple[int, int, bool]:
    """(errno, log level, log the traceback?) for an exception that is not a FUSEError."""
    if isinstance(exc, OSError):
        return errno_for(exc), ERROR, exc.errno not in (errno.ENOSPC, errno.EDQUOT)
    found = lookup(exc)
    if found is None:
        return errno.EIO, ERROR, True  # a logfs bug: say where
    return found[0], found[1], False


def _refused(ops: Any, name: str, args: tuple[Any, ...], code: int, reason: str, *, logged: bool) -> bool:
    """Record a refusal of a change the user asked for (``mount/refusals.py``); False when the request was none."""
    target = getattr(ops, "refusal_target", None)
    if target is None:
        return False
    try:  # nothing but FUSEError may leave a handler, this bookkeeping's own bug included
        where = target(name, args)
        if where is not None:
            op, path, uid = where
            ops.metrics.refusals.refused(op, path, errno_name(code), reason, uid=uid, logged=logged)
    except Exception:
        _log.exception("recording a refusal of %s failed", name)
        return False
    return where is not None


def _reason(exc: Exception, bug: bool) -> str:
    """What a user reads about a refusal: the error's message (its type only when it has none, or is a bug)."""
    text = str(exc)
    if bug or not text:
        return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text


def _brief(args: tuple[Any, ...]) -> str:
    """The handler's arguments for a log line, short: no request contexts, no write buffers."""
    shown = []
    for arg in args:
        if isinstance(arg, (bytes, bytearray, memoryview)) and len(arg) > 64:
            shown.append(f"<{len(arg)} bytes>")
        elif isinstance(arg, (int, str, bytes)):
            shown.append(repr(arg))
    return "(" + ", ".join(shown) + ")"


def _count(ops: Any, code: int) -> None:
    count = getattr(ops, "count_error", None)
    if count is not None:
        count(code)


def render_table() -> str:
    """The table as markdown, for docs/mount.md."""
    lines = ["| Error (and its subclasses) | errno | logged at |", "|---|---|---|"]
    for klass, code, level in ERRNO_TABLE:
        answer = f"`{errno_name(code)}`"
        if klass is mount.ForwardFailed:
            answer = f"the leader's own (`{errno_name(code)}` when it gave none)"
        lines.append(f"| `{klass.__name__}` | {answer} | {logging.getLevelName(level)} |")
    lines.append("| `OSError` from the disk | `ENOSPC` for ENOSPC/EDQUOT, else `EIO` | ERROR |")
    lines.append("| anything else (a logfs bug) | `EIO` | ERROR, with the traceback |")
    return "\n".join(lines) + "\n"
