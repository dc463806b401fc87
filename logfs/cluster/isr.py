"""The leader's ISR in ZooKeeper: a shrink is recorded there (a conditional write on the state znode's version)
before the high watermark may rely on the smaller ISR; expansions and new partitions are recorded after (a larger
ISR only makes the HW more careful); a deleted topic is recorded for the replicas that have not applied it.

Kafka's 2.4-style leader (Kafka 2.4's ``Partition.maybeShrinkIsr``; docs/replication.md, "The rules"): a refused
conditional write means someone else — a newer controller's election — rewrote the state, so the leader is deposed:
:attr:`IsrRecorder.fenced` is set and the node stops acknowledging (``logfs/cluster/node.py``). A write ZooKeeper does
not answer keeps the larger ISR (the HW waits, acks=all fsyncs time out: the safe outcome) and is tried again at the
next check.

Threads: worker threads only (blocking ZooKeeper calls); one lock serialises the shrink check and the expansion sync,
so that the ISR recorded in ZooKeeper is never larger-then-smaller out of order. The trio side reads
:attr:`fenced`.
"""

from __future__ import annotations

import logging
import threading

from logfs.cluster.assignment import assign_added_partitions, assign_replicas
from logfs.cluster.rules import PartitionState
from logfs.cluster.topics import Assignments
from logfs.cluster.zk import ZooKeeper
from logfs.cluster.zkerrors import Conflict, Fenced, Superseded, ZkUnavailable
from logfs.cluster.znodes import Versioned
from logfs.core.checkpoint import TopicPartition
from logfs.core.durable import now_ms as wall_clock_ms
from logfs.core.replication.leaderreplicas import LeaderReplicas
from logfs.core.replication.replica import LeaderPartition

_log = logging.getLogger(__name__)


