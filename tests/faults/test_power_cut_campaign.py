"""The power-cut campaign of issue 16: kill -9 of the mount under acknowledged writers, then the power-cut model of
tests/helpers/faultfs.py (every file cut back to its size at its last fsync; every name created, renamed or unlinked in
a directory not fsynced since undone), round after round on one store; the store must mount and keep every
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
from writers import VALUE, Writer, append_writer, batches_writer, jsonl_writer, kafka_batches_writer, start, stop

DEFAULT_ROUNDS = 4
ROUNDS = int(os.environ.get("LOGFS_POWERCUT_ROUNDS", DEFAULT_ROUNDS))
SEED = int(os.environ.get("LOGFS_POWERCUT_SEED", 0))
CONFIG = ("segment.bytes=2048", "index.interval.bytes=128")
LONG_ROUND_EVERY = 4
LONG_ROUND_S = 5.5
NEW_TOPICS = int(os.environ.get("LOGFS_POWERCUT_NEW_TOPICS", 1))
NEW_SEGMENT_BYTES = int(os.environ.get("LOGFS_POWERCUT_SEGMENT_BYTES", 1024))
# The kafka-python campaign (issue 23): segments of a few batches, and a fresh store every STORE_ROUNDS rounds so a
# long campaign's rounds stay short (a store of thousands of tiny segments would make every mount start slow).
ROLL_CONFIG = ("segment.bytes=8192", "index.interval.bytes=256")
STORE_ROUNDS = int(os.environ.get("LOGFS_POWERCUT_STORE_ROUNDS", 50))
KAFKA_BATCH_RECORDS = 50


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


@pytest.mark.timeout(120 + 15 * ROUNDS)
def test_power_cut_campaign_of_kafka_batches_across_rolls(tmp_path: Path) -> None:
    """Issue 23, point 4: the window that lost an acknowledged batch from the middle of a batch writer's sequence.

    Two partitions of 8 KiB segments (a roll every few batches): partition 0 takes two text writers and a
    kafka-python batch writer (write + fsync), partition 1 a JSON-lines writer, a kafka-python batch writer (write +
    fsync) and one writing O_SYNC; the batch writers send 50 records a batch, the codec rotating none, gzip, snappy,
    lz4, zstd. So a roll by one writer's append falls between another writer's write and its fsync all the time.
    Each round kills the mount at a random moment, applies the power cut, and the next round's mount must hold every
    record acknowledged so far, in the partition it was written to, exactly once. A fresh store every
    ``LOGFS_POWERCUT_STORE_ROUNDS`` rounds (default 50), each one finished on the healthy disk and ``logfs check``'d.
    """
    totals = {"acked": 0, "undone": 0, "cut": 0, "stores": 0}
    fs: FaultyStore | None = None
    acked: dict[str, list[bytes]] = {}
    try:
        for round_no in range(ROUNDS):
            seed = SEED + round_no
            rng = random.Random(f"power-cut-kafka/{seed}")
            first = round_no % STORE_ROUNDS == 0
            if first:
                if fs is not None:
                    _finish_store(fs, acked)
                fs = FaultyStore(tmp_path / f"s{round_no // STORE_ROUNDS}")
                acked = {"c": [], "c1": []}
                totals["stores"] += 1
            assert fs is not None
            fs.start(*ROLL_CONFIG)
            check_kafka_acked(fs.mnt, acked, f"at the start of round {round_no} (seed {seed})")
            if first:
                make_topic(fs.mnt, "c", partitions=2)
            c = fs.mnt / "c"
            writers = [
                append_writer(c / "0", f"a-{round_no}"),
                append_writer(c / "0", f"t-{round_no}"),
                kafka_batches_writer(c / "0", f"k-{round_no}", KAFKA_BATCH_RECORDS),
                jsonl_writer(c / "1", f"j-{round_no}"),
                kafka_batches_writer(c / "1", f"b-{round_no}", KAFKA_BATCH_RECORDS),
                kafka_batches_writer(c / "1", f"n-{round_no}", KAFKA_BATCH_RECORDS, o_sync=True),
            ]
            start(writers)
            time.sleep(rng.uniform(0.05, 0.7))
            fs.kill_logfs()
            stop(writers)
            cut = fs.ffs.powercut()
            fs.ffs.stop()
            for w, key in zip(writers, ["c", "c", "c", "c1", "c1", "c1"], strict=True):
                acked[key].extend(w.acked)
            round_acked = sum(len(w.acked) for w in writers)
            totals["acked"] += round_acked
            totals["undone"] += len(cut["undone"])
            totals["cut"] += len(cut["cut"])
            print(f"round {round_no} (seed {seed}): acked {round_acked}, undone {len(cut['undone'])} names, "
                  f"cut {len(cut['cut'])} files")  # fmt: skip
        if fs is not None:
            _finish_store(fs, acked)
        print(f"campaign: {ROUNDS} rounds (seeds {SEED}..{SEED + ROUNDS - 1}), {totals['stores']} stores, "
              f"{totals['acked']} acknowledged records, 0 lost, {totals['undone']} names undone, "
              f"{totals['cut']} files cut")  # fmt: skip
    finally:
        if fs is not None:
            fs.close()


def check_kafka_acked(mnt: Path, acked: dict[str, list[bytes]], when: str) -> None:
    """Every acknowledged record of topic ``c`` in its partition (``c``: 0, ``c1``: 1) exactly once, and nothing
    no writer wrote."""
    for key, partition in (("c", 0), ("c1", 1)):
        if not acked[key]:
            continue
        present = values(mnt / "c" / str(partition) / "at" / "earliest")
        try:
            assert_acked(present, acked[key])
        except AssertionError as exc:
            raise AssertionError(f"partition c-{partition} {when}: {exc}") from None
        garbage = [v for v in present if not VALUE.match(v)]
        assert not garbage, f"partition c-{partition} {when}: records no writer wrote: {garbage[:3]}"


def _finish_store(fs: FaultyStore, acked: dict[str, list[bytes]]) -> None:
    """The store on the healthy disk: every acknowledged record, a clean unmount, a clean ``logfs check``."""
    fs.restart_healthy(*ROLL_CONFIG)
    check_kafka_acked(fs.mnt, acked, "on the healthy disk")
    fs.finish()
    check = logfs_check(fs.disk_store)
    assert check.returncode == 0, check.stdout + check.stderr
    fs.close()
