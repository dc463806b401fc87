"""The demo's PySpark job: per-user click counts in five-minute event-time windows, from topic ``clicks`` to topic
``user-counts``, both through the ``logfs`` data source (docs/spark.md, "The pipeline: `scripts/demo`";
scripts/pipeline.py runs it).

    .venv/bin/python scripts/clicks_job.py --mount var/mnt

Input records (any partition, any codec): key ``user-N``, value ``{"user": "user-N", "page": "/cart", "ts": <epoch
ms>}`` where ``ts`` is the event time (the record timestamp is the append time). Output records: key ``user-N``,
value ``{"clicks":12,"user":"user-N","window":"2026-11-22 10:05/10:10"}``, one per user and window.
"""

from __future__ import annotations

import argparse
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mount", required=True, help="the logfs mount point")
    ap.add_argument("--source", default="clicks")
    ap.add_argument("--target", default="user-counts")
    ap.add_argument("--window", default="5 minutes")
    args = ap.parse_args()
    started = time.monotonic()

    from pyspark.sql import functions as F

    from logfs.spark.source import local_session

    spark = local_session("logfs-clicks")
    print(f"      spark {spark.version} local[2] up in {time.monotonic() - started:.1f}s", flush=True)
    try:
        clicks = spark.read.format("logfs").option("subscribe", args.source).load(args.mount)
        events = (
            clicks.select(F.from_json(F.col("value").cast("string"), "user STRING, page STRING, ts BIGINT").alias("e"))
            .select("e.*")
            .withColumn("event_time", F.timestamp_millis("ts"))
            .cache()
        )
        n_events = events.count()
        print(f"      read {n_events:,} click events from {clicks.rdd.getNumPartitions()} partition(s)", flush=True)
        counts = events.groupBy(F.window("event_time", args.window), "user").count()
        window = F.concat(
            F.date_format("window.start", "yyyy-MM-dd HH:mm"), F.lit("/"), F.date_format("window.end", "HH:mm")
        )
        out = counts.select(
            F.col("user").alias("key"),
            F.to_json(F.struct(F.col("count").alias("clicks"), "user", window.alias("window"))).alias("value"),
        )
        out.write.format("logfs").option("topic", args.target).mode("append").save(args.mount)
        print(f"      appended {out.count():,} (user, window) counts to topic {args.target}", flush=True)
    finally:
        spark.stop()
    print(f"      job done in {time.monotonic() - started:.1f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
