"""Kafka's offset index (``.index``) and time index (``.timeindex``): sparse, preallocated, memory-mapped files.

An index maps the offsets of one log segment to byte positions in its ``.log`` (offset index), or timestamps to
offsets (time index). It may be sparse: the segment adds an entry only after ``index.interval.bytes`` (4096) of log
since the last one, so a lookup returns the largest entry at or below the target and the reader scans forward in the
``.log`` from there. Entry layout, byte for byte Kafka's (big-endian, no header, no padding, no checksum)::

    .index       relative offset  int32 (4 bytes)   position        int32 (4 bytes)   8 bytes per entry
    .timeindex   timestamp        int64 (8 bytes)   relative offset int32 (4 bytes)  12 bytes per entry

The offset stored is relative to the segment's base offset, which lets 4 bytes hold it: in the segment with base
offset 50, offset 55 at position 4096 is the entry ``00 00 00 05 00 00 10 00``, and a time index entry for timestamp
1700000000000 at offset 55 is ``00 00 01 8b cf e5 68 00 00 00 00 05``. Every method here takes and returns absolute
offsets; relative ones never leave this module, and an offset whose relative value falls outside [0, 2**31 - 1] is
refused (OffsetOverflow), which is why the log rolls a new segment before that can happen.

What an entry means (Kafka's ``OffsetIndex`` and ``TimeIndex``): an offset index entry (O, P) says that the append whose
*last* offset is O starts at byte P of the ``.log``. A time index entry (T, O) says that T is the largest timestamp seen
up to offset O, so every record with a timestamp above T comes after O. Offsets strictly increase in the offset index
and never decrease in the time index, whose timestamps strictly increase; it keeps one slot in reserve for the entry
written when the segment rolls or closes.

Preallocation. A new file is created at ``max_index_bytes`` rounded down to whole entries (``segment.index.bytes``,
10 MiB: 1,310,720 offset entries or 873,813 time entries), zero-filled and sparse, so appends never grow the file.
An existing file is taken as it stands: every whole entry in it counts (Kafka cannot tell trailing zeros from
entries either). That is why a segment trims its indexes to their entries when it rolls or closes
(:meth:`AbstractIndex.trim_to_valid_size`) and why the loader gives the active segment's indexes their maximum size
back: it reserves it (:meth:`AbstractIndex.reserve`), and their next entry grows the file, so that a clean remount
of 10,000 partitions truncates no file and closing a partition that took no entry trims none.

No checksum. The bytes are not protected: after an unclean shutdown the loader rebuilds every index at or above
the recovery point from the ``.log``, and :meth:`AbstractIndex.sanity_check` catches the damage a clean-looking file
can still show (a length that is not whole entries, a last offset below the base, time running backwards).

Lazy files and bounded descriptors. A store may hold 10,000 segments, so an index costs nothing until it is used:
the constructor touches no file, reads never create one (an absent file reads as empty), and the file is created,
preallocated, by the first write (append, flush, resize). An index holds one descriptor while it is mapped (Python's
mmap keeps a duplicate) and maps on demand; :meth:`AbstractIndex.close_handler` gives the mapping back while keeping
the index usable, so a log can bound its open segments, and :meth:`AbstractIndex.close` also trims the file first,
as Kafka's does. This takes the place of Kafka's LazyIndex wrapper: the index itself is lazy.

Threads. One writer thread (the log's) calls every method that changes an index: appends, truncations, resizes,
renames, close. Any thread may look up, read entries and counts, flush, or call close_handler at the same time; a
per-index lock makes each call atomic against the others, including the unmap and remap of a resize or close. A
check-then-act across calls (``is_full`` then ``append``) is only meaningful on the writer thread.

Known limitations: the file is sparse, as Kafka's is, so on a full disk a write through the mapping faults (SIGBUS,
which ends the process) instead of failing with DiskFull; failed file operations raise StorageError, never DiskFull.
A read-only index refuses every change rather than trimming its file on close as Kafka's does.
"""

from __future__ import annotations

import mmap
from collections.abc import Sequence

