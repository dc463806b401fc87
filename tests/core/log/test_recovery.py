"""Recovery: Kafka's LogSegmentTest and LogLoaderTest recovery scenarios, ported to
``recover_segment`` and ``load_log`` with Kafka's numbers.

Partition-level scenarios call :func:`~logfs.core.log.loader.load_log` directly, with the clean-shutdown flag, recovery
point and log start offset that Kafka's ``createLog`` takes; the clean-shutdown marker is a store's, so scenario 47
opens a :class:`~logfs.core.store.Store`. Kafka's ``log.close()`` followed by ``createLog(lastShutdownClean =
false)`` is reproduced as it is: a clean close, then a load told the shutdown was unclean.

Damage is written with the helpers below, one damage per test, and every test that damages a log asserts both the
records that remain and the bytes dropped (what went to quarantine: docs/storage.md, "Rules worth knowing"). Random
damage is seeded; the seed is printed, so a failure replays (Kafka's ``TestUtils.RANDOM`` cannot be replayed).

Not ported here: 49 (``LogLoaderTest.testFullTransactionIndexRecovery``) and 50
(``LogSegmentTest.testRecoverTransactionIndex``) need the transaction index and producer state, which the core does
not have yet (issue 7).
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from logfs.core.checkpoint import LeaderEpochCheckpointFile, OffsetCheckpointFile, TopicPartition
from logfs.core.config import LogConfig
from logfs.core.format.batch import Record, iter_batch_positions, read_header
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_batch
from logfs.core.log import loader
from logfs.core.log.epoch import LeaderEpochFileCache
from logfs.core.log.handles import HandleCache
from logfs.core.log.loader import LoadEvent, load_log
from logfs.core.log.log import Isolation, Log
from logfs.core.log.recovery import recover_segment
from logfs.core.log.segment import QUARANTINE_SUFFIX, LogSegment
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig
from logfs.core.storedir import RECOVERY_POINT_CHECKPOINT

NO_TIMESTAMP = -1
SEGMENT_INDEX_INTERVAL_BYTES = 10  # LogSegmentTest.createSegment's default
# LogSegmentTest.createSegment sizes the offset index at 1000 bytes and the time index at 1500 (125 entries, one for
# each of 100 batches with rising timestamps); logfs sizes both from one setting.
SEGMENT_MAX_INDEX_BYTES = 1500


# --- building logs ---------------------------------------------------------------------------------------------------


def new_segment(directory: Path, base_offset: int = 0) -> LogSegment:
    """LogSegmentTest.createSegment: a segment in ``directory`` indexing every append after 10 bytes."""
    return LogSegment(
        directory,
        base_offset,
        index_interval_bytes=SEGMENT_INDEX_INTERVAL_BYTES,
        max_index_bytes=SEGMENT_MAX_INDEX_BYTES,
        handles=HandleCache(),
    )


def segment_records(offset: int, value: str) -> bytes:
    """LogSegmentTest.records(offset, value): one record at ``offset`` with timestamp offset·10."""
    return encode_batch([Record(offset, offset * 10, None, value.encode())], base_offset=offset)


def open_log(
    directory: Path,
    config: LogConfig,
    *,
    clean: bool = True,
    recovery_point: int = 0,
    log_start_offset: int = 0,
    events: list[LoadEvent] | None = None,
) -> Log:
    """UnifiedLogTest.createLog: load ``directory`` as Kafka's LogLoader would after the given shutdown."""
    return load_log(
        directory,
        config,
        HandleCache(),
        had_clean_shutdown=clean,
        recovery_point=recovery_point,
        log_start_offset=log_start_offset,
        on_event=None if events is None else events.append,
    )


def singleton(value: bytes, timestamp: int = NO_TIMESTAMP, key: bytes | None = None) -> bytes:
    """TestUtils.singletonRecords: one record as a producer sends it."""
    return encode_batch([Record(0, timestamp, key, value)])


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def stored_records(log: Log) -> list[Record]:
    """Every record of every segment's ``.log``, in order (Kafka's ``logSegments.flatMap(_.log.records)``)."""
    out: list[Record] = []
    for segment in log.segments:
        data = segment.log_file.read(0, segment.size_bytes)
        for position, _ in iter_batch_positions(data):
            out += decode_records(data, position)
    return out


