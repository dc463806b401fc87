"""The machinery the offset index and the time index share: a preallocated, memory-mapped file of fixed-size
entries, counted, truncated, resized and trimmed (Kafka's AbstractIndex).

The entry layouts are in ``core/log/indexentry.py``, the search over the entries (a binary search with a warm
section) in ``core/log/indexsearch.py``; what an entry means and the rules for each index are in
``core/log/index.py``. This module knows slots, files and mappings. See that module's docstring for lazy files,
bounded descriptors and threads.

Failures (issue 16): a writable index's writes, resizes, fsyncs, renames, creates and deletes go through the store's
failure channel (``core/logdirfailure.py``): refused once the store is offline, and an OSError takes it offline.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from logfs.core.errors import ConfigError, CorruptIndex, IndexFull, OffsetOverflow, StorageError
from logfs.core.format.varint import INT32_MAX
from logfs.core.log.indexentry import SEGMENT_INDEX_BYTES_DEFAULT, OffsetPosition, TimestampOffset
from logfs.core.log.indexsearch import IndexSearch
from logfs.core.logdirfailure import channel_for

_Entry = TypeVar("_Entry", OffsetPosition, TimestampOffset)


def _round_down(number: int, factor: int) -> int:
    """The largest multiple of ``factor`` not above ``number`` (Kafka's roundDownToExactMultiple(67, 8) == 64)."""
    return factor * (number // factor)


class AbstractIndex(IndexSearch, Generic[_Entry]):
    """What the offset index and the time index share: the file, its mapping, slots, truncation, resizing; the
    search is :class:`IndexSearch`'s.

    ``max_index_bytes`` is ``segment.index.bytes``; a new file gets that many bytes rounded down to whole entries.
    ``writable=False`` opens an existing file read-only (``logfs dump``, ``logfs check``): every change is refused
    with a StorageError, and an absent file reads as empty instead of being created.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int,
        max_index_bytes: int = SEGMENT_INDEX_BYTES_DEFAULT,
        *,
        writable: bool = True,
    ) -> None:
        """Describe the index; touch no file (see the module docstring on lazy files). Any thread."""
        if max_index_bytes < self.ENTRY_BYTES:
            raise ConfigError(f"segment.index.bytes={max_index_bytes} cannot hold one {self.ENTRY_BYTES}-byte entry")
        self._path = Path(path)
        self._base_offset = base_offset
        self._max_index_bytes = max_index_bytes
        self._writable = writable
        self._failure = channel_for(self._path)
        self._lock = threading.RLock()
        # State, valid once _loaded: the file's length (or the length it will be created at), whether it exists, the
        # number of valid entries, and the mapping (None when released, or when the file is empty or absent).
        self._loaded = False
        self._on_disk = False
        self._length_bytes = 0
        self._entries = 0
        self._reserved_bytes = 0  # a length the next write grows the file to (:meth:`reserve`); 0: none pending
        self._mmap: mmap.mmap | None = None
        # Appends write entries with pwrite through this descriptor, not through the mapping: a store under write
        # load has its index pages cleaned by writeback all the time, and every store into a cleaned shared page
        # faults (~12 µs each, measured: a quarter of the bookkeeping of a 1 MiB append). Reads keep the mapping,
        # which sees the written entries (one page cache). Opened on the first append, given back with the mapping.
        self._append_fd: int | None = None
        self._refresh_last_entry()  # no entries yet: the subclass's cached last entry starts at the base offset

    def __repr__(self) -> str:
        state = f"entries={self._entries}/{self._length_bytes // self.ENTRY_BYTES}" if self._loaded else "not loaded"
        return f"{type(self).__name__}({str(self._path)!r}, base_offset={self._base_offset}, {state})"

    # --- what the subclasses define ----------------------------------------------------------------------------------

    def _parse(self, buffer: mmap.mmap, slot: int) -> _Entry:
        raise NotImplementedError

    def _refresh_last_entry(self) -> None:
        """Re-read the cached last entry after the number of entries changed. Caller holds the lock."""
        raise NotImplementedError

    def sanity_check(self) -> None:
        """Raise CorruptIndex if the file cannot be a valid index of this kind; the loader then rebuilds it."""
        raise NotImplementedError

    # --- plain attributes ------------------------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        """The index file (it may not exist yet). Any thread."""
        return self._path

    @property
    def base_offset(self) -> int:
        """The base offset of the segment: the offset that relative offset 0 stands for. Any thread."""
        return self._base_offset

    @property
    def max_index_bytes(self) -> int:
        """``segment.index.bytes``: the size a new file is created at, and what :meth:`reset` resizes to. Any thread."""
        return self._max_index_bytes

    @property
    def writable(self) -> bool:
        """False for a read-only index, which refuses every change. Any thread."""
        return self._writable

    # --- counts ------------------------------------------------------------------------------------------------------

    def entries(self) -> int:
        """The number of valid entries. Any thread."""
        with self._lock:
            self._load()
            return self._entries

    def max_entries(self) -> int:
        """The number of slots the file has room for (a :meth:`reserve` counts as done). Any thread."""
        with self._lock:
            self._load()
            return self._capacity_bytes() // self.ENTRY_BYTES

    def length_bytes(self) -> int:
        """The length of the file, or the length it will be created at. Any thread."""
        with self._lock:
            self._load()
            return self._length_bytes

    def size_bytes(self) -> int:
        """The bytes the valid entries take (Kafka's sizeInBytes). Any thread."""
        return self.entries() * self.ENTRY_BYTES

    def is_full(self) -> bool:
        """True when no slot is free for an append. Any thread; meaningful before an append on the writer thread."""
        with self._lock:
            self._load()
            return self._entries >= self._capacity_bytes() // self.ENTRY_BYTES

    def relative_offset(self, offset: int) -> int:
        """``offset - base_offset``, or OffsetOverflow when that does not fit [0, 2**31 - 1]. Any thread."""
        relative = offset - self._base_offset
        if not 0 <= relative <= INT32_MAX:
            raise OffsetOverflow(offset, self._base_offset, str(self._path))
        return relative

    def can_append_offset(self, offset: int) -> bool:
        """Whether ``offset`` can be stored relative to this index's base offset. Any thread."""
        return 0 <= offset - self._base_offset <= INT32_MAX

    def entry(self, n: int) -> _Entry:
        """The ``n``-th entry, for dumps and checks; IndexError past the last (a caller's bug). Any thread."""
        with self._lock:
            self._load()
            if not 0 <= n < self._entries:
                raise IndexError(f"no entry {n} in {self._path}, which has {self._entries}")
            return self._parse(self._mapped(), n)

    # --- changes -----------------------------------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is ``offset`` or above; above the last entry this changes nothing.

        Writer thread only. The removed slots keep their bytes until they are overwritten or the file is trimmed.
        """
        with self._lock:
            self._load()
            self._check_writable(lambda: f"truncate to offset {offset}")
            if self._entries == 0:
                return
            buffer = self._mapped()
            slot = self._largest_lower_bound_slot(buffer, offset, self._OFFSET_FIELD)
            # Three cases, as in Kafka: no entry at or below the offset, so drop everything; an entry for exactly
            # this offset, so drop it and everything after it; else keep the entry below and drop what follows.
            if slot < 0:
                entries = 0
            elif self._parse(buffer, slot)[self._OFFSET_FIELD] == offset:
                entries = slot
            else:
                entries = slot + 1
            self._truncate_to_entries(entries)

    def truncate(self) -> None:
        """Remove every entry, keeping the file's size. Writer thread only."""
        with self._lock:
            self._load()
            self._check_writable(lambda: "truncate")
            self._truncate_to_entries(0)

    def resize(self, new_size_bytes: int) -> bool:
        """Set the file's length to ``new_size_bytes`` rounded down to whole entries; True if the length changed.

        Used to trim an index on roll and close, and to give the active segment's indexes their full size again
        after a load or a truncation back into an old segment (so a short index does not force a roll). Shrinking
        below the valid entries drops the ones that no longer fit (Kafka throws instead). Creates the file if it
        does not exist yet and the length is not the one it would be created at. Writer thread only.
        """
        with self._lock:
            self._load()
            self._check_writable(lambda: f"resize to {new_size_bytes} bytes")
            self._reserved_bytes = 0
            rounded = _round_down(max(new_size_bytes, 0), self.ENTRY_BYTES)
            if rounded == self._length_bytes:
                return False
            self._release()
            if self._on_disk:
                self._failure.check()
                try:
                    os.truncate(self._path, rounded)
                except OSError as exc:
                    raise self._failure.fail(self._path, "truncate", exc) from exc
            else:
                self._create(rounded)
            self._length_bytes = rounded
            max_entries = rounded // self.ENTRY_BYTES
            if self._entries > max_entries:
                self._entries = max_entries
                self._refresh_last_entry()
            return True

    def reserve(self, new_size_bytes: int) -> None:
        """Give the index room for ``new_size_bytes`` (rounded down to whole entries) as :meth:`resize` would, but
        grow the file only at its next write: until then it keeps its length, and :meth:`is_full` and
        :meth:`max_entries` count the room as there. The loader reserves the active segment's full size: a clean
        remount of 10,000 partitions truncates none of their 20,000 trimmed indexes, and a partition that takes no
        append before it closes has nothing to trim again (Kafka resizes at load; once an append comes, the file is
        the same). A :meth:`resize` or a trim replaces the reservation. Writer thread only."""
        with self._lock:
            self._load()
            self._check_writable(lambda: f"reserve {new_size_bytes} bytes")
            rounded = _round_down(max(new_size_bytes, 0), self.ENTRY_BYTES)
            self._reserved_bytes = rounded if rounded > self._length_bytes else 0

    def _capacity_bytes(self) -> int:
        return max(self._length_bytes, self._reserved_bytes)

    def trim_to_valid_size(self) -> bool:
        """Cut the file down to its valid entries, as a segment does on roll; True if the length changed.

        A file that was never created is created empty, so a rolled segment has its index files as Kafka's do.
        Writer thread only.
        """
        with self._lock:
            self._load()
            return self.resize(self._entries * self.ENTRY_BYTES)

    def reset(self) -> None:
        """Remove every entry and give the file its full size again, before recovery rebuilds it. Writer thread only.

        The old entries are never read: a preallocated index of an unclean stop counts every slot as an entry, and
        reading its "last entry" maps the file and faults in a page of its sparse tail, which made this the largest
        cost of recovering a partition that holds a few records (docs/storage.md, "Opening")."""
        with self._lock:
            self._load(read_last_entry=False)
            self._check_writable(lambda: "reset")
            self._truncate_to_entries(0)
            self.resize(self._max_index_bytes)

    def flush(self) -> None:
        """Make the entries durable (msync of the mapping, or fsync once it was released); creates an absent file.

        Any thread. A read-only index has nothing to flush.
        """
        with self._lock:
            self._load()
            if not self._writable:
                return
            self._failure.check()
            if not self._on_disk:
                self._create(self._length_bytes)
            try:
                if self._append_fd is not None:
                    os.fsync(self._append_fd)
                elif self._mmap is not None:
                    self._mmap.flush()
                else:
                    fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
                    try:
                        os.fsync(fd)
                    finally:
                        os.close(fd)
            except OSError as exc:  # ENOSPC too: the kernel may have dropped the pages
                raise self._failure.fail(self._path, "fsync", exc) from exc

    def close_handler(self) -> None:
        """Give back the mapping and its descriptor; the next call that needs them maps the file again.

        This is how a log bounds the open files of a store with many segments. Nothing is trimmed or lost: the
        entries live in the page cache until written back. Any thread.
        """
        with self._lock:
            self._release()

    def close(self) -> None:
        """Trim the file to its valid entries and give back the mapping, as Kafka's close does.

        The index stays usable: a lookup maps it again, but an append finds it full (it was trimmed) until a
        :meth:`resize`. An index that was never used, or never created, is left as it is. Writer thread only.
        """
        with self._lock:
            if self._loaded and self._on_disk and self._writable:
                self.trim_to_valid_size()
            self._release()

    def rename_to(self, new_path: str | os.PathLike[str]) -> None:
        """Atomically rename the file (``.deleted``, ``.swap`` suffixes); an absent file just takes the new name.

        A mapping stays valid across the rename. Writer thread only.
        """
        with self._lock:
            target = Path(new_path)
            self._check_writable(lambda: f"rename to {target}")
            self._failure.check()
            try:
                os.replace(self._path, target)
            except FileNotFoundError as exc:
                if self._path.exists() or (self._loaded and self._on_disk):  # not a file that was never created
                    raise self._failure.fail(self._path, "rename", exc) from exc
            except OSError as exc:
                raise self._failure.fail(self._path, "rename", exc) from exc
            self._path = target

    def update_parent_dir(self, parent_dir: str | os.PathLike[str]) -> None:
        """Follow the partition directory to a new place after it was renamed; moves no file. Writer thread only."""
        with self._lock:
            self._path = Path(parent_dir) / self._path.name

    def delete_if_exists(self) -> bool:
        """Release the mapping and delete the file; True if there was a file. Writer thread only.

        The index reads as empty afterwards, and a later write would create a new, full-size file.
        """
        with self._lock:
            self._check_writable(lambda: "delete")
            self._release()
            self._loaded = False
            self._on_disk = False
            self._entries = 0
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise _storage_error("delete", self._path, exc) from exc
            return True

    # --- the file and its mapping (every caller holds the lock) -------------------------------------------------------

    def _check_shape(self, last_offset: int) -> None:
        """The checks both kinds' ``sanity_check`` share: the last entry's offset is not below the base offset, and
        the file holds whole entries. Caller holds ``_lock`` with the file loaded."""
        if self._entries and last_offset < self._base_offset:
            raise CorruptIndex(
                str(self._path),
                f"{self._entries} entries but the last offset {last_offset} is below the base offset "
                f"{self._base_offset}",
            )
        if self._length_bytes % self.ENTRY_BYTES:
            raise CorruptIndex(
                str(self._path), f"length {self._length_bytes} is not a multiple of {self.ENTRY_BYTES} bytes"
            )

    def _load(self, *, read_last_entry: bool = True) -> None:
        """Learn the file's state the first time it is needed; an absent file is an empty index, not yet created.
        ``read_last_entry=False``: the caller sets the entries itself at once (and refreshes the last entry)."""
        if self._loaded:
            return
        try:
            length = os.stat(self._path).st_size
        except FileNotFoundError:
            self._on_disk = False
            self._length_bytes = _round_down(self._max_index_bytes, self.ENTRY_BYTES) if self._writable else 0
            self._entries = 0
        except OSError as exc:
            raise _storage_error("open", self._path, exc) from exc
        else:
            # An existing file is assumed valid up to its last whole entry (Kafka's ``AbstractIndex``).
            self._on_disk = True
            self._length_bytes = length
            self._entries = length // self.ENTRY_BYTES
        self._loaded = True
        if read_last_entry:
            self._refresh_last_entry()

    def _mapped(self) -> mmap.mmap:
        """The mapping of the file, made if it was released. Only called when the file exists and is not empty."""
        if self._mmap is not None:
            return self._mmap
        assert self._on_disk and self._length_bytes > 0, f"{self._path} has nothing to map"
        flags = (os.O_RDWR if self._writable else os.O_RDONLY) | os.O_CLOEXEC
        access = mmap.ACCESS_WRITE if self._writable else mmap.ACCESS_READ
        try:
            fd = os.open(self._path, flags)
            try:
                self._mmap = mmap.mmap(fd, self._length_bytes, access=access)
            finally:
                os.close(fd)  # the mapping keeps its own duplicate
        except (OSError, ValueError) as exc:  # ValueError: the file is now shorter than the mapping would be
            raise _storage_error("map", self._path, exc) from exc
        return self._mmap

    def _create(self, length_bytes: int) -> None:
        """Create the file at ``length_bytes`` of zeros: sparse, so a 10 MiB index costs no disk until written."""
        self._failure.check()
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                os.ftruncate(fd, length_bytes)
            finally:
                os.close(fd)
        except OSError as exc:
            raise self._failure.fail(self._path, "create", exc) from exc
        self._on_disk = True

    def _release(self) -> None:
        if self._mmap is not None:
            self._mmap.close()
            self._mmap = None
        if self._append_fd is not None:
            os.close(self._append_fd)
            self._append_fd = None

    def _check_writable(self, doing: Callable[[], str]) -> None:
        """``doing`` describes the operation for the error; a callable, so that the append path formats nothing."""
        if not self._writable:
            raise StorageError(f"cannot {doing()}: {self._path} is open read-only")

    def _truncate_to_entries(self, entries: int) -> None:
        self._entries = entries
        self._refresh_last_entry()

    def _check_free_slot(self, what: Callable[[], str], reserved_slots: int) -> None:
        """Raise IndexFull naming the file, the entry and the slot unless a slot is free beyond ``reserved_slots``."""
        max_entries = self._capacity_bytes() // self.ENTRY_BYTES
        if self._entries >= max_entries - reserved_slots:
            kept = ", the last kept for the roll" if reserved_slots else ""
            raise IndexFull(
                f"cannot append {what()} at slot {self._entries} of {self._path}: the index is full "
                f"({self._entries} of {max_entries} slots used{kept})"
            )

    def _write(self, slot: int, first: int, second: int) -> None:
        """Write one entry into ``slot`` and count it, creating the file on the first write."""
        self._write_entries(slot, self._ENTRY.pack(first, second))

    def _write_packed(self, start: int, packed: bytearray) -> None:
        """The end of a multi-entry append: the entries packed since slot ``start`` (counted as they were checked)
        written together; on a failed write the count and the last entry go back to what the file holds."""
        self._entries = start
        if not packed:
            return
        try:
            self._write_entries(start, bytes(packed))
        except BaseException:
            self._refresh_last_entry()
            raise

    def _write_entries(self, slot: int, packed: bytes) -> None:
        """Write packed entries from ``slot`` on in one pwrite (a multi-batch append's entries together) and count
        them, creating the file on the first write."""
        self._failure.check()
        if self._reserved_bytes > self._length_bytes:
            self.resize(self._reserved_bytes)  # the room reserve() promised, made before the first entry lands
        if not self._on_disk:
            self._create(self._length_bytes)
        try:
            if self._append_fd is None:
                self._append_fd = os.open(self._path, os.O_RDWR | os.O_CLOEXEC)
            os.pwrite(self._append_fd, packed, slot * self.ENTRY_BYTES)
        except OSError as exc:
            raise self._failure.fail(self._path, "write", exc) from exc
        self._entries = slot + len(packed) // self.ENTRY_BYTES


def _storage_error(doing: str, path: Path, exc: OSError | ValueError) -> StorageError:
    """The typed error for a failed file operation; the OSError stays attached as its cause."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return StorageError(f"cannot {doing} {path}: {reason}")
