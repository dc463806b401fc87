"""Kafka's RecordBatch v2 (magic 2): the unit logfs stores, validates, replicates and serves.

Layout (Kafka's ``DefaultRecordBatch``; big-endian; what the CRC-32C covers marked ``crc``)::

    pos  size  field                 notes
      0     8  baseOffset            assigned by the leader in place; not under the CRC
      8     4  batchLength           bytes after this field: total size = batchLength + 12 (LOG_OVERHEAD)
     12     4  partitionLeaderEpoch  stamped by the leader in place; not under the CRC
     16     1  magic                 2
     17     4  crc                   CRC-32C of bytes [21, end)
     21     2  attributes       crc  bits 0-2 codec, 3 timestampType, 4 transactional, 5 control, 6 delete horizon
     23     4  lastOffsetDelta  crc  lastOffset = baseOffset + lastOffsetDelta
     27     8  baseTimestamp    crc  record timestamps are baseTimestamp + timestampDelta
     35     8  maxTimestamp     crc  the largest record timestamp, or the append time (LOG_APPEND_TIME)
     43     8  producerId       crc  -1 = none
     51     2  producerEpoch    crc  -1 = none
     53     4  baseSequence     crc  -1 = none
     57     4  recordsCount     crc  int32, not a varint
     61     …  records          crc  see ``core/format/records.py``; compressed as one blob when the codec is not none

Worked example (checked in tests/core/format/test_batch_vectors.py): one record with value ``"a"``, null key, no
headers, baseOffset 0, leader epoch 0, timestamp 1000 and no producer is 69 bytes; its CRC is ``ebf1884b`` and its
record is ``0e 00 00 00 01 02 61 00``.

The two fields outside the CRC are exactly the two a leader must set on a producer's batch, so
:func:`assign_offset_and_epoch` writes them in place without touching the records or the checksum. Everything here
is a plain function over bytes; nothing holds state. This module is the layout, the header and the framing; the
rest of the codec reads it, one module a job: ``encode`` (records → batch bytes), ``validate`` (one whole batch
checked, as Kafka's ``LogValidator``), ``decode`` (batch → record columns and :class:`Record` values). Validation is
layered as in Kafka: :func:`batch_size_at` frames (enough bytes? a sane length?), ``validate.validate_batch`` checks
one whole batch (magic, CRC, header rules, every record's framing), and ``decode.decode_records`` /
``decode.record_columns`` read what was validated.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

import crc32c as _crc32c

from logfs.core.errors import CorruptRecord
from logfs.core.format.varint import INT32_MAX

# --- layout --------------------------------------------------------------------------------------------------------

BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
RECORDS_OFFSET = 61

LOG_OVERHEAD = 12  # baseOffset + batchLength: what batchLength does not count
RECORD_BATCH_OVERHEAD = RECORDS_OFFSET  # a batch with no records
HEADER_SIZE_UP_TO_MAGIC = MAGIC_OFFSET + 1  # what a reader needs to see before it can frame a batch
MIN_DECLARED_BATCH_BYTES = 14  # Kafka's RECORD_OVERHEAD_V0: a smaller batchLength is corruption, not a torn tail
MAGIC = 2

HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_OFFSET = -1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

assert HEADER.size == RECORD_BATCH_OVERHEAD == 61
assert RECORDS_COUNT_OFFSET + 4 == RECORDS_OFFSET and CRC_OFFSET + 4 == ATTRIBUTES_OFFSET
assert LOG_OVERHEAD == LENGTH_OFFSET + 4 and HEADER_SIZE_UP_TO_MAGIC == 17


class TimestampType(IntEnum):
    """Attribute bit 3: where a batch's timestamps come from."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


