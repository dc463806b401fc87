"""Kafka's transaction index (``.txnindex``): the aborted transactions whose ABORT marker lies in one segment.

A read_committed consumer must drop the records of aborted transactions. It learns which from the fetch response's
aborted list, which the leader builds from these files (Kafka's ``TransactionIndex``; docs/storage.md, "Idempotent
producers and transactions"). One file per segment, beside its ``.index`` and ``.timeindex``, holding only *aborted*
transactions, in the segment where the marker was written. Entry layout, byte for byte Kafka's ``AbortedTxn``
(big-endian, no header, no padding, no checksum)::

    version            int16   0
    producerId         int64
    firstOffset        int64   the transaction's first offset (it may lie in an earlier segment)
    lastOffset         int64   the offset of the ABORT marker
    lastStableOffset   int64   the LSO when the marker was written: the first offset of the earliest open
                               transaction of *another* producer, else lastOffset + 1
                               34 bytes per entry

Example: producer 7 aborts the transaction it opened at offset 100 with a marker at 106 while producer 9 has one open
since 102: ``0000 0000000000000007 0000000000000064 000000000000006a 0000000000000066``.

Rules: the file is not preallocated and is created only by the first append (most segments never see an abort, and
have no file); ``lastOffset`` strictly increases; ``truncate_to(o)`` drops the entries with ``lastOffset >= o``; the
sanity check refuses a file that is not whole entries, an unknown version, or a ``lastOffset`` below the segment's
base. :meth:`TransactionIndex.collect` is Kafka's ``collectAbortedTxns``: entries with ``lastOffset >= fetch offset``
and ``firstOffset < upper bound``; the search is *complete* (later segments need not be asked) once it meets an entry
whose ``lastStableOffset >= upper bound``.

Like the other indexes it has no checksum and is rebuilt by segment recovery from the ``.log`` (``LogSegment.recover``
replays the batches through a producer state manager).

Threads: one writer thread (the log's) appends, truncates, resets, renames and deletes; any thread may collect,
read the entries or flush. The entries are held as an immutable tuple replaced on every change, so readers never
lock; the file is read once, on first use.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple, Protocol

from logfs.core.durable import fsync_dir
from logfs.core.errors import CorruptIndex, InvalidOffset, StorageError
from logfs.core.logdirfailure import channel_for

ENTRY = struct.Struct(">hqqqq")
ENTRY_BYTES = 34
CURRENT_VERSION = 0
assert ENTRY.size == ENTRY_BYTES


class AbortedTxn(NamedTuple):
    """One aborted transaction: its producer, first offset, ABORT marker offset and the LSO when it was written."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ENTRY.pack(CURRENT_VERSION, *self)


class TxnIndexSearchResult(NamedTuple):
    """What one segment's index adds to a fetch's aborted list, and whether later segments can be skipped."""

    aborted: list[AbortedTxn]
    complete: bool


def parse_entries(data: bytes, where: str) -> tuple[AbortedTxn, ...]:
    """The entries of a whole ``.txnindex``; CorruptIndex when it is not whole 34-byte version-0 entries."""
    if len(data) % ENTRY_BYTES:
        raise CorruptIndex(where, f"{len(data)} bytes is not a whole number of {ENTRY_BYTES}-byte entries")
    out = []
    for position in range(0, len(data), ENTRY_BYTES):
        version, *fields = ENTRY.unpack_from(data, position)
        if version != CURRENT_VERSION:
            raise CorruptIndex(where, f"entry at byte {position} has version {version}, expected {CURRENT_VERSION}")
        out.append(AbortedTxn(*fields))
    return tuple(out)


