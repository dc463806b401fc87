"""The sizes of stored-batch renderings, computed from the walked columns where the format allows, nothing joined.

Plain text: each record's value length plus its newline. JSON lines: when every key and value is its bytes in quotes
(or null), a line's length is a sum of column lengths and digit counts; otherwise, with the compiled walker, the
compiled renderer counts each line's bytes without writing them (``storedjsonl.jsonl_sizes_compiled``), and without
it the lines are rendered and their newlines counted (JSON lines hold no raw newline). What the mount's rendered-size
index (``mount/render/rendersize.py``) asks for: the size of each whole batch (:func:`stored_sizes`) and of a cut
span (:func:`stored_size`).

Measured on the development machine with 100-byte records in 1,000-record batches: ~12 M records/s plain and
~6 M/s JSON lines. JSON lines of realistic events (scripts/realdata.py, 2 shared cores, best of 5): producer batches
(16 KiB, keys, a header, half lz4/zstd) 200 → 410 MB/s of stored bytes with the counter (rendering them: ~335
MB/s), events in large uncompressed batches 320 → ~2,200 MB/s (rendering: ~760-850). Any thread.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from logfs.core import cext
from logfs.core.format.abortedbatches import AbortedBatches
from logfs.core.format.columns import IntArray
from logfs.core.format.storedjsonl import (
    JSONL_MIDDLE,
    JSONL_TAIL,
    POW10,
    json_plain,
    jsonl_lead,
    jsonl_sizes_compiled,
    jsonl_walked,
)
from logfs.core.format.storedparts import Part, assemble
from logfs.core.format.storedpieces import Single, Walked, block_runs, cut, has_headers, render_single, stored_pieces


def stored_size(
    buf: bytes,
    positions: Sequence[int],
    jsonl: bool,
    topic: str,
    partition: int,
    from_offset: int | None = None,
    until_offset: int | None = None,
    aborted: AbortedBatches | None = None,
) -> int:
    """``len(render_stored(...))``, computed from the columns where the format allows (plain text always; JSON lines
    when the keys and values need no escaping), nothing joined."""
    total = 0
    for piece in stored_pieces(buf, positions, from_offset, until_offset, aborted):
        if isinstance(piece, Single):
            total += len(render_single(piece, jsonl, topic, partition, from_offset, until_offset))
            continue
        i0, i1 = cut(piece.offsets, from_offset, until_offset)
        if i0 < i1:
            total += int(_record_sizes(piece, i0, i1, jsonl, topic, partition).sum())
    return total


def stored_sizes(
    buf: bytes,
    positions: Sequence[int],
    jsonl: bool,
    topic: str,
    partition: int,
    aborted: AbortedBatches | None = None,
) -> list[int]:
    """The size of the whole rendering of each batch at ``positions`` (0 for control and empty batches, and for
    those ``aborted`` covers), all walked at once: what an index of rendered sizes needs. Any thread."""
    sizes = [0] * len(positions)
    for piece in stored_pieces(buf, positions, None, None, aborted):
        if isinstance(piece, Single):
            sizes[piece.number] = len(render_single(piece, jsonl, topic, partition, None, None))
            continue
        per_record = _record_sizes(piece, 0, piece.first[-1], jsonl, topic, partition)
        per_batch = np.add.reduceat(per_record, np.array(piece.first[:-1], dtype=np.int64))
        for index, size in zip(piece.indexes, per_batch.tolist(), strict=True):
            sizes[index] = size
    return sizes


def _record_sizes(g: Walked, i0: int, i1: int, jsonl: bool, topic: str, partition: int) -> IntArray:
    """The rendered size of each record ``i0…i1-1`` of ``g``."""
    lay = g.layout
    if not jsonl:
        return np.maximum(lay.value_length[i0:i1], 0) + 1
    lead = jsonl_lead(topic, partition)
    runs = list(block_runs(g, i0, i1))
    # With the compiled counter, only uniform blocks are worth the plain-text check (strided, cheap); records between
    # them would be gathered in Python to be checked, which costs more than counting them in C.
    checked = not cext.USE_CEXT or all(run is not None for run, _, _, _ in runs)
    if (
        checked
        and not has_headers(g, i0, i1)
        and int(g.timestamps[i0:i1].min()) >= 0
        and all(json_plain(g, lo, hi, None if run is None else lay.run_step[run]) for run, lo, hi, _ in runs)
    ):
        # Every key and value is its bytes in quotes (or null), no header: a line's length is a sum of column lengths.
        kl, vl = lay.key_length[i0:i1], lay.value_length[i0:i1]
        fixed = len(lead) + len(JSONL_MIDDLE) + len(JSONL_TAIL)
        return (
            fixed
            + _width(g.offsets[i0:i1])
            + _width(g.timestamps[i0:i1])
            + np.where(kl < 0, 4, kl + 2)
            + np.where(vl < 0, 4, vl + 2)
        )
    if cext.USE_CEXT:
        return jsonl_sizes_compiled(g, i0, i1, lead)  # counted in C, nothing rendered
    parts: list[Part] = []
    jsonl_walked(g, i0, i1, topic, partition, parts)
    ends = np.flatnonzero(np.frombuffer(assemble(parts), dtype=np.uint8) == 0x0A)  # JSON lines hold no raw newline
    return np.diff(ends, prepend=-1)


def _width(values: IntArray) -> IntArray:
    """Decimal digits of each non-negative value."""
    return np.maximum(np.searchsorted(POW10, values, side="right"), 1)
