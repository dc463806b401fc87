"""Rendering a segment's stored batches: one batch, or a span of batch boundaries ``[lo, hi)`` of its ``.log``.

The views under ``at/``, ``hw/`` and ``committed/`` serve renderings of byte spans of a segment. The batches come
from the core, checked (``core/log/storedbatches.py``: read in pieces, each piece's framing and CRCs checked), and each
piece's batches go, all at once, straight to the core's stored-batch renderer (``core/format/renderstored.py``) or its
sizer (``core/format/storedsize.py``); ``.kafka`` renderings are the stored bytes themselves. The rendered-size index
(``mount/render/rendersize.py``, ``mount/render/segmentindex.py``) sizes chunks through :func:`span_size`. Any thread
(the core's reads are ``pread``s: never on the trio thread).
"""

from __future__ import annotations

import enum

from logfs.core.format.abortedbatches import AbortedBatches
from logfs.core.format.renderstored import render_stored
from logfs.core.format.storedsize import stored_size
from logfs.core.log.storedbatches import StoredBatches


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


def render_span(
    stored: StoredBatches,
    lo: int,
    hi: int,
    fmt: Format,
    topic: str,
    partition: int,
    from_offset: int | None = None,
    until_offset: int | None = None,
    aborted: AbortedBatches | None = None,
) -> bytes | memoryview:
    """The rendering of the batches in ``[lo, hi)`` of a segment, each cut to ``[from_offset, until_offset)``; the
    batches ``aborted`` covers render as nothing (not for KAFKA: its committed views leave out byte spans)."""
    if fmt is Format.KAFKA:
        return stored.span(lo, hi)
    jsonl = fmt is Format.JSONL
    parts = [
        render_stored(buf, positions, jsonl, topic, partition, from_offset, until_offset, aborted)
        for buf, _, positions, _ in stored.buffers(lo, hi)
    ]
    return parts[0] if len(parts) == 1 else b"".join(parts)


def span_size(
    stored: StoredBatches,
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
        for buf, _, positions, _ in stored.buffers(lo, hi)
    )