class TransactionIndex:
    """One segment's ``.txnindex``. See the module docstring."""

    def __init__(self, path: Path, start_offset: int) -> None:
        """Describe the index; touches no file. Writer thread."""
        self._path = path
        self._start_offset = start_offset
        self._entries: tuple[AbortedTxn, ...] | None = None  # None: not read yet
        self._load_lock = threading.Lock()
        self._created = False  # the file was created since the last flush: its directory entry needs an fsync
        self._failure = channel_for(path)  # every change of the file goes through it (core/logdirfailure.py)

    def __repr__(self) -> str:
        return f"TransactionIndex({str(self._path)!r}, start_offset={self._start_offset})"

    @property
    def path(self) -> Path:
        return self._path

    def entries(self) -> tuple[AbortedTxn, ...]:
        """Every entry, oldest first (an absent file has none). Any thread."""
        entries = self._entries
        if entries is None:
            with self._load_lock:
                if self._entries is None:
                    self._entries = self._read_file()
                entries = self._entries
        return entries

    def _read_file(self) -> tuple[AbortedTxn, ...]:
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            return ()
        except OSError as exc:
            raise StorageError(f"cannot read {self._path}: {exc.strerror}") from exc
        return parse_entries(data, str(self._path))

    # --- changes (writer thread) ------------------------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> None:
        """Add one aborted transaction; its marker offset must be above the last entry's. Writer thread."""
        entries = self.entries()
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise InvalidOffset(
                f"{self._path}: aborted transaction ending at {txn.last_offset} does not follow the last entry's "
                f"{entries[-1].last_offset} (lastOffset must strictly increase)"
            )
        created = not entries and not self._path.exists()
        self._failure.check()
        try:
            fd = os.open(self._path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, txn.encode())  # 34 bytes: one write, never split
            finally:
                os.close(fd)
        except OSError as exc:
            raise self._failure.fail(self._path, "write", exc) from exc
        self._entries = (*entries, txn)
        self._created = self._created or created

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset``. Writer thread."""
        entries = self.entries()
        keep = tuple(e for e in entries if e.last_offset < offset)
        if len(keep) != len(entries):
            self._truncate_file(len(keep) * ENTRY_BYTES)
            self._entries = keep

    def reset(self) -> None:
        """Empty the index (recovery rebuilds it); an absent file stays absent. Writer thread."""
        if self._path.exists():
            self._truncate_file(0)
        self._entries = ()

    def _truncate_file(self, size: int) -> None:
        self._change_file("truncate", lambda: os.truncate(self._path, size))

    def rename_to(self, new_path: Path) -> None:
        """Follow a rename of the segment (``.deleted``); an absent file is only renamed in name. Writer thread."""
        self._change_file("rename", lambda: os.rename(self._path, new_path))
        self._path = new_path

    def _change_file(self, verb: str, change: Callable[[], None]) -> None:
        """Apply ``change`` to the file: an absent one is fine (it is created with its first entry), any other
        failure takes the store offline (StoreOffline naming the file)."""
        self._failure.check()
        try:
            change()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise self._failure.fail(self._path, verb, exc) from exc

    def delete_if_exists(self) -> bool:
        """Unlink the file. Writer thread."""
        try:
            self._path.unlink()
        except FileNotFoundError:
            return False
        self._entries = ()
        return True

    # --- reads (any thread) -----------------------------------------------------------------------------------------

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """The entries overlapping ``[fetch_offset, upper_bound_offset)`` (``collectAbortedTxns``). Any thread."""
        found = []
        for txn in self.entries():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def sanity_check(self) -> None:
        """CorruptIndex when the file is not whole entries or an entry ends below the segment's base. Any thread."""
        entries = self._read_file()
        for txn in entries:
            if txn.last_offset < self._start_offset:
                raise CorruptIndex(
                    str(self._path),
                    f"last offset of aborted transaction {txn} is below the segment's base offset {self._start_offset}",
                )
        self._entries = entries

    def flush(self) -> None:
        """fsync the file if it exists (blocking). Any thread."""
        self._failure.check()
        try:
            fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise self._failure.fail(self._path, "open", exc) from exc
        try:
            os.fsync(fd)
        except OSError as exc:
            raise self._failure.fail(self._path, "fsync", exc) from exc
        finally:
            os.close(fd)
        if self._created:
            fsync_dir(self._path.parent)
            self._created = False


class HasTxnIndex(Protocol):
    @property
    def txn_index(self) -> TransactionIndex: ...


def collect_aborted(segments: Iterable[HasTxnIndex], fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
    """Kafka's ``collectAbortedTransactions``: ask the segments from the one holding ``fetch_offset`` on, stopping at
    the first whose search is complete (a transaction's marker may lie segments after its first offset)."""
    found: list[AbortedTxn] = []
    for segment in segments:
        result = segment.txn_index.collect(fetch_offset, upper_bound_offset)
        found.extend(result.aborted)
        if result.complete:
            break
    return found
