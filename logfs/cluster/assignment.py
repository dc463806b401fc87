"""Which nodes hold each partition's replicas, and which of them should lead it (issue 27, "Scale out"): Kafka's
rules for a cluster whose partitions each have a leader of their own, as pure functions.

* **Assignment** (:func:`assign_replicas`, Kafka's ``AdminUtils.assignReplicasToBrokersRackUnaware``): over the
  live nodes in id order, partition ``p``'s first replica is node ``(p + start) % N``, so the first replicas, which
  are the preferred leaders, go round robin and every node is preferred for ⌊P/N⌋ or ⌈P/N⌉ of a topic's P
  partitions. The other replicas follow the first at a distance that grows by one every N partitions (the
  *replica shift*), so that the copies of a node's partitions do not all land on its neighbour. ``start`` and the
  first shift are drawn at random per topic (Kafka's ``rand.nextInt``), so topics do not pile their leaders on the
  same nodes; tests fix them. Partitions added later continue the same pattern (:func:`assign_added_partitions`,
  Kafka's ``AdminZkClient.addPartitions``).
* **Election of one partition** (:func:`elect_leader`, Kafka's ``offlinePartitionLeaderElection``): the first
  replica, in assignment order, that is live and in the ISR; with none, and unclean election enabled, the first live
  replica (an unclean pick); otherwise no leader.
* **Preferred leader** (:func:`preferred_election`, Kafka's ``preferredReplicaPartitionLeaderElection``): the first
  replica of the assignment, only if it is live and in the ISR.
* **Auto rebalance** (:func:`rebalance_candidates`, Kafka's ``checkAndTriggerAutoLeaderRebalance``): for each node,
  the partitions it is preferred for but does not lead; when they are more than
  ``leader.imbalance.per.broker.percentage`` of the partitions it is preferred for, the ones it could lead again
  (live, in the ISR) are moved back to it.

Nothing here talks to ZooKeeper or touches a store (tests/cluster/test_assignment.py holds Kafka's own cases).

Threads: any (pure functions and immutable values).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from logfs.core.errors import InvalidPartitions, InvalidReplicationFactor

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

K = TypeVar("K", bound="SupportsRichComparison")  # a partition's key: (topic, partition), or a test's

NO_LEADER = -1  # Kafka's LeaderAndIsr.NoLeader
LEADER_IMBALANCE_PER_NODE_PERCENTAGE = 10  # Kafka's leader.imbalance.per.broker.percentage default

Assignment = dict[int, tuple[int, ...]]  # partition → its replicas, the preferred leader first


def assign_replicas(
    partitions: int,
    replication_factor: int,
    nodes: Iterable[int],
    *,
    start: int | None = None,
    shift: int | None = None,
    first_partition: int = 0,
    rng: random.Random | None = None,
) -> Assignment:
    """Replicas for partitions ``first_partition`` … ``first_partition + partitions - 1`` over ``nodes`` (sorted
    here, as Kafka sorts the live brokers). ``start`` and ``shift`` (each in ``[0, N)``) default to random draws,
    Kafka's ``fixedStartIndex`` of -1. InvalidReplicationFactor below 1 or above the node count; InvalidPartitions
    below 1."""
    ids = sorted(set(nodes))
    if replication_factor <= 0:
        raise InvalidReplicationFactor("Replication factor must be larger than 0.")
    if replication_factor > len(ids):
        raise InvalidReplicationFactor(
            f"Replication factor: {replication_factor} larger than available brokers: {len(ids)}."
        )
    if partitions <= 0:
        raise InvalidPartitions("Number of partitions must be larger than 0.")
    draw = rng or random.Random()
    count = len(ids)
    first_index = draw.randrange(count) if start is None else start
    replica_shift = draw.randrange(count) if shift is None else shift
    assignment: Assignment = {}
    for partition in range(max(0, first_partition), max(0, first_partition) + partitions):
        if partition > 0 and partition % count == 0:
            replica_shift += 1
        first = (partition + first_index) % count
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[_replica_index(first, replica_shift, j, count)])
        assignment[partition] = tuple(replicas)
    return assignment


def _replica_index(first: int, shift: int, j: int, count: int) -> int:
    """Kafka's ``replicaIndex``: the j-th follower of a partition whose first replica is at ``first``."""
    return (first + 1 + (shift + j) % (count - 1)) % count


