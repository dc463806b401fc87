"""Storage faults in the core (issue 16; docs/storage.md, "Storage faults"): the store goes offline on the first failed
write, sync, rename or truncate of one of its files, refuses every later write and fsync, never reports durable what the
failed sync may have dropped, and recovers on a healthy disk; reads that meet EIO or a bad stored batch fail, the store
stays up.

Faults are injected by wrapping the ``os`` calls the core makes and failing those on the files a test names (by the
descriptor's path in /proc/self/fd). tests/faults/ proves the same through a real fault-injecting filesystem.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from logfs.core import logdirfailure
from logfs.core.errors import CorruptStoredBatch, DiskFull, ReadFailed, StorageError, StoreOffline
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_values
from logfs.core.log import local as local_module
from logfs.core.log.batchcheck import VerifiedRanges, check_span, read_checked
from logfs.core.logdirfailure import channel_for, offline_state
from logfs.core.store import Store
from logfs.core.storedir import CLEAN_SHUTDOWN_FILE, HIGH_WATERMARK_CHECKPOINT
from logfs.core.txn.producerids import ProducerIdAllocator

TS = 1_700_000_000_000
EPOCH = 0


def _path_of(target: int | str | os.PathLike[str]) -> str:
    if isinstance(target, int):
        try:
            return os.readlink(f"/proc/self/fd/{target}")
        except OSError:
            return ""
    return os.fspath(target)


class Faults:
    """Fail chosen ``os`` calls on the files whose path ends with a suffix: ``arm("fsync", ".log")``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self._monkeypatch = monkeypatch
        self.hits: list[tuple[str, str]] = []

    def arm(self, name: str, suffix: str, code: int = errno.EIO, *, times: int = 1_000_000) -> None:
        real: Callable[..., Any] = getattr(os, name)
        left = [times]

        def failing(target: Any, *args: Any, **kwargs: Any) -> Any:
            path = _path_of(target)
            if path.endswith(suffix) and left[0] > 0:
                left[0] -= 1
                self.hits.append((name, path))
                raise OSError(code, os.strerror(code))
            return real(target, *args, **kwargs)

        self._monkeypatch.setattr(os, name, failing)

    def disarm(self) -> None:
        self._monkeypatch.undo()


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> Iterator[Faults]:
    f = Faults(monkeypatch)
    yield f
    f.disarm()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "store")
    s.create_topic("t", 1)
    yield s
    s.abandon()


def append(store: Store, *values: bytes) -> int:
    """Append one batch of ``values``; the offset after it."""
    info = store.log("t", 0).append_as_leader(encode_values(list(values), TS), EPOCH)
    return info.last_offset + 1


def reopen(store: Store) -> Store:
    store.abandon()
    return Store.open(store.path)


def values_in(store: Store) -> list[bytes]:
    log = store.log("t", 0)
    out: list[bytes] = []
    for segment in log.segments:
        for batch in segment.log_file.batches():
            data = segment.log_file.read(batch.position, batch.size)
            check_span(segment.log_file, data, batch.position)
            out.extend(r.value for r in decode_records(data) if r.value is not None)
    return out


# --- the offline state -------------------------------------------------------------------------------------------


def test_a_failed_segment_fsync_takes_the_store_offline_and_nothing_after_it_is_durable(
    store: Store, faults: Faults, caplog: pytest.LogCaptureFixture
) -> None:
    log = store.log("t", 0)
    append(store, b"a", b"b")
    log.flush_records()
    assert log.durable_offset == 2 and store.offline is None
    append(store, b"c")
    faults.arm("fsync", ".log")
    with caplog.at_level(logging.ERROR, logger="logfs.core.logdirfailure"):
        with pytest.raises(StoreOffline, match=r"cannot fsync .*00000000000000000000\.log"):
            log.flush_records()
    failure = store.offline
    assert failure is not None and failure.file.endswith("t-0/00000000000000000000.log")
    assert (failure.operation, failure.errno, failure.errno_name) == ("fsync", errno.EIO, "EIO")
    assert offline_state(log.directory) == {"file": failure.file, "operation": "fsync", "errno": "EIO"}
    assert [r.levelname for r in caplog.records] == ["ERROR"] and "is offline" in caplog.text
    faults.disarm()  # the disk answers again: a retried fsync would succeed, with the dropped pages gone
    for attempt in (log.flush_records, log.flush, lambda: append(store, b"d"), log.roll):
        with pytest.raises(StoreOffline, match="offline since fsync of"):
            attempt()
    assert log.durable_offset == 2 and log.recovery_point == 0  # never past the last good sync
    assert len(caplog.records) == 1  # logged once, however many refusals follow


