"""The transaction coordinator (core/txn/coordinator.py) and its log (core/txn/log.py): the state machine, fencing,
decision-first durability, recovery after kill -9, timeouts across restarts, labels, compaction, and damage to the
log (a torn tail is cut, damage before intact records is a typed error).

Markers go to a recording callable here; the Log-backed writer comes with the Store's wiring. Scenarios ported from
Kafka name their test (``TransactionCoordinatorTest``, ``TransactionStateManagerTest``, ``TransactionMetadataTest``).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from logfs.core.checkpoint import TopicPartition
from logfs.core.errors import (
    ConfigError,
    CorruptTransactionLog,
    DiskFull,
    InvalidTransactionalId,
    InvalidTxnState,
    ProducerFenced,
    StorageError,
    TransactionInProgress,
)
from logfs.core.txn import coordinator as coordinator_module
from logfs.core.txn import log as txnlog
from logfs.core.txn.coordinator import TRANSACTIONAL_ID_EXPIRATION_MS, TransactionCoordinator
from logfs.core.txn.log import FRAME_HEADER_BYTES, MAGIC, frame, scan
from logfs.core.txn.producerids import ProducerIdAllocator
from logfs.core.txn.state import (
    PRODUCER_EPOCH_EXHAUSTED,
    PRODUCER_EPOCH_MAX,
    CommittedLabels,
    CoordinatorEpoch,
    ExpiredId,
    Record,
    TxnInfo,
    TxnState,
    decode_record,
    encode_record,
)
from logfs.core.txn.statemanager import TRANSACTIONS_FILE

TIMEOUT_MS = 60_000
T0 = 1_700_000_000_000


@dataclass
class Marker:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int


@dataclass
class Markers:
    """A recording marker writer; ``fail_at`` makes the n-th call (from 0) raise."""

    written: list[Marker] = field(default_factory=list)
    fail_at: int | None = None
    calls: int = 0

    def __call__(
        self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
    ) -> None:
        self.calls += 1
        if self.fail_at is not None and self.calls - 1 == self.fail_at:
            raise OSError("marker append failed")
        self.written.append(Marker(topic, partition, producer_id, producer_epoch, commit, coordinator_epoch))


def open_coordinator(root: Path, **kwargs: int) -> TransactionCoordinator:
    return TransactionCoordinator.open(root, ProducerIdAllocator(root).allocate, **kwargs)


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[TransactionCoordinator]:
    c = open_coordinator(tmp_path)
    yield c
    c.close()


def begin_with(c: TransactionCoordinator, tid: str, *partitions: tuple[str, int], now_ms: int = T0) -> TxnInfo:
    info = c.begin(tid, timeout_ms=TIMEOUT_MS, now_ms=now_ms)
    for topic, partition in partitions:
        info = c.add_partition(tid, info.producer_epoch, topic, partition)
    return info


# --- begin and epochs ------------------------------------------------------------------------------------------


def test_begin_allocates_a_producer_id_at_epoch_zero(coordinator: TransactionCoordinator) -> None:
    """TransactionCoordinatorTest.shouldInitPidWithEpochZeroForNewTransactionalId."""
    info = coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    assert (info.producer_id, info.producer_epoch, info.state) == (0, 0, TxnState.ONGOING)
    assert (info.start_ms, info.timeout_ms, info.partitions, info.label) == (T0, TIMEOUT_MS, frozenset(), None)
    assert coordinator.get("t") == info
    assert coordinator.open_transactions() == [info]
    assert coordinator.begin("u", timeout_ms=TIMEOUT_MS, now_ms=T0).producer_id == 1


def test_the_owner_is_kept_with_the_begin_and_a_record_without_one_has_none(tmp_path: Path) -> None:
    """logfs's own field (a shared mount's transactions are their beginner's: mount/access.py): durable with the
    begin, kept through the end, absent from the payload when None so older records read as they were written."""
    c = open_coordinator(tmp_path)
    info = c.begin("mine", timeout_ms=TIMEOUT_MS, now_ms=T0, owner=(1001, 1002))
    c.begin("anyones", timeout_ms=TIMEOUT_MS, now_ms=T0)
    assert b"owner" not in encode_record(c.get("anyones"))  # type: ignore[arg-type]
    c.close()
    again = open_coordinator(tmp_path)
    assert again.get("mine") == info and info.owner == (1001, 1002)
    assert again.get("anyones").owner is None  # type: ignore[union-attr]
    again.end("mine", info.producer_epoch, commit=True, marker_writer=Markers(), now_ms=T0)
    assert again.get("mine").owner == (1001, 1002)  # type: ignore[union-attr]
    again.close()


def test_begin_while_open_raises_transaction_in_progress(coordinator: TransactionCoordinator) -> None:
    """TransactionCoordinatorTest.shouldRespondWithConcurrentTransactionsOnInitPidWhenInPrepareCommitState, here as
    TransactionInProgress (EEXIST in the mount) for ONGOING and for PREPARE_x alike."""
    info = coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    with pytest.raises(TransactionInProgress):
        coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    coordinator.add_partition("t", info.producer_epoch, "a", 0)
    with pytest.raises(OSError):
        coordinator.end("t", info.producer_epoch, commit=True, marker_writer=Markers(fail_at=0), now_ms=T0)
    assert coordinator.get("t").state is TxnState.PREPARE_COMMIT  # type: ignore[union-attr]
    with pytest.raises(TransactionInProgress):
        coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)


def test_each_begin_keeps_the_producer_id_and_bumps_the_epoch(coordinator: TransactionCoordinator) -> None:
    """TransactionCoordinatorTest.shouldIncrementEpochAndUpdateMetadataOnInitPidWhenCompleteCommit."""
    epochs = []
    for _ in range(3):
        info = coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
        epochs.append((info.producer_id, info.producer_epoch))
        coordinator.end("t", info.producer_epoch, commit=False, marker_writer=Markers(), now_ms=T0)
    assert epochs == [(0, 0), (0, 1), (0, 2)]


def test_an_exhausted_epoch_takes_a_new_producer_id(tmp_path: Path) -> None:
    """TransactionMetadataTest.testEpochExhausted-like: epoch >= Short.MaxValue - 1 gets a new producer id at 0."""
    c = open_coordinator(tmp_path)
    info = c.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    c.end("t", info.producer_epoch, commit=True, marker_writer=Markers(), now_ms=T0)
    c.close()
    worn = TxnInfo("t", 0, PRODUCER_EPOCH_EXHAUSTED, TxnState.COMPLETE_COMMIT, frozenset(), T0, TIMEOUT_MS, T0)
    append_raw(tmp_path, encode_record(worn))
    c = open_coordinator(tmp_path)
    info = c.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    assert info.producer_id != 0 and info.producer_epoch == 0
    c.close()


def test_a_fence_of_the_last_usable_epoch_still_fits_a_short(tmp_path: Path) -> None:
    c = open_coordinator(tmp_path)
    c.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    c.close()
    ongoing = TxnInfo("t", 0, PRODUCER_EPOCH_EXHAUSTED - 1, TxnState.COMPLETE_ABORT, frozenset(), T0, TIMEOUT_MS, T0)
    append_raw(tmp_path, encode_record(ongoing))
    c = open_coordinator(tmp_path)
    info = c.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    assert info.producer_epoch == PRODUCER_EPOCH_EXHAUSTED
    markers = Markers()
    done = c.abort_and_fence("t", markers, now_ms=T0)
    assert done is not None and done.producer_epoch == PRODUCER_EPOCH_MAX
    assert c.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0).producer_epoch == 0
    c.close()


@pytest.mark.parametrize("name", ["", ".", "..", ".hidden", "a/b", "sp ace", "é", "x" * 250])
def test_a_transactional_id_outside_the_topic_rules_is_refused(coordinator: TransactionCoordinator, name: str) -> None:
    with pytest.raises(InvalidTransactionalId):
        coordinator.begin(name, timeout_ms=TIMEOUT_MS, now_ms=T0)
    assert coordinator.get(name) is None


def test_a_transactional_id_of_249_topic_characters_is_accepted(coordinator: TransactionCoordinator) -> None:
    name = "a.B_9-" * 41 + "abc"
    assert len(name) == 249
    assert coordinator.begin(name, timeout_ms=TIMEOUT_MS, now_ms=T0).transactional_id == name


@pytest.mark.parametrize("timeout_ms", [0, -1, 900_001])
def test_a_timeout_outside_kafkas_range_is_a_config_error(coordinator: TransactionCoordinator, timeout_ms: int) -> None:
    """TransactionCoordinatorTest.shouldRespondWithInvalidTransactionTimeoutOnInitPidWhenTimeoutTooLarge."""
    with pytest.raises(ConfigError):
        coordinator.begin("t", timeout_ms=timeout_ms, now_ms=T0)


# --- partitions and writes -------------------------------------------------------------------------------------


def test_add_partition_is_durable_and_idempotent(tmp_path: Path) -> None:
    c = open_coordinator(tmp_path)
    info = begin_with(c, "t", ("a", 0), ("a", 1), ("a", 0))
    assert info.partitions == {TopicPartition("a", 0), TopicPartition("a", 1)}
    size = (tmp_path / TRANSACTIONS_FILE).stat().st_size
    c.add_partition("t", info.producer_epoch, "a", 1)  # already in: no record
    assert (tmp_path / TRANSACTIONS_FILE).stat().st_size == size
    c.close()
    assert open_coordinator(tmp_path).get("t") == info


def test_add_partition_refuses_a_stale_epoch_and_a_closed_transaction(coordinator: TransactionCoordinator) -> None:
    """TransactionCoordinatorTest.shouldRespondWithProducerFencedOnAddPartitionsWhenEpochsAreDifferent and
    ...WhenStateIsCompleteCommit (INVALID_TXN_STATE)."""
    with pytest.raises(InvalidTxnState):
        coordinator.add_partition("nobody", 0, "a", 0)
    first = coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    coordinator.end("t", first.producer_epoch, commit=True, marker_writer=Markers(), now_ms=T0)
    with pytest.raises(InvalidTxnState):
        coordinator.add_partition("t", first.producer_epoch, "a", 0)
    second = coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    with pytest.raises(ProducerFenced):
        coordinator.add_partition("t", first.producer_epoch, "a", 0)
    with pytest.raises(ProducerFenced), coordinator.transactional_write("t", first.producer_epoch, "a", 0):
        pass
    assert coordinator.get("t") == second


def test_transactional_write_adds_the_partition(coordinator: TransactionCoordinator) -> None:
    info = coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    with coordinator.transactional_write("t", info.producer_epoch, "a", 3) as inside:
        assert inside.partitions == {TopicPartition("a", 3)}
    assert coordinator.get("t").partitions == {TopicPartition("a", 3)}  # type: ignore[union-attr]


def test_end_waits_for_a_write_in_flight_before_any_marker(coordinator: TransactionCoordinator) -> None:
    """No batch may land after its partition's marker: end waits for the counted write to leave."""
    info = coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    inside = threading.Event()
    leave = threading.Event()
    order: list[str] = []

    def writer() -> None:
        with coordinator.transactional_write("t", info.producer_epoch, "a", 0):
            inside.set()
            leave.wait(10)
            order.append("append")

    markers = Markers()

    def ending() -> None:
        coordinator.end("t", info.producer_epoch, commit=True, marker_writer=markers, now_ms=T0)
        order.append("ended")

    w = threading.Thread(target=writer)
    w.start()
    assert inside.wait(10)
    e = threading.Thread(target=ending)
    e.start()
    deadline = time.monotonic() + 10
    while coordinator.get("t").state is not TxnState.PREPARE_COMMIT and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.01)
    with pytest.raises(InvalidTxnState), coordinator.transactional_write("t", info.producer_epoch, "a", 1):
        pass  # the decision is made: no new writer gets in
    time.sleep(0.1)
    assert markers.written == [] and order == []
    leave.set()
    w.join(10)
    e.join(10)
    assert order == ["append", "ended"]
    assert [(m.topic, m.partition) for m in markers.written] == [("a", 0)]


