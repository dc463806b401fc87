"""One partition's log: Kafka's UnifiedLogTest, LocalLogTest and LogLoaderTest scenarios for appends, rolling,
reads with isolation, and truncation, ported to ``Log``'s API with Kafka's numbers.

Kafka's tests run on a MockTime; here every append that a clock can affect is given ``now_ms`` explicitly, starting
from the wall clock read *after* the log is opened (the loader's first segment takes its creation time from the wall
clock, so it was created at or before the mock clock's start, as in Kafka). ``TestUtils.singletonRecords`` without a
timestamp is a one-record batch with timestamp -1 (NO_TIMESTAMP). ``LocalLogTest.appendRecords`` takes offsets as
given, so those scenarios append with ``append_as_follower``. ``LogTestUtils.readLog`` reads with LOG_END isolation
and ``min_one_message``; so does :func:`read_log`.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from logfs.core.config import LogConfig
from logfs.core.errors import (
    CorruptRecord,
    OffsetOutOfRange,
    OffsetsOutOfOrder,
    RecordBatchTooLarge,
    UnexpectedAppendOffset,
)
from logfs.core.format.batch import Record, iter_batch_positions, read_header
from logfs.core.format.compression import Compression
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_batch
from logfs.core.format.varint import INT32_MAX
from logfs.core.log.handles import HandleCache
from logfs.core.log.index import SEGMENT_INDEX_BYTES_DEFAULT, OffsetIndex
from logfs.core.log.loader import load_log
from logfs.core.log.log import Isolation, Log
from logfs.core.log.segment import LogSegment
from logfs.core.offsets import FetchDataInfo, LogOffsetMetadata

NO_TIMESTAMP = -1
JITTER_SEED = 20241025


def open_log(directory: Path, config: LogConfig, *, clean: bool = True) -> Log:
    return load_log(directory, config, HandleCache(), had_clean_shutdown=clean)


def new_log(tmp_path: Path, **config: int) -> Log:
    """UnifiedLogTest.createLog: an empty log in ``tmp_path/topic-0`` with ``LogTestUtils.createLogConfig(...)``."""
    return open_log(tmp_path / "topic-0", LogConfig(**config))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def singleton(value: bytes, timestamp: int = NO_TIMESTAMP, key: bytes | None = None) -> bytes:
    """TestUtils.singletonRecords: one record, as a producer sends it (offset 0)."""
    return encode_batch([Record(0, timestamp, key, value)])


def at(offset: int, value: bytes, timestamp: int = NO_TIMESTAMP, key: bytes | None = None) -> bytes:
    """``MemoryRecords.withRecords(offset, NONE, leaderEpoch 0, record)``: one record at ``offset``, for a follower."""
    return encode_batch([Record(offset, timestamp, key, value)], base_offset=offset, partition_leader_epoch=0)


def kv_records(timestamp: int) -> bytes:
    """The three-record batch UnifiedLogTest builds with keys a, b, c and value "value"."""
    return encode_batch([Record(i, timestamp, k, b"value") for i, k in enumerate((b"a", b"b", b"c"))])


def batches(data: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of each whole batch in ``data``."""
    return [
        (h.base_offset, h.last_offset)
        for h in (read_header(data, position) for position, _ in iter_batch_positions(data))
    ]


def records(data: bytes) -> list[Record]:
    """Every record of the whole batches in ``data`` (a read may end mid-batch; that tail is skipped)."""
    out: list[Record] = []
    for position, _ in iter_batch_positions(data):
        out += decode_records(data, position)
    return out


def read_log(log: Log, offset: int, max_bytes: int, *, min_one_message: bool = True) -> FetchDataInfo:
    """LogTestUtils.readLog: LOG_END isolation, ``min_one_message`` unless told."""
    return log.read(offset, max_bytes, Isolation.LOG_END, min_one_message=min_one_message)


# --- appends (19) --------------------------------------------------------------------------------------------------


