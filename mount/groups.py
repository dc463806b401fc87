"""Consumer groups through the mount (issue 19): ``.logfs/groups/<group>/…`` over ``__consumer_offsets``.

The records and the state replayed from them are the core's (``core/groups/``); this module serves the files:

* ``<group>/<topic>/<partition>/offset`` — a write of ``<offset>[ <metadata>]\\n`` commits (:meth:`Groups.commit`):
  the line is checked (EINVAL: malformed, below the log start offset, above the log end offset; nothing stored),
  ``__consumer_offsets`` is created at the first commit (Kafka's 50 partitions, compacted), and the commit is one
  record appended as leader to the partition Kafka's rule names for the group, exactly as a record written to an
  ``append`` file: write(2) returns once it is in the log, fsync(2) flushes it and waits for the followers
  (acks=all), O_SYNC does both per write. A read gives the latest commit as one line, ENOENT when there is none.
* ``<group>/config`` — ``auto.offset.reset`` and ``auto.commit.interval.ms`` (``core/groups/groupconfig.py``).
* ``<group>/lag`` — ``<topic> <partition> <committed> <hw> <leo> <lag>`` per committed partition, lag = HW − committed
  (what a consumer can read; Kafka's tools compute it the same way from the HW).
* ``<group>/<topic>/<partition>/follow`` — a ``follow/`` stream (``mount/follow.py``) starting at the committed
  offset, or with none (or one the log no longer holds) where ``auto.offset.reset`` says. It commits what it has
  *delivered* — the offset after the last record whose bytes read(2) has returned in full — as Kafka's
  ``enable.auto.commit`` does: every ``auto.commit.interval.ms`` (:meth:`Groups.watch`) and when the file is closed.
  So a reader killed by a signal (Ctrl-C, kill -9) loses nothing it was not given: the kernel closes its file and
  everything delivered is committed, including records it had read but not yet used (those it never sees again:
  at-most-once for what was in its buffers). If the *mount* dies, commits of the last interval are lost and the next
  reader sees those records again (at-least-once for up to ``auto.commit.interval.ms``). ``tail -f`` gets a sized
  view (``mount/follow.py``) and commits nothing.
* ``rmdir .logfs/groups/<group>`` writes a tombstone for each of its commits (flushed, acks=all) and forgets its
  config; ``ls .logfs/groups`` lists the groups with commits or settings.
* ``.logfs/metrics`` gets ``logfs_group_committed_offset`` and ``logfs_group_lag`` per group, topic and partition
  (:meth:`Groups.render_metrics`, from the state of the last catch-up).

**Roles.** The state is the log's (``GroupOffsets.catch_up``): a leader's mount replays up to the log end (its own
commits are visible at once), a follower's up to its HW. A follower's mount answers reads of ``offset``, ``lag``
and listings from the commits it replicated, and refuses commits, config changes, rmdir and group ``follow`` files
with EROFS; a cluster node that does not lead sends commits, config changes and rmdir to the leader of the group's
offsets partition (mount/forwarding.py), and serves a group ``follow`` from its own replica, starting where the
leader's commit and config say, its auto-commits made on the leader. Whichever node becomes leader replays the
topic when it first serves a group file.

Threads: the trio thread; catch-ups, appends and file writes run in worker threads; one catch-up at a time.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pyfuse3
import trio

from logfs.core.durable import now_ms
from logfs.core.format.framing import LineFramer
from logfs.core.groups.groupconfig import AUTO_OFFSET_RESET, GroupConfigs
from logfs.core.groups.offsets import (
    GroupOffsets,
    check_commit_offset,
    commit_batch,
    ensure_offsets_topic,
    parse_commit,
    tombstone_batch,
)
from logfs.core.groups.records import OFFSETS_TOPIC, partition_for_group
from logfs.core.log.log import Log
from logfs.core.names import is_group_id
from logfs.core.owners import DEFAULT_MODE, GROUP_MODE_BITS, UNCLAIMED_GROUP_MODE, Owner, Owners
from logfs.core.store import Store
from logfs.mount.access import Access, Caller
from logfs.mount.errors import BadFileHandle, NoEntry, NotShownHere, ReadOnlyMount
from logfs.mount.follow import FollowReaders, FollowStart
from logfs.mount.forwarding import DirChange, Forwarder
from logfs.mount.handles import FollowHandle, Handle, Partitions, SnapshotHandle, WriteHandle
from logfs.mount.internal import append_internal, create_internal_topic
from logfs.mount.nodes import Kind, Node
from logfs.mount.render.renderspan import Format
from logfs.mount.replication import LeaderReplication
from logfs.mount.runner import Runner
from logfs.mount.tree import Entry, Tree

_log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 0.1  # how often auto-commits fall due are looked for (auto.commit.interval.ms is coarser)
REFRESH_INTERVAL_S = 1.0  # how often the state is caught up in the background (for .logfs/metrics)
REACH_POLL_S = 0.01  # how often a group follow waits for this replica to reach the leader's commit
DELETE_SETTLE_POLL_S = 0.05  # how often an rmdir made through the leader looks whether this replica shows it
GROUP_WRITE_KINDS = frozenset({Kind.GROUP_OFFSET, Kind.GROUP_CONFIG})
GROUP_DIR_KINDS = frozenset({Kind.GROUPS_DIR, Kind.GROUP, Kind.GROUP_TOPIC, Kind.GROUP_PARTITION})


@dataclass(eq=False, slots=True)
class _Delivery:
    """One open group ``follow`` file: what it delivered and what it committed last."""

    group: str
    topic: str
    partition: int
    delivered: int
    committed: int
    committed_at: float  # trio clock


class Groups:
    """``.logfs/groups/`` of one mount. Trio thread."""

    def __init__(
        self,
        store: Store,
        tree: Tree,
        partitions: Partitions,
        follows: FollowReaders,
        replication: LeaderReplication | None,
        access: Access,
        *,
        read_thread: Runner,
        write_thread: Runner,
        topics_changed: Callable[[], Awaitable[None]],
    ) -> None:
        """``replication`` None: a follower's mount (reads only). ``access``: who owns each group (mount/access.py).
        ``topics_changed``: the writer's, called once ``__consumer_offsets`` is made (mount/internal.py)."""
        self._topics_changed = topics_changed
        self.store = store
        self.access = access
        self.tree = tree
        self.partitions = partitions
        self.follows = follows
        self.replication = replication
        self.offsets = GroupOffsets()
        self.configs = GroupConfigs(store.path)
        # a cluster node's forwarder (set by the mount): a node that does not lead serves a group's follow from its
        # replica, with the commit and the config the leader holds, and commits what it delivered there
        self.forwarder: Forwarder | None = None
        self._read_thread = read_thread
        self._write_thread = write_thread
        self._catch_up_lock = trio.Lock()
        self._create_lock = trio.Lock()  # a second first commit waits until all 50 partitions exist
        self._deliveries: dict[FollowHandle, _Delivery] = {}
        self._delivery_began = trio.Event()  # wakes an idle watcher when a group follow opens

    # --- state ------------------------------------------------------------------------------------------------------

    def _bound(self, log: Log) -> int:
        return log.high_watermark if self.replication is None else log.log_end_offset

    async def catch_up(self, group: str | None = None) -> None:
        """Replay what is new in ``__consumer_offsets`` (only ``group``'s partition when given)."""
        parts = None
        if group is not None:
            if not self.store.has_topic(OFFSETS_TOPIC):
                parts = []
            else:
                parts = [partition_for_group(group, len(self.store.partitions(OFFSETS_TOPIC)))]
        async with self._catch_up_lock:
            await self._read_thread(self.offsets.catch_up, self.store, self._bound, parts)

    def _forwarding(self) -> Forwarder | None:
        """The forwarder while this node does not lead and forwards; None otherwise."""
        enabled = self.replication is None and self.forwarder is not None and self.forwarder.enabled
        return self.forwarder if enabled else None

    def _leader_of(self, group: str) -> tuple[str, int]:
        """The ``__consumer_offsets`` partition whose leader coordinates ``group`` (Kafka's group coordinator)."""
        return OFFSETS_TOPIC, partition_for_group(group, max(1, len(self.store.partitions(OFFSETS_TOPIC))))

    def _leader(self) -> LeaderReplication:
        if self.replication is None:
            raise ReadOnlyMount("a follower's mount commits nothing")
        return self.replication

    # --- listings and file contents -----------------------------------------------------------------------------

    async def children(self, node: Node) -> list[tuple[str, Node]]:
        """What ``readdir`` lists in a directory under ``.logfs/groups/``."""
        k, group = node.kind, node.group
        await self.catch_up(None if k is Kind.GROUPS_DIR else group)
        if k is Kind.GROUPS_DIR:
            names = sorted(set(self.offsets.groups()) | set(self.configs.groups()))
            # only what a lookup reaches: a group id outside the name rules (a store written by Kafka) is not listed
            return [(g, Node(Kind.GROUP, group=g)) for g in names if is_group_id(g)]
        commits = self.offsets.commits(group)
        if k is Kind.GROUP:
            topics = sorted({t for t, _ in commits if self.store.has_topic(t)})
            fixed = [("config", Node(Kind.GROUP_CONFIG, group=group)), ("lag", Node(Kind.GROUP_LAG, group=group))]
            return fixed + [(t, Node(Kind.GROUP_TOPIC, t, group=group)) for t in topics]
        if k is Kind.GROUP_TOPIC:
            parts = sorted(p for t, p in commits if t == node.topic and p in self.store.partitions(t))
            return [(str(p), Node(Kind.GROUP_PARTITION, node.topic, p, group=group)) for p in parts]
        return [
            ("offset", Node(Kind.GROUP_OFFSET, node.topic, node.partition, group=group)),
            ("follow", Node(Kind.GROUP_FOLLOW, node.topic, node.partition, group=group)),
        ]

    async def render_offset(self, node: Node) -> bytes:
        await self.catch_up(node.group)
        commit = self.offsets.committed(node.group, node.topic, node.partition)
        if commit is None:
            raise NoEntry(f"{node}: group {node.group!r} has no commit for {node.topic}-{node.partition}")
        return f"{commit.offset} {commit.metadata}\n".encode() if commit.metadata else f"{commit.offset}\n".encode()

    async def render_lag(self, group: str) -> bytes:
        await self.catch_up(group)
        return "".join(f"{' '.join(map(str, row))}\n" for row in self.lag_rows(group)).encode()

    def lag_rows(self, group: str) -> list[tuple[str, int, int, int, int, int]]:
        """(topic, partition, committed, HW, LEO, lag) of each committed partition that exists, sorted."""
        rows = []
        for (topic, partition), commit in sorted(self.offsets.commits(group).items()):
            if not self.store.has_topic(topic) or partition not in self.store.partitions(topic):
                continue
            log = self.store.log(topic, partition)
            hw = log.high_watermark
            rows.append((topic, partition, commit.offset, hw, log.log_end_offset, max(0, hw - commit.offset)))
        return rows

    def render_metrics(self) -> str:
        """Prometheus lines for ``.logfs/metrics``: committed offsets and lag (state of the last catch-up)."""
        committed = ["# TYPE logfs_group_committed_offset gauge"]
        lag = ["# TYPE logfs_group_lag gauge"]
        for group in self.offsets.groups():
            for topic, partition, offset, _hw, _leo, behind in self.lag_rows(group):
                labels = f'group="{_escape(group)}",topic="{_escape(topic)}",partition="{partition}"'
                committed.append(f"logfs_group_committed_offset{{{labels}}} {offset}")
                lag.append(f"logfs_group_lag{{{labels}}} {behind}")
        return "\n".join(committed + lag) + "\n"

    # --- opens --------------------------------------------------------------------------------------------------

    async def claim_as(self, group: str, uid: int, gid: int) -> None:
        """Another node's caller claims ``group`` if nobody did (a ``claim`` line of ``.logfs/forward/.dirs``)."""
        if (await self.access.claim_group_as(group, uid, gid))[1]:
            self._owner_changed(group)

    async def before_forwarding(self, caller: Caller, node: Node, forwarder: Forwarder) -> tuple[str, int]:
        """A commit or group config change by ``caller`` through this node, which does not lead the group's offsets
        partition: on a shared mount, claim the group for ``caller`` on the leader when nobody did, read the owner
        the leader shows (this node's may lag it), and check here that ``caller`` may write it (its supplementary
        groups are known only here); the offsets partition whose leader takes the commit."""
        group = node.group
        leader_of = self._leader_of(group)
        if self.access.shared:  # the leader's owner decides (this node's may lag a claim or a deletion there)
            if self.access.group(group) is None:
                claim = DirChange("claim", owner=Owner(caller.uid, caller.gid, DEFAULT_MODE), group=group)
                await forwarder.change(claim, None, leader_of)
            uid, gid, mode = await forwarder.group_owner(group, leader_of)
            if mode == UNCLAIMED_GROUP_MODE:  # deleted there and unclaimed since this node showed an owner
                claim = DirChange("claim", owner=Owner(caller.uid, caller.gid, DEFAULT_MODE), group=group)
                await forwarder.change(claim, None, leader_of)
                uid, gid, mode = await forwarder.group_owner(group, leader_of)
            self.access.check_group_write(caller, group, Owner(uid, gid, mode & GROUP_MODE_BITS))
        return leader_of

    async def _claim(self, caller: Caller, node: Node) -> None:
        """``caller`` claims ``node``'s group if nobody did (mount/access.py); then the kernel forgets what it cached
        of the group (:meth:`_owner_changed`), which showed it unclaimed."""
        if await self.access.claim_group(caller, node.group):
            self._owner_changed(node.group)

    def _owner_changed(self, group: str) -> None:
        """The group's owner changed (a claim, a deletion): the kernel forgets the attributes it cached of the
        group's nodes, and its entry in ``.logfs/groups/``, so that the next path walk looks the name up again. The
        kernel checks a chmod's caller and a sticky directory's rmdir against the owner it holds without asking, so
        only a new lookup brings those checks the new owner (invalidating the entry waits for nothing: pyfuse3
        sends it from its own thread)."""
        self.tree.invalidate_attributes_below(Node(Kind.GROUP, group=group))
        groups_dir = self.tree.stable_inode(Node(Kind.GROUPS_DIR))
        pyfuse3.invalidate_entry_async(pyfuse3.InodeT(groups_dir), group.encode(), ignore_enoent=True)

    async def open(self, entry: Entry, access: int, caller: Caller, sync: bool) -> tuple[Handle, bool]:
        """The handle of a group file (and whether it is a stream, direct_io either way). A commit, a config change
        or a group ``follow`` (which commits) by ``caller`` claims a group nobody owns yet (mount/access.py)."""
        node = entry.node
        kind = node.kind
        pid = caller.pid
        if kind in GROUP_WRITE_KINDS and access != os.O_RDONLY:
            self._leader()
            if not node.forwarded:  # a forwarded one was claimed and checked by the node that forwards it
                await self._claim(caller, node)
            commit = WriteHandle(entry, LineFramer(1024 * 1024), read_write=access == os.O_RDWR, sync=sync,
                                 caller=caller)  # fmt: skip
            return commit, False
        if kind is Kind.GROUP_OFFSET:
            return SnapshotHandle(entry, await self.render_offset(node)), False
        if kind is Kind.GROUP_CONFIG:
            return SnapshotHandle(entry, self.configs.get(node.group).render()), False
        if kind is Kind.GROUP_LAG:
            return SnapshotHandle(entry, await self.render_lag(node.group)), False
        if kind is Kind.GROUP_FOLLOW:
            forwarder = self._forwarding()
            if forwarder is None:
                self._leader()
            self.access.check_topic_read(caller, node.topic)  # it streams the topic: the topic's mode decides
            if forwarder is not None:  # claimed, and the caller checked, against the owner the leader shows
                await self.before_forwarding(caller, node, forwarder)
            else:
                await self._claim(caller, node)
            h = await self.follows.open(entry, pid, caller.uid)
            start = h.position  # where this reader starts (a later lookup may move the inode's start)
            self._deliveries[h] = _Delivery(node.group, node.topic, node.partition, start, start,
                                            trio.current_time())  # fmt: skip
            self._delivery_began.set()
            return h, True
        raise BadFileHandle(f"{node} cannot be opened")

    async def lookup_follow(self, node: Node) -> Entry:
        """The inode of one lookup of a group's ``follow``: its start is fixed now, as a ``follow/`` name's (and as
        there, the name keeps its inode while the kernel holds it: ``Tree.follow_entry``)."""
        return self.tree.follow_entry(node, await self.follow_start(node), created_ns=time.time_ns())

    async def follow_start(self, node: Node) -> FollowStart:
        """Where a lookup of a group's ``follow`` starts: the committed offset while the log holds it, else
        ``auto.offset.reset`` (earliest: the log start offset; latest: the log end offset)."""
        log = self.store.log(node.topic, node.partition)
        forwarder = self._forwarding()
        if forwarder is None:
            await self.catch_up(node.group)
            commit = self.offsets.committed(node.group, node.topic, node.partition)
            committed = None if commit is None else commit.offset
            reset = self.configs.get(node.group).auto_offset_reset
        else:  # as the leader holds them now (this replica's commits may lag; group configs are not replicated)
            committed, reset = await self._leader_start(node, forwarder)
            if committed is not None and committed > log.log_end_offset:
                await self._reach(node, committed, forwarder.timeout_s)
        if committed is not None and log.log_start_offset <= committed <= log.log_end_offset:
            return FollowStart(Format.PLAIN, committed)
        return FollowStart(Format.PLAIN, log.log_start_offset if reset == "earliest" else log.log_end_offset)

    async def _leader_start(self, node: Node, forwarder: Forwarder) -> tuple[int | None, str]:
        """The group's commit for ``node``'s partition (None: none) and its ``auto.offset.reset``, as the leader of
        its offsets partition shows them."""
        leader_of = self._leader_of(node.group)
        offset = await forwarder.read_group_file(Node(Kind.GROUP_OFFSET, node.topic, node.partition,
                                                      group=node.group), leader_of)  # fmt: skip
        config = await forwarder.read_group_file(Node(Kind.GROUP_CONFIG, group=node.group), leader_of)
        committed = None if offset is None else int(offset.split()[0])
        reset = "latest"
        for line in (config or b"").decode().splitlines():
            key, _, value = line.partition("=")
            if key == AUTO_OFFSET_RESET:
                reset = value.strip()
        return committed, reset

    async def _reach(self, node: Node, offset: int, timeout_s: float) -> None:
        """Wait until this replica of ``node``'s partition holds ``offset`` (a commit made on the leader beyond what
        it replicated yet); NotShownHere (ETIMEDOUT) after ``timeout_s``."""
        log = self.store.log(node.topic, node.partition)
        with trio.move_on_after(timeout_s):
            while log.log_end_offset < offset:
                await trio.sleep(REACH_POLL_S)
            return
        raise NotShownHere(f"{node}: the group's commit at {offset} is beyond this replica's log end "
                           f"{log.log_end_offset} after request.timeout.ms")  # fmt: skip

    # --- group follow -------------------------------------------------------------------------------------------

    async def read_follow(self, h: FollowHandle, off: int, size: int) -> bytes:
        """A read of a group ``follow``: the stream's bytes; once everything rendered so far is returned, what it
        delivered moves to the stream's position."""
        data = await self.follows.read(h, off, size)
        delivery = self._deliveries.get(h)
        if delivery is not None and h.view is None and not h.pending:
            delivery.delivered = h.position
        return data

    async def closed(self, h: Handle) -> None:
        """A group ``follow`` closed: commit what it delivered (errors are logged: a close has no answer)."""
        if not isinstance(h, FollowHandle):
            return
        delivery = self._deliveries.pop(h, None)
        if delivery is not None and delivery.delivered != delivery.committed:
            await self._auto_commit(delivery)

    async def _auto_commit(self, d: _Delivery) -> None:
        try:
            forwarder = self._forwarding()
            if forwarder is not None:  # made by the leader of the group's offsets partition
                node = Node(Kind.GROUP_OFFSET, d.topic, d.partition, group=d.group)
                await forwarder.commit(node, d.delivered, self._leader_of(d.group))
            else:
                await self.commit(d.group, d.topic, d.partition, d.delivered, "", flush=True)
            d.committed = d.delivered
        except Exception as exc:
            _log.warning("group %s: auto-commit of %s-%d at %d failed: %s", d.group, d.topic, d.partition,
                         d.delivered, exc)  # fmt: skip
        d.committed_at = trio.current_time()

    async def watch(self) -> None:
        """Auto-commits as they fall due (every WATCH_INTERVAL_S while a group follow is open), and a background
        catch-up every REFRESH_INTERVAL_S (for .logfs/metrics). With no group follow open it sleeps until the next
        catch-up or the next open: an idle mount wakes once a second here, not ten times. A task of the server's
        nursery; runs until cancelled."""
        refreshed = trio.current_time()
        while True:
            if self._deliveries:
                await trio.sleep(WATCH_INTERVAL_S)
            else:
                self._delivery_began = trio.Event()
                with trio.move_on_at(refreshed + REFRESH_INTERVAL_S):
                    await self._delivery_began.wait()
            now = trio.current_time()
            for d in list(self._deliveries.values()):
                interval_s = self.configs.get(d.group).auto_commit_interval_ms / 1000
                if d.delivered != d.committed and now - d.committed_at >= interval_s:
                    await self._auto_commit(d)
            if now - refreshed >= REFRESH_INTERVAL_S:
                refreshed = now
                try:
                    await self.catch_up()
                except Exception as exc:
                    _log.warning("consumer offsets: catching up failed: %s", exc)

    # --- writes -------------------------------------------------------------------------------------------------

    async def lines(self, h: WriteHandle, lines: list[bytes]) -> None:
        """Complete lines written to ``offset`` (each a commit) or ``config``."""
        node = h.node
        if node.kind is Kind.GROUP_CONFIG:
            text = b"\n".join(lines).decode("utf-8", "replace")
            await self._write_thread(self.configs.set, node.group, text)
            return
        parsed = [parse_commit(line) for line in lines]  # all checked before any is written
        for offset, metadata in parsed:
            p, next_offset = await self.commit(node.group, node.topic, node.partition, offset, metadata,
                                               flush=h.sync)  # fmt: skip
            h.touched[p] = max(h.touched.get(p, 0), next_offset)
        if h.sync and h.touched:
            await self.fsync(h)

    async def commit(
        self, group: str, topic: str, partition: int, offset: int, metadata: str, *, flush: bool
    ) -> tuple[int, int]:
        """Append one commit as leader; (the ``__consumer_offsets`` partition, the offset after the record)."""
        replication = self._leader()
        log = self.store.log(topic, partition)
        check_commit_offset(log, topic, partition, offset)
        async with self._create_lock:
            await create_internal_topic(self.store, self._write_thread, self._topics_changed, OFFSETS_TOPIC,
                                        ensure_offsets_topic)  # fmt: skip
        return await self._append(replication, group, commit_batch(group, [(topic, partition, offset, metadata)],
                                                                   now_ms()), flush)  # fmt: skip

    async def _append(self, replication: LeaderReplication, group: str, batch: bytes, flush: bool) -> tuple[int, int]:
        p = partition_for_group(group, len(self.store.partitions(OFFSETS_TOPIC)))
        end = await append_internal(replication, self.partitions, self._write_thread, OFFSETS_TOPIC, p, batch,
                                    flush=flush)  # fmt: skip
        await self.catch_up(group)
        return p, end

    async def fsync(self, h: WriteHandle) -> None:
        """acks=all for the commits ``h`` wrote: flushed, then replicated to the ISR."""
        if not h.touched or h.node.kind is not Kind.GROUP_OFFSET:
            return
        for p in sorted(h.touched):
            await self._write_thread(self.store.log(OFFSETS_TOPIC, p).flush_records)
        await self._leader().wait_replicated(OFFSETS_TOPIC, dict(h.touched), self.store.config.request_timeout_ms)

    async def delete(self, group: str, caller: Caller, forwarder: Forwarder | None = None) -> None:
        """rmdir of a group by ``caller`` (its owner's or root's, on a shared mount): a tombstone per commit (flushed,
        replicated), and its settings and owner forgotten. ENOENT for a group with neither. With ``forwarder`` (a
        node that does not lead) it is made by the leader of the group's offsets partition, which checks the caller
        against the owner it holds, and answered once this node's replica no longer shows the group's commits."""
        if self.replication is None and forwarder is not None:
            await self._delete_through(group, caller, forwarder)
            return
        replication = self._leader()
        self.access.check_group_owner(caller, group)
        await self.catch_up(group)
        keys = sorted(self.offsets.commits(group))
        if not keys and group not in self.configs.groups():
            raise NoEntry(f"no group {group!r}")
        if keys:
            p, end = await self._append(replication, group, tombstone_batch(group, keys, now_ms()), True)
            await replication.wait_replicated(OFFSETS_TOPIC, {p: end}, self.store.config.request_timeout_ms)
        await self._write_thread(self.configs.delete, group)
        await self._write_thread(self.store.owners.forget, Owners.group_file(group))
        self.tree.invalidate_attributes_below(Node(Kind.GROUP, group=group))  # unclaimed again
        _log.info("deleted group %s (%d commit(s))", group, len(keys))


    async def _delete_through(self, group: str, caller: Caller, forwarder: Forwarder) -> None:
        """:meth:`delete` on the leader of the group's offsets partition (a ``delete-group`` line of its ``.dirs``);
        then wait until this node's replica shows the tombstones (NotShownHere, ETIMEDOUT, after
        ``request.timeout.ms``: deleted there, not shown here yet)."""
        leader_of = self._leader_of(group)
        await forwarder.change(DirChange("delete-group", uid=caller.uid, group=group), None, leader_of)
        deadline = trio.current_time() + forwarder.timeout_s
        while True:
            await self.catch_up(group)
            if not self.offsets.commits(group):
                break
            if trio.current_time() >= deadline:
                raise NotShownHere(f"group {group!r}: deleted on the leader, its commits still shown here after "
                                   f"request.timeout.ms ({forwarder.timeout_s * 1000:.0f} ms)")  # fmt: skip
            if forwarder.replicate is not None:
                forwarder.replicate()
            await trio.sleep(DELETE_SETTLE_POLL_S)
        self._owner_changed(group)
        _log.info("deleted group %s through the leader", group)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
