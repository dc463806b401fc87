"""The offset index and the time index: Kafka's OffsetIndexTest and TimeIndexTest, then logfs's own contracts.

Layout is checked byte for byte against ``struct.pack`` of the expected entries; damage is written with the helpers
below, one damage per test.
"""

from __future__ import annotations

import bisect
import gc
import os
import random
import struct
import threading
from pathlib import Path

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from logfs.core.errors import (
    ConfigError,
    CorruptIndex,
    IndexFull,
    InvalidOffset,
    OffsetOverflow,
    StorageError,
    TimestampOutOfOrder,
)
from logfs.core.log.index import (
    NO_TIMESTAMP,
    OFFSET_INDEX_ENTRY_BYTES,
    SEGMENT_INDEX_BYTES_DEFAULT,
    TIME_INDEX_ENTRY_BYTES,
    OffsetIndex,
    OffsetPosition,
    TimeIndex,
    TimestampOffset,
)

BASE_OFFSET = 45
MAX_ENTRIES = 30


def offset_index(tmp_path: Path, base_offset: int = BASE_OFFSET, max_entries: int = MAX_ENTRIES) -> OffsetIndex:
    return OffsetIndex(tmp_path / f"{base_offset:020d}.index", base_offset, max_entries * OFFSET_INDEX_ENTRY_BYTES)


def time_index(tmp_path: Path, base_offset: int = BASE_OFFSET, max_entries: int = MAX_ENTRIES) -> TimeIndex:
    return TimeIndex(tmp_path / f"{base_offset:020d}.timeindex", base_offset, max_entries * TIME_INDEX_ENTRY_BYTES)


def append_time_entries(index: TimeIndex, count: int) -> None:
    """TimeIndexTest.appendEntries: (10·i, base + 10·i) for i in 1..count."""
    for i in range(1, count + 1):
        index.maybe_append(i * 10, i * 10 + index.base_offset)


def overwrite(path: Path, position: int, data: bytes) -> None:
    """Damage: write ``data`` over the file at ``position``, as a torn or stray write would."""
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


def open_fds() -> int:
    """The descriptors this process holds, after dropping the mappings of indexes that earlier tests left open."""
    gc.collect()
    return len(os.listdir("/proc/self/fd"))


# --- Kafka's OffsetIndexTest ---------------------------------------------------------------------------------------


def test_lookup_extreme_cases(tmp_path: Path) -> None:
    """OffsetIndexTest.lookupExtremeCases"""
    index = offset_index(tmp_path)
    assert index.lookup(BASE_OFFSET) == (BASE_OFFSET, 0)
    for i in range(index.max_entries()):
        index.append(BASE_OFFSET + i + 1, i)
    assert index.lookup(BASE_OFFSET) == (BASE_OFFSET, 0)
    assert index.lookup(BASE_OFFSET + MAX_ENTRIES) == (75, 29)


def test_truncate(tmp_path: Path) -> None:
    """OffsetIndexTest.truncate"""
    index = OffsetIndex(tmp_path / "0.index", 0, 10 * OFFSET_INDEX_ENTRY_BYTES)
    index.truncate()
    for i in range(1, 10):
        index.append(i, i)

    index.truncate_to(12)
    assert index.lookup(10) == (9, 9), "unchanged by a truncation past the end"
    assert index.last_offset() == 9

    index.append(10, 10)
    index.truncate_to(10)
    assert index.lookup(10) == (9, 9), "truncating at the last entry removes it"
    assert index.last_offset() == 9
    index.append(10, 10)

    index.truncate_to(9)
    assert index.lookup(10) == (8, 8)
    assert index.last_offset() == 8
    index.append(9, 9)

    index.truncate_to(5)
    assert index.lookup(10) == (4, 4)
    assert index.last_offset() == 4
    index.append(5, 5)

    index.truncate()
    assert index.entries() == 0
    index.append(0, 0)


