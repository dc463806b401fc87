"""Kafka's LogCleanerTest and LogCleanerManagerTest scenarios, ported with Kafka's numbers.

Each test builds a log as Kafka's does (``LogCleanerTest.logConfig``: segment.bytes 1024, segment.index.bytes 1024,
cleanup.policy compact; ``record(k, v)`` single-record batches), rolls so that what was appended is cleanable, and
runs one round (``clean_log`` of core/log/cleaner/clean.py, Kafka's ``cleaner.clean(LogToClean(…))``) from the
first dirty offset the Kafka test gives, up to the active segment. ``makeCleaner(n)`` is an offset map of
``floor(n * 0.75)`` keys.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from compaction_log import (
    LARGE_TIMESTAMP,
    append,
    batches,
    clean,
    compact_config,
    data_records,
    int_record,
    keys,
    last_offsets,
    make_cleaner_map,
    now_ms,
    offsets,
    open_log,
    record,
    records,
)

from logfs.core.format.batch import Record
from logfs.core.format.encode import encode_batch
from logfs.core.log.cleaner.clean import CleanStats, build_offset_map
from logfs.core.log.cleaner.merge import SegmentSizes, plan_merges
from logfs.core.log.log import Log
from logfs.core.txn.index import AbortedTxn

DAY_MS = 86_400_000


def keys_0_1_0_1_0(tmp_path: Path) -> Log:
    log = open_log(tmp_path / "topic-0")
    for k in (0, 1, 0, 1, 0):
        append(log, int_record(k, k))
    log.roll()
    return log


def test_partial_segment_clean(tmp_path: Path) -> None:
    """S3 testPartialSegmentClean: a map of one key cleans one record per round."""
    log = keys_0_1_0_1_0(tmp_path)
    offset_map = make_cleaner_map(2)
    assert clean(log, 2, offset_map).end_offset == 3
    assert (keys(log), offsets(log)) == ([1, 0, 1, 0], [1, 2, 3, 4])
    clean(log, 3, offset_map)
    assert (keys(log), offsets(log)) == ([0, 1, 0], [2, 3, 4])
    clean(log, 4, offset_map)
    assert (keys(log), offsets(log)) == ([1, 0], [3, 4])


def test_log_cleaner_stats(tmp_path: Path) -> None:
    """S4 testLogCleanerStats: what a round read and wrote."""
    log = keys_0_1_0_1_0(tmp_path)
    size_before = log.size_bytes
    stats = clean(log, 2, make_cleaner_map(4))
    assert stats.end_offset == 5
    assert (stats.messages_read, stats.messages_written) == (5, 2)
    assert (stats.bytes_read, stats.bytes_written) == (size_before, log.size_bytes)


def test_build_partial_offset_map(tmp_path: Path) -> None:
    """S5 testBuildPartialOffsetMap: a map of two keys built from offset 2 of keys 0..4."""
    log = open_log(tmp_path / "topic-0")
    for k in range(5):
        append(log, int_record(k, k))
    log.roll()
    offset_map = make_cleaner_map(3)
    stats = CleanStats()
    assert build_offset_map(log, 2, log.active_segment.base_offset, offset_map, stats, lambda _n: None)
    assert [offset_map.get(str(k).encode()) for k in range(5)] == [-1, -1, 2, 3, -1]
    assert stats.map_messages_read == 4


def append_as_follower(log: Log, key_offsets: list[int]) -> None:
    for o in key_offsets:
        log.append_as_follower(encode_batch([Record(o, 0, str(o).encode(), b"v")], base_offset=o))
    log.update_high_watermark(log.log_end_offset)


def test_cleaning_beyond_missing_offsets(tmp_path: Path) -> None:
    """S6 testCleaningBeyondMissingOffsets: the end offset skips the offsets no segment holds."""
    log = open_log(tmp_path / "a-0")
    append_as_follower(log, list(range(10)))
    log.roll(11)
    append_as_follower(log, [11])
    assert clean(log, 0).end_offset == 11
    log = open_log(tmp_path / "b-0")
    append_as_follower(log, list(range(10)))
    log.roll(15)
    append_as_follower(log, list(range(15, 25)))
    log.roll(30)
    append_as_follower(log, [30])
    assert clean(log, 0).end_offset == 30


def fill_segments(log: Log, count: int) -> None:
    while len(log.segments) < count:
        append(log, int_record(log.log_end_offset, log.log_end_offset))


def test_cleaning_with_deletes(tmp_path: Path) -> None:
    """S7 testCleaningWithDeletes: tombstones for the even keys take their values away."""
    log = open_log(tmp_path / "topic-0")
    fill_segments(log, 2)
    n = log.log_end_offset
    for k in range(0, n, 2):
        append(log, int_record(k, None))
    fill_segments(log, 4)
    clean(log, 0)
    assert not {k for k in keys(log) if k % 2 == 0 and k < n}


def test_clean_tombstone_kept_until_its_own_horizon(tmp_path: Path) -> None:
    """S8 testCleanTombstone: the horizon counts from the clean that first keeps a tombstone, not from its
    timestamp."""
    log = open_log(tmp_path / "topic-0")
    now = now_ms()
    append(log, record(b"0", b"v", now + 10 * DAY_MS))
    log.roll()
    clean(log, 0, now=now)
    append(log, record(b"0", None, now - DAY_MS - 10_000))
    log.roll()
    clean(log, 1, now=now)
    first = batches(log)[0]
    assert first.last_offset == 1 and first.attributes & 0x40 and first.base_timestamp == now + DAY_MS
    append(log, record(b"1", b"v", now))
    log.roll()
    clean(log, 2, now=now + 1000)
    assert batches(log)[0].last_offset == 1 and records(log)[0].value is None


def test_cleaning_with_unkeyed_messages(tmp_path: Path) -> None:
    """S9 testCleaningWithUnkeyedMessages: a topic that was delete before holds keyless records; they go."""
    log = open_log(tmp_path / "topic-0", compact_config(cleanup_policy="delete"))
    unkeyed = 0
    while len(log.segments) < 2:
        append(log, record(None, b"unkeyed"))
        unkeyed += 1
    size_with_unkeyed = log.size_bytes
    fill_segments(log, 3)
    expected = log.size_bytes - size_with_unkeyed
    stats = clean(log, 0)
    assert not [r for r in data_records(log) if r.key is None]
    assert log.size_bytes == expected
    assert stats.invalid_messages == unkeyed


def producer_batch(keys_: list[int], pid: int, seq: int, *, epoch: int = 0, txn: bool = False) -> bytes:
    return encode_batch(
        [Record(i, 0, str(k).encode(), str(k).encode()) for i, k in enumerate(keys_)],
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn,
    )  # fmt: skip


def seqs(log: Log) -> dict[int, int]:
    return {pid: e.last_seq for pid, e in log.producer_state.producers.items()}


def test_retains_producer_last_sequence(tmp_path: Path) -> None:
    """S11 testLogCleanerRetainsProducerLastSequence: each producer's last batch stays, emptied if need be."""
    log = open_log(tmp_path / "topic-0")
    append(log, record(b"0", b"0"))
    append(log, producer_batch([0], 1, 0))
    append(log, producer_batch([0], 2, 0))
    append(log, producer_batch([0], 3, 0))
    append(log, producer_batch([1], 2, 1))
    log.roll()
    clean(log, 0)
    assert last_offsets(log) == [1, 3, 4]
    assert seqs(log) == {1: 0, 2: 1, 3: 0}
    assert (keys(log), offsets(log)) == ([0, 1], [3, 4])


