"""A leader mount killed with SIGKILL while followers long-poll fetch lookups in it exits at once, with no help.

Before the fix, the leader dropped each fetch name's dentry on open (``invalidate_entry``), which waits for the fetch
directory's lock; a follower's next lookup in that directory holds the lock while it long-polls in the leader. Killed
then, the leader's invalidating thread waited for ever in the kernel, so the process never exited and its mount hung
until someone aborted its FUSE connection (it happened in 5 of 25 rounds of a cluster test). Here two fetchers per
partition directory (the two- and the three-part name of the same log-end fetch) keep a lookup in flight nearly all
the time, the leader is killed at a random moment, and its process must be gone within a few seconds.

Rounds: LOGFS_KILLED_LEADER_ROUNDS (default 6).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conftest import start_mount, write_all

ROUNDS = int(os.environ.get("LOGFS_KILLED_LEADER_ROUNDS", "6"))
EXIT_WITHIN_S = 5.0
PARTITIONS = 2


def _fetch(path: Path) -> dict:  # type: ignore[type-arg]
    data = path.read_bytes()
    line, _, records = data.partition(b"\n")
    head = json.loads(line)
    assert len(records) == head["records_bytes"]
    return head


def _fetcher(fetch_dir: Path, name: str, stop: threading.Event, counts: list[int]) -> None:
    """Look ``name`` up (a log-end fetch: each lookup long-polls up to 500 ms) until the mount dies."""
    while not stop.is_set():
        try:
            head = _fetch(fetch_dir / name)
        except OSError:
            return  # the leader died (ENOTCONN, ECONNABORTED …)
        counts.append(int(head["error"] is None and head["records_bytes"] == 0))  # 0: a wrong answer


def _abort_connection(mnt: Path) -> None:
    """Only when the test already failed: free a stuck process by aborting its FUSE connection (as a person would)."""
    with open("/proc/self/mountinfo") as info:
        for line in info:
            fields = line.split()
            if fields[4] == str(mnt) and fields[2].startswith("0:"):
                with contextlib.suppress(OSError):
                    Path("/sys/fs/fuse/connections", fields[2].split(":")[1], "abort").write_text("1")


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_a_killed_leader_exits_while_followers_long_poll_its_fetch_files(tmp_path: Path, round_: int) -> None:
    store, mnt = tmp_path / "store", tmp_path / "mnt"
    mount = start_mount(store, mnt, "replica.ids=0,1")
    stop = threading.Event()
    threads: list[threading.Thread] = []
    counts: list[int] = []
    try:
        os.mkdir(mnt / "t")
        for p in range(1, PARTITIONS):
            os.mkdir(mnt / "t" / str(p))
        for p in range(PARTITIONS):
            write_all(mnt / "t" / str(p) / "append", b"a\nb\nc\n")
            fetch_dir = mnt / ".logfs/fetch/1/t" / str(p)
            head = _fetch(fetch_dir / "0.-1")  # catch up: from here on every fetch is at the log end
            epoch, leo = head["leader_epoch"], head["log_end_offset"]
            for name in (f"{leo}.{epoch}", f"{leo}.{epoch}.{epoch}"):
                threads.append(threading.Thread(target=_fetcher, args=(fetch_dir, name, stop, counts), daemon=True))
        for t in threads:
            t.start()
        time.sleep(random.Random(round_).uniform(0.6, 1.6))  # several long polls and opens have come and gone
        assert counts and all(counts), f"the fetchers made no fetch, or a wrong one: {counts}"
        mount.proc.send_signal(signal.SIGKILL)
        try:
            mount.proc.wait(EXIT_WITHIN_S)
        except subprocess.TimeoutExpired:
            _abort_connection(mnt)
            mount.proc.wait(10)
            pytest.fail(f"the killed leader did not exit within {EXIT_WITHIN_S} s (freed by a FUSE connection abort)")
        assert mount.proc.returncode == -signal.SIGKILL
    finally:
        stop.set()
        if mount.proc.poll() is None:
            mount.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                mount.proc.wait(EXIT_WITHIN_S)
            if mount.proc.poll() is None:
                _abort_connection(mnt)
                mount.proc.wait(10)
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True, check=False)
        for t in threads:
            t.join(5)
        assert not any(t.is_alive() for t in threads), "a fetcher still waits on the dead mount"