# --- end --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_end_writes_one_marker_per_partition_then_completes(coordinator: TransactionCoordinator, commit: bool) -> None:
    """TransactionCoordinatorTest.shouldAppendPrepareCommitToLogOnEndTxnWhenStatusIsOngoingAndResultIsCommit."""
    info = begin_with(coordinator, "t", ("b", 1), ("a", 0), ("b", 0))
    markers = Markers()
    done = coordinator.end("t", info.producer_epoch, commit=commit, marker_writer=markers, now_ms=T0 + 5)
    assert markers.written == [
        Marker(t, p, info.producer_id, info.producer_epoch, commit, 0) for t, p in [("a", 0), ("b", 0), ("b", 1)]
    ]
    assert done.state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT)
    assert done.last_update_ms == T0 + 5 and done.partitions == info.partitions
    assert coordinator.get("t") == done
    assert coordinator.open_transactions() == []


def test_end_refuses_a_stale_epoch_and_no_open_transaction(coordinator: TransactionCoordinator) -> None:
    """TransactionCoordinatorTest.shouldReplyWithProducerFencedOnEndTxnWhenEpochIsNotSameAsTransaction."""
    with pytest.raises(InvalidTxnState):
        coordinator.end("t", 0, commit=True, marker_writer=Markers(), now_ms=T0)
    old = coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    coordinator.end("t", old.producer_epoch, commit=False, marker_writer=Markers(), now_ms=T0)
    with pytest.raises(InvalidTxnState):  # ended already
        coordinator.end("t", old.producer_epoch, commit=True, marker_writer=Markers(), now_ms=T0)
    coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    with pytest.raises(ProducerFenced):
        coordinator.end("t", old.producer_epoch, commit=True, marker_writer=Markers(), now_ms=T0)


