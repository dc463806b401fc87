"""The transaction coordinator of one store: Kafka's TransactionCoordinator (the protocol; its state and file are
``core/txn/statemanager.py``'s TransactionStateManager).

Each transactional id (a name with a topic name's rules) has one :class:`TxnInfo`: its producer id (allocated once,
then kept), its producer epoch, the state of its latest transaction, the partitions that transaction touched, when
it started and its timeout, and an optional label recorded with a commit decision. States (Kafka's
TransactionState; EMPTY stands for "no transaction yet")::

    none, COMPLETE_x ──begin (epoch + 1)──────────────────────▶ ONGOING
    ONGOING          ──end(commit)────────────────────────────▶ PREPARE_COMMIT ──markers──▶ COMPLETE_COMMIT
    ONGOING          ──end(abort)─────────────────────────────▶ PREPARE_ABORT ───markers──▶ COMPLETE_ABORT
    ONGOING          ──expire, abort_and_fence (epoch + 1)────▶ PREPARE_ABORT

Rules, each Kafka's unless marked:

* **Epochs fence.** Every ``begin`` bumps the producer epoch (InitProducerId does in Kafka), so a new holder's
  writes carry a newer epoch than any handle of the old one; an aborted timeout or takeover bumps it once more
  (``prepareFenceProducerEpoch``), so the old holder's handles are refused (ProducerFenced) even before the next
  begin. When the epoch is exhausted (32766 or more) the next begin takes a new producer id at epoch 0.
* **Decision first.** ``end`` makes the PREPARE_x record durable before it writes a single marker: once it is on
  disk the outcome is fixed, and :meth:`TransactionCoordinator.complete_pending` finishes it after a crash. Then one
  marker per partition touched, then COMPLETE_x. A transaction with no decision on disk is aborted by
  :meth:`TransactionCoordinator.expire` once its timeout has passed since its persisted start (wall clock), also
  across restarts. A call whose fsync fails has an unknown outcome, like a Kafka request that timed out: the record
  may be on disk after a reopen, or not; the log refuses every later change until it is reopened.
* **Partitions first.** ``add_partition`` is durable before the first write to a partition (Kafka's
  AddPartitionsToTxn), so recovery knows every partition that may hold the transaction's batches.
* **No write after the marker** (logfs; Kafka's KIP-890 verification). A batch appended to a partition after its
  marker would open a transaction that nothing ever ends, holding the LSO back forever. Writers therefore go through
  :meth:`TransactionCoordinator.transactional_write`, which counts them; ``end``, ``expire`` and
  ``abort_and_fence`` first move the state away from ONGOING (refusing new writers) and then wait for the counted
  ones to finish before any marker is written.
* **Labels** (logfs, for the Spark sink's exactly-once): a label given with a commit is in the PREPARE_COMMIT
  record, so it is committed exactly when the decision is. The most recent ``labels_max`` are kept (Spark replays
  only a query's latest micro-batch; its own metadata log keeps 100 batches).
* **Coordinator epoch.** Markers carry the coordinator epoch, which a log uses to refuse markers of a coordinator
  older than the last it saw (CoordinatorFenced). In Kafka it is the leader epoch of the ``__transaction_state``
  partition and changes when a coordinator moves. Here one process owns the store (its flock), so no older
  coordinator can still be writing: the epoch is persisted and stays 0. Bumping it per open would gain nothing and
  would fence a promoted follower, whose own coordinator starts from its own file while its logs hold the old
  leader's markers.
* **Expiration of ids.** A transactional id whose last transaction completed more than
  ``transactional.id.expiration.ms`` (7 days) ago is forgotten by ``expire``; a later begin gets a new producer id.

On disk: one record per state change, fsynced before the call that wrote it returns, in
``STORE/.logfs-transactions.log`` (``core/txn/statemanager.py`` has the file and its compaction).

Threads: every public method that changes state may be called from any thread *except the trio thread* (they block
on fsync); the queries, which never wait for an fsync, from any thread. One lock serialises the changes, and is held
across each record's fsync (a few ms; the coordinator's calls are few next to appends). It is **not** held while
``marker_writer`` runs: markers are appends to partition logs, which may be slow, and other transactions must not
wait for them. Instead a transaction whose markers are being written is marked *completing*: a begin of the same id
meets its PREPARE state and raises TransactionInProgress, and the recovery paths skip it (``complete_pending``,
``expire``) or wait for it (``abort_and_fence``), so the markers of one transaction are never written by two threads
at once and COMPLETE is always written after them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from logfs.core.checkpoint import TopicPartition
from logfs.core.config import TRANSACTION_MAX_TIMEOUT_MS
from logfs.core.durable import now_ms as wall_clock_ms
from logfs.core.errors import ConfigError, InvalidTxnState, ProducerFenced, TransactionInProgress
from logfs.core.names import validate_transactional_id
from logfs.core.txn.labellog import ReplicatedLabels
from logfs.core.txn.state import PRODUCER_EPOCH_EXHAUSTED, PRODUCER_EPOCH_MAX, TxnInfo, TxnState
from logfs.core.txn.statemanager import COMPACT_MIN_BYTES, LABELS_MAX, TransactionStateManager

_log = logging.getLogger(__name__)

TRANSACTIONAL_ID_EXPIRATION_MS = 7 * 24 * 3600 * 1000  # Kafka's transactional.id.expiration.ms (7 days)
WRITE_DRAIN_TIMEOUT_S = 30.0  # request.timeout.ms's default: how long end() waits for writes still in flight
COMPLETING_WAIT_TIMEOUT_S = 30.0  # how long abort_and_fence waits for another thread's markers
LABEL_MAX_CHARS = 1024

MarkerWriter = Callable[[str, int, int, int, bool, int], None]
"""``(topic, partition, producer_id, producer_epoch, commit, coordinator_epoch)``: append one COMMIT (``commit``) or
ABORT marker for ``producer_id`` to a partition; raise on failure. Called once per partition, and again for the same
partition after a crash or a failure, so writing one marker twice must be harmless (a marker for a producer with no
open transaction ends nothing). It must return only once the marker is durable (for the Store: the leader's
``Log.append_end_txn_marker`` then a flush of that partition): COMPLETE is recorded after it, and nothing writes a
marker again once COMPLETE is on disk, so a marker lost in a power failure would leave its transaction open in the
partition for ever."""


# --- the coordinator -------------------------------------------------------------------------------------------------


class TransactionCoordinator:
    """The transaction coordinator of the store at ``root``. Create with :meth:`open`; end with :meth:`close`."""

    def __init__(self, state: TransactionStateManager, allocate_producer_id: Callable[[], int]) -> None:
        self._state = state
        self._allocate_producer_id = allocate_producer_id
        self._lock = threading.Lock()  # serialises the changes; held across each record's fsync
        self._changed = threading.Condition(self._lock)  # a write finished, or a transaction stopped completing
        self._writes_in_flight: dict[str, int] = {}
        self._completing: set[str] = set()
        # the labels __transaction_state holds (replicated: they survive this node); the store replays them at open,
        # a node that becomes leader again (core/txn/labellog.py)
        self.replicated_labels = ReplicatedLabels()

    @classmethod
    def open(
        cls,
        root: Path,
        allocate_producer_id: Callable[[], int],
        *,
        compact_min_bytes: int = COMPACT_MIN_BYTES,
        labels_max: int = LABELS_MAX,
    ) -> TransactionCoordinator:
        """Load (or create) the coordinator of the store at ``root``; producer ids come from ``allocate_producer_id``
        (``ProducerIdAllocator.allocate``). Cuts a torn tail with a warning; compacts a grown file.

        CorruptTransactionLog for damage before the end of the file. Nothing is completed or expired here: the
        owner calls :meth:`complete_pending` once the partitions are open, and :meth:`expire` periodically.
        Blocks on the disk; any thread but the trio thread.
        """
        state = TransactionStateManager.open(root, compact_min_bytes=compact_min_bytes, labels_max=labels_max)
        return cls(state, allocate_producer_id)

    # --- queries (they never wait for a change's fsync: the trio thread asks them) ---------------------------------

    @property
    def coordinator_epoch(self) -> int:
        """The epoch every marker carries (persisted; 0: see the module docstring). Any thread."""
        return self._state.coordinator_epoch

    def get(self, transactional_id: str) -> TxnInfo | None:
        """The state of ``transactional_id``, or None when it has none. Any thread."""
        return self._state.get(transactional_id)

    def open_transactions(self) -> list[TxnInfo]:
        """Every transaction ONGOING or waiting for its markers, by transactional id. Any thread."""
        txns = self._state.transactions()
        return sorted((t for t in txns if t.state.is_open), key=lambda t: t.transactional_id)

    def committed_labels(self) -> frozenset[str]:
        """Every label kept whose commit decision is durable (the newest ``labels_max``). Any thread."""
        return self._state.committed_labels()

    def has_committed_label(self, label: str) -> bool:
        """Whether a commit with ``label`` happened: its record is in ``__transaction_state`` (written once the
        commit's markers are replicated, so every future leader keeps the commit: core/txn/labellog.py). The labels
        this store's transaction log recorded with its decisions count only in a store that never used the topic
        (one from before labels were recorded there): a decision whose markers are not replicated yet may still
        be aborted by a new leader, and answering for it would make a replay skip rows never committed. Any
        thread."""
        if self.replicated_labels.in_use:
            return self.replicated_labels.has(label)
        return self._state.has_committed_label(label)

    # --- a transaction's life -----------------------------------------------------------------------------------

    def begin(
        self, transactional_id: str, *, timeout_ms: int, now_ms: int, owner: tuple[int, int] | None = None
    ) -> TxnInfo:
        """Start a transaction for ``transactional_id`` with a new producer epoch; durable before it returns, with
        its ``owner`` (uid, gid: who began it, on a shared mount) in the same record.

        TransactionInProgress while one is open or its markers are pending; InvalidTransactionalId for a bad name;
        ConfigError for a timeout outside ``[1, transaction.max.timeout.ms]``. Any thread but the trio thread.
        """
        validate_transactional_id(transactional_id)
        if not 1 <= timeout_ms <= TRANSACTION_MAX_TIMEOUT_MS:
            raise ConfigError(
                f"Invalid value {timeout_ms} for configuration transaction.timeout.ms: "
                f"Value must be between 1 and {TRANSACTION_MAX_TIMEOUT_MS}"
            )
        with self._lock:
            self._check_not_closed()
            current = self._state.get(transactional_id)
            if (current is not None and current.state.is_open) or transactional_id in self._completing:
                state = current.state.value if current is not None else "completing"
                raise TransactionInProgress(f"transaction {transactional_id!r} is {state}")
            if current is None or current.producer_epoch >= PRODUCER_EPOCH_EXHAUSTED:
                producer_id, producer_epoch = self._allocate_producer_id(), 0
            else:
                producer_id, producer_epoch = current.producer_id, current.producer_epoch + 1
            info = TxnInfo(
                transactional_id=transactional_id,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                state=TxnState.ONGOING,
                partitions=frozenset(),
                start_ms=now_ms,
                timeout_ms=timeout_ms,
                last_update_ms=now_ms,
                owner=owner,
            )
            self._state.record(info)
            return info

    def add_partition(self, transactional_id: str, producer_epoch: int, topic: str, partition: int) -> TxnInfo:
        """Add a partition to the open transaction; durable before it returns (a no-op when it is in already).

        ProducerFenced for an older epoch than the transactional id's; InvalidTxnState when no transaction of this
        epoch is ONGOING. Any thread but the trio thread.
        """
        with self._lock:
            return self._add_partition_locked(transactional_id, producer_epoch, TopicPartition(topic, partition))

    @contextlib.contextmanager
    def transactional_write(
        self, transactional_id: str, producer_epoch: int, topic: str, partition: int
    ) -> Iterator[TxnInfo]:
        """Hold the transaction open for one append to ``topic``/``partition``: wrap each transactional append in it.

        Checks and adds the partition as :meth:`add_partition` does, then counts the write until the block ends, so
        ``end`` (and a fence) writes no marker while an append of this transaction may still land. Keep only the
        append inside (not an fsync that waits for replicas). Any thread but the trio thread.
        """
        with self._lock:
            info = self._add_partition_locked(transactional_id, producer_epoch, TopicPartition(topic, partition))
            self._writes_in_flight[transactional_id] = self._writes_in_flight.get(transactional_id, 0) + 1
        try:
            yield info
        finally:
            with self._lock:
                left = self._writes_in_flight[transactional_id] - 1
                if left:
                    self._writes_in_flight[transactional_id] = left
                else:
                    del self._writes_in_flight[transactional_id]
                self._changed.notify_all()

    def end(
        self,
        transactional_id: str,
        producer_epoch: int,
        *,
        commit: bool,
        marker_writer: MarkerWriter,
        label: str | None = None,
        now_ms: int,
    ) -> TxnInfo:
        """Commit or abort the open transaction: the decision (with ``label``, commits only) durably first, then a
        marker to every partition touched, then COMPLETE. Returns the completed state.

        ProducerFenced / InvalidTxnState as :meth:`add_partition`. If a marker write raises, the error propagates
        and the transaction stays PREPARE_x: the decision stands and :meth:`complete_pending` finishes it. Any
        thread but the trio thread; the markers are written in this thread, outside the coordinator's lock.
        """
        if label is not None and not commit:
            raise ValueError("a label is recorded with a commit only")
        if label is not None and not 1 <= len(label) <= LABEL_MAX_CHARS:
            raise ValueError(f"a label has 1 to {LABEL_MAX_CHARS} characters, not {len(label)}")
        with self._lock:
            current = self._require_ongoing(transactional_id, producer_epoch)
            state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            prepared = replace(current, state=state, last_update_ms=now_ms, label=label)
            self._state.record(prepared)
            self._completing.add(transactional_id)
        return self._complete(prepared, marker_writer, now_ms)

    # --- recovery and timeouts -----------------------------------------------------------------------------------

    def complete_pending(self, marker_writer: MarkerWriter, *, now_ms: int | None = None) -> list[str]:
        """Finish every PREPARE_x transaction (markers written again, then COMPLETE): after a crash, and after a
        failed marker write. ONGOING ones are left to :meth:`expire`. Returns the ids completed.

        Transactions another thread is completing are skipped. A marker failure is raised after every other pending
        transaction was tried (the failed one stays PREPARE_x). Any thread but the trio thread.
        """
        now = wall_clock_ms() if now_ms is None else now_ms
        with self._lock:
            self._check_not_closed()
            txns = self._state.transactions()
            pending = [t for t in txns if t.state.is_prepared and t.transactional_id not in self._completing]
            self._completing.update(t.transactional_id for t in pending)
        return self._complete_all(pending, marker_writer, now)

    def expire(self, now_ms: int, marker_writer: MarkerWriter) -> list[str]:
        """Abort every ONGOING transaction past its timeout, with a bumped epoch that fences its holder; forget ids
        whose last transaction completed over ``transactional.id.expiration.ms`` ago. Returns the ids aborted.

        Marker failures as in :meth:`complete_pending`. Any thread but the trio thread (the owner's periodic work).
        """
        with self._lock:
            self._check_not_closed()
            txns = self._state.transactions()
            due = [t for t in txns if t.expired(now_ms) and t.transactional_id not in self._completing]
            fenced: list[TxnInfo] = []
            try:
                for info in due:
                    tid, timeout_ms = info.transactional_id, info.timeout_ms
                    _log.info("transaction %r timed out after %d ms: aborting it", tid, timeout_ms)
                    fenced.append(self._fence(info, now_ms))
                for info in self._state.transactions():
                    if (
                        not info.state.is_open
                        and info.transactional_id not in self._completing
                        and info.last_update_ms + TRANSACTIONAL_ID_EXPIRATION_MS < now_ms
                    ):
                        self._state.forget(info.transactional_id)
            except BaseException:  # the disk failed: the ones fenced stay PREPARE_ABORT for complete_pending
                self._completing.difference_update(t.transactional_id for t in fenced)
                raise
        return self._complete_all(fenced, marker_writer, now_ms)

    def abort_and_fence(self, transactional_id: str, marker_writer: MarkerWriter, *, now_ms: int) -> TxnInfo | None:
        """A new holder takes over: abort an ONGOING transaction with a bumped epoch (fencing the old holder's
        handles), or finish a PREPARE_x one with the decision it has (a decided commit stays a commit). Returns the
        completed state; the current one when nothing was open; None for an unknown id.

        Waits up to COMPLETING_WAIT_TIMEOUT_S for another thread completing the same id (TransactionInProgress
        after that). Marker failures propagate, as in :meth:`end`. Any thread but the trio thread.
        """
        with self._lock:
            self._check_not_closed()
            if not self._changed.wait_for(
                lambda: transactional_id not in self._completing, timeout=COMPLETING_WAIT_TIMEOUT_S
            ):
                raise TransactionInProgress(f"transaction {transactional_id!r} is still being completed")
            current = self._state.get(transactional_id)
            if current is None or not current.state.is_open:
                return current
            target = self._fence(current, now_ms) if current.state is TxnState.ONGOING else current
            self._completing.add(transactional_id)
        return self._complete(target, marker_writer, now_ms)

    # --- closing ---------------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the file; every record is already durable. Later calls that change state raise StorageError.
        Idempotent. Any thread."""
        with self._lock:
            self._state.close()

    # --- internals (the lock held unless said otherwise) -----------------------------------------------------------

    def _check_not_closed(self) -> None:
        self._state.check_open()

    def _require_ongoing(self, transactional_id: str, producer_epoch: int) -> TxnInfo:
        self._check_not_closed()
        current = self._state.get(transactional_id)
        if current is None:
            raise InvalidTxnState(f"no transaction {transactional_id!r}")
        if producer_epoch != current.producer_epoch:
            raise ProducerFenced(
                f"transaction {transactional_id!r}: producer epoch {producer_epoch} is not the current "
                f"{current.producer_epoch} (a newer holder took over)"
            )
        if current.state is not TxnState.ONGOING:
            raise InvalidTxnState(f"transaction {transactional_id!r} is {current.state.value}, not ONGOING")
        return current

    def _add_partition_locked(self, transactional_id: str, producer_epoch: int, tp: TopicPartition) -> TxnInfo:
        current = self._require_ongoing(transactional_id, producer_epoch)
        if tp in current.partitions:
            return current
        info = replace(current, partitions=current.partitions | {tp})
        self._state.record(info)
        return info

    def _fence(self, current: TxnInfo, now_ms: int) -> TxnInfo:
        """Kafka's prepareFenceProducerEpoch + prepareAbort: epoch + 1 and PREPARE_ABORT, durable; marks completing."""
        assert current.state is TxnState.ONGOING and current.producer_epoch < PRODUCER_EPOCH_MAX, current
        fenced = replace(
            current,
            producer_epoch=current.producer_epoch + 1,
            state=TxnState.PREPARE_ABORT,
            last_update_ms=now_ms,
            label=None,
        )
        self._state.record(fenced)
        self._completing.add(current.transactional_id)
        return fenced

    def _complete(self, prepared: TxnInfo, marker_writer: MarkerWriter, now_ms: int) -> TxnInfo:
        """Wait for the writes in flight, write the markers, record COMPLETE_x. Called *without* the lock, with
        ``prepared.transactional_id`` marked completing by the caller; unmarks it whatever happens."""
        transactional_id = prepared.transactional_id
        try:
            with self._lock:
                if not self._changed.wait_for(
                    lambda: transactional_id not in self._writes_in_flight, timeout=WRITE_DRAIN_TIMEOUT_S
                ):
                    raise InvalidTxnState(
                        f"transaction {transactional_id!r}: writes still in flight after {WRITE_DRAIN_TIMEOUT_S} s; "
                        f"{prepared.state.value} stands and complete_pending finishes it"
                    )
            for tp in sorted(prepared.partitions):
                marker_writer(
                    tp.topic,
                    tp.partition,
                    prepared.producer_id,
                    prepared.producer_epoch,
                    prepared.commit,
                    self._state.coordinator_epoch,
                )
            state = TxnState.COMPLETE_COMMIT if prepared.commit else TxnState.COMPLETE_ABORT
            completed = replace(prepared, state=state, last_update_ms=now_ms)
            with self._lock:
                self._state.record(completed)
            return completed
        finally:
            with self._lock:
                self._completing.discard(transactional_id)
                self._changed.notify_all()

    def _complete_all(self, prepared: list[TxnInfo], marker_writer: MarkerWriter, now_ms: int) -> list[str]:
        """:meth:`_complete` each one (without the lock); the first failure is raised after every one was tried."""
        done: list[str] = []
        failure: Exception | None = None
        not_reached = [t.transactional_id for t in prepared]
        try:
            for info in prepared:
                not_reached.pop(0)
                try:
                    self._complete(info, marker_writer, now_ms)
                    done.append(info.transactional_id)
                except Exception as exc:
                    _log.warning("transaction %r stays %s: %s", info.transactional_id, info.state.value, exc)
                    failure = failure or exc
        except BaseException:  # KeyboardInterrupt and the like: the ones not reached are no longer completing
            with self._lock:
                self._completing.difference_update(not_reached)
                self._changed.notify_all()
            raise
        if failure is not None:
            raise failure
        return done
