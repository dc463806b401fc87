"""What the log cleaner keeps of one batch, and the bytes it writes for it (Kafka's ``LogCleaner`` record filter
over ``MemoryRecords.filterTo``; docs/compaction.md, "How a log is cleaned").

For each batch, first the batch rule (Kafka's, in LogCleaner.scala), in order:

1. keep at least an empty batch (RETAIN_EMPTY) when it is the last data batch of an active producer (or, for a
   producer with no data left, its last control batch of the producer's current epoch): duplicate detection after
   a restart needs its sequence numbers;
2. keep at least an empty batch when it ends right below the round's uncleanable bound, so the last offset before
   it stays known;
3. drop it whole (DELETE) when its records may all go: a data batch of an aborted transaction, or a transaction
   marker whose delete horizon has passed and whose transaction has no batch left (``transactions.py``);
4. otherwise filter its records and drop the batch when none is left (DELETE_EMPTY).

Then each record (Kafka's ``Cleaner.shouldRetainRecord``): a record past the offset map's latest offset is kept; a
record without a key is dropped (counted as invalid: a topic switched from delete to compact may hold them); a keyed
record is kept when it is the latest of its key (its offset is at least the map's) and it has a value or is a tombstone
whose batch has no delete horizon yet or one that has not passed. Control records are kept with their batch.

What is written (Kafka's ``MemoryRecords.filterTo``): the batch's own bytes when every record is kept and it needs no
delete horizon; a header of 61 bytes with no record for an emptied batch that is kept (its offsets, producer fields,
flags and max timestamp, no compression, base timestamp -1); else one rebuilt batch of the kept records
(``encode_batch``): same base offset, last offset delta, producer id, epoch, base sequence, partition leader epoch,
flags, codec and timestamp type; the max timestamp the original's for LogAppendTime, the kept records' largest for
CreateTime; record headers kept. A batch that keeps a tombstone, or a discardable marker, and has no delete horizon yet
gets one: attribute bit 6 and base timestamp = now + ``delete.retention.ms``; a horizon once set is kept, never moved.
Offsets never change.

Threads: one round's; not shared. Blocking only on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import crc32c as _crc32c
import numpy as np
import numpy.typing as npt

from logfs.core.format.batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    CRC_OFFSET,
    DELETE_HORIZON_MASK,
    HEADER,
    LOG_OVERHEAD,
    MAGIC,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    UINT32,
    BatchHeader,
    Record,
    TimestampType,
)
from logfs.core.format.control import parse_control_key
from logfs.core.format.decode import record_columns, records_from_columns
from logfs.core.format.encode import encode_batch
from logfs.core.log.cleaner.offsetmap import SHORT_KEY_BYTES, OffsetMap, key_id
from logfs.core.log.cleaner.scan import ChunkRecords, walk_batches, walkable
from logfs.core.log.cleaner.transactions import CleanedTransactionMetadata

ProducerLast = tuple[int, int]  # an active producer's (last data offset or -1, producer epoch)


@dataclass(slots=True)
class FilterCounts:
    """What filtering saw: records read and kept, keyless records dropped."""

    messages_read: int = 0
    messages_written: int = 0
    invalid_messages: int = 0


@dataclass(slots=True)
class BatchFilter:
    """The rules of one merge of segments in one round (see the module docstring)."""

    offset_map: OffsetMap
    transactions: CleanedTransactionMetadata
    producers: dict[int, ProducerLast]
    upper_bound_offset: int  # the round's first uncleanable offset
    now_ms: int
    delete_retention_ms: int
    counts: FilterCounts = field(default_factory=FilterCounts)
    _chunk: ChunkRecords | None = None  # the records of the chunk being filtered (prepare)
    _decided: dict[int, tuple[int, int, int, bool]] = field(default_factory=dict)  # position → prepared counts
    _keep: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))  # per prepared record

    def prepare(self, data: bytes | bytearray | memoryview, batches: list[tuple[int, BatchHeader]]) -> None:
        """Decide the record rule for every record of the uncompressed data batches of one chunk at once
        (``scan.py``: one walk, one key slice and one map lookup a record, then numpy), before
        :meth:`filter` applies the batch rules to each batch in order; the record rule depends on no batch rule.
        Batches not prepared (compressed, control) are filtered record by record."""
        walked = [(p, h) for p, h in batches if walkable(h)]
        self._decided = {}
        self._chunk = None
        if not walked or not isinstance(data, bytes):  # keys must slice to bytes (hashable)
            return
        recs = walk_batches(data, walked)
        latest = self.offset_map.latest_offset
        offset, key_length, value_length = recs.offset, recs.key_length, recs.value_length
        below = offset <= latest
        keyed = below & (key_length >= 0)
        rows = np.flatnonzero(keyed)
        latest_of_key = np.full(len(recs), -1, dtype=np.int64)
        get = self.offset_map.entries.get
        latest_of_key[rows] = [get(k, -1) for k in recs.key_ids(rows)]
        expired = [bool(h.attributes & DELETE_HORIZON_MASK) and self.now_ms >= h.base_timestamp for _, h in walked]
        counts = [h.records_count for _, h in walked]
        tombstone = value_length < 0
        keep = ~below | (keyed & (offset >= latest_of_key) & ~(tombstone & np.repeat(expired, counts)))
        firsts = [recs.first[p] for p, _ in walked]
        kept = np.add.reduceat(keep, firsts).tolist()
        invalid = np.add.reduceat(below & (key_length < 0), firsts).tolist()
        tombstones_kept = np.add.reduceat(keep & tombstone, firsts).tolist()
        self._keep = keep
        self._chunk = recs
        self._decided = {p: (f, k, i, t > 0) for (p, _), f, k, i, t in zip(walked, firsts, kept, invalid,
                                                                          tombstones_kept, strict=True)}  # fmt: skip

    def filter(
        self, buf: bytes | bytearray | memoryview, position: int, header: BatchHeader
    ) -> bytes | memoryview | None:
        """The bytes to write for the batch at ``position`` of ``buf`` (``header`` is its header), or None: a view
        of ``buf`` when the batch is kept as it is, new bytes when it changed."""
        control_type = None
        if header.is_control:
            if header.records_count > 0:
                cheader, cols = record_columns(buf, position)
                control = records_from_columns(cheader, cols)
                control_type = parse_control_key(control[0].key) if control else None
            can_discard = self.transactions.on_control_batch_read(header, control_type)
            has_horizon = bool(header.attributes & DELETE_HORIZON_MASK)
            discard_records = can_discard and has_horizon and header.base_timestamp <= self.now_ms
        else:
            can_discard = self.transactions.on_batch_read(header)
            discard_records = can_discard
        retain_empty = self._is_last_of_producer(header) or header.next_offset == self.upper_bound_offset
        if discard_records and not retain_empty:
            return None
        if discard_records:
            return empty_batch(header)
        marker_for_empty_txn = header.is_control and can_discard
        if header.is_control:
            return self._control(buf, position, header, marker_for_empty_txn)
        return self._data(buf, position, header, retain_empty)

    def _is_last_of_producer(self, header: BatchHeader) -> bool:
        if header.producer_id < 0:
            return False
        last = self.producers.get(header.producer_id)
        if last is None:
            return False
        last_data_offset, epoch = last
        if last_data_offset >= 0:
            return header.last_offset == last_data_offset
        return header.is_control and header.producer_epoch == epoch

    def _control(
        self, buf: bytes | bytearray | memoryview, position: int, header: BatchHeader, marker_for_empty_txn: bool
    ) -> bytes | memoryview:
        """A control batch that stays: its bytes, or with a delete horizon when its marker is discardable."""
        self.counts.messages_read += header.records_count
        self.counts.messages_written += header.records_count
        if not marker_for_empty_txn or header.attributes & DELETE_HORIZON_MASK or header.records_count == 0:
            return memoryview(buf)[position : position + header.size]
        hdr, cols = record_columns(buf, position)
        return self._rebuild(header, records_from_columns(hdr, cols), self.now_ms + self.delete_retention_ms)

    def _data(
        self, buf: bytes | bytearray | memoryview, position: int, header: BatchHeader, retain_empty: bool
    ) -> bytes | memoryview | None:
        decided = self._decided.get(position)
        if decided is not None and self._chunk is not None and self._chunk.data is buf:
            return self._prepared(position, header, retain_empty, *decided)
        hdr, cols = record_columns(buf, position)
        cols = cols.lists()
        data = cols.data if isinstance(cols.data, bytes) else bytes(cols.data)  # slices of bytes are hashable
        count = len(cols)
        self.counts.messages_read += count
        base = header.base_offset
        latest = self.offset_map.latest_offset
        has_horizon = bool(header.attributes & DELETE_HORIZON_MASK)
        tombstones_expired = has_horizon and self.now_ms >= header.base_timestamp
        entries = self.offset_map.entries
        kept: list[int] = []
        tombstone_kept = False
        invalid = 0
        for i, (od, kp, kl, vl) in enumerate(
            zip(cols.offset_delta, cols.key_position, cols.key_length, cols.value_length, strict=True)
        ):
            offset = base + od
            if offset > latest:
                kept.append(i)
                tombstone_kept = tombstone_kept or vl < 0
                continue
            if kl < 0:
                invalid += 1
                continue
            key = data[kp : kp + kl]
            latest_of_key = entries.get(key if kl <= SHORT_KEY_BYTES else key_id(key), -1)  # key_id, inlined
            if offset >= latest_of_key and (vl >= 0 or not tombstones_expired):
                kept.append(i)
                tombstone_kept = tombstone_kept or vl < 0
        self.counts.invalid_messages += invalid
        self.counts.messages_written += len(kept)
        needs_horizon = tombstone_kept and not has_horizon
        if len(kept) == count and not needs_horizon:
            return memoryview(buf)[position : position + header.size]
        if not kept:
            return empty_batch(header) if retain_empty else None
        records = records_from_columns(hdr, cols)
        horizon = self.now_ms + self.delete_retention_ms if needs_horizon else None
        if horizon is None and has_horizon:
            horizon = header.base_timestamp
        return self._rebuild(header, [records[i] for i in kept], horizon)

    def _prepared(
        self,
        position: int,
        header: BatchHeader,
        retain_empty: bool,
        row: int,
        kept: int,
        invalid: int,
        tombstone_kept: bool,
    ) -> bytes | memoryview | None:
        """:meth:`_data` for a batch :meth:`prepare` decided. A batch that keeps some records and needs no new delete
        horizon is written by slicing the kept records' bytes (:func:`retained_batch`): they are unchanged, their
        deltas relative to the batch's base offset and base timestamp, which stay."""
        recs = self._chunk
        assert recs is not None
        count = header.records_count
        self.counts.messages_read += count
        self.counts.invalid_messages += invalid
        self.counts.messages_written += kept
        has_horizon = bool(header.attributes & DELETE_HORIZON_MASK)
        needs_horizon = tombstone_kept and not has_horizon
        if kept == count and not needs_horizon:
            return memoryview(recs.data)[position : position + header.size]
        if not kept:
            return empty_batch(header) if retain_empty else None
        keep = self._keep[row : row + count]
        if needs_horizon:  # every record's timestamp delta changes with the base timestamp: encode anew
            hdr, cols = record_columns(recs.data, position)
            records = records_from_columns(hdr, cols)
            return self._rebuild(header, [records[i] for i in np.flatnonzero(keep).tolist()],
                                 self.now_ms + self.delete_retention_ms)  # fmt: skip
        starts, ends = recs.spans(position, header)
        data = recs.data
        body = b"".join([data[s:e] for s, e, k in zip(starts, ends, keep.tolist(), strict=True) if k])
        if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
            max_ts = header.max_timestamp
        else:
            max_ts = header.base_timestamp + int(recs.timestamp_delta[row : row + count][keep].max())
        return retained_batch(header, body, kept, max_ts)

    @staticmethod
    def _rebuild(header: BatchHeader, records: list[Record], delete_horizon: int | None) -> bytes:
        """One batch of ``records`` with ``header``'s fields (Kafka's ``buildRetainedRecordsInto``)."""
        log_append = header.timestamp_type == TimestampType.LOG_APPEND_TIME
        return encode_batch(
            records,
            base_offset=header.base_offset,
            compression=header.compression,
            timestamp_type=header.timestamp_type,
            max_timestamp=header.max_timestamp if log_append else None,
            partition_leader_epoch=header.partition_leader_epoch,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            is_transactional=header.is_transactional,
            is_control=header.is_control,
            base_timestamp=delete_horizon,
            last_offset_delta=header.last_offset_delta,
            delete_horizon=delete_horizon is not None,
        )


