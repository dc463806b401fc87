"""Kafka's transaction-log records in ``__transaction_state``: the key (version 0), the value (versions 0 and 1), the
rule for which partition holds a transactional id, and logfs's committed-label record beside them.

Layouts (Kafka's ``TransactionLogKey.json`` / ``TransactionLogValue.json`` in transaction-coordinator's
``common/message``; field encodings in core/format/fields.py)::

    key, version 0 (classic)
        version                 int16   0
        transactional_id        string

    value, version 1 (flexible; what logfs writes)          value, version 0 (classic; read)
        version                 int16   1                   the same fields in the same order, with classic
        producer_id             int64                       strings and arrays and no tagged fields
        producer_epoch          int16
        transaction_timeout_ms  int32
        transaction_status      int8    Kafka's TransactionState id: Empty 0, Ongoing 1, PrepareCommit 2,
                                        PrepareAbort 3, CompleteCommit 4, CompleteAbort 5 (Dead 6 and
                                        PrepareEpochFence 7 are never written: an expired id is a tombstone)
        transaction_partitions  [topic compact string, partition_ids [int32], tagged fields], nullable
        last_update_ms          int64
        start_ms                int64
        tagged fields           Kafka's 0 (PreviousProducerId), 1 (NextProducerId), 2 (ClientTransactionVersion)
                                are read past; logfs adds LABEL_TAG (the label a commit was given, compact string)
                                and OWNER_TAG (uid, gid as two unsigned 32-bit integers: who began it on a shared mount)

    A tombstone (null value) forgets the id: how Kafka expires a transactional id.

The committed labels (``.logfs/labels/``) have no place in Kafka's schema: each is a record of its own, keyed with
LABEL_KEY_VERSION (int16 32767, then the label as a classic string), its value int16 0 then the commit's time
(int64 ms), a tombstone forgetting it. Kafka's coordinator skips a key version it does not know while loading
("Unknown message key with version … Ignoring it"), so a Kafka broker reading these partitions loads the
transactions and passes over the labels, as it passes over tagged fields it does not know.

Worked example: id "t" → key ``0000 0001 74``; producer 5, epoch 1, timeout 60000 ms, Ongoing over partitions 0 and
2 of "a", last update 10, start 9, no label → value ``0001 0000000000000005 0001 0000ea60 01 02 0261 03 00000000
00000002 00 000000000000000a 0000000000000009 00``.

Which partition: Kafka's ``TransactionStateManager.partitionFor``, the same hash as a group's
(core/groups/records.py) over ``transaction.state.log.num.partitions`` (50).

Decoding is strict (ValueError naming the field), so a damaged record is never taken for a transaction. Pure
functions; any thread.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from logfs.core.checkpoint import TopicPartition
from logfs.core.format.fields import (
    I8,
    I16,
    I32,
    I64,
    U32,
    FieldReader,
    compact_string,
    string,
    tagged_fields,
    uvarint,
)
from logfs.core.groups.records import partition_for_group
from logfs.core.txn.state import TxnInfo, TxnState

TRANSACTION_STATE_TOPIC = "__transaction_state"  # Kafka's internal topic name (Topic.TRANSACTION_STATE_TOPIC_NAME)
TRANSACTION_STATE_PARTITIONS = 50  # transaction.state.log.num.partitions, Kafka's default
KEY_VERSION = 0
VALUE_VERSION = 1  # flexible: the version with tagged fields, where logfs keeps a transaction's label and owner
LABEL_KEY_VERSION = 0x7FFF  # a committed label: a key version Kafka's coordinator skips
LABEL_VALUE_VERSION = 0
# logfs's tagged fields of a value: far above Kafka's (0, 1, 2), so that a field Kafka adds never means one of them
LABEL_TAG = 10_000
OWNER_TAG = 10_001

# Kafka's TransactionState ids (transaction-coordinator's TransactionState.java)
STATUS_IDS = {
    TxnState.EMPTY: 0,
    TxnState.ONGOING: 1,
    TxnState.PREPARE_COMMIT: 2,
    TxnState.PREPARE_ABORT: 3,
    TxnState.COMPLETE_COMMIT: 4,
    TxnState.COMPLETE_ABORT: 5,
}
_STATES = {number: state for state, number in STATUS_IDS.items()}
_NOT_WRITTEN = {6: "Dead", 7: "PrepareEpochFence"}


@dataclass(frozen=True, slots=True)
class TxnKey:
    """The key of a transactional id's state."""

    transactional_id: str


@dataclass(frozen=True, slots=True)
class LabelKey:
    """The key of a committed label (logfs's own record)."""

    label: str


def partition_for_transactional_id(transactional_id: str, partitions: int = TRANSACTION_STATE_PARTITIONS) -> int:
    """The ``__transaction_state`` partition that holds ``transactional_id`` (Kafka's partitionFor)."""
    return partition_for_group(transactional_id, partitions)


