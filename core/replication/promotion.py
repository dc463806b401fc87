"""Starting a store as leader: the new leader epoch, and the refusal to promote a store that was out of the ISR
(docs/replication.md, "Leader epochs and promotion"; Kafka's makeLeader with its controller's rules, without a
controller).

Every start of a store as leader (each ``logfs mount`` of it) begins a new leader epoch, one for every partition::

    epoch = 1 + max(every partition's latest epoch, the replica state file's highest_epoch, -1)

so a store's first leadership has epoch 0, and a promoted follower takes an epoch above every epoch its leader ever
used (the follower persists the highest epoch it saw, even an epoch in which it fetched no batch). The epoch goes
into a partition's leader-epoch checkpoint with the first batch appended in it (``Log.append_as_leader``): an epoch
that appended nothing leaves no trace in a partition, which is why the file below keeps it.

The replica state file, ``.logfs-replica-state.json`` at the store's root (a Kafka broker ignores files there)::

    {"replica_id": 2, "leader_epoch_seen": 7, "highest_epoch": 7, "isr": [1, 2], "in_isr": true}

is written atomically by the follower daemon (``logfs follow``) whenever a fetch changes it, and by
:func:`start_leader_epoch` when a store starts as leader (the new epoch as both epochs, the ISR this node alone,
``in_isr`` true: a leader is in its own ISR). Promotion reads it first:

* ``in_isr`` false: the store missed records the leader acknowledged with acks=all; leading it would lose them.
  PromotionRefused, unless ``unclean`` (Kafka's ``unclean.leader.election.enable``), which logs a warning.
* unreadable (bad JSON, a missing field): PromotionRefused too, unless ``unclean`` (then the partitions' epochs
  alone choose the epoch).
* absent: a store that never followed (or one from before replication): nothing to refuse.

Threads: called once at start, before the mount serves anything; blocking file I/O.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from logfs.core.durable import replace_file
from logfs.core.errors import PromotionRefused
from logfs.core.store import Store

_log = logging.getLogger(__name__)

REPLICA_STATE_FILE = ".logfs-replica-state.json"
NO_EPOCH = -1


@dataclass(frozen=True, slots=True)
class PersistedReplicaState:
    """The contents of ``.logfs-replica-state.json``."""

    replica_id: int
    leader_epoch_seen: int
    highest_epoch: int
    isr: tuple[int, ...]
    in_isr: bool

    def render(self) -> bytes:
        """The file's bytes: one JSON object and a newline, keys in the contract's order."""
        doc = {
            "replica_id": self.replica_id,
            "leader_epoch_seen": self.leader_epoch_seen,
            "highest_epoch": self.highest_epoch,
            "isr": list(self.isr),
            "in_isr": self.in_isr,
        }
        return json.dumps(doc).encode() + b"\n"


class UnreadableReplicaState(ValueError):
    """The replica state file exists but does not hold the contract's object."""


def read_replica_state(store_path: Path) -> PersistedReplicaState | None:
    """The store's replica state file, or None when there is none; UnreadableReplicaState when it is damaged."""
    path = store_path / REPLICA_STATE_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict):
            raise TypeError("not a JSON object")
        return PersistedReplicaState(
            _int(doc, "replica_id"),
            _int(doc, "leader_epoch_seen"),
            _int(doc, "highest_epoch"),
            tuple(_int({"id": i}, "id") for i in doc["isr"]),
            _bool(doc, "in_isr"),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise UnreadableReplicaState(f"{path}: {exc!r}") from None


def _int(doc: dict[str, Any], key: str) -> int:
    value = doc[key]
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{key} is {value!r}, not an integer")
    return value


def _bool(doc: dict[str, Any], key: str) -> bool:
    value = doc[key]
    if not isinstance(value, bool):
        raise TypeError(f"{key} is {value!r}, not true or false")
    return value


def write_replica_state(store_path: Path, state: PersistedReplicaState) -> None:
    """Replace the store's replica state file atomically and durably."""
    replace_file(store_path / REPLICA_STATE_FILE, state.render())


def latest_partition_epoch(store: Store) -> int:
    """The highest leader epoch any partition of ``store`` holds (NO_EPOCH when none holds one)."""
    epochs = [log.epoch_cache.latest_epoch() for _, log in store.logs()]
    return max([NO_EPOCH, *(e for e in epochs if e is not None)])


def start_leader_epoch(store: Store, *, unclean: bool = False) -> int:
    """Begin a new leader epoch for every partition of ``store`` and persist it; the epoch.

    PromotionRefused when the replica state file says this store was out of the ISR, or cannot be read, unless
    ``unclean``. See the module docstring.
    """
    path = store.path / REPLICA_STATE_FILE
    try:
        persisted = read_replica_state(store.path)
    except UnreadableReplicaState as exc:
        if not unclean:
            raise PromotionRefused(
                f"cannot read {path} ({exc}): it says whether this store was in the ISR when it last followed a "
                "leader; repair or remove it, or mount with --unclean to lead anyway (records acknowledged by the "
                "old leader may be lost)"
            ) from None
        _log.warning("unclean leader election: %s is unreadable (%s); leading anyway", path, exc)
        persisted = None
    if persisted is not None and not persisted.in_isr:
        if not unclean:
            raise PromotionRefused(
                f"store {store.path} was not in the ISR {list(persisted.isr)} of leader epoch "
                f"{persisted.leader_epoch_seen} when it last fetched as replica {persisted.replica_id}: leading it "
                "could lose records the old leader acknowledged with acks=all. Let it catch up with "
                "`logfs follow`, promote an in-sync follower instead, or mount with --unclean to lead anyway"
            )
        _log.warning(
            "unclean leader election: store %s was not in the ISR %s of leader epoch %d at its last fetch; records "
            "the old leader acknowledged may be lost",
            store.path, list(persisted.isr), persisted.leader_epoch_seen,
        )  # fmt: skip
    highest = max(latest_partition_epoch(store), NO_EPOCH if persisted is None else persisted.highest_epoch)
    epoch = highest + 1
    node = store.config.node_id
    write_replica_state(store.path, PersistedReplicaState(node, epoch, epoch, (node,), True))
    _log.info("store %s starts leader epoch %d (node %d, replicas %s)",
              store.path, epoch, node, list(store.config.replica_ids))  # fmt: skip
    return epoch
