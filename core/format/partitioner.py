"""Kafka's default partitioner: which partition a keyed record goes to (docs/mount.md, "Writes").

A record with a non-null key goes to ``toPositive(murmur2(key)) % partitions``, exactly as Kafka's
``BuiltInPartitioner.partitionForKey`` computes it, so a Kafka producer and a write to ``MOUNT/<topic>/append.jsonl``
put the same key in the same partition. ``murmur2`` is a line-by-line port of ``org.apache.kafka.common.utils
.Utils.murmur2`` (32-bit arithmetic, Java's ``>>>``, seed ``0x9747b28c``, the switch's fall-through over the
last 1-3 bytes); ``to_positive`` is ``Utils.toPositive`` (``& 0x7fffffff``, not ``abs``).

Records with a null key are spread by the caller (the mount's sticky rule: each batch to the next partition in
turn); nothing here keeps state. Pure functions: any thread.
"""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data`` as a signed 32-bit int (Java's int)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    end4 = length & ~3
    for i in range(0, end4, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    tail = length & 3
    if tail == 3:
        h ^= data[end4 + 2] << 16
    if tail >= 2:
        h ^= data[end4 + 1] << 8
    if tail >= 1:
        h ^= data[end4]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (so ``Integer.MIN_VALUE`` maps to 0, unlike ``abs``)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null ``key`` among ``partitions``."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {partitions}")
    return to_positive(murmur2(key)) % partitions
