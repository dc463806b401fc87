"""A fetch name looked up again keeps its inode, and each lookup is one fetch: a follower at the log end that reads
the same name three times waits three long polls (~0.5 s each), not six (the kernel revalidates a cached name by a
lookup of its own; answered with another inode, it would look the name up once more, a second long poll). The
answers are fresh per lookup: a record appended between two reads shows in the next answer of the same name's
successor, and a name evicted from the leader's table (more than 4 newer names) gets a new inode."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from conftest import running_mount, write_all


def _read(path: Path) -> tuple[dict, int]:  # type: ignore[type-arg]
    fd = os.open(path, os.O_RDONLY)
    try:
        inode = os.fstat(fd).st_ino
        data = b""
        while chunk := os.read(fd, 1 << 20):
            data += chunk
    finally:
        os.close(fd)
    line, _, records = data.partition(b"\n")
    head = json.loads(line)
    assert len(records) == head["records_bytes"]
    return head, inode


def test_a_fetch_name_read_again_is_one_long_poll_on_the_same_inode(tmp_path: Path) -> None:
    with running_mount(tmp_path / "store", tmp_path / "mnt", "replica.ids=0,1") as mount:
        mnt = mount.path
        os.mkdir(mnt / "t")
        write_all(mnt / "t/0/append", b"a\nb\n")
        fetch = mnt / ".logfs/fetch/1/t/0"
        head, _ = _read(fetch / "0.-1")
        name = f"{head['log_end_offset']}.{head['leader_epoch']}"
        _read(fetch / name)  # the first fetch at the log end is answered at once (the HW is news)
        started = time.monotonic()
        inodes = set()
        for _ in range(3):
            head, inode = _read(fetch / name)
            assert head["error"] is None and head["records_bytes"] == 0
            inodes.add(inode)
        took = time.monotonic() - started
        assert 1.4 < took < 2.4, f"3 reads of a log-end name took {took:.2f} s: not one 0.5 s long poll each"
        assert len(inodes) == 1, "a name looked up again keeps its inode"
        write_all(mnt / "t/0/append", b"c\n")
        head, inode = _read(fetch / name)  # the same name, a fresh answer: the new record
        assert head["records_bytes"] > 0 and head["log_end_offset"] == 3 and inode in inodes
        epoch = head["leader_epoch"]
        for newer in (f"0.{epoch}", f"1.{epoch}", f"0.{epoch}.{epoch}", f"1.{epoch}.{epoch}", f"2.{epoch}.{epoch}"):
            _read(fetch / newer)  # 5 newer names, none at the log end (the leader keeps 4)
        _, again = _read(fetch / name)
        assert again not in inodes, "an evicted name gets a new inode"
