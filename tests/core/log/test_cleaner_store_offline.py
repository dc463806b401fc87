"""The log cleaner's own file operations go through the store's failure channel (issue 16): an I/O error writing,
syncing, renaming, unlinking or stamping a ``.cleaned``/``.swap`` file, an old segment or the swap intent takes the
store offline like any other store file, the round fails with StoreOffline (the partition is not marked uncleanable),
every later write is refused, and a restart on a healthy disk finds the log exactly as before the round or exactly as
after it: the same latest value for every key, no offset twice.

Faults are injected by wrapping the ``os`` call and failing it on the files whose path ends with a suffix, as
tests/core/log/test_store_offline.py does.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from logfs.core import logdirfailure
from logfs.core.config import LogConfig
from logfs.core.errors import StoreOffline
from logfs.core.format.batch import Record, iter_batch_positions
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_batch
from logfs.core.log.cleaner.clean import clean_log
from logfs.core.log.cleaner.logcleaner import LogCleaner
from logfs.core.log.cleaner.offsetmap import OffsetMap
from logfs.core.log.handles import HandleCache
from logfs.core.log.loader import load_log
from logfs.core.log.log import Log
from logfs.core.store import Store

TS = 1_700_000_000_000


def _armed(monkeypatch: pytest.MonkeyPatch, name: str, suffix: str) -> list[str]:
    """Fail ``os.<name>`` with EIO on paths (or descriptors of paths) ending with ``suffix``; the paths hit."""
    real: Callable[..., Any] = getattr(os, name)
    hits: list[str] = []

    def failing(target: Any, *args: Any, **kwargs: Any) -> Any:
        path = os.readlink(f"/proc/self/fd/{target}") if isinstance(target, int) else os.fspath(target)
        if path.endswith(suffix):
            hits.append(path)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real(target, *args, **kwargs)

    monkeypatch.setattr(os, name, failing)
    return hits


def _config() -> LogConfig:
    return LogConfig(segment_bytes=1024, segment_index_bytes=1024, cleanup_policy="compact")  # type: ignore[arg-type]


def _open(directory: Path, *, clean: bool) -> Log:
    return load_log(directory, _config(), HandleCache(), had_clean_shutdown=clean)


def _append(log: Log, key: int, value: int) -> None:
    batch = encode_batch([Record(0, TS, str(key).encode(), str(value).encode())])
    log.append_as_leader(bytearray(batch), 0, now_ms=TS)
    log.update_high_watermark(log.log_end_offset)


def _contents(log: Log) -> tuple[dict[bytes, bytes], list[int]]:
    """The latest value of every key, and every record's offset in order."""
    latest: dict[bytes, bytes] = {}
    offsets: list[int] = []
    for segment in log.segments:
        data = segment.log_file.read(0, segment.size_bytes)
        for position, _ in iter_batch_positions(data):
            for r in decode_records(data, position):
                assert r.key is not None and r.value is not None
                latest[r.key] = r.value
                offsets.append(r.offset)
    return latest, offsets


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Path]:
    """A registered store root with one compacted partition of several segments, most of its keys overwritten."""
    root = tmp_path / "store"
    directory = root / "topic-0"
    directory.mkdir(parents=True)
    channel = logdirfailure.register(root)
    log = _open(directory, clean=True)
    for n in range(120):
        _append(log, n % 10, n)
    assert len(log.segments) > 3
    log.close()
    logdirfailure.unregister(channel)
    yield root


# (os call, path suffix it fails on, the operation the failure names)
CASES = [
    ("pwritev", ".log.cleaned", "write"),
    ("fsync", ".log.cleaned", "fsync"),
    ("fsync", ".index.cleaned", "fsync"),
    ("utime", ".log.cleaned", "utime"),
    ("fsync", "cleaner-swap.intent.tmp", "fsync"),
    ("rename", ".log.cleaned", "rename"),  # .cleaned -> .swap
    ("rename", "00000000000000000000.log", "rename"),  # an old segment -> .deleted
    ("rename", ".log.swap", "rename"),  # .swap -> its final name
    ("unlink", "cleaner-swap.intent", "unlink"),
]


@pytest.mark.parametrize(("call", "suffix", "operation"), CASES, ids=[f"{c}-{s}" for c, s, _ in CASES])
def test_an_io_error_in_a_cleaner_round_takes_the_store_offline_and_a_restart_recovers(
    root: Path, monkeypatch: pytest.MonkeyPatch, call: str, suffix: str, operation: str
) -> None:
    directory = root / "topic-0"
    channel = logdirfailure.register(root)
    log = _open(directory, clean=True)
    before, before_offsets = _contents(log)
    hits = _armed(monkeypatch, call, suffix)
    with pytest.raises(StoreOffline):
        clean_log(log, 0, log.active_segment.base_offset, OffsetMap(1 << 20), TS, lambda _n: None, {})
    monkeypatch.undo()
    assert hits, f"no {call} of a file ending {suffix!r} was made"
    failure = channel.offline
    assert failure is not None and failure.operation == operation and failure.errno == errno.EIO
    assert failure.file.endswith(suffix)
    with pytest.raises(StoreOffline):
        _append(log, 99, 99)  # every later write is refused

    logdirfailure.unregister(channel)  # a restart on a healthy disk: a fresh, online channel
    fresh = logdirfailure.register(root)
    try:
        reopened = _open(directory, clean=False)
        after, after_offsets = _contents(reopened)
        assert fresh.offline is None
        assert after == before  # the latest value of every key, whether the swap was undone or completed
        assert len(after_offsets) == len(set(after_offsets)) and after_offsets == sorted(after_offsets)
        assert set(after_offsets) <= set(before_offsets)
        assert not list(directory.glob("*.cleaned")) and not list(directory.glob("*.swap"))
        _append(reopened, 5, 1000)  # and it takes writes again
        reopened.close()
    finally:
        logdirfailure.unregister(fresh)


def test_an_offline_store_is_skipped_by_the_cleaner_without_marking_the_partition(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cleaner round on an offline store writes nothing (no ``.cleaned`` file) and fails with StoreOffline."""
    directory = root / "topic-0"
    channel = logdirfailure.register(root)
    try:
        log = _open(directory, clean=True)
        channel.fail(directory / "00000000000000000000.log", "fsync", OSError(errno.EIO, "injected"))
        names = sorted(p.name for p in directory.iterdir())
        with pytest.raises(StoreOffline):
            clean_log(log, 0, log.active_segment.base_offset, OffsetMap(1 << 20), TS, lambda _n: None, {})
        assert sorted(p.name for p in directory.iterdir()) == names
    finally:
        logdirfailure.unregister(channel)


def test_a_store_going_offline_in_a_round_marks_no_partition_uncleanable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the store and its LogCleaner: the failed round returns None, the partition stays cleanable (the disk
    failed, not the partition), and the store reports the cleaner's file as the failure."""
    store = Store.open(tmp_path / "store")
    try:
        store.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": "1024"})
        log = store.log("c", 0)
        for n in range(120):
            _append(log, n % 10, n)
        cleaner = LogCleaner.for_store(store, map_memory=1 << 20)
        _armed(monkeypatch, "fsync", ".log.cleaned")
        assert cleaner.clean_once(now_ms=TS + 10**9) is None
        monkeypatch.undo()
        assert cleaner.uncleanable_partitions() == {}
        failure = store.offline
        assert failure is not None and failure.file.endswith(".log.cleaned") and failure.operation == "fsync"
    finally:
        store.abandon()