def test_append_out_of_order_raises_invalid_offset(tmp_path: Path) -> None:
    """OffsetIndexTest.appendOutOfOrder"""
    index = offset_index(tmp_path)
    index.append(51, 0)
    with pytest.raises(InvalidOffset):
        index.append(50, 1)
    with pytest.raises(InvalidOffset):
        index.append(51, 1)  # an equal offset is refused too
    assert index.entries() == 1


def test_append_too_many_raises_index_full(tmp_path: Path) -> None:
    """OffsetIndexTest.appendTooMany"""
    index = offset_index(tmp_path)
    for i in range(index.max_entries()):
        index.append(BASE_OFFSET + i + 1, i)
    with pytest.raises(IndexFull):
        index.append(BASE_OFFSET + MAX_ENTRIES + 1, 1)
    assert index.entries() == MAX_ENTRIES


def test_fetch_upper_bound_offset(tmp_path: Path) -> None:
    """OffsetIndexTest.testFetchUpperBoundOffset"""
    index = offset_index(tmp_path)
    first = OffsetPosition(BASE_OFFSET, 0)
    second = OffsetPosition(BASE_OFFSET + 1, 10)
    third = OffsetPosition(BASE_OFFSET + 2, 23)
    fourth = OffsetPosition(BASE_OFFSET + 3, 37)
    assert index.fetch_upper_bound_offset(first.position, 5) is None
    for entry in (first, second, third, fourth):
        index.append(entry.offset, entry.position)
    assert index.fetch_upper_bound_offset(first.position, 5) == second
    assert index.fetch_upper_bound_offset(first.position, 10) == second
    assert index.fetch_upper_bound_offset(first.position, 23) == third
    assert index.fetch_upper_bound_offset(first.position, 22) == third
    assert index.fetch_upper_bound_offset(second.position, 24) == fourth
    assert index.fetch_upper_bound_offset(fourth.position, 1) is None
    assert index.fetch_upper_bound_offset(first.position, 200) is None
    assert index.fetch_upper_bound_offset(second.position, 200) is None


def test_reopen(tmp_path: Path) -> None:
    """OffsetIndexTest.testReopen"""
    index = offset_index(tmp_path)
    index.append(51, 0)
    index.append(52, 1)
    index.close()
    reopened = OffsetIndex(index.path, BASE_OFFSET)
    assert reopened.lookup(51) == (51, 0)
    assert reopened.lookup(52) == (52, 1)
    assert reopened.last_offset() == 52
    assert reopened.entries() == 2
    with pytest.raises(IndexFull):  # close trimmed the file to its 2 entries
        reopened.append(53, 1)


def test_random_lookup(tmp_path: Path) -> None:
    """OffsetIndexTest.randomLookupTest (seeded, so that a failure replays)"""
    rng_seed = random.randrange(2**32)
    print(f"seed {rng_seed}")
    rng = random.Random(rng_seed)
    index = offset_index(tmp_path)
    assert index.lookup(92) == (BASE_OFFSET, 0)
    offsets, positions = [], []
    offset, position = BASE_OFFSET + 1, 0
    for _ in range(index.max_entries()):
        offset += rng.randint(1, 15)
        position += rng.randint(1, 15)
        offsets.append(offset)
        positions.append(position)
        index.append(offset, position)
    for offset, position in zip(offsets, positions, strict=True):
        assert index.lookup(offset) == (offset, position)
    for target in rng.sample(range(BASE_OFFSET, offsets[-1]), 30):
        slot = bisect.bisect_right(offsets, target) - 1
        expected = (BASE_OFFSET, 0) if slot < 0 else (offsets[slot], positions[slot])
        assert index.lookup(target) == expected


def test_entry(tmp_path: Path) -> None:
    """OffsetIndexTest.testEntry / testEntryOverflow"""
    index = offset_index(tmp_path)
    with pytest.raises(IndexError):
        index.entry(0)
    for i in range(index.max_entries()):
        index.append(BASE_OFFSET + i, i)
    assert [index.entry(i) for i in range(MAX_ENTRIES)] == [(BASE_OFFSET + i, i) for i in range(MAX_ENTRIES)]