def first_batch_last_offset(data: bytes) -> int:
    return read_header(data).last_offset


def quarantined(directory: Path) -> dict[str, bytes]:
    """The quarantine files beside the segments, by name, with their bytes."""
    return {p.name: p.read_bytes() for p in sorted(directory.glob(f"*{QUARANTINE_SUFFIX}"))}


def dropped_bytes(events: list[LoadEvent]) -> int:
    return sum(e.dropped_bytes for e in events)


# --- damage ----------------------------------------------------------------------------------------------------------


def overwrite(path: Path, position: int, data: bytes) -> None:
    """Damage: write ``data`` over the file at ``position`` (Kafka's writeNonsenseToFile when ``data`` is random)."""
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def append_garbage(path: Path, data: bytes) -> None:
    """Damage: bytes after the end of the file (Kafka's appendNonsenseToFile when ``data`` is random)."""
    with open(path, "ab") as f:
        f.write(data)


def replace_file(path: Path, data: bytes) -> None:
    """Damage: the file now holds ``data`` and nothing else (Kafka's ``new FileWriter(file).write(...)``)."""
    path.write_bytes(data)


# --- LogSegmentTest (40-42) -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("trial", range(10))
def test_recovery_keeps_exactly_the_batches_before_the_corrupt_one(tmp_path: Path, trial: int) -> None:
    """LogSegmentTest.testRecoveryWithCorruptMessage"""
    seed = 40_000 + trial
    print(f"seed {seed}")
    rng = random.Random(seed)
    segment = new_segment(tmp_path)
    for i in range(20):
        segment.append(i, i * 10, i, segment_records(i, str(i)))
    batches = list(segment.batches())
    size = segment.size_bytes
    corrupt = rng.randrange(20)
    position = batches[corrupt].position + rng.randrange(batches[corrupt].size)  # Kafka: within its first 15 bytes
    overwrite(segment.log_path, position, rng.randbytes(size - position))
    positions = [b.position for b in batches]
    damaged = segment.log_path.read_bytes()

    result = recover_segment(segment)

    assert [b.last_offset for b in segment.batches()] == list(range(corrupt)), f"seed {seed}"
    assert result.valid_bytes == positions[corrupt] and result.damaged_bytes == size - positions[corrupt]
    assert segment.log_path.read_bytes() == damaged[: positions[corrupt]]
    assert list(quarantined(tmp_path).values()) == [damaged[positions[corrupt] :]]


def test_recovery_rebuilds_an_index_overwritten_with_garbage(tmp_path: Path) -> None:
    """LogSegmentTest.testRecoveryFixesCorruptIndex"""
    seed = 41
    print(f"seed {seed}")
    rng = random.Random(seed)
    segment = new_segment(tmp_path)
    for i in range(100):
        segment.append(i, i * 10, i, segment_records(i, str(i)))
    segment.flush()
    index_path = segment.offset_index.path
    size = segment.size_bytes
    length = index_path.stat().st_size
    segment.close_handler()
    overwrite(index_path, 5, rng.randbytes(length - 5))

    result = recover_segment(segment)

    assert result.damaged_bytes == 0 and segment.size_bytes == size
    assert segment.offset_index.entries() > 0
    for i in range(100):
        fetched = segment.read(i, 1, segment.size_bytes, min_one_message=True)
        assert fetched is not None
        assert decode_records(fetched.records)[0].offset == i
    assert quarantined(tmp_path) == {}


