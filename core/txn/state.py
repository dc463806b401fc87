"""The transaction coordinator's values and the records they are stored as (core/txn/coordinator.py, core/txn/log.py).

A record is one JSON object (UTF-8, compact, ASCII-only), framed by core/txn/log.py. Four types; the coordinator
replays them in file order::

    {"type":"coordinator","coordinator_epoch":0}                     first record of every file
    {"type":"txn","transactional_id":"orders-7","producer_id":12,     the full state of one transactional id
     "producer_epoch":3,"state":"PREPARE_COMMIT",                     (Kafka's TransactionMetadata, as the
     "partitions":[["orders",0],["orders",2]],"start_ms":…,            __transaction_state topic stores it):
     "timeout_ms":60000,"last_update_ms":…,"label":"q-1/42",          the last one of an id wins
     "owner":[1001,1001]}
    {"type":"expired","transactional_id":"orders-7"}                  the id was forgotten (7 days idle)
    {"type":"labels","labels":["q-1/40","q-1/41"]}                    committed labels, oldest first (compaction)

Decoding is strict: a missing field, a wrong type or a value out of range is a ValueError naming the field (the
coordinator turns it into CorruptTransactionLog with the record's position). Pure functions; any thread.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from logfs.core.checkpoint import TopicPartition
from logfs.core.config import TRANSACTION_MAX_TIMEOUT_MS
from logfs.core.names import validate_transactional_id

PRODUCER_ID_MAX = 2**63 - 1  # a long
PRODUCER_EPOCH_MAX = 2**15 - 1  # a short
PRODUCER_EPOCH_EXHAUSTED = PRODUCER_EPOCH_MAX - 1  # Kafka's isEpochExhausted: leaves room for one fencing bump
COORDINATOR_EPOCH_MAX = 2**31 - 1  # an int
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


assert PRODUCER_EPOCH_EXHAUSTED + 1 <= PRODUCER_EPOCH_MAX  # a fence of an exhausted-but-open epoch still fits


class TxnState(enum.Enum):
    """Kafka's TransactionState, minus the ones a single-store coordinator never needs (Dead, PrepareEpochFence)."""

    EMPTY = "EMPTY"
    ONGOING = "ONGOING"
    PREPARE_COMMIT = "PREPARE_COMMIT"
    PREPARE_ABORT = "PREPARE_ABORT"
    COMPLETE_COMMIT = "COMPLETE_COMMIT"
    COMPLETE_ABORT = "COMPLETE_ABORT"

    @property
    def is_open(self) -> bool:
        """ONGOING or waiting for its markers: a begin of the same id is refused."""
        return self in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def is_prepared(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


@dataclass(frozen=True)
class TxnInfo:
    """The state of one transactional id (Kafka's TransactionMetadata). Times are ms since the epoch."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int
    timeout_ms: int
    last_update_ms: int
    label: str | None = None
    # (uid, gid) of the user who began it on a shared mount (mount/access.py): its directory is theirs alone. Kept
    # here, in the same durable record as the begin, so a remount shows the same owner and nothing outlives the
    # transaction. None: begun by the mounting user, or before owners were recorded (a record without the field).
    owner: tuple[int, int] | None = None

    @property
    def commit(self) -> bool:
        """The decision of a PREPARE_x or COMPLETE_x transaction: commit (True) or abort (False)."""
        return self.state in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT)

    def expired(self, now_ms: int) -> bool:
        """ONGOING and past its timeout (Kafka: ``txnStartTimestamp + txnTimeoutMs < now``)."""
        return self.state is TxnState.ONGOING and self.start_ms + self.timeout_ms < now_ms


@dataclass(frozen=True)
class ExpiredId:
    """A tombstone: ``transactional_id`` was forgotten (Kafka's Dead state and its tombstone)."""

    transactional_id: str


@dataclass(frozen=True)
class CommittedLabels:
    """Every committed label, oldest first, in chunks: compaction writes them before the txn records, so the order
    (which decides the oldest to drop past ``labels_max``) survives the rewrite."""

    labels: tuple[str, ...]


@dataclass(frozen=True)
class CoordinatorEpoch:
    """The epoch markers carry (see core/txn/coordinator.py)."""

    epoch: int


Record = TxnInfo | ExpiredId | CommittedLabels | CoordinatorEpoch


# --- encoding --------------------------------------------------------------------------------------------------


def encode_record(record: Record) -> bytes:
    """The payload of ``record``."""
    body: dict[str, Any]
    if isinstance(record, TxnInfo):
        body = {
            "type": "txn",
            "transactional_id": record.transactional_id,
            "producer_id": record.producer_id,
            "producer_epoch": record.producer_epoch,
            "state": record.state.value,
            "partitions": sorted([tp.topic, tp.partition] for tp in record.partitions),
            "start_ms": record.start_ms,
            "timeout_ms": record.timeout_ms,
            "last_update_ms": record.last_update_ms,
            "label": record.label,
        }
        if record.owner is not None:
            body["owner"] = list(record.owner)
    elif isinstance(record, ExpiredId):
        body = {"type": "expired", "transactional_id": record.transactional_id}
    elif isinstance(record, CommittedLabels):
        body = {"type": "labels", "labels": list(record.labels)}
    else:
        body = {"type": "coordinator", "coordinator_epoch": record.epoch}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=True).encode()


def decode_record(payload: bytes) -> Record:
    """The record in ``payload``; ValueError (or InvalidTransactionalId) naming what is wrong."""
    body = json.loads(payload.decode())  # UnicodeDecodeError and JSONDecodeError are ValueErrors
    if not isinstance(body, dict):
        raise ValueError("not a JSON object")
    kind = body.get("type")
    if kind == "txn":
        return _decode_txn(body)
    if kind == "expired":
        return ExpiredId(_transactional_id(body))
    if kind == "labels":
        labels = body.get("labels")
        if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
            raise ValueError(f"labels is not a list of strings: {labels!r}")
        return CommittedLabels(tuple(labels))
    if kind == "coordinator":
        return CoordinatorEpoch(_int(body, "coordinator_epoch", 0, COORDINATOR_EPOCH_MAX))
    raise ValueError(f"unknown record type {kind!r}")


def _int(body: dict[str, Any], key: str, low: int, high: int) -> int:
    value = body.get(key)
    if type(value) is not int or not low <= value <= high:
        raise ValueError(f"{key} is {value!r}, not an integer in [{low}, {high}]")
    return value


def _transactional_id(body: dict[str, Any]) -> str:
    transactional_id = body.get("transactional_id")
    if not isinstance(transactional_id, str):
        raise ValueError(f"transactional_id is {transactional_id!r}")
    validate_transactional_id(transactional_id)
    return transactional_id


def _decode_txn(body: dict[str, Any]) -> TxnInfo:
    partitions = body.get("partitions")
    if not isinstance(partitions, list):
        raise ValueError(f"partitions is {partitions!r}")
    tps: set[TopicPartition] = set()
    for item in partitions:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and type(item[1]) is int):
            raise ValueError(f"partition {item!r} is not [topic, partition]")
        tps.add(TopicPartition(item[0], item[1]))
    label = body.get("label")
    if label is not None and not isinstance(label, str):
        raise ValueError(f"label is {label!r}")
    owner = body.get("owner")
    if owner is not None and not (
        isinstance(owner, list) and len(owner) == 2 and all(type(i) is int and 0 <= i < 2**32 for i in owner)
    ):
        raise ValueError(f"owner is {owner!r}, not [uid, gid]")
    return TxnInfo(
        transactional_id=_transactional_id(body),
        producer_id=_int(body, "producer_id", 0, PRODUCER_ID_MAX),
        producer_epoch=_int(body, "producer_epoch", 0, PRODUCER_EPOCH_MAX),
        state=TxnState(body.get("state")),
        partitions=frozenset(tps),
        start_ms=_int(body, "start_ms", _LONG_MIN, _LONG_MAX),
        timeout_ms=_int(body, "timeout_ms", 1, TRANSACTION_MAX_TIMEOUT_MS),
        last_update_ms=_int(body, "last_update_ms", _LONG_MIN, _LONG_MAX),
        label=label,
        owner=(owner[0], owner[1]) if owner is not None else None,
    )