def test_sanity_check_accepts_last_offset_equal_to_base_offset(tmp_path: Path) -> None:
    """OffsetIndexTest.testSanityLastOffsetEqualToBaseOffset"""
    index = OffsetIndex(tmp_path / "20.index", 20, 10 * OFFSET_INDEX_ENTRY_BYTES)
    index.append(20, 0)
    index.sanity_check()


# --- Kafka's TimeIndexTest -----------------------------------------------------------------------------------------


def test_time_index_lookup(tmp_path: Path) -> None:
    """TimeIndexTest.testLookUp"""
    index = time_index(tmp_path)
    assert index.lookup(100) == (NO_TIMESTAMP, BASE_OFFSET)
    append_time_entries(index, MAX_ENTRIES - 1)
    assert index.lookup(9) == (NO_TIMESTAMP, BASE_OFFSET)
    assert index.lookup(25) == (20, 65)
    assert index.lookup(30) == (30, 75)


def test_time_index_is_full_keeps_one_slot_for_the_roll(tmp_path: Path) -> None:
    """TimeIndexTest.testIsFull / testAppend"""
    index = time_index(tmp_path)
    assert not index.is_full()
    append_time_entries(index, MAX_ENTRIES - 1)
    assert index.is_full()
    with pytest.raises(IndexFull):
        index.maybe_append(10000, 1000)
    with pytest.raises(InvalidOffset):
        index.maybe_append(10000, (MAX_ENTRIES - 2) * 10, skip_full_check=True)  # 280 < 335
    index.maybe_append(10000, 1000, skip_full_check=True)
    assert index.entries() == MAX_ENTRIES
    assert index.last_entry() == (10000, 1000)


def test_time_index_truncate(tmp_path: Path) -> None:
    """TimeIndexTest.testTruncate"""
    index = time_index(tmp_path)
    append_time_entries(index, MAX_ENTRIES - 1)
    index.truncate()
    assert index.entries() == 0
    append_time_entries(index, MAX_ENTRIES - 1)
    index.truncate_to(10 + BASE_OFFSET)
    assert index.entries() == 0


def test_time_index_entry(tmp_path: Path) -> None:
    """TimeIndexTest.testEntry / testEntryOverflow"""
    index = time_index(tmp_path)
    with pytest.raises(IndexError):
        index.entry(0)
    append_time_entries(index, MAX_ENTRIES - 1)
    assert [index.entry(i) for i in range(4)] == [(10, 55), (20, 65), (30, 75), (40, 85)]


def test_time_index_last_entry(tmp_path: Path) -> None:
    """TimeIndexTest.testLastEntry"""
    index = time_index(tmp_path)
    assert index.last_entry() == (NO_TIMESTAMP, BASE_OFFSET)
    index.maybe_append(1, 1 + BASE_OFFSET)
    assert index.last_entry() == (1, BASE_OFFSET + 1)


