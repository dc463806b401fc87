"""Text lines as producer batches (``core/format/lines.py``): cut under a size limit, every line a record, in order;
a line too large for any batch refuses the whole write."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logfs.core import errors as core
from logfs.core.cext import CEXT
from logfs.core.format.batch import RECORD_BATCH_OVERHEAD
from logfs.core.format.decode import decode_records
from logfs.core.format.lines import (
    LineRun,
    encode_text_batches,
    encode_text_run,
    encode_text_run_c,
    max_text_line_bytes,
)
from logfs.core.format.validate import validate_batch


def test_text_batches_respect_the_limit_and_refuse_a_line_too_large() -> None:
    values = [b"x" * 100] * 1000
    batches = encode_text_batches(values, 5, 10_000)
    assert len(batches) > 1 and all(len(b) <= 10_000 for b in batches)
    assert [r.value for b in batches for r in decode_records(b)] == values
    for b in batches:
        validate_batch(b, client=True)
    with pytest.raises(core.RecordTooLarge):
        encode_text_batches([b"ok", b"y" * 20_000], 5, 10_000)
    rng = random.Random(5)
    print("seed 5")
    for _ in range(50):
        values = [b"v" * rng.randrange(0, 300) for _ in range(rng.randrange(1, 400))]
        limit = rng.randrange(400, 20_000)
        batches = encode_text_batches(values, 5, limit)
        assert all(len(b) <= limit for b in batches)
        assert [r.value for b in batches for r in decode_records(b)] == values


def test_max_text_line_bytes_is_the_longest_line_a_batch_takes() -> None:
    """The mount's line limit for ``append`` (mount/operations.py) is exact: a line of that length encodes to a batch
    within the limit, one byte more does not; checked around every varint size boundary of the record's lengths
    (64, 8192, 1 Mi: where the value's or the record's length varint grows a byte) and at Kafka's default."""
    limits = {1048588, 100, 1000}
    for edge in (64, 8192, 1 << 20):
        limits.update(range(RECORD_BATCH_OVERHEAD + edge - 12, RECORD_BATCH_OVERHEAD + edge + 12))
    for limit in sorted(limits):
        longest = max_text_line_bytes(limit)
        assert len(encode_text_batches([b"x" * longest], 5, limit)[0]) <= limit
        with pytest.raises(core.RecordTooLarge):
            encode_text_batches([b"x" * (longest + 1)], 5, limit)
    assert max_text_line_bytes(1048588) == 1048588 - 72


# --- the compiled path (core/cext/textbatches.c) against the reference -------------------------------------------

needs_cext = pytest.mark.skipif(CEXT is None, reason="the C extension is not built")

# Lines: empty, short, long, with \r and other bytes (no \n: that ends a line).
_line = st.one_of(
    st.just(b""),
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"\r")),
    st.integers(0, 3000).map(lambda n: b"x\r" * (n // 2)),
)


def _run(lines: list[bytes], split: int, tail: bytes) -> LineRun:
    """``lines`` as a framer would hand them: the first ``split`` bytes of the first line kept from an earlier
    request (the run's head), the rest in the request's buffer, followed by a partial line ``tail``."""
    text = b"\n".join(lines) + b"\n"
    split = min(split, len(lines[0]))
    return LineRun(text[:split], text[split:] + tail, len(text) - split)


@needs_cext
@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(_line, min_size=1, max_size=60),
    split=st.integers(0, 50),
    tail=st.binary(max_size=10).map(lambda b: b.replace(b"\n", b"")),
    limit=st.integers(RECORD_BATCH_OVERHEAD + 1, 8000),
    timestamp=st.integers(0, 2**63 - 1),
)
def test_compiled_text_batches_equal_the_reference(
    lines: list[bytes], split: int, tail: bytes, limit: int, timestamp: int
) -> None:
    run = _run(lines, split, tail)
    assert run.lines() == lines
    try:
        want: list[bytes] | Exception = encode_text_batches(lines, timestamp, limit)
    except core.RecordTooLarge as exc:
        want = exc
    try:
        got = [bytes(b) for b in encode_text_run_c(run, timestamp, limit)]
    except core.RecordTooLarge as exc:
        assert isinstance(want, core.RecordTooLarge), f"the C path refused what the reference took: {exc}"
        assert (type(exc), str(exc)) == (type(want), str(want))
        return
    assert got == want


@needs_cext
def test_compiled_text_batches_cut_exactly_at_the_limit_and_refuse_one_byte_more() -> None:
    """A batch of one line filling max.message.bytes exactly goes in; one byte longer is refused, with the
    reference's message; many lines near the limit are cut where the reference cuts them."""
    for limit in (1000, 1_048_588):
        for size in range(limit - 80, limit - 60):
            lines = [b"a" * size]
            try:
                want: list[bytes] | str = encode_text_batches(lines, 7, limit)
            except core.RecordTooLarge as exc:
                want = str(exc)
            try:
                got: list[bytes] | str = [bytes(b) for b in encode_text_run_c(_run(lines, 3, b""), 7, limit)]
            except core.RecordTooLarge as exc:
                got = str(exc)
            assert got == want
        assert isinstance(want, str) and "1" in want  # the last sizes are refused
    lines = [bytes([65 + i % 26]) * (i * 37 % 1500) for i in range(3000)]
    want_batches = encode_text_batches(lines, 9, 65_536)
    got_batches = encode_text_run_c(_run(lines, 0, b"partial"), 9, 65_536)
    assert len(want_batches) > 10 and [bytes(b) for b in got_batches] == want_batches
    assert [r.value for b in got_batches for r in decode_records(bytes(b))] == lines


def test_text_runs_encode_as_their_lines_do_with_or_without_the_helper() -> None:
    """encode_text_run (the C path when built and allowed, else the reference; CI runs both ways) gives the
    reference's batches, and refuses a line too large as the reference does."""
    lines = [b"", b"{}", b"a\rb", b"z" * 900] * 50
    assert [bytes(b) for b in encode_text_run(_run(lines, 1, b"t"), 3, 4096)] == encode_text_batches(lines, 3, 4096)
    with pytest.raises(core.RecordTooLarge):
        encode_text_run(_run([b"ok", b"y" * 5000], 0, b""), 3, 4096)
