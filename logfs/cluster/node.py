"""One node of a ZooKeeper cluster (``logfs mount … --config zookeeper.connect=…``): it registers, may become the
controller and elect, and switches its mount's role in place as ZooKeeper's leadership says (docs/replication.md,
"Automatic failover").

Theory of operation.

* **One loop** (:meth:`ClusterNode.run`) reads the words kazoo's callbacks hand over
  (``logfs/cluster/zksession.py``) and, after each batch of them (and at least every ``RECONCILE_S``), *reconciles* in
  a worker thread: register if not registered; take the controller's part (``logfs/cluster/controller.py``: become
  the controller when there is none; as controller, elect when needed and write every partition state, then the
  leadership); then read the leadership (watched) and act on it.
* **Acting** (``rules.decide``): a newer epoch naming this node → lead: stop fetching, take every partition in that
  epoch with the ISR ZooKeeper records (``LeaderReplicas``), record the epoch in the store's replica state, and serve
  writes and fetches (``Operations.set_role``). Naming another node → follow it: its advertised mount is tailed by
  the follower daemon's own code (``logfs.follower.daemon.Follower``), in this process, every fetch naming the
  leader epoch ZooKeeper gave (the three-part fetch name); the leader refuses another epoch (FENCED_LEADER_EPOCH /
  UNKNOWN_LEADER_EPOCH) and the node then reads ZooKeeper again at once. The mount answers EROFS to writes.
  Naming nobody → read-only, no fetching. A newer epoch naming this node while it leads → adopted silently
  (the partitions are taken again in that epoch; waiting acks go on).
* **Fencing**: the session expired, a conditional write refused, or a newer epoch naming another node → stop
  acknowledging at once: waiting fsyncs and O_SYNC writes fail with EIO, new writes with EROFS; then follow.
  A leader fenced while the leadership still names it re-registers (a new broker epoch), so the controller elects
  again. A store gone offline (``Store.offline``) → the node stops leading or fetching and leaves the cluster
  (its registration is deleted), so the controller elects another leader.
* **Deletions**: a topic the leader deleted is recorded under ``/admin/delete_topics`` (``logfs/cluster/isr.py``);
  every node deletes such a topic from its store before it leads or follows, and says so there; the record goes
  once every replica applied it, so a node that was down cannot bring the topic back.

Threads: the trio thread; ZooKeeper and store calls in worker threads.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import trio

from logfs.cluster.controller import Controller
from logfs.cluster.isr import IsrRecorder
from logfs.cluster.rules import NO_LEADER, NO_LEADERSHIP, Action, Broker, Leadership, decide
from logfs.cluster.topics import Assignments
from logfs.cluster.zk import ZooKeeper
from logfs.cluster.zkauth import Credential
from logfs.cluster.zkerrors import NotAuthorized, StillRegistered, ZkUnavailable
from logfs.cluster.zksession import SESSION_CONNECTED, SESSION_EXPIRED
from logfs.cluster.znodes import Versioned
from logfs.core.checkpoint import TopicPartition
from logfs.core.errors import LogfsError
from logfs.core.groups.offsets import OFFSETS_TOPIC_CONFIG
from logfs.core.groups.records import OFFSETS_TOPIC
from logfs.core.replication.leaderreplicas import LeaderReplicas, shrink_check_interval_ms
from logfs.core.replication.promotion import (
    PersistedReplicaState,
    UnreadableReplicaState,
    latest_partition_epoch,
    read_replica_state,
    write_replica_state,
)
from logfs.core.store import NewTopic, Store
from logfs.core.storeconfig import StoreConfig
from logfs.core.txn.labellog import TRANSACTION_STATE_CONFIG
from logfs.core.txn.records import TRANSACTION_STATE_TOPIC
from logfs.follower.daemon import Follower
from logfs.follower.fetch import FetchResponse
from logfs.mount.errors import NotRecorded
from logfs.mount.operations import Operations
from logfs.mount.replication import LeaderReplication

_log = logging.getLogger(__name__)

T = TypeVar("T")

# The internal topics' configs (compacted, as their coordinators make them), for one made from ZooKeeper's record
INTERNAL_TOPIC_CONFIGS = {OFFSETS_TOPIC: OFFSETS_TOPIC_CONFIG, TRANSACTION_STATE_TOPIC: TRANSACTION_STATE_CONFIG}

RECONCILE_S = 1.0  # reconcile at least this often, even with no event (a registration to retry)
OFFLINE_POLL_S = 0.05  # how often the store's offline flag is read (one attribute, no lock): a leader whose store
# failed gives leadership up within this, not within RECONCILE_S
ISR_SYNC_S = 0.1  # how often a leader records grown ISRs and new partitions
ROLE_LEADER, ROLE_FOLLOWER, ROLE_NONE = "leader", "follower", "none"


def _no_view(topic: str, partition: int) -> tuple[int, tuple[int, ...]]:
    return -1, ()


class ClusterNode:
    """This process's membership of the cluster. Build and run inside ``trio.run``. See the module docstring."""

    def __init__(
        self, ops: Operations, store: Store, config: StoreConfig, mountpoint: Path, credential: Credential | None = None
    ) -> None:
        self.ops = ops
        self.store = store
        self.config = config
        self.node_id = config.node_id
        self.mountpoint = mountpoint
        self.advertised = config.advertised_mount or str(mountpoint)
        self.zk = ZooKeeper(config.zookeeper_connect, config.zookeeper_session_timeout_ms, credential,
                            secure=config.zookeeper_set_acl)  # fmt: skip
        self.role = ROLE_NONE
        self.leadership = NO_LEADERSHIP  # the leadership this node last acted on
        self.acted_epoch = -1
        self.broker_epoch = -1  # czxid of this node's registration; -1 while unregistered
        self.controller = Controller(self.zk, self.node_id, config)  # logfs/cluster/controller.py
        # every topic's replica assignment (logfs/cluster/topics.py); a reader (the trio thread) that meets a
        # partition it lacks nudges the loop, which reads it again
        self.assignments = Assignments(on_stale=self.zk.nudge)
        self._recorder: IsrRecorder | None = None
        self._follower: Follower | None = None
        # The leader and leader epoch ZooKeeper records for each partition (each partition has its own epoch: a
        # controller moves only the epochs of the partitions whose ISR lost a dead replica), read at each leadership
        # acted on: what a follower's fetches name and what <topic>/<p>/leader shows; a partition not recorded there
        # yet (made since) is in the leadership's epoch.
        self._partition_leaders: dict[tuple[str, int], tuple[int, int]] = {}
        self._epochs_stale = False  # the read of those failed, or the leader refused an epoch: read them again
        self._role_scope: trio.CancelScope | None = None
        self._role_done: trio.Event | None = None
        self._nursery: trio.Nursery | None = None
        self._live: set[int] = set()  # the registered nodes at the last reconcile
        self._left = False  # the store went offline: this node left the cluster
        self._refused: str | None = None  # what ZooKeeper's ACLs last refused (said once at ERROR, not every second)
        self._limiter = trio.CapacityLimiter(1)  # ZooKeeper calls, one at a time
        ops.set_role(None, _no_view)
        # writes to a partition another node leads go to that node's mount (mount/forwarding.py): node.mounts, else
        # the mount it registered
        self.node_mounts = {node: Path(path) for node, path in config.node_mount_paths().items()}
        ops.forwarder.target = self.forward_target
        ops.forwarder.refresh = self.zk.nudge
        ops.forwarder.replicate = self._replicate_now
        ops.writer.record_topics = self._record_topics

    # --- what the mount shows ---------------------------------------------------------------------------------------

    def leader_file(self) -> dict[str, Any]:
        return self.leadership.leader_file()

    def forward_target(self, topic: str, partition: int) -> Path | None:
        """Where a write to a partition this node does not lead goes (``mount/forwarding.py``): its leader's mount, as
        ``node.mounts`` maps it or as it registered it; this node's own when it leads now (a handle opened while it
        followed moves here); None while no leader is known."""
        leadership = self.leadership
        if leadership.leader == self.node_id and self.role == ROLE_LEADER:
            return self.mountpoint
        if leadership.leader in (NO_LEADER, self.node_id) or not leadership.mount:
            return None
        return self.node_mounts.get(leadership.leader, Path(leadership.mount))

    async def _record_topics(self) -> None:
        """A topic was made, grown or deleted on this leader's mount: return once ZooKeeper records the topics as they
        are now (assignments and partition states; a deletion under ``/admin/delete_topics``), so that what mkdir or
        rmdir acknowledged survives this node: a node elected after its death makes every topic the assignments
        name that its store lacks (:meth:`_take_recorded_topics`), and deletes what is recorded deleted. NotRecorded
        (ETIMEDOUT) when ZooKeeper has not recorded it within ``request.timeout.ms`` (or this node was fenced)."""
        deadline = trio.current_time() + self.config.request_timeout_ms / 1000
        taken: IsrRecorder | None = None
        if self.broker_epoch >= 0:
            # A new partition starts with the registered nodes in its ISR (``live`` in _become_leader); the set the
            # last reconcile read may predate a node's registration by a watch and a dozen ZooKeeper round trips
            # under load, and an ISR of this node alone would refuse the creator's first acks=all write at once.
            with contextlib.suppress(ZkUnavailable):
                self._live = set(await self._zk(functools.partial(self.zk.live_brokers, watch=False)))
        while True:
            # the recorder of the leadership this node holds now: a new one while it adopts an epoch (none for a
            # moment), none once it stopped leading (then the change is not recorded by it)
            recorder = self._recorder
            if recorder is not None:
                if taken is not recorder:  # a partition is otherwise taken at its first use: take the new ones now
                    await trio.to_thread.run_sync(recorder.leaders.retake)
                    taken = recorder
                await self._zk(recorder.sync)
                if recorder.synced:
                    return
            if (recorder is not None and recorder.fenced is not None) or self.role != ROLE_LEADER or \
                    trio.current_time() >= deadline:  # fmt: skip
                raise NotRecorded("made here, but ZooKeeper has not recorded it within request.timeout.ms "
                                  f"({self.config.request_timeout_ms} ms): a leader elected after this node's death "
                                  "may not know of it")  # fmt: skip
            await trio.sleep(ISR_SYNC_S)

    async def _take_recorded_topics(self, states: dict[tuple[str, int], Versioned]) -> None:
        """About to lead: make every topic (and partition) ZooKeeper records — in its assignment, or by its partition
        states (a topic an earlier logfs recorded without an assignment) — that this store lacks and that is not
        recorded deleted. Its leader acknowledged it once ZooKeeper recorded it (:meth:`_record_topics`)
        and died before this node's discovery saw it: made with the default config and owner (configs and owners
        are kept in the stores, not in ZooKeeper: a change of them that recent is lost with its leader)."""
        pending = await self._zk(self.zk.pending_deletions)
        counts = {topic: max(assignment) + 1 for topic, (assignment, _) in self.assignments.all().items() if assignment}
        for topic, partition in states:
            counts[topic] = max(counts.get(topic, 0), partition + 1)
        missing: list[NewTopic] = []
        grown: list[tuple[str, int]] = []
        for topic, count in sorted(counts.items()):
            if topic in pending:
                continue
            if not self.store.has_topic(topic):  # an internal one with its own config (compacted)
                config = INTERNAL_TOPIC_CONFIGS.get(topic)
                missing.append(NewTopic(topic, count, None if config is None else dict(config)))
            else:
                grown += [(topic, p) for p in range(len(self.store.partitions(topic)), count)]
        for new in missing:
            try:
                await trio.to_thread.run_sync(self.store.create_topics, [new])
            except (LogfsError, OSError) as exc:  # this store cannot take it: it leads the rest all the same
                _log.error("node %d cannot make topic %s, which ZooKeeper records: %s", self.node_id, new.name, exc)
                continue
            _log.warning("node %d made topic %s as ZooKeeper records it (its leader died before this node had it): "
                         "default config and owner", self.node_id, new.name)  # fmt: skip
        for topic, p in grown:
            try:
                await trio.to_thread.run_sync(self.store.add_partition, topic, p)
            except (LogfsError, OSError) as exc:
                _log.error("node %d cannot add partition %d to topic %s: %s", self.node_id, p, topic, exc)
                break
            _log.warning("node %d added partition %d to topic %s as ZooKeeper records it", self.node_id, p, topic)

    def _replicate_now(self) -> None:
        """A change this node forwarded (a mkdir, an rmdir, a config) waits to be seen here: look at the leader now."""
        if self._follower is not None:
            self._follower.discover_now()

    def partition_leader_file(self, topic: str, partition: int) -> dict[str, Any]:
        """What ``<topic>/<p>/leader`` shows: the partition's leader and its own leader epoch, as ZooKeeper recorded
        them at the leadership this node acted on last (one node leads every partition for now); a partition made
        since, the leadership's."""
        shown = self.leadership.leader_file()
        recorded = self._partition_leaders.get((topic, partition))
        if recorded is not None and recorded[0] == shown["node_id"]:
            shown["leader_epoch"] = recorded[1]
        return shown

    def state_fields(self) -> dict[str, Any]:
        """What ``state`` gains: the session (connected, suspended or expired) and the controller's id (-1: none)."""
        current = self.controller.current
        return {"zookeeper_session": self.zk.session, "controller": -1 if current is None else current}

    def render_metrics(self) -> str:
        """``.logfs/metrics`` lines: this node's role, the leader and its epoch, the session, the controller."""
        lines = []
        for name, kind, help_text, samples in (
            ("logfs_cluster_role", "gauge", "1 for this node's role (leader, follower or none).",
             [(f'{{role="{r}"}}', int(r == self.role)) for r in (ROLE_LEADER, ROLE_FOLLOWER, ROLE_NONE)]),
            ("logfs_cluster_leader", "gauge", "The node id ZooKeeper names leader (-1: none).",
             [("", self.leadership.leader)]),
            ("logfs_cluster_leader_epoch", "gauge", "The leader epoch this node acted on last.",
             [("", self.leadership.leader_epoch)]),
            ("logfs_cluster_controller", "gauge", "The controller's node id (-1: none known).",
             [("", -1 if self.controller.current is None else self.controller.current)]),
            ("logfs_zookeeper_session", "gauge", "1 for the ZooKeeper session's state.",
             [(f'{{state="{s}"}}', int(s == self.zk.session)) for s in ("connected", "suspended", "expired")]),
        ):  # fmt: skip
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
            lines += [f"{name}{labels} {value}" for labels, value in samples]
        return "\n".join(lines) + "\n"

    # --- plumbing -------------------------------------------------------------------------------------------------

    async def _zk(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(functools.partial(fn, *args), limiter=self._limiter)

    # --- the loop -------------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Take part in the cluster until cancelled; the session is closed on the way out."""
        _log.info("node %d joins the cluster at ZooKeeper %s (advertised mount %s, session timeout %d ms)",
                  self.node_id, self.config.zookeeper_connect, self.advertised,
                  self.config.zookeeper_session_timeout_ms)  # fmt: skip
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._watch_offline)
                await self._connect()
                while True:
                    words = await self._next_words()
                    recorder = self._recorder
                    if recorder is not None and recorder.fenced is not None and self.role == ROLE_LEADER:
                        await self._fence(recorder.fenced)
                        if self.leadership.leader == self.node_id and self.broker_epoch >= 0:
                            # ZooKeeper still names this node: a new registration makes the controller elect again
                            self.broker_epoch = -1
                            with contextlib.suppress(ZkUnavailable, StillRegistered):
                                self.broker_epoch = await self._zk(self.zk.reregister, self._broker())
                    if SESSION_EXPIRED in words and not self._left:
                        _log.warning("node %d: ZooKeeper session expired", self.node_id)
                        self.broker_epoch = -1
                        self.controller.forget()
                        if self.role == ROLE_LEADER:
                            await self._fence("its ZooKeeper session expired")
                    try:
                        await self._reconcile()
                    except Exception:  # a bug: its traceback in the log, and the node tries again (the mount serves on)
                        _log.exception("node %d: reconciling with ZooKeeper failed unexpectedly", self.node_id)
        finally:
            with trio.CancelScope(shield=True):
                await self._stop_role()
                await trio.to_thread.run_sync(self.zk.stop)

    async def _connect(self) -> None:
        timeout_s = max(1.0, self.config.zookeeper_session_timeout_ms / 1000)
        while True:
            try:
                await trio.to_thread.run_sync(self.zk.start, timeout_s, abandon_on_cancel=True)
                return
            except ZkUnavailable as exc:
                _log.warning("node %d: %s; retrying", self.node_id, exc)
                await trio.sleep(1.0)

    async def _watch_offline(self) -> None:
        """Nudge the loop as soon as the store goes offline (core/logdirfailure.py has no listener to call us)."""
        while self.store.offline is None:
            await trio.sleep(OFFLINE_POLL_S)
        self.zk.nudge()

    async def _next_words(self) -> set[str]:
        words: set[str] = set()
        with trio.move_on_after(RECONCILE_S):
            words.add(await self.zk.events.receive())
        while True:
            try:
                words.add(self.zk.events.receive_nowait())
            except trio.WouldBlock:
                return words

    # --- reconciling ----------------------------------------------------------------------------------------------

    async def _reconcile(self) -> None:
        if self._left:
            return
        if self.store.offline is not None:
            await self._leave(f"store {self.store.path} is offline ({self.store.offline.describe()})")
            return
        try:
            if self.broker_epoch < 0 and self.zk.session == SESSION_CONNECTED:
                self.broker_epoch = await self._zk(self.zk.register, self._broker())
                _log.info("node %d registered in ZooKeeper (broker epoch %d)", self.node_id, self.broker_epoch)
            await self._zk(self.controller.control, self.broker_epoch >= 0)
            self._live = set(await self._zk(self.zk.live_brokers)) if self.broker_epoch >= 0 else set()
            await self._zk(self.assignments.refresh, self.zk)
            leadership, _ = await self._zk(self.zk.leadership)
            await self._apply_deletions()
            if self._epochs_stale and self.role == ROLE_FOLLOWER and leadership == self.leadership:
                await self._read_follow_epochs(leadership)
            self._refused = None
        except NotAuthorized as exc:
            if str(exc) != self._refused:
                _log.error("node %d: ZooKeeper refuses it: %s; see zookeeper.auth.file", self.node_id, exc)
            self._refused = str(exc)
            return
        except ZkUnavailable as exc:
            _log.debug("node %d: ZooKeeper unavailable: %s", self.node_id, exc)
            return
        except LogfsError as exc:
            _log.error("node %d: %s", self.node_id, exc)
            return
        except StillRegistered as exc:
            _log.info("node %d: waiting to register: %s", self.node_id, exc)
            return
        await self._act(leadership)

    def _broker(self) -> Broker:
        try:
            persisted = read_replica_state(self.store.path)
        except UnreadableReplicaState:
            persisted = None
        seen = max(latest_partition_epoch(self.store), -1 if persisted is None else persisted.highest_epoch)
        return Broker(self.node_id, self.advertised, seen)

    async def _apply_deletions(self) -> None:
        """Delete here every topic ZooKeeper records as deleted, and say so there."""
        pending = await self._zk(self.zk.pending_deletions)
        for topic, (done, _) in pending.items():
            if self.node_id in done:
                continue
            if self.store.has_topic(topic) and self.role != ROLE_LEADER:
                await trio.to_thread.run_sync(self.store.delete_topic, topic)
                self.ops.topic_deleted(topic)
                _log.info("topic %s: deleted here, as recorded in ZooKeeper", topic)
            if not self.store.has_topic(topic):
                self.assignments.forget(topic)  # a topic made again under this name has an assignment of its own
                await self._zk(self.zk.deletion_applied, topic, self.node_id, self.config.replica_ids)

    # --- roles ----------------------------------------------------------------------------------------------------

    async def _act(self, seen: Leadership) -> None:
        action = decide(self.node_id, self.broker_epoch, self.role == ROLE_LEADER, self.acted_epoch, seen)
        if action is Action.IGNORE:
            return
        previous = self.leadership
        self.acted_epoch = seen.leader_epoch
        # .logfs/leader shows the new leadership only once this node's role matches it (a writer that reads it and
        # finds this node named is not refused by a switch still under way)
        if action is Action.FOLLOW:
            if self.role == ROLE_FOLLOWER and (seen.leader, seen.mount) == (previous.leader, previous.mount):
                self.leadership = seen
                await self._read_follow_epochs(seen)  # the fetches say each partition's new epoch from now on
                return  # the same leader in a newer epoch (it adopted it): keep fetching
            if self.role == ROLE_LEADER:
                await self._fence(f"leader epoch {seen.leader_epoch} names node {seen.leader}")
            await self._become_follower(seen)
            self.leadership = seen
        else:
            try:
                await self._become_leader(seen, adopt=action is Action.ADOPT)
                self.leadership = seen
            except (ZkUnavailable, LogfsError, OSError) as exc:
                _log.error("node %d cannot lead in epoch %d: %s", self.node_id, seen.leader_epoch, exc)
                self.acted_epoch = previous.leader_epoch

    async def _become_leader(self, seen: Leadership, *, adopt: bool) -> None:
        epoch = seen.leader_epoch
        if self.role == ROLE_FOLLOWER:
            # the follower stops first: at 10,000 partitions its fetch threads slow the read of every state (the
            # GIL), and it must stop before this node leads anyway; a read that fails leaves it without fetching
            # until the next reconcile tries again (``_act``). A leader adopting an epoch keeps its tasks until then.
            await self._stop_role()
        states: dict[tuple[str, int], Versioned] = await self._zk(self.zk.partition_states)
        await self._zk(functools.partial(self.assignments.refresh, self.zk, everything=True))
        previous = self._recorder
        await self._stop_role()
        if adopt and previous is not None:
            # what the previous epoch's recorder wrote while the states were read (its tasks ran on): newer than the
            # read, and the one ZooKeeper holds now (a partition whose epoch did not change keeps its version)
            states = previous.newer_than(states)
        await self._take_recorded_topics(states)
        node = self.node_id
        await trio.to_thread.run_sync(write_replica_state, self.store.path,
                                      PersistedReplicaState(node, epoch, epoch, (node,), True))  # fmt: skip

        def isr(tp: TopicPartition) -> tuple[int, ...]:
            """The recorded ISR of a partition the store holds; one not recorded yet (created since the last record)
            starts with every live replica, as a partition created while leading does (``live``)."""
            v = states.get((tp.topic, tp.partition))
            return live() if v is None else v.state.isr

        def live() -> tuple[int, ...]:
            """The registered nodes at the last reconcile: a partition created while this node leads starts with
            them in its ISR (Kafka's creation rule: they hold nothing it lacks; the HW waits for their first
            fetches), never with an ISR recorded for a topic of the same name deleted since."""
            return tuple(sorted(self._live))

        recorded_epochs = {key: v.state.leader_epoch for key, v in states.items() if v.state.leader == node}
        self._note_partition_leaders(states)

        def epoch_of(tp: TopicPartition) -> int:
            """Each partition in the epoch ZooKeeper records for it (a controller moves only the epochs of the
            partitions whose ISR changes); one not recorded yet in this leadership's."""
            return recorded_epochs.get((tp.topic, tp.partition), epoch)

        leaders = await trio.to_thread.run_sync(
            functools.partial(LeaderReplicas, self.store, epoch, isr=isr, live=live, epochs=epoch_of)
        )
        replication = LeaderReplication(leaders, self.ops.partitions, read_thread=self.ops._read_thread,
                                        write_thread=self.ops._write_thread)  # fmt: skip
        if adopt and self.ops.replication is not None:
            self.ops.replication.leaders = leaders  # waiting acks go on against the new epoch's partitions
            replication = self.ops.replication
        self._recorder = IsrRecorder(self.zk, leaders, states, controller_epoch=seen.controller_epoch,
                                     assignments=self.assignments)  # fmt: skip
        if self.store.transactions is not None and not adopt:
            # the committed labels it replicated, replayed from the start before .logfs/labels/ is served here (a
            # leader adopting an epoch kept its own up to date, and serves lookups meanwhile: no replay under them)
            try:
                await trio.to_thread.run_sync(functools.partial(
                    self.store.transactions.replicated_labels.catch_up, self.store, from_start=True))
            except (LogfsError, OSError) as exc:  # it leads all the same; a replayed batch may then commit again
                _log.error("node %d cannot read the committed labels of %s: %s", node, TRANSACTION_STATE_TOPIC, exc)
        self.ops.set_role(replication, None)
        self.ops.partitions.notify_all()
        self.role = ROLE_LEADER
        _log.info("node %d %s leader epoch %d (mount %s)", node, "adopts" if adopt else "leads in", epoch,
                     self.advertised)  # fmt: skip
        tasks: list[Callable[[], Awaitable[None]]] = [self._watch_isr, self._sync_isr]
        if self.ops.transactions is not None:
            tasks.append(self.ops.transactions.watch)
        self._start_role(tasks)

    async def _become_follower(self, seen: Leadership) -> None:
        await self._stop_role()
        if seen.leader == NO_LEADER or not seen.mount:
            self.ops.set_role(None, _no_view)
            self.role = ROLE_NONE
            _log.warning("node %d: no leader in epoch %d", self.node_id, seen.leader_epoch)
            return
        await self._read_follow_epochs(seen)
        # tick=False: the mount runs Store.tick already (mount/server.py's standard_tasks)
        follower = Follower(Path(seen.mount), self.store, self.node_id, on_hw_moved=self.ops.notify_hw,
                            on_topic_deleted=self.ops.topic_deleted, leader_epoch=seen.leader_epoch,
                            on_epoch_refused=self._epoch_refused, follows=self._fetch_epoch, tick=False)  # fmt: skip
        self._follower = follower
        self.ops.set_role(None, follower.replica_state.partition_view)
        self.role = ROLE_FOLLOWER
        _log.info("node %d follows node %d at %s in leader epoch %d", self.node_id, seen.leader, seen.mount,
                     seen.leader_epoch)  # fmt: skip
        self._start_role([follower.run])

    def _fetch_epoch(self, topic: str, partition: int) -> int:
        """The leader epoch a fetch of the partition names (``Follower(follows=…)``): the one ZooKeeper records for
        it, or the leadership's for a partition made since."""
        recorded = self._partition_leaders.get((topic, partition))
        leadership = self.leadership
        return recorded[1] if recorded is not None and recorded[0] == leadership.leader else leadership.leader_epoch

    def _note_partition_leaders(self, states: dict[tuple[str, int], Versioned]) -> None:
        self._partition_leaders = {key: (v.state.leader, v.state.leader_epoch) for key, v in states.items()}
        self._epochs_stale = False

    async def _read_follow_epochs(self, seen: Leadership) -> None:
        """Read the epoch of every partition (one read of every state: about fifteen requests for 10,000
        partitions); when ZooKeeper does not answer, every partition is fetched in the leadership's epoch until a
        later read (the leader refuses the ones in another: read again then)."""
        try:
            states = await self._zk(self.zk.partition_states)
        except ZkUnavailable as exc:
            _log.info("node %d: cannot read the partitions' epochs yet (%s): fetching in epoch %d", self.node_id,
                      exc, seen.leader_epoch)  # fmt: skip
            self._partition_leaders = {}
            self._epochs_stale = True
            return
        self._note_partition_leaders(states)

    def _epoch_refused(self, topic: str, partition: int, response: FetchResponse) -> None:
        """The leader refused this follower's leader epoch (FENCED_LEADER_EPOCH: ZooKeeper has a newer leadership
        or partition state than this node acted on; UNKNOWN_LEADER_EPOCH: the leader has not taken ours yet): read
        ZooKeeper again now rather than at the next watch or RECONCILE_S, the partitions' epochs included (the fetch
        backs off and asks again meanwhile)."""
        self._epochs_stale = True
        self.zk.nudge()

    def _start_role(self, tasks: list[Callable[[], Awaitable[None]]]) -> None:
        assert self._nursery is not None
        scope, done = trio.CancelScope(), trio.Event()
        self._role_scope, self._role_done = scope, done

        async def role() -> None:
            try:
                with scope:
                    async with trio.open_nursery() as nursery:
                        for task in tasks:
                            nursery.start_soon(_guarded, task)
            finally:
                done.set()

        self._nursery.start_soon(role)

    async def _stop_role(self) -> None:
        if self._role_scope is not None and self._role_done is not None:
            self._role_scope.cancel()
            await self._role_done.wait()
        self._role_scope = self._role_done = None
        self._follower = None
        self._recorder = None

    async def _fence(self, why: str) -> None:
        """Stop acknowledging at once: waiting fsyncs fail (EIO), new writes EROFS; then no role until ZooKeeper
        says whom to follow."""
        replication = self.ops.replication
        if replication is not None:
            replication.begin_shutdown()
        self.ops.set_role(None, _no_view)
        self.ops.partitions.notify_all()
        self.role = ROLE_NONE
        _log.error("node %d is fenced as leader of epoch %d: %s", self.node_id, self.leadership.leader_epoch, why)
        await self._stop_role()

    async def _leave(self, why: str) -> None:
        """The store went offline: stop leading or fetching, and leave the cluster (the controller elects again)."""
        self._left = True
        self.ops.forwarder.target = None  # nothing is forwarded by a node out of the cluster: EROFS
        if self.role == ROLE_LEADER:
            await self._fence(why)
        await self._stop_role()
        self.ops.set_role(None, _no_view)
        self.role = ROLE_NONE
        _log.error("node %d leaves the cluster: %s", self.node_id, why)
        await trio.to_thread.run_sync(self.zk.stop)
        self.broker_epoch = -1

    # --- the leader's tasks ---------------------------------------------------------------------------------------

    async def _fenced(self) -> bool:
        """Whether a refused write fenced this leader (the main loop is told, and acts)."""
        recorder = self._recorder
        if recorder is not None and recorder.fenced is not None:
            self.zk.nudge()
            return True
        return False

    async def _watch_isr(self) -> None:
        recorder = self._recorder
        assert recorder is not None
        interval_s = shrink_check_interval_ms(self.config.replica_lag_time_max_ms) / 1000
        while True:
            await trio.sleep(interval_s)
            changed = await self._zk(recorder.shrink)
            for tp in changed:
                self.ops.partitions.get(tp.topic, tp.partition).notify()
            if await self._fenced():
                return

    async def _sync_isr(self) -> None:
        recorder = self._recorder
        assert recorder is not None
        while True:
            await self._zk(recorder.sync)
            if await self._fenced():
                return
            await trio.sleep(ISR_SYNC_S)


async def _guarded(task: Callable[[], Awaitable[None]]) -> None:
    """A role task: an unexpected error is logged and ends that task only (the mount serves on)."""
    try:
        await task()
    except Exception:
        _log.exception("a cluster task failed")
