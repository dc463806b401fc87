"""A follower of a compacted topic (issue 18): replicas clean independently, as Kafka's do. The follower fetches the
leader's log whatever the leader's cleaner did to it (gaps, fewer segments with other bases), runs its own cleaner,
and agrees with the leader on offsets (a record both hold is the same record at the same offset) and on the latest
record per key — not on bytes (that is for cleanup.policy=delete topics only).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from conftest import Mount, finish_mount, make_topic, start_mount, write_all
from follower_procs import following, state, wait_for

CLEANER = ("log.cleaner.backoff.ms=50",)
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": 4096,
    "min.cleanable.dirty.ratio": 0.01,
}
KEYS = 12
GROUPED = re.compile(r"cleaned kv-0 .* (\d+) segments -> (\d+)")


def records(mount: Path) -> list[dict[str, Any]]:
    lines = (mount / "kv" / "0" / "at" / "earliest.jsonl").read_bytes().splitlines()
    return [json.loads(line) for line in lines]


def latest(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {r["key"]: r["value"] for r in rows}


def produce(mount: Path, start: int, count: int, *, tombstone_every: int = 0) -> dict[str, Any]:
    """``count`` keyed records, ten per write: every other one under a key of its own (kept by a clean), the rest
    over KEYS keys; the model of what each key holds last."""
    model: dict[str, Any] = {}
    lines = []
    for i in range(start, start + count):
        key = f"u{i}" if i % 2 else f"k{i % KEYS}"
        value = None if tombstone_every and i % tombstone_every == 0 else f"v{i}-" + "x" * 60
        model[key] = value
        lines.append(json.dumps({"key": key, "value": value}).encode() + b"\n")
    for n in range(0, len(lines), 10):
        write_all(mount / "kv" / "0" / "append.jsonl", b"".join(lines[n : n + 10]))
    return model


def grouped(mount: Mount) -> bool:
    """A round of the mount's cleaner left fewer segments than it found (its INFO line says so)."""
    return any(int(after) < int(before) for before, after in GROUPED.findall(mount.log_text()))


def cleaned(mount: Path) -> bool:
    return state(mount, "kv", 0)["cleaner"]["first_dirty_offset"] > 0


def test_a_follower_of_a_compacted_topic_agrees_on_offsets_and_latest_records(tmp_path: Path) -> None:
    lead: Mount = start_mount(tmp_path / "L", tmp_path / "L.mnt", "node.id=1", "replica.ids=1,2", *CLEANER)
    try:
        make_topic(lead.path, "kv", 1, **TOPIC_CONFIG)
        model = produce(lead.path, 0, 400)
        wait_for("the leader's first clean", lambda: cleaned(lead.path), lead)
        model.update(produce(lead.path, 400, 100))  # dirty again: a later round groups the shrunk segments
        wait_for("grouped segments on the leader", lambda: grouped(lead), lead)
        with following(lead.path, tmp_path / "F", 2, mount=tmp_path / "F.mnt", config=CLEANER) as follower:
            fmnt = tmp_path / "F.mnt"
            model.update(produce(lead.path, 500, 300, tombstone_every=7))  # while it follows: tombstones too
            end = state(lead.path, "kv", 0)["log_end_offset"]  # the HW follows once the follower has fetched it
            wait_for("the follower caught up", lambda: state(fmnt, "kv", 0)["high_watermark"] == end, lead, follower)
            wait_for("the follower's own clean", lambda: cleaned(fmnt), lead, follower)
            ours, theirs = records(fmnt), records(lead.path)
            assert latest(ours) == latest(theirs) == model
            by_offset = {r["offset"]: r for r in theirs}
            common = [r for r in ours if r["offset"] in by_offset]
            assert common, "no offset in common"
            assert all(r == by_offset[r["offset"]] for r in common)
            assert len(theirs) < end and len(ours) < end  # both cleaned: gaps in both
            assert state(fmnt, "kv", 0)["log_start_offset"] == state(lead.path, "kv", 0)["log_start_offset"] == 0
    finally:
        finish_mount(lead)
