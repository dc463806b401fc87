"""Idempotent producers on a real log: duplicates stored once, out-of-order sequences and fenced epochs refused with
nothing stored (Kafka's ProducerStateManagerTest and UnifiedLogTest idempotence rules), and the producer snapshot
format of Kafka's ``ProducerStateManager.writeSnapshot``. Producer batches come from kafka-python's
DefaultRecordBatchBuilder (the oracle)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from logfs.core.config import LogConfig
from logfs.core.errors import CorruptSnapshot, InvalidTxnState, OutOfOrderSequence, ProducerFenced
from logfs.core.format.batch import read_header
from logfs.core.format.decode import decode_records
from logfs.core.format.varint import INT32_MAX
from logfs.core.log.handles import HandleCache
from logfs.core.log.loader import load_log
from logfs.core.log.log import Isolation, Log
from logfs.core.txn.producerentry import BatchMetadata, ProducerStateEntry, decrement_sequence
from logfs.core.txn.producersnapshot import (
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    snapshot_path,
)
from logfs.core.txn.producerstate import ProducerStateManager

EPOCH = 0  # the leader epoch of every append


def kafka_batch(pid: int, epoch: int, seq: int, n: int = 1, *, txn: bool = False, ts: int = 1000) -> bytes:
    """A producer's batch as kafka-python builds it (offset 0, ``n`` records)."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=txn, producer_id=pid, producer_epoch=epoch,
        base_sequence=seq, batch_size=1 << 20,
    )  # fmt: skip
    for i in range(n):
        builder.append(i, timestamp=ts + i, key=None, value=b"value-%d" % (seq + i), headers=[])
    return bytes(builder.build())


def open_log(directory: Path, *, clean: bool = True, **config: int) -> Log:
    return load_log(directory, LogConfig(**config), HandleCache(), had_clean_shutdown=clean)


@pytest.fixture
def log(tmp_path: Path) -> Log:
    return open_log(tmp_path / "topic-0")


def stored_values(log: Log) -> list[bytes | None]:
    data = log.read(log.log_start_offset, 1 << 30, Isolation.LOG_END).records
    out = []
    position = 0
    while position < len(data):
        h = read_header(data, position)
        out.extend(r.value for r in decode_records(data, position))
        position += h.size
    return out


# --- duplicates, sequences, epochs -------------------------------------------------------------------------------


def test_duplicate_is_stored_once_and_answers_with_the_original_offsets(log: Log) -> None:
    """UnifiedLogTest.testDuplicateAppends: a retried batch is not written again."""
    first = log.append_as_leader(kafka_batch(1, 0, 0, 3), EPOCH)
    log.append_as_leader(kafka_batch(1, 0, 3, 2), EPOCH)
    size = log.size_bytes
    again = log.append_as_leader(kafka_batch(1, 0, 0, 3), EPOCH)
    assert again.duplicate and (again.first_offset, again.last_offset) == (first.first_offset, first.last_offset) == (
        0,
        2,
    )
    assert (again.records_count, again.size_bytes) == (0, 0)
    assert log.size_bytes == size and log.log_end_offset == 5
    assert stored_values(log) == [b"value-%d" % i for i in range(5)]


def test_only_the_last_five_batches_are_recognised(log: Log) -> None:
    """ProducerStateEntry keeps NUM_BATCHES_TO_RETAIN = 5 batches: the sixth-newest is out of sequence, not a retry."""
    for seq in range(6):
        log.append_as_leader(kafka_batch(1, 0, seq), EPOCH)
    assert log.append_as_leader(kafka_batch(1, 0, 1), EPOCH).duplicate
    with pytest.raises(OutOfOrderSequence):
        log.append_as_leader(kafka_batch(1, 0, 0), EPOCH)
    assert log.log_end_offset == 6


@pytest.mark.parametrize("seq", [0, 2, 4, 7])
def test_out_of_order_sequence_stores_nothing(log: Log, seq: int) -> None:
    """UnifiedLogTest.testNonSequentialAppend: a gap or a partial overlap is OutOfOrderSequence."""
    log.append_as_leader(kafka_batch(1, 0, 0, 3), EPOCH)
    log.append_as_leader(kafka_batch(1, 0, 3, 2), EPOCH)  # sequences 0..4 stored
    size = log.size_bytes
    with pytest.raises(OutOfOrderSequence):
        log.append_as_leader(kafka_batch(1, 0, seq, 2), EPOCH)  # neither 5 nor a retained (first, last)
    assert log.size_bytes == size and log.log_end_offset == 5
    assert log.append_as_leader(kafka_batch(1, 0, 5), EPOCH).first_offset == 5


