"""Committed labels in ``__transaction_state``: the part of the transaction log that is replicated today.

A commit given a label (the Spark sink's exactly-once: docs/spark.md) is recorded in the store's transaction log
(core/txn/statemanager.py), a file only its node holds. So that a label survives that node, the leader also appends
it, once the commit's markers are replicated, as a record of the internal topic ``__transaction_state`` (Kafka's
format, logfs's label key: core/txn/records.py), in the partition of its transactional id, and answers the commit
only once that record is replicated too. Followers copy the topic like any other; a node that becomes leader, and
every store that opens, replays it (:meth:`ReplicatedLabels.catch_up`), so ``.logfs/labels/<label>`` answers the
same on the new leader and a micro-batch replayed after a failover is not committed twice.

Why after the markers: a label says "this commit happened". Written before them, a leader dying between the two
would leave a replicated label for a transaction its successor aborts (it never saw the decision), and a replay
would skip data that was never committed. Written after, the only loss is the other way (markers replicated, label
not: the replay commits again, as before this record existed), and an acknowledged commit always has both.

Bounded: each partition keeps its newest :data:`LABELS_PER_PARTITION`; a record that would exceed it carries
tombstones for the oldest in the same batch, and the topic is compacted (``cleanup.policy=compact``), so the
topic stays small. The file keeps its own newest 100,000 as before.

Threads: any (a lock guards the sets); :meth:`ReplicatedLabels.catch_up` reads segment files (a worker thread).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from logfs.core.format.batch import Record
from logfs.core.format.encode import encode_batch
from logfs.core.log.replay import replay_records
from logfs.core.txn.records import (
    TRANSACTION_STATE_PARTITIONS,
    TRANSACTION_STATE_TOPIC,
    LabelKey,
    decode_key,
    decode_label_value,
    encode_label_key,
    encode_label_value,
)

if TYPE_CHECKING:  # the store owns the coordinator, which owns this: no import at run time
    from logfs.core.log.log import Log
    from logfs.core.store import Store

_log = logging.getLogger(__name__)

LABELS_PER_PARTITION = 2000  # newest labels kept per partition: 100,000 over Kafka's 50, as the file keeps
# Kafka's TransactionLog topic config (transaction.state.log.segment.bytes: 100 MiB; compacted)
TRANSACTION_STATE_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}


def ensure_transaction_state_topic(store: Store, partitions: int = TRANSACTION_STATE_PARTITIONS) -> None:
    """Create ``__transaction_state`` (compacted, Kafka's partition count) unless it exists. Blocks."""
    store.ensure_internal_topic(TRANSACTION_STATE_TOPIC, partitions, TRANSACTION_STATE_CONFIG)


def label_batch(label: str, forgotten: list[str], now_ms: int) -> bytes:
    """One batch: tombstones for ``forgotten`` labels, then ``label`` committed at ``now_ms``."""
    records = [Record(i, now_ms, encode_label_key(old), None) for i, old in enumerate(forgotten)]
    records.append(Record(len(records), now_ms, encode_label_key(label), encode_label_value(now_ms)))
    return encode_batch(records)


class ReplicatedLabels:
    """The labels ``__transaction_state`` holds, per partition, oldest first; replayed and kept up to date here."""

    def __init__(self, per_partition: int = LABELS_PER_PARTITION) -> None:
        self._lock = threading.Lock()
        self._per_partition = per_partition
        self._labels: dict[str, int] = {}  # label → its partition
        self._by_partition: dict[int, dict[str, None]] = {}  # insertion-ordered sets: oldest first
        self._replayed: dict[int, tuple[int, int]] = {}  # partition → (id() of its Log, next offset to replay)
        self._in_use = False

    def has(self, label: str) -> bool:
        with self._lock:
            return label in self._labels

    @property
    def in_use(self) -> bool:
        """Whether labels are recorded in ``__transaction_state`` here: it exists (replayed) or was written to.
        From then on they alone say which commits happened (core/txn/coordinator.py)."""
        return self._in_use

    def beyond_cap(self, partition: int) -> list[str]:
        """The oldest labels of ``partition`` a new one there would push past the cap: tombstone them with it."""
        with self._lock:
            held = self._by_partition.get(partition, {})
            return list(held)[: max(0, len(held) + 1 - self._per_partition)]

    def add(self, partition: int, label: str, forgotten: list[str]) -> None:
        """This node appended ``label`` (with tombstones for ``forgotten``) to ``partition``."""
        with self._lock:
            self._in_use = True
            for old in forgotten:
                self._drop(old)
            self._drop(label)
            self._labels[label] = partition
            self._by_partition.setdefault(partition, {})[label] = None

    def catch_up(self, store: Store, *, from_start: bool = False) -> None:
        """Replay what every partition of ``__transaction_state`` holds that was not replayed yet, up to its log end
        (a label record is only ever written once its commit's markers are replicated: see the module docstring).
        A partition recreated or truncated below where the replay stopped is replayed from its start; one a
        follower truncated and fetched past that point again cannot be told apart, so a node that becomes leader
        replays everything (``from_start``: the topic is compacted and small; lookups answer "no" until it is done,
        so it runs before the node serves them). Blocking reads: a worker thread; callers serialise catch-ups."""
        if not store.has_topic(TRANSACTION_STATE_TOPIC):
            return
        if from_start:
            with self._lock:
                self._labels.clear()
                self._by_partition.clear()
            self._replayed.clear()
        self._in_use = True
        for p in store.partitions(TRANSACTION_STATE_TOPIC):
            self._catch_up_partition(p, store.log(TRANSACTION_STATE_TOPIC, p))

    def _catch_up_partition(self, p: int, log: Log) -> None:
        seen, start = self._replayed.get(p, (0, -1))
        end = log.log_end_offset
        if seen != id(log) or end < start:
            with self._lock:
                for label in list(self._by_partition.get(p, {})):
                    self._drop(label)
            start = log.log_start_offset

        def apply(key: bytes | None, value: bytes | None) -> None:
            try:
                decoded = decode_key(key) if key is not None else None
                if isinstance(decoded, LabelKey) and value is not None:
                    decode_label_value(value)  # strict: a damaged record is not a label
            except ValueError as exc:  # not logfs's or Kafka's record: skipped, as Kafka's loader skips a foreign key
                _log.warning("%s-%d: a record that is not a transaction-log record, skipped: %s",
                             TRANSACTION_STATE_TOPIC, p, exc)  # fmt: skip
                return
            if not isinstance(decoded, LabelKey):  # a transactional id's state (not written yet) or a foreign key
                return
            with self._lock:
                self._drop(decoded.label)
                if value is not None:
                    self._labels[decoded.label] = p
                    self._by_partition.setdefault(p, {})[decoded.label] = None

        self._replayed[p] = (id(log), replay_records(log, max(start, log.log_start_offset), end, apply))

    def _drop(self, label: str) -> None:
        """Caller holds the lock."""
        p = self._labels.pop(label, None)
        if p is not None:
            self._by_partition[p].pop(label, None)
