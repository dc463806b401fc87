"""The high watermark of one partition: the offset below which records are committed (Kafka's ``UnifiedLog``;
docs/replication.md, "The ISR and the high watermark").

Rules, as Kafka's UnifiedLog applies them:

* It starts at the log start offset and always stays within ``[log start offset, log end offset]``:
  :meth:`HighWatermark.update` clamps (and may move backwards, after a truncation).
* A leader only moves it forward: :meth:`maybe_increment` refuses a value past the LEO and applies one only if it is
  higher (or equal but known on a newer segment, which refreshes its position).
* A follower takes ``min(leader's HW, own LEO)`` through :meth:`maybe_update_as_follower`, which tells whether it
  changed.

The value is a :class:`LogOffsetMetadata`: reads bounded by the HW need its byte position, which a value loaded from
the checkpoint does not have until the log materialises it (``message_offset_only``).

Threads: the log's writer thread changes it, under the log's lock; any thread reads ``metadata`` (one attribute
read: a consistent snapshot).
"""

from __future__ import annotations

import logging

from logfs.core.errors import OffsetOutOfRange
from logfs.core.offsets import LogOffsetMetadata

_log = logging.getLogger(__name__)


class HighWatermark:
    """One partition's HW. See the module docstring."""

    def __init__(self, initial: LogOffsetMetadata) -> None:
        self.metadata = initial

    @property
    def offset(self) -> int:
        return self.metadata.message_offset

    def update(self, hw: LogOffsetMetadata, log_start_offset: int, log_end: LogOffsetMetadata) -> int:
        """Set the HW clamped to ``[log_start_offset, LEO]``; returns the new value. Writer thread."""
        if hw.message_offset < log_start_offset:
            hw = LogOffsetMetadata(log_start_offset)
        elif hw.message_offset >= log_end.message_offset:
            hw = log_end
        if hw.message_offset < self.metadata.message_offset:
            _log.debug("high watermark moves back from %d to %d", self.metadata.message_offset, hw.message_offset)
        self.metadata = hw
        return hw.message_offset

    def maybe_increment(self, hw: LogOffsetMetadata, log_end: LogOffsetMetadata) -> LogOffsetMetadata | None:
        """The leader's move: only forward, never past the LEO. Returns the new value if it moved. Writer thread."""
        if hw.message_offset > log_end.message_offset:
            raise OffsetOutOfRange(hw.message_offset, 0, log_end.message_offset, what="high watermark update")
        old = self.metadata
        if old.message_offset < hw.message_offset or (
            old.message_offset == hw.message_offset and old.on_older_segment(hw)
        ):
            self.metadata = hw
            return hw
        return None

    def maybe_update_as_follower(self, hw: int, log_start_offset: int, log_end: LogOffsetMetadata) -> int | None:
        """The follower's move to the leader's HW, clamped; returns the new value if it changed. Writer thread."""
        old = self.metadata.message_offset
        new = self.update(LogOffsetMetadata(hw), log_start_offset, log_end)
        return new if new != old else None
