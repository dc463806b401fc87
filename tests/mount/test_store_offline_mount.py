"""An offline store through a real mount (issue 16): the store lives on the fault-injecting filesystem
(tests/helpers/faultfs.py); after a failed fsync the mount stays up, serves what is on disk, refuses every change with
EIO, keeps its periodic work from writing or dying, and says so in ``state`` and ``.logfs/metrics``; a roll's new
segment name is fsynced before the fsync that acknowledges it. tests/faults/ holds the per-file campaign."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Mount, clear_mount, errno_of, make_topic, start_mount, state, write_all
from faultstore import FaultFS

OFFLINE_LOG = r"offline|Input/output|EIO|refused|unclean|recover|truncat|quarantin|damage"


class OnFaultFS:
    """``src/`` → faultfs at ``ffs/`` → ``logfs mount`` of ``ffs/store`` at ``mnt/``; everything unmounted on exit."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ffs = FaultFS(root / "src", root / "ffs", root / "control")
        self.mount: Mount | None = None

    def start(self, *config: str) -> Path:
        self.ffs.start()
        (self.ffs.mountpoint / "store").mkdir()
        self.mount = start_mount(self.ffs.mountpoint / "store", self.root / "mnt", *config)
        self.mount.allow_log(OFFLINE_LOG)
        return self.root / "mnt"

    def restart_healthy(self) -> Path:
        """Stop both, then mount the same store straight on the healthy disk."""
        assert self.mount is not None
        self.mount.stop()
        self.ffs.stop()
        self.mount = start_mount(self.ffs.source / "store", self.root / "mnt")
        self.mount.allow_log(OFFLINE_LOG)
        return self.root / "mnt"

    def close(self) -> None:
        try:
            if self.mount is not None:
                self.mount.stop()
        finally:
            self.ffs.stop()
            clear_mount(self.root / "mnt")


@pytest.fixture
def onffs(tmp_path: Path) -> Iterator[OnFaultFS]:
    fs = OnFaultFS(tmp_path)
    try:
        yield fs
    finally:
        fs.close()


def fsynced_lines(append: Path, tag: str, count: int) -> list[bytes]:
    fd = os.open(append, os.O_WRONLY)
    try:
        values = [f"{tag}-{i}".encode() for i in range(count)]
        for value in values:
            os.write(fd, value + b"\n")
            os.fsync(fd)
    finally:
        os.close(fd)
    return values


def test_an_offline_store_serves_reads_refuses_changes_and_its_ticks_keep_the_mount_up(onffs: OnFaultFS) -> None:
    mnt = onffs.start()
    append = make_topic(mnt, "t") / "0" / "append"
    acked = fsynced_lines(append, "acked", 4)
    assert state(mnt, "t")["offline"] is False
    assert re.search(r"^logfs_store_offline 0$", (mnt / ".logfs" / "metrics").read_text(), re.M)
    fd = os.open(append, os.O_WRONLY)
    try:
        os.write(fd, b"lost-unsynced\n")
        onffs.ffs.schedule([{"op": "fsync", "path": "store/t-0/*.log", "drop": "truncate", "errno": "EIO"}])
        assert errno_of(os.fsync, fd) == errno.EIO
        onffs.ffs.schedule([])  # the disk answers again: the store stays offline all the same
        assert errno_of(os.fsync, fd) == errno.EIO  # never retried into a success
    finally:
        os.close(fd)
    offline = state(mnt, "t")["offline"]
    assert offline["operation"] == "fsync" and offline["errno"] == "EIO", offline
    assert offline["file"].endswith("t-0/00000000000000000000.log"), offline
    metrics = (mnt / ".logfs" / "metrics").read_text()
    assert re.search(r"^logfs_store_offline 1$", metrics, re.M), metrics
    # what was acknowledged is still there to read; every change is refused with EIO
    assert (mnt / "t" / "0" / "at" / "0-4").read_bytes().splitlines() == acked
    assert errno_of(write_all, append, b"refused\n") == errno.EIO
    assert errno_of(write_all, append, b"refused\n", os.O_WRONLY | os.O_SYNC) == errno.EIO
    assert errno_of(os.mkdir, mnt / "u") == errno.EIO
    time.sleep(2.5)  # two ticks of the periodic work (checkpoints, retention): they write nothing and raise nothing
    assert state(mnt, "t")["offline"] == offline
    assert onffs.mount is not None and onffs.mount.proc.poll() is None
    log = onffs.mount.log_text()
    assert len(re.findall(r"ERROR .*is offline:", log)) == 1, log  # the failure logged once, not per refusal
    assert "periodic store work failed" not in log
    # a restart on the healthy disk recovers: every acknowledged record, the store online
    mnt = onffs.restart_healthy()
    assert (mnt / "t" / "0" / "at" / "earliest").read_bytes().splitlines()[:4] == acked
    assert state(mnt, "t")["offline"] is False
    assert fsynced_lines(mnt / "t" / "0" / "append", "again", 1) == [b"again-0"]


def test_a_rolls_new_segment_name_is_fsynced_before_the_fsync_that_acknowledges_it(onffs: OnFaultFS) -> None:
    mnt = onffs.start()
    append = make_topic(mnt, "t", segment_bytes=1024) / "0" / "append"
    fsynced_lines(append, "first", 1)
    onffs.ffs.schedule([{"op": "fsyncdir", "path": "store/t-0", "errno": "EIO"}])
    fd = os.open(append, os.O_WRONLY)
    try:
        for _ in range(3):
            os.write(fd, b"x" * 400 + b"\n")  # past segment.bytes: a roll
        os.write(fd, b"in-the-new-segment\n")
        assert errno_of(os.fsync, fd) == errno.EIO  # its directory entry could not be made durable: no ack
    finally:
        os.close(fd)
    assert [f["op"] for f in onffs.ffs.fired()] == ["fsyncdir"]
    offline = state(mnt, "t")["offline"]
    assert (offline["file"].rsplit("/", 1)[-1], offline["operation"]) == ("t-0", "fsync"), offline
    with contextlib.suppress(OSError):
        onffs.ffs.schedule([])
