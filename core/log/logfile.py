"""A segment's ``.log`` file: positional appends and reads of RecordBatch bytes (Kafka's FileRecords).

The file holds whole batches back to back; nothing else. This class knows bytes and positions, and batch
*framing* (where each batch starts and how long it is, from its first 61 bytes); the meaning of the batches is
``core/format/batch.py``'s business and index bookkeeping the segment's.

Descriptors. A store may hold 10,000 segments, so a ``LogFile`` opens its descriptor on first use and gives it
back on :meth:`close_handler`, which the store's :class:`~logfs.core.log.handles.HandleCache` calls for the least
recently used segments. A read or write *leases* the descriptor for its duration, so a close_handler that races
with it waits until the lease ends instead of closing a descriptor under it; a reader that must outlive a
deletion (a FUSE handle reading a segment that retention removes) holds a :meth:`pin`, which keeps the descriptor
open, and the unlinked file's bytes with it, until the pin is released.

Threads. One writer thread appends, truncates and renames; any thread may read, flush, pin or close_handler.
Reads never see bytes past the size published after a completed append: ``size_bytes`` moves only once the bytes
are written.

Failures (issue 16). Every write, fsync, truncate, rename and create goes through the store's failure channel
(``core/logdirfailure.py``): refused with StoreOffline once the store is offline, and an OSError takes it offline —
except ENOSPC from an append whose bytes were cut back again (DiskFull: the store stays online). A read that meets
an OSError fails with ReadFailed (the store stays online).
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from logfs.core.errors import CorruptRecord, StorageError
from logfs.core.format.batch import (
    HEADER,
    HEADER_SIZE_UP_TO_MAGIC,
    LAST_OFFSET_DELTA_OFFSET,
    RECORD_BATCH_OVERHEAD,
)
from logfs.core.format.framewalk import FrameWalk
from logfs.core.format.varint import INT64_MIN
from logfs.core.log.batchcheck import VerifiedRanges
from logfs.core.logdirfailure import LogDirFailureChannel, channel_for

_OFFSET_AND_LENGTH = struct.Struct(">qi")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_LAST_OFFSET_DELTA_AT = LAST_OFFSET_DELTA_OFFSET
_LAST_OFFSET_DELTA_END = _LAST_OFFSET_DELTA_AT + 4

# How much one pread fetches while scanning batch headers. One pread per batch header would cost a syscall per
# batch; a lookup usually scans one index interval (index.interval.bytes, 4 KiB) from the indexed position, so the
# first read covers 8 KiB (~2 µs) and each further read doubles, up to 64 KiB for long scans. Measured: a first
# read of 64 KiB made offset lookups 2.5x slower (22,000/s where 8 KiB gives ~55,000/s).
SCAN_FIRST_READ_BYTES = 8 * 1024
SCAN_READ_BYTES = 64 * 1024

# The most buffers one pwritev takes (the kernel's UIO_MAXIOV); a request of more batches is joined and written whole.
_IOV_MAX = os.sysconf("SC_IOV_MAX") if hasattr(os, "sysconf") else 1024


class BatchPosition(NamedTuple):
    """Where one batch lies in the file, with the header fields a scan needs (no CRC check)."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    partition_leader_epoch: int