def test_append_info_first_offset_follows_the_log_end_across_a_roll(tmp_path: Path) -> None:
    """UnifiedLogTest.testAppendInfoFirstOffset"""
    log = new_log(tmp_path, segment_bytes=1024 * 1024)
    now = now_ms()
    assert log.append_as_leader(kv_records(now), 0, now_ms=now).first_offset == 0
    assert log.append_as_leader(kv_records(now), 0, now_ms=now).first_offset == 3
    log.roll()
    assert log.append_as_leader(kv_records(now), 0, now_ms=now).first_offset == 6
    assert [s.base_offset for s in log.segments] == [0, 6]
    for offset in range(log.log_start_offset, log.log_end_offset):
        fetched = log.read(offset, INT32_MAX, Isolation.LOG_END)
        assert fetched.records and not fetched.first_entry_incomplete
        assert fetched.fetch_offset_metadata.message_offset == offset
        assert all(r.offset < log.log_end_offset for r in records(fetched.records))


# --- rolling (20-22, 24-27) ----------------------------------------------------------------------------------------


def test_size_based_roll_when_the_next_batch_would_pass_segment_bytes(tmp_path: Path) -> None:
    """UnifiedLogTest.testSizeBasedLogRoll"""
    now = now_ms()
    set_size = len(singleton(b"test", now))
    msg_per_seg = 10
    log = new_log(tmp_path, segment_bytes=msg_per_seg * (set_size - 1))
    assert len(log.segments) == 1
    for _ in range(msg_per_seg + 1):
        log.append_as_leader(singleton(b"test", now), 0, now_ms=now)
    assert len(log.segments) == 2
    # The rule behind it: roll when size + s > segment.bytes, so 9 batches fit and the 10th starts a segment.
    assert log.segments[1].base_offset == msg_per_seg - 1


def test_time_based_roll_follows_record_time_and_never_rolls_an_empty_segment(tmp_path: Path) -> None:
    """UnifiedLogTest.testTimeBasedLogRollDuringAppend (the empty append is a follower's: see the last step)"""
    segment_ms = 60 * 60
    log = new_log(tmp_path, segment_ms=segment_ms)
    now = now_ms()

    def append(timestamp: int) -> None:
        log.append_as_leader(singleton(b"test", timestamp), 0, now_ms=now)

    assert len(log.segments) == 1
    # Records without a timestamp: the wall clock decides.
    now += segment_ms + 1
    append(NO_TIMESTAMP)
    assert len(log.segments) == 1, "rolling now would leave an empty segment behind"
    append(NO_TIMESTAMP)
    assert len(log.segments) == 2, "segment.ms has passed since the segment was created"
    for expected in (3, 4):
        now += segment_ms + 1
        append(NO_TIMESTAMP)
        assert len(log.segments) == expected

    # A timestamped record in a segment whose first record has none: still the wall clock.
    timestamp = now + segment_ms + 1
    append(timestamp)
    assert len(log.segments) == 4
    now += segment_ms + 1
    append(timestamp)
    assert len(log.segments) == 5
    # The new segment's first record has a timestamp: record time decides, the wall clock no longer does.
    now += segment_ms + 1
    append(timestamp)
    assert len(log.segments) == 5
    append(now)  # a record segment.ms + 1 newer than the segment's first
    assert len(log.segments) == 6

    # Kafka appends an empty MemoryRecords as leader; logfs's leader path takes exactly one batch, and an append of
    # no batch is the follower's (it returns None and changes nothing).
    now += segment_ms + 1
    assert log.append_as_follower(b"", now_ms=now) is None
    assert len(log.segments) == 6


def test_time_based_roll_honours_the_segments_jitter(tmp_path: Path) -> None:
    """UnifiedLogTest.testTimeBasedLogRollJitter

    Run in a segment the log rolled: logfs's loader gives the segments it opens or creates no jitter (Kafka's
    LogLoader does), so the first segment's jitter is always 0. One step added: at exactly segment.ms minus the
    jitter the segment does not roll yet.
    """
    random.seed(JITTER_SEED)
    print(f"jitter seed {JITTER_SEED}")
    segment_ms, max_jitter = 60 * 60, 20 * 60
    log = new_log(tmp_path, segment_ms=segment_ms, segment_jitter_ms=max_jitter)
    now = now_ms()
    log.append_as_leader(singleton(b"test", now), 0, now_ms=now)
    log.roll()
    jitter = log.active_segment.roll.roll_jitter_ms
    assert 0 < jitter < max_jitter

    def append() -> None:
        log.append_as_leader(singleton(b"test", now), 0, now_ms=now)

    append()
    now += segment_ms - max_jitter
    append()
    assert len(log.segments) == 2, "earlier than segment.ms minus the largest jitter"
    now += max_jitter - jitter
    append()
    assert len(log.segments) == 2, "exactly segment.ms minus this segment's jitter: not past it"
    now += 1
    append()
    assert len(log.segments) == 3, "past segment.ms minus this segment's jitter"


