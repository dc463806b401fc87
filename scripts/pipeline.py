#!/usr/bin/env python3
"""The demo job that `scripts/demo` runs, on an embedded store inside the working tree.

What it does grows with the project (the whole pipeline of spec/spark.md §3 is the goal: shell tools produce
events into a mounted store, Spark aggregates them, the results come back as a topic). Today:

1. the codec: produce a realistic stream of JSON click events as a producer would, batches of different sizes, each
   with a codec Kafka allows (none, gzip, snappy, lz4, zstd), keyed by user, and write them as a leader would into
   a Kafka segment file; read it back, validating every batch, rendering JSON lines, counting clicks per page;
2. the tools: show that segment with ``logfs dump`` and verify the store with ``logfs check``;
3. the mount: ``logfs mount`` the store, create a topic with ``mkdir``, append events with ``echo >>``, read them
   back with ``cat`` and ``wc``, look at ``state``, and unmount cleanly.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
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
LOGFS = str(Path(sys.executable).parent / "logfs")
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
    shutil.rmtree(partition_dir, ignore_errors=True)  # written afresh each run; the mount rebuilds its indexes
    partition_dir.mkdir(parents=True)
    segment = partition_dir / f"{0:020d}.log"
    print(f"[1/5] producing {args.batches} batches of click events (seed {args.seed})")
    # recent timestamps: the store's default retention.ms (7 days) would delete older events at the first check
    batches = produce(random.Random(args.seed), args.batches, start_ms=time.time_ns() // 1_000_000 - 3_600_000)

    print(f"[2/5] appending them as leader (epoch 0) to {segment}")
    log = bytearray()
    next_offset = 0
    for raw in batches:
        batch = bytearray(raw)
        valid = validate_batch(batch)  # a producer's batch: every rule a leader applies
        assign_offset_and_epoch(batch, 0, next_offset, 0)
        next_offset += valid.header.records_count
        log += batch
    segment.write_bytes(bytes(log))

    print("[3/5] reading the segment back: validating every batch and rendering JSON lines")
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

    print("[4/5] logfs dump (first lines):")
    out = subprocess.run([LOGFS, "dump", str(segment)], check=True, capture_output=True, text=True).stdout.splitlines()
    for line in out[:4]:
        print(f"      {line[:150]}")

    print(f"[5/5] mounting {args.store} at {args.mount} and using it with shell tools")
    mount_demo(Path(args.store), Path(args.mount))
    check = subprocess.run([LOGFS, "check", args.store], check=True, capture_output=True, text=True)
    print(f"      $ logfs check {args.store}\n        {check.stdout.strip().splitlines()[-1]}")
    print(f"done in {time.monotonic() - started:.1f}s")
    return 0


def sh(command: str, mount: Path) -> str:
    """Run one shell command in the mount point, echo it, and return its output."""
    print(f"      $ {command}")
    out = subprocess.run(["bash", "-c", command], cwd=mount, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines()[:6]:
        print(f"        {line[:150]}")
    return out


def mount_demo(store: Path, mount: Path) -> None:
    mount.mkdir(parents=True, exist_ok=True)
    log_file = store.parent / "mount.log"
    with open(log_file, "wb") as log:
        proc = subprocess.Popen([LOGFS, "--log-level", "info", "mount", str(store), str(mount)], stderr=log)
    try:
        deadline = time.monotonic() + 20
        while not os.path.ismount(mount):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"logfs mount did not come up; see {log_file}")
            time.sleep(0.05)
        sh("ls", mount)
        sh("[ -d signups ] || mkdir signups; ls signups", mount)
        for user in ("ada", "grace", "alan"):
            sh(f"echo '{{\"user\":\"{user}\",\"plan\":\"free\"}}' >> signups/0/append", mount)
        sh("cat signups/0/at/earliest", mount)
        sh("head -n 1 signups/0/at/earliest.jsonl", mount)
        sh("wc -l < clicks/0/at/earliest", mount)
        sh("cat signups/0/state", mount)
    finally:
        subprocess.run([LOGFS, "umount", str(mount)], check=False)
        try:
            code = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.terminate()
            code = proc.wait(timeout=20)
    if code != 0:
        raise SystemExit(f"logfs mount exited {code}; see {log_file}")
    print(f"      unmounted cleanly (exit {code})")


if __name__ == "__main__":
    sys.exit(main())
