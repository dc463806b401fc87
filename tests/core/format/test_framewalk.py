"""The one framing walk of a stored ``.log`` (core/format/framewalk.py): every read size and cut of the file frames the
batches the in-memory rule (``batch.iter_batch_positions``) frames, in both modes; torn tails, overruns, short reads
and a length below Kafka's minimum stop it the way each reader expects."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logfs.core.errors import CorruptRecord
from logfs.core.format.batch import RECORD_BATCH_OVERHEAD, iter_batch_positions
from logfs.core.format.encode import encode_values
from logfs.core.format.framewalk import FrameWalk, by_read


def stored(sizes: list[int]) -> tuple[bytes, list[tuple[int, int, int]]]:
    """Batches with values of ``sizes`` bytes back to back, and ``(position, size, base offset)`` of each."""
    out = bytearray()
    expected = []
    for i, n in enumerate(sizes):
        batch = encode_values([b"v" * n], 1_000, base_offset=10 * i)
        expected.append((len(out), len(batch), 10 * i))
        out += batch
    return bytes(out), expected


class Reads:
    """A file's pread: counts the reads, and can end the file early (a truncation under the walk)."""

    def __init__(self, data: bytes, cut_at: int | None = None) -> None:
        self.data = data
        self.cut_at = len(data) if cut_at is None else cut_at
        self.count = 0

    def __call__(self, position: int, size: int) -> bytes:
        self.count += 1
        return self.data[position : min(position + size, self.cut_at)]


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 3000), min_size=0, max_size=12),
    first=st.integers(1, 5000),
    grow=st.integers(1, 4),
    cut=st.integers(0, 40_000),
    whole=st.booleans(),
)
def test_every_read_size_frames_what_the_buffer_rule_frames(
    sizes: list[int], first: int, grow: int, cut: int, whole: bool
) -> None:
    data, _ = stored(sizes)
    end = min(cut, len(data))
    reference = list(iter_batch_positions(data[:end]))
    walk = FrameWalk(Reads(data), 0, end, whole=whole, first_read=first, max_read=first * grow)
    got = []
    for buf, at, size, position, base in walk:
        assert bytes(buf[at : at + min(size, RECORD_BATCH_OVERHEAD)]) == data[position : position + min(size, 61)]
        if whole:
            assert bytes(buf[at : at + size]) == data[position : position + size]
        assert base == struct.unpack_from(">q", data, position)[0]
        got.append((position, size))
    assert got == reference
    done = reference[-1][0] + reference[-1][1] if reference else 0
    assert walk.end == done
    assert walk.torn == (done < end)
    assert walk.overrun == (done < end and end - done > 17)


def test_a_batch_larger_than_a_read_is_read_whole_or_skipped_past_by_headers() -> None:
    data, expected = stored([100, 50_000, 100])
    reads = Reads(data)
    frames = list(FrameWalk(reads, 0, len(data), first_read=4096))
    assert [(f[3], f[2], f[4]) for f in frames] == expected
    assert len(frames[1][0]) == expected[1][1]  # the large one, read on its own and whole
    headers = Reads(data)
    assert [(f[3], f[2]) for f in FrameWalk(headers, 0, len(data), whole=False, first_read=4096)] == [
        (p, s) for p, s, _ in expected
    ]
    assert headers.count < reads.count + 2  # nothing of the large batch's body beyond a read's worth


def test_a_length_below_the_minimum_is_damage_at_its_position_after_the_good_batches() -> None:
    data, expected = stored([10, 10])
    bad = bytearray(data)
    struct.pack_into(">i", bad, expected[1][0] + 8, 13)
    walk = FrameWalk(Reads(bytes(bad)), 0, len(bad), first_read=1 << 20)
    seen = []
    with pytest.raises(CorruptRecord) as info:
        for frame in walk:
            seen.append(frame[3])
    assert seen == [0] and info.value.position == expected[1][0] and walk.end == expected[1][0]


def test_a_file_cut_under_the_walk_is_a_short_read_not_an_overrun() -> None:
    data, expected = stored([10, 5000, 10])
    walk = FrameWalk(Reads(data, cut_at=expected[1][0] + 100), 0, len(data), first_read=1024)
    assert [f[3] for f in walk] == [0]
    assert walk.torn and not walk.overrun and walk.end == expected[1][0]


def test_every_read_is_seen_before_its_batches_and_frames_group_by_read() -> None:
    data, expected = stored([10] * 30 + [9000] + [10] * 5)
    seen: list[tuple[int, int]] = []
    walk = FrameWalk(Reads(data), 0, len(data), first_read=1024, max_read=2048,
                     on_read=lambda b, p: seen.append((p, len(b))))  # fmt: skip
    groups = list(by_read(walk))
    large, large_size, _ = expected[30]
    assert (large, 2048) in seen and (large, large_size) in seen  # the large batch: seen cut short, then read whole
    assert [(base, len(buf)) for buf, base, _, _ in groups] == [g for g in seen if g != (large, 2048)]
    flat = [(base + at, size) for _, base, ats, sizes in groups for at, size in zip(ats, sizes, strict=True)]
    assert flat == [(p, s) for p, s, _ in expected]