def test_truncation_gives_the_active_segments_indexes_their_full_size_back(tmp_path: Path) -> None:
    """UnifiedLogTest.testIndexResizingAtTruncation"""
    now = now_ms()
    set_size = len(singleton(b"test", now))
    msg_per_seg = 10
    log = new_log(tmp_path, segment_bytes=msg_per_seg * set_size, index_interval_bytes=set_size - 1)
    for i in range(1, msg_per_seg + 1):
        log.append_as_leader(singleton(b"test", now + i), 0, now_ms=now)
    assert len(log.segments) == 1
    now += msg_per_seg
    for i in range(1, msg_per_seg + 1):
        log.append_as_leader(singleton(b"test", now + i), 0, now_ms=now)
    assert len(log.segments) == 2
    first = log.segments[0]
    assert first.offset_index.max_entries() == msg_per_seg - 1  # trimmed on roll: every append but the first
    assert first.time_index.max_entries() == msg_per_seg - 1

    log.truncate_to(0)
    assert len(log.segments) == 1
    first = log.segments[0]
    assert first.offset_index.max_entries() == SEGMENT_INDEX_BYTES_DEFAULT // 8
    assert first.time_index.max_entries() == SEGMENT_INDEX_BYTES_DEFAULT // 12

    now += msg_per_seg
    for i in range(1, msg_per_seg + 1):
        log.append_as_leader(singleton(b"test", now + i), 0, now_ms=now)
    assert len(log.segments) == 1
    assert log.log_end_offset == msg_per_seg


def test_roll_onto_an_empty_active_segment_recreates_it(tmp_path: Path) -> None:
    """UnifiedLogTest.testRollSegmentThatAlreadyExists"""
    log = new_log(tmp_path, segment_ms=60 * 60)
    now = now_ms()
    assert len(log.segments) == 1
    log.roll(0)
    assert len(log.segments) == 1, "rolling an empty segment onto its own base re-creates it"

    log.append_as_follower(at(0, b"v1", now, key=b"k1"), now_ms=now)
    assert len(log.segments) == 1
    assert log.active_segment.base_offset == 0
    log.append_as_follower(at(1, b"v2", now + 10, key=b"k2"), now_ms=now)
    assert log.log_end_offset == 2
    assert batches(read_log(log, 0, 1).records)[0][1] == 0
    assert batches(read_log(log, 1, 1).records)[0][1] == 1

    log.roll()
    assert log.active_segment.base_offset == 2, "a roll starts the new segment at the log end offset"
    assert len(log.segments) == 2
    # An empty active segment whose index has no room asks for a roll onto its own base (KAFKA-6388).
    log.active_segment.offset_index.resize(0)
    log.append_as_follower(at(2, b"v3", now + 12, key=b"k3"), now_ms=now)
    assert log.active_segment.offset_index.max_entries() > 1
    assert batches(read_log(log, 2, 1).records)[0][1] == 2
    assert len(log.segments) == 2


def test_append_larger_than_segment_bytes_is_refused(tmp_path: Path) -> None:
    """UnifiedLogTest.testMessageSetSizeCheck"""
    message_set = encode_batch([Record(0, NO_TIMESTAMP, None, b"You"), Record(1, NO_TIMESTAMP, None, b"bethe")])
    log = new_log(tmp_path, segment_bytes=len(message_set) - 1)
    with pytest.raises(RecordBatchTooLarge):
        log.append_as_leader(message_set, 0)
    assert log.log_end_offset == 0 and log.size_bytes == 0


