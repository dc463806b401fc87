"""The transaction coordinator's durable log: an append-only file of checksummed records (LevelDB's log, simplified).

Layout of ``STORE/.logfs-transactions.log`` (a plain file: a Kafka broker ignores files at a log dir's root)::

    magic     8 bytes   b"logfstx1"             file type and format version, written once
    record    4 bytes   length, unsigned big-endian: the payload's size, 1 … MAX_RECORD_BYTES
              4 bytes   CRC-32C (Castagnoli), unsigned big-endian, of the 4 length bytes and the payload
              length    payload: one JSON object (core/txn/state.py)
    record    …

Example: the payload ``{"type":"coordinator","coordinator_epoch":0}`` (44 bytes), which opens every file, is framed
as ``00 00 00 2c`` (the length), ``8a 63 a6 79`` (the CRC of those 4 bytes and the payload), then the 44 bytes. A
zero length is never written, so a zero-filled tail (a file whose size reached the disk before its data) never reads
as a record.

Each append writes one record at the known end with ``pwrite`` and fsyncs it before returning, so a crash (even
a power loss, which may keep later pages of a write and lose earlier ones) can damage only the last record: that is
what makes the policy below sound. A write that fails part-way is cut back off. Rewrites (compaction) replace the
whole file atomically (``durable.replace_file``).

Opening scans every record, as LevelDB's ``log_reader.cc`` does, with one policy: damage that ends the file is a
torn tail (the one append a crash interrupted: fsync'd records before it are intact) and is cut off with a warning;
damage followed by any intact record cannot be a torn append, so it raises CorruptTransactionLog and nothing is cut.
"Followed by an intact record" is tested at every byte after the damage (a record found by chance needs a length
in range and a matching CRC-32C, about 1 in 2**32 per position; the file is kept small by compaction).

Threads: none of its own, no lock. The coordinator serialises every call under its lock; all calls block on the disk.
"""

from __future__ import annotations

import errno
import logging
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import crc32c as _crc32c

from logfs.core.durable import replace_file
from logfs.core.errors import CorruptTransactionLog, DiskFull, StorageError
from logfs.core.logdirfailure import channel_for

_log = logging.getLogger(__name__)

MAGIC = b"logfstx1"
LENGTH_BYTES = 4
CRC_BYTES = 4
FRAME_HEADER_BYTES = LENGTH_BYTES + CRC_BYTES
MAX_RECORD_BYTES = 16 * 1024 * 1024  # one transaction's state with ~500,000 partitions; far beyond any real use
_FRAME_HEADER = struct.Struct(">II")

assert _FRAME_HEADER.size == FRAME_HEADER_BYTES
assert len(MAGIC) == 8
assert MAX_RECORD_BYTES < 2**32


def frame(payload: bytes) -> bytes:
    """One record's bytes: length, CRC-32C of the length bytes and the payload, payload."""
    if not 1 <= len(payload) <= MAX_RECORD_BYTES:
        raise StorageError(f"transaction log record of {len(payload)} bytes is outside [1, {MAX_RECORD_BYTES}]")
    length = struct.pack(">I", len(payload))
    return length + struct.pack(">I", _crc32c.crc32c(payload, _crc32c.crc32c(length))) + payload


def read_frame(data: bytes, position: int) -> tuple[bytes, int] | str:
    """The payload of the record at ``position`` and the position after it, or the reason there is none."""
    if position + FRAME_HEADER_BYTES > len(data):
        return f"{len(data) - position} bytes, shorter than a record header"
    length, crc = _FRAME_HEADER.unpack_from(data, position)
    if not 1 <= length <= MAX_RECORD_BYTES:
        return f"record length {length} outside [1, {MAX_RECORD_BYTES}]"
    end = position + FRAME_HEADER_BYTES + length
    if end > len(data):
        return f"record of {length} bytes runs {end - len(data)} bytes past the end of the file"
    view = memoryview(data)
    actual = _crc32c.crc32c(view[position + FRAME_HEADER_BYTES : end], _crc32c.crc32c(view[position : position + 4]))
    if actual != crc:
        return f"CRC-32C mismatch: stored {crc:#010x}, computed {actual:#010x}"
    return data[position + FRAME_HEADER_BYTES : end], end


@dataclass(frozen=True)
class ScanResult:
    """What opening found: every intact record as (position, payload), where they end, and the torn tail cut."""

    records: list[tuple[int, bytes]]
    end_position: int
    dropped_bytes: int
    drop_reason: str | None


