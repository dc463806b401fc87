"""When a segment rolls (Kafka's ``LogSegment.shouldRoll`` and its state): the roll rules of one segment, and the clock
segment.ms counts on.

Why apart from the segment. The rules need a few pieces of state nothing else in ``core/log/segment.py`` reads: when
the segment was created (reset when a truncation empties it), the timestamp segment.ms counts from (the first batch's
max timestamp, read once from the ``.log``) and the jitter drawn for it. :class:`SegmentRoll` owns them; the segment
tells it of a first append, a truncation to empty and a recovery, and lends it the ``.log`` and the two indexes (a
full index rolls too). The rules come out as :class:`RollBounds`, worked out once, so that a multi-batch append asks
them of each batch (``core/log/appendruns.py``) without asking the segment again.

Threads: the log's writer thread (the roll rules are asked under the log's lock, ``core/log/local.py``).
"""

from __future__ import annotations

import random
from typing import NamedTuple

from logfs.core.format.varint import INT32_MAX
from logfs.core.log.index import OffsetIndex, TimeIndex
from logfs.core.log.logfile import LogFile


class RollBounds(NamedTuple):
    """When an append to a segment rolls it first (``SegmentRoll.roll_bounds``): Kafka's roll rules, worked out."""

    bytes_left: int  # an append of more bytes rolls (segment.bytes)
    max_timestamp: int | None  # an append with a later max timestamp rolls (segment.ms); None: no such bound
    min_offset: int  # an append ending outside [min_offset, max_offset] rolls (relative-offset overflow)
    max_offset: int
    now: bool  # every append rolls: a full index, or segment.ms passed by the wall clock

    def rolls(self, size: int, max_timestamp: int, last_offset: int) -> bool:
        return (
            self.now
            or size > self.bytes_left
            or (self.max_timestamp is not None and max_timestamp > self.max_timestamp)
            or not self.min_offset <= last_offset <= self.max_offset
        )


class SegmentRoll:
    """The roll rules of one segment and the state they count on (``LogSegment.roll``). See the module docstring."""

    def __init__(
        self,
        log: LogFile,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        base_offset: int,
        *,
        roll_jitter_ms: int,
        created_ms: int,
    ) -> None:
        self._log = log
        self._offset_index = offset_index
        self._time_index = time_index
        self._base_offset = base_offset
        self.roll_jitter_ms = roll_jitter_ms
        self._created_ms = created_ms
        self._rolling_based_timestamp: int | None = None

    def first_append(self, max_timestamp: int) -> None:
        """The empty segment's first append: segment.ms counts from its max timestamp."""
        self._rolling_based_timestamp = max_timestamp

    def emptied(self, now_ms: int) -> None:
        """A truncation left the segment empty: it counts as created at ``now_ms``."""
        self._created_ms = now_ms
        self._rolling_based_timestamp = None

    def recovered(self) -> None:
        """A recovery rebuilt the segment: the first batch's timestamp is read again when asked."""
        self._rolling_based_timestamp = None

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """How long this segment has been "open" for segment.ms: by record timestamps when it has them."""
        t = self._roll_timestamp()
        if t is not None and t >= 0:
            return message_timestamp - t
        return now_ms - self._created_ms

    def _roll_timestamp(self) -> int | None:
        """The timestamp segment.ms counts from: the first batch's max timestamp (read once), None when empty."""
        if self._rolling_based_timestamp is None and self._log.size_bytes > 0:
            first = next(iter(self._log.batches()), None)
            if first is not None:
                self._rolling_based_timestamp = first.max_timestamp
        return self._rolling_based_timestamp

    def should_roll(
        self,
        *,
        segment_bytes: int,
        segment_ms: int,
        messages_bytes: int,
        max_timestamp_in_messages: int,
        max_offset_in_messages: int,
        now_ms: int,
    ) -> bool:
        """Kafka's four roll rules: size, time (never an empty segment), a full index, relative-offset overflow."""
        bounds = self.roll_bounds(segment_bytes, segment_ms, now_ms)
        return bounds.rolls(messages_bytes, max_timestamp_in_messages, max_offset_in_messages)

    def roll_bounds(self, segment_bytes: int, segment_ms: int, now_ms: int) -> RollBounds:
        """:meth:`should_roll`'s rules as bounds on what is appended, worked out once: a multi-batch append asks them
        of each batch (``core/log/appendruns.py``) without asking the segment again, since nothing is written in
        between."""
        size = self._log.size_bytes
        max_timestamp = None
        now = self._offset_index.is_full() or self._time_index.is_full()
        if size > 0:
            limit = segment_ms - self.roll_jitter_ms
            t = self._roll_timestamp()
            if t is not None and t >= 0:
                max_timestamp = limit + t  # time_waited_for_roll by record timestamps
            else:
                now = now or now_ms - self._created_ms > limit
        return RollBounds(segment_bytes - size, max_timestamp, self._base_offset, self._base_offset + INT32_MAX, now)


def roll_jitter(jitter_ms: int, segment_ms: int) -> int:
    """Kafka's ``abs(random) % min(segment.jitter.ms, segment.ms)``, fixed per segment."""
    bound = min(jitter_ms, segment_ms)
    return random.randrange(bound) if bound > 0 else 0
