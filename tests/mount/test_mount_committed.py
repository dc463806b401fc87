"""``committed/`` under a real mount (docs/mount.md, "Files, modes and caching"; docs/storage.md, "Idempotent producers
and transactions"): the read_committed views, with real tools.

The transactional data is written with the core into a store (two producers over two partitions, one transaction
committed and one aborted, plain records between them, small segments so transactions cross segment boundaries),
which is then mounted. ``committed/`` must show exactly the committed and non-transactional records in offset order
(plain, JSON lines, and ``.kafka`` parsed by kafka-python: an independent decoder), ``at/`` every data record, and
sizes must equal the bytes read. An open transaction pins ``committed/`` at its first offset; a ``committed/follow/``
reader blocks until the transaction ends (that transaction is begun through the mount's ``.logfs/transactions/``:
the mount aborts, at start, a transaction open in the log that its transaction log does not know).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from committed_store import (
    ALL_VALUES,
    COMMITTED_VALUES,
    SCRIPT,
    TOPIC,
    TXNS,
    begin_open_transaction,
    build_store,
)
from conftest import Mount, finish_mount, sh, start_mount, state, write_all
from kafka.record import MemoryRecords


@pytest.fixture(scope="module")
def txn_mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mount]:
    root = tmp_path_factory.mktemp("committed")
    build_store(root / "store", SCRIPT)
    mount = start_mount(root / "store", root / "mnt")
    try:
        yield mount
    finally:
        finish_mount(mount)


def kafka_values(data: bytes) -> list[str]:
    """The values kafka-python finds in ``.kafka`` bytes (control batches, if any, give no records)."""
    records = MemoryRecords(data)
    out = []
    while records.has_next():
        batch = records.next_batch()
        if batch.is_control_batch:
            out.append("<control>")
            continue
        out += [r.value.decode() for r in batch]
    return out


# --- the committed views -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("partition", [0, 1])
def test_committed_at_earliest_holds_exactly_the_committed_and_plain_records(txn_mount: Mount, partition: int) -> None:
    part = txn_mount.path / TOPIC / str(partition)
    want = COMMITTED_VALUES[partition]
    s = state(txn_mount.path, TOPIC, partition)
    assert s["last_stable_offset"] == s["high_watermark"] == s["log_end_offset"]
    assert s["open_transactions"] == []
    assert len(s["segments"]) >= 2  # the transactions cross segments
    plain = (part / "committed" / "at" / "earliest").read_bytes()
    assert plain.decode().splitlines() == want
    lines = [json.loads(line) for line in (part / "committed" / "at" / "earliest.jsonl").read_bytes().splitlines()]
    assert [r["value"] for r in lines] == want
    assert [r["offset"] for r in lines] == sorted(r["offset"] for r in lines)
    assert all(r["topic"] == TOPIC and r["partition"] == partition for r in lines)
    kafka = (part / "committed" / "at" / "earliest.kafka").read_bytes()
    assert kafka_values(kafka) == want  # whole batches: no aborted batch, no marker
    # The partition's own views hold every data record (and .kafka the markers too).
    assert (part / "at" / "earliest").read_bytes().decode().splitlines() == ALL_VALUES[partition]
    every = kafka_values((part / "at" / "earliest.kafka").read_bytes())
    assert [v for v in every if v != "<control>"] == ALL_VALUES[partition] and every.count("<control>") == 2


def test_real_tools_agree_with_the_sizes(txn_mount: Mount, tmp_path: Path) -> None:
    mnt = txn_mount.path
    for partition in (0, 1):
        committed = mnt / TOPIC / str(partition) / "committed"
        for name in ("earliest", "earliest.jsonl", "earliest.kafka", "0-3", "2-6.jsonl", "1-5.kafka"):
            path = committed / "at" / name
            data = path.read_bytes()
            assert os.stat(path).st_size == len(data), name
            copy = tmp_path / f"{partition}-{name}"
            # (cp refuses at/ files: each lookup is a fresh snapshot inode, so its stat and open see two files.)
            done = sh(f"cat {path} > {copy} && stat -c %s {path} && wc -c < {copy}", mnt)
            assert done.returncode == 0, done.stderr
            assert done.stdout.split() == [str(len(data))] * 2
            assert copy.read_bytes() == data
        done = sh(f"cat {committed}/at/earliest | wc -l", mnt)
        assert int(done.stdout) == len(COMMITTED_VALUES[partition])
        # hw/: one file per segment, sizes exact; together the committed records once.
        listing = sh(f"ls {committed}/hw", mnt).stdout.split()
        assert listing == sorted(listing) and listing and all(n.endswith(".jsonl") for n in listing)
        done = sh(f"cat {committed}/hw/*", mnt)
        assert [json.loads(line)["value"] for line in done.stdout.splitlines()] == COMMITTED_VALUES[partition]
        for name in listing:
            path = committed / "hw" / name
            copy = tmp_path / f"hw-{partition}-{name}"
            done = sh(f"cp {path} {copy} && stat -c %s {path}", mnt)
            assert done.returncode == 0, done.stderr
            assert int(done.stdout) == len(path.read_bytes()) == len(copy.read_bytes())
    # An at/ range with an aborted record in the middle.
    part0 = mnt / TOPIC / "0"
    assert (part0 / "committed" / "at" / "2-8").read_text().splitlines() == ["c-2", "p0-b", "c-3"]
    assert (part0 / "at" / "2-8").read_text().splitlines() == ["c-2", "x-1", "p0-b", "c-3", "x-2"]


def test_committed_follow_streams_the_committed_records(txn_mount: Mount) -> None:
    path = txn_mount.path / TOPIC / "0" / "committed" / "follow" / "earliest"
    proc = subprocess.run(["head", "-n", str(len(COMMITTED_VALUES[0])), str(path)], capture_output=True, timeout=20)
    assert proc.returncode == 0 and proc.stdout.decode().splitlines() == COMMITTED_VALUES[0]


def test_an_open_transaction_pins_committed_at_its_first_offset(mounted: Mount) -> None:
    mnt = mounted.path
    begin_open_transaction(mnt)
    part = mnt / "pending/0"
    s = state(mnt, "pending", 0)
    assert (s["high_watermark"], s["last_stable_offset"]) == (3, 1)
    assert [t["first_offset"] for t in s["open_transactions"]] == [1]
    assert (part / "committed/at/earliest").read_text() == "before\n"
    assert kafka_values((part / "committed/at/earliest.kafka").read_bytes()) == ["before"]
    assert (part / "committed/at/2").read_bytes() == b""  # between the LSO and the LEO: empty
    assert not (part / "committed/at/0-2").exists()  # a range past the LSO: ENOENT
    assert (part / "at/earliest").read_text() == "before\nopen-1\nafter\n"
    hw = sorted(os.listdir(part / "committed/hw"))
    assert [(part / "committed/hw" / n).read_bytes() for n in hw] == [
        (part / "committed/at/earliest.jsonl").read_bytes()
    ]
    # The other partition has no transaction: its committed views are the HW views.
    other = mnt / "pending/1"
    assert (other / "committed/at/earliest").read_bytes() == (other / "at/earliest").read_bytes() == b"other\n"
    assert (other / "committed/at/earliest.kafka").read_bytes() == (other / "at/earliest.kafka").read_bytes()
    assert state(mnt, "pending", 1)["last_stable_offset"] == 1
    # A committed/follow/ reader at the LSO: poll says "not ready", a read blocks.
    fd = os.open(part / "committed/follow/earliest", os.O_RDONLY)
    try:
        assert os.read(fd, 100) == b"before\n"
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        assert poller.poll(300) == []
        follower = subprocess.Popen(["head", "-c", "6", str(part / "committed/follow/1")], stdout=subprocess.PIPE)
        try:
            with pytest.raises(subprocess.TimeoutExpired):
                follower.wait(1.5)
            write_all(mnt / TXNS / "open/control", b"abort\n")  # the LSO passes the aborted transaction
            assert follower.communicate(timeout=10)[0] == b"after\n"
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait()
        assert poller.poll(5000) != []  # woken: "after" is committed past the reader
        assert os.read(fd, 100) == b"after\n"
    finally:
        os.close(fd)
    assert (part / "committed/at/earliest").read_text() == "before\nafter\n"
    assert kafka_values((part / "committed/at/earliest.kafka").read_bytes()) == ["before", "after"]
    s = state(mnt, "pending", 0)
    assert s["last_stable_offset"] == s["high_watermark"] == 4 and s["open_transactions"] == []


# --- through the mount's transactions (the write side) -------------------------------------------------------------


def test_a_committed_follow_reader_wakes_when_the_marker_is_written(mounted: Mount) -> None:
    """The reader blocks while the open transaction pins the LSO (plain records after it included), gets the
    committed records once the commit's marker is below the HW, and never an aborted one."""
    mnt = mounted.path
    if not (mnt / TXNS).is_dir():
        pytest.skip("the mount has no .logfs/transactions/ yet")
    os.mkdir(mnt / "live")
    follow = mnt / "live/0/committed/follow/latest"
    reader = subprocess.Popen(["head", "-n", "4", str(follow)], stdout=subprocess.PIPE)
    try:
        time.sleep(0.5)  # the reader is open at the LSO (0)
        os.mkdir(mnt / TXNS / "t1")
        write_all(mnt / TXNS / "t1/live/0/append", b"one\ntwo\n")
        write_all(mnt / "live/0/append", b"plain\n")
        with pytest.raises(subprocess.TimeoutExpired):
            reader.wait(1.0)  # pinned at offset 0: nothing to read yet
        assert (mnt / "live/0/committed/at/earliest").read_bytes() == b""
        write_all(mnt / TXNS / "t1/control", b"commit\n")
        os.mkdir(mnt / TXNS / "t2")
        write_all(mnt / TXNS / "t2/live/0/append", b"doomed\n")
        write_all(mnt / TXNS / "t2/control", b"abort\n")
        write_all(mnt / "live/0/append", b"last\n")
        out, _ = reader.communicate(timeout=10)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.wait()
    assert out.decode().splitlines() == ["one", "two", "plain", "last"]
    committed = mnt / "live/0/committed/at"
    assert (committed / "earliest").read_text().splitlines() == ["one", "two", "plain", "last"]
    assert kafka_values((committed / "earliest.kafka").read_bytes()) == ["one", "two", "plain", "last"]
    assert (mnt / "live/0/at/earliest").read_text().splitlines() == ["one", "two", "plain", "doomed", "last"]
