"""The cluster's rules as pure functions: Kafka's znode JSON, the election, the ISR an election leaves, and which
role a node takes for what ZooKeeper says (docs/replication.md, "The znodes" and "The rules").

Nothing here talks to ZooKeeper or touches a store, so every rule is unit-tested on its own
(tests/cluster/test_cluster_rules.py); ``logfs/cluster/zk.py`` reads and writes the znodes, ``logfs/cluster/node.py``
acts on the decisions.

* **Election** (:func:`elect`, Kafka's ``offlinePartitionLeaderElection`` applied to the whole cluster, since one
  node leads every partition): the first node, in ``replica.ids`` order, that is live and in the ISR recorded for
  every partition; with no partition yet, the first live node. When none qualifies and unclean election is enabled,
  the first live node in ``replica.ids`` order (an unclean pick); otherwise no leader (-1).
* **The ISR after an election** (:func:`isr_after_election`): a clean pick keeps the old ISR's live members (the new
  leader among them); an unclean pick leaves the new leader alone.
* **Dead replicas leave the ISR** (:func:`dead_removed`): the controller takes a node whose registration went out
  of every ISR (never the last member), in a new epoch naming the same leader, which adopts it.
* **Epochs only grow** (:func:`next_leader_epoch`): a new election's epoch is one above every epoch recorded in
  ZooKeeper and every epoch a live node reports having seen in its store.
* **A node's reaction** to the leadership ZooKeeper records (:func:`decide`): a newer epoch naming this node →
  lead (or, when it leads already, adopt the epoch silently); naming another node or nobody → follow (or stay
  without a leader); an epoch at or below the one acted on → ignored.

Threads: any (pure functions and immutable values).
"""

from __future__ import annotations

import enum
import json
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

K = TypeVar("K", bound=Hashable)

NO_LEADER = -1  # Kafka's LeaderAndIsr.NoLeader
NO_EPOCH = -1


class BadZnode(ValueError):
    """A znode's bytes are not the JSON its path holds."""


@dataclass(frozen=True, slots=True)
class PartitionState:
    """``/brokers/topics/<t>/partitions/<p>/state`` (Kafka's JSON, version 1); the znode version travels apart."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int

    def encode(self) -> bytes:
        doc = {"controller_epoch": self.controller_epoch, "leader": self.leader, "version": 1,
               "leader_epoch": self.leader_epoch, "isr": list(self.isr)}  # fmt: skip
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> PartitionState:
        doc = _object(data)
        isr = doc.get("isr")
        if not isinstance(isr, list) or not all(_is_int(i) for i in isr):
            raise BadZnode(f"partition state: isr is {isr!r}")
        return cls(_field(doc, "leader"), _field(doc, "leader_epoch"), tuple(isr), _field(doc, "controller_epoch"))


@dataclass(frozen=True, slots=True)
class Leadership:
    """Who leads every partition, in which epoch (``/logfs/leadership``, written after every state znode of its
    election: the one znode each node watches and acts on). ``mount`` is the leader's advertised mount ("" for none);
    ``broker_epoch`` the czxid of the leader's ``/brokers/ids/<id>`` when it was elected (Kafka's broker epoch,
    KIP-380): a leader that restarted registers anew, and is not the leader it names until elected again."""

    leader: int
    leader_epoch: int
    mount: str
    controller_epoch: int
    broker_epoch: int = -1
    # every node registered when the controller wrote this, with its broker epoch (the controller's view of the live
    # nodes, which Kafka's keeps in memory): a node registered since with another epoch restarted in between (a
    # bounced follower leaves the ISRs); empty in a leadership written by an earlier logfs
    brokers: tuple[tuple[int, int], ...] = ()

    def encode(self) -> bytes:
        doc = {"version": 1, "leader": self.leader, "leader_epoch": self.leader_epoch, "mount": self.mount,
               "controller_epoch": self.controller_epoch, "broker_epoch": self.broker_epoch,
               "brokers": {str(node): epoch for node, epoch in self.brokers}}  # fmt: skip
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Leadership:
        doc = _object(data)
        mount = doc.get("mount")
        if not isinstance(mount, str):
            raise BadZnode(f"leadership: mount is {mount!r}")
        brokers = doc.get("brokers", {})
        if not isinstance(brokers, dict) or not all(k.isdigit() and _is_int(v) for k, v in brokers.items()):
            raise BadZnode(f"leadership: brokers is {brokers!r}")
        return cls(_field(doc, "leader"), _field(doc, "leader_epoch"), mount, _field(doc, "controller_epoch"),
                   _field(doc, "broker_epoch"), tuple(sorted((int(k), int(v)) for k, v in brokers.items())))

    def leader_file(self) -> dict[str, Any]:
        """What ``MOUNT/.logfs/leader`` shows."""
        return {"node_id": self.leader, "mount": self.mount if self.leader != NO_LEADER else "",
                "leader_epoch": self.leader_epoch}  # fmt: skip


NO_LEADERSHIP = Leadership(NO_LEADER, NO_EPOCH, "", 0)


@dataclass(frozen=True, slots=True)
class Broker:
    """``/brokers/ids/<id>`` (ephemeral): where a node's mount is, and the highest leader epoch its store has seen."""

    node_id: int
    mount: str
    highest_epoch: int

    def encode(self, now_ms: int | None = None) -> bytes:
        stamp = int(time.time() * 1000) if now_ms is None else now_ms
        doc: dict[str, Any] = {
            "version": 5, "host": None, "port": -1, "endpoints": [], "jmx_port": -1, "timestamp": str(stamp),
            "advertised.mount": self.mount, "highest_epoch": self.highest_epoch,
        }  # fmt: skip
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, node_id: int, data: bytes) -> Broker:
        doc = _object(data)
        mount = doc.get("advertised.mount")
        if not isinstance(mount, str):
            raise BadZnode(f"broker {node_id}: advertised.mount is {mount!r}")
        return cls(node_id, mount, _field(doc, "highest_epoch"))


