"""Benchmark the mount against its same-run baselines (issues 4 and 14): prints one markdown table.

    .venv/bin/python scripts/bench_mount.py [--mib 96] [--records 500000] [--latency 1000] [--seed 0] [--quick]

Realistic data first (``scripts/realdata.py``, seeded: web events of 150-1,500 bytes as a producer and as lines
send them), uniform 100-byte records second, each row beside its baselines measured in the same run on the same disk:

* ``dd if=<file> of=MOUNT/<topic>/0/batches bs=1M`` (MB/s) of the realistic producer file (kafka-python batches of
  16 KiB, keys, a header, half lz4/zstd) and of the uniform file (1,000 records of 100 bytes per batch) vs ``dd`` of
  the same file to a plain file, vs the core alone (``Log.append_batches_as_leader`` of the same batches in 1 MiB
  requests, no FUSE), and vs the FUSE floor (the same ``dd`` into a pyfuse3 filesystem whose write handler does
  nothing).
* the events as text lines through ``append``, the same events as ``{"key":"user-<n>","value":<event>}`` lines
  through ``append.jsonl``, and 100-byte lines through ``append``, each by ``dd bs=1M`` vs ``dd`` of the file to disk.
* ``cat at/earliest`` and ``cat at/earliest.jsonl`` of the events (their first open: the rendered-size index is
  cold) and of the uniform records, and ``cat`` of a closed segment's ``hw/`` file, vs the same views opened and
  read without FUSE (``mount/render/views.py`` in this process, 256 KiB reads: what FUSE adds is the difference) and
  ``cat`` of a file on disk.
* End-to-end latency from one write of one record to a blocked ``follow/latest`` reader receiving it (p50, p99),
  after ``sync`` (the earlier rows leave dirty pages whose writeback would otherwise sit in the samples).

The targets of issue 14 are printed beside the figures. Kafka's published single-machine figures for 100-byte
records, the older anchor: 821,557 records/s produced, 940,521 records/s consumed, 2 ms median / 3 ms p99 end to end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import realdata
from benchutil import follow_latency, mount, requests_of, timed, unmount

from logfs.core.configtext import parse_store_config
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig
from logfs.mount.render.rangeview import open_range
from logfs.mount.render.rendersize import RenderCache
from logfs.mount.render.renderspan import Format
from logfs.mount.render.views import hw_files

MIB = 1024 * 1024
SEGMENT_BYTES = 64 * MIB  # the topics roll: the hw/ row reads a closed segment
TARGETS = {  # issue 14's, beside the rows they are about
    "batches-real": ">= 40 % of dd",
    "batches-uniform": ">= 40 % of dd",
    "append-real": ">= 40 % of dd",
    "jsonl-real": ">= 25 % of dd",
    "at-real": ">= 600 MB/s",
    "atjsonl-real": ">= 300 MB/s",
    "latency": "p50 <= 0.5 ms, p99 <= 2 ms",
}


def dd(source: Path, target: Path) -> float:
    return timed(lambda: subprocess.run(["dd", f"if={source}", f"of={target}", "bs=1M", "status=none"], check=True))


def cat(path: Path) -> float:
    return timed(lambda: subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True))


# The FUSE floor: a pyfuse3 filesystem whose one file takes every write and does nothing with it. What a write
# through FUSE costs before logfs does anything (the kernel's copies, the request round trip, pyfuse3 and trio).
NULL_FS = """
import errno, stat, sys
import pyfuse3, trio

class Sink(pyfuse3.Operations):
    async def getattr(self, inode, ctx=None):
        attr = pyfuse3.EntryAttributes()
        attr.st_ino = inode
        attr.st_mode = (stat.S_IFDIR | 0o755) if inode == pyfuse3.ROOT_INODE else (stat.S_IFREG | 0o644)
        return attr
    async def lookup(self, parent, name, ctx=None):
        if name != b"sink":
            raise pyfuse3.FUSEError(errno.ENOENT)
        return await self.getattr(2)
    async def open(self, inode, flags, ctx):
        info = pyfuse3.FileInfo(fh=inode)
        info.direct_io = True
        return info
    async def setattr(self, inode, attr, fields, fh, ctx):
        return await self.getattr(inode)
    async def write(self, fh, off, buf):
        return len(buf)

pyfuse3.init(Sink(), sys.argv[1], set())
try:
    trio.run(pyfuse3.main)
