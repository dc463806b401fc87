"""The read-side check of stored batches in C (core/cext/storedcheck.c) against its reference
(``core/log/batchcheck.scan_python``): the same ``(at, kind, value, last)`` on valid runs of batches, on damaged ones
(a bit flipped anywhere, a byte overwritten, a run cut anywhere, a span that ends early), on arbitrary bytes, and
under arbitrary offset bounds and leader-epoch caches (the header fields the CRC does not cover, issue 23).

Also the check as the store uses it, through whichever walk is selected: CI's ``LOGFS_NO_CEXT=1`` pass of this
folder runs it with the reference.
"""

from __future__ import annotations

import os
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logfs.core.errors import CorruptStoredBatch
from logfs.core.format.batch import Record
from logfs.core.format.encode import encode_batch
from logfs.core.log import batchcheck
from logfs.core.log.batchcheck import (
    BAD_CRC,
    BAD_EPOCH,
    BAD_FRAMING,
    BAD_MAGIC,
    BAD_OFFSETS,
    NO_OFFSET_BOUND,
    OK,
    check_span,
    pack_epochs,
    scan_python,
)
from logfs.core.store import Store

compiled = batchcheck.scan_compiled
needs_c = pytest.mark.skipif(compiled is None, reason="the compiled helper is not built")

values = st.lists(st.binary(max_size=300), min_size=1, max_size=4)
runs = st.lists(values, min_size=1, max_size=12)


def _run(batches: list[list[bytes]], epochs: list[int] | None = None, gap: int = 0) -> bytes:
    """Batches at rising offsets (``gap`` offsets left out between two, as the cleaner leaves), each with the leader
    epoch ``epochs[i]`` (default: none, -1)."""
    out = []
    base = 0
    for n, vs in enumerate(batches):
        epoch = -1 if epochs is None else epochs[n]
        records = [Record(base + i, 1_700_000_000_000, None, v) for i, v in enumerate(vs)]
        out.append(encode_batch(records, base_offset=base, partition_leader_epoch=epoch))
        base += len(vs) + gap
    return b"".join(out)


def _both(buf: bytes, position: int, span_end: int, *bounds: int | bytes) -> None:
    assert compiled is not None
    view = memoryview(buf)
    assert compiled(view, position, span_end, *bounds) == scan_python(view, position, span_end, *bounds)  # type: ignore[arg-type]


@needs_c
@settings(max_examples=300, deadline=None)
@given(runs, st.integers(0, 1 << 40), st.integers(0, 64))
def test_the_compiled_check_agrees_on_valid_runs(batches: list[list[bytes]], position: int, slack: int) -> None:
    buf = _run(batches)
    last = sum(len(vs) for vs in batches) - 1
    assert compiled is not None and compiled(buf, position, position + len(buf)) == (len(buf), OK, 0, last)
    _both(buf, position, position + len(buf) + slack)


@needs_c
@settings(max_examples=500, deadline=None)
@given(runs, st.data())
def test_the_compiled_check_agrees_on_damaged_runs(batches: list[list[bytes]], data: st.DataObject) -> None:
    buf = bytearray(_run(batches))
    damage = data.draw(st.sampled_from(["flip", "byte", "cut", "span"]))
    span_end = len(buf)
    if damage == "flip":
        at = data.draw(st.integers(0, len(buf) - 1))
        buf[at] ^= 1 << data.draw(st.integers(0, 7))
    elif damage == "byte":
        buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    elif damage == "cut":
        del buf[data.draw(st.integers(0, len(buf))) :]
    else:
        span_end = data.draw(st.integers(0, len(buf)))
    _both(bytes(buf), 0, span_end)


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 500))
def test_the_compiled_check_agrees_on_arbitrary_bytes(buf: bytes, span_end: int) -> None:
    _both(buf, 0, span_end)


@needs_c
def test_each_kind_of_damage_is_named_at_its_batch() -> None:
    one = _run([[b"a" * 50]])
    buf = bytearray(one * 3)
    buf[len(one) + 40] ^= 0x01  # a value byte of the second batch
    assert compiled is not None
    three = _run([[b"a" * 50]] * 3)
    buf = bytearray(three)
    buf[len(one) + 40] ^= 0x01  # a value byte of the second batch
    assert compiled(bytes(buf), 0, len(buf)) == (len(one), BAD_CRC, 0, 0)
    buf = bytearray(three)
    buf[2 * len(one) + 16] = 7  # the third batch's magic
    assert compiled(bytes(buf), 0, len(buf)) == (2 * len(one), BAD_MAGIC, 7, 1)
    assert compiled(three, 0, 2 * len(one) + 5) == (2 * len(one), BAD_FRAMING, len(one) - 12, 1)
    assert compiled(three[: 2 * len(one) + 30], 0, 3 * len(one)) == (2 * len(one), OK, 0, 1)  # cut short: read next


def test_the_selected_walk_follows_logfs_no_cext() -> None:
    if os.environ.get("LOGFS_NO_CEXT") or compiled is None:
        assert batchcheck.scan is scan_python
    else:
        assert batchcheck.scan is compiled


def test_one_record_batches_pass_and_a_flipped_bit_fails_at_its_batch(tmp_path: Path) -> None:
    """Through the selected walk (compiled, or the reference under LOGFS_NO_CEXT=1)."""
    store = Store.open(tmp_path / "store")
    try:
        _check_one_record_batches(store)
    finally:
        store.abandon()