def test_enospc_from_fsync_counts_as_eio(store: Store, faults: Faults) -> None:
    append(store, b"a")
    faults.arm("fsync", ".log", errno.ENOSPC)
    with pytest.raises(StoreOffline):
        store.log("t", 0).flush_records()
    assert store.offline is not None and store.offline.errno_name == "ENOSPC"


def test_enospc_from_a_segment_write_refuses_it_and_keeps_the_store_online(store: Store, faults: Faults) -> None:
    append(store, b"a")
    size = store.log("t", 0).active_segment.size_bytes
    faults.arm("pwritev", ".log", errno.ENOSPC)
    with pytest.raises(DiskFull):
        append(store, b"b")
    faults.disarm()
    assert store.offline is None
    assert os.path.getsize(store.log("t", 0).active_segment.log_path) == size  # nothing partial
    assert append(store, b"c") == 2
    store.log("t", 0).flush_records()


def test_eio_from_a_segment_write_takes_the_store_offline_and_cuts_the_bytes_back(
    store: Store, faults: Faults
) -> None:
    append(store, b"a")
    size = store.log("t", 0).active_segment.size_bytes
    faults.arm("pwritev", ".log")
    with pytest.raises(StoreOffline, match="cannot write"):
        append(store, b"b")
    faults.disarm()
    assert store.offline is not None and store.offline.operation == "write"
    assert os.path.getsize(store.log("t", 0).active_segment.log_path) == size
    assert store.log("t", 0).log_end_offset == 1


