"""The refusals a user caused, made readable: logged at WARNING (rate-limited) and kept in ``.logfs/errors``.

Why: a refused write answers only an errno (``echo '{bad' >> append.jsonl`` prints "Invalid argument"), and the
reason ("line 1 of the write: not JSON: …") used to go to an INFO line nobody sees at the default level. So every
refusal of a change the user asked for — a write (``append*``, ``batches``, ``config``, the ``.logfs/`` command
files, a transaction's ``control``; flush, close and fsync of such a handle), an open for writing (a create of a
name that does not exist included: ``echo x > t/apend``), a mkdir, an rmdir — is:

* **logged at WARNING**, one line: ``refused <op> <path>: <errno>: <reason>``. A token bucket per op
  (:data:`BURST` lines at once, then :data:`RATE_PER_S` a second) keeps a flood of bad writes from flooding the
  log; the lines it holds back are counted and reported as one ``N more refused <op>s not logged`` line with the
  next line logged for that op, or at unmount.
* **kept in a ring** of the last :data:`RING_SIZE` (every refusal, rate limit or not), rendered as ``.logfs/errors``:
  JSON lines ``{"time": "<ISO-8601 UTC, ms>", "op": …, "path": …, "errno": "<name>", "reason": …}``, oldest first.

Never recorded: failed lookups, getattr, readdir and opens for reading (``ls``, shells and Spark probe names by the
thousand; ENOENT there is routine), nor a release (close(2) has returned by then; the flush before it reported the
same tail). ``mount/errno.py``'s ``@handler`` asks :func:`refusal_target` (through ``Operations.refusal_target``)
what a failed request refused, and records it with :meth:`RefusalLog.refused`.

A refusal whose table level is ERROR (a failing disk, a logfs bug, a replication timeout) keeps its ERROR line
(``mount/errno.py``) and is still kept in the ring, with no second WARNING line.

Threads: the trio thread only (no lock).
"""

from __future__ import annotations

import collections
import datetime
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from logfs.mount.errors import MountRefusal
from logfs.mount.forwarding import ForwardHandle
from logfs.mount.handles import Handle, WriteHandle
from logfs.mount.nodes import Kind
from logfs.mount.tree import Tree

_log = logging.getLogger(__name__)

RING_SIZE: Final = 100  # refusals kept for .logfs/errors
BURST: Final = 10  # WARNING lines per op at once …
RATE_PER_S: Final = 1.0  # … then this many a second

# The ops a refusal can be of (the first word after "refused" in a log line, and the "op" field).
WRITE: Final = "write"
CONFIG: Final = "config write"
OPEN: Final = "open for writing"
MKDIR: Final = "mkdir"
RMDIR: Final = "rmdir"
FSYNC: Final = "fsync"
SETATTR: Final = "setattr"  # chmod, chown, chgrp (and what is refused outright: truncate, utimes)


@dataclass(frozen=True, slots=True)
class Refusal:
    """One refused request: when (epoch seconds), what, where, the errno's name, why, and whose (a uid; None when
    the request named no one)."""

    time_s: float
    op: str
    path: str
    errno_name: str
    reason: str
    uid: int | None = None

    def to_json(self) -> str:
        stamp = datetime.datetime.fromtimestamp(self.time_s, datetime.UTC)
        fields: dict[str, str | int] = {
            "time": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "op": self.op,
            "path": self.path,
            "errno": self.errno_name,
            "reason": self.reason,
        }
        if self.uid is not None:
            fields["uid"] = self.uid
        return json.dumps(fields, ensure_ascii=False, separators=(",", ":"))


class _Bucket:
    """A token bucket: :data:`BURST` tokens, refilled at :data:`RATE_PER_S`; counts what it holds back."""

    __slots__ = ("held_back", "tokens", "updated")

    def __init__(self, now: float) -> None:
        self.tokens = float(BURST)
        self.updated = now
        self.held_back = 0

    def take(self, now: float) -> bool:
        self.tokens = min(float(BURST), self.tokens + (now - self.updated) * RATE_PER_S)
        self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        self.held_back += 1
        return False


