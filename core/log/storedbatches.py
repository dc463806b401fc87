"""One segment's stored batches as readers above the log see them: checked, framed, and with a generation.

Why. Everything that serves records (the mount's ``at/``, ``hw/``, ``committed/`` and ``follow/`` views) needs the
same few things of a segment's ``.log``: the batches of a byte span, each one framing- and CRC-checked before a byte
of it is rendered (issue 16, ``core/log/batchcheck.py``); the stored bytes of a span for ``.kafka`` (checked the
same way, at any byte the kernel asks for); and a way to tell that bytes it indexed earlier may have changed. Those
rules belong to the log, once: a :class:`StoredBatches` is the only door a reader outside ``core/log`` has to a
segment's bytes (``core/log/rangeread.py`` hands them out, with the range's bounds worked out). The reader keeps
rendering, sizes and caches; it never frames a batch or reads a file by position itself.

The generation. Bytes below a segment's published size never change while its file lives, except by a truncation
(a follower's truncation to its leader's epoch end offset, ``LogFile.truncate_to``); the cleaner and recovery
replace segments with new objects. :attr:`StoredBatches.generation` counts the truncations, so a cache keyed by the
segment (the mount's rendered-size index, :class:`~logfs.core.log.leftout.LeftOutBatches`) knows its entries are
stale by comparing one integer, without reading a header back.

One per segment (``LogSegment.stored``): its identity is the segment's, so caches may key on it. Any thread; the
methods do blocking ``pread``s (never on the trio thread).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from logfs.core.errors import CorruptRecord, CorruptStoredBatch, StorageError
from logfs.core.format.framewalk import Frame, FrameWalk, by_read
from logfs.core.log.batchcheck import check_batches, check_span, read_checked
from logfs.core.log.leftout import LeftOutBatches
from logfs.core.log.logfile import BatchPosition

if TYPE_CHECKING:
    from logfs.core.format.abortedbatches import AbortedBatches
    from logfs.core.log.segment import LogSegment

_serials = itertools.count(1)

# One pread while walking a span's batches: large enough that syscalls vanish, small enough to bound memory.
SCAN_READ_BYTES = 1024 * 1024


class StoredBatches:
    """The checked batches of one segment's ``.log`` (see the module docstring). Any thread."""

    __slots__ = ("_left_out", "_segment", "serial")

    def __init__(self, segment: LogSegment) -> None:
        self._segment = segment
        self._left_out: LeftOutBatches | None = None
        self.serial = next(_serials)  # names these bytes in a reader's cache: never reused, unlike an id()

    def __repr__(self) -> str:
        return f"StoredBatches({self._segment.base_offset}, {str(self._segment.log_path)!r})"

    @property
    def base_offset(self) -> int:
        return self._segment.base_offset

    @property
    def path(self) -> Path:
        """The ``.log`` file, for messages."""
        return self._segment.log_path

    @property
    def size_bytes(self) -> int:
        """The published size: whole batches, and only growing except by a truncation (:attr:`generation`)."""
        return self._segment.size_bytes

    @property
    def generation(self) -> int:
        """How many times bytes below the published size were cut away: a change means positions and renderings
        known before it may be stale."""
        return self._segment.log_file.generation

    @property
    def max_timestamp(self) -> int:
        """The newest record timestamp in the segment (-1 when its records carry none): an ``hw/`` file's mtime."""
        return self._segment.max_timestamp_so_far

    def batches(self, lo: int, hi: int) -> Iterator[Frame[bytes]]:
        """``(buffer, at, size, position, base offset)`` of each batch in ``[lo, hi)`` (both batch boundaries): the
        framing walk (``core/format/framewalk.py``) in pieces of SCAN_READ_BYTES (or one whole batch when it is
        larger), each piece checked before a batch of it is yielded. StorageError when the bytes are not there (a
        truncation under a reader); CorruptStoredBatch for a batch that fails its CRC or framing."""
        log_file = self._segment.log_file
        min_base: int | None = None  # above the last offset of the batches already yielded (the check's carry)

        def check(buf: bytes, position: int) -> None:  # never hand out bad bytes
            nonlocal min_base
            last = check_batches(log_file, buf, position, hi, min_base)
            if last is not None:
                min_base = last + 1

        walk = FrameWalk(log_file.read, lo, hi, first_read=SCAN_READ_BYTES, on_read=check)
        yield from walk
        if walk.end != hi:
            raise StorageError(
                f"{log_file.path}: no whole batch at byte {walk.end} before byte {hi} (truncated under a read?)"
            )

    def buffers(self, lo: int, hi: int) -> Iterator[tuple[bytes, int, list[int], list[int]]]:
        """The batches of ``[lo, hi)`` grouped by the read that holds them: ``(buffer, its position in the file,
        batch positions in it, batch sizes)``, so a renderer walks all of one read's batches in one call (see
        :meth:`batches`)."""
        return by_read(self.batches(lo, hi))

    def span(self, lo: int, hi: int) -> bytes:
        """The stored bytes of ``[lo, hi)``, whole batches, every one checked. StorageError when they are not all
        there."""
        log_file = self._segment.log_file
        data = log_file.read(lo, hi - lo)
        if len(data) != hi - lo:
            raise StorageError(f"{log_file.path}: {hi - lo} bytes at {lo} are not there (truncated under a read?)")
        check_span(log_file, data, lo)  # a client must not receive bytes we know are bad
        return data

    def read(self, lo: int, hi: int, at: int, size: int) -> bytes:
        """``size`` bytes from byte ``at`` of ``[lo, hi)`` (a span of whole batches), at any byte, once the batches
        they touch passed their check (``batchcheck.read_checked``: a ``.kafka`` read as the kernel asks for it).
        StorageError when they are not all there."""
        want = min(at + size, hi) - at
        data = read_checked(self._segment, lo, hi, at, size)
        if len(data) != max(want, 0):
            raise StorageError(f"{self._segment.log_path}: {want} bytes at {at} are not there")
        return data

    def headers(self, lo: int, hi: int) -> Iterator[BatchPosition]:
        """The batch headers of ``[lo, hi)``, framed but not checked (a fetch walks them to its byte budget, then
        reads the span it keeps with :meth:`read_into`, which checks). Stops before a batch that does not fit before
        ``hi``; a declared size below Kafka's minimum is the damaged stored batch it is (CorruptStoredBatch)."""
        self._segment.touch()  # the store's LRU of open descriptors
        log_file = self._segment.log_file
        try:
            yield from log_file.batches(lo, hi)
        except CorruptRecord as exc:
            at = exc.position if exc.position is not None else lo
            raise log_file.failure_channel.corrupt_batch(log_file.path, at, f"{exc.reason} (framing)") from exc

    def corrupt(self, position: int, reason: str) -> CorruptStoredBatch:
        """The error of damaged stored bytes at ``position`` found by a reader's own walk, counted and logged by the
        store's failure channel as the checks' own are (EIO through the mount)."""
        log_file = self._segment.log_file
        return log_file.failure_channel.corrupt_batch(log_file.path, position, reason)

    def read_into(self, lo: int, into: memoryview) -> None:
        """The stored bytes from ``lo`` into ``into`` (whole batches), every one checked. StorageError when they are
        not all there."""
        log_file = self._segment.log_file
        log_file.read_into(lo, into)
        check_span(log_file, into, lo)  # no bad bytes to a follower (issue 16)

    def position_of(self, offset: int) -> int | None:
        """The position of the first batch whose last offset is at or after ``offset`` (the offset index, then a
        short walk of headers); None when the segment has none."""
        found = self._segment.translate_offset(offset)
        return None if found is None else found.position

    def kept_spans(self, lo: int, hi: int, aborted: AbortedBatches, until: int) -> list[tuple[int, int]]:
        """The byte spans of ``[lo, hi)`` holding the batches a read_committed reader sees (control batches and those
        of ``aborted`` transactions cut out): see ``core/log/leftout.py``. ``until``: every batch in the span is
        below it, and ``aborted`` holds the aborted transactions below it."""
        left_out = self._left_out
        if left_out is None:
            left_out = self._left_out = LeftOutBatches(self)
        return left_out.kept(lo, hi, aborted, until)