# --- values --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Header:
    """One record header: a UTF-8 key (never null) and a value that may be null."""

    key: str
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Record:
    """One record with its absolute offset and timestamp, as a consumer sees it."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


class BatchHeader(NamedTuple):
    """The 61-byte header of a batch, decoded. ``size`` is the whole batch's size in bytes.

    A NamedTuple rather than a frozen dataclass: it is built once per batch on every append and read, and
    ``_make`` from ``struct.unpack`` costs ~0.3 µs where a 13-field frozen dataclass costs ~2 µs.
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID

    @property
    def last_sequence(self) -> int:
        """The sequence of the last record; sequences wrap at int32 max (``DefaultRecordBatch.incrementSequence``)."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)


def increment_sequence(sequence: int, increment: int) -> int:
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


# --- framing -------------------------------------------------------------------------------------------------------


def batch_size_at(buf: bytes | bytearray | memoryview, position: int = 0) -> int | None:
    """Total size of the batch starting at ``position``, or None when ``buf`` does not hold all of it yet.

    Mirrors Kafka's ``FileLogInputStream.nextBatch``: 17 bytes or fewer, or a declared size running past the end,
    is a batch still arriving (or a torn tail); a batchLength field below 14 is corruption.
    """
    remaining = len(buf) - position
    if remaining <= HEADER_SIZE_UP_TO_MAGIC:
        return None
    _, length = _OFFSET_AND_LENGTH.unpack_from(buf, position)
    if length < MIN_DECLARED_BATCH_BYTES:
        raise CorruptRecord(
            f"declared batch length {length} is below the minimum of {MIN_DECLARED_BATCH_BYTES}", position=position
        )
    size = length + LOG_OVERHEAD
    if size > remaining:
        return None
    return size


def declared_batch_size(buf: bytes | bytearray | memoryview, position: int = 0) -> int | None:
    """The size the batch at ``position`` declares, once its length field is there (recovery, and the write framing
    of ``core/format/framing.py``, which refuses an oversized batch before its bytes arrive); None before that."""
    if len(buf) - position < LOG_OVERHEAD:
        return None
    return int.from_bytes(buf[position + LENGTH_OFFSET : position + LOG_OVERHEAD], "big", signed=True) + LOG_OVERHEAD


def iter_batch_positions(buf: bytes | bytearray | memoryview, position: int = 0) -> Iterator[tuple[int, int]]:
    """``(position, size)`` of each whole batch from ``position`` on; stops silently at an incomplete tail."""
    while True:
        size = batch_size_at(buf, position)
        if size is None:
            return
        yield position, size
        position += size


def read_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Decode the 61-byte header at ``position`` (no CRC check: see ``validate.validate_batch``)."""
    if len(buf) - position < RECORD_BATCH_OVERHEAD:
        raise CorruptRecord(
            f"batch is {len(buf) - position} bytes, shorter than the {RECORD_BATCH_OVERHEAD}-byte header",
            position=position,
        )
    return BatchHeader._make(HEADER.unpack_from(buf, position))


# --- in-place changes by the leader -----------------------------------------------------------------------------


def assign_offset_and_epoch(buf: bytearray | memoryview, position: int, base_offset: int, leader_epoch: int) -> None:
    """Set baseOffset and partitionLeaderEpoch of a validated batch in place; the CRC does not cover them."""
    _INT64.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)
    _INT32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)


def set_max_timestamp(
    buf: bytearray | memoryview, position: int, size: int, timestamp_type: TimestampType, max_timestamp: int
) -> None:
    """Set the timestamp type and maxTimestamp in place and recompute the CRC, as ``setMaxTimestamp`` does.

    A no-op when both already hold, so the common CREATE_TIME append keeps its producer's CRC untouched.
    """
    (attributes,) = _INT16.unpack_from(buf, position + ATTRIBUTES_OFFSET)
    new_attributes = (attributes & ~TIMESTAMP_TYPE_MASK) | (
        TIMESTAMP_TYPE_MASK if timestamp_type == TimestampType.LOG_APPEND_TIME else 0
    )
    (current,) = _INT64.unpack_from(buf, position + MAX_TIMESTAMP_OFFSET)
    if new_attributes == attributes and current == max_timestamp:
        return
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, new_attributes)
    _INT64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, max_timestamp)
    crc = _crc32c.crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET : position + size])
    UINT32.pack_into(buf, position + CRC_OFFSET, crc)


def set_producer(
    buf: bytearray | memoryview,
    position: int,
    size: int,
    *,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    transactional: bool,
) -> None:
    """Give a batch a producer identity in place (id, epoch, base sequence, the transactional bit) and recompute the
    CRC: the mount writes a transaction's batches as that transaction's producer, whatever the client encoded."""
    _INT64.pack_into(buf, position + PRODUCER_ID_OFFSET, producer_id)
    _INT16.pack_into(buf, position + PRODUCER_EPOCH_OFFSET, producer_epoch)
    _INT32.pack_into(buf, position + BASE_SEQUENCE_OFFSET, base_sequence)
    (attributes,) = _INT16.unpack_from(buf, position + ATTRIBUTES_OFFSET)
    attributes = (attributes | TRANSACTIONAL_MASK) if transactional else (attributes & ~TRANSACTIONAL_MASK)
    _INT16.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes)
    crc = _crc32c.crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET : position + size])
    UINT32.pack_into(buf, position + CRC_OFFSET, crc)
