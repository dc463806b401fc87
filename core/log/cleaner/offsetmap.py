"""The log cleaner's offset map: the latest offset of each key in a log's dirty section (Kafka's SkimpyOffsetMap).

Kafka's map is a flat array of 24-byte slots (an MD5 of the key and an offset) sized by
``log.cleaner.dedupe.buffer.size`` over the cleaner threads, filled to at most ``floor(slots * load factor)``
distinct keys per round (docs/compaction.md, "Configuration"): 5,033,164 keys at the defaults. This one keeps Kafka's
*capacity* rule exactly — ``slots = memory // 24``, ``capacity = floor(slots * 0.9)``, and the "is it full" test counts
distinct keys even when the key is already in the map (so a round stops at the same record as Kafka's) — but stores the
entries in a Python dict, which is faster to fill from Python than hashing into an array. What identifies a key: the key
bytes themselves when they are at most 16 bytes long, else their MD5 (Kafka's hash), so memory stays near Kafka's per
key for long keys and a short key costs no hashing; two long keys with one MD5 are one key, as in Kafka.

Memory: a dict entry costs ~100 bytes of Python objects where Kafka's costs 24, so the map uses about four times the
configured buffer when it is full; docs/compaction.md says so.

Threads: one cleaner owns a map for a round; not shared.
"""

from __future__ import annotations

import hashlib

SLOT_BYTES = 24  # Kafka: 16 bytes of MD5 and an 8-byte offset
LOAD_FACTOR = 0.9  # log.cleaner.io.buffer.load.factor's default (the dedupe map's load factor, despite the name)
SHORT_KEY_BYTES = 16  # keys this long or shorter identify themselves (an MD5 is as long)


def key_id(key: bytes) -> bytes:
    """What the map knows a key by: the key itself, or its MD5 when longer than 16 bytes."""
    return key if len(key) <= SHORT_KEY_BYTES else hashlib.md5(key, usedforsecurity=False).digest()


class OffsetMap:
    """``key → latest offset`` over one round's dirty section, with Kafka's capacity for ``memory`` bytes."""

    __slots__ = ("_entries", "capacity", "latest_offset", "slots")

    def __init__(self, memory: int, load_factor: float = LOAD_FACTOR) -> None:
        """A map for ``memory`` bytes (one cleaner thread's share of log.cleaner.dedupe.buffer.size). ValueError,
        with Kafka's words, when it cannot hold even one key."""
        self.slots = memory // SLOT_BYTES
        self.capacity = int(self.slots * load_factor)
        if self.capacity < 1:
            raise ValueError(
                "offset map is too small to fit in even a single message, so log cleaning will never make "
                "progress. You can increase log.cleaner.dedupe.buffer.size or decrease log.cleaner.threads"
            )
        self._entries: dict[bytes, int] = {}
        self.latest_offset = -1

    @classmethod
    def with_capacity(cls, keys: int) -> OffsetMap:
        """A map that takes exactly ``keys`` distinct keys (tests, Kafka's ``makeCleaner(n)`` with its 0.75)."""
        offset_map = cls(SLOT_BYTES * max(keys, 1), 1.0)
        offset_map.capacity = keys
        return offset_map

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def full(self) -> bool:
        """Kafka's ``size >= maxDesiredMapSize``: no more puts this round, not even of a key already in it."""
        return len(self._entries) >= self.capacity

    @property
    def utilization(self) -> float:
        """``size / slots``, the max-buffer-utilization-percent gauge's ratio."""
        return len(self._entries) / self.slots if self.slots else 0.0

    @property
    def entries(self) -> dict[bytes, int]:
        """The map itself, by :func:`key_id`, for the cleaner's per-record loops (a method call per record costs
        more than the lookup). Read it; fill it with :meth:`put`."""
        return self._entries

    def put(self, key: bytes, offset: int) -> None:
        self._entries[key_id(key)] = offset
        self.latest_offset = offset

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``; -1 when the map does not have it."""
        return self._entries.get(key_id(key), -1)

    def clear(self) -> None:
        self._entries.clear()
        self.latest_offset = -1
