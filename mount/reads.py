"""The read path of the mount: lookups, attributes, opens, reads and polls of the read files (docs/mount.md, "Reads").

``Operations`` resolves inodes and hands the read files to :class:`Reader`, as it hands writes to
``mount/writes.py``; the bytes come from ``mount/render/views.py`` (``at/``, ``hw/``, ``follow/``, ``committed/``,
``state``) and ``mount/replication.py`` (a follower's fetch answers).

* **at/** A lookup fixes a snapshot (:func:`~logfs.mount.render.views.open_range` from the name's start to the HW, or
  the LSO under ``committed/``) as the payload of a fresh inode; getattr answers its exact size with a long
  attribute timeout; opens share it and keep the kernel's page cache.
* **hw/** One file per segment. Its size is remembered per (log, range), with its segment's mtime: the kernel asks
  getattr before every read of a file it may not cache, and the range's size never changes. An open holds a view
  from the file's start, extended (prefix-stable) when a read reaches its end after the HW moved. A file gone
  from ``hw/`` while open keeps the attributes of what its handles hold (retention never pulls data from under an
  open reader).
* **follow/** A lookup fixes the stream's start, getattr answers what was committed since; lookups, sizes, opens,
  reads and polls are ``mount/follow.py``'s.
* **state, config, .logfs/metrics, .logfs/errors, .logfs/producer-id** Rendered at open (and per getattr, for the
  size), served from the rendered bytes with ``direct_io``; what they say is ``mount/statusfiles.py``'s.
* **.logfs/partitions** Every partition's offsets (``mount/render/partitions.py``), rendered in a worker thread at
  lookup as the payload of a fresh inode, served like an ``at/`` snapshot; a lookup whose rendering equals the bytes
  of the inode the kernel holds gets that inode back, so an unchanged listing keeps its dentry (one render per open,
  not two: a new inode fails the kernel's revalidation, which then looks the name up again).
* **Fetch files** (``.logfs/fetch/…``) A lookup is a fetch (``mount/replication.py``); its answer is the payload of
  a fresh inode, served like an ``at/`` snapshot.

Threads: every method runs on the trio thread and never blocks on the disk: views open, render and read in worker
threads under the mount's read limiter; index work (a time index lookup, a segment's newest timestamp) too.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping
from typing import cast

import pyfuse3

from logfs.core.log.log import Log
from logfs.core.log.storedbatches import StoredBatches
from logfs.core.store import Store
from logfs.mount.access import Access, Caller
from logfs.mount.errors import BadFileHandle, MountRefusal, NoEntry, ReadOnlyMount
from logfs.mount.follow import FollowReaders
from logfs.mount.handles import FollowHandle, Handle, HwHandle, Partitions, SnapshotHandle, ViewHandle, WriteHandle
from logfs.mount.metrics import Metrics
from logfs.mount.names import parse_at_name
from logfs.mount.nodes import Kind, Node
from logfs.mount.render.partitions import render_partitions
from logfs.mount.render.rangeview import RangeView, open_range
from logfs.mount.render.views import (
    Format,
    RenderCache,
    hw_files,
    resolve_start,
    view_end,
)
from logfs.mount.replication import FetchSnapshot, LeaderReplication
from logfs.mount.runner import Runner
from logfs.mount.statusfiles import ReplicaView, StatusFiles
from logfs.mount.tree import Entry, Tree

_log = logging.getLogger(__name__)


# Attribute and entry cache lifetimes (seconds) handed to the kernel.
STABLE_TIMEOUT_S = 1.0  # directories and fixed names: their inode never changes; a topic deletion invalidates
IMMUTABLE_TIMEOUT_S = 3600.0  # an at/ snapshot's attributes never change (its inode is its own)
MOVING_TIMEOUT_S = 0.0  # sizes that move (hw/, state, config, metrics) and fresh inodes (looked up on every open)
HwKey = tuple[int, bool, int, int]  # an hw/ file's remembered size: (id of its log, committed, start, end)
HwRange = tuple[Node, int, int]  # an hw/ file's node and its [start, end)
HW_SIZES_MAX = 100_000  # remembered sizes of hw/ files by range (forgotten all at once beyond)

READ_BLKSIZE = 128 * 1024  # st_blksize of read files: coreutils read in max(128 KiB, st_blksize) pieces
WRITE_BLKSIZE = 1024 * 1024  # st_blksize of write files: cp and cat then write 1 MiB requests (FUSE's max_write)


class Reader:
    """The read path for one mount. Trio thread. See the module docstring."""

    def __init__(
        self,
        store: Store,
        tree: Tree,
        partitions: Partitions,
        metrics: Metrics,
        handles: Mapping[int, Handle],
        follows: FollowReaders,
        cache: RenderCache,
        *,
        read_thread: Runner,
        write_thread: Runner,
        replication: LeaderReplication | None,
        follower: ReplicaView | None,
        access: Access,
    ) -> None:
        """``handles``: the mount's open handles (read here, owned by ``Operations``); ``follows``: its follow/
        readers; ``cache``: its rendering cache. ``follower``: a follower's mount (``state`` shows what its last
        fetch told it); else ``replication`` is the leader's."""
        self.store = store
        self.tree = tree
        self.partitions = partitions
        self.metrics = metrics
        self.follows = follows
        self.cache = cache
        self.replication = replication
        self._handles = handles
        self._read_thread = read_thread
        self._write_thread = write_thread
        # (id of the log, committed, start, end) → (size, mtime, segment) of that hw/ file (see _hw_attributes)
        self._hw_sizes: dict[HwKey, tuple[int, int | None, StoredBatches | None]] = {}
        self.access = access  # who owns each node, and its mode (mount/access.py)
        self._mounted_ns = time.time_ns()
        self._listing: Entry | None = None  # the last .logfs/partitions inode a lookup gave (see lookup_fresh)
        # state, config, .logfs/leader and .logfs/metrics: what they say (mount/statusfiles.py)
        self.status = StatusFiles(store, tree, metrics, follows, cache, read_thread=read_thread,
                                  replication=replication, follower=follower)  # fmt: skip

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
        a.st_uid, a.st_gid, a.st_mode = self.access.attributes(node)
        a.st_nlink = 2 if node.kind.is_dir else 1
        a.st_rdev = 0
        a.st_size = size
        a.st_blksize = WRITE_BLKSIZE if node.kind.write_only else READ_BLKSIZE
        a.st_blocks = (size + 511) // 512
        t = self._mounted_ns if mtime_ns is None else mtime_ns
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = t
        a.attr_timeout = attr_timeout
        a.entry_timeout = entry_timeout
        return a

    async def attributes(self, entry: Entry) -> pyfuse3.EntryAttributes:
        """The attributes of ``entry`` now (sizes exact); NoEntry when its topic or partition is gone."""
        node, inode = entry.node, entry.inode
        kind = node.kind
        self.check_exists(node)
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
        if kind is Kind.PARTITIONS:  # a snapshot, as an at/ file
            if entry.payload is None:  # listed by readdir (READDIRPLUS: a lookup), rendered now
                entry.payload = await self._render_partitions()
            return self._attr(inode, node, size=len(entry.payload), mtime_ns=entry.created_ns,
                             attr_timeout=IMMUTABLE_TIMEOUT_S, entry_timeout=MOVING_TIMEOUT_S)  # fmt: skip
        if kind is Kind.FOLLOW_FILE or (kind is Kind.GROUP_FOLLOW and entry.payload):  # grows: `tail -f` sees it
            return self._attr(inode, node, size=await self.follows.size(entry), mtime_ns=entry.created_ns,
                             attr_timeout=MOVING_TIMEOUT_S, entry_timeout=MOVING_TIMEOUT_S)  # fmt: skip
        if kind.fresh:  # write files: size 0, looked up again on every open
            return self._attr(inode, node, mtime_ns=entry.created_ns or None,
                             attr_timeout=MOVING_TIMEOUT_S, entry_timeout=MOVING_TIMEOUT_S)  # fmt: skip
        if kind is Kind.HW_FILE:
            timeout = MOVING_TIMEOUT_S
            try:
                size, mtime_ns, closed = await self._hw_attributes(node)
                if closed:  # its bytes no longer change (only delete-records or retention can end it)
                    timeout = STABLE_TIMEOUT_S
            except MountRefusal:
                held = self._held_hw_attr(entry) if entry.opens else None
                if held is None:
                    raise
                size, mtime_ns = held
            return self._attr(inode, node, size=size, mtime_ns=mtime_ns, attr_timeout=timeout)
        if kind is Kind.STATE:
            data = await self.status.render_state(node)
            return self._attr(inode, node, size=len(data), mtime_ns=time.time_ns(), attr_timeout=MOVING_TIMEOUT_S)
        if kind is Kind.CONFIG:
            data = self.status.render_config(node.topic)
            return self._attr(inode, node, size=len(data), attr_timeout=MOVING_TIMEOUT_S)
        if kind is Kind.ERRORS and self.access.shared:  # each user reads their own: no size tells of the others'
            return self._attr(inode, node, mtime_ns=time.time_ns(), attr_timeout=MOVING_TIMEOUT_S)
        if kind is Kind.PARTITION_LEADER:
            data = self.status.render_partition_leader(node)
            return self._attr(inode, node, size=len(data), mtime_ns=time.time_ns(), attr_timeout=MOVING_TIMEOUT_S)
        if kind in (Kind.METRICS, Kind.ERRORS, Kind.LEADER):
            data = {Kind.METRICS: self.status.render_metrics, Kind.LEADER: self.status.render_leader,
                    Kind.ERRORS: self.metrics.refusals.render}[kind]()  # fmt: skip
            return self._attr(inode, node, size=len(data), mtime_ns=time.time_ns(), attr_timeout=MOVING_TIMEOUT_S)
        return self._attr(inode, node, attr_timeout=MOVING_TIMEOUT_S)  # .logfs/delete-*

    def check_exists(self, node: Node) -> None:
        """NoEntry when the transaction, topic or partition ``node`` lies in is gone."""
        if node.txn and not self.tree.open_transaction(node.txn):
            raise NoEntry(f"transaction {node.txn!r} ended")  # its directory is gone
        if node.topic and not self.store.has_topic(node.topic):
            raise NoEntry(f"no topic {node.topic!r}")
        if node.partition >= 0 and node.partition not in self.store.partitions(node.topic):
            raise NoEntry(f"no partition {node.partition} of {node.topic!r}")

    def _log(self, node: Node) -> Log:
        return self.store.log(node.topic, node.partition)

    # --- lookups of fresh names -----------------------------------------------------------------------------------

    async def lookup_fresh(self, node: Node) -> Entry:
        """A new inode for one lookup of a fresh node: an ``at/`` snapshot or a fetch answer fixed now, a
        ``follow/`` name whose offset the log holds, a write file."""
        self.check_exists(node)
        now = time.time_ns()
        if node.kind is Kind.FETCH_FILE:
            assert self.replication is not None  # Operations checks the fetch first
            return self.tree.fetch_entry(node, await self.replication.fetch(node), created_ns=now)
        if node.kind is Kind.AT_FILE:
            view = await self._open_at(node)
            return self.tree.add_fresh(node, view, created_ns=now)
        if node.kind is Kind.FOLLOW_FILE:  # its start is fixed now (mount/follow.py); the name keeps its inode
            return self.tree.follow_entry(node, await self.follows.lookup(node), created_ns=now)
        if node.kind is Kind.PARTITIONS:
            return self._listing_entry(node, await self._render_partitions(), now)
        return self.tree.add_fresh(node, None, created_ns=now)

    async def _render_partitions(self) -> bytes:
        """``.logfs/partitions`` now: O(partitions) Python (tens of ms at 10,000), so in a worker thread."""
        return await self._read_thread(render_partitions, self.store.logs())

    def _listing_entry(self, node: Node, data: bytes, created_ns: int) -> Entry:
        """The inode of one lookup of ``.logfs/partitions``: the last one given, while the kernel holds it and its
        bytes are ``data``; else a new one. Nothing awaits between here and the caller's ``Tree.remember``, so the
        last entry cannot be forgotten in between."""
        last = self._listing
        if last is not None and last.lookups > 0 and last.payload == data:
            return last
        self._listing = entry = self.tree.add_fresh(node, data, created_ns=created_ns)
        return entry

    async def _open_at(self, node: Node) -> RangeView:
        """The snapshot an ``at/`` name stands for now: its end is the HW (the LSO under committed/, where aborted
        transactions and control batches are left out)."""
        name = parse_at_name(node.name)
        log = self._log(node)
        hw = view_end(log, node.committed)
        if name.range is not None:
            start, end = name.range
            if end > hw or start > end:
                raise NoEntry(f"{node}: not a range below the end {hw}")
        else:
            try:
                start = await self._read_thread(resolve_start, log, name.stem, node.committed)
            except ValueError:
                raise NoEntry(str(node)) from None
            end = hw
        return await self._read_thread(open_range, log, self.cache, node.topic, node.partition, name.fmt, start, end,
                                       node.committed)  # fmt: skip

    # --- hw/ ------------------------------------------------------------------------------------------------------

    def hw_names(self, node: Node) -> list[str]:
        """What ``hw/`` lists now."""
        return [name for name, _, _ in hw_files(self._log(node), node.committed)]

    def hw_file(self, node: Node) -> tuple[int, int, bool]:
        """(start, end, closed) of an ``hw/`` file (under ``committed/`` bounded by the LSO); NoEntry when the
        segment holds no committed record (now). Closed: its end is the next segment's base, so its bytes no longer
        change (a rolled segment whose end the HW, or an open transaction's LSO, has not reached yet still grows)."""
        log = self._log(node)
        for name, start, end in hw_files(log, node.committed):
            if name == node.name:
                next_base = log.segment_snapshot.next_base(start)
                return start, end, next_base is not None and end >= next_base
        raise NoEntry(f"{node}: no committed record in that segment")

    async def _hw_attributes(self, node: Node) -> tuple[int, int | None, bool]:
        """(size, mtime, closed) of an ``hw/`` file. The size of the records [start, end) of a log never changes
        (they are below the HW, or the LSO), so it is remembered for that range, the active segment's too: the
        kernel asks getattr before every read of a file whose attributes it may not cache (an active segment's, 0 s),
        and opening a view for each of those cost ~0.7 ms per 128 KiB read. A new HW is a new range. The mtime is
        remembered with it: it reads the segment's time index, which is worker-thread work.

        The same file's other view (``hw/`` and ``committed/hw/``, the same segment) is sized in the same worker
        call when its range starts there too and is not known: ``ls -l`` or ``stat`` of both asks both, and the hop to
        a worker thread costs about as much as the sizing."""
        start, end, closed = self.hw_file(node)
        log = self._log(node)
        key = (id(log), node.committed, start, end)  # id(log): a topic deleted and made again is another log
        known = self._hw_sizes.get(key)
        segment = log.stored_for(start)  # the cleaner replaces a segment: the same range, other bytes
        if known is None or known[2] is not segment:
            ranges = [(node, start, end)]
            twin = dataclasses.replace(node, committed=not node.committed)
            try:
                twin_start, twin_end, _ = self.hw_file(twin)
            except MountRefusal:
                twin_start, twin_end = -1, -1
            twin_key = (id(log), twin.committed, twin_start, twin_end)
            if twin_start == start and twin_key not in self._hw_sizes:
                ranges.append((twin, twin_start, twin_end))
            sized = await self._read_thread(_hw_sizes, log, self.cache, ranges)
            self._remember_hw_sizes([(k, segment, size) for k, size in zip((key, twin_key), sized, strict=False)
                                     if size is not None])  # fmt: skip
            known = self._hw_sizes[key]
        return known[0], known[1], closed

    def _held_hw_attr(self, entry: Entry) -> tuple[int, int | None] | None:
        """(size, mtime) of an ``hw/`` file that is gone (retention deleted its segment, or delete-records moved the
        log start past it) while handles on it are open: what they hold and keep reading (docs/mount.md, "Reads":
        retention never pulls data from under an open reader). The kernel asks getattr before reading a file with
        attr_timeout 0, and a NoEntry there would fail the read. None when no handle on it is open."""
        held = [(h.view.size, h.mtime_ns) for h in self._handles.values()
                if isinstance(h, HwHandle) and h.entry is entry and h.view is not None]  # fmt: skip
        return max(held, key=lambda size_mtime: size_mtime[0]) if held else None

    # --- opens ----------------------------------------------------------------------------------------------------

    async def open(self, entry: Entry, caller: Caller) -> tuple[Handle, pyfuse3.FileInfo]:
        """The handle of a read file opened by ``caller``, and how the kernel should cache it (the caller gives it its
        number, ``info.fh``)."""
        pid = caller.pid
        node = entry.node
        kind = node.kind
        self.metrics.read_opened(kind.value[0])
        if kind is Kind.AT_FILE:
            return ViewHandle(entry, entry.payload), pyfuse3.FileInfo(keep_cache=True)
        if kind is Kind.HW_FILE:
            start, end, _ = self.hw_file(node)
            log = self._log(node)
            segment = log.stored_for(start)  # before the view: a clean meanwhile leaves the handle never growing
            view, mtime_ns = await self._read_thread(_open_hw_view, log, self.cache, node, start, end)
            if log.config.compact:  # the cleaner changes these bytes: the handle reads its own view, never the cache
                handle = HwHandle(entry, start, view, mtime_ns=mtime_ns, segment=segment)
                return handle, pyfuse3.FileInfo(direct_io=True)
            # Page cache kept for active segments too: their bytes are prefix-stable (docs/mount.md, "Reads"), and the
            # kernel drops a file's cached pages whenever a getattr (asked before every read: attr_timeout 0) reports
            # another size or mtime. A re-read of unchanged data (Spark's runs, a second cat) then never reaches the
            # mount.
            return HwHandle(entry, start, view, mtime_ns=mtime_ns), pyfuse3.FileInfo(keep_cache=True)
        if kind is Kind.FOLLOW_FILE:
            # Seekable, though reads ignore the offset: `head -n` seeks back over what it read past its last line
            # (lseek SEEK_CUR) and fails with ESPIPE on a nonseekable file.
            return await self.follows.open(entry, pid, caller.uid), pyfuse3.FileInfo(direct_io=True)
        if kind is Kind.FETCH_FILE:
            snapshot: FetchSnapshot = entry.payload
            if self.replication is None:  # this mount stopped leading since the lookup (ZooKeeper: logfs/cluster/)
                raise NoEntry(f"{node}: this mount no longer leads")
            self.replication.opened(snapshot)
            # No invalidate_entry of this name: it would wait for the fetch directory's lock, held by the follower's
            # next long-polling lookup (killed then, this process could never exit). A lookup of the same name again
            # revalidates the dentry and gets this inode back with its new snapshot (Tree.fetch_entry): one fetch.
            # direct_io: a follower reads its answer once, whole; through the page cache the kernel would cut that
            # read into 128 KiB requests and copy every page in (a 1 MiB answer: ~1.5 ms against ~1.0 ms).
            return SnapshotHandle(entry, snapshot.data), pyfuse3.FileInfo(direct_io=True)
        if kind is Kind.PARTITIONS:  # immutable per inode: the page cache may keep it
            return SnapshotHandle(entry, entry.payload), pyfuse3.FileInfo(keep_cache=True)
        if kind is Kind.PRODUCER_ID:
            data = await self._new_producer_id()
        elif kind is Kind.LABEL:
            data = b""  # its existence is the answer
        elif kind is Kind.STATE:
            data = await self.status.render_state(node)
        elif kind is Kind.CONFIG:
            data = self.status.render_config(node.topic)
        elif kind is Kind.ERRORS:  # each user reads their own refusals; root and the mounting user everyone's
            data = self.metrics.refusals.render(None if self.access.may_see_all_refusals(caller) else caller.uid)
        elif kind is Kind.LEADER:
            data = self.status.render_leader()
        elif kind is Kind.PARTITION_LEADER:
            data = self.status.render_partition_leader(node)
        else:
            data = self.status.render_metrics()
        return SnapshotHandle(entry, data), pyfuse3.FileInfo(direct_io=True)

    async def _new_producer_id(self) -> bytes:
        """``.logfs/producer-id``: a producer id never handed out before (the allocator reserves blocks durably, in
        a worker thread), at epoch 0, for an idempotent producer's batches."""
        if self.replication is None:
            raise ReadOnlyMount("a follower's mount hands out no producer id")
        allocator = self.store.producer_ids
        assert allocator is not None
        producer_id = await self._write_thread(allocator.allocate)
        return f"{producer_id} 0\n".encode()

    def release(self, fh: int, h: Handle) -> None:
        """A read handle closed (or dropped at unmount): release what it holds."""
        if isinstance(h, HwHandle) and h.view is not None:
            h.view.close()
        elif isinstance(h, FollowHandle):
            self.follows.release(fh, h)

    # --- reads ----------------------------------------------------------------------------------------------------

    async def read(self, h: Handle, off: int, size: int) -> bytes:
        """``size`` bytes at ``off`` of the file ``h`` has open (a follow/ stream ignores ``off``)."""
        if isinstance(h, ViewHandle):
            assert h.view is not None
            data = await self._read_view(h.view, off, size)
            self.metrics.fetched((h.node.topic, h.node.partition), len(data))
            return data
        if isinstance(h, HwHandle):
            return await self._read_hw(h, off, size)
        if isinstance(h, FollowHandle):
            return await self.follows.read(h, off, size)
        if isinstance(h, SnapshotHandle):
            # pyfuse3 replies from any contiguous buffer (PyObject_GetBuffer): a fetch answer's view is not copied
            return cast(bytes, h.data[off : off + size])
        if isinstance(h, WriteHandle):
            if not h.read_write:
                raise BadFileHandle(f"{h.node}: open for writing only")
            if h.node.kind is Kind.CONFIG:
                return bytes(h.responses[off : off + size])
            data = bytes(h.responses[:size])  # produce responses: the read offset is ignored
            del h.responses[:size]
            return data
        raise BadFileHandle(f"{h.node}: not readable")

    async def _read_hw(self, h: HwHandle, off: int, size: int) -> bytes:
        async with h.lock:
            view = h.view
            assert view is not None
            if off + size > view.size:  # the file may have grown since open: extend the view (prefix-stable)
                try:
                    start, end, _ = self.hw_file(h.node)
                except MountRefusal:
                    start, end = h.start, view.end_offset
                same = h.segment is None or h.segment is self._log(h.node).stored_for(start)  # not cleaned since
                if start == h.start and end > view.end_offset and same:
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

    def _remember_hw_sizes(self, sized: list[tuple[HwKey, StoredBatches | None, tuple[int, int | None]]]) -> None:
        if len(self._hw_sizes) + len(sized) > HW_SIZES_MAX:
            self._hw_sizes.clear()
        for key, segment, (size, mtime_ns) in sized:
            self._hw_sizes[key] = (size, mtime_ns, segment)


