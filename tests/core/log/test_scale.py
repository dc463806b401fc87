"""Scale: 1,000 partitions, and one partition of 10,000 segments, open and serve reads with capped descriptors.

The store bounds open segments with its HandleCache (``max_open_segments``); memory stays O(segments). A clean
open must not scan the logs: only the active segment's tail is read (to find the LEO).
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from logfs.core.configtext import parse_store_config
from logfs.core.format.batch import assign_offset_and_epoch
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_values
from logfs.core.log import logfile
from logfs.core.log.log import Isolation
from logfs.core.store import Store

MAX_OPEN = 32


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def count_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, int, int]]]:
    """Record every LogFile.read (path, position, size) made while the test runs."""
    calls: list[tuple[str, int, int]] = []
    original = logfile.LogFile.read

    def counting(self: logfile.LogFile, position: int, size: int) -> bytes:
        calls.append((self.path.name, position, size))
        return original(self, position, size)

    monkeypatch.setattr(logfile.LogFile, "read", counting)
    yield calls


def test_a_store_of_1000_partitions_opens_and_serves_reads_with_capped_descriptors(
    tmp_path: Path, count_reads: list[tuple[str, int, int]]
) -> None:
    config = parse_store_config(["num.partitions=1000"])
    with Store.open(tmp_path, config, max_open_segments=MAX_OPEN) as store:
        store.create_topic("wide")
        for p in range(1000):
            store.log("wide", p).append_as_leader(encode_values([b"p%d-%d" % (p, i) for i in range(3)], 1000), 0)
    baseline = open_fds()
    count_reads.clear()
    store = Store.open(tmp_path, config, max_open_segments=MAX_OPEN)
    try:
        assert store.had_clean_shutdown
        assert len(store.partitions("wide")) == 1000
        # a clean open reads each partition's active segment from its last index entry only: one read each
        assert len(count_reads) <= 1000
        assert open_fds() - baseline <= 3 * MAX_OPEN + 4
        rng = random.Random(1)
        for p in rng.sample(range(1000), 300):
            log = store.log("wide", p)
            log.update_high_watermark(log.log_end_offset)
            data = log.read(1, 1 << 20, Isolation.HIGH_WATERMARK).records
            assert [r.value for r in decode_records(data)] == [b"p%d-%d" % (p, i) for i in range(3)]
            assert open_fds() - baseline <= 3 * MAX_OPEN + 4
    finally:
        store.close()


def build_many_segments(partition_dir: Path, segments: int) -> None:
    """A partition of ``segments`` one-batch segments written as a leader would leave them after a clean close."""
    partition_dir.mkdir(parents=True)
    for base in range(0, segments * 2, 2):
        batch = bytearray(encode_values([b"v%d" % base, b"v%d" % (base + 1)], 1000 + base))
        assign_offset_and_epoch(batch, 0, base, 0)
        stem = partition_dir / f"{base:020d}"
        stem.with_suffix(".log").write_bytes(bytes(batch))
        stem.with_suffix(".index").write_bytes(b"")  # trimmed: no entry (the first append is never indexed)
        stem.with_suffix(".timeindex").write_bytes((1001 + base).to_bytes(8, "big") + (1).to_bytes(4, "big"))


def test_a_partition_of_10000_segments_opens_without_scanning_and_reads_with_capped_descriptors(
    tmp_path: Path, count_reads: list[tuple[str, int, int]]
) -> None:
    build_many_segments(tmp_path / "deep-0", 10_000)
    (tmp_path / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":0}')
    baseline = open_fds()
    store = Store.open(tmp_path, parse_store_config([]), max_open_segments=MAX_OPEN)
    try:
        log = store.log("deep", 0)
        assert len(log.segments) == 10_000
        assert log.log_end_offset == 20_000
        assert len(count_reads) <= 2, count_reads  # only the active segment's tail
        assert open_fds() - baseline <= 3 * MAX_OPEN + 4
        log.update_high_watermark(log.log_end_offset)
        rng = random.Random(2)
        for offset in rng.sample(range(20_000), 2_000):
            records = decode_records(log.read(offset, 1 << 20, Isolation.HIGH_WATERMARK).records)
            assert offset in [r.offset for r in records]
            assert open_fds() - baseline <= 3 * MAX_OPEN + 4
        found = log.fetch_offset_by_timestamp(1000 + 15_000)
        assert found is not None and found.offset == 15_000
    finally:
        store.close()
