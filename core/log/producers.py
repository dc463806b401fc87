"""A log's producer state and the last stable offset published from it (Kafka's UnifiedLog keeps both beside its
``producerStateManager``); the rules over them are ``core/txn/producerstate.py``'s, this class keeps them in step
with the log's segments.

A batch with a producer id is checked against its producer's state before anything is written (fenced epoch,
sequence, duplicate: a retry answers with the original's offsets and stores nothing); a batch without one costs the
Log a single comparison and never reaches this class. An update is applied once its bytes are stored; a
transaction it completes by an ABORT marker goes into the active segment's ``.txnindex`` with the LSO of that
moment. The last stable offset (LSO) is the first offset of the earliest transaction that is open or whose marker
the HW has not passed, never above the HW; it is recomputed on every HW, log start or transaction move and
published as one frozen value (``core/txn/stableoffset.py``), so any thread reads it. A producer snapshot is written
at every roll (fsynced with the rolled segment by ``Log.flush``) and at close; a truncation reloads the newest
snapshot below its target and replays the log from there.

Threads: :attr:`stable` is read by any thread; everything else runs under the owning Log's lock.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from logfs.core.format.control import ControlType
from logfs.core.format.encode import encode_end_txn_marker
from logfs.core.log.appendcheck import FollowerAppend
from logfs.core.log.recovery import index_completed_txn, txn_index_writer
from logfs.core.log.segment import LogSegment
from logfs.core.txn.producerentry import ProducerUpdate
from logfs.core.txn.producerreplay import apply_replicated, replay
from logfs.core.txn.producerstate import ProducerStateManager
from logfs.core.txn.stableoffset import StableOffsets, stable_offsets

_log = logging.getLogger(__name__)


class LogProducers:
    """The producer state of one log (:attr:`state`) and its published stable offsets (:attr:`stable`)."""

    __slots__ = ("_directory", "stable", "state")

    def __init__(self, directory: Path, state: ProducerStateManager, high_watermark: int, log_start_offset: int):
        self._directory = directory
        self.state = state
        self.stable: StableOffsets = stable_offsets(state, high_watermark, log_start_offset)

    def update_lso(self, high_watermark: int, log_start_offset: int) -> None:
        """Recompute and publish the first unstable offset and the LSO."""
        self.stable = stable_offsets(self.state, high_watermark, log_start_offset)

    def prepare_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        offset: int,
        commit: bool,
        coordinator_epoch: int,
        leader_epoch: int,
        now: int,
    ) -> tuple[ProducerUpdate, bytes]:
        """A COMMIT or ABORT marker batch at ``offset`` and the update it makes once stored; ProducerFenced or
        CoordinatorFenced (nothing to write) for an older epoch."""
        update = self.state.prepare_marker(
            producer_id, producer_epoch, offset, commit=commit, coordinator_epoch=coordinator_epoch, timestamp=now
        )
        data = encode_end_txn_marker(
            ControlType.COMMIT if commit else ControlType.ABORT, producer_id=producer_id,
            producer_epoch=producer_epoch, coordinator_epoch=coordinator_epoch, timestamp=now,
            base_offset=offset, partition_leader_epoch=leader_epoch,
        )  # fmt: skip
        return update, data

    def apply(self, update: ProducerUpdate, active_segment: LogSegment) -> bool:
        """Install a checked update whose bytes are stored in ``active_segment``; an abort it completes goes into
        that segment's .txnindex. True when the LSO may have moved (the Log then calls :meth:`update_lso`)."""
        state = self.state
        state.apply(update)
        completed = update.completed
        if completed is not None:
            index_completed_txn(active_segment, completed, state.last_stable_offset_for(completed))
            state.complete_txn(completed)
        return completed is not None or update.started_txn >= 0

    def apply_replicated(
        self, checked: FollowerAppend, data: bytes | bytearray | memoryview, active_segment: LogSegment
    ) -> None:
        """A follower's stored batches, one at a time as the leader appended them, so the .txnindex entries (their
        LSOs included) come out identical to the leader's. The Log calls :meth:`update_lso` after."""
        state = self.state
        on_completed = txn_index_writer(active_segment, state)
        for h, position in zip(checked.headers, checked.positions, strict=True):
            apply_replicated(state, h, data, position, on_completed, checked.markers.get(position))

    def rebuild(self, end_offset: int, log_start_offset: int, segments: Sequence[LogSegment]) -> None:
        """The producer state at ``end_offset`` after a truncation: its snapshots above go, the newest below is loaded
        and the log replayed from there (from the log start offset without one), as Kafka's ``rebuildProducerState``.
        The Log calls :meth:`update_lso` after."""
        state = self.state
        state.delete_snapshots_above(end_offset)
        if not state.producers:  # no producer above the target either: nothing to replay (a follower's usual case)
            state.clear(end_offset)
            return
        loaded = state.load_snapshot(end_offset)
        start = log_start_offset if loaded is None else max(loaded, log_start_offset)
        replay(state, segments, start, end_offset)

    def start_at(self, offset: int) -> None:
        """Every segment went (``truncate_fully_and_start_at``): no snapshot and no producer remain."""
        self.state.delete_snapshots_above(-1)
        self.state.clear(offset)

    def snapshot_at(self, offset: int, *, sync: bool) -> None:
        """A producer snapshot at ``offset`` (a roll's new base, or the LEO at close). A failure only costs the next
        load a longer replay, so it is logged, never raised (the append that rolled must not fail for it)."""
        self.state.update_map_end_offset(offset)
        try:
            self.state.take_snapshot(sync=sync)
        except OSError as exc:
            _log.warning("%s: producer snapshot at %d not written: %s", self._directory, offset, exc)