def _hw_sizes(log: Log, cache: RenderCache, ranges: list[HwRange]) -> list[tuple[int, int | None] | None]:
    """(size, mtime) of each ``hw/`` file's ``[start, end)`` (:func:`_open_hw_view`). The first raises its error;
    the others are None where they cannot be sized now (they only fill the cache: that file's own getattr says
    why). Worker thread."""
    sized: list[tuple[int, int | None] | None] = []
    for i, (node, start, end) in enumerate(ranges):
        try:
            view, mtime_ns = _open_hw_view(log, cache, node, start, end)
        except Exception:
            if i == 0:
                raise
            sized.append(None)
            continue
        try:
            sized.append((view.size, mtime_ns))
        finally:
            view.close()
    return sized


def _open_hw_view(log: Log, cache: RenderCache, node: Node, start: int, end: int) -> tuple[RangeView, int | None]:
    """An ``hw/`` file's view of ``[start, end)`` and its mtime: its segment's newest timestamp (None when it has
    none: the mount time). Worker thread: both read the disk (the time index under its lock)."""
    view = open_range(log, cache, node.topic, node.partition, Format.JSONL, start, end, node.committed)
    try:
        stored = log.stored_for(start)
        ts = stored.max_timestamp if stored is not None else -1
    except BaseException:
        view.close()
        raise
    return view, ts * 1_000_000 if ts > 0 else None
