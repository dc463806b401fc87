"""Issue 23, point 4: an acknowledgement covers every segment its records live in, whoever rolled the log.

The loss the issue reports (an acknowledged batch gone from the middle of a batch writer's sequence, later ones
kept) is what an fsync that synced only the *active* segment would do: writer B writes a batch into segment N,
writer A's append rolls the log to N+1, then B's fsync syncs N+1 and returns, N's tail still in the page cache; a
power cut then keeps N+1 and cuts N. These tests hold the core to the opposite, under a power-cut model in the
test process (the POSIX promise, as tests/helpers/faultfs.py keeps it for the mount): each ``.log`` keeps what it held
when its last completed fsync began, and a segment whose name no completed directory fsync that began after its
creation covers is gone. After the cut the store is opened and must hold every acknowledged record, in order:

* B's write, A's rolling append, B's fsync (``flush_records``: fsync(2) through the mount) — and the same with the
  store's tick flushing the rolled segment at that moment (held inside its fsync), and with A's append an O_SYNC
  one (``append_records_to_leader(flush=True)``) that B's ack follows;
* and, so that these tests can fail: the same model catches a flush that syncs the active segment only.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kafka.record import MemoryRecords

from logfs.core.format.encode import encode_values
from logfs.core.log import local as local_module
from logfs.core.log.local import LocalLog
from logfs.core.log.log import Log
from logfs.core.log.logfile import LogFile
from logfs.core.log.segment import LogSegment
from logfs.core.offsets import Isolation
from logfs.core.replication.replica import LeaderPartition
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig

TS = 1_700_000_000_000
HOLD_S = 10.0
SEGMENT_BYTES = 400  # a few one-record batches a segment


@dataclass
class PowerCutModel:
    """What a power cut keeps of the partition directories (see the module docstring): per ``.log``, its size when
    its last completed fsync began; per segment name, whether a directory fsync that began after it completed."""

    synced: dict[str, int] = field(default_factory=dict)  # .log path -> size at the start of its last good fsync
    created: dict[str, int] = field(default_factory=dict)  # .log path -> sequence number of its creation
    dir_synced: dict[str, int] = field(default_factory=dict)  # directory -> sequence at the start of its last fsync
    seq: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self) -> int:
        with self.lock:
            self.seq += 1
            return self.seq

    def cut(self, store: Path, into: Path) -> Path:
        """A copy of ``store`` as the power cut leaves it."""
        shutil.copytree(store, into)
        for log_path, created in self.created.items():
            copy = into / Path(log_path).relative_to(store)
            if created >= self.dir_synced.get(os.path.dirname(log_path), 0):
                for suffix in (".log", ".index", ".timeindex", ".txnindex"):
                    copy.with_suffix(suffix).unlink(missing_ok=True)
                continue
            keep = self.synced.get(log_path, 0)
            if copy.exists() and copy.stat().st_size > keep:
                os.truncate(copy, keep)
        return into


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> PowerCutModel:
    m = PowerCutModel()
    real_create, real_flush, real_fsync_dir = LogFile.create, LogFile.flush, local_module.fsync_dir

    def create(self: LogFile) -> None:
        existed = self.path.exists()
        real_create(self)
        if not existed:
            m.created[str(self.path)] = m.next()

    def flush(self: LogFile) -> None:
        size = self.path.stat().st_size  # the size when the fsync begins: bytes written later are not promised
        real_flush(self)
        with m.lock:
            m.synced[str(self.path)] = max(size, m.synced.get(str(self.path), 0))

    def fsync_dir(directory: Path) -> None:
        began = m.next()
        real_fsync_dir(directory)
        with m.lock:
            m.dir_synced[str(directory)] = max(began, m.dir_synced.get(str(directory), 0))

    monkeypatch.setattr(LogFile, "create", create)
    monkeypatch.setattr(LogFile, "flush", flush)
    monkeypatch.setattr(local_module, "fsync_dir", fsync_dir)
    return m


@pytest.fixture
def store(tmp_path: Path, model: PowerCutModel) -> Iterator[Store]:
    s = Store.open(tmp_path / "store", StoreConfig())
    s.create_topic("t", 1, {"segment.bytes": str(SEGMENT_BYTES)})
    yield s
    s.abandon()  # a crash: the cut copy is what the tests open


def _append(log: Log, value: bytes) -> None:
    log.append_as_leader(encode_values([value], TS), 0)


BATCH_BYTES = len(encode_values([b"a-000"], TS))  # every value below has 5 bytes: every batch this size


def _b_writes_then_a_rolls(log: Log) -> list[bytes]:
    """Acknowledged appends until the active segment has room for one more batch and no second; then writer B's
    batch ``b-000`` (into that segment, not fsynced) and writer A's append ``a-rol``, which rolls the log. The
    values acknowledged before B's write."""
    acked = []
    i = 0
    while not log.local.should_roll(2 * BATCH_BYTES, TS, log.log_end_offset + 1, TS, by_time=False):
        value = f"a-{i:03d}".encode()
        _append(log, value)
        log.flush_records()
        acked.append(value)
        i += 1
    before = len(log.segments)
    _append(log, b"b-000")
    assert len(log.segments) == before, "B's batch rolled: the segment should have had room for it"
    _append(log, b"a-rol")
    assert len(log.segments) == before + 1, "A's append should have rolled"
    assert log.segments[-2].log_file.size_bytes > 0 and log.local.active_segment.log_file.size_bytes == BATCH_BYTES
    return acked