def test_markers_are_written_outside_the_lock_so_other_transactions_go_on(
    coordinator: TransactionCoordinator,
) -> None:
    info = begin_with(coordinator, "t", ("a", 0))
    seen: list[TxnInfo | None] = []

    def busy(*args: object) -> None:  # runs in end()'s thread: the coordinator must still answer it
        other = begin_with(coordinator, "other", ("b", 0))
        coordinator.end("other", other.producer_epoch, commit=True, marker_writer=Markers(), now_ms=T0)
        seen.append(coordinator.get("t"))

    coordinator.end("t", info.producer_epoch, commit=True, marker_writer=busy, now_ms=T0)
    assert seen[0] is not None and seen[0].state is TxnState.PREPARE_COMMIT
    assert coordinator.get("other").state is TxnState.COMPLETE_COMMIT  # type: ignore[union-attr]


def test_the_decision_is_durable_before_the_first_marker(tmp_path: Path) -> None:
    c = open_coordinator(tmp_path)
    info = begin_with(c, "t", ("a", 0))
    seen: list[TxnState] = []

    def inspecting(*args: object) -> None:
        copy = tmp_path / "copy"
        copy.mkdir()
        shutil.copy(tmp_path / TRANSACTIONS_FILE, copy / TRANSACTIONS_FILE)
        other = open_coordinator(copy)
        seen.append(other.get("t").state)  # type: ignore[union-attr]
        other.close()

    c.end("t", info.producer_epoch, commit=True, marker_writer=inspecting, label="q/7", now_ms=T0)
    assert seen == [TxnState.PREPARE_COMMIT]
    c.close()


def test_a_failed_marker_leaves_the_decision_for_complete_pending(coordinator: TransactionCoordinator) -> None:
    info = begin_with(coordinator, "t", ("a", 0), ("a", 1), ("a", 2))
    with pytest.raises(OSError, match="marker append failed"):
        coordinator.end("t", info.producer_epoch, commit=True, marker_writer=Markers(fail_at=1), now_ms=T0)
    assert coordinator.get("t").state is TxnState.PREPARE_COMMIT  # type: ignore[union-attr]
    assert [t.transactional_id for t in coordinator.open_transactions()] == ["t"]
    markers = Markers()
    assert coordinator.complete_pending(markers, now_ms=T0 + 1) == ["t"]
    assert [(m.partition, m.commit) for m in markers.written] == [(0, True), (1, True), (2, True)]
    assert coordinator.get("t").state is TxnState.COMPLETE_COMMIT  # type: ignore[union-attr]
    assert coordinator.complete_pending(Markers()) == []


def test_complete_pending_tries_every_transaction_and_raises_the_first_failure(
    coordinator: TransactionCoordinator,
) -> None:
    for tid in ("t1", "t2"):
        info = begin_with(coordinator, tid, ("a", 0))
        with pytest.raises(OSError):
            coordinator.end(tid, info.producer_epoch, commit=False, marker_writer=Markers(fail_at=0), now_ms=T0)
    markers = Markers(fail_at=0)
    with pytest.raises(OSError):
        coordinator.complete_pending(markers)
    states = sorted(t.state.value for t in (coordinator.get("t1"), coordinator.get("t2")) if t is not None)
    assert states == ["COMPLETE_ABORT", "PREPARE_ABORT"]
    assert len(coordinator.complete_pending(Markers())) == 1


