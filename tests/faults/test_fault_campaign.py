"""The fault campaign of issue 16, as CORDS ran one: rounds of one random fault at a random moment under concurrent
acknowledged writers of ``append``, ``append.jsonl``, ``batches`` and a transaction, with a reader beside them.

Each round runs on a fresh store (faultfs → logfs mount, small segments so rolls, index trims, snapshots and
directory fsyncs are in the mix), picks one fault from :data:`FAULTS` (operation, file kind, errno, the n-th matching
call, for fsync whether the unsynced bytes are dropped, for reads a bit flip or EIO) and schedules it at a random
moment. After the writers stop it checks that the mount never died and the reader never got a line no writer wrote;
then it restarts the store on the healthy disk and checks that every acknowledged record is there exactly once, that
nothing there is garbage, and that ``logfs check`` is clean after a clean unmount.

``LOGFS_FAULT_ROUNDS`` sets the number of rounds (default :data:`DEFAULT_ROUNDS`, for CI); ``LOGFS_FAULT_SEED``
shifts the seeds. A failing round names its seed and fault.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from conftest import make_topic
from faultstore import FaultyStore, assert_acked, logfs_check, partition_state, values
from writers import VALUE, Reader, Writer, append_writer, batches_writer, jsonl_writer, start, stop, transaction_writer

DEFAULT_ROUNDS = 4
ROUNDS = int(os.environ.get("LOGFS_FAULT_ROUNDS", DEFAULT_ROUNDS))
SEED = int(os.environ.get("LOGFS_FAULT_SEED", 0))
CONFIG = ("segment.bytes=4096", "index.interval.bytes=256")
TOPIC = "c"

# (op, path glob): where the store's writes, syncs, renames, truncations and reads go.
FAULTS = [
    ("pwrite", "store/c-*/*.log"),
    ("fsync", "store/c-*/*.log"),
    ("pwrite", "store/c-*/*.index"),
    ("pwrite", "store/c-*/*.timeindex"),
    ("ftruncate", "store/c-*/*index"),
    ("create", "store/c-*/*"),
    ("pwrite", "store/c-*/*.snapshot*"),
    ("rename", "store/c-*/*.snapshot*"),
    ("pwrite", "store/c-*/*.txnindex"),
    ("fsyncdir", "store/c-*"),
    ("pwrite", "store/.logfs-transactions.log"),
    ("fsync", "store/.logfs-transactions.log"),
    ("pread", "store/c-*/*.log"),
]


def pick_fault(rng: random.Random) -> dict[str, Any]:
    op, glob = rng.choice(FAULTS)
    rule: dict[str, Any] = {"op": op, "path": glob, "nth": rng.randint(1, 8), "errno": rng.choice(["EIO", "ENOSPC"])}
    if op == "fsync":
        rule["drop"] = rng.choice([None, "truncate", "zero"])
    elif op == "pwrite" and rng.random() < 0.2:
        rule.update(errno=None, short=True)
    elif op == "pread":
        rule.update(rng.choice([{"errno": "EIO"}, {"errno": None, "flip": True}]), times=rng.choice([1, 0]))
    return rule


def takes_offline(fired: list[dict[str, Any]]) -> bool:
    """Whether the contract takes the store offline for these fired faults: any failed sync, rename, truncation or
    directory sync, and a write failing with EIO. Not: a read, a short write, ENOSPC from a write or a create (a
    refusal that stored nothing)."""
    for f in fired:
        if f["errno"] is None or f["op"] == "pread":
            continue
        if f["errno"] == "ENOSPC" and f["op"] in ("pwrite", "create"):
            continue
        return True
    return False


@pytest.mark.parametrize("round_no", range(ROUNDS))
def test_fault_round(tmp_path: Path, round_no: int) -> None:
    seed = SEED + round_no
    rng = random.Random(f"fault-campaign/{seed}")
    fault = pick_fault(rng)
    fs = FaultyStore(tmp_path)
    try:
        outcome = run_round(fs, rng, round_no, fault)
    except AssertionError as exc:
        raise AssertionError(f"round {round_no} (seed {seed}) fault {fault}: {exc}") from None
    finally:
        fs.close()
    print(f"round {round_no} (seed {seed}) fault {fault}: {outcome}")


def run_round(fs: FaultyStore, rng: random.Random, round_no: int, fault: dict[str, Any]) -> dict[str, Any]:
    fs.start(*CONFIG)
    topic = make_topic(fs.mnt, TOPIC, partitions=2)
    writers: list[Writer] = [
        append_writer(topic / "0", f"a-{round_no}"),
        jsonl_writer(topic, f"j-{round_no}"),
        batches_writer(topic / "1", f"b-{round_no}"),
        transaction_writer(fs.mnt, TOPIC, 2, f"t-{round_no}"),
    ]
    reader = Reader([topic / "0", topic / "1"])
    start(writers)
    reader.thread.start()
    try:
        time.sleep(rng.uniform(0.0, 0.6))
        fs.ffs.schedule([fault])
        time.sleep(rng.uniform(0.4, 1.0))
    finally:
        stop(writers)
        reader.finish()
    fired = fs.fired()
    assert fs.alive(), f"the mount died under fault {fault} (fired: {fired}):\n{fs.mount and fs.mount.log_text()}"
    assert not reader.bad, f"a client read bytes no writer wrote: {reader.bad[:3]}"
    if takes_offline(fired):
        offline = partition_state(fs.mnt, TOPIC).get("offline")
        assert offline, f"fault {fired[0]} fired and the store is still online"
    acked = [v for w in writers for v in w.acked]
    fs.restart_healthy(*CONFIG)
    present = values(fs.mnt / TOPIC / "0" / "at" / "earliest") + values(fs.mnt / TOPIC / "1" / "at" / "earliest")
    assert_acked(present, acked)
    garbage = [v for v in present if not VALUE.match(v)]
    assert not garbage, f"records that no writer wrote: {garbage[:3]}"
    fs.finish()
    check = logfs_check(fs.disk_store)
    assert check.returncode == 0, check.stdout + check.stderr
    return {
        "fired": len(fired), "acked": len(acked), "present": len(present),
        "stopped": dict(Counter(str(w.error) for w in writers)), "refused": sum(w.refused for w in writers),
        "reads": reader.reads, "read_errors": reader.failed,
    }  # fmt: skip
