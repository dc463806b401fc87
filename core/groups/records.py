"""Kafka's offset-commit records in ``__consumer_offsets``: the key (version 1) and the value (version 3), and the
rule for which partition of that topic holds a group.

Layouts (Kafka's ``OffsetCommitKey.json`` / ``OffsetCommitValue.json`` in group-coordinator's
``common/message``; every integer big-endian, a string an int16 byte length then UTF-8)::

    key, version 1 (version 0 has the same fields; 2 is a group-metadata key, never an offset commit)
        version          int16   1
        group            string
        topic            string
        partition        int32

    value, version 3 (what Kafka 2.1 … 3.x writes for a commit without a per-commit expiry:
    MetadataVersion.offsetCommitValueVersion(false) == 3)
        version          int16   3
        offset           int64
        leaderEpoch      int32   -1 when unknown
        metadata         string  "" when none
        commitTimestamp  int64   ms

    value versions 0 and 2 lack leaderEpoch; version 1 carries expireTimestamp (int64) after commitTimestamp.
    A tombstone (null value) deletes the key's commit: how Kafka deletes a group's offsets.

Worked example (Kafka's RecordHelpersTest values): group "group-id", topic "foo", partition 1 →
``0001 0008 67726f75702d6964 0003 666f6f 00000001``; offset 100, leader epoch 10, metadata "metadata", commit
timestamp 1234 → ``0003 0000000000000064 0000000a 0008 6d65746164617461 00000000000004d2``.

Which partition: ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`` (Kafka's
GroupMetadataManager.partitionFor), with Java's String.hashCode over UTF-16 code units and Utils.abs mapping
Integer.MIN_VALUE to 0.

Threads: any (pure functions).
"""

from __future__ import annotations

from dataclasses import dataclass

from logfs.core.errors import InvalidOffsetCommit
from logfs.core.format.fields import I16, I32, I64, FieldReader, string

OFFSETS_TOPIC = "__consumer_offsets"  # Kafka's internal topic name (Topic.GROUP_METADATA_TOPIC_NAME)
OFFSETS_TOPIC_PARTITIONS = 50  # offsets.topic.num.partitions, Kafka's default
KEY_VERSION = 1  # the offset-commit key version Kafka writes
VALUE_VERSION = 3  # the offset-commit value version Kafka 2.1 … 3.x writes
GROUP_METADATA_KEY_VERSION = 2  # a group's metadata record: not an offset commit (skipped on replay)
NO_LEADER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str = ""
    commit_timestamp: int = 0
    leader_epoch: int = NO_LEADER_EPOCH
    expire_timestamp: int = -1  # only version 1 carries it


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: s[0]*31^(n-1) + … + s[n-1] over UTF-16 code units, as a signed int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for_group(group: str, partitions: int = OFFSETS_TOPIC_PARTITIONS) -> int:
    """The ``__consumer_offsets`` partition that holds ``group``'s commits (Kafka's partitionFor)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def _string(text: str) -> bytes:
    return string(text, InvalidOffsetCommit)


def encode_key(key: OffsetCommitKey) -> bytes:
    """The key record bytes, version 1."""
    return I16.pack(KEY_VERSION) + _string(key.group) + _string(key.topic) + I32.pack(key.partition)


def encode_value(value: OffsetCommitValue) -> bytes:
    """The value record bytes, version 3 (``expire_timestamp`` is not part of it)."""
    return (
        I16.pack(VALUE_VERSION)
        + I64.pack(value.offset)
        + I32.pack(value.leader_epoch)
        + _string(value.metadata)
        + I64.pack(value.commit_timestamp)
    )


def decode_key(data: bytes) -> OffsetCommitKey | None:
    """An offset-commit key (version 0 or 1); None for a group-metadata key (version 2); InvalidOffsetCommit for
    anything else."""
    r = FieldReader(data, "an offset-commit key", InvalidOffsetCommit)
    version = r.take(I16)
    if version == GROUP_METADATA_KEY_VERSION:
        return None
    if version not in (0, 1):
        raise InvalidOffsetCommit(f"key version {version} is not one of Kafka's (0, 1, 2)")
    return OffsetCommitKey(r.string(), r.string(), r.take(I32))


def decode_value(data: bytes) -> OffsetCommitValue:
    """An offset-commit value of versions 0 to 3."""
    r = FieldReader(data, "an offset-commit value", InvalidOffsetCommit)
    version = r.take(I16)
    if version not in (0, 1, 2, 3):
        raise InvalidOffsetCommit(f"value version {version} is not one this reader knows (0 to 3)")
    offset = r.take(I64)
    leader_epoch = r.take(I32) if version == 3 else NO_LEADER_EPOCH
    metadata = r.string()
    commit_timestamp = r.take(I64)
    expire_timestamp = r.take(I64) if version == 1 else -1
    return OffsetCommitValue(offset, metadata, commit_timestamp, leader_epoch, expire_timestamp)
