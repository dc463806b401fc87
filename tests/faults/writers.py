"""Concurrent acknowledged writers through a logfs mount, for the fault and power-cut campaigns (issue 16).

Each writer is a thread of the test process writing unique values through one of the mount's write files and
recording a value as *acknowledged* only once the call that makes it durable returned success: fsync(2) after a
write to ``append`` or ``append.jsonl``, an O_SYNC write to ``batches``, fsync of the transaction's ``append`` (the
transaction then commits or aborts; the fsync'd records are in the log either way, and ``at/`` shows both). A writer
stops at the first error other than ENOSPC (a full disk refuses a write and the store stays online) or when told to.
Values are ``<kind>-<round>-<n>[-<k>]`` so that the oracle can tell a record from garbage (:data:`VALUE`).

:class:`Reader` reads ``at/earliest`` of each partition in a loop: a read may fail with EIO (a read fault) but must
never return a line that no writer wrote (a flipped bit served to a client).
"""

from __future__ import annotations

import errno
import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kafka.record.default_records import DefaultRecordBatchBuilder

from logfs.core.format.encode import encode_values

VALUE = re.compile(rb"^[ajbtnk]-\d+-\d+(-\d+)?$")
TXNS = Path(".logfs/transactions")
JOIN_TIMEOUT_S = 30.0


@dataclass
class Writer:
    """One writer thread; ``acked`` grows as its writes are acknowledged, ``error`` is the errno that stopped it."""

    name: str
    step: Callable[[Writer, int], list[bytes]]
    acked: list[bytes] = field(default_factory=list)
    error: int | None = None
    refused: int = 0  # ENOSPC refusals (the writer went on)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            try:
                self.acked += self.step(self, n)
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    self.refused += 1
                else:
                    self.error = exc.errno
                    return
            n += 1


def start(writers: list[Writer]) -> None:
    for w in writers:
        w.thread = threading.Thread(target=w.run, name=w.name, daemon=True)
        w.thread.start()


def stop(writers: list[Writer]) -> None:
    """Tell every writer to stop and wait for it; AssertionError naming one that hangs."""
    for w in writers:
        w.stop.set()
    for w in writers:
        assert w.thread is not None
        w.thread.join(JOIN_TIMEOUT_S)
        assert not w.thread.is_alive(), f"writer {w.name} hangs in a call to the mount"


def append_writer(part: Path, tag: str) -> Writer:
    """write + fsync of one text record per step to a partition's ``append``."""

    def step(w: Writer, n: int) -> list[bytes]:
        value = f"{tag}-{n}".encode()
        fd = os.open(part / "append", os.O_WRONLY)
        try:
            os.write(fd, value + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        return [value]

    return Writer(f"append {part}", step)


def jsonl_writer(topic: Path, tag: str) -> Writer:
    """write + fsync of two keyed records per step to a topic's ``append.jsonl`` (partitioned by key)."""

    def step(w: Writer, n: int) -> list[bytes]:
        values = [f"{tag}-{n}-{k}".encode() for k in range(2)]
        lines = b"".join(json.dumps({"key": f"k{n % 5}-{k}", "value": v.decode()}).encode() + b"\n"
                         for k, v in enumerate(values))  # fmt: skip
        fd = os.open(topic / "append.jsonl", os.O_WRONLY)
        try:
            os.write(fd, lines)
            os.fsync(fd)
        finally:
            os.close(fd)
        return values

    return Writer(f"append.jsonl {topic}", step)


def batches_writer(part: Path, tag: str) -> Writer:
    """One O_SYNC write of a 3-record RecordBatch per step to a partition's ``batches``."""

    def step(w: Writer, n: int) -> list[bytes]:
        values = [f"{tag}-{n}-{k}".encode() for k in range(3)]
        fd = os.open(part / "batches", os.O_WRONLY | os.O_SYNC)
        try:
            batch = encode_values(values, int(time.time() * 1000))
            assert os.write(fd, batch) == len(batch)
        finally:
            os.close(fd)
        return values

    return Writer(f"batches {part}", step)


# Kafka's codec ids, in the order a kafka-python writer rotates through them: none, gzip, snappy, lz4, zstd.
CODECS = (0, 1, 2, 3, 4)


def kafka_batch(values: list[bytes], codec: int) -> bytes:
    """One RecordBatch of ``values`` as kafka-python's producer builds it (``codec``: a Kafka compression id)."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=16 * 1024 * 1024,
    )  # fmt: skip
    now = int(time.time() * 1000)
    for i, value in enumerate(values):
        assert builder.append(i, now, None, value, [])
    return bytes(builder.build())


def kafka_batches_writer(part: Path, tag: str, records: int = 50, *, o_sync: bool = False) -> Writer:
    """One kafka-python RecordBatch of ``records`` records per step to a partition's ``batches``, the codec rotating
    through :data:`CODECS`: write + fsync (``o_sync``: one O_SYNC write). A step acknowledges its batch once the
    fsync (or the O_SYNC write) returned."""

    def step(w: Writer, n: int) -> list[bytes]:
        values = [f"{tag}-{n}-{k}".encode() for k in range(records)]
        batch = kafka_batch(values, CODECS[n % len(CODECS)])
        fd = os.open(part / "batches", os.O_WRONLY | (os.O_SYNC if o_sync else 0))
        try:
            assert os.write(fd, batch) == len(batch)
            if not o_sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        return values

    return Writer(f"kafka batches {part}{' O_SYNC' if o_sync else ''}", step)


def transaction_writer(mnt: Path, topic: str, partitions: int, tag: str) -> Writer:
    """A transaction per step over every partition: records written and fsync'd, then commit (every third: abort)."""

    def step(w: Writer, n: int) -> list[bytes]:
        txn = mnt / TXNS / f"{tag}-{n}"
        os.mkdir(txn)
        acked = []
        try:
            for p in range(partitions):
                value = f"{tag}-{n}-{p}".encode()
                fd = os.open(txn / topic / str(p) / "append", os.O_WRONLY)
                try:
                    os.write(fd, value + b"\n")
                    os.fsync(fd)
                finally:
                    os.close(fd)
                acked.append(value)
        finally:
            w.acked += acked  # fsync'd: acknowledged whatever the end of the transaction does
            decision = b"abort\n" if n % 3 == 2 else b"commit\n"
            fd = os.open(txn / "control", os.O_WRONLY)
            try:
                os.write(fd, decision)
            finally:
                os.close(fd)
        return []

    return Writer(f"transaction {topic}", step)


class Reader:
    """``at/earliest`` of each partition read in a loop; ``bad`` collects any line no writer could have written."""

    def __init__(self, parts: list[Path]) -> None:
        self.parts = parts
        self.reads = 0
        self.failed: dict[int, int] = {}
        self.bad: list[bytes] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="reader", daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            for part in self.parts:
                try:
                    data = (part / "at" / "earliest").read_bytes()
                except OSError as exc:
                    self.failed[exc.errno or 0] = self.failed.get(exc.errno or 0, 0) + 1
                    if exc.errno not in (errno.EIO, errno.ENOENT):
                        return
                    continue
                self.reads += 1
                self.bad += [line for line in data.splitlines() if not VALUE.match(line) and line != b"aborted"]
            time.sleep(0.05)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(JOIN_TIMEOUT_S)
        assert not self.thread.is_alive(), "the reader hangs in a call to the mount"
