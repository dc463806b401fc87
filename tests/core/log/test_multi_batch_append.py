"""A request's batches appended at once (``Log.append_batches_as_leader``): the files, offsets and producer state come
out byte for byte as one ``append_as_leader`` per batch makes them, across rolls (size, full indexes), idempotent
producers between plain batches, a bad batch in the middle and a full disk."""

from __future__ import annotations

import errno
import os
import random
import time
from pathlib import Path

import pytest

from logfs.core.config import LogConfig
from logfs.core.errors import CorruptRecord, DiskFull, OutOfOrderSequence
from logfs.core.format.batch import Header, Record, iter_batch_positions
from logfs.core.format.compression import Compression
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_batch
from logfs.core.log.handles import HandleCache
from logfs.core.log.loader import load_log
from logfs.core.log.log import Log
from logfs.core.offsets import AppendInfo

PRODUCER_ID = 4242


def new_log(directory: Path, config: LogConfig) -> Log:
    return load_log(directory, config, HandleCache(), had_clean_shutdown=True)


def varied_batches(seed: int, count: int, now: int) -> list[bytes]:
    """Batches of 1-40 records of 0-3,000 bytes, keys and headers, some compressed, timestamps that go back and
    forth, and every fifth one an idempotent producer's (sequences in order)."""
    rng = random.Random(seed)
    out = []
    sequence = 0
    for i in range(count):
        n = rng.randint(1, 40)
        records = [
            Record(j, now - rng.randint(0, 5_000), rng.randbytes(rng.randint(8, 32)),
                   rng.randbytes(rng.randint(0, 3_000)), (Header("h", b"x"),))
            for j in range(n)
        ]  # fmt: skip
        codec = rng.choice([Compression.NONE, Compression.NONE, Compression.LZ4, Compression.ZSTD])
        if i % 5 == 4:
            out.append(encode_batch(records, compression=codec, producer_id=PRODUCER_ID, producer_epoch=0,
                                    base_sequence=sequence))  # fmt: skip
            sequence += n
        else:
            out.append(encode_batch(records, compression=codec))
    return out


def files(log: Log) -> dict[str, bytes]:
    """Every segment file's bytes, by name (the indexes cut to their entries, as a close leaves them)."""
    log.close()
    return {p.name: p.read_bytes() for p in sorted(log.directory.iterdir()) if p.suffix != ".snapshot"}


def requests(batches: list[bytes], seed: int) -> list[list[bytes]]:
    rng = random.Random(seed)
    out = []
    at = 0
    while at < len(batches):
        n = rng.randint(1, 30)
        out.append(batches[at : at + n])
        at += n
    return out


@pytest.mark.parametrize(
    "config",
    [
        LogConfig(),
        LogConfig(segment_bytes=200_000, index_interval_bytes=1_000),  # rolls by size inside requests
        LogConfig(segment_index_bytes=8 * 6, index_interval_bytes=0),  # an index fills after a few batches
    ],
    ids=["default", "small-segments", "tiny-indexes"],
)
def test_a_multi_batch_append_stores_what_one_append_per_batch_stores(tmp_path: Path, config: LogConfig) -> None:
    now = time.time_ns() // 1_000_000
    batches = varied_batches(1, 300, now)
    one_by_one = new_log(tmp_path / "single" / "t-0", config)
    singles = [one_by_one.append_as_leader(bytearray(b), 3, now) for b in batches]
    at_once = new_log(tmp_path / "multi" / "t-0", config)
    infos: list[AppendInfo] = []
    for request in requests(batches, 2):
        got, error = at_once.append_batches_as_leader([bytearray(b) for b in request], 3, now)
        assert error is None
        infos += got
    assert [(i.first_offset, i.last_offset, i.max_timestamp, i.records_count, i.size_bytes) for i in infos] == [
        (i.first_offset, i.last_offset, i.max_timestamp, i.records_count, i.size_bytes) for i in singles
    ]
    assert at_once.log_end_offset == one_by_one.log_end_offset
    assert at_once.producer_state.last_entry(PRODUCER_ID) == one_by_one.producer_state.last_entry(PRODUCER_ID)
    assert len(at_once.segments) == len(one_by_one.segments) > (1 if config != LogConfig() else 0)
    assert files(at_once) == files(one_by_one)


