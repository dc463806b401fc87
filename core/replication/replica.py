"""The leader's side of replication: each partition's replicas, its ISR and its high watermark (Kafka's Partition as
leader, holding one ReplicaState per follower; docs/replication.md, "The ISR and the high watermark").

State, per partition and leader epoch (:class:`LeaderPartition`), under one lock:

* the replica set (``replica.ids``: this node and its followers), the leader epoch and the offset where it began on
  this partition (the LEO when this process took the partition: ``leader_epoch_start_offset``);
* per follower, a :class:`ReplicaState`: its LEO as the leader knows it (the offset of its latest fetch, -1 before
  any), the leader's LEO at that fetch, and when it was last caught up;
* the ISR. Every leader epoch starts with the leader alone (docs/replication.md, "The ISR and the high watermark").
  Kafka's controller may name more members at a leader election; the constructor's ``isr`` allows that for the scenarios
  ported from Kafka's PartitionTest.
* **A partition created while this node leads** starts with the ISR = the leader and every *live* follower: the
  rule, and which followers are live, are core/replication/leaderreplicas.py's (LeaderReplicas, which holds the
  LeaderPartition of every partition this node leads).

Rules (Kafka 3.9):

* **A fetch** at offset ``f`` by follower ``r`` (:meth:`LeaderPartition.record_fetch`): r's LEO becomes ``f``. r
  was caught up now if ``f`` ≥ the leader's LEO, or at its previous fetch if ``f`` reaches the leader's LEO of that
  previous fetch (``Replica.updateFetchStateOrThrow``). A fetch whose epoch diverges, or that is out of range, is
  not recorded (its offset says nothing about what r holds).
* **Join** (``maybeExpandIsr``): r joins the ISR when its LEO ≥ the HW and ≥ the epoch's start offset, so a
  follower joins only once it holds everything of the earlier epochs.
* **Leave** (``maybeShrinkIsr``, :meth:`LeaderPartition.maybe_shrink_isr`, which the mount runs every
  ``replica.lag.time.max.ms`` / 2 and at least every 500 ms): r leaves when its LEO is not the leader's and it has
  not been caught up for ``replica.lag.time.max.ms``.
* **HW** (``maybeIncrementLeaderHW``): the smallest LEO among the leader, every ISR member, and every follower
  caught up enough to join; never backwards; and not at all while the ISR is smaller than
  ``min(min.insync.replicas, replicas)`` (KAFKA-15583, Kafka ≥ 3.7). Recomputed after appends, after a fetch that
  moved a follower's LEO, after ISR changes, and when the partition is taken. With no followers it is the LEO at
  once, as before replication existed.
* **Append** (``appendRecordsToLeader``, :meth:`LeaderPartition.append_records_to_leader`): each batch goes into the
  log in this leader epoch, then the HW rule applies once, then (acks=all's fsync) the records are made durable.
* **acks=all** (``appendRecordsToLeader`` and ``DelayedProduce``): before an append, an ISR below the minimum
  refuses it (:meth:`~LeaderPartition.check_enough_replicas`, NotEnoughReplicas, nothing written); after it, the
  acknowledgement waits until the HW passes the records (:meth:`~LeaderPartition.check_replicated`). Because the HW
  never moves while the ISR is below the minimum, a HW past the records means that at least ``min.insync.replicas``
  replicas held them; an ISR below the minimum with the HW still short fails the wait at once
  (NotEnoughReplicasAfterAppend: the records are in the log but not acknowledged).
* **Fetch validation** (``Partition.readRecords``): with a last fetched epoch, its end on the leader
  (:meth:`~LeaderPartition.end_offset_for_epoch`, the epoch cache with the current epoch on top even before its
  first batch) must be known (else OFFSET_OUT_OF_RANGE), the fetch offset must not be below the log start (same),
  and the follower's epoch must not end later on the follower than on the leader (else a diverging epoch: where
  to truncate). Then the read itself: below the log start or above the LEO is OFFSET_OUT_OF_RANGE.

Where logfs differs from Kafka: there is no controller. Kafka changes the ISR through an AlterPartition request,
and until it is committed the leader counts pending members in a "maximal ISR"; here a change is committed when it
is made, and followers learn the ISR from their next fetch (they persist it for promotion decisions). Tests ported
from PartitionTest assert the state after Kafka's commit.

Threads: every method may be called from any thread. One lock per partition serialises its changes; it is taken
before the log's own lock (the HW move), never after. Properties are single attribute reads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

from logfs.core.durable import now_ms as wall_clock_ms
from logfs.core.errors import (
    LockBusy,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    UnknownReplica,
)
from logfs.core.log.epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_END_OFFSET, UNDEFINED_EPOCH_OFFSET, EpochEndOffset
from logfs.core.log.log import Log
from logfs.core.offsets import AppendInfo, LogOffsetMetadata

_log = logging.getLogger(__name__)

UNKNOWN_OFFSET = -1  # UnifiedLog.UnknownOffset: a follower's LEO before its first fetch
NO_EPOCH = -1  # a fetch's last fetched epoch when the follower has none (Kafka's absent lastFetchedEpoch)

# (partition name "topic-p", the smaller ISR) → whether it was recorded (ZooKeeper's conditional write) before use
ConfirmShrink = Callable[[str, tuple[int, ...]], bool]


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """What the leader knows of one follower (Kafka's ReplicaState): its LEO (the offset of its latest fetch), the
    leader's LEO at that fetch, when that fetch was, and when it was last caught up (ms since the epoch)."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_ms: int = 0

    def is_caught_up(self, leader_end_offset: int, now_ms: int, lag_ms: int) -> bool:
        """At the leader's LEO, or caught up within the last ``lag_ms`` (``ReplicaState.isCaughtUp``)."""
        return leader_end_offset == self.log_end_offset or now_ms - self.last_caught_up_ms <= lag_ms

    def after_fetch(self, fetch_offset: int, leader_end_offset: int, now_ms: int) -> ReplicaState:
        """The state after a fetch at ``fetch_offset`` while the leader's LEO was ``leader_end_offset``."""
        if fetch_offset >= leader_end_offset:
            caught_up = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            caught_up = max(self.last_caught_up_ms, self.last_fetch_ms)  # it reached the LEO of its previous fetch
        else:
            caught_up = self.last_caught_up_ms
        return ReplicaState(
            fetch_offset, caught_up, max(leader_end_offset, self.last_fetch_leader_log_end_offset), now_ms
        )


@dataclass(frozen=True, slots=True)
class FetchValidation:
    """The leader's verdict on a fetch before it reads: go ahead, or a diverging epoch, or out of range, or a
    fetcher at another leader epoch (``leader_epoch_error``: core/replication/fetch.py's check_leader_epoch)."""

    diverging_epoch: EpochEndOffset | None = None
    out_of_range: bool = False
    leader_epoch_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.diverging_epoch is None and not self.out_of_range and self.leader_epoch_error is None


FETCH_OK = FetchValidation()
FETCH_OUT_OF_RANGE = FetchValidation(out_of_range=True)


@dataclass(frozen=True, slots=True)
class ReplicaChange:
    """What a fetch or an ISR check changed: the ISR, and whether the HW moved."""

    isr_changed: bool = False
    high_watermark_moved: bool = False
    # a fetch recorded without waiting for the log (blocking=False) found it busy: the HW is yet to be recomputed
    # (maybe_increment_high_watermark, in a worker thread)
    high_watermark_deferred: bool = False

    @property
    def any(self) -> bool:
        return self.isr_changed or self.high_watermark_moved


NO_CHANGE = ReplicaChange()

Batch = bytes | bytearray | memoryview
# What a scope around the appends gives: the batches as they are to be appended (see append_records_to_leader).
BatchTransform = Callable[[Sequence[Batch]], Sequence[Batch]]


@dataclass(frozen=True, slots=True)
class LeaderAppend:
    """What one :meth:`LeaderPartition.append_records_to_leader` did: the appends in order, the error that stopped
    it (None when every batch went in; the batches before a bad one stay), and whether the HW moved."""

    infos: tuple[AppendInfo, ...]
    error: Exception | None
    high_watermark_moved: bool


class LeaderPartition:
    """One partition led by this node in one leader epoch. See the module docstring."""

    def __init__(
        self,
        log: Log,
        *,
        node_id: int,
        replica_ids: Sequence[int],
        leader_epoch: int,
        replica_lag_time_max_ms: int,
        isr: Iterable[int] = (),
        name: str = "",
        now_ms: int | None = None,
        on_isr_change: Callable[[], None] | None = None,
    ) -> None:
        """Take the partition as leader (Kafka's makeLeader): followers start unknown, caught up now if ``isr`` names
        them (logfs always starts with the leader alone), then the HW rule applies once. Any thread.
        ``on_isr_change``: told after every change of the ISR (``LeaderReplicas.changes``,
        core/replication/leaderreplicas.py)."""
        if node_id not in replica_ids:
            raise ValueError(f"node {node_id} leads a partition whose replicas {list(replica_ids)} do not include it")
        in_sync = {node_id, *isr}
        if not in_sync <= set(replica_ids):
            raise ValueError(f"ISR {sorted(in_sync)} is not within the replicas {list(replica_ids)}")
        now = wall_clock_ms() if now_ms is None else now_ms
        self.log = log
        self.name = name or log.directory.name
        self.node_id = node_id
        self.replica_ids = tuple(replica_ids)
        self.leader_epoch = leader_epoch
        self.leader_epoch_start_offset = log.log_end_offset
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self._lock = threading.Lock()
        self._on_isr_change = on_isr_change
        self._isr = tuple(sorted(in_sync))
        self._replicas = {
            r: ReplicaState(last_caught_up_ms=now if r in in_sync else 0) for r in self.replica_ids if r != node_id
        }
        with self._lock:
            self._maybe_increment_high_watermark(now)

    def __repr__(self) -> str:
        return (
            f"LeaderPartition({self.name!r}, epoch={self.leader_epoch}, isr={list(self._isr)}, "
            f"hw={self.log.high_watermark}, leo={self.log.log_end_offset})"
        )

    # --- what it holds (any thread) ----------------------------------------------------------------------------------

    @property
    def isr(self) -> tuple[int, ...]:
        """The in-sync replicas, ascending, this node included."""
        return self._isr

    @property
    def followers(self) -> tuple[int, ...]:
        return tuple(self._replicas)

    @property
    def min_insync_replicas(self) -> int:
        """``min.insync.replicas`` capped at the number of replicas (Kafka's effectiveMinIsr)."""
        return min(self.log.config.min_insync_replicas, len(self.replica_ids))

    @property
    def under_min_isr(self) -> bool:
        return len(self._isr) < self.min_insync_replicas

    def replica_state(self, replica_id: int) -> ReplicaState:
        """What the leader knows of follower ``replica_id``; UnknownReplica for any other id."""
        try:
            return self._replicas[replica_id]
        except KeyError:
            raise UnknownReplica(replica_id, self.replica_ids, self.node_id) from None

    def replicas_view(self, now_ms: int | None = None) -> dict[int, dict[str, int]]:
        """``{id: {log_end_offset, last_caught_up_ms}}`` for every replica, this node (at its LEO, now) included:
        what ``state`` shows (docs/replication.md, "`state` of a leader")."""
        now = wall_clock_ms() if now_ms is None else now_ms
        view = {self.node_id: {"log_end_offset": self.log.log_end_offset, "last_caught_up_ms": now}}
        for r, s in self._replicas.items():
            view[r] = {"log_end_offset": s.log_end_offset, "last_caught_up_ms": s.last_caught_up_ms}
        return dict(sorted(view.items()))

    # --- appends ------------------------------------------------------------------------------------------------------

    def append_records_to_leader(
        self,
        batches: Sequence[Batch],
        *,
        flush: bool = False,
        scope: AbstractContextManager[BatchTransform] | None = None,
    ) -> LeaderAppend:
        """Append ``batches`` to the log in this leader epoch in one append (``Log.append_batches_as_leader``: one
        validation pass, runs of batches written with one ``pwritev`` each), then apply the HW rule once, then with
        ``flush`` make the records durable (the ``.log`` only, acks=all's fsync: the indexes follow with the periodic
        flush). Kafka's ``Partition.appendRecordsToLeader``. Worker thread: it blocks on the disk; the caller
        serialises appends to one partition.

        A batch that fails (validation, producer state, the disk) stops the rest; the error is returned, not raised,
        so that the caller still answers for the batches before it. ``scope`` is held around the appends alone, not
        the HW move or the flush, and gives what makes the batches ready inside it: a transactional write holds its
        transaction open there and stamps the producer's fields (an error entering it, or from it, is raised:
        nothing was appended).
        """
        with scope if scope is not None else contextlib.nullcontext(_unchanged) as prepare:
            ready = prepare(batches)
            # one append for all (Log.append_batches_as_leader): it takes a bytearray over, copies bytes
            infos, error = self.log.append_batches_as_leader(ready, self.leader_epoch)
        moved = False
        if infos:
            moved = self.maybe_increment_high_watermark()
            if flush:
                self.log.flush_records()
        return LeaderAppend(tuple(infos), error, moved)

    # --- fetches ------------------------------------------------------------------------------------------------------

    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset:
        """Where ``epoch`` ended on this leader (Kafka's lastOffsetForLeaderEpoch): the epoch cache, with the current
        epoch on top from its start offset even before its first batch is appended (Kafka assigns it at makeLeader;
        logfs records it with that first batch). UNDEFINED for an epoch above the current one. Any thread."""
        cache = self.log.epoch_cache
        leo = self.log.log_end_offset
        latest = cache.latest_epoch()
        if latest is not None and latest >= self.leader_epoch:
            return cache.end_offset_for(epoch, leo)
        if epoch == self.leader_epoch:
            return EpochEndOffset(epoch, leo)
        if epoch > self.leader_epoch or epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH_END_OFFSET
        if latest is None:
            return EpochEndOffset(epoch, self.leader_epoch_start_offset)  # no floor: the current epoch's start
        if epoch >= latest:
            return EpochEndOffset(latest, self.leader_epoch_start_offset)
        return cache.end_offset_for(epoch, leo)

    def validate_fetch(self, fetch_offset: int, last_fetched_epoch: int) -> FetchValidation:
        """Kafka's checks before a follower's read (``Partition.readRecords``), in Kafka's order. Any thread."""
        log_start = self.log.log_start_offset
        if last_fetched_epoch != NO_EPOCH:
            end = self.end_offset_for_epoch(last_fetched_epoch)
            if end.leader_epoch == UNDEFINED_EPOCH or end.end_offset == UNDEFINED_EPOCH_OFFSET:
                return FETCH_OUT_OF_RANGE  # "could not determine the end offset of the last fetched epoch"
            if fetch_offset < log_start:
                return FETCH_OUT_OF_RANGE  # KAFKA-12486
            if end.leader_epoch < last_fetched_epoch or end.end_offset < fetch_offset:
                return FetchValidation(diverging_epoch=end)
        if fetch_offset < log_start or fetch_offset > self.log.log_end_offset:
            return FETCH_OUT_OF_RANGE
        return FETCH_OK

    def record_fetch(
        self,
        replica_id: int,
        fetch_offset: int,
        leader_end_offset: int | None = None,
        now_ms: int | None = None,
        *,
        blocking: bool = True,
    ) -> ReplicaChange:
        """Follower ``replica_id`` fetched at ``fetch_offset`` (validated) while the leader's LEO was
        ``leader_end_offset`` (default: now): update its state, let it join the ISR, move the HW (Kafka's
        updateFollowerFetchState). UnknownReplica for an id that is not a follower. Any thread.

        ``blocking=False`` never waits for a lock held across disk work: LockBusy (nothing recorded) when this
        partition is busy, and a HW left to recompute (``high_watermark_deferred``) when only the log is."""
        now = wall_clock_ms() if now_ms is None else now_ms
        leo = self.log.log_end_offset if leader_end_offset is None else leader_end_offset
        if not self._lock.acquire(blocking=blocking):
            raise LockBusy(f"{self.name}: the partition is busy")
        try:
            old = self.replica_state(replica_id)
            new = old.after_fetch(fetch_offset, leo, now)
            self._replicas[replica_id] = new
            joined = False
            if replica_id not in self._isr and self._can_join(new):
                self._isr = tuple(sorted((*self._isr, replica_id)))
                joined = True
                # It counts as caught up now: it reached the HW. Without this a follower whose first fetch came
                # after appends (its lastCaughtUp still 0) left again at the next check, before its next fetch
                # could catch it up: the ISR flapped and logged a departure (docs/replication.md, "Join").
                new = dataclasses.replace(new, last_caught_up_ms=max(new.last_caught_up_ms, now))
                self._replicas[replica_id] = new
                if self._on_isr_change is not None:
                    self._on_isr_change()
                _log.info("%s: replica %d joins the ISR at offset %d (ISR %s, leader epoch %d)",
                          self.name, replica_id, fetch_offset, list(self._isr), self.leader_epoch)  # fmt: skip
            moved = deferred = False
            if joined or new.log_end_offset != old.log_end_offset:
                try:
                    moved = self._maybe_increment_high_watermark(now, blocking=blocking)
                except LockBusy:
                    deferred = True
            return ReplicaChange(joined, moved, deferred)
        finally:
            self._lock.release()

    def _can_join(self, state: ReplicaState) -> bool:
        """Kafka's isFollowerInSync: at or past the HW and the current epoch's start offset."""
        leo = state.log_end_offset
        return leo >= self.log.high_watermark and leo >= self.leader_epoch_start_offset

    # --- ISR shrink and HW ----------------------------------------------------------------------------------------

    def maybe_shrink_isr(self, now_ms: int | None = None, confirm: ConfirmShrink | None = None) -> ReplicaChange:
        """Remove every follower that is no longer caught up (Kafka's maybeShrinkIsr), then recompute the HW. Any
        thread. ``confirm`` (with ZooKeeper: logfs/cluster/) records the smaller ISR first, under this partition's
        lock, so the HW never relies on an ISR the cluster has not recorded; False (refused) keeps the ISR."""
        now = wall_clock_ms() if now_ms is None else now_ms
        with self._lock:
            leo = self.log.log_end_offset
            lag = self.replica_lag_time_max_ms
            out = [r for r in self._isr if r != self.node_id and not self._replicas[r].is_caught_up(leo, now, lag)]
            if not out:
                return NO_CHANGE
            if confirm is not None and not confirm(self.name, tuple(r for r in self._isr if r not in out)):
                return NO_CHANGE
            self._isr = tuple(r for r in self._isr if r not in out)
            if self._on_isr_change is not None:
                self._on_isr_change()
            for r in out:
                s = self._replicas[r]
                _log.warning(
                    "%s: replica %d leaves the ISR: at offset %d, leader's LEO %d, last caught up %d ms ago "
                    "(replica.lag.time.max.ms=%d); ISR now %s",
                    self.name, r, s.log_end_offset, leo, now - s.last_caught_up_ms, lag, list(self._isr),
                )  # fmt: skip
            return ReplicaChange(True, self._maybe_increment_high_watermark(now))

    def maybe_increment_high_watermark(self, now_ms: int | None = None) -> bool:
        """Apply the HW rule (after an append); True if the HW moved. Any thread."""
        now = wall_clock_ms() if now_ms is None else now_ms
        with self._lock:
            return self._maybe_increment_high_watermark(now)

    def _maybe_increment_high_watermark(self, now: int, *, blocking: bool = True) -> bool:
        if self.under_min_isr:
            return False
        end = self.log.log_end_offset_metadata
        new_hw = end
        for r, s in self._replicas.items():
            if s.log_end_offset < new_hw.message_offset and (
                r in self._isr or s.is_caught_up(end.message_offset, now, self.replica_lag_time_max_ms)
            ):
                new_hw = LogOffsetMetadata(s.log_end_offset)
        return self.log.maybe_increment_high_watermark(new_hw, blocking=blocking) is not None

    # --- acks=all -------------------------------------------------------------------------------------------------

    def check_enough_replicas(self) -> None:
        """Before an acks=all append: NotEnoughReplicas (nothing may be written) when the ISR is below the minimum."""
        isr = self._isr
        if len(isr) < self.min_insync_replicas:
            raise NotEnoughReplicas(
                f"{self.name}: the ISR {list(isr)} is below min.insync.replicas={self.min_insync_replicas}; "
                "nothing was written"
            )

    def check_replicated(self, required_offset: int) -> bool:
        """Whether every record below ``required_offset`` is acknowledged (the HW passed it): True, False (wait), or
        NotEnoughReplicasAfterAppend when the ISR is below the minimum and the HW short of it. Any thread."""
        if self.log.high_watermark >= required_offset:
            return True
        isr = self._isr
        if len(isr) < self.min_insync_replicas:
            raise NotEnoughReplicasAfterAppend(
                f"{self.name}: records below offset {required_offset} are in the log but the ISR {list(isr)} is "
                f"below min.insync.replicas={self.min_insync_replicas} (HW {self.log.high_watermark})"
            )
        return False


def _unchanged(batches: Sequence[Batch]) -> Sequence[Batch]:
    return batches
