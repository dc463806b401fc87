"""Benchmark replication (issue 5): prints one markdown table.

    .venv/bin/python scripts/bench_replication.py [--mib 16] [--rounds 7] [--rate 50] [--seconds 10] \\
        [--failovers 3] [--seed 0] [--quick]

Rows:

* **acks=all produce throughput, realistic batches** (issue 14): ``scripts/realdata.py``'s seeded web events as a
  producer sends them (kafka-python batches of 16 KiB, keys, one header, half lz4/zstd), ~1 MiB of whole batches
  per write(2), each write followed by fsync(2), with one follower vs alone, the same alternating rounds as below.
  Target: with one follower ≥ 75 % of alone.
* **acks=all produce throughput**: 1 MiB RecordBatches (1,000 records of ~1 KB) written to a leader's
  ``<topic>/0/batches``, each write followed by fsync(2) (acks=all: on the leader's disk and, with a follower, the
  HW past it), with one follower (``logfs follow``, in the ISR before the first write) vs another leader alone,
  both up at once: ``--rounds`` rounds of ``--mib`` MiB alternate between the two, and each side's figure is the
  median of its rounds (a shared VM's speed drifts; alternating spreads a slow spell over both sides). Target: with
  one follower ≥ 50 % of alone (Kafka's published 3-way synchronous figure is 51 % of its unreplicated one).
* **follower lag**: a steady ``--rate`` MB/s of 1 MiB writes (acks=1) for ``--seconds``; for each write, the time
  from its write(2) returning to the follower's HW passing its last offset, seen by a reader of the follower
  mount's ``follow/0.kafka`` (``--mount``), which gets each batch when the follower's HW passes it. Target: p99
  ≤ 100 ms at 50 MB/s.
* **automatic failover with ZooKeeper** (issue 17; ``scripts/zkbench.py``): failover time (leader SIGKILL → first
  acknowledged write on the new leader) p50/p99 over ``--zk-failovers`` failovers with
  ``zookeeper.session.timeout.ms`` = ``--zk-session-ms`` and tickTime 200 ms (target ≤ session timeout + 1 s), and
  acks=all throughput of a three-node cluster with ZooKeeper against today's static one (a leader and two ``logfs
  follow`` followers) in alternating rounds of the same run (target ≥ 95 %).
* **failover time**: the leader is killed (SIGKILL), then the documented procedure runs: stop the follower
  (SIGTERM), ``logfs mount`` its store as the new leader, and the first append there returns. Reported: the time
  from the kill to that first append, and its parts (the follower's stop, the mount's start). Best of
  ``--failovers`` and their median.

Every process is real and separate (leaders ``logfs mount``, followers ``logfs follow``); stores live in a
temporary directory on the same disk. The figures depend on the machine: run it on an idle one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import realdata
import zkbench

from logfs.core.format.batch import iter_batch_positions
from logfs.core.format.encode import encode_values

LOGFS = str(Path(sys.executable).with_name("logfs"))
RECORDS_PER_BATCH = 1000
RECORD_BYTES = 1000  # a batch of 1,000 such records is ~1 MiB, under max.message.bytes (1,048,588)
MB = 1e6


def batches(count: int) -> list[bytes]:
    value = b"v" * RECORD_BYTES
    now = time.time_ns() // 1_000_000
    return [encode_values([value] * RECORDS_PER_BATCH, now) for _ in range(count)]


def real_writes(mib: int, seed: int) -> list[bytes]:
    """``mib`` MiB of realistic producer batches grouped into writes of ~1 MiB of whole batches."""
    batches = realdata.producer_file(mib * 1024 * 1024, seed, time.time_ns() // 1_000_000)
    writes: list[bytes] = []
    pending: list[bytes] = []
    for batch in batches:
        if pending and sum(map(len, pending)) + len(batch) > 1024 * 1024:
            writes.append(b"".join(pending))
            pending = []
        pending.append(batch)
    return writes + ([b"".join(pending)] if pending else [])


def _stderr(name: Path) -> int:
    """A log file beside ``name`` for a child's stderr (the children log warnings the benchmark provokes: the leader
    killed under its follower)."""
    return os.open(name.with_name(name.name + ".log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def wait_mounted(proc: subprocess.Popen[bytes], mnt: Path) -> None:
    while not os.path.ismount(mnt):
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args} exited {proc.returncode}")
        time.sleep(0.005)


def start_leader(store: Path, mnt: Path, *config: str) -> subprocess.Popen[bytes]:
    mnt.mkdir(parents=True, exist_ok=True)
    args = [LOGFS, "mount", str(store), str(mnt)]
    for pair in config:
        args += ["--config", pair]
    err = _stderr(store)
    proc = subprocess.Popen(args, stderr=err)
    os.close(err)
    wait_mounted(proc, mnt)
    return proc


def start_follower(leader: Path, store: Path, replica_id: int, mnt: Path | None = None) -> subprocess.Popen[bytes]:
    args = [LOGFS, "follow", str(leader), str(store), "--replica-id", str(replica_id)]
    if mnt is not None:
        mnt.mkdir(parents=True, exist_ok=True)
        args += ["--mount", str(mnt)]
    err = _stderr(store)
    proc = subprocess.Popen(args, stderr=err)
    os.close(err)
    if mnt is not None:
        wait_mounted(proc, mnt)
    return proc


def stop(proc: subprocess.Popen[bytes], mnt: Path | None = None) -> None:
    if proc.poll() is None:
        if mnt is not None and os.path.ismount(mnt):
            subprocess.run([LOGFS, "umount", str(mnt)], check=False, capture_output=True)
        else:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if mnt is not None:
        with contextlib.suppress(OSError):
            os.stat(mnt)
            if not os.path.ismount(mnt):
                return
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=False, capture_output=True)


def state(mnt: Path, topic: str = "t", partition: int = 0) -> dict[str, object]:
    result: dict[str, object] = json.loads((mnt / topic / str(partition) / "state").read_bytes())
    return result


def wait_isr(leader: Path, replica_id: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while replica_id not in state(leader)["isr"]:  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise SystemExit(f"replica {replica_id} did not join the ISR within {timeout_s} s")
        time.sleep(0.01)


@contextlib.contextmanager
def cluster(root: Path, followers: int, *, follower_mount: bool = False) -> Iterator[tuple[Path, Path | None]]:
    """A leader (node 1) with ``followers`` followers (nodes 2 …), topic ``t`` of one partition, every follower in
    the ISR: (leader mount, first follower's mount or None)."""
    ids = ",".join(str(i) for i in range(1, followers + 2))
    lmnt = root / "L.mnt"
    leader = start_leader(root / "L", lmnt, "node.id=1", f"replica.ids={ids}")
    procs: list[tuple[subprocess.Popen[bytes], Path | None]] = []
    try:
        os.mkdir(lmnt / "t")
        for i in range(followers):
            fmnt = root / f"F{i + 2}.mnt" if follower_mount and i == 0 else None
            procs.append((start_follower(lmnt, root / f"F{i + 2}", i + 2, fmnt), fmnt))
        for i in range(followers):
            wait_isr(lmnt, i + 2)
        yield lmnt, procs[0][1] if procs else None
    finally:
        for proc, fmnt in procs:
            stop(proc, fmnt)
        stop(leader, lmnt)


def produce_acks_all(mnt: Path, data: list[bytes]) -> float:
    """Write each batch then fsync (acks=all); seconds."""
    fd = os.open(mnt / "t" / "0" / "batches", os.O_WRONLY)
    try:
        began = time.perf_counter()
        for b in data:
            os.write(fd, b)
            os.fsync(fd)
        return time.perf_counter() - began
    finally:
        os.close(fd)


def bench_acks_all(root: Path, data: list[bytes], rounds: int) -> tuple[list[float], list[float]]:
    """MB/s of acks=all produce of the writes ``data`` in each of ``rounds`` rounds: (alone, with one follower).

    Both clusters run side by side and the rounds alternate (alone, replicated, alone, …), so a slow spell of a
    shared machine lands on both sides rather than on one."""
    size = sum(map(len, data))
    with contextlib.ExitStack() as stack:
        mounts = []
        for followers in (0, 1):
            base = root / f"acks{followers}"
            base.mkdir()
            lmnt, _ = stack.enter_context(cluster(base, followers))
            produce_acks_all(lmnt, data[:4])  # warm up: the first appends open files
            mounts.append(lmnt)
        results: list[list[float]] = [[], []]
        for _ in range(rounds):
            for side, lmnt in enumerate(mounts):
                results[side].append(size / produce_acks_all(lmnt, data) / MB)
    shutil.rmtree(root / "acks0", ignore_errors=True)
    shutil.rmtree(root / "acks1", ignore_errors=True)
    return results[0], results[1]


def bench_lag(root: Path, rate_mb_s: float, seconds: float) -> tuple[list[float], float]:
    """Follower lag in ms for each write of a steady load, and the MB/s actually produced.

    The follower's HW is watched through its mount: a reader of ``follow/0.kafka`` gets each batch as soon as the
    follower's HW passes it (the follower wakes its follow readers when a fetch moves the HW), as raw bytes, so the
    probe costs little and adds no polling delay."""
    base = root / "lag"
    base.mkdir()
    one = batches(1)[0]
    count = max(1, int(rate_mb_s * MB * seconds / len(one)))
    interval = len(one) / (rate_mb_s * MB)
    sent: list[float] = []  # when write i returned
    seen: list[float] = []  # when the follower's HW passed batch i
    with cluster(base, 1, follower_mount=True) as (lmnt, fmnt):
        assert fmnt is not None

        def watch() -> None:
            # A new topic starts with its live followers in the ISR (docs/replication.md), so the ISR the cluster
            # waited for does not mean this follower has created the partition yet: wait for its mount to show it.
            path = fmnt / "t" / "0" / "follow" / "0.kafka"
            deadline = time.monotonic() + 30
            while not (fmnt / "t" / "0").exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            fd = os.open(path, os.O_RDONLY)
            opened.set()
            try:
                pending = b""
                while len(seen) < count:
                    chunk = os.read(fd, 4 << 20)
                    if not chunk:
                        return
                    now = time.perf_counter()
                    pending += chunk
                    consumed = 0
                    for position, size in iter_batch_positions(pending):
                        seen.append(now)
                        consumed = position + size
                    pending = pending[consumed:]
            finally:
                os.close(fd)

        opened = threading.Event()
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        opened.wait(60)  # the first write's lag counts from its write, not from the reader's open
        fd = os.open(lmnt / "t" / "0" / "batches", os.O_WRONLY)
        try:
            began = time.perf_counter()
            for i in range(count):
                os.write(fd, one)
                sent.append(time.perf_counter())
                delay = began + (i + 1) * interval - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            produced = count * len(one) / (time.perf_counter() - began) / MB
        finally:
            os.close(fd)
        watcher.join(60)
    shutil.rmtree(base, ignore_errors=True)
    return [(s - w) * 1000 for w, s in zip(sent, seen, strict=False)], produced


def bench_failover(root: Path) -> tuple[float, float, float]:
    """Seconds from the leader's SIGKILL to the first append on the promoted follower: (total, follower stop,
    mount start)."""
    base = root / f"failover{time.monotonic_ns()}"
    base.mkdir()
    lmnt, fmnt = base / "L.mnt", base / "F.mnt"
    leader = start_leader(base / "L", lmnt, "node.id=1", "replica.ids=1,2")
    follower = start_follower(lmnt, base / "F", 2)
    new: subprocess.Popen[bytes] | None = None
    try:
        os.mkdir(lmnt / "t")
        wait_isr(lmnt, 2)
        fd = os.open(lmnt / "t" / "0" / "append", os.O_WRONLY)
        os.write(fd, b"acked\n")
        os.fsync(fd)
        os.close(fd)
        killed = time.perf_counter()
        leader.kill()
        follower.send_signal(signal.SIGTERM)
        follower.wait(60)
        stopped = time.perf_counter()
        fmnt.mkdir()
        new = start_leader(base / "F", fmnt, "node.id=2", "replica.ids=1,2")
        mounted = time.perf_counter()
        fd = os.open(fmnt / "t" / "0" / "append", os.O_WRONLY)
        os.write(fd, b"first\n")
        os.close(fd)
        served = time.perf_counter()
        return served - killed, stopped - killed, mounted - stopped
    finally:
        if new is not None:
            stop(new, fmnt)
        stop(follower)
        leader.wait()
        stop(leader, lmnt)
        shutil.rmtree(base, ignore_errors=True)


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=16, help="MiB produced with acks=all per round (default 16)")
    ap.add_argument("--rounds", type=int, default=7, help="acks=all rounds each way, alternating (default 7)")
    ap.add_argument("--rate", type=float, default=50, help="MB/s of the steady load of the lag row (default 50)")
    ap.add_argument("--seconds", type=float, default=10, help="seconds of that load (default 10)")
    ap.add_argument("--failovers", type=int, default=3, help="failovers timed (default 3)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the realistic data")
    ap.add_argument("--zk-failovers", type=int, default=20, help="failovers timed with ZooKeeper (default 20)")
    ap.add_argument("--zk-session-ms", type=int, default=1500, help="their zookeeper.session.timeout.ms (1500)")
    ap.add_argument("--quick", action="store_true",
                    help="--mib 8 --rounds 3 --seconds 3 --failovers 1 --zk-failovers 3")
    args = ap.parse_args()
    if args.quick:
        args.mib, args.rounds, args.seconds, args.failovers, args.zk_failovers = 8, 3, 3, 1, 3
    with tempfile.TemporaryDirectory(prefix="bench-replication-", dir=os.environ.get("TMPDIR")) as tmp:
        root = Path(tmp)
        real_alone, real_replicated = bench_acks_all(root, real_writes(args.mib, args.seed), args.rounds)
        alone_rounds, replicated_rounds = bench_acks_all(root, batches(args.mib), args.rounds)
        lags, produced = bench_lag(root, args.rate, args.seconds)
        failovers = [bench_failover(root) for _ in range(args.failovers)]
        zk_times = zkbench.bench_zk_failovers(root, args.zk_failovers, args.zk_session_ms)
        zk_static, zk_auto = zkbench.bench_zk_throughput(root, batches(args.mib), args.rounds, args.zk_session_ms,
                                                         cluster, produce_acks_all)  # fmt: skip
    best = min(failovers)
    med = statistics.median(f[0] for f in failovers)
    alone, replicated = statistics.median(alone_rounds), statistics.median(replicated_rounds)
    ratio = replicated / alone
    rounds = f"median of {len(alone_rounds)} rounds of {args.mib} MiB"
    print(f"seed {args.seed}; a 2-core VM shared with others: the figures are noisy")
    print("| measurement | result | target |")
    print("|---|---|---|")
    real = f"realistic 16 KiB producer batches, ~1 MiB writes + fsync ({rounds})"
    r_alone, r_replicated = statistics.median(real_alone), statistics.median(real_replicated)
    print(f"| acks=all produce, {real}, leader alone | {r_alone:,.0f} MB/s "
          f"({min(real_alone):,.0f}–{max(real_alone):,.0f}) | |")  # fmt: skip
    print(f"| acks=all produce, {real}, one follower | {r_replicated:,.0f} MB/s "
          f"({min(real_replicated):,.0f}–{max(real_replicated):,.0f}), {r_replicated / r_alone:.0%} of alone "
          "| >= 75 % of alone (issue 14) |")  # fmt: skip
    print(f"| acks=all produce, 1 MiB writes + fsync, leader alone ({rounds}) | {alone:,.0f} MB/s "
          f"({min(alone_rounds):,.0f}–{max(alone_rounds):,.0f}) | |")  # fmt: skip
    print(f"| acks=all produce, 1 MiB writes + fsync, one follower ({rounds}) | {replicated:,.0f} MB/s "
          f"({min(replicated_rounds):,.0f}–{max(replicated_rounds):,.0f}), {ratio:.0%} of alone "
          "| >= 50 % of alone |")  # fmt: skip
    p50, p99 = percentile(lags, 0.5), percentile(lags, 0.99)
    print(f"| follower lag (write returned → follower HW past it), {produced:,.0f} MB/s steady, {len(lags)} writes "
          f"| p50 {p50:,.1f} ms, p99 {p99:,.1f} ms | p99 <= 100 ms at 50 MB/s |")  # fmt: skip
    print(f"| failover: leader SIGKILL → first append on the promoted follower (best of {len(failovers)}) "
          f"| {best[0] * 1000:,.0f} ms (follower stop {best[1] * 1000:,.0f} ms, mount {best[2] * 1000:,.0f} ms); "
          f"median {med * 1000:,.0f} ms | |")  # fmt: skip
    bound = args.zk_session_ms / 1000 + 1
    print(f"| automatic failover with ZooKeeper: leader SIGKILL → first acknowledged write on the new leader "
          f"({len(zk_times)} failovers, zookeeper.session.timeout.ms={args.zk_session_ms}, tickTime 200 ms) "
          f"| p50 {percentile(zk_times, 0.5) * 1000:,.0f} ms, p99 {percentile(zk_times, 0.99) * 1000:,.0f} ms, "
          f"max {max(zk_times) * 1000:,.0f} ms | <= {bound * 1000:,.0f} ms |")  # fmt: skip
    s_med, z_med = statistics.median(zk_static), statistics.median(zk_auto)
    print(f"| acks=all produce, 1 MiB writes + fsync, 3 replicas, static leader + 2 followers ({rounds}) "
          f"| {s_med:,.0f} MB/s ({min(zk_static):,.0f}–{max(zk_static):,.0f}) | |")  # fmt: skip
    print(f"| acks=all produce, 1 MiB writes + fsync, 3 nodes with ZooKeeper ({rounds}) | {z_med:,.0f} MB/s "
          f"({min(zk_auto):,.0f}–{max(zk_auto):,.0f}), {z_med / s_med:.0%} of static "
          "| >= 95 % of static |")  # fmt: skip


if __name__ == "__main__":
    main()