finally:
    pyfuse3.close()
"""


def fuse_floor(source: Path, mnt: Path) -> float:
    """Seconds for ``dd`` of ``source`` into the do-nothing filesystem (best of two)."""
    mnt.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", NULL_FS, str(mnt)])
    try:
        while not os.path.ismount(mnt):
            if proc.poll() is not None:
                raise SystemExit(f"the null filesystem exited {proc.returncode}")
            time.sleep(0.02)
        return min(dd(source, mnt / "sink") for _ in range(2))
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=False)
        proc.wait(30)


def core_append(root: Path, batches: list[bytes], config: StoreConfig) -> float:
    store = Store.open(root, config)
    try:
        store.create_topic("t", 1)
        log = store.log("t", 0)
        groups = [[bytearray(b) for b in group] for group in requests_of(batches)]  # 1 MiB writes, as dd bs=1M
        return timed(lambda: [log.append_batches_as_leader(r, 0) for r in groups])
    finally:
        store.close()


def core_reads(root: Path, config: StoreConfig, views: list[tuple[str, Format, bool]]) -> list[tuple[float, float]]:
    """The read rows' baseline without FUSE, on the store the mount left: (seconds, MB) for each ``(topic, format,
    hw)``: ``at/earliest`` of the topic (``hw``: its first ``hw/`` file), opened on a cold cache and read in 256 KiB
    reads as the kernel asks (``mount/render/views.py`` alone, in one thread)."""
    store = Store.open(root, config)
    try:
        out = []
        for topic, fmt, hw in views:
            log = store.log(topic, 0)
            lo, hi = (hw_files(log)[0][1:]) if hw else (log.log_start_offset, log.high_watermark)
            began = time.perf_counter()
            with open_range(log, RenderCache(), topic, 0, fmt, lo, hi) as view:
                position = 0
                while chunk := view.read(position, 256 * 1024):
                    position += len(chunk)
            out.append((time.perf_counter() - began, position / 1e6))
        return out
    finally:
        store.close()


def mb(path: Path) -> float:
    return path.stat().st_size / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=96, help="MiB of realistic events and of the uniform file")
    parser.add_argument("--records", type=int, default=500_000, help="100-byte lines through append")
    parser.add_argument("--latency", type=int, default=1000, help="records for the end-to-end latency")
    parser.add_argument("--seed", type=int, default=0, help="seed of the realistic data")
    parser.add_argument("--quick", action="store_true", help="16 MiB, 100,000 lines, 300 latency samples")
    parser.add_argument("--dir", type=Path, default=None, help="where to work (default: a temporary directory)")
    args = parser.parse_args()
    if args.quick:
        args.mib, args.records, args.latency = 16, 100_000, 300
    work = Path(tempfile.mkdtemp(prefix="bench-mount-", dir=args.dir))
    config_pairs = [f"segment.bytes={SEGMENT_BYTES}"]
    config = parse_store_config(config_pairs)
    rows: list[tuple[str, str, str, str]] = []
    try:
        now = time.time_ns() // 1_000_000  # recent: retention.ms must not delete them during the run
        events = realdata.events(args.mib * MIB, args.seed, now)
        files = {
            "real": (realdata.producer_batches(events, args.seed), work / "producer.bin"),
            "uni": (realdata.uniform_file(args.mib * MIB, now), work / "uniform.bin"),
        }
        for batches, path in files.values():
            path.write_bytes(b"".join(batches))
        counts = {"real": len(events), "uni": len(files["uni"][0]) * realdata.UNIFORM_PER_BATCH}
        texts = {"ev": work / "events.txt", "js": work / "events.jsonl", "lines": work / "lines.txt"}
        texts["ev"].write_bytes(realdata.event_lines(events))
        texts["js"].write_bytes(realdata.jsonl_lines(events))
        texts["lines"].write_bytes(b"".join(v + b"\n" for v in realdata.uniform_values(args.records)))
        del events
        disk = {k: dd(path, work / "copy.bin") for k, (_, path) in files.items()}
        disk |= {k: dd(path, work / "copy.bin") for k, path in texts.items()}
        floor = fuse_floor(files["real"][1], work / "null-mnt")
        core = {k: core_append(work / f"core-{k}", batches, config) for k, (batches, _) in files.items()}
        disk_cat = cat(texts["ev"])

        store, mnt = work / "store", work / "mnt"
        proc = mount(store, mnt, *config_pairs)
        try:
            for topic in ("real", "uni", "ev", "js", "lines", "lat"):
                os.mkdir(mnt / topic)
            for key, label in (("real", "realistic producer file"), ("uni", "uniform file")):
                path = files[key][1]
                through = dd(path, mnt / key / "0/batches")
                rows.append((
                    f"dd bs=1M of the {label} ({mb(path):.0f} MB) into `batches`",
                    f"{mb(path) / through:,.0f} MB/s ({counts[key] / through:,.0f} records/s)",
                    f"dd to disk {mb(path) / disk[key]:,.0f} MB/s ({disk[key] / through:.0%}); core alone "
                    f"{mb(path) / core[key]:,.0f} MB/s; FUSE floor (a write handler that does nothing, the realistic "
                    f"file) {mb(files['real'][1]) / floor:,.0f} MB/s",
                    TARGETS[f"batches-{'real' if key == 'real' else 'uniform'}"],
                ))  # fmt: skip
            for key, target, label in (
                ("ev", "append", f"the events ({counts['real']:,}) as lines through `append`"),
                ("js", "append.jsonl", "the events as JSON lines through `append.jsonl`"),
                ("lines", "append", f"{args.records:,} 100-byte lines through `append`"),
            ):
                through = dd(texts[key], mnt / key / "0" / target)
                records = counts["real"] if key != "lines" else args.records
                rows.append((
                    f"{label}, dd bs=1M ({mb(texts[key]):.0f} MB)",
                    f"{mb(texts[key]) / through:,.0f} MB/s ({records / through:,.0f} records/s)",
                    f"dd to disk {mb(texts[key]) / disk[key]:,.0f} MB/s ({disk[key] / through:.0%})",
                    TARGETS.get({"ev": "append-real", "js": "jsonl-real"}.get(key, ""), ""),
                ))  # fmt: skip
            read_rows = len(rows)  # the read rows go here once their core baselines are measured (unmounted)
            reads = []
            for topic, name, records in (("ev", "at/earliest", counts["real"]),
                                         ("ev", "at/earliest.jsonl", counts["real"]),
                                         ("uni", "at/earliest", counts["uni"])):  # fmt: skip
                path = mnt / topic / "0" / name
                reads.append((f"`cat {name}` of the {'events' if topic == 'ev' else 'uniform records'}, first open",
                              records, mb(path), cat(path)))  # fmt: skip
            hw_names = sorted(os.listdir(mnt / "uni/0/hw"))
            closed = mnt / "uni/0/hw" / hw_names[0]
            with open(closed, "rb") as f:
                hw_records = sum(1 for _ in f)
            kind = "a closed" if len(hw_names) > 1 else "the active (one segment: raise --mib)"
            reads.append((f"`cat` of {kind} segment's `hw/` file, uniform ({len(hw_names)} files)", hw_records,
                          mb(closed), cat(closed)))  # fmt: skip
            os.sync()  # the earlier rows' writeback must not sit in the latency samples
            p50, p99 = follow_latency(mnt, "lat", args.latency)
            rows.append((
                f"write → blocked `follow/latest` reader, {args.latency} records",
                f"p50 {p50 * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms",
                "Kafka: 2 ms / 3 ms",
                TARGETS["latency"],
            ))  # fmt: skip
        finally:
            unmount(proc, mnt)
        views = [("ev", Format.PLAIN, False), ("ev", Format.JSONL, False), ("uni", Format.PLAIN, False),
                 ("uni", Format.JSONL, True)]  # fmt: skip
        targets = ["at-real", "atjsonl-real", "", ""]
        rows[read_rows:read_rows] = [
            (
                label,
                f"{size / seconds:,.0f} MB/s ({records / seconds:,.0f} records/s)",
                f"views without FUSE (open + 256 KiB reads) {core_mb / core_s:,.0f} MB/s; cat of the events on disk "
                f"{mb(texts['ev']) / disk_cat:,.0f} MB/s",
                TARGETS.get(target, ""),
            )
            for (label, records, size, seconds), (core_s, core_mb), target in zip(
                reads, core_reads(store, config, views), targets, strict=True
            )
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"seed {args.seed}, {args.mib} MiB of events; 2-core VM shared with other work: the figures are noisy")
    print("| measurement | through the mount | baselines (same run) | target (issue 14) |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
