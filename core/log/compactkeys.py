"""Keyless records refused on compacted topics (Kafka's ``LogValidator.validateKey``; docs/mount.md, "Compacted
topics").

The cleaner keeps the latest record *per key*, so a record without a key has no place in a compacted log: Kafka's
leader refuses the whole batch that carries one (INVALID_RECORD, "Compacted topic cannot accept message without
key"), and logfs refuses the whole request (one write(2)) before a byte of it is stored. A tombstone (a key with a
null value) is a keyed record and passes. Batches a follower appends are not checked (the leader did, and keyless
records written before a policy change are the cleaner's to drop), nor are control batches.

Cost: only a topic whose ``cleanup.policy`` contains ``compact`` pays anything: one extra walk of each batch's
records (the compiled walker, after inflating a compressed batch), which reads the key lengths only.

Threads: any (pure).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from logfs.core.config import LogConfig
from logfs.core.errors import NoKeyOnCompactedTopic
from logfs.core.format.batch import read_header
from logfs.core.format.decode import record_columns

NULL_LENGTH = -1  # a null key's length in the record format


def check_keys(batches: Sequence[bytes | bytearray | memoryview], config: LogConfig) -> None:
    """Raise NoKeyOnCompactedTopic for the first keyless record of ``batches`` (validated producer batches, each
    starting at byte 0) when the topic is compacted; do nothing otherwise."""
    if not config.compact:
        return
    for batch_index, batch in enumerate(batches):
        if read_header(batch).is_control:
            continue
        _, columns = record_columns(batch)
        lengths = columns.key_length
        if isinstance(lengths, np.ndarray):
            missing = np.flatnonzero(lengths == NULL_LENGTH)
            first = int(missing[0]) if missing.size else -1
        else:
            first = lengths.index(NULL_LENGTH) if NULL_LENGTH in lengths else -1
        if first >= 0:
            raise NoKeyOnCompactedTopic(
                f"Compacted topic cannot accept message without key (record {first} of batch {batch_index} of the "
                "write has none; cleanup.policy contains compact, which keeps the latest record per key)",
                batch_index=batch_index, record_index=first,
            )  # fmt: skip
