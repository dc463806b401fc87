"""Which segments one cleaning round merges into one (Kafka's ``Cleaner.groupSegmentsBySize``, LogCleaner.scala).

Each merge becomes one cleaned segment at the base offset of its first member. A segment joins the merge before it
while the merge's ``.log`` bytes stay within ``segment.bytes``, its offset-index bytes and its time-index bytes each
within ``segment.index.bytes``, and the offsets it would hold stay within 2^31 - 1 of the merge's base (relative
offsets are 4 bytes), judged by the next segment's base - 1 (``first_uncleanable - 1`` for the last); an empty
segment always joins. Pure: it works on sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from logfs.core.format.varint import INT32_MAX


class SegmentSizes(NamedTuple):
    """What planning the merges needs to know of a segment."""

    base_offset: int
    log_bytes: int
    index_bytes: int
    time_index_bytes: int


def plan_merges(
    segments: Sequence[SegmentSizes], max_size: int, max_index_size: int, first_uncleanable_offset: int
) -> list[list[int]]:
    """The merges, as lists of indexes into ``segments`` (in order)."""
    merges: list[list[int]] = []
    i = 0
    while i < len(segments):
        merge = [i]
        log_size, index_size, time_size = segments[i].log_bytes, segments[i].index_bytes, segments[i].time_index_bytes
        base = segments[i].base_offset
        i += 1
        while i < len(segments):
            candidate = segments[i]
            next_base = segments[i + 1].base_offset if i + 1 < len(segments) else first_uncleanable_offset
            if (
                log_size + candidate.log_bytes > max_size
                or index_size + candidate.index_bytes > max_index_size
                or time_size + candidate.time_index_bytes > max_index_size
                or (candidate.log_bytes > 0 and next_base - 1 - base > INT32_MAX)
            ):
                break
            merge.append(i)
            log_size += candidate.log_bytes
            index_size += candidate.index_bytes
            time_size += candidate.time_index_bytes
            i += 1
        merges.append(merge)
    return merges
