"""Kafka's RecordBatch v2 (magic 2): the unit logfs stores, validates, replicates and serves.

Layout (reference §1.1; big-endian; what the CRC-32C covers marked ``crc``)::

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

Worked example (reference §1.2): one record with value ``"a"``, null key, no headers, baseOffset 0, leader epoch 0,
timestamp 1000 and no producer is 69 bytes; its CRC is ``ebf1884b`` and its record is ``0e 00 00 00 01 02 61 00``.

The two fields outside the CRC are exactly the two a leader must set on a producer's batch, so
:func:`assign_offset_and_epoch` writes them in place without touching the records or the checksum. Everything here
is a plain function over bytes; nothing holds state. Validation is layered as in Kafka: :func:`batch_size_at` frames
(enough bytes? a sane length?), :func:`validate_batch` checks one whole batch (magic, CRC, header rules, every
record's framing), and :func:`decode_records` / :func:`record_columns` read what was validated.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

import crc32c as _crc32c

from logfs.core.errors import ControlRecordNotAllowed, CorruptRecord, InvalidRecord, UnsupportedCompression
from logfs.core.format.compression import Compression, compress, decompress
from logfs.core.format.control import CONTROL_KEY, END_TXN_MARKER_VALUE, ControlType, parse_control_key
from logfs.core.format.records import RecordColumns, walk
from logfs.core.format.varint import INT32_MAX, NEG_ONE, VARINT, varint

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
_UINT32 = struct.Struct(">I")
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


class ValidBatch(NamedTuple):
    """What validation learned about one batch: its header, where it lies, and its true max timestamp.

    ``max_timestamp`` is computed from the records (CREATE_TIME) and may differ from the header's, which the
    leader then corrects; for LOG_APPEND_TIME it is the header's.
    """

    header: BatchHeader
    position: int
    max_timestamp: int

    @property
    def size(self) -> int:
        return self.header.size


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


def iter_batch_positions(buf: bytes | bytearray | memoryview, position: int = 0) -> Iterator[tuple[int, int]]:
    """``(position, size)`` of each whole batch from ``position`` on; stops silently at an incomplete tail."""
    while True:
        size = batch_size_at(buf, position)
        if size is None:
            return
        yield position, size
        position += size


def read_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Decode the 61-byte header at ``position`` (no CRC check: see :func:`validate_batch`)."""
    if len(buf) - position < RECORD_BATCH_OVERHEAD:
        raise CorruptRecord(
            f"batch is {len(buf) - position} bytes, shorter than the {RECORD_BATCH_OVERHEAD}-byte header",
            position=position,
        )
    return BatchHeader._make(HEADER.unpack_from(buf, position))


# --- validation ----------------------------------------------------------------------------------------------------


def validate_batch(
    buf: bytes | bytearray | memoryview,
    position: int = 0,
    *,
    client: bool = True,
    size: int | None = None,
    deep: bool = True,
) -> ValidBatch:
    """Check one batch completely and return what the append path needs.

    ``client=True`` applies the rules for a producer's batch (Kafka's ``AppendOrigin.CLIENT``): baseOffset 0 (the
    leader assigns the real one), ``recordsCount == lastOffsetDelta + 1 > 0``, offset deltas run 0, 1, 2 …, no
    control attribute, producer fields consistent. ``client=False`` is for batches already in a log or from the
    leader: compaction gaps allowed, control batches checked for a well-formed key. ``deep=False`` stops after the
    size, magic and CRC checks, which is all Kafka's ``ensureValid`` does when a log is recovered (the batches were
    deep-checked when they were appended); its max_timestamp is the header's. Raises CorruptRecord or InvalidRecord
    with the batch position. Any thread may call it.
    """
    if size is None:
        found = batch_size_at(buf, position)
        if found is None:
            raise CorruptRecord("batch is truncated: fewer bytes than its declared size", position=position)
        size = found
    header = read_header(buf, position)
    try:
        if header.size != size:
            raise CorruptRecord(f"declared batch size {header.size} but {size} bytes given")
        if size < RECORD_BATCH_OVERHEAD:
            raise CorruptRecord(f"batch is {size} bytes, shorter than the {RECORD_BATCH_OVERHEAD}-byte header")
        if header.magic != MAGIC:
            raise CorruptRecord(f"magic {header.magic} is not 2 (only RecordBatch v2 is supported)")
        view = memoryview(buf)[position + ATTRIBUTES_OFFSET : position + size]
        actual = _crc32c.crc32c(view)
        if actual != header.crc:
            raise CorruptRecord(f"CRC-32C mismatch: stored {header.crc:08x}, computed {actual:08x}")
        if not deep:
            return ValidBatch(header, position, header.max_timestamp)
        max_ts_delta = _validate_body(buf, position, size, header, client)
    except (CorruptRecord, InvalidRecord) as exc:
        if exc.position is None:
            raise type(exc)(exc.reason, position=position) from None
        raise
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME or header.records_count == 0:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = header.base_timestamp + max_ts_delta
    return ValidBatch(header, position, max_timestamp)


