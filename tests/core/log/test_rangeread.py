"""The core's one range read (core/log/rangeread.py, core/log/storedbatches.py): where a read ends for each isolation
level, how each segment's part is cut, the aborted transactions of a read_committed read, the checked bytes, the
generation a truncation moves, and the retention rule. The mount's views over it: tests/mount/test_views*.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from logfs.core.configtext import parse_store_config
from logfs.core.errors import CorruptStoredBatch, OffsetOutOfRange, StorageError
from logfs.core.format.batch import Record, iter_batch_positions, read_header
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_batch, encode_values
from logfs.core.log.log import Log
from logfs.core.offsets import Isolation
from logfs.core.replication.fetch import read_batches
from logfs.core.store import Store

TOPIC = "t"
BASE_TS = int(time.time() * 1000)  # now: a marker (stamped now) must not roll the segment by time


def new_store(tmp_path: Path, segment_bytes: int = 600) -> Store:
    store = Store.open(tmp_path, parse_store_config([f"segment.bytes={segment_bytes}", "retention.ms=-1"]))
    store.create_topic(TOPIC, 1)
    return store


def fill(log: Log, batches: int, per_batch: int = 3) -> None:
    for n in range(batches):
        values = [b"v%d-%d" % (n, i) for i in range(per_batch)]
        log.append_as_leader(encode_values(values, BASE_TS + log.log_end_offset), 0)


def offsets_read(log: Log, start: int, end: int | None, isolation: Isolation) -> list[int]:
    """Every record offset the read's parts hold, cut as a renderer cuts them (from_offset / until_offset)."""
    out: list[int] = []
    with log.read_range(start, end, isolation) as read:
        for part in read:
            assert part.lo <= part.full_lo <= part.full_hi <= part.hi or part.full_lo >= part.full_hi
            for buf, at, size, _, _ in part.stored.batches(part.lo, part.hi):
                for record in decode_records(bytes(buf[at : at + size])):
                    if record.offset >= read.start and record.offset < read.end:
                        out.append(record.offset)
    return out


def test_each_isolation_level_ends_at_its_bound(tmp_path: Path) -> None:
    with new_store(tmp_path) as store:
        log = store.log(TOPIC, 0)
        fill(log, 20)
        log.update_high_watermark(31)
        assert log.bound(Isolation.LOG_END) == 60
        assert log.bound(Isolation.HIGH_WATERMARK) == 31
        assert log.bound(Isolation.TXN_COMMITTED) == 31  # no open transaction: the LSO is the HW
        assert offsets_read(log, 0, None, Isolation.HIGH_WATERMARK) == list(range(31))
        assert offsets_read(log, 0, None, Isolation.LOG_END) == list(range(60))
        assert offsets_read(log, 5, 100, Isolation.HIGH_WATERMARK) == list(range(5, 31))  # the caller's end is cut
        assert offsets_read(log, 7, 8, Isolation.LOG_END) == [7]
        with log.read_range(40, None, Isolation.HIGH_WATERMARK) as read:  # past the HW, below the LEO: empty
            assert read.end == 31 and list(read) == []


def test_a_start_outside_the_log_is_out_of_range(tmp_path: Path) -> None:
    with new_store(tmp_path) as store:
        log = store.log(TOPIC, 0)
        fill(log, 10)
        log.update_high_watermark(30)
        store.delete_records(TOPIC, 0, 12)
        for start in (11, 0, 31, 10**20):
            with pytest.raises(OffsetOutOfRange):
                log.read_range(start)
        assert offsets_read(log, 12, None, Isolation.HIGH_WATERMARK) == list(range(12, 30))


def test_parts_cut_the_first_and_last_batch_at_the_range_and_span_whole_batches_between(tmp_path: Path) -> None:
    with new_store(tmp_path) as store:
        log = store.log(TOPIC, 0)
        fill(log, 30)  # 3 records a batch, several segments
        log.update_high_watermark(90)
        assert len(log.segments) > 3
        with log.read_range(4, 80, Isolation.HIGH_WATERMARK) as read:
            parts = list(read)
        assert [p.stored.base_offset for p in parts] == [s.base_offset for s in log.segments if s.base_offset < 80]
        first, last = parts[0], parts[-1]
        assert first.from_offset == 4 and last.until_offset == 80  # 4 and 80 lie inside batches [3, 5], [78, 80]
        assert all(p.from_offset is None for p in parts[1:]) and all(p.until_offset is None for p in parts[:-1])
        assert all(p.closed for p in parts[:-1]) and parts[-1].filter_until == 80
        for part in parts:  # the whole batches between the cut ones hold only offsets inside the range
            for buf, at, _, _, _ in part.stored.batches(part.full_lo, part.full_hi):
                header = read_header(buf, at)
                assert header.base_offset >= 4 and header.last_offset < 80
        with log.read_range(3, 81, Isolation.HIGH_WATERMARK) as read:  # batch boundaries: nothing to cut
            parts = list(read)
        assert parts[0].from_offset is None and parts[-1].until_offset is None