def encode_assignment(assignment: Mapping[int, Sequence[int]]) -> bytes:
    """``/brokers/topics/<t>``: Kafka's version 3 JSON, partitions by number *as a string*, each list in assignment
    order (the preferred leader first), with no reassignment under way."""
    doc = {"version": 3, "partitions": {str(p): list(assignment[p]) for p in sorted(assignment)},
           "adding_replicas": {}, "removing_replicas": {}}  # fmt: skip
    return json.dumps(doc, separators=(",", ":")).encode()


def decode_assignment(data: bytes) -> dict[int, tuple[int, ...]] | None:
    """The assignment a ``/brokers/topics/<t>`` znode holds (versions 1 to 3 read alike); None for an empty znode
    (a topic recorded by an earlier logfs, before assignments were kept: its leader writes one)."""
    if not data:
        return None
    doc = _object(data)
    partitions = doc.get("partitions")
    if not isinstance(partitions, dict):
        raise BadZnode(f"topic: partitions is {partitions!r}")
    out: dict[int, tuple[int, ...]] = {}
    for name, replicas in partitions.items():
        if not name.isdigit() or not isinstance(replicas, list) or not replicas or \
                not all(_is_int(r) for r in replicas) or len(set(replicas)) != len(replicas):  # fmt: skip
            raise BadZnode(f"topic: partition {name!r} has replicas {replicas!r}")
        out[int(name)] = tuple(replicas)
    return out


def controller_data(node_id: int, now_ms: int | None = None) -> bytes:
    """``/controller``: Kafka's version 1 JSON (the timestamp a string of milliseconds)."""
    stamp = int(time.time() * 1000) if now_ms is None else now_ms
    return json.dumps({"version": 1, "brokerid": node_id, "timestamp": str(stamp)}, separators=(",", ":")).encode()


def controller_id(data: bytes) -> int:
    """The ``brokerid`` of a ``/controller`` znode."""
    return _field(_object(data), "brokerid")


# --- the election -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Election:
    leader: int  # NO_LEADER when nobody may lead
    clean: bool  # False: an unclean pick (outside the ISR)


def elect(
    replica_ids: Sequence[int], live: Iterable[int], isrs: Iterable[Sequence[int]], *, unclean: bool = False
) -> Election:
    """The leader of every partition: the first live node in ``replica_ids`` order in every ISR of ``isrs`` (with
    no partition, the first live node); else with ``unclean`` the first live node; else nobody."""
    alive = set(live)
    eligible = set(replica_ids)
    for isr in isrs:
        eligible &= set(isr)
    for node in replica_ids:
        if node in alive and node in eligible:
            return Election(node, True)
    if unclean:
        for node in replica_ids:
            if node in alive:
                return Election(node, False)
    return Election(NO_LEADER, True)


def isr_after_election(old_isr: Sequence[int], election: Election, live: Iterable[int]) -> tuple[int, ...]:
    """The ISR an election writes: the old ISR's live members for a clean pick (never empty: with no leader the old
    ISR is kept, as Kafka keeps the last member), the new leader alone for an unclean one."""
    if election.leader == NO_LEADER:
        return tuple(old_isr)
    if not election.clean:
        return (election.leader,)
    alive = set(live)
    return with_leader(tuple(r for r in old_isr if r in alive), election.leader)


def with_leader(isr: tuple[int, ...], leader: int) -> tuple[int, ...]:
    """``isr`` with ``leader`` in it (first when added): a leader is always in its own ISR."""
    return isr if leader in isr else (leader, *isr)


