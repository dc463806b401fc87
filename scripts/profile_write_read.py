#!/usr/bin/env python3
"""Where the time of one 1 MiB ``batches`` write request and of one 1 MiB ``at/earliest`` read goes (issue 14).

The write side replays what the mount does with a request, in this process and without FUSE: the framer
(``core/format/framing.py``), then ``LeaderPartition.append_records_to_leader`` of the whole batches it returns, with
perf_counter wrappers put around the functions that make each step (validation's CRC, decompression and record
walk; offset stamping; the roll check; the segment's write and its indexes; the epoch cache; the HW rule). Each
wrapper costs ~0.3 µs a call, paid per batch (16 KiB batches: ~64 per request), not per record. The thread hand-off
is a ``trio.to_thread.run_sync`` round trip; what FUSE itself costs is ``dd`` into a filesystem whose write handler
does nothing (``bench_mount.fuse_floor``); the whole request through the mount is ``dd`` into a real mount.

The read side: ``open_range`` (the range lookup) and 256 KiB reads of a cold view of ``at/earliest`` (the render),
against ``cat`` of the same file through a mount (the difference is the copy to FUSE and the request round trips).

A wrapped name missing from the code being profiled (another version of it) is reported as such, not guessed.
Run: ``python scripts/profile_write_read.py [--mib 8] [--seed 0]`` (``PYTHONPATH=<another checkout>`` profiles that
checkout's code with these data).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import realdata
from bench_mount import dd, fuse_floor
from benchutil import mount, unmount

MIB = 1024 * 1024
TOTALS: dict[str, float] = {}
CALLS: dict[str, int] = {}

# (step, module, attribute path): the functions each step is made of, wrapped where they are looked up.
WRITE_STEPS = [
    ("framing (BatchFramer.feed: copy into the framing buffer, batch boundaries)", "logfs.core.format.framing",
     "BatchFramer.feed"),
    ("append_records_to_leader (the whole worker-thread part)", "logfs.core.replication.replica",
     "LeaderPartition.append_records_to_leader"),
    ("  Log.append_batches_as_leader (the request at once)", "logfs.core.log.log", "Log.append_batches_as_leader"),
    ("    check_leader_request (every batch checked, outside the lock)", "logfs.core.log.log", "check_leader_request"),
    ("      check_plain_batches (the compiled check: header, CRC, walk)", "logfs.core.log.appendcheck",
     "check_plain_batches"),
    ("        decompression (compression.decompress, called from the compiled check)", "logfs.core.format.validate",
     "decompress"),
    ("    append_request (runs: stamping, the roll check, writes)", "logfs.core.log.log", "append_request"),
    ("      LocalLog.append_parts (one pwritev per run, index entries)", "logfs.core.log.local",
     "LocalLog.append_parts"),
    ("      Appender.one (a batch that goes alone)", "logfs.core.log.appends", "Appender.one"),
    ("  Log.append_as_leader (per batch)", "logfs.core.log.log", "Log.append_as_leader"),
    ("    check_leader_batch (size, timestamps, validation)", "logfs.core.log.log", "check_leader_batch"),
    ("      validate_batch", "logfs.core.log.appendcheck", "validate_batch"),
    ("        CRC-32C", "logfs.core.format.validate", "_crc32c.crc32c"),
    ("        records section (decompression when compressed)", "logfs.core.format.validate", "records_section"),
    ("        record walk (every record's framing)", "logfs.core.format.validate", "walk"),
    ("    stamping: max timestamp", "logfs.core.log.log", "set_max_timestamp"),
    ("    stamping: offsets and leader epoch", "logfs.core.log.log", "assign_offset_and_epoch"),
    ("    roll check", "logfs.core.log.appends", "Appender.maybe_roll"),
    ("    LocalLog.append (segment, LEO)", "logfs.core.log.local", "LocalLog.append"),
    ("      LogSegment.append (the .log write, index entries)", "logfs.core.log.segment", "LogSegment.append"),
    ("    epoch cache assign", "logfs.core.log.log", "LeaderEpochFileCache.assign"),
    ("  HW rule (maybe_increment_high_watermark)", "logfs.core.replication.replica",
     "LeaderPartition.maybe_increment_high_watermark"),
]  # fmt: skip


def wrap(step: str, module_name: str, path: str) -> bool:
    """Put a timer around ``module.path`` (``Class.method`` or ``name.attr`` too); False when it does not exist."""
    try:
        owner: Any = importlib.import_module(module_name)
    except ImportError:
        return False
    *parents, name = path.split(".")
    for part in parents:
        owner = getattr(owner, part, None)
        if owner is None:
            return False
    fn = getattr(owner, name, None)
    if fn is None:
        return False

    @functools.wraps(fn)
    def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TOTALS[step] = TOTALS.get(step, 0.0) + time.perf_counter() - began
            CALLS[step] = CALLS.get(step, 0) + 1

    if parents and isinstance(owner, type(functools)):  # a module the code holds (crc32c): replace this reference
        setattr(importlib.import_module(module_name), parents[0], type("Proxy", (), {name: staticmethod(timed)}))
    else:
        setattr(owner, name, timed)
    return True


def profile_write(data: bytes, work: Path) -> tuple[int, dict[str, float], list[str]]:
    """Replay ``data`` in 1 MiB requests; (requests, seconds per step, the steps not found)."""
    from logfs.core.configtext import parse_store_config
    from logfs.core.format.framing import BatchFramer
    from logfs.core.replication.replica import LeaderPartition
    from logfs.core.store import Store

    store = Store.open(work / "profile-store", parse_store_config(["segment.bytes=1073741824"]))
    store.create_topic("t", 1)
    log = store.log("t", 0)
    leader = LeaderPartition(log, node_id=1, replica_ids=[1], leader_epoch=0, replica_lag_time_max_ms=30000)
    missing = [step for step, module, path in WRITE_STEPS if not wrap(step, module, path)]
    framer = BatchFramer(log.config.max_message_bytes)
    requests = 0
    began = time.perf_counter()
    for position in range(0, len(data), MIB):
        batches = framer.feed(data[position : position + MIB])
        if batches:
            done = leader.append_records_to_leader(batches)
            assert done.error is None, done.error
        requests += 1
    TOTALS["total (framing + append_records_to_leader, per request)"] = time.perf_counter() - began
    CALLS["total (framing + append_records_to_leader, per request)"] = requests
    store.close()
    return requests, dict(TOTALS), missing


def hand_off(n: int = 2000) -> float:
    """Seconds of one ``trio.to_thread.run_sync`` round trip of a no-op."""
    import trio

    async def run() -> float:
        began = time.perf_counter()
        for _ in range(n):
            await trio.to_thread.run_sync(lambda: None)
        return (time.perf_counter() - began) / n

    return trio.run(run)


def profile_read(work: Path, events: bytes) -> list[tuple[str, float]]:
    """µs per MiB of the read steps of ``at/earliest`` of the events (plain), and the same through a mount."""
    from logfs.core.configtext import parse_store_config
    from logfs.core.store import Store
    from logfs.mount.render.rangeview import open_range
    from logfs.mount.render.rendersize import RenderCache
    from logfs.mount.render.renderspan import Format

    store_path, mnt = work / "read-store", work / "read-mnt"
    proc = mount(store_path, mnt)
    try:
        os.mkdir(mnt / "ev")
        (work / "events.txt").write_bytes(events)
        dd(work / "events.txt", mnt / "ev/0/append")
        path = mnt / "ev/0/at/earliest"
        began = time.perf_counter()
        subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)
        through = time.perf_counter() - began
        size = path.stat().st_size
    finally:
        unmount(proc, mnt)
    store = Store.open(store_path, parse_store_config([]))
    log = store.log("ev", 0)
    began = time.perf_counter()
    view = open_range(log, RenderCache(), "ev", 0, Format.PLAIN, log.log_start_offset, log.high_watermark)
    lookup = time.perf_counter() - began
    began = time.perf_counter()
    position = 0
    while chunk := view.read(position, 256 * 1024):
        position += len(chunk)
    render = time.perf_counter() - began
    view.close()
    store.close()
    per = MIB / size * 1e6
    return [
        ("open_range: range lookup, rendered-size index (cold), once per open", lookup * 1e6),
        ("render (256 KiB reads of a cold view, in process), per MiB", render * per),
        ("copy to FUSE, request round trips (cat through the mount minus render), per MiB", (through - render) * per),
        ("total: cat of at/earliest through the mount, per MiB", through * per),
    ]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=8, help="MiB of realistic producer batches replayed (and of events)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="profile-"))
    try:
        now = time.time_ns() // 1_000_000
        evs = realdata.events(args.mib * MIB, args.seed, now)
        data = b"".join(realdata.producer_batches(evs, args.seed))
        source = work / "producer.bin"
        source.write_bytes(data)
        floor = fuse_floor(source, work / "null-mnt")
        proc = mount(work / "store", work / "mnt")
        try:
            os.mkdir(work / "mnt" / "t")
            through = dd(source, work / "mnt/t/0/batches")
        finally:
            unmount(proc, work / "mnt")
        requests, totals, missing = profile_write(data, work)
        hop = hand_off()
        reads = profile_read(work, realdata.event_lines(evs))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    n_req = len(data) / MIB
    print(f"{len(data) / 1e6:.1f} MB of realistic producer batches ({len(evs):,} records), {requests} requests of "
          f"1 MiB; µs per request (2-core VM shared with others: noisy)\n")  # fmt: skip
    print("| step of one 1 MiB `batches` write | calls per request | µs per request |")
    print("|---|---|---|")
    print(f"| whole request through the mount (dd bs=1M) | 1 | {through / n_req * 1e6:,.0f} |")
    print(f"| FUSE floor (dd into a do-nothing write handler) | 1 | {floor / n_req * 1e6:,.0f} |")
    print(f"| thread hand-off (trio.to_thread.run_sync round trip) | 1 | {hop * 1e6:,.0f} |")
    for step in [s for s, _, _ in WRITE_STEPS] + ["total (framing + append_records_to_leader, per request)"]:
        if step in missing:
            print(f"| {step} | not in this code | - |")
        else:
            calls = CALLS.get(step, 0) / requests
            print(f"| {step} | {calls:,.1f} | {totals.get(step, 0.0) / requests * 1e6:,.0f} |")
    print("\n| step of one 1 MiB read of `at/earliest` (events, plain) | µs |")
    print("|---|---|")
    for step, micros in reads:
        print(f"| {step} | {micros:,.0f} |")


if __name__ == "__main__":
    main()