def _string(text: str) -> bytes:
    return string(text, ValueError)


def encode_txn_key(transactional_id: str) -> bytes:
    return I16.pack(KEY_VERSION) + _string(transactional_id)


def encode_label_key(label: str) -> bytes:
    return I16.pack(LABEL_KEY_VERSION) + _string(label)


def encode_label_value(commit_ms: int) -> bytes:
    return I16.pack(LABEL_VALUE_VERSION) + I64.pack(commit_ms)


def encode_txn_value(info: TxnInfo) -> bytes:
    """``info`` as a version-1 value: Kafka's fields, then the label and owner as logfs's tagged fields."""
    by_topic: defaultdict[str, list[int]] = defaultdict(list)
    for tp in info.partitions:
        by_topic[tp.topic].append(tp.partition)
    out = bytearray(I16.pack(VALUE_VERSION))
    out += I64.pack(info.producer_id) + I16.pack(info.producer_epoch) + I32.pack(info.timeout_ms)
    out += I8.pack(STATUS_IDS[info.state])
    out += uvarint(len(by_topic) + 1)
    for topic in sorted(by_topic):
        ids = sorted(by_topic[topic])
        out += compact_string(topic) + uvarint(len(ids) + 1) + b"".join(I32.pack(p) for p in ids) + tagged_fields({})
    out += I64.pack(info.last_update_ms) + I64.pack(info.start_ms)
    tags: dict[int, bytes] = {}
    if info.label is not None:
        tags[LABEL_TAG] = compact_string(info.label)
    if info.owner is not None:
        uid, gid = info.owner
        if not (0 <= uid < 1 << 32 and 0 <= gid < 1 << 32):
            raise ValueError(f"owner {info.owner} of {info.transactional_id!r} is not a uid and gid")
        tags[OWNER_TAG] = U32.pack(uid) + U32.pack(gid)
    out += tagged_fields(tags)
    return bytes(out)


def decode_key(data: bytes) -> TxnKey | LabelKey | None:
    """A transactional id's key or a label's; None for a key version neither Kafka nor logfs writes (skipped, as
    Kafka's coordinator skips it)."""
    r = FieldReader(data, "a transaction-log key", ValueError)
    version = r.take(I16)
    if version == KEY_VERSION:
        key: TxnKey | LabelKey = TxnKey(r.string())
    elif version == LABEL_KEY_VERSION:
        key = LabelKey(r.string())
    else:
        return None
    r.end()
    return key


def decode_label_value(data: bytes) -> int:
    """A label's commit time (ms)."""
    r = FieldReader(data, "a label value", ValueError)
    version = r.take(I16)
    if version != LABEL_VALUE_VERSION:
        raise ValueError(f"a label value has version {version}, not {LABEL_VALUE_VERSION}")
    commit_ms = r.take(I64)
    r.end()
    return commit_ms


def decode_txn_value(transactional_id: str, data: bytes) -> TxnInfo:
    """The state a value of version 0 or 1 holds for ``transactional_id``."""
    r = FieldReader(data, f"the transaction-log value of {transactional_id!r}", ValueError)
    version = r.take(I16)
    if version not in (0, 1):
        raise r.fail(f"has version {version}, not one of Kafka's (0, 1)")
    flexible = version >= 1
    producer_id, producer_epoch, timeout_ms = r.take(I64), r.take(I16), r.take(I32)
    status = r.take(I8)
    if status not in _STATES:
        name = _NOT_WRITTEN.get(status)
        raise r.fail(f"has transaction status {status}" + (f" ({name}, never written)" if name else ""))
    partitions: set[TopicPartition] = set()
    topics = r.compact_array_length() if flexible else r.array_length()
    for _ in range(topics or 0):
        topic = r.compact_string() if flexible else r.string()
        ids = r.compact_array_length() if flexible else r.array_length()
        partitions.update(TopicPartition(topic, r.take(I32)) for _ in range(ids or 0))
        if flexible:
            r.tagged_fields()
    last_update_ms, start_ms = r.take(I64), r.take(I64)
    label: str | None = None
    owner: tuple[int, int] | None = None
    if flexible:
        tags = r.tagged_fields()
        if LABEL_TAG in tags:
            t = FieldReader(tags[LABEL_TAG], f"the label of {transactional_id!r}", ValueError)
            label = t.compact_string()
            t.end()
        if OWNER_TAG in tags:
            t = FieldReader(tags[OWNER_TAG], f"the owner of {transactional_id!r}", ValueError)
            owner = (t.take(U32), t.take(U32))
            t.end()
    r.end()
    return TxnInfo(transactional_id, producer_id, producer_epoch, _STATES[status], frozenset(partitions), start_ms,
                   timeout_ms, last_update_ms, label, owner)  # fmt: skip

