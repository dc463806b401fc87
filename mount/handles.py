"""What one open file of the mount holds (one object per ``open()``), and the per-partition state they share.

* :class:`SnapshotHandle` — ``state``, ``.logfs/metrics`` and a ``config`` opened for reading: the bytes rendered
  at open (``direct_io``: the kernel does not clamp reads to a size that moves).
* :class:`ViewHandle` — an ``at/`` file: its entry's RangeView (owned by the inode, fixed at lookup).
* :class:`HwHandle` — an ``hw/`` file: a RangeView from the file's start, reopened further when the HW has moved
  and a read reaches its end (the file only grows at its end, so earlier bytes never change).
* :class:`FollowHandle` — a ``follow/`` stream: the next offset, bytes rendered but not yet returned, a probe of the
  opener's pending signals for the EINTR check; or, opened by ``tail``, a view read at offsets (``mount/follow.py``).
* :class:`WriteHandle` — ``append``, ``append.jsonl``, ``batches`` (partition or topic level), ``config`` opened for
  writing and ``.logfs/delete-*``: its framer, the produce responses not yet read (O_RDWR), the error that broke its
  framing, and a lock that keeps its requests in arrival order.
* :class:`PartitionState` — per partition: the lock that lets one append at a time into its log (waiters wait in
  trio, not in worker threads), the event a HW advance or an ISR change sets (then replaced: one fresh event per
  change; follow readers and acks=all waits wait on it), the event every append sets too (fetches that long-poll
  at the log end wait on it), and the poll handles to notify; :class:`Partitions` holds them all.

Threads: the trio thread only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

from logfs.core.format.framing import BatchFramer, LineFramer
from logfs.core.log.storedbatches import StoredBatches
from logfs.mount.access import Caller
from logfs.mount.errors import BrokenFraming
from logfs.mount.nodes import Node
from logfs.mount.render.rangeview import RangeView
from logfs.mount.render.views import Format
from logfs.mount.signals import SignalProbe
from logfs.mount.tree import Entry


@dataclass(eq=False)
class Handle:
    entry: Entry

    @property
    def node(self) -> Node:
        return self.entry.node


@dataclass(eq=False)
class SnapshotHandle(Handle):
    data: bytes | memoryview = b""  # a fetch answer is a view (mount/replication.py): read slices it without a copy


@dataclass(eq=False)
class ViewHandle(Handle):
    view: RangeView | None = None


@dataclass(eq=False)
class HwHandle(Handle):
    start: int = 0
    view: RangeView | None = None
    mtime_ns: int | None = None  # the segment's at open (getattr answers it once the file is gone from hw/)
    segment: StoredBatches | None = None  # a compacted topic's segment at open: the view grows only while it is it
    lock: trio.Lock = field(default_factory=trio.Lock)


@dataclass(eq=False)
class FollowHandle(Handle):
    fmt: Format = Format.PLAIN
    position: int = 0
    probe: SignalProbe | None = None  # the opener's pending signals (EINTR)
    pending: bytes = b""
    interrupted: bool = False  # set by the signal watcher before it cancels the wait
    lock: trio.Lock = field(default_factory=trio.Lock)
    view: RangeView | None = None  # a sized handle (tail): [start, HW) read at offsets, EOF at its end
    uid: int = field(kw_only=True)  # its opener's: counted against max.follow.readers.per.user until released


@dataclass(eq=False)
class WriteHandle(Handle):
    framer: LineFramer | BatchFramer | None = None
    read_write: bool = False  # O_RDWR: reads return produce responses
    sync: bool = False  # O_SYNC / O_DSYNC: each write is write + fsync
    responses: bytearray = field(default_factory=bytearray)
    broken: type[BrokenFraming] | None = None  # what every further write raises (the framing was lost)
    # partition → the offset after the last record this handle appended there: fsync flushes those partitions and
    # waits for their HW to reach it (acks=all)
    touched: dict[int, int] = field(default_factory=dict)
    lock: trio.Lock = field(default_factory=trio.Lock)
    txn: tuple[str, int] | None = None  # under .logfs/transactions/<id>/: (id, the producer epoch at open)
    caller: Caller | None = None  # who opened it: a command names topics its opener must own (mount/access.py)


@dataclass(eq=False)
class PartitionState:
    append_lock: trio.Lock = field(default_factory=trio.Lock)
    hw_moved: trio.Event = field(default_factory=trio.Event)
    changed: trio.Event = field(default_factory=trio.Event)  # any append, HW move or ISR change (replica fetches)
    poll_handles: dict[int, Any] = field(default_factory=dict)
    acks_waiting: int = 0  # acks=all fsyncs waiting for the HW
    released_acks: bool = False  # the last HW move woke acks=all fsyncs (their writers' next batches are near)
    # fetch sessions holding this partition (mount/session.py) → their wake-up for it: a session looks only at the
    # partitions that woke it, so an answer costs O(partitions with news), not O(its partitions)
    watchers: dict[Any, Callable[[], None]] = field(default_factory=dict)

    def appended(self) -> None:
        """Records were appended without moving the HW: wake the fetches waiting at the log end (and the fetch
        sessions holding the partition)."""
        self.changed.set()
        self.changed = trio.Event()
        for wake in self.watchers.values():
            wake()

    def notify(self) -> None:
        """The HW moved (or the ISR changed): wake every follow reader, acks=all wait and fetch waiting (one fresh
        event per change) and every poller."""
        self.released_acks = self.acks_waiting > 0
        self.hw_moved.set()
        self.hw_moved = trio.Event()
        self.appended()
        handles, self.poll_handles = self.poll_handles, {}
        for poll_handle in handles.values():
            poll_handle.notify()


class Partitions:
    """The PartitionState of every partition the mount has touched, created on first use. Trio thread."""

    def __init__(self) -> None:
        # By topic, then partition: a topic's deletion finds its own states, never walks every partition's.
        self._states: dict[str, dict[int, PartitionState]] = {}

    def get(self, topic: str, partition: int) -> PartitionState:
        states = self._states.get(topic)
        if states is None:
            states = self._states[topic] = {}
        state = states.get(partition)
        if state is None:
            state = states[partition] = PartitionState()
        return state

    def maybe_get(self, topic: str, partition: int) -> PartitionState | None:
        states = self._states.get(topic)
        return None if states is None else states.get(partition)

    def drop_topic(self, topic: str) -> None:
        """A topic was deleted: wake its readers (they find it gone) and forget its states. O(that topic)."""
        for state in self._states.pop(topic, {}).values():
            state.notify()

    def notify_all(self) -> None:
        for states in self._states.values():
            for state in states.values():
                state.notify()
