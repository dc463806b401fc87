#!/usr/bin/env python3
"""The end-to-end pipeline that `scripts/demo` runs (docs/spark.md, "The pipeline: `scripts/demo`"), on an embedded
store inside the working tree.

1. mount the store (``logfs mount var/store var/mnt``) and start the topics afresh: ``clicks`` with three
   partitions, ``user-counts`` with one;
2. produce click events with shell tools: ``awk`` writes JSON click events keyed by user into
   ``clicks/append.jsonl`` (spread over the partitions by ``murmur2(user)``, as Kafka's producer does), and a
   "mobile app" sends producer-encoded RecordBatches of every codec (none, gzip, snappy, lz4, zstd), which ``cat``
   writes into ``clicks/0/batches``;
3. look at them with ``wc``, ``head`` and ``state``, and at the segment file in the store with ``logfs dump``;
4. run the PySpark job (``scripts/clicks_job.py``): it reads the committed events through the ``logfs`` data source,
   counts clicks per user in five-minute event-time windows, and appends the counts to ``user-counts`` through the
   sink;
5. show the results with ``cat`` and ``sort``, and check that the counts add up to the events produced;
6. unmount cleanly and verify the store with ``logfs check``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from logfs.core.format.batch import Record
from logfs.core.format.compression import Compression
from logfs.core.format.encode import encode_batch

LOGFS = str(Path(sys.executable).parent / "logfs")
JOB = Path(__file__).with_name("clicks_job.py")
PAGES = ["/", "/search", "/product/42", "/product/7", "/cart", "/checkout"]
USERS = 50
SPAN_MS = 30 * 60 * 1000  # events over the last half hour

# Shell: JSON click events, keyed by user, a little out of order (event time ``ts`` up to 20 s early).
AWK_EVENTS = r"""awk -v n={n} -v seed={seed} -v now="$(date +%s%3N)" 'BEGIN {{
  srand(seed); split("{pages}", pages, " ");
  for (i = 0; i < n; i++) {{
    user = "user-" int(1 + rand() * {users}); page = pages[int(1 + rand() * {npages})];
    ts = now - {span} + int(i * {span} / n) - int(rand() * 20000);
    printf "{{\"key\":\"%s\",\"value\":{{\"user\":\"%s\",\"page\":\"%s\",\"ts\":%.0f}}}}\n", user, user, page, ts
  }} }}' > clicks/append.jsonl"""


