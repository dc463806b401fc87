"""One log segment: Kafka's LogSegmentTest scenarios (its shouldTruncateEvenIfOffsetPointsToAGapInTheLog is in
``test_log.py`` with the other truncation scenarios), ported to ``LogSegment``'s API with Kafka's numbers.

Kafka's ``records(offset, values...)`` builds a magic-v1 message set whose messages all carry timestamp
``offset * 10``; here it is one v2 batch of the same records (the reference notes the numbers hold for v2). Kafka's
test segments index every append after 10 bytes and cap the indexes at 1000 bytes; so do these.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from logfs.core.errors import OffsetOverflow
from logfs.core.format.batch import Record
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_batch
from logfs.core.format.varint import INT32_MAX
from logfs.core.log.handles import HandleCache
from logfs.core.log.index import NO_TIMESTAMP
from logfs.core.log.segment import LogSegment

INDEX_INTERVAL_BYTES = 10  # LogTestUtils.createSegment's default
MAX_INDEX_BYTES = 1000  # LogTestUtils.createSegment: LazyIndex.forOffset(..., 1000)


def new_segment(
    directory: Path,
    base_offset: int,
    *,
    index_interval_bytes: int = INDEX_INTERVAL_BYTES,
    created_ms: int | None = None,
) -> LogSegment:
    """LogSegmentTest.createSegment: a segment in ``directory`` with Kafka's test index settings."""
    return LogSegment(
        directory,
        base_offset,
        index_interval_bytes=index_interval_bytes,
        max_index_bytes=MAX_INDEX_BYTES,
        handles=HandleCache(),
        created_ms=created_ms,
    )


def records(offset: int, *values: str) -> bytes:
    """LogSegmentTest.records: one batch of ``values`` at consecutive offsets from ``offset``, timestamps offset·10."""
    return encode_batch(
        [Record(offset + i, offset * 10, None, v.encode()) for i, v in enumerate(values)], base_offset=offset
    )


