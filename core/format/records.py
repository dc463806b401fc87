"""Walking the records section of a RecordBatch v2: validation and column extraction in one pass.

Record v2 layout (Kafka's ``DefaultRecord``; every integer a zigzag varint except ``attributes``)::

    length          varint    bytes after this field
    attributes      int8      unused, written as 0
    timestampDelta  varlong   relative to the batch's baseTimestamp
    offsetDelta     varint    relative to the batch's baseOffset
    keyLength       varint    -1 = null key
    key             bytes
    valueLength     varint    -1 = null value
    value           bytes
    headersCount    varint    >= 0
    headers         headerKeyLength varint (>= 0), headerKey utf-8, headerValueLength varint (-1 = null), value

A walk checks what Kafka's validator checks on the way (``DefaultRecord.readFrom``): every varint well formed
and within its width, no negative length other than -1 for a null key or value, every record consuming exactly its
declared length, exactly ``count`` records and no byte after them, and the offset deltas: ``0, 1, 2 …`` for a batch
from a client, strictly increasing and at most ``lastOffsetDelta`` for a batch already in a log (compaction leaves
gaps). It returns the positions of every key and value (``core/format/columns.py``), so decoding, rendering and
Arrow conversion read the buffer without walking it again.

:func:`walk` picks :func:`walk_c`, the compiled walker (``core/cext/recordwalk.c``: this module's reference loop in C,
~10 ns a record), when ``logfs.core.cext`` selects it (built, and ``LOGFS_NO_CEXT`` not set: ``cext.USE_CEXT``);
otherwise one of three pure-Python walkers. All give the same answer on every input (hypothesis tests hold them to
it: tests/core/format/test_walk_cext.py for the compiled one):

* :func:`walk_python`, the reference: one loop over the bytes, used for small batches and records with headers.
* :func:`walk_runs`, for a producer's batch made of a few runs of records of one layout: each run's first record is
  walked by the reference, the rest checked column by column (``core/format/recordruns.py``).
* ``numpywalk.walk_numpy``, the fast path for large batches: only the record lengths are chained in Python (each
  record's start depends on the previous length; a run of equal-size records is chained in one step); every other
  field of all records is decoded at once with numpy gathers. On the development machine this walks 100-byte
  records of one size at ~14 M records/s, of varied sizes at ~3 M, where the reference loop does ~1.2 M.
"""

from __future__ import annotations

import numpy as np

from logfs.core import cext
from logfs.core.errors import InvalidRecord
from logfs.core.format.columns import RecordColumns, owning
from logfs.core.format.numpywalk import walk_numpy
from logfs.core.format.recordruns import (
    RECORD_BODY_MIN_BYTES,
    RecordRun,
    RunLayout,
    WalkBuffer,
    check_run,
    record_runs,
)
from logfs.core.format.varint import INT32_MAX, INT64_MAX, INT64_MIN, VARINT_MAX_BYTES, VARLONG_MAX_BYTES

# Below this many records the fixed cost of the numpy calls (~40 of them, ~100-150 µs in all) exceeds the loop's
# (~1.2 µs a record for 100-byte values): measured crossover ~120 records.
NUMPY_WALK_MIN_RECORDS = 128

# From this many records a producer's batch is first offered to the run walker (walk_runs: ~15 µs fixed, then
# ~1-2 µs per run whatever its length), where the loop costs ~1.2 µs a record.
RUN_WALK_MIN_RECORDS = 24

# A batch of more runs than this is one of varied sizes: the run walker leaves it to the others.
RUN_WALK_MAX_RUNS = 8

# Up to this many records the compiled walker hands back plain lists (what small batches are read through, record
# by record); above, one int64 buffer that numpy views as six columns (~30 ns a record saved).
CEXT_LISTS_MAX_RECORDS = 32


