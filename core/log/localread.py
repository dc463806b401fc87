"""The local log's lookups (Kafka's ``convertToOffsetMetadataOrThrow``, ``addAbortedTransactions``, the timestamp
lookup): plain functions over what a :class:`~logfs.core.log.local.LocalLog` publishes. The reads of stored bytes
themselves all go through the one range read (``core/log/rangeread.py``).

Why apart from the LocalLog. The LocalLog owns the segments and the LEO and changes them under the log's lock; a read
only looks at what it published (the immutable segment snapshot, ``LocalLog.snapshot``, and the LEO with its
position), from any thread, without the lock. These functions are that read side, called by the Log
(``core/log/log.py``): :func:`offset_metadata` finds where an offset lies (walking the segment snapshot unpinned, as
Kafka's does: ``core/log/scan.py``), :func:`add_aborted_transactions` completes a read_committed answer.

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
