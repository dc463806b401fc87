"""A store of transactional data written with the core, and an open transaction begun through a mount: what the
``committed/`` tests of the mount (tests/mount/test_mount_committed.py) and of Spark
(tests/spark/test_spark_committed.py) both read. Two producers over two partitions, one transaction committed and
one aborted, plain records between them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import write_all

from logfs.core.configtext import parse_store_config
from logfs.core.format.batch import Record
from logfs.core.format.encode import encode_batch, encode_values
from logfs.core.log.log import Log
from logfs.core.store import Store

NOW_MS = time.time_ns() // 1_000_000
TOPIC = "orders"
COMMITTED = 11  # producer whose transaction commits
ABORTED = 12  # producer whose transaction aborts

# (partition, what): "p:<value>" plain, "t<pid>:<value>" transactional, "commit<pid>" / "abort<pid>" markers.
SCRIPT = [
    (0, "p:p0-a"),
    (0, "t11:c-1"),
    (1, "t12:y-1"),
    (0, "t11:c-2"),
    (0, "t12:x-1"),
    (1, "p:p1-a"),
    (0, "p:p0-b"),
    (1, "t11:d-1"),
    (0, "t11:c-3"),
    (0, "commit11"),
    (0, "t12:x-2"),
    (1, "abort12"),
    (0, "abort12"),
    (1, "commit11"),
    (0, "p:p0-c"),
    (1, "p:p1-b"),
]
COMMITTED_VALUES = {0: ["p0-a", "c-1", "c-2", "p0-b", "c-3", "p0-c"], 1: ["p1-a", "d-1", "p1-b"]}
ALL_VALUES = {0: ["p0-a", "c-1", "c-2", "x-1", "p0-b", "c-3", "x-2", "p0-c"], 1: ["y-1", "p1-a", "d-1", "p1-b"]}


class Writer:
    """Appends with the core as a transactional producer would, tracking sequences per producer and partition."""

    def __init__(self, store: Store, topic: str = TOPIC) -> None:
        self.store = store
        self.topic = topic
        self.sequences: dict[tuple[int, int], int] = {}

    def log(self, partition: int) -> Log:
        return self.store.log(self.topic, partition)

    def step(self, partition: int, what: str) -> None:
        log = self.log(partition)
        if what.startswith("p:"):
            log.append_as_leader(encode_values([what[2:].encode()], NOW_MS), 0)
        elif what.startswith("t"):
            pid_text, value = what[1:].split(":")
            self.txn(partition, int(pid_text), [value.encode()])
        else:
            commit = what.startswith("commit")
            pid = int(what.removeprefix("commit").removeprefix("abort"))
            log.append_end_txn_marker(pid, 0, commit=commit, coordinator_epoch=0, leader_epoch=0)
        log.update_high_watermark(log.log_end_offset)

    def txn(self, partition: int, pid: int, values: list[bytes]) -> None:
        seq = self.sequences.get((pid, partition), 0)
        records = [Record(i, NOW_MS + i, b"k", v) for i, v in enumerate(values)]
        batch = encode_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)
        self.log(partition).append_as_leader(batch, 0)
        self.sequences[(pid, partition)] = seq + len(values)


def build_store(
    root: Path, script: list[tuple[int, str]], segment_bytes: int = 300, topics: tuple[str, ...] = (TOPIC,)
) -> None:
    """A store holding ``script`` in each of ``topics`` (two partitions each)."""
    with Store.open(root, parse_store_config([])) as store:
        for topic in topics:
            store.create_topic(topic, 2, {"segment.bytes": str(segment_bytes)})
            writer = Writer(store, topic)
            for partition, what in script:
                writer.step(partition, what)


# --- an open transaction (begun through the mount's .logfs/transactions/) ------------------------------------------

TXNS = ".logfs/transactions"


def begin_open_transaction(mnt: Path) -> None:
    """Topic ``pending`` (2 partitions): partition 0 holds ``before``, an open transaction's ``open-1`` and a plain
    ``after`` (offsets 0, 1, 2); partition 1 holds ``other``. Skips when the mount has no transactions yet."""
    if not (mnt / TXNS).is_dir():
        pytest.skip("the mount has no .logfs/transactions/ yet")
    os.mkdir(mnt / "pending")
    os.mkdir(mnt / "pending/1")
    write_all(mnt / "pending/0/append", b"before\n")
    os.mkdir(mnt / TXNS / "open")
    write_all(mnt / TXNS / "open/pending/0/append", b"open-1\n")
    write_all(mnt / "pending/0/append", b"after\n")
    write_all(mnt / "pending/1/append", b"other\n")
