"""One log segment: a ``.log`` of batches and its sparse ``.index`` and ``.timeindex`` (Kafka's LogSegment).

A segment covers offsets from its *base offset* (its file name, 20 digits) up to the next segment's base. It
appends whole validated batches, indexes them sparsely (an entry after more than ``index.interval.bytes`` since the
last one: key = the append's last offset, position = where the append starts; the first append is never indexed),
and answers the three questions a log asks of it:

* ``translate_offset(o)``: which batch holds offset ``o`` (index lookup, then a forward scan of batch headers)?
* ``read(o, max_bytes, max_position)``: the bytes from that batch's first byte, as Kafka returns them (a slice that
  may end mid-batch when ``max_bytes`` cuts it; at least one whole batch with ``min_one_message``)?
* ``find_offset_by_timestamp(ts)``: the first record with a timestamp at or after ``ts``?

When it rolls is asked of :attr:`LogSegment.roll` (``core/log/roll.py``: the roll rules and the clock they count on).

Recovery (``core/log/recovery.py``) validates the ``.log``, moves damage aside and rebuilds the indexes through
:meth:`begin_recovery` and :meth:`end_recovery`; the segment itself knows nothing of producers.

Threads: one writer thread (the log's) appends, truncates, rolls, recovers, renames and closes; any thread may
read, translate, look up timestamps, flush and close_handler.

Transactions: the segment owns its ``.txnindex`` (``core/txn/index.py``) beside the two indexes: the log appends an
entry when an ABORT marker lands here (:meth:`append_aborted_txn`); it is truncated, renamed ``.deleted`` and
deleted with the segment; recovery rebuilds it by replaying the batches through a producer state.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

from logfs.core.durable import now_ms as wall_clock_ms
from logfs.core.errors import CorruptIndex, OffsetOverflow
from logfs.core.format.batch import TimestampType
from logfs.core.format.decode import decode_records
from logfs.core.format.varint import INT32_MAX
from logfs.core.log.handles import HandleCache
from logfs.core.log.index import OffsetIndex, TimeIndex, TimestampOffset
from logfs.core.log.logfile import BatchPosition, LogFile
from logfs.core.log.roll import SegmentRoll
from logfs.core.log.storedbatches import StoredBatches
from logfs.core.offsets import FetchDataInfo, LogOffsetMetadata, LogOffsetPosition
from logfs.core.txn.index import AbortedTxn, TransactionIndex

_log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
QUARANTINE_SUFFIX = ".quarantine"


# One batch of a multi-batch append (:meth:`LogSegment.append_parts`): its bytes, last offset, max timestamp and the
# offset of that timestamp.
SegmentPart = tuple[bytes | bytearray | memoryview, int, int, int]


def filename_prefix(offset: int) -> str:
    """Kafka's segment file name stem: the base offset zero-padded to 20 digits."""
    return f"{offset:020d}"


def offset_from_filename(name: str) -> int:
    """The base offset a segment file's name encodes."""
    return int(name.split(".", 1)[0])


