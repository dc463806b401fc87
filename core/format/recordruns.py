"""Runs of records of one size: chaining a records section by its length prefixes, and validating a run by columns.

A records section can only be walked in order: each record's start is the previous one's start plus its length.
Producers mostly write records of one size (fixed schemas, generated keys, benchmarks), and a run of equal-size
records has its starts at a fixed stride. Two uses follow:

* :func:`record_runs` / :func:`chain_records`: the chain itself, every length prefix checked, with a run taken in
  one C-speed step (the vectorised walker and the stored-batch renderer start from it).
* :func:`check_run`: a run whose records share one *layout* (the same field widths, key and value lengths and
  header count) is checked column by column: the bytes at one position of every record, gathered by one strided
  slice, are compared at C speed with what the first record has there (or, for offset deltas, with a producer's
  0, 1, 2 …). A walk of a 1,000-record batch becomes ~20 slice-and-compare steps instead of a loop or ~40 numpy
  calls. The first record is parsed by the reference walker (``core/format/records.py``), which gives the template.
"""

from __future__ import annotations

import functools
from array import array
from typing import NamedTuple, TypeAlias

import numpy as np

# What the walkers read: a memoryview too, so that a batch that arrived inside a larger buffer (the mount's write
# requests) is validated where it lies.
WalkBuffer: TypeAlias = bytes | bytearray | memoryview

# The smallest record body: attributes + five one-byte varints (timestamp, offset, key, value, header count).
RECORD_BODY_MIN_BYTES = 6

# The widest timestamp delta a run may carry: 9 bytes hold 63 bits, so no value can overflow; the 10-byte varlongs
# carry range rules the reference walker applies.
RUN_TIMESTAMP_MAX_BYTES = 9


class RecordRun(NamedTuple):
    """Consecutive records of one size: where the first starts, the size of each, its length prefix's bytes."""

    start: int
    step: int
    head: int
    records: int


def record_runs(
    data: WalkBuffer, start: int, end: int, count: int, max_runs: int | None = None
) -> list[RecordRun] | None:
    """The ``count`` records from ``start``, as maximal runs of records of one size, following their length prefixes.

    None unless the chain ends exactly at ``end`` and every length is one the fast walkers take: non-negative, at
    least the minimum body, in one or two bytes (records up to 8 KiB; longer ones go to the reference walker). An
    empty list when the records make more than ``max_runs`` runs (sizes vary: the caller treats them one by one).

    A plain loop costs ~150 ns a record. Producers often write records of one size (fixed schemas, benchmarks), so
    once two records in a row have the same size the loop guesses that the following ones do too and checks the guess
    for all of them at C speed: a strided slice gathers the first (and second) byte at every guessed start, and
    ``lstrip`` counts how many equal the prefix. A start is taken only when its prefix bytes equal the previous
    record's, which makes it that record's true successor with the same (checked) length: the chain is the loop's,
    guessed or not.
    """
    found = _runs(data, start, end, count, max_runs)
    return None if found is None else [RecordRun(*run) for run in zip(*found, strict=True)]


def _runs(
    data: WalkBuffer, start: int, end: int, count: int, max_runs: int | None
) -> tuple[list[int], list[int], list[int], list[int]] | None:
    """:func:`record_runs` as four parallel lists (starts, steps, heads, record counts): no object per record, which
    keeps records of varied sizes (a run each) at the plain loop's cost."""
    starts: list[int] = []
    steps: list[int] = []
    heads: list[int] = []
    counts: list[int] = []
    run_step = run_head = -1
    pos = start
    n = 0
    try:
        while n < count:
            b = data[pos]
            if b < 0x80:
                head, raw = 1, b
            else:
                c = data[pos + 1]
                if c >= 0x80:
                    return None
                head, raw = 2, (b & 0x7F) | (c << 7)
            if raw & 1 or (raw >> 1) < RECORD_BODY_MIN_BYTES:
                return None
            step = head + (raw >> 1)
            if step != run_step or head != run_head:  # (a padded prefix: the same size with another head)
                if max_runs is not None and len(starts) >= max_runs:
                    return [], [], [], []
                starts.append(pos)
                steps.append(step)
                heads.append(head)
                counts.append(1)
                run_step, run_head = step, head
                pos += step
                n += 1
                continue
            # Two records of one size: take every following start whose prefix bytes repeat this one's.
            limit = min(end, pos + step * (count - n))
            gathered = gather(data, pos, limit, step)
            run = len(gathered) - len(gathered.lstrip(gathered[:1]))
            if head == 2:
                gathered = gather(data, pos + 1, limit + 1, step)
                run = min(run, len(gathered) - len(gathered.lstrip(gathered[:1])))
            counts[-1] += run
            pos += step * run
            n += run
    except IndexError:
        return None
    return (starts, steps, heads, counts) if pos == end else None