def txn_producer(log: Log, pid: int, epoch: int = 0) -> Callable[[list[int]], None]:
    seq = [0]

    def send(keys_: list[int]) -> None:
        append(log, producer_batch(keys_, pid, seq[0], epoch=epoch, txn=True))
        seq[0] += len(keys_)

    return send


def txn_1_then_2_3(log: Log) -> Callable[[list[int]], None]:
    """Producer 1's transactional batches [1] and [2, 3] (offsets 0 and 1-2), as Kafka's transaction tests begin;
    returns the producer, to send more."""
    send = txn_producer(log, 1)
    send([1])
    send([2, 3])
    return send


def marker(log: Log, pid: int, *, commit: bool, epoch: int = 0) -> None:
    log.append_end_txn_marker(pid, epoch, commit=commit, coordinator_epoch=0, leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)


def aborted(log: Log) -> list[AbortedTxn]:
    return log.collect_aborted_transactions(0, log.log_end_offset)


def test_retains_last_sequence_even_if_transaction_aborted(tmp_path: Path) -> None:
    """S12: an aborted producer's last batch stays as an empty header; its marker stays."""
    log = open_log(tmp_path / "topic-0")
    txn_1_then_2_3(log)
    marker(log, 1, commit=False)
    log.roll()
    clean(log, 0)
    assert last_offsets(log) == [2, 3] and seqs(log) == {1: 2}
    assert (keys(log), offsets(log)) == ([], [3])
    append(log, producer_batch([1, 5], 1, 3))
    log.roll()
    clean(log, 0)
    assert last_offsets(log) == [3, 5] and seqs(log) == {1: 4}
    assert offsets(log) == [3, 4, 5]


