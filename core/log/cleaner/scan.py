"""The records of many batches of one chunk at once, for the log cleaner's per-record rules (issue 18's benchmark).

Why: the cleaner looks at every record twice (the offset map, then the recopy) but wants little of each: its offset,
its key, whether its value is null, and, for a batch it rewrites, where the record's bytes lie. Walking batch by
batch and record by record in Python cost ~2.5 µs a 1 KiB record (profiled: the per-batch walk calls, the column
lists, a loop of dict operations), and held the GIL for the whole chunk, which the appends of other partitions wait
for. Here the uncompressed batches of a chunk are walked in **one** call of the compiled walker
(``walk_sections`` of ``logfs.core.cext``, which checks what the reference walker checks and releases the GIL), the
offsets come from numpy, and what is left per record in Python is one key slice and one dict operation, in
comprehensions.

Without the compiled walker (``LOGFS_NO_CEXT=1``, or no compiler at install time) each batch is walked by the
reference (``decode.record_columns``) and the record boundaries are found by chaining the records' length varints:
slower, the same columns. A batch the compiled walker rejects is walked again by the reference, which raises its
precise error. Compressed batches are not walked here (their records lie in an inflated copy): the cleaner treats
them batch by batch as before.

Threads: any; nothing shared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from logfs.core.cext import CEXT, USE_CEXT
from logfs.core.errors import InvalidRecord
from logfs.core.format.batch import RECORDS_OFFSET, BatchHeader
from logfs.core.format.compression import Compression
from logfs.core.format.decode import record_columns
from logfs.core.format.recordruns import RECORD_BODY_MIN_BYTES
from logfs.core.format.varint import VARINT_MAX_BYTES, decode_varint
from logfs.core.log.cleaner.offsetmap import SHORT_KEY_BYTES, key_id

Int64s = npt.NDArray[np.int64]


@dataclass(slots=True)
class ChunkRecords:
    """The records of the walked batches, one row a record in batch order; positions index ``data``."""

    data: bytes
    first: dict[int, int]  # a walked batch's position in data → the row of its first record
    offset: Int64s  # absolute offsets
    timestamp_delta: Int64s
    key_position: Int64s
    key_length: Int64s  # -1: null key
    value_length: Int64s  # -1: null value (a tombstone)
    start: Int64s | None  # where each record's bytes begin (its length varint); None from the reference walk

    def __len__(self) -> int:
        return len(self.offset)

    def key_ids(self, rows: Int64s) -> list[bytes]:
        """The keys of ``rows`` (all with a key) as the offset map knows them (``offsetmap.key_id``, inlined: a
        short key is its own id, so a chunk of short keys is only sliced)."""
        data = self.data
        lengths = self.key_length[rows].tolist()
        positions = self.key_position[rows].tolist()
        if max(lengths, default=0) <= SHORT_KEY_BYTES:
            return [data[p : p + n] for p, n in zip(positions, lengths, strict=True)]
        return [key_id(data[p : p + n]) for p, n in zip(positions, lengths, strict=True)]

    def spans(self, position: int, header: BatchHeader) -> tuple[list[int], list[int]]:
        """Start and end in ``data`` of each record of the walked batch at ``position``."""
        row = self.first[position]
        count = header.records_count
        end = position + header.size
        if self.start is not None:
            starts = self.start[row : row + count].tolist()
            return starts, [*starts[1:], end]
        starts, ends = [], []
        p = position + RECORDS_OFFSET
        for _ in range(count):
            length, body = decode_varint(self.data, p, VARINT_MAX_BYTES)
            starts.append(p)
            p = body + length
            ends.append(p)
        return starts, ends


def walkable(header: BatchHeader) -> bool:
    """A batch whose records this module walks: uncompressed data with records."""
    return not header.is_control and header.records_count > 0 and header.compression == Compression.NONE


def walk_batches(data: bytes, batches: Sequence[tuple[int, BatchHeader]]) -> ChunkRecords:
    """Every record of ``batches`` (``(position, header)``, each :func:`walkable` and whole in ``data``), checked as
    a reader checks them: InvalidRecord or CorruptRecord for a damaged batch."""
    counts = np.fromiter((h.records_count for _, h in batches), dtype=np.int64, count=len(batches))
    firsts = np.cumsum(counts) - counts
    first = dict(zip((p for p, _ in batches), firsts.tolist(), strict=True))
    bases = np.repeat(np.fromiter((h.base_offset for _, h in batches), np.int64, len(batches)), counts)
    columns = _walk_c(data, batches, int(counts.sum())) if USE_CEXT else None
    if columns is not None:
        return ChunkRecords(data, first, bases + columns[1], columns[0], columns[2], columns[3], columns[5],
                            columns[8])  # fmt: skip
    ts: list[int] = []
    od: list[int] = []
    kp: list[int] = []
    kl: list[int] = []
    vl: list[int] = []
    for position, _ in batches:
        _, cols = record_columns(data, position)
        cols = cols.lists()
        assert cols.data is data  # uncompressed records are walked where they lie
        ts += cols.timestamp_delta
        od += cols.offset_delta
        kp += cols.key_position
        kl += cols.key_length
        vl += cols.value_length
    a = np.array
    return ChunkRecords(data, first, bases + a(od, np.int64), a(ts, np.int64), a(kp, np.int64), a(kl, np.int64),
                        a(vl, np.int64), None)  # fmt: skip


def _walk_c(data: bytes, batches: Sequence[tuple[int, BatchHeader]], total: int) -> Int64s | None:
    """The nine columns of ``_helpers.walk_sections`` (its opening comment), or None for the reference to judge: a
    count no batch of its size can hold (so no huge allocation for a damaged header), or any fault."""
    assert CEXT is not None
    sections = []
    for position, header in batches:
        start, end = position + RECORDS_OFFSET, position + header.size
        if header.records_count > (end - start) // (1 + RECORD_BODY_MIN_BYTES) or end > len(data):
            return None
        sections.append((start, end, header.records_count, header.last_offset_delta))
    out = np.empty((9, total), dtype=np.int64)
    try:
        CEXT.walk_sections(data, np.array(sections, dtype=np.int64), out)
    except InvalidRecord:
        return None
    return out