def app_batches(rng: random.Random, count: int, now_ms: int) -> bytes:
    """Producer-encoded batches (as a Kafka client sends them) of click events, one per codec."""
    out = []
    codecs = list(Compression)
    for b in range(len(codecs)):
        records = []
        for i in range(count // len(codecs)):
            user = f"user-{rng.randint(1, USERS)}"
            ts = now_ms - rng.randint(0, SPAN_MS)
            event = {"user": user, "page": rng.choice(PAGES), "ts": ts}
            records.append(Record(i, ts, user.encode(), json.dumps(event, separators=(",", ":")).encode()))
        out.append(encode_batch(records, compression=codecs[b]))
    return b"".join(out)


def sh(command: str, mount: Path, *, show: int = 6) -> str:
    """Run one shell command in the mount point, echo it, and return its output."""
    print(f"      $ {command.split(chr(10))[0] + ' …' if chr(10) in command else command}")
    out = subprocess.run(["bash", "-c", command], cwd=mount, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines()[:show]:
        print(f"        {line[:150]}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default="var/store", help="the store directory (created if missing)")
    ap.add_argument("--mount", default="var/mnt", help="the mount point (created if missing)")
    ap.add_argument("--events", type=int, default=20_000, help="click events written by awk")
    ap.add_argument("--app-events", type=int, default=1_000, help="click events sent as producer batches")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # progress in order with the job's
    started = time.monotonic()
    store, mount = Path(args.store), Path(args.mount)

    print(f"[1/6] mounting {store} at {mount}")
    proc, log_file = start_mount(store, mount)
    code: int | None = None
    try:
        for topic in ("clicks", "user-counts"):
            if (mount / topic).exists():
                sh(f"echo {topic} > .logfs/delete-topic", mount)
        sh("mkdir clicks clicks/1 clicks/2 user-counts && ls", mount)

        print(f"[2/6] producing {args.events:,} click events with awk, and {args.app_events:,} as producer batches")
        awk = AWK_EVENTS.format(n=args.events, seed=args.seed, pages=" ".join(PAGES), npages=len(PAGES), users=USERS,
                                span=SPAN_MS)  # fmt: skip
        sh(awk, mount)
        app = store.parent / "app-clicks.kafka"
        app.write_bytes(app_batches(random.Random(args.seed), args.app_events, time.time_ns() // 1_000_000))
        sh(f"cat {app.resolve()} > clicks/0/batches", mount)
        produced = args.events + args.app_events // len(Compression) * len(Compression)

        print("[3/6] the events, committed, as files")
        sh("wc -l clicks/*/hw/*.jsonl", mount)
        sh("head -n 2 clicks/1/at/earliest", mount)
        sh("head -c 300 clicks/0/state; echo", mount)
        segment = next((store / "clicks-0").glob("*.log")).resolve()  # the store on disk: Kafka's own format
        fields = "$1, $2, $3, $4, $5, $6, $(NF-6), $(NF-5), $(NF-2), $(NF-1), $NF"  # offsets, size, codec, crc
        sh(f"{LOGFS} dump {segment} | tail -n 5 | awk '{{print {fields}}}'", mount)

        print(
            "[4/6] the PySpark job: per-user clicks in 5-minute event-time windows, through the logfs source and sink"
        )
        job_log = store.parent / "clicks-job.log"
        with open(job_log, "wb") as log:  # Spark's own log lines go there; the job's progress comes here
            job = subprocess.run([sys.executable, str(JOB), "--mount", str(mount)], stderr=log)
        if job.returncode != 0:
            sys.stdout.write(job_log.read_text(errors="replace")[-4000:])
            raise SystemExit(f"the Spark job failed (exit {job.returncode}); its log: {job_log}")

        print("[5/6] the results, read back with shell tools")
        sh("wc -l < user-counts/0/at/earliest", mount)
        sh("sort -t: -k2 -n -r user-counts/0/at/earliest | head -n 5", mount)
        values = (mount / "user-counts/0/at/earliest").read_text().splitlines()
        total = sum(json.loads(v)["clicks"] for v in values)
        if total != produced:
            raise SystemExit(f"the counts add up to {total} clicks, but {produced} events were produced")
        print(f"      the {len(values)} counts add up to the {produced:,} events produced")
    finally:
        print(f"[6/6] unmounting {mount}")
        code = stop_mount(proc, mount)
    if code != 0:
        raise SystemExit(f"logfs mount exited {code}; see {log_file}")
    check = subprocess.run([LOGFS, "check", str(store)], check=True, capture_output=True, text=True)
    print(f"      unmounted cleanly; $ logfs check {store}: {check.stdout.strip().splitlines()[-1]}")
    print(f"done in {time.monotonic() - started:.1f}s")
    return 0


def start_mount(store: Path, mount: Path) -> tuple[subprocess.Popen[bytes], Path]:
    store.mkdir(parents=True, exist_ok=True)
    mount.mkdir(parents=True, exist_ok=True)
    log_file = store.parent / "mount.log"
    with open(log_file, "wb") as log:
        proc = subprocess.Popen([LOGFS, "--log-level", "info", "mount", str(store), str(mount)], stderr=log)
    deadline = time.monotonic() + 20
    while not os.path.ismount(mount):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_mount(proc, mount)
            raise SystemExit(f"logfs mount did not come up; see {log_file}")
        time.sleep(0.05)
    return proc, log_file


def stop_mount(proc: subprocess.Popen[bytes], mount: Path) -> int | None:
    if proc.poll() is None:
        subprocess.run([LOGFS, "umount", str(mount)], check=False)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            return proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            subprocess.run(["fusermount3", "-u", "-z", str(mount)], check=False)
            return None


if __name__ == "__main__":
    sys.exit(main())