def test_follower_append_past_relative_offset_range_rolls_to_its_offset(tmp_path: Path) -> None:
    """LogLoaderTest.testOverCompactedLogRecovery (logfs keeps no producer snapshot yet: that check is left out)"""
    config = LogConfig(segment_bytes=1000, index_interval_bytes=1, max_message_bytes=64 * 1024)
    directory = tmp_path / "topic-0"
    log = open_log(directory, config)
    big = INT32_MAX + 2
    log.append_as_follower(at(0, b"k1", key=b"v1"))
    assert log.active_segment.base_offset == 0
    log.append_as_follower(at(big, b"k3", key=b"v3"))
    assert log.active_segment.base_offset == big, "the roll goes to max(LEO 1, first offset Int.MAX + 2)"
    log.append_as_follower(at(big + 1, b"k4", key=b"v4"))
    assert log.active_segment.base_offset == big
    log.append_as_follower(at(big + 2, b"k5", key=b"v5"))
    assert log.active_segment.base_offset == big
    assert [s.base_offset for s in log.segments] == [0, big]
    log.close()

    index_files = sorted(directory.glob("*.index"))
    assert [p.name for p in index_files] == [f"{0:020d}.index", f"{big:020d}.index"]
    for path in index_files:
        index = OffsetIndex(path, int(path.name.split(".")[0]), writable=False)
        assert index.last_offset() >= 0
    assert OffsetIndex(index_files[1], big, writable=False).last_offset() == big + 2

    reopened = open_log(directory, config)
    assert reopened.log_end_offset == big + 3
    assert [(r.offset, r.value) for r in records(read_log(reopened, big + 1, 1).records)] == [(big + 1, b"k4")]


# --- reads and isolation (28-35) -----------------------------------------------------------------------------------


def test_read_out_of_range_raises_below_start_and_above_end(tmp_path: Path) -> None:
    """UnifiedLogTest.testReadOutOfRange"""
    directory = tmp_path / "topic-0"
    directory.mkdir()
    (directory / f"{1024:020d}.log").touch()  # createEmptyLogs(logDir, 1024)
    (directory / f"{1024:020d}.index").touch()
    log = open_log(directory, LogConfig(segment_bytes=1024))
    log.append_as_leader(singleton(b"42"), 0)
    assert (log.log_start_offset, log.log_end_offset) == (1024, 1025)

    assert read_log(log, 1025, 1000).records == b"", "a read at the log end offset is empty"
    assert records(read_log(log, 1024, 1000).records)[0].value == b"42"
    with pytest.raises(OffsetOutOfRange):
        read_log(log, 0, 1000)
    with pytest.raises(OffsetOutOfRange):
        read_log(log, 1026, 1000)


def assert_valid_offset_metadata(log: Log, metadata: LogOffsetMetadata) -> None:
    """UnifiedLogTest.assertValidLogOffsetMetadata: the metadata names a segment and the batch position in it."""
    assert not metadata.message_offset_only
    segment = log.segment_for(metadata.segment_base_offset)
    assert segment is not None and segment.base_offset == metadata.segment_base_offset
    assert metadata.relative_position <= segment.size_bytes
    fetched = segment.read(metadata.message_offset, 2048, segment.size_bytes)
    if metadata.relative_position < segment.size_bytes:
        assert fetched is not None and fetched.fetch_offset_metadata == metadata
    else:
        assert fetched is None


def test_fetch_up_to_high_watermark_is_empty_from_it_on(tmp_path: Path) -> None:
    """UnifiedLogTest.testFetchUpToHighWatermark"""
    log = new_log(tmp_path, segment_bytes=1024 * 1024)
    log.append_as_leader(encode_batch([Record(i, NO_TIMESTAMP, None, str(i).encode()) for i in range(3)]), 0)
    log.append_as_leader(encode_batch([Record(i, NO_TIMESTAMP, None, str(3 + i).encode()) for i in range(2)]), 0)

    def assert_high_watermark_bounded_fetches() -> None:
        for offset in range(log.log_start_offset, log.high_watermark):
            fetched = log.read(offset, INT32_MAX, Isolation.HIGH_WATERMARK)
            assert not fetched.first_entry_incomplete
            assert fetched.records
            assert all(r.offset < log.high_watermark for r in records(fetched.records))
            assert fetched.fetch_offset_metadata.message_offset == offset
            assert_valid_offset_metadata(log, fetched.fetch_offset_metadata)
        for offset in range(log.high_watermark, log.log_end_offset + 1):
            fetched = log.read(offset, INT32_MAX, Isolation.HIGH_WATERMARK)
            assert not fetched.first_entry_incomplete
            assert fetched.records == b""
            assert fetched.fetch_offset_metadata.message_offset == offset
            assert_valid_offset_metadata(log, fetched.fetch_offset_metadata)

    assert log.high_watermark == 0
    assert_high_watermark_bounded_fetches()
    assert log.update_high_watermark(3) == 3
    assert_high_watermark_bounded_fetches()
    assert log.update_high_watermark(5) == 5
    assert_high_watermark_bounded_fetches()


