"""The one walk of a stored ``.log``'s batch framing: where each batch starts and how long it is.

Why one. Every reader of a segment file needs the same loop: read a piece, cut the whole batches out of it with the
framing rule (:func:`~logfs.core.format.batch.batch_size_at`: more than 17 bytes, a declared length of at least
14, all of it before the end), read a batch larger than the piece whole, and stop at a torn tail. Recovery
validates each batch it frames, the cleaner copies them, the mount's views render them (``core/log/storedbatches.py``),
a fetch and the offset lookup read only their headers (``core/log/logfile.py``), ``logfs dump`` prints them. Written
once here, the rule and its edge cases (a batch larger than a read, a header cut by the end, a file truncated under
the walk) cannot drift apart between them, as they did when each had its own loop.

What a caller gets: a :data:`Frame` per batch (the read that holds it, where in that read, its size, its position
in the file, its base offset), in order. Once the walk is done, :attr:`FrameWalk.end` is where the last whole batch
ended, :attr:`FrameWalk.torn` says it stopped before its end (the bytes there end inside a batch), and
:attr:`FrameWalk.overrun` that a batch declares more bytes than are left before the end (damage to a reader of
whole published batches, where a short read is a file cut under the walk). A declared length below the minimum is
damage, not a torn tail: CorruptRecord, with the position in the file. Checking what the bytes say (CRC, offsets)
is the caller's: recovery's ``validate_batch``, the readers' ``core/log/batchcheck.py`` (which the ``on_read`` hook
runs on each read before any batch of it is handed out).

Two modes. ``whole=True`` hands out batches whose bytes are all in the frame's ``data``. ``whole=False`` needs only the
header (61 bytes, or the whole batch when it is smaller): a walk of headers skips over large batches without reading
them.

A pure function of a ``read(position, size)`` callable (a ``.log`` file's pread, an mmap's slice): no file, thread
or lock of its own.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Generic, TypeVar

from logfs.core.errors import CorruptRecord
from logfs.core.format.batch import (
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    MIN_DECLARED_BATCH_BYTES,
    RECORD_BATCH_OVERHEAD,
)

Buffer = TypeVar("Buffer", bytes, memoryview)  # what the walk's read returns: a file's bytes, or an mmap's slices

_OFFSET_AND_LENGTH = struct.Struct(">qi")


# One batch: ``(data, at, size, position, base_offset)``: ``data[at : at + size]`` (``whole``), or at least its
# header (``whole=False``), is the batch that starts at byte ``position`` of the file, with ``base_offset`` read from
# its first field (the walk unpacks it with the length anyway). A plain tuple, not a NamedTuple: measured on an offset
# lookup (``LogFile.search_for_offset``) walking 40 small batches, a NamedTuple per batch made it 2.4x slower than the
# loop of its own it had before; the tuple with the base offset costs 1.4x (~6 us a lookup, against the 30-50 us of
# the FUSE request that asks for it).
Frame = tuple[Buffer, int, int, int, int]


class FrameWalk(Generic[Buffer]):
    """One walk of the batches of ``[start, end)`` (see the module docstring). Iterate it once.

    ``first_read`` bytes are read first and the reads double up to ``max_read`` (a walk that stops early, such as an
    offset lookup, reads little); ``on_read(data, position)`` sees every read before any batch in it is handed out.
    """

    __slots__ = ("_end", "_first", "_max", "_on_read", "_read", "_start", "_whole", "end", "overrun", "torn")

    def __init__(
        self,
        read: Callable[[int, int], Buffer],
        start: int,
        end: int,
        *,
        whole: bool = True,
        first_read: int,
        max_read: int | None = None,
        on_read: Callable[[Buffer, int], None] | None = None,
    ) -> None:
        self._read: Callable[[int, int], Buffer] = read
        self._start = start
        self._end = end
        self._whole = whole
        self._first = max(first_read, RECORD_BATCH_OVERHEAD)  # a read holds a header: a short one is a file's end
        self._max = self._first if max_read is None else max(max_read, self._first)
        self._on_read: Callable[[Buffer, int], None] | None = on_read
        self.end = start  # where the last batch handed out ends
        self.torn = False  # the walk stopped before its end inside a batch (or a short read)
        self.overrun = False  # ... because a batch declares more bytes than are left before the end

    def __iter__(self) -> Iterator[Frame[Buffer]]:
        read, end, whole, on_read = self._read, self._end, self._whole, self._on_read
        unpack = _OFFSET_AND_LENGTH.unpack_from
        header = RECORD_BATCH_OVERHEAD
        position = self._start
        want = self._first
        while position + HEADER_SIZE_UP_TO_MAGIC < end:
            asked = min(want, end - position)
            data = read(position, asked)
            want = min(2 * want, self._max)
            if on_read is not None:
                on_read(data, position)
            n = len(data)
            at = 0
            while n - at > HEADER_SIZE_UP_TO_MAGIC:
                base, length = unpack(data, at)
                if length < MIN_DECLARED_BATCH_BYTES:
                    self.end = position + at
                    raise CorruptRecord(
                        f"declared batch length {length} is below the minimum of {MIN_DECLARED_BATCH_BYTES}",
                        position=position + at,
                    )
                size = length + LOG_OVERHEAD
                if position + at + size > end:
                    self.end = position + at
                    self.torn = self.overrun = True
                    return
                if at + (size if whole or size < header else header) > n:
                    break
                yield (data, at, size, position + at, base)
                at += size
                self.end = position + at
            if at > n:  # the next batch starts past this read: its header first, not a large read into its body
                want = self._first
            if at == 0:
                # Not one batch in this read: either it is larger than the read (read it whole, or read on from
                # its header), or the read came back short (the file ends here: a torn tail, or a truncation).
                if n <= HEADER_SIZE_UP_TO_MAGIC or n < asked:
                    self.torn = True
                    return
                base, length = unpack(data, 0)  # checked above: at least the minimum, within end
                size = length + LOG_OVERHEAD
                need = size if whole else min(size, RECORD_BATCH_OVERHEAD)
                data = read(position, need)
                if len(data) < need:
                    self.torn = True
                    return
                if on_read is not None:
                    on_read(data, position)
                yield (data, 0, size, position, base)
                at = size
                self.end = position + at
            position += at
        self.torn = position < end


def by_read(frames: Iterable[Frame[Buffer]]) -> Iterator[tuple[Buffer, int, list[int], list[int]]]:
    """The frames grouped by the read that holds them: ``(data, the file position of data[0], where each batch starts
    in data, each batch's size)``, so a caller that works a read at a time (a renderer's one call per read, the
    cleaner's copy) gets all of one read's batches at once."""
    current: Buffer | None = None
    base = 0
    ats: list[int] = []
    sizes: list[int] = []
    for data, at, size, position, _ in frames:
        if data is not current:
            if current is not None:
                yield current, base, ats, sizes
            current, base, ats, sizes = data, position - at, [], []
        ats.append(at)
        sizes.append(size)
    if current is not None:
        yield current, base, ats, sizes
