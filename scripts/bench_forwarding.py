"""Benchmark writes through a node that forwards them to the leader (issue 27, "Writes through any node"): prints one
table, the figure through a follower beside the same run's baseline, the same writes to the leader's own mount.

    .venv/bin/python scripts/bench_forwarding.py [--mib 16] [--rounds 4] [--writes 300] [--markdown] [--quick]

A three-node cluster on its own ZooKeeper (``min.insync.replicas=2``; the failover tests' helpers,
tests/cluster/zkcluster.py), one topic of one partition, every node in the ISR. Each row writes the same bytes once
through the leader's mount and once through a follower's mount, which forwards every request to the leader
(mount/forwarding.py); the two sides alternate, ``--rounds`` times, and each side's figure is the median of its
rounds (a shared VM's speed drifts; alternating spreads a slow spell over both sides).

Rows, realistic data first (``scripts/realdata.py``'s seeded web events):

* **acks=all throughput, producer batches**: kafka-python batches of 16 KiB (keys, a header, half lz4/zstd), ~1 MiB
  of whole batches per write(2) to ``<p>/batches``, each followed by fsync(2). MB/s.
* **acks=all latency, one event per write**: one event as a JSON line per write(2) to ``append.jsonl``, then
  fsync(2): the time both take, p50 and p99 (a row each) over ``--writes`` writes a side per round.
* **acks=1 latency, one event per write**: the same line, write(2) alone (the leader appended it, unreplicated).
* **acks=all throughput, uniform records** (the second row of the kind): 1 MiB batches of 1,000 records of 100
  bytes.

The price of forwarding is the last column: the follower's figure over the leader's. Run it on an idle machine
(``scripts/bench_runs.py`` runs it three times and prints min / median / max).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import realdata
from benchutil import print_rows, requests_of

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "helpers"), str(ROOT / "tests" / "cluster")]

from zkcluster import Cluster, Node, wait_until  # noqa: E402

TOPIC = "t"
MB = 1e6


def _full_isr(cluster: Cluster) -> bool:
    state = cluster.partition_znode(TOPIC, 0)
    return state is not None and len(state["isr"]) == len(cluster.ids)


def _throughput(mount: Path, requests: Sequence[bytes]) -> float:
    """MB/s of ``requests`` written to ``<mount>/t/0/batches``, each write followed by fsync (acks=all)."""
    fd = os.open(mount / TOPIC / "0" / "batches", os.O_WRONLY)
    try:
        start = time.perf_counter()
        for request in requests:
            os.write(fd, request)
            os.fsync(fd)
        took = time.perf_counter() - start
    finally:
        os.close(fd)
    return sum(map(len, requests)) / took / MB


def _latencies(mount: Path, lines: Sequence[bytes], *, acks_all: bool) -> list[float]:
    """Seconds each line's write(2) (and fsync(2) with ``acks_all``) took on ``<mount>/t/0/append.jsonl``."""
    fd = os.open(mount / TOPIC / "0" / "append.jsonl", os.O_WRONLY)
    out = []
    try:
        for line in lines:
            start = time.perf_counter()
            os.write(fd, line)
            if acks_all:
                os.fsync(fd)
            out.append(time.perf_counter() - start)
    finally:
        os.close(fd)
    return out


def _alternate(
    rounds: int, leader: Node, follower: Node, run: Callable[[Path], list[float]]
) -> tuple[list[float], list[float]]:
    """Every sample of ``run`` through the leader and through the follower, which side goes first alternating."""
    direct: list[float] = []
    forwarded: list[float] = []
    sides = [(leader, direct), (follower, forwarded)]
    for i in range(rounds):
        for node, into in sides if i % 2 == 0 else sides[::-1]:
            into.extend(run(node.mount))
    return direct, forwarded


def _p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=16, help="MiB per side per round of the throughput rows")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--writes", type=int, default=300, help="writes per side per round of the latency rows")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--quick", action="store_true", help="a short run (--mib 4 --rounds 2 --writes 100)")
    args = parser.parse_args(argv)
    if args.quick:
        args.mib, args.rounds, args.writes = 4, 2, 100
    realistic = [b"".join(r) for r in requests_of(realdata.producer_file(args.mib << 20, seed=7))]
    uniform = [b"".join(r) for r in requests_of(realdata.uniform_file(args.mib << 20))]
    lines = realdata.jsonl_lines(realdata.events(args.writes * 400, seed=11)).splitlines(keepends=True)[: args.writes]
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory(prefix="bench-forwarding-") as tmp:
        cluster = Cluster(Path(tmp) / "cluster", 3, session_timeout_ms=6000).start()
        try:
            leader, _ = cluster.wait_leader(60)
            (leader.mount / TOPIC).mkdir()
            wait_until("every node in the ISR", lambda: _full_isr(cluster), 60)
            follower = next(n for n in cluster.nodes.values() if n is not leader)
            wait_until("the topic on the follower", lambda: (follower.mount / TOPIC / "0" / "batches").exists(), 60)

            for name, data in (("acks=all throughput, producer batches (MB/s)", realistic),
                               ("acks=all throughput, uniform 100 B records (MB/s)", uniform)):  # fmt: skip
                direct, forwarded = _alternate(args.rounds, leader, follower, lambda m, d=data: [_throughput(m, d)])
                a, b = statistics.median(direct), statistics.median(forwarded)
                rows.append([name, f"{a:.1f}", f"{b:.1f}", f"{b / a * 100:.0f} %"])
            for name, acks_all in (("acks=all latency, one event per write", True),
                                   ("acks=1 latency, one event per write", False)):  # fmt: skip
                direct, forwarded = _alternate(args.rounds, leader, follower,
                                               lambda m, s=acks_all: _latencies(m, lines, acks_all=s))  # fmt: skip
                for q in (0.5, 0.99):
                    a, b = _p(direct, q), _p(forwarded, q)
                    rows.append([f"{name}, p{q * 100:.0f} (µs)", f"{a * 1e6:.0f}", f"{b * 1e6:.0f}",
                                 f"{b / a * 100:.0f} %"])  # fmt: skip
        finally:
            cluster.close()
    rows = [rows[0], *rows[2:], rows[1]]  # realistic data first, the uniform records last
    head = ["writes", "to the leader (baseline)", "through a follower (forwarded)", "forwarded / baseline"]
    print_rows(head, rows, markdown=args.markdown, right=lambda i: i > 0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
