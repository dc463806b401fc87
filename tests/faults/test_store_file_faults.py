"""One fault per file kind and operation of the store (issue 16): a failed write, fsync, rename, ftruncate or
create of an index, time index, transaction index, producer snapshot, checkpoint, transaction log, producer-id block,
a new segment or a directory fsync takes the store offline; the operation that met it fails with EIO (or the next
write does, for background work); what was acknowledged before survives a restart on a healthy disk. Segments are
in test_segment_faults.py, reads in test_read_faults.py, ``meta.properties`` below."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import LOGFS, make_topic, write_all
from faultstore import (
    FAULT_LOG,
    FaultyStore,
    assert_acked,
    expect_offline,
    expect_survivors,
    logfs_check,
    partition_state,
    values,
)

ROLLS = ("segment.bytes=1024", "index.interval.bytes=0")  # a roll every ~13 records, an index entry per batch
TXNS = Path(".logfs/transactions")

# (test id, op, path glob, trigger, what ``state["offline"]["file"]`` contains)
CASES = [
    ("index-write", "pwrite", "store/t-0/*.index", "appends", ".index"),
    ("index-fsync", "fsync", "store/t-0/*.index", "appends", ".index"),
    ("index-ftruncate", "ftruncate", "store/t-0/*.index", "appends", ".index"),
    ("timeindex-write", "pwrite", "store/t-0/*.timeindex", "appends", ".timeindex"),
    ("timeindex-fsync", "fsync", "store/t-0/*.timeindex", "appends", ".timeindex"),
    ("new-segment-create", "create", "store/t-0/*.log", "appends", ".log"),
    ("snapshot-write", "pwrite", "store/t-0/*.snapshot*", "appends", ".snapshot"),
    ("snapshot-rename", "rename", "store/t-0/*.snapshot*", "appends", ".snapshot"),
    ("partition-dir-fsync", "fsyncdir", "store/t-0", "appends", "t-0"),
    ("checkpoint-fsync", "fsync", "store/replication-offset-checkpoint*", "appends", "replication-offset-checkpoint"),
    ("checkpoint-rename", "rename", "store/replication-offset-checkpoint*", "appends", "replication-offset-checkpoint"),
    ("txnindex-write", "pwrite", "store/t-0/*.txnindex", "abort", ".txnindex"),
    ("transaction-log-write", "pwrite", "store/.logfs-transactions.log", "transaction", ".logfs-transactions.log"),
    ("transaction-log-fsync", "fsync", "store/.logfs-transactions.log", "transaction", ".logfs-transactions.log"),
    ("producer-ids-write", "pwrite", "store/.logfs-producer-ids*", "producer-id", ".logfs-producer-ids"),
    ("producer-ids-rename", "rename", "store/.logfs-producer-ids*", "producer-id", ".logfs-producer-ids"),
]


@pytest.mark.parametrize(("op", "glob", "trigger", "file_part"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_failed_store_file_operation_takes_the_store_offline(
    faulty: FaultyStore, op: str, glob: str, trigger: str, file_part: str
) -> None:
    faulty.start(*ROLLS)
    make_topic(faulty.mnt, "t")
    acked = _acked(faulty.mnt, "before", 3)
    faulty.fault(op, glob)
    acked += TRIGGERS[trigger](faulty.mnt)
    expect_offline(faulty, "t", file_part)
    assert [(f["op"], f["errno"]) for f in faulty.fired()] == [(op, "EIO")]
    expect_survivors(faulty, "t", acked, *ROLLS)


def _acked(mnt: Path, tag: str, count: int) -> list[bytes]:
    """Records written and fsync'd one at a time until one fails with EIO (the fault): the acknowledged ones."""
    out = []
    fd = os.open(mnt / "t" / "0" / "append", os.O_WRONLY)
    try:
        for i in range(count):
            value = f"{tag}-{i}".encode()
            try:
                os.write(fd, value + b"\n")
                os.fsync(fd)
            except OSError as exc:
                assert exc.errno == errno.EIO, exc
                break
            out.append(value)
    finally:
        os.close(fd)
    return out


