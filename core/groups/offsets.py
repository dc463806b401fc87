"""Consumer groups' committed offsets: the latest commit per group, topic and partition, kept by replaying the
``__consumer_offsets`` topic (Kafka's GroupMetadataManager.loadGroupsAndOffsets, offsets only), and the commit and
delete records written to it.

Theory of operation.

* **The log is the truth.** :class:`GroupOffsets` holds nothing the log does not: for each partition of
  ``__consumer_offsets`` it remembers the offset it has replayed up to, and :meth:`GroupOffsets.catch_up` reads
  the records after it (up to a bound the caller chooses: the log end on a leader, which has just appended its own
  commits, the high watermark on a follower). A later record of a key replaces the earlier one; a tombstone (null
  value) removes it, as compaction would. So a follower's mount, a promoted follower and a remounted store all
  answer from the same records, and a node that becomes leader has loaded every commit it replicated.
* **A truncated partition** (a follower that dropped a divergent tail; a partition recreated) is replayed from its
  log start: the groups that partition holds are forgotten first.
* **Commits are checked before they are written** (:func:`parse_commit`, :func:`check_commit_offset`): a
  malformed line, or an offset below the log start offset or above the log end offset of the committed partition,
  raises InvalidOffsetCommit and nothing is written.
* **The topic** is created at the first commit (:func:`ensure_offsets_topic`) with Kafka's partition count and
  ``cleanup.policy=compact``.

Threads: :class:`GroupOffsets` is locked (any thread); :meth:`~GroupOffsets.catch_up` reads segment files (a
worker thread).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from logfs.core.errors import InvalidOffsetCommit
from logfs.core.format.batch import Record
from logfs.core.format.encode import encode_batch
from logfs.core.groups.records import (
    OFFSETS_TOPIC,
    OFFSETS_TOPIC_PARTITIONS,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    partition_for_group,
)
from logfs.core.log.log import Log
from logfs.core.log.replay import replay_records
from logfs.core.store import Store

METADATA_BYTES_MAX = 4096  # offset.metadata.max.bytes, Kafka's default
# The topic's config as Kafka's GroupCoordinator.groupMetadataTopicConfigs creates it (offsets.topic.segment.bytes).
OFFSETS_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024)}

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Commit:
    """One committed offset, as the latest record of its key says."""

    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int


def parse_commit(line: bytes) -> tuple[int, str]:
    """``<offset>[ <metadata>]`` (one line, its newline removed) → (offset, metadata); InvalidOffsetCommit otherwise."""
    text = line.decode("utf-8", "replace")
    offset_text, _, metadata = text.partition(" ")
    if not offset_text.isascii() or not offset_text.isdigit():
        raise InvalidOffsetCommit(f"{text[:80]!r} is not '<offset>[ <metadata>]'")
    if len(metadata.encode()) > METADATA_BYTES_MAX:
        raise InvalidOffsetCommit(f"metadata of {len(metadata.encode())} bytes is over {METADATA_BYTES_MAX}")
    return int(offset_text), metadata


def check_commit_offset(log: Log, topic: str, partition: int, offset: int) -> None:
    """InvalidOffsetCommit unless log start offset ≤ ``offset`` ≤ log end offset."""
    start, end = log.log_start_offset, log.log_end_offset
    if not start <= offset <= end:
        raise InvalidOffsetCommit(
            f"offset {offset} of {topic}-{partition} is outside [log start {start}, log end {end}]"
        )


def commit_batch(group: str, commits: Iterable[tuple[str, int, int, str]], now_ms: int) -> bytes:
    """One batch of offset-commit records: (topic, partition, offset, metadata) each, keys v1 and values v3."""
    records = [
        Record(i, now_ms, encode_key(OffsetCommitKey(group, topic, partition)),
               encode_value(OffsetCommitValue(offset, metadata, now_ms)))
        for i, (topic, partition, offset, metadata) in enumerate(commits)
    ]  # fmt: skip
    return encode_batch(records)


def tombstone_batch(group: str, keys: Iterable[TopicPartitionKey], now_ms: int) -> bytes:
    """One batch of tombstones (null values) that delete ``group``'s commits of ``keys``."""
    records = [
        Record(i, now_ms, encode_key(OffsetCommitKey(group, topic, partition)), None)
        for i, (topic, partition) in enumerate(keys)
    ]
    return encode_batch(records)


