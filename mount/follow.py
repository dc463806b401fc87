"""``follow/`` readers: streams that wait at the end of a partition (docs/mount.md, "Reads"), and the one place that
owns them.

* **Lookup.** A name's start offset is fixed when it is looked up (``earliest``, ``<offset>``, ``@<ms>``,
  ``latest``: :meth:`FollowReaders.lookup`, the payload of the fresh inode): one lookup is one stream, and the
  file's size is what has been committed since: the rendered bytes of ``[start, HW)`` (the LSO under
  ``committed/``), answered with attribute timeout 0 (:meth:`FollowReaders.size`, remembered per range).
* **Open.** A reader starts at its inode's start offset; one reader beyond ``max.follow.readers`` is refused
  (EMFILE): each may hold a pyfuse3 task while it waits, and the server sizes its task limit by that number. So is
  one beyond ``max.follow.readers.per.user`` of its opener's uid, so that on a shared mount no user holds them all.
* **tail.** GNU ``tail`` opens, fstats, seeks to the end (which FUSE never sees) and, when the size is 0 (an
  idle ``follow/latest``), reads until EOF before it starts polling st_size; a ``cat`` does exactly the same
  requests and must block. They cannot be told apart by what they send (pyfuse3's read has neither the caller nor
  the file flags), so they are told apart by who opened the file: a process named in :data:`SIZE_POLLING_READERS`
  (``/proc/<pid>/comm``) gets a *sized* handle, an ``hw/``-like view of ``[start, HW)`` read at its offsets,
  extended when a read reaches its end after the HW moved, and EOF at the end instead of a wait. tail then polls
  the size once a second (``-s``) and reads exactly the bytes it grew by.
* **Read.** Each read renders whole records from the reader's offset up to the HW (the LSO under ``committed/``)
  in a worker thread, at least ``FOLLOW_CHUNK_BYTES_MIN`` at a time (the rest waits in the handle). With nothing
  to return it waits on the partition's event: one fresh ``trio.Event`` per HW advance, or under ``committed/``
  per change of the partition (the LSO moves with markers too), at most ``FOLLOW_WAIT_S`` before it looks again
  (a safety net only: every change that matters sets an event, and a timer per reader costs a wake-up per reader).
* **Signals.** pyfuse3 drops the kernel's interrupt, so one watcher task (:meth:`FollowReaders.watch_signals`)
  checks the openers of all waiting reads, one ``/proc`` read per process (the handles a process opened share its
  :class:`~logfs.mount.signals.SignalProbe`), every ``signals.check_interval(n)`` for ``n`` such processes (50 ms
  while few wait, growing as √n: ``mount/signals.py``), and cancels the wait of each reader whose opener has a
  deliverable signal pending; that read answers EINTR.
* **Shutdown.** :meth:`FollowReaders.begin_shutdown` wakes every waiting reader (each then answers EOF) and waits
  on an event that the last one to stop waiting sets: no polling.
* **poll(2)** A reader is ready when it has bytes to return; otherwise its poll handle is notified at the next HW
  move (``PartitionState.notify``).

Threads: the trio thread only; renders and the start lookup (a time index read) run in worker threads.
"""

from __future__ import annotations

import logging
import select
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import trio

from logfs.core.errors import OffsetOutOfRange
from logfs.core.log.log import Log
from logfs.core.store import Store
from logfs.mount import signals
from logfs.mount.errors import Interrupted, NoEntry, ReadInProgress, TooManyReaders
from logfs.mount.handles import FollowHandle, Handle, Partitions
from logfs.mount.metrics import Metrics
from logfs.mount.names import parse_follow_name
from logfs.mount.nodes import Node
from logfs.mount.render.rangeview import RangeView, open_range
from logfs.mount.render.renderspan import Format
from logfs.mount.render.views import RenderCache, render_follow_chunk, resolve_start, view_end
from logfs.mount.runner import Runner
from logfs.mount.tree import Entry

_log = logging.getLogger(__name__)


FOLLOW_CHUNK_BYTES_MIN = 64 * 1024  # what one follow/ render asks for at least (the rest waits in the handle)
FOLLOW_WAIT_S = 5.0  # the longest a follow/ read waits before looking again (the HW event normally wakes it)
SIGNAL_SWEEP_SLICE = 64  # /proc reads of one signal sweep between two yields of the trio thread

