"""The leader epoch cache: Kafka's LeaderEpochFileCacheTest and the epoch parts of its UnifiedLogTest and PartitionTest
scenarios."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from logfs.core.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from logfs.core.errors import CorruptCheckpoint, InvalidOffset
from logfs.core.log.epoch import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_END_OFFSET,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochFileCache,
)


@pytest.fixture
def checkpoint(tmp_path: Path) -> LeaderEpochCheckpointFile:
    return LeaderEpochCheckpointFile.in_dir(tmp_path)


@pytest.fixture
def cache(checkpoint: LeaderEpochCheckpointFile) -> LeaderEpochFileCache:
    return LeaderEpochFileCache(checkpoint)


def cache_of(checkpoint: LeaderEpochCheckpointFile, *entries: tuple[int, int]) -> LeaderEpochFileCache:
    cache = LeaderEpochFileCache(checkpoint)
    for epoch, start_offset in entries:
        cache.assign(epoch, start_offset)
    return cache


# --- Kafka's UnifiedLogTest, PartitionTest and LeaderEpochFileCacheTest scenarios ----------------------------------


def test_delete_old_segments_moves_the_first_epoch_start(checkpoint: LeaderEpochCheckpointFile) -> None:
    """UnifiedLogTest.testDeleteOldSegments (epoch part)"""
    cache = cache_of(checkpoint, (0, 0), (1, 7), (2, 10))
    cache.truncate_from_start(5)
    assert cache.epoch_entries() == [(0, 5), (1, 7), (2, 10)]
    assert checkpoint.read() == [(0, 5), (1, 7), (2, 10)]


def test_deleting_every_segment_keeps_the_latest_epoch_at_the_new_start(checkpoint: LeaderEpochCheckpointFile) -> None:
    """UnifiedLogTest.shouldUpdateOffsetForLeaderEpochsWhenDeletingSegments"""
    cache = cache_of(checkpoint, (0, 0), (1, 90))
    cache.truncate_from_start(100)
    assert cache.epoch_entries() == [(1, 100)]


def test_last_fetched_offset_validation_end_offsets(checkpoint: LeaderEpochCheckpointFile) -> None:
    """PartitionTest.testLastFetchedOffsetValidation (the endOffsetFor answers behind it)"""
    cache = cache_of(checkpoint, (0, 0), (3, 2), (4, 8), (7, 13), (9, 14), (10, 17))
    log_end_offset = 17
    assert cache.end_offset_for(2, log_end_offset) == (0, 2)
    assert cache.end_offset_for(0, log_end_offset) == (0, 2)
    assert cache.end_offset_for(6, log_end_offset) == (4, 13)
    assert cache.end_offset_for(5, log_end_offset) == (4, 13)
    assert cache.end_offset_for(10, log_end_offset) == (10, 17)
    assert cache.end_offset_for(11, log_end_offset) == (-1, -1)


def test_return_next_available_epoch_if_there_is_no_exact_epoch(checkpoint: LeaderEpochCheckpointFile) -> None:
    """LeaderEpochFileCacheTest.shouldReturnNextAvailableEpochIfThereIsNoExactEpochForTheOneRequested"""
    cache = cache_of(checkpoint, (0, 10), (2, 13), (4, 17))
    assert cache.end_offset_for(1, 0) == (0, 13)
    assert cache.end_offset_for(2, 0) == (2, 17)
    assert cache.end_offset_for(3, 0) == (2, 17)


def test_truncate_if_matching_epoch_but_earlier_starting_offset(checkpoint: LeaderEpochCheckpointFile) -> None:
    """LeaderEpochFileCacheTest.shouldTruncateIfMatchingEpochButEarlierStartingOffset"""
    cache = cache_of(checkpoint, (5, 11), (6, 12), (7, 13))
    cache.assign(7, 12)
    assert cache.end_offset_for(5, 0) == (5, 12)
    assert cache.end_offset_for(6, 0) == (5, 12)


@pytest.mark.parametrize(("log_end_offset", "entries"), [(20, 3), (11, 2), (10, 1), (0, 0)])
def test_truncating_the_log_truncates_the_epoch_cache(
    checkpoint: LeaderEpochCheckpointFile, log_end_offset: int, entries: int
) -> None:
    """UnifiedLogTest.shouldTruncateLeaderEpochCheckpointFileWhenTruncatingLog"""
    cache = cache_of(checkpoint, (0, 0), (1, 10), (2, 16))
    cache.truncate_from_end(log_end_offset)
    assert len(cache) == entries
    assert len(checkpoint.read()) == entries


# --- LeaderEpochFileCacheTest ------------------------------------------------------------------------------------


def test_previous_epoch(cache: LeaderEpochFileCache) -> None:
    """LeaderEpochFileCacheTest.testPreviousEpoch"""
    assert cache.previous_epoch() is None
    cache.assign(2, 10)
    assert cache.previous_epoch() is None
    cache.assign(4, 15)
    assert cache.previous_epoch() == 2
    cache.assign(10, 20)
    assert cache.previous_epoch() == 4
    cache.truncate_from_end(18)
    assert cache.previous_epoch() == 2


def test_add_epoch_and_message_offset_to_cache(cache: LeaderEpochFileCache) -> None:
    """LeaderEpochFileCacheTest.shouldAddEpochAndMessageOffsetToCache"""
    cache.assign(2, 10)
    assert cache.latest_epoch() == 2
    assert cache.epoch_entries() == [EpochEntry(2, 10)]
    assert cache.end_offset_for(2, 11) == (2, 11)


def test_return_log_end_offset_if_latest_epoch_requested(cache: LeaderEpochFileCache) -> None:
    """LeaderEpochFileCacheTest.shouldReturnLogEndOffsetIfLatestEpochRequested"""
    cache.assign(2, 11)
    cache.assign(2, 12)
    assert cache.end_offset_for(2, 14) == (2, 14)


def test_return_undefined_offset_if_undefined_epoch_requested(cache: LeaderEpochFileCache) -> None:
    """LeaderEpochFileCacheTest.shouldReturnUndefinedOffsetIfUndefinedEpochRequested / ...AndUndefinedEpochRequested"""
    assert cache.end_offset_for(UNDEFINED_EPOCH, 73) == UNDEFINED_EPOCH_END_OFFSET
    cache.assign(2, 11)
    cache.assign(3, 12)
    assert cache.end_offset_for(UNDEFINED_EPOCH, 0) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def test_not_overwrite_offset_for_a_leader_epoch_once_assigned(cache: LeaderEpochFileCache) -> None:
    """LeaderEpochFileCacheTest.shouldNotOverwriteLogEndOffsetForALeaderEpochOnceItHasBeenAssigned"""
    cache.assign(2, 9)
    cache.assign(2, 10)
    assert cache.epoch_entries() == [(2, 9)]


def test_enforce_monotonically_increasing_start_offsets(cache: LeaderEpochFileCache) -> None:
    """LeaderEpochFileCacheTest.shouldEnforceMonotonicallyIncreasingStartOffsets"""
    cache.assign(2, 9)
    cache.assign(3, 9)
    assert cache.epoch_entries() == [(3, 9)]


def test_return_unsupported_if_no_epoch_recorded(cache: LeaderEpochFileCache) -> None:
    """LeaderEpochFileCacheTest.shouldReturnUnsupportedIfNoEpochRecorded / shouldFetchEndOffsetOfEmptyCache"""
    assert cache.end_offset_for(0, 0) == UNDEFINED_EPOCH_END_OFFSET
    assert cache.end_offset_for(7, 0) == UNDEFINED_EPOCH_END_OFFSET
    assert cache.latest_epoch() is None


def test_return_first_epoch_if_requested_epoch_less_than_first_epoch(cache: LeaderEpochFileCache) -> None:
    """LeaderEpochFileCacheTest.shouldReturnFirstEpochIfRequestedEpochLessThanFirstEpoch"""
    for epoch, start_offset in [(5, 11), (6, 12), (7, 13)]:
        cache.assign(epoch, start_offset)
    assert cache.end_offset_for(4, 0) == (4, 11)


def test_get_first_offset_of_subsequent_epoch(cache: LeaderEpochFileCache) -> None:
    """LeaderEpochFileCacheTest.shouldGetFirstOffsetOfSubsequentEpochWhenOffsetRequestedForPreviousEpoch"""
    for epoch, start_offset in [(1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16)]:
        cache.assign(epoch, start_offset)
    assert cache.end_offset_for(2, 17) == (2, 15)


def test_return_invalid_offset_if_epoch_is_not_tracked(cache: LeaderEpochFileCache) -> None:
    """LeaderEpochFileCacheTest.shouldReturnInvalidOffsetIfEpochIsRequestedWhichIsNotCurrentlyTracked"""
    cache.assign(2, 100)
    assert cache.end_offset_for(3, 100) == UNDEFINED_EPOCH_END_OFFSET


def test_persist_epochs_between_instances(checkpoint: LeaderEpochCheckpointFile) -> None:
    """LeaderEpochFileCacheTest.shouldPersistEpochsBetweenInstances"""
    LeaderEpochFileCache(checkpoint).assign(2, 6)
    assert LeaderEpochFileCache(LeaderEpochCheckpointFile(checkpoint.path)).epoch_entries() == [(2, 6)]


def test_enforce_monotonically_increasing_epochs(cache: LeaderEpochFileCache) -> None:
    """LeaderEpochFileCacheTest.shouldEnforceMonotonicallyIncreasingEpochs"""
    cache.assign(1, 5)
    cache.assign(2, 6)
    cache.assign(1, 7)
    assert cache.latest_epoch() == 1
    assert cache.end_offset_for(1, 8) == (1, 8)
    assert cache.end_offset_for(2, 8) == UNDEFINED_EPOCH_END_OFFSET
    assert cache.epoch_entries() == [(1, 7)]


def test_enforce_offsets_increase_monotonically(cache: LeaderEpochFileCache) -> None:
    """LeaderEpochFileCacheTest.shouldEnforceOffsetsIncreaseMonotonically"""
    cache.assign(2, 6)
    cache.assign(3, 5)
    assert cache.epoch_entries() == [(3, 5)]


def test_track_epochs_as_leaders_change_many_times(cache: LeaderEpochFileCache) -> None:
    """LeaderEpochFileCacheTest.shouldIncreaseAndTrackEpochsAsLeadersChangeManyTimes"""
    cache.assign(0, 0)
    cache.assign(1, 0)
    assert cache.latest_epoch() == 1
    assert cache.end_offset_for(1, 0) == (1, 0)
    assert cache.end_offset_for(0, 0) == (0, 0)
    assert cache.end_offset_for(1, 5) == (1, 5)
    cache.assign(2, 5)
    assert [cache.end_offset_for(epoch, 10) for epoch in (2, 1, 0)] == [(2, 10), (1, 5), (0, 0)]


def test_track_epochs_as_follower_receives_many_messages(cache: LeaderEpochFileCache) -> None:
    """LeaderEpochFileCacheTest.shouldIncreaseAndTrackEpochsAsFollowerReceivesManyMessages"""
    for offset in range(9):
        cache.assign(offset // 3, offset)
    assert cache.latest_epoch() == 2
    assert cache.end_offset_for(2, 9) == (2, 9)
    assert cache.end_offset_for(0, 9) == (0, 3)
    assert cache.end_offset_for(1, 9) == (1, 6)


@pytest.mark.parametrize(
    ("name", "start_offset", "expected"),
    [
        ("shouldPreserveResetOffsetOnClearEarliestIfOneExists", 8, [(3, 8), (4, 11)]),
        ("shouldNotClearAnythingIfOffsetTooEarly", 1, [(2, 6), (3, 8), (4, 11)]),
        ("shouldNotClearAnythingIfOffsetIsFirstOffset", 6, [(2, 6), (3, 8), (4, 11)]),
        ("shouldRetainLatestEpochOnClearAllEarliest", 11, [(4, 11)]),
        ("shouldUpdateOffsetBetweenEpochBoundariesOnClearEarliest", 9, [(3, 9), (4, 11)]),
        ("shouldRetainLatestEpochOnClearAllEarliestAndUpdateItsOffset", 15, [(4, 15)]),
        ("shouldNotResetEpochHistoryHeadIfUndefinedPassed", UNDEFINED_EPOCH_OFFSET, [(2, 6), (3, 8), (4, 11)]),
    ],
)
def test_truncate_from_start(
    checkpoint: LeaderEpochCheckpointFile, name: str, start_offset: int, expected: list[tuple[int, int]]
) -> None:
    """LeaderEpochFileCacheTest.<name>: truncateFromStart"""
    cache = cache_of(checkpoint, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(start_offset)
    assert cache.epoch_entries() == expected, name
    assert checkpoint.read() == expected


@pytest.mark.parametrize(
    ("name", "end_offset", "expected"),
    [
        ("shouldDropEntriesOnEpochBoundaryWhenRemovingLatestEntries", 8, [(2, 6)]),
        ("shouldDropEntriesBetweenEpochBoundaryWhenRemovingNewest", 9, [(2, 6), (3, 8)]),
        ("shouldNotResetEpochHistoryTailIfUndefinedPassed", UNDEFINED_EPOCH_OFFSET, [(2, 6), (3, 8), (4, 11)]),
    ],
)
def test_truncate_from_end(
    checkpoint: LeaderEpochCheckpointFile, name: str, end_offset: int, expected: list[tuple[int, int]]
) -> None:
    """LeaderEpochFileCacheTest.<name>: truncateFromEnd"""
    cache = cache_of(checkpoint, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(end_offset)
    assert cache.epoch_entries() == expected, name
    assert checkpoint.read() == expected


def test_clear_all_entries(cache: LeaderEpochFileCache, checkpoint: LeaderEpochCheckpointFile) -> None:
    """LeaderEpochFileCacheTest.shouldClearAllEntries"""
    for epoch, start_offset in [(2, 6), (3, 8), (4, 11)]:
        cache.assign(epoch, start_offset)
    cache.clear_and_flush()
    assert cache.epoch_entries() == [] and checkpoint.read() == []


def test_truncations_of_an_empty_cache_do_nothing(cache: LeaderEpochFileCache) -> None:
    """LeaderEpochFileCacheTest.shouldClearEarliestOnEmptyCache / shouldClearLatestOnEmptyCache"""
    cache.truncate_from_start(7)
    cache.truncate_from_end(7)
    assert len(cache) == 0


def test_find_previous_and_next(cache: LeaderEpochFileCache) -> None:
    """LeaderEpochFileCacheTest.testFindPreviousEpoch / testFindPreviousEntry / testFindNextEpoch / testGetEpochEntry"""
    assert cache.previous_epoch(2) is None and cache.previous_entry(2) is None
    cache.assign(2, 10)
    cache.assign(4, 15)
    cache.assign(10, 20)
    assert (cache.previous_epoch(4), cache.previous_entry(10)) == (2, (4, 15))
    cache.truncate_from_end(18)
    latest = cache.latest_epoch()
    assert latest == 4 and cache.previous_entry(latest) == (2, 10)
    assert [cache.next_epoch(e) for e in (-1, 2, 3, 4, 100)] == [2, 4, 4, None, None]
    assert (cache.epoch_entry(2), cache.epoch_entry(3)) == ((2, 10), None)
    assert (cache.earliest_entry(), cache.latest_entry()) == ((2, 10), (4, 15))


def test_fetch_epoch_for_given_offset(cache: LeaderEpochFileCache) -> None:
    """LeaderEpochFileCacheTest.shouldFetchEpochForGivenOffset"""
    for epoch, start_offset in [(0, 10), (1, 20), (5, 30)]:
        cache.assign(epoch, start_offset)
    assert [cache.epoch_for_offset(o) for o in (25, 20, 30, 50, 5)] == [1, 1, 5, 5, None]


def test_write_checkpoint_on_truncation(cache: LeaderEpochFileCache, checkpoint: LeaderEpochCheckpointFile) -> None:
    """LeaderEpochFileCacheTest.shouldWriteCheckpointOnTruncation"""
    for epoch, start_offset in [(2, 6), (3, 8), (4, 11)]:
        cache.assign(epoch, start_offset)
    cache.truncate_from_end(11)
    cache.truncate_from_start(8)
    assert checkpoint.read() == [(3, 8)]


# --- logfs's own contracts ---------------------------------------------------------------------------------------


def test_assign_writes_the_checkpoint_before_returning(checkpoint: LeaderEpochCheckpointFile) -> None:
    cache = LeaderEpochFileCache(checkpoint, schedule_flush=lambda flush: None)  # deferred writes are dropped here
    cache.assign(0, 0)
    cache.assign(1, 50)
    assert checkpoint.read() == [(0, 0), (1, 50)]


def test_truncation_writes_are_deferred_to_the_scheduler(checkpoint: LeaderEpochCheckpointFile) -> None:
    pending: list[Callable[[], None]] = []
    cache = LeaderEpochFileCache(checkpoint, schedule_flush=pending.append)
    cache.assign(0, 0)
    cache.assign(1, 50)
    cache.truncate_from_end(50)
    assert checkpoint.read() == [(0, 0), (1, 50)], "not yet written"
    assert len(pending) == 1
    pending.pop()()
    assert checkpoint.read() == [(0, 0)]


def test_deferred_write_after_the_partition_was_deleted_does_nothing(tmp_path: Path) -> None:
    partition_dir = tmp_path / "orders-0"
    partition_dir.mkdir()
    pending: list[Callable[[], None]] = []
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile.in_dir(partition_dir), schedule_flush=pending.append)
    cache.assign(0, 0)
    cache.truncate_from_end(0)
    (partition_dir / "leader-epoch-checkpoint").unlink()
    partition_dir.rmdir()
    pending.pop()()
    assert not partition_dir.exists()


def test_loading_replays_the_assign_rule(checkpoint: LeaderEpochCheckpointFile) -> None:
    checkpoint.path.write_text("0\n4\n0 0\n2 10\n1 20\n3 15\n")  # out of order, as no writer of ours would leave it
    assert LeaderEpochFileCache(checkpoint).epoch_entries() == [(0, 0), (3, 15)]


def test_a_damaged_checkpoint_fails_the_load(checkpoint: LeaderEpochCheckpointFile) -> None:
    checkpoint.path.write_text("0\n2\n0 0\n")
    with pytest.raises(CorruptCheckpoint):
        LeaderEpochFileCache(checkpoint)


@pytest.mark.parametrize(("epoch", "start_offset"), [(-1, 0), (0, -1)])
def test_negative_epoch_or_offset_raises_invalid_offset(
    cache: LeaderEpochFileCache, epoch: int, start_offset: int
) -> None:
    with pytest.raises(InvalidOffset):
        cache.assign(epoch, start_offset)
    assert len(cache) == 0


def test_divergent_history_is_logged_and_an_empty_epoch_is_not(
    cache: LeaderEpochFileCache, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="logfs.core.log.epoch"):
        cache.assign(1, 10)
        cache.assign(2, 10)  # epoch 1 wrote nothing: replacing it is expected
        assert not caplog.records
        cache.assign(3, 20)
        cache.assign(4, 15)  # epoch 3's records from 15 on are gone: the histories diverged
    assert [record.levelno for record in caplog.records] == [logging.WARNING]
    assert cache.epoch_entries() == [(2, 10), (4, 15)]
