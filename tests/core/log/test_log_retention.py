"""The high watermark, the log start offset and retention: Kafka's UnifiedLogTest scenarios,
ported to ``Log``'s API with Kafka's numbers, and the same contracts through a :class:`~logfs.core.store.Store`.

Kafka's tests run on a MockTime; here every call that reads a clock is given ``now_ms`` explicitly, from the wall
clock read once per test. The exception is ``file.delete.delay.ms``: the log schedules an unlink from the wall clock
when it renames a segment to ``.deleted``, so scenario 57 brackets its deletion between two wall-clock readings.
``TestUtils.singletonRecords`` is one record as a producer sends it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from logfs.core.checkpoint import OffsetCheckpointFile, TopicPartition
from logfs.core.config import LogConfig
from logfs.core.errors import OffsetOutOfRange
from logfs.core.format.batch import Record, iter_batch_positions
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_batch
from logfs.core.format.varint import INT32_MAX
from logfs.core.log.handles import HandleCache
from logfs.core.log.loader import load_log
from logfs.core.log.log import Log
from logfs.core.offsets import LogOffsetMetadata
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig
from logfs.core.storedir import LOG_START_OFFSET_CHECKPOINT

NO_TIMESTAMP = -1


def new_log(tmp_path: Path, **config: int) -> Log:
    """UnifiedLogTest.createLog: an empty log in ``tmp_path/topic-0`` with ``LogTestUtils.createLogConfig(...)``."""
    return load_log(tmp_path / "topic-0", LogConfig(**config), HandleCache(), had_clean_shutdown=True)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def singleton(value: bytes, timestamp: int = NO_TIMESTAMP) -> bytes:
    """TestUtils.singletonRecords: one record as a producer sends it."""
    return encode_batch([Record(0, timestamp, None, value)])


def kv_records(offset: int, timestamp: int, leader_epoch: int = 0) -> bytes:
    """testHighWatermarkMaintenance's ``records(offset)``: keys a, b, c with value "value" at ``offset``."""
    return encode_batch(
        [Record(offset + i, timestamp, k, b"value") for i, k in enumerate((b"a", b"b", b"c"))],
        base_offset=offset,
        partition_leader_epoch=leader_epoch,
    )


def append_singletons(log: Log, count: int, value: bytes = b"test", timestamp: int = NO_TIMESTAMP) -> None:
    now = now_ms()
    for _ in range(count):
        log.append_as_leader(singleton(value, timestamp), 0, now_ms=now)


def assert_valid_log_offset_metadata(log: Log, metadata: LogOffsetMetadata) -> None:
    """UnifiedLogTest.assertValidLogOffsetMetadata: the metadata names a segment and a position that hold it."""
    assert not metadata.message_offset_only
    segment = log.segment_for(metadata.segment_base_offset)
    assert segment is not None and segment.base_offset == metadata.segment_base_offset
    assert metadata.relative_position <= segment.size_bytes
    fetched = segment.read(metadata.message_offset, 2048, segment.size_bytes, min_one_message=False)
    if metadata.relative_position < segment.size_bytes:
        assert fetched is not None and fetched.fetch_offset_metadata == metadata
    else:
        assert fetched is None


def assert_high_watermark(log: Log, offset: int) -> None:
    assert log.high_watermark == offset
    assert_valid_log_offset_metadata(log, log.fetch_high_watermark_metadata())


def all_records(data: bytes) -> list[Record]:
    """Every record of the whole batches in ``data``."""
    return [r for position, _ in iter_batch_positions(data) for r in decode_records(data, position)]


def epochs(log: Log) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in log.epoch_cache.epoch_entries()]


# --- the high watermark (51-52) ---------------------------------------------------------------------------------------


