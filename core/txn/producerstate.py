"""Producer state: the idempotence and transaction rules of one partition (Kafka's ProducerStateManager,
ProducerAppendInfo and ProducerStateEntry).

What is kept, per producer id (:class:`ProducerStateEntry`): its epoch, the metadata of its last five batches (first
and last sequence, first and last offset, timestamp), its coordinator epoch, its last timestamp and the first offset
of its open transaction. Per partition: the open transactions by first offset, the completed ones whose marker the
high watermark has not passed yet, and the offset up to which the log has been applied (``map_end_offset``).

Rules for a producer's batch appended as leader (:meth:`ProducerStateManager.prepare_client_batch`), in Kafka's order:

1. an epoch older than the producer's is fenced (ProducerFenced);
2. same epoch, and the batch's (first, last) sequence equals one of the five retained batches: a **duplicate** (a
   retried send); nothing is stored and the append answers with the original's offsets;
3. a new epoch must start at sequence 0 — unless the producer's epoch is unknown (its state was lost to retention or
   never seen), when any sequence is taken, as Kafka does since KIP-360;
4. the same epoch must continue at ``last sequence + 1`` (int32 wraps to 0), else OutOfOrderSequence;
5. a plain batch while the producer's transaction is open is InvalidTxnState; a transactional batch with none open
   opens one at its first offset.

A COMMIT or ABORT marker (:meth:`ProducerStateManager.prepare_marker`) is fenced by an older producer epoch or an
older coordinator epoch and completes the open transaction (a marker with none open completes nothing). The log then
asks :meth:`ProducerStateManager.last_stable_offset_for` for the ``.txnindex`` entry of an abort, and
:meth:`ProducerStateManager.complete_txn` moves the transaction to the completed set until the HW passes its marker.

Replication and recovery (``prepare_replicated_batch``) apply the same updates without a check, as Kafka's
REPLICATION origin does: the leader already decided.

Every ``prepare_*`` computes an update without changing anything, so a refused batch or a failed write leaves the
state as it was; :meth:`ProducerStateManager.apply` installs it after the bytes are in the segment.

The values (entries, updates, markers) are ``core/txn/producerentry.py``'s. Snapshots
(``core/txn/producersnapshot.py``) are taken at every roll and at a clean close; loading keeps the newest one at or
below the LEO that parses and replays the log from there (``replay`` in ``core/txn/producerreplay.py``).

Threads: the log's writer thread (under the log's lock) calls everything here; nothing is read from other threads
(the log publishes the LSO it derives as a plain int).
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path

from logfs.core.durable import replace_file
from logfs.core.errors import (
    CoordinatorFenced,
    CorruptSnapshot,
    InvalidTxnState,
    OutOfOrderSequence,
    ProducerFenced,
)
from logfs.core.format.batch import NO_PRODUCER_EPOCH, BatchHeader
from logfs.core.format.control import ControlType
from logfs.core.txn.producerentry import (
    NO_OFFSET,
    BatchMetadata,
    CompletedTxn,
    Marker,
    ProducerStateEntry,
    ProducerUpdate,
    in_sequence,
)
from logfs.core.txn.producersnapshot import (
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    snapshot_offset,
    snapshot_path,
)

_log = logging.getLogger(__name__)

PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms default (1 day)


class ProducerStateManager:
    """The producer state of one partition and its snapshot files. See the module docstring."""

    def __init__(self, directory: Path, map_end_offset: int = 0) -> None:
        """Empty state at ``map_end_offset``; the snapshot files in ``directory`` are listed, not read."""
        self._dir = directory
        self._producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, int] = {}  # first offset -> producer id
        self._unreplicated: dict[int, CompletedTxn] = {}  # first offset -> completed, marker not below the HW
        self.map_end_offset = map_end_offset
        self._snapshots: dict[int, Path] = {}
        self._unsynced: set[int] = set()
        if directory.is_dir():
            with os.scandir(directory) as entries:
                for entry in entries:
                    offset = snapshot_offset(entry.name)
                    if offset is not None:
                        self._snapshots[offset] = Path(entry.path)

    def __repr__(self) -> str:
        return (
            f"ProducerStateManager({len(self._producers)} producers, {len(self._ongoing)} open, "
            f"map end {self.map_end_offset})"
        )

    # --- state --------------------------------------------------------------------------------------------------

    @property
    def producers(self) -> dict[int, ProducerStateEntry]:
        """The entries by producer id (a copy)."""
        return dict(self._producers)

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def open_transactions(self) -> list[tuple[int, int]]:
        """``(producer id, first offset)`` of every open transaction, by first offset."""
        return [(pid, first) for first, pid in sorted(self._ongoing.items())]

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest transaction that is open or whose marker the HW has not passed."""
        if not self._ongoing and not self._unreplicated:
            return None
        return min(*self._ongoing, *self._unreplicated, NO_OFFSET + 2**63)

    def clear(self, map_end_offset: int = 0) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self.map_end_offset = map_end_offset

    # --- updates (prepare, then apply) ---------------------------------------------------------------------------

    def prepare_client_batch(
        self, h: BatchHeader, first_offset: int, timestamp: int, pending: dict[int, ProducerStateEntry] | None = None
    ) -> ProducerUpdate | BatchMetadata:
        """Check a producer's batch as the leader would append it at ``first_offset``: its update, or the retained
        batch it duplicates. Raises ProducerFenced, OutOfOrderSequence or InvalidTxnState. ``pending``: entries of
        updates checked but not applied yet (earlier batches of the same request, ``core/log/appendruns.py``), which
        stand for the state's."""
        pid, epoch, first_seq = h.producer_id, h.producer_epoch, h.base_sequence
        current = self._producers.get(pid) if pending is None or pid not in pending else pending[pid]
        if current is None:
            current = ProducerStateEntry(pid)
        elif epoch < current.producer_epoch:
            raise ProducerFenced(
                f"producer {pid} epoch {epoch} is older than its current epoch {current.producer_epoch}"
            )
        else:
            duplicate = current.find_duplicate(epoch, first_seq, h.last_sequence)
            if duplicate is not None:
                return duplicate
        if current.producer_epoch != NO_PRODUCER_EPOCH:
            if epoch != current.producer_epoch:
                if first_seq != 0:
                    raise OutOfOrderSequence(
                        f"producer {pid}: new epoch {epoch} starts at sequence {first_seq}, expected 0"
                    )
            elif not in_sequence(current.last_seq, first_seq):
                raise OutOfOrderSequence(
                    f"producer {pid} epoch {epoch}: sequence {first_seq} does not follow {current.last_seq}"
                )
        if current.current_txn_first_offset != NO_OFFSET and not h.is_transactional:
            raise InvalidTxnState(
                f"producer {pid} has a transaction open since offset {current.current_txn_first_offset}: "
                "a non-transactional batch is not allowed"
            )
        return self._data_update(current, h, first_offset, timestamp)

    def prepare_replicated_batch(self, h: BatchHeader, timestamp: int, marker: Marker | None = None) -> ProducerUpdate:
        """The update of a batch the leader already appended (follower, recovery, load): no check.

        ``marker`` is what a control batch says (see :func:`read_marker`)."""
        current = self._producers.get(h.producer_id) or ProducerStateEntry(h.producer_id)
        if h.is_control:
            if marker is None or marker.control_type not in (ControlType.COMMIT, ControlType.ABORT):
                return ProducerUpdate(current, NO_OFFSET, None, h.last_offset + 1)  # unknown: ignored, as Kafka does
            aborted = marker.control_type == ControlType.ABORT
            return self._marker_update(
                current, h.producer_epoch, h.base_offset, aborted, marker.coordinator_epoch, timestamp
            )
        return self._data_update(current, h, h.base_offset, timestamp)

    def prepare_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        offset: int,
        *,
        commit: bool,
        coordinator_epoch: int,
        timestamp: int,
    ) -> ProducerUpdate:
        """Check a COMMIT or ABORT marker the coordinator writes at ``offset``; raises ProducerFenced or
        CoordinatorFenced."""
        current = self._producers.get(producer_id) or ProducerStateEntry(producer_id)
        if producer_epoch < current.producer_epoch:
            raise ProducerFenced(
                f"marker for producer {producer_id} has epoch {producer_epoch}, older than {current.producer_epoch}"
            )
        if coordinator_epoch < current.coordinator_epoch:
            raise CoordinatorFenced(
                f"marker for producer {producer_id} has coordinator epoch {coordinator_epoch}, older than "
                f"{current.coordinator_epoch}"
            )
        return self._marker_update(current, producer_epoch, offset, not commit, coordinator_epoch, timestamp)

    def _data_update(
        self, current: ProducerStateEntry, h: BatchHeader, first_offset: int, timestamp: int
    ) -> ProducerUpdate:
        last_offset = first_offset + h.last_offset_delta
        batch = BatchMetadata(h.last_sequence, last_offset, h.last_offset_delta, timestamp)
        entry = current.with_batch(h.producer_epoch, batch)
        started = NO_OFFSET
        if h.is_transactional and entry.current_txn_first_offset == NO_OFFSET:
            entry = replace(entry, current_txn_first_offset=first_offset)
            started = first_offset
        return ProducerUpdate(entry, started, None, last_offset + 1)

    @staticmethod
    def _marker_update(
        current: ProducerStateEntry,
        producer_epoch: int,
        offset: int,
        aborted: bool,
        coordinator_epoch: int,
        timestamp: int,
    ) -> ProducerUpdate:
        completed = None
        if current.current_txn_first_offset != NO_OFFSET:
            # A marker without data opened nothing: it moves neither the LSO nor the .txnindex (Kafka's rule).
            completed = CompletedTxn(current.producer_id, current.current_txn_first_offset, offset, aborted)
        entry = replace(
            current.with_epoch(producer_epoch),
            current_txn_first_offset=NO_OFFSET,
            coordinator_epoch=coordinator_epoch,
            last_timestamp=timestamp,
        )
        return ProducerUpdate(entry, NO_OFFSET, completed, offset + 1)

    def apply(self, update: ProducerUpdate) -> None:
        """Install an update whose batch is now in the log (``ProducerStateManager.update``)."""
        entry = update.entry
        self._producers[entry.producer_id] = entry
        if update.started_txn != NO_OFFSET:
            self._ongoing[update.started_txn] = entry.producer_id
        if update.next_offset > self.map_end_offset:
            self.map_end_offset = update.next_offset

    def last_stable_offset_for(self, completed: CompletedTxn) -> int:
        """The LSO an abort's ``.txnindex`` entry records: the first offset of the earliest open transaction of
        *another* producer, else the marker's offset + 1 (``lastStableOffset(CompletedTxn)``)."""
        for first, pid in sorted(self._ongoing.items()):
            if pid != completed.producer_id:
                return first
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """The transaction is no longer open; it stays unstable until the HW passes its marker."""
        pid = self._ongoing.pop(completed.first_offset, None)
        if pid is None:
            _log.warning("completing transaction %s, which is not open", completed)
        self._unreplicated[completed.first_offset] = completed

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget the completed transactions whose marker lies below the HW."""
        if self._unreplicated:
            self._unreplicated = {k: t for k, t in self._unreplicated.items() if t.last_offset >= high_watermark}

    def remove_expired_producers(self, now_ms: int, expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> int:
        """Forget producers without an open transaction whose last timestamp is ``expiration_ms`` old (Kafka's
        ``removeExpiredProducers``, run every ``producer.id.expiration.check.interval.ms``); how many went."""
        expired = [
            pid
            for pid, e in self._producers.items()
            if e.current_txn_first_offset == NO_OFFSET and now_ms - e.last_timestamp >= expiration_ms
        ]
        for pid in expired:
            del self._producers[pid]
        return len(expired)

    def update_map_end_offset(self, offset: int) -> None:
        self.map_end_offset = offset

    # --- truncation -----------------------------------------------------------------------------------------------

    def truncate_head(self, log_start_offset: int) -> None:
        """The log start offset rose: transactions wholly below it are no longer unstable (Kafka's
        ``onLogStartOffsetIncremented``); producers are kept (their state may still dedupe retries)."""
        self._unreplicated = {k: t for k, t in self._unreplicated.items() if t.last_offset >= log_start_offset}
        if self.map_end_offset < log_start_offset:
            self.map_end_offset = log_start_offset

    # --- snapshots ------------------------------------------------------------------------------------------------

    def snapshot_offsets(self) -> list[int]:
        return sorted(self._snapshots)

    def take_snapshot(self, *, sync: bool = False) -> Path:
        """Write the state at ``map_end_offset`` into ``<offset>.snapshot`` (one write, then a rename). Without
        ``sync`` the fsync waits for :meth:`take_unsynced_snapshots` (a roll's asynchronous flush)."""
        offset = self.map_end_offset
        path = snapshot_path(self._dir, offset)
        entries = [
            SnapshotEntry(
                e.producer_id, e.producer_epoch, e.last_seq, e.last_data_offset, e.last_offset_delta,
                e.last_timestamp, e.coordinator_epoch, e.current_txn_first_offset,
            )
            for e in self._producers.values()
        ]  # fmt: skip
        replace_file(path, encode_snapshot(entries), sync=sync)
        self._snapshots[offset] = path
        if sync:
            self._unsynced.discard(offset)
        else:
            self._unsynced.add(offset)
        return path

    def take_unsynced_snapshots(self, up_to: int) -> list[Path]:
        """The snapshots written without an fsync at or below ``up_to``, now counted as synced: the caller fsyncs
        them (``sync_snapshot_files`` in ``core/txn/producersnapshot.py``) outside the log's lock."""
        due = sorted(o for o in self._unsynced if o <= up_to)
        self._unsynced.difference_update(due)
        return [self._snapshots[o] for o in due if o in self._snapshots]

    def delete_snapshots_above(self, offset: int) -> None:
        for o in [o for o in self._snapshots if o > offset]:
            self._delete_snapshot(o)

    def delete_snapshots_before(self, offset: int) -> None:
        """Drop the snapshots of deleted segments (Kafka's ``deleteSnapshotsBefore``)."""
        for o in [o for o in self._snapshots if o < offset]:
            self._delete_snapshot(o)

    def _delete_snapshot(self, offset: int) -> None:
        path = self._snapshots.pop(offset)
        self._unsynced.discard(offset)
        path.unlink(missing_ok=True)

    def load_snapshot(self, up_to: int) -> int | None:
        """Clear the state and load the newest snapshot at or below ``up_to`` that parses; its offset, or None.

        A snapshot that fails its checks is deleted with a warning and the next older one tried."""
        self.clear()
        for offset in sorted((o for o in self._snapshots if o <= up_to), reverse=True):
            path = self._snapshots[offset]
            try:
                entries = decode_snapshot(path.read_bytes(), str(path))
            except (CorruptSnapshot, OSError) as exc:
                _log.warning("skipping producer snapshot %s: %s", path, exc)
                self._delete_snapshot(offset)
                continue
            for e in entries:
                batches: tuple[BatchMetadata, ...] = ()
                if e.last_offset >= 0:
                    batches = (BatchMetadata(e.last_sequence, e.last_offset, e.offset_delta, e.timestamp),)
                self._producers[e.producer_id] = ProducerStateEntry(
                    e.producer_id, e.producer_epoch, e.coordinator_epoch, e.timestamp, e.current_txn_first_offset,
                    batches,
                )  # fmt: skip
                if e.current_txn_first_offset != NO_OFFSET:
                    self._ongoing[e.current_txn_first_offset] = e.producer_id
            self.map_end_offset = offset
            return offset
        return None
