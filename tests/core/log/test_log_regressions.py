"""Regressions found by review: each test failed before its fix (recovery point, append atomicity, concurrent
truncation, descriptor accounting, checkpoint races, `check` after a crash)."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path

import pytest

from logfs.core.check import check_store
from logfs.core.config import LogConfig
from logfs.core.configtext import parse_store_config
from logfs.core.errors import InvalidLeaderEpoch, StorageError
from logfs.core.format.encode import encode_values
from logfs.core.log.handles import HandleCache
from logfs.core.log.loader import load_log
from logfs.core.log.log import Log
from logfs.core.log.scan import RangeScan
from logfs.core.store import Store


def new_log(tmp_path: Path, **config: int) -> Log:
    return load_log(tmp_path / "t-0", LogConfig(**config), HandleCache(64), had_clean_shutdown=True)  # type: ignore[arg-type]


def append(log: Log, n: int, size: int = 10) -> None:
    for i in range(n):
        log.append_as_leader(encode_values([b"v" * size + b"%d" % i], 1000 + i), 0)


def test_the_recovery_point_never_passes_the_log_end_after_a_truncation(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, 10)
    log.roll()
    append(log, 10)
    log.flush_rolled()
    assert log.recovery_point == 10
    log.truncate_to(5)
    log.flush_rolled()
    assert log.recovery_point <= log.log_end_offset == 5
    append(log, 5)  # offsets 5..9 land in segment 0 again: they must be flushed before the recovery point passes them
    log.roll()
    log.flush_rolled()
    assert log.recovery_point == 10
    log.flush(15)  # past the LEO: clamped
    assert log.recovery_point == log.log_end_offset == 10


def test_a_refused_leader_epoch_writes_nothing_and_offsets_are_not_reused(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, 1)
    size = log.size_bytes
    with pytest.raises(InvalidLeaderEpoch, match="leader epoch -1"):
        log.append_as_leader(encode_values([b"x"], 5), -1)
    assert log.size_bytes == size and log.log_end_offset == 1
    assert log.append_as_leader(encode_values([b"y"], 5), 0).first_offset == 1


def test_a_scan_racing_a_truncation_ends_instead_of_raising(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    for i in range(3):
        log.append_as_leader(encode_values([os.urandom(10_000).hex().encode()], 1000 + i), 0)
    with RangeScan(log, log.segment_snapshot, 0, log.log_end_offset) as scan:
        segment, _ = next(iter(scan))
        batches = segment.batches()
        next(batches)
        log.truncate_to(1)
        assert list(batches) == []


def test_a_descriptor_reopened_during_a_lazy_scan_is_counted_by_the_handle_cache(tmp_path: Path) -> None:
    handles = HandleCache(1)
    a = load_log(tmp_path / "a-0", LogConfig(), handles, had_clean_shutdown=True)
    b = load_log(tmp_path / "b-0", LogConfig(), handles, had_clean_shutdown=True)
    append(a, 3, size=20_000)  # batches larger than a scan's first read: the scan reads again after the eviction
    append(b, 3)
    it = a.active_segment.batches()
    next(it)
    list(b.active_segment.batches())  # evicts a's segment
    list(it)  # reopens a's descriptor mid-scan
    list(b.active_segment.batches())  # a must be evictable again, not open outside the cache
    assert not a.active_segment.log_file.is_open


def test_concurrent_checkpoint_writes_do_not_fail(tmp_path: Path) -> None:
    store = Store.open(tmp_path, parse_store_config([]))
    try:
        store.create_topic("t", 3)
        errors: list[BaseException] = []

        def writer() -> None:
            try:
                for _ in range(200):
                    store.tick(now_ms=2**62)  # every periodic job is due: checkpoints each time
                    store.tasks._due.hw_checkpoint = store.tasks._due.offset_checkpoint = 0
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=writer) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
    finally:
        store.close()


def test_check_of_a_crashed_store_reports_no_damage_in_the_active_indexes(tmp_path: Path) -> None:
    store = Store.open(tmp_path, parse_store_config([]))
    store.create_topic("t", 1)
    append(store.log("t", 0), 200)
    store.log("t", 0).flush()
    store.abandon()
    findings = check_store(tmp_path)
    assert [f for f in findings if f.damage] == []
    assert any(f.kind == "unclean" for f in findings)


def test_deleting_the_same_base_offset_twice_keeps_both_pending_deletions(tmp_path: Path) -> None:
    log = new_log(tmp_path, file_delete_delay_ms=60_000)
    append(log, 3)
    log.roll()  # an empty active segment at 3
    log.roll(3)  # re-created at the same base: the empty one is deleted
    append(log, 1)
    log.truncate_to(3)  # ... and segments are deleted again: the names must not collide
    log.roll(3)
    deleted = sorted(p.name for p in (tmp_path / "t-0").iterdir() if p.name.endswith(".deleted"))
    logs = [n for n in deleted if ".log." in n]
    assert len(logs) == len(set(logs)) >= 2, deleted
    assert log.delete_expired_files(now_ms=2**62) >= 2
    assert not any(p.name.endswith(".deleted") for p in (tmp_path / "t-0").iterdir())


def test_a_store_that_fails_to_load_gives_back_every_descriptor_and_its_lock(tmp_path: Path) -> None:
    store = Store.open(tmp_path, parse_store_config([]))
    store.create_topic("a", 1)
    store.create_topic("b", 1)
    append(store.log("a", 0), 5)
    append(store.log("b", 0), 5)
    store.close()
    checkpoint = tmp_path / "b-0" / "leader-epoch-checkpoint"
    checkpoint.unlink()
    checkpoint.mkdir()  # "b-0" (loaded after "a-0") cannot read its epochs: the load fails
    gc.collect()  # stores other tests dropped without closing give their descriptors back now, not mid-count
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(StorageError, match=r"cannot read checkpoint .*leader-epoch-checkpoint") as failure:
        Store.open(tmp_path, parse_store_config([]))
    assert type(failure.value) is StorageError  # unreadable (a directory), not CorruptCheckpoint: nothing was parsed
    assert len(os.listdir("/proc/self/fd")) == before
    checkpoint.rmdir()
    Store.open(tmp_path, parse_store_config([])).close()  # and the lock was given back
