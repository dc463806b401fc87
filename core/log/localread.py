"""The local log's lookups (Kafka's ``convertToOffsetMetadataOrThrow``, ``addAbortedTransactions``, the timestamp
lookup): plain functions over what a :class:`~logfs.core.log.local.LocalLog` publishes. The reads of stored bytes
themselves all go through the one range read (``core/log/rangeread.py``).

Why apart from the LocalLog. The LocalLog owns the segments and the LEO and changes them under the log's lock; a read
only looks at what it published (the immutable segment snapshot, ``LocalLog.snapshot``, and the LEO with its
position), from any thread, without the lock. These functions are that read side, called by the Log
(``core/log/log.py``): :func:`offset_metadata` finds where an offset lies (walking the segment snapshot unpinned, as
Kafka's does: ``core/log/scan.py``), :func:`add_aborted_transactions` completes a read_committed answer,
:func:`read_bounds` gives the read-side check (``core/log/batchcheck.py``) what a segment's batches may hold.

Threads: any, no lock (the snapshot and the LEO are published values).
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from logfs.core.errors import OffsetOutOfRange
from logfs.core.format.varint import INT32_MAX
from logfs.core.log.batchcheck import NO_OFFSET_BOUND, ReadBounds, pack_epochs
from logfs.core.log.index import TimestampOffset
from logfs.core.offsets import FetchDataInfo, LogOffsetMetadata
from logfs.core.txn.index import AbortedTxn, collect_aborted
from logfs.core.txn.stableoffset import with_aborted_transactions

if TYPE_CHECKING:
    from logfs.core.log.epoch import LeaderEpochFileCache
    from logfs.core.log.local import LocalLog
    from logfs.core.log.logfile import LogFile


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


def read_bounds(
    local: LocalLog, epoch_cache: LeaderEpochFileCache, segment_base: int, log_file: LogFile, position: int
) -> ReadBounds:
    """The bounds of the batches of the segment at ``segment_base`` from byte ``position`` on (``Log.read_bounds``):
    base offsets from the segment's base (or above the offset index's entry before the one at or below
    ``position``), last offsets below the next segment's base (the log end offset for the last segment, and never
    past what a relative offset can hold), the first batch's last offset at most the index entry at ``position``
    when there is one, and the leader-epoch cache's entries."""
    snapshot = local.snapshot
    bases = snapshot.bases
    i = bisect.bisect_right(bases, segment_base)
    upper = bases[i] - 1 if i < len(bases) else local.log_end_offset - 1
    max_last = min(upper, segment_base + INT32_MAX)
    min_base, first_max_last = segment_base, NO_OFFSET_BOUND
    if position > 0 and i > 0 and snapshot.segments[i - 1].log_file is log_file:
        below, at = snapshot.segments[i - 1].offset_index.offsets_around(position)
        if below is not None:
            min_base = max(min_base, below + 1)
        if at is not None:
            first_max_last = at
    return ReadBounds(min_base, first_max_last, max_last, pack_epochs(epoch_cache.epoch_entries()))
