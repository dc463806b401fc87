"""The leader's replication in the mount: fetch files, acks=all waits and the ISR shrink timer
(docs/replication.md, "The fetch protocol" and "acks=all through the mount").

The rules themselves live in the core (``core/replication/replica.py``: ISR, HW, acks=all;
``core/replication/fetch.py``: the fetch answer); this module runs them from FUSE requests without ever blocking the
trio thread or holding a lock across a wait.

* **A fetch** is the lookup of ``.logfs/fetch/<replica>/<topic>/<partition>/<offset>.<epoch>[.<leader epoch>]``
  (:meth:`LeaderReplication.fetch`; the third part, the fetcher's current leader epoch, is refused when it is not
  this leader's: FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH at once, no long poll).
  First it is validated and recorded (the follower's LEO, the ISR, the HW; a
  change wakes the partition's waiters). That is in-memory work, so it runs on the trio thread, saving two thread
  hand-offs on the acks=all path; when an append holds the partition or its log, the part that would wait runs in
  a worker thread instead (the trio thread never waits for the disk). Then, when the follower is at the log end
  and there is nothing new to tell it, the lookup waits up to ``FETCH_WAIT_MAX_S`` for an append (or a HW or ISR
  change), and the answer is fixed in a worker thread: the fresh inode's payload (:class:`FetchSnapshot`), its size
  exact at lookup, its bytes never changing.
* **Nothing new to tell** means the HW and ISR are those of the last answer this follower opened for that
  partition. An ISR change is told at once, and so is a HW move; but a HW move that woke acks=all fsyncs
  (typically the one this very fetch made) is held up to ``FETCH_HW_NEWS_WAIT_S`` for data to come with it. The
  writers it answered send their next batches within a few milliseconds, and one answer then carries both.
  Answering the HW at once cost the follower a whole extra round trip (lookup, open, read, close) between every two
  batches: measured, most of what acks=all lost to replication. The follower's own HW (its mount's readers) trails
  the leader's by at most that.
* **acks=all** (:meth:`LeaderReplication.wait_replicated`): a trio wait on the partition's HW event until the HW
  passes the offsets a handle wrote, failing with NotEnoughReplicasAfterAppend as soon as the ISR is below
  ``min.insync.replicas`` and with ReplicationTimeout after ``request.timeout.ms``. No lock is held meanwhile:
  other writers of the partition append on.
* **The ISR shrink timer** (:meth:`LeaderReplication.watch_isr`, a task in the server's nursery): every
  ``replica.lag.time.max.ms`` / 2 (at least every 500 ms) followers that fell behind leave the ISR, and the waiters
  of those partitions are woken (an fsync then fails at once when the ISR fell below the minimum).

Threads: the trio thread; the core calls run in worker threads through the runners given.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass

import trio

from logfs.core.errors import LockBusy, ReplicationTimeout, UnknownReplica
from logfs.core.replication.fetch import accept_fetch, fetch_response
from logfs.core.replication.leaderreplicas import LeaderReplicas, shrink_check_interval_ms
from logfs.core.replication.replica import FetchValidation, LeaderPartition, ReplicaChange
from logfs.mount.errors import NoEntry
from logfs.mount.handles import Partitions
from logfs.mount.names import parse_fetch_name
from logfs.mount.nodes import Node
from logfs.mount.runner import Runner

_log = logging.getLogger(__name__)


FETCH_WAIT_MAX_S = 0.5  # Kafka's replica.fetch.wait.max.ms: a fetch at the log end waits this long for data
FETCH_HW_NEWS_WAIT_S = 0.01  # a fetch whose only news is a HW move that woke acks=all fsyncs waits this for data
# pyfuse3 tasks set aside per follower for fetches waiting at once (each long poll holds one; `logfs follow` has at
# most 16 fetches in flight)
FETCH_TASKS_PER_FOLLOWER = 32

ReplicaKey = tuple[int, str, int]  # (replica id, topic, partition)


@dataclass(frozen=True, slots=True)
class FetchSnapshot:
    """A fetch file's payload: its bytes, and what they told the follower (for the next long poll)."""

    data: bytes | memoryview  # a view of the buffer the answer was rendered in (never written again)
    key: ReplicaKey
    told: tuple[int, tuple[int, ...]]  # (HW, ISR)


