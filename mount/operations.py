"""The FUSE request handlers: one ``Operations`` class, shaped like pyfuse3's ``examples/tmpfs.py``.

Each handler is thin: it resolves names with ``mount/tree.py``, renders with ``mount/views.py``, hands writes to
``mount/writes.py`` (framing, encoding, appending) and leaves errno to ``mount/errno.py`` (every handler is wrapped
by ``@handler``, so nothing but ``FUSEError`` ever reaches pyfuse3, which would end the filesystem on anything
else).

Theory of operation.

* **Threads.** Handlers run on the trio thread and never block on the disk: appends, flushes, renders and reads of
  views run in worker threads (``trio.to_thread.run_sync``) under two CapacityLimiters, one for writers and one
  for readers, so a burst of cold reads cannot starve appends or the other way round.
* **Appends.** A write request is framed on the trio thread (a memcpy), then its records are encoded and appended
  in one worker call. One append at a time per partition (``PartitionState.append_lock``, waited on in trio, not
  in a worker thread); readers never take that lock. Each append is stamped with the mount's leader epoch and then
  the replication HW rule applies (``core/replication/replica.py``: with no followers the HW moves to the LEO at once);
  a HW
  move sets the partition's event, which wakes ``follow/`` readers, pollers and acks=all waits.
  Every handle serialises its own requests with a FIFO lock taken before its first await, so the pieces of one
  write(2) that the kernel split are framed in the order they were sent.
* **Acknowledgement.** write(2) returns once the records are in the log (acks=1); fsync(2) flushes the partitions
  the handle appended to (``Log.flush`` in a worker thread), then waits in trio until their HW passes what the
  handle wrote (acks=all, ``mount/replication.py``). A handle opened with O_SYNC or O_DSYNC checks the ISR first
  (EAGAIN) and then does both after each append. Write files get a fresh inode per lookup (``mount/tree.py``), so
  one handle's fsync never holds the inode lock another writer needs.
* **Replication.** A lookup under ``.logfs/fetch/`` is a follower's fetch (``mount/replication.py``): recorded,
  long-polled at the log end, answered as a fresh immutable inode; the ISR shrink timer is a task of the server's
  nursery (:meth:`watch_replicas`).
* **Caching.** ``at/`` files are immutable (fresh inode, kernel page cache kept, long attribute timeout); ``hw/``
  files report their exact size with ``attr_timeout=0`` and keep the page cache only once their segment is closed;
  ``state``, ``config``, ``.logfs/metrics``, ``follow/`` and every write file use ``direct_io`` (their bytes change
  while their size does not, or they are streams).
* **Follow.** A ``follow/`` read that has nothing to return waits on the partition's event (one fresh
  ``trio.Event`` per HW advance, at most ``FOLLOW_WAIT_S`` before it looks again); one watcher task checks the
  openers of all waiting reads every ``signals.CHECK_INTERVAL_S`` (pyfuse3 drops the kernel's interrupt) and
  cancels the wait of a reader whose opener has a deliverable signal pending, which then answers EINTR. Each
  waiting read holds one pyfuse3 task; the server raises ``max_tasks`` by ``max.follow.readers`` and open() refuses
  one reader more with EMFILE.

* **A follower's mount** (``Operations(follower=…)``, ``logfs follow --mount``): the same tree, read-only. Every
  change answers EROFS (the server mounts it ``ro`` too, so the kernel refuses most before they arrive); the HW is
  the follower's (min(leader HW, own LEO)), so every view is bounded by it; the follower calls :meth:`notify_hw`
  when its HW moves; ``state`` shows role "follower" with the leader epoch and ISR of its last fetch.

* **committed/** (read_committed): the same views bounded by the last stable offset instead of the HW, with the
  batches of aborted transactions (and, in ``.kafka``, control batches) left out (``mount/views.py``). A
  ``committed/follow/`` reader waits on every change of its partition, not only HW moves, and re-reads the LSO.

Threads: every method runs on the trio thread (pyfuse3 calls them there).
"""

from __future__ import annotations

import bisect
import errno
import functools
import logging
import os
import select
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

import pyfuse3
import trio

from logfs.core.config import render_config
from logfs.core.log.log import Log
from logfs.core.replication.promotion import latest_partition_epoch
from logfs.core.replication.replica import LeaderReplicas
from logfs.core.store import Store
from logfs.mount import signals
from logfs.mount.errno import errno_name, handler
from logfs.mount.framing import (
    BatchFramer,
    LineFramer,
)
from logfs.mount.handles import FollowHandle, Handle, HwHandle, Partitions, SnapshotHandle, ViewHandle, WriteHandle
from logfs.mount.metrics import Metrics, PartitionGauges, render
from logfs.mount.replication import FetchSnapshot, LeaderReplication
from logfs.mount.transactions import Transactions
from logfs.mount.tree import Entry, Kind, Node, Tree, parse_at_name, parse_follow_name, parse_partition_name
from logfs.mount.views import (
    Format,
    RangeView,
    RenderCache,
    hw_files,
    open_range,
    render_follow_chunk,
    render_state,
    resolve_start,
    view_end,
)
from logfs.mount.writes import Writer, max_batch_bytes