def scan(path: Path, data: bytes) -> ScanResult:
    """Read ``data`` (the whole file) record by record; CorruptTransactionLog for damage that is not a torn tail."""
    if data[: len(MAGIC)] != MAGIC:
        raise CorruptTransactionLog(str(path), 0, f"does not start with {MAGIC!r}")
    records: list[tuple[int, bytes]] = []
    position = len(MAGIC)
    while position < len(data):
        found = read_frame(data, position)
        if isinstance(found, str):
            later = _next_intact_record(data, position + 1)
            if later is not None:
                raise CorruptTransactionLog(str(path), position, f"{found}; an intact record follows at byte {later}")
            return ScanResult(records, position, len(data) - position, found)
        payload, end = found
        records.append((position, payload))
        position = end
    return ScanResult(records, position, 0, None)


def _next_intact_record(data: bytes, start: int) -> int | None:
    for position in range(start, len(data) - FRAME_HEADER_BYTES):
        if not isinstance(read_frame(data, position), str):
            return position
    return None


class TransactionLogFile:
    """The open log: :meth:`open` scans and repairs it, :meth:`append` adds, :meth:`rewrite` replaces it whole."""

    def __init__(self, path: Path, fd: int, end_position: int) -> None:
        self.path = path
        self._fd = fd
        self._end = end_position
        self._failed: str | None = None
        self._failure = channel_for(path)  # the store's offline state (core/logdirfailure.py)

    @classmethod
    def open(cls, path: Path, initial: Iterable[bytes]) -> tuple[TransactionLogFile, ScanResult]:
        """Open the log at ``path``, creating it with the payloads ``initial`` when missing; cut a torn tail.

        Returns the open file and what the scan found (the records are those on disk after any creation).
        """
        if not path.exists():
            _replace(path, list(initial))
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            raise StorageError(f"cannot open {path}: {exc.strerror or exc}") from exc
        try:
            data = _read_all(fd)
            result = scan(path, data)
            if result.dropped_bytes:
                _log.warning(
                    "%s: cut a torn tail of %d bytes at byte %d (%s); the %d records before it are kept",
                    path, result.dropped_bytes, result.end_position, result.drop_reason, len(result.records),
                )  # fmt: skip
                os.ftruncate(fd, result.end_position)
                os.fsync(fd)
        except OSError as exc:
            os.close(fd)
            raise StorageError(f"cannot repair {path}: {exc.strerror or exc}") from exc
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, result.end_position), result

    @property
    def size_bytes(self) -> int:
        return self._end

    def append(self, payload: bytes) -> None:
        """Append one record and fsync it: it is durable when this returns.

        DiskFull or StorageError on failure: a failed write is cut off again; a failed fsync leaves the file
        unusable until it is reopened (the kernel may have dropped the pages it could not write), so every later
        call raises StorageError.
        """
        if self._failed is not None:
            raise StorageError(f"{self.path} failed earlier ({self._failed}); reopen the store")
        self._failure.check()
        data = frame(payload)
        try:
            _pwrite_all(self._fd, data, self._end)
        except OSError as exc:
            try:
                os.ftruncate(self._fd, self._end)
            except OSError as cut:
                raise self._failure.fail(self.path, "truncate", cut) from exc
            raise self._failure.write_error(self.path, exc, stored_nothing=True) from exc
        self._end += len(data)
        self.sync()

    def sync(self) -> None:
        """fsync the file. StorageError on failure, and the file refuses every later call."""
        if self._failed is not None:
            raise StorageError(f"{self.path} failed earlier ({self._failed}); reopen the store")
        self._failure.check()
        try:
            os.fsync(self._fd)
        except OSError as exc:
            self._failed = f"fsync: {exc.strerror or exc}"
            raise self._failure.fail(self.path, "fsync", exc) from exc

    def rewrite(self, payloads: list[bytes]) -> None:
        """Replace the file atomically with ``payloads`` (compaction), durably; the log stays open on the new file."""
        if self._failed is not None:
            raise StorageError(f"{self.path} failed earlier ({self._failed}); reopen the store")
        end = _replace(self.path, payloads)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except OSError as exc:
            self._failed = f"reopen after compaction: {exc.strerror or exc}"
            raise StorageError(f"cannot reopen {self.path}: {exc.strerror or exc}") from exc
        os.close(self._fd)
        self._fd = fd
        self._end = end

    def close(self) -> None:
        """Close the file (every record is already durable). Idempotent."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _replace(path: Path, payloads: list[bytes]) -> int:
    data = MAGIC + b"".join(frame(p) for p in payloads)
    result = scan(path, data)  # validate twice: what is written must read back as the same records
    assert result.dropped_bytes == 0 and [p for _, p in result.records] == payloads
    try:
        replace_file(path, data)
    except OSError as exc:
        error = DiskFull if exc.errno in (errno.ENOSPC, errno.EDQUOT) else StorageError
        raise error(f"cannot write {path}: {exc.strerror or exc}") from exc
    return len(data)


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks: list[bytes] = []
    position = 0
    while position < size:
        chunk = os.pread(fd, size - position, position)
        if not chunk:
            break
        chunks.append(chunk)
        position += len(chunk)
    return b"".join(chunks)


def _pwrite_all(fd: int, data: bytes, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written
