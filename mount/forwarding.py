"""Writes through a node that does not lead the partition, forwarded to its leader's mount and answered with the
leader's result (docs/replication.md, "Writes through any node").

* **Open.** A partition's ``append``, ``append.jsonl`` or ``batches`` (or a topic's ``append``, ``append.jsonl``)
  opened for writing on a node that does not lead the partition opens ``<leader mount>/.logfs/forward/<topic>/<p>/
  <file>`` (``…/<topic>/<file>``) with the caller's access mode and O_SYNC/O_DSYNC. The leader serves that path as
  its own file (for a topic's, it picks the partition: with one leader for every partition, the choice this node
  would make), for the users of ``replica.users`` only (the caller was checked here, against the modes this node
  shows), and never forwards it again: a node that does not lead the partition answers it EROFS.
* **Requests.** Each write request is one write(2) of the same bytes on that descriptor, so framing is the leader's
  (its handle keeps a line or batch split across requests); fsync(2) is the leader's acks=all; a read of an O_RDWR
  handle reads the leader's produce responses (the leader's offsets); flush closes a duplicate of the descriptor,
  which makes the kernel send the leader a FLUSH for its handle: a last line without a newline is stored there, and
  its refusal reaches this close(2). Release closes the descriptor. The leader's errno is the answer.
* **Finding the leader** (``target``: the cluster node's answer — the partition's leader's registered mount, or
  ``node.mounts``). With none, or when the one named answers EROFS (it no longer leads) or cannot be reached, the
  node is asked to read ZooKeeper again (``refresh``) and the open is tried again every ``RETRY_S``, for up to
  ``request.timeout.ms``; then :class:`NoLeader` (EAGAIN), nothing stored.
* **A leader change under an open handle.** A write the leader answers EROFS was not stored (a leader refuses before
  it appends; ``mount/writes.py`` takes its role once per append, so a change during one answers EIO, never EROFS):
  the handle moves to the new leader and the write is made there, when everything written before it ended at a
  record boundary (a whole line, a whole batch: :class:`Boundary`); otherwise EIO (part of a record went to the old
  leader, and the rest would be framed alone). So is a request the kernel answered ENOTCONN: the leader's mount was
  gone before it reached it. A leader whose mount went away while a request was in it (ECONNABORTED) may or may not
  have stored it: EIO, never made again (no duplicate), and the next write opens the new leader's file. Bytes
  written and not yet acknowledged before the handle left a leader make every later fsync of the handle fail with
  EIO: the new leader cannot vouch for what the old one held (an unacknowledged write a failover may lose, as in
  Kafka). An O_SYNC write is acknowledged by itself. fsync, flush and read answer EIO, not EROFS, when the leader
  changed under them.
* **Limits.** A paused leader (SIGSTOP) holds the requests forwarded to it, and the worker threads they occupy,
  until it resumes or its mount is torn down (kill, unmount): a request in a FUSE filesystem cannot be withdrawn.

Threads: the trio thread; every call on the leader's mount runs in a worker thread under ``limiter`` (a forwarded
write waits for the leader's acks=all, an unreachable sshfs for long: neither may stall another request).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import json
import logging
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import trio

from logfs.core.names import is_group_id, is_transactional_id
from logfs.core.owners import DEFAULT_MODE, MODE_BITS, Owner
from logfs.mount.access import Caller
from logfs.mount.errors import ForwardFailed, InvalidCommand, NoLeader, NotShownHere
from logfs.mount.handles import Handle
from logfs.mount.names import parse_partition_name
from logfs.mount.nodes import FORWARD_DIRS_NAME, LOGFS_DIR_NAME, Kind, Node

_log = logging.getLogger(__name__)

T = TypeVar("T")

RETRY_S = 0.05  # between attempts to reach a leader (each also asks the node to read ZooKeeper again)
SETTLE_POLL_S = 0.01  # how often a forwarded mkdir or rmdir looks whether this node's replica shows it yet
SETTLE_NUDGE_POLLS = 10  # and every this many looks, asks the replica to list the leader again
CONFIG_SETTLE_S = 2.0  # how long a forwarded config change waits to be shown here (two discovery rounds)
CONFIG_WRITTEN_MAX = 64 * 1024  # a forwarded config handle's lines kept to look for here (a config is far smaller)
FORWARD_THREADS = 64  # forwarded requests in the leader's mounts at once (each may wait for acks=all)
# answers that say the request was not served: the leader refused before appending (EROFS), or its mount was gone
# before the request reached it (the kernel answers ENOTCONN once a FUSE connection is closed; sshfs refused or
# unreachable): made again on the new leader
_NOT_SERVED = frozenset({errno.EROFS, errno.ENOTCONN, errno.ECONNREFUSED, errno.EHOSTUNREACH})
# the leader's mount went away while the request was in it (the kernel aborts those with ECONNABORTED): whether it was
# served is unknown
_GONE = frozenset({errno.ECONNABORTED})
_FLAGS = os.O_ACCMODE | os.O_SYNC | os.O_DSYNC


class Boundary:
    """Whether the bytes written so far end at a record boundary: after a newline (lines), or after a whole batch
    (``batches``: each a 12-byte prefix, base offset and length, then that many bytes)."""

    def __init__(self, batches: bool) -> None:
        self._batches = batches
        self._last_newline = True
        self._prefix = bytearray()
        self._left = 0

    @property
    def at_boundary(self) -> bool:
        return self._left == 0 and not self._prefix if self._batches else self._last_newline

    def feed(self, data: bytes) -> None:
        if not data:
            return
        if not self._batches:
            self._last_newline = data[-1:] == b"\n"
            return
        view, i = memoryview(data), 0
        while i < len(view):
            if self._left:
                step = min(self._left, len(view) - i)
                self._left -= step
                i += step
                continue
            take = min(12 - len(self._prefix), len(view) - i)
            self._prefix += view[i : i + take]
            i += take
            if len(self._prefix) == 12:
                self._left = max(0, int.from_bytes(self._prefix[8:12], "big", signed=True))
                self._prefix.clear()


@dataclass(eq=False)
class ForwardHandle(Handle):
    """A write file opened on a node that does not lead its partition: the descriptor on the leader's mount."""

    flags: int = 0
    fd: int = -1
    path: Path | None = None  # the leader's forward path the descriptor is open on
    boundary: Boundary = field(default_factory=lambda: Boundary(False))
    unsynced: bool = False  # bytes written on this leader since the last fsync that succeeded
    lost: bool = False  # unacknowledged bytes went to an earlier leader: every fsync fails
    caller: Caller | None = None  # who opened it (a refusal is recorded as theirs, mount/refusals.py)
    leader_of: tuple[str, int] | None = None  # whose leader takes it, when not its own partition's (a group commit)
    written: bytearray = field(default_factory=bytearray)  # a config handle's lines, to see them here (settle_config)
    unterminated: bool = False  # a transaction's control handle: its last write ended without a newline
    lock: trio.Lock = field(default_factory=trio.Lock)


