"""Faults of a segment (``.log``) under a live mount (issue 16): a failed write or fsync takes the store offline, a
failed fsync is never retried into a success, ENOSPC from a write is a refusal, a short write is no failure; what
was acknowledged survives a restart on a healthy disk."""

from __future__ import annotations

import errno
import os

from conftest import errno_of, make_topic, write_all
from faultstore import FaultyStore, acked_appends, expect_offline, expect_online, expect_survivors

SEGMENT = "store/t-0/*.log"


def test_failed_segment_write_takes_the_store_offline(faulty: FaultyStore) -> None:
    faulty.start()
    append = make_topic(faulty.mnt, "t") / "0" / "append"
    acked = acked_appends(append, "acked", 5)
    faulty.fault("pwrite", SEGMENT)
    assert errno_of(write_all, append, b"after-offline-first\n") == errno.EIO
    assert faulty.fired()
    expect_offline(faulty, "t", "00000000000000000000.log", "write")
    expect_survivors(faulty, "t", acked)


def test_failed_segment_fsync_fails_every_waiting_fsync_and_is_never_retried(faulty: FaultyStore) -> None:
    """The unsynced bytes are dropped as Linux may; the fsync fails with EIO, and so does a later fsync of another
    handle whose write was acknowledged (acks=1) before it: neither is ever reported durable."""
    faulty.start()
    append = make_topic(faulty.mnt, "t") / "0" / "append"
    acked = acked_appends(append, "acked", 5)
    other = os.open(append, os.O_WRONLY)
    first = os.open(append, os.O_WRONLY)
    try:
        os.write(other, b"after-offline-pending\n")
        os.write(first, b"after-offline-unsynced\n")
        faulty.fault("fsync", SEGMENT, drop="truncate")
        assert errno_of(os.fsync, first) == errno.EIO
        assert errno_of(os.fsync, first) == errno.EIO  # the retry: still EIO, not a success on dropped pages
        assert errno_of(os.fsync, other) == errno.EIO
    finally:
        os.close(first)
        os.close(other)
    assert [f["op"] for f in faulty.fired()] == ["fsync"]
    expect_offline(faulty, "t", ".log", "fsync")
    expect_survivors(faulty, "t", acked)


def test_enospc_from_segment_fsync_counts_as_eio(faulty: FaultyStore) -> None:
    faulty.start()
    append = make_topic(faulty.mnt, "t") / "0" / "append"
    acked = acked_appends(append, "acked", 3)
    fd = os.open(append, os.O_WRONLY)
    try:
        os.write(fd, b"after-offline-unsynced\n")
        faulty.fault("fsync", SEGMENT, errno="ENOSPC", drop="zero")
        assert errno_of(os.fsync, fd) == errno.EIO
    finally:
        os.close(fd)
    expect_offline(faulty, "t", ".log", "fsync", cause="ENOSPC")
    expect_survivors(faulty, "t", acked)


def test_enospc_from_segment_write_is_refused_and_the_store_stays_online(faulty: FaultyStore) -> None:
    faulty.start()
    append = make_topic(faulty.mnt, "t") / "0" / "append"
    acked = acked_appends(append, "acked", 3)
    faulty.fault("pwrite", SEGMENT, errno="ENOSPC")
    assert errno_of(write_all, append, b"refused\n") == errno.ENOSPC
    acked += expect_online(faulty, "t")
    present = expect_survivors(faulty, "t", acked)
    assert b"refused" not in present


def test_short_segment_write_is_completed(faulty: FaultyStore) -> None:
    """A short pwrite is no error (the core writes the rest): the write succeeds and the store stays online."""
    faulty.start()
    append = make_topic(faulty.mnt, "t") / "0" / "append"
    acked = acked_appends(append, "acked", 2)
    faulty.fault("pwrite", SEGMENT, errno=None, short=True)
    acked += acked_appends(append, "short", 1)
    assert [f["op"] for f in faulty.fired()] == ["pwrite"]
    acked += expect_online(faulty, "t")
    expect_survivors(faulty, "t", acked)