def test_high_watermark_is_clamped_to_the_log_and_follows_truncation(tmp_path: Path) -> None:
    """UnifiedLogTest.testHighWatermarkMaintenance"""
    log = new_log(tmp_path, segment_bytes=1024 * 1024)
    now = now_ms()
    assert_high_watermark(log, 0)

    log.append_as_leader(kv_records(0, now), 0, now_ms=now)
    assert_high_watermark(log, 0)  # an append does not move it

    log.maybe_increment_high_watermark(LogOffsetMetadata(1))
    assert_high_watermark(log, 1)

    log.update_high_watermark(5)
    assert_high_watermark(log, 3)  # not past the log end offset

    log.append_as_follower(kv_records(3, now), now_ms=now)
    log.update_high_watermark(6)
    assert_high_watermark(log, 6)

    log.truncate_to(3)
    assert_high_watermark(log, 3)

    log.append_as_leader(kv_records(0, now), 0, now_ms=now)
    assert_high_watermark(log, 3)
    assert log.log_end_offset == 6 and log.log_start_offset == 0

    log.truncate_fully_and_start_at(4)
    assert log.log_end_offset == 4 and log.log_start_offset == 4
    assert_high_watermark(log, 4)


def test_follower_high_watermark_update_reports_only_changes_and_stops_at_the_log_end(tmp_path: Path) -> None:
    """UnifiedLogTest.testMaybeUpdateHighWatermarkAsFollower"""
    log = new_log(tmp_path)
    now = now_ms()
    for i in range(100):
        log.append_as_leader(singleton(str(i).encode()), 0, now_ms=now)
    assert log.maybe_update_high_watermark(99) == 99
    assert log.maybe_update_high_watermark(99) is None
    assert log.maybe_update_high_watermark(100) == 100
    assert log.maybe_update_high_watermark(100) is None
    assert log.maybe_update_high_watermark(101) is None  # bound by the log end offset
    assert log.high_watermark == 100


# --- the log start offset and retention (53-58) --------------------------------------------------------------------


def test_retention_never_deletes_a_segment_at_or_above_the_high_watermark(tmp_path: Path) -> None:
    """UnifiedLogTest.testCannotDeleteSegmentsAtOrAboveHighWatermark"""
    now = now_ms()
    record_bytes = len(singleton(b"test", now - 1000))
    log = new_log(tmp_path, segment_bytes=record_bytes * 5, segment_index_bytes=1000, retention_ms=999)
    append_singletons(log, 100, timestamp=now - 1000)
    assert len(log.segments) > 5
    for hw in range(101):
        log.update_high_watermark(hw)
        assert log.high_watermark == hw
        log.delete_old_segments(now)
        assert log.log_start_offset <= hw
        first, *rest = log.segments
        assert log.log_start_offset <= first.base_offset <= hw
        assert all(s.base_offset > hw and s.base_offset >= log.log_start_offset for s in rest)
    assert log.log_start_offset == 100
    assert len(log.segments) == 1 and log.active_segment.size_bytes == 0


def test_log_start_offset_cannot_pass_the_high_watermark(tmp_path: Path) -> None:
    """UnifiedLogTest.testCannotIncrementLogStartOffsetPastHighWatermark"""
    log = new_log(tmp_path)
    append_singletons(log, 100)
    log.update_high_watermark(25)
    with pytest.raises(OffsetOutOfRange) as raised:
        log.maybe_increment_log_start_offset(26)
    assert raised.value.offset == 26
    assert log.log_start_offset == 0
    assert log.maybe_increment_log_start_offset(25) and log.log_start_offset == 25


def test_delete_records_removes_only_segments_wholly_below_the_new_start(tmp_path: Path) -> None:
    """UnifiedLogTest.testLogDeletionAfterDeleteRecords"""
    record_bytes = len(singleton(b"test"))
    log = new_log(tmp_path, segment_bytes=record_bytes * 5)
    append_singletons(log, 15)
    assert len(log.segments) == 3 and log.log_start_offset == 0
    log.update_high_watermark(log.log_end_offset)

    log.maybe_increment_log_start_offset(1)
    log.delete_old_segments()
    assert len(log.segments) == 3 and log.log_start_offset == 1

    log.maybe_increment_log_start_offset(6)
    log.delete_old_segments()
    assert len(log.segments) == 2 and log.log_start_offset == 6

    log.maybe_increment_log_start_offset(15)
    log.delete_old_segments()
    assert len(log.segments) == 1 and log.log_start_offset == 15
    assert log.segments[0].base_offset == 10  # the active segment [10, 14] stays


