#!/usr/bin/env python3
"""The demo job that `scripts/demo` runs, on an embedded store inside the working tree.

What it does grows with the project (the whole pipeline of spec/spark.md §3 is the goal: shell tools produce
events into a mounted store, Spark aggregates them, the results come back as a topic). Today the storage engine and
the mount are still to come, so it exercises what exists end to end, the RecordBatch v2 codec:

1. produce a realistic stream of JSON click events as a producer would: batches of different sizes, each with a
   different codec Kafka allows (none, gzip, snappy, lz4, zstd), keyed by user;
2. append them, as a leader does, to a Kafka segment file ``STORE/clicks-0/00000000000000000000.log`` (offsets
   and leader epoch assigned in place, without re-encoding);
3. read the segment back batch by batch, validate every batch (CRC and every record's framing), render the
   records as JSON lines (spec §4) and count clicks per page;
4. show the segment with ``logfs dump``, the tool that prints a Kafka ``.log`` file batch by batch.
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import subprocess
import sys
import time
from pathlib import Path

from logfs.core.batch import (
    Header,
    Record,
    assign_offset_and_epoch,
    encode_batch,
    iter_batch_positions,
    validate_batch,
)
from logfs.core.compression import Compression
from logfs.core.render import render_jsonl

TOPIC = "clicks"
PAGES = ["/", "/search", "/product/42", "/product/7", "/cart", "/checkout"]


def produce(rng: random.Random, n_batches: int, start_ms: int) -> list[bytes]:
    """Producer-encoded batches (baseOffset 0, as a producer sends them) of JSON click events."""
    batches = []
    ts = start_ms
    for b in range(n_batches):
        records = []
        for i in range(rng.choice([1, 10, 250, 1000])):
            ts += rng.randint(0, 40)
            user = f"user-{rng.randint(1, 50)}"
            event = {"user": user, "page": rng.choice(PAGES), "ms": ts}
            records.append(
                Record(i, ts, user.encode(), json.dumps(event, separators=(",", ":")).encode(),
                       (Header("source", b"demo"),))
            )  # fmt: skip
        batches.append(encode_batch(records, compression=list(Compression)[b % len(Compression)]))
    return batches


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default="var/store", help="the store directory (created if missing)")
    ap.add_argument("--mount", default="var/mnt", help="where the store will be mounted (once the mount exists)")
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    started = time.monotonic()

    partition_dir = Path(args.store) / f"{TOPIC}-0"
    partition_dir.mkdir(parents=True, exist_ok=True)
    segment = partition_dir / f"{0:020d}.log"
    print(f"[1/4] producing {args.batches} batches of click events (seed {args.seed})")
    batches = produce(random.Random(args.seed), args.batches, start_ms=1_700_000_000_000)

    print(f"[2/4] appending them as leader (epoch 0) to {segment}")
    log = bytearray()
    next_offset = 0
    for raw in batches:
        batch = bytearray(raw)
        valid = validate_batch(batch)  # a producer's batch: every rule a leader applies
        assign_offset_and_epoch(batch, 0, next_offset, 0)
        next_offset += valid.header.records_count
        log += batch
    segment.write_bytes(bytes(log))

    print("[3/4] reading the segment back: validating every batch and rendering JSON lines")
    data = segment.read_bytes()
    per_page: collections.Counter[str] = collections.Counter()
    n_records = 0
    first_line = b""
    for position, size in iter_batch_positions(data):
        validate_batch(data, position, client=False, size=size)
        lines = render_jsonl(data, TOPIC, 0, position)
        for line in lines.splitlines():
            obj = json.loads(line)
            per_page[json.loads(obj["value"])["page"]] += 1
            n_records += 1
        first_line = first_line or lines.split(b"\n", 1)[0]
    assert n_records == next_offset, (n_records, next_offset)
    print(f"      {n_records} records in {len(batches)} batches, {len(data):,} bytes; offsets 0..{next_offset - 1}")
    print(f"      first record: {first_line.decode()}")
    for page, count in per_page.most_common():
        print(f"      {count:6d}  {page}")

    print("[4/4] logfs dump (first lines):")
    out = subprocess.run(
        [str(Path(sys.executable).parent / "logfs"), "dump", str(segment)], check=True, capture_output=True, text=True
    ).stdout.splitlines()
    for line in out[:6]:
        print(f"      {line}")
    print(f"done in {time.monotonic() - started:.1f}s (the mount at {args.mount} arrives with the FUSE layer)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