def test_basic_transaction_aware_cleaning(tmp_path: Path) -> None:
    """S13 testBasicTransactionAwareCleaning: aborted data goes, committed data is cleaned by key."""
    log = open_log(tmp_path / "topic-0", compact_config(segment_bytes=2048))
    p1, p2 = txn_producer(log, 1), txn_producer(log, 2)
    p1([1, 2])
    p2([2, 3])
    p1([3, 4])
    marker(log, 1, commit=False)
    marker(log, 2, commit=True)
    p1([2])
    marker(log, 1, commit=True)
    log.roll()
    before = aborted(log)
    clean(log, 0)
    assert (keys(log), offsets(log)) == ([3, 2], [3, 6, 7, 8, 9])
    assert aborted(log) == before


def test_commit_marker_removal(tmp_path: Path) -> None:
    """S14 testCommitMarkerRemoval: a COMMIT goes once its transaction's batches are gone and its horizon passed."""
    log = open_log(tmp_path / "topic-0", compact_config(segment_bytes=256))
    send = txn_1_then_2_3(log)
    marker(log, 1, commit=True)
    send([2])
    marker(log, 1, commit=True)
    log.roll()
    clean(log, 0, now=LARGE_TIMESTAMP)
    assert (keys(log), offsets(log)) == ([1, 3, 2], [0, 2, 3, 4, 5])
    send([1, 3])
    marker(log, 1, commit=True)
    log.roll()
    clean(log, 0, now=LARGE_TIMESTAMP)
    assert (keys(log), offsets(log)) == ([2, 1, 3], [3, 4, 5, 6, 7, 8])
    clean(log, 0, now=LARGE_TIMESTAMP)
    assert offsets(log) == [3, 4, 5, 6, 7, 8]
    clean(log, 0, now=2**63 - 1)
    assert offsets(log) == [4, 5, 6, 7, 8]


def two_pass(log: Log, now: int) -> None:
    clean(log, 0, now=now)
    clean(log, 0, now=now + DAY_MS + 1)


def test_abort_marker_removal(tmp_path: Path) -> None:
    """S15 testAbortMarkerRemoval."""
    log = open_log(tmp_path / "topic-0")
    send = txn_1_then_2_3(log)
    marker(log, 1, commit=False)
    send([3])
    marker(log, 1, commit=True)
    log.roll()
    now = now_ms()
    clean(log, 0, now=now)
    assert (keys(log), offsets(log)) == ([3], [3, 4, 5])
    two_pass(log, now)
    assert offsets(log) == [4, 5]


def test_abort_marker_retention_with_empty_batch(tmp_path: Path) -> None:
    """S16 testAbortMarkerRetentionWithEmptyBatch: the ABORT stays while its emptied batch is observed."""
    log = open_log(tmp_path / "topic-0")
    send = txn_producer(log, 1)
    send([2, 3])
    marker(log, 1, commit=False)
    log.roll()
    indexed = aborted(log)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in indexed] == [(1, 0, 2)]
    now = now_ms()
    clean(log, 0, now=now)
    assert (keys(log), offsets(log), last_offsets(log)) == ([], [2], [1, 2])
    assert aborted(log) == indexed
    two_pass(log, now)
    assert (offsets(log), last_offsets(log)) == ([2], [1, 2])
    assert aborted(log) == indexed
    append(log, producer_batch([1], 1, 2))
    log.roll()
    clean(log, 0, now=now)
    assert (offsets(log), last_offsets(log)) == ([2, 3], [2, 3])
    two_pass(log, now)
    assert offsets(log) == [3]
    assert aborted(log) == []


