"""The read check of the header fields the CRC does not cover, as the store applies it (issue 23, point 5): the
bounds a partition gives a check (``Log.read_bounds``: segment base, offset index, next segment or log end offset,
leader-epoch cache), what the offset index contradicts, and readers racing appends (never refused: an append
publishes its bytes before its log end offset and epoch). Through whichever walk is selected (CI runs this file
under ``LOGFS_NO_CEXT=1`` too: the reference). The mount-level tests are tests/mount/test_header_bitflips.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from logfs.core.config import LogConfig
from logfs.core.errors import CorruptStoredBatch
from logfs.core.format.batch import Record
from logfs.core.format.encode import encode_batch
from logfs.core.log.batchcheck import NO_OFFSET_BOUND, check_batches, check_span, read_checked
from logfs.core.log.log import Log
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig

CONFIG = StoreConfig(topic_defaults=LogConfig(segment_bytes=1 << 20, index_interval_bytes=200))


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "store", CONFIG)
    s.create_topic("t", 1)
    try:
        yield s
    finally:
        s.abandon()


def _batch(n: int, value: bytes = b"v" * 40, epoch: int = -1, base: int = 0) -> bytearray:
    return bytearray(
        encode_batch([Record(base + i, 1_700_000_000_000, None, value) for i in range(n)], base_offset=base,
                     partition_leader_epoch=epoch)
    )  # fmt: skip


def _fill(log: Log, batches: int) -> None:
    for _ in range(batches):
        log.append_as_leader(_batch(2), 0)


def _flip(path: Path, at: int, mask: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ mask]))


def test_the_bounds_come_from_the_segment_the_index_and_the_log_end(store: Store) -> None:
    log = store.log("t", 0)
    _fill(log, 30)
    segment = log.active_segment
    entries = [segment.offset_index.entry(n) for n in range(segment.offset_index.entries())]
    assert len(entries) >= 3
    top = log.read_bounds(segment.base_offset, segment.log_file, 0)
    assert (top.min_base, top.first_max_last, top.max_last) == (0, NO_OFFSET_BOUND, log.log_end_offset - 1)
    at_entry = log.read_bounds(segment.base_offset, segment.log_file, entries[2].position)
    assert (at_entry.min_base, at_entry.first_max_last) == (entries[1].offset + 1, entries[2].offset)
    between = log.read_bounds(segment.base_offset, segment.log_file, entries[2].position + 1)
    assert (between.min_base, between.first_max_last) == (entries[1].offset + 1, NO_OFFSET_BOUND)
    log.roll()
    log.append_as_leader(_batch(1), 0)
    closed = log.read_bounds(segment.base_offset, segment.log_file, 0)
    assert closed.max_last == log.active_segment.base_offset - 1


def test_a_read_starting_at_an_index_entry_refuses_what_the_index_contradicts(store: Store) -> None:
    """A read of a segment's middle has no batch before its first: the offset index's entries bound it. The batch
    at an index entry whose base offset flipped downward below the entry before, or upward past its own entry's
    offset, is refused; the untouched bytes pass."""
    log = store.log("t", 0)
    _fill(log, 30)
    segment = log.active_segment
    entry = segment.offset_index.entry(2)
    data = segment.log_file.read(entry.position, segment.size_bytes - entry.position)
    check_span(segment.log_file, data, entry.position)
    for byte, mask in ((7, 0x08), (6, 0x01)):  # base offset - 8 or so (below the previous entry); + 256
        damaged = bytearray(data)
        damaged[byte] ^= mask
        with pytest.raises(CorruptStoredBatch, match="offsets") as info:
            check_span(segment.log_file, bytes(damaged), entry.position)
        assert info.value.position == entry.position
    _flip(segment.log_path, entry.position + 7, 0x08)  # on disk: a .kafka read at the entry fails too
    with pytest.raises(CorruptStoredBatch):
        read_checked(segment, 0, segment.size_bytes, entry.position, 100)


def test_a_follower_batch_with_a_newer_epoch_passes_and_a_flipped_one_does_not(store: Store) -> None:
    """Epoch rule: at most the cache's epoch for the batch's base offset. A follower's appends assign newer epochs,
    so its batches pass; the same bytes with the epoch raised past the cache fail."""
    log = store.log("t", 0)
    log.truncate_fully_and_start_at(0)
    log.append_as_follower(_batch(2, epoch=3, base=0))
    log.append_as_follower(_batch(2, epoch=5, base=2))
    segment = log.active_segment
    data = segment.log_file.read(0, segment.size_bytes)
    check_span(segment.log_file, data, 0)
    first = len(_batch(2))
    damaged = bytearray(data)
    damaged[15] ^= 0x04  # the first batch's epoch 3 -> 7: above 3, the cache's epoch for offset 0
    with pytest.raises(CorruptStoredBatch, match="leader epoch 7"):
        check_span(segment.log_file, bytes(damaged), 0)
    damaged = bytearray(data)
    damaged[first + 15] ^= 0x01  # the second's 5 -> 4: older, allowed (epochs only grow along the log)
    check_span(segment.log_file, bytes(damaged), 0)


def test_readers_racing_appends_are_never_refused(store: Store) -> None:
    """An append publishes a segment's bytes before its log end offset and epoch: a reader that reads the active
    segment's new bytes at once sees batches past the log end offset it reads. The check looks again under the
    log's lock instead of refusing them (without that, this reader fails within a few hundred appends)."""
    log = store.log("t", 0)
    segment = log.active_segment
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = 0

    def reader() -> None:
        nonlocal reads
        last = None
        position = 0
        try:
            while not stop.is_set():
                size = segment.size_bytes
                if size > position:
                    buf = segment.log_file.read(position, size - position)
                    got = check_batches(segment.log_file, buf, position, size, None if last is None else last + 1)
                    if got is not None:
                        last = got
                    position = size
                    reads += 1
        except BaseException as exc:  # handed to the test's thread
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for epoch in range(1, 40):  # each first batch of an epoch is visible before the cache assigns the epoch
            for _ in range(30):
                log.append_as_leader(_batch(1, b"x"), epoch)
                if errors:
                    break
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors[0]
    assert reads > 10


