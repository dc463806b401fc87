"""Text lines as producer batches (``core/format/lines.py``): cut under a size limit, every line a record, in order;
a line too large for any batch refuses the whole write."""

from __future__ import annotations

import random

import pytest

from logfs.core import errors as core
from logfs.core.format.decode import decode_records
from logfs.core.format.lines import encode_text_batches
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
