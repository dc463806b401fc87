#!/usr/bin/env python3
"""Benchmark the log cleaner (issue 18), each figure beside its same-run baseline on the same disk.

Rows:

* **cleaner throughput**: one round (``LogCleaner.clean_log``: the offset map of the dirty section, the recopy, the
  swap with its fsyncs) over a dirty log of 1 KiB records with 10 % distinct keys, in producer batches of 16 KiB,
  as MB/s of dirty log, beside reading the same bytes: ``os.pread`` of the segment files in 1 MiB pieces, and a
  walk of every record of every batch (``record_columns``: what any reader of the records pays). Target: >= 200 MB/s.
* **throttled cleaner vs append latency**, through a real ``logfs mount`` as the issue means it: a fixed append load
  on ``load/0/append`` (one ~100-byte line a write(2) every 2 ms; each also fsynced with ``--fsync``) while the
  mount's cleaner task, throttled to 50 MB/s (``log.cleaner.io.max.bytes.per.second``), cleans another topic
  (``dirty``, ``--mib`` MiB of the same records, written through its ``batches`` file as a delete topic, then
  switched to ``cleanup.policy=compact`` through its ``config`` file). Interleaved in one run: the load with the
  cleaner idle, while it cleans (the round runs past the load: the row says so otherwise), and idle again once the
  round is over (``state``'s ``first_dirty_offset`` moved). Reported: the appends' p99 latency, cleaning vs idle.
  Target: <= 1.5x.

In the throughput row nothing is fsynced but what the cleaner fsyncs itself (its segments and directory at each
swap). Files go under ``--dir`` (default ./var/bench-compaction), deleted afterwards. The machine is shared: compare
the interleaved rows of one run, and repeat.

Usage: ``python scripts/bench_compaction.py [--mib 256] [--seconds 4] [--fsync] [--dir var/bench-compaction]
[--markdown]``
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from benchutil import mount, print_rows, requests_of, unmount

from logfs.core.checkpoint import TopicPartition
from logfs.core.config import LogConfig
from logfs.core.format.batch import Record, iter_batch_positions
from logfs.core.format.decode import record_columns
from logfs.core.format.encode import encode_batch
from logfs.core.log.cleaner.logcleaner import LogCleaner
from logfs.core.log.handles import HandleCache
from logfs.core.log.loader import load_log
from logfs.core.log.log import Log
from logfs.core.storeconfig import StoreConfig

RECORD_BYTES = 1024
BATCH_RECORDS = 16
DISTINCT = 0.10
SEGMENT_BYTES = 64 * 1024 * 1024


class Store:
    """What LogCleaner reads of a store."""

    def __init__(self, path: Path, logs: dict[TopicPartition, Log]) -> None:
        self.path = path
        self.config = StoreConfig()
        self.partitions = logs

    def logs(self) -> Iterator[tuple[TopicPartition, Log]]:
        yield from self.partitions.items()


def dirty_log(directory: Path, mib: int, seed: int = 18) -> Log:
    """``mib`` MiB of 1 KiB records over 10 % distinct keys, 16 to a batch, all below the HW, the last segment
    rolled so everything is cleanable."""
    log = load_log(directory, LogConfig(segment_bytes=SEGMENT_BYTES, cleanup_policy="compact"), HandleCache(),
                   had_clean_shutdown=True)  # fmt: skip
    total = mib * 1024 * 1024 // RECORD_BYTES
    keys = max(1, int(total * DISTINCT))
    rng = random.Random(seed)
    payload = rng.randbytes(RECORD_BYTES)
    now = int(time.time() * 1000)
    for first in range(0, total, BATCH_RECORDS):
        batch = [
            Record(i, now, b"key-%08d" % rng.randrange(keys), payload[: RECORD_BYTES - 40])
            for i in range(min(BATCH_RECORDS, total - first))
        ]
        log.append_as_leader(bytearray(encode_batch(batch)), 0, now_ms=now)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    log.flush()
    return log


def pread_all(log: Log) -> float:
    start = time.perf_counter()
    for segment in log.segments:
        fd = os.open(segment.log_path, os.O_RDONLY)
        try:
            position = 0
            while chunk := os.pread(fd, 1 << 20, position):
                position += len(chunk)
        finally:
            os.close(fd)
    return time.perf_counter() - start


def walk_all(log: Log) -> float:
    start = time.perf_counter()
    for segment in log.segments:
        position = 0
        while position < segment.size_bytes:
            data = segment.log_file.read(position, 4 << 20)
            last = 0
            for p, size in iter_batch_positions(data):
                record_columns(data, p)
                last = p + size
            if last == 0:
                break
            position += last
    return time.perf_counter() - start


def throughput(root: Path, mib: int) -> list[list[object]]:
    log = dirty_log(root / "dirty-0", mib)
    size = log.size_bytes
    rows: list[list[object]] = []
    read_s = pread_all(log)
    walk_s = walk_all(log)
    cleaner = LogCleaner(Store(root, {TopicPartition("dirty", 0): log}))
    start = time.perf_counter()
    stats = cleaner.clean_log(log)
    clean_s = time.perf_counter() - start
    assert stats is not None
    mb = size / 1e6
    rows.append(["cleaner throughput (MB/s of dirty log)", f"{mb / clean_s:.0f}", "target >= 200",
                 f"{stats.messages_read:,} -> {stats.messages_written:,} records, {mb:.0f} MB -> "
                 f"{stats.bytes_written / 1e6:.1f} MB"])  # fmt: skip
    rows.append(["  baseline: pread of the same files (MB/s)", f"{mb / read_s:.0f}", "", ""])
    rows.append(["  baseline: walk of every record (MB/s)", f"{mb / walk_s:.0f}", "", ""])
    log.close()
    return rows


def _state(mnt: Path, topic: str) -> dict[str, Any]:
    return cast("dict[str, Any]", json.loads((mnt / topic / "0" / "state").read_bytes()))


def _fill_through_mount(mnt: Path, topic: str, mib: int) -> None:
    """``mib`` MiB of the throughput row's records written to ``topic``'s ``batches`` in 1 MiB requests."""
    rng = random.Random(18)
    total = mib * 1024 * 1024 // RECORD_BYTES
    keys = max(1, int(total * DISTINCT))
    payload = rng.randbytes(RECORD_BYTES - 40)
    now = int(time.time() * 1000)
    batches = [
        encode_batch([Record(i, now, b"key-%08d" % rng.randrange(keys), payload) for i in range(BATCH_RECORDS)])
        for _ in range(total // BATCH_RECORDS)
    ]
    fd = os.open(mnt / topic / "0" / "batches", os.O_WRONLY)
    try:
        for request in requests_of(batches):
            os.write(fd, b"".join(request))
    finally:
        os.close(fd)


def append_latencies(path: Path, seconds: float, fsync: bool) -> list[float]:
    """One ~100-byte line written to ``path`` (an ``append`` file under the mount) every 2 ms for ``seconds``, each
    a write(2) (and an fsync with ``fsync``): each one's latency (s)."""
    line = b"x" * 99 + b"\n"
    latencies = []
    fd = os.open(path, os.O_WRONLY)
    try:
        end = time.perf_counter() + seconds
        tick = time.perf_counter()
        while time.perf_counter() < end:
            t = time.perf_counter()
            os.write(fd, line)
            if fsync:
                os.fsync(fd)
            latencies.append(time.perf_counter() - t)
            tick += 0.002
            time.sleep(max(0.0, tick - time.perf_counter()))
    finally:
        os.close(fd)
    return latencies


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def latency(root: Path, mib: int, seconds: float, fsync: bool) -> list[list[object]]:
    """The throttled-cleaner row through a real ``logfs mount``: the load on ``load/0/append``; ``dirty`` filled
    with ``mib`` MiB as a delete topic, then switched to ``cleanup.policy=compact`` (the mount's cleaner task picks
    it up within ``log.cleaner.backoff.ms``). Interleaved: idle, cleaning, idle once the round is over."""
    store, mnt = root / "store", root / "mnt"
    proc = mount(store, mnt, "log.cleaner.io.max.bytes.per.second=50000000", "log.cleaner.backoff.ms=100")
    try:
        os.mkdir(mnt / "load")
        os.mkdir(mnt / "dirty")
        (mnt / "dirty" / "config").write_text(f"segment.bytes={8 * 1024 * 1024}\n")
        _fill_through_mount(mnt, "dirty", mib)
        load = mnt / "load" / "0" / "append"
        idle = append_latencies(load, seconds, fsync)
        (mnt / "dirty" / "config").write_text("cleanup.policy=compact\n")
        started = time.perf_counter()
        busy = append_latencies(load, seconds, fsync)
        cleaning = _state(mnt, "dirty")["cleaner"]["first_dirty_offset"] == 0  # one round: it moves when done
        while _state(mnt, "dirty")["cleaner"]["first_dirty_offset"] == 0:
            time.sleep(0.1)
        round_s = time.perf_counter() - started
        metrics = (mnt / ".logfs" / "metrics").read_text().splitlines()
        io_bytes = next(int(m.split()[1]) for m in metrics if m.startswith("kafka_utils_throttler_cleaner_io_total "))
        idle2 = append_latencies(load, seconds, fsync)
    finally:
        unmount(proc, mnt)
    base = p99(idle + idle2)
    ratio = p99(busy) / base
    what = "write+fsync" if fsync else "write"
    return [
        [f"append p99 through the mount, cleaner idle (ms, {what})", f"{base * 1000:.2f}", "",
         f"{len(idle) + len(idle2)} appends, before and after the clean"],
        [f"append p99 through the mount, cleaner at 50 MB/s (ms, {what})", f"{p99(busy) * 1000:.2f}",
         "target <= 1.5x", f"{ratio:.2f}x; the round took {round_s:.1f} s, {io_bytes / round_s / 1e6:.0f} MB/s of "
         f"cleaner io"
         f"{'' if cleaning else ' (it finished before the load did)'}"],
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="dirty log size for the throughput row")
    parser.add_argument("--seconds", type=float, default=4.0, help="each latency measurement")
    parser.add_argument("--fsync", action="store_true", help="fsync each append of the latency rows")
    parser.add_argument("--dir", type=Path, default=Path("var/bench-compaction"))
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    args.dir.mkdir(parents=True)
    try:
        rows = throughput(args.dir / "throughput", args.mib)
        rows += latency(args.dir / "latency", args.mib, args.seconds, args.fsync)
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    print_rows(["row", "value", "target", "note"], rows, markdown=args.markdown, right=lambda i: i == 1)


if __name__ == "__main__":
    main()
