"""Producer ids that are never handed out twice, even across a kill -9: Kafka's ProducerIdManager on one file.

Rule: an id is handed out only after the end of the block that holds it is on disk. Kafka's ZooKeeper-era
ProducerIdManager reserves blocks of 1,000 ids by writing the block's end to ``/latest_producer_id_block`` before it
serves any id of the block; a broker that dies mid-block loses the rest of it, and its successor starts after the
reserved end. Here the block lives in a plain file at the store's root (a Kafka broker refuses any *directory* of a
log dir that is not ``<topic>-<partition>``, but ignores files)::

    STORE/.logfs-producer-ids    {"version":1,"block_start":"2000","block_end":"2999"}

The content is Kafka's znode JSON without the broker field (one store, one owner); the numbers are strings, as
Kafka writes its longs. The file is replaced atomically (``durable.replace_file``: ``.tmp``, fsync, rename, fsync
of the directory), so a crash leaves the old block or the new one. Ids start at 0, Kafka's first.

Reading: no file is a fresh store (the first block is 0 … 999). Anything else that does not parse (an empty file,
a bad version, a block that ends before it starts) raises CorruptCheckpoint: restarting at 0 would reuse ids that
live in the logs, which is what this module exists to prevent. A promoted follower, whose file is its own, can move
the counter past the ids it found in its replicated logs with :meth:`ProducerIdAllocator.advance_past`.

Threads: every method may be called from any thread; a lock serialises them. :meth:`allocate` blocks on the disk
(two fsyncs) once per block, so keep it off the trio thread.
"""

from __future__ import annotations

import errno
import json
import threading
from dataclasses import dataclass
from pathlib import Path

from logfs.core.durable import replace_file
from logfs.core.errors import CorruptCheckpoint, DiskFull, StorageError

PRODUCER_IDS_FILE = ".logfs-producer-ids"
PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE (ZooKeeper's PidBlockSize)
PRODUCER_ID_MAX = 2**63 - 1  # a producer id is a long; -1 means "none" in a batch header
FORMAT_VERSION = 1  # Kafka's ProducerIdBlockZNode.CurrentVersion
_MAX_FILE_BYTES = 4096  # the JSON is under 100 bytes; anything much larger is not ours

assert PRODUCER_ID_BLOCK_SIZE >= 1


@dataclass(frozen=True)
class ProducerIdBlock:
    """The ids ``first`` … ``last`` (both included), reserved on disk as one block."""

    first: int
    last: int

    def __post_init__(self) -> None:
        assert 0 <= self.first <= self.last <= PRODUCER_ID_MAX, self


def encode_block(block: ProducerIdBlock) -> bytes:
    """The file's bytes for ``block``."""
    body = {"version": FORMAT_VERSION, "block_start": str(block.first), "block_end": str(block.last)}
    return (json.dumps(body, separators=(",", ":")) + "\n").encode()


def decode_block(path: Path, data: bytes) -> ProducerIdBlock:
    """The block in the file's bytes; CorruptCheckpoint naming ``path`` when they are not a valid block."""
    try:
        body = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise CorruptCheckpoint(str(path), f"not a producer id block: {exc}") from exc
    if not isinstance(body, dict):
        raise CorruptCheckpoint(str(path), "not a JSON object")
    if body.get("version") != FORMAT_VERSION:
        raise CorruptCheckpoint(str(path), f"unrecognised version {body.get('version')!r}, expected {FORMAT_VERSION}")
    fields: list[int] = []
    for key in ("block_start", "block_end"):
        text = body.get(key)
        if not isinstance(text, str) or not text.isascii() or not text.isdigit():
            raise CorruptCheckpoint(str(path), f"{key} is {text!r}, not a decimal string")
        fields.append(int(text))
    first, last = fields
    if not first <= last <= PRODUCER_ID_MAX:
        raise CorruptCheckpoint(str(path), f"block {first} … {last} is not a valid range of producer ids")
    return ProducerIdBlock(first, last)


class ProducerIdAllocator:
    """Hands out producer ids 0, 1, 2 … of the store at ``root``, reserving them on disk a block at a time.

    The constructor reads the file (CorruptCheckpoint if damaged) and writes nothing; the first :meth:`allocate`
    reserves the block after the one on disk. Any thread.
    """

    def __init__(self, root: Path, *, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be at least 1, not {block_size}")
        self.path = Path(root) / PRODUCER_IDS_FILE
        self.block_size = block_size
        self._lock = threading.Lock()
        reserved = self._read()
        # The next id to hand out and the last one reserved on disk; next > reserved_last means "reserve first".
        self._next = 0 if reserved is None else reserved.last + 1
        self._reserved_last = self._next - 1

    def _read(self) -> ProducerIdBlock | None:
        try:
            with open(self.path, "rb") as f:
                data = f.read(_MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"cannot read {self.path}: {exc.strerror or exc}") from exc
        if len(data) > _MAX_FILE_BYTES:
            raise CorruptCheckpoint(str(self.path), f"larger than {_MAX_FILE_BYTES} bytes")
        return decode_block(self.path, data)

    def allocate(self) -> int:
        """A producer id never handed out before in this store. Any thread; blocks on the disk once per block.

        DiskFull or StorageError when the next block cannot be reserved (no id is handed out then).
        """
        with self._lock:
            if self._next > self._reserved_last:
                self._reserve(self._next)
            producer_id = self._next
            self._next += 1
            return producer_id

    def advance_past(self, producer_id: int) -> None:
        """Make every later :meth:`allocate` answer more than ``producer_id`` (durably, when that moves the counter).

        For a store whose logs hold producer ids this file never handed out: a promoted follower's, or one whose
        file was restored from elsewhere. Any thread; blocks on the disk.
        """
        if not 0 <= producer_id < PRODUCER_ID_MAX:
            raise ValueError(f"producer id {producer_id} is outside [0, {PRODUCER_ID_MAX})")
        with self._lock:
            if producer_id >= self._next:
                self._reserve(producer_id + 1)
                self._next = producer_id + 1

    def peek(self) -> int:
        """The id the next :meth:`allocate` hands out (tests and ``.logfs/metrics``). Any thread."""
        with self._lock:
            return self._next

    def _reserve(self, first: int) -> None:
        if first > PRODUCER_ID_MAX - self.block_size + 1:
            raise StorageError(f"producer ids exhausted in {self.path}: no block of {self.block_size} after {first}")
        block = ProducerIdBlock(first, first + self.block_size - 1)
        data = encode_block(block)
        assert decode_block(self.path, data) == block  # validate twice: what is written must read back as the block
        try:
            replace_file(self.path, data)
        except OSError as exc:
            error = DiskFull if exc.errno in (errno.ENOSPC, errno.EDQUOT) else StorageError
            raise error(f"cannot reserve producer ids {block.first} … {block.last} in {self.path}: {exc}") from exc
        self._reserved_last = block.last