class LogFile:
    """The ``.log`` file of one segment. See the module docstring for descriptors and threads."""

    def __init__(self, path: Path, *, size_bytes: int | None = None, on_open: Callable[[], None] | None = None) -> None:
        """Describe the file; ``size_bytes`` (from the caller's stat) saves a stat. Creates nothing. Any thread.

        ``on_open`` runs (outside every lock) each time a descriptor is opened, so that the store's handle cache
        counts every open descriptor, including one reopened in the middle of a lazy scan.
        """
        self._path = path
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._fd: int | None = None
        self._leases = 0
        self._pins = 0
        self._close_when_idle = False  # evicted while leased: the last lease closes the descriptor
        self._deleted = False
        self._on_open = on_open
        self._size = size_bytes if size_bytes is not None else self._stat_size(path)
        self._failure: LogDirFailureChannel = channel_for(path)
        self.verified = VerifiedRanges()  # byte ranges whose batches passed the read-side check (batchcheck.py)
        self.generation = 0  # truncations that cut published bytes: readers' caches compare it (storedbatches.py)

    @staticmethod
    def _stat_size(path: Path) -> int:
        try:
            return path.stat().st_size
        except FileNotFoundError:
            return 0

    def __repr__(self) -> str:
        return f"LogFile({str(self._path)!r}, size={self._size})"

    @property
    def path(self) -> Path:
        return self._path

    @property
    def size_bytes(self) -> int:
        """Bytes of whole batches in the file. Any thread."""
        return self._size

    @property
    def failure_channel(self) -> LogDirFailureChannel:
        """The failure channel of the store this file belongs to (``core/logdirfailure.py``)."""
        return self._failure

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    @property
    def pinned(self) -> bool:
        return self._pins > 0

    # --- descriptors --------------------------------------------------------------------------------------------------

    def _acquire(self, create: bool = False) -> int:
        """Lease the descriptor (opening it if needed); every lease ends with :meth:`_release`."""
        with self._lock:
            fd = self._fd
            opened = fd is None
            if fd is None:
                fd = self._fd = self._open(create)
            self._leases += 1
        if opened and self._on_open is not None:
            try:
                self._on_open()
            except BaseException:
                self._release()
                raise
        return fd

    def _release(self) -> None:
        with self._lock:
            self._leases -= 1
            if self._leases == 0:
                if self._close_when_idle and not self._pins:
                    self._close_fd()  # an eviction came while this lease was held (close_handler(wait=False))
                self._idle.notify_all()

    @contextlib.contextmanager
    def _leased(self, *, create: bool = False) -> Iterator[int]:
        fd = self._acquire(create)
        try:
            yield fd
        finally:
            self._release()

    def _open(self, create: bool) -> int:
        """Only an append creates the file: a read of a deleted segment must fail, not leave an empty file."""
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        try:
            try:
                return os.open(self._path, flags, 0o644)
            except PermissionError:
                return os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError as exc:
            raise StorageError(f"cannot open {self._path}: {exc.strerror}") from exc  # deleted under a reader
        except OSError as exc:
            if create:
                raise self._failure.fail(self._path, "open", exc) from exc
            raise self._failure.read_failed(self._path, exc) from exc

    def close_handler(self, *, wait: bool = True) -> bool:
        """Close the descriptor unless pinned. True if it was closed now. Any thread.

        With reads or writes in progress (leases), ``wait=True`` waits for them to end; ``wait=False`` (the handle
        cache's eviction) never waits: the descriptor is closed by the last lease's release instead. An eviction
        must not wait: the evicting thread may itself hold a lease on another segment (it touches the cache while
        it opens one), and two segments evicting each other would wait for each other forever (with a cache of one
        segment, two readers of two segments did). The pin count and the descriptor are looked at again after each
        wait: a pin taken, or another close_handler that closed it, while this one waited."""
        with self._lock:
            while True:
                if self._pins or self._fd is None:
                    return False
                if not self._leases:
                    break
                if not wait:
                    self._close_when_idle = True
                    return False
                self._idle.wait()
            self._close_fd()
            return True

    def _close_fd(self) -> None:
        """Close the descriptor (caller holds ``_lock``, no lease, no pin)."""
        fd, self._fd = self._fd, None
        self._close_when_idle = False
        if fd is not None:
            os.close(fd)

    @contextlib.contextmanager
    def pin(self) -> Iterator[None]:
        """Keep the descriptor open for the duration (a reader that must survive the file's deletion). Any thread."""
        with self._lock:
            opened = self._fd is None
            if opened:
                self._fd = self._open(False)
            self._pins += 1
        if opened and self._on_open is not None:
            self._on_open()
        try:
            yield
        finally:
            with self._lock:
                self._pins -= 1
                last_reader_of_deleted = self._deleted and not self._pins
            if last_reader_of_deleted:
                self.close_handler()  # the file is gone and out of the handle cache: nobody else would close it

    # --- writes (writer thread) ---------------------------------------------------------------------------------------

    def create(self) -> None:
        """Create the file, empty, unless it exists: a new segment's ``.log`` is on disk from the start, as Kafka's
        is, so that a restart finds the segment even while it is empty (its base offset is the log end offset).
        Writer thread."""
        with self._failure.guard(self._path, "create"):
            os.close(os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))

    def append(self, data: bytes | bytearray | memoryview) -> int:
        """Append whole batches; returns the position they start at. On a full disk nothing partial stays."""
        return self.append_parts((data,))

    def append_parts(self, parts: Sequence[bytes | bytearray | memoryview]) -> int:
        """Append ``parts`` back to back in one ``pwritev`` (the batches of one request: no join, one syscall);
        returns the position the first starts at. All or nothing: on any failure (a full disk) the file is cut back
        to where it was, so no partial batch stays (DiskFull: the store stays online); any other failure, or a cut
        back that fails, takes the store offline (StoreOffline). Writer thread."""
        self._failure.check()
        fd = self._acquire(create=True)  # a lease, as _leased() takes it: without a generator's cost on every append
        try:
            position = self._size
            total = 0
            for part in parts:
                total += len(part)
            try:
                written = os.pwritev(fd, parts, position) if len(parts) <= _IOV_MAX else 0
                if written < total:  # a regular file writes short only when the disk fills: find out why
                    view = memoryview(b"".join(parts))
                    while written < total:
                        written += os.pwrite(fd, view[written:], position + written)
            except OSError as exc:
                try:
                    os.ftruncate(fd, position)
                except OSError as cut:
                    raise self._failure.fail(self._path, "truncate", cut) from exc
                raise self._failure.write_error(self._path, exc, stored_nothing=True) from exc
            self._size = position + written
            return position
        finally:
            self._release()

    def truncate_to(self, size_bytes: int) -> int:
        """Cut the file to ``size_bytes``; returns the bytes removed (0 if it is not longer). Writer thread."""
        if size_bytes < 0 or size_bytes > self._size:
            raise StorageError(f"cannot truncate {self._path} of {self._size} bytes to {size_bytes} bytes")
        removed = self._size - size_bytes
        if removed:
            self.generation += 1  # before the cut: an index built from here on is stale at its next check
            self.verified.clear()  # before the cut: a reader must not trust a verdict on bytes written again later
            with self._failure.guard(self._path, "truncate"), self._leased() as fd:
                os.ftruncate(fd, size_bytes)
            self._size = size_bytes
            self.verified.clear()  # and after: a check that read the old bytes may have recorded them meanwhile
            self.generation += 1  # and after: an index checked between the two may have indexed the old bytes
        return removed

    def flush(self) -> None:
        """fsync the file (blocking: never call it on the trio thread). Any thread."""
        self._failure.check()
        if not self._path.exists() and self._fd is None:
            return
        with self._leased() as fd:
            try:
                os.fsync(fd)
            except OSError as exc:  # ENOSPC too: the kernel may have dropped the pages; never retried into success
                raise self._failure.fail(self._path, "fsync", exc) from exc

    def rename_to(self, new_path: Path) -> None:
        """Rename the file; an open descriptor keeps working. Writer thread.

        Under the lock, so that a reader reopening the descriptor never sees the old name after the rename."""
        with self._lock, self._failure.guard(self._path, "rename"):
            with contextlib.suppress(FileNotFoundError):
                os.rename(self._path, new_path)
            self._path = new_path

    def delete_if_exists(self) -> bool:
        """Unlink the file (a pinned reader keeps its bytes) and close an unpinned descriptor. Writer thread."""
        with self._lock:
            self._deleted = True
        self.close_handler()
        try:
            os.unlink(self._path)
            return True
        except FileNotFoundError:
            return False

    # --- reads (any thread) -------------------------------------------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        """Up to ``size`` bytes from ``position``, never past the published size."""
        end = min(self._size, position + size)
        if end <= position:
            return b""
        fd = self._acquire()  # not the context manager: this is every read's hot path (~2 µs saved a call)
        try:
            return _pread_fully(fd, end - position, position)
        except OSError as exc:
            raise self._failure.read_failed(self._path, exc) from exc
        finally:
            self._release()

    def read_into(self, position: int, into: memoryview) -> None:
        """Fill ``into`` with the bytes from ``position`` (a caller's buffer: no allocation, no copy of its own).
        StorageError when they are not all there (past the published size, or the file shorter than that)."""
        if position + len(into) > self._size:
            raise StorageError(f"{self.path}: {len(into)} bytes at {position} are past its size {self._size}")
        fd = self._acquire()
        try:
            got = 0
            while got < len(into):
                n = os.preadv(fd, [into[got:]], position + got)
                if not n:
                    raise StorageError(f"{self.path}: ends at {position + got}, before {position + len(into)}")
                got += n
        except OSError as exc:
            raise self._failure.read_failed(self._path, exc) from exc
        finally:
            self._release()

    def search_for_offset(
        self, target_offset: int, start_position: int, entry_offset: int | None = None
    ) -> tuple[int, int, int, int] | None:
        """``(last offset, position, size, base offset)`` of the first batch from ``start_position`` whose last offset
        is at or after ``target_offset`` (Kafka's searchForOffsetWithSize), or None. Any thread.

        The hot half of every offset lookup, so it takes only the two header fields it needs per batch from the
        framing walk (``core/format/framewalk.py``, headers mode) rather than decoding full headers as :meth:`batches`
        does, and holds one descriptor lease for the whole walk.

        The base offset is not covered by the CRC (issue 23): a batch whose offsets do not rise above the one before
        it in the walk, or, when ``start_position`` is the offset index's entry for ``entry_offset`` (the append
        ending at that offset starts there), a walk that passes ``entry_offset`` without a batch holding it, is
        damage (CorruptStoredBatch): a base offset flipped downward would otherwise make the lookup skip its batch
        and a view start after it, silently.
        """
        end = self._size
        prev_last = INT64_MIN  # the last offset of the batch before, in this walk
        unmet = entry_offset is not None
        entry = entry_offset if entry_offset is not None else 0
        if start_position + HEADER_SIZE_UP_TO_MAGIC >= end:
            return None
        fd = self._acquire()  # one lease for the whole scan: a lookup often reads twice

        def pread(position: int, size: int) -> bytes:
            try:
                return os.pread(fd, size, position)
            except OSError as exc:
                raise self._failure.read_failed(self._path, exc) from exc

        walk = FrameWalk(pread, start_position, end, whole=False, first_read=SCAN_FIRST_READ_BYTES,
                         max_read=SCAN_READ_BYTES)  # fmt: skip
        try:
            for data, at, size, position, base_offset in walk:
                if size < _LAST_OFFSET_DELTA_END:  # no lastOffsetDelta to read: damage to a stored batch
                    raise self._failure.corrupt_batch(self._path, position, f"is {size} bytes, shorter than its header")
                last_offset = base_offset + _INT32.unpack_from(data, at + _LAST_OFFSET_DELTA_AT)[0]
                if base_offset <= prev_last or last_offset < base_offset:
                    raise self._failure.corrupt_batch(
                        self._path, position, f"has offsets {base_offset}..{last_offset}, not above {prev_last}, "
                        "where the batch before it ends (the base offset is not covered by the CRC)"
                    )  # fmt: skip
                if unmet and last_offset >= entry:
                    if base_offset > entry:
                        raise self._failure.corrupt_batch(
                            self._path, position, f"has offsets {base_offset}..{last_offset}, but the offset index "
                            f"names offset {entry} at byte {start_position} and no batch from there holds it (a "
                            "base offset is not covered by the CRC)"
                        )  # fmt: skip
                    unmet = False
                if last_offset >= target_offset:
                    return last_offset, position, size, base_offset
                prev_last = last_offset
            if walk.overrun:
                # The published size ends at a batch boundary: a batch declaring more than is left is damage.
                raise self._failure.corrupt_batch(
                    self._path, walk.end, f"declares more bytes than the segment holds before its end {end} (framing)"
                )
            return None
        except CorruptRecord as exc:  # a stored batch, read for a client: EIO (issue 23)
            where = exc.position if exc.position is not None else start_position
            raise self._failure.corrupt_batch(self._path, where, f"{exc.reason} (framing)") from exc
        finally:
            self._release()

    def batches(self, start_position: int = 0, end_position: int | None = None) -> Iterator[BatchPosition]:
        """Frame the batches from ``start_position`` on, from their headers alone (no CRC check): the framing walk
        of ``core/format/framewalk.py`` in its headers mode.

        Stops silently at a torn tail (fewer bytes left than a batch declares, or than its header), as Kafka's
        FileLogInputStream does; a declared size below 14 bytes raises CorruptRecord, a header cut short by
        ``end_position`` ends the scan.
        """
        end = self._size if end_position is None else min(end_position, self._size)
        walk = FrameWalk(
            self.read, start_position, end, whole=False, first_read=SCAN_FIRST_READ_BYTES, max_read=SCAN_READ_BYTES
        )
        for data, at, size, position, base_offset in walk:
            if size < RECORD_BATCH_OVERHEAD:
                yield BatchPosition(position, size, base_offset, base_offset, -1, -1)
            else:
                h = HEADER.unpack_from(data, at)
                yield BatchPosition(position, size, h[0], h[0] + h[6], h[8], h[2])


def _pread_fully(fd: int, size: int, position: int) -> bytes:
    data = os.pread(fd, size, position)
    if len(data) == size:
        return data
    parts = [data]
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, position + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)
