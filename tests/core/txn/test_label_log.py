"""Committed labels in a real store's ``__transaction_state`` (core/txn/labellog.py): replayed at every store open
and by catch-up, tombstones forget, the per-partition cap is kept by tombstones in the same batch, a truncated
partition is replayed again, a record that is not a transaction-log record is skipped with a warning, and Kafka's
own transaction records (ids' states) are passed over."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from logfs.core.format.batch import Record
from logfs.core.format.encode import encode_batch
from logfs.core.log.log import Log
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig
from logfs.core.txn.labellog import ReplicatedLabels, ensure_transaction_state_topic, label_batch
from logfs.core.txn.records import (
    TRANSACTION_STATE_PARTITIONS,
    TRANSACTION_STATE_TOPIC,
    encode_txn_key,
    encode_txn_value,
)
from logfs.core.txn.state import TxnInfo, TxnState


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def store(root: Path) -> Iterator[Store]:
    s = Store.open(root, StoreConfig())
    yield s
    s.close()


def append(store: Store, partition: int, batch: bytes) -> Log:
    log = store.log(TRANSACTION_STATE_TOPIC, partition)
    log.append_as_leader(bytearray(batch), 0)
    log.update_high_watermark(log.log_end_offset)
    return log


def test_the_topic_is_kafkas_compacted_50_partitions_and_a_store_reopened_knows_its_labels(root: Path) -> None:
    store = Store.open(root, StoreConfig())
    try:
        assert store.transactions is not None
        assert not store.transactions.has_committed_label("q/1")
        ensure_transaction_state_topic(store)
        ensure_transaction_state_topic(store)  # a second call changes nothing
        assert store.partitions(TRANSACTION_STATE_TOPIC) == list(range(TRANSACTION_STATE_PARTITIONS))
        assert "compact" in store.topic_overrides(TRANSACTION_STATE_TOPIC)["cleanup.policy"]
        append(store, 7, label_batch("q/1", [], 1000))
        append(store, 9, label_batch("q/2", [], 2000))
        assert not store.transactions.has_committed_label("q/1")  # not replayed yet: this store did not add it
    finally:
        store.close()
    reopened = Store.open(root, StoreConfig())
    try:
        assert reopened.transactions is not None
        # the file never saw these labels (another leader committed them): the topic alone tells
        assert reopened.transactions.has_committed_label("q/1") and reopened.transactions.has_committed_label("q/2")
        assert not reopened.transactions.has_committed_label("q/3")
    finally:
        reopened.close()


def test_catch_up_reads_only_what_is_new_and_tombstones_forget(store: Store) -> None:
    ensure_transaction_state_topic(store)
    labels = ReplicatedLabels()
    append(store, 0, label_batch("a", [], 1))
    labels.catch_up(store)
    assert labels.has("a")
    append(store, 0, label_batch("b", ["a"], 2))  # b, and a forgotten in the same batch
    labels.catch_up(store)
    assert labels.has("b") and not labels.has("a")


def test_the_cap_per_partition_is_kept_by_tombstones_of_the_oldest(store: Store) -> None:
    ensure_transaction_state_topic(store)
    labels = ReplicatedLabels(per_partition=3)
    for i in range(5):
        forgotten = labels.beyond_cap(4)
        append(store, 4, label_batch(f"l{i}", forgotten, i))
        labels.add(4, f"l{i}", forgotten)
    assert [labels.has(f"l{i}") for i in range(5)] == [False, False, True, True, True]
    assert labels.beyond_cap(5) == []  # another partition has its own cap
    replayed = ReplicatedLabels(per_partition=3)
    replayed.catch_up(store)
    assert [replayed.has(f"l{i}") for i in range(5)] == [False, False, True, True, True]


def test_a_truncated_partition_is_replayed_from_its_start(store: Store) -> None:
    ensure_transaction_state_topic(store)
    labels = ReplicatedLabels()
    log = append(store, 1, label_batch("kept", [], 1))
    append(store, 1, label_batch("cut", [], 2))
    labels.catch_up(store)
    assert labels.has("cut")
    log.truncate_to(1)  # a follower's divergent tail dropped
    labels.catch_up(store)
    assert labels.has("kept") and not labels.has("cut")


def test_foreign_records_are_skipped_and_kafkas_transaction_records_passed_over(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    ensure_transaction_state_topic(store)
    info = TxnInfo("job", 1, 0, TxnState.COMPLETE_COMMIT, frozenset(), 0, 60000, 5)
    foreign = [Record(0, 1, b"\x00", b"junk"), Record(1, 1, encode_txn_key("job"), encode_txn_value(info)),
               Record(2, 1, b"\x7f\xff\x00\x01x", b"\x00\x00bad")]  # fmt: skip
    append(store, 2, encode_batch(foreign))
    append(store, 2, label_batch("after", [], 3))
    labels = ReplicatedLabels()
    with caplog.at_level(logging.WARNING, logger="logfs.core.txn.labellog"):
        labels.catch_up(store)
    assert labels.has("after") and not labels.has("x")
    assert sum("not a transaction-log record" in r.getMessage() for r in caplog.records) == 2, caplog.text
