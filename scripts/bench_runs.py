#!/usr/bin/env python3
"""Run one benchmark script several times and print its tables once, each measured number as min / median / max.

    .venv/bin/python scripts/bench_runs.py [--runs 3] [--max-busy 0.05] -- scripts/bench_mount.py --quick

A figure counts only when it was taken with nothing else running on the machine, and one run of a benchmark on a
shared VM says little: the docs quote three runs of the same code, with the same-run baselines beside each figure.
Every ``bench_*.py`` prints its rows as a table whose cells hold the figure and its baselines (``--markdown`` where
the script has the flag; ``bench_mount.py``, ``bench_replication.py`` and ``bench_spark.py`` always print Markdown),
so merging runs needs no knowledge of any one benchmark: the cells of the runs are compared with their numbers taken
out, and where the rest of a cell is the same text in every run, each number that differs between runs is printed as
``min / median / max`` (the median with the cell's own formatting). A cell whose text differs in more than its
numbers is printed run by run, separated by `` ‖ ``.

Before each run the script waits (up to ``--settle`` seconds) for the machine to be idle: the share of CPU time spent
outside idle over two seconds, from /proc/stat, under ``--max-busy``. A run made on a busier machine is still made,
but flagged: its figures are not to be quoted. Exit status: the
first failing run's, or 0.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def busy_fraction(seconds: float = 2.0) -> float:
    """The fraction of the machine's CPU time spent outside idle over ``seconds``, from /proc/stat: what else is
    running right now (a load average would still show the previous run for a minute after it ended)."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + fields[4]
        return sum(fields), idle

    total0, idle0 = sample()
    time.sleep(seconds)
    total1, idle1 = sample()
    return 1.0 - (idle1 - idle0) / max(1, total1 - total0)


def wait_for_quiet(limit: float, patience_s: float) -> float:
    """The machine's busy fraction once it is under ``limit``, or the last one seen after ``patience_s``."""
    deadline = time.monotonic() + patience_s
    busy = busy_fraction()
    while busy > limit and time.monotonic() < deadline:
        busy = busy_fraction()
    return busy


def tables(text: str) -> list[list[list[str]]]:
    """The Markdown tables of ``text``: each a list of rows, each a list of cells (separator rows dropped)."""
    found: list[list[list[str]]] = []
    current: list[list[str]] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|") and stripped.endswith("|"):
            cells = [c.strip() for c in stripped[1:-1].split("|")]
            if current is None:
                current = []
                found.append(current)
            if not all(set(c) <= set("-: ") for c in cells):
                current.append(cells)
        else:
            current = None
    return found


def _parse(token: str) -> float:
    return float(token.replace(",", ""))


def _format_like(value: float, samples: Sequence[str]) -> str:
    decimals = max((len(s.split(".")[1]) if "." in s else 0) for s in samples)
    commas = any("," in s for s in samples)
    return f"{value:,.{decimals}f}" if commas else f"{value:.{decimals}f}"


def merge_cell(cells: Sequence[str]) -> str:
    """One cell from the same cell of every run (see the module docstring)."""
    skeletons = {NUMBER.sub("#", c) for c in cells}
    if len(skeletons) != 1:
        return " ‖ ".join(cells)
    columns = list(zip(*(NUMBER.findall(c) for c in cells), strict=True))
    parts = NUMBER.split(cells[0])
    out = [parts[0]]
    for tokens, rest in zip(columns, parts[1:], strict=True):
        if len(set(tokens)) == 1:
            out.append(tokens[0])
        else:
            values = sorted(_parse(t) for t in tokens)
            low, mid, high = values[0], statistics.median(values), values[-1]
            out.append(" / ".join(_format_like(v, tokens) for v in (low, mid, high)))
        out.append(rest)
    return "".join(out)


def merge(runs: Sequence[list[list[list[str]]]]) -> list[list[list[str]]]:
    """The tables of every run merged cell by cell; a run whose tables have another shape is reported, not merged."""
    first = runs[0]
    shapes = {tuple(tuple(len(r) for r in t) for t in run) for run in runs}
    if len(shapes) != 1:
        raise SystemExit(f"bench_runs: the runs printed tables of different shapes: {sorted(shapes)}")
    return [
        [[merge_cell([run[t][r][c] for run in runs]) for c in range(len(first[t][r]))] for r in range(len(first[t]))]
        for t in range(len(first))
    ]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--max-busy", type=float, default=0.05, help="CPU share busy before a run above which it is flagged"
    )
    ap.add_argument("--settle", type=float, default=90.0, help="seconds to wait at most for an idle machine")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- SCRIPT [ARGS…]")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("name a benchmark script after --")
    outputs: list[list[list[list[str]]]] = []
    busy_before: list[float] = []
    for run in range(args.runs):
        busy = wait_for_quiet(args.max_busy, args.settle)
        busy_before.append(busy)
        flag = "" if busy <= args.max_busy else f"  (over --max-busy {args.max_busy}: do not quote this run)"
        print(
            f"bench_runs: run {run + 1} of {args.runs}, CPU busy before it {busy:.1%}{flag}",
            file=sys.stderr,
            flush=True,
        )
        done = subprocess.run([sys.executable, *command], capture_output=True, text=True, check=False)
        sys.stderr.write(done.stderr[-4000:])
        if done.returncode != 0:
            print(done.stdout, end="")
            kept = Path(tempfile.mkstemp(prefix="bench_runs-", suffix=".err")[1])
            kept.write_text(done.stderr)
            print(f"bench_runs: run {run + 1} exited {done.returncode}; its whole stderr: {kept}", file=sys.stderr)
            return done.returncode
        outputs.append(tables(done.stdout))
    print(
        f"{' '.join(command)}: {args.runs} runs, min / median / max; CPU busy before each: "
        + ", ".join(f"{x:.1%}" for x in busy_before)
        + f"; {os.uname().nodename}, {time.strftime('%Y-%m-%d')}\n"
    )
    for table in merge(outputs):
        print("| " + " | ".join(table[0]) + " |")
        print("|" + "---|" * len(table[0]))
        for row in table[1:]:
            print("| " + " | ".join(row) + " |")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
