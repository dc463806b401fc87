"""A store-wide bound on open descriptors and index mappings: a least-recently-used set of open segments.

Each segment holds up to three descriptors while open (its ``.log`` and, mapped, its ``.index`` and
``.timeindex``), and opens them on demand. A store of 1,000 partitions or a partition of 10,000 segments must not
hold them all: every segment *touches* the cache when it opens something, and the cache asks the least recently
used segments beyond ``max_open`` to give theirs back (:meth:`Closable.close_handler`); a segment that is pinned by
a reader may decline and stays open, outside the LRU until its pin is released. Memory stays O(segments);
descriptors stay O(max_open + pinned segments + segments being read at that moment): a victim in the middle of a read
closes its descriptor when the read ends, so eviction never waits.

Thread-safe: one lock guards the order; close_handler calls run outside it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol

# 3 descriptors a segment: 256 open segments is ~768 descriptors, well inside a default 1,024 soft limit together
# with FUSE handles and sockets; active segments of 256 partitions stay open under a steady load.
MAX_OPEN_SEGMENTS_DEFAULT = 256


class Closable(Protocol):
    def close_handler(self, *, wait: bool = True) -> bool:
        """Give back descriptors and mappings; False if busy (pinned, or leased with ``wait=False``: then the
        descriptor goes when the lease ends) and still open."""
        ...


class HandleCache:
    """LRU of segments with open descriptors. Any thread."""

    def __init__(self, max_open: int = MAX_OPEN_SEGMENTS_DEFAULT) -> None:
        if max_open < 1:
            raise ValueError("max_open must be at least 1")
        self._max_open = max_open
        self._lock = threading.Lock()
        self._open: OrderedDict[int, Closable] = OrderedDict()

    @property
    def max_open(self) -> int:
        return self._max_open

    def __len__(self) -> int:
        return len(self._open)

    def touch(self, owner: Closable) -> None:
        """Record a use of ``owner``'s descriptors; close those of the least recently used beyond the bound."""
        victims: list[Closable] = []
        with self._lock:
            self._open[id(owner)] = owner
            self._open.move_to_end(id(owner))
            excess = len(self._open) - self._max_open
            if excess > 0:
                for key in list(self._open)[:excess]:
                    victims.append(self._open.pop(key))
        for victim in victims:
            # A pinned victim declines and stays open; it leaves the LRU so that it is not asked again on every
            # touch (with 1,500 pinned segments that retry made each use ~1 ms). Its pin's release touches it back in.
            # Never waits for a victim's reads (close_handler(wait=False)): the toucher may hold a lease of its own,
            # and two segments evicting each other while both are read would wait for each other forever.
            victim.close_handler(wait=False)

    def forget(self, owner: Closable) -> None:
        """Drop ``owner`` (it closed its descriptors itself, or is deleted)."""
        with self._lock:
            self._open.pop(id(owner), None)