def test_high_watermark_metadata_bounds_reads_across_a_roll(tmp_path: Path) -> None:
    """UnifiedLogTest.testHighWatermarkMetadataUpdatedAfterSegmentRoll"""
    log = new_log(tmp_path, segment_bytes=1024 * 1024)
    now = now_ms()
    batch = kv_records(now)

    def assert_fetch(offset: int, size: int, offsets: list[int]) -> None:
        fetched = log.read(offset, 2048, Isolation.HIGH_WATERMARK, min_one_message=False)
        assert len(fetched.records) == size
        assert [r.offset for r in records(fetched.records)] == offsets

    log.append_as_leader(batch, 0, now_ms=now)
    assert_fetch(0, 0, [])
    log.maybe_increment_high_watermark(log.log_end_offset_metadata)
    assert_fetch(0, len(batch), [0, 1, 2])
    log.roll()
    assert_fetch(0, len(batch), [0, 1, 2])
    log.append_as_leader(batch, 0, now_ms=now)
    assert_fetch(3, 0, [])


def test_read_is_bounded_by_max_offset_metadata(tmp_path: Path) -> None:
    """LocalLogTest.testWhenFetchOffsetHigherThanMaxOffset, with the max offset metadata set as the HW

    Kafka passes the bound to LocalLog.read directly; here it is the HW (maybe_increment_high_watermark takes full
    metadata) read with HIGH_WATERMARK isolation. Case 3 (a message-only bound) cannot be expressed: Log.read, like
    UnifiedLog.read, materialises a message-only HW by a lookup first (Kafka's ``fetchHighWatermarkMetadata``), so the
    nearest equivalent is checked: a message-only HW of 4 is materialised to (4, 4, 0) and reads as case 0 does.
    """
    log = new_log(tmp_path, segment_bytes=138)
    now = now_ms()
    for offset in range(5):
        batch = at(offset, b"a", now)
        assert len(batch) == 69
        log.append_as_follower(batch, now_ms=now)
    assert [s.base_offset for s in log.segments] == [0, 2, 4]
    assert log.log_end_offset_metadata == LogOffsetMetadata(5, 4, 69)
    max_length = log.active_segment.size_bytes  # LocalLogTest.readRecords's default

    def read(offset: int) -> FetchDataInfo:
        return log.read(offset, max_length, Isolation.HIGH_WATERMARK, min_one_message=False)

    # case 4: the bound lies on a segment older than the one holding the start offset
    assert log.maybe_increment_high_watermark(LogOffsetMetadata(4, 0, 40)) is not None
    fetched = read(3)
    assert fetched.records == b""
    assert fetched.fetch_offset_metadata == LogOffsetMetadata(3, 2, 69)

    # the same offset known on a newer segment replaces it
    assert log.maybe_increment_high_watermark(LogOffsetMetadata(4, 4, 0)) == LogOffsetMetadata(4, 4, 0)
    # case 0: start offset below the bound
    fetched = read(3)
    assert [r.offset for r in records(fetched.records)] == [3]
    assert fetched.fetch_offset_metadata == LogOffsetMetadata(3, 2, 69)
    # case 1: start offset at the bound
    fetched = read(4)
    assert fetched.records == b""
    assert fetched.fetch_offset_metadata == LogOffsetMetadata(4, 4, 0)
    # case 2: start offset above the bound (here the log end offset)
    fetched = read(5)
    assert fetched.records == b""
    assert fetched.fetch_offset_metadata == LogOffsetMetadata(5, 4, 69)

    # case 3's nearest equivalent: a message-only bound is materialised before it bounds the read
    assert log.update_high_watermark(4) == 4
    fetched = read(3)
    assert [r.offset for r in records(fetched.records)] == [3]
    assert fetched.fetch_offset_metadata == LogOffsetMetadata(3, 2, 69)
    assert log.fetch_high_watermark_metadata() == LogOffsetMetadata(4, 4, 0)


MESSAGE_IDS = [*range(50), *range(50, 200, 7)]


