"""The FUSE request handlers: one ``Operations`` class, shaped like pyfuse3's ``examples/tmpfs.py``.

Each handler is thin: it resolves names with ``mount/tree.py``, hands the read files to ``mount/reads.py``
(lookups of ``at/``, ``follow/`` and fetch names, attributes, opens, reads, polls) and writes to ``mount/writes.py``
(framing, encoding, appending), raises typed errors (``mount/errors.py`` and the core's) and leaves errno to
``mount/errno.py`` (every handler is wrapped by ``@handler``, so pyfuse3 only ever sees an errno: it would end the
filesystem on any other exception).

Theory of operation.

* **Threads.** Handlers run on the trio thread and never block on the disk: appends, flushes, renders and reads of
  views run in worker threads (``trio.to_thread.run_sync``) under two CapacityLimiters, one for writers and one
  for readers, so a burst of cold reads cannot starve appends or the other way round.
* **Appends.** A write request is framed on the trio thread (a memcpy), then its records are encoded and appended
  in one worker call. One append at a time per partition (``PartitionState.append_lock``, waited on in trio, not
  in a worker thread); readers never take that lock. Each append is stamped with the mount's leader epoch and then
  the replication HW rule applies (``core/replication/replica.py``: with no followers the HW moves to the LEO at
  once); a HW move sets the partition's event, which wakes ``follow/`` readers, pollers and acks=all waits.
  Every handle serialises its own requests with a FIFO lock taken before its first await, so the pieces of one
  write(2) that the kernel split are framed in the order they were sent.
* **Acknowledgement.** write(2) returns once the records are in the log (acks=1); fsync(2) flushes the partitions
  the handle appended to (``Log.flush`` in a worker thread), then waits in trio until their HW passes what the
  handle wrote (acks=all, ``mount/replication.py``). A handle opened with O_SYNC or O_DSYNC checks the ISR first
  (EAGAIN) and then does both after each append. Write files get a fresh inode per lookup (``mount/tree.py``), so
  one handle's fsync never holds the inode lock another writer needs.
* **Replication.** A lookup under ``.logfs/fetch/`` is a follower's fetch (``mount/replication.py``): recorded,
  long-polled at the log end, answered as a fresh immutable inode; ``.logfs/fetch/<id>/.session`` opened O_RDWR is
  a fetch session for all of a follower's partitions (``mount/session.py``: writes are fetches, reads answers); the
  ISR shrink timer is a task of the server's nursery (:meth:`watch_replicas`).
* **Caching.** ``at/`` files are immutable (fresh inode, kernel page cache kept, long attribute timeout); ``hw/``
  files report their exact size with ``attr_timeout=0`` and keep the page cache only once their segment is closed;
  ``state``, ``config``, ``.logfs/metrics``, ``follow/`` and every write file use ``direct_io`` (their bytes change
  while their size does not, or they are streams).
* **Follow.** A ``follow/`` read that has nothing to return waits on the partition's event (``mount/reads.py``:
  one fresh ``trio.Event`` per HW advance, a watcher task for signals, EINTR). Each waiting read holds one pyfuse3
  task; the server raises ``max_tasks`` by ``max.follow.readers`` and open() refuses one reader more with EMFILE.
* **A follower's mount** (``Operations(follower=…)``, ``logfs follow --mount``): the same tree, read-only. Every
  change answers EROFS (the server mounts it ``ro`` too, so the kernel refuses most before they arrive); the HW is
  the follower's (min(leader HW, own LEO)), so every view is bounded by it; the follower calls :meth:`notify_hw`
  when its HW moves; ``state`` shows role "follower" with the leader epoch and ISR of its last fetch.
* **committed/** (read_committed): the same views bounded by the last stable offset instead of the HW, with the
  batches of aborted transactions (and, in ``.kafka``, control batches) left out (``mount/render/views.py``).
* **Sharing** (``--allow-other``): each node's owner and mode, and what logfs checks beyond the kernel
  (``mount/access.py``).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import pyfuse3
import trio

from logfs.core.format.framing import LineFramer
from logfs.core.names import is_transactional_id
from logfs.core.replication.leaderreplicas import LeaderReplicas
from logfs.core.replication.promotion import latest_partition_epoch
from logfs.core.store import Store
from logfs.mount.access import Access, Caller, caller_of, replica_user_ids
from logfs.mount.coordinatorview import ANY_COORDINATOR, coordinator_of
from logfs.mount.directories import Directories
from logfs.mount.errno import errno_name, handler
from logfs.mount.errors import (
    BadFileHandle,
    IsADirectory,
    NoEntry,
    NotPermitted,
    ReadOnlyMount,
    WrongAccessMode,
)
from logfs.mount.follow import FollowReaders
from logfs.mount.forwarding import Forwarder, ForwardHandle
from logfs.mount.groups import GROUP_WRITE_KINDS, Groups
from logfs.mount.handles import FollowHandle, Handle, Partitions, WriteHandle
from logfs.mount.internal import refuse_internal
from logfs.mount.metrics import Metrics
from logfs.mount.names import decode_name
from logfs.mount.nodes import FORWARDED_KINDS, GROUP_KINDS, Kind, Node, parent_of
from logfs.mount.openwrite import open_write_handle
from logfs.mount.reads import Reader
from logfs.mount.refusals import refusal_target
from logfs.mount.render.rangeview import RangeView
from logfs.mount.render.views import RenderCache
from logfs.mount.replication import FETCH_TASKS_PER_FOLLOWER, LeaderReplication
from logfs.mount.session import FetchSession, SessionHandle
from logfs.mount.statusfiles import ReplicaView
from logfs.mount.transactions import Transactions
from logfs.mount.tree import Entry, Tree
from logfs.mount.writes import Writer

_log = logging.getLogger(__name__)

T = TypeVar("T")

READ_THREADS = 8  # worker threads rendering or reading views at once
WRITE_THREADS = 4  # worker threads appending or flushing at once (one per partition at a time)
EXTRA_TASKS = 128  # pyfuse3 tasks beyond max.follow.readers, for everything else
# where a mkdir or rmdir on a node that does not lead is made by the leader (mount/forwarding.py): topics, partitions,
# transactions' begins, consumer groups' deletions
_FORWARDED_DIR_PARENTS = frozenset({Kind.ROOT, Kind.TOPIC, Kind.TXN_DIR, Kind.GROUPS_DIR})


class Operations(pyfuse3.Operations):
    """The filesystem. Build inside ``trio.run`` (it makes trio primitives). See the module docstring."""

    supports_dot_lookup = True
    enable_writeback_cache = False  # never: the kernel would re-send merged pages and an appender store duplicates

    def __init__(
        self,
        store: Store,
        *,
        max_follow_readers: int | None = None,
        follower: ReplicaView | None = None,
        leader_epoch: int | None = None,
    ) -> None:
        """``follower`` makes this a follower's mount (``logfs follow --mount``): read-only (EROFS for every change;
        the server also mounts it ``ro``), its HW left as the follower sets it, ``state`` with role "follower".
        Otherwise this node leads every partition in ``leader_epoch`` (``core/replication/promotion.py`` starts one;
        None: the store's latest epoch, for a caller that starts none). ``mount.allow.other``: a mount shared with other
        users (mount/access.py)."""
        super().__init__()
        self.store = store
        self.follower = follower
        self.read_only = follower is not None
        self.tree = Tree(store, on_release=self._release_entry)
        self.metrics = Metrics()
        self.max_follow_readers = max_follow_readers or store.config.max_follow_readers
        self._handles: dict[int, Handle] = {}
        self._next_fh = 1
        self.partitions = Partitions()
        self._read_limiter = trio.CapacityLimiter(READ_THREADS)
        self._write_limiter = trio.CapacityLimiter(WRITE_THREADS)
        self.permissions = Access(store, shared=store.config.mount_allow_other, uid=os.getuid(), gid=os.getgid(),
                                  replica_users=replica_user_ids(store.config.replica_users),
                                  write_thread=self._write_thread)  # fmt: skip
        # The leader's replication: taking every partition applies the HW rule at once (with no followers the HW is
        # the LEO: after a crash the checkpointed HW lags, and this node's disk is all the ISR there is).
        self.replication = None if follower is not None else LeaderReplication(
            LeaderReplicas(store, max(latest_partition_epoch(store), 0) if leader_epoch is None else leader_epoch),
            self.partitions, read_thread=self._read_thread, write_thread=self._write_thread,
        )  # fmt: skip
        self.writer = Writer(
            store, self.partitions, self.metrics, read_thread=self._read_thread, write_thread=self._write_thread,
            replication=self.replication, access=self.permissions,
        )  # fmt: skip
        self.cache = RenderCache()
        self.follows = FollowReaders(store, self.partitions, self.metrics, self.cache, read_thread=self._read_thread,
                                     max_readers=self.max_follow_readers,
                                     max_per_user=store.config.max_follow_readers_per_user)  # fmt: skip
        self.reader = Reader(
            store, self.tree, self.partitions, self.metrics, self._handles, self.follows, self.cache,
            read_thread=self._read_thread, write_thread=self._write_thread, replication=self.replication,
            follower=follower, access=self.permissions,
        )  # fmt: skip
        self.transactions = None if self.replication is None else Transactions(
            store, self.tree, self.partitions, self.replication, write_thread=self._write_thread,
            topics_changed=self.writer.topics_changed,
        )  # fmt: skip
        self.writer.transactions = self.transactions
        self.tree.uses_coordinator_view = self._uses_coordinator_view
        self.permissions.coordinator_view = lambda: self.tree.coordinator_view
        self.groups = Groups(store, self.tree, self.partitions, self.follows, self.replication, self.permissions,
                             read_thread=self._read_thread, write_thread=self._write_thread,
                             topics_changed=self.writer.topics_changed)  # fmt: skip
        self.writer.groups = self.groups
        self.reader.status.extra_metrics = self.groups.render_metrics
        self.dirs = Directories(
            store, self.tree, self.reader, self.writer, self.groups, self.permissions, write_thread=self._write_thread
        )
        # writes to a partition this node does not lead, forwarded to its leader (a cluster node sets the target)
        self.forwarder = self.writer.forwarder = self.groups.forwarder = Forwarder(store.config.request_timeout_ms)

    @property
    def max_tasks(self) -> int:
        """pyfuse3's task limit: every follow reader may wait in one, and so may each follower's long-polling
        fetches, with room for everything else (counted for every replica: with ZooKeeper a node may come to lead)."""
        fetches = FETCH_TASKS_PER_FOLLOWER * (len(self.store.config.replica_ids) - 1)
        return self.max_follow_readers + fetches + EXTRA_TASKS

    # --- plumbing -------------------------------------------------------------------------------------------------

    async def _read_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(functools.partial(fn, *args), limiter=self._read_limiter)

    async def _write_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(functools.partial(fn, *args), limiter=self._write_limiter)

    def _handle(self, fh: int) -> Handle:
        h = self._handles.get(fh)
        if h is None:
            raise BadFileHandle(f"no handle {fh}")
        return h

    def _new_fh(self, h: Handle) -> int:
        fh = self._next_fh
        self._next_fh += 1
        self._handles[fh] = h
        self.tree.opened(h.entry)
        return fh

    def count_error(self, code: int) -> None:
        """Called by ``@handler`` for every errno answered (``logfs_errors_total``)."""
        self.metrics.error(errno_name(code))

    def refusal_target(self, handler: str, args: tuple[Any, ...]) -> tuple[str, str, int | None] | None:
        """What a failed request refused, for ``@handler``'s refusal log and ``.logfs/errors`` (mount/refusals.py)."""
        return refusal_target(handler, args, self._handles, self.tree)

    def _release_entry(self, entry: Entry) -> None:
        if isinstance(entry.payload, RangeView):
            entry.payload.close()

    async def begin_shutdown(self, timeout_s: float = 1.0) -> None:
        """Wake every waiting follow/ reader and give them up to ``timeout_s`` to answer EOF while the session is
        still up (after ``pyfuse3.terminate()`` their readers would see ECONNABORTED instead)."""
        if self.replication is not None:
            self.replication.begin_shutdown()
        await self.follows.begin_shutdown(timeout_s)

    async def watch_signals(self) -> None:
        """EINTR for waiting follow/ readers whose opener got a signal (``mount/follow.py``). A task of the server's
        nursery; runs until cancelled."""
        await self.follows.watch_signals()

    async def watch_replicas(self) -> None:
        """The leader's ISR shrink timer (``mount/replication.py``); returns at once without followers. A task of the
        server's nursery."""
        if self.replication is not None:
            await self.replication.watch_isr()

    async def watch_transactions(self) -> None:
        """Complete transactions a crash left decided, then time out forgotten ones (``mount/transactions.py``). A
        task of the server's nursery; returns at once in a follower's mount."""
        if self.transactions is not None:
            await self.transactions.watch()

    def set_role(self, replication: LeaderReplication | None, follower: ReplicaView | None) -> None:
        """Switch this mount's role in place (with ZooKeeper, ``logfs/cluster/node.py``): lead with ``replication``,
        or serve read-only with ``follower`` as what ``state`` shows. The mount point stays mounted; open write
        handles answer EROFS from their next write on. Trio thread."""
        self.replication = self.writer.replication = self.reader.replication = self.groups.replication = replication
        self.reader.status.replication = replication
        self.follower = self.reader.status.follower = follower
        self.read_only = replication is None
        self.transactions = self.writer.transactions = None if replication is None else Transactions(
            self.store, self.tree, self.partitions, replication, write_thread=self._write_thread,
            topics_changed=self.writer.topics_changed,
        )  # fmt: skip
        self.tree.forget_coordinator_view()

    async def watch_groups(self) -> None:
        """Consumer groups' auto-commits and background catch-up (``mount/groups.py``). A task of the server's
        nursery."""
        await self.groups.watch()

    def notify_hw(self, topic: str, partition: int) -> None:
        """The HW of a partition moved outside the mount's own writes (a follower's fetch): wake its follow/ readers
        and pollers. Trio thread."""
        self.partitions.get(topic, partition).notify()

    def topic_deleted(self, topic: str) -> None:
        """A topic was deleted outside the mount's own writes (a follower mirrored its leader): wake its readers and
        drop the kernel's cached entry of it. Trio thread."""
        self.partitions.drop_topic(topic)
        pyfuse3.invalidate_entry_async(pyfuse3.ROOT_INODE, topic.encode(), ignore_enoent=True)

    def _refuse_if_read_only(self) -> None:
        if self.read_only:
            raise ReadOnlyMount("a follower's mount changes nothing")

    def close(self) -> None:
        """After the main loop: release every view still held."""
        for fh, h in self._handles.items():
            self.reader.release(fh, h)
        self._handles.clear()
        self.tree.release_all()
        self.metrics.refusals.close()

    # --- lookups --------------------------------------------------------------------------------------------------

    @handler
    async def lookup(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        parent = self.tree.entry(parent_inode).node
        text = decode_name(name)
        if text == ".":
            node = parent
        elif text == "..":
            node = parent_of(parent)
        else:
            if self._asks_coordinator(parent):
                await self._ask_coordinator(parent, text)
            node = self.tree.resolve(parent, text)
        if node.kind.is_fetch:
            self._check_fetch(node, caller_of(ctx))
        if not node.kind.fresh:
            self.reader.check_exists(node)
            if node.kind is Kind.HW_FILE:
                self.reader.hw_file(node)
            inode = self.tree.stable_inode(node)
            return await self.reader.attributes(self.tree.entry(inode))
        if node.kind is Kind.GROUP_FOLLOW:
            entry = await self.groups.lookup_follow(node)
        else:
            entry = await self.reader.lookup_fresh(node)
        try:
            attr = await self.reader.attributes(entry)
        except BaseException:
            self.tree.forget(entry.inode, 0)
            raise
        self.tree.remember(entry)
        return attr

    def _uses_coordinator_view(self) -> bool:
        """A node that leads shows its own transactions; a cluster node that does not, what the coordinator's node
        shows it (``mount/coordinatorview.py``); a stand-alone follower, its own store's (none)."""
        return self.transactions is None and self.forwarder.enabled

    def _asks_coordinator(self, directory: Node) -> bool:
        """Whether a name in ``directory`` is a transaction or a label that only the transaction coordinator's node
        knows: on a node that does not lead, which forwards (``mount/coordinatorview.py``)."""
        return (directory.kind in (Kind.TXN_DIR, Kind.LABELS_DIR) and not directory.forwarded
                and self.tree.coordinator_view is not None)  # fmt: skip

    async def _ask_coordinator(self, directory: Node, name: str) -> None:
        """Look ``name`` up on the coordinator's node, and keep what it shows for the tree and the access rules (a
        name no transaction or label can have is not asked: the tree answers ENOENT)."""
        view = self.tree.coordinator_view
        if view is None or not is_transactional_id(name):
            return
        if directory.kind is Kind.TXN_DIR:
            view.seen(name, await self.forwarder.transaction_owner(name, coordinator_of(name)))
        elif not view.has_label(name) and await self.forwarder.has_label(name, ANY_COORDINATOR):
            view.label_seen(name)

    def _transaction_changed(self, transactional_id: str, owner: tuple[int, int] | None) -> None:
        """``transactional_id`` is now as its coordinator shows it (``owner``; None: ended, as a ``control``
        written through this node ends it): the view here too, and the kernel forgets its entry, so that the next
        path walk sees it so (not a cached owner for up to 1 s)."""
        if self.tree.coordinator_view is not None:
            self.tree.coordinator_view.seen(transactional_id, owner)
        txn_dir = self.tree.stable_inode(Node(Kind.TXN_DIR))
        pyfuse3.invalidate_entry_async(txn_dir, transactional_id.encode(), ignore_enoent=True)

    def _check_fetch(self, node: Node, caller: Caller) -> None:
        """``.logfs/fetch/`` is a leader's (ENOENT in a follower's mount), for its followers only (EPERM), and on a
        shared mount for the users of ``replica.users`` only (EACCES: a fetch moves the ISR and the HW)."""
        if self.replication is None:
            raise NoEntry("a follower's mount serves no fetches")
        self.permissions.check_replica_user(caller)
        self.replication.check_replica(node)

    @handler
    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        for inode, count in inode_list:
            self.tree.forget(inode, count)

    @handler
    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return await self.reader.attributes(self.tree.entry(inode))

    # --- directories ----------------------------------------------------------------------------------------------

    @handler
    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        node = self.tree.entry(inode).node
        if node.kind is Kind.TXN_DIR:
            self.tree.refuse_forwarded_here(node)  # the listing of its twin is the next leader's to answer
        if node.kind is Kind.TXN_DIR and self._asks_coordinator(node):  # the coordinator's open transactions
            listed = await self.forwarder.open_transactions(ANY_COORDINATOR)
            if self.tree.coordinator_view is not None:  # (still not leading)
                self.tree.coordinator_view.listed(listed)
        fh = self._next_fh
        self._next_fh += 1
        await self.dirs.open(fh, inode)  # listed as of opendir (mount/directories.py)
        return fh

    @handler
    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        await self.dirs.reply(fh, start_id, token)

    @handler
    async def releasedir(self, fh: int) -> None:
        self.dirs.release(fh)

    @handler
    async def mkdir(
        self, parent_inode: int, name: bytes, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        forwarder = self._forwarding(parent_inode)
        if forwarder is None:
            self._refuse_if_read_only()
        return await self.dirs.make(parent_inode, name, mode, caller_of(ctx), self.transactions, forwarder)

    @handler
    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        forwarder = self._forwarding(parent_inode)
        if forwarder is None:
            self._refuse_if_read_only()
        await self.dirs.remove(parent_inode, name, caller_of(ctx), forwarder)

    def _forwarding(self, parent_inode: int) -> Forwarder | None:
        """The forwarder, for a mkdir or rmdir of a topic or a partition, the begin of a transaction or the rmdir of a
        consumer group, on a node that does not lead (made on the leader, mount/forwarding.py); None when this node
        makes it itself, or refuses it."""
        if not (self.read_only and self.forwarder.enabled):
            return None
        parent = self.tree.entry(parent_inode).node
        return self.forwarder if parent.kind in _FORWARDED_DIR_PARENTS and not parent.forwarded \
            else None  # fmt: skip

    # --- refusals: nothing an ordinary command does may destroy data ----------------------------------------------

    @handler
    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self._refuse_if_read_only()
        raise NotPermitted("unlink")

    @handler
    async def rename(self, p_old: int, n_old: bytes, p_new: int, n_new: bytes, flags: int, ctx: Any) -> None:
        self._refuse_if_read_only()
        raise NotPermitted("rename")

    @handler
    async def link(self, inode: int, new_parent: int, new_name: bytes, ctx: Any) -> pyfuse3.EntryAttributes:
        self._refuse_if_read_only()
        raise NotPermitted("link")

    @handler
    async def symlink(self, parent: int, name: bytes, target: bytes, ctx: Any) -> pyfuse3.EntryAttributes:
        self._refuse_if_read_only()
        raise NotPermitted("symlink")

    @handler
    async def mknod(self, parent: int, name: bytes, mode: int, rdev: int, ctx: Any) -> pyfuse3.EntryAttributes:
        self._refuse_if_read_only()
        raise NotPermitted("mknod")

    @handler
    async def create(self, parent: int, name: bytes, mode: int, flags: int, ctx: Any) -> tuple[Any, Any]:
        self._refuse_if_read_only()
        raise NotPermitted("no file can be created here: write to the mount's own files (append, append.jsonl …)")

    @handler
    async def setattr(self, inode: int, attr: Any, fields: Any, fh: int | None, ctx: Any) -> pyfuse3.EntryAttributes:
        """chmod, chgrp and chown of the mount root, a topic or a consumer group on a shared mount (mount/access.py);
        NotPermitted for the rest (truncate, utimes, and every other file)."""
        self._refuse_if_read_only()
        entry = self.tree.entry(inode)
        await self.permissions.setattr(entry.node, attr, fields, caller_of(ctx))
        self.tree.invalidate_attributes_below(entry.node, inode)  # the nodes taking their bits from it: asked again
        return await self.reader.attributes(entry)

    @handler
    async def statfs(self, ctx: pyfuse3.RequestContext) -> pyfuse3.StatvfsData:
        st = await self._read_thread(os.statvfs, self.store.path)
        data = pyfuse3.StatvfsData()
        data.f_bsize, data.f_frsize = st.f_bsize, st.f_frsize
        data.f_blocks, data.f_bfree, data.f_bavail = st.f_blocks, st.f_bfree, st.f_bavail
        data.f_files, data.f_ffree, data.f_favail = st.f_files, st.f_ffree, st.f_favail
        data.f_namemax = 255
        return data

    # --- open and close -------------------------------------------------------------------------------------------

    @handler
    async def open(self, inode: int, flags: int, ctx: pyfuse3.RequestContext) -> pyfuse3.FileInfo:
        entry = self.tree.entry(inode)
        node = entry.node
        kind = node.kind
        self.reader.check_exists(node)
        access = flags & os.O_ACCMODE
        if kind.is_dir:
            raise IsADirectory(str(node))
        if kind.write_only and access == os.O_RDONLY:
            raise WrongAccessMode(f"{node} is for writing")
        if kind.read_only and access != os.O_RDONLY:
            raise WrongAccessMode(f"{node} is for reading")
        if kind is Kind.FETCH_SESSION:
            return self._open_session(entry, access, caller_of(ctx))
        if node.forwarded or kind is Kind.FORWARD_DIRS:  # another node's forwarded request (mount/forwarding.py):
            self.permissions.check_replica_user(caller_of(ctx))  # that node checked its caller; this checks its user
            self._refuse_if_read_only()  # a leader's to answer (reads too): that node tries the next leader
        # a change this node makes on the leader, for its own caller (mount/forwarding.py)
        forwards = not node.forwarded and access != os.O_RDONLY and self.read_only and self.forwarder.enabled
        if kind in GROUP_KINDS:
            caller = caller_of(ctx)
            if forwards and kind in GROUP_WRITE_KINDS:
                leader_of = await self.groups.before_forwarding(caller, node, self.forwarder)
                forwarded = await self.forwarder.open(entry, flags, caller, leader_of)
                return pyfuse3.FileInfo(fh=self._new_fh(forwarded), direct_io=True)
            served_here = kind is Kind.GROUP_FOLLOW and self.forwarder.enabled and not node.forwarded
            if (access != os.O_RDONLY or kind is Kind.GROUP_FOLLOW) and not served_here:
                self._refuse_if_read_only()  # commits, and group follow files but on a cluster's node: a leader's
            h, _ = await self.groups.open(entry, access, caller_of(ctx), bool(flags & os.O_DSYNC))
            return pyfuse3.FileInfo(fh=self._new_fh(h), direct_io=True)
        # O_TRUNC changes nothing: writes always append (docs/mount.md, "Files, modes and caching").
        if kind.write_only or (kind is Kind.CONFIG and access != os.O_RDONLY):
            refuse_internal(node.topic)
            if forwards and node.txn:  # a transaction's files: on its coordinator's node, for who began it there
                caller, coordinator = caller_of(ctx), coordinator_of(node.txn)
                owner = await self.forwarder.transaction_owner(node.txn, coordinator)
                view = self.tree.coordinator_view
                if view is not None and view.owner(node.txn) != owner:  # ended, or begun again by someone, there
                    self._transaction_changed(node.txn, owner)
                self.permissions.check_transaction_owner(caller, node.txn, owner)
                forwarded = await self.forwarder.open(entry, flags, caller, coordinator)
                return pyfuse3.FileInfo(fh=self._new_fh(forwarded), direct_io=True)
            if forwards and kind in FORWARDED_KINDS and not node.txn:
                if kind is Kind.CONFIG:
                    self.permissions.check_topic_owner(caller_of(ctx), node.topic, "a config change")
                forwarded = await self.forwarder.open(entry, flags, caller_of(ctx))
                return pyfuse3.FileInfo(fh=self._new_fh(forwarded), direct_io=True)
            if kind not in (Kind.DELETE_TOPIC, Kind.DELETE_RECORDS) or not self.forwarder.enabled:
                self._refuse_if_read_only()  # (a follower's delete-* lines go to the leader: mount/writes.py)
            if kind is Kind.CONFIG and not node.forwarded:
                self.permissions.check_topic_owner(caller_of(ctx), node.topic, "a config change")
            h = open_write_handle(self.store, self.transactions, self.reader, entry, flags, access)
            h.caller = caller_of(ctx)
            return pyfuse3.FileInfo(fh=self._new_fh(h), direct_io=True)
        h, info = await self.reader.open(entry, caller_of(ctx))
        info.fh = self._new_fh(h)
        return info

    def _open_session(self, entry: Entry, access: int, caller: Caller) -> pyfuse3.FileInfo:
        """``.logfs/fetch/<replica id>/.session``: a new fetch session (``mount/session.py``), O_RDWR only."""
        if access != os.O_RDWR:
            raise WrongAccessMode(f"{entry.node} is opened O_RDWR: requests are written, answers read")
        self._check_fetch(entry.node, caller)
        assert self.replication is not None
        session = FetchSession(self.replication, lambda: self.replication, entry.node.replica, self.partitions,
                               self._read_thread)  # fmt: skip
        return pyfuse3.FileInfo(fh=self._new_fh(SessionHandle(entry, session)), direct_io=True, nonseekable=True)

    @handler
    async def flush(self, fh: int) -> None:
        h = self._handle(fh)
        if isinstance(h, ForwardHandle):
            async with h.lock:
                await self.forwarder.flush(h)
            if h.node.kind is Kind.TXN_CONTROL and h.unterminated:  # a last command without a newline, taken there
                h.unterminated = False
                self._transaction_changed(h.node.txn, None)
            if h.node.kind is Kind.CONFIG:  # read-your-writes: a cat of config here shows the change
                await self.forwarder.settle_config(h, lambda: self.reader.status.render_config(h.node.topic))
        elif isinstance(h, WriteHandle):
            async with h.lock:
                await self.writer.tail(h)

    @handler
    async def release(self, fh: int) -> None:
        h = self._handles.pop(fh, None)
        if h is None:
            return
        try:
            if isinstance(h, SessionHandle):
                if h.session is not None:
                    h.session.close()
            elif isinstance(h, ForwardHandle):
                async with h.lock:
                    await self.forwarder.release(h)
            elif isinstance(h, WriteHandle):
                if isinstance(h.framer, LineFramer) and h.framer.pending_bytes:
                    async with h.lock:
                        await self.writer.tail(h)  # flush normally did this; release errors are discarded
            else:
                self.reader.release(fh, h)
                await self.groups.closed(h)  # a group follow commits what it delivered
        finally:
            self.tree.closed(h.entry)

    @handler
    async def fsync(self, fh: int, datasync: bool) -> None:
        h = self._handle(fh)
        if isinstance(h, ForwardHandle):
            async with h.lock:
                await self.forwarder.fsync(h)
            return
        if not isinstance(h, WriteHandle):
            return
        async with h.lock:
            if h.node.kind in GROUP_KINDS:
                await self.groups.fsync(h)
            else:
                await self.writer.fsync(h)

    # --- reads and writes -----------------------------------------------------------------------------------------

    @handler
    async def read(self, fh: int, off: int, size: int) -> bytes:
        h = self._handle(fh)
        if isinstance(h, SessionHandle) and h.session is not None:
            return cast(bytes, await h.session.read(size))  # pyfuse3 replies from any contiguous buffer
        if isinstance(h, FollowHandle) and h.node.kind is Kind.GROUP_FOLLOW:
            return await self.groups.read_follow(h, off, size)
        if isinstance(h, ForwardHandle):
            async with h.lock:  # a write that moves the handle closes the descriptor
                return await self.forwarder.read(h, size)
        return await self.reader.read(h, off, size)

    @handler
    async def poll(self, inode: int, fh: int, poll_handle: Any, ctx: pyfuse3.RequestContext) -> int:
        return self.follows.poll(fh, self._handles.get(fh), poll_handle)

    @handler
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        h = self._handle(fh)
        if isinstance(h, SessionHandle) and h.session is not None:
            await h.session.write(buf)
            return len(buf)
        if isinstance(h, ForwardHandle):
            async with h.lock:  # forwarded in the order they arrived
                await self.forwarder.write(h, buf)
            if h.node.kind is Kind.TXN_CONTROL:  # its coordinator took the command (at flush, without a newline)
                h.unterminated = not buf.endswith(b"\n")
                if not h.unterminated:
                    self._transaction_changed(h.node.txn, None)
            return len(buf)
        if not isinstance(h, WriteHandle):
            raise BadFileHandle(f"{h.node} is not open for writing")
        async with h.lock:  # taken before the first await: requests are framed in the order they arrived
            await self.writer.write(h, buf)
        return len(buf)
