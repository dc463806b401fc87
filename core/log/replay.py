"""Reading an internal topic's records in offset order, as a coordinator loads its partitions (Kafka's
GroupMetadataManager / TransactionStateManager loading ``__consumer_offsets`` / ``__transaction_state``): every data
record's key and value from one offset to a bound, control batches skipped, gaps the cleaner left passed over.

Shared by the consumer groups' offsets (core/groups/offsets.py) and the committed labels (core/txn/labellog.py),
which each keep where they stopped per partition and apply records as their own rules say.

Threads: blocking reads of segment files: a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable

from logfs.core.format.batch import iter_batch_positions, read_header
from logfs.core.format.decode import decode_records
from logfs.core.log.log import Log
from logfs.core.replication.fetch import read_batches

REPLAY_BYTES_MAX = 1024 * 1024  # one read during a replay


def replay_records(log: Log, start: int, end: int, apply: Callable[[bytes | None, bytes | None], None]) -> int:
    """``apply(key, value)`` for every data record of ``log`` from ``start`` (at or above the log start) below
    ``end``, in order; the offset replayed up to (``end`` unless a gap the cleaner left reaches it)."""
    while start < end:
        buf, _ = read_batches(log, start, end, REPLAY_BYTES_MAX, room=0)
        before = start
        for position, _size in iter_batch_positions(buf):
            header = read_header(buf, position)
            if not header.is_control:
                for record in decode_records(buf, position):
                    if start <= record.offset < end:
                        apply(record.key, record.value)
            start = max(start, header.last_offset + 1)
        if start == before:
            break  # nothing below ``end`` (a gap the cleaner left reaches it)
    return start