def test_batches_before_a_bad_one_are_stored_and_none_after_it(tmp_path: Path) -> None:
    now = time.time_ns() // 1_000_000
    good = [encode_batch([Record(0, now, None, b"v%d" % i)]) for i in range(4)]
    bad = bytearray(good[0])
    bad[-1] ^= 0xFF  # the CRC no longer matches
    log = new_log(tmp_path / "t-0", LogConfig())
    infos, error = log.append_batches_as_leader([bytearray(good[0]), bytearray(good[1]), bad, bytearray(good[2])], 0)
    assert isinstance(error, CorruptRecord)
    assert [i.first_offset for i in infos] == [0, 1]
    assert log.log_end_offset == 2
    assert log.active_segment.size_bytes == len(good[0]) + len(good[1])


def test_a_producer_batch_out_of_sequence_stops_the_request_after_the_runs_before_it(tmp_path: Path) -> None:
    now = time.time_ns() // 1_000_000
    plain = [encode_batch([Record(0, now, None, b"p%d" % i)]) for i in range(3)]
    gap = encode_batch([Record(0, now, None, b"x")], producer_id=7, producer_epoch=0, base_sequence=5)
    log = new_log(tmp_path / "t-0", LogConfig())
    log.append_as_leader(bytearray(encode_batch([Record(0, now, None, b"s")], producer_id=7, producer_epoch=0,
                                                 base_sequence=0)), 0, now)  # fmt: skip
    request = [bytearray(plain[0]), bytearray(plain[1]), bytearray(gap), bytearray(plain[2])]
    infos, error = log.append_batches_as_leader(request, 0, now)
    assert isinstance(error, OutOfOrderSequence)
    assert [i.first_offset for i in infos] == [1, 2]
    assert log.log_end_offset == 3


def test_a_full_disk_leaves_nothing_of_the_run_and_the_log_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                   ) -> None:  # fmt: skip
    now = time.time_ns() // 1_000_000
    batches = [encode_batch([Record(0, now, None, b"v%d" % i * 100)]) for i in range(6)]
    log = new_log(tmp_path / "t-0", LogConfig())
    log.append_batches_as_leader([bytearray(b) for b in batches[:2]], 0, now)
    size = log.active_segment.size_bytes
    real_pwritev = os.pwritev

    def half_then_full(fd: int, parts: list[bytes], position: int) -> int:
        os.pwrite(fd, bytes(parts[0])[:50], position)  # a torn first part on disk, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwritev", half_then_full)
    infos, error = log.append_batches_as_leader([bytearray(b) for b in batches[2:5]], 0, now)
    assert isinstance(error, DiskFull)
    assert infos == []
    assert log.log_end_offset == 2
    assert log.active_segment.log_path.stat().st_size == size  # nothing partial stays
    monkeypatch.setattr(os, "pwritev", real_pwritev)
    infos, error = log.append_batches_as_leader([bytearray(b) for b in batches[2:]], 0, now)
    assert error is None and [i.first_offset for i in infos] == [2, 3, 4, 5]
    stored = log.active_segment.log_path.read_bytes()
    records = [r for position, _ in iter_batch_positions(stored) for r in decode_records(stored, position)]
    assert [(r.offset, r.value) for r in records] == [(i, b"v%d" % i * 100) for i in range(6)]


def test_a_request_of_more_batches_than_one_pwritev_takes_is_stored_whole(tmp_path: Path) -> None:
    """A 1 MiB request of one-record batches holds thousands: past the kernel's 1,024 buffers per pwritev the run is
    joined and written in one piece."""
    now = time.time_ns() // 1_000_000
    batches = [encode_batch([Record(0, now, None, b"%05d" % i)]) for i in range(3000)]
    log = new_log(tmp_path / "t-0", LogConfig())
    infos, error = log.append_batches_as_leader([bytearray(b) for b in batches], 0, now)
    assert error is None and len(infos) == 3000 and log.log_end_offset == 3000
    stored = log.active_segment.log_path.read_bytes()
    assert len(stored) == sum(map(len, batches))
    records = [r for position, _ in iter_batch_positions(stored) for r in decode_records(stored, position)]
    assert [(r.offset, r.value) for r in records] == [(i, b"%05d" % i) for i in range(3000)]