def walk(
    data: WalkBuffer, start: int, end: int, count: int, last_offset_delta: int, *, client: bool, columns: bool = True
) -> tuple[int, RecordColumns | None]:
    """Validate ``count`` records in ``data[start:end]``; return the largest timestamp delta and, if asked, the
    columns (positions are into ``data``, so an uncompressed batch is walked where it lies, without a copy).

    ``client`` selects the offset-delta rule (sequential from 0 for a producer's batch, increasing for a stored
    one). Raises :class:`InvalidRecord` naming the record and the fault. Any thread may call it.
    """
    if cext.USE_CEXT and 0 <= start <= end <= len(data):  # (read at each call: tests switch it)
        return walk_c(data, start, end, count, last_offset_delta, client=client, columns=columns)
    # A count the bytes cannot hold (each record takes at least 7) goes to the reference walker, which fails at
    # the first missing record instead of sizing arrays from a hostile header.
    plausible = count <= (end - start) // (1 + RECORD_BODY_MIN_BYTES)
    if client and not columns and plausible and count >= RUN_WALK_MIN_RECORDS:
        max_ts_delta = walk_runs(data, start, end, count)
        if max_ts_delta is not None:
            return max_ts_delta, None
    if count >= NUMPY_WALK_MIN_RECORDS and plausible:
        result = walk_numpy(data, start, end, count, last_offset_delta, client=client, columns=columns)
        if result is not None:
            return result
    return walk_python(data, start, end, count, last_offset_delta, client=client, columns=columns)


def walk_c(
    data: WalkBuffer, start: int, end: int, count: int, last_offset_delta: int, *, client: bool, columns: bool = True
) -> tuple[int, RecordColumns | None]:
    """The compiled walker (``core/cext/recordwalk.c``): :func:`walk_python`'s loop in C, with its checks, values and
    error messages (tests/core/format/test_walk_cext.py holds them equal). ~10 ns a record where the reference
    takes ~1-3 µs. Needs the extension built (``cext.CEXT``) and ``0 <= start <= end <= len(data)``."""
    assert cext.CEXT is not None
    found = cext.CEXT.walk(data, start, end, count, last_offset_delta, client, columns, count <= CEXT_LISTS_MAX_RECORDS)
    if not columns:
        return found[0], None
    if len(found) == 3:
        max_ts_delta, raw, headers = found
        c = np.frombuffer(raw, dtype=np.int64).reshape(6, -1)
        return max_ts_delta, RecordColumns(owning(data), c[0], c[1], c[2], c[3], c[4], c[5], headers)
    return found[0], RecordColumns(owning(data), *found[1:])


def _fault(index: int, what: str) -> InvalidRecord:
    return InvalidRecord(f"record {index}: {what}")


