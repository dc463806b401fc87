"""What one slot of an index holds: the entry layouts of the offset index and the time index, byte for byte
Kafka's, the entry types a lookup returns, and the sizes that follow from them (core/log/index.py's docstring
shows the layouts and says what an entry means).

Kept apart from the file that holds the slots (core/log/indexfile.py) and from the search over them
(core/log/indexsearch.py), which both work on any entry of two fields and learn its layout from here.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

OFFSET_INDEX_ENTRY_BYTES = 8
TIME_INDEX_ENTRY_BYTES = 12
SEGMENT_INDEX_BYTES_DEFAULT = 10 * 1024 * 1024  # segment.index.bytes
NO_TIMESTAMP = -1  # RecordBatch.NO_TIMESTAMP: what a time index lookup below its first entry answers

# A lookup searches the last WARM_SECTION_BYTES of an index first (1024 offset entries, 682 time entries). Appends
# and almost every lookup (in-sync followers, tailing consumers) touch the end of the index, so a plain binary search
# would keep faulting in the pages of its first probes (index pages 0, n/2, 3n/4 ...), which change as the index
# grows and are cold by then: Kafka measured ~1 s produce latency from such faults. 8192 bytes is at most 3 pages of
# 4 KiB, and each warm lookup touches all of them, so they stay in the page cache; with the default density it
# covers ~4 MB (offset index) or ~2.7 MB (time index) of log. The result is the same as a plain binary search.
WARM_SECTION_BYTES = 8192

_OFFSET_ENTRY = struct.Struct(">ii")  # relative offset, position
_TIME_ENTRY = struct.Struct(">qi")  # timestamp, relative offset

assert _OFFSET_ENTRY.size == OFFSET_INDEX_ENTRY_BYTES and _TIME_ENTRY.size == TIME_INDEX_ENTRY_BYTES
assert SEGMENT_INDEX_BYTES_DEFAULT // OFFSET_INDEX_ENTRY_BYTES == 1_310_720  # Kafka's AbstractIndex
assert SEGMENT_INDEX_BYTES_DEFAULT // TIME_INDEX_ENTRY_BYTES == 873_813
assert WARM_SECTION_BYTES // OFFSET_INDEX_ENTRY_BYTES == 1024 and WARM_SECTION_BYTES // TIME_INDEX_ENTRY_BYTES == 682


class OffsetPosition(NamedTuple):
    """An offset index entry: the append whose last offset is ``offset`` starts at byte ``position`` of the log."""

    offset: int
    position: int


class TimestampOffset(NamedTuple):
    """A time index entry: ``timestamp`` is the largest timestamp seen up to ``offset``."""

    timestamp: int
    offset: int


# Both entry types are (key, value) pairs: offset index (offset, position), time index (timestamp, offset).
_KEY = 0
_VALUE = 1