def in_standing(live: Mapping[int, int], recorded: Iterable[tuple[int, int]]) -> dict[int, int]:
    """The nodes of ``live`` (node → broker epoch) registered in the epoch ``recorded`` (a leadership's
    ``brokers``) names for them, or registered since: a node whose epoch differs restarted in between — Kafka's
    *bounced* broker, handled as a failure (out of the ISRs) then a start-up (it rejoins by the leader's rule)."""
    known = dict(recorded)
    return {node: epoch for node, epoch in live.items() if known.get(node, epoch) == epoch}


def dead_removed(isr: Sequence[int], live: Iterable[int]) -> tuple[int, ...]:
    """``isr`` without the nodes that are not live (the controller's removal of dead replicas, Kafka's
    doRemoveReplicasFromIsr), never emptier than one member: an ISR of one is left as it is."""
    alive = set(live)
    kept = tuple(r for r in isr if r in alive)
    return kept if kept and len(isr) > 1 else tuple(isr)


def next_leader_epoch(recorded: Iterable[int], seen_by_nodes: Iterable[int]) -> int:
    """One above every leader epoch ZooKeeper records and every epoch a live node's store has seen (never reused)."""
    return 1 + max([NO_EPOCH, *recorded, *seen_by_nodes])


def plan_election(
    current: Leadership,
    recorded: Mapping[K, tuple[PartitionState, int]],
    highest_epochs: Iterable[int],
    leader: Leader,
    isr_of: Callable[[tuple[int, ...]], tuple[int, ...]],
) -> tuple[Leadership, dict[K, tuple[PartitionState, int]]]:
    """What the controller writes for ``leader``: the leadership in the next epoch (``next_leader_epoch`` of the
    current one, every recorded state's and every live node's ``highest_epochs``) and every recorded state in that
    epoch with the ISR ``isr_of`` its current one, each with the version it must still have. Because the epoch is
    above every *recorded* state's, a controller that finds some states already in a newer epoch (a predecessor died
    part-way through its election) elects above them and rewrites every state: the election is completed."""
    epoch = next_leader_epoch([current.leader_epoch, *(s.leader_epoch for s, _ in recorded.values())],
                              highest_epochs)  # fmt: skip
    leadership = Leadership(leader.node_id, epoch, leader.mount, leader.controller_epoch, leader.broker_epoch)
    states = {
        key: (replace(state, leader=leader.node_id, leader_epoch=epoch, controller_epoch=leader.controller_epoch,
                      isr=isr_of(state.isr)), version)
        for key, (state, version) in recorded.items()
    }  # fmt: skip
    return leadership, states


@dataclass(frozen=True, slots=True)
class Leader:
    """Whom an election names: the node, its advertised mount, its broker epoch, and the controller's epoch."""

    node_id: int
    mount: str
    broker_epoch: int
    controller_epoch: int


def needs_election(current: Leadership, live: Mapping[int, int], replica_ids: Sequence[int]) -> bool:
    """Whether the controller must elect, given ``live`` (node id → broker epoch): no leader while a replica is
    live, or a leader that is not live, or one that registered again since its election (it restarted: Kafka's
    bounced broker). A live leader keeps leading, as Kafka moves leadership only when the leader fails."""
    if current.leader == NO_LEADER:
        return any(r in live for r in replica_ids)
    return live.get(current.leader) != current.broker_epoch


class Action(enum.Enum):
    LEAD = "lead"  # become the leader in the new epoch
    ADOPT = "adopt"  # already leading: take the newer epoch silently
    FOLLOW = "follow"  # follow the named leader (or, with none, serve read-only without fetching)
    IGNORE = "ignore"  # not newer than what this node acted on


def decide(node_id: int, broker_epoch: int, leading: bool, acted_epoch: int, seen: Leadership) -> Action:
    """What a node registered with ``broker_epoch`` does when it reads ``seen``: epochs only grow, so an epoch at or
    below ``acted_epoch`` (the last one it acted on) changes nothing. A newer epoch naming this node in this
    registration: lead, or adopt it when leading already; naming this node in an earlier registration (it
    restarted since): IGNORE until the controller elects again; any other: follow (a leader that reads it is
    fenced)."""
    if seen.leader_epoch <= acted_epoch:
        return Action.IGNORE
    if seen.leader == node_id:
        if seen.broker_epoch != broker_epoch:
            return Action.IGNORE
        return Action.ADOPT if leading else Action.LEAD
    return Action.FOLLOW


# --- helpers ------------------------------------------------------------------------------------------------------


def _object(data: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadZnode(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BadZnode(f"not a JSON object: {data[:80]!r}")
    return doc


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _field(doc: dict[str, Any], key: str) -> int:
    value = doc.get(key)
    if not _is_int(value):
        raise BadZnode(f"{key} is {value!r}, not an integer")
    return int(value)  # type: ignore[arg-type]