FOLLOW_SIZES_MAX = 10_000  # remembered sizes of follow/ ranges (forgotten all at once beyond)
# Processes that read a growing file by its size and need EOF at its end: GNU (and busybox) tail -f polls st_size
# on FUSE, which coreutils counts as remote, and reads st_size minus what it has read.
SIZE_POLLING_READERS = frozenset({"tail"})

POLL_READY = select.POLLIN | select.POLLRDNORM
POLL_WRITABLE = select.POLLOUT | select.POLLWRNORM


@dataclass(slots=True)
class FollowStart:
    """A looked-up ``follow/`` name (the payload of its inode): its format, the offset its stream starts at (fixed at
    lookup), and the size its getattr last answered (kept for when the range cannot be measured any more: retention
    took its start). Two are equal when format and start are: they name the same stream. A later lookup of the
    name replaces the payload of its inode (``Tree.follow_entry``) unless size-polling readers (tail) hold it open:
    their views and the size they poll are this start's."""

    fmt: Format
    start: int
    size: int = field(default=0, compare=False)
    sized_readers: int = field(default=0, compare=False)  # open handles of SIZE_POLLING_READERS bound to this start

    @property
    def pinned(self) -> bool:
        """Whether the inode must keep this start (a size-polling reader holds it open)."""
        return self.sized_readers > 0