def walk_python(
    data: WalkBuffer, start: int, end: int, count: int, last_offset_delta: int, *, client: bool, columns: bool = True
) -> tuple[int, RecordColumns | None]:
    """The reference walker: a plain loop over the bytes (see the module docstring for the rules)."""
    pos = start
    max_ts_delta = INT64_MIN
    prev_od = -1
    tsd: list[int] = []
    ods: list[int] = []
    kps: list[int] = []
    kls: list[int] = []
    vps: list[int] = []
    vls: list[int] = []
    hds: list[list[tuple[str, bytes | None]] | None] = []
    rv = _read_varint
    for i in range(count):
        if pos >= end:
            raise _fault(i, f"missing: the records section ends after {i} of {count} records")
        # Each varint takes the one-byte path inline (no call: ~3x faster on small records); anything longer, or
        # at the end of the record, goes through _read_varint, which enforces widths and bounds.
        b = data[pos]
        if b < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif pos + 1 < end and (c := data[pos + 1]) < 0x80:  # two bytes: records of 64 B to 8 KiB
            v = (b & 0x7F) | (c << 7)
            length, pos = (v >> 1) ^ -(v & 1), pos + 2
        else:
            length, pos = rv(data, pos, end, VARINT_MAX_BYTES, i, "length")
        if length < RECORD_BODY_MIN_BYTES:
            raise _fault(i, f"declared length {length} is below the minimum of {RECORD_BODY_MIN_BYTES}")
        rec_end = pos + length
        if rec_end > end:
            raise _fault(i, f"declared length {length} runs {rec_end - end} bytes past the records section")
        p = pos + 1  # attributes: unused, any value accepted (Kafka ignores them)
        b = data[p]  # p < rec_end: the body is at least 6 bytes
        if b < 0x80:
            ts_delta, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            ts_delta, p = rv(data, p, rec_end, VARLONG_MAX_BYTES, i, "timestampDelta")
        b = data[p] if p < rec_end else 0x80
        if b < 0x80:
            od, p = (b >> 1) ^ -(b & 1), p + 1
        elif p + 1 < rec_end and (c := data[p + 1]) < 0x80:  # two bytes: records 64 to 8191 of a batch
            v = (b & 0x7F) | (c << 7)
            od, p = (v >> 1) ^ -(v & 1), p + 2
        else:
            od, p = rv(data, p, rec_end, VARINT_MAX_BYTES, i, "offsetDelta")
        if client:
            if od != i:
                raise _fault(i, f"offsetDelta {od}, expected {i} (a producer's batch numbers its records 0, 1, 2 …)")
        elif od <= prev_od or od > last_offset_delta:
            raise _fault(i, f"offsetDelta {od} is not in ({prev_od}, {last_offset_delta}]")
        prev_od = od
        b = data[p] if p < rec_end else 0x80
        if b < 0x80:
            key_len, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            key_len, p = rv(data, p, rec_end, VARINT_MAX_BYTES, i, "keyLength")
        if key_len < -1:
            raise _fault(i, f"negative key length {key_len}")
        key_pos = p
        if key_len > 0:
            p += key_len
            if p > rec_end:
                raise _fault(i, f"key of {key_len} bytes runs past the record's declared length {length}")
        b = data[p] if p < rec_end else 0x80
        if b < 0x80:
            value_len, p = (b >> 1) ^ -(b & 1), p + 1
        elif p + 1 < rec_end and (c := data[p + 1]) < 0x80:  # two bytes: values of 64 B to 4 KiB
            v = (b & 0x7F) | (c << 7)
            value_len, p = (v >> 1) ^ -(v & 1), p + 2
        else:
            value_len, p = rv(data, p, rec_end, VARINT_MAX_BYTES, i, "valueLength")
        if value_len < -1:
            raise _fault(i, f"negative value length {value_len}")
        value_pos = p
        if value_len > 0:
            p += value_len
            if p > rec_end:
                raise _fault(i, f"value of {value_len} bytes runs past the record's declared length {length}")
        b = data[p] if p < rec_end else 0x80
        if b < 0x80:
            n_headers, p = (b >> 1) ^ -(b & 1), p + 1
        else:
            n_headers, p = rv(data, p, rec_end, VARINT_MAX_BYTES, i, "headersCount")
        if n_headers < 0:
            raise _fault(i, f"negative header count {n_headers}")
        headers: list[tuple[str, bytes | None]] | None = None
        if n_headers:
            headers, p = _read_headers(data, p, rec_end, n_headers, i)
        if p != rec_end:
            raise _fault(i, f"declared length {length} but the fields take {p - pos} bytes")
        if ts_delta > max_ts_delta:
            max_ts_delta = ts_delta
        if columns:
            tsd.append(ts_delta)
            ods.append(od)
            kps.append(key_pos)
            kls.append(key_len)
            vps.append(value_pos)
            vls.append(value_len)
            hds.append(headers)
        pos = rec_end
    if pos != end:
        raise InvalidRecord(f"{end - pos} trailing bytes after the {count} records the batch declares")
    cols = RecordColumns(owning(data), tsd, ods, kps, kls, vps, vls, hds) if columns else None
    return (max_ts_delta if count else 0), cols


def _read_varint(data: WalkBuffer, pos: int, limit: int, max_bytes: int, index: int, field: str) -> tuple[int, int]:
    """One varint of record ``index`` that must end at or before ``limit``; Kafka's widths enforced."""
    b = data[pos] if pos < limit else -1
    if 0 <= b < 0x80:  # the one-byte case is by far the most common
        return (b >> 1) ^ -(b & 1), pos + 1
    if b > 0 and pos + 2 < limit and (c := data[pos + 1]) >= 0x80 and (d := data[pos + 2]) < 0x80:
        # three bytes, the lengths of records and values of 8 KiB to 1 MiB (a loop here cost ~1 µs a field)
        value = (b & 0x7F) | ((c & 0x7F) << 7) | (d << 14)
        return (value >> 1) ^ -(value & 1), pos + 3
    value = 0
    shift = 0
    for k in range(max_bytes):
        if pos + k >= limit:
            raise _fault(index, f"{field} runs past the record's declared length")
        b = data[pos + k]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            value = (value >> 1) ^ -(value & 1)
            if max_bytes == VARINT_MAX_BYTES and not -(2**31) <= value <= INT32_MAX:
                raise _fault(index, f"{field} {value} does not fit an int32 varint")
            if not INT64_MIN <= value <= INT64_MAX:
                raise _fault(index, f"{field} does not fit an int64 varlong")
            return value, pos + k + 1
        shift += 7
    raise _fault(index, f"{field} varint is longer than {max_bytes} bytes")