def test_recovery_rebuilds_the_epoch_cache_from_batch_leader_epochs(tmp_path: Path) -> None:
    """LogSegmentTest.testRecoveryRebuildsEpochCache"""
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint"))
    segment = new_segment(tmp_path)
    for base, epoch in ((104, 0), (106, 1), (108, 1), (110, 2)):
        batch = encode_batch(
            [Record(base, NO_TIMESTAMP, None, b"a"), Record(base + 1, NO_TIMESTAMP, None, b"b")],
            base_offset=base,
            partition_leader_epoch=epoch,
        )
        segment.append(base + 1, NO_TIMESTAMP, base, batch)

    result = recover_segment(segment, cache)

    assert [(e.epoch, e.start_offset) for e in cache.epoch_entries()] == [(0, 104), (1, 106), (2, 110)]
    assert result.damaged_bytes == 0 and result.next_offset == 112


# --- LogLoaderTest (43-48) --------------------------------------------------------------------------------------------


def test_unclean_reopen_keeps_the_checkpointed_recovery_point_until_a_flush(tmp_path: Path) -> None:
    """LogLoaderTest.testLogRecoversToCorrectOffset"""
    message_bytes = 100
    config = LogConfig(
        segment_bytes=7 * message_bytes, index_interval_bytes=3 * message_bytes, segment_index_bytes=4096
    )
    directory = tmp_path / "topic-0"
    rng = random.Random(43)
    log = open_log(directory, config)
    t0 = now_ms()
    for i in range(100):
        log.append_as_leader(singleton(rng.randbytes(message_bytes), t0 + i * 10), 0, now_ms=t0)
    assert log.log_end_offset == 100
    active = log.active_segment
    last_index_offset = active.offset_index.last_offset()
    index_entries = active.offset_index.entries()
    last_time_entry_timestamp = active.largest_timestamp
    # The final time index entry (largest timestamp, last offset) is written on close unless it is there already.
    time_entries = active.time_index.entries() + (0 if active.time_index.last_entry().offset == 99 else 1)
    log.close()

    def verify(log: Log, recovery_point: int) -> None:
        assert log.recovery_point == recovery_point
        assert log.log_end_offset == 100
        active = log.active_segment
        assert active.offset_index.last_offset() == last_index_offset
        assert active.offset_index.entries() == index_entries
        assert active.time_index.last_entry() == (last_time_entry_timestamp, 99)
        assert active.time_index.entries() == time_entries

    log = open_log(directory, config, clean=False, recovery_point=100)
    verify(log, 100)
    log.close()
    log = open_log(directory, config, clean=False, recovery_point=10)
    verify(log, 10)  # recovery does not advance the recovery point; only a flush does
    log.flush()
    assert log.recovery_point == 100
    log.close()


@pytest.mark.parametrize("trial", range(10))
def test_garbage_after_the_active_segment_is_cut_and_every_record_survives(tmp_path: Path, trial: int) -> None:
    """LogLoaderTest.testCorruptLog"""
    seed = 44_000 + trial
    print(f"seed {seed}")
    rng = random.Random(seed)
    config = LogConfig(segment_bytes=1000, index_interval_bytes=1, max_message_bytes=64 * 1024)
    directory = tmp_path / "topic-0"
    log = open_log(directory, config)
    messages = 50 + rng.randrange(50)
    t0 = now_ms()
    for _ in range(messages):
        log.append_as_leader(singleton(b"test", t0), 0, now_ms=t0)
    records = stored_records(log)
    active = log.active_segment
    log.close()
    log_garbage = rng.randbytes(rng.randrange(1024) + 1)
    append_garbage(active.log_path, log_garbage)
    append_garbage(active.offset_index.path, rng.randbytes(rng.randrange(1024) + 1))

    events: list[LoadEvent] = []
    log = open_log(directory, config, clean=False, recovery_point=50, events=events)

    assert log.log_end_offset == messages, f"seed {seed}"
    recovered = stored_records(log)
    assert [(r.key, r.value, r.timestamp) for r in recovered] == [(r.key, r.value, r.timestamp) for r in records]
    assert dropped_bytes(events) == len(log_garbage)
    assert list(quarantined(directory).values()) == [log_garbage]
    log.close()