def sparse_log(tmp_path: Path) -> Log:
    """The log of UnifiedLogTest.testReadWithMinMessage: offsets 0..49, then 50, 57, ..., 197, a batch a segment."""
    log = new_log(tmp_path, segment_bytes=72)
    for message_id in MESSAGE_IDS:
        log.append_as_follower(at(message_id, str(message_id).encode()))
    assert len(log.segments) == len(MESSAGE_IDS)
    return log


def test_read_with_too_small_max_length_is_empty_or_one_incomplete_byte(tmp_path: Path) -> None:
    """UnifiedLogTest.testReadWithTooSmallMaxLength"""
    log = sparse_log(tmp_path)
    for i in range(50, max(MESSAGE_IDS)):
        assert read_log(log, i, 0, min_one_message=False).records == b""
        fetched = read_log(log, i, 1, min_one_message=False)
        assert fetched.first_entry_incomplete
        assert len(fetched.records) == 1


def test_read_with_min_one_message_returns_first_record_at_or_after_offset(tmp_path: Path) -> None:
    """UnifiedLogTest.testReadWithMinMessage"""
    log = sparse_log(tmp_path)
    for i in range(50, max(MESSAGE_IDS)):
        expected = next(m for m in MESSAGE_IDS if m >= i)
        for max_length in (1, 100_000, 100):
            first = records(read_log(log, i, max_length).records)[0]
            assert (first.offset, first.key, first.value) == (expected, None, str(expected).encode())


def test_read_inside_compressed_batch_starts_at_its_first_record(tmp_path: Path) -> None:
    """UnifiedLogTest.testCompressedMessages"""
    log = new_log(tmp_path, segment_bytes=110)  # a 2-record gzip batch is 105 bytes here: one a segment
    for values in ((b"hello", b"there"), (b"alpha", b"beta")):
        batch = encode_batch(
            [Record(i, NO_TIMESTAMP, None, v) for i, v in enumerate(values)], compression=Compression.GZIP
        )
        assert len(batch) <= 110
        log.append_as_leader(batch, 0)
    assert [s.base_offset for s in log.segments] == [0, 2]

    def first_offset(offset: int) -> int:
        return records(read_log(log, offset, 4096).records)[0].offset

    assert [first_offset(o) for o in range(4)] == [0, 0, 2, 2]


def test_read_at_log_gap_skips_to_next_segment(tmp_path: Path) -> None:
    """UnifiedLogTest.testReadAtLogGap"""
    log = new_log(tmp_path, segment_bytes=300)
    while len(log.segments) == 1:
        log.append_as_leader(singleton(b"42"), 0)
    log.segments[0].truncate_to(1)  # the first segment keeps offset 0 only: a gap before the next segment
    assert batches(read_log(log, 1, 200).records)[0][1] == log.log_end_offset - 1


# --- truncation (36-39) -------------------------------------------------------------------------------------------


