"""The fault filesystem itself (tests/helpers/faultfs.py): a scheduled fault fires once at the n-th matching call, a
failed fsync drops unsynced bytes, reads flip bits, and the power-cut model cuts files and drops unsynced names."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from conftest import errno_of
from faultstore import FaultyStore


def test_nth_matching_write_fails_once_and_stores_nothing(faulty: FaultyStore) -> None:
    ffs = faulty.ffs.start()
    path = ffs.mountpoint / "a.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        faulty.fault("pwrite", "*.log", nth=2, errno="ENOSPC")
        os.write(fd, b"one")
        assert errno_of(os.write, fd, b"two") == errno.ENOSPC
        os.write(fd, b"three")
    finally:
        os.close(fd)
    assert (ffs.source / "a.log").read_bytes() == b"onethree"
    assert [f["op"] for f in faulty.fired()] == ["pwrite"]


def test_failed_fsync_drops_unsynced_bytes(faulty: FaultyStore) -> None:
    ffs = faulty.ffs.start()
    fd = os.open(ffs.mountpoint / "s.log", os.O_WRONLY | os.O_CREAT, 0o644)
    other = os.open(ffs.mountpoint / "s.log", os.O_WRONLY)
    try:
        os.write(fd, b"synced")
        os.fsync(fd)
        os.write(fd, b"-lost")
        faulty.fault("fsync", "s.log", drop="truncate")
        assert errno_of(os.fsync, fd) == errno.EIO
        os.fsync(fd)  # the retry succeeds: the data is gone (fsyncgate)
        assert errno_of(os.fsync, other) == errno.EIO  # every other descriptor reports the error once (errseq)
        os.fsync(other)
    finally:
        os.close(fd)
        os.close(other)
    assert (ffs.source / "s.log").read_bytes() == b"synced"


def test_read_bit_flip_and_read_error(faulty: FaultyStore) -> None:
    ffs = faulty.ffs.start()
    (ffs.source / "r.log").write_bytes(bytes(64))
    faulty.fault("pread", "r.log", flip=True, errno=None)
    assert (ffs.mountpoint / "r.log").read_bytes() != bytes(64)
    assert (ffs.mountpoint / "r.log").read_bytes() == bytes(64)
    faulty.fault("pread", "r.log")
    assert errno_of((ffs.mountpoint / "r.log").read_bytes) == errno.EIO


def test_power_cut_cuts_files_and_drops_unsynced_names(faulty: FaultyStore) -> None:
    ffs = faulty.ffs.start()
    mnt, src = ffs.mountpoint, ffs.source
    os.mkdir(mnt / "d")
    _fsync_dir(mnt)
    _write(mnt / "d" / "kept", b"12345", sync=True)
    _fsync_dir(mnt / "d")
    _write(mnt / "d" / "kept", b"678", sync=False)  # appended, not synced: cut
    _write(mnt / "d" / "new", b"abc", sync=True)  # kept: its name is synced by the fsync of d below
    os.mkdir(mnt / "e")  # never synced: dropped with what is in it
    _write(mnt / "e" / "x", b"x", sync=True)
    _write(mnt / "d" / "gone.tmp", b"old", sync=True)
    _write(mnt / "d" / "unlinked", b"u", sync=True)
    _fsync_dir(mnt / "d")
    os.rename(mnt / "d" / "gone.tmp", mnt / "d" / "moved")  # not synced: goes back
    os.unlink(mnt / "d" / "unlinked")  # not synced: comes back
    _write(mnt / "d" / "late", b"abc", sync=True)  # synced data, unsynced name: dropped
    summary = faulty.ffs.powercut()
    assert sorted(os.listdir(src)) == ["d"]
    assert sorted(os.listdir(src / "d")) == ["gone.tmp", "kept", "new", "unlinked"]
    assert (src / "d" / "kept").read_bytes() == b"12345"
    assert (src / "d" / "gone.tmp").read_bytes() == b"old"
    assert (src / "d" / "new").read_bytes() == b"abc"
    assert summary["cut"] == {"d/kept": 3}
    assert errno_of(os.mkdir, mnt / "f") == errno.EIO  # frozen after the cut


def _write(path: Path, data: bytes, *, sync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