_log = logging.getLogger(__name__)

T = TypeVar("T")

# Attribute and entry cache lifetimes (seconds) handed to the kernel.
STABLE_TIMEOUT_S = 1.0  # directories and fixed names: their inode never changes; a topic deletion invalidates
IMMUTABLE_TIMEOUT_S = 3600.0  # an at/ snapshot's attributes never change (its inode is its own)
HW_SIZES_MAX = 100_000  # remembered sizes of hw/ files by range (forgotten all at once beyond)
MOVING_TIMEOUT_S = 0.0  # sizes that move (hw/, state, config, metrics) and fresh inodes (looked up on every open)

READ_THREADS = 8  # worker threads rendering or reading views at once
WRITE_THREADS = 4  # worker threads appending or flushing at once (one per partition at a time)
READ_BLKSIZE = 128 * 1024  # st_blksize of read files: coreutils read in max(128 KiB, st_blksize) pieces
WRITE_BLKSIZE = 1024 * 1024  # st_blksize of write files: cp and cat then write 1 MiB requests (FUSE's max_write)
FOLLOW_CHUNK_BYTES_MIN = 64 * 1024  # what one follow/ render asks for at least (the rest waits in the handle)
FOLLOW_WAIT_S = 1.0  # the longest a follow/ read waits before looking again (the HW event normally wakes it)
EXTRA_TASKS = 128  # pyfuse3 tasks beyond max.follow.readers, for everything else

# A follower mount's source of what its ``state`` shows: (topic, partition) → (leader epoch, ISR) as the follower's
# last fetch of that partition told it ((-1, ()) before any).
ReplicaView = Callable[[str, int], tuple[int, Sequence[int]]]

