"""This node's part as the cluster's controller (Kafka's ZooKeeper-mode controller; docs/replication.md, "Automatic
failover"): become the controller when there is none (Kafka's multi on ``/controller_epoch``); as controller, elect
when the leader is not live or restarted (``rules.needs_election``, ``rules.elect``) and write every partition state,
then the leadership (``ZooKeeper.write_election``: bounded multis, each checking ``/controller_epoch``, the leadership
last); with a live leader, take dead nodes out of the ISRs in a new epoch naming the same leader, which also
completes an election a previous controller left half-written (docs/replication.md, "Elections at scale").

Apart from the node's loop (``logfs/cluster/node.py``) because it owns what only the controller knows: the
controller epoch this node won and its znode version, which every controller write is conditional on, and what the
last look at the ISRs found. The node calls :meth:`Controller.control` at each reconcile and :meth:`Controller.forget`
when its session expires.

Threads: :meth:`Controller.control` runs in a worker thread (blocking ZooKeeper calls, one at a time: the node's
ZooKeeper limiter); the trio thread reads :attr:`Controller.current`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from logfs.cluster.rules import (
    NO_LEADER,
    Broker,
    Leader,
    Leadership,
    dead_removed,
    elect,
    in_standing,
    isr_after_election,
    needs_election,
    plan_election,
    with_leader,
)
from logfs.cluster.zk import ZooKeeper
from logfs.cluster.zkerrors import Conflict, Fenced
from logfs.cluster.znodes import Versioned
from logfs.core.storeconfig import StoreConfig

_log = logging.getLogger(__name__)


class Controller:
    """This node as controller, or as a candidate for it. See the module docstring."""

    def __init__(self, zk: ZooKeeper, node_id: int, config: StoreConfig) -> None:
        self.zk = zk
        self.node_id = node_id
        self.config = config
        self.current: int | None = None  # the controller's node id at the last look (None: none)
        self.epoch: tuple[int, int] | None = None  # (epoch, znode version) while this node is controller
        self._isr_clean: object = None  # what the controller last found with no dead replica in any ISR

    def forget(self) -> None:
        """The session expired: this node is no longer controller, and who is is not known."""
        self.current = None
        self.epoch = None

    def control(self, registered: bool) -> None:
        """Worker thread: become the controller when there is none (only a ``registered`` node may); as controller,
        elect when needed."""
        controller = self.zk.controller()
        if controller is None and registered:
            won = self.zk.try_become_controller(self.node_id)
            if won is not None:
                self.epoch = won
                _log.info("node %d is the controller (controller epoch %d)", self.node_id, won[0])
            controller = self.zk.controller()
        self.current = controller
        if controller != self.node_id:
            self.epoch = None
            return
        if self.epoch is None:  # /controller names this node from a session we lost track of
            return
        live = self.zk.live_brokers()
        current, version = self.zk.leadership(watch=False)
        epochs = {node: epoch for node, (epoch, _) in live.items()}
        if not needs_election(current, epochs, self.config.replica_ids):
            self._remove_dead_replicas(current, version, in_standing(epochs, current.brokers), live)
            return
        states = self.zk.partition_states()
        election = elect(self.config.replica_ids, epochs, [v.state.isr for v in states.values()],
                         unclean=self.config.unclean_leader_election_enable)  # fmt: skip
        if election.leader == NO_LEADER and current.leader == NO_LEADER:
            return  # nobody may lead, and the record says so already
        leader_mount = live[election.leader][1].mount if election.leader in live else ""
        try:
            epoch = self._write_leadership(current, version, states, live, election.leader, leader_mount,
                                           lambda isr: isr_after_election(isr, election, epochs))  # fmt: skip
        except Conflict as exc:  # a state changed since it was read: read again at the next reconcile
            _log.info("node %d: %s; electing again", self.node_id, exc)
            self.zk.nudge()
            return
        except Fenced as exc:
            _log.warning("node %d resigns as controller: %s", self.node_id, exc)
            self.epoch = None
            return
        how = "" if election.clean else " (unclean: outside the ISR; records may be lost)"
        who = f"node {election.leader}" if election.leader != NO_LEADER else "no leader"
        (_log.info if election.clean and election.leader != NO_LEADER else _log.warning)(
            "controller %d elected %s in leader epoch %d%s", self.node_id, who, epoch, how
        )

    def _write_leadership(
        self,
        current: Leadership,
        version: int,
        states: dict[tuple[str, int], Versioned],
        live: dict[int, tuple[int, Broker]],
        leader: int,
        mount: str,
        isr_of: Callable[[tuple[int, ...]], tuple[int, ...]],
        above: int = -1,
    ) -> int:
        """Worker thread, as controller: the leadership of ``leader`` in the next epoch (above ``above`` too: an
        epoch recorded in a state not written here), and each partition's state of ``states`` with the ISR ``isr_of``
        its current one (``rules.plan_election``), written as ``ZooKeeper.write_election`` says: the states in
        pipelined multis, the leadership last; the epoch. Fenced or Conflict when refused."""
        assert self.epoch is not None
        controller_epoch, epoch_version = self.epoch
        broker_epoch = live[leader][0] if leader in live else -1
        leadership, new_states = plan_election(
            current, {key: (v.state, v.version) for key, v in states.items()},
            [above, *(b.highest_epoch for _, b in live.values())],
            Leader(leader, mount, broker_epoch, controller_epoch), isr_of,
        )  # fmt: skip
        leadership = replace(leadership, brokers=_registered(live))
        before = self.zk.multis.largest
        multis = self.zk.write_election(epoch_version, leadership, version, new_states)
        _log.info("controller %d wrote leader epoch %d: %d partition states in %d multis (largest %d bytes)",
                  self.node_id, leadership.leader_epoch, len(new_states), multis,
                  max(before, self.zk.multis.largest))  # fmt: skip
        return leadership.leader_epoch

    def _remove_dead_replicas(
        self, current: Leadership, version: int, epochs: dict[int, int], live: dict[int, tuple[int, Broker]]
    ) -> None:
        """Worker thread, as controller with a live leader: take every dead node out of the ISRs (Kafka's
        doRemoveReplicasFromIsr: never the last member), in a new leader epoch naming the same leader, which adopts
        it silently (ZooKeeper-mode Kafka bumps the epoch too). ``epochs`` holds the nodes in good standing only: a
        node registered again since the leadership recorded its broker epoch (it restarted between two looks, its
        old session's expiry and its new registration seen together) counts as dead here, as Kafka's controller
        handles a bounced broker (``rules.in_standing``); it rejoins by the leader's rule once caught up. A
        leadership that does not record the live nodes as they are is written again in the same epoch (nodes act
        only on a newer one), so that the next look judges against them.

        Only the partitions whose ISR changes are written, in the new epoch; the others keep theirs, as in Kafka (a
        node's partitions are each in their own epoch: ``LeaderReplicas(epochs=…)``, ``Follower(follows=…)``). Also
        completes an election or a removal that a previous controller left half-written: states in an epoch the
        leadership does not name yet get a leadership above them (docs/replication.md, "Elections at scale").

        Reading every state costs O(partitions), so it is done only when the live nodes or the leadership changed
        since the last look that found nothing to do (Kafka's controller also acts on a broker's failure, not on a
        timer): an ISR gains a member only by the leader's join rule, which takes a node that is fetching."""
        if current.leader == NO_LEADER or self.epoch is None:
            return
        looked = (frozenset(epochs.items()), version, self.epoch)
        if looked == self._isr_clean:
            return
        states = self.zk.partition_states()
        # a state naming another leader: an election that a controller left half-written (it died or was deposed
        # before its leadership multi, and the leader it deposed is live again): named back to this leader
        changed = {key: v for key, v in states.items()
                   if dead_removed(v.state.isr, epochs) != v.state.isr or v.state.leader != current.leader}  # fmt: skip
        # states in an epoch above the leadership's (a removal left half-written the same way): a leadership above
        # them completes it
        highest = max((v.state.leader_epoch for v in states.values()), default=-1)
        half_written = highest > current.leader_epoch
        if not half_written and not changed:
            registered = _registered(live)
            if current.brokers != registered:
                assert self.epoch is not None
                try:
                    self.zk.write_election(self.epoch[1], replace(current, brokers=registered), version, {})
                except (Fenced, Conflict) as exc:
                    _log.info("node %d: recording the live nodes was refused (%s): trying again", self.node_id, exc)
                    return
            self._isr_clean = looked
            return
        # (a state named back keeps the ISR that election wrote, with this leader in it: the leader it names never
        # led in that epoch, since nodes act on the leadership, which still names this one)
        try:
            epoch = self._write_leadership(current, version, changed, live, current.leader, current.mount,
                                           lambda isr: with_leader(dead_removed(isr, epochs), current.leader),
                                           above=highest)  # fmt: skip
        except (Fenced, Conflict) as exc:
            _log.info("node %d: removing dead replicas from the ISR was refused (%s): trying again", self.node_id, exc)
            return
        dead = sorted({r for v in changed.values() for r in v.state.isr if r not in epochs})
        _log.info("controller %d removed dead node(s) %s from the ISR: leader %d, leader epoch %d", self.node_id,
                  dead, current.leader, epoch)  # fmt: skip


def _registered(live: dict[int, tuple[int, Broker]]) -> tuple[tuple[int, int], ...]:
    """A leadership's ``brokers``: every live node with its broker epoch, in node order."""
    return tuple(sorted((node, epoch) for node, (epoch, _) in live.items()))
