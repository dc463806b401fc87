"""Kafka's producer snapshot file (``<offset>.snapshot``): the producer state of a partition at one offset.

Rebuilding the producer state means replaying every batch with a producer id from the start of the log; a snapshot
bounds that to the batches after its offset (Kafka's ``ProducerStateManager.writeSnapshot``). The file is
named after the offset it describes (the state after every batch below it), zero-padded to 20 digits like a segment,
and one is written at every roll (named after the new segment's base) and at a clean close (at the LEO).

Layout, byte for byte Kafka's ``ProducerSnapshot`` version 1 (big-endian)::

    version                int16    1
    crc                    uint32   CRC-32C of every byte after this field (from byte 6 to the end)
    count                  int32    the producers that follow
    per producer, 46 bytes:
      producerId             int64
      epoch                  int16
      lastSequence           int32    of the newest retained batch; -1 when the producer has none
      lastOffset             int64    of that batch; -1 when none
      offsetDelta            int32    lastOffset - that batch's first offset; 0 when none
      timestamp              int64    the producer's last timestamp (its newest batch or marker)
      coordinatorEpoch       int32
      currentTxnFirstOffset  int64    first offset of its open transaction; -1 when none

Example: one producer 5, epoch 2, whose last batch held sequences 10..14 at offsets 100..104 (timestamp 1000),
coordinator epoch -1, no open transaction: ``0001 <crc> 00000001 0000000000000005 0002 0000000e 0000000000000068
00000004 00000000000003e8 ffffffff ffffffffffffffff``. Only the newest batch of each producer is kept, so a reloaded
state recognises only that batch as a duplicate (as Kafka's does).

A file that is too short, has another version, a count that does not match its length, or a CRC mismatch is
:class:`CorruptSnapshot`; the loader skips it (with a warning) for an older one or an empty state.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

import crc32c as _crc32c

from logfs.core.durable import fsync_dir
from logfs.core.errors import CorruptSnapshot
from logfs.core.logdirfailure import channel_for_dir

SNAPSHOT_SUFFIX = ".snapshot"
VERSION = 1
VERSION_AND_CRC = struct.Struct(">hI")
COUNT = struct.Struct(">i")
PRODUCER = struct.Struct(">qhiqiqiq")
CRC_OFFSET = 2
ENTRIES_OFFSET = 6  # what the CRC covers starts here
PRODUCER_BYTES = 46
assert VERSION_AND_CRC.size == ENTRIES_OFFSET
assert PRODUCER.size == PRODUCER_BYTES


class SnapshotEntry(NamedTuple):
    """One producer as a snapshot stores it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def snapshot_path(directory: Path, offset: int) -> Path:
    """``<directory>/<offset, 20 digits>.snapshot``."""
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offset(name: str) -> int | None:
    """The offset a snapshot file's name encodes, or None when ``name`` is not a snapshot's."""
    if not name.endswith(SNAPSHOT_SUFFIX):
        return None
    stem = name[: -len(SNAPSHOT_SUFFIX)]
    return int(stem) if stem.isdigit() else None


def encode_snapshot(entries: list[SnapshotEntry]) -> bytes:
    """The whole file for ``entries``."""
    out = bytearray(ENTRIES_OFFSET + COUNT.size + PRODUCER_BYTES * len(entries))
    COUNT.pack_into(out, ENTRIES_OFFSET, len(entries))
    position = ENTRIES_OFFSET + COUNT.size
    for e in entries:
        PRODUCER.pack_into(out, position, *e)
        position += PRODUCER_BYTES
    crc = _crc32c.crc32c(memoryview(out)[ENTRIES_OFFSET:])
    VERSION_AND_CRC.pack_into(out, 0, VERSION, crc)
    return bytes(out)


def decode_snapshot(data: bytes, where: str) -> list[SnapshotEntry]:
    """The entries of a whole snapshot file; CorruptSnapshot when it fails a check."""
    if len(data) < ENTRIES_OFFSET + COUNT.size:
        raise CorruptSnapshot(where, f"{len(data)} bytes is shorter than the 10-byte header")
    version, crc = VERSION_AND_CRC.unpack_from(data)
    if version != VERSION:
        raise CorruptSnapshot(where, f"version {version}, expected {VERSION}")
    actual = _crc32c.crc32c(memoryview(data)[ENTRIES_OFFSET:])
    if actual != crc:
        raise CorruptSnapshot(where, f"CRC-32C mismatch: stored {crc:08x}, computed {actual:08x}")
    (count,) = COUNT.unpack_from(data, ENTRIES_OFFSET)
    expected = ENTRIES_OFFSET + COUNT.size + count * PRODUCER_BYTES
    if count < 0 or expected != len(data):
        raise CorruptSnapshot(where, f"{count} producers do not fill {len(data)} bytes")
    start = ENTRIES_OFFSET + COUNT.size
    return [SnapshotEntry._make(PRODUCER.unpack_from(data, start + i * PRODUCER_BYTES)) for i in range(count)]


def sync_snapshot_files(paths: list[Path], directory: Path) -> None:
    """fsync snapshot files and their directory (one already deleted by a truncation is skipped). Blocking.
    StoreOffline when one fails (``core/logdirfailure.py``: the store goes offline) or the store is offline."""
    failure = channel_for_dir(directory)
    for path in paths:
        failure.check()
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise failure.fail(path, "open", exc) from exc
        try:
            os.fsync(fd)
        except OSError as exc:
            raise failure.fail(path, "fsync", exc) from exc
        finally:
            os.close(fd)
    if paths:
        fsync_dir(directory)
