"""Replica assignment, per-partition election and the auto rebalance (logfs/cluster/assignment.py), with Kafka's own
cases: AdminUtilsTest / AdminRackAwareTest (assignment), AddPartitionsTest (added partitions),
PartitionLeaderElectionAlgorithmsTest (elections) and the controller's checkAndTriggerAutoLeaderRebalance."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logfs.cluster.assignment import (
    NO_LEADER,
    Elected,
    PartitionView,
    assign_added_partitions,
    assign_replicas,
    elect_leader,
    leaders_per_node,
    preferred_election,
    rebalance_candidates,
)
from logfs.core.errors import InvalidPartitions, InvalidReplicationFactor


def test_kafkas_assignment_of_ten_partitions_over_five_brokers() -> None:
    """AdminUtilsTest.testReplicaAssignment (fixed start index 0)."""
    expected = {
        0: (0, 1, 2), 1: (1, 2, 3), 2: (2, 3, 4), 3: (3, 4, 0), 4: (4, 0, 1),
        5: (0, 2, 3), 6: (1, 3, 4), 7: (2, 4, 0), 8: (3, 0, 1), 9: (4, 1, 2),
    }  # fmt: skip
    assert assign_replicas(10, 3, range(5), start=0, shift=0) == expected
    assert assign_replicas(10, 3, [4, 2, 0, 3, 1, 1], start=0, shift=0) == expected  # sorted, once each


@pytest.mark.parametrize("factor", [0, -1, 6])
def test_a_replication_factor_outside_one_to_the_node_count_is_refused(factor: int) -> None:
    """AdminUtilsTest.testReplicaAssignment: 0 and 6 over five brokers (InvalidReplicationFactorException)."""
    with pytest.raises(InvalidReplicationFactor):
        assign_replicas(10, factor, range(5))


def test_a_partition_count_below_one_is_refused() -> None:
    with pytest.raises(InvalidPartitions):
        assign_replicas(0, 1, range(3))


def test_added_partitions_continue_the_round_robin_of_partition_zero() -> None:
    """AddPartitionsTest.testReplicaPlacementAllServers: topic3 is {0: [2, 3, 0, 1]} over brokers 0-3; six more
    partitions start at broker 2's place, so their leaders go 3, 0, 1, 2, 3, 0, each on all four brokers."""
    added = assign_added_partitions({0: (2, 3, 0, 1)}, 6, range(4), rng=random.Random(1))
    assert sorted(added) == [1, 2, 3, 4, 5, 6]
    assert [added[p][0] for p in range(1, 7)] == [3, 0, 1, 2, 3, 0]
    assert all(sorted(replicas) == [0, 1, 2, 3] for replicas in added.values())


def test_a_random_start_differs_between_topics_and_repeats_with_its_seed() -> None:
    first = assign_replicas(6, 2, range(3), rng=random.Random(7))
    assert first == assign_replicas(6, 2, range(3), rng=random.Random(7))
    starts = {assign_replicas(6, 2, range(3), rng=random.Random(seed))[0][0] for seed in range(40)}
    assert starts == {0, 1, 2}  # every node is some topic's first leader


@given(st.integers(1, 7), st.integers(1, 80), st.data())
def test_every_node_is_preferred_for_the_floor_or_ceiling_of_p_over_n(nodes: int, partitions: int,
                                                                      data: st.DataObject) -> None:  # fmt: skip
    factor = data.draw(st.integers(1, nodes))
    start = data.draw(st.integers(0, nodes - 1))
    shift = data.draw(st.integers(0, nodes - 1))
    ids = [10 * i + 1 for i in range(nodes)]
    assignment = assign_replicas(partitions, factor, ids, start=start, shift=shift)
    assert sorted(assignment) == list(range(partitions))
    assert all(len(set(replicas)) == factor and set(replicas) <= set(ids) for replicas in assignment.values())
    counts = [leaders_per_node({p: r for p, r in assignment.items()}).get(node, 0) for node in ids]
    assert set(counts) <= {partitions // nodes, -(-partitions // nodes)}


@pytest.mark.parametrize(
    ("replicas", "isr", "live", "unclean", "elected"),
    [
        ((2, 4), (2, 4), (4,), False, Elected(4)),  # testOfflinePartitionLeaderElection
        ((2, 4), (2,), (4,), False, Elected(NO_LEADER)),  # ...LastIsrOfflineUncleanLeaderElectionDisabled
        ((2, 4), (2,), (4,), True, Elected(4, unclean=True)),  # ...LastIsrOfflineUncleanLeaderElectionEnabled
        ((2, 4), (2, 4), (2, 4), False, Elected(2)),  # the assignment's order decides, not the ISR's
        ((4, 2), (2, 4), (2, 4), False, Elected(4)),
        ((2,), (2,), (), True, Elected(NO_LEADER)),  # a single replica, dead: nobody, clean or not
    ],
)
def test_offline_election_of_one_partition(
    replicas: tuple[int, ...], isr: tuple[int, ...], live: tuple[int, ...], unclean: bool, elected: Elected
) -> None:
    assert elect_leader(replicas, isr, live, unclean=unclean) == elected


@pytest.mark.parametrize(
    ("replicas", "isr", "live", "leader"),
    [
        ((2, 4), (2, 4), (2, 4), 2),  # testPreferredReplicaPartitionLeaderElection
        ((2, 4), (2,), (), NO_LEADER),  # ...PreferredReplicaInIsrNotLive
        ((2, 4), (4,), (2, 4), NO_LEADER),  # ...PreferredReplicaNotInIsrLive
    ],
)
def test_preferred_election(
    replicas: tuple[int, ...], isr: tuple[int, ...], live: tuple[int, ...], leader: int
) -> None:
    assert preferred_election(replicas, isr, live) == leader


def test_rebalance_moves_back_only_a_nodes_partitions_it_may_lead_and_only_past_the_imbalance_ratio() -> None:
    """Node 1 died: the partitions preferring it went to 2 and 3. Back and in the ISR of t-0 and t-3 only, it takes
    those two back; t-6 waits until it is in that ISR again. Nodes 2 and 3 lead what they prefer: nothing moves."""
    views = {
        ("t", 0): PartitionView((1, 2, 3), 2, (2, 3, 1)),
        ("t", 1): PartitionView((2, 3, 1), 2, (2, 3, 1)),
        ("t", 2): PartitionView((3, 1, 2), 3, (3, 1, 2)),
        ("t", 3): PartitionView((1, 3, 2), 3, (3, 2, 1)),
        ("t", 4): PartitionView((2, 1, 3), 2, (2, 1, 3)),
        ("t", 5): PartitionView((3, 2, 1), 3, (3, 2, 1)),
        ("t", 6): PartitionView((1, 2, 3), 2, (2, 3)),
    }
    assert rebalance_candidates(views, live=(1, 2, 3)) == [("t", 0), ("t", 3)]
    assert rebalance_candidates(views, live=(2, 3)) == []  # node 1 is not live: nothing it could lead
    # 1 of 10 partitions preferring node 1 astray is 10 %: not above leader.imbalance.per.broker.percentage
    calm = {("u", p): PartitionView((1, 2), 1 if p else 2, (1, 2)) for p in range(10)}
    assert rebalance_candidates(calm, live=(1, 2)) == []
    assert rebalance_candidates(calm, live=(1, 2), percentage=5) == [("u", 0)]