class LogSegment:
    """One segment. See the module docstring for the rules and the thread contract."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        handles: HandleCache,
        roll_jitter_ms: int = 0,
        created_ms: int | None = None,
        log_size_bytes: int | None = None,
        file_suffix: str = "",
    ) -> None:
        """Describe a segment; opens nothing (files are created by the first write). ``file_suffix`` follows each
        file's name (the log cleaner's ``.cleaned``, renamed away by its swap). Writer thread."""
        self._dir = directory
        self._base_offset = base_offset
        self._index_interval_bytes = index_interval_bytes
        self._max_index_bytes = max_index_bytes
        self._handles = handles
        stem = directory / filename_prefix(base_offset)
        log_path = stem.with_suffix(LOG_SUFFIX + file_suffix)
        self._log = LogFile(log_path, size_bytes=log_size_bytes, on_open=self.touch)
        self._offset_index = OffsetIndex(stem.with_suffix(INDEX_SUFFIX + file_suffix), base_offset, max_index_bytes)
        self._time_index = TimeIndex(stem.with_suffix(TIME_INDEX_SUFFIX + file_suffix), base_offset, max_index_bytes)
        self._txn_index = TransactionIndex(stem.with_suffix(TXN_INDEX_SUFFIX + file_suffix), base_offset)
        self._bytes_since_last_index_entry = 0
        self._max_timestamp_and_offset: TimestampOffset | None = None  # loaded lazily from the time index
        created = created_ms if created_ms is not None else wall_clock_ms()
        # when the segment rolls: its roll rules and the clock segment.ms counts on (roll.py)
        self.roll = SegmentRoll(
            self._log,
            self._offset_index,
            self._time_index,
            base_offset,
            roll_jitter_ms=roll_jitter_ms,
            created_ms=created,
        )
        self.stored = StoredBatches(self)  # the checked batches readers above the log get (storedbatches.py)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self._base_offset}, size={self._log.size_bytes}, dir={str(self._dir)!r})"

    # --- identity and sizes -------------------------------------------------------------------------------------------

    @property
    def base_offset(self) -> int:
        return self._base_offset

    @property
    def size_bytes(self) -> int:
        return self._log.size_bytes

    @property
    def log_file(self) -> LogFile:
        return self._log

    @property
    def offset_index(self) -> OffsetIndex:
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        return self._time_index

    @property
    def txn_index(self) -> TransactionIndex:
        return self._txn_index

    @property
    def log_path(self) -> Path:
        return self._log.path

    @property
    def index_interval_bytes(self) -> int:
        return self._index_interval_bytes

    def touch(self) -> None:
        """Mark the segment used, for the handle cache's LRU of open files. Any thread."""
        self._handles.touch(self)

    def close_handler(self, *, wait: bool = True) -> bool:
        """Give back the descriptor and index mappings (the handle cache calls this with ``wait=False``). False if
        pinned, or (``wait=False``) still leased: then the last lease closes the ``.log`` (``LogFile.close_handler``)
        and the index mappings go now. Any thread."""
        closed = self._log.close_handler(wait=wait)
        if not closed and self._log.is_open and self._log.pinned:
            return False
        self._offset_index.close_handler()
        self._time_index.close_handler()
        return closed or not self._log.is_open

    @contextlib.contextmanager
    def pin(self) -> Iterator[None]:
        """Keep the ``.log`` readable for the duration, even if retention deletes the segment. Any thread."""
        with self._log.pin():
            self.touch()
            try:
                yield
            finally:
                self.touch()  # back under the LRU's bound (a pinned segment leaves it when asked to close)

    # --- timestamps --------------------------------------------------------------------------------------------------

    def _max_ts_and_offset(self) -> TimestampOffset:
        if self._max_timestamp_and_offset is None:
            self._max_timestamp_and_offset = self._time_index.last_entry()
        return self._max_timestamp_and_offset

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_ts_and_offset().timestamp

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        return self._max_ts_and_offset().offset

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp in the segment, else the ``.log``'s mtime (retention.ms uses it)."""
        ts = self.max_timestamp_so_far
        if ts >= 0:
            return ts
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        try:
            return int(self._log.path.stat().st_mtime * 1000)
        except FileNotFoundError:
            return 0

    # --- appends (writer thread) --------------------------------------------------------------------------------------

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self._base_offset <= INT32_MAX

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        shallow_offset_of_max_timestamp: int,
        records: bytes | bytearray | memoryview,
    ) -> int:
        """Append validated batches whose offsets are assigned; returns the position they start at. Writer thread.

        Raises OffsetOverflow when ``largest_offset`` cannot be stored relative to the base (the log rolls first).
        """
        if not records:
            return self._log.size_bytes
        return self.append_parts(((records, largest_offset, largest_timestamp, shallow_offset_of_max_timestamp),))

    def append_parts(self, parts: Sequence[SegmentPart]) -> int:
        """Append the batches of one request at once: one ``pwritev`` for all of them, then the index entries each
        would have added appended alone (an entry at every batch that starts past ``index.interval.bytes`` of log
        since the last one, as Kafka's ``LogSegment.append`` walks the batches of a multi-batch append). Returns the
        position the first starts at. Writer thread.

        All or nothing: OffsetOverflow (the log rolls first) or a failed write (a full disk) leaves the segment as it
        was. The caller checked that the indexes have a slot for every part (:meth:`index_room`).
        """
        if not self.can_convert_to_relative_offset(parts[-1][1]):
            raise OffsetOverflow(parts[-1][1], self._base_offset, f"segment {self._log.path}")
        self.touch()
        if self._log.size_bytes == 0:
            self.roll.first_append(parts[0][2])
        position = self._log.append_parts([p[0] for p in parts])
        current = self._max_ts_and_offset()
        interval = self._index_interval_bytes
        since = self._bytes_since_last_index_entry
        at = position
        offsets: list[tuple[int, int]] = []
        times: list[tuple[int, int]] = []
        for data, largest_offset, largest_timestamp, offset_of_max_timestamp in parts:
            if largest_timestamp > current.timestamp:
                current = self._max_timestamp_and_offset = TimestampOffset(largest_timestamp, offset_of_max_timestamp)
            if since > interval:
                offsets.append((largest_offset, at))
                times.append(current)
                since = 0
            size = len(data)
            since += size
            at += size
        if offsets:  # each index's entries in one write
            self._offset_index.append_entries(offsets)
            self._time_index.maybe_append_entries(times)
        self._bytes_since_last_index_entry = since
        return position

    def index_room(self) -> int:
        """How many more entries both indexes take before either is full (the time index keeps its slot for the
        roll): a multi-batch append of at most this many batches cannot fill one halfway. Any thread."""
        offsets = self._offset_index.max_entries() - self._offset_index.entries()
        times = self._time_index.max_entries() - self._time_index.entries() - 1
        return min(offsets, times)

    # --- reads (any thread) -------------------------------------------------------------------------------------------

    def translate_offset(self, offset: int, starting_position: int = 0) -> LogOffsetPosition | None:
        """The first batch whose last offset is at or after ``offset``, or None. Any thread."""
        self.touch()
        entry = self._offset_index.lookup_entry(offset)
        if entry is not None and entry.position >= starting_position:  # the walk starts at the entry: it names it
            found = self._log.search_for_offset(offset, entry.position, entry.offset)
        else:
            found = self._log.search_for_offset(offset, max(entry.position if entry else 0, starting_position))
        return None if found is None else LogOffsetPosition(*found)

    def read(
        self, start_offset: int, max_size: int, max_position: int | None = None, min_one_message: bool = False
    ) -> FetchDataInfo | None:
        """Bytes from the batch holding ``start_offset``, at most ``max_size`` (or one whole batch with
        ``min_one_message``) and never past ``max_position``. None when no batch has an offset that high. Any thread.
        """
        if max_size < 0:
            raise ValueError(f"invalid max size {max_size} for a read from segment {self._log.path}")
        start = self.translate_offset(start_offset)
        if start is None:
            return None
        metadata = LogOffsetMetadata(start_offset, self._base_offset, start.position)
        adjusted = max(max_size, start.size) if min_one_message else max_size
        if adjusted == 0:
            return FetchDataInfo(metadata, b"")
        limit = self._log.size_bytes if max_position is None else max_position
        fetch_size = min(limit - start.position, adjusted)
        data = self._log.read(start.position, fetch_size) if fetch_size > 0 else b""
        return FetchDataInfo(metadata, data, first_entry_incomplete=adjusted < start.size)

    def read_next_offset(self) -> int:
        """The offset after the last batch: a scan from the last index entry to the end. Any thread."""
        self.touch()
        last = self._offset_index.lookup(self._offset_index.last_offset())
        next_offset = self._base_offset
        for b in self._log.batches(last.position):
            next_offset = b.last_offset + 1
        return next_offset

    def batches(self, start_position: int = 0) -> Iterator[BatchPosition]:
        """The batch headers from ``start_position`` on (no CRC check). Any thread."""
        self.touch()
        return self._log.batches(start_position)

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> TimestampOffset | None:
        """The first record with timestamp ≥ ``timestamp`` and offset ≥ ``starting_offset``. Any thread."""
        self.touch()
        ts_offset = self._time_index.lookup(timestamp)
        position = self._offset_index.lookup(max(ts_offset.offset, starting_offset)).position
        for b in self._log.batches(position):
            if b.max_timestamp < timestamp:
                continue
            data = self._log.read(b.position, b.size)
            for record in decode_records(data):
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    return TimestampOffset(record.timestamp, record.offset)
        return None

    # --- rolling ------------------------------------------------------------------------------------------------------

    def on_become_inactive_segment(self) -> None:
        """The final time index entry and trimmed indexes, when the log rolls past this segment. Writer thread."""
        mx = self._max_ts_and_offset()
        self._time_index.maybe_append(mx.timestamp, mx.offset, skip_full_check=True)
        self._offset_index.trim_to_valid_size()
        self._time_index.trim_to_valid_size()

    # --- truncation and recovery (writer thread) ----------------------------------------------------------------------

    def truncate_to(self, offset: int, now_ms: int | None = None) -> int:
        """Remove every batch from the one holding ``offset`` on; returns the bytes removed. Writer thread.

        A segment left empty counts as created at ``now_ms`` (default: the wall clock) for segment.ms.
        """
        self.touch()
        mapping = self.translate_offset(offset)
        self._offset_index.truncate_to(offset)
        self._time_index.truncate_to(offset)
        self._txn_index.truncate_to(offset)
        self._offset_index.resize(self._max_index_bytes)
        self._time_index.resize(self._max_index_bytes)
        removed = 0 if mapping is None else self._log.truncate_to(mapping.position)
        if self._log.size_bytes == 0:
            self.roll.emptied(wall_clock_ms() if now_ms is None else now_ms)
        self._bytes_since_last_index_entry = 0
        self._max_timestamp_and_offset = None
        if self._time_index.entries():
            self._max_timestamp_and_offset = self._load_largest_timestamp()
        return removed

    def _load_largest_timestamp(self) -> TimestampOffset:
        """The largest timestamp: the time index's last entry, then any batch after its indexed position."""
        last = self._time_index.last_entry()
        best = last
        position = self._offset_index.lookup(last.offset).position
        for b in self._log.batches(position):
            if b.max_timestamp > best.timestamp:
                best = TimestampOffset(b.max_timestamp, b.last_offset)
        return best

    def append_aborted_txn(self, aborted: AbortedTxn) -> None:
        """Record an aborted transaction whose marker is in this segment. Writer thread."""
        self._txn_index.append(aborted)

    def begin_recovery(self, *, rebuild_txn_index: bool) -> None:
        """Empty the indexes a recovery rebuilds from the ``.log`` (``core/log/recovery.py``); the ``.txnindex`` only
        when it is rebuilt too (a replay through the producer state). Writer thread."""
        self._offset_index.reset()
        self._time_index.reset()
        if rebuild_txn_index:
            self._txn_index.reset()
        self._bytes_since_last_index_entry = 0

    def end_recovery(self, max_timestamp: TimestampOffset, last_index_entry: int, *, trim: bool = True) -> None:
        """After a recovery rebuilt the indexes (and cut the ``.log``): the final time index entry, trimmed indexes
        (``trim=False`` for the segment that stays active: the loader would give them their full size straight
        back, two truncates each for nothing), and the append state the rebuilt files imply. Writer thread."""
        if trim:
            self._offset_index.trim_to_valid_size()
        self._time_index.maybe_append(max_timestamp.timestamp, max_timestamp.offset, skip_full_check=True)
        if trim:
            self._time_index.trim_to_valid_size()
        self._max_timestamp_and_offset = max_timestamp
        self.roll.recovered()
        self._bytes_since_last_index_entry = self._log.size_bytes - last_index_entry

    def offset_index_missing(self) -> bool:
        """Whether the offset index has no file yet (it is made by its first flush, entry or trim). Blocks (a stat)."""
        return not self._offset_index.path.exists()

    def sanity_check(self, *, full: bool = True) -> None:
        """Raise CorruptIndex when the offset index is missing, or (``full``) a present index fails its checks."""
        if self.offset_index_missing():
            raise CorruptIndex(str(self._offset_index.path), "the offset index is missing")
        if full:
            self._offset_index.sanity_check()
            if self._time_index.path.exists():
                self._time_index.sanity_check()
            self._txn_index.sanity_check()

    # --- lifecycle ----------------------------------------------------------------------------------------------------

    def flush_records(self) -> None:
        """fsync the ``.log`` only (blocking; any thread): the records are durable, the indexes are not — a segment
        past the log's recovery point has them rebuilt by recovery anyway."""
        self._log.flush()

    def flush(self) -> None:
        """fsync the ``.log`` and both indexes (blocking). Any thread."""
        self._log.flush()
        self._offset_index.flush()
        self._time_index.flush()
        self._txn_index.flush()

    def close(self) -> None:
        """Write the final time index entry, trim the indexes and give back every descriptor. Writer thread."""
        if self._log.size_bytes or self._time_index.path.exists():
            mx = self._max_ts_and_offset()
            if mx.timestamp >= 0:
                self._time_index.maybe_append(mx.timestamp, mx.offset, skip_full_check=True)
        self._offset_index.close()
        self._time_index.close()
        self._log.close_handler()
        self._handles.forget(self)

    def change_file_suffixes(self, old_suffix: str, new_suffix: str) -> None:
        """Rename all four files, e.g. ``""`` → ``".deleted"``. Writer thread.

        A name already taken (the same base offset deleted twice within ``file.delete.delay.ms``, as an empty
        segment re-created by a roll is) gets a counter before the suffix (``….log.1.deleted``), so one pending
        deletion never overwrites, and later unlinks, another's files.
        """
        stems = []
        for f in (self._log, self._offset_index, self._time_index, self._txn_index):
            name = f.path.name
            if old_suffix and name.endswith(old_suffix):
                name = name[: -len(old_suffix)]
            stems.append((f, name))
        n = 0
        while new_suffix and any(
            f.path.with_name(name + (f".{n}" if n else "") + new_suffix).exists() for f, name in stems
        ):
            n += 1
        tag = f".{n}" if n else ""
        for f, name in stems:
            f.rename_to(f.path.with_name(name + tag + new_suffix))

    def delete_if_exists(self) -> None:
        """Delete all four files (a pinned reader keeps the ``.log`` bytes). Writer thread."""
        self._offset_index.delete_if_exists()
        self._time_index.delete_if_exists()
        self._txn_index.delete_if_exists()
        self._log.delete_if_exists()
        self._handles.forget(self)


__all__ = [
    "FetchDataInfo",
    "LogOffsetMetadata",
    "LogOffsetPosition",
    "LogSegment",
    "TimestampType",
    "filename_prefix",
    "offset_from_filename",
]
