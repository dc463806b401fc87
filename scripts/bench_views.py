#!/usr/bin/env python3
"""Benchmark the read views of ``at/`` and ``hw/`` (``mount/render/views.py``; no FUSE), each beside
``core/format/render.py``.

Rows (issue 4 targets reading >= 1,500,000 records/s through ``at/``, O(log n) per seek):

* core.render alone: read each stored batch and render it with ``render_plain`` (or ``render_jsonl``): the
  baseline, what any view must at least pay.
* a view opened on a cold cache, then read from byte 0 to the end in 128 KiB reads (what ``cat`` does): the open
  computes every batch's rendered size once (plain: from the value lengths; JSON lines: by rendering), the reads
  render again.
* the same range opened again with the index warm (sizes known): only the reads render. The shared LRU of rendered
  chunks is set to 8 MiB, far below the rendering, so no read is served from a previous pass.
* opening the range again (lookups/s with a warm index), and random 4 KiB reads (each renders one chunk).

Data (``--data``, issue 14): ``uniform``, ``--records`` 100-byte values (default 1,000,000) in batches of
``--batch-records`` (default 1,000, ~110 KB, as in scripts/bench_core.py); ``events``, ``--mib`` of realistic web
events (scripts/realdata.py, seeded: JSON of 150-1,500 bytes) as ``append`` stores lines written 1 MiB at a time
(``lines.encode_text_batches``: no keys, no headers, batches up to 1 MiB); ``producer``, the same events as a
kafka-python producer's 16 KiB batches (keys, one header each, half uncompressed, a quarter lz4, a quarter zstd).
Files go under ``--dir`` (default ./var/bench-views), deleted afterwards.

Usage: ``python scripts/bench_views.py [--data uniform|events|producer] [--records N] [--batch-records N] [--mib N]
[--jsonl] [--dir DIR]``
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from benchutil import print_rows  # scripts/ is sys.path[0]

from logfs.core.configtext import parse_store_config
from logfs.core.format.encode import encode_values
from logfs.core.format.lines import encode_text_batches
from logfs.core.format.render import render_jsonl, render_plain
from logfs.core.log.log import Log
from logfs.core.store import Store
from logfs.mount.render.rangeview import open_range
from logfs.mount.render.rendersize import CHUNK_BYTES_DEFAULT, RenderCache
from logfs.mount.render.renderspan import Format

KIB = 1024
MIB = 1024 * KIB
TIMESTAMP = 1_700_000_000_000
READ_BYTES = 128 * KIB


def values(n: int, size: int) -> list[bytes]:
    base = os.urandom(size // 2 + 1).hex().encode()[:size]
    return [(b"%08d" % i + base)[:size] for i in range(n)]


def best_of(runs: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def render_alone(log: Log, fmt: Format) -> int:
    total = 0
    for segment in log.segments:
        data = segment.log_file.read(0, segment.size_bytes)
        position = 0
        while position < len(data):
            size = int.from_bytes(data[position + 8 : position + 12], "big") + 12
            if fmt is Format.PLAIN:
                total += len(render_plain(data, position))
            else:
                total += len(render_jsonl(data, "t", 0, position))
            position += size
    return total


def read_view(log: Log, cache: RenderCache, fmt: Format, end: int) -> int:
    with open_range(log, cache, "t", 0, fmt, 0, end) as view:
        position = 0
        while chunk := view.read(position, READ_BYTES):
            position += len(chunk)
        assert position == view.size
        return position


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--batch-records", type=int, default=1_000)
    ap.add_argument("--chunk-kib", type=int, default=CHUNK_BYTES_DEFAULT // KIB, help="the index's chunk size")
    ap.add_argument("--jsonl", action="store_true", help="also measure JSON lines (about 5x slower to render)")
    ap.add_argument("--dir", default="var/bench-views")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    ap.add_argument("--data", choices=("uniform", "events", "producer"), default="uniform")
    ap.add_argument("--mib", type=int, default=96, help="MiB of realistic events (--data events|producer)")
    args = ap.parse_args()
    root = Path(args.dir)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        store = Store.open(root, parse_store_config(["max.message.bytes=4194304"]))
        store.create_topic("t", 1)
        log = store.log("t", 0)
        for batch in stored_batches(args):
            log.append_as_leader(bytearray(batch), 0)
        log.update_high_watermark(log.log_end_offset)
        n = log.high_watermark
        what = f"100 bytes in batches of {args.batch_records:,}" if args.data == "uniform" else args.data
        print(f"{n:,} records ({what}); {log.size_bytes / 1e6:.0f} MB stored")
        lines: list[tuple[str, str, str]] = []
        for fmt in (Format.PLAIN, Format.JSONL) if args.jsonl else (Format.PLAIN,):
            lines += bench_format(log, fmt, n, args.chunk_kib * KIB)
        print_rows(["measure", "value", "MB/s of rendering"], lines, markdown=args.markdown, right=lambda i: i > 0)
        store.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def stored_batches(args: argparse.Namespace) -> list[bytes]:
    """The batches to store for ``--data``."""
    if args.data == "uniform":
        return [encode_values(values(args.batch_records, 100), TIMESTAMP)] * (args.records // args.batch_records)
    import realdata  # scripts/ is sys.path[0]

    if args.data == "producer":
        return realdata.producer_file(args.mib * MIB, timestamp=TIMESTAMP)
    lines = [e.body for e in realdata.events(args.mib * MIB, timestamp=TIMESTAMP)]
    out: list[bytes] = []
    start = size = 0
    for i, line in enumerate(lines):  # what `append` makes of 1 MiB writes
        size += len(line) + 1
        if size >= MIB or i == len(lines) - 1:
            out += encode_text_batches(lines[start : i + 1], TIMESTAMP, MIB)
            start, size = i + 1, 0
    return out


def bench_format(log: Log, fmt: Format, n: int, chunk_bytes: int) -> list[tuple[str, str, str]]:
    """The rows of one rendering: the core's render alone (the baseline), then the views over it."""
    name = fmt.name.lower()
    render_alone(log, fmt)  # warm the page cache
    t_alone = best_of(2, lambda: render_alone(log, fmt))
    cold: list[float] = []

    def cold_pass() -> None:
        cache = RenderCache(max_rendered_bytes=8 * MIB, chunk_bytes=chunk_bytes)
        start = time.perf_counter()
        open_range(log, cache, "t", 0, fmt, 0, n).close()
        cold.append(time.perf_counter() - start)
        read_view(log, cache, fmt, n)

    t_cold = best_of(2, cold_pass)
    cache = RenderCache(max_rendered_bytes=8 * MIB, chunk_bytes=chunk_bytes)
    read_view(log, cache, fmt, n)
    t_warm = best_of(2, lambda: read_view(log, cache, fmt, n))
    opens = 2_000
    rng = random.Random(1)
    starts = [rng.randrange(n) for _ in range(opens)]
    t_open = best_of(1, lambda: [open_range(log, cache, "t", 0, fmt, s, n).close() for s in starts])
    view = open_range(log, cache, "t", 0, fmt, 0, n)
    rendered = view.size
    seeks = 2_000
    positions = [rng.randrange(view.size) for _ in range(seeks)]
    t_seek = best_of(1, lambda: [view.read(p, 4 * KIB) for p in positions])
    view.close()
    rows = [
        (f"core.render alone ({name})", n / t_alone, "records/s"),
        (f"view, cold cache: open + 128 KiB reads ({name})", n / t_cold, "records/s"),
        (f"  of which the open (sizes of {n:,} records)", min(cold), "s"),
        (f"view, warm index: 128 KiB reads ({name})", n / t_warm, "records/s"),
        (f"open at a random offset, warm index ({name})", opens / t_open, "opens/s"),
        (f"random 4 KiB reads ({name})", seeks / t_seek, "reads/s"),
    ]
    per_record = rendered / n  # bytes of rendering per record: the records/s rows also in MB/s of rendering
    return [
        (
            label,
            f"{value:,.3f} {unit}" if unit == "s" else f"{value:,.0f} {unit}",
            f"{value * per_record / 1e6:,.0f} MB/s" if unit == "records/s" else "",
        )
        for label, value, unit in rows
    ]


if __name__ == "__main__":
    raise SystemExit(main())
