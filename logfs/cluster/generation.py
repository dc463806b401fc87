"""What the controller writes when it looks at a cluster whose partitions each have a leader of their own (issue 27,
"Election per partition"): every partition's new state, and the *generation* that follows them — one pure function,
:func:`plan_generation`, over what ZooKeeper records and which nodes are live.

Kafka's ZooKeeper-mode controller keeps the live brokers (with their registration's czxid, the broker epoch) in
memory and acts on each change (``KafkaController.processBrokerChange``). logfs records the same knowledge in the
generation it writes last (``brokers``: every node live at that look, with its broker epoch; ``leaders``: the ones
that lead a partition), so a controller elected after another one's death judges the partitions exactly as its
predecessor would have: a node is *in good standing* while it is live in the registration the last generation
recorded (one registered since is new, and in good standing too); one registered again since is *bounced*, which
Kafka handles as a failure followed by a start-up. Per partition, in Kafka's order:

* **New** (an assignment with no state yet: ``initializeLeaderAndIsrForPartitions``): the first live replica in
  assignment order leads, with every live replica in the ISR. With no live replica it stays new (not written).
* **Its leader is dead or bounced** (CIT testControllerDetectsBouncedBrokers): first the failure — the dead and
  bounced replicas leave the ISR, never its last member (Kafka's ``doRemoveReplicasFromIsr``) —, then the offline
  election over what is left (``elect_leader``: the first replica in assignment order that is live and in the ISR;
  unclean only when allowed). So a bounced leader that was its ISR's last member leads again at once (the start-up
  after the failure), in a new epoch. A clean pick keeps that ISR; an unclean one leaves the new leader alone; none
  leaves ``leader: -1`` with the ISR's last members, which only they can leave cleanly when they return.
* **Its leader is in good standing**, and a dead or bounced replica is in its ISR: the replica leaves the ISR (never
  the last member), with a new epoch naming the same leader (ZooKeeper mode bumps it too).
* **Auto rebalance** (``rebalance``: ``auto.leader.rebalance.enable`` when the check interval has passed): the
  partitions ``rebalance_candidates`` names go back to their preferred leader, the ISR unchanged.

Every state written gets the generation's epoch: one above every epoch ZooKeeper records and every epoch a live node
reports having seen (``rules.next_leader_epoch``), so epochs only grow, per partition and for the generation. A
controller that died part-way through its writes leaves some states in an epoch the generation does not name yet;
the next plan's epoch is above them, so its generation completes theirs. A plan with nothing to change writes
nothing.

Nothing here talks to ZooKeeper (tests/cluster/test_generation.py holds Kafka's controller cases).

Threads: any (pure functions and immutable values).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Generic

from logfs.cluster.assignment import (
    LEADER_IMBALANCE_PER_NODE_PERCENTAGE,
    K,
    PartitionView,
    elect_leader,
    rebalance_candidates,
)
from logfs.cluster.rules import NO_LEADER, PartitionState, dead_removed, in_standing, next_leader_epoch


@dataclass(frozen=True, slots=True)
class Facts:
    """What ZooKeeper records of one partition: its replicas in assignment order (the preferred leader first), and
    its state (None: a new partition, assigned and not yet made)."""

    replicas: tuple[int, ...]
    state: PartitionState | None


@dataclass(frozen=True, slots=True)
class Plan(Generic[K]):
    """What one look decides: the states to write (each in ``epoch``), the generation's epoch, ``brokers``: every
    live node with its broker epoch (the next look's ``registered``), and ``leaders``: the ones leading a partition
    afterwards."""

    states: dict[K, PartitionState]
    epoch: int
    brokers: dict[int, int]
    leaders: dict[int, int]
    unclean: list[K] = field(default_factory=list)  # elected outside their ISR (records may be lost)
    offline: list[K] = field(default_factory=list)  # with no leader afterwards

    @property
    def changes(self) -> bool:
        return bool(self.states)


def plan_generation(
    partitions: Mapping[K, Facts],
    live: Mapping[int, int],
    registered: Mapping[int, int],
    *,
    recorded_epoch: int,
    seen_epochs: Iterable[int] = (),
    controller_epoch: int,
    unclean: Callable[[K], bool] = lambda key: False,
    rebalance: bool = False,
    percentage: int = LEADER_IMBALANCE_PER_NODE_PERCENTAGE,
) -> Plan[K]:
    """The controller's decisions for one look (the module docstring). ``live``: the registered nodes, each with its
    broker epoch; ``registered``: the last generation's ``brokers``; ``recorded_epoch``: the last generation's epoch;
    ``seen_epochs``: the highest epoch each live node's store has seen; ``unclean``: whether a partition's topic
    allows an unclean election; ``percentage``: Kafka's ``leader.imbalance.per.broker.percentage``."""

    good = set(in_standing(live, registered.items()))  # live, and not registered again since (not bounced)

    epoch = next_leader_epoch(
        [recorded_epoch, *(f.state.leader_epoch for f in partitions.values() if f.state is not None)], seen_epochs
    )
    states: dict[K, PartitionState] = {}
    unclean_picks: list[K] = []
    after: dict[K, PartitionState] = {}
    for key, facts in partitions.items():
        state = facts.state
        if state is None:
            alive = tuple(r for r in facts.replicas if r in live)
            if alive:
                states[key] = PartitionState(alive[0], epoch, alive, controller_epoch)
                after[key] = states[key]
            continue
        isr = dead_removed(state.isr, good)  # the failures: out of the ISR, never its last member
        if state.leader == NO_LEADER or state.leader not in good:
            # then the start-ups: the offline election over what is left (a bounced last member leads again)
            elected = elect_leader(facts.replicas, isr, live, unclean=unclean(key))
            if elected.leader == NO_LEADER:
                new = replace(state, leader=NO_LEADER, isr=isr)
                if new != state:
                    states[key] = replace(new, leader_epoch=epoch, controller_epoch=controller_epoch)
            elif elected.unclean:
                states[key] = PartitionState(elected.leader, epoch, (elected.leader,), controller_epoch)
                unclean_picks.append(key)
            else:
                states[key] = PartitionState(elected.leader, epoch, isr, controller_epoch)
        elif isr != state.isr:
            states[key] = PartitionState(state.leader, epoch, isr, controller_epoch)
        after[key] = states.get(key, state)
    if rebalance:
        views = {key: PartitionView(partitions[key].replicas, s.leader, s.isr) for key, s in after.items()}
        for key in rebalance_candidates(views, good, percentage=percentage):
            s = after[key]
            states[key] = after[key] = PartitionState(partitions[key].replicas[0], epoch, s.isr, controller_epoch)
    leading = {s.leader for s in after.values() if s.leader != NO_LEADER}
    return Plan(
        states=states,
        epoch=epoch,
        brokers=dict(sorted(live.items())),
        leaders={node: live[node] for node in sorted(leading) if node in live},
        unclean=sorted(unclean_picks),
        offline=sorted(k for k, s in after.items() if s.leader == NO_LEADER),
    )