def test_older_epoch_is_fenced_and_stores_nothing(log: Log) -> None:
    """ProducerStateManagerTest.testProducerFenced (an older epoch than the known one)."""
    log.append_as_leader(kafka_batch(1, 5, 0), EPOCH)
    with pytest.raises(ProducerFenced):
        log.append_as_leader(kafka_batch(1, 4, 1), EPOCH)
    assert log.log_end_offset == 1


def test_new_epoch_must_start_at_sequence_zero(log: Log) -> None:
    """ProducerStateManagerTest.testInvalidSequenceWithNewEpoch / testProducerEpochBump."""
    log.append_as_leader(kafka_batch(1, 0, 0, 2), EPOCH)
    with pytest.raises(OutOfOrderSequence):
        log.append_as_leader(kafka_batch(1, 1, 2), EPOCH)
    assert log.append_as_leader(kafka_batch(1, 1, 0), EPOCH).first_offset == 2
    # the old epoch's batches are forgotten with it: its retry is now fenced, not a duplicate
    with pytest.raises(ProducerFenced):
        log.append_as_leader(kafka_batch(1, 0, 0, 2), EPOCH)


def test_unknown_producer_may_start_at_any_sequence(log: Log) -> None:
    """ProducerStateManagerTest.testAcceptAppendWithoutProducerStateOnReplica (KIP-360): no known epoch, no check."""
    assert log.append_as_leader(kafka_batch(9, 3, 42), EPOCH).first_offset == 0
    with pytest.raises(OutOfOrderSequence):
        log.append_as_leader(kafka_batch(9, 3, 44), EPOCH)


def test_sequence_wraps_at_int32_max(log: Log) -> None:
    """ProducerStateManagerTest.testSequenceWrapAround: after INT32_MAX comes 0."""
    log.append_as_leader(kafka_batch(1, 0, INT32_MAX - 1, 2), EPOCH)  # INT32_MAX - 1, INT32_MAX
    assert log.append_as_leader(kafka_batch(1, 0, 0), EPOCH).first_offset == 2
    assert log.append_as_leader(kafka_batch(1, 0, INT32_MAX - 1, 2), EPOCH).duplicate


def test_plain_batch_during_an_open_transaction_is_refused(log: Log) -> None:
    """ProducerStateManagerTest.testNonTransactionalAppendWithOngoingTransaction."""
    log.append_as_leader(kafka_batch(1, 0, 0, txn=True), EPOCH)
    with pytest.raises(InvalidTxnState):
        log.append_as_leader(kafka_batch(1, 0, 1), EPOCH)
    assert log.log_end_offset == 1


def test_non_idempotent_batches_touch_no_state(log: Log) -> None:
    for _ in range(3):
        log.append_as_leader(kafka_batch(-1, -1, -1, 2), EPOCH)
    assert log.producer_state.producers == {}
    assert log.log_end_offset == 6


def test_follower_applies_without_checks_and_dedupes_like_the_leader(tmp_path: Path) -> None:
    """A follower takes the leader's state (no sequence checks), so after failover a retry is still a duplicate."""
    leader = open_log(tmp_path / "l-0")
    follower = open_log(tmp_path / "f-0")
    for seq in (0, 3):
        leader.append_as_leader(kafka_batch(1, 2, seq, 3), EPOCH)
    follower.append_as_follower(leader.read(0, 1 << 20, Isolation.LOG_END).records)
    assert follower.producer_state.producers == leader.producer_state.producers
    retry = follower.append_as_leader(kafka_batch(1, 2, 3, 3), EPOCH)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (3, 5)


# --- the snapshot format ---------------------------------------------------------------------------------------------


def test_snapshot_bytes_match_a_hand_built_file() -> None:
    entry = SnapshotEntry(5, 2, 14, 104, 4, 1000, -1, -1)
    body = bytes.fromhex(
        "00000001000000000000000500020000000e00000000000000680000000400000000000003e8ffffffffffffffffffffffff"
    )
    expected = struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    assert encode_snapshot([entry]) == expected
    assert decode_snapshot(expected, "x") == [entry]


