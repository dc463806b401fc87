"""Rendering stored batches read from a segment's ``.log``: one batch, the batches of one buffer, a span of the file.

The views under ``at/``, ``hw/`` and ``committed/`` serve renderings of byte spans ``[lo, hi)`` of a ``.log`` (batch
boundaries). This module reads such a span in pieces of at most SCAN_READ_BYTES and hands each piece's batches, all
at once, straight to the core's stored-batch renderer (``core/format/renderstored.py``) or its sizer
(``core/format/storedsize.py``); ``.kafka`` renderings are the stored bytes themselves. The rendered-size index
(``mount/render/rendersize.py``, ``mount/render/segmentindex.py``) sizes chunks through :func:`batches_by_buffer` and
:func:`span_size`. Any thread (reads are ``pread``s: never on the trio thread).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator

from logfs.core.errors import StorageError
from logfs.core.format.abortedbatches import AbortedBatches
from logfs.core.format.batch import LENGTH_OFFSET, LOG_OVERHEAD, iter_batch_positions
from logfs.core.format.renderstored import render_stored
from logfs.core.format.storedsize import stored_size
from logfs.core.log.batchcheck import check_batches, check_span
from logfs.core.log.logfile import LogFile

# One pread while scanning batches to index them: large enough that syscalls vanish, small enough to bound memory.
SCAN_READ_BYTES = 1024 * 1024


class Format(enum.Enum):
    """The renderings a view can have (docs/mount.md, "Reads"); the value is the name suffix under ``at/`` and
    ``follow/``."""

    PLAIN = ""  # values one per line
    JSONL = ".jsonl"  # JSON lines
    KAFKA = ".kafka"  # the stored RecordBatch bytes, whole batches (the first may hold records before start)


def render_batch(
    buf: bytes, at: int, fmt: Format, topic: str, partition: int, from_offset: int | None, until_offset: int | None
) -> bytes | memoryview:
    """The rendering of the records of the batch at ``buf[at:]`` with offsets in ``[from_offset, until_offset)``
    (None: unbounded on that side). Control batches render as nothing. Not for KAFKA."""
    return render_stored(buf, [at], fmt is Format.JSONL, topic, partition, from_offset, until_offset)


def iter_stored_batches(log_file: LogFile, lo: int, hi: int) -> Iterator[tuple[bytes, int, int, int]]:
    """``(buffer, at, size, position)`` of each batch in ``[lo, hi)`` of a ``.log`` (both batch boundaries), read in
    pieces of SCAN_READ_BYTES (or one whole batch when it is larger). StorageError if the bytes are not there;
    CorruptStoredBatch for a batch that fails its CRC or framing (issue 16: ``core/log/batchcheck.py``)."""
    position = lo
    min_base: int | None = None  # above the last offset of the batches already yielded (the check's carry)
    while position < hi:
        buf = log_file.read(position, min(SCAN_READ_BYTES, hi - position))
        last = check_batches(log_file, buf, position, hi, min_base)  # never render bad bytes
        if last is not None:
            min_base = last + 1
        used = 0
        for at, size in iter_batch_positions(buf):
            yield buf, at, size, position + at
            used = at + size
        if used == 0:
            declared = int.from_bytes(buf[LENGTH_OFFSET:LOG_OVERHEAD], "big", signed=True) + LOG_OVERHEAD
            if len(buf) < LOG_OVERHEAD or declared <= len(buf) or position + declared > hi:
                raise StorageError(
                    f"{log_file.path}: no whole batch at byte {position} before byte {hi} (truncated under a view?)"
                )
            buf = log_file.read(position, declared)
            if len(buf) != declared:
                raise StorageError(f"{log_file.path}: batch at byte {position} is cut short (truncated under a view?)")
            min_base = check_span(log_file, buf, position, min_base) + 1
            yield buf, 0, declared, position
            used = declared
        position += used


def render_span(
    log_file: LogFile,
    lo: int,
    hi: int,
    fmt: Format,
    topic: str,
    partition: int,
    from_offset: int | None = None,
    until_offset: int | None = None,
    aborted: AbortedBatches | None = None,
) -> bytes | memoryview:
    """The rendering of the batches in ``[lo, hi)`` of a ``.log``, each cut to ``[from_offset, until_offset)``; the
    batches ``aborted`` covers render as nothing (not for KAFKA: its committed views leave out byte spans)."""
    if fmt is Format.KAFKA:
        data = log_file.read(lo, hi - lo)
        if len(data) != hi - lo:
            raise StorageError(f"{log_file.path}: {hi - lo} bytes at {lo} are not there (truncated under a view?)")
        check_span(log_file, data, lo)  # a client must not receive bytes we know are bad
        return data
    jsonl = fmt is Format.JSONL
    parts = [
        render_stored(buf, positions, jsonl, topic, partition, from_offset, until_offset, aborted)
        for buf, _, positions in batches_by_buffer(log_file, lo, hi)
    ]
    return parts[0] if len(parts) == 1 else b"".join(parts)


def batches_by_buffer(log_file: LogFile, lo: int, hi: int) -> Iterator[tuple[bytes, int, list[int]]]:
    """The batches of ``[lo, hi)`` as ``(buffer, its position in the file, batch positions in it)``, one triple per
    read (see iter_stored_batches)."""
    current: bytes | None = None
    base = 0
    positions: list[int] = []
    for buf, at, _, position in iter_stored_batches(log_file, lo, hi):
        if buf is not current:
            if current is not None:
                yield current, base, positions
            current, base, positions = buf, position - at, []
        positions.append(at)
    if current is not None:
        yield current, base, positions


def span_size(
    log_file: LogFile,
    lo: int,
    hi: int,
    fmt: Format,
    topic: str,
    partition: int,
    from_offset: int | None = None,
    until_offset: int | None = None,
    aborted: AbortedBatches | None = None,
) -> int:
    """``len(render_span(...))``, without joining bytes where the format allows."""
    if fmt is Format.KAFKA:
        return hi - lo
    jsonl = fmt is Format.JSONL
    return sum(
        stored_size(buf, positions, jsonl, topic, partition, from_offset, until_offset, aborted)
        for buf, _, positions in batches_by_buffer(log_file, lo, hi)
    )