def test_truncate_to_cuts_the_log_and_truncate_fully_restarts_it(tmp_path: Path) -> None:
    """UnifiedLogTest.testTruncateTo"""
    now = now_ms()
    set_size = len(singleton(b"test", now))
    msg_per_seg = 10
    log = new_log(tmp_path, segment_bytes=msg_per_seg * set_size)

    def append_segment() -> None:
        for _ in range(msg_per_seg):
            log.append_as_leader(singleton(b"test", now), 0, now_ms=now)

    append_segment()
    assert len(log.segments) == 1
    assert log.log_end_offset == msg_per_seg
    last_offset, size = log.log_end_offset, log.size_bytes

    assert not log.truncate_to(log.log_end_offset)  # keeps the whole log
    assert (log.log_end_offset, log.size_bytes) == (last_offset, size)
    assert not log.truncate_to(log.log_end_offset + 1)  # beyond the end
    assert (log.log_end_offset, log.size_bytes) == (last_offset, size)
    assert log.truncate_to(msg_per_seg // 2)
    assert log.log_end_offset == msg_per_seg // 2
    assert log.size_bytes < size
    assert log.truncate_to(0)
    assert (log.log_end_offset, log.size_bytes) == (0, 0)

    append_segment()
    assert (log.log_end_offset, log.size_bytes) == (last_offset, size)
    log.truncate_fully_and_start_at(log.log_end_offset - (msg_per_seg - 1))
    assert log.log_end_offset == last_offset - (msg_per_seg - 1)
    assert log.size_bytes == 0

    append_segment()
    assert log.log_end_offset > msg_per_seg
    assert log.size_bytes == size
    assert log.truncate_to(0)  # below the first segment's base
    assert (log.log_end_offset, log.size_bytes) == (0, 0)


def test_truncate_to_deletes_later_segments_and_keeps_appending(tmp_path: Path) -> None:
    """LocalLogTest.testTruncateTo"""
    log = new_log(tmp_path)
    now = now_ms()
    for offset in range(12):
        log.append_as_follower(at(offset, b"a", now), now_ms=now)
        if offset % 3 == 2:
            log.roll()
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9, 12]
    assert log.log_end_offset == 12
    doomed = log.segments[3].log_path  # the empty active segment at 12 has no file yet (files are lazy)

    assert log.truncate_to(7)
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    assert log.active_segment.base_offset == 6
    assert not doomed.exists() and doomed.with_name(doomed.name + ".deleted").exists()
    assert sorted(p.name for p in log.directory.glob("*.log")) == [f"{b:020d}.log" for b in (0, 3, 6)]
    assert log.recovery_point == 0  # a roll leaves its flush to the store's tick (flush_rolled), as Kafka's is async
    assert log.log_end_offset == 7
    fetched = log.read(6, log.active_segment.size_bytes, Isolation.LOG_END, min_one_message=False)
    assert [(r.offset, r.key, r.value) for r in records(fetched.records)] == [(6, None, b"a")]

    log.append_as_follower(at(7, b"a", now), now_ms=now)
    assert log.log_end_offset == 8


def test_segment_truncate_into_a_gap_removes_the_batch_after_it(tmp_path: Path) -> None:
    """LogSegmentTest.shouldTruncateEvenIfOffsetPointsToAGapInTheLog"""
    seg = LogSegment(tmp_path, 40, index_interval_bytes=10, max_index_bytes=1000, handles=HandleCache())
    seg.append(40, NO_TIMESTAMP, -1, at(40, b"first message", 40 * 1000))
    seg.append(43, NO_TIMESTAMP, -1, at(43, b"message after gap", 43 * 1000))
    assert seg.offset_index.entries() == 1  # (43, position of the second batch)

    seg.truncate_to(41)
    fetched = seg.read(40, 10_000)
    assert fetched is not None
    assert batches(fetched.records) == [(40, 40)]
    assert seg.read_next_offset() == 41
    assert seg.offset_index.entries() == 0


def test_truncate_after_unclean_reopen_leaves_one_segment(tmp_path: Path) -> None:
    """LogLoaderTest.testReopenThenTruncate"""
    now = now_ms()
    set_size = len(singleton(b"test", now))
    config = LogConfig(segment_bytes=set_size * 5, segment_index_bytes=1000, index_interval_bytes=10000)
    directory = tmp_path / "topic-0"
    log = open_log(directory, config)
    for _ in range(100):
        log.append_as_leader(singleton(b"test", now), 0, now_ms=now)
    assert len(log.segments) == 20
    log.close()

    log = open_log(directory, config, clean=False)
    assert log.log_end_offset == 100
    assert log.truncate_to(3)
    assert len(log.segments) == 1
    assert log.log_end_offset == 3


def test_leader_appends_batches_from_views_of_one_buffer_in_place(tmp_path: Path) -> None:
    """The mount hands the log writable views into one request buffer: each is stamped where it lies, and stored
    exactly as the same batch given as its own bytearray; a read-only view is copied, its buffer left alone."""
    batches = [encode_batch([Record(0, now_ms(), None, b"v%d" % i * (i + 1))]) for i in range(3)]
    by_view = new_log(tmp_path / "views")
    shared = bytearray(b"".join(batches))
    position = 0
    for batch in batches:
        by_view.append_as_leader(memoryview(shared)[position : position + len(batch)], 7)
        position += len(batch)
    by_array = new_log(tmp_path / "arrays")
    for batch in batches:
        by_array.append_as_leader(bytearray(batch), 7)
    stored = by_view.active_segment.log_path.read_bytes()
    assert stored == by_array.active_segment.log_path.read_bytes()
    assert bytes(shared) == stored  # stamped in place: base offsets 0, 1, 2 and the epoch
    frozen = bytes(batches[0])
    by_view.append_as_leader(memoryview(frozen), 7)
    assert frozen == batches[0]
    assert by_view.log_end_offset == 4