@pytest.mark.parametrize(
    ("retained_records", "deleted", "segments", "log_start"),
    [
        pytest.param(10, 1, 2, 5, id="deletes-the-oldest-segment-beyond-retention-bytes"),
        pytest.param(15, 0, 3, 0, id="keeps-every-segment-under-retention-bytes"),
    ],
)
def test_size_retention(tmp_path: Path, retained_records: int, deleted: int, segments: int, log_start: int) -> None:
    """UnifiedLogTest.shouldDeleteSizeBasedSegments and shouldNotDeleteSizeBasedSegmentsWhenUnderRetentionSize: 15
    records in segments of 5, retention.bytes of 10 or 15 records."""
    record_bytes = len(singleton(b"test"))
    log = new_log(tmp_path, segment_bytes=record_bytes * 5, retention_bytes=record_bytes * retained_records)
    append_singletons(log, 15)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() == deleted
    assert len(log.segments) == segments and log.log_start_offset == log_start


def test_time_retention_deletes_every_expired_segment_and_leaves_an_empty_one(tmp_path: Path) -> None:
    """UnifiedLogTest.shouldDeleteTimeBasedSegmentsReadyToBeDeleted"""
    record_bytes = len(singleton(b"test", 10))
    log = new_log(tmp_path, segment_bytes=record_bytes * 5, retention_ms=10_000)
    append_singletons(log, 15, timestamp=10)
    log.update_high_watermark(log.log_end_offset)
    log.delete_old_segments(now_ms())
    assert len(log.segments) == 1, "there should be 1 segment remaining"
    assert log.active_segment.size_bytes == 0 and log.log_start_offset == log.log_end_offset == 15


def test_deleted_segments_stay_as_dot_deleted_files_for_the_delete_delay(tmp_path: Path) -> None:
    """UnifiedLogTest.testAsyncDelete"""
    async_delete_ms = 1000
    now = now_ms()
    record_bytes = len(singleton(b"test", now - 1000))
    log = new_log(
        tmp_path,
        segment_bytes=record_bytes * 5,
        segment_index_bytes=1000,
        index_interval_bytes=10_000,
        retention_ms=999,
        file_delete_delay_ms=async_delete_ms,
    )
    append_singletons(log, 100, timestamp=now - 1000)
    segments = list(log.segments)
    old_files = [s.log_path for s in segments] + [s.offset_index.path for s in segments]
    log.update_high_watermark(log.log_end_offset)

    log.delete_old_segments(now)

    assert len(log.segments) == 1, "only one segment should remain"
    renamed = [s.log_path for s in segments] + [s.offset_index.path for s in segments]
    assert all(p.name.endswith(".deleted") for p in renamed), "all log and index files should end in .deleted"
    assert all(p.exists() for p in renamed), "the .deleted files should still be there"
    assert not any(p.exists() for p in old_files), "the original files should be gone"
    assert log.delete_expired_files(now + async_delete_ms - 1) == 0  # the delay runs from the deletion's `now`
    assert all(p.exists() for p in renamed)

    assert log.delete_expired_files(now + async_delete_ms) == len(segments)
    assert not any(p.exists() for p in renamed), "files should all be gone"


def test_deleting_segments_moves_the_first_leader_epoch_to_the_new_log_start(tmp_path: Path) -> None:
    """UnifiedLogTest.testDeleteOldSegments"""
    now = now_ms()
    record_bytes = len(singleton(b"test", now - 1000))
    log = new_log(tmp_path, segment_bytes=record_bytes * 5, segment_index_bytes=1000, retention_ms=999)
    append_singletons(log, 100, timestamp=now - 1000)
    log.epoch_cache.assign(0, 40)  # UnifiedLog.maybeAssignEpochStartOffset
    log.epoch_cache.assign(1, 90)

    segments = len(log.segments)
    log.delete_old_segments(now)
    assert len(log.segments) == segments, "no segment may go while the high watermark is 0"
    assert log.log_start_offset == 0

    for hw in range(25, 31):
        log.update_high_watermark(hw)
        log.delete_old_segments(now)
        assert log.log_start_offset <= hw
        for segment in log.segments:
            fetched = segment.read(segment.base_offset, INT32_MAX)
            if fetched is not None and fetched.records:
                assert all_records(fetched.records)[-1].offset >= hw

    log.update_high_watermark(log.log_end_offset)
    log.delete_old_segments(now)
    assert len(log.segments) == 1, "the deleted segments should be gone"
    assert epochs(log) == [(1, 100)], "the epoch entry should be the latest epoch at the log end offset"