@pytest.mark.parametrize("damage", ["deleted", "overwritten"])
def test_missing_or_garbage_indexes_are_rebuilt_on_unclean_reopen(tmp_path: Path, damage: str) -> None:
    """LogLoaderTest.testIndexRebuild / LogLoaderTest.testCorruptIndexRebuild"""
    config = LogConfig(segment_bytes=200, index_interval_bytes=1)
    directory = tmp_path / "topic-0"
    rng = random.Random(45)
    log = open_log(directory, config)
    t0 = now_ms()
    for i in range(200):
        log.append_as_leader(singleton(rng.randbytes(10), t0 + i * 10), 0, now_ms=t0)
    index_files = [s.offset_index.path for s in log.segments] + [s.time_index.path for s in log.segments]
    sizes = [s.size_bytes for s in log.segments]
    log.close()
    for path in index_files:
        if damage == "deleted":
            path.unlink()
        else:
            replace_file(path, b"  ")

    events: list[LoadEvent] = []
    log = open_log(directory, config, clean=False, events=events)

    assert log.log_end_offset == 200
    assert [s.size_bytes for s in log.segments] == sizes and dropped_bytes(events) == 0
    assert log.segments[0].offset_index.entries() > 0, "the index should have been rebuilt"
    assert log.segments[0].time_index.entries() > 0, "the time index should have been rebuilt"
    for i in range(200):
        assert first_batch_last_offset(log.read(i, 100, Isolation.LOG_END).records) == i
        found = log.fetch_offset_by_timestamp(t0 + i * 10)
        assert found is not None
        assert found.offset == (log.segments[0].base_offset if i == 0 else i)
    log.close()


def test_orphan_index_files_are_deleted_and_the_log_appends(tmp_path: Path) -> None:
    """LogLoaderTest.testBogusIndexSegmentsAreRemoved"""
    directory = tmp_path / "topic-0"
    directory.mkdir()
    bogus = [directory / f"{5:020d}.index", directory / f"{5:020d}.timeindex"]
    for path in bogus:
        path.touch()
    record_bytes = len(singleton(b"test", now_ms()))
    config = LogConfig(segment_bytes=record_bytes * 5, segment_index_bytes=1000, index_interval_bytes=1)
    events: list[LoadEvent] = []

    log = open_log(directory, config, events=events)

    assert not any(path.exists() for path in bogus), "the orphan index files should have been deleted"
    assert sorted(e.path for e in events if e.kind == "orphan-index") == sorted(bogus)
    t0 = now_ms()
    for _ in range(10):
        log.append_as_leader(singleton(b"test", t0), 0, now_ms=t0)
    assert log.log_end_offset == 10
    # logfs's indexes are lazy without Kafka's LazyIndex: the first write creates each file.
    first = log.segments[0]
    assert first.offset_index.path.stat().st_size > 0, "the first index file should have been created"
    assert first.time_index.path.stat().st_size > 0, "the first time index file should have been created"
    log.close()


@pytest.mark.parametrize("shutdown", ["clean", "crash"])
def test_deleted_segment_files_are_gone_after_reload(tmp_path: Path, shutdown: str) -> None:
    """LogLoaderTest.testOpenDeletesObsoleteFiles"""
    directory = tmp_path / "topic-0"
    now = now_ms()
    record_bytes = len(singleton(b"test", now - 1000))
    config = LogConfig(segment_bytes=record_bytes * 5, retention_ms=999)
    log = open_log(directory, config)
    for _ in range(100):
        log.append_as_leader(singleton(b"test", now - 1000), 0, now_ms=now)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments(now) == 20
    if shutdown == "clean":
        log.close()
    else:  # the .deleted files wait for file.delete.delay.ms (60 s): a crash leaves them behind
        for segment in log.segments:
            segment.close_handler()
        assert len(list(directory.glob("*.log.deleted"))) == 20

    log = open_log(directory, config, clean=shutdown == "clean")

    assert len(log.segments) == 1, "the deleted segments should be gone"
    assert not list(directory.glob("*.deleted"))
    assert log.log_start_offset == log.log_end_offset == 100
    log.close()


