"""The read-side check of stored batches in C (core/format/_checkstored.c) against its reference
(``core/log/batchcheck.scan_python``): the same ``(at, kind, value)`` on valid runs of batches, on damaged ones (a bit
flipped anywhere, a byte overwritten, a run cut anywhere, a span that ends early) and on arbitrary bytes.

Also the check as the store uses it, through whichever walk is selected: CI's ``LOGFS_NO_CEXT=1`` pass of this
folder runs it with the reference.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logfs.core.errors import CorruptStoredBatch
from logfs.core.format.batch import Record
from logfs.core.format.encode import encode_batch
from logfs.core.log import batchcheck
from logfs.core.log.batchcheck import BAD_CRC, BAD_FRAMING, BAD_MAGIC, OK, check_span, scan_python
from logfs.core.store import Store

compiled = batchcheck.scan_compiled
needs_c = pytest.mark.skipif(compiled is None, reason="the compiled helper is not built")

values = st.lists(st.binary(max_size=300), min_size=1, max_size=4)
runs = st.lists(values, min_size=1, max_size=12)


def _run(batches: list[list[bytes]]) -> bytes:
    return b"".join(encode_batch([Record(i, 1_700_000_000_000, None, v) for i, v in enumerate(vs)]) for vs in batches)


def _both(buf: bytes, position: int, span_end: int) -> None:
    assert compiled is not None
    view = memoryview(buf)
    assert compiled(view, position, span_end) == scan_python(view, position, span_end)


@needs_c
@settings(max_examples=300, deadline=None)
@given(runs, st.integers(0, 1 << 40), st.integers(0, 64))
def test_the_compiled_check_agrees_on_valid_runs(batches: list[list[bytes]], position: int, slack: int) -> None:
    buf = _run(batches)
    assert compiled is not None and compiled(buf, position, position + len(buf)) == (len(buf), OK, 0)
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
    assert compiled(bytes(buf), 0, len(buf)) == (len(one), BAD_CRC, 0)
    buf = bytearray(one * 3)
    buf[2 * len(one) + 16] = 7  # the third batch's magic
    assert compiled(bytes(buf), 0, len(buf)) == (2 * len(one), BAD_MAGIC, 7)
    assert compiled(one * 3, 0, 2 * len(one) + 5) == (2 * len(one), BAD_FRAMING, len(one) - 12)
    assert compiled(one * 2 + one[:30], 0, 3 * len(one)) == (2 * len(one), OK, 0)  # cut short: read next


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
