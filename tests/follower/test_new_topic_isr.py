"""A topic created on a leader while ``logfs follow`` runs (issue 23, point 6): its partitions start with the live
followers in their ISR, as Kafka's controller creates a partition with the ISR equal to its live assigned replicas.
So ``logfs create-topic`` followed at once by a write and fsync (acks=all) with ``min.insync.replicas=2`` waits for
the follower's first fetches and succeeds, where it used to fail with EIO (the ISR was the leader alone until the
follower, which lists the leader's topics once a second, caught up). A follower that sent no fetch request within
``replica.lag.time.max.ms`` (stopped with SIGSTOP here) is not live: a new topic does not wait for it, and with
``min.insync.replicas=2`` acks=all fails at once as for any partition whose ISR is too small.

Real processes: the leader's ``logfs mount``, the follower's ``logfs follow`` (without ``--mount``, as the issue's
user ran it) and ``logfs create-topic``; writes are plain Python file I/O on the leader's mount. Every process is
stopped (a stopped follower resumed first) and every mount unmounted in ``finally``.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
from pathlib import Path

from conftest import LOGFS, Mount, errno_of, finish_mount, start_mount
from follower_procs import following, identical, state, wait_for

LAG_MS = 2000  # replica.lag.time.max.ms of the stopped-follower test: a stopped follower stops being live after it
FSYNC_EIO = r"fsync\(.*failed with EIO: NotEnoughReplicasAfterAppend"
# A new topic must not wait for a follower that is not live: far below request.timeout.ms (REQUEST_TIMEOUT_MS)
# even on a busy machine.
NOT_STALLED_S = 5.0
REQUEST_TIMEOUT_MS = 30_000


def leader(tmp_path: Path, *config: str) -> Mount:
    return start_mount(tmp_path / "L", tmp_path / "L.mnt", "node.id=1", "replica.ids=1,2", *config)


def create_topic(mount: Path, topic: str, *config: str) -> None:
    """``logfs create-topic MOUNT TOPIC [--config K=V …]``, as a user runs it."""
    args = [LOGFS, "create-topic", str(mount), topic]
    for pair in config:
        args += ["--config", pair]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"create-topic {topic}: {done.stderr}"


def follower_live(mount: Path, replica_id: int) -> int | None:
    """The leader's ``logfs_follower_live`` gauge for ``replica_id`` (None when absent)."""
    wanted = f'logfs_follower_live{{replica="{replica_id}"}} '
    for line in (mount / ".logfs" / "metrics").read_text().splitlines():
        if line.startswith(wanted):
            return int(line[len(wanted) :])
    return None


def write_and_fsync(path: Path, line: str) -> float:
    """One record written and fsynced (acks=all) through its own handle; the seconds it took. Raises the OSError."""
    started = time.monotonic()
    fd = os.open(path, os.O_WRONLY)
    try:
        data = f"{line}\n".encode()
        assert os.write(fd, data) == len(data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.monotonic() - started


def o_sync_write(path: Path, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_SYNC)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def test_create_topic_then_acks_all_at_once_succeeds_10_of_10_and_the_follower_holds_the_record(
    tmp_path: Path,
) -> None:
    """A fresh leader (no topic yet) and a running follower: ten times, create-topic then at once write + fsync with
    min.insync.replicas=2. Every fsync succeeds (it waits for the follower's first fetches), the partition's ISR
    names both replicas from the start, and the follower's store holds each record."""
    lead = leader(tmp_path, "min.insync.replicas=2", f"request.timeout.ms={REQUEST_TIMEOUT_MS}")
    store = tmp_path / "F"
    try:
        with following(lead.path, store, 2) as follower:
            # a follower with no partition to fetch is still heard from: its discovery looks up .logfs/fetch/2
            wait_for("the leader to hear from the follower", lambda: follower_live(lead.path, 2) == 1, lead, follower)
            for i in range(10):
                topic = f"new{i}"
                create_topic(lead.path, topic)
                assert state(lead.path, topic, 0)["isr"] == [1, 2]  # before any fetch of it: Kafka's creation rule
                write_and_fsync(lead.path / topic / "0" / "append", f"first-{i}")  # raises EIO when refused
                assert state(lead.path, topic, 0)["high_watermark"] == 1
            for i in range(10):
                wait_for(f"new{i} on the follower", lambda i=i: identical(lead.store, store, f"new{i}", 1), lead,
                         follower)  # fmt: skip
        assert "NotEnoughReplicas" not in lead.log_text()
    finally:
        finish_mount(lead)


def test_a_stopped_follower_is_not_in_a_new_topics_isr(tmp_path: Path) -> None:
    """The follower stopped (SIGSTOP) longer than replica.lag.time.max.ms: a new topic's ISR is the leader alone.
    With min.insync.replicas=1 acks=all succeeds at once (the stopped follower does not stall it); with 2 it is
    refused as Kafka refuses a produce below min.insync.replicas: an O_SYNC write with EAGAIN, nothing written
    (NOT_ENOUGH_REPLICAS), a write + fsync with EIO at once, the record in the log but not acknowledged
    (NOT_ENOUGH_REPLICAS_AFTER_APPEND). Once resumed, the follower catches up, joins the ISR, and acks=all works."""
    lead = leader(tmp_path, f"replica.lag.time.max.ms={LAG_MS}", f"request.timeout.ms={REQUEST_TIMEOUT_MS}")
    lead.allow_log(FSYNC_EIO)
    lead.allow_refusals("/two/0/append")
    store = tmp_path / "F"
    try:
        with following(lead.path, store, 2) as follower:
            wait_for("the leader to hear from the follower", lambda: follower_live(lead.path, 2) == 1, lead, follower)
            follower.proc.send_signal(signal.SIGSTOP)
            try:
                wait_for("the stopped follower no longer live", lambda: follower_live(lead.path, 2) == 0, lead,
                         timeout_s=LAG_MS / 1000 + 30)  # fmt: skip
                create_topic(lead.path, "one", "min.insync.replicas=1")
                assert state(lead.path, "one", 0)["isr"] == [1]
                took = write_and_fsync(lead.path / "one" / "0" / "append", "alone")
                assert took < NOT_STALLED_S, f"acks=all on a new topic took {took:.1f} s with the follower stopped"
                create_topic(lead.path, "two", "min.insync.replicas=2")
                two = lead.path / "two" / "0"
                assert state(lead.path, "two", 0)["isr"] == [1]
                assert errno_of(o_sync_write, two / "append", "refused") == errno.EAGAIN
                assert state(lead.path, "two", 0)["log_end_offset"] == 0  # nothing written
                started = time.monotonic()
                assert errno_of(write_and_fsync, two / "append", "unacknowledged") == errno.EIO
                assert time.monotonic() - started < NOT_STALLED_S  # at once, not after request.timeout.ms
                assert state(lead.path, "two", 0)["log_end_offset"] == 1  # in the log, not acknowledged
            finally:
                follower.proc.send_signal(signal.SIGCONT)
            wait_for("the follower in the ISR of two", lambda: state(lead.path, "two", 0)["isr"] == [1, 2], lead,
                     follower)  # fmt: skip
            write_and_fsync(two / "append", "together")
            assert (two / "at" / "earliest").read_text().split() == ["unacknowledged", "together"]
            for topic in ("one", "two"):
                wait_for(f"{topic} on the follower", lambda t=topic: identical(lead.store, store, t, 1), lead,
                         follower)  # fmt: skip
    finally:
        finish_mount(lead)
