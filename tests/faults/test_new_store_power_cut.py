"""Issue 23, point 3: a new store is durable from its first acknowledgement.

``Store.open`` made the store directory (or found it just made and empty) and never fsynced its parent, so a power
cut after the first acknowledged writes lost the whole store. Through the power-cut model of tests/helpers/faultfs.py
(every name whose directory was not fsynced since is undone, every file cut back to its last fsync): a store whose
directory a script made a moment before (``mkdir`` without an fsync), and one made with ``mkdir -p`` under
directories that did not exist either, take acknowledged writes of every kind that makes a file or directory of
its own — a topic with a config override, text and O_SYNC batches, a transaction (its log and markers), a consumer
group commit (``__consumer_offsets`` is created by it) — then the mount is killed, the power cut, and on the healthy
disk every acknowledged record, the commit decision, the group's offset and the topic's override are there.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import make_topic
from faultstore import FaultyStore, acked_appends, assert_acked, logfs_check, values
from writers import TXNS

from logfs.core.format.encode import encode_values

GROUP_OFFSET = Path(".logfs/groups/g/t/0/offset")


def _fsynced_write(path: Path, data: bytes, flags: int = os.O_WRONLY) -> None:
    fd = os.open(path, flags)
    try:
        assert os.write(fd, data) == len(data)
        if not flags & os.O_SYNC:
            os.fsync(fd)
    finally:
        os.close(fd)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("where", ["store", "a/b/store"], ids=["mkdir", "mkdir-p"])
def test_a_new_store_keeps_every_acknowledged_write_through_a_power_cut(tmp_path: Path, where: str) -> None:
    fs = FaultyStore(tmp_path, where)
    try:
        fs.start(make="script")
        mnt = fs.mnt
        make_topic(mnt, "t", partitions=2, segment_bytes=1024)
        acked = acked_appends(mnt / "t" / "0" / "append", "a", 20)
        batch_values = [f"b-{i}".encode() for i in range(3)]
        _fsynced_write(mnt / "t" / "1" / "batches", encode_values(batch_values, int(time.time() * 1000)),
                       os.O_WRONLY | os.O_SYNC)  # fmt: skip
        acked += batch_values
        txn = mnt / TXNS / "x"
        os.mkdir(txn)
        _fsynced_write(txn / "t" / "0" / "append", b"t-committed\n")
        _fsynced_write(txn / "control", b"commit\n")  # returns once the markers are durable
        acked.append(b"t-committed")
        _fsynced_write(mnt / GROUP_OFFSET, b"7 kept\n")  # creates __consumer_offsets, then acks=all
        fs.kill_logfs()
        cut = fs.ffs.powercut()
        fs.ffs.stop()
        print(f"power cut: undone {cut['undone']}, cut {cut['cut']}")

        fs.restart_healthy()
        assert (mnt / "t").is_dir(), f"the power cut took topic t and its {len(acked)} acknowledged records: {cut}"
        present = [v for p in range(2) for v in values(mnt / "t" / str(p) / "at" / "earliest")]
        assert_acked(present, acked)
        committed = values(mnt / "t" / "0" / "committed" / "at" / "earliest")
        assert b"t-committed" in committed, "the committed transaction's record is not read_committed any more"
        assert (mnt / GROUP_OFFSET).read_text() == "7 kept\n"
        assert "segment.bytes=1024" in (mnt / "t" / "config").read_text()
        fs.finish()
        check = logfs_check(fs.disk_store)
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        fs.close()
