"""What the benchmark scripts share: timing a call, a ``logfs mount`` started and stopped around a measurement, the
write → ``follow/latest`` latency, and the printing of a result table (aligned text, or Markdown for the docs).

Imported as ``benchutil``: the benchmarks run as ``python scripts/bench_<x>.py``, so scripts/ is ``sys.path[0]``.

Its imports stay light on purpose: ``subprocess`` is imported only by the functions that start processes. Merely
importing it made ``bench_records.py``'s 10,000-record encode row 13 % slower (3.2 against 3.7-3.8 M records/s,
three runs each, the same code measured; an allocation-layout effect), which would have read as a regression.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess

LOGFS = str(Path(sys.executable).with_name("logfs"))


def requests_of(batches: Sequence[bytes], size: int = 1 << 20) -> list[list[bytes]]:
    """``batches`` in groups of about ``size`` bytes: the requests a ``dd bs=1M`` into ``batches`` makes, which the
    mount appends with one ``Log.append_batches_as_leader`` each (the core-alone rows append them the same way)."""
    groups: list[list[bytes]] = [[]]
    filled = 0
    for b in batches:
        if filled >= size:
            groups.append([])
            filled = 0
        groups[-1].append(b)
        filled += len(b)
    return groups


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def mount(store: Path, mnt: Path, *config: str) -> subprocess.Popen[bytes]:
    """``logfs mount`` of ``store`` at ``mnt`` (each of ``config`` a ``--config key=value``), once it is mounted."""
    mnt.mkdir(parents=True, exist_ok=True)
    args = [LOGFS, "mount", str(store), str(mnt)]
    for pair in config:
        args += ["--config", pair]
    import subprocess

    proc = subprocess.Popen(args)
    while not os.path.ismount(mnt):
        if proc.poll() is not None:
            raise SystemExit(f"logfs mount exited {proc.returncode}")
        time.sleep(0.02)
    return proc


def unmount(proc: subprocess.Popen[bytes], mnt: Path) -> None:
    import subprocess

    subprocess.run([LOGFS, "umount", str(mnt)], check=False)
    proc.wait(60)


def print_rows(
    head: Sequence[str], lines: Sequence[Sequence[object]], *, markdown: bool, right: Callable[[int], bool]
) -> None:
    """The rows ``lines`` under ``head``: a Markdown table, or text columns (column ``i`` right-aligned when
    ``right(i)``: the numbers)."""
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for line in lines:
            print("| " + " | ".join(str(c) for c in line) + " |")
        return
    widths = [max(len(str(x[i])) for x in [head, *lines]) for i in range(len(head))]
    for line in [head, *lines]:
        cells = zip(line, widths, strict=True)
        print("  ".join(str(c).rjust(w) if right(i) else str(c).ljust(w) for i, (c, w) in enumerate(cells)))


def follow_latency(mnt: Path, topic: str, count: int) -> tuple[float, float]:
    """(p50, p99) seconds from one write through ``append`` to a blocked ``follow/latest`` reader having it: one line
    at a time into partition 0 of ``topic``, which must exist."""
    import statistics
    import subprocess

    reader = subprocess.Popen(["cat", str(mnt / topic / "0" / "follow" / "latest")], stdout=subprocess.PIPE, bufsize=0)
    assert reader.stdout is not None
    time.sleep(0.3)
    fd = os.open(mnt / topic / "0" / "append", os.O_WRONLY)
    samples = []
    try:
        for i in range(count):
            line = b"%08d\n" % i
            start = time.perf_counter()
            os.write(fd, line)
            got = b""
            while not got.endswith(b"\n"):
                got += reader.stdout.read(64)
            samples.append(time.perf_counter() - start)
    finally:
        os.close(fd)
        reader.kill()
        reader.wait()
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]