def read_values(data: bytes) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record in whole batches ``data`` holds."""
    out: list[tuple[int, bytes | None]] = []
    position = 0
    while position < len(data):
        size = int.from_bytes(data[position + 8 : position + 12], "big") + 12
        out += [(r.offset, r.value) for r in decode_records(data[position : position + size])]
        position += size
    return out


# --- timestamps ------------------------------------------------------------------------------------------------------


def test_find_offset_by_timestamp_returns_first_record_at_or_after_it(tmp_path: Path) -> None:
    """LogSegmentTest.testFindOffsetByTimestamp"""
    message_size = len(records(0, "msg00"))
    seg = new_segment(tmp_path, 40, index_interval_bytes=message_size * 2 - 1)
    for i in range(40, 50):
        seg.append(i, i * 10, i, records(i, f"msg{i}"))
    assert seg.offset_index.entries() == 4  # appends 42, 44, 46, 48: the interval indexes every second one

    assert seg.largest_timestamp == 490

    def found(ts: int) -> int | None:
        hit = seg.find_offset_by_timestamp(ts, 0)
        return None if hit is None else hit.offset

    assert found(420) == 42  # an indexed timestamp
    assert found(421) == 43
    assert found(430) == 43  # an un-indexed one
    assert found(431) == 44
    assert found(491) is None  # beyond the last
    assert found(401) == 41  # before the first indexed one
    assert found(399) == 40  # before the first


# --- appends ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base_offset", "largest_offset"),
    [
        (0, -(2**31)),
        (0, 2**31),
        (1, 0),
        (100, 10),
        (2**31, 0),
        (-(2**31), 0),
        (2**31, 2**32),
    ],
)
def test_append_refuses_offset_outside_relative_range(tmp_path: Path, base_offset: int, largest_offset: int) -> None:
    """LogSegmentTest.testAppendForLogSegmentOffsetOverflowException"""
    seg = new_segment(tmp_path, base_offset)
    with pytest.raises(OffsetOverflow):
        seg.append(largest_offset, 1_000, largest_offset, records(0, "hello"))
    assert seg.size_bytes == 0


def test_append_accepts_the_relative_range_edges(tmp_path: Path) -> None:
    """LogSegmentTest.testAppendForLogSegmentOffsetOverflowException, the other side: 0 and 2**31 - 1 fit."""
    seg = new_segment(tmp_path, 2**31)
    seg.append(2**31, 1_000, 2**31, records(2**31, "first"))
    seg.append(2**31 + INT32_MAX, 1_000, 2**31 + INT32_MAX, records(2**31 + INT32_MAX, "last"))
    assert seg.read_next_offset() == 2**31 + INT32_MAX + 1


# --- reads -----------------------------------------------------------------------------------------------------------


def test_read_on_empty_segment_returns_none(tmp_path: Path) -> None:
    """LogSegmentTest.testReadOnEmptySegment"""
    seg = new_segment(tmp_path, 40)
    assert seg.read(40, 300) is None


def test_read_before_first_offset_returns_from_first_batch(tmp_path: Path) -> None:
    """LogSegmentTest.testReadBeforeFirstOffset"""
    seg = new_segment(tmp_path, 40)
    ms = records(50, "hello", "there", "little", "bee")
    seg.append(53, NO_TIMESTAMP, -1, ms)
    read = seg.read(41, 300)
    assert read is not None
    assert read.records == ms
    assert read_values(read.records) == [(50, b"hello"), (51, b"there"), (52, b"little"), (53, b"bee")]


def test_read_after_last_offset_returns_none(tmp_path: Path) -> None:
    """LogSegmentTest.testReadAfterLast"""
    seg = new_segment(tmp_path, 40)
    seg.append(51, NO_TIMESTAMP, -1, records(50, "hello", "there"))
    assert seg.read(52, 200) is None


def test_read_from_gap_returns_the_next_batch_only(tmp_path: Path) -> None:
    """LogSegmentTest.testReadFromGap"""
    seg = new_segment(tmp_path, 40)
    seg.append(51, NO_TIMESTAMP, -1, records(50, "hello", "there"))
    ms2 = records(60, "alpha", "beta")
    seg.append(61, NO_TIMESTAMP, -1, ms2)
    read = seg.read(55, 200)
    assert read is not None
    assert read.records == ms2
    assert read_values(read.records) == [(60, b"alpha"), (61, b"beta")]


def test_next_offset_follows_the_last_batch(tmp_path: Path) -> None:
    """LogSegmentTest.testNextOffsetCalculation"""
    seg = new_segment(tmp_path, 40)
    assert seg.read_next_offset() == 40
    seg.append(52, NO_TIMESTAMP, -1, records(50, "hello", "there", "you"))
    assert seg.read_next_offset() == 53


# --- rolling after truncation ------------------------------------------------------------------------------------


def test_truncated_empty_segment_does_not_roll_until_offset_overflows(tmp_path: Path) -> None:
    """LogSegmentTest.testTruncateEmptySegment"""
    max_segment_ms = 300_000
    now = 1_700_000_000_000  # MockTime
    seg = new_segment(tmp_path, 0, created_ms=now)
    seg.flush()  # Kafka forces the lazy indexes to load; here a flush creates both files
    assert seg.offset_index.path.exists() and seg.time_index.path.exists()
    seg.close()

    reopened = new_segment(tmp_path, 0, created_ms=now)
    assert reopened.offset_index.length_bytes() == 0  # close trimmed both files to their (no) entries
    assert reopened.time_index.length_bytes() == 0
    assert reopened.offset_index.is_full() and reopened.time_index.is_full()

    now += 500
    reopened.truncate_to(57, now_ms=now)
    assert reopened.roll.time_waited_for_roll(now, NO_TIMESTAMP) == 0
    assert not reopened.time_index.is_full()
    assert not reopened.offset_index.is_full()

    def should_roll(max_offset: int) -> bool:
        return reopened.roll.should_roll(
            segment_bytes=INT32_MAX,
            segment_ms=max_segment_ms,
            messages_bytes=1024,
            max_timestamp_in_messages=NO_TIMESTAMP,
            max_offset_in_messages=max_offset,
            now_ms=now,
        )

    assert not should_roll(100)
    now += max_segment_ms + 1  # segment.ms has passed, but the segment is empty
    assert reopened.roll.time_waited_for_roll(now, NO_TIMESTAMP) == max_segment_ms + 1
    assert not should_roll(100)
    assert should_roll(INT32_MAX + 200)  # the next offset does not fit the segment
