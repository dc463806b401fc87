"""The write path of one partition's log: how a checked batch becomes part of it, in the order its effects must land.

Why apart from the Log. An append touches four owners: the local log (the bytes, the LEO, rolls:
``core/log/local.py``), the producer state and the last stable offset (``core/log/producers.py``), the leader-epoch
cache (``core/log/epoch.py``), and the segment roll rules. The order matters for what a reader and a crash may see:
the producer rules decide before a byte is written (a duplicate is answered, not stored), the bytes and the LEO land
before the producer state is applied (``LocalLog.append``), the epoch is recorded after its batch is stored (so
recovery assigns an epoch the cache missed, never the reverse). :class:`Appender` is the one place that orders them;
it owns no state. The :class:`~logfs.core.log.log.Log` checks a batch (``core/log/appendcheck.py``) and takes its
lock, then calls it: the Log keeps the offsets it owns (the log start offset, the high watermark) and its public API.

Leader appends stamp the batch in place: offsets from the LEO, the leader epoch, maxTimestamp (or the append time
for LOG_APPEND_TIME). A request of many batches goes in runs (``core/log/appendruns.py``), each lone batch through
:meth:`Appender.one`. Follower appends keep the leader's offsets and epochs. Markers end a producer's transaction.

Threads: the Log's writer, under the Log's lock, always.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from logfs.core.errors import UnexpectedAppendOffset
from logfs.core.format.batch import TimestampType, assign_offset_and_epoch, set_max_timestamp
from logfs.core.format.validate import RequestBatch
from logfs.core.log.appendcheck import CheckedBatch, FollowerAppend
from logfs.core.log.appendruns import append_request
from logfs.core.log.epoch import LeaderEpochFileCache
from logfs.core.log.local import LocalLog
from logfs.core.log.producers import LogProducers
from logfs.core.log.segment import LogSegment
from logfs.core.offsets import AppendInfo
from logfs.core.txn.producerentry import BatchMetadata


class Appender:
    """The write path of one Log (see the module docstring). Made by the Log; called under its lock."""

    __slots__ = ("_epochs", "_local", "_producers", "_update_lso")

    def __init__(
        self,
        local: LocalLog,
        epoch_cache: LeaderEpochFileCache,
        producers: LogProducers,
        update_lso: Callable[[], None],
    ) -> None:
        self._local = local
        self._epochs = epoch_cache
        self._producers = producers
        self._update_lso = update_lso  # the Log's: the LSO depends on the HW, which the Log owns

    def one(self, checked: CheckedBatch, leader_epoch: int, now: int) -> AppendInfo:
        """Append one checked producer batch at the LEO: the producer rules, the stamps, the roll, the write."""
        local = self._local
        data, valid, log_append = checked
        header = valid.header
        size = header.size
        max_ts = now if log_append else valid.max_timestamp
        first = local.log_end_offset
        update = None
        if header.producer_id >= 0:  # the one check a non-idempotent batch pays
            found = self._producers.state.prepare_client_batch(header, first, max_ts)
            if isinstance(found, BatchMetadata):
                return AppendInfo(
                    found.first_offset, found.last_offset, found.timestamp, found.last_offset,
                    found.timestamp if log_append else -1, 0, 0, duplicate=True,
                )  # fmt: skip
            update = found
        ts_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
        set_max_timestamp(data, 0, size, ts_type, max_ts)
        assign_offset_and_epoch(data, 0, first, leader_epoch)
        last = first + header.last_offset_delta
        rolled = self.maybe_roll(size, max_ts, last, first, now)
        local.append(last, max_ts, last, data, header.records_count)  # the LEO first: see LocalLog.append
        if update is not None and self._producers.apply(update, local.active_segment):
            self._update_lso()
        self._epochs.assign(leader_epoch, first)
        return AppendInfo(first, last, max_ts, last, now if log_append else -1, header.records_count, size, rolled)

    def request(
        self, checked: Sequence[RequestBatch], leader_epoch: int, now: int, log_append: bool
    ) -> tuple[list[AppendInfo], Exception | None]:
        """Append the checked batches of one request in runs (``core/log/appendruns.py``), a lone batch by
        :meth:`one`: the appends done, and the error that stopped them."""
        return append_request(
            checked, self._local, self._epochs, self.one, self._producers, self._update_lso, leader_epoch, now,
            log_append,
        )  # fmt: skip

    def marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, leader_epoch: int, now: int
    ) -> AppendInfo:
        """Write a COMMIT or ABORT marker at the LEO (the producer state's fencing rules first: nothing is written
        when they refuse)."""
        local = self._local
        offset = local.log_end_offset
        update, data = self._producers.prepare_marker(
            producer_id, producer_epoch, offset, commit, coordinator_epoch, leader_epoch, now
        )
        rolled = self.maybe_roll(len(data), now, offset, offset, now)
        local.append(offset, now, offset, data, 1)
        if self._producers.apply(update, local.active_segment):
            self._update_lso()
        self._epochs.assign(leader_epoch, offset)
        return AppendInfo(offset, offset, now, offset, -1, 1, len(data), rolled)

    def follower(
        self, checked: FollowerAppend, data: bytes | bytearray | memoryview, now: int, roll: bool
    ) -> AppendInfo:
        """Append batches whose offsets the leader assigned: at or above the LEO (UnexpectedAppendOffset), their
        producer state replayed, their leader epochs recorded. ``roll=False``: only a batch that cannot fit rolls."""
        local = self._local
        first, last, max_ts = checked.first_offset, checked.last_offset, checked.max_timestamp
        if first < local.log_end_offset:
            raise UnexpectedAppendOffset(first, last, local.log_end_offset)
        rolled = self.maybe_roll(checked.size, max_ts, last, first, now, by_time=roll)
        local.append(last, max_ts, checked.offset_of_max_timestamp, data, checked.records)
        if checked.producers:
            self._producers.apply_replicated(checked, data, local.active_segment)
            self._update_lso()
        for h in checked.headers:
            if h.partition_leader_epoch >= 0:
                self._epochs.assign(h.partition_leader_epoch, h.base_offset)
        return AppendInfo(
            first, last, max_ts, checked.offset_of_max_timestamp, -1, checked.records, checked.size, rolled
        )  # fmt: skip

    def maybe_roll(
        self, size: int, max_ts: int, last_offset: int, first_offset: int, now: int, *, by_time: bool = True
    ) -> bool:
        """Roll first when a roll rule says the batch does not belong in the active segment; True if it rolled."""
        if self._local.should_roll(size, max_ts, last_offset, now, by_time=by_time):
            self.roll(max(first_offset, self._local.log_end_offset), now)
            return True
        return False

    def roll(self, expected_next_offset: int | None, now_ms: int | None) -> LogSegment:
        """Start a new active segment (``LocalLog.roll``) and snapshot the producer state at its base."""
        old_base = self._local.active_segment.base_offset
        segment = self._local.roll(expected_next_offset, now_ms)
        if segment.base_offset != old_base:
            # Kafka's roll snapshot: recovering the new segment can start from it. Not fsynced here: flush_rolled
            # does it with the rolled segment (a snapshot lost to a crash is only a longer replay).
            self._producers.snapshot_at(segment.base_offset, sync=False)
        return segment
