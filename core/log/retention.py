"""Which old segments retention may delete (Kafka's ``UnifiedLog.deleteOldSegments``): pure functions over segment
summaries.

Kafka walks the segments from the oldest and stops at the first one that fails; a segment qualifies only when the
high watermark has passed all of it (``HW >= upper bound``: the next segment's base, or the LEO for the last) and
its rule holds. An empty last segment never qualifies. Three rules run one after the other, each on what the
previous left:

* log start offset: the *next* segment starts at or below the log start offset (so the active one never goes);
* ``retention.ms`` (when ≥ 0): ``now - largest timestamp > retention.ms``;
* ``retention.bytes`` (when ≥ 0 and the log is at least that big): delete while the excess covers the segment.

The Log picks the rule and raises its log start offset; its LocalLog walks its segments under the rule
(``LocalLog.deletable_segments``) and removes them (``LocalLog.remove_and_delete_segments``), the Log rolling first
when every segment goes, so an empty active segment at the LEO remains.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple


class SegmentSummary(NamedTuple):
    """What retention needs to know of a segment."""

    base_offset: int
    size_bytes: int
    largest_timestamp: int


Rule = Callable[[SegmentSummary, SegmentSummary | None], bool]


def deletable_prefix(segments: Sequence[SegmentSummary], rule: Rule, high_watermark: int, log_end_offset: int) -> int:
    """How many of the oldest segments may go under ``rule``."""
    count = 0
    for i, segment in enumerate(segments):
        nxt = segments[i + 1] if i + 1 < len(segments) else None
        upper_bound = nxt.base_offset if nxt is not None else log_end_offset
        if nxt is None and segment.size_bytes == 0:
            break
        if high_watermark < upper_bound or not rule(segment, nxt):
            break
        count += 1
    return count


def log_start_rule(log_start_offset: int) -> Rule:
    return lambda _segment, nxt: nxt is not None and nxt.base_offset <= log_start_offset


def retention_ms_rule(now_ms: int, retention_ms: int) -> Rule:
    return lambda segment, _nxt: now_ms - segment.largest_timestamp > retention_ms


def retention_bytes_rule(size_bytes: int, retention_bytes: int) -> Rule:
    """A stateful rule over a log of ``size_bytes``: each accepted segment reduces the excess (one per walk)."""
    diff = size_bytes - retention_bytes

    def rule(segment: SegmentSummary, _nxt: SegmentSummary | None) -> bool:
        nonlocal diff
        if diff - segment.size_bytes >= 0:
            diff -= segment.size_bytes
            return True
        return False

    return rule
