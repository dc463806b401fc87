"""Fast renderings of many stored batches at once, for the mount's readers (the plain and JSON-lines text of
docs/mount.md, "Reads").

:mod:`logfs.core.format.render` renders one batch with a loop over its records: the reference. Readers of the mount
render whole chunks of a segment, so :func:`render_stored` takes every batch of a span of stored bytes at once and
gives the reference's bytes (tests/core/format/test_render_stored.py holds it to that on generated batches of every
kind). The work is split by seam:

* ``storedpieces.stored_pieces`` finds every record of every uncompressed batch in the span with one set of numpy
  calls (``numpywalk.walk_stored``; a compressed batch is inflated and walked alone), the reference walker's checks
  vectorised; anything it does not handle (headers, a fault, varints wider than two bytes for lengths) goes to the
  reference, batch by batch, which gives the same bytes or the precise error.
* A run of records that all have one layout (same size, key and value at the same places, one value length: fixed
  schemas, benchmarks, the `append` of equal lines) renders as one 2-D numpy block: each output line is a row,
  constant text is broadcast into its columns, the values are copied through a strided view of the stored bytes and
  the offsets and timestamps are written as digit columns (plain here, JSON lines in ``storedjsonl``). JSON lines
  take that path only when every key and value byte is printable ASCII other than ``"`` and ``\\`` (their JSON
  string is then the bytes in quotes). Blocks are written straight into the one output array
  (``storedparts.assemble``: no intermediate copies).
* Other records are joined from slices (plain) or formatted per record from the columns (JSON lines, when their
  bytes are that plain ASCII), else encoded field by field as the reference does (UTF-8 text, escapes, base64).
* ``storedsize`` gives the sizes of these renderings without joining them.

Read-committed renderings (the mount's ``committed/`` views) pass an
:class:`~logfs.core.format.abortedbatches.AbortedBatches`: a batch it covers (transactional, and inside an aborted
transaction of its producer) is left out like a control batch, before any of its records is walked. It is one test
per batch, made only when such a filter is given, so renderings of partitions without aborted transactions cost
what they did.

Measured on the development machine with 100-byte records in 1,000-record batches: the reference ~2.5 M records/s
plain and ~0.35-0.55 M/s JSON lines; these ~7 M/s plain and ~3 M/s JSON lines, sizes alone ~12 M/s and ~6 M/s.
Any thread may call them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from logfs.core.format.abortedbatches import AbortedBatches
from logfs.core.format.storedjsonl import jsonl_walked
from logfs.core.format.storedparts import Part, PlainBlock, assemble
from logfs.core.format.storedpieces import Single, Walked, block_runs, cut, render_single, stored_pieces


def render_stored(
    buf: bytes,
    positions: Sequence[int],
    jsonl: bool,
    topic: str,
    partition: int,
    from_offset: int | None = None,
    until_offset: int | None = None,
    aborted: AbortedBatches | None = None,
) -> bytes | memoryview:
    """The plain (or JSON-lines) rendering of the whole batches at ``positions`` of ``buf``, in order, each cut to
    the records with offsets in ``[from_offset, until_offset)`` (None: unbounded): byte for byte what rendering
    each batch with ``render.render_plain`` / ``render.render_jsonl`` and cutting it gives. The batches ``aborted``
    covers render as nothing (read_committed). Any thread."""
    parts: list[Part] = []
    for piece in stored_pieces(buf, positions, from_offset, until_offset, aborted):
        if isinstance(piece, Single):
            parts.append(render_single(piece, jsonl, topic, partition, from_offset, until_offset))
            continue
        i0, i1 = cut(piece.offsets, from_offset, until_offset)
        if i0 < i1:
            if jsonl:
                jsonl_walked(piece, i0, i1, topic, partition, parts)
            else:
                _plain_walked(piece, i0, i1, parts)
    return assemble(parts)


# --- plain ---


def _plain_walked(g: Walked, i0: int, i1: int, parts: list[Part]) -> None:
    arr = np.frombuffer(g.data, dtype=np.uint8)
    lay = g.layout
    for run, lo, hi, _ in block_runs(g, i0, i1):
        if run is None:
            parts.append(_plain_joined(g, lo, hi))
        else:
            width = max(int(lay.value_length[lo]), 0)
            parts.append(PlainBlock(arr, int(lay.value_position[lo]), hi - lo, width, lay.run_step[run]))


def _plain_joined(g: Walked, lo: int, hi: int) -> bytes:
    starts = g.layout.value_position[lo:hi]
    ends = starts + np.maximum(g.layout.value_length[lo:hi], 0)
    data = g.data
    values = [data[a:b] for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    values.append(b"")
    return b"\n".join(values)