def retained_batch(header: BatchHeader, records: bytes, count: int, max_timestamp: int) -> bytes:
    """The uncompressed batch ``header`` with only ``records`` (the bytes of ``count`` of its records, as they lie
    in it): its base offset, last offset delta, base timestamp, producer fields and flags, the kept records' largest
    timestamp (``max_timestamp``), a new length and CRC."""
    attributes = header.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | DELETE_HORIZON_MASK)
    out = bytearray(RECORD_BATCH_OVERHEAD)
    HEADER.pack_into(
        out, 0, header.base_offset, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(records), header.partition_leader_epoch,
        MAGIC, 0, attributes, header.last_offset_delta, header.base_timestamp, max_timestamp, header.producer_id,
        header.producer_epoch, header.base_sequence, count,
    )  # fmt: skip
    out += records
    UINT32.pack_into(out, CRC_OFFSET, _crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def empty_batch(header: BatchHeader) -> bytes:
    """The 61-byte batch with no record Kafka keeps for an emptied batch (``DefaultRecordBatch.writeEmptyHeader``)."""
    attributes = (
        (TIMESTAMP_TYPE_MASK if header.attributes & TIMESTAMP_TYPE_MASK else 0)
        | (header.attributes & TRANSACTIONAL_MASK)
        | (header.attributes & CONTROL_MASK)
    )
    out = bytearray(RECORD_BATCH_OVERHEAD)
    HEADER.pack_into(
        out, 0, header.base_offset, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD, header.partition_leader_epoch, MAGIC, 0,
        attributes, header.last_offset_delta, NO_TIMESTAMP, header.max_timestamp, header.producer_id,
        header.producer_epoch, header.base_sequence, 0,
    )  # fmt: skip
    UINT32.pack_into(out, CRC_OFFSET, _crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)