def test_clean_shutdown_marker_skips_recovery_even_from_recovery_point_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LogLoaderTest.testCleanShutdownFile"""
    config = StoreConfig(topic_defaults=LogConfig(segment_bytes=1000, index_interval_bytes=1, max_message_bytes=65536))
    with Store.open(tmp_path, config) as store:
        store.create_topic("topic", 1)
        log = store.log("topic", 0)
        t0 = now_ms()
        for _ in range(100):
            log.append_as_leader(singleton(b"test", t0), 0, now_ms=t0)
    OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).write({TopicPartition("topic", 0): 0})
    recovered: list[LogSegment] = []
    recover = loader.recover_segment
    monkeypatch.setattr(loader, "recover_segment", lambda s, *a, **kw: recovered.append(s) or recover(s, *a, **kw))

    store = Store.open(tmp_path, config)

    assert store.had_clean_shutdown and not (tmp_path / ".kafka_cleanshutdown").exists()
    assert recovered == [], "a clean shutdown must not recover any segment"
    log = store.log("topic", 0)
    assert log.log_end_offset == log.recovery_point == 100
    store.close()


def test_a_clean_reopen_truncates_no_index_and_the_first_append_grows_the_active_ones(tmp_path: Path) -> None:
    """The loader reserves the active segment's index room (AbstractIndex.reserve) instead of resizing: a clean
    open and close with no append leave every index file as the last close trimmed it; the first append grows the
    active indexes to segment.index.bytes, indexes its batch and rolls no segment."""
    config = LogConfig(segment_bytes=10_000, index_interval_bytes=1, segment_index_bytes=SEGMENT_MAX_INDEX_BYTES)
    log = open_log(tmp_path, config)
    t0 = now_ms()
    for i in range(30):
        log.append_as_leader(singleton(b"v%d" % i, t0 + i), 0)
    log.close()
    sizes = {p.name: p.stat().st_size for p in sorted(tmp_path.glob("*.*index"))}
    assert len(sizes) == 2 and all(0 < size < SEGMENT_MAX_INDEX_BYTES for size in sizes.values())  # trimmed
    for _ in range(2):
        log = open_log(tmp_path, config)
        assert log.log_end_offset == 30
        assert {p.name: p.stat().st_size for p in sorted(tmp_path.glob("*.*index"))} == sizes  # no truncate at load
        log.close()
        assert {p.name: p.stat().st_size for p in sorted(tmp_path.glob("*.*index"))} == sizes
    log = open_log(tmp_path, config)
    segments = len(log.segments)
    active = log.segments[-1]
    log.append_as_leader(singleton(b"after", t0 + 100), 0)  # the first after a load is not indexed (Kafka's rule)
    assert active.offset_index.path.stat().st_size == sizes[active.offset_index.path.name]
    log.append_as_leader(singleton(b"again", t0 + 101), 0)
    assert len(log.segments) == segments
    assert active.offset_index.path.stat().st_size == SEGMENT_MAX_INDEX_BYTES // 8 * 8
    assert active.time_index.path.stat().st_size == SEGMENT_MAX_INDEX_BYTES // 12 * 12
    assert active.offset_index.lookup(31).offset == 31
    log.close()
    log = open_log(tmp_path, config)
    assert [r.value for r in stored_records(log)][-3:] == [b"v29", b"after", b"again"]
    assert log.segments[-1].offset_index.lookup(31).offset == 31
    assert log.segments[-1].time_index.lookup(t0 + 101).offset == 31
    log.close()


def test_log_ending_below_the_log_start_offset_restarts_empty_at_it(tmp_path: Path) -> None:
    """LogLoaderTest.testLogEndLessThanStartAfterReopen"""
    config = LogConfig()
    directory = tmp_path / "topic-0"
    log = open_log(directory, config)
    t0 = now_ms()
    for i in range(5):
        log.append_as_leader(singleton(str(i).encode(), t0), 0, now_ms=t0)
        log.roll()
    assert len(log.segments) == 6
    start_offset = 4
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(start_offset)
    assert log.log_end_offset > log.log_start_offset
    # Garbage over a segment below the current log start offset.
    segment_to_force_truncation = log.segments[1]
    later = [s.log_path.read_bytes() for s in log.segments[2:]]  # the last is the empty active segment
    log.close()
    replace_file(segment_to_force_truncation.log_path, b"corruptRecord")

    events: list[LoadEvent] = []
    log = open_log(directory, config, clean=False, log_start_offset=start_offset, events=events)

    assert log.log_start_offset == log.log_end_offset == start_offset
    assert [(s.base_offset, s.size_bytes) for s in log.segments] == [(start_offset, 0)]
    # Every segment after the garbage went to quarantine, then the garbage did; segment 0 lay below the log start
    # offset and was deleted.
    assert [(e.kind, e.dropped_bytes) for e in events if e.kind in ("truncated", "quarantined")] == [
        *(("quarantined", len(data)) for data in later),
        ("truncated", len(b"corruptRecord")),
    ]
    assert sorted(quarantined(directory).values()) == sorted([b"corruptRecord", *later])
    assert not list(directory.glob("*.log"))[1:], "only the new empty segment's .log may remain"
    assert log.epoch_cache.epoch_entries() == []
    log.close()


# --- logfs's own ---------------------------------------------------------------------------------------------------


def test_a_clean_close_after_delete_records_leaves_every_index_and_recovers_nothing(tmp_path: Path) -> None:
    """delete-records raises the recovery point with the log start offset (Kafka's updateLogStartOffset), so the
    close's flush found nothing to do and the active segment, never flushed, had no offset index: the next open
    warned "the offset index is missing" and recovered it (found by tests/mount/test_users_campaign.py). The close
    flushes such a segment, as Kafka's clean shutdown flushes the active one."""
    config = LogConfig()
    directory = tmp_path / "topic-0"
    log = open_log(directory, config)
    t0 = now_ms()
    for i in range(3):
        log.append_as_leader(singleton(str(i).encode(), t0), 0, now_ms=t0)
    log.update_high_watermark(log.log_end_offset)
    assert log.maybe_increment_log_start_offset(3)
    assert log.delete_old_segments(now_ms=t0) == 0  # the active segment stays (only retention may roll it away)
    log.close()
    assert (directory / "00000000000000000000.index").exists()
    events: list[LoadEvent] = []
    log = open_log(directory, config, recovery_point=3, log_start_offset=3, events=events)
    assert [e.kind for e in events if e.kind in ("bad-index", "recovered")] == []
    assert (log.log_start_offset, log.log_end_offset) == (3, 3)
    log.close()


def test_unclean_reopen_with_a_smaller_index_size_keeps_a_sparser_index_and_rolls(tmp_path: Path) -> None:
    """Recovery rebuilds indexes at the size configured now: when ``segment.index.bytes`` shrank since the segment
    was written, the rebuilt index fills up and stops there (Kafka's load fails on the full index); every offset
    still reads, and the next append rolls."""
    directory = tmp_path / "topic-0"
    log = open_log(directory, LogConfig(index_interval_bytes=0))
    t0 = now_ms()
    for i in range(100):
        log.append_as_leader(singleton(str(i).encode(), t0 + i), 0, now_ms=t0)
    log.close()
    small = LogConfig(index_interval_bytes=0, segment_index_bytes=96)

    events: list[LoadEvent] = []
    log = open_log(directory, small, clean=False, events=events)

    assert log.log_end_offset == 100 and dropped_bytes(events) == 0
    active = log.active_segment
    # The time index fills first (8 slots, the last kept for the final entry): 7 entries in each, then that one.
    assert active.offset_index.entries() == 7 and active.time_index.entries() == 8
    for i in range(100):
        assert first_batch_last_offset(log.read(i, 1, Isolation.LOG_END).records) == i
    log.append_as_leader(singleton(b"next", t0 + 100), 0, now_ms=t0)
    assert [s.base_offset for s in log.segments] == [0, 100]
    log.close()