from logfs.core.errors import CorruptIndex, InvalidOffset, OffsetOverflow, TimestampOutOfOrder
from logfs.core.format.varint import INT32_MAX, INT64_MAX, INT64_MIN
from logfs.core.log.indexentry import (
    _KEY,
    _OFFSET_ENTRY,
    _TIME_ENTRY,
    _VALUE,
    NO_TIMESTAMP,
    OFFSET_INDEX_ENTRY_BYTES,
    SEGMENT_INDEX_BYTES_DEFAULT,
    TIME_INDEX_ENTRY_BYTES,
    WARM_SECTION_BYTES,
    OffsetPosition,
    TimestampOffset,
)
from logfs.core.log.indexfile import AbstractIndex

__all__ = [
    "NO_TIMESTAMP",
    "OFFSET_INDEX_ENTRY_BYTES",
    "SEGMENT_INDEX_BYTES_DEFAULT",
    "TIME_INDEX_ENTRY_BYTES",
    "WARM_SECTION_BYTES",
    "AbstractIndex",
    "OffsetIndex",
    "OffsetPosition",
    "TimeIndex",
    "TimestampOffset",
]


class OffsetIndex(AbstractIndex[OffsetPosition]):
    """The ``.index`` of a segment: the last offset of an append, and the byte in the ``.log`` where it starts."""

    ENTRY_BYTES = OFFSET_INDEX_ENTRY_BYTES
    _ENTRY = _OFFSET_ENTRY
    _OFFSET_FIELD = _KEY
    _warm_entries = WARM_SECTION_BYTES // OFFSET_INDEX_ENTRY_BYTES

    _last_offset: int  # the last entry's offset (the base offset without one): _refresh_last_entry keeps it

    def _parse(self, buffer: mmap.mmap, slot: int) -> OffsetPosition:
        relative, position = _OFFSET_ENTRY.unpack_from(buffer, slot * OFFSET_INDEX_ENTRY_BYTES)
        return OffsetPosition(self._base_offset + relative, position)

    def _refresh_last_entry(self) -> None:
        if self._entries:
            self._last_offset = self._parse(self._mapped(), self._entries - 1).offset
        else:
            self._last_offset = self._base_offset

    def last_offset(self) -> int:
        """The offset of the last entry, or the base offset when there is none. Any thread."""
        with self._lock:
            self._load()
            return self._last_offset

    def lookup(self, target_offset: int) -> OffsetPosition:
        """The largest entry whose offset is at or below ``target_offset``.

        An empty index, or a target below the first entry, answers (base offset, 0): the scan then starts at the
        top of the segment. Any thread.
        """
        with self._lock:
            self._load()
            if self._entries == 0:
                return OffsetPosition(self._base_offset, 0)
            buffer = self._mapped()
            slot = self._largest_lower_bound_slot(buffer, target_offset, _KEY)
            return OffsetPosition(self._base_offset, 0) if slot < 0 else self._parse(buffer, slot)

    def lookup_entry(self, target_offset: int) -> OffsetPosition | None:
        """The largest entry whose offset is at or below ``target_offset``, or None when there is none (where
        :meth:`lookup` answers the top of the segment). Any thread."""
        with self._lock:
            self._load()
            if self._entries == 0:
                return None
            buffer = self._mapped()
            slot = self._largest_lower_bound_slot(buffer, target_offset, _KEY)
            return None if slot < 0 else self._parse(buffer, slot)

    def fetch_upper_bound_offset(self, start_position: int, fetch_bytes: int) -> OffsetPosition | None:
        """The first entry at or after byte ``start_position + fetch_bytes``, or None if there is none.

        Its offset is certain to lie outside a fetch of ``fetch_bytes`` from ``start_position``, though it is not in
        general the smallest such offset: a read uses it to bound its scan. Any thread.
        """
        with self._lock:
            self._load()
            if self._entries == 0:
                return None
            buffer = self._mapped()
            slot = self._smallest_upper_bound_slot(buffer, start_position + fetch_bytes, _VALUE)
            return None if slot < 0 else self._parse(buffer, slot)

    def position_at_or_below(self, position: int) -> int:
        """The position of the last entry at or below byte ``position`` (the start of a batch), or 0 when none is:
        where a check of the batches around ``position`` can start (``core/log/batchcheck.py``). Any thread."""
        with self._lock:
            self._load()
            if self._entries == 0:
                return 0
            buffer = self._mapped()
            slot = self._largest_lower_bound_slot(buffer, position, _VALUE)
            return 0 if slot < 0 else self._parse(buffer, slot).position

    def offsets_around(self, position: int) -> tuple[int | None, int | None]:
        """What the index says of the batches from byte ``position`` (a batch boundary) on, for the read-side check
        of the header fields the CRC does not cover (``core/log/batchcheck.py``): ``(below, at)``. An entry (O, P)
        names the append whose last offset is O starting at P, one entry per append, so the batches from the last
        entry at or below ``position`` on come after the append of the entry before it: ``below`` is that entry's
        offset (their base offsets lie above it), None without one. ``at`` is the offset of an entry at exactly
        ``position`` (the first batch there ends at or before it), else None. Any thread."""
        with self._lock:
            self._load()
            if self._entries == 0:
                return None, None
            buffer = self._mapped()
            slot = self._largest_lower_bound_slot(buffer, position, _VALUE)
            if slot < 0:
                return None, None
            entry = self._parse(buffer, slot)
            below = self._parse(buffer, slot - 1).offset if slot > 0 else None
            return below, entry.offset if entry.position == position else None

    def position_at_or_above(self, position: int) -> int | None:
        """The position of the first entry at or after byte ``position`` (the start of a batch), or None. Any
        thread."""
        with self._lock:
            self._load()
            if self._entries == 0:
                return None
            buffer = self._mapped()
            slot = self._smallest_upper_bound_slot(buffer, position, _VALUE)
            return None if slot < 0 else self._parse(buffer, slot).position

    def append(self, offset: int, position: int) -> None:
        """Add the entry (offset, position). Writer thread only.

        The offset must be above the last entry's (else InvalidOffset) and within 2**31 - 1 of the base offset
        (else OffsetOverflow); a full index raises IndexFull. Each refusal names the file, the offsets and the slot.
        """
        self.append_entries(((offset, position),))

    def append_entries(self, entries: Sequence[tuple[int, int]]) -> None:
        """Add ``(offset, position)`` entries in order, written with one pwrite (a multi-batch append's). Each is
        checked as :meth:`append` checks it; a refused one raises after those before it are written. Writer only."""
        with self._lock:
            self._load()
            start = self._entries
            packed = bytearray()
            try:
                for offset, position in entries:
                    self._check_entry(offset, position)
                    packed += _OFFSET_ENTRY.pack(offset - self._base_offset, position)
                    self._entries += 1  # the next entry's checks see this one
                    self._last_offset = offset
            finally:
                self._write_packed(start, packed)

    def _check_entry(self, offset: int, position: int) -> None:
        """Refuse an entry :meth:`append` may not add at the next slot. Under the lock."""
        assert 0 <= position <= INT32_MAX, f"position {position} is not a byte of a segment"
        slot = self._entries
        self._check_writable(lambda: f"append offset {offset} at slot {slot}")
        self._check_free_slot(lambda: f"offset {offset}", reserved_slots=0)
        if slot > 0 and offset <= self._last_offset:
            raise InvalidOffset(
                f"cannot append offset {offset} at slot {slot} of {self._path}: "
                f"not above the last offset {self._last_offset}"
            )
        if not self.can_append_offset(offset):
            raise OffsetOverflow(offset, self._base_offset, f"slot {slot} of {self._path}")

    def sanity_check(self) -> None:
        """Raise CorruptIndex if the file cannot be a valid offset index; the loader then rebuilds it. Any thread."""
        with self._lock:
            self._load()
            self._check_shape(self._last_offset)