def test_clean_empty_control_batch(tmp_path: Path) -> None:
    """S17 testCleanEmptyControlBatch: a COMMIT with no data becomes a header kept for its producer's epoch."""
    log = open_log(tmp_path / "topic-0")
    marker(log, 1, commit=True)
    append(log, int_record(2, 2))
    append(log, int_record(3, 3))
    log.roll()
    now = now_ms()
    two_pass(log, now)
    assert (keys(log), offsets(log), last_offsets(log)) == ([2, 3], [1, 2], [0, 1, 2])
    clean(log, 0, now=2**63 - 1)
    assert (keys(log), offsets(log), last_offsets(log)) == ([2, 3], [1, 2], [0, 1, 2])


def test_cleaning_with_keys_conflicting_with_txn_marker_keys(tmp_path: Path) -> None:
    """S19: a data record whose key is a control record's key bytes does not touch the markers."""
    log = open_log(tmp_path / "topic-0")
    p1 = txn_producer(log, 1)
    p1([1])
    marker(log, 1, commit=True)
    control_key = b"\x00\x00\x00\x01"
    append(log, encode_batch([Record(0, 0, control_key, b"v")], producer_id=2, producer_epoch=0, base_sequence=0,
                             is_transactional=True))  # fmt: skip
    marker(log, 2, commit=True)
    log.roll()
    clean(log, 0)
    assert [r.offset for r in records(log)] == [0, 1, 2, 3]


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        (None, [10]),
        (1, [1] * 10),
        ("three", [3, 3, 3, 1]),
    ],
)
def test_segment_grouping(limit: int | str | None, expected: list[int]) -> None:
    """S21 testSegmentGrouping: 10 segments of 300 bytes grouped by log size, then by index size."""
    segments = [SegmentSizes(i * 10, 300, 80, 120) for i in range(10)]
    big = 2**31 - 1
    if limit is None:
        by_log = by_index = big
    elif limit == "three":
        by_log, by_index = 3 * 300 + 1, big
    else:
        by_log, by_index = int(limit), big
    merges = plan_merges(segments, by_log, by_index, 100)
    assert [len(g) for g in merges] == expected
    if limit == 1:
        assert [len(g) for g in plan_merges(segments, big, 1, 100)] == [1] * 10
    if limit == "three":
        assert [len(g) for g in plan_merges(segments, big, 3 * 120 + 1, 100)] == [3, 3, 3, 1]


def test_segment_grouping_with_sparse_offsets() -> None:
    """S21's sparse variant: a merge may span 2^31 - 1 offsets, not one more; an empty segment always joins."""
    span = 2**31 - 1
    assert len(plan_merges([SegmentSizes(0, 10, 0, 0), SegmentSizes(1, 10, 0, 0)], 10**9, 10**9,
                                      span + 1)) == 1  # fmt: skip
    assert len(plan_merges([SegmentSizes(0, 10, 0, 0), SegmentSizes(1, 10, 0, 0)], 10**9, 10**9,
                                      span + 2)) == 2  # fmt: skip
    assert len(plan_merges([SegmentSizes(0, 10, 0, 0), SegmentSizes(1, 0, 0, 0)], 10**9, 10**9,
                                      span + 2)) == 1  # fmt: skip


def test_offsets_and_records_never_change(tmp_path: Path) -> None:
    """Every record the cleaner keeps is the record that was written at that offset (key, value, headers,
    timestamp), and offsets only disappear."""
    log = open_log(tmp_path / "topic-0")
    for i in range(300):
        append(log, encode_batch([Record(0, 1000 + i, str(i % 7).encode(), f"v{i}".encode()),
                                  Record(1, 1000 + i, str(i % 11).encode(), f"w{i}".encode())]))  # fmt: skip
    log.roll()
    before = {r.offset: r for r in records(log)}
    clean(log, 0)
    after = records(log)
    assert after and all(before[r.offset] == r for r in after)
    assert len({r.key for r in after}) == len(after) == 11