def polls_size(pid: int) -> bool:
    """Whether process ``pid`` is one of :data:`SIZE_POLLING_READERS` (its ``/proc/<pid>/comm``; procfs, no disk:
    the trio thread may call it). False when unknown."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read().strip().decode(errors="replace") in SIZE_POLLING_READERS
    except OSError:
        return False


class FollowReaders:
    """Every open ``follow/`` handle of one mount: how many, which wait, and whether the mount is closing. Trio
    thread."""

    def __init__(
        self,
        store: Store,
        partitions: Partitions,
        metrics: Metrics,
        cache: RenderCache,
        *,
        read_thread: Runner,
        max_readers: int,
        max_per_user: int,
    ) -> None:
        self.store = store
        self.partitions = partitions
        self.metrics = metrics
        self.cache = cache
        self.max_readers = max_readers
        self.max_per_user = max_per_user
        self.count = 0  # open follow/ handles (``logfs_follow_readers``)
        self._by_user: Counter[int] = Counter()  # uid → its open follow/ handles (only uids holding some)
        self._read_thread = read_thread
        self._waiting: dict[FollowHandle, trio.CancelScope] = {}
        self._probes: dict[int, signals.SignalProbe] = {}  # pid → the probe its open readers share
        self._wait_began = trio.Event()  # set when a read starts to wait (the signal watcher sleeps on it meanwhile)
        self._closing = False
        self._drained = trio.Event()  # set once closing and no read waits
        # (id of the log, committed, format, start, end) → rendered size of that range (see size)
        self._sizes: dict[tuple[int, bool, Format, int, int], int] = {}

    def _log(self, node: Node) -> Log:
        return self.store.log(node.topic, node.partition)

    async def lookup(self, node: Node) -> FollowStart:
        """Where a lookup of the ``follow/`` name ``node`` starts its stream (now); NoEntry for a name that does not
        parse or an offset outside the log."""
        name = parse_follow_name(node.name)
        log = self._log(node)
        try:
            if name.stem.startswith("@"):  # a time index lookup: the disk
                position = await self._read_thread(resolve_start, log, name.stem, node.committed)
            else:  # earliest, latest, an offset: in memory (a thread hop per lookup is most of a lookup's cost)
                position = resolve_start(log, name.stem, node.committed)
        except ValueError:
            raise NoEntry(str(node)) from None
        if not log.log_start_offset <= position <= log.log_end_offset:
            raise NoEntry(f"{node}: offset {position} is outside the log")
        return FollowStart(name.fmt, position)

    async def size(self, entry: Entry) -> int:
        """The size of a ``follow/`` file now: its format's bytes of ``[start, HW)`` (the LSO under committed/).
        A range's size never changes, so it is remembered; a new HW is a new range. When the start has left the
        log (retention), the last size answered."""
        node, spec = entry.node, entry.payload
        assert isinstance(spec, FollowStart)
        log = self._log(node)
        end = view_end(log, node.committed)
        key = (id(log), node.committed, spec.fmt, spec.start, end)
        known = 0 if spec.start == end else self._sizes.get(key)  # an empty range (an idle latest) has no bytes
        if known is None:
            try:
                view = await self._read_thread(self._open_view, node, spec, end)
            except OffsetOutOfRange:
                return spec.size
            known = view.size
            view.close()
            if len(self._sizes) >= FOLLOW_SIZES_MAX:
                self._sizes.clear()
            self._sizes[key] = known
        spec.size = known
        return known

    def _open_view(self, node: Node, spec: FollowStart, end: int) -> RangeView:
        """``[start, end)`` of a follow/ file as a view. Worker thread."""
        return open_range(self._log(node), self.cache, node.topic, node.partition, spec.fmt, spec.start, end,
                          node.committed)  # fmt: skip

    async def open(self, entry: Entry, pid: int, uid: int) -> FollowHandle:
        """A reader of ``entry`` opened by process ``pid`` of user ``uid``: a stream whose reads wait at the end
        (interrupted by ``pid``'s signals), or a sized handle when ``pid`` polls sizes (tail: see the module
        docstring). TooManyReaders past the mount's limit or the user's."""
        if self.count >= self.max_readers:
            _log.info("refused a follow/ reader: max.follow.readers=%d are open", self.max_readers)
            raise TooManyReaders(f"max.follow.readers={self.max_readers} are open")
        if self._by_user[uid] >= self.max_per_user:
            _log.info("refused a follow/ reader of uid %d: max.follow.readers.per.user=%d are open", uid,
                      self.max_per_user)  # fmt: skip
            raise TooManyReaders(f"max.follow.readers.per.user={self.max_per_user} of uid {uid} are open")
        node, spec = entry.node, entry.payload
        assert isinstance(spec, FollowStart)
        log = self._log(node)
        if not log.log_start_offset <= spec.start <= log.log_end_offset:
            raise NoEntry(f"{node}: offset {spec.start} is outside the log")
        view = None
        self.count += 1  # counted before any await: opens at once cannot all pass the checks above
        self._by_user[uid] += 1
        if polls_size(pid):
            spec.sized_readers += 1  # first: no later lookup may move this inode's start under its size
            try:
                view = await self._read_thread(self._open_view, node, spec, view_end(log, node.committed))
            except OffsetOutOfRange:
                spec.sized_readers -= 1
                self._uncount(uid)
                raise NoEntry(f"{node}: offset {spec.start} is outside the log") from None
            except BaseException:
                spec.sized_readers -= 1
                self._uncount(uid)
                raise
        if view is not None:
            return FollowHandle(entry, spec.fmt, spec.start, None, view=view, uid=uid)
        return FollowHandle(entry, spec.fmt, spec.start, self._probe(pid), uid=uid)

    def _probe(self, pid: int) -> signals.SignalProbe:
        """The signal probe of process ``pid``, shared by every reader it opened (the watcher then reads its
        ``/proc`` status once per check, however many readers it holds); a new one when the process the known
        probe watches is gone (its pid may be reused)."""
        probe = self._probes.get(pid)
        if probe is None or not probe.alive():
            probe = self._probes[pid] = signals.SignalProbe(pid)
        probe.users += 1
        return probe

    def _uncount(self, uid: int) -> None:
        self.count -= 1
        self._by_user[uid] -= 1
        if self._by_user[uid] <= 0:
            del self._by_user[uid]

    def release(self, fh: int, h: FollowHandle) -> None:
        self._uncount(h.uid)
        if h.probe is not None:
            probe, h.probe = h.probe, None
            probe.users -= 1
            if probe.users <= 0:
                probe.close()
                if self._probes.get(probe.pid) is probe:
                    del self._probes[probe.pid]
        if h.view is not None:
            h.view.close()
            spec = h.entry.payload  # the FollowStart it pinned at open: not replaced since
            if isinstance(spec, FollowStart):
                spec.sized_readers -= 1
        state = self.partitions.maybe_get(h.node.topic, h.node.partition)
        if state is not None:
            state.poll_handles.pop(fh, None)

    async def read(self, h: FollowHandle, off: int, size: int) -> bytes:
        """Up to ``size`` bytes of whole records from ``h``'s offset; waits while there are none; EOF once the
        mount closes; Interrupted when the opener got a signal while it waited. A sized handle (tail) reads at
        ``off`` instead and answers EOF at the end."""
        if h.view is not None:
            return await self._read_sized(h, off, size)
        node = h.node
        key = (node.topic, node.partition)
        if h.lock.locked():  # one read of a stream at a time: reads in flight never outnumber the handles
            raise ReadInProgress(f"{node}: another read of this handle is in progress")
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
                    self._wait_began.set()
                    try:
                        await moved.wait()
                    finally:
                        self._waiting.pop(h, None)
                        if self._closing and not self._waiting:
                            self._drained.set()
                if h.interrupted:
                    h.interrupted = False
                    raise Interrupted(f"{node}: the reader got a signal")

    async def _read_sized(self, h: FollowHandle, off: int, size: int) -> bytes:
        """``size`` bytes at ``off`` of a sized handle's view of ``[start, HW)``, extended first when the read
        reaches its end and the HW has moved (the bytes below never change)."""
        node = h.node
        async with h.lock:
            view = h.view
            assert view is not None
            end = view_end(self._log(node), node.committed)
            if off + size > view.size and end > view.end_offset and not self._closing:
                spec = FollowStart(h.fmt, view.start_offset)
                try:
                    grown = await self._read_thread(self._open_view, node, spec, end)
                except OffsetOutOfRange:
                    grown = None  # retention took the start: keep reading what the view holds
                if grown is not None:
                    view.close()
                    h.view = view = grown
        data = view.read_cached(off, size)
        if data is None:
            data = await self._read_thread(view.read, off, size)
        self.metrics.fetched((node.topic, node.partition), len(data))
        return data

    def poll(self, fh: int, h: Handle | None, poll_handle: Any) -> int:
        """poll(2) of an open file: a follow/ stream is ready when it has bytes to return (or the mount closes),
        else ``poll_handle`` is notified at the next HW move. Every other file is always ready."""
        if not isinstance(h, FollowHandle):
            return POLL_READY | POLL_WRITABLE
        node = h.node
        if h.view is not None or h.pending or self._closing or h.position < view_end(self._log(node), node.committed):
            return POLL_READY
        if poll_handle is not None:
            self.partitions.get(node.topic, node.partition).poll_handles[fh] = poll_handle
        return 0

    async def begin_shutdown(self, timeout_s: float) -> None:
        """Wake every waiting reader (each answers EOF) and wait, up to ``timeout_s``, until none waits."""
        self._closing = True
        self.partitions.notify_all()
        if self._waiting:
            with trio.move_on_after(timeout_s):
                await self._drained.wait()

    async def watch_signals(self) -> None:
        """Wake with EINTR each waiting reader whose opener has a deliverable signal pending, checking every
        ``signals.check_interval(n)`` for the ``n`` processes that waited at the last check. One task for all
        readers, one ``/proc`` read per process and check: an idle reader costs no wake-up of its own, and the
        checks cost √n reads a second. Runs until cancelled."""
        processes = 0
        while True:
            if not self._waiting:  # nothing to watch: sleep until a read waits (no wake-ups of an idle mount)
                self._wait_began = trio.Event()
                await self._wait_began.wait()
            await trio.sleep(signals.check_interval(processes))
            processes = await self.check_signals()

    async def check_signals(self) -> int:
        """One sweep of :meth:`watch_signals`: interrupt the waiting readers whose opener has a deliverable signal
        pending; the number of processes checked. Yields to the trio thread every ``SIGNAL_SWEEP_SLICE`` reads, so
        a sweep of thousands of readers never holds up the mount's requests for long."""
        checked: dict[signals.SignalProbe, bool] = {}
        for h, scope in list(self._waiting.items()):
            probe = h.probe
            if probe is None:
                continue
            signalled = checked.get(probe)
            if signalled is None:
                if checked and len(checked) % SIGNAL_SWEEP_SLICE == 0:
                    await trio.lowlevel.checkpoint()
                signalled = checked[probe] = probe.pending()
            if signalled and self._waiting.get(h) is scope:  # still this wait (the sweep may have yielded)
                h.interrupted = True
                scope.cancel()
        return len(checked)