def test_an_empty_transaction_writes_no_marker(coordinator: TransactionCoordinator) -> None:
    info = coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    markers = Markers()
    assert coordinator.end("t", info.producer_epoch, commit=True, marker_writer=markers, now_ms=T0).commit
    assert markers.written == []


def test_a_write_that_never_leaves_keeps_the_decision_pending(
    coordinator: TransactionCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(coordinator_module, "WRITE_DRAIN_TIMEOUT_S", 0.05)
    info = coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    markers = Markers()
    with coordinator.transactional_write("t", info.producer_epoch, "a", 0):
        with pytest.raises(InvalidTxnState, match="writes still in flight"):
            coordinator.end("t", info.producer_epoch, commit=True, marker_writer=markers, now_ms=T0)
        assert markers.written == []
    assert coordinator.get("t").state is TxnState.PREPARE_COMMIT  # type: ignore[union-attr]
    assert coordinator.complete_pending(markers) == ["t"]
    assert len(markers.written) == 1


def test_abort_and_fence_gives_up_on_a_transaction_another_thread_is_completing(
    coordinator: TransactionCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(coordinator_module, "COMPLETING_WAIT_TIMEOUT_S", 0.05)
    info = begin_with(coordinator, "t", ("a", 0))
    in_marker = threading.Event()
    release = threading.Event()

    def slow(*args: object) -> None:
        in_marker.set()
        release.wait(10)

    ender = threading.Thread(
        target=lambda: coordinator.end("t", info.producer_epoch, commit=False, marker_writer=slow, now_ms=T0)
    )
    ender.start()
    assert in_marker.wait(10)
    assert coordinator.complete_pending(Markers()) == []  # skipped: another thread writes its markers
    with pytest.raises(TransactionInProgress):
        coordinator.abort_and_fence("t", Markers(), now_ms=T0)
    release.set()
    ender.join(10)
    assert coordinator.get("t").state is TxnState.COMPLETE_ABORT  # type: ignore[union-attr]


def test_a_full_disk_changes_nothing(
    tmp_path: Path, coordinator: TransactionCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    size = (tmp_path / TRANSACTIONS_FILE).stat().st_size

    def full(fd: int, data: object, position: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(txnlog.os, "pwrite", full)
    with pytest.raises(DiskFull):
        coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    monkeypatch.undo()
    assert coordinator.get("t") is None
    assert (tmp_path / TRANSACTIONS_FILE).stat().st_size == size
    assert coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0).state is TxnState.ONGOING


def test_a_failed_fsync_makes_the_log_refuse_every_later_change(
    coordinator: TransactionCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a failed fsync the kernel may have dropped the dirty pages: nothing more is written until a reopen."""

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    info = coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)  # the producer id block is reserved already
    coordinator.end("t", info.producer_epoch, commit=False, marker_writer=Markers(), now_ms=T0)
    monkeypatch.setattr(txnlog.os, "fsync", failing)  # os.fsync of the whole process: the test touches nothing else
    with pytest.raises(StorageError, match="cannot fsync"):
        coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    monkeypatch.undo()
    with pytest.raises(StorageError, match="failed earlier"):
        coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)


def test_a_disk_failure_while_expiring_leaves_the_fenced_ones_to_complete_pending(
    coordinator: TransactionCoordinator, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = begin_with(coordinator, "a", ("x", 0))
    begin_with(coordinator, "b", ("x", 1))
    log_file = coordinator._state._file
    real = log_file.append
    calls: list[bytes] = []

    def second_fails(payload: bytes) -> None:
        calls.append(payload)
        if len(calls) == 2:
            raise StorageError("disk gone")
        real(payload)

    monkeypatch.setattr(log_file, "append", second_fails)
    with pytest.raises(StorageError, match="disk gone"):
        coordinator.expire(T0 + TIMEOUT_MS + 1, Markers())
    monkeypatch.undo()
    states = {t.transactional_id: t.state for t in coordinator.open_transactions()}
    assert states == {"a": TxnState.PREPARE_ABORT, "b": TxnState.ONGOING}
    markers = Markers()
    assert coordinator.complete_pending(markers) == ["a"]  # not stuck as "completing"
    assert markers.written == [Marker("x", 0, first.producer_id, first.producer_epoch + 1, False, 0)]


# --- labels -------------------------------------------------------------------------------------------------------


def test_a_label_is_committed_with_the_decision_and_survives_a_restart(tmp_path: Path) -> None:
    c = open_coordinator(tmp_path)
    info = begin_with(c, "t", ("a", 0))
    with pytest.raises(OSError):
        c.end("t", info.producer_epoch, commit=True, marker_writer=Markers(fail_at=0), label="q1/4", now_ms=T0)
    assert c.has_committed_label("q1/4")  # decided: committed, even before the markers
    c.close()
    c = open_coordinator(tmp_path)
    assert c.committed_labels() == {"q1/4"}
    c.complete_pending(Markers())
    assert c.get("t").label == "q1/4"  # type: ignore[union-attr]
    c.close()


def test_labels_go_with_commits_only(coordinator: TransactionCoordinator) -> None:
    info = coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    with pytest.raises(ValueError):
        coordinator.end("t", info.producer_epoch, commit=False, marker_writer=Markers(), label="x", now_ms=T0)
    with pytest.raises(ValueError):
        coordinator.end("t", info.producer_epoch, commit=True, marker_writer=Markers(), label="", now_ms=T0)
    assert coordinator.get("t").state is TxnState.ONGOING  # type: ignore[union-attr]
    assert not coordinator.has_committed_label("x")


def test_the_oldest_labels_go_beyond_labels_max_and_stay_gone_after_reopen(tmp_path: Path) -> None:
    c = TransactionCoordinator.open(tmp_path, ProducerIdAllocator(tmp_path).allocate, labels_max=3)
    for batch in range(5):
        info = c.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
        c.end("t", info.producer_epoch, commit=True, marker_writer=Markers(), label=f"q/{batch}", now_ms=T0)
    assert c.committed_labels() == {"q/2", "q/3", "q/4"}
    c.close()
    c = TransactionCoordinator.open(tmp_path, ProducerIdAllocator(tmp_path).allocate, labels_max=3)
    assert c.committed_labels() == {"q/2", "q/3", "q/4"}
    c.close()


# --- timeouts, takeover, expiration -------------------------------------------------------------------------------


def test_expire_aborts_a_timed_out_transaction_with_a_bumped_epoch(coordinator: TransactionCoordinator) -> None:
    """TransactionCoordinatorTest.shouldAbortExpiredTransactionsInOngoingStateAndBumpEpoch."""
    info = begin_with(coordinator, "t", ("a", 0))
    young = begin_with(coordinator, "young", ("a", 1), now_ms=T0 + 1)
    markers = Markers()
    assert coordinator.expire(T0 + TIMEOUT_MS, markers) == []  # start + timeout < now: not yet
    assert coordinator.expire(T0 + TIMEOUT_MS + 1, markers) == ["t"]
    assert markers.written == [Marker("a", 0, info.producer_id, info.producer_epoch + 1, False, 0)]
    done = coordinator.get("t")
    assert done is not None and done.state is TxnState.COMPLETE_ABORT and done.producer_epoch == 1
    with pytest.raises(ProducerFenced):
        coordinator.add_partition("t", info.producer_epoch, "a", 2)
    with pytest.raises(ProducerFenced):
        coordinator.end("t", info.producer_epoch, commit=True, marker_writer=markers, now_ms=T0)
    assert coordinator.get("young") == young
    assert coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0).producer_epoch == 2


def test_a_transaction_without_a_decision_times_out_after_a_restart(tmp_path: Path) -> None:
    c = open_coordinator(tmp_path)
    info = begin_with(c, "t", ("a", 0), ("b", 0), now_ms=T0)
    c.close()
    c = open_coordinator(tmp_path)
    assert c.complete_pending(Markers()) == []  # ONGOING is left to the timeout
    markers = Markers()
    assert c.expire(T0 + TIMEOUT_MS + 1, markers) == ["t"]
    assert {(m.topic, m.commit, m.producer_epoch) for m in markers.written} == {
        ("a", False, info.producer_epoch + 1),
        ("b", False, info.producer_epoch + 1),
    }
    c.close()


def test_abort_and_fence_takes_over_an_ongoing_transaction(coordinator: TransactionCoordinator) -> None:
    old = begin_with(coordinator, "t", ("a", 0))
    markers = Markers()
    done = coordinator.abort_and_fence("t", markers, now_ms=T0 + 1)
    assert done is not None and done.state is TxnState.COMPLETE_ABORT
    assert done.producer_epoch == old.producer_epoch + 1
    assert markers.written == [Marker("a", 0, old.producer_id, old.producer_epoch + 1, False, 0)]
    with pytest.raises(ProducerFenced), coordinator.transactional_write("t", old.producer_epoch, "a", 0):
        pass
    new = coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0 + 2)
    assert new.producer_epoch == old.producer_epoch + 2


def test_abort_and_fence_keeps_a_commit_that_was_decided(coordinator: TransactionCoordinator) -> None:
    info = begin_with(coordinator, "t", ("a", 0))
    with pytest.raises(OSError):
        coordinator.end("t", info.producer_epoch, commit=True, marker_writer=Markers(fail_at=0), now_ms=T0)
    markers = Markers()
    done = coordinator.abort_and_fence("t", markers, now_ms=T0)
    assert done is not None and done.state is TxnState.COMPLETE_COMMIT
    assert markers.written == [Marker("a", 0, info.producer_id, info.producer_epoch, True, 0)]


def test_abort_and_fence_with_nothing_open(coordinator: TransactionCoordinator) -> None:
    assert coordinator.abort_and_fence("nobody", Markers(), now_ms=T0) is None
    info = coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    done = coordinator.end("t", info.producer_epoch, commit=True, marker_writer=Markers(), now_ms=T0)
    markers = Markers()
    assert coordinator.abort_and_fence("t", markers, now_ms=T0) == done
    assert markers.written == []


def test_a_transactional_id_idle_for_seven_days_is_forgotten(tmp_path: Path) -> None:
    """TransactionStateManagerTest.shouldRemoveCompleteCommitExpiredTransactionalIds."""
    c = open_coordinator(tmp_path)
    info = c.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    c.end("t", info.producer_epoch, commit=True, marker_writer=Markers(), now_ms=T0)
    c.begin("open", timeout_ms=TIMEOUT_MS, now_ms=T0)
    c.expire(T0 + TRANSACTIONAL_ID_EXPIRATION_MS, Markers())
    assert c.get("t") is not None
    c.expire(T0 + TRANSACTIONAL_ID_EXPIRATION_MS + 1, Markers())
    assert c.get("t") is None
    assert c.get("open") is not None  # aborted by its timeout, completed just now: kept
    c.close()
    c = open_coordinator(tmp_path)
    assert c.get("t") is None
    assert c.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0).producer_id > info.producer_id
    c.close()


# --- lifecycle, threads, compaction -------------------------------------------------------------------------------


def test_the_state_survives_a_clean_reopen(tmp_path: Path) -> None:
    c = open_coordinator(tmp_path)
    a = begin_with(c, "a", ("x", 0))
    b = begin_with(c, "b", ("x", 1))
    b = c.end("b", b.producer_epoch, commit=True, marker_writer=Markers(), label="L", now_ms=T0 + 9)
    assert c.coordinator_epoch == 0
    c.close()
    c.close()  # idempotent
    c = open_coordinator(tmp_path)
    assert (c.get("a"), c.get("b"), c.coordinator_epoch) == (a, b, 0)
    assert c.committed_labels() == frozenset({"L"})
    assert [p.name for p in tmp_path.iterdir() if p.is_dir()] == []  # plain files only
    c.close()


def test_calls_after_close_raise_storage_error(coordinator: TransactionCoordinator) -> None:
    coordinator.close()
    with pytest.raises(StorageError):
        coordinator.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    with pytest.raises(StorageError):
        coordinator.complete_pending(Markers())


def test_concurrent_transactions_on_many_threads(coordinator: TransactionCoordinator) -> None:
    markers = Markers()
    lock = threading.Lock()
    errors: list[BaseException] = []

    def locked_markers(*args: object) -> None:
        with lock:
            markers(*args)  # type: ignore[arg-type]

    def run(worker: int) -> None:
        try:
            for round_ in range(10):
                tid = f"w{worker}"
                info = coordinator.begin(tid, timeout_ms=TIMEOUT_MS, now_ms=T0)
                for partition in range(3):
                    with coordinator.transactional_write(tid, info.producer_epoch, f"t{worker}", partition):
                        pass
                coordinator.end(
                    tid, info.producer_epoch, commit=True, marker_writer=locked_markers, label=f"{tid}/{round_}",
                    now_ms=T0,
                )  # fmt: skip
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len(markers.written) == 6 * 10 * 3
    assert len(coordinator.committed_labels()) == 60
    assert {t.producer_id for t in (coordinator.get(f"w{w}") for w in range(6)) if t} == set(range(6))


def test_the_file_is_compacted_while_it_grows_and_keeps_everything(tmp_path: Path) -> None:
    c = open_coordinator(tmp_path, compact_min_bytes=4096)
    for batch in range(200):
        info = begin_with(c, f"t{batch % 5}", ("a", batch % 3))
        c.end(f"t{batch % 5}", info.producer_epoch, commit=True, marker_writer=Markers(), label=f"L{batch}", now_ms=T0)
    size = (tmp_path / TRANSACTIONS_FILE).stat().st_size
    assert size < 4 * 4096 + 200 * 20  # without compaction: 200 × 4 records of ~250 bytes
    state = {f"t{i}": c.get(f"t{i}") for i in range(5)}
    c.close()
    c = open_coordinator(tmp_path)
    assert {f"t{i}": c.get(f"t{i}") for i in range(5)} == state
    assert c.committed_labels() == {f"L{b}" for b in range(200)}
    c.close()


def test_a_grown_file_is_compacted_on_open(tmp_path: Path) -> None:
    c = open_coordinator(tmp_path)
    for _ in range(30):
        info = begin_with(c, "t", ("a", 0))
        c.end("t", info.producer_epoch, commit=False, marker_writer=Markers(), now_ms=T0)
    c.close()
    grown = (tmp_path / TRANSACTIONS_FILE).stat().st_size
    c = open_coordinator(tmp_path, compact_min_bytes=1)
    assert (tmp_path / TRANSACTIONS_FILE).stat().st_size < grown // 10
    assert c.get("t").producer_epoch == 29  # type: ignore[union-attr]
    c.close()


# --- damage to the log --------------------------------------------------------------------------------------------


def append_raw(root: Path, payload: bytes) -> None:
    with open(root / TRANSACTIONS_FILE, "ab") as f:
        f.write(frame(payload))


def three_records(root: Path) -> tuple[TxnInfo, list[int]]:
    """A log whose last three records are t's begin, add_partition and the ONGOING of u; their positions."""
    c = open_coordinator(root)
    info = begin_with(c, "t", ("a", 0))
    c.begin("u", timeout_ms=TIMEOUT_MS, now_ms=T0)
    c.close()
    result = scan(root / TRANSACTIONS_FILE, (root / TRANSACTIONS_FILE).read_bytes())
    return info, [position for position, _ in result.records[-3:]]


@pytest.mark.parametrize("cut", [1, 4, FRAME_HEADER_BYTES, FRAME_HEADER_BYTES + 1, 40])
def test_a_torn_last_record_is_cut_with_a_warning_and_the_rest_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, cut: int
) -> None:
    info, positions = three_records(tmp_path)
    path = tmp_path / TRANSACTIONS_FILE
    size = path.stat().st_size
    os.truncate(path, size - cut)
    with caplog.at_level(logging.WARNING, logger="logfs.core.txn.log"):
        c = open_coordinator(tmp_path)
    assert c.get("t") == info and c.get("u") is None
    dropped = size - cut - positions[-1]
    assert f"cut a torn tail of {dropped} bytes at byte {positions[-1]}" in caplog.text
    assert path.stat().st_size == positions[-1]
    c.begin("u", timeout_ms=TIMEOUT_MS, now_ms=T0)  # appends go on from the cut
    c.close()
    assert open_coordinator(tmp_path).get("u") is not None


@pytest.mark.parametrize("tail", ["zeros", "garbage", "flipped"])
def test_a_damaged_tail_is_cut(tmp_path: Path, caplog: pytest.LogCaptureFixture, tail: str) -> None:
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rng = random.Random(seed)
    info, positions = three_records(tmp_path)
    path = tmp_path / TRANSACTIONS_FILE
    data = bytearray(path.read_bytes())
    if tail == "zeros":
        data += bytes(4096)
        keep = len(data) - 4096
    elif tail == "garbage":
        data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
        keep = len(data) - (len(data) - path.stat().st_size)
    else:
        at = rng.randrange(positions[-1], len(data))  # the length, the CRC or the payload
        data[at] ^= 1 << rng.randrange(8)
        keep = positions[-1]
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="logfs.core.txn.log"):
        c = open_coordinator(tmp_path)
    assert "cut a torn tail" in caplog.text, f"seed={seed}"
    assert c.get("t") == info
    assert path.stat().st_size == keep
    c.close()


def test_a_damaged_record_before_intact_ones_is_a_typed_error_and_nothing_is_cut(tmp_path: Path) -> None:
    _, positions = three_records(tmp_path)
    path = tmp_path / TRANSACTIONS_FILE
    data = bytearray(path.read_bytes())
    data[positions[-2] + FRAME_HEADER_BYTES + 3] ^= 0x20
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptTransactionLog, match="CRC-32C mismatch") as info:
        open_coordinator(tmp_path)
    assert info.value.position == positions[-2]
    assert path.read_bytes() == bytes(data)


def test_a_record_that_passes_its_crc_but_does_not_parse_is_a_typed_error(tmp_path: Path) -> None:
    three_records(tmp_path)
    path = tmp_path / TRANSACTIONS_FILE
    position = path.stat().st_size
    append_raw(tmp_path, b'{"type":"txn","transactional_id":"t","state":"NOPE"}')
    with pytest.raises(CorruptTransactionLog, match="unreadable record") as info:
        open_coordinator(tmp_path)
    assert info.value.position == position
    path.write_bytes(path.read_bytes()[:position])
    append_raw(tmp_path, b"not json")
    with pytest.raises(CorruptTransactionLog):
        open_coordinator(tmp_path)


def test_a_file_without_the_magic_is_a_typed_error(tmp_path: Path) -> None:
    (tmp_path / TRANSACTIONS_FILE).write_bytes(b"hello world, not a log")
    with pytest.raises(CorruptTransactionLog) as info:
        open_coordinator(tmp_path)
    assert info.value.position == 0
    (tmp_path / TRANSACTIONS_FILE).write_bytes(MAGIC[:4])
    with pytest.raises(CorruptTransactionLog):
        open_coordinator(tmp_path)


def test_a_new_log_holds_the_magic_and_the_coordinator_epoch(tmp_path: Path) -> None:
    """The worked example of core/txn/log.py's docstring."""
    open_coordinator(tmp_path).close()
    data = (tmp_path / TRANSACTIONS_FILE).read_bytes()
    assert data[:16] == MAGIC + bytes.fromhex("0000002c 8a63a679")
    assert data.startswith(MAGIC)
    result = scan(tmp_path / TRANSACTIONS_FILE, data)
    assert [json.loads(p) for _, p in result.records] == [{"type": "coordinator", "coordinator_epoch": 0}]


@pytest.mark.parametrize(
    "record",
    [
        TxnInfo("t", 7, 3, TxnState.PREPARE_COMMIT, frozenset({TopicPartition("a", 1)}), T0, TIMEOUT_MS, T0 + 1, "q/1"),
        TxnInfo("t", 0, 0, TxnState.ONGOING, frozenset(), -1, 1, 0),
        TxnInfo("t", 0, 0, TxnState.ONGOING, frozenset(), -1, 1, 0, owner=(1001, 0)),
        TxnInfo("t", 0, 0, TxnState.ONGOING, frozenset(), -1, 1, 0, owner=(2**32 - 1, 2**32 - 1)),
        ExpiredId("t"),
        CommittedLabels(("q/1", "ü/2")),
        CoordinatorEpoch(0),
    ],
)
def test_every_record_type_reads_back_as_written(record: Record) -> None:
    assert decode_record(encode_record(record)) == record


@pytest.mark.parametrize(
    "payload",
    [
        b'{"type":"txn"}',
        b'{"type":"txn","transactional_id":".x","producer_id":0,"producer_epoch":0,"state":"ONGOING",'
        b'"partitions":[],"start_ms":0,"timeout_ms":1,"last_update_ms":0,"label":null}',
        b'{"type":"txn","transactional_id":"t","producer_id":0,"producer_epoch":32768,"state":"ONGOING",'
        b'"partitions":[],"start_ms":0,"timeout_ms":1,"last_update_ms":0,"label":null}',
        b'{"type":"txn","transactional_id":"t","producer_id":0,"producer_epoch":0,"state":"ONGOING",'
        b'"partitions":[["a","0"]],"start_ms":0,"timeout_ms":1,"last_update_ms":0,"label":null}',
        *(b'{"type":"txn","transactional_id":"t","producer_id":0,"producer_epoch":0,"state":"ONGOING",'
          b'"partitions":[],"start_ms":0,"timeout_ms":1,"last_update_ms":0,"label":null,"owner":' + owner + b"}"
          for owner in (b"[1]", b"[1,2,3]", b"[-1,0]", b"[4294967296,0]", b'["0",0]', b"[true,0]", b"7")),
        b'{"type":"labels","labels":[1]}',
        b'{"type":"coordinator","coordinator_epoch":true}',
        b'{"type":"unknown"}',
        b"[]",
    ],
)
def test_a_malformed_record_is_refused_by_name(payload: bytes) -> None:
    with pytest.raises((ValueError, InvalidTransactionalId)):
        decode_record(payload)


# --- kill -9 ----------------------------------------------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from logfs.core.txn.coordinator import TransactionCoordinator
    from logfs.core.txn.producerids import ProducerIdAllocator

    root, mode, rounds = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    c = TransactionCoordinator.open(root, ProducerIdAllocator(root, block_size=3).allocate)
    calls = 0

    def markers(topic, partition, pid, epoch, commit, coordinator_epoch):
        global calls
        calls += 1
        with open(root / "markers", "a") as f:
            f.write(f"{topic} {partition} {pid} {epoch} {int(commit)}\\n")
        if mode == "kill-at-marker" and calls == 2:
            os.kill(os.getpid(), signal.SIGKILL)

    if mode == "stream":
        for n in range(1_000_000):
            tid = f"t{n % 4}"
            info = c.begin(tid, timeout_ms=60000, now_ms=1000 + n)
            for p in range(n % 3 + 1):
                c.add_partition(tid, info.producer_epoch, "a", p)
            commit = n % 2 == 0
            c.end(tid, info.producer_epoch, commit=commit, marker_writer=markers,
                  label=f"q/{n}" if commit else None, now_ms=1000 + n)
            print(f"ended {tid} {info.producer_id} {info.producer_epoch} {int(commit)} {n}", flush=True)
    else:
        info = c.begin("t", timeout_ms=60000, now_ms=1000)
        for p in range(3):
            c.add_partition("t", info.producer_epoch, "a", p)
        print(f"begun {info.producer_id} {info.producer_epoch}", flush=True)
        if mode == "kill-before-end":
            os.kill(os.getpid(), signal.SIGKILL)
        c.end("t", info.producer_epoch, commit=True, marker_writer=markers, label="q/1", now_ms=1001)
    """
)


def run_child(root: Path, mode: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-u", "-c", _CHILD, str(root), mode, "0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=root,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    return done.stdout.split("\n")


def test_a_kill_after_the_decision_is_completed_by_complete_pending(tmp_path: Path) -> None:
    lines = run_child(tmp_path, "kill-at-marker")
    pid, epoch = map(int, lines[0].split()[1:])
    assert (tmp_path / "markers").read_text().splitlines() == [f"a 0 {pid} {epoch} 1", f"a 1 {pid} {epoch} 1"]
    c = open_coordinator(tmp_path)
    pending = c.get("t")
    assert pending is not None and pending.state is TxnState.PREPARE_COMMIT
    assert c.has_committed_label("q/1")
    with pytest.raises(TransactionInProgress):
        c.begin("t", timeout_ms=TIMEOUT_MS, now_ms=T0)
    markers = Markers()
    assert c.complete_pending(markers) == ["t"]
    assert [(m.partition, m.producer_id, m.producer_epoch, m.commit) for m in markers.written] == [
        (p, pid, epoch, True) for p in range(3)
    ]
    assert c.get("t").state is TxnState.COMPLETE_COMMIT  # type: ignore[union-attr]
    c.close()


def test_a_kill_before_the_decision_is_aborted_by_the_timeout(tmp_path: Path) -> None:
    lines = run_child(tmp_path, "kill-before-end")
    pid, epoch = map(int, lines[0].split()[1:])
    assert not (tmp_path / "markers").exists()
    c = open_coordinator(tmp_path)
    assert c.complete_pending(Markers()) == []
    assert c.expire(1000 + 60_000, Markers()) == []
    markers = Markers()
    assert c.expire(1000 + 60_001, markers) == ["t"]
    assert [(m.partition, m.producer_id, m.producer_epoch, m.commit) for m in markers.written] == [
        (p, pid, epoch + 1, False) for p in range(3)
    ]
    assert not c.has_committed_label("q/1")
    c.close()


def test_every_acknowledged_end_survives_kill_9_in_a_stream(tmp_path: Path) -> None:
    """Rounds of a child ending transactions until SIGKILL: each end it acknowledged is complete or pending with its
    decision, labels of acknowledged commits are committed, producer ids never repeat across transactional ids."""
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rng = random.Random(seed)
    for _ in range(3):
        child = subprocess.Popen(
            [sys.executable, "-u", "-c", _CHILD, str(tmp_path), "stream", "0"],
            stdout=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        assert child.stdout is not None
        acknowledged: list[list[str]] = []
        try:
            for _ in range(rng.randint(1, 40)):
                line = child.stdout.readline()
                assert line, "the child ended early"
                acknowledged.append(line.split())
            os.kill(child.pid, signal.SIGKILL)
            rest = child.stdout.read()  # the same buffered reader: communicate() would skip what it holds
            child.wait(30)
            acknowledged.extend(line.split() for line in rest.splitlines())
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        c = open_coordinator(tmp_path)
        c.complete_pending(Markers())
        latest: dict[str, list[str]] = {}
        for _, tid, pid, epoch, commit, n in acknowledged:
            latest[tid] = [pid, epoch, commit, n]
            if commit == "1":
                assert c.has_committed_label(f"q/{n}"), f"seed={seed}"
        for tid, (pid, epoch, commit, _) in latest.items():
            info = c.get(tid)
            assert info is not None and info.producer_id == int(pid), f"seed={seed}"
            assert info.producer_epoch >= int(epoch), f"seed={seed}"
            if info.producer_epoch == int(epoch):
                assert info.state is (TxnState.COMPLETE_COMMIT if commit == "1" else TxnState.COMPLETE_ABORT)
        pids = [c.get(f"t{i}") for i in range(4)]
        known = [t.producer_id for t in pids if t is not None]
        assert len(set(known)) == len(known), f"seed={seed}"
        # Whatever was ONGOING at the kill is aborted by its timeout; then the next round starts clean.
        c.expire(10**12, Markers())
        assert c.open_transactions() == []
        c.close()


def test_queries_never_wait_for_a_change_in_progress(coordinator: TransactionCoordinator) -> None:
    """The mount asks get/open_transactions/has_committed_label on its trio thread (lookups under
    .logfs/transactions/ and .logfs/labels/): they must answer while a change holds the coordinator's lock across
    its fsync, which is simulated here by holding that lock in another thread."""
    info = begin_with(coordinator, "q", ("a", 0))
    held, release = threading.Event(), threading.Event()

    def change_in_progress() -> None:
        with coordinator._lock:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=change_in_progress)
    thread.start()
    try:
        assert held.wait(5)
        answers: list[object] = []
        reader = threading.Thread(target=lambda: answers.extend([
            coordinator.get("q"), coordinator.open_transactions(), coordinator.has_committed_label("x"),
            coordinator.committed_labels(),
        ]))  # fmt: skip
        reader.start()
        reader.join(1)
        assert not reader.is_alive(), "a query waited for the change lock"
        assert answers == [info, [info], False, frozenset()]
    finally:
        release.set()
        thread.join()