def assign_added_partitions(existing: Mapping[int, Sequence[int]], added: int, nodes: Iterable[int],
                            *, rng: random.Random | None = None) -> Assignment:  # fmt: skip
    """Replicas for ``added`` partitions after the ``existing`` ones (Kafka's ``addPartitions``): the same
    replication factor as partition 0, starting where partition 0's first replica stands among ``nodes``, so the
    round robin of preferred leaders goes on."""
    ids = sorted(set(nodes))
    zero = existing[0]
    start = next((i for i, node in enumerate(ids) if node >= zero[0]), 0)
    return assign_replicas(added, len(zero), ids, start=start, first_partition=len(existing), rng=rng)


@dataclass(frozen=True, slots=True)
class Elected:
    """The outcome of one partition's election: its leader (NO_LEADER: none) and whether the pick was unclean."""

    leader: int
    unclean: bool = False


def elect_leader(replicas: Sequence[int], isr: Iterable[int], live: Iterable[int], *, unclean: bool) -> Elected:
    """Kafka's ``offlinePartitionLeaderElection`` for one partition: the first replica in assignment order that is
    live and in the ISR; else, when ``unclean`` is allowed, the first live replica (an unclean pick); else none."""
    in_sync, alive = set(isr), set(live)
    for replica in replicas:
        if replica in alive and replica in in_sync:
            return Elected(replica)
    if unclean:
        for replica in replicas:
            if replica in alive:
                return Elected(replica, unclean=True)
    return Elected(NO_LEADER)


def preferred_election(replicas: Sequence[int], isr: Iterable[int], live: Iterable[int]) -> int:
    """Kafka's ``preferredReplicaPartitionLeaderElection``: the first replica, if live and in the ISR; else
    NO_LEADER (the election does not happen and the partition keeps its leader)."""
    if replicas and replicas[0] in set(live) and replicas[0] in set(isr):
        return replicas[0]
    return NO_LEADER


@dataclass(frozen=True, slots=True)
class PartitionView:
    """What the controller knows of one partition for a rebalance: its replicas, leader and ISR."""

    replicas: tuple[int, ...]
    leader: int
    isr: tuple[int, ...]


def rebalance_candidates(
    partitions: Mapping[K, PartitionView],
    live: Iterable[int],
    *,
    percentage: int = LEADER_IMBALANCE_PER_NODE_PERCENTAGE,
) -> list[K]:
    """Kafka's ``checkAndTriggerAutoLeaderRebalance``: for each node, the partitions whose preferred leader it is
    but which another node leads; when their share of the partitions preferring it is above ``percentage`` per cent,
    those it may lead again now (live and in the ISR: the preferred election would fail otherwise) are returned, to
    be moved back to it. Sorted, so the controller's writes are in a stable order."""
    alive = set(live)
    by_preferred: dict[int, list[tuple[K, PartitionView]]] = {}
    for tp, view in partitions.items():
        if view.replicas:
            by_preferred.setdefault(view.replicas[0], []).append((tp, view))
    moves: list[K] = []
    for node, preferring in by_preferred.items():
        astray = [(tp, view) for tp, view in preferring if view.leader != node]
        if len(astray) * 100 <= percentage * len(preferring):
            continue
        moves += [tp for tp, view in astray if preferred_election(view.replicas, view.isr, alive) == node]
    return sorted(moves)


def leaders_per_node(assignment: Mapping[int, Sequence[int]]) -> dict[int, int]:
    """How many partitions each node is the preferred leader of (every node of the assignment, 0 included)."""
    counts = {node: 0 for replicas in assignment.values() for node in replicas}
    for replicas in assignment.values():
        counts[replicas[0]] += 1
    return counts