@pytest.mark.parametrize(
    "damage",
    ["crc", "version", "short", "count"],
)
def test_damaged_snapshot_is_refused(damage: str) -> None:
    data = bytearray(encode_snapshot([SnapshotEntry(5, 2, 14, 104, 4, 1000, -1, -1)]))
    if damage == "crc":
        data[-1] ^= 1
    elif damage == "version":
        data[1] = 2
    elif damage == "short":
        del data[-3:]
    else:
        data[9] = 2  # two producers announced, one present: the CRC still covers it, so recompute it
        data[2:6] = struct.pack(">I", crc32c.crc32c(bytes(data[6:])))
    with pytest.raises(CorruptSnapshot):
        decode_snapshot(bytes(data), "x")


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**63 - 1),
            st.integers(0, 2**15 - 1),
            st.integers(-1, INT32_MAX),
            st.integers(-1, 2**62),
            st.integers(0, INT32_MAX),
            st.integers(-1, 2**62),
            st.integers(-1, INT32_MAX),
            st.integers(-1, 2**62),
        ),
        max_size=20,
    )
)
def test_snapshot_roundtrip(entries: list[tuple[int, ...]]) -> None:
    snapshot = [SnapshotEntry(*e) for e in entries]
    assert decode_snapshot(encode_snapshot(snapshot), "x") == snapshot


def test_decrement_sequence_inverts_the_wraparound() -> None:
    assert decrement_sequence(1, 3) == INT32_MAX - 1
    assert BatchMetadata(2, 10, 4, 0).first_seq == INT32_MAX - 1


def test_snapshot_written_and_loaded_by_the_manager(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(kafka_batch(1, 0, 0, 3), EPOCH)
    log.append_as_leader(kafka_batch(2, 1, 0, 2, txn=True), EPOCH)
    state = log.producer_state
    state.update_map_end_offset(log.log_end_offset)
    path = state.take_snapshot(sync=True)
    assert path == snapshot_path(tmp_path / "t-0", 5)
    again = ProducerStateManager(tmp_path / "t-0")
    assert again.load_snapshot(5) == 5
    assert again.producers == {
        1: ProducerStateEntry(1, 0, -1, 1002, -1, (BatchMetadata(2, 2, 2, 1002),)),
        2: ProducerStateEntry(2, 1, -1, 1001, 3, (BatchMetadata(1, 4, 1, 1001),)),
    }
    assert again.open_transactions() == [(2, 3)]


def test_roll_writes_a_snapshot_named_after_the_new_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(kafka_batch(1, 0, 0, 3), EPOCH)
    log.roll()
    assert sorted(p.name for p in (tmp_path / "t-0").glob("*.snapshot")) == ["00000000000000000003.snapshot"]
    log.append_as_leader(kafka_batch(1, 0, 3, 1), EPOCH)
    log.close()
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.snapshot"))
    assert names == ["00000000000000000003.snapshot", "00000000000000000004.snapshot"]
    reopened = open_log(tmp_path / "t-0")
    assert reopened.append_as_leader(kafka_batch(1, 0, 3, 1), EPOCH).duplicate


def test_reload_equals_the_live_state(tmp_path: Path) -> None:
    """Snapshot + replay after an unclean stop gives the state the live log had (seeded, several producers)."""
    import random

    seed = 20261122
    print("seed", seed)
    rng = random.Random(seed)
    log = open_log(tmp_path / "t-0", segment_bytes=2000)
    seqs = dict.fromkeys(range(1, 6), 0)
    for _ in range(200):
        pid = rng.randrange(1, 6)
        n = rng.randrange(1, 4)
        log.append_as_leader(kafka_batch(pid, 0, seqs[pid], n), EPOCH)
        seqs[pid] += n
    live = log.producer_state.producers
    assert len(log.segments) > 3
    log.flush()
    reopened = open_log(tmp_path / "t-0", clean=False, segment_bytes=2000)
    # a snapshot keeps only each producer's newest batch: compare that and the epochs
    assert {p: (e.producer_epoch, e.batches[-1]) for p, e in reopened.producer_state.producers.items()} == {
        p: (e.producer_epoch, e.batches[-1]) for p, e in live.items()
    }
    os.sync()


def test_idle_producers_expire_but_not_with_an_open_transaction(log: Log) -> None:
    """ProducerStateManagerTest.testProducerStateAfterExpiration: idle for producer.id.expiration.ms → forgotten."""
    log.append_as_leader(kafka_batch(1, 0, 0, ts=1000), EPOCH)
    log.append_as_leader(kafka_batch(2, 0, 0, txn=True, ts=1000), EPOCH)
    assert log.remove_expired_producers(now_ms=1000 + 86_400_000 - 1) == 0
    assert log.remove_expired_producers(now_ms=1000 + 86_400_000) == 1
    assert set(log.producer_state.producers) == {2}
    # forgotten: the producer's epoch is unknown again, so any sequence is taken (KIP-360)
    assert log.append_as_leader(kafka_batch(1, 0, 7), EPOCH).first_offset == 2