@pytest.mark.parametrize(
    ("call", "suffix", "operation", "file"),
    [
        ("pwrite", ".index", "write", ".index"),  # an index entry
        ("fsync", ".index", "fsync", ".index"),  # the flush of a rolled segment
        ("truncate", ".timeindex", "truncate", ".timeindex"),  # the roll's trim
        ("rename", ".log", "rename", ".log"),  # retention's .deleted
        ("replace", "replication-offset-checkpoint.tmp", "rename", "/replication-offset-checkpoint"),
        ("fsync", "recovery-point-offset-checkpoint.tmp", "fsync", "recovery-point-offset-checkpoint.tmp"),
        ("fsync", "w-0", "fsync", "w-0"),  # the partition directory after a flush
        ("write", "leader-epoch-checkpoint.tmp", "write", "leader-epoch-checkpoint.tmp"),  # a new leader epoch
    ],
)
def test_every_kind_of_store_file_takes_the_store_offline(
    store: Store, faults: Faults, call: str, suffix: str, operation: str, file: str
) -> None:
    store.create_topic("w", 1, {"index.interval.bytes": "1", "retention.ms": "1", "file.delete.delay.ms": "0"})
    log = store.log("w", 0)
    for i in range(3):
        log.append_as_leader(encode_values([b"v%d" % i], TS), EPOCH)
    log.update_high_watermark(log.log_end_offset)
    faults.arm(call, suffix)
    try:
        log.append_as_leader(encode_values([b"x"], TS), EPOCH + 1)  # index entries; a new epoch's checkpoint
        log.roll()  # trims the indexes
        log.flush()  # the rolled segment, its indexes, the directory
        log.update_high_watermark(log.log_end_offset)
        store.tick(now_ms=time.time_ns() // 1_000_000 + 10**9)  # retention, checkpoints: raises nothing itself
    except StoreOffline:
        pass
    assert store.offline is not None and store.offline.operation == operation, (store.offline, faults.hits)
    assert store.offline.file.endswith(file), store.offline
    with pytest.raises(StoreOffline):
        log.append_as_leader(encode_values([b"y"], TS), EPOCH + 1)


def test_offline_ticks_write_nothing_and_close_leaves_no_clean_shutdown_marker(store: Store, faults: Faults) -> None:
    append(store, b"a")
    store.log("t", 0).roll()
    faults.arm("fsync", ".log")
    store.tick(now_ms=TS)  # the rolled segment's flush fails inside the tick: no exception leaves it
    assert store.offline is not None
    faults.disarm()
    checkpoint = store.path / HIGH_WATERMARK_CHECKPOINT
    before = checkpoint.stat().st_mtime_ns if checkpoint.exists() else None
    store.tick(now_ms=TS + 10**9)
    assert (checkpoint.stat().st_mtime_ns if checkpoint.exists() else None) == before
    path = store.path
    with pytest.raises(StoreOffline):
        store.close()  # descriptors and lock given back, no marker: not a clean shutdown
    assert not (path / CLEAN_SHUTDOWN_FILE).exists()
    again = Store.open(path)
    try:
        assert again.offline is None and not again.had_clean_shutdown
        assert again.log("t", 0).log_end_offset == 1  # written before the failure, and the disk kept it
    finally:
        again.close()


def test_acknowledged_records_survive_a_restart_after_the_failure(store: Store, faults: Faults) -> None:
    log = store.log("t", 0)
    append(store, b"a", b"b")
    log.flush_records()  # acknowledged: offsets 0, 1
    append(store, b"c")
    faults.arm("fsync", ".log")
    with pytest.raises(StoreOffline):
        log.flush_records()
    faults.disarm()
    again = reopen(store)
    try:
        assert again.offline is None
        assert values_in(again)[:2] == [b"a", b"b"]
    finally:
        again.close()


def test_the_transaction_log_and_the_producer_id_block_take_the_store_offline(
    store: Store, faults: Faults
) -> None:
    assert store.transactions is not None
    faults.arm("fsync", ".tmp")  # the producer-id block is replaced atomically (a .tmp, fsynced, renamed)
    allocator = ProducerIdAllocator(store.path)
    with pytest.raises(StoreOffline):
        for _ in range(2000):  # the first block is reserved at open; the next reservation writes
            allocator.allocate()
    assert store.offline is not None and store.offline.operation == "fsync"


def test_enospc_writing_a_checkpoint_keeps_the_store_online(store: Store, faults: Faults) -> None:
    faults.arm("write", ".tmp", errno.ENOSPC)
    with pytest.raises(StorageError):
        store.delete_records("t", 0, 0)  # writes the offset checkpoints
    assert store.offline is None


def test_a_new_partition_and_a_roll_fsync_their_directories_before_an_ack(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real = local_module.fsync_dir

    def recording(directory: Path) -> None:
        synced.append(os.path.basename(directory))
        real(directory)

    monkeypatch.setattr(local_module, "fsync_dir", recording)
    log = store.log("t", 0)
    append(store, b"a")
    log.flush_records()
    assert synced == []  # no name was created since the partition was made durable
    log.roll()
    append(store, b"b")
    log.flush_records()
    assert synced == ["t-0"]  # the new segment's name, before the fsync(2) that depends on it returns
    append(store, b"c")
    log.flush_records()
    assert synced == ["t-0"]
    import logfs.core.store as store_module

    created: list[str] = []
    real_store = store_module.fsync_dir
    monkeypatch.setattr(store_module, "fsync_dir", lambda d: (created.append(os.path.basename(d)), real_store(d)))
    import logfs.core.durable as durable_module  # new partition directories: durable.fsync_dirs (issue 24)

    monkeypatch.setattr(durable_module, "fsync_dir", lambda d: (created.append(os.path.basename(d)), real_store(d)))
    store.create_topic("u", 1)
    assert created == ["u-0", os.path.basename(store.path)]


# --- reads --------------------------------------------------------------------------------------------------------


def test_a_read_that_meets_eio_fails_alone_and_is_counted(store: Store, faults: Faults) -> None:
    append(store, b"a")
    segment = store.log("t", 0).active_segment
    faults.arm("pread", ".log")
    with pytest.raises(ReadFailed, match="cannot read"):
        segment.log_file.read(0, 10)
    faults.disarm()
    assert store.offline is None and store.failure.read_errors == 1
    assert len(segment.log_file.read(0, 10)) == 10


def _flip(path: Path, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x10]))