def test_read_committed_ends_at_the_lso_and_carries_the_aborted_transactions(tmp_path: Path) -> None:
    with new_store(tmp_path, 100_000) as store:
        log = store.log(TOPIC, 0)
        fill(log, 2)  # 0..5
        records = [Record(i, BASE_TS, b"k", b"t%d" % i) for i in range(2)]
        batch = encode_batch(records, producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
        log.append_as_leader(batch, 0)  # 6, 7
        log.append_end_txn_marker(7, 0, commit=False, coordinator_epoch=0, leader_epoch=0)  # 8
        batch = encode_batch(records, producer_id=8, producer_epoch=0, base_sequence=0, is_transactional=True)
        log.append_as_leader(batch, 0)  # 9, 10: still open
        fill(log, 1)  # 11..13
        log.update_high_watermark(log.log_end_offset)
        assert log.bound(Isolation.TXN_COMMITTED) == 9
        with log.read_range(0, None, Isolation.TXN_COMMITTED) as read:
            assert read.end == 9
            aborted = read.aborted
            assert aborted is not None and len(aborted) == 1 and aborted.touches(0, 9)
            (part,) = list(read)
            spans = part.stored.kept_spans(part.lo, part.hi, aborted, part.filter_until)
            kept = [read_header(part.stored.span(a, b), 0).base_offset for a, b in spans]
            assert kept == [0]  # one span: the two plain batches, before the aborted batch and its marker
            assert part.stored.span(*spans[0]) == part.stored.span(0, spans[0][1])
        with log.read_range(0, None, Isolation.HIGH_WATERMARK) as read:
            assert read.end == 14 and read.aborted is None


def test_a_truncation_moves_the_generation_and_a_flipped_byte_is_refused(tmp_path: Path) -> None:
    with new_store(tmp_path, 100_000) as store:
        log = store.log(TOPIC, 0)
        fill(log, 6)
        log.update_high_watermark(18)
        stored = log.stored_for(0)
        assert stored is not None and stored is log.stored_for(17)  # one object per segment
        before = stored.generation
        log.truncate_to(12)
        assert stored.generation > before
        size = stored.size_bytes
        assert len(stored.span(0, size)) == size
        with pytest.raises(StorageError):
            stored.span(0, size + 10)  # bytes that are not there
        path = stored.path
        data = bytearray(path.read_bytes())
        data[size - 3] ^= 0x40  # a record byte of the last batch
        path.write_bytes(bytes(data))
        with pytest.raises(CorruptStoredBatch):
            list(stored.batches(0, size))
        with pytest.raises(CorruptStoredBatch):
            stored.read(0, size, size - 10, 10)


def test_a_fetch_reads_through_the_range_read_and_refuses_a_batch_declaring_too_much(tmp_path: Path) -> None:
    """The fetch's walk of headers (core/replication/fetch.py's read_batches) stops at a batch whose declared size
    runs past the span the range read found: damage, not a short answer."""
    store = Store.open(
        tmp_path, parse_store_config(["segment.bytes=100000", "retention.ms=-1", "index.interval.bytes=1"])
    )
    store.create_topic(TOPIC, 1)
    with store:
        log = store.log(TOPIC, 0)
        fill(log, 8)
        log.update_high_watermark(24)
        records, bases = read_batches(log, 4, 24, 1 << 20, room=0)
        assert bases == [] and read_header(records, 0).base_offset == 3  # from the batch holding 4
        assert sum(1 for _ in iter_batch_positions(records)) == 7
        records, _ = read_batches(log, 0, 24, 1, room=0)  # a budget below one batch still gives one
        assert sum(1 for _ in iter_batch_positions(records)) == 1
        stored = log.stored_for(0)
        assert stored is not None
        third = [p for p, _ in iter_batch_positions(stored.span(0, stored.size_bytes))][2]
        data = bytearray(stored.path.read_bytes())
        data[third + 8 : third + 12] = (10**6).to_bytes(4, "big")  # batchLength: far past the segment's end
        stored.path.write_bytes(bytes(data))
        with pytest.raises(CorruptStoredBatch, match="declares a size past"):
            read_batches(log, 0, 24, 1 << 20, room=0)
