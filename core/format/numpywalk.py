"""The vectorised walkers: every field of many records decoded at once with numpy gathers.

A records section can only be chained in order (each record starts where the previous one's length ends:
``core/format/recordruns.py`` does that, a run of equal-size records in one step); once every record's start is
known, each field of all records is one numpy gather. Two walkers use that:

* :func:`walk_numpy`, one batch: the fast path of ``records.walk`` for large batches (validation and columns).
  On the development machine it walks 100-byte records of one size at ~14 M records/s, of varied sizes at ~3 M,
  where the reference loop (``records.walk_python``) does ~1.2 M.
* :func:`walk_stored`, several stored batches of one buffer together (the stored-batch renderers'), so a span of
  small batches costs one set of numpy calls rather than one per batch.

Both return None for anything they leave to the reference walker (headers, varints wider than they read, any
fault): the reference then gives the same columns or the precise error, so the walkers always agree (a hypothesis
test holds them to it). Any thread.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from logfs.core.cext import CEXT
from logfs.core.errors import InvalidRecord
from logfs.core.format.columns import IntArray, RecordColumns, owning
from logfs.core.format.recordruns import RECORD_BODY_MIN_BYTES, RecordRun, WalkBuffer, chain_records, record_runs
from logfs.core.format.varint import VARINT_MAX_BYTES, VARLONG_MAX_BYTES


def walk_numpy(
    data: WalkBuffer, start: int, end: int, count: int, last_offset_delta: int, *, client: bool, columns: bool = True
) -> tuple[int, RecordColumns | None] | None:
    """The fast walker. Returns None when the batch holds something it leaves to the reference (headers, or any
    fault: the reference then produces the precise error), so both walkers always agree."""
    if count == 0:
        return None  # nothing to vectorise; the reference answers (an empty section, or trailing bytes)
    # 1. Chain the records: the only sequential dependency (see chain_records). It checks every length on the way.
    chained = chain_records(data, start, end, count)
    if chained is None:
        return None
    buf = np.frombuffer(data, dtype=np.uint8, count=end)
    s = np.frombuffer(chained[0], dtype=np.int64)
    body = np.frombuffer(chained[1], dtype=np.int64)
    ends = np.empty_like(s)
    ends[:-1] = s[1:]
    ends[-1] = end
    # 2. Decode every field of every record at once.
    p = body + 1  # skip attributes
    ts_delta, p = decode_varints(buf, p, VARLONG_MAX_BYTES)
    if ts_delta is None:
        return None
    if client:
        # A producer's offset deltas are 0, 1, 2 …: compare their bytes with that sequence's varints, not decode them.
        p_next = _expect_sequence(buf, p, count)
        if p_next is None:
            return None
        p = p_next
        od: IntArray = np.arange(count, dtype=np.int64)
    else:
        od_read, p = decode_varints(buf, p, VARINT_MAX_BYTES)
        if od_read is None:
            return None
        od = od_read
        if count and (od[0] < 0 or od[-1] > last_offset_delta or (count > 1 and bool((np.diff(od) <= 0).any()))):
            return None
    key_value = decode_keys_and_values(buf, p, ends)
    if key_value is None:
        return None
    max_ts = int(ts_delta.max()) if count else 0
    if not columns:
        return max_ts, None
    return max_ts, RecordColumns(owning(data), ts_delta, od, *key_value, [None] * count)


def decode_keys_and_values(
    buf: npt.NDArray[np.uint8], p: IntArray, ends: IntArray
) -> tuple[IntArray, IntArray, IntArray, IntArray] | None:
    """The rest of each record from ``p`` (just after its offset delta) to ``ends``: key and value positions and
    lengths, then a zero header count as the record's last byte. None for anything else (headers, a fault): the
    reference walker judges those."""
    key_len, p = decode_varints(buf, p, VARINT_MAX_BYTES)
    if key_len is None or bool((key_len < -1).any()):
        return None
    key_pos = p
    p = p + np.maximum(key_len, 0)
    if bool((p >= ends).any()):
        return None
    value_len, p = decode_varints(buf, p, VARINT_MAX_BYTES)
    if value_len is None or bool((value_len < -1).any()):
        return None
    value_pos = p
    p = p + np.maximum(value_len, 0)
    # Exactly one byte must remain, a zero header count.
    if not np.array_equal(p + 1, ends) or bool(buf[p].any()):
        return None
    return key_pos, key_len, value_pos, value_len


@functools.lru_cache(maxsize=16)
def _sequence_varints(count: int) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8], int, int]:
    """The zigzag varints of 0, 1 … count-1: first bytes, second bytes, and where the two- and three-byte ones begin
    (2k takes one byte below k = 64, two below 8192, three below 2**20)."""
    k = np.arange(count, dtype=np.int64) * 2
    first = np.where(k < 0x80, k, (k & 0x7F) | 0x80).astype(np.uint8)
    second = np.where(k < 0x4000, (k >> 7) & 0x7F, ((k >> 7) & 0x7F) | 0x80).astype(np.uint8)
    return first, second, min(count, 64), min(count, 8192)


def _expect_sequence(buf: npt.NDArray[np.uint8], p: IntArray, count: int) -> IntArray | None:
    """Positions after the varints at ``p`` if they are exactly 0, 1 … count-1 (a producer's offset deltas), else
    None (the reference walker then names the fault). Counts of 8192 and more are decoded instead."""
    if count > 8192:
        od, after = decode_varints(buf, p, VARINT_MAX_BYTES)
        if od is None or not np.array_equal(od, np.arange(count, dtype=np.int64)):
            return None
        return after
    first, second, two_from, _ = _sequence_varints(count)
    if not np.array_equal(np.take(buf, p, mode="clip"), first):
        return None
    if two_from < count and not np.array_equal(np.take(buf, p[two_from:] + 1, mode="clip"), second[two_from:]):
        return None
    after = p + 1
    after[two_from:] += 1
    return after


def decode_varints(buf: npt.NDArray[np.uint8], p: IntArray, max_bytes: int) -> tuple[IntArray | None, IntArray]:
    """Decode one zigzag varint at each position ``p``; None for anything the reference must judge.

    The widest legal varints (5 bytes for int32, 10 for int64) carry range and overflow rules, so they go to the
    reference too; they do not occur in batches a producer writes for offsets, lengths and timestamp deltas
    under ~2**28 / ~2**63.
    """
    b = np.take(buf, p, mode="clip")
    more = b >= 0x80
    if not more.any():  # the common case: every value below 64 in magnitude
        v = b.astype(np.int64)
        return (v >> 1) ^ -(v & 1), p + 1
    if more.all():  # the next most common: every value takes two bytes (lengths of 64 B to 8 KiB)
        b1 = np.take(buf, p + 1, mode="clip")
        if not (b1 >= 0x80).any():
            v = (b & 0x7F).astype(np.int64) | (b1.astype(np.int64) << 7)
            return (v >> 1) ^ -(v & 1), p + 2
    value = (b & 0x7F).astype(np.int64)
    size = np.ones_like(p)
    for k in range(1, max_bytes - 1):
        bk = np.take(buf, p + k, mode="clip").astype(np.int64)
        value |= np.where(more, (bk & 0x7F) << (7 * k), 0)
        size += more
        more &= bk >= 0x80
        if not more.any():
            return (value >> 1) ^ -(value & 1), p + size
    return None, p





class StoredLayout(NamedTuple):
    """Where the records of several stored batches lie in one buffer (from :func:`walk_stored`), concatenated batch
    after batch: every column is a numpy array indexed by record. The records also form *runs*, each inside one
    batch: run ``r`` holds records ``run_first[r]`` to ``run_first[r + 1] - 1`` of batch ``run_batch[r]``, each of
    them ``run_step[r]`` bytes long (their starts step evenly), or of varying sizes when ``run_step[r]`` is 0."""

    starts: IntArray
    timestamp_delta: IntArray
    offset_delta: IntArray
    key_position: IntArray
    key_length: IntArray
    value_position: IntArray
    value_length: IntArray
    run_first: list[int]
    run_step: list[int]
    run_batch: list[int]
    # From the compiled walker only (walk_stored_c), which takes records with headers: where each record's headers
    # begin (after their count) and how many it has. None from walk_stored (no record there has a header).
    header_position: IntArray | None = None
    header_count: IntArray | None = None


def walk_stored(data: bytes, sections: Sequence[tuple[int, int, int, int]]) -> StoredLayout | None:
    """The records of several stored batches in ``data`` walked at once, for reading: ``sections`` gives each
    batch's ``(start, end, count, last_offset_delta)`` (its records section, ``count >= 1``). The checks are
    :func:`walk_numpy`'s with the stored-batch rule for offset deltas, vectorised over all the batches together,
    so a span of small batches costs one set of numpy calls rather than one per batch.

    Returns None when any batch holds something left to the reference walker (headers, a varint wider than the fast
    path reads, any fault): the caller then walks the batches one by one with ``records.walk``, which gives the same
    columns or the precise error. Any thread.
    """
    n = len(sections)
    if n == 0:
        return None
    counts = [c for _, _, c, _ in sections]
    total = sum(counts)
    # 1. The record starts, as runs of records of one size (recordruns.record_runs, which checks every length prefix
    #    and counts a run of equal prefixes at C speed). Records of one size (or of a few sizes in long runs: the
    #    offset delta's varint grows at record 64) cost next to nothing. A batch whose sizes vary is chained record
    #    by record instead and kept as one run of step 0 ("not of one size"). The chain ends exactly where each
    #    section ends, or the span goes to the reference.
    run_first: list[int] = []
    run_start: list[int] = []
    run_step: list[int] = []
    run_width: list[int] = []
    run_batch: list[int] = []
    chained: dict[int, list[int]] = {}  # batch → the starts of its records, for batches of varying sizes
    index = 0
    for j, (start, end, count, _) in enumerate(sections):
        if count < 1 or count > (end - start) // (1 + RECORD_BODY_MIN_BYTES):
            return None
        runs = record_runs(data, start, end, count, max_runs=max(4, count // 32))
        if runs is None:
            return None
        if not runs:  # sizes vary: chain this batch record by record, one run of step 0
            chained_batch = chain_records(data, start, end, count)
            if chained_batch is None:
                return None
            chained[j] = chained_batch[0].tolist()
            runs = [RecordRun(start, 0, 0, count)]
        for run in runs:
            run_first.append(index)
            run_start.append(run.start)
            run_step.append(run.step)
            run_width.append(run.head)
            run_batch.append(j)
            index += run.records
    run_first.append(total)
    counts_a = np.array(counts, dtype=np.int64)
    first = np.cumsum(counts_a) - counts_a  # each batch's first record
    last = first + counts_a - 1
    batch_end = max(e for _, e, _, _ in sections)
    buf = np.frombuffer(data, dtype=np.uint8, count=batch_end)
    if not chained:
        bounds = np.array(run_first, dtype=np.int64)
        run_len = bounds[1:] - bounds[:-1]
        within = np.arange(total, dtype=np.int64) - np.repeat(bounds[:-1], run_len)
        steps = np.repeat(np.array(run_step, dtype=np.int64), run_len)
        s = np.repeat(np.array(run_start, dtype=np.int64), run_len) + within * steps
        ends = s + steps
        body = s + np.repeat(np.array(run_width, dtype=np.int64), run_len)
    else:
        every: list[int] = []
        for r, step in enumerate(run_step):
            if step:
                every.extend(range(run_start[r], run_start[r] + step * (run_first[r + 1] - run_first[r]), step))
            else:
                every.extend(chained[run_batch[r]])
        s = np.array(every, dtype=np.int64)
        body = s + 1 + (buf[s] >= 0x80)
        ends = np.empty_like(s)
        ends[:-1] = s[1:]
        ends[last] = np.array([e for _, e, _, _ in sections], dtype=np.int64)
    # 3. Every field of every record at once.
    p = body + 1
    ts_delta, p = decode_varints(buf, p, VARLONG_MAX_BYTES)
    if ts_delta is None:
        return None
    od, p = decode_varints(buf, p, VARINT_MAX_BYTES)
    if od is None:
        return None
    lod = np.array([d for _, _, _, d in sections], dtype=np.int64)
    if bool((od[first] < 0).any()) or bool((od > np.repeat(lod, counts_a)).any()):
        return None
    if total > 1:
        rising = np.diff(od) > 0
        rising[last[:-1]] = True  # a batch's first delta is not compared with the previous batch's last
        if not bool(rising.all()):
            return None
    key_value = decode_keys_and_values(buf, p, ends)
    if key_value is None:
        return None  # a header count other than zero (or a fault): the reference renders headers
    key_pos, key_len, value_pos, value_len = key_value
    return StoredLayout(s, ts_delta, od, key_pos, key_len, value_pos, value_len, run_first, run_step, run_batch)


def walk_stored_c(data: bytes, sections: Sequence[tuple[int, int, int, int]], min_run: int) -> StoredLayout | None:
    """:func:`walk_stored` by the compiled walker (``core/cext/recordwalk.c``, which ``logfs.core.cext`` loads): every
    record walked in C with the reference's checks (headers included: their places are in the layout), then the
    runs found with numpy. Runs of at least ``min_run`` records of one size keep their step; shorter ones are merged
    into runs of step 0 (varying sizes), so that a batch of varied records is one run, as in :func:`walk_stored`.

    None for anything the reference must judge (any fault: the caller then walks batch by batch with
    ``records.walk``, which names it). ~10 ns a record for the walk, where :func:`walk_stored` chains varied records
    in Python at ~150 ns. Any thread.
    """
    assert CEXT is not None
    n = len(sections)
    if n == 0:
        return None
    for start, end, count, _ in sections:
        if count < 1 or count > (end - start) // (1 + RECORD_BODY_MIN_BYTES) or end > len(data):
            return None
    counts = np.array([c for _, _, c, _ in sections], dtype=np.int64)
    total = int(counts.sum())
    out = np.empty((9, total), dtype=np.int64)
    try:
        CEXT.walk_sections(data, np.array(sections, dtype=np.int64), out)
    except InvalidRecord:
        return None
    starts = out[8]
    first = np.cumsum(counts) - counts
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:]
    ends[first[1:] - 1] = [e for _, e, _, _ in sections[:-1]]
    ends[-1] = sections[-1][1]
    size = ends - starts
    batch_first = np.zeros(total, dtype=np.bool_)
    batch_first[first] = True
    new_run = batch_first.copy()
    new_run[1:] |= size[1:] != size[:-1]
    rf = np.flatnonzero(new_run)
    long = np.diff(rf, append=total) >= min_run
    keep = long.copy()
    keep[1:] |= long[:-1]  # a run after a long one starts anew
    keep |= batch_first[rf]
    run_first = rf[keep]
    run_step = np.where(long[keep], size[run_first], 0)
    run_batch = np.searchsorted(first, run_first, side="right") - 1
    return StoredLayout(
        starts,
        out[0],
        out[1],
        out[2],
        out[3],
        out[4],
        out[5],
        [*run_first.tolist(), total],
        run_step.tolist(),
        run_batch.tolist(),
        out[6],
        out[7],
    )