def _lower_base(path: Path, position: int) -> tuple[int, int]:
    """Flip the lowest set bit of the base offset of the batch at ``position`` (it goes down); the byte and mask."""
    data = path.read_bytes()
    base = int.from_bytes(data[position : position + 8], "big")
    bit = (base & -base).bit_length() - 1
    at, mask = position + 7 - bit // 8, 1 << (bit % 8)
    _flip(path, at, mask)
    return at, mask


def test_an_offset_lookup_refuses_a_base_offset_that_went_down(store: Store) -> None:
    """A lookup (``at/<offset>``, a fetch, ``follow/<offset>``) walks from an index entry to the batch holding the
    offset. A base offset flipped downward would make it skip that batch and start after it, silently: the walk
    refuses offsets that do not rise, and a walk from an entry that passes the entry's offset without a batch
    holding it (the skipped batch was the entry's own)."""
    log = store.log("t", 0)
    _fill(log, 30)
    segment = log.active_segment
    entry = segment.offset_index.entry(2)
    assert segment.translate_offset(entry.offset) is not None
    flipped = _lower_base(segment.log_path, entry.position)  # the entry's own batch: now below the entry's offset
    with pytest.raises(CorruptStoredBatch, match="offset index names offset"):
        segment.translate_offset(entry.offset)
    _flip(segment.log_path, *flipped)  # back
    follower = segment.translate_offset(entry.offset + 1)  # the batch after the entry's
    assert follower is not None
    _lower_base(segment.log_path, follower.position)
    with pytest.raises(CorruptStoredBatch, match="not above"):
        segment.translate_offset(entry.offset + 1)
