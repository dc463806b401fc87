#!/usr/bin/env python3
"""Many ``follow/`` readers at once (issue 23, point 1): prints one Markdown table.

    .venv/bin/python scripts/bench_followers.py [--readers 100,500] [--idle-seconds 5]

For each count N, on a fresh store and mount: N ``cat MOUNT/t/0/follow/latest`` started at once, and

* the time until the mount counts all N open (``logfs_follow_readers`` in ``.logfs/metrics``), beside the time to
  start the same N ``cat`` processes on a pipe (what starting them costs alone, the baseline);
* the mount's CPU (its process and what it waited for, from /proc/<pid>/stat) over ``--idle-seconds`` while the N
  wait, as a share of one core; target: at most 5 % at 500 (docs/mount.md, "Ctrl-C (EINTR) and what waiting
  costs");
* one line written to ``t/0/append``: the time until every reader has printed it (their stdout is a pipe each);
* SIGINT of 5 readers: the median and max time until each has exited, beside the documented bound for N.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchutil import mount, print_rows, unmount  # scripts/ is sys.path[0]

from logfs.mount.signals import eintr_bound


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def readers_open(mnt: Path) -> int:
    for line in (mnt / ".logfs" / "metrics").read_text().splitlines():
        if line.startswith("logfs_follow_readers "):
            return int(line.split()[1])
    return 0


def default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_cats(path: str, n: int, interruptible: int = 0) -> list[subprocess.Popen[bytes]]:
    return [
        subprocess.Popen(
            ["cat", path], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
            preexec_fn=default_sigint if i < interruptible else None,
        )
        for i in range(n)
    ]  # fmt: skip


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()
        if p.stdout is not None:
            p.stdout.close()


def baseline_start(n: int) -> float:
    """Seconds to start n ``cat`` of a pipe that never writes: the process start-up alone."""
    r, w = os.pipe()
    start = time.monotonic()
    procs = [subprocess.Popen(["cat"], stdin=r, stdout=subprocess.DEVNULL) for _ in range(n)]
    took = time.monotonic() - start
    os.close(w)
    for p in procs:
        p.wait()
    os.close(r)
    return took


def one_count(root: Path, n: int, idle_s: float) -> list[str]:
    store, mnt = root / f"store{n}", root / f"mnt{n}"
    proc = mount(store, mnt, f"max.follow.readers={n + 100}")
    readers: list[subprocess.Popen[bytes]] = []
    try:
        os.mkdir(mnt / "t")
        start = time.monotonic()
        readers = start_cats(str(mnt / "t" / "0" / "follow" / "latest"), n, interruptible=5)
        while readers_open(mnt) < n:
            if time.monotonic() - start > 120:
                raise SystemExit(f"{n} readers did not open within 120 s")
            time.sleep(0.01)
        open_s = time.monotonic() - start
        time.sleep(0.5)
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        time.sleep(idle_s)
        cpu = (cpu_seconds(proc.pid) - cpu0) / (time.monotonic() - t0)
        pending = {p.stdout.fileno(): p for p in readers if p.stdout is not None}
        start = time.monotonic()
        with open(mnt / "t" / "0" / "append", "w") as f:
            f.write("hello\n")
        poller = select.poll()
        for fd in pending:
            poller.register(fd, select.POLLIN)
        while pending and time.monotonic() - start < 60:
            for fd, _ in poller.poll(1000):
                if os.read(fd, 64):
                    poller.unregister(fd)
                    del pending[fd]
        fanout_s = time.monotonic() - start
        if pending:
            raise SystemExit(f"{len(pending)} of {n} readers did not get the record within 60 s")
        latencies = []
        for p in readers[:5]:
            t = time.monotonic()
            p.send_signal(signal.SIGINT)
            p.wait(30)
            latencies.append(time.monotonic() - t)
    finally:
        stop(readers)
        unmount(proc, mnt)
    base = baseline_start(n)
    return [
        f"{n:,} readers of `follow/latest`",
        f"{open_s:.2f} s",
        f"{base:.2f} s",
        f"{cpu:.1%}",
        f"{fanout_s * 1000:.0f} ms",
        f"{statistics.median(latencies) * 1000:.0f} / {max(latencies) * 1000:.0f} ms",
        f"{eintr_bound(n) * 1000:.0f} ms",
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--readers", default="100,500", help="comma-separated counts")
    ap.add_argument("--idle-seconds", type=float, default=5.0)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        rows = [one_count(Path(tmp), int(n), args.idle_seconds) for n in args.readers.split(",")]
    head = [
        "readers started at once",
        "all open after",
        "baseline: starting as many cat on a pipe",
        "mount CPU while they wait (one core)",
        "one record → every reader",
        "SIGINT → exit, median / max of 5",
        "documented EINTR bound",
    ]
    print_rows(head, rows, markdown=True, right=lambda i: i > 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
