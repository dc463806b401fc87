"""Benchmark the mount against its same-run baselines (issue 4): prints one markdown table.

    .venv/bin/python scripts/bench_mount.py [--mib 100] [--records 1000000] [--latency 1000]

Rows, each beside its baseline measured in the same run on the same disk:

* ``dd if=<kafka batches file> of=MOUNT/t/0/batches bs=1M`` (MB/s) vs ``dd`` of the same file to a plain file, vs
  the core alone (``Log.append_as_leader`` of the same batches, no FUSE), and vs the FUSE floor (the same ``dd``
  into a pyfuse3 filesystem whose write handler does nothing).
* 100-byte lines through ``append`` in 1 MiB writes (records/s) vs the core alone (``encode_values`` + append).
* ``cat at/earliest`` (its first open: the rendered-size index is cold) and ``cat`` of a closed segment's ``hw/``
  file (records/s, MB/s) vs the same views opened and read without FUSE (``mount/render/views.py`` in this process, a
  cold cache, 256 KiB reads: what FUSE adds is the difference) and ``cat`` of a file on disk.
* End-to-end latency from one write of one record to a blocked ``follow/latest`` reader receiving it (p50, p99),
  after ``sync`` (the earlier rows leave ~300 MB of dirty pages whose writeback would otherwise sit in the samples).

Kafka's published single-machine figures for 100-byte records, the anchor: 821,557 records/s produced, 940,521
records/s consumed, 2 ms median / 3 ms p99 end to end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchutil import mount, timed, unmount

from logfs.core.config import StoreConfig
from logfs.core.configtext import parse_store_config
from logfs.core.format.encode import encode_values
from logfs.core.format.lines import encode_text_batches
from logfs.core.store import Store
from logfs.mount.render.rangeview import open_range
from logfs.mount.render.rendersize import RenderCache
from logfs.mount.render.renderspan import Format
from logfs.mount.render.views import hw_files

RECORD_BYTES = 100


def values(n: int) -> list[bytes]:
    return [b"%010d" % i + b"." * (RECORD_BYTES - 10) for i in range(n)]


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
        return timed(lambda: [log.append_as_leader(bytearray(b), 0) for b in batches])
    finally:
        store.close()


def core_lines(root: Path, lines: list[bytes], config: StoreConfig) -> float:
    store = Store.open(root, config)
    per_write = (1024 * 1024) // (RECORD_BYTES + 1)
    try:
        store.create_topic("t", 1)
        log = store.log("t", 0)

        def run() -> None:
            for i in range(0, len(lines), per_write):
                for batch in encode_text_batches(lines[i : i + per_write], 0, log.config.max_message_bytes):
                    log.append_as_leader(bytearray(batch), 0)

        return timed(run)
    finally:
        store.close()


def core_reads(root: Path, config: StoreConfig) -> tuple[float, float, float, float]:
    """The read rows' baseline without FUSE, on the store the mount left: seconds and MB for ``at/earliest`` of
    topic t (plain) and for the first ``hw/`` file (JSON lines), each opened on a cold cache and read in 256 KiB
    reads as the kernel asks (``mount/render/views.py`` alone, in one thread)."""
    store = Store.open(root, config)
    try:
        log = store.log("t", 0)
        out = []
        _, start, end = hw_files(log)[0]
        for fmt, lo, hi in ((Format.PLAIN, log.log_start_offset, log.high_watermark), (Format.JSONL, start, end)):
            began = time.perf_counter()
            with open_range(log, RenderCache(), "t", 0, fmt, lo, hi) as view:
                position = 0
                while chunk := view.read(position, 256 * 1024):
                    position += len(chunk)
            out += [time.perf_counter() - began, position / 1e6]
        return out[0], out[1], out[2], out[3]
    finally:
        store.close()


def latency(mnt: Path, count: int) -> tuple[float, float]:
    reader = subprocess.Popen(["cat", str(mnt / "lat/0/follow/latest")], stdout=subprocess.PIPE, bufsize=0)
    assert reader.stdout is not None
    time.sleep(0.3)
    fd = os.open(mnt / "lat/0/append", os.O_WRONLY)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=100, help="size of the batches file for dd (MiB)")
    parser.add_argument("--records", type=int, default=1_000_000, help="100-byte lines through append")
    parser.add_argument("--latency", type=int, default=1000, help="records for the end-to-end latency")
    parser.add_argument("--dir", type=Path, default=None, help="where to work (default: a temporary directory)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-mount-", dir=args.dir))
    config_pairs = ["segment.bytes=104857600"]  # 100 MiB segments: the hw/ row reads a closed one
    config = parse_store_config(config_pairs)
    rows: list[tuple[str, str, str]] = []
    try:
        per_batch = 1000
        n = args.mib * 1024 * 1024 // (RECORD_BYTES + 8) // per_batch * per_batch
        data = values(n)
        now = time.time_ns() // 1_000_000  # recent: retention.ms must not delete them during the run
        batches = [encode_values(data[i : i + per_batch], now) for i in range(0, n, per_batch)]
        source = work / "batches.bin"
        source.write_bytes(b"".join(batches))
        size_mb = source.stat().st_size / 1e6
        disk = dd(source, work / "copy.bin")
        floor = fuse_floor(source, work / "null-mnt")
        core = core_append(work / "core-store", batches, config)
        lines = values(args.records)
        core_l = core_lines(work / "core-lines", lines, config)
        text = work / "lines.txt"
        text.write_bytes(b"".join(v + b"\n" for v in lines))

        store, mnt = work / "store", work / "mnt"
        proc = mount(store, mnt, *config_pairs)
        try:
            for topic in ("t", "lines", "lat"):
                os.mkdir(mnt / topic)
            through = dd(source, mnt / "t/0/batches")
            rows.append((
                f"dd bs=1M of {size_mb:.0f} MB of batches into `batches`",
                f"{size_mb / through:,.0f} MB/s ({n / through:,.0f} records/s)",
                f"dd to disk {size_mb / disk:,.0f} MB/s; core alone {size_mb / core:,.0f} MB/s; "
                f"FUSE floor (a write handler that does nothing) {size_mb / floor:,.0f} MB/s",
            ))  # fmt: skip
            lines_s = timed(lambda: subprocess.run(
                ["dd", f"if={text}", f"of={mnt / 'lines/0/append'}", "bs=1M", "status=none"], check=True))  # fmt: skip
            rows.append((
                f"{args.records:,} 100-byte lines through `append`, 1 MiB writes",
                f"{args.records / lines_s:,.0f} records/s",
                f"core alone {args.records / core_l:,.0f} records/s",
            ))  # fmt: skip
            at = cat(mnt / "t/0/at/earliest")
            at_mb = (mnt / "t/0/at/earliest").stat().st_size / 1e6
            disk_cat = cat(source)
            read_rows = len(rows)  # the two read rows go here once their core baselines are measured (unmounted)
            hw_names = sorted(os.listdir(mnt / "t/0/hw"))
            closed = mnt / "t/0/hw" / hw_names[0]
            hw_mb = closed.stat().st_size / 1e6
            hw_s = cat(closed)
            with open(closed, "rb") as f:
                hw_records = sum(1 for _ in f)
            os.sync()  # the earlier rows' writeback must not sit in the latency samples
            p50, p99 = latency(mnt, args.latency)
            rows.append((
                f"write → blocked `follow/latest` reader, {args.latency} records",
                f"p50 {p50 * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms",
                "Kafka: 2 ms / 3 ms",
            ))  # fmt: skip
        finally:
            unmount(proc, mnt)
        core_at, core_at_mb, core_hw, core_hw_mb = core_reads(store, config)
        rows[read_rows:read_rows] = [
            (
                "`cat at/earliest` (plain), first open",
                f"{n / at:,.0f} records/s, {at_mb / at:,.0f} MB/s",
                f"views without FUSE (open + 256 KiB reads) {n / core_at:,.0f} records/s, {core_at_mb / core_at:,.0f}"
                f" MB/s; cat of the batches file on disk {size_mb / disk_cat:,.0f} MB/s",
            ),
            (
                f"`cat` of a closed segment's `hw/` file ({len(hw_names)} files)",
                f"{hw_records / hw_s:,.0f} records/s, {hw_mb / hw_s:,.0f} MB/s",
                f"views without FUSE {hw_records / core_hw:,.0f} records/s, {core_hw_mb / core_hw:,.0f} MB/s; "
                f"cat on disk {size_mb / disk_cat:,.0f} MB/s",
            ),
        ]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("| measurement | through the mount | baselines (same run) |")
    print("|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
