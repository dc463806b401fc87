"""The values that say where things are in a log: offset metadata, fetch results, append results, isolation.

Plain frozen values shared by the segment, the log, the high watermark and the mount; no behaviour beyond small
predicates. Kafka's ``LogOffsetMetadata``, ``LogOffsetPosition``, ``FetchDataInfo``, ``LogAppendInfo`` and
``FetchIsolation``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from logfs.core.txn.index import AbortedTxn

UNKNOWN_OFFSET = -1


@dataclass(frozen=True, slots=True)
class LogOffsetMetadata:
    """An offset, and where it lies when known: the segment's base offset and the byte position in it.

    A "message-only" metadata (segment unknown) is what a checkpointed HW is until a read materialises it.
    """

    message_offset: int
    segment_base_offset: int = UNKNOWN_OFFSET
    relative_position: int = -1

    @property
    def message_offset_only(self) -> bool:
        return self.segment_base_offset == UNKNOWN_OFFSET

    def on_older_segment(self, other: LogOffsetMetadata) -> bool:
        return self.segment_base_offset < other.segment_base_offset


class LogOffsetPosition(NamedTuple):
    """Kafka's translateOffset result: the batch holding an offset (its last offset, position, size), and its base
    offset, which the walk that found it read anyway (``LogFile.search_for_offset``)."""

    offset: int
    position: int
    size: int
    base_offset: int


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """The answer to a read: where it starts, the raw bytes, and whether the first batch was cut short.

    ``aborted_transactions`` is set by TXN_COMMITTED reads only: the aborted transactions overlapping the fetched
    range, which a read_committed consumer needs to drop their records (the rule of Kafka's consumer,
    ``CompletedFetch``).
    """

    fetch_offset_metadata: LogOffsetMetadata
    records: bytes
    first_entry_incomplete: bool = False
    aborted_transactions: tuple[AbortedTxn, ...] | None = None


class Isolation(Enum):
    """Kafka's FetchIsolation: how far a read may go: the LEO (replicas), the HW (read_uncommitted) or the last
    stable offset (read_committed, which also returns the aborted transactions)."""

    LOG_END = "log_end"
    HIGH_WATERMARK = "high_watermark"
    TXN_COMMITTED = "txn_committed"


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """What an append did: the offsets it took, its max timestamp and where that is, its bytes and records.

    ``duplicate``: the batch was a producer's retry of one already stored; nothing was written, the offsets and
    timestamp are the original's, and ``records_count`` and ``size_bytes`` are 0.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    records_count: int
    size_bytes: int
    rolled: bool = False
    duplicate: bool = False
