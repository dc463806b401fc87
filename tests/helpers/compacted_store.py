"""A compacted topic whose first segment has gaps, as the log cleaner leaves it (offsets kept, records gone), written
offline through the core the way a follower appends a cleaned leader's batches: what the mount's reads across gaps
(tests/mount/test_compacted_topics.py) and the Spark source (tests/spark/test_spark_compacted.py) both read. It needs
no cleaner, so these tests check the reading side alone; the cleaner's own output is checked where it runs."""

from __future__ import annotations

import time
from pathlib import Path

from logfs.core.format.batch import Record
from logfs.core.format.encode import encode_batch
from logfs.core.store import Store

TOPIC = "g"
BATCHES = [(0, [2, 5]), (6, [9]), (10, [15, 19])]  # the cleaned first segment: (base offset, kept offsets)
ROLL = 20
ACTIVE = list(range(20, 25))  # the active segment: no gap
KEPT = [o for _, offsets in BATCHES for o in offsets] + ACTIVE
END = 25  # the log end offset and the high watermark


def value(offset: int) -> bytes:
    return b"v%d" % offset


def build_store(store: Path) -> None:
    """Create ``store`` with the topic ``g`` (one partition, cleanup.policy=compact) described above."""
    s = Store.open(store)
    try:
        s.create_topic(TOPIC, 1, {"cleanup.policy": "compact"})
        log = s.log(TOPIC, 0)
        now = int(time.time() * 1000)

        def batch(base: int, offsets: list[int]) -> bytes:
            records = [Record(o, now, b"k%d" % o, value(o)) for o in offsets]
            return encode_batch(records, base_offset=base, partition_leader_epoch=0)

        for base, offsets in BATCHES:
            log.append_as_follower(batch(base, offsets))
        log.roll(ROLL)
        log.append_as_follower(batch(ROLL, ACTIVE))
        log.update_high_watermark(END)
    finally:
        s.close()
