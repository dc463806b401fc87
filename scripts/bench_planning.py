#!/usr/bin/env python3
"""What planning a Spark query over many partitions costs (issue 24): prints one Markdown table.

    .venv/bin/python scripts/bench_planning.py [--partitions 1000,10000] [--spark] [--runs 3]

For each count P (P/5 topics of 5 partitions, one record in each partition, written through the core before the
store is mounted), on a fresh mount:

* ``.logfs/partitions`` read whole (one open: the mount renders every partition's line in a worker thread);
* the p50 and p99 of a read of ``.logfs/leader`` (open, read, close: served on the mount's trio thread) while another
  thread reads ``.logfs/partitions`` in a loop, beside the same with nothing else: whether the rendering stalls
  other requests;
* the Spark source's catalog (``logfs/spark/mount.py``) from ``.logfs/partitions``, beside the same catalog from
  one ``state`` file per partition (the way planning went before, and still goes on a mount without the file);
* with ``--spark``: a local[2] session plans ``subscribePattern`` over every topic (``df.rdd.getNumPartitions()``,
  which runs the source's planning: P ranges of one record), best of ``--runs`` after one warm-up.

Each figure is the best of ``--runs``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchutil import mount, print_rows, timed, unmount  # scripts/ is sys.path[0]

from logfs.core.configtext import parse_store_config
from logfs.core.format.encode import encode_values
from logfs.core.store import Store
from logfs.spark.mount import LISTING, load_catalog

PER_TOPIC = 5


def build(store_dir: Path, partitions: int) -> None:
    """P/5 topics of 5 partitions, one record each, through the core (mkdir through the mount is the slow part)."""
    store = Store.open(store_dir, parse_store_config([f"num.partitions={PER_TOPIC}"]))
    try:
        batch = encode_values([b"x" * 100], int(time.time() * 1000))
        for i in range(partitions // PER_TOPIC):
            topic = f"t{i:05d}"
            store.create_topic(topic, PER_TOPIC)
            for p in range(PER_TOPIC):
                log = store.log(topic, p)
                log.append_as_leader(bytearray(batch), 0)
                log.update_high_watermark(log.log_end_offset)
    finally:
        store.close()


def best(fn: object, runs: int) -> float:
    return min(timed(fn) for _ in range(runs))  # type: ignore[arg-type]


def read_latencies(path: Path, seconds: float) -> list[float]:
    """Seconds each read of ``path`` took (open, read, close: it always reaches the mount: ``direct_io``)."""
    out = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        start = time.perf_counter()
        path.read_bytes()
        out.append(time.perf_counter() - start)
    return sorted(out)


def p50_p99(latencies: list[float]) -> str:
    return f"{latencies[len(latencies) // 2] * 1000:.1f} / {latencies[len(latencies) * 99 // 100] * 1000:.1f}"


def stall(mnt: Path, seconds: float = 3.0) -> tuple[str, str]:
    """The p50 / p99 of a read of ``.logfs/leader`` (rendered on the mount's trio thread) alone, and while another
    thread reads ``.logfs/partitions`` in a loop (rendered in the mount's worker threads)."""
    leader = mnt / ".logfs" / "leader"
    alone = read_latencies(leader, seconds)
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            (mnt / LISTING).read_bytes()

    t = threading.Thread(target=reader)
    t.start()
    try:
        busy = read_latencies(leader, seconds)
    finally:
        stop.set()
        t.join()
    return p50_p99(alone), p50_p99(busy)


def spark_plan(spark: object, mnt: Path, runs: int) -> float:
    def plan() -> None:
        df = spark.read.format("logfs").option("subscribePattern", "t.*").load(str(mnt))  # type: ignore[attr-defined]
        df.rdd.getNumPartitions()

    plan()  # warm-up: the first query of a session starts Spark's Python workers
    return best(plan, runs)


def one_count(root: Path, partitions: int, runs: int, spark: object | None, skip_states: bool) -> list[str]:
    store, mnt = root / f"store{partitions}", root / f"mnt{partitions}"
    build(store, partitions)
    proc = mount(store, mnt)
    try:
        size = len((mnt / LISTING).read_bytes())
        listing_s = best(lambda: (mnt / LISTING).read_bytes(), runs)
        alone, busy = stall(mnt)

        def via_listing() -> None:
            catalog = load_catalog(mnt)
            assert len(catalog.states(catalog.partitions_of(catalog.topics()))) == partitions

        def via_states() -> None:
            catalog = load_catalog(mnt, use_listing=False)
            assert len(catalog.states(catalog.partitions_of(catalog.topics()))) == partitions

        catalog_s = best(via_listing, runs)
        states_s = None if skip_states else best(via_states, 1 if partitions > 2000 else runs)
        plan_s = spark_plan(spark, mnt, runs) if spark is not None else None
    finally:
        unmount(proc, mnt)
    return [
        f"{partitions:,}",
        f"{listing_s * 1000:.0f} ms ({size / 1e6:.1f} MB)",
        f"{alone} ms",
        f"{busy} ms",
        f"{catalog_s * 1000:.0f} ms",
        "—" if states_s is None else f"{states_s * 1000:.0f} ms",
        "—" if plan_s is None else f"{plan_s:.2f} s",
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", default="1000,10000", help="comma-separated counts (multiples of 5)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--spark", action="store_true", help="also plan a subscribePattern query in local Spark")
    ap.add_argument("--skip-states", action="store_true", help="leave out the catalog from the state files (slow)")
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    spark = None
    if args.spark:
        from logfs.spark.source import local_session

        spark = local_session("bench-planning")
    try:
        with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
            counts = [int(n) for n in args.partitions.split(",")]
            rows = [one_count(Path(tmp), n, args.runs, spark, args.skip_states) for n in counts]
    finally:
        if spark is not None:
            spark.stop()  # type: ignore[attr-defined]
    head = [
        "partitions",
        "read `.logfs/partitions`",
        "read of `.logfs/leader`, p50 / p99",
        "the same while `.logfs/partitions` is read in a loop",
        "catalog from `.logfs/partitions`",
        "catalog from each `state` file",
        "Spark plans `subscribePattern` over all",
    ]
    print_rows(head, rows, markdown=True, right=lambda i: i > 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