def test_deleting_the_first_segment_moves_its_epoch_start_up(tmp_path: Path) -> None:
    """UnifiedLogTest.shouldUpdateOffsetForLeaderEpochsWhenDeletingSegments"""
    record_bytes = len(singleton(b"test"))
    log = new_log(tmp_path, segment_bytes=record_bytes * 5, retention_bytes=record_bytes * 10)
    append_singletons(log, 15)
    log.epoch_cache.assign(0, 0)
    log.epoch_cache.assign(1, 7)
    log.epoch_cache.assign(2, 10)

    log.update_high_watermark(log.log_end_offset)
    log.delete_old_segments()

    assert epochs(log) == [(0, 5), (1, 7), (2, 10)]


# --- the same contracts through a store ---------------------------------------------------------------------------


def test_store_delete_records_persists_the_log_start_offset_across_a_restart(tmp_path: Path) -> None:
    """UnifiedLogTest.testLogDeletionAfterDeleteRecords, through Store.delete_records and its checkpoint"""
    record_bytes = len(singleton(b"test"))
    config = StoreConfig(topic_defaults=LogConfig(segment_bytes=record_bytes * 5))
    with Store.open(tmp_path, config) as store:
        store.create_topic("topic", 1)
        log = store.log("topic", 0)
        append_singletons(log, 15)
        log.update_high_watermark(log.log_end_offset)
        store.delete_records("topic", 0, 6)
        assert [s.base_offset for s in log.segments] == [5, 10] and log.log_start_offset == 6
    assert OffsetCheckpointFile(tmp_path / LOG_START_OFFSET_CHECKPOINT).read() == {TopicPartition("topic", 0): 6}

    with Store.open(tmp_path, config) as store:
        log = store.log("topic", 0)
        assert log.log_start_offset == 6 and log.log_end_offset == 15
        assert [s.base_offset for s in log.segments] == [5, 10]


def test_store_delete_records_past_the_high_watermark_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    """UnifiedLogTest.testCannotIncrementLogStartOffsetPastHighWatermark, through Store.delete_records"""
    with Store.open(tmp_path) as store:
        store.create_topic("topic", 1)
        log = store.log("topic", 0)
        append_singletons(log, 100)
        log.update_high_watermark(25)
        with pytest.raises(OffsetOutOfRange):
            store.delete_records("topic", 0, 26)
        assert log.log_start_offset == 0 and len(log.segments) == 1


def test_store_restarts_at_the_log_end_after_retention_deleted_every_record(tmp_path: Path) -> None:
    """The empty segment that retention rolls when every segment expires survives a restart (Kafka's roll creates
    its ``.log``): without it the log would start over at offset 0 and hand out offsets 0-14 again."""
    record_bytes = len(singleton(b"test", 10))
    config = StoreConfig(topic_defaults=LogConfig(segment_bytes=record_bytes * 5, retention_ms=10_000))
    with Store.open(tmp_path, config) as store:
        store.create_topic("topic", 1)
        log = store.log("topic", 0)
        append_singletons(log, 15, timestamp=10)
        log.update_high_watermark(log.log_end_offset)
        store.tick(now_ms())
        assert [(s.base_offset, s.size_bytes) for s in log.segments] == [(15, 0)]

    with Store.open(tmp_path, config) as store:
        log = store.log("topic", 0)
        assert log.log_start_offset == log.log_end_offset == 15
        assert log.append_as_leader(singleton(b"next"), 0).first_offset == 15