class RefusalLog:
    """The ring behind ``.logfs/errors`` and the rate-limited WARNING lines. Trio thread."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._ring: collections.deque[Refusal] = collections.deque(maxlen=RING_SIZE)
        self._buckets: dict[str, _Bucket] = {}
        self._clock = clock
        self.total = 0  # every refusal recorded since the mount started

    def refused(
        self, op: str, path: str, errno_name: str, reason: str, *, uid: int | None = None, logged: bool = False
    ) -> None:
        """Record one refusal of ``uid``'s request; log it at WARNING unless ``logged`` (already logged louder) or
        rate-limited."""
        refusal = Refusal(time.time(), op, path, errno_name, reason, uid)
        self._ring.append(refusal)
        self.total += 1
        if logged:
            return
        now = self._clock()
        bucket = self._buckets.get(op)
        if bucket is None:
            bucket = self._buckets[op] = _Bucket(now)
        if not bucket.take(now):
            return
        self._report_held_back(op, bucket)
        _log.warning("refused %s %s: %s: %s", op, _printable(path), errno_name, reason)

    def _report_held_back(self, op: str, bucket: _Bucket) -> None:
        if bucket.held_back:
            _log.warning(
                "%d more refused %s request(s) not logged (rate limit; .logfs/errors keeps the last %d)",
                bucket.held_back, op, RING_SIZE,
            )  # fmt: skip
            bucket.held_back = 0

    def close(self) -> None:
        """At unmount: report what the rate limit still holds back."""
        for op, bucket in self._buckets.items():
            self._report_held_back(op, bucket)

    def render(self, uid: int | None = None) -> bytes:
        """``.logfs/errors``: the kept refusals as JSON lines, oldest first; with ``uid``, only that user's (what one
        user tried to write is not another's to read: mount/access.py)."""
        return "".join(r.to_json() + "\n" for r in self._ring if uid is None or r.uid == uid).encode()


def _printable(path: str) -> str:
    """``path`` for a log line: a control character (a newline in a hostile name) as its escape."""
    return path if path.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in path)


# --- what a failed request refused --------------------------------------------------------------------------------

_WRITE_HANDLERS: Final = frozenset({"write", "flush", "fsync"})


def refusal_target(
    handler: str, args: Sequence[Any], handles: Mapping[int, Handle], tree: Tree
) -> tuple[str, str, int | None] | None:
    """``(op, path, uid)`` of a failed ``handler(*args)`` request that refused a change the user ``uid`` asked for;
    None for any other request (a lookup, a read, an open for reading). Never raises: it runs while an error is being
    answered."""
    try:
        if handler in _WRITE_HANDLERS:
            h = handles.get(args[0])
            if not isinstance(h, (WriteHandle, ForwardHandle)):
                return None
            if h.node.forwarded or h.node.kind is Kind.FORWARD_DIRS:
                return None  # another node's request: refused there, as its caller's (mount/forwarding.py)
            op = FSYNC if handler == "fsync" else CONFIG if h.node.kind is Kind.CONFIG else WRITE
            return op, str(h.node), h.caller.uid if h.caller is not None else None
        uid = getattr(args[-1], "uid", None) if args else None  # the request context, the last argument
        if handler == "open":
            if args[1] & os.O_ACCMODE == os.O_RDONLY:
                return None
            return OPEN, str(tree.entry(args[0]).node), uid
        if handler in (MKDIR, RMDIR, "create"):  # create: open(O_CREAT) of a name that does not exist
            parent = str(tree.entry(args[0]).node).rstrip("/")
            op = OPEN if handler == "create" else handler
            return op, f"{parent}/{bytes(args[1]).decode('utf-8', 'backslashreplace')}", uid
        if handler == SETATTR:
            return SETATTR, str(tree.entry(args[0]).node), uid
    except (MountRefusal, LookupError, TypeError, ValueError):
        return None  # an inode the kernel no longer has: the request is not anyone's change
    return None
