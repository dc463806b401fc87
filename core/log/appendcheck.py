"""What an append must pass before a byte of it is written (Kafka's ``UnifiedLog.analyzeAndValidateRecords`` and
``LogValidator``), as plain functions of the bytes and the topic's config: a refused append leaves the log untouched.

* A leader's batch (one producer batch, Kafka's v2 produce carries exactly one per partition) is validated deeply
  (``validate_batch(client=True)``: records, CRC, compression), bounded by ``max.message.bytes`` and
  ``segment.bytes``, and its maxTimestamp must lie within ``message.timestamp.{before,after}.max.ms`` of now
  (CREATE_TIME only). The Log then gives it offsets and its leader epoch in place.
* A follower's batches (offsets assigned by the leader) are checked for size, magic and CRC only: the leader
  validated their records when it appended them, and ``max.message.bytes`` is not applied (a topic whose limit was
  lowered must still replicate the larger batches it already holds). They must ascend (OffsetsOutOfOrder), fill the
  data exactly, and a control batch's marker is read now, so that a malformed one refuses the whole append.

A leader's request (``check_leader_request``: the batches of one write, Kafka's produce request) is checked batch by
batch with the same rules; the common batches (writable, no producer id, compressed or not) all at once by the compiled
helper (``validate.check_plain_batches``), every other one, and every one that fails, by ``check_leader_batch``.

Threads: any (pure); the Log calls them before it takes its lock.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from logfs.core.config import LogConfig
from logfs.core.errors import (
    InvalidLeaderEpoch,
    InvalidTimestamp,
    NoKeyOnCompactedTopic,
    OffsetsOutOfOrder,
    RecordBatchTooLarge,
    RecordTooLarge,
    StorageError,
)
from logfs.core.format.batch import BatchHeader, TimestampType, iter_batch_positions
from logfs.core.format.validate import RequestBatch, ValidBatch, check_plain_batches, validate_batch
from logfs.core.log.compactkeys import check_keys
from logfs.core.txn.producerentry import Marker, read_marker

# A leader's checked batch: the bytes to stamp, its validation, and whether the topic stamps LOG_APPEND_TIME.
CheckedBatch = tuple[bytearray | memoryview, ValidBatch, bool]


def check_leader_batch(
    batch: bytes | bytearray | memoryview, leader_epoch: int, config: LogConfig, now: int
) -> CheckedBatch:
    """The batch to stamp (``batch`` itself when writable, else a copy), its validation, and whether the topic
    stamps LOG_APPEND_TIME. A plain tuple: this runs once per produced batch."""
    if leader_epoch < 0:
        raise InvalidLeaderEpoch(leader_epoch)
    if isinstance(batch, memoryview) and (batch.itemsize != 1 or not batch.c_contiguous):
        batch = batch.tobytes()  # sizes and positions below are bytes of one contiguous run
    size = len(batch)
    if size > config.max_message_bytes:
        raise RecordTooLarge(size, config.max_message_bytes)
    if size > config.segment_bytes:
        raise RecordBatchTooLarge(size, config.segment_bytes)
    valid = validate_batch(batch, 0, client=True, size=size)
    check_keys((batch,), config)  # compacted topics only
    log_append = config.message_timestamp_type == TimestampType.LOG_APPEND_TIME
    timestamp = valid.max_timestamp
    if not log_append and timestamp >= 0:
        before, after = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
        if now - timestamp > before or timestamp - now > after:
            raise InvalidTimestamp(
                f"timestamp {timestamp} is outside [now - {before}, now + {after}] "
                "(message.timestamp.before.max.ms, message.timestamp.after.max.ms)"
            )
    if isinstance(batch, bytearray) or (isinstance(batch, memoryview) and not batch.readonly):
        return batch, valid, log_append
    return bytearray(batch), valid, log_append


def check_leader_request(
    batches: Sequence[bytes | bytearray | memoryview], leader_epoch: int, config: LogConfig, now: int
) -> tuple[list[RequestBatch], Exception | None]:
    """The batches of one request checked in order, as :func:`check_leader_batch` checks each: those before the first
    that fails, and its error (None when all passed)."""
    batches = list(batches)
    checked: list[RequestBatch] = []
    if batches and leader_epoch < 0:
        return checked, InvalidLeaderEpoch(leader_epoch)
    log_append = config.message_timestamp_type == TimestampType.LOG_APPEND_TIME
    before, after = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
    k = 0
    while k < len(batches):
        k = check_plain_batches(  # the common batches at once, when the compiled helper is built
            batches, k, checked, max_message_bytes=config.max_message_bytes, segment_bytes=config.segment_bytes,
            log_append=log_append, now=now, before=before, after=after,
        )  # fmt: skip
        if k == len(batches):
            break
        try:
            data, valid, _ = check_leader_batch(batches[k], leader_epoch, config, now)
        except Exception as exc:
            return _keyed(checked, exc, config)
        h = valid.header
        checked.append((data, h.size, h.last_offset_delta, h.records_count, valid.max_timestamp, h.producer_id, True))
        k += 1
    return _keyed(checked, None, config)


def _keyed(
    checked: list[RequestBatch], error: Exception | None, config: LogConfig
) -> tuple[list[RequestBatch], Exception | None]:
    """On a compacted topic, a keyless record in any batch of the request refuses all of it (nothing stored)."""
    if isinstance(error, NoKeyOnCompactedTopic):
        return [], error
    try:
        check_keys([c[0] for c in checked], config)
    except NoKeyOnCompactedTopic as exc:
        return [], exc
    return checked, error


@dataclass(frozen=True, slots=True)
class FollowerAppend:
    """A follower's checked batches: their headers and positions in the data, and what the append records."""

    headers: list[BatchHeader]
    positions: list[int]
    size: int
    records: int
    max_timestamp: int
    offset_of_max_timestamp: int
    producers: bool  # some batch carries a producer id: the producer state must see them
    markers: dict[int, Marker]  # a control batch's position → its record (read when some batch has a producer id)

    @property
    def first_offset(self) -> int:
        return self.headers[0].base_offset

    @property
    def last_offset(self) -> int:
        return self.headers[-1].last_offset


def check_follower_append(data: bytes | bytearray | memoryview, config: LogConfig) -> FollowerAppend | None:
    """Check batches whose offsets the leader assigned (one or more, back to back); None for no batch."""
    headers = []
    positions = []
    producers = False
    for position, size in iter_batch_positions(data):
        h = validate_batch(data, position, client=False, size=size, deep=False).header
        headers.append(h)
        positions.append(position)
        producers = producers or h.producer_id >= 0
    if not headers:
        return None
    consumed = sum(h.size for h in headers)
    if consumed != len(data):
        raise StorageError(f"follower append carries {len(data) - consumed} bytes after its last whole batch")
    for prev, cur in itertools.pairwise(headers):
        if cur.base_offset <= prev.last_offset:
            raise OffsetsOutOfOrder(
                f"batch at offset {cur.base_offset} follows one ending at {prev.last_offset}: offsets must ascend"
            )
    markers = {}
    if producers:
        markers = {p: read_marker(data, p) for h, p in zip(headers, positions, strict=True) if h.is_control}
    if consumed > config.segment_bytes:
        raise RecordBatchTooLarge(consumed, config.segment_bytes)
    max_h = max(headers, key=lambda h: h.max_timestamp)
    records = sum(h.records_count for h in headers)
    return FollowerAppend(
        headers, positions, consumed, records, max_h.max_timestamp, max_h.last_offset, producers, markers
    )  # fmt: skip
