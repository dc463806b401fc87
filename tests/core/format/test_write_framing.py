"""The mount's write framing across requests (core/format/framing.py), without a mount: lines and batches cut out of
writes split anywhere. What the lines become, and the partitioner, are tested in tests/core/format/."""

from __future__ import annotations

import random

import pytest

from logfs.core import errors as core
from logfs.core.format.encode import encode_values
from logfs.core.format.framing import BatchFramer, LineFramer, LineTooLong

# --- framing --------------------------------------------------------------------------------------------------------


def test_line_framer_keeps_partial_lines_across_any_split() -> None:
    text = b"one\ntwo\n\nthree\nfour"
    rng = random.Random(7)
    print("seed 7")
    for _ in range(200):
        framer = LineFramer(1000)
        cuts = sorted(rng.sample(range(1, len(text)), rng.randrange(0, 6)))
        lines: list[bytes] = []
        for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True):
            lines += framer.feed(text[a:b])
        assert lines == [b"one", b"two", b"", b"three"]
        assert framer.take_tail() == b"four"
        assert framer.take_tail() is None


def test_line_framer_refuses_a_line_longer_than_a_record_can_be() -> None:
    framer = LineFramer(10)
    assert framer.feed(b"12345") == []
    with pytest.raises(LineTooLong):
        framer.feed(b"1234567")
    assert framer.pending_bytes == 0


def test_line_framer_measures_every_line_it_completes_before_handing_it_on() -> None:
    """The kept partial line joined to the request that completes it (the line a short-write retry re-sends the rest
    of) is measured, and (``measure_every_line``, append.jsonl) every line inside a request longer than the limit:
    LineTooLong, nothing returned, and the partial line after it dropped."""
    framer = LineFramer(10, measure_every_line=True)
    assert framer.feed(b"123456") == []
    with pytest.raises(LineTooLong):
        framer.feed(b"78901\nok\npart")  # 11 bytes once completed, though the kept part never passed 10
    assert framer.pending_bytes == 0
    assert framer.feed(b"1234567890\n") == [b"1234567890"]  # exactly the limit: taken
    with pytest.raises(LineTooLong):
        framer.feed(b"ok\n12345678901\nok\n")  # inside one request longer than the limit
    assert framer.pending_bytes == 0
    assert framer.feed(b"a\nbc\n") == [b"a", b"bc"]
    text = LineFramer(10)  # append: lines inside a request are left to the encoder's exact check
    assert text.feed(b"ok\n12345678901\nok\n") == [b"ok", b"12345678901", b"ok"]
    assert text.feed(b"1234567") == []
    with pytest.raises(LineTooLong):
        text.feed(b"8901\n")  # the line grown across requests is measured all the same


def test_batch_framer_cuts_batches_across_any_split() -> None:
    batches = [encode_values([b"v%d" % i] * (i + 1), 1000 + i) for i in range(5)]
    data = b"".join(batches)
    rng = random.Random(11)
    print("seed 11")
    for _ in range(100):
        framer = BatchFramer(1 << 20)
        cuts = sorted(rng.sample(range(1, len(data)), 8))
        got: list[bytes] = []
        for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
            got += [bytes(x) for x in framer.feed(data[a:b])]
        assert got == batches
        assert framer.pending_bytes == 0


def test_batch_framer_refuses_oversized_and_corrupt_lengths_at_once() -> None:
    batch = encode_values([b"x" * 100], 0)
    framer = BatchFramer(50)
    assert framer.feed(batch[:12]) == [] and isinstance(framer.failure, core.RecordTooLarge)
    bad = bytearray(batch)
    bad[8:12] = (3).to_bytes(4, "big")
    framer = BatchFramer(1 << 20)
    assert framer.feed(batch + bytes(bad)) == [bytearray(batch)]  # the batch before the damage still goes in
    assert isinstance(framer.failure, core.CorruptRecord)