def test_time_index_resize(tmp_path: Path) -> None:
    """TimeIndexTest.testResize"""
    index = time_index(tmp_path)
    assert not index.resize(MAX_ENTRIES * TIME_INDEX_ENTRY_BYTES)
    assert index.resize(MAX_ENTRIES // 2 * TIME_INDEX_ENTRY_BYTES)
    assert index.resize(MAX_ENTRIES * 2 * TIME_INDEX_ENTRY_BYTES)
    assert index.max_entries() == MAX_ENTRIES * 2


# --- maybe_append and append refusals ------------------------------------------------------------------------------


def test_time_index_ignores_an_equal_timestamp(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    index.maybe_append(100, 50)
    index.maybe_append(100, 60)
    index.maybe_append(100, 50)  # the roll and close offer the last entry again
    assert index.entries() == 1
    assert index.last_entry() == (100, 50)


def test_time_index_without_timestamps_stays_empty(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    index.maybe_append(NO_TIMESTAMP, 50)
    assert index.entries() == 0
    assert not index.path.exists()


def test_time_index_decreasing_timestamp_raises_timestamp_out_of_order(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    index.maybe_append(100, 50)
    with pytest.raises(TimestampOutOfOrder) as caught:
        index.maybe_append(99, 51)
    assert (caught.value.timestamp, caught.value.last_timestamp) == (99, 100)
    assert index.entries() == 1


def test_time_index_full_accepts_the_same_last_entry_again(tmp_path: Path) -> None:
    index = time_index(tmp_path, max_entries=2)
    index.maybe_append(10, 50)
    index.maybe_append(20, 60, skip_full_check=True)  # the roll uses the reserved slot
    index.maybe_append(20, 60, skip_full_check=True)  # and the close offers it again: a no-op
    with pytest.raises(IndexFull):
        index.maybe_append(30, 70, skip_full_check=True)
    assert index.entries() == 2


@pytest.mark.parametrize("offset", [BASE_OFFSET - 1, BASE_OFFSET + 2**31])
def test_offset_outside_relative_range_raises_offset_overflow(tmp_path: Path, offset: int) -> None:
    index = offset_index(tmp_path)
    with pytest.raises(OffsetOverflow) as caught:
        index.append(offset, 0)
    assert (caught.value.offset, caught.value.base_offset) == (offset, BASE_OFFSET)
    with pytest.raises(OffsetOverflow):
        time_index(tmp_path).maybe_append(1, offset)
    assert index.entries() == 0


def test_offset_at_the_edge_of_the_relative_range_is_stored(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(BASE_OFFSET, 0)
    index.append(BASE_OFFSET + 2**31 - 1, 7)
    assert index.lookup(2**40) == (BASE_OFFSET + 2**31 - 1, 7)
    assert index.path.read_bytes()[8:16] == struct.pack(">ii", 2**31 - 1, 7)


def test_refused_append_names_the_file_the_offsets_and_the_slot(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(51, 0)
    with pytest.raises(InvalidOffset) as caught:
        index.append(50, 1)
    message = str(caught.value)
    assert str(index.path) in message and "offset 50" in message and "51" in message and "slot 1" in message

    full = offset_index(tmp_path, base_offset=0, max_entries=1)
    full.append(3, 0)
    with pytest.raises(IndexFull) as caught_full:
        full.append(4, 1)
    message = str(caught_full.value)
    assert str(full.path) in message and "offset 4" in message and "slot 1" in message


# --- read-only ----------------------------------------------------------------------------------------------------


def test_read_only_index_refuses_appends(tmp_path: Path) -> None:
    """OffsetIndexTest.testReopen (the read-only reopen)"""
    index = offset_index(tmp_path)
    index.append(51, 0)
    index.append(52, 1)
    index.close()
    reader = OffsetIndex(index.path, BASE_OFFSET, writable=False)
    assert (reader.lookup(51), reader.lookup(52), reader.last_offset(), reader.entries()) == ((51, 0), (52, 1), 52, 2)
    with pytest.raises(StorageError, match="read-only") as caught:
        reader.append(53, 2)
    assert str(reader.path) in str(caught.value) and "offset 53 at slot 2" in str(caught.value)
    with pytest.raises(StorageError, match="read-only"):
        TimeIndex(index.path, BASE_OFFSET, writable=False).maybe_append(1, 60)
    with pytest.raises(StorageError, match="read-only"):
        reader.truncate_to(51)
    with pytest.raises(StorageError, match="read-only"):
        reader.resize(0)
    with pytest.raises(StorageError, match="read-only"):
        reader.delete_if_exists()
    assert reader.path.exists()


def test_read_only_index_of_an_absent_file_is_empty_and_creates_nothing(tmp_path: Path) -> None:
    reader = OffsetIndex(tmp_path / "0.index", 0, writable=False)
    assert reader.lookup(10) == (0, 0)
    assert reader.entries() == 0 and reader.max_entries() == 0
    reader.flush()
    reader.close()
    assert not reader.path.exists()


# --- lazy files, close and reopen ----------------------------------------------------------------------------------


def test_no_file_exists_until_the_first_append(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    assert index.lookup(100) == (BASE_OFFSET, 0)
    assert index.fetch_upper_bound_offset(0, 10) is None
    assert (index.entries(), index.max_entries(), index.is_full(), index.last_offset()) == (0, 30, False, 45)
    index.truncate_to(0)
    index.sanity_check()
    index.reset()
    index.close()
    assert not index.path.exists()
    index.append(46, 0)
    assert index.path.stat().st_size == MAX_ENTRIES * OFFSET_INDEX_ENTRY_BYTES


def test_flush_creates_the_preallocated_file(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    index.flush()
    assert index.path.read_bytes() == bytes(MAX_ENTRIES * TIME_INDEX_ENTRY_BYTES)


def test_trim_of_a_never_created_index_creates_it_empty(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    assert index.trim_to_valid_size()
    assert index.path.read_bytes() == b""
    assert index.is_full()


def test_close_trims_and_releases_and_lookups_reopen(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    before = open_fds()
    index.append(50, 0)
    index.append(60, 4096)
    assert open_fds() == before + 1  # one mapping, one descriptor
    index.close()
    assert open_fds() == before
    assert index.path.stat().st_size == 2 * OFFSET_INDEX_ENTRY_BYTES
    assert index.lookup(59) == (50, 0)  # maps the file again on demand
    assert open_fds() == before + 1
    index.close_handler()
    assert open_fds() == before


def test_close_handler_keeps_the_size_and_appends_continue(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(50, 0)
    index.close_handler()
    index.append(60, 4096)
    index.close_handler()
    index.flush()  # nothing mapped: fsync instead of msync
    assert index.path.stat().st_size == MAX_ENTRIES * OFFSET_INDEX_ENTRY_BYTES
    assert index.lookup(60) == (60, 4096)
    index.close()
    assert OffsetIndex(index.path, BASE_OFFSET).lookup(60) == (60, 4096)


def test_many_indexes_hold_no_descriptors_once_released(tmp_path: Path) -> None:
    before = open_fds()
    indexes = [offset_index(tmp_path, base_offset=base) for base in range(0, 2000, 10)]
    for index in indexes:
        index.append(index.base_offset + 5, 0)
        index.close_handler()
    assert open_fds() == before
    assert all(index.lookup(index.base_offset + 9) == (index.base_offset + 5, 0) for index in indexes[::50])
    for index in indexes:
        index.close()
    assert open_fds() == before


def test_resize_shrinks_and_grows_the_file(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    for i in range(5):
        index.append(BASE_OFFSET + i, i)
    assert index.trim_to_valid_size()
    assert not index.trim_to_valid_size()
    assert (index.max_entries(), index.is_full()) == (5, True)
    assert index.resize(100)  # rounded down to whole entries
    assert index.length_bytes() == 96 and index.max_entries() == 12
    index.append(BASE_OFFSET + 5, 5)
    assert index.resize(3 * OFFSET_INDEX_ENTRY_BYTES)  # below the entries: the last ones no longer fit
    assert (index.entries(), index.last_offset()) == (3, BASE_OFFSET + 2)


def test_reserve_counts_the_room_and_grows_the_file_only_at_the_next_write(tmp_path: Path) -> None:
    """What the loader does to the active segment's trimmed indexes after a clean shutdown (core/log/loader.py)."""
    index = offset_index(tmp_path)
    for i in range(3):
        index.append(BASE_OFFSET + i, i)
    index.close()
    trimmed = 3 * OFFSET_INDEX_ENTRY_BYTES
    reopened = OffsetIndex(index.path, BASE_OFFSET, MAX_ENTRIES * OFFSET_INDEX_ENTRY_BYTES)
    reopened.reserve(MAX_ENTRIES * OFFSET_INDEX_ENTRY_BYTES + 3)  # rounded down to whole entries
    assert reopened.path.stat().st_size == trimmed  # no truncate yet
    assert (reopened.max_entries(), reopened.is_full(), reopened.length_bytes()) == (MAX_ENTRIES, False, trimmed)
    assert reopened.lookup(BASE_OFFSET + 2) == (BASE_OFFSET + 2, 2)
    reopened.close()  # nothing appended: nothing to grow, nothing to trim
    assert reopened.path.stat().st_size == trimmed
    reopened.reserve(MAX_ENTRIES * OFFSET_INDEX_ENTRY_BYTES)
    reopened.append(BASE_OFFSET + 3, 3)  # the write grows the file first, as a resize would have
    assert reopened.path.stat().st_size == MAX_ENTRIES * OFFSET_INDEX_ENTRY_BYTES
    assert (reopened.entries(), reopened.lookup(BASE_OFFSET + 3)) == (4, (BASE_OFFSET + 3, 3))
    reopened.reserve(2 * OFFSET_INDEX_ENTRY_BYTES)  # smaller than the file: no reservation, no change
    assert reopened.max_entries() == MAX_ENTRIES
    reopened.close()
    assert reopened.path.read_bytes() == b"".join(
        struct.pack(">ii", i, i) for i in range(4)
    )  # trimmed to its entries, relative offsets and positions as Kafka writes them
    full = offset_index(tmp_path, base_offset=BASE_OFFSET + 1000)
    full.append(BASE_OFFSET + 1000, 0)
    full.trim_to_valid_size()
    full.reserve(2 * OFFSET_INDEX_ENTRY_BYTES)
    full.append(BASE_OFFSET + 1001, 7)
    assert full.is_full() and full.length_bytes() == 2 * OFFSET_INDEX_ENTRY_BYTES
    with pytest.raises(IndexFull):  # the reservation was the room: no more
        full.append(BASE_OFFSET + 1002, 9)
    full.trim_to_valid_size()
    full.reserve(4 * OFFSET_INDEX_ENTRY_BYTES)
    assert full.resize(3 * OFFSET_INDEX_ENTRY_BYTES)  # a resize replaces the reservation
    assert full.max_entries() == 3


def test_reset_empties_and_restores_the_full_size(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    append_time_entries(index, 3)
    index.close()
    assert index.max_entries() == 3
    index.reset()
    assert (index.entries(), index.max_entries(), index.last_entry()) == (0, MAX_ENTRIES, (NO_TIMESTAMP, BASE_OFFSET))
    assert index.path.stat().st_size == MAX_ENTRIES * TIME_INDEX_ENTRY_BYTES


def test_rename_and_delete(tmp_path: Path) -> None:
    lazy = offset_index(tmp_path)
    lazy.rename_to(tmp_path / "never.index.deleted")  # never created: only the name changes
    assert lazy.path.name == "never.index.deleted" and not lazy.path.exists()

    index = offset_index(tmp_path, base_offset=0)
    index.append(1, 0)
    target = tmp_path / "00000000000000000000.index.swap"
    index.rename_to(target)
    assert target.exists() and index.path == target
    index.append(2, 10)  # the mapping survives the rename
    index.close()
    assert OffsetIndex(target, 0).lookup(2) == (2, 10)
    assert index.delete_if_exists()
    assert not index.delete_if_exists()
    assert index.entries() == 0


def test_max_index_bytes_below_one_entry_raises_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        OffsetIndex(tmp_path / "0.index", 0, OFFSET_INDEX_ENTRY_BYTES - 1)


# --- byte layout ---------------------------------------------------------------------------------------------------


def test_offset_index_bytes_are_relative_offsets_and_positions_big_endian(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "50.index", 50, 4 * OFFSET_INDEX_ENTRY_BYTES)
    index.append(55, 4096)
    index.append(70, 8200)
    index.flush()
    expected = struct.pack(">ii", 5, 4096) + struct.pack(">ii", 20, 8200)
    assert index.path.read_bytes() == expected + bytes(2 * OFFSET_INDEX_ENTRY_BYTES)
    assert expected[:8] == bytes.fromhex("00000005 00001000")  # the module docstring's example
    index.close()
    assert index.path.read_bytes() == expected


def test_time_index_bytes_are_timestamps_and_relative_offsets_big_endian(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "50.timeindex", 50, 4 * TIME_INDEX_ENTRY_BYTES)
    index.maybe_append(1_700_000_000_000, 55)
    index.maybe_append(1_700_000_000_500, 61)
    index.close()
    expected = struct.pack(">qi", 1_700_000_000_000, 5) + struct.pack(">qi", 1_700_000_000_500, 11)
    assert index.path.read_bytes() == expected
    assert expected[:12] == bytes.fromhex("0000018bcfe56800 00000005")


def test_default_files_are_preallocated_to_whole_entries(tmp_path: Path) -> None:
    """Kafka's AbstractIndex: 10 MiB gives 1,310,720 offset entries and 873,813 time entries (10,485,756 bytes)."""
    offsets = OffsetIndex(tmp_path / "0.index", 0)
    times = TimeIndex(tmp_path / "0.timeindex", 0)
    offsets.append(0, 0)
    times.maybe_append(1, 0)
    assert offsets.path.stat().st_size == SEGMENT_INDEX_BYTES_DEFAULT
    assert times.path.stat().st_size == 10_485_756
    assert (offsets.max_entries(), times.max_entries()) == (1_310_720, 873_813)
    offsets.close()
    times.close()


def test_existing_file_counts_every_whole_entry(tmp_path: Path) -> None:
    path = tmp_path / "100.index"
    path.write_bytes(struct.pack(">ii", 1, 0) + struct.pack(">ii", 3, 99) + bytes(8))
    index = OffsetIndex(path, 100)
    assert index.entries() == 3  # the trailing zeros read as an entry, exactly as in Kafka
    assert index.entry(2) == (100, 0)


# --- damage --------------------------------------------------------------------------------------------------------


def test_garbage_length_fails_sanity_check(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(50, 0)
    index.close()
    with open(index.path, "ab") as f:
        f.write(b"  ")
    reopened = OffsetIndex(index.path, BASE_OFFSET)
    with pytest.raises(CorruptIndex, match="not a multiple of 8") as caught:
        reopened.sanity_check()
    assert caught.value.path == str(index.path)


def test_index_overwritten_with_two_spaces_fails_sanity_check(tmp_path: Path) -> None:
    """LogLoaderTest.testCorruptIndexRebuild (the damage it makes)"""
    path = tmp_path / "0.timeindex"
    path.write_bytes(b"  ")
    index = TimeIndex(path, 0)
    assert index.entries() == 0
    with pytest.raises(CorruptIndex, match="not a multiple of 12"):
        index.sanity_check()


def test_last_offset_below_base_fails_sanity_check(tmp_path: Path) -> None:
    index = offset_index(tmp_path)
    index.append(50, 0)
    index.append(60, 10)
    assert_damage_fails_sanity_check(index, OFFSET_INDEX_ENTRY_BYTES, struct.pack(">i", -1), "below the base offset")


def assert_damage_fails_sanity_check(index: OffsetIndex | TimeIndex, position: int, data: bytes, match: str) -> None:
    """Close ``index``, write ``data`` at byte ``position`` of its file: reopened, it fails its sanity check."""
    index.close()
    overwrite(index.path, position, data)
    with pytest.raises(CorruptIndex, match=match):
        type(index)(index.path, BASE_OFFSET).sanity_check()


def test_time_running_backwards_fails_sanity_check(tmp_path: Path) -> None:
    """TimeIndexTest.testSanityCheck (with real damage instead of a mock)"""
    index = time_index(tmp_path)
    append_time_entries(index, 5)
    index.sanity_check()
    # the last timestamp below the first (10)
    assert_damage_fails_sanity_check(index, 4 * TIME_INDEX_ENTRY_BYTES, struct.pack(">q", 9), "below the first")


def test_time_index_last_offset_below_base_fails_sanity_check(tmp_path: Path) -> None:
    index = time_index(tmp_path)
    append_time_entries(index, 5)
    assert_damage_fails_sanity_check(
        index, 4 * TIME_INDEX_ENTRY_BYTES + 8, struct.pack(">i", -1), "below the base offset"
    )


# --- lookups against a model ---------------------------------------------------------------------------------------

increasing = st.lists(st.integers(1, 1000), min_size=0, max_size=60).map(
    lambda gaps: [sum(gaps[: i + 1]) for i in range(len(gaps))]
)


class SmallWarmOffsetIndex(OffsetIndex):
    """A warm section of 3 entries, so that most lookups of a small index search the cold section too."""

    _warm_entries = 3


class SmallWarmTimeIndex(TimeIndex):
    _warm_entries = 2


@pytest.mark.parametrize("index_type", [OffsetIndex, SmallWarmOffsetIndex])
@seed(20241025)
@settings(max_examples=150, deadline=None)
@given(gaps=increasing, positions=increasing, targets=st.lists(st.integers(-5, 70_000), max_size=20))
def test_offset_index_lookup_equals_bisect(
    tmp_path_factory: pytest.TempPathFactory,
    index_type: type[OffsetIndex],
    gaps: list[int],
    positions: list[int],
    targets: list[int],
) -> None:
    count = min(len(gaps), len(positions))
    offsets = [BASE_OFFSET + gap - 1 for gap in gaps[:count]]
    index = index_type(tmp_path_factory.mktemp("index") / "45.index", BASE_OFFSET, 64 * OFFSET_INDEX_ENTRY_BYTES)
    for offset, position in zip(offsets, positions, strict=False):
        index.append(offset, position)
    for target in [*targets, *offsets]:
        slot = bisect.bisect_right(offsets, target) - 1
        expected = OffsetPosition(BASE_OFFSET, 0) if slot < 0 else OffsetPosition(offsets[slot], positions[slot])
        assert index.lookup(target) == expected
        upper = bisect.bisect_left(positions[:count], target)
        expected_upper = None if upper == count else OffsetPosition(offsets[upper], positions[upper])
        assert index.fetch_upper_bound_offset(target, 0) == expected_upper
    index.close()


@pytest.mark.parametrize("index_type", [TimeIndex, SmallWarmTimeIndex])
@seed(20241025)
@settings(max_examples=150, deadline=None)
@given(timestamps=increasing, gaps=increasing, targets=st.lists(st.integers(-5, 70_000), max_size=20))
def test_time_index_lookup_and_truncate_equal_bisect(
    tmp_path_factory: pytest.TempPathFactory,
    index_type: type[TimeIndex],
    timestamps: list[int],
    gaps: list[int],
    targets: list[int],
) -> None:
    count = min(len(timestamps), len(gaps))
    entries = [TimestampOffset(ts, BASE_OFFSET + gap) for ts, gap in zip(timestamps[:count], gaps[:count], strict=True)]
    index = index_type(tmp_path_factory.mktemp("index") / "45.timeindex", BASE_OFFSET, 64 * TIME_INDEX_ENTRY_BYTES)
    for entry in entries:
        index.maybe_append(*entry)
    keys = [entry.timestamp for entry in entries]
    for target in [*targets, *keys]:
        slot = bisect.bisect_right(keys, target) - 1
        assert index.lookup(target) == (entries[slot] if slot >= 0 else (NO_TIMESTAMP, BASE_OFFSET))
    for target in targets[:3]:
        index.truncate_to(BASE_OFFSET + target)
        entries = [entry for entry in entries if entry.offset < BASE_OFFSET + target]
        assert [index.entry(i) for i in range(index.entries())] == entries
    index.close()


# --- threads -------------------------------------------------------------------------------------------------------


def test_lookups_on_other_threads_see_whole_entries_while_the_writer_appends_and_releases(tmp_path: Path) -> None:
    index = offset_index(tmp_path, base_offset=0, max_entries=4000)
    stop = threading.Event()
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                offset, position = index.lookup(10**9)
                assert position == offset * 2, (offset, position)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for i in range(1, 4000):
            index.append(i, i * 2)
            if i % 250 == 0:
                index.close_handler()
            if i % 1000 == 0:
                index.resize(4000 * OFFSET_INDEX_ENTRY_BYTES + i)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert not errors
    assert index.lookup(10**9) == (3999, 7998)