def _validate_body(buf: bytes | bytearray | memoryview, position: int, size: int, h: BatchHeader, client: bool) -> int:
    if h.records_count < 0:
        raise InvalidRecord(f"negative recordsCount {h.records_count}")
    if h.last_offset_delta < 0:
        raise InvalidRecord(f"negative lastOffsetDelta {h.last_offset_delta}")
    codec = h.compression
    if codec > Compression.ZSTD:
        raise UnsupportedCompression(f"compression id {codec} is not one Kafka defines (0-4)")
    if client:
        if h.base_offset != 0:
            raise InvalidRecord(f"a producer batch must have baseOffset 0, not {h.base_offset}: the leader assigns it")
        if h.is_control:
            raise ControlRecordNotAllowed("clients are not allowed to write control batches")
        if h.records_count == 0:
            raise InvalidRecord("a producer's batch must hold at least one record")
        if h.records_count != h.last_offset_delta + 1:
            raise InvalidRecord(
                f"recordsCount {h.records_count} does not match lastOffsetDelta {h.last_offset_delta} + 1"
            )
        if h.is_transactional and not h.has_producer_id:
            raise InvalidRecord("a transactional batch must carry a producer id")
        if h.has_producer_id and (h.base_sequence < 0 or h.producer_epoch < 0):
            raise InvalidRecord(
                f"producer id {h.producer_id} with invalid epoch {h.producer_epoch} or sequence {h.base_sequence}"
            )
    elif h.records_count > h.last_offset_delta + 1:
        raise InvalidRecord(f"recordsCount {h.records_count} exceeds lastOffsetDelta {h.last_offset_delta} + 1")
    if codec == Compression.NONE:  # walked where it lies, a view included: no copy of the records
        data: bytes | bytearray | memoryview = buf
        start, end = position + RECORDS_OFFSET, position + size
    else:
        data, start, end = _records_section(buf, position, size, codec)
    count, last_delta = h.records_count, h.last_offset_delta
    max_ts_delta, cols = walk(data, start, end, count, last_delta, client=client, columns=h.is_control)
    if h.is_control and cols is not None:
        if h.records_count != 1:
            raise InvalidRecord(f"a control batch holds {h.records_count} records, not 1")
        parse_control_key(_field(cols.data, int(cols.key_position[0]), int(cols.key_length[0])))
    return max_ts_delta


def _records_section(
    buf: bytes | bytearray | memoryview, position: int, size: int, codec: int
) -> tuple[bytes | bytearray, int, int]:
    """The buffer holding a batch's (inflated) records, and where they lie in it: uncompressed records stay in
    place, a 1 MiB copy saved per batch."""
    start = position + RECORDS_OFFSET
    if codec == Compression.NONE:
        if isinstance(buf, memoryview):
            return bytes(buf[start : position + size]), 0, size - RECORDS_OFFSET
        return buf, start, position + size
    data = decompress(codec, memoryview(buf)[start : position + size])
    return data, 0, len(data)


# --- reading -------------------------------------------------------------------------------------------------------


def record_columns(buf: bytes | bytearray | memoryview, position: int = 0) -> tuple[BatchHeader, RecordColumns]:
    """Header and field positions of a stored batch (decompressed once); validates the framing, not the CRC."""
    header = read_header(buf, position)
    if header.size > len(buf) - position:
        raise CorruptRecord(
            f"batch is truncated: {len(buf) - position} bytes of the {header.size} it declares", position=position
        )
    data, start, end = _records_section(buf, position, header.size, header.compression)
    _, cols = walk(data, start, end, header.records_count, header.last_offset_delta, client=False)
    assert cols is not None
    return header, cols


def decode_records(buf: bytes | bytearray | memoryview, position: int = 0) -> list[Record]:
    """Every record of the batch at ``position`` as :class:`Record` values (control records included).

    For LOG_APPEND_TIME batches every record's timestamp reads as the batch's maxTimestamp, as in Kafka.
    """
    header, cols = record_columns(buf, position)
    return records_from_columns(header, cols)


def records_from_columns(header: BatchHeader, cols: RecordColumns) -> list[Record]:
    cols = cols.lists()
    data = cols.data
    base_offset = header.base_offset
    log_append = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    out = []
    for i in range(len(cols)):
        ts = header.max_timestamp if log_append else header.base_timestamp + cols.timestamp_delta[i]
        hdrs = cols.headers[i]
        out.append(
            Record(
                base_offset + cols.offset_delta[i],
                ts,
                _field(data, cols.key_position[i], cols.key_length[i]),
                _field(data, cols.value_position[i], cols.value_length[i]),
                tuple(Header(k, v) for k, v in hdrs) if hdrs else (),
            )
        )
    return out


def _field(data: bytes | bytearray, position: int, length: int) -> bytes | None:
    return None if length < 0 else bytes(data[position : position + length])