_POLL_READY = select.POLLIN | select.POLLRDNORM
_POLL_WRITABLE = select.POLLOUT | select.POLLWRNORM


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
        None: the
        store's latest epoch, for a caller that starts none)."""
        super().__init__()
        self.store = store
        self.follower = follower
        self.read_only = follower is not None
        self.tree = Tree(store, on_release=self._release_entry)
        self.cache = RenderCache()
        # (id of the log, committed, start, end) → size of that hw/ file (see _hw_size)
        self._hw_sizes: dict[tuple[int, bool, int, int], int] = {}
        self.metrics = Metrics()
        self.max_follow_readers = max_follow_readers or store.config.max_follow_readers
        self._handles: dict[int, Handle] = {}
        self._dirs: dict[int, list[tuple[str, Node]]] = {}
        self._next_fh = 1
        self.partitions = Partitions()
        self._follow_readers = 0
        self._waiting: dict[FollowHandle, trio.CancelScope] = {}
        # The leader's replication: taking every partition applies the HW rule at once (with no followers the HW is
        # the LEO: after a crash the checkpointed HW lags, and this node's disk is all the ISR there is).
        self.replication = None if follower is not None else LeaderReplication(
            LeaderReplicas(store, max(latest_partition_epoch(store), 0) if leader_epoch is None else leader_epoch),
            self.partitions, read_thread=self._read_thread, write_thread=self._write_thread,
        )  # fmt: skip
        self.writer = Writer(
            store, self.partitions, self.metrics, read_thread=self._read_thread, write_thread=self._write_thread,
            replication=self.replication,
        )  # fmt: skip
        self.transactions = None if self.replication is None else Transactions(
            store, self.tree, self.partitions, self.replication, write_thread=self._write_thread
        )  # fmt: skip
        self.writer.transactions = self.transactions
        self._closing = False
        self._read_limiter = trio.CapacityLimiter(READ_THREADS)
        self._write_limiter = trio.CapacityLimiter(WRITE_THREADS)
        self._uid = os.getuid()
        self._gid = os.getgid()
        self._mounted_ns = time.time_ns()

    @property
    def max_tasks(self) -> int:
        """pyfuse3's task limit: every follow reader may wait in one, and so may each follower's long-polling
        fetches, with room for everything else."""
        fetches = 0 if self.replication is None else self.replication.fetch_tasks
        return self.max_follow_readers + fetches + EXTRA_TASKS

    # --- plumbing -------------------------------------------------------------------------------------------------

    async def _read_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(functools.partial(fn, *args), limiter=self._read_limiter)

    async def _write_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(functools.partial(fn, *args), limiter=self._write_limiter)

    def _handle(self, fh: int) -> Handle:
        h = self._handles.get(fh)
        if h is None:
            raise pyfuse3.FUSEError(errno.EBADF)
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

    def _release_entry(self, entry: Entry) -> None:
        if isinstance(entry.payload, RangeView):
            entry.payload.close()

    async def begin_shutdown(self, timeout_s: float = 1.0) -> None:
        """Wake every waiting follow/ reader and give them up to ``timeout_s`` to answer EOF while the session is
        still up (after ``pyfuse3.terminate()`` their readers would see ECONNABORTED instead)."""
        self._closing = True
        if self.replication is not None:
            self.replication.begin_shutdown()
        self.partitions.notify_all()
        with trio.move_on_after(timeout_s):
            while self._waiting:
                await trio.sleep(0.01)

    async def watch_signals(self) -> None:
        """Every ``CHECK_INTERVAL_S``, wake with EINTR each waiting follow/ reader whose opener has a deliverable
        signal pending (pyfuse3 drops the kernel's interrupt). One task for all readers: an idle reader costs one
        /proc read per interval (~9 µs), not a wake-up of its own. Runs until cancelled."""
        while True:
            await trio.sleep(signals.CHECK_INTERVAL_S)
            for h, scope in list(self._waiting.items()):
                if h.probe is not None and h.probe.pending():
                    h.interrupted = True
                    scope.cancel()

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
            raise pyfuse3.FUSEError(errno.EROFS)

    def close(self) -> None:
        """After the main loop: release every view still held."""
        for h in self._handles.values():
            if isinstance(h, HwHandle) and h.view is not None:
                h.view.close()
            elif isinstance(h, FollowHandle) and h.probe is not None:
                h.probe.close()
        self._handles.clear()
        self.tree.release_all()

    # --- attributes -----------------------------------------------------------------------------------------------

    def _attr(
        self,
        inode: int,
        node: Node,
        *,
        size: int = 0,
        mtime_ns: int | None = None,
        attr_timeout: float = STABLE_TIMEOUT_S,
        entry_timeout: float = STABLE_TIMEOUT_S,
    ) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = inode
        a.generation = 0
        a.st_mode = node.kind.mode
        a.st_nlink = 2 if node.kind.is_dir else 1
        a.st_uid = self._uid
        a.st_gid = self._gid
        a.st_rdev = 0
        a.st_size = size
        a.st_blksize = WRITE_BLKSIZE if node.kind.write_only else READ_BLKSIZE
        a.st_blocks = (size + 511) // 512
        t = self._mounted_ns if mtime_ns is None else mtime_ns
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = t
        a.attr_timeout = attr_timeout
        a.entry_timeout = entry_timeout
        return a

    async def _entry_attr(self, entry: Entry) -> pyfuse3.EntryAttributes:
        """The attributes of ``entry`` now (sizes exact); ENOENT when its topic or partition is gone."""
        node, inode = entry.node, entry.inode
        kind = node.kind
        self._check_exists(node)
        if kind.is_dir:
            return self._attr(inode, node)
        if kind is Kind.AT_FILE:
            view: RangeView = entry.payload
            return self._attr(inode, node, size=view.size, mtime_ns=entry.created_ns,
                              attr_timeout=IMMUTABLE_TIMEOUT_S, entry_timeout=MOVING_TIMEOUT_S)  # fmt: skip
        if kind is Kind.FETCH_FILE:  # a snapshot, as an at/ file
            snapshot: FetchSnapshot = entry.payload
            return self._attr(inode, node, size=len(snapshot.data), mtime_ns=entry.created_ns,
                              attr_timeout=IMMUTABLE_TIMEOUT_S, entry_timeout=MOVING_TIMEOUT_S)  # fmt: skip
        if kind.fresh:  # write files and follow/ streams: size 0, looked up again on every open
            return self._attr(inode, node, mtime_ns=entry.created_ns or None,
                              attr_timeout=MOVING_TIMEOUT_S, entry_timeout=MOVING_TIMEOUT_S)  # fmt: skip
        if kind is Kind.HW_FILE:
            timeout = MOVING_TIMEOUT_S
            try:
                size, mtime_ns, closed = await self._hw_size(node)
                if closed:  # its bytes no longer change (only delete-records or retention can end it)
                    timeout = STABLE_TIMEOUT_S
            except pyfuse3.FUSEError:
                held = self._held_hw_attr(entry) if entry.opens else None
                if held is None:
                    raise
                size, mtime_ns = held
            return self._attr(inode, node, size=size, mtime_ns=mtime_ns, attr_timeout=timeout)
        if kind is Kind.STATE:
            data = await self._render_state(node)
            return self._attr(inode, node, size=len(data), mtime_ns=time.time_ns(), attr_timeout=MOVING_TIMEOUT_S)
        if kind is Kind.CONFIG:
            data = self._render_config(node.topic)
            return self._attr(inode, node, size=len(data), attr_timeout=MOVING_TIMEOUT_S)
        if kind is Kind.METRICS:
            data = self._render_metrics()
            return self._attr(inode, node, size=len(data), mtime_ns=time.time_ns(), attr_timeout=MOVING_TIMEOUT_S)
        return self._attr(inode, node, attr_timeout=MOVING_TIMEOUT_S)  # .logfs/delete-*

    def _check_exists(self, node: Node) -> None:
        if node.txn and not self.tree.open_transaction(node.txn):
            raise pyfuse3.FUSEError(errno.ENOENT)  # the transaction ended: its directory is gone
        if node.topic and not self.store.has_topic(node.topic):
            raise pyfuse3.FUSEError(errno.ENOENT)
        if node.partition >= 0 and node.partition not in self.store.partitions(node.topic):
            raise pyfuse3.FUSEError(errno.ENOENT)

    def _log(self, node: Node) -> Log:
        return self.store.log(node.topic, node.partition)

    # --- renderings -----------------------------------------------------------------------------------------------

    def _render_config(self, topic: str) -> bytes:
        return render_config(self.store.topic_config(topic), self.store.topic_overrides(topic)).encode()

    def _replication_gauges(self, topic: str, partition: int) -> dict[str, Any]:
        """The ISR and the followers' LEOs of one partition, for ``.logfs/metrics``."""
        if self.follower is not None:
            _, isr = self.follower(topic, partition)
            return {"isr": tuple(isr)}
        assert self.replication is not None
        leader = self.replication.partition(topic, partition)
        return {
            "isr": leader.isr,
            "under_min_isr": leader.under_min_isr,
            "replicas": {r: leader.replica_state(r).log_end_offset for r in leader.followers},
        }

    async def _render_state(self, node: Node) -> bytes:
        """The ``state`` file: a leader's epoch, ISR and replicas (this node at its LEO, caught up now; each follower
        as its fetches left it), or what a follower's last fetch told it."""
        log = self._log(node)
        if self.follower is not None:  # a follower's mount: the leader's epoch and ISR as its last fetch told
            epoch, isr = self.follower(node.topic, node.partition)
            follower_job = functools.partial(render_state, log, node.topic, node.partition, role="follower",
                                             leader_epoch=epoch, isr=isr, replicas={})  # fmt: skip
            return await self._read_thread(follower_job)
        assert self.replication is not None
        leader = self.replication.partition(node.topic, node.partition)
        job = functools.partial(render_state, log, node.topic, node.partition, leader_epoch=leader.leader_epoch,
                                isr=leader.isr, replicas=leader.replicas_view())  # fmt: skip
        return await self._read_thread(job)

    def _render_metrics(self) -> bytes:
        gauges = {
            (tp.topic, tp.partition): PartitionGauges(
                log.log_start_offset,
                log.high_watermark,
                log.log_end_offset,
                log.size_bytes,
                len(log.segments),
                log.recovery_point,
                log.durable_offset,
                **self._replication_gauges(tp.topic, tp.partition),
            )
            for tp, log in self.store.logs()
        }
        cache = self.cache.statistics()
        stats = self.metrics.statistics(
            gauges,
            follow_readers=self._follow_readers,
            fresh_inodes=self.tree.fresh_entries,
            render_cache={
                "segment_indexes": cache.segment_indexes,
                "entries": cache.entries,
                "rendered_bytes": cache.rendered_bytes,
                "hits": cache.rendered_hits,
                "misses": cache.rendered_misses,
            },
        )
        return render(stats)

    def _hw_file(self, node: Node) -> tuple[int, int, bool]:
        """(start, end, closed) of an ``hw/`` file (under ``committed/`` bounded by the LSO); ENOENT when the segment
        holds no committed record (now). Closed: its end is the next segment's base, so its bytes no longer change
        (a rolled segment whose end the HW, or an open transaction's LSO, has not reached yet still grows)."""
        log = self._log(node)
        for name, start, end in hw_files(log, node.committed):
            if name == node.name:
                segments = log.segments
                n = bisect.bisect_right(segments, start, key=lambda s: s.base_offset) - 1
                closed = 0 <= n < len(segments) - 1 and end >= segments[n + 1].base_offset
                return start, end, closed
        raise pyfuse3.FUSEError(errno.ENOENT)

    async def _hw_size(self, node: Node) -> tuple[int, int | None, bool]:
        """(size, mtime, closed) of an ``hw/`` file. The size of the records [start, end) of a log never changes
        (they are below the HW, or the LSO), so it is remembered for that range, the active segment's too: the
        kernel asks getattr before every read of a file whose attributes it may not cache (an active segment's, 0 s),
        and opening a view for each of those cost ~0.7 ms per 128 KiB read. A new HW is a new range."""
        start, end, closed = self._hw_file(node)
        log = self._log(node)
        key = (id(log), node.committed, start, end)  # id(log): a topic deleted and made again is another log
        size = self._hw_sizes.get(key)
        if size is None:
            view = await self._read_thread(open_range, log, self.cache, node.topic, node.partition, Format.JSONL,
                                           start, end, node.committed)  # fmt: skip
            try:
                size = view.size
            finally:
                view.close()
            if len(self._hw_sizes) >= HW_SIZES_MAX:
                self._hw_sizes.clear()
            self._hw_sizes[key] = size
        return size, _segment_mtime_ns(log, start), closed

    def _held_hw_attr(self, entry: Entry) -> tuple[int, int | None] | None:
        """(size, mtime) of an ``hw/`` file that is gone (retention deleted its segment, or delete-records moved the
        log start past it) while handles on it are open: what they hold and keep reading (spec §5: retention never
        pulls data from under an open reader). The kernel asks getattr before reading a file with attr_timeout 0,
        and an ENOENT there would fail the read. None when no handle on it is open."""
        held = [(h.view.size, h.mtime_ns) for h in self._handles.values()
                if isinstance(h, HwHandle) and h.entry is entry and h.view is not None]  # fmt: skip
        return max(held, key=lambda size_mtime: size_mtime[0]) if held else None

    # --- lookups --------------------------------------------------------------------------------------------------

    @handler
    async def lookup(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        parent = self.tree.entry(parent_inode).node
        text = _decode(name)
        if text == ".":
            node = parent
        elif text == "..":
            node = self.tree.parent(parent)
        else:
            node = self.tree.resolve(parent, text)
        if node.kind.is_fetch:
            self._check_fetch(node)
        if not node.kind.fresh:
            self._check_exists(node)
            if node.kind is Kind.HW_FILE:
                self._hw_file(node)
            inode = self.tree.stable_inode(node)
            return await self._entry_attr(self.tree.entry(inode))
        entry = await self._lookup_fresh(node)
        try:
            attr = await self._entry_attr(entry)
        except BaseException:
            self.tree.forget(entry.inode, 0)
            raise
        self.tree.remember(entry)
        return attr

    def _check_fetch(self, node: Node) -> None:
        """``.logfs/fetch/`` is a leader's (ENOENT in a follower's mount), for its followers only (EPERM)."""
        if self.replication is None:
            raise pyfuse3.FUSEError(errno.ENOENT)
        self.replication.check_replica(node)

    async def _lookup_fresh(self, node: Node) -> Entry:
        self._check_exists(node)
        now = time.time_ns()
        if node.kind is Kind.FETCH_FILE:
            assert self.replication is not None  # _check_fetch
            return self.tree.add_fresh(node, await self.replication.fetch(node), created_ns=now)
        if node.kind is Kind.AT_FILE:
            view = await self._open_at(node)
            return self.tree.add_fresh(node, view, created_ns=now)
        if node.kind is Kind.FOLLOW_FILE:
            name = parse_follow_name(node.name)
            log = self._log(node)
            if name.stem.isdigit():
                offset = int(name.stem)
                if not log.log_start_offset <= offset <= log.log_end_offset:
                    raise pyfuse3.FUSEError(errno.ENOENT)
            return self.tree.add_fresh(node, name, created_ns=now)
        return self.tree.add_fresh(node, None, created_ns=now)

    async def _open_at(self, node: Node) -> RangeView:
        """The snapshot an ``at/`` name stands for now: its end is the HW (the LSO under committed/, where aborted
        transactions and control batches are left out)."""
        name = parse_at_name(node.name)
        log = self._log(node)
        hw = view_end(log, node.committed)
        if name.range is not None:
            start, end = name.range
            if end > hw or start > end:
                raise pyfuse3.FUSEError(errno.ENOENT)
        else:
            try:
                start = await self._read_thread(resolve_start, log, name.stem, node.committed)
            except ValueError:
                raise pyfuse3.FUSEError(errno.ENOENT) from None
            end = hw
        return await self._read_thread(open_range, log, self.cache, node.topic, node.partition, name.fmt, start, end,
                                       node.committed)  # fmt: skip

    @handler
    async def forget(self, inode_list: Sequence[tuple[int, int]]) -> None:
        for inode, count in inode_list:
            self.tree.forget(inode, count)

    @handler
    async def getattr(self, inode: int, ctx: pyfuse3.RequestContext) -> pyfuse3.EntryAttributes:
        return await self._entry_attr(self.tree.entry(inode))

    # --- directories ----------------------------------------------------------------------------------------------

    @handler
    async def opendir(self, inode: int, ctx: pyfuse3.RequestContext) -> int:
        node = self.tree.entry(inode).node
        if not node.kind.is_dir:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        self._check_exists(node)
        hw_names = None
        if node.kind is Kind.HW_DIR:
            hw_names = [name for name, _, _ in hw_files(self._log(node), node.committed)]
        fh = self._next_fh
        self._next_fh += 1
        self._dirs[fh] = self.tree.children(node, hw_names)  # listed as of opendir
        return fh

    @handler
    async def readdir(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        """pyfuse3 answers READDIRPLUS: each entry sent is a lookup, with attributes the kernel caches. So every
        entry carries exact attributes, and a fresh kind gets its own fresh inode (counted only once sent)."""
        listing = self._dirs.get(fh, [])
        for i in range(start_id, len(listing)):
            name, child = listing[i]
            if child.kind.fresh:
                entry = self.tree.add_fresh(child, None, created_ns=time.time_ns())
            else:
                entry = self.tree.entry(self.tree.stable_inode(child))
            try:
                attr = await self._entry_attr(entry)
            except pyfuse3.FUSEError:
                self.tree.forget(entry.inode, 0)
                continue  # gone since opendir (an hw/ file retention deleted, a deleted topic)
            if not pyfuse3.readdir_reply(token, name.encode(), attr, i + 1):
                self.tree.forget(entry.inode, 0)
                break
            self.tree.remember(entry)

    @handler
    async def releasedir(self, fh: int) -> None:
        self._dirs.pop(fh, None)

    @handler
    async def mkdir(
        self, parent_inode: int, name: bytes, mode: int, ctx: pyfuse3.RequestContext
    ) -> pyfuse3.EntryAttributes:
        self._refuse_if_read_only()
        parent = self.tree.entry(parent_inode).node
        text = _decode(name, errno.EINVAL)
        if parent.kind is Kind.ROOT:
            await self._write_thread(self.store.create_topic, text)
            node = Node(Kind.TOPIC, text)
            _log.info("created topic %s with %d partition(s)", text, len(self.store.partitions(text)))
        elif parent.kind is Kind.TOPIC:
            partition = parse_partition_name(text)
            if partition is None:
                raise pyfuse3.FUSEError(errno.EINVAL)
            await self._write_thread(self.store.add_partition, parent.topic, partition)
            node = Node(Kind.PARTITION, parent.topic, partition)
            _log.info("added partition %d to topic %s", partition, parent.topic)
        elif parent.kind is Kind.TXN_DIR and self.transactions is not None:
            await self.transactions.begin(text)  # EEXIST while one of that id is open; EINVAL for a bad id
            node = Node(Kind.TXN, txn=text)
        else:
            raise pyfuse3.FUSEError(errno.EPERM)
        entry = self.tree.entry(self.tree.stable_inode(node))
        return await self._entry_attr(entry)

    @handler
    async def rmdir(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self._refuse_if_read_only()
        parent = self.tree.entry(parent_inode).node
        text = _decode(name)
        if parent.kind is Kind.ROOT and text != ".logfs":
            if not self.store.has_topic(text):
                raise pyfuse3.FUSEError(errno.ENOENT)
            await self.writer.delete_topic(text, only_if_empty=True, invalidate=False)
            return
        self.tree.resolve(parent, text)  # ENOENT for what does not exist
        raise pyfuse3.FUSEError(errno.EPERM)  # partitions, at/, hw/ …: nothing else is ever removed

    # --- refusals: nothing an ordinary command does may destroy data ----------------------------------------------

    @handler
    async def unlink(self, parent_inode: int, name: bytes, ctx: pyfuse3.RequestContext) -> None:
        self._refuse_if_read_only()
        raise pyfuse3.FUSEError(errno.EPERM)

    @handler
    async def rename(self, p_old: int, n_old: bytes, p_new: int, n_new: bytes, flags: int, ctx: Any) -> None:
        self._refuse_if_read_only()
        raise pyfuse3.FUSEError(errno.EPERM)

    @handler
    async def link(self, inode: int, new_parent: int, new_name: bytes, ctx: Any) -> pyfuse3.EntryAttributes:
        self._refuse_if_read_only()
        raise pyfuse3.FUSEError(errno.EPERM)

    @handler
    async def symlink(self, parent: int, name: bytes, target: bytes, ctx: Any) -> pyfuse3.EntryAttributes:
        self._refuse_if_read_only()
        raise pyfuse3.FUSEError(errno.EPERM)

    @handler
    async def mknod(self, parent: int, name: bytes, mode: int, rdev: int, ctx: Any) -> pyfuse3.EntryAttributes:
        self._refuse_if_read_only()
        raise pyfuse3.FUSEError(errno.EPERM)

    @handler
    async def create(self, parent: int, name: bytes, mode: int, flags: int, ctx: Any) -> tuple[Any, Any]:
        self._refuse_if_read_only()
        raise pyfuse3.FUSEError(errno.EPERM)

    @handler
    async def setattr(self, inode: int, attr: Any, fields: Any, fh: int | None, ctx: Any) -> pyfuse3.EntryAttributes:
        self._refuse_if_read_only()
        raise pyfuse3.FUSEError(errno.EPERM)  # truncate, chmod, chown, utimes

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
        self._check_exists(node)
        access = flags & os.O_ACCMODE
        if kind.is_dir:
            raise pyfuse3.FUSEError(errno.EISDIR)
        if kind.write_only and access == os.O_RDONLY:
            raise pyfuse3.FUSEError(errno.EACCES)
        if kind.read_only and access != os.O_RDONLY:
            raise pyfuse3.FUSEError(errno.EACCES)
        # O_TRUNC changes nothing: writes always append (spec §3).
        if kind.write_only or (kind is Kind.CONFIG and access != os.O_RDONLY):
            self._refuse_if_read_only()
            return self._open_write(entry, flags, access)
        if kind is Kind.AT_FILE:
            return pyfuse3.FileInfo(fh=self._new_fh(ViewHandle(entry, entry.payload)), keep_cache=True)
        if kind is Kind.HW_FILE:
            return await self._open_hw(entry)
        if kind is Kind.FOLLOW_FILE:
            return await self._open_follow(entry, ctx.pid)
        if kind is Kind.FETCH_FILE:
            snapshot: FetchSnapshot = entry.payload
            assert self.replication is not None
            self.replication.opened(snapshot)
            # Drop the kernel's dentry of this name now (the open file keeps its inode): a follower at the log end
            # looks the same name up again, and a cached dentry would first be revalidated by a lookup of its own,
            # one more fetch and long poll whose answer the kernel throws away.
            parent = self.tree.stable_inode(self.tree.parent(node))
            pyfuse3.invalidate_entry_async(parent, node.name.encode(), ignore_enoent=True)
            # direct_io: a follower reads its answer once, whole; through the page cache the kernel would cut that
            # read into 128 KiB requests and copy every page in (a 1 MiB answer: ~1.5 ms against ~1.0 ms).
            return pyfuse3.FileInfo(fh=self._new_fh(SnapshotHandle(entry, snapshot.data)), direct_io=True)
        if kind is Kind.PRODUCER_ID:
            data = await self._new_producer_id()
        elif kind is Kind.LABEL:
            data = b""  # its existence is the answer
        elif kind is Kind.STATE:
            data = await self._render_state(node)
        elif kind is Kind.CONFIG:
            data = self._render_config(node.topic)
        else:
            data = self._render_metrics()
        return pyfuse3.FileInfo(fh=self._new_fh(SnapshotHandle(entry, data)), direct_io=True)

    def _open_write(self, entry: Entry, flags: int, access: int) -> pyfuse3.FileInfo:
        kind = entry.node.kind
        if kind is Kind.BATCHES:
            framer: LineFramer | BatchFramer = BatchFramer(max_batch_bytes(self._log(entry.node)))
        else:
            limit = self._max_line_bytes(entry.node)
            framer = LineFramer(limit)
        h = WriteHandle(entry, framer, read_write=access == os.O_RDWR, sync=bool(flags & os.O_DSYNC))
        if entry.node.txn:  # writes land in the transaction's epoch of now: a later epoch fences them (ESTALE)
            assert self.transactions is not None
            h.txn = (entry.node.txn, self.transactions.epoch_of(entry.node.txn))
        if kind is Kind.CONFIG and h.read_write:
            h.responses += self._render_config(entry.node.topic)
        return pyfuse3.FileInfo(fh=self._new_fh(h), direct_io=True)

    async def _new_producer_id(self) -> bytes:
        """``.logfs/producer-id``: a producer id never handed out before (the allocator reserves blocks durably, in
        a worker thread), at epoch 0, for an idempotent producer's batches."""
        self._refuse_if_read_only()
        allocator = self.store.producer_ids
        assert allocator is not None
        producer_id = await self._write_thread(allocator.allocate)
        return f"{producer_id} 0\n".encode()

    def _max_line_bytes(self, node: Node) -> int:
        if node.kind in (Kind.APPEND, Kind.APPEND_JSONL):
            return max_batch_bytes(self._log(node))
        if node.kind in (Kind.TOPIC_APPEND, Kind.TOPIC_APPEND_JSONL):
            return max_batch_bytes(self.store.log(node.topic, self.store.partitions(node.topic)[0]))
        return 1024 * 1024  # config and .logfs/ command lines

    async def _open_hw(self, entry: Entry) -> pyfuse3.FileInfo:
        node = entry.node
        start, end, closed = self._hw_file(node)
        log = self._log(node)
        view = await self._read_thread(open_range, log, self.cache, node.topic, node.partition,
                                       Format.JSONL, start, end, node.committed)  # fmt: skip
        fh = self._new_fh(HwHandle(entry, start, view, mtime_ns=_segment_mtime_ns(log, start)))
        return pyfuse3.FileInfo(fh=fh, keep_cache=closed)

    async def _open_follow(self, entry: Entry, pid: int) -> pyfuse3.FileInfo:
        if self._follow_readers >= self.max_follow_readers:
            _log.info("refused a follow/ reader: max.follow.readers=%d are open", self.max_follow_readers)
            raise pyfuse3.FUSEError(errno.EMFILE)
        node = entry.node
        name = parse_follow_name(node.name)
        log = self._log(node)
        try:
            position = await self._read_thread(resolve_start, log, name.stem, node.committed)
        except ValueError:
            raise pyfuse3.FUSEError(errno.ENOENT) from None
        if not log.log_start_offset <= position <= log.log_end_offset:
            raise pyfuse3.FUSEError(errno.ENOENT)
        self._follow_readers += 1
        fh = self._new_fh(FollowHandle(entry, name.fmt, position, signals.SignalProbe(pid)))
        # Seekable, though reads ignore the offset: `head -n` seeks back over what it read past its last line
        # (lseek SEEK_CUR) and fails with ESPIPE on a nonseekable file.
        return pyfuse3.FileInfo(fh=fh, direct_io=True)

    @handler
    async def flush(self, fh: int) -> None:
        h = self._handle(fh)
        if isinstance(h, WriteHandle):
            async with h.lock:
                await self.writer.tail(h)

    @handler
    async def release(self, fh: int) -> None:
        h = self._handles.pop(fh, None)
        if h is None:
            return
        try:
            if isinstance(h, WriteHandle) and isinstance(h.framer, LineFramer) and h.framer.pending_bytes:
                async with h.lock:
                    await self.writer.tail(h)  # flush normally did this; release errors are discarded
            elif isinstance(h, HwHandle) and h.view is not None:
                h.view.close()
            elif isinstance(h, FollowHandle):
                self._follow_readers -= 1
                if h.probe is not None:
                    h.probe.close()
                state = self.partitions.maybe_get(h.node.topic, h.node.partition)
                if state is not None:
                    state.poll_handles.pop(fh, None)
        finally:
            self.tree.closed(h.entry)

    @handler
    async def fsync(self, fh: int, datasync: bool) -> None:
        h = self._handle(fh)
        if not isinstance(h, WriteHandle):
            return
        async with h.lock:
            await self.writer.fsync(h)

    # --- reads ----------------------------------------------------------------------------------------------------

    @handler
    async def read(self, fh: int, off: int, size: int) -> bytes:
        h = self._handle(fh)
        if isinstance(h, ViewHandle):
            assert h.view is not None
            data = await self._read_view(h.view, off, size)
            self.metrics.fetched((h.node.topic, h.node.partition), len(data))
            return data
        if isinstance(h, HwHandle):
            return await self._read_hw(h, off, size)
        if isinstance(h, FollowHandle):
            return await self._read_follow(h, size)
        if isinstance(h, SnapshotHandle):
            # pyfuse3 replies from any contiguous buffer (PyObject_GetBuffer): a fetch answer's view is not copied
            return cast(bytes, h.data[off : off + size])
        if isinstance(h, WriteHandle):
            if not h.read_write:
                raise pyfuse3.FUSEError(errno.EBADF)
            if h.node.kind is Kind.CONFIG:
                return bytes(h.responses[off : off + size])
            data = bytes(h.responses[:size])  # produce responses: the read offset is ignored
            del h.responses[:size]
            return data
        raise pyfuse3.FUSEError(errno.EBADF)

    async def _read_hw(self, h: HwHandle, off: int, size: int) -> bytes:
        async with h.lock:
            view = h.view
            assert view is not None
            if off + size > view.size:  # the file may have grown since open: extend the view (prefix-stable)
                try:
                    start, end, _ = self._hw_file(h.node)
                except pyfuse3.FUSEError:
                    start, end = h.start, view.end_offset
                if start == h.start and end > view.end_offset:
                    node = h.node
                    grown = await self._read_thread(open_range, self._log(node), self.cache, node.topic,
                                                    node.partition, Format.JSONL, start, end,
                                                    node.committed)  # fmt: skip
                    view.close()
                    h.view = view = grown
        data = await self._read_view(view, off, size)
        self.metrics.fetched((h.node.topic, h.node.partition), len(data))
        return data

    async def _read_view(self, view: RangeView, off: int, size: int) -> bytes:
        """A view's bytes: from the rendering cache on the trio thread when they are all there (a sequential
        reader's next chunks usually are), else rendered in a worker thread."""
        data = view.read_cached(off, size)
        if data is None:
            data = await self._read_thread(view.read, off, size)
        return data

    async def _read_follow(self, h: FollowHandle, size: int) -> bytes:
        node = h.node
        key = (node.topic, node.partition)
        async with h.lock:
            while True:
                if h.pending:
                    data, h.pending = h.pending[:size], h.pending[size:]
                    self.metrics.fetched(key, len(data))
                    return data
                if self._closing:
                    return b""
                log = self._log(node)
                state = self.partitions.get(*key)
                # Under committed/ the bound is the LSO, which moves with the HW and with markers: such a reader
                # wakes on any change of the partition (appends too) and looks at the LSO again each time.
                moved = state.changed if node.committed else state.hw_moved
                hw = view_end(log, node.committed)
                if h.position < hw:
                    before = h.position
                    data, h.position = await self._read_thread(
                        render_follow_chunk, log, self.cache, node.topic, node.partition, h.fmt, h.position, hw,
                        max(size, FOLLOW_CHUNK_BYTES_MIN), node.committed,
                    )  # fmt: skip
                    h.pending = data
                    if data or h.position > before:
                        continue
                with trio.move_on_after(FOLLOW_WAIT_S) as scope:  # bounded: the loop re-checks everything
                    self._waiting[h] = scope
                    try:
                        await moved.wait()
                    finally:
                        self._waiting.pop(h, None)
                if h.interrupted:
                    h.interrupted = False
                    raise pyfuse3.FUSEError(errno.EINTR)

    @handler
    async def poll(self, inode: int, fh: int, poll_handle: Any, ctx: pyfuse3.RequestContext) -> int:
        h = self._handles.get(fh)
        if not isinstance(h, FollowHandle):
            return _POLL_READY | _POLL_WRITABLE
        node = h.node
        if h.pending or self._closing or h.position < view_end(self._log(node), node.committed):
            return _POLL_READY
        if poll_handle is not None:
            self.partitions.get(node.topic, node.partition).poll_handles[fh] = poll_handle
        return 0

    # --- writes ---------------------------------------------------------------------------------------------------

    @handler
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        h = self._handle(fh)
        if not isinstance(h, WriteHandle):
            raise pyfuse3.FUSEError(errno.EBADF)
        async with h.lock:  # taken before the first await: requests are framed in the order they arrived
            await self.writer.write(h, buf)
        return len(buf)


def _segment_mtime_ns(log: Log, base_offset: int) -> int | None:
    """An ``hw/`` file's mtime: its segment's newest timestamp (None when it has none: the mount time)."""
    segment = log.segment_for(base_offset)
    ts = segment.max_timestamp_so_far if segment is not None else -1
    return ts * 1_000_000 if ts > 0 else None


def _decode(name: bytes, code: int = errno.ENOENT) -> str:
    try:
        return name.decode("utf-8")
    except UnicodeDecodeError:
        raise pyfuse3.FUSEError(code) from None
