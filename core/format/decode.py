"""Reading a stored batch: its records' columns and :class:`~logfs.core.format.batch.Record` values.

Decoding trusts the bytes as far as the CRC goes (callers read batches that were validated when appended, or call
``validate.validate_batch`` first) but still checks the framing of every record, so a damaged batch raises
CorruptRecord or InvalidRecord rather than returning wrong records. A compressed batch is inflated once; an
uncompressed one is walked where it lies. Any thread.
"""

from __future__ import annotations

from logfs.core.errors import CorruptRecord
from logfs.core.format.batch import RECORDS_OFFSET, BatchHeader, Header, Record, TimestampType, read_header
from logfs.core.format.columns import RecordColumns
from logfs.core.format.compression import Compression, decompress
from logfs.core.format.records import walk


def records_section(
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


def record_columns(buf: bytes | bytearray | memoryview, position: int = 0) -> tuple[BatchHeader, RecordColumns]:
    """Header and field positions of a stored batch (decompressed once); validates the framing, not the CRC."""
    header = read_header(buf, position)
    if header.size > len(buf) - position:
        raise CorruptRecord(
            f"batch is truncated: {len(buf) - position} bytes of the {header.size} it declares", position=position
        )
    data, start, end = records_section(buf, position, header.size, header.compression)
    _, cols = walk(data, start, end, header.records_count, header.last_offset_delta, client=False)
    assert cols is not None
    return header, cols


def decode_records(buf: bytes | bytearray | memoryview, position: int = 0) -> list[Record]:
    """Every record of the batch at ``position`` as ``batch.Record`` values (control records included).

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
                field_bytes(data, cols.key_position[i], cols.key_length[i]),
                field_bytes(data, cols.value_position[i], cols.value_length[i]),
                tuple(Header(k, v) for k, v in hdrs) if hdrs else (),
            )
        )
    return out


def field_bytes(data: bytes | bytearray, position: int, length: int) -> bytes | None:
    return None if length < 0 else bytes(data[position : position + length])