# --- encoding ------------------------------------------------------------------------------------------------------


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression: int = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    max_timestamp: int | None = None,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """Encode ``records`` (absolute offsets ≥ ``base_offset``, ascending) as one batch, as a producer would.

    baseTimestamp is the first record's timestamp; maxTimestamp the largest (or ``max_timestamp`` when given,
    e.g. the append time for LOG_APPEND_TIME).
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    base_ts = records[0].timestamp
    parts: list[bytes] = []
    for r in records:
        body = _record_body(r.offset - base_offset, r.timestamp - base_ts, r.key, r.value, r.headers)
        parts.append(varint(len(body)))
        parts.append(body)
    last_delta = records[-1].offset - base_offset
    max_ts = max(r.timestamp for r in records) if max_timestamp is None else max_timestamp
    attributes = _attributes(compression, timestamp_type, is_transactional, is_control)
    return _assemble(
        b"".join(parts), len(records), base_offset, partition_leader_epoch, attributes, last_delta, base_ts, max_ts,
        producer_id, producer_epoch, base_sequence,
    )  # fmt: skip


def _record_body(
    offset_delta: int, ts_delta: int, key: bytes | None, value: bytes | None, headers: Sequence[Header]
) -> bytes:
    p = [b"\x00", varint(ts_delta), varint(offset_delta)]
    if key is None:
        p.append(NEG_ONE)
    else:
        p += (varint(len(key)), key)
    if value is None:
        p.append(NEG_ONE)
    else:
        p += (varint(len(value)), value)
    p.append(varint(len(headers)))
    for h in headers:
        hk = h.key.encode("utf-8")
        p += (varint(len(hk)), hk)
        if h.value is None:
            p.append(NEG_ONE)
        else:
            p += (varint(len(h.value)), h.value)
    return b"".join(p)


def encode_values(
    values: Sequence[bytes],
    timestamp: int,
    *,
    base_offset: int = 0,
    compression: int = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """The append fast path: null keys, no headers, one timestamp for all (text lines written to ``append``).

    Byte-identical to :func:`encode_batch` of the same records; one join over precomputed varints and no per-record
    object (measured ~3.5 M records/s for 100-byte values where the general encoder does ~0.8 M).
    """
    n = len(values)
    if n == 0:
        raise ValueError("a batch needs at least one record")
    v = VARINT
    if n < len(v) and max(map(len, values)) < len(v) - 16:
        # body = attributes 00, timestampDelta 00, offsetDelta, key -1 (01), valueLength, value, header count 00
        records = b"".join(
            [
                b"".join((v[4 + len(v[i]) + len(v[n]) + n], b"\x00\x00", v[i], b"\x01", v[n], x, b"\x00"))
                for i, x in enumerate(values)
                for n in (len(x),)
            ]
        )
    else:
        parts: list[bytes] = []
        for i, x in enumerate(values):
            body = _record_body(i, 0, None, x, ())
            parts += (varint(len(body)), body)
        records = b"".join(parts)
    attributes = _attributes(compression, timestamp_type, False, False)
    return _assemble(
        records, n, base_offset, partition_leader_epoch, attributes, n - 1, timestamp, timestamp,
        NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE,
    )  # fmt: skip


def _attributes(compression: int, timestamp_type: TimestampType, transactional: bool, control: bool) -> int:
    if not 0 <= compression <= Compression.ZSTD:
        raise UnsupportedCompression(f"compression id {compression} is not one Kafka defines (0-4)")
    return (
        compression
        | (TIMESTAMP_TYPE_MASK if timestamp_type == TimestampType.LOG_APPEND_TIME else 0)
        | (TRANSACTIONAL_MASK if transactional else 0)
        | (CONTROL_MASK if control else 0)
    )


def _assemble(
    records: bytes, count: int, base_offset: int, ple: int, attributes: int, last_offset_delta: int,
    base_ts: int, max_ts: int, producer_id: int, producer_epoch: int, base_sequence: int,
) -> bytes:  # fmt: skip
    body = compress(attributes & COMPRESSION_MASK, records)
    header = bytearray(
        HEADER.pack(
            base_offset, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(body), ple, MAGIC, 0, attributes,
            last_offset_delta, base_ts, max_ts, producer_id, producer_epoch, base_sequence, count,
        )
    )  # fmt: skip
    crc = _crc32c.crc32c(body, _crc32c.crc32c(memoryview(header)[ATTRIBUTES_OFFSET:]))
    _UINT32.pack_into(header, CRC_OFFSET, crc)
    return bytes(header) + body


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
    _UINT32.pack_into(buf, position + CRC_OFFSET, crc)


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
    _UINT32.pack_into(buf, position + CRC_OFFSET, crc)


END_TXN_MARKER_BATCH_BYTES = 78  # Kafka's CURRENT_END_TXN_SCHEMA_RECORD_SIZE plus the batch overhead


# --- control records --------------------------------------------------------------------------------------------


def encode_end_txn_marker(
    control_type: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A COMMIT or ABORT marker: a transactional control batch of one 17-byte record (78 bytes in all)."""
    if control_type not in (ControlType.COMMIT, ControlType.ABORT):
        raise ValueError(f"{control_type!r} is not a transaction marker")
    record = Record(
        base_offset,
        timestamp,
        CONTROL_KEY.pack(0, control_type),
        END_TXN_MARKER_VALUE.pack(0, coordinator_epoch),
    )
    out = encode_batch(
        [record],
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )
    assert len(out) == END_TXN_MARKER_BATCH_BYTES
    return out
