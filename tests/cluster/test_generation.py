"""The controller's plan for one look at a cluster whose partitions each have a leader (logfs/cluster/generation.py),
with the cases of Kafka's ControllerIntegrationTest (CIT), PartitionLeaderElectionAlgorithmsTest and
ReplicaStateMachine that a controller decides (docs/replication.md, "Election per partition")."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from logfs.cluster.assignment import assign_replicas
from logfs.cluster.generation import Facts, plan_generation
from logfs.cluster.rules import NO_LEADER, PartitionState

CE = 3  # the controller's epoch


def state(leader: int, epoch: int, *isr: int) -> PartitionState:
    return PartitionState(leader, epoch, tuple(isr), 1)


def test_new_partitions_start_at_their_first_live_replica_with_the_live_replicas_in_the_isr() -> None:
    """CIT testTopicCreation and testTopicCreationWithOfflineReplica; every node leads ⌊P/N⌋ or ⌈P/N⌉."""
    assignment = assign_replicas(6, 3, [1, 2, 3], start=1, shift=0)
    facts = {("t", p): Facts(r, None) for p, r in assignment.items()}
    plan = plan_generation(facts, {1: 10, 2: 20, 3: 30}, {}, recorded_epoch=4, controller_epoch=CE)
    assert plan.epoch == 5 and plan.leaders == {1: 10, 2: 20, 3: 30}
    assert {k: s.leader for k, s in plan.states.items()} == {("t", p): assignment[p][0] for p in range(6)}
    assert all(s.isr == assignment[k[1]] and s.leader_epoch == 5 and s.controller_epoch == CE
               for k, s in plan.states.items())  # fmt: skip
    # node 2 down: its partitions start at the next live replica, without it in the ISR
    plan = plan_generation(facts, {1: 10, 3: 30}, {}, recorded_epoch=4, controller_epoch=CE)
    for (_, p), s in plan.states.items():
        alive = tuple(r for r in assignment[p] if r != 2)
        assert (s.leader, s.isr) == (alive[0], alive)
    # nobody live: a new partition stays new (nothing written), and is offline
    assert not plan_generation(facts, {}, {}, recorded_epoch=4, controller_epoch=CE).changes


def test_a_dead_leader_moves_only_its_partitions_and_leaves_the_isrs_it_was_in() -> None:
    """PLEAT testOfflinePartitionLeaderElection; CIT testMetadataPropagationOnBrokerChange (a follower's failure bumps
    the epoch in ZooKeeper mode); the other partitions keep their leader."""
    facts = {
        "a": Facts((1, 2, 3), state(1, 7, 1, 2, 3)),  # led by 1: moves to 2, the next live in-ISR replica
        "b": Facts((3, 1, 2), state(3, 7, 3, 1)),  # led by 3, 1 in its ISR: 1 leaves it, new epoch, same leader
        "c": Facts((2, 3, 1), state(2, 7, 2, 3)),  # 1 not in its ISR: untouched
        "d": Facts((1, 3, 2), state(1, 7, 1, 2)),  # led by 1, 3 not in the ISR: 2 (assignment order, in the ISR)
    }
    plan = plan_generation(facts, {2: 20, 3: 30}, {1: 10, 2: 20, 3: 30}, recorded_epoch=7, controller_epoch=CE)
    assert plan.states == {
        "a": PartitionState(2, 8, (2, 3), CE),
        "b": PartitionState(3, 8, (3,), CE),
        "d": PartitionState(2, 8, (2,), CE),
    }
    assert plan.leaders == {2: 20, 3: 30} and plan.offline == [] and plan.unclean == []


def test_a_whole_isr_gone_leaves_no_leader_and_only_its_last_member_may_lead_again() -> None:
    """CIT testLeaderAndIsrWhenEntireIsrOfflineAndUncleanLeaderElectionDisabled, PLEAT
    ...LastIsrOfflineUncleanLeaderElectionDisabled, and its return (``onBrokerStartup``)."""
    facts = {"p": Facts((2, 4), state(2, 0, 2))}
    plan = plan_generation(facts, {4: 40}, {2: 20}, recorded_epoch=0, controller_epoch=CE)
    assert plan.states == {"p": PartitionState(NO_LEADER, 1, (2,), CE)} and plan.offline == ["p"]
    assert plan.leaders == {}
    # looked at again with nothing new: nothing to write (a leaderless partition is not rewritten every look)
    facts = {"p": Facts((2, 4), plan.states["p"])}
    assert not plan_generation(facts, {4: 40}, plan.brokers, recorded_epoch=1, controller_epoch=CE).changes
    # 2 registers again: it leads, in a new epoch
    plan = plan_generation(facts, {2: 21, 4: 40}, {}, recorded_epoch=1, controller_epoch=CE)
    assert plan.states == {"p": PartitionState(2, 2, (2,), CE)} and plan.leaders == {2: 21}


def test_an_unclean_election_only_when_the_topic_allows_it() -> None:
    """PLEAT ...UncleanLeaderElectionEnabled, PSMT testOfflinePartitionToUncleanOnlinePartitionTransition."""
    facts = {("t", 0): Facts((1, 2), state(1, 5, 1)), ("u", 0): Facts((1, 2), state(1, 5, 1))}
    plan = plan_generation(facts, {2: 20}, {1: 10}, recorded_epoch=5, controller_epoch=CE,
                           unclean=lambda key: key[0] == "u")  # fmt: skip
    assert plan.states == {("t", 0): PartitionState(NO_LEADER, 6, (1,), CE), ("u", 0): PartitionState(2, 6, (2,), CE)}
    assert plan.unclean == [("u", 0)] and plan.offline == [("t", 0)]


def test_a_bounced_node_is_a_failure_then_a_start() -> None:
    """CIT testControllerDetectsBouncedBrokers: node 1 registered again (broker epoch 10 → 11) between two looks.
    Its partitions are elected again, without it where another member of the ISR is in good standing; it leaves the
    ISRs it followed in (it rejoins by the leader's ISR rule); where it was the ISR's last member it leads again at
    once, in a new epoch (Kafka's start-up after the failure)."""
    facts = {
        "a": Facts((1, 2), state(1, 3, 1, 2)),  # led by 1, 2 in sync: 2 leads
        "b": Facts((2, 1), state(2, 3, 2, 1)),  # 1 follows: it leaves the ISR
        "c": Facts((1, 2), state(1, 3, 1)),  # 1 alone in the ISR: it leads again, in a new epoch
    }
    plan = plan_generation(facts, {1: 11, 2: 20}, {1: 10, 2: 20}, recorded_epoch=3, controller_epoch=CE)
    assert plan.states == {
        "a": PartitionState(2, 4, (2,), CE),
        "b": PartitionState(2, 4, (2,), CE),
        "c": PartitionState(1, 4, (1,), CE),
    }
    assert plan.leaders == {1: 11, 2: 20} and plan.brokers == {1: 11, 2: 20}
    # the next look: 1 is in good standing in the registration it has now: nothing changes
    facts = {k: Facts(f.replicas, plan.states[k]) for k, f in facts.items()}
    assert not plan_generation(facts, {1: 11, 2: 20}, plan.brokers, recorded_epoch=4, controller_epoch=CE).changes


def test_the_auto_rebalance_moves_partitions_back_to_their_preferred_leader_in_the_isr() -> None:
    """CIT testPreferredReplicaLeaderElection and testAutoPreferredReplicaLeaderElection: B (1) returned and is in
    the ISR of a, not yet of b: a goes back to it, ISR unchanged; b waits. Without rebalance nothing moves."""
    facts = {"a": Facts((1, 2), state(2, 6, 2, 1)), "b": Facts((1, 2), state(2, 6, 2))}
    live, leaders = {1: 11, 2: 20}, {1: 11, 2: 20}
    assert not plan_generation(facts, live, leaders, recorded_epoch=6, controller_epoch=CE).changes
    plan = plan_generation(facts, live, leaders, recorded_epoch=6, controller_epoch=CE, rebalance=True)
    assert plan.states == {"a": PartitionState(1, 7, (2, 1), CE)} and plan.leaders == {1: 11, 2: 20}
    # a balanced cluster moves nothing
    facts = {k: Facts(f.replicas, plan.states.get(k, f.state)) for k, f in facts.items()}
    done = plan_generation(facts, live, plan.brokers, recorded_epoch=7, controller_epoch=CE, rebalance=True)
    assert not done.changes


def test_epochs_only_grow_past_what_zookeeper_records_and_what_nodes_have_seen() -> None:
    """A controller that died part-way left a state in epoch 9 while the generation says 7; a node's store saw 12:
    the next generation is 13, and names every leader."""
    facts = {"a": Facts((1, 2), state(2, 9, 2)), "b": Facts((1, 2), state(1, 7, 1, 2))}
    plan = plan_generation(facts, {2: 20}, {1: 10, 2: 20}, recorded_epoch=7, seen_epochs=[12], controller_epoch=CE)
    assert plan.epoch == 13 and plan.states == {"b": PartitionState(2, 13, (2,), CE)}
    assert plan.leaders == {2: 20}


@given(
    st.integers(1, 5).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, 30), st.sets(st.integers(1, n)))),
    st.booleans(),
)
def test_every_planned_leader_is_live_and_in_its_isr_unless_unclean(
    shape: tuple[int, int, set[int]], rebalance: bool
) -> None:
    """Whatever was recorded, a plan names only live leaders, each in its partition's ISR (no unclean election
    allowed), never empties an ISR, and gives every state it writes the generation's epoch, above all recorded."""
    nodes, count, dead = shape
    assignment = assign_replicas(count, nodes, range(1, nodes + 1), start=0, shift=0)
    facts = {p: Facts(r, state(r[p % len(r)], p, *r)) for p, r in assignment.items()}
    live = {n: n * 10 for n in range(1, nodes + 1) if n not in dead}
    leaders = {n: n * 10 for n in range(1, nodes + 1)}
    plan = plan_generation(facts, live, leaders, recorded_epoch=count, controller_epoch=CE, rebalance=rebalance)
    assert plan.epoch > count
    for s in plan.states.values():
        assert s.leader_epoch == plan.epoch and s.isr
        assert s.leader == NO_LEADER or (s.leader in live and s.leader in s.isr)
    for p, f in facts.items():
        after = plan.states.get(p, f.state)
        assert after is not None
        assert after.leader == NO_LEADER or after.leader in live
        if f.state is not None and f.state.leader in live:
            assert after.leader == f.state.leader or rebalance  # a live leader keeps its partitions
