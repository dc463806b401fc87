"""Replaying stored batches into the producer state: recovery's rebuild after a snapshot, truncation's, and a
follower's or a recovered segment's batches applied without the leader's checks (Kafka's REPLICATION origin: the
leader already decided).

Threads: the log's writer thread (under the log's lock), or the loader before the log is shared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol

from logfs.core.format.batch import BatchHeader, iter_batch_positions, read_header
from logfs.core.offsets import FetchDataInfo
from logfs.core.txn.producerentry import CompletedTxn, Marker, read_marker
from logfs.core.txn.producerstate import ProducerStateManager

REPLAY_READ_BYTES = 8 * 1024 * 1024  # as segment recovery reads: bounded memory, negligible per-read cost


class SegmentReader(Protocol):
    """What replay needs of a segment (``LogSegment``)."""

    @property
    def base_offset(self) -> int: ...

    def read(
        self, start_offset: int, max_size: int, max_position: int | None = None, min_one_message: bool = False
    ) -> FetchDataInfo | None: ...


def apply_replicated(
    manager: ProducerStateManager,
    h: BatchHeader,
    data: bytes | bytearray | memoryview,
    position: int,
    on_completed: Callable[[CompletedTxn], None] | None = None,
    marker: Marker | None = None,
) -> None:
    """Apply one stored batch (no checks); a transaction it completes goes to ``on_completed`` (which writes the
    ``.txnindex`` entry of an abort) and then leaves the open set. Batches without a producer id change nothing.
    ``marker``: a control batch's record, when the caller read it already."""
    if h.producer_id < 0:
        return
    if h.is_control and marker is None:
        marker = read_marker(data, position)
    update = manager.prepare_replicated_batch(h, h.max_timestamp, marker)
    manager.apply(update)
    if update.completed is not None:
        if on_completed is not None:
            on_completed(update.completed)
        manager.complete_txn(update.completed)


def replay(
    manager: ProducerStateManager, segments: Iterable[SegmentReader], start_offset: int, end_offset: int
) -> None:
    """Apply the stored batches in ``[start_offset, end_offset)`` of ``segments`` (ascending); the map end offset
    ends at ``end_offset``. The loader's rebuild after a snapshot, and truncation's. Reads 8 MiB at a time."""
    for segment in segments:
        offset = max(start_offset, segment.base_offset)
        while offset < end_offset:
            fetched = segment.read(offset, REPLAY_READ_BYTES, min_one_message=True)
            if fetched is None or not fetched.records:
                break
            data = fetched.records
            last = offset - 1
            for position, _size in iter_batch_positions(data):
                h = read_header(data, position)
                if h.base_offset >= end_offset:
                    break
                if h.last_offset >= offset:
                    apply_replicated(manager, h, data, position)
                last = h.last_offset
            if last < offset:
                break
            offset = last + 1