def test_a_bit_flipped_batch_is_never_served_and_names_segment_and_position(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(3):
        append(store, b"value-%d" % i * 10)
    segment = store.log("t", 0).active_segment
    batches = list(segment.log_file.batches())
    _flip(segment.log_path, batches[1].position + batches[1].size - 3)  # inside the second batch's records
    data = segment.log_file.read(0, segment.size_bytes)
    with caplog.at_level(logging.ERROR), pytest.raises(CorruptStoredBatch, match="fails its CRC-32C") as info:
        check_span(segment.log_file, data, 0)
    assert info.value.position == batches[1].position and info.value.path == str(segment.log_path)
    assert f"at byte {batches[1].position}" in caplog.text
    assert store.failure.corrupt_batches == 1 and store.offline is None
    # a .kafka read at any byte of the span: the first batch alone is fine, the damaged one fails
    assert read_checked(segment, 0, segment.size_bytes, 3, batches[0].size - 3) == data[3 : batches[0].size]
    with pytest.raises(CorruptStoredBatch):
        read_checked(segment, 0, segment.size_bytes, batches[0].size + 5, 10)


def test_a_damaged_batch_length_is_a_framing_error(store: Store) -> None:
    append(store, b"a")
    segment = store.log("t", 0).active_segment
    _flip(segment.log_path, 9)  # batchLength's second byte: it now reaches past the segment
    data = segment.log_file.read(0, segment.size_bytes)
    with pytest.raises(CorruptStoredBatch, match="framing"):
        check_span(segment.log_file, data, 0)


def test_verdicts_are_kept_per_range_and_dropped_by_a_truncation(store: Store) -> None:
    for i in range(4):
        append(store, b"v%d" % i)
    log = store.log("t", 0)
    log_file = log.active_segment.log_file
    size = log_file.size_bytes
    check_span(log_file, log_file.read(0, size), 0)
    assert log_file.verified.covers(0, size)
    log.truncate_to(2)
    assert len(log_file.verified) == 0


def test_verified_ranges_merge_and_answer_boundaries() -> None:
    ranges = VerifiedRanges()
    ranges.add(10, 20)
    ranges.add(30, 40)
    assert ranges.covers(12, 20) and not ranges.covers(12, 21) and not ranges.covers(20, 25)
    assert ranges.containing(35) == (30, 40) and ranges.containing(20) is None
    assert ranges.boundary_at_or_below(25) == 20 and ranges.boundary_at_or_below(5) == -1
    ranges.add(20, 30)
    assert len(ranges) == 1 and ranges.covers(10, 40)
    ranges.add(0, 50)
    assert len(ranges) == 1 and ranges.covers(0, 50)


def test_files_outside_every_store_share_their_directorys_channel(tmp_path: Path) -> None:
    a = channel_for(tmp_path / "x.log")
    assert channel_for(tmp_path / "y.index") is a
    assert logdirfailure.channel_for_dir(tmp_path) is a


# --- recovery on a healthy disk ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["zeroed-tail", "cut-tail", "short-index", "long-index", "no-checkpoints"])
def test_recovery_after_the_failure_keeps_every_acknowledged_record(store: Store, damage: str) -> None:
    """What a failure may leave after the recovery point: a range zeroed (pages dropped, size kept) or cut (pages
    dropped, size back), an index shorter or longer than its segment, checkpoints missing. The acknowledged records
    (below the durable offset) all come back; the log ends at the first damage after them."""
    store.set_topic_overrides("t", {"index.interval.bytes": "1"})  # an index entry per batch
    log = store.log("t", 0)
    append(store, b"first")
    log.roll()  # a second segment: the damage lies past the recovery point, in the active one
    for i in range(5):
        append(store, b"acked-%d" % i)
    log.flush_records()
    store.tick(now_ms=time.time_ns() // 1_000_000 + 10**9)  # checkpoints as the periodic work writes them
    for i in range(3):
        append(store, b"unsynced-%d" % i)
    segment = log.active_segment
    acked_end = sum(b.size for b in list(segment.log_file.batches())[:5])
    path, size = segment.log_path, segment.size_bytes
    store.abandon()  # the crash
    if damage == "zeroed-tail":
        with open(path, "r+b") as f:
            f.seek(acked_end)
            f.write(bytes(size - acked_end))
    elif damage == "cut-tail":
        os.truncate(path, acked_end + 7)
    elif damage == "short-index":
        os.truncate(path.with_suffix(".index"), 8)  # one entry left
    elif damage == "long-index":
        with open(path.with_suffix(".index"), "ab") as f:
            f.write(bytes(800))
    else:
        for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
            (store.path / name).unlink(missing_ok=True)
    again = Store.open(store.path)
    try:
        values = values_in(again)
        assert values[:6] == [b"first"] + [b"acked-%d" % i for i in range(5)]
        kept = 9 if damage in ("short-index", "long-index", "no-checkpoints") else 6
        assert len(values) == kept and again.log("t", 0).log_end_offset == kept
        again.log("t", 0).append_as_leader(encode_values([b"after"], TS), EPOCH)  # and it takes writes again
    finally:
        again.close()


def test_kafka_reads_at_any_byte_check_each_batch_and_read_a_large_one_whole_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.set_topic_overrides("t", {"index.interval.bytes": "1"})
    log = store.log("t", 0)
    log.roll()
    for i in range(4):
        append(store, *[b"%d-%05d-" % (i, j) + b"v" * 90 for j in range(1200)])  # ~120 KB batches
    segment = log.active_segment
    size = segment.size_bytes
    whole = segment.log_file.read(0, size)
    monkeypatch.setattr("logfs.core.log.batchcheck.REREAD_BYTES", 4096)
    reads: list[int] = []
    real = segment.log_file.read

    def counting(position: int, n: int) -> bytes:
        reads.append(n)
        return real(position, n)

    monkeypatch.setattr(segment.log_file, "read", counting)
    got = b"".join(read_checked(segment, 0, size, p, 8192) for p in range(0, size, 8192))
    assert got == whole
    # each byte read in its window, and once more in its whole batch: not once per 8 KiB read of the batch (~8x)
    assert sum(reads) <= 2 * size + 16 * 8192
    monkeypatch.setattr(segment.log_file, "read", real)
    batches = list(segment.log_file.batches())
    _flip(segment.log_path, batches[2].position + 5000)
    segment.log_file.verified.clear()
    with pytest.raises(CorruptStoredBatch) as info:
        for p in range(0, size, 8192):
            read_checked(segment, 0, size, p, 8192)
    assert info.value.position == batches[2].position


def test_a_kafka_read_rechecks_a_small_batch_crossing_its_end_but_trusts_a_large_ones_verdict(store: Store) -> None:
    """The documented limit (docs/storage.md, "The limit, precisely"): a bit that flips after a first pass, in the
    part of a batch crossing a read's end, fails the second pass when the batch is at most REREAD_BYTES long, and is
    served on the cache's verdict when it is larger."""
    log = store.log("t", 0)
    for j in range(40):
        append(store, b"small-%03d-" % j + b"s" * 500)  # ~0.6 KB batches
    big_at = log.active_segment.size_bytes
    append(store, *[b"big-%05d-" % j + b"b" * 90 for j in range(1500)])  # one ~150 KB batch (> REREAD_BYTES)
    segment = log.active_segment
    size = segment.size_bytes
    small = [b for b in segment.log_file.batches() if b.position < big_at]
    crossing = small[len(small) // 2]
    cut = crossing.position + crossing.size // 2  # a read ends inside this small batch
    read_checked(segment, 0, size, 0, cut)  # the first pass: the crossing batch is read whole, its verdict cached
    assert segment.log_file.verified.covers(crossing.position, crossing.position + crossing.size)
    _flip(segment.log_path, crossing.position + 30)  # inside the part of it the same read serves
    with pytest.raises(CorruptStoredBatch) as info:
        read_checked(segment, 0, size, 0, cut)
    assert info.value.position == crossing.position
    _flip(segment.log_path, crossing.position + 30)  # heal it

    big_cut = big_at + 100_000
    read_checked(segment, 0, size, big_at, big_cut - big_at)  # the large batch read whole once, its verdict cached
    _flip(segment.log_path, big_at + 1000)  # inside the served part of the large batch
    served = read_checked(segment, 0, size, big_at, big_cut - big_at)  # the limit: served on the verdict
    assert len(served) == big_cut - big_at
    segment.log_file.verified.clear()  # without the verdict, the same read fails
    with pytest.raises(CorruptStoredBatch):
        read_checked(segment, 0, size, big_at, big_cut - big_at)