class Forwarder:
    """Forwarded writes of one mount. ``target``: the partition's leader's mount path, None while there is none or
    this node leads (the mount then does not forward); ``refresh``: ask for the leadership to be read again; both
    set by the cluster node (``logfs/cluster/node.py``), None on a mount without ZooKeeper. Trio thread."""

    def __init__(self, timeout_ms: int) -> None:
        self.target: Callable[[str, int], Path | None] | None = None
        self.refresh: Callable[[], None] | None = None
        self.replicate: Callable[[], None] | None = None  # ask this node's replica to look at its leaders now
        self.timeout_s = timeout_ms / 1000
        self._limiter = trio.CapacityLimiter(FORWARD_THREADS)

    @property
    def enabled(self) -> bool:
        return self.target is not None

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(functools.partial(fn, *args), limiter=self._limiter)

    async def open(
        self, entry: Any, flags: int, caller: Caller, leader_of: tuple[str, int] | None = None
    ) -> ForwardHandle:
        """The handle of ``entry`` (a partition's data file, a topic's config, a group's offset or config) opened by
        ``caller`` with ``flags`` on the leader of the partition (of ``leader_of``: a group's offsets partition)."""
        h = ForwardHandle(entry, flags=flags & _FLAGS, boundary=Boundary(entry.node.kind is Kind.BATCHES),
                          caller=caller, leader_of=leader_of)  # fmt: skip
        await self._connect(h)
        return h

    async def _connect(self, h: ForwardHandle) -> None:
        """Open ``h`` on the partition's current leader, trying until ``timeout_s``; NoLeader then."""
        h.fd, h.path = await self._on_leader(h.node, "write", functools.partial(_open, flags=h.flags), h.leader_of)

    async def _on_leader(
        self,
        node: Node,
        what: str,
        attempt: Callable[[Path], T],
        leader_of: tuple[str, int] | None = None,
        *,
        twin: bool = True,
    ) -> tuple[T, Path]:
        """``attempt(path)`` on the current leader of ``node``'s partition (of ``leader_of`` when given), ``path``
        the leader's twin of ``node`` under ``.logfs/forward/`` (``node`` itself when not ``twin``), tried again
        while it was not served (no leader known, EROFS: it stopped leading, its mount gone or unreachable) until
        ``timeout_s`` (NoLeader then); any other refusal is the leader's answer (ForwardFailed with its errno)."""
        topic, partition = leader_of or (node.topic, max(node.partition, 0))
        deadline = trio.current_time() + self.timeout_s
        last: str = "no leader is known"
        while True:
            mount = None if self.target is None else self.target(topic, partition)
            if mount is not None:
                path = forward_path(mount, node) if twin else mount / str(node).lstrip("/")
                try:
                    return await self._call(attempt, path), path
                except OSError as exc:
                    if exc.errno not in _GONE and exc.errno not in _NOT_SERVED and exc.errno != errno.ENOENT:
                        raise _refused(node, path, what, exc) from None
                    if exc.errno == errno.ENOENT and await self._call(os.path.isdir, mount / LOGFS_DIR_NAME):
                        raise ForwardFailed(exc.errno, f"{node}: not on the leader at {mount}") from None
                    last = f"the leader at {mount} answered {errno.errorcode.get(exc.errno, exc.errno)}"
            if self.refresh is not None:
                self.refresh()
            if trio.current_time() >= deadline:
                raise NoLeader(f"{node}: no leader took the {what} within request.timeout.ms "
                               f"({self.timeout_s * 1000:.0f} ms): {last}")  # fmt: skip
            await trio.sleep(RETRY_S)

    async def change(
        self, change: DirChange, done: Callable[[], bool] | None, leader_of: tuple[str, int] | None = None
    ) -> None:
        """A mkdir or rmdir of a topic (or a partition's mkdir), or a group's claim, through this node: one line of the
        leader's ``.logfs/forward/.dirs`` (``DirChange``), tried again on the next leader while not served, the
        leader's refusal the answer; then wait until this node's own replica shows the change (``done``; None: no
        wait), asking it to look at the leader at once (``replicate``), so that what the caller does next here finds
        it; NotShownHere (ETIMEDOUT) when that takes longer than ``request.timeout.ms`` (made on the leader, not
        here yet: not to be made again). ``leader_of``: the partition whose leader takes it (a claim: the group's
        offsets partition)."""
        line = change.render()
        await self._on_leader(Node(Kind.FORWARD_DIRS), change.op, functools.partial(_write_line, line=line),
                              leader_of or (change.topic, max(change.partition, 0)))  # fmt: skip
        if done is not None and not await self._settle(done, self.timeout_s):
            raise NotShownHere(f"{line.decode().strip()}: made on the leader, not shown here within "
                               f"request.timeout.ms ({self.timeout_s * 1000:.0f} ms)")  # fmt: skip

    async def group_owner(self, group: str, leader_of: tuple[str, int]) -> tuple[int, int, int]:
        """``(uid, gid, mode)`` the leader's mount shows for consumer group ``group`` (a claim this node forwarded is
        there at once; here only once the group's first commit is replicated)."""
        node = Node(Kind.GROUP, group=group)
        st, _ = await self._on_leader(node, "stat", os.stat, leader_of, twin=False)
        return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)

    async def read_group_file(self, node: Node, leader_of: tuple[str, int]) -> bytes | None:
        """A group's ``offset`` or ``config`` as the leader of its offsets partition shows it (its forwarded twin);
        None when it has none (no commit)."""
        return await self._unless_absent(node, "read", Path.read_bytes, leader_of)

    async def commit(self, node: Node, offset: int, leader_of: tuple[str, int]) -> None:
        """Commit ``offset`` to ``node`` (a group's ``offset``) on the leader of the group's offsets partition: one
        line written to its forwarded twin, stored there when the handle closes (a group follow's auto-commit)."""
        await self._on_leader(node, "commit", functools.partial(_write_line, line=f"{offset}\n".encode()), leader_of)

    async def transaction_owner(self, transactional_id: str, leader_of: tuple[str, int]) -> tuple[int, int] | None:
        """``(uid, gid)`` of who began open transaction ``transactional_id``, as the coordinator's mount shows its
        forwarded twin (``.logfs/forward/.transactions/<id>``, which a node that does not lead refuses: EROFS, the
        next leader tried); None when it shows none (not open there)."""
        st = await self._unless_absent(Node(Kind.TXN, txn=transactional_id), "stat", os.stat, leader_of)
        return None if st is None else (st.st_uid, st.st_gid)

    async def open_transactions(self, leader_of: tuple[str, int]) -> dict[str, tuple[int, int]]:
        """Every open transaction the coordinator's mount lists (in its forwarded twin), with who began it."""
        listed, _ = await self._on_leader(Node(Kind.TXN_DIR), "listing", _owners, leader_of)
        return listed

    async def has_label(self, label: str, leader_of: tuple[str, int]) -> bool:
        """Whether the coordinator's mount shows committed label ``label`` (``.logfs/forward/.labels/<label>``)."""
        return await self._unless_absent(Node(Kind.LABEL, name=label), "stat", os.stat, leader_of) is not None

    async def _unless_absent(
        self, node: Node, what: str, attempt: Callable[[Path], T], leader_of: tuple[str, int]
    ) -> T | None:
        """``attempt`` on the leader's twin of ``node`` (:meth:`_on_leader`); None when the leader has no such thing
        (its ENOENT)."""
        try:
            result, _ = await self._on_leader(node, what, attempt, leader_of)
        except ForwardFailed as exc:
            if exc.code == errno.ENOENT:
                return None
            raise
        return result

    async def settle_config(self, h: ForwardHandle, local: Callable[[], bytes]) -> None:
        """After a forwarded ``config`` handle was flushed: wait (at most ``CONFIG_SETTLE_S``) until this node shows
        every ``key=value`` line written through it (``local``: its rendering here), so that ``cat config`` after
        ``echo … > config`` on this node reads the change. Past that it is replication's lag (logged), not a failure
        of the change. (Only the lines written: the rest of a rendering holds each node's own defaults.)"""
        wanted = {line.strip() for line in bytes(h.written).splitlines() if not line.strip().endswith(b"=")}
        wanted.discard(b"")
        h.written.clear()
        if not wanted:
            return
        if not await self._settle(lambda: wanted <= set(local().splitlines()), CONFIG_SETTLE_S):
            _log.info("%s: the change is on the leader, not shown here yet", h.node)

    async def _settle(self, done: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until ``done()``, asking this node's replica to look at the leader now and then; False after
        ``timeout_s``."""
        deadline = trio.current_time() + timeout_s
        polls = 0
        while not done():
            if self.replicate is not None and polls % SETTLE_NUDGE_POLLS == 0:
                self.replicate()
            if trio.current_time() >= deadline:
                return False
            polls += 1
            await trio.sleep(SETTLE_POLL_S)
        return True

    async def write(self, h: ForwardHandle, buf: bytes) -> None:
        """One write request, on the leader. An answer that says it was not served (EROFS: the leader stopped
        leading, and refuses before it appends; ENOTCONN: its mount was gone before the request reached it) moves the
        handle to the new leader, where the write is made; a leader that went away while the request was in it
        (ECONNABORTED) may or may not have stored it: EIO, and the next write finds the new leader (see the module
        docstring)."""
        if h.fd < 0:  # closed by an earlier failure (or no leader was found then): reopened at a record boundary
            if not h.boundary.at_boundary:
                raise ForwardFailed(errno.EIO, f"{h.node}: part of a record went to a leader that is gone: the rest "
                                               "cannot follow it elsewhere")  # fmt: skip
            await self._connect(h)
        while True:
            try:
                written = await self._call(os.write, h.fd, buf)
            except OSError as exc:
                if exc.errno in _NOT_SERVED:
                    await self._move(h, exc.errno)
                    continue
                if exc.errno in _GONE:
                    h.boundary.feed(buf)  # framed there or not: what follows must start a record of its own
                    await self._lose(h)
                    raise ForwardFailed(errno.EIO, f"{h.node}: the leader at {h.path} went away during the write "
                                                   "(it may or may not be stored)") from None  # fmt: skip
                raise _refused(h.node, h.path, "write", exc) from None
            if written != len(buf):  # a FUSE write answers whole or fails; anything else is a broken leader mount
                raise ForwardFailed(errno.EIO, f"{h.node}: the leader at {h.path} took {written} of {len(buf)} bytes")
            h.boundary.feed(buf)
            if h.node.kind is Kind.CONFIG and len(h.written) < CONFIG_WRITTEN_MAX:
                h.written += buf
            # an O_SYNC / O_DSYNC write was acknowledged by the leader itself (O_SYNC includes O_DSYNC's bit)
            h.unsynced = h.unsynced or not h.flags & os.O_DSYNC
            return

    async def _move(self, h: ForwardHandle, code: int) -> None:
        """The leader answered ``code`` (it stopped leading): reopen on the new one, when the handle stands at a
        record boundary; ForwardFailed (EIO) when it does not."""
        old = h.path
        await self._lose(h)
        if not h.boundary.at_boundary:
            name = errno.errorcode.get(code, code)
            raise ForwardFailed(errno.EIO, f"{h.node}: the leader at {old} answered {name} in the middle of a "
                                           "record: the rest cannot follow it elsewhere")  # fmt: skip
        await self._connect(h)
        _log.info("%s: the leader at %s answered %s: writes go to %s now", h.node, old,
                  errno.errorcode.get(code, code), h.path)  # fmt: skip

    async def _lose(self, h: ForwardHandle) -> None:
        """Close the descriptor on a leader that stopped leading or went away: what was written there and not yet
        acknowledged can no longer be vouched for by this handle's fsync."""
        await self._close(h)
        if h.unsynced:
            h.lost = True

    async def fsync(self, h: ForwardHandle) -> None:
        """The leader's acks=all; EIO when the leader changed or went away before it answered (nothing written
        since the last fsync is acknowledged then, nor by any later fsync of this handle)."""
        if h.fd >= 0:
            try:
                await self._call(os.fsync, h.fd)
            except OSError as exc:
                if exc.errno in _NOT_SERVED or exc.errno in _GONE:
                    await self._lose(h)
                    h.lost = True
                    raise ForwardFailed(errno.EIO, f"{h.node}: the leader at {h.path} changed before acknowledging "
                                                   "the records") from None  # fmt: skip
                raise _refused(h.node, h.path, "fsync", exc) from None
        if h.lost:
            raise ForwardFailed(errno.EIO, f"{h.node}: records written before the leader changed were never "
                                           "acknowledged; this handle cannot vouch for them")  # fmt: skip
        h.unsynced = False

    async def read(self, h: ForwardHandle, size: int) -> bytes:
        """Produce responses of an O_RDWR handle, as the leader renders them (the caller holds ``h.lock``: a move
        closes the descriptor)."""
        if h.fd < 0:
            return b""
        try:
            return await self._call(os.read, h.fd, size)
        except OSError as exc:
            raise _refused(h.node, h.path, "read", _unknown(exc)) from None

    async def flush(self, h: ForwardHandle) -> None:
        """close(2) here: make the leader flush its handle (its last line without newline stored, or refused)."""
        if h.fd < 0:
            return
        try:
            await self._call(_flush, h.fd)
        except OSError as exc:
            raise _refused(h.node, h.path, "flush", _unknown(exc)) from None

    async def release(self, h: ForwardHandle) -> None:
        await self._close(h)

    async def _close(self, h: ForwardHandle) -> None:
        fd, h.fd = h.fd, -1
        if fd >= 0:
            try:
                await self._call(os.close, fd)
            except OSError as exc:  # the leader's flush at release: its refusal was answered to flush already
                _log.debug("%s: closing the forwarded handle: %s", h.node, exc)


def forward_path(mount: Path, node: Node) -> Path:
    """Where the leader whose mount is ``mount`` takes the write ``node`` names: the same file under
    ``.logfs/forward/`` (``Node.__str__`` of its forwarded twin), or ``.logfs/forward/.dirs`` for a directory
    change."""
    twin = node if node.kind is Kind.FORWARD_DIRS else dataclasses.replace(node, forwarded=True)
    return mount / str(twin).lstrip("/")


@dataclass(frozen=True, slots=True)
class DirChange:
    """A change of the cluster's topics or groups made through a node that does not lead, as one line of the leader's
    ``.logfs/forward/.dirs``:

    * ``mkdir <topic> <uid> <gid> <octal mode>``: a topic, the caller's, with the mode mkdir passed;
    * ``mkdir <topic>/<partition> <uid>``, ``rmdir <topic> <uid>``, ``delete-topic <topic> <uid>``,
      ``delete-records <topic> <partition> <offset> <uid>``: changes of a topic, which its owner or root alone may
      make: the forwarding node checked the caller (``uid``) against the owner it shows, and the leader checks
      again against its own (a topic made again since, by someone else, is not the caller's);
    * ``claim <uid> <gid> <group as a JSON string>``: the group becomes the caller's if nobody claimed it (its first
      commit through that node), whose right to write it that node then checks against the owner the leader shows;
    * ``begin <uid> <gid> <transactional id as a JSON string>``: a transaction begun for the caller (its ``mkdir``
      of ``.logfs/transactions/<id>`` through that node), which is the caller's from then on;
    * ``delete-group <uid> <group as a JSON string>``: the caller's ``rmdir .logfs/groups/<group>``, which the
      leader allows as it would its own caller's (the group's owner or root).

    Names are checked before a line is made (no blank or control character can start another line); the leader
    takes the lines from a replica user only."""

    op: str  # "mkdir", "rmdir", "claim", "begin", "delete-group", "delete-topic" or "delete-records"
    topic: str = ""
    partition: int = -1
    owner: Owner | None = None  # a new topic's owner; a claim's claimer (uid, gid)
    group: str = ""  # a claim's group; a begin's transactional id
    offset: int = -1
    uid: int = -1  # the caller, for the leader's own owner check of a change of a topic

    def render(self) -> bytes:
        if self.op not in ("claim", "begin", "delete-group") and not _PLAIN_NAME.fullmatch(self.topic):
            raise InvalidCommand(f"{self.topic!r} cannot be named in a forwarded change")
        if self.op in ("claim", "begin"):
            assert self.owner is not None
            return f"{self.op} {self.owner.uid} {self.owner.gid} {json.dumps(self.group)}\n".encode()
        if self.op == "delete-group":
            assert self.uid >= 0, "a deletion names its caller"
            return f"delete-group {self.uid} {json.dumps(self.group)}\n".encode()
        if self.op == "mkdir" and self.partition < 0:
            assert self.owner is not None
            return f"mkdir {self.topic} {self.owner.uid} {self.owner.gid} {self.owner.mode:o}\n".encode()
        assert self.uid >= 0, "a change of a topic names its caller"
        where = {"mkdir": f"{self.topic}/{self.partition}", "delete-records": f"{self.topic} {self.partition} "
                 f"{self.offset}"}.get(self.op, self.topic)  # fmt: skip
        return f"{self.op} {where} {self.uid}\n".encode()

    @classmethod
    def parse(cls, line: str) -> DirChange:
        """The change a line names; InvalidCommand (EINVAL) for anything else."""
        words = line.split(" ")
        op, args = words[0], words[1:]
        try:
            if op == "claim" and len(args) >= 3 and _ids(args[:2]):
                group = json.loads(line.split(" ", 3)[3])
                if isinstance(group, str) and is_group_id(group):
                    return cls("claim", owner=Owner(int(args[0]), int(args[1]), DEFAULT_MODE), group=group)
            elif op == "delete-group" and len(args) >= 2 and _ids(args[:1]):
                group = json.loads(line.split(" ", 2)[2])
                if isinstance(group, str) and is_group_id(group):
                    return cls("delete-group", uid=int(args[0]), group=group)
            elif op == "begin" and len(args) >= 3 and _ids(args[:2]):
                transactional_id = json.loads(line.split(" ", 3)[3])
                if isinstance(transactional_id, str) and is_transactional_id(transactional_id):
                    return cls("begin", owner=Owner(int(args[0]), int(args[1]), DEFAULT_MODE), group=transactional_id)
            elif op == "mkdir" and len(args) == 4 and _ids(args[1:3]) and args[3].isascii():
                mode = int(args[3], 8)
                if not mode & ~MODE_BITS and _PLAIN_NAME.fullmatch(args[0]):
                    return cls("mkdir", args[0], owner=Owner(int(args[1]), int(args[2]), mode))
            elif op == "mkdir" and len(args) == 2 and _ids(args[1:]):
                topic, _, number = args[0].partition("/")
                partition = parse_partition_name(number)
                if _PLAIN_NAME.fullmatch(topic) and partition is not None:
                    return cls("mkdir", topic, partition, uid=int(args[1]))
            elif op in ("rmdir", "delete-topic") and len(args) == 2 and _ids(args[1:]):
                if _PLAIN_NAME.fullmatch(args[0]):
                    return cls(op, args[0], uid=int(args[1]))
            elif op == "delete-records" and len(args) == 4 and _ids(args[2:]):
                partition = parse_partition_name(args[1])
                if _PLAIN_NAME.fullmatch(args[0]) and partition is not None:
                    return cls(op, args[0], partition, offset=int(args[2]), uid=int(args[3]))
        except ValueError:
            pass
        raise InvalidCommand(f"{FORWARD_DIRS_NAME}: not a forwarded change (mkdir, rmdir, claim, begin, "
                             f"delete-group, delete-topic, delete-records): {line[:200]!r}")  # fmt: skip


# What a forwarded change may name as a topic: no blank, no control character, nothing that could end its line (the
# leader checks the name's own rules when it makes the change)
_PLAIN_NAME = re.compile(r"[^\s\x00-\x1f\x7f/]+")


def _ids(words: list[str]) -> bool:
    """Whether each word is a non-negative id in ASCII digits."""
    return all(w.isascii() and w.isdigit() for w in words)


def _owners(path: Path) -> dict[str, tuple[int, int]]:
    """The directories in ``path`` with their ``(uid, gid)`` (one that went away between the listing and its stat
    is left out)."""
    owners = {}
    with os.scandir(path) as listing:
        for entry in listing:
            with contextlib.suppress(FileNotFoundError):
                st = entry.stat()
                owners[entry.name] = (st.st_uid, st.st_gid)
    return owners


def _open(path: Path, *, flags: int) -> int:
    return os.open(path, flags)


def _write_line(path: Path, *, line: bytes) -> None:
    """One command to a leader's ``.dirs``. Refusals come as they are (EROFS: a leader that stopped leading refuses
    before it changes anything, so the next leader is tried), but a leader that went away while the write was in it
    may or may not have made the change: EIO, never made again."""
    fd = os.open(path, os.O_WRONLY)
    try:
        try:
            written = os.write(fd, line)
        except OSError as exc:
            if exc.errno in _GONE:
                raise OSError(errno.EIO, "the leader went away during the change (made or not)") from None
            raise
        if written != len(line):
            raise OSError(errno.EIO, f"the leader took {written} of {len(line)} bytes")
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def _refused(node: Node, path: Path | None, what: str, exc: OSError) -> ForwardFailed:
    """The leader's refusal of a forwarded request, with its errno (EIO when it gave none)."""
    code = exc.errno if exc.errno is not None else errno.EIO
    return ForwardFailed(code, f"{node}: the leader at {path} refused the {what}: {os.strerror(code)}")


def _unknown(exc: OSError) -> OSError:
    """A leader that changed (EROFS) or went away while answering: EIO here, not an errno that says nothing was
    done."""
    if exc.errno in _NOT_SERVED or exc.errno in _GONE:
        return OSError(errno.EIO, exc.strerror)
    return exc


def _flush(fd: int) -> None:
    """A FLUSH of ``fd``'s file on its filesystem: the close of a duplicate (the descriptor stays open)."""
    os.close(os.dup(fd))