def _survivors(model: PowerCutModel, store: Store, tmp_path: Path) -> list[bytes]:
    """The record values of t-0 after the power cut, in offset order."""
    copy = model.cut(store.path, tmp_path / "after-cut")
    reopened = Store.open(copy)
    try:
        log = reopened.log("t", 0)
        values: list[bytes] = []
        offset = log.log_start_offset
        while offset < log.log_end_offset:  # a read answers from one segment at a time, as Kafka's does
            records = list(_records(log.read(offset, 1 << 30, Isolation.LOG_END).records))
            values += [r.value for r in records]
            offset = records[-1].offset + 1
        return values
    finally:
        reopened.close()


def _records(data: bytes) -> Iterator[Any]:
    batches = MemoryRecords(data)
    while batches.has_next():
        yield from batches.next_batch()


def test_an_fsync_after_another_writers_roll_keeps_the_batch_written_before_it(
    store: Store, model: PowerCutModel, tmp_path: Path
) -> None:
    log = store.log("t", 0)
    acked = _b_writes_then_a_rolls(log)
    log.flush_records()  # B's fsync (fsync(2) through the mount): acknowledges b-000, and a-rol with it
    acked += [b"b-000", b"a-rol"]
    assert _survivors(model, store, tmp_path) == acked


def test_b_writes_a_rolls_b_fsyncs_while_the_tick_flushes_the_rolled_segment(
    store: Store, model: PowerCutModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tick's flush of the rolled segment has begun (it raises the recovery point past that segment once done)
    but not yet fsynced it: B's fsync must not count on it."""
    log = store.log("t", 0)
    acked = _b_writes_then_a_rolls(log)
    entered, release = threading.Event(), threading.Event()
    real = LogSegment.flush

    first = [True]

    def held(segment: LogSegment) -> None:
        if first[0]:  # the tick's flush of the rolled segment (not the reopened store's closing flushes)
            first[0] = False
            entered.set()
            assert release.wait(HOLD_S), "the held flush was never released"
        real(segment)

    monkeypatch.setattr(LogSegment, "flush", held)
    tick = threading.Thread(target=log.flush_rolled, name="tick flush_rolled")
    tick.start()
    try:
        assert entered.wait(HOLD_S), "the tick never began to flush the rolled segment"
        log.flush_records()  # B's fsync
        acked += [b"b-000", b"a-rol"]
        survivors = _survivors(model, store, tmp_path)  # the power cut comes now, before the tick's fsync
    finally:
        release.set()
        tick.join(HOLD_S)
    assert not tick.is_alive()
    assert survivors == acked


def test_an_o_sync_append_that_rolls_keeps_another_writers_batch_before_the_roll(
    store: Store, model: PowerCutModel, tmp_path: Path
) -> None:
    """A's append is an O_SYNC one (the leader append with ``flush``, as the mount's ``batches`` O_SYNC write and
    acks=all use it): its acknowledgement covers B's batch in the segment it rolled away from."""
    log = store.log("t", 0)
    acked = []
    i = 0
    while not log.local.should_roll(2 * BATCH_BYTES, TS, log.log_end_offset + 1, TS, by_time=False):
        value = f"a-{i:03d}".encode()
        _append(log, value)
        log.flush_records()
        acked.append(value)
        i += 1
    _append(log, b"b-000")  # B's write, not yet fsynced
    leader = LeaderPartition(log, node_id=0, replica_ids=(0,), leader_epoch=0, replica_lag_time_max_ms=30_000)
    done = leader.append_records_to_leader([bytearray(encode_values([b"o-syn"], TS))], flush=True)
    assert done.error is None and done.infos[0].rolled
    acked += [b"b-000", b"o-syn"]
    assert _survivors(model, store, tmp_path) == acked


def test_the_model_catches_an_fsync_of_the_active_segment_only(
    store: Store, model: PowerCutModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tests above can fail: with a flush_records that syncs the active segment alone, B's batch is lost."""
    real = LocalLog._segments_holding
    monkeypatch.setattr(LocalLog, "_segments_holding", lambda self, start, end: real(self, start, end)[-1:])
    log = store.log("t", 0)
    acked = _b_writes_then_a_rolls(log)
    log.flush_records()
    survivors = _survivors(model, store, tmp_path)
    assert b"b-000" not in survivors and b"a-rol" in survivors and set(acked) <= set(survivors)