def _read_headers(
    data: WalkBuffer, p: int, rec_end: int, n_headers: int, index: int
) -> tuple[list[tuple[str, bytes | None]], int]:
    headers: list[tuple[str, bytes | None]] = []
    for h in range(n_headers):
        if p >= rec_end:
            raise _fault(index, f"header {h} of {n_headers} runs past the record's declared length")
        hk_len, p = _read_varint(data, p, rec_end, VARINT_MAX_BYTES, index, "headerKeyLength")
        if hk_len < 0:
            raise _fault(index, f"header {h}: negative key length {hk_len}")
        if p + hk_len > rec_end:
            raise _fault(index, f"header {h}: key of {hk_len} bytes runs past the record's declared length")
        hkey = bytes(data[p : p + hk_len]).decode("utf-8", "replace")
        p += hk_len
        hv_len, p = _read_varint(data, p, rec_end, VARINT_MAX_BYTES, index, "headerValueLength")
        if hv_len < -1:
            raise _fault(index, f"header {h}: negative value length {hv_len}")
        hval: bytes | None = None
        if hv_len >= 0:
            if p + hv_len > rec_end:
                raise _fault(index, f"header {h}: value of {hv_len} bytes runs past the record's declared length")
            hval = bytes(data[p : p + hv_len])
            p += hv_len
        headers.append((hkey, hval))
    return headers, p


# --- the run walker -------------------------------------------------------------------------------------------------


def walk_runs(data: WalkBuffer, start: int, end: int, count: int) -> int | None:
    """Validate a producer's records section made of a few runs of records of one layout; return the largest
    timestamp delta, or None for anything else (the other walkers then judge it and name any fault).

    Each run's first record is walked by the reference; the rest of the run is checked against it column by column
    (``core/format/recordruns.py``). A 1,000-record batch of 100-byte values takes ~25 µs where the vectorised walker
    takes ~120 µs.
    """
    runs = record_runs(data, start, end, count, max_runs=RUN_WALK_MAX_RUNS)
    if not runs:
        return None
    max_ts_delta = INT64_MIN
    index = 0
    for run in runs:
        found = _run_layout(data, run, index)
        if found is None:
            return None
        layout, first_ts_delta = found
        run_max = check_run(data, run, index, layout, first_ts_delta)
        if run_max is None:
            return None
        max_ts_delta = max(max_ts_delta, run_max)
        index += run.records
    return max_ts_delta


def _run_layout(data: WalkBuffer, run: RecordRun, index: int) -> tuple[RunLayout, int] | None:
    """The first record of a run walked by the reference (as record ``index`` of a producer's batch): where its
    fields lie, and its timestamp delta. None if it is not a valid record without headers."""
    end = run.start + run.step
    try:
        ts_delta, cols = walk_python(data, run.start, end, 1, INT32_MAX, client=False)
    except InvalidRecord:
        return None
    assert cols is not None
    if cols.headers[0] is not None or cols.offset_delta[0] != index:
        return None
    ts_at = run.head + 1  # after the length prefix and the attributes byte
    ts_bytes = _varint_width(data, run.start + ts_at)
    od_at = ts_at + ts_bytes
    od_bytes = _varint_width(data, run.start + od_at)
    key_at = int(cols.key_position[0]) - run.start
    value_len_at = key_at + max(int(cols.key_length[0]), 0)
    value_at = int(cols.value_position[0]) - run.start
    count_at = value_at + max(int(cols.value_length[0]), 0)
    key_len_at = od_at + od_bytes
    fixed = (
        (key_len_at, key_at - key_len_at),
        (value_len_at, value_at - value_len_at),
        (count_at, run.step - count_at),
    )
    return RunLayout(ts_at, ts_bytes, od_at, od_bytes, fixed), ts_delta


def _varint_width(data: WalkBuffer, position: int) -> int:
    width = 1
    while data[position + width - 1] >= 0x80:
        width += 1
    return width
