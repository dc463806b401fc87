"""The transaction index (``.txnindex``): Kafka's TransactionIndexTest scenarios and the file
rules of Kafka's TransactionIndex, on real files."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from logfs.core.errors import CorruptIndex, InvalidOffset
from logfs.core.txn.index import ENTRY_BYTES, AbortedTxn, TransactionIndex, TxnIndexSearchResult

KAFKA_ENTRIES = [
    AbortedTxn(0, 0, 10, 11),
    AbortedTxn(1, 5, 15, 13),
    AbortedTxn(2, 18, 35, 25),
    AbortedTxn(3, 32, 50, 40),
]


@pytest.fixture
def index(tmp_path: Path) -> TransactionIndex:
    return TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)


def test_collect_aborted_transactions(index: TransactionIndex) -> None:
    """TransactionIndexTest.testCollectAbortedTransactions."""
    for txn in KAFKA_ENTRIES:
        index.append(txn)
    assert index.collect(0, 100) == TxnIndexSearchResult(KAFKA_ENTRIES, False)
    assert index.collect(0, 32) == TxnIndexSearchResult(KAFKA_ENTRIES[:3], True)
    assert index.collect(0, 35) == TxnIndexSearchResult(KAFKA_ENTRIES, True)
    assert index.collect(11, 35) == TxnIndexSearchResult(KAFKA_ENTRIES[1:], True)
    assert index.collect(20, 41) == TxnIndexSearchResult(KAFKA_ENTRIES[2:], False)


def test_truncate(index: TransactionIndex) -> None:
    """TransactionIndexTest.testTruncate."""
    for txn in KAFKA_ENTRIES:
        index.append(txn)
    index.truncate_to(51)
    assert list(index.entries()) == KAFKA_ENTRIES
    index.truncate_to(50)
    assert list(index.entries()) == KAFKA_ENTRIES[:3]
    assert index.path.stat().st_size == 3 * ENTRY_BYTES
    index.reset()
    assert index.entries() == ()
    assert index.path.stat().st_size == 0


def test_file_is_created_only_by_the_first_append(index: TransactionIndex) -> None:
    index.truncate_to(0)
    index.reset()
    assert not index.path.exists()
    index.append(KAFKA_ENTRIES[0])
    assert index.path.stat().st_size == ENTRY_BYTES


def test_entry_bytes_are_kafkas(index: TransactionIndex) -> None:
    index.append(AbortedTxn(7, 100, 106, 102))
    expected = bytes.fromhex("000000000000000000070000000000000064000000000000006a0000000000000066")
    assert index.path.read_bytes() == expected
    assert TransactionIndex(index.path, 0).entries() == (AbortedTxn(7, 100, 106, 102),)


def test_last_offset_must_strictly_increase(index: TransactionIndex) -> None:
    index.append(AbortedTxn(0, 0, 10, 11))
    with pytest.raises(InvalidOffset):
        index.append(AbortedTxn(1, 5, 10, 11))
    assert index.path.stat().st_size == ENTRY_BYTES


def test_sanity_check_refuses_an_entry_below_the_base(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.txnindex"
    path.write_bytes(AbortedTxn(1, 50, 99, 100).encode())
    with pytest.raises(CorruptIndex):
        TransactionIndex(path, 100).sanity_check()


@pytest.mark.parametrize(
    "damage",
    [b"\x00" * 33, struct.pack(">hqqqq", 1, 0, 0, 10, 11)],
    ids=["partial-entry", "unknown-version"],
)
def test_sanity_check_refuses_damaged_bytes(tmp_path: Path, damage: bytes) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(damage)
    with pytest.raises(CorruptIndex):
        TransactionIndex(path, 0).sanity_check()


def test_reopened_index_reads_the_file(index: TransactionIndex) -> None:
    for txn in KAFKA_ENTRIES:
        index.append(txn)
    again = TransactionIndex(index.path, 0)
    again.sanity_check()
    assert list(again.entries()) == KAFKA_ENTRIES
    assert again.path.read_bytes() == b"".join(t.encode() for t in KAFKA_ENTRIES)
