"""Encoding RecordBatch v2 bytes, as a producer (or a transaction coordinator, for markers) writes them.

Three encoders, each giving the bytes Kafka's own producer would (kafka-python is the oracle in the tests):
:func:`encode_batch` for any records, :func:`encode_values` the append fast path (null keys, no headers, one
timestamp), and :func:`encode_end_txn_marker` for a COMMIT or ABORT control batch. The header is packed last, its
CRC-32C computed over the attributes onward (``batch.py`` draws the layout). Any thread.
"""

from __future__ import annotations

from collections.abc import Sequence

import crc32c as _crc32c

from logfs.core.errors import UnsupportedCompression
from logfs.core.format.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    HEADER,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    UINT32,
    Header,
    Record,
    TimestampType,
)
from logfs.core.format.compression import Compression, compress
from logfs.core.format.control import CONTROL_KEY, END_TXN_MARKER_VALUE, ControlType
from logfs.core.format.varint import NEG_ONE, VARINT, varint


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
    base_timestamp: int | None = None,
    last_offset_delta: int | None = None,
    delete_horizon: bool = False,
) -> bytes:
    """Encode ``records`` (absolute offsets ≥ ``base_offset``, ascending) as one batch, as a producer would.

    baseTimestamp is the first record's timestamp; maxTimestamp the largest (or ``max_timestamp`` when given,
    e.g. the append time for LOG_APPEND_TIME). The log cleaner's rebuilt batches (Kafka's ``filterTo``) also give
    ``last_offset_delta`` (the original batch's, kept when its last records are gone) and, for a batch that gets a
    delete horizon, ``base_timestamp`` = the horizon with ``delete_horizon`` (attribute bit 6).
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    base_ts = records[0].timestamp if base_timestamp is None else base_timestamp
    parts: list[bytes] = []
    for r in records:
        body = _record_body(r.offset - base_offset, r.timestamp - base_ts, r.key, r.value, r.headers)
        parts.append(varint(len(body)))
        parts.append(body)
    last_delta = records[-1].offset - base_offset if last_offset_delta is None else last_offset_delta
    max_ts = max(r.timestamp for r in records) if max_timestamp is None else max_timestamp
    attributes = _attributes(compression, timestamp_type, is_transactional, is_control)
    if delete_horizon:
        attributes |= DELETE_HORIZON_MASK
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


# Bound once: a method called on a name imported from another module compiles to an attribute load that builds a
# bound method on every call (CPython 3.11+ keeps LOAD_METHOD for names the module defines): ~35 ns each, 70 ns of a
# ~1.8 us one-record encode.
_pack_header_into = HEADER.pack_into
_pack_crc_into = UINT32.pack_into


def _assemble(
    records: bytes, count: int, base_offset: int, ple: int, attributes: int, last_offset_delta: int,
    base_ts: int, max_ts: int, producer_id: int, producer_epoch: int, base_sequence: int,
) -> bytes:  # fmt: skip
    body = compress(attributes & COMPRESSION_MASK, records)
    header = bytearray(RECORD_BATCH_OVERHEAD)
    _stamp_header(
        header, body, base_offset, ple, attributes, last_offset_delta, base_ts, max_ts, producer_id, producer_epoch,
        base_sequence, count,
    )  # fmt: skip
    return bytes(header) + body


def _stamp_header(
    header: bytearray, body: bytes | memoryview, base_offset: int, ple: int, attributes: int, last_offset_delta: int,
    base_ts: int, max_ts: int, producer_id: int, producer_epoch: int, base_sequence: int, count: int,
) -> None:  # fmt: skip
    """Pack the header into ``header[:RECORD_BATCH_OVERHEAD]`` for the records section ``body``, CRC included."""
    _pack_header_into(
        header, 0, base_offset, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(body), ple, MAGIC, 0, attributes,
        last_offset_delta, base_ts, max_ts, producer_id, producer_epoch, base_sequence, count,
    )  # fmt: skip
    head = memoryview(header)[ATTRIBUTES_OFFSET:RECORD_BATCH_OVERHEAD]
    _pack_crc_into(header, CRC_OFFSET, _crc32c.crc32c(body, _crc32c.crc32c(head)))
    head.release()


def stamp_values_header(batch: bytearray, count: int, timestamp: int) -> bytearray:
    """The header of a batch :func:`encode_values` would give (base offset 0, CREATE_TIME, no producer), packed into
    the first RECORD_BATCH_OVERHEAD bytes of ``batch``, whose records section follows them already encoded (by the
    compiled ``_helpers.text_batches``, core/cext/textbatches.c): no copy of the section."""
    with memoryview(batch) as view:
        _stamp_header(
            batch, view[RECORD_BATCH_OVERHEAD:], 0, NO_PARTITION_LEADER_EPOCH, 0, count - 1, timestamp, timestamp,
            NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE, count,
        )  # fmt: skip
    return batch


END_TXN_MARKER_BATCH_BYTES = 78  # Kafka's CURRENT_END_TXN_SCHEMA_RECORD_SIZE plus the batch overhead


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
