"""Validating one whole RecordBatch v2: what Kafka's ``LogValidator`` and ``DefaultRecordBatch.ensureValid`` check.

Validation is layered as in Kafka: ``batch.batch_size_at`` frames (enough bytes? a sane length?),
:func:`validate_batch` checks one whole batch (size, magic, CRC, the header rules of its origin, every record's
framing through ``records.walk``), and ``decode`` reads what was validated. :func:`check_plain_batches` is the
compiled helper for a request's many producer batches: it takes the common ones (compressed or not) in one call and
leaves the rest, and every fault, to :func:`validate_batch`. A batch is validated twice on its way into a log:
when a producer's batch is appended, and (CRC only) when a log is recovered. Any thread.
"""

from __future__ import annotations

from typing import NamedTuple

import crc32c as _crc32c

from logfs.core.cext import CEXT, USE_CEXT
from logfs.core.errors import ControlRecordNotAllowed, CorruptRecord, InvalidRecord, UnsupportedCompression
from logfs.core.format.batch import (
    ATTRIBUTES_OFFSET,
    MAGIC,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    BatchHeader,
    TimestampType,
    batch_size_at,
    read_header,
)
from logfs.core.format.compression import Compression, decompress
from logfs.core.format.control import parse_control_key
from logfs.core.format.decode import field_bytes, records_section
from logfs.core.format.records import walk
from logfs.core.format.varint import INT64_MAX, INT64_MIN


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
        data, start, end = records_section(buf, position, size, codec)
    count, last_delta = h.records_count, h.last_offset_delta
    max_ts_delta, cols = walk(data, start, end, count, last_delta, client=client, columns=h.is_control)
    if h.is_control and cols is not None:
        if h.records_count != 1:
            raise InvalidRecord(f"a control batch holds {h.records_count} records, not 1")
        parse_control_key(field_bytes(cols.data, int(cols.key_position[0]), int(cols.key_length[0])))
    return max_ts_delta


# One producer batch of a request, checked: (its bytes, stamped in place; size; lastOffsetDelta; recordsCount; its
# true max timestamp; producerId; whether ``batch.set_max_timestamp`` must stamp it). A plain tuple: one per batch.
RequestBatch = tuple[bytearray | memoryview, int, int, int, int, int, bool]


def check_plain_batches(
    batches: list[bytes | bytearray | memoryview],
    start: int,
    out: list[RequestBatch],
    *,
    max_message_bytes: int,
    segment_bytes: int,
    log_append: bool,
    now: int,
    before: int,
    after: int,
) -> int:
    """Check ``batches[start:]`` with the compiled helper (``core/cext/clientcheck.c``) as long as each is a
    writable producer batch (idempotent and transactional ones too) that passes every rule of a leader's append
    (``appendcheck.check_leader_batch``), appending one :data:`RequestBatch` to ``out`` for each; returns the index
    of the first it did not take (``start`` when the helper is not built or ``LOGFS_NO_CEXT`` is set). A compressed
    batch is inflated through :func:`compression.decompress` (its bound on a bomb, and its errors when the reference
    inflates a batch the helper refused), so only the inflate itself is left per batch. It raises
    nothing about the bytes: the caller checks the batch it stopped at with the reference, whose answer (or error)
    is the one that counts. Any thread."""
    if not USE_CEXT or not INT64_MIN <= now <= INT64_MAX:
        return start
    assert CEXT is not None
    return CEXT.check_client_batches(
        batches, start, out, _crc32c.crc32c, decompress, min(max_message_bytes, INT64_MAX),
        min(segment_bytes, INT64_MAX), log_append, now, min(before, INT64_MAX), min(after, INT64_MAX),
    )  # fmt: skip
