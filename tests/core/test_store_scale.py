"""A store of many partitions (issue 24): what the periodic tick, creation, opening and descriptors cost grows with
the work there is, not with the number of partitions.

Sizes are CI-sized: ``LOGFS_SCALE_PARTITIONS`` (default 1,000, a multiple of 5: topics of 5 partitions) runs them
bigger. Costs are counted (logs a tick visits, segments recovered, fsyncs, descriptors), never timed.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from logfs.core import durable
from logfs.core import store as store_module
from logfs.core.configtext import parse_store_config
from logfs.core.format.batch import assign_offset_and_epoch
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_values
from logfs.core.log import loader
from logfs.core.log.log import Isolation, Log
from logfs.core.log.segment import LogSegment
from logfs.core.owners import Owner, Owners
from logfs.core.store import NewTopic, Store
from logfs.core.storedir import HIGH_WATERMARK_CHECKPOINT, RECOVERY_POINT_CHECKPOINT

PARTITIONS = int(os.environ.get("LOGFS_SCALE_PARTITIONS", "1000"))
TOPICS = max(1, PARTITIONS // 5)
CONFIG = parse_store_config(["num.partitions=5"])


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def append_one(log: Log, value: bytes) -> None:
    """One record at the LEO as a follower appends it: no leader epoch, so no epoch checkpoint write (an fsync a
    partition that would make a 1,000-partition test slow)."""
    batch = bytearray(encode_values([value], 1000))
    assign_offset_and_epoch(batch, 0, log.log_end_offset, -1)
    log.append_as_follower(bytes(batch))


def make_store(root: Path) -> Store:
    store = Store.open(root, CONFIG)
    store.create_topics([NewTopic(f"t{i}") for i in range(TOPICS)])
    return store


@pytest.fixture
def count_recoveries(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """How many segments each load recovers (re-scans and re-indexes), by partition directory: the real recovery
    runs, counted on the way in."""
    counts: Counter[str] = Counter()
    original = loader.recover_segment

    def counting(segment: LogSegment, *args: object, **kwargs: object) -> object:
        counts[segment.log_path.parent.name] += 1
        return original(segment, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loader, "recover_segment", counting)
    yield counts


def test_a_tick_visits_only_the_logs_with_work(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    try:
        logs = [log for _, log in store.logs()]
        assert len(logs) == TOPICS * 5
        for log in logs:
            append_one(log, b"x")
        now = int(time.time() * 1000)
        store.tick(now)  # the first tick runs retention (every log, minutes apart) and takes every appended log
        assert store.tasks.tick_visits >= len(logs)
        store.tick(now + 1_000)
        assert store.tasks.tick_visits == 0  # idle: flush.ms never comes, nothing to delete, no log looked at
        for log in logs[:3]:
            append_one(log, b"y")  # already unflushed: no new report
        append_one(logs[0], b"z")
        logs[5].flush()
        append_one(logs[5], b"w")  # flushed, then appended: it reports itself again
        store.tick(now + 2_000)
        assert store.tasks.tick_visits == 1
        store.tick(now + 3_000)
        assert store.tasks.tick_visits == 0
    finally:
        store.abandon()  # a close would flush every log: a thousand fsyncs this test is not about


def test_an_idle_store_does_not_rewrite_its_checkpoints(tmp_path: Path) -> None:
    store = make_store(tmp_path)
    try:
        log = store.log("t0", 0)
        append_one(log, b"x")
        now = int(time.time() * 1000)
        store.tick(now)  # the first due writes, after an open (recovery may have moved values)
        hw_file = tmp_path / HIGH_WATERMARK_CHECKPOINT
        first = os.stat(hw_file).st_ino
        store.tick(now + 6_000)  # the HW checkpoint is due again, nothing moved: not rewritten
        assert os.stat(hw_file).st_ino == first
        log.update_high_watermark(1)
        store.tick(now + 12_000)
        assert os.stat(hw_file).st_ino != first  # a change, and it is written (replace_file: a new inode)
        assert "t0 0 1" in hw_file.read_text()
        recovery = tmp_path / RECOVERY_POINT_CHECKPOINT
        before = os.stat(recovery).st_ino
        log.flush()
        store.tick(now + 70_000)
        assert os.stat(recovery).st_ino != before
        assert "t0 0 1" in recovery.read_text()
    finally:
        store.abandon()


def test_a_tick_flushes_by_flush_ms_from_its_queue(tmp_path: Path) -> None:
    store = Store.open(tmp_path, parse_store_config(["num.partitions=5", "flush.ms=10000"]))
    try:
        store.create_topics([NewTopic("a"), NewTopic("b", 2)])
        log = store.log("a", 3)
        append_one(log, b"x")
        now = log.local.last_flush_ms
        store.tick(now + 1_000)
        assert log.recovery_point == 0  # flush.ms has not passed: queued, not flushed
        store.tick(now + 2_000)
        assert store.tasks.tick_visits == 0  # waiting in the queue costs the tick nothing
        store.tick(now + 10_000)
        assert log.recovery_point == 1
        assert log.unflushed_records == 0
        store.set_topic_overrides("b", {"flush.ms": "0"})
        append_one(store.log("b", 1), b"y")
        store.tick(now + 11_000)
        assert store.log("b", 1).recovery_point == 1
    finally:
        store.close()


def test_create_topics_fsyncs_the_store_directory_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store.open(tmp_path, CONFIG)
    synced: Counter[Path] = Counter()
    real = store_module.fsync_dir

    def counting(directory: Path) -> None:
        synced[directory] += 1
        real(directory)

    monkeypatch.setattr(store_module, "fsync_dir", counting)
    monkeypatch.setattr(durable, "fsync_dir", counting)  # fsync_dirs's, which syncs the new partitions
    try:
        store.create_topics([NewTopic(f"t{i}") for i in range(40)] + [NewTopic("odd", 2, {"retention.ms": "5"})])
        assert synced[tmp_path] == 2  # the store directory: once for the batch, once for odd's overrides file
        partition_dirs = {d for d in synced if d != tmp_path}
        assert len(partition_dirs) == 40 * 5 + 2 and all(synced[d] == 1 for d in partition_dirs)
        assert store.partition_count("t39") == 5 and store.topic_config("odd").retention_ms == 5
        synced.clear()
        store.create_topic("single", 5)
        assert synced[tmp_path] == 1 and len(synced) == 6  # a topic of 5: 6 fsyncs, not 10
        with pytest.raises(store_module.TopicExists):
            store.create_topics([NewTopic("new"), NewTopic("t3")])
        assert not store.has_topic("new")  # checked before anything is made
    finally:
        store.close()


def test_a_clean_open_recovers_no_segment(tmp_path: Path, count_recoveries: Counter[str]) -> None:
    store = make_store(tmp_path)
    for _, log in list(store.logs())[::20]:  # records in some (each costs the close a flush), the rest empty
        append_one(log, b"x")
    store.close()
    count_recoveries.clear()
    with Store.open(tmp_path, CONFIG) as store:
        assert store.had_clean_shutdown
        assert sum(count_recoveries.values()) == 0
        assert sum(log.log_end_offset for _, log in store.logs()) == len(range(0, TOPICS * 5, 20))


def test_an_unclean_open_recovers_only_from_each_recovery_point(
    tmp_path: Path, count_recoveries: Counter[str]
) -> None:
    """Three segments a partition, all flushed; then records past the recovery point of a few: after a crash
    (abandon: no flush, no marker) only each partition's segment holding its recovery point, and what follows, is
    re-scanned, as Kafka's recovery does; the records past the recovery points are all there."""
    partitions = min(PARTITIONS, 50)  # three segments each, flushed: the count matters, not the size
    store = Store.open(tmp_path, parse_store_config(["num.partitions=5", "segment.bytes=200"]))
    store.create_topics([NewTopic(f"t{i}") for i in range(partitions // 5)])
    logs = [log for _, log in store.logs()]
    for log in logs:
        for i in range(3):
            append_one(log, b"v" * 120 + bytes([i]))  # a batch fills a 200-byte segment: each one rolls
        log.flush()
        assert len(log.segments) == 3
    for log in logs[:7]:
        append_one(log, b"late")
    store.tick(int(time.time() * 1000) + 120_000)  # the checkpoints, as the periodic work writes them
    store.abandon()
    count_recoveries.clear()
    with Store.open(tmp_path, CONFIG) as store:
        assert not store.had_clean_shutdown
        assert set(count_recoveries.values()) == {1}  # the segment holding the recovery point, no earlier one
        assert len(count_recoveries) == partitions
        for name, log in store.logs():
            assert log.log_end_offset == (4 if int(name.topic[1:]) * 5 + name.partition < 7 else 3)


@pytest.mark.parametrize("max_open", [1, 2])
def test_readers_of_many_segments_through_a_tiny_handle_cache(tmp_path: Path, max_open: int) -> None:
    """Eight threads read eight segments at once through a cache of one or two: evictions of segments in the
    middle of a read must neither wait for each other (a deadlock) nor close a descriptor under a read (EBADF),
    and the descriptors stay bounded by the cache and the reads in flight."""
    config = parse_store_config(["num.partitions=1", "segment.bytes=300"])
    store = Store.open(tmp_path, config, max_open_segments=max_open)
    try:
        store.create_topic("deep", 1)
        log = store.log("deep", 0)
        for i in range(16):
            append_one(log, b"%03d" % i + b"." * 200)
        log.update_high_watermark(log.log_end_offset)
        assert len(log.segments) >= 8
        baseline = open_fds()
        errors: list[BaseException] = []
        peak = [0]
        stop = time.monotonic() + 1.5

        def reader(start: int) -> None:
            try:
                offset = start
                while time.monotonic() < stop:
                    records = decode_records(log.read(offset, 1 << 20, Isolation.HIGH_WATERMARK).records)
                    assert records[0].value[:3] == b"%03d" % records[0].offset
                    offset = (offset + 3) % 16
                    peak[0] = max(peak[0], open_fds() - baseline)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=reader, args=(i * 2,), daemon=True) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads), "readers deadlocked"
        assert not errors, errors[0]
        assert peak[0] <= 3 * (max_open + 8)  # the cache, and each read in flight holding its segment's files
        assert open_fds() - baseline <= 3 * max_open
    finally:
        store.close()


def test_every_topics_owner_is_read_once_at_open_and_never_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A shared mount asks a topic's owner on every getattr, on its trio thread (mount/access.py): the open reads each
    owner file once (one file per topic: core/owners.py), and no later ask reads one, whatever the count."""
    store = Store.open(tmp_path, CONFIG)
    store.create_topics([NewTopic(f"t{i}", 1, owner=Owner(1000 + i, 1000, 0o750)) for i in range(TOPICS)])
    store.close()
    reads: Counter[str] = Counter()
    real = Owners._read

    def counting(self: Owners, name: str) -> Owner | None:
        reads[name] += 1
        return real(self, name)

    monkeypatch.setattr(Owners, "_read", counting)
    started = time.perf_counter()
    with Store.open(tmp_path, CONFIG) as store:
        opened_s = time.perf_counter() - started
        assert len(reads) == TOPICS and set(reads.values()) == {1}
        reads.clear()
        owners = [store.owners.get(Owners.topic_file(f"t{i}")) for i in range(TOPICS)]
        assert owners == [Owner(1000 + i, 1000, 0o750) for i in range(TOPICS)]
        assert store.owners.get(Owners.topic_file("missing")) is None
        assert not reads
    print(f"opened a store of {TOPICS} owned topics in {opened_s:.2f} s")