def chain_records(data: WalkBuffer, start: int, end: int, count: int) -> tuple[array[int], array[int]] | None:
    """Where each of ``count`` records starts, and where its body starts (after the length prefix): the runs of
    :func:`record_runs` laid out record by record; None where it gives None."""
    found = _runs(data, start, end, count, None)
    if found is None:
        return None
    run_starts, steps, heads, counts = found
    if len(run_starts) == count:  # every record a run of its own (sizes vary)
        return array("q", run_starts), array("q", [s + h for s, h in zip(run_starts, heads, strict=True)])
    starts = array("q")
    bodies = array("q")
    for first, step, head, records in zip(run_starts, steps, heads, counts, strict=True):
        if records < 8:  # short runs: cheaper one by one than through numpy
            for k in range(records):
                starts.append(first + k * step)
                bodies.append(first + k * step + head)
        else:
            at = np.arange(first, first + step * records, step, dtype=np.int64)
            starts.frombytes(at.tobytes())
            bodies.frombytes((at + head).tobytes())
    return starts, bodies


def gather(data: WalkBuffer, start: int, stop: int, step: int) -> bytes | bytearray:
    """``data[start:stop:step]`` as bytes. A strided memoryview copies byte by byte (~5 µs for 1,000 bytes); numpy's
    strided copy takes ~1 µs, and slicing bytes or a bytearray ~0.6 µs."""
    if isinstance(data, memoryview):
        return np.frombuffer(data, dtype=np.uint8)[start:stop:step].tobytes()
    return data[start:stop:step]


class RunLayout(NamedTuple):
    """Where the fields of the first record of a run lie, relative to its start (from the reference walker)."""

    timestamp_at: int
    timestamp_bytes: int
    offset_delta_at: int
    offset_delta_bytes: int
    fixed: tuple[tuple[int, int], ...]  # (position, bytes): key length, value length, header count


_HIGH_BIT_CLEAR = bytes(range(0x80))


def check_run(data: WalkBuffer, run: RecordRun, first_index: int, layout: RunLayout, first_ts_delta: int) -> int | None:
    """The largest timestamp delta of the run's records if every one of them has the first record's layout and a
    producer's offset delta (its index in the batch); None otherwise (the other walkers then judge, and name the
    fault).

    Checked column by column, with the first record's values and widths as the template: the key length, value
    length and header count bytes equal the first record's; the timestamp delta has the same width (continuation
    bits set on all bytes but the last); the offset delta bytes are those of ``first_index``, ``first_index + 1`` …
    in the same width. With the length prefixes (checked by the chain) this fixes where every field of every record
    lies, so each record parses as the first does.
    """
    start, step, _, n = run
    if layout.timestamp_bytes > RUN_TIMESTAMP_MAX_BYTES:
        return None
    if n == 1:
        return first_ts_delta
    span = step * (n - 1) + 1

    def column(at: int) -> bytes | bytearray:
        return gather(data, start + at, start + at + span, step)

    for at, width in layout.fixed:
        for k in range(at, at + width):
            col = column(k)
            if col.count(col[0]) != n:
                return None
    expected = _offset_delta_columns(first_index + n)
    if layout.offset_delta_bytes > len(expected) or _varint_bytes(2 * first_index) != layout.offset_delta_bytes:
        return None
    if _varint_bytes(2 * (first_index + n - 1)) != layout.offset_delta_bytes:
        return None  # the width changes inside the run: the record sizes would too, so this is not one layout
    for k in range(layout.offset_delta_bytes):
        if column(layout.offset_delta_at + k) != expected[k][first_index:]:
            return None
    ts_columns = [column(layout.timestamp_at + k) for k in range(layout.timestamp_bytes)]
    last = ts_columns[-1]
    if not last.isascii():
        return None
    if any(len(col.translate(None, _HIGH_BIT_CLEAR)) != n for col in ts_columns[:-1]):
        return None
    if all(col.count(col[0]) == n for col in ts_columns):
        return first_ts_delta  # one timestamp delta for the whole run (a producer's batch often has one)
    value = np.zeros(n, dtype=np.int64)
    for k, col in enumerate(ts_columns):
        value |= (np.frombuffer(col, dtype=np.uint8).astype(np.int64) & 0x7F) << (7 * k)
    return int(((value >> 1) ^ -(value & 1)).max())


def _varint_bytes(value: int) -> int:
    """The bytes of ``value`` (already zigzagged, non-negative) as a varint."""
    return max(1, (value.bit_length() + 6) // 7)


@functools.lru_cache(maxsize=16)
def _offset_delta_columns(count: int) -> tuple[bytes, bytes, bytes]:
    """Byte k (0-2) of the zigzag varints of 0, 1 … count-1 (only meaningful where the varint is that wide)."""
    z = np.arange(count, dtype=np.int64) * 2
    b0 = np.where(z < 0x80, z, (z & 0x7F) | 0x80)
    b1 = np.where(z < 0x4000, (z >> 7) & 0x7F, ((z >> 7) & 0x7F) | 0x80)
    b2 = (z >> 14) & 0x7F
    return tuple(b.astype(np.uint8).tobytes() for b in (b0, b1, b2))  # type: ignore[return-value]