def _check_one_record_batches(store: Store) -> None:
    store.create_topic("t", 1)
    log = store.log("t", 0)
    for i in range(200):
        log.append_as_leader(bytearray(encode_batch([Record(0, 1_700_000_000_000, None, b"v%03d" % i)])), 0)
    segment = log.segments[0]
    data = segment.log_file.read(0, segment.size_bytes)
    check_span(segment.log_file, data, 0)
    damaged = bytearray(data)
    batch = len(data) // 200
    damaged[137 * batch + 30] ^= 0x10
    with pytest.raises(CorruptStoredBatch) as info:
        check_span(segment.log_file, bytes(damaged), 0)
    assert info.value.position == 137 * batch and "CRC-32C" in str(info.value)


offset_bounds = st.tuples(
    st.integers(-5, 40), st.one_of(st.just(NO_OFFSET_BOUND), st.integers(-5, 40)), st.integers(-5, 40)
)
epoch_caches = st.lists(st.tuples(st.integers(-1, 6), st.integers(0, 40)), max_size=4).map(
    lambda entries: pack_epochs(sorted(set(entries), key=lambda e: (e[1], e[0])))
)


@needs_c
@settings(max_examples=500, deadline=None)
@given(runs, st.lists(st.integers(-3, 7), min_size=12, max_size=12), st.integers(0, 3), offset_bounds, epoch_caches,
       st.data())  # fmt: skip
def test_the_compiled_check_agrees_on_offsets_and_epochs(
    batches: list[list[bytes]],
    epochs: list[int],
    gap: int,
    bounds: tuple[int, int, int],
    cache: bytes,
    data: st.DataObject,
) -> None:
    """Random offset bounds, epoch caches, batch epochs, gaps, and a bit flipped in a header field the CRC does not
    cover (base offset, length, leader epoch, magic): the two walks answer the same."""
    buf = bytearray(_run(batches, epochs, gap))
    if data.draw(st.booleans()):
        field = data.draw(st.sampled_from([(0, 8), (8, 4), (12, 4), (16, 1)]))
        at = data.draw(st.integers(field[0], field[0] + field[1] - 1))
        buf[at] ^= 1 << data.draw(st.integers(0, 7))
    _both(bytes(buf), 0, len(buf), *bounds, cache)


def test_offsets_that_go_back_or_overlap_fail_and_gaps_pass() -> None:
    """The reference (the compiled walk agrees above): a gap is what compaction leaves; a base offset at or below
    the previous batch's last offset, below ``min_base``, or a last offset past ``max_last``/``first_max_last`` fails
    at its batch."""
    one = len(_run([[b"a" * 20]]))
    gapped = _run([[b"a" * 20]] * 3, gap=5)  # offsets 0, 6, 12
    assert scan_python(memoryview(gapped), 0, len(gapped)) == (3 * one, OK, 0, 12)
    back = bytearray(gapped)
    back[2 * one + 7] ^= 0x08  # the third batch's base offset 12 -> 4: below the second's last (6)
    assert scan_python(memoryview(bytes(back)), 0, len(back)) == (2 * one, BAD_OFFSETS, 4, 6)
    up = bytearray(gapped)
    up[2 * one + 5] ^= 0x01  # 12 -> 65548: past max_last
    assert scan_python(memoryview(bytes(up)), 0, len(up), 0, NO_OFFSET_BOUND, 100) == (2 * one, BAD_OFFSETS, 65548, 6)
    assert scan_python(memoryview(gapped), 0, len(gapped), 1) == (0, BAD_OFFSETS, 0, 0)  # below min_base
    assert scan_python(memoryview(gapped), 0, len(gapped), 0, 0, 12) == (3 * one, OK, 0, 12)
    assert scan_python(memoryview(gapped), 0, len(gapped), 0, -1, 12)[1] == BAD_OFFSETS  # the index says otherwise


def test_leader_epochs_above_the_cache_fail() -> None:
    """Epoch -1 (none) always passes; an epoch above the cache's epoch for the base offset fails; below -1 fails."""
    buf = _run([[b"x"]] * 4, epochs=[0, 0, 1, -1])  # offsets 0..3
    cache = pack_epochs([(0, 0), (1, 2)])
    assert scan_python(memoryview(buf), 0, len(buf), 0, NO_OFFSET_BOUND, NO_OFFSET_BOUND, cache)[1] == OK
    early = pack_epochs([(0, 0), (1, 3)])  # epoch 1 starts after the third batch
    at, kind, value, _ = scan_python(memoryview(buf), 0, len(buf), 0, NO_OFFSET_BOUND, NO_OFFSET_BOUND, early)
    assert (kind, value) == (BAD_EPOCH, 1) and at == 2 * (len(buf) // 4)
    negative = _run([[b"x"]], epochs=[-2])
    assert scan_python(memoryview(negative), 0, len(negative))[1:3] == (BAD_EPOCH, -2)


@pytest.mark.parametrize("length", [14, 15, 48])
def test_a_batch_shorter_than_a_header_with_a_matching_crc_is_framing(length: int) -> None:
    """A CRC that passes over fewer bytes than a v2 header has no lastOffsetDelta to read: framing, in both walks
    (the buffer ends with the batch, so a read of the field would run past it)."""
    tail = bytes(range(length - 9))  # the bytes after the CRC field
    buf = (0).to_bytes(8, "big") + length.to_bytes(4, "big") + (0).to_bytes(4, "big") + b"\x02"
    buf += crc32c.crc32c(tail).to_bytes(4, "big") + tail
    assert len(buf) == length + 12
    assert scan_python(memoryview(buf), 0, len(buf)) == (0, BAD_FRAMING, length, -1)
    if compiled is not None:
        assert compiled(buf, 0, len(buf)) == (0, BAD_FRAMING, length, -1)
