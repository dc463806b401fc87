"""The local log's reads (Kafka's ``LocalLog.read``, ``convertToOffsetMetadataOrThrow``, ``addAbortedTransactions``):
plain functions over what a :class:`~logfs.core.log.local.LocalLog` publishes.

Why apart from the LocalLog. The LocalLog owns the segments and the LEO and changes them under the log's lock; a read
only looks at what it published (the immutable segment snapshot, ``LocalLog.snapshot``, and the LEO with its
position), from any thread, without the lock. These functions are that read side, called by the Log
(``core/log/log.py``) with the bound its isolation gives (docs/storage.md, "Rules worth knowing"): at the bound or
between it and the LEO an empty result, above the LEO OffsetOutOfRange, otherwise bytes from the start of the batch
holding the offset, at most ``max_bytes`` (at least one batch with ``min_one_message``) and never past the bound.
:func:`offset_metadata` finds where an offset lies. Both walk the segment snapshot unpinned, as Kafka's do
(``core/log/scan.py``).

Threads: any, no lock (the snapshot and the LEO are published values).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from logfs.core.errors import OffsetOutOfRange
from logfs.core.log.index import TimestampOffset
from logfs.core.offsets import FetchDataInfo, LogOffsetMetadata
from logfs.core.txn.index import AbortedTxn, collect_aborted
from logfs.core.txn.stableoffset import with_aborted_transactions

if TYPE_CHECKING:
    from logfs.core.log.local import LocalLog


def read(
    local: LocalLog,
    start_offset: int,
    max_bytes: int,
    max_offset_metadata: LogOffsetMetadata,
    min_one_message: bool,
    log_start_offset: int,
) -> FetchDataInfo:
    """Kafka's ``LocalLog.read``: bytes from the start of the batch holding ``start_offset``, at most
    ``max_bytes`` (at least one batch with ``min_one_message``), never past ``max_offset_metadata`` (the Log's
    isolation bound); empty at the bound or between it and the LEO, OffsetOutOfRange above the LEO or below the
    first segment (naming ``log_start_offset``, which the Log checked already)."""
    end = local.log_end_offset_metadata
    bound = max_offset_metadata
    view = local.snapshot
    if start_offset == bound.message_offset:
        return FetchDataInfo(bound, b"")
    if start_offset > end.message_offset:
        raise OffsetOutOfRange(start_offset, log_start_offset, end.message_offset)
    if start_offset > bound.message_offset:
        return FetchDataInfo(offset_metadata(local, start_offset, log_start_offset), b"")
    if view.floor_index(start_offset) < 0:
        raise OffsetOutOfRange(start_offset, log_start_offset, end.message_offset)
    # The segments from the floor, unpinned as Kafka's: the bytes are copied out before the read returns, and a
    # RangeScan would cost each read ~1.3 us of its ~12 (core/log/scan.py).
    for segment in view.from_floor(start_offset):
        if bound.message_offset_only or bound.segment_base_offset < segment.base_offset:
            return FetchDataInfo(offset_metadata(local, start_offset, log_start_offset), b"")
        max_position = bound.relative_position if bound.segment_base_offset == segment.base_offset else None
        fetched = segment.read(start_offset, max_bytes, max_position, min_one_message)
        if fetched is not None:
            return fetched
    return FetchDataInfo(end, b"")


def add_aborted_transactions(local: LocalLog, fetched: FetchDataInfo) -> FetchDataInfo:
    """``fetched`` with the aborted transactions of its range (a TXN_COMMITTED read's; docs/storage.md,
    "Idempotent producers and transactions")."""
    view = local.snapshot
    return with_aborted_transactions(view.bases, view.segments, fetched, local.log_end_offset_metadata.message_offset)


def offset_metadata(local: LocalLog, offset: int, log_start_offset: int) -> LogOffsetMetadata:
    """Where ``offset`` lies (segment and position of its batch); the LEO's when at the end. Kafka's
    ``LocalLog.convertToOffsetMetadataOrThrow``: OffsetOutOfRange below the first segment."""
    end = local.log_end_offset_metadata
    if offset >= end.message_offset:
        return end
    view = local.snapshot
    if view.floor_index(offset) < 0:
        raise OffsetOutOfRange(offset, log_start_offset, end.message_offset)
    for segment in view.from_floor(offset):  # unpinned, as read
        found = segment.translate_offset(offset)
        if found is not None:
            return LogOffsetMetadata(offset, segment.base_offset, found.position)
    return end


def collect_aborted_transactions(local: LocalLog, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
    """The aborted transactions overlapping ``[start_offset, upper_bound_offset)``, from the segment holding
    ``start_offset`` on."""
    return collect_aborted(local.snapshot.from_floor(start_offset), start_offset, upper_bound_offset)


def fetch_offset_by_timestamp(local: LocalLog, timestamp: int, log_start_offset: int) -> TimestampOffset | None:
    """The first record with timestamp ≥ ``timestamp`` at or after ``log_start_offset``."""
    for segment in local.snapshot.segments:
        if segment.largest_timestamp < timestamp:
            continue
        found = segment.find_offset_by_timestamp(timestamp, log_start_offset)
        if found is not None:
            return found
    return None