@pytest.mark.parametrize("roll", [True, False])
def test_a_follower_append_rolls_by_time_only_when_asked(tmp_path: Path, roll: bool) -> None:
    """roll=False: a follower that rolls where its leader did never rolls on its own clock (segment.ms)."""
    log = new_log(tmp_path, segment_ms=1000)
    log.append_as_follower(at(0, b"a", timestamp=1_000), now_ms=1_000, roll=roll)
    log.append_as_follower(at(1, b"b", timestamp=90_000), now_ms=90_000, roll=roll)
    assert [s.base_offset for s in log.segments] == ([0, 1] if roll else [0])


def test_a_follower_takes_batches_over_max_message_bytes_and_checks_only_their_crc(tmp_path: Path) -> None:
    log = new_log(tmp_path, max_message_bytes=100)
    big = at(0, b"x" * 500)
    log.append_as_follower(big)  # Kafka's follower does not apply max.message.bytes
    assert log.log_end_offset == 1
    damaged = bytearray(at(1, b"y"))
    damaged[-1] ^= 0xFF
    with pytest.raises(CorruptRecord):
        log.append_as_follower(damaged)
    assert log.log_end_offset == 1


def test_scenario_71_follower_appends_below_the_log_end_or_out_of_order_are_refused(tmp_path: Path) -> None:
    """Reference scenario 71 (UnifiedLogTest.testAppendEmptyLogBelowLogStartOffsetThrowsException,
    testAppendBelowExpectedOffsetThrowsException, testAppendWithOutOfOrderOffsetsThrowsException)."""
    log = new_log(tmp_path / "a")
    log.truncate_fully_and_start_at(7)  # log start = LEO = 7
    three = encode_batch([Record(i, NO_TIMESTAMP, None, b"v") for i in range(4, 7)], base_offset=4)
    with pytest.raises(UnexpectedAppendOffset) as raised:
        log.append_as_follower(three)
    assert (raised.value.first_offset, raised.value.last_offset) == (4, 6)
    assert log.log_end_offset == 7

    log = new_log(tmp_path / "b")
    log.append_as_follower(at(0, b"a") + at(1, b"b"))  # LEO 2
    with pytest.raises(UnexpectedAppendOffset):
        log.append_as_follower(at(0, b"again"))
    assert log.log_end_offset == 2

    log = new_log(tmp_path / "c")
    with pytest.raises(OffsetsOutOfOrder):
        log.append_as_follower(b"".join(at(o, b"x") for o in (0, 1, 3, 2, 4)))
    assert log.log_end_offset == 0


def test_flush_records_makes_records_durable_without_moving_the_recovery_point(tmp_path: Path) -> None:
    """``flush_records`` (an fsync through the mount) syncs the ``.log`` files only: the durable offset moves, the
    recovery point (records and indexes) does not; a truncation lowers the durable offset, and a reopen after an
    unclean stop recovers everything past the recovery point, indexes rebuilt."""
    log = new_log(tmp_path, segment_bytes=300)
    for i in range(10):
        log.append_as_leader(singleton(b"value-%d" % i), 0)
    assert len(log.segments) > 2 and (log.durable_offset, log.recovery_point) == (0, 0)
    log.flush_records(6)
    assert (log.durable_offset, log.recovery_point) == (6, 0)
    log.flush_records()
    assert (log.durable_offset, log.recovery_point) == (10, 0)
    log.truncate_to(7)
    assert log.durable_offset == 7
    log.append_as_leader(singleton(b"again"), 0)
    assert log.durable_offset == 7  # the new record is not synced yet
    log.flush()
    assert log.durable_offset == log.recovery_point == 8
    log.append_as_leader(singleton(b"synced only"), 0)
    log.flush_records()
    assert (log.durable_offset, log.recovery_point) == (9, 8)
    reopened = open_log(tmp_path / "topic-0", log.config, clean=False)  # the records past the recovery point
    assert reopened.log_end_offset == 9
    values = [r.value for o in (7, 8) for r in records(reopened.read(o, 10_000, isolation=Isolation.LOG_END).records)]
    assert values == [b"again", b"synced only"]