class LeaderReplication:
    """The leader's replication for one mount. See the module docstring. Trio thread."""

    def __init__(
        self, leaders: LeaderReplicas, partitions: Partitions, *, read_thread: Runner, write_thread: Runner
    ) -> None:
        self.leaders = leaders
        self.partitions = partitions
        self._read_thread = read_thread
        self._write_thread = write_thread
        self._told: dict[ReplicaKey, tuple[int, tuple[int, ...]]] = {}
        self.closing = False

    @property
    def leader_epoch(self) -> int:
        return self.leaders.leader_epoch

    @property
    def fetch_tasks(self) -> int:
        """The pyfuse3 tasks the followers' long polls may hold at once."""
        return FETCH_TASKS_PER_FOLLOWER * len(self.leaders.followers)

    def partition(self, topic: str, partition: int) -> LeaderPartition:
        return self.leaders.partition(topic, partition)

    # --- fetches ----------------------------------------------------------------------------------------------------

    def check_replica(self, node: Node) -> None:
        """UnknownReplica (EPERM) for a fetch path of an id that is not one of this leader's followers (logged once
        per lookup); for a follower's, record that it was heard from (``LeaderReplicas.follower_heard``: a partition
        created within ``replica.lag.time.max.ms`` of it starts with it in the ISR)."""
        if node.replica >= 0 and not self.leaders.is_follower(node.replica):
            _log.info("refused a fetch by replica %d: not a follower of node %d (replica.ids=%s)", node.replica,
                      self.leaders.node_id, ",".join(map(str, self.leaders.replica_ids)))  # fmt: skip
            raise UnknownReplica(node.replica, self.leaders.replica_ids, self.leaders.node_id)
        if node.replica >= 0:  # a request of the fetch protocol: this follower is live (a new partition's ISR)
            self.leaders.follower_heard(node.replica)

    async def fetch(self, node: Node) -> FetchSnapshot:
        """The lookup of a fetch file: record the fetch, long-poll at the log end, fix the answer."""
        self.check_replica(node)
        fetch_offset, last_fetched_epoch, current_epoch = parse_fetch_name(node.name)
        leader = self.partition(node.topic, node.partition)
        state = self.partitions.get(node.topic, node.partition)
        accept = functools.partial(accept_fetch, leader, node.replica, fetch_offset, last_fetched_epoch,
                                   current_leader_epoch=current_epoch)  # fmt: skip
        try:  # in-memory work, done here unless an append holds the partition (the trio thread never waits)
            validation, change = accept(blocking=False)
        except LockBusy:
            validation, change = await self._read_thread(accept)
        if validation.leader_epoch_error is not None:
            _log.debug("fetch %s by replica %d at leader epoch %s refused: %s (the leader's is %d)", node.name,
                       node.replica, current_epoch, validation.leader_epoch_error, leader.leader_epoch)  # fmt: skip
        if change.high_watermark_deferred:  # recorded; the log was busy: the HW rule in a worker thread
            moved = await self._read_thread(leader.maybe_increment_high_watermark)
            change = ReplicaChange(change.isr_changed, moved)
        if change.any:
            state.notify()
        key = (node.replica, node.topic, node.partition)
        if validation.ok:
            await self._wait_for_news(key, leader, fetch_offset)
            if self.partition(node.topic, node.partition) is not leader:  # deleted meanwhile (and made again)
                raise NoEntry(f"{node}: the partition was deleted during the fetch")
        return await self._read_thread(_snapshot, key, leader, fetch_offset, validation)

    async def _wait_for_news(self, key: ReplicaKey, leader: LeaderPartition, fetch_offset: int) -> None:
        """Long poll: while the follower is at the log end and the HW and ISR are what it last read, wait (at most
        FETCH_WAIT_MAX_S) for an append or a change; a HW move that woke acks=all fsyncs is answered after
        FETCH_HW_NEWS_WAIT_S at the latest (an append meanwhile answers both at once), any other at once."""
        state = self.partitions.get(key[1], key[2])
        log = leader.log
        deadline = trio.current_time() + FETCH_WAIT_MAX_S
        while not self.closing and log.log_end_offset == fetch_offset:
            told = self._told.get(key)
            if told is None or told[1] != leader.isr:
                return  # a first fetch, or an ISR change: at once
            if told[0] != log.high_watermark:
                if not state.released_acks:
                    return  # nobody's next write is due: the HW at once
                deadline = min(deadline, trio.current_time() + FETCH_HW_NEWS_WAIT_S)
            changed = state.changed
            with trio.move_on_at(deadline) as waited:
                await changed.wait()
            if waited.cancelled_caught:
                return

    def opened(self, snapshot: FetchSnapshot) -> None:
        """The follower opened a fetch file: it now knows that answer's HW and ISR."""
        self._told[snapshot.key] = snapshot.told

    # --- acks=all ---------------------------------------------------------------------------------------------------

    def check_enough_replicas(self, topic: str, partitions: list[int]) -> None:
        """Before an O_SYNC/O_DSYNC append: NotEnoughReplicas (EAGAIN) when a partition's ISR is too small."""
        for p in partitions:
            self.partition(topic, p).check_enough_replicas()

    async def wait_replicated(self, topic: str, required: Mapping[int, int], timeout_ms: int) -> None:
        """Wait until each partition's HW reaches its offset in ``required`` (acks=all): NotEnoughReplicasAfterAppend
        at once when a partition's ISR is below min.insync.replicas, ReplicationTimeout after ``timeout_ms``."""
        deadline = trio.current_time() + timeout_ms / 1000
        for partition, offset in sorted(required.items()):
            while True:
                leader = self.partition(topic, partition)  # UnknownTopicOrPartition (ENOENT) once deleted
                state = self.partitions.get(topic, partition)
                moved = state.hw_moved
                if leader.check_replicated(offset):
                    break
                if self.closing or trio.current_time() >= deadline:
                    raise ReplicationTimeout(
                        f"{topic}-{partition}: records below offset {offset} were not replicated to the ISR "
                        f"{list(leader.isr)} within request.timeout.ms={timeout_ms} (HW {leader.log.high_watermark})"
                    )
                state.acks_waiting += 1
                try:
                    with trio.move_on_at(deadline):
                        await moved.wait()
                finally:
                    state.acks_waiting -= 1

    # --- the ISR shrink timer ---------------------------------------------------------------------------------------

    async def watch_isr(self) -> None:
        """Apply the ISR shrink rule periodically and wake the waiters of partitions whose ISR changed. Runs until
        cancelled; returns at once when there are no followers."""
        if not self.leaders.followers:
            return
        interval_s = shrink_check_interval_ms(self.leaders.replica_lag_time_max_ms) / 1000
        while True:
            await trio.sleep(interval_s)
            try:
                changed = await self._write_thread(self.leaders.maybe_shrink_isr)
            except Exception:
                _log.exception("the ISR check failed (retrying in %.2f s)", interval_s)
                continue
            for tp in changed:
                self.partitions.get(tp.topic, tp.partition).notify()

    def begin_shutdown(self) -> None:
        """Stop waiting: long polls return their answer, acks=all waits fail (the mount is going away)."""
        self.closing = True


def _snapshot(
    key: ReplicaKey, leader: LeaderPartition, fetch_offset: int, validation: FetchValidation
) -> FetchSnapshot:
    """The answer to a fetch, rendered (a worker thread: it reads segment files and copies up to 1 MiB)."""
    response = fetch_response(leader, fetch_offset, validation)
    return FetchSnapshot(response.render(), key, (response.high_watermark, response.isr))
