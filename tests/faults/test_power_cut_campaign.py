"""The power-cut campaign of issue 16: kill -9 of the mount under acknowledged writers, then the power-cut model of
tests/faultfs.py (every file cut back to its size at its last fsync; every name created, renamed or unlinked in a
directory not fsynced since undone), round after round on one store; the store must mount and keep every
acknowledged record.

One store lives through every round. A round starts faultfs and ``logfs mount`` on it (recovery of the cut the last
round left), checks that every record acknowledged so far is there exactly once, then runs writers of ``append``
(write + fsync), ``append.jsonl`` (write + fsync) and ``batches`` (O_SYNC) on topic ``p``, and one more writer that
creates a new topic (with a config override: small segments) and appends to it. Small segments roll often, so new
segments, their indexes, producer snapshots and directory fsyncs are in the mix; every mount start writes the leader
epoch checkpoint, and every :data:`LONG_ROUND_EVERY`-th round runs long enough for the high-watermark checkpoint
(every 5 s). At a random moment the mount is killed with SIGKILL, the power cut applied, and faultfs stopped. After
the last round the store is mounted on the plain directory and checked the same way, then ``logfs check``'d.

``LOGFS_POWERCUT_ROUNDS`` sets the number of rounds (default :data:`DEFAULT_ROUNDS`, for CI); ``LOGFS_POWERCUT_SEED``
shifts the seeds. Two knobs make a campaign harsher without changing the CI one: ``LOGFS_POWERCUT_NEW_TOPICS`` new
topics (each with its writer) per round (default 1) and ``LOGFS_POWERCUT_SEGMENT_BYTES`` the new topics'
``segment.bytes`` (default 1024; smaller rolls more often).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import make_topic
from faultstore import FaultyStore, assert_acked, logfs_check, values
from writers import VALUE, Writer, append_writer, batches_writer, jsonl_writer, start, stop

DEFAULT_ROUNDS = 5
ROUNDS = int(os.environ.get("LOGFS_POWERCUT_ROUNDS", DEFAULT_ROUNDS))
SEED = int(os.environ.get("LOGFS_POWERCUT_SEED", 0))
CONFIG = ("segment.bytes=2048", "index.interval.bytes=128")
LONG_ROUND_EVERY = 4
LONG_ROUND_S = 5.5
NEW_TOPICS = int(os.environ.get("LOGFS_POWERCUT_NEW_TOPICS", 1))
NEW_SEGMENT_BYTES = int(os.environ.get("LOGFS_POWERCUT_SEGMENT_BYTES", 1024))


@pytest.mark.timeout(60 + 20 * ROUNDS)
def test_power_cut_campaign(tmp_path: Path) -> None:
    fs = FaultyStore(tmp_path)
    acked: dict[str, list[bytes]] = {"p": []}
    partitions = {"p": 2}
    cut: dict[str, Any] = {"undone": [], "cut": {}}
    try:
        for round_no in range(ROUNDS):
            rng = random.Random(f"power-cut/{SEED + round_no}")
            fs.start(*CONFIG)
            check_acked(fs.mnt, acked, partitions, f"at the start of round {round_no} (the last cut: {cut})")
            if round_no == 0:
                make_topic(fs.mnt, "p", partitions=2)
            new = [f"n{round_no}", *(f"n{round_no}x{i}" for i in range(1, NEW_TOPICS))]
            writers = [
                append_writer(fs.mnt / "p" / "0", f"a-{round_no}"),
                jsonl_writer(fs.mnt / "p", f"j-{round_no}"),
                batches_writer(fs.mnt / "p" / "1", f"b-{round_no}"),
                *(new_topic_writer(fs.mnt, topic, f"n-{round_no}") for topic in new),  # checked per topic
            ]
            start(writers)
            long = round_no % LONG_ROUND_EVERY == LONG_ROUND_EVERY - 1
            time.sleep(LONG_ROUND_S if long else rng.uniform(0.1, 1.5))
            fs.kill_logfs()
            stop(writers)
            cut = fs.ffs.powercut()
            fs.ffs.stop()
            for w, topic in zip(writers, ["p", "p", "p", *new], strict=True):
                acked.setdefault(topic, []).extend(w.acked)
            for topic in new:
                partitions.setdefault(topic, 1)
            print(f"round {round_no}: acked {sum(len(w.acked) for w in writers)}, undone {len(cut['undone'])} names "
                  f"({cut['undone'][:4]}…), cut {len(cut['cut'])} files")  # fmt: skip
        fs.restart_healthy(*CONFIG)
        check_acked(fs.mnt, acked, partitions, "on the healthy disk after the last round")
        fs.finish()
        check = logfs_check(fs.disk_store)
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        fs.close()


def new_topic_writer(mnt: Path, topic: str, tag: str) -> Writer:
    """The first step creates ``topic`` (one partition, its own small segments); each later one appends a record
    and fsyncs it. Records are acknowledged only after the topic exists and the fsync returned."""
    writer = append_writer(mnt / topic / "0", tag)
    append = writer.step

    def step(w: Writer, n: int) -> list[bytes]:
        if n == 0:
            make_topic(mnt, topic, segment_bytes=NEW_SEGMENT_BYTES)
            return []
        return append(w, n)

    writer.step = step
    writer.name = f"new topic {topic}"
    return writer


def check_acked(mnt: Path, acked: dict[str, list[bytes]], partitions: dict[str, int], when: str) -> None:
    """Every acknowledged record of every topic there exactly once, and nothing no writer wrote."""
    for topic, expected in acked.items():
        if not expected:
            continue
        assert (mnt / topic).is_dir(), f"topic {topic} with {len(expected)} acknowledged records is gone {when}"
        present = [v for p in range(partitions[topic]) for v in values(mnt / topic / str(p) / "at" / "earliest")]
        try:
            assert_acked(present, expected)
        except AssertionError as exc:
            raise AssertionError(f"topic {topic} {when}: {exc}") from None
        garbage = [v for v in present if not VALUE.match(v)]
        assert not garbage, f"topic {topic} {when}: records no writer wrote: {garbage[:3]}"
