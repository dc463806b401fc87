"""Transactions in the log: markers, the ``.txnindex``, the last stable offset and read_committed reads, with Kafka's
numbers (its LogLoaderTest, LogSegmentTest and UnifiedLogTest), plus snapshots, recovery, truncation and replication of
that state."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from consumer_filter import committed_records
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder

from logfs.core.config import LogConfig
from logfs.core.errors import CoordinatorFenced, ProducerFenced
from logfs.core.format.batch import Record, read_header
from logfs.core.format.encode import encode_batch
from logfs.core.log.handles import HandleCache
from logfs.core.log.loader import load_log
from logfs.core.log.log import Isolation, Log
from logfs.core.log.recovery import recover_segment
from logfs.core.log.segment import LogSegment
from logfs.core.txn.index import AbortedTxn
from logfs.core.txn.producerstate import ProducerStateManager

EPOCH = 0


def open_log(directory: Path, *, clean: bool = True, recovery_point: int = 0, **config: int) -> Log:
    return load_log(
        directory, LogConfig(**config), HandleCache(), had_clean_shutdown=clean, recovery_point=recovery_point
    )


class Appender:
    """UnifiedLogTest's appendTransactionalAsLeader / appendNonTransactionalAsLeader / appendEndTxnMarkerAsLeader."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.sequences: dict[int, int] = {}

    def txn(self, pid: int, n: int, epoch: int = 0) -> None:
        seq = self.sequences.get(pid, 0)
        builder = DefaultRecordBatchBuilder(
            magic=2, compression_type=0, is_transactional=True, producer_id=pid, producer_epoch=epoch,
            base_sequence=seq, batch_size=1 << 20,
        )  # fmt: skip
        for i in range(n):
            builder.append(i, timestamp=1000, key=None, value=b"p%d-%d" % (pid, seq + i), headers=[])
        self.log.append_as_leader(bytes(builder.build()), EPOCH)
        self.sequences[pid] = seq + n

    def plain(self, n: int) -> None:
        start = self.log.log_end_offset
        self.log.append_as_leader(encode_batch([Record(i, 1000, None, b"plain-%d" % (start + i)) for i in range(n)]), 0)

    def end(self, pid: int, *, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> int:
        info = self.log.append_end_txn_marker(
            pid, epoch, commit=commit, coordinator_epoch=coordinator_epoch, leader_epoch=EPOCH, now_ms=2000
        )
        return info.first_offset


def mixed_transactions(log: Log) -> None:
    """The data of LogLoaderTest.testFullTransactionIndexRecovery and UnifiedLogTest.testTransactionIndexUpdated."""
    a = Appender(log)
    a.txn(1, 5)  # 5
    a.plain(3)  # 8
    a.txn(2, 2)  # 10
    a.txn(1, 4)  # 14
    a.txn(3, 3)  # 17
    a.plain(2)  # 19
    a.txn(1, 10)  # 29
    assert a.end(1, commit=False) == 29  # 30
    a.txn(2, 6)  # 36
    a.txn(4, 3)  # 39
    a.plain(10)  # 49
    a.txn(3, 9)  # 58
    assert a.end(3, commit=True) == 58  # 59
    a.txn(4, 8)  # 67
    a.txn(2, 7)  # 74
    assert a.end(2, commit=False) == 74  # 75
    a.plain(10)  # 85
    a.txn(4, 4)  # 89
    assert a.end(4, commit=True) == 89  # 90


KAFKA_ABORTED = [AbortedTxn(1, 0, 29, 8), AbortedTxn(2, 8, 74, 36)]


def all_aborted(log: Log) -> list[AbortedTxn]:
    return [t for s in log.segments for t in s.txn_index.entries()]


def summary(log: Log) -> dict[int, tuple[int, int, int, int, int]]:
    """What a snapshot keeps of each producer: epoch, coordinator epoch, last sequence and offset, open txn."""
    return {
        p: (e.producer_epoch, e.coordinator_epoch, e.last_seq, e.last_data_offset, e.current_txn_first_offset)
        for p, e in log.producer_state.producers.items()
    }


def txnindex_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.txnindex"))}


# --- Kafka's scenarios -----------------------------------------------------------------------------------------------


def test_transaction_index_updated(tmp_path: Path) -> None:
    """UnifiedLogTest.testTransactionIndexUpdated."""
    log = open_log(tmp_path / "t-0", segment_bytes=128 * 30)
    mixed_transactions(log)
    assert all_aborted(log) == KAFKA_ABORTED
    assert log.collect_aborted_transactions(0, 100) == KAFKA_ABORTED
    log.update_high_watermark(30)
    assert log.first_unstable_offset == 8
    log.update_high_watermark(75)
    assert log.first_unstable_offset == 36
    log.update_high_watermark(90)
    assert log.first_unstable_offset is None
    assert log.last_stable_offset == 90


def test_full_transaction_index_recovery(tmp_path: Path) -> None:
    """LogLoaderTest.testFullTransactionIndexRecovery: every .index, .txnindex and .snapshot deleted."""
    directory = tmp_path / "t-0"
    log = open_log(directory, segment_bytes=128 * 5)
    mixed_transactions(log)
    written = txnindex_files(directory)
    assert len(log.segments) > 3 and written
    log.close()
    for pattern in ("*.index", "*.txnindex", "*.snapshot"):
        for f in directory.glob(pattern):
            f.unlink()
    reloaded = open_log(directory, clean=False, segment_bytes=128 * 5)
    assert all_aborted(reloaded) == KAFKA_ABORTED
    assert txnindex_files(directory) == written


@pytest.mark.parametrize("from_segment", [0, 1, 2, 3])
def test_unclean_reopen_rebuilds_the_txnindex_from_a_snapshot(tmp_path: Path, from_segment: int) -> None:
    """Unclean shutdown: recovery starts at the segment holding the recovery point, from the roll snapshot at its
    base, and rebuilds every later .txnindex byte for byte."""
    directory = tmp_path / "t-0"
    log = open_log(directory, segment_bytes=128 * 5)
    mixed_transactions(log)
    log.flush_rolled()
    written = txnindex_files(directory)
    live = (summary(log), log.open_transactions())
    recovery_point = log.segments[from_segment].base_offset
    for f in directory.glob("*.txnindex"):
        if int(f.name.split(".")[0]) >= recovery_point:
            f.unlink()
    reloaded = open_log(directory, clean=False, recovery_point=recovery_point, segment_bytes=128 * 5)
    assert txnindex_files(directory) == written
    assert all_aborted(reloaded) == KAFKA_ABORTED
    assert (summary(reloaded), reloaded.open_transactions()) == live


def test_recover_transaction_index(tmp_path: Path) -> None:
    """LogSegmentTest.testRecoverTransactionIndex."""

    def txn_batch(pid: int, offset: int) -> bytes:
        return encode_batch(
            [Record(offset, 10, None, b"a"), Record(offset + 1, 10, None, b"b")], base_offset=offset,
            producer_id=pid, producer_epoch=0, base_sequence=offset, is_transactional=True,
        )  # fmt: skip

    def marker(pid: int, offset: int, commit: bool) -> bytes:
        from logfs.core.format.control import ControlType
        from logfs.core.format.encode import encode_end_txn_marker

        return encode_end_txn_marker(
            ControlType.COMMIT if commit else ControlType.ABORT, producer_id=pid, producer_epoch=0,
            coordinator_epoch=0, timestamp=10, base_offset=offset,
        )  # fmt: skip

    segment = LogSegment(tmp_path, 100, index_interval_bytes=10, max_index_bytes=1024, handles=HandleCache())
    plain = encode_batch([Record(104, 10, None, b"c"), Record(105, 10, None, b"d")], base_offset=104)
    for data, last in ((txn_batch(1, 100), 101), (txn_batch(2, 102), 103), (plain, 105)):
        segment.append(last, 10, last, data)
    segment.append(106, 10, 106, marker(2, 106, commit=False))
    segment.append(107, 10, 107, marker(1, 107, commit=True))

    state = ProducerStateManager(tmp_path, 100)
    recover_segment(segment, producer_state=state)
    assert state.map_end_offset == 108
    assert segment.txn_index.entries() == (AbortedTxn(2, 102, 106, 100),)

    state = ProducerStateManager(tmp_path, 75)
    earlier = read_header(txn_batch(2, 75))
    state.apply(state.prepare_replicated_batch(earlier, 10))  # pid 2's transaction was already open at 75
    state.update_map_end_offset(100)
    recover_segment(segment, producer_state=state)
    assert segment.txn_index.entries() == (AbortedTxn(2, 75, 106, 100),)


def test_fetch_up_to_last_stable_offset(tmp_path: Path) -> None:
    """UnifiedLogTest.testFetchUpToLastStableOffset."""
    log = open_log(tmp_path / "t-0")
    a = Appender(log)
    a.txn(1, 5)  # 0-4
    a.plain(3)  # 5-7
    a.txn(2, 2)  # 8-9
    a.txn(1, 4)  # 10-13
    a.plain(2)  # 14-15
    a.txn(1, 10)  # 16-25
    log.update_high_watermark(26)
    assert log.last_stable_offset == 0
    assert log.read(0, 1 << 20, Isolation.TXN_COMMITTED).records == b""

    assert a.end(1, commit=True) == 26
    log.update_high_watermark(26)
    assert log.last_stable_offset == 0
    log.update_high_watermark(27)
    assert log.last_stable_offset == 8
    read = log.read(0, 1 << 20, Isolation.TXN_COMMITTED)
    assert read.records and read_header(read.records).base_offset == 0
    assert all(read_header(read.records, p).last_offset < 8 for p in _positions(read.records))
    for offset in range(8, log.log_end_offset + 1):  # at or above the LSO, up to the LEO: empty
        assert log.read(offset, 1 << 20, Isolation.TXN_COMMITTED).records == b""

    assert a.end(2, commit=False) == 27
    log.update_high_watermark(27)
    assert log.last_stable_offset == 8
    log.update_high_watermark(28)
    assert log.last_stable_offset == 28 == log.log_end_offset
    read = log.read(8, 1 << 20, Isolation.TXN_COMMITTED)
    assert read.aborted_transactions == (AbortedTxn(2, 8, 27, 28),)


def _positions(data: bytes) -> list[int]:
    from logfs.core.format.batch import iter_batch_positions

    return [p for p, _ in iter_batch_positions(data)]


def test_last_stable_offset_does_not_exceed_log_start_offset_mid_segment(tmp_path: Path) -> None:
    """UnifiedLogTest.testLastStableOffsetDoesNotExceedLogStartOffsetMidSegment."""
    log = open_log(tmp_path / "t-0")
    a = Appender(log)
    a.txn(1, 5)
    a.txn(1, 3)
    log.roll()
    assert log.active_segment.base_offset == 8
    log.update_high_watermark(8)
    assert log.first_unstable_offset == 0
    log.maybe_increment_log_start_offset(5)
    assert log.first_unstable_offset == 5
    assert log.last_stable_offset == 5


def test_aborted_transaction_spanning_multiple_segments(tmp_path: Path) -> None:
    """UnifiedLogTest.testAbortedTransactionSpanningMultipleSegments."""
    probe = open_log(tmp_path / "probe-0")
    Appender(probe).txn(1, 3)
    batch_bytes = probe.size_bytes
    log = open_log(tmp_path / "t-0", segment_bytes=batch_bytes)
    a = Appender(log)
    a.txn(1, 3)
    a.txn(1, 3)
    assert [s.base_offset for s in log.segments] == [0, 3]
    a.end(1, commit=False)
    log.update_high_watermark(log.log_end_offset)
    read = log.read(0, batch_bytes, Isolation.TXN_COMMITTED, min_one_message=True)
    assert [(t.producer_id, t.first_offset) for t in read.aborted_transactions or ()] == [(1, 0)]
    assert list(committed_records(read.records, read.aborted_transactions or ())) == []


# --- markers, LSO and read_committed ----------------------------------------------------------------------------


def test_interleaved_transactions_committed_view(tmp_path: Path) -> None:
    """Two producers interleaved, one committed and one aborted: the filter keeps committed and plain records."""
    log = open_log(tmp_path / "t-0", segment_bytes=400)
    a = Appender(log)
    a.txn(1, 2)
    a.txn(2, 2)
    a.plain(1)
    a.txn(2, 1)
    a.txn(1, 1)
    a.end(1, commit=True)
    a.plain(1)
    a.end(2, commit=False)
    a.plain(2)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset
    values = []
    offset = 0
    while offset < log.last_stable_offset:
        read = log.read(offset, 150, Isolation.TXN_COMMITTED)
        assert read.aborted_transactions is not None
        got = list(committed_records(read.records, read.aborted_transactions))
        values.extend(r.value for r in got)
        last = max(read_header(read.records, p).last_offset for p in _positions(read.records))
        offset = last + 1
    assert values == [b"p1-0", b"p1-1", b"plain-4", b"p1-2", b"plain-8", b"plain-10", b"plain-11"]
    assert log.read(0, 1 << 20, Isolation.HIGH_WATERMARK).aborted_transactions is None


def test_lso_pinned_under_an_open_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    a = Appender(log)
    a.plain(2)
    a.txn(7, 3)  # 2-4
    a.plain(2)  # 5-6
    log.update_high_watermark(7)
    assert (log.last_stable_offset, log.first_unstable_offset) == (2, 2)
    assert log.open_transactions() == [(7, 2)]
    a.end(7, commit=True)  # 7
    assert log.open_transactions() == []
    assert log.last_stable_offset == 2  # the marker is not below the HW yet
    log.update_high_watermark(8)
    assert log.last_stable_offset == 8 and log.first_unstable_offset is None


def test_stale_marker_epochs_are_fenced(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    a = Appender(log)
    a.txn(1, 1, epoch=3)
    with pytest.raises(ProducerFenced):
        a.end(1, commit=True, epoch=2)
    a.end(1, commit=False, epoch=3, coordinator_epoch=5)
    a.txn(1, 1, epoch=3)
    with pytest.raises(CoordinatorFenced):
        a.end(1, commit=True, epoch=3, coordinator_epoch=4)
    assert log.log_end_offset == 3


def test_marker_without_data_changes_nothing(tmp_path: Path) -> None:
    """A marker for a producer with no open transaction completes nothing: no .txnindex entry, LSO unmoved."""
    log = open_log(tmp_path / "t-0")
    Appender(log).end(5, commit=False)
    log.update_high_watermark(1)
    assert all_aborted(log) == [] and not list((tmp_path / "t-0").glob("*.txnindex"))
    assert log.last_stable_offset == 1


# --- snapshots, recovery, truncation -------------------------------------------------------------------------------


def test_open_transaction_survives_a_clean_and_an_unclean_reopen(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, segment_bytes=300)
    a = Appender(log)
    a.txn(1, 2)
    a.plain(3)
    a.txn(2, 2)
    a.end(1, commit=False)
    a.plain(3)
    live = (log.open_transactions(), summary(log), all_aborted(log))
    log.close()
    clean = open_log(directory, segment_bytes=300)
    assert (clean.open_transactions(), summary(clean), all_aborted(clean)) == live
    clean.update_high_watermark(clean.log_end_offset)
    assert clean.last_stable_offset == 5
    clean.flush()
    for f in directory.glob("*.snapshot"):
        if f.name != "00000000000000000000.snapshot":
            f.unlink()
    unclean = open_log(directory, clean=False, segment_bytes=300)
    assert (unclean.open_transactions(), summary(unclean)) == live[:2]
    assert all_aborted(unclean) == live[2]


def test_corrupt_snapshot_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, segment_bytes=300)
    a = Appender(log)
    for _ in range(6):
        a.txn(1, 2)
        a.plain(2)
    a.end(1, commit=True)
    a.txn(2, 1)
    live = summary(log)
    log.close()
    snapshots = sorted(directory.glob("*.snapshot"))
    assert len(snapshots) >= 3
    data = bytearray(snapshots[-1].read_bytes())
    data[-1] ^= 0xFF
    snapshots[-1].write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        reopened = open_log(directory, segment_bytes=300)
    assert "skipping producer snapshot" in caplog.text
    assert not snapshots[-1].exists()
    assert summary(reopened) == live


def test_truncation_removes_snapshots_and_txnindex_entries_above(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, segment_bytes=128 * 5)
    mixed_transactions(log)
    assert all_aborted(log) == KAFKA_ABORTED
    log.truncate_to(74)  # just below pid 2's ABORT marker
    assert all_aborted(log) == KAFKA_ABORTED[:1]
    assert all(int(p.name.split(".")[0]) <= 74 for p in directory.glob("*.snapshot"))
    assert log.open_transactions() == [(2, 8), (4, 36)]
    log.update_high_watermark(74)
    assert log.last_stable_offset == 8
    log.truncate_to(29)  # below pid 1's ABORT marker
    assert all_aborted(log) == []
    assert sorted(log.open_transactions()) == [(1, 0), (2, 8), (3, 14)]


def test_retention_takes_snapshots_with_segments(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, segment_bytes=128 * 5, retention_ms=-1)
    mixed_transactions(log)
    log.update_high_watermark(log.log_end_offset)
    bases = [s.base_offset for s in log.segments]
    cut = next(s.base_offset for s in log.segments[1:] if s.base_offset > 29)  # past pid 1's ABORT marker
    doomed = {name for name in txnindex_files(directory) if int(name.split(".")[0]) < cut}
    assert doomed
    log.maybe_increment_log_start_offset(cut)
    log.delete_old_segments(now_ms=0)
    assert log.segments[0].base_offset == cut and cut in bases
    assert all(int(p.name.split(".")[0]) >= cut for p in directory.glob("*.snapshot"))
    assert {p.name.removesuffix(".deleted") for p in directory.glob("*.txnindex.deleted")} == doomed
    log.delete_expired_files(now_ms=2**62)
    assert not list(directory.glob("*.deleted"))
    assert log.collect_aborted_transactions(cut, 100) == KAFKA_ABORTED[1:]


# --- replication ---------------------------------------------------------------------------------------------------


def test_follower_builds_the_same_txnindex_and_lso(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader" / "t-0", segment_bytes=128 * 5)
    mixed_transactions(leader)
    follower = open_log(tmp_path / "follower" / "t-0", segment_bytes=128 * 5)
    for segment in leader.segments:
        if segment.base_offset != follower.active_segment.base_offset:
            follower.roll(segment.base_offset)
        data = leader.read(segment.base_offset, 1 << 20, Isolation.LOG_END).records
        limit = segment.size_bytes
        follower.append_as_follower(data[:limit], roll=False)
    assert follower.log_end_offset == leader.log_end_offset
    assert txnindex_files(tmp_path / "follower" / "t-0") == txnindex_files(tmp_path / "leader" / "t-0")
    for hw in (10, 30, 60, 75, 90):
        leader.update_high_watermark(hw)
        follower.maybe_update_high_watermark(hw)
        assert follower.last_stable_offset == leader.last_stable_offset
    assert follower.open_transactions() == leader.open_transactions()


def test_damaged_txnindex_sends_its_segment_to_recovery(tmp_path: Path) -> None:
    """A .txnindex that fails its sanity check is rebuilt by recovering its segment, even after a clean shutdown."""
    directory = tmp_path / "t-0"
    log = open_log(directory, segment_bytes=128 * 5)
    mixed_transactions(log)
    written = txnindex_files(directory)
    log.close()
    damaged = directory / sorted(written)[0]
    damaged.write_bytes(damaged.read_bytes() + b"\x00\x01\x02")
    events = []
    reopened = load_log(directory, LogConfig(segment_bytes=128 * 5), HandleCache(), had_clean_shutdown=True,
                        on_event=events.append)  # fmt: skip
    assert [e.kind for e in events] == ["bad-index"]
    assert txnindex_files(directory) == written
    assert all_aborted(reopened) == KAFKA_ABORTED


def test_truncation_of_a_log_without_producers_reads_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=300)
    a = Appender(log)
    for _ in range(10):
        a.plain(3)
    log.truncate_to(7)
    assert log.log_end_offset == 7 and log.producer_state.producers == {}
    assert log.producer_state.map_end_offset == 7


def test_clients_cannot_write_markers(tmp_path: Path) -> None:
    """LogValidator: "Clients are not allowed to write control records" (docs/records.md, "Validation"); nothing is
    stored."""
    from logfs.core.errors import ControlRecordNotAllowed
    from logfs.core.format.control import ControlType
    from logfs.core.format.encode import encode_end_txn_marker

    log = open_log(tmp_path / "t-0")
    Appender(log).txn(1, 1)
    marker = encode_end_txn_marker(
        ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=10
    )
    with pytest.raises(ControlRecordNotAllowed):
        log.append_as_leader(marker, EPOCH)
    assert log.log_end_offset == 1 and log.open_transactions() == [(1, 0)]


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_committed_view_matches_a_model(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    """Random interleavings of three transactional producers and plain writes, read back in random fetch sizes
    through TXN_COMMITTED and the consumer filter: exactly the committed and plain values, in offset order."""
    log = open_log(tmp_path_factory.mktemp("model") / "t-0", segment_bytes=data.draw(st.sampled_from([300, 600, 4096])))
    a = Appender(log)
    expected: list[tuple[int, bytes]] = []  # (offset, value) of what read_committed must return
    pending: dict[int, list[tuple[int, bytes]]] = {}
    for _ in range(data.draw(st.integers(1, 25))):
        action = data.draw(st.sampled_from(["txn", "txn", "plain", "end"]))
        pid = data.draw(st.integers(1, 3))
        if action == "txn":
            n = data.draw(st.integers(1, 3))
            start = log.log_end_offset
            seq = a.sequences.get(pid, 0)
            a.txn(pid, n)
            pending.setdefault(pid, []).extend((start + i, b"p%d-%d" % (pid, seq + i)) for i in range(n))
        elif action == "plain":
            start = log.log_end_offset
            a.plain(1)
            expected.append((start, b"plain-%d" % start))
        elif pid in pending:
            commit = data.draw(st.booleans())
            a.end(pid, commit=commit)
            done = pending.pop(pid)
            if commit:
                expected.extend(done)
    for pid in list(pending):
        a.end(pid, commit=False)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset and log.open_transactions() == []
    got: list[bytes | None] = []
    offset = 0
    while offset < log.last_stable_offset:
        read = log.read(offset, data.draw(st.integers(1, 700)), Isolation.TXN_COMMITTED)
        got.extend(r.value for r in committed_records(read.records, read.aborted_transactions or ()))
        lasts = [read_header(read.records, p).last_offset for p in _positions(read.records)]
        assert lasts, "min_one_message guarantees progress"
        offset = lasts[-1] + 1
    assert got == [v for _, v in sorted(expected)]


CHILD = r"""
import random, sys
from pathlib import Path
from kafka.record.default_records import DefaultRecordBatchBuilder
from logfs.core.config import LogConfig
from logfs.core.log.handles import HandleCache
from logfs.core.log.loader import load_log

directory, seed = Path(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
log = load_log(directory, LogConfig(segment_bytes=1500), HandleCache(), had_clean_shutdown=True)
seqs, open_ = {}, set()
for i in range(100_000):
    pid = rng.randrange(1, 5)
    if pid in open_ and rng.random() < 0.3:
        log.append_end_txn_marker(pid, 0, commit=rng.random() < 0.5, coordinator_epoch=0, leader_epoch=0)
        open_.discard(pid)
    else:
        n = rng.randrange(1, 4)
        b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=True, producer_id=pid,
                                      producer_epoch=0, base_sequence=seqs.get(pid, 0), batch_size=1 << 20)
        for k in range(n):
            b.append(k, timestamp=1000, key=None, value=b"v" * 20, headers=[])
        log.append_as_leader(bytes(b.build()), 0)
        seqs[pid] = seqs.get(pid, 0) + n
        open_.add(pid)
    if i % 50 == 49:
        log.flush_rolled()
        print("flushed", log.recovery_point, flush=True)
"""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sigkill_mid_transactions_then_recovery_rebuilds_the_same_state(tmp_path: Path, seed: int) -> None:
    """A writer killed with SIGKILL mid-stream; the unclean reopen (recovery from a mid-log recovery point, from the
    roll snapshot there) ends with the .txnindex files, open transactions and producers that a fresh follower
    replaying the recovered bytes builds."""
    import subprocess
    import sys

    print("seed", seed)
    directory = tmp_path / "t-0"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory), str(seed)], stdout=subprocess.PIPE, text=True
    )
    points = []
    assert child.stdout is not None
    for line in child.stdout:
        points.append(int(line.split()[1]))
        if len(points) == 8:
            break
    child.kill()
    child.wait()
    reopened = open_log(directory, clean=False, recovery_point=points[3], segment_bytes=1500)
    assert len(reopened.segments) > 2
    reference = open_log(tmp_path / "ref-0", segment_bytes=1500)
    for segment in reopened.segments:
        if segment.base_offset != reference.active_segment.base_offset:
            reference.roll(segment.base_offset)
        data = reopened.read(segment.base_offset, 1 << 24, Isolation.LOG_END).records[: segment.size_bytes]
        reference.append_as_follower(data, roll=False)
    assert txnindex_files(directory) == txnindex_files(tmp_path / "ref-0") != {}
    assert reopened.open_transactions() == reference.open_transactions()
    assert summary(reopened) == summary(reference)
