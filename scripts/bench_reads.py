"""Benchmark reads (issue 25): records out of the mount against the same bytes out of the page cache, same run.

    .venv/bin/python scripts/bench_reads.py [--mib 96] [--seed 0] [--latency 1000] [--latency-runs 3]
        [--spark-mib 48] [--no-spark] [--dir /tmp] [--quick]

Rows, each beside its same-run baseline:

* ``cat MOUNT/real/0/at/earliest`` (text), ``at/earliest.jsonl`` and ``at/earliest.kafka`` of ``--mib`` MiB of
  realistic producer batches (``scripts/realdata.py``, seeded: web events of 150-1,500 bytes as kafka-python batches
  of 16 KiB with keys and a header, half uncompressed, a quarter lz4, a quarter zstd), written through ``batches``
  in 1 MiB writes (as ``dd bs=1M``). Each view is read twice (``cat F > /dev/null``), by two names of the same range
  that nothing read before (the kernel keeps an ``at/`` file's pages per name): ``at/earliest`` first, whose lookup
  walks every batch to learn the rendered size (a cold rendered-size index), then ``at/0``, which finds the index
  warm. The shared LRU of rendered chunks (64 MiB) holds the end of the first read only: at the default ``--mib`` the
  second read renders again. Baseline: ``cat`` of a file on the
  local disk of the same size as the text view, read once to fill the page cache, then timed (best of three).
  Targets: text >= 10 %, ``.jsonl`` >= 5 %, ``.kafka`` >= 20 % of that baseline.
* The same three views opened and read without FUSE in this process (``mount/render/rangeview.py``, 256 KiB reads
  as the kernel asks): what FUSE adds is the difference.
* Write -> blocked ``follow/latest`` reader: one line through ``append``, timed until a ``cat`` of
  ``follow/latest`` has it; ``--latency`` records a run, p50 and p99 per run, best of ``--latency-runs`` runs.
  Target p50 <= 0.5 ms, p99 <= 2 ms. Kafka end to end (its published single-machine figure): 2 ms / 3 ms.
* Spark (unless ``--no-spark``): ``--spark-mib`` MiB of the events (100-1,200 bytes) written as lines through
  ``append`` into four partitions; the ``logfs`` source (rows/s, every column materialised by the noop sink) vs
  ``spark.read.text`` of the same lines in one file on disk, same local[2] session, default split size, best of
  three, interleaved. Target >= 0.8x.

Figures count only when taken with nothing else running on the machine (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import realdata
from benchutil import follow_latency, mount, requests_of, timed, unmount

from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig
from logfs.mount.render.rangeview import open_range
from logfs.mount.render.rendersize import RenderCache
from logfs.mount.render.renderspan import Format

MIB = 1024 * 1024
WRITE_BYTES = MIB
VIEWS = [
    ("text", "", Format.PLAIN, 0.10),
    ("jsonl", ".jsonl", Format.JSONL, 0.05),
    ("kafka", ".kafka", Format.KAFKA, 0.20),
]


def cat(path: Path) -> float:
    return timed(lambda: subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True))


def write_batches(mnt: Path, topic: str, mib: float, seed: int) -> int:
    """``mib`` MiB of realistic producer batches into ``topic``'s partition 0 through ``batches``, 1 MiB writes
    (as ``dd bs=1M``); the number of records."""
    os.mkdir(mnt / topic)
    events = realdata.events(int(mib * MIB), seed, time.time_ns() // 1_000_000)
    batches = realdata.producer_batches(events, seed)
    fd = os.open(mnt / topic / "0" / "batches", os.O_WRONLY)
    try:
        per_write = WRITE_BYTES // realdata.BATCH_SIZE
        for first in range(0, len(batches), per_write):
            os.write(fd, b"".join(batches[first : first + per_write]))
    finally:
        os.close(fd)
    return len(events)


def core_read(store_dir: Path, topic: str, fmt: Format) -> tuple[float, int]:
    """A view of the whole partition opened on a cold cache and read in 256 KiB reads, without FUSE: (s, bytes)."""
    store = Store.open(store_dir, StoreConfig())
    try:
        log = store.log(topic, 0)
        began = time.perf_counter()
        with open_range(log, RenderCache(), topic, 0, fmt, log.log_start_offset) as view:
            position = 0
            while chunk := view.read(position, 256 * 1024):
                position += len(chunk)
        return time.perf_counter() - began, position
    finally:
        store.close()


def spark_rows(mnt: Path, disk: Path, mib: float, seed: int, runs: int) -> tuple[int, float, float]:
    """Events as lines through ``append`` into four partitions and the same lines in one file on disk; (rows, best
    seconds of the logfs source, best seconds of spark.read.text)."""
    topic = "lines"
    os.mkdir(mnt / topic)
    for p in range(1, 4):
        os.mkdir(mnt / topic / str(p))
    lines = [e.body for e in realdata.events(int(mib * MIB), seed, time.time_ns() // 1_000_000)]
    with open(disk, "wb") as f:
        f.write(b"\n".join(lines) + b"\n")
    for p in range(4):
        mine = lines[p::4]
        fd = os.open(mnt / topic / str(p) / "append", os.O_WRONLY)
        try:
            for request in requests_of([line + b"\n" for line in mine], WRITE_BYTES):
                os.write(fd, b"".join(request))
        finally:
            os.close(fd)
    from logfs.spark.source import local_session

    spark = local_session("logfs-bench-reads", spark_driver_memory="2g")
    try:
        reads: dict[str, Callable[[], Any]] = {
            "logfs": lambda: spark.read.format("logfs").option("subscribe", topic).load(str(mnt)),
            "text": lambda: spark.read.text(str(disk)),
        }
        for name, make in reads.items():  # correctness, and a warm-up of each path
            count = make().count()
            assert count == len(lines), (name, count, len(lines))
        best = {name: float("inf") for name in reads}
        for run in range(runs):
            for name, make in reads.items():
                seconds = timed(lambda make=make: make().write.format("noop").mode("overwrite").save())
                best[name] = min(best[name], seconds)
                print(f"spark run {run + 1}: {name}: {seconds:.2f} s", file=sys.stderr)
    finally:
        spark.stop()
    return len(lines), best["logfs"], best["text"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=float, default=96, help="MiB of realistic producer batches for the at/ rows")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--latency", type=int, default=1000, help="records per latency run")
    ap.add_argument("--latency-runs", type=int, default=3)
    ap.add_argument("--spark-mib", type=float, default=48, help="MiB of events as lines for the Spark row")
    ap.add_argument("--no-spark", action="store_true")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--quick", action="store_true", help="--mib 16 --latency 300 --spark-mib 8")
    args = ap.parse_args()
    if args.quick:
        args.mib, args.latency, args.spark_mib = 16, 300, 8
    root = Path(tempfile.mkdtemp(prefix="bench-reads-", dir=args.dir))
    store, mnt = root / "store", root / "mnt"
    rows: list[tuple[str, str, str, str]] = []
    spark: tuple[int, float, float] | None = None
    proc = mount(store, mnt)
    try:
        records = write_batches(mnt, "real", args.mib, args.seed)
        subprocess.run(["sync"], check=True)
        sized: dict[str, tuple[float, float]] = {}
        for _, suffix, _, _ in VIEWS:
            # First a name never looked up (its lookup walks every batch for the size: a cold rendered-size index),
            # then another name of the same range (a new inode, so no page cache; the index warm). Nothing reads
            # either before: the kernel keeps at/ pages per inode, and a second read of one name is a page-cache read.
            first = cat(mnt / "real" / "0" / "at" / f"earliest{suffix}")
            second = cat(mnt / "real" / "0" / "at" / f"0{suffix}")
            sized[suffix] = (first, second)
        text_size = (mnt / "real" / "0" / "at" / "earliest").stat().st_size
        text_copy = root / "text-sized"
        with open(text_copy, "wb") as f:  # a file of the text view's size (content does not matter to cat)
            f.write(os.urandom(MIB) * (text_size // MIB) + os.urandom(text_size % MIB))
        cat(text_copy)  # into the page cache
        base = min(cat(text_copy) for _ in range(3))
        base_mbs = text_size / 1e6 / base
        for name, suffix, _, target in VIEWS:
            size = (mnt / "real" / "0" / "at" / f"earliest{suffix}").stat().st_size
            for label, seconds in zip(("first open", "index warm"), sized[suffix], strict=True):
                mbs = size / 1e6 / seconds
                rows.append(
                    (
                        f"`cat at/{'earliest' if label == 'first open' else '0'}{suffix}` ({name}), {label}",
                        f"{mbs:,.0f} MB/s",
                        f"{mbs / base_mbs:.1%} of page-cache `cat` ({base_mbs:,.0f} MB/s)",
                        f">= {target:.0%}" if label == "index warm" else "",
                    )
                )
        os.mkdir(mnt / "lat")
        runs = [follow_latency(mnt, "lat", args.latency) for _ in range(args.latency_runs)]
        p50, p99 = min(runs)
        rows.append((f"write -> blocked `follow/latest` (best of {len(runs)} runs of {args.latency:,})",
                     f"p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms",
                     "runs: " + "; ".join(f"{a * 1e3:.2f}/{b * 1e3:.2f} ms" for a, b in runs) + " (Kafka 2/3 ms)",
                     "p50 <= 0.5 ms, p99 <= 2 ms"))  # fmt: skip
        if not args.no_spark:
            spark = spark_rows(mnt, root / "lines.txt", args.spark_mib, args.seed, 3)
    finally:
        unmount(proc, mnt)
    try:
        for name, _, fmt, _ in VIEWS:  # the views without FUSE, on the store the mount left (cold cache each)
            seconds, size = core_read(store, "real", fmt)
            mbs = size / 1e6 / seconds
            rows.append((f"the {name} view without FUSE (core + render, cold index)", f"{mbs:,.0f} MB/s", "", ""))
        if spark is not None:
            lines, logfs_s, text_s = spark
            rows.append(
                (
                    f"Spark `logfs` source, {lines:,} events in 4 partitions",
                    f"{lines / logfs_s:,.0f} rows/s",
                    f"{text_s / logfs_s:.2f}x `spark.read.text` ({lines / text_s:,.0f} rows/s)",
                    ">= 0.8x",
                )
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n{records:,} realistic events ({args.mib:g} MiB, seed {args.seed}) as producer batches\n")
    print("| measurement | figure | baseline (same run) | target (issue 25) |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