def _appends(mnt: Path) -> list[bytes]:
    """Enough fsync'd appends for several rolls (index trims, snapshots, new segments, a directory fsync each),
    then time for the background flush (1 s tick) and the high-watermark checkpoint (every 5 s)."""
    acked = _acked(mnt, "rolling", 30)
    _wait_for_offline(mnt, 7.0)
    return acked


def _transaction(mnt: Path, value: bytes = b"after-offline-txn", decision: bytes = b"commit") -> list[bytes]:
    """A transaction begun, written and ended (``decision``): the step that meets the fault fails with EIO (its
    records are never acknowledged)."""
    try:
        os.mkdir(mnt / TXNS / "tx")
        write_all(mnt / TXNS / "tx/t/0/append", value + b"\n")
        write_all(mnt / TXNS / "tx/control", decision + b"\n")
    except OSError as exc:
        assert exc.errno == errno.EIO, exc
    return []


def _abort(mnt: Path) -> list[bytes]:
    """A transaction with records, aborted (its marker adds an entry to the transaction index), then fsync'd
    appends until the store is offline."""
    return _transaction(mnt, b"aborted", b"abort") + _appends(mnt)


def _producer_id(mnt: Path) -> list[bytes]:
    """The first producer id of a store allocates its block (``.logfs-producer-ids``): the open fails with EIO."""
    with pytest.raises(OSError) as failed:
        (mnt / ".logfs" / "producer-id").read_bytes()
    assert failed.value.errno == errno.EIO
    return []


def _wait_for_offline(mnt: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not partition_state(mnt, "t").get("offline"):
        time.sleep(0.1)


TRIGGERS = {"appends": _appends, "transaction": _transaction, "abort": _abort, "producer-id": _producer_id}


def test_a_failed_fsync_at_shutdown_leaves_the_store_unclean(faulty: FaultyStore) -> None:
    """Producer snapshots are fsynced by the shutdown's flush: when that fails, the store goes offline there, the
    clean-shutdown marker is not written (the next mount recovers), the log names the file, and every acknowledged
    record survives."""
    faulty.start(*ROLLS)
    make_topic(faulty.mnt, "t")
    acked = _acked(faulty.mnt, "before", 30)
    faulty.fault("fsync", "store/t-0/*.snapshot")
    assert faulty.mount is not None
    log = faulty.mount.log_path
    faulty.stop_logfs()  # its exit code is not part of the contract: the unmount itself went through
    assert [f["op"] for f in faulty.fired()] == ["fsync"]
    assert ".snapshot" in log.read_text()
    assert not (faulty.disk_store / ".kafka_cleanshutdown").exists()
    faulty.restart_healthy(*ROLLS)
    assert_acked(values(faulty.mnt / "t" / "0" / "at" / "earliest"), acked)
    faulty.finish()
    assert logfs_check(faulty.disk_store).returncode == 0


@pytest.mark.parametrize("op", ["create", "fsync"])
def test_a_failed_meta_properties_write_fails_the_mount_and_leaves_a_usable_store(faulty: FaultyStore, op: str) -> None:
    """``meta.properties`` is written when a store is first used, before anything is served: a failure there ends
    ``logfs mount`` with exit code 1 and a message naming the file; the store mounts on a healthy disk afterwards."""
    faulty.ffs.start()
    faulty.fault(op, "store/meta.properties*")
    log = faulty.root / "failed-mount.log"
    faulty.mnt.mkdir()
    with open(log, "wb") as out:
        done = subprocess.run(
            [LOGFS, "mount", str(faulty.store), str(faulty.mnt)], stdout=out, stderr=out, timeout=60, check=False
        )
    assert done.returncode == 1, log.read_text()
    assert "meta.properties" in log.read_text()
    assert not os.path.ismount(faulty.mnt)
    assert [f["op"] for f in faulty.fired()] == [op]
    mount = faulty.restart_healthy()
    mount.allow_log(FAULT_LOG)
    make_topic(faulty.mnt, "t")
    write_all(faulty.mnt / "t" / "0" / "append", b"fine\n")
    assert (faulty.mnt / "t" / "0" / "at" / "earliest").read_bytes() == b"fine\n"
    faulty.finish()
    assert logfs_check(faulty.disk_store).returncode == 0
