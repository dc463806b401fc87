"""The transaction coordinator's state and its file: Kafka's TransactionStateManager.

What it owns: every transactional id's :class:`TxnInfo` (the full state of its latest transaction), the committed
labels (the newest ``labels_max``, oldest dropped first), the coordinator epoch, and the file that makes them
durable. What it does not own: the protocol (which change is allowed when, the markers, the writes in flight), which
is ``core/txn/coordinator.py``'s.

On disk: one JSON record per state change (core/txn/state.py) in ``STORE/.logfs-transactions.log`` (core/txn/log.py),
each holding the full state of one transactional id, as Kafka's ``__transaction_state`` holds the full
TransactionMetadata per key; replaying the file in order rebuilds the state, the last record of an id winning. Every
record is fsynced before the call that wrote it returns, and applied in memory only after (a failed write changes
nothing). The file is compacted (rewritten atomically with one record per live id and the labels) when it grows past
twice its live size and ``compact_min_bytes``: on open and during appends.

Threads: the changes (:meth:`TransactionStateManager.record`, :meth:`~TransactionStateManager.forget`,
:meth:`~TransactionStateManager.close`) block on fsync and must be serialised by the caller (the coordinator's lock);
they may read the state without more. The queries take only a short lock that no fsync ever holds, so any thread,
the trio thread included, may ask them (the mount does, for lookups under ``.logfs/transactions/``).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from logfs.core.errors import CorruptTransactionLog, LogfsError, StorageError
from logfs.core.txn.log import TransactionLogFile
from logfs.core.txn.state import (
    CommittedLabels,
    CoordinatorEpoch,
    ExpiredId,
    Record,
    TxnInfo,
    TxnState,
    decode_record,
    encode_record,
)

_log = logging.getLogger(__name__)

TRANSACTIONS_FILE = ".logfs-transactions.log"
COMPACT_MIN_BYTES = 1024 * 1024  # below this the file is never compacted
LABELS_MAX = 100_000  # committed labels kept: Spark keeps 100 batches per query; this is 1,000 queries' worth
LABELS_PER_RECORD = 1000  # labels per compaction record, so that no record nears core/txn/log.py's MAX_RECORD_BYTES


class TransactionStateManager:
    """Every transactional id's state, the labels and their file. Create with :meth:`open`; end with :meth:`close`."""

    def __init__(self, log_file: TransactionLogFile, *, compact_min_bytes: int, labels_max: int) -> None:
        self._file = log_file
        self._compact_min_bytes = compact_min_bytes
        self._labels_max = labels_max
        # Guards _txns and _labels for the queries; held only for the dict updates, never across an fsync. The
        # changes (serialised by the caller) read the dicts without it: only they write them.
        self._state_lock = threading.Lock()
        self._txns: dict[str, TxnInfo] = {}
        self._labels: dict[str, None] = {}  # insertion-ordered set: oldest first
        self._coordinator_epoch = 0
        self._compact_at = compact_min_bytes
        self._closed = False

    @classmethod
    def open(
        cls, root: Path, *, compact_min_bytes: int = COMPACT_MIN_BYTES, labels_max: int = LABELS_MAX
    ) -> TransactionStateManager:
        """Load (or create) the state of the store at ``root``. Cuts a torn tail with a warning; compacts a grown
        file. CorruptTransactionLog for damage before the end of the file. Blocks on the disk; any thread but the
        trio thread."""
        initial = [encode_record(CoordinatorEpoch(0))]
        log_file, scanned = TransactionLogFile.open(Path(root) / TRANSACTIONS_FILE, initial)
        manager = cls(log_file, compact_min_bytes=compact_min_bytes, labels_max=labels_max)
        try:
            for position, payload in scanned.records:
                try:
                    manager._replay(decode_record(payload))
                except (ValueError, LogfsError) as exc:
                    raise CorruptTransactionLog(str(log_file.path), position, f"unreadable record: {exc}") from exc
            manager._maybe_compact()
        except BaseException:
            log_file.close()
            raise
        return manager

    def _replay(self, record: Record) -> None:
        """Apply one record read back (the same effect its write had)."""
        if isinstance(record, TxnInfo):
            self._txns[record.transactional_id] = record
            if record.state is TxnState.PREPARE_COMMIT and record.label is not None:
                self._add_label(record.label)
        elif isinstance(record, ExpiredId):
            self._txns.pop(record.transactional_id, None)
        elif isinstance(record, CommittedLabels):
            for label in record.labels:
                self._add_label(label)
        else:
            self._coordinator_epoch = max(self._coordinator_epoch, record.epoch)

    # --- queries (any thread) ----------------------------------------------------------------------------------------

    @property
    def coordinator_epoch(self) -> int:
        return self._coordinator_epoch

    @property
    def path(self) -> Path:
        return self._file.path

    def get(self, transactional_id: str) -> TxnInfo | None:
        with self._state_lock:
            return self._txns.get(transactional_id)

    def transactions(self) -> list[TxnInfo]:
        """Every transactional id's state, in no particular order."""
        with self._state_lock:
            return list(self._txns.values())

    def committed_labels(self) -> frozenset[str]:
        with self._state_lock:
            return frozenset(self._labels)

    def has_committed_label(self, label: str) -> bool:
        with self._state_lock:
            return label in self._labels

    # --- changes (serialised by the caller; they block on fsync) -----------------------------------------------------

    def check_open(self) -> None:
        """StorageError once :meth:`close` was called."""
        if self._closed:
            raise StorageError(f"the transaction coordinator of {self._file.path.parent} is closed")

    def record(self, info: TxnInfo) -> None:
        """Write ``info`` durably, then apply it (a failed write changes nothing in memory)."""
        self.check_open()
        self._file.append(encode_record(info))
        with self._state_lock:
            self._txns[info.transactional_id] = info
            if info.state is TxnState.PREPARE_COMMIT and info.label is not None:
                self._add_label(info.label)
        self._compact_if_due()

    def forget(self, transactional_id: str) -> None:
        """Write a tombstone for an expired transactional id durably, then drop it."""
        self.check_open()
        self._file.append(encode_record(ExpiredId(transactional_id)))
        with self._state_lock:
            del self._txns[transactional_id]
        self._compact_if_due()

    def close(self) -> None:
        """Close the file; every record is already durable. Idempotent."""
        if not self._closed:
            self._closed = True
            self._file.close()

    # --- compaction --------------------------------------------------------------------------------------------------

    def _compact_if_due(self) -> None:
        """Compact once the file passed its threshold, *after* the new record was applied in memory (the snapshot
        is taken from memory). A failed compaction leaves the old file, which holds every record; it is logged, not
        raised: the change it followed is durable."""
        if self._file.size_bytes <= self._compact_at:
            return
        try:
            self._maybe_compact()
        except StorageError as exc:
            _log.warning("cannot compact %s (%s); it keeps growing until the next try", self._file.path, exc)
            self._compact_at = 2 * self._file.size_bytes

    def _add_label(self, label: str) -> None:
        self._labels[label] = None
        while len(self._labels) > self._labels_max:
            del self._labels[next(iter(self._labels))]

    def _snapshot(self) -> list[bytes]:
        records = [encode_record(CoordinatorEpoch(self._coordinator_epoch))]
        labels = tuple(self._labels)
        for start in range(0, len(labels), LABELS_PER_RECORD):
            records.append(encode_record(CommittedLabels(labels[start : start + LABELS_PER_RECORD])))
        records.extend(encode_record(info) for _, info in sorted(self._txns.items()))
        return records

    def _maybe_compact(self) -> None:
        """Rewrite the file as a snapshot when it is over twice its live size (and over ``compact_min_bytes``)."""
        snapshot = self._snapshot()
        live_bytes = sum(len(record) for record in snapshot)
        if self._file.size_bytes > max(self._compact_min_bytes, 2 * live_bytes):
            before = self._file.size_bytes
            self._file.rewrite(snapshot)
            _log.info("compacted %s from %d to %d bytes", self._file.path, before, self._file.size_bytes)
        self._compact_at = max(self._compact_min_bytes, 2 * self._file.size_bytes)
