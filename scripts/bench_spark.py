"""Benchmark the Spark source against on-disk JSON lines in the same session (issue 6): prints one markdown table.

    .venv/bin/python scripts/bench_spark.py [--records 2000000] [--partitions 2] [--runs 3] [--dir /tmp]

One local[2] Spark session; a fresh store mounted under --dir; a topic of ``--partitions`` partitions holding
``--records`` records with 100-byte values (null keys, 1,000-record batches written to ``batches``). The same
records as JSON lines on the local disk are the ``hw/`` files copied there (the ``.jsonl`` rendering, byte for
byte). Each read materialises every column (``write.format("noop")``), best of ``--runs`` runs, interleaved:

* the ``logfs`` data source (``.kafka`` ranges decoded into Arrow batches) vs ``spark.read.json`` of the on-disk copy
  with the JSONL_SCHEMA (no inference) — target: at least as fast;
* ``spark.read.json`` of ``MOUNT/<topic>/*/hw/`` vs the same on-disk read — target: ≥ 70 %. Twice: for the topic
  above, whose records all sit in active segments (Kafka's default segment.bytes is 1 GiB), and for a second topic
  of the same records in 32 MiB segments, whose ``hw/`` files are mostly closed segments (the mount lets the kernel
  cache and read ahead those; an active segment's file is read request by request).

Rows/s are records per second of wall time for the whole query (planning, tasks, Python workers).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchutil import mount, timed, unmount

from logfs.core.format.encode import encode_values

RECORD_BYTES = 100
BATCH_RECORDS = 1000
WRITE_BYTES = 1024 * 1024
CLOSED_SEGMENT_BYTES = 32 * 1024 * 1024  # the same records in a topic whose hw/ files are mostly closed segments


def produce(mnt: Path, topic: str, partitions: int, records: int, segment_bytes: int | None = None) -> None:
    """``records`` 100-byte values spread evenly, 1,000-record batches, written in ~1 MiB writes."""
    os.mkdir(mnt / topic)
    for p in range(1, partitions):
        os.mkdir(mnt / topic / str(p))
    if segment_bytes is not None:
        (mnt / topic / "config").write_text(f"segment.bytes={segment_bytes}\n")
    per = records // partitions
    now = time.time_ns() // 1_000_000
    for p in range(partitions):
        fd = os.open(mnt / topic / str(p) / "batches", os.O_WRONLY)
        try:
            pending: list[bytes] = []
            size = 0
            for first in range(0, per, BATCH_RECORDS):
                n = min(BATCH_RECORDS, per - first)
                values = [b"%d-%010d" % (p, first + i) + b"." * (RECORD_BYTES - 12) for i in range(n)]
                batch = encode_values(values, now)
                pending.append(batch)
                size += len(batch)
                if size >= WRITE_BYTES:
                    os.write(fd, b"".join(pending))
                    pending, size = [], 0
            if pending:
                os.write(fd, b"".join(pending))
        finally:
            os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-spark-", dir=args.dir))
    store, mnt, disk = root / "store", root / "mnt", root / "disk"
    proc = mount(store, mnt)
    try:
        t = timed(lambda: produce(mnt, "bench", args.partitions, args.records))
        produce(mnt, "closed", args.partitions, args.records, segment_bytes=CLOSED_SEGMENT_BYTES)
        records = args.records // args.partitions * args.partitions
        print(f"produced {records:,} records in {t:.1f} s", file=sys.stderr)
        disk.mkdir()
        t = timed(
            lambda: [
                shutil.copyfile(f, disk / f"{f.parent.parent.name}-{f.name}") for f in sorted(mnt.glob("bench/*/hw/*"))
            ]
        )
        json_bytes = sum(f.stat().st_size for f in disk.iterdir())
        print(f"copied hw/ to disk: {json_bytes / 1e6:,.0f} MB of JSON lines in {t:.1f} s", file=sys.stderr)
        from logfs.spark.source import local_session

        spark = local_session("logfs-bench", spark_driver_memory="2g")
        try:
            from logfs.spark.schema import JSONL_SCHEMA

            reads: dict[str, Callable[[], Any]] = {
                "logfs data source": lambda: spark.read.format("logfs").option("subscribe", "bench").load(str(mnt)),
                "spark.read.json, JSON lines on disk": lambda: spark.read.json(str(disk), schema=JSONL_SCHEMA),
                "spark.read.json, MOUNT/bench/*/hw/ (active segments)": lambda: spark.read.json(
                    str(mnt / "bench" / "*" / "hw"), schema=JSONL_SCHEMA
                ),
                "spark.read.json, MOUNT/closed/*/hw/ (32 MiB segments)": lambda: spark.read.json(
                    str(mnt / "closed" / "*" / "hw"), schema=JSONL_SCHEMA
                ),
            }
            for name, make in reads.items():  # correctness, and a warm-up of each path
                count = make().count()
                assert count == records, (name, count, records)
            best = {name: float("inf") for name in reads}
            for run in range(args.runs):
                for name, make in reads.items():
                    seconds = timed(lambda make=make: make().write.format("noop").mode("overwrite").save())
                    best[name] = min(best[name], seconds)
                    print(f"run {run + 1}: {name}: {seconds:.2f} s", file=sys.stderr)
        finally:
            spark.stop()
    finally:
        unmount(proc, mnt)
        shutil.rmtree(root, ignore_errors=True)
    base = best["spark.read.json, JSON lines on disk"]
    print(
        f"\n{records:,} records of {RECORD_BYTES} bytes, {args.partitions} partitions, local[2], best of {args.runs}\n"
    )
    print("| read | rows/s | time | vs JSON lines on disk |")
    print("|---|---|---|---|")
    for name, seconds in best.items():
        print(f"| {name} | {records / seconds:,.0f} | {seconds:.2f} s | {base / seconds:.0%} |")


if __name__ == "__main__":
    main()
