"""The leader's registry of the partitions it leads (Kafka's ReplicaManager as leader, its allPartitions): one
:class:`LeaderPartition` (core/replication/replica.py) per partition of the store that this node leads, each in its
own leader epoch, taken on first use and forgotten with their topic, and which followers are live.

**Which partitions, in which epoch.** Without a caller's ``epochs``, every partition of the store, all in
``leader_epoch`` (one node leads everything: ``logfs mount`` alone, or a cluster's single leader). With it, only
the partitions it gives an epoch to, each in that epoch (Kafka's makeLeader per partition: a node leads some
partitions and follows others); a partition it gives another epoch from then on is taken again in that epoch (with
the ISR the caller's ``isr`` records), one it gives none is no longer led here (:class:`NotLeaderOrFollower` for
whoever asks). :meth:`LeaderReplicas.retake` applies a change of ``epochs`` at once to every partition.

Kept apart from core/replication/replica.py, which holds one partition's rules (a fetch, the ISR, the HW,
acks=all): this module decides which partitions there are and which ISR a partition starts with, and knows nothing
of what a fetch does to it.

**A partition created while this node leads** starts with the ISR = the leader and every *live* follower
(Kafka's controller creates a partition with the ISR equal to its live assigned replicas: they hold nothing it
lacks). Without ZooKeeper, live means heard from within ``replica.lag.time.max.ms``: any request of the fetch
protocol (:meth:`LeaderReplicas.follower_heard`: a fetch of any partition, or the look-up of its
``.logfs/fetch/<id>`` directory that ``logfs follow`` makes every discovery round, so a follower of a leader with
no topic yet counts too). With ZooKeeper the caller's ``live`` gives the registered nodes (logfs/cluster/node.py,
read again from ZooKeeper when a topic is made, not taken from the last look of its loop).
So a producer that creates a topic and writes at once is neither refused nor told to retry (its acks=all waits
for the follower's first fetches of the new partition), and a stopped follower does not stall a new topic.

Threads: every method may be called from any thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from logfs.core.checkpoint import TopicPartition
from logfs.core.durable import now_ms as wall_clock_ms
from logfs.core.errors import NotLeaderOrFollower, UnknownTopicOrPartition
from logfs.core.log.log import Log
from logfs.core.replication.replica import ConfirmShrink, LeaderPartition
from logfs.core.store import Store

_log = logging.getLogger(__name__)


class LeaderReplicas:
    """The :class:`LeaderPartition` of every partition of a store this process leads, each in its leader epoch (one
    epoch for all without ``epochs``: the module docstring).

    Every partition of the store it leads is taken when this is built (so the HW rule applies at once, as Kafka's
    makeLeader does); a partition created later is taken on first use, and a deleted topic's partitions are
    forgotten. Any thread.
    """

    def __init__(
        self,
        store: Store,
        leader_epoch: int,
        *,
        now_ms: int | None = None,
        isr: Callable[[TopicPartition], Iterable[int]] | None = None,
        live: Callable[[], Iterable[int]] | None = None,
        epochs: Callable[[TopicPartition], int | None] | None = None,
    ) -> None:
        """``isr``: the ISR each partition the store holds now starts with (an elected leader's, from ZooKeeper),
        and one taken again in a new epoch; default this node alone. ``live``: the live replicas, a partition created
        later starts with them in its ISR (ZooKeeper: the registered nodes); default the followers heard from
        (:meth:`live_followers`). ``epochs``: the epoch this node leads each partition in, None for one it does not
        lead (the module docstring); default every partition, in ``leader_epoch``."""
        self.store = store
        self.leader_epoch = leader_epoch
        self._initial_isr = isr
        self._live = live
        self._epochs = epochs
        config = store.config
        self.node_id = config.node_id
        self.replica_ids = tuple(config.replica_ids)
        self.replica_lag_time_max_ms = config.replica_lag_time_max_ms
        self._lock = threading.Lock()
        self._partitions: dict[TopicPartition, LeaderPartition] = {}
        self._changes = 0  # partitions taken or forgotten, ISRs changed: see changes
        self._changes_lock = threading.Lock()  # ISR changes come from any thread, under their partition's lock
        # follower → when it last sent a request of the fetch protocol (ms since the epoch; any thread writes)
        self._heard: dict[int, int] = {}
        # the partitions the store holds now start with the leader alone
        # (docs/replication.md, "The ISR and the high watermark")
        self.retake(now_ms)

    def epoch_of(self, tp: TopicPartition) -> int | None:
        """The leader epoch this node leads ``tp`` in; None when it does not lead it."""
        return self.leader_epoch if self._epochs is None else self._epochs(tp)

    def leads(self, topic: str, partition: int) -> bool:
        return self.epoch_of(TopicPartition(topic, partition)) is not None

    def retake(self, now_ms: int | None = None) -> None:
        """Take every partition of the store this node leads now, in its epoch (the HW rule applies at once, as
        Kafka's makeLeader does); forget the ones it no longer leads. At construction, and after the caller's
        ``epochs`` changed. Any thread."""
        for tp, log in self.store.logs():
            if self.epoch_of(tp) is not None:
                with self._lock:  # one partition at a time: a fetch of another (the trio thread) never waits long
                    self._take(tp, log, now_ms, existing=True)
        with self._lock:
            for tp in [tp for tp in self._partitions if self.epoch_of(tp) is None]:
                del self._partitions[tp]
                self._changed()

    @property
    def changes(self) -> int:
        """A count that moves whenever a partition is taken or forgotten here or any partition's ISR changes: a
        reader that saw the same count (and the store's :attr:`Store.topology_version`) has nothing new to record,
        so it need not walk every partition (logfs/cluster/isr.py's sync, ten times a second)."""
        return self._changes

    def _changed(self) -> None:
        with self._changes_lock:
            self._changes += 1

    @property
    def followers(self) -> tuple[int, ...]:
        return tuple(r for r in self.replica_ids if r != self.node_id)

    def is_follower(self, replica_id: int) -> bool:
        """Whether ``replica_id`` may fetch: one of ``replica.ids`` other than this node."""
        return replica_id != self.node_id and replica_id in self.replica_ids

    def follower_heard(self, replica_id: int, now_ms: int | None = None) -> None:
        """Follower ``replica_id`` sent a request of the fetch protocol now: it is live for the next
        ``replica.lag.time.max.ms`` (:meth:`live_followers`). Ignored for an id that is not a follower. Any thread
        (one dict store; called on the trio thread for every fetch look-up)."""
        if self.is_follower(replica_id):
            self._heard[replica_id] = wall_clock_ms() if now_ms is None else now_ms

    def live_followers(self, now_ms: int | None = None) -> tuple[int, ...]:
        """The followers heard from within ``replica.lag.time.max.ms``, ascending: a new partition's ISR besides
        this node (module docstring). Any thread."""
        now = wall_clock_ms() if now_ms is None else now_ms
        heard = dict(self._heard)
        return tuple(r for r in self.followers if now - heard.get(r, -(1 << 62)) <= self.replica_lag_time_max_ms)

    def partition(self, topic: str, partition: int, *, now_ms: int | None = None) -> LeaderPartition:
        """The partition's leader state, taken now if this is its first use (or its topic was created again, or it is
        led in a new epoch). UnknownTopicOrPartition when the store has no such partition; NotLeaderOrFollower when
        this node does not lead it.

        The ISR it starts with: for a partition the store held when this was built, or one taken again in a new
        epoch, the caller's ``isr`` (ZooKeeper) or else the leader alone (a new leader epoch; docs/replication.md,
        "The ISR and the high watermark"); for a partition created since (or a topic created again), the leader and
        every live replica (Kafka's creation rule; the module docstring): the caller's ``live`` or else the followers
        heard from."""
        log = self.store.log(topic, partition)
        with self._lock:
            return self._take(TopicPartition(topic, partition), log, now_ms, existing=False)

    def _take(self, tp: TopicPartition, log: Log, now_ms: int | None, *, existing: bool) -> LeaderPartition:
        """See :meth:`partition`; ``existing``: taken with every partition the store holds (:meth:`retake`), so it
        starts with the recorded ISR. Caller holds the lock."""
        epoch = self.epoch_of(tp)
        if epoch is None:
            raise NotLeaderOrFollower(f"{tp.topic}-{tp.partition}: node {self.node_id} does not lead it")
        current = self._partitions.get(tp)
        if current is not None and current.log is log and current.leader_epoch == epoch:
            return current
        if existing or (current is not None and current.log is log):
            isr: Iterable[int] = [] if self._initial_isr is None else self._initial_isr(tp)
        else:
            isr = self.live_followers(now_ms) if self._live is None else self._live()
        isr = [r for r in isr if r in self.replica_ids]
        current = LeaderPartition(
            log,
            node_id=self.node_id,
            replica_ids=self.replica_ids,
            leader_epoch=epoch,
            replica_lag_time_max_ms=self.replica_lag_time_max_ms,
            isr=isr,
            name=f"{tp.topic}-{tp.partition}",
            now_ms=now_ms,
            on_isr_change=self._changed,
        )
        if not existing and len(current.isr) > 1:
            _log.info("%s: created with the ISR %s (this node and the live replicas)", current.name,
                      list(current.isr))  # fmt: skip
        self._partitions[tp] = current
        self._changed()
        return current

    def partitions(self) -> list[tuple[TopicPartition, LeaderPartition]]:
        """Every partition taken, still in the store and still led here in the epoch it was taken in (deleted topics
        and partitions no longer led are forgotten here)."""
        with self._lock:
            items = list(self._partitions.items())
        live = []
        for tp, p in items:
            try:
                log: Log | None = self.store.log(tp.topic, tp.partition)
            except UnknownTopicOrPartition:
                log = None
            epoch = self.epoch_of(tp)
            if log is p.log and epoch == p.leader_epoch:
                live.append((tp, p))
            elif log is p.log and epoch is not None:
                continue  # led in a newer epoch, not taken in it yet: kept, so that it is taken with the recorded ISR
            else:
                with self._lock:
                    if self._partitions.get(tp) is p:
                        del self._partitions[tp]
                        self._changed()
        return live

    def maybe_shrink_isr(self, now_ms: int | None = None, confirm: ConfirmShrink | None = None) -> list[TopicPartition]:
        """Apply the ISR shrink rule to every partition; the partitions whose ISR changed. Any thread."""
        now = wall_clock_ms() if now_ms is None else now_ms
        return [tp for tp, p in self.partitions() if p.maybe_shrink_isr(now, confirm).isr_changed]


def shrink_check_interval_ms(replica_lag_time_max_ms: int) -> int:
    """How often the ISR shrink rule runs: every ``replica.lag.time.max.ms`` / 2 as in Kafka, but at least every
    500 ms (a follower then leaves at most 0.5 s late, not Kafka's up to half the lag) and at most every 10 ms."""
    return max(10, min(replica_lag_time_max_ms // 2, 500))