class IsrRecorder:
    """The ISR of every partition this node leads, each in its own leader epoch, as recorded in ZooKeeper. See the
    module docstring."""

    def __init__(
        self,
        zk: ZooKeeper,
        leaders: LeaderReplicas,
        recorded: dict[tuple[str, int], Versioned],
        *,
        controller_epoch: int,
        assignments: Assignments | None = None,
    ) -> None:
        """``assignments``: the topics' recorded assignments, which :meth:`sync` completes for new topics and
        partitions (``logfs/cluster/topics.py``); a fresh one (read from nothing) when not given."""
        self.zk = zk
        self.assignments = assignments if assignments is not None else Assignments()
        self.leaders = leaders
        self.node_id = leaders.node_id
        self.controller_epoch = controller_epoch
        self._recorded = dict(recorded)
        self._lock = threading.Lock()
        self.fenced: str | None = None  # why, once a conditional write was refused
        # (LeaderReplicas.changes, Store.topology_version) when a sync last found everything recorded; None: walk
        # again (any write of a recorded ISR outside sync, such as a shrink's, clears it)
        self._synced: tuple[int, int] | None = None
        self._held: set[str] = set()  # the topics this leader has held in this epoch (see sync)

    def newer_than(self, states: dict[tuple[str, int], Versioned]) -> dict[tuple[str, int], Versioned]:
        """``states`` (read from ZooKeeper) with what this recorder wrote since: for each partition, the record of
        the higher znode version. A node adopting a new epoch reads every state while the previous epoch's recorder
        still runs; the new recorder starts from this, so that its next conditional write expects the version
        ZooKeeper holds (a partition whose epoch did not change keeps its znode and version)."""
        with self._lock:
            mine = dict(self._recorded)
        out = dict(states)
        for key, record in mine.items():
            if key not in out or record.version > out[key].version:
                out[key] = record
        return out

    @property
    def synced(self) -> bool:
        """Whether ZooKeeper records everything this leader holds now: the last :meth:`sync` found nothing left to
        write, and nothing was taken, forgotten, created or deleted since."""
        return self._synced == (self.leaders.changes, self.leaders.store.topology_version)

    def _state(self, isr: tuple[int, ...], epoch: int) -> PartitionState:
        """A partition's state as this leader records it, in the partition's own leader epoch (a controller moves a
        partition's epoch alone when only its ISR loses a dead replica)."""
        return PartitionState(self.node_id, epoch, tuple(sorted(isr)), self.controller_epoch)

    def _write(self, topic: str, partition: int, isr: tuple[int, ...], epoch: int) -> bool:
        """Record ``isr`` for the partition, led in ``epoch``; True once ZooKeeper holds it. Caller holds the
        lock."""
        self._synced = None
        key = (topic, partition)
        state = self._state(isr, epoch)
        recorded = self._recorded.get(key)
        try:
            if recorded is None:
                version = self.zk.create_state(topic, partition, state)
            else:
                version = self.zk.set_state(topic, partition, state, recorded.version)
        except Superseded as exc:
            _log.info("%s: waiting for this node to adopt the newer epoch", exc)
            return False
        except Fenced as exc:
            self.fenced = str(exc)
            _log.error("fenced: %s", exc)
            return False
        except ZkUnavailable as exc:
            _log.warning("%s-%d: cannot record the ISR %s in ZooKeeper (%s): keeping the recorded one", topic,
                         partition, list(isr), exc)  # fmt: skip
            return False
        self._recorded[key] = Versioned(state, version)
        return True

    def _write_many(
        self, writes: list[tuple[str, int, PartitionState, int | None]], names: dict[tuple[str, int], str]
    ) -> set[tuple[str, int]] | None:
        """Record every write of ``writes`` in one batch (see :meth:`_write`); the partitions now recorded, or None
        when ZooKeeper did not answer (nothing is known). Sets :attr:`fenced` on a refusal. Caller holds the lock."""
        self._synced = None
        try:
            answers = self.zk.write_states(writes)
        except ZkUnavailable as exc:
            _log.warning("cannot record %d ISRs in ZooKeeper (%s): keeping the recorded ones", len(writes), exc)
            return None
        done: set[tuple[str, int]] = set()
        for topic, partition, state, _ in writes:
            key = (topic, partition)
            answer = answers[key]
            if isinstance(answer, Superseded):
                _log.info("%s: waiting for this node to adopt the newer epoch", answer)
            elif isinstance(answer, Fenced):
                if self.fenced is None:
                    self.fenced = str(answer)
                    _log.error("fenced: %s", answer)
            else:
                self._recorded[key] = Versioned(state, answer)
                done.add(key)
                _log.info("%s: ISR %s recorded in ZooKeeper (leader epoch %d)", names[key], list(state.isr),
                          state.leader_epoch)  # fmt: skip
        return done

    def shrink(self) -> list[TopicPartition]:
        """The ISR shrink rule of every partition, each shrink recorded in ZooKeeper first; the partitions whose ISR
        changed.

        In three steps, so that 10,000 partitions leaving together cost one batch of writes, not 10,000 serial
        round trips under the recorder's lock: the rule is run once with a ``confirm`` that only notes each shrink it
        would make and refuses it (nothing changes); the noted ISRs are recorded in one batch; the rule is run again
        at the same instant with a ``confirm`` that accepts a shrink only when ZooKeeper now holds exactly that ISR
        (one that changed in between is recorded on its own first). A shrink noted and recorded but not made the
        second time (the follower caught up in between) leaves ZooKeeper's ISR smaller than the leader's, which is
        the safe direction (the HW only waits for more replicas), and the next :meth:`sync` records the larger one."""
        parts = {p.name: (tp, p.leader_epoch) for tp, p in self.leaders.partitions()}
        now = wall_clock_ms()
        noted: dict[str, tuple[int, ...]] = {}

        def note(name: str, isr: tuple[int, ...]) -> bool:
            noted[name] = isr
            return False

        with self._lock:
            if self.fenced is not None:
                return []
            self.leaders.maybe_shrink_isr(now, confirm=note)
            if not noted:
                return []  # the usual case: one pass over the partitions, nothing to record
            writes: list[tuple[str, int, PartitionState, int | None]] = []
            names: dict[tuple[str, int], str] = {}
            for name, isr in noted.items():
                if name not in parts:
                    continue
                tp, epoch = parts[name]
                recorded = self._recorded.get((tp.topic, tp.partition))
                version = None if recorded is None else recorded.version
                writes.append((tp.topic, tp.partition, self._state(isr, epoch), version))
                names[(tp.topic, tp.partition)] = name
            done = self._write_many(writes, names) if writes else set()
            if done is None:
                return []  # ZooKeeper did not answer: every ISR stays as it is (the HW waits); tried again later

            def confirm(name: str, isr: tuple[int, ...]) -> bool:
                if name not in parts or self.fenced is not None:
                    return False
                tp, epoch = parts[name]
                recorded = self._recorded.get((tp.topic, tp.partition))
                if recorded is not None and recorded.state == self._state(isr, epoch):
                    return True  # recorded in the batch above
                if not self._write(tp.topic, tp.partition, isr, epoch):
                    return False
                _log.info("%s: ISR %s recorded in ZooKeeper (leader epoch %d)", name, list(isr), epoch)
                return True

            return self.leaders.maybe_shrink_isr(now, confirm=confirm)

    def _assign(self, live: list[tuple[TopicPartition, LeaderPartition]]) -> bool:
        """Record the assignment of every topic of ``live`` that ZooKeeper lacks or that lacks some of its partitions,
        before their states are recorded, as Kafka's admin client writes ``/brokers/topics/<t>`` before the controller
        makes the partitions: a new topic's over every replica from a random start (``assignment.assign_replicas``:
        every node holds a copy while one node leads all), a grown topic's continuing the pattern
        (``assign_added_partitions``). True when every one is recorded. Caller holds the lock."""
        counts: dict[str, int] = {}
        for tp, _ in live:
            counts[tp.topic] = max(counts.get(tp.topic, 0), tp.partition + 1)
        unread = sorted(t for t in counts if self.assignments.recorded(t) is None)
        if unread:  # a topic made by an earlier logfs, or by this leader just now: one multiRead for all
            try:
                read = self.zk.assignments(unread)
            except ZkUnavailable as exc:
                _log.warning("cannot read %d topics' assignments yet (%s)", len(unread), exc)
                return False
            for topic, (found, found_version) in read.items():
                if found is not None:
                    self.assignments.record(topic, found, found_version)
                else:
                    self.assignments.record_empty(topic, found_version)
        nodes = self.leaders.replica_ids
        complete = True
        for topic, count in sorted(counts.items()):
            recorded = self.assignments.recorded(topic)
            known, version = (None, None) if recorded is None else (recorded[0], recorded[1])
            if known is not None and all(p in known for p in range(count)):
                continue
            if known is None or sorted(known) != list(range(len(known))):
                assignment = assign_replicas(count, len(nodes), nodes)
            else:
                assignment = {**known, **assign_added_partitions(known, count - len(known), nodes)}
            try:
                written = self.zk.write_assignment(topic, assignment, version)
            except (Conflict, ZkUnavailable) as exc:
                _log.warning("topic %s: cannot record its assignment yet (%s)", topic, exc)
                self.assignments.forget(topic)
                complete = False
                continue
            self.assignments.record(topic, assignment, written)
            _log.info("topic %s: assignment recorded in ZooKeeper: %s", topic,
                      " ".join(f"{p}:{','.join(map(str, r))}" for p, r in sorted(assignment.items())))  # fmt: skip
        return complete

    def sync(self) -> list[str]:
        """Record every ISR that grew and every new partition (all of them in one pipelined batch: a leader that
        creates or takes 10,000 partitions waits for a few round trips, not 10,000); return the topics that were
        deleted here since they were recorded (their state znodes are removed and the deletion is kept for the other
        replicas)."""
        with self._lock:
            if self.fenced is not None:
                return []
            # Ten times a second: with nothing taken, forgotten, created, deleted or changed in an ISR since the last
            # sync that recorded everything, there is nothing to record, and no partition is walked (an idle leader
            # of 10,000 partitions). The counts are read before the walk, so a change during it is seen next time.
            seen = (self.leaders.changes, self.leaders.store.topology_version)
            if seen == self._synced:
                return []
            complete = True
            live = self.leaders.partitions()
            writes: list[tuple[str, int, PartitionState, int | None]] = []
            names: dict[tuple[str, int], str] = {}
            for tp, p in live:
                recorded = self._recorded.get((tp.topic, tp.partition))
                state = self._state(p.isr, p.leader_epoch)
                if recorded is not None and recorded.state == state:
                    continue
                writes.append((tp.topic, tp.partition, state, None if recorded is None else recorded.version))
                names[(tp.topic, tp.partition)] = p.name
            if not self._assign(live):
                complete = False
            if writes:
                done = self._write_many(writes, names)
                if self.fenced is not None:
                    return []
                complete = complete and done is not None and len(done) == len(writes)
            present = {(tp.topic, tp.partition) for tp, _ in live}
            self._held.update(t for t, _ in present)
            store = self.leaders.store
            # Only a topic this leader held and then deleted is recorded as deleted: a topic recorded in ZooKeeper
            # that this store never had (a leader elected before it had fetched a new topic) is not a deletion, and
            # recording one would delete the topic on every replica.
            gone = sorted({t for (t, p) in self._recorded
                           if t in self._held and (t, p) not in present and not store.has_topic(t)})  # fmt: skip
            for topic in gone:
                try:
                    self.zk.record_deletion(topic, [self.node_id])
                except ZkUnavailable as exc:
                    _log.warning("topic %s: cannot record its deletion in ZooKeeper yet (%s)", topic, exc)
                    complete = False
                    continue
                for key in [k for k in self._recorded if k[0] == topic]:
                    del self._recorded[key]
                self.assignments.forget(topic)  # a topic made again under this name gets an assignment of its own
                self._held.discard(topic)
                _log.info("topic %s: deletion recorded in ZooKeeper until every replica applied it", topic)
            if complete:
                self._synced = seen
            return gone
