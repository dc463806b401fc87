"""The values of the producer state (Kafka's ProducerStateEntry, BatchMetadata, CompletedTxn, and what
ProducerAppendInfo computes): one producer's entry, the update one batch or marker makes, and a marker as read.

Every value here is immutable: an update builds a new :class:`ProducerStateEntry`, which
``core/txn/producerstate.py``'s manager installs only once its batch is stored, so a refused batch or a failed write
leaves the state as it was.

Threads: pure values and functions; any thread.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from logfs.core.errors import InvalidRecord
from logfs.core.format.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE
from logfs.core.format.control import END_TXN_MARKER_VALUE, ControlType, parse_control_key
from logfs.core.format.decode import decode_records
from logfs.core.format.varint import INT32_MAX

NUM_BATCHES_TO_RETAIN = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN: a producer has ≤ 5 sends in flight
NO_OFFSET = -1
NO_COORDINATOR_EPOCH = -1


def decrement_sequence(sequence: int, decrement: int) -> int:
    """``DefaultRecordBatch.decrementSequence``: the inverse of ``increment_sequence`` (wraps below 0)."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == INT32_MAX)


class BatchMetadata(NamedTuple):
    """One retained batch of a producer: enough to recognise a retry and answer with the original offsets."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """One producer's state. Frozen: an update builds a new entry, installed only once its batch is stored."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    last_timestamp: int = -1
    current_txn_first_offset: int = NO_OFFSET
    batches: tuple[BatchMetadata, ...] = ()

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else NO_OFFSET

    @property
    def last_offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    def find_duplicate(self, producer_epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if producer_epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def with_epoch(self, producer_epoch: int) -> ProducerStateEntry:
        """A new epoch forgets the old epoch's batches (``maybeUpdateProducerEpoch``)."""
        if producer_epoch == self.producer_epoch:
            return self
        return replace(self, producer_epoch=producer_epoch, batches=())

    def with_batch(self, producer_epoch: int, batch: BatchMetadata) -> ProducerStateEntry:
        entry = self.with_epoch(producer_epoch)
        batches = (*entry.batches, batch)[-NUM_BATCHES_TO_RETAIN:]
        return replace(entry, batches=batches, last_timestamp=batch.timestamp)


class CompletedTxn(NamedTuple):
    """A transaction its marker ended: producer, first offset, marker offset, and whether it was aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerUpdate(NamedTuple):
    """What one batch or marker does to the state, computed before its bytes are written (``ProducerAppendInfo``)."""

    entry: ProducerStateEntry
    started_txn: int  # the first offset of the transaction this batch opens, else NO_OFFSET
    completed: CompletedTxn | None
    next_offset: int  # the offset after the batch: the map end offset once applied


class Marker(NamedTuple):
    """What a control batch says: its type and, for COMMIT and ABORT, the coordinator epoch of its value."""

    control_type: ControlType | int
    coordinator_epoch: int


def read_marker(data: bytes | bytearray | memoryview, position: int) -> Marker:
    """The control record of the control batch at ``position`` (its one record's key, and value for markers)."""
    records = decode_records(data, position)
    control_type = parse_control_key(records[0].key if records else None)
    coordinator_epoch = NO_COORDINATOR_EPOCH
    value = records[0].value if records else None
    if control_type in (ControlType.COMMIT, ControlType.ABORT):
        if value is None or len(value) < END_TXN_MARKER_VALUE.size:
            raise InvalidRecord(f"transaction marker value of {0 if value is None else len(value)} bytes")
        _version, coordinator_epoch = END_TXN_MARKER_VALUE.unpack_from(value)
    return Marker(control_type, coordinator_epoch)