def ensure_offsets_topic(store: Store, partitions: int = OFFSETS_TOPIC_PARTITIONS) -> None:
    """Create ``__consumer_offsets`` (compacted, 100 MiB segments, ``partitions`` partitions) unless it exists.
    Blocks."""
    store.ensure_internal_topic(OFFSETS_TOPIC, partitions, OFFSETS_TOPIC_CONFIG)


class GroupOffsets:
    """The latest commit of every group, topic and partition, replayed from ``__consumer_offsets``. Any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._commits: dict[str, dict[TopicPartitionKey, Commit]] = {}
        self._replayed: dict[int, int] = {}  # partition of __consumer_offsets → next offset to replay
        self._partition_ids: dict[int, int] = {}  # partition → id() of the Log replayed (a recreated topic differs)

    # --- reading ------------------------------------------------------------------------------------------------

    def groups(self) -> list[str]:
        with self._lock:
            return sorted(g for g, commits in self._commits.items() if commits)

    def commits(self, group: str) -> dict[TopicPartitionKey, Commit]:
        with self._lock:
            return dict(self._commits.get(group, {}))

    def committed(self, group: str, topic: str, partition: int) -> Commit | None:
        with self._lock:
            return self._commits.get(group, {}).get((topic, partition))

    # --- replay -------------------------------------------------------------------------------------------------

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """One record of ``__consumer_offsets``: a commit replaces its key's, a tombstone removes it. Group-metadata
        records and records without a key are skipped (Kafka's loader skips what it does not own)."""
        if key is None:
            return
        decoded = decode_key(key)
        if decoded is None:
            return
        tp = (decoded.topic, decoded.partition)
        with self._lock:
            if value is None:
                commits = self._commits.get(decoded.group)
                if commits is not None:
                    commits.pop(tp, None)
                    if not commits:
                        del self._commits[decoded.group]
                return
            v = decode_value(value)
            self._commits.setdefault(decoded.group, {})[tp] = Commit(
                v.offset, v.metadata, v.commit_timestamp, v.leader_epoch
            )

    def catch_up(self, store: Store, bound: Callable[[Log], int], partitions: Iterable[int] | None = None) -> None:
        """Replay what ``__consumer_offsets`` holds below ``bound(log)`` that was not replayed yet, in ``partitions``
        (default: all). Blocking reads: a worker thread. Callers serialise catch-ups (one at a time)."""
        if not store.has_topic(OFFSETS_TOPIC):
            self._forget_all()
            return
        existing = store.partitions(OFFSETS_TOPIC)
        for p in existing if partitions is None else [p for p in partitions if p in existing]:
            log = store.log(OFFSETS_TOPIC, p)
            self._catch_up_partition(p, log, bound(log), len(existing))

    def _catch_up_partition(self, p: int, log: Log, end: int, count: int) -> None:
        start = self._replayed.get(p)
        if start is None or self._partition_ids.get(p) != id(log) or log.log_end_offset < start or end < start:
            self._forget_partition(p, count)  # first time, a recreated topic, or a truncated tail: from the start
            self._partition_ids[p] = id(log)
            start = log.log_start_offset
        self._replayed[p] = replay_records(log, max(start, log.log_start_offset), end, self.apply)

    def _forget_partition(self, p: int, count: int) -> None:
        with self._lock:
            for group in [g for g in self._commits if partition_for_group(g, count) == p]:
                del self._commits[group]
        self._replayed.pop(p, None)

    def _forget_all(self) -> None:
        with self._lock:
            self._commits.clear()
        self._replayed.clear()
        self._partition_ids.clear()