class TimeIndex(AbstractIndex[TimestampOffset]):
    """The ``.timeindex`` of a segment: the largest timestamp so far, and the offset where it was reached."""

    ENTRY_BYTES = TIME_INDEX_ENTRY_BYTES
    _ENTRY = _TIME_ENTRY
    _OFFSET_FIELD = _VALUE
    _warm_entries = WARM_SECTION_BYTES // TIME_INDEX_ENTRY_BYTES

    _last_entry: TimestampOffset  # (NO_TIMESTAMP, base offset) without one: _refresh_last_entry keeps it

    def _parse(self, buffer: mmap.mmap, slot: int) -> TimestampOffset:
        timestamp, relative = _TIME_ENTRY.unpack_from(buffer, slot * TIME_INDEX_ENTRY_BYTES)
        return TimestampOffset(timestamp, self._base_offset + relative)

    def _refresh_last_entry(self) -> None:
        if self._entries:
            self._last_entry = self._parse(self._mapped(), self._entries - 1)
        else:
            self._last_entry = TimestampOffset(NO_TIMESTAMP, self._base_offset)

    def is_full(self) -> bool:
        """True when only the reserved slot is left: it is kept for the entry written on roll and close.

        Any thread; meaningful before an append on the writer thread.
        """
        with self._lock:
            self._load()
            return self._entries >= self._capacity_bytes() // TIME_INDEX_ENTRY_BYTES - 1

    def last_entry(self) -> TimestampOffset:
        """The last entry, or (NO_TIMESTAMP, base offset) when there is none. Any thread."""
        with self._lock:
            self._load()
            return self._last_entry

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """The largest entry whose timestamp is at or below ``target_timestamp``; else (NO_TIMESTAMP, base offset).

        Any thread.
        """
        with self._lock:
            self._load()
            if self._entries == 0:
                return TimestampOffset(NO_TIMESTAMP, self._base_offset)
            buffer = self._mapped()
            slot = self._largest_lower_bound_slot(buffer, target_timestamp, _KEY)
            return TimestampOffset(NO_TIMESTAMP, self._base_offset) if slot < 0 else self._parse(buffer, slot)

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Add (timestamp, offset) if the timestamp is above the last entry's; an equal one is ignored.

        The same entry is offered again when a segment rolls or closes, and an index of records without timestamps
        (NO_TIMESTAMP) stays empty. An offset below the last entry's raises InvalidOffset, a timestamp below it
        TimestampOutOfOrder, a full index IndexFull unless ``skip_full_check`` (only the roll and close pass it,
        to use the reserved slot). Writer thread only.
        """
        self.maybe_append_entries(((timestamp, offset),), skip_full_check=skip_full_check)

    def maybe_append_entries(self, entries: Sequence[tuple[int, int]], *, skip_full_check: bool = False) -> None:
        """:meth:`maybe_append` of each ``(timestamp, offset)`` in order, the added ones written with one pwrite (a
        multi-batch append's). A refused one raises after those before it are written. Writer thread only."""
        with self._lock:
            self._load()
            start = self._entries
            packed = bytearray()
            try:
                for timestamp, offset in entries:
                    self._maybe_add(timestamp, offset, skip_full_check, packed)
            finally:
                self._write_packed(start, packed)

    def _maybe_add(self, timestamp: int, offset: int, skip_full_check: bool, packed: bytearray) -> None:
        """Check one entry against the last (written or in ``packed``) and pack it if it is added. Under the lock."""
        assert INT64_MIN <= timestamp <= INT64_MAX, f"timestamp {timestamp} does not fit an int64"
        slot = self._entries

        def what() -> str:
            return f"(timestamp {timestamp}, offset {offset})"

        self._check_writable(lambda: f"append {what()} at slot {slot}")
        if not skip_full_check:
            self._check_free_slot(what, reserved_slots=1)
        last = self._last_entry
        if slot > 0 and offset < last.offset:
            raise InvalidOffset(
                f"cannot append {what()} at slot {slot} of {self._path}: offset below the last offset {last.offset}"
            )
        if slot > 0 and timestamp < last.timestamp:
            raise TimestampOutOfOrder(
                timestamp, last.timestamp, f"the entry for offset {offset} at slot {slot} of {self._path}"
            )
        if timestamp > last.timestamp:
            # Only now does a full index matter to the roll and close: offering the last entry again is a no-op.
            self._check_free_slot(what, reserved_slots=0)
            if not self.can_append_offset(offset):
                raise OffsetOverflow(offset, self._base_offset, f"slot {slot} of {self._path}")
            packed += _TIME_ENTRY.pack(timestamp, offset - self._base_offset)
            self._entries = slot + 1  # the next entry's checks see this one
            self._last_entry = TimestampOffset(timestamp, offset)

    def sanity_check(self) -> None:
        """Raise CorruptIndex if the file cannot be a valid time index; the loader then rebuilds it. Any thread."""
        with self._lock:
            self._load()
            last = self._last_entry
            first = self._parse(self._mapped(), 0) if self._entries else last
            if last.timestamp < first.timestamp:
                raise CorruptIndex(
                    str(self._path), f"the last timestamp {last.timestamp} is below the first {first.timestamp}"
                )
            self._check_shape(last.offset)
