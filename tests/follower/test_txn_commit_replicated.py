"""A transaction's ``commit`` is acknowledged like an acks=all write: ``control`` returns once every marker is below
its partition's high watermark, so the decision is on every ISR member before the writer hears of it.

The decision lives in the leader's own transaction log (mount/transactions.py), which is not replicated: a follower
promoted after a commit returned but before it held the COMMIT marker would abort the transaction as an orphan. So
the marker must be replicated before ``control`` answers. Real processes: a leader's ``logfs mount`` and ``logfs
follow``; with the follower stopped (SIGSTOP) while still in the ISR, a commit waits until the follower leaves the
ISR and then, with ``min.insync.replicas=2``, fails with EIO (NotEnoughReplicasAfterAppend), as an fsync would; the
decision stands on the leader, and once the follower resumes, its store holds the marker.
"""

from __future__ import annotations

import errno
import signal
import time
from pathlib import Path

from conftest import Mount, errno_of, finish_mount, start_mount
from follower_procs import following, identical, in_isr, state, wait_for

TXNS = ".logfs/transactions"
LAG_MS = 3000


def leader(tmp_path: Path, *config: str) -> Mount:
    return start_mount(tmp_path / "L", tmp_path / "L.mnt", "node.id=1", "replica.ids=1,2", *config)


def write(path: Path, data: bytes) -> None:
    with open(path, "wb", buffering=0) as f:
        f.write(data)


def test_commit_returns_once_the_markers_are_replicated(tmp_path: Path) -> None:
    lead = leader(tmp_path, "min.insync.replicas=2", f"replica.lag.time.max.ms={LAG_MS}")
    lead.allow_log(r"NotEnoughReplicasAfterAppend|ReplicationTimeout")
    lead.allow_refusals(f"/{TXNS}/t2/control")
    lead.allow_log(r"replica 2 leaves the ISR")
    mnt = lead.path
    store = tmp_path / "F"
    try:
        (mnt / "orders").mkdir()
        (mnt / "orders" / "1").mkdir()
        with following(mnt, store, 2) as follower:
            wait_for("the follower in the ISR", lambda: in_isr(lead, "orders", 2, 1, 2), lead, follower)
            # A running follower: the commit returns with both markers below the HW.
            (mnt / TXNS / "t1").mkdir()
            for p in (0, 1):
                write(mnt / TXNS / "t1" / "orders" / str(p) / "append", b"a\nb\n")
            write(mnt / TXNS / "t1" / "control", b"commit\n")
            for p in (0, 1):
                st = state(mnt, "orders", p)
                assert st["high_watermark"] == st["log_end_offset"] == 3, st  # two records and the marker
            # A stopped follower still in the ISR: the commit waits for it, then fails as an fsync would.
            (mnt / TXNS / "t2").mkdir()
            write(mnt / TXNS / "t2" / "orders" / "0" / "append", b"c\n")
            wait_for("the write replicated", lambda: state(mnt, "orders", 0)["high_watermark"] == 4, lead, follower)
            follower.proc.send_signal(signal.SIGSTOP)
            try:
                started = time.monotonic()
                assert errno_of(write, mnt / TXNS / "t2" / "control", b"commit\n") == errno.EIO
                took = time.monotonic() - started
                assert took > 1.0, f"the commit answered after {took:.2f} s: it did not wait for the follower"
                st = state(mnt, "orders", 0)
                assert st["isr"] == [1] and st["log_end_offset"] == 5, st  # the marker is in the leader's log
            finally:
                follower.proc.send_signal(signal.SIGCONT)
            wait_for("the follower back in the ISR", lambda: in_isr(lead, "orders", 2, 1, 2), lead, follower)
            wait_for(
                "the follower holds the markers", lambda: identical(lead.store, store, "orders", 2), lead, follower
            )
        assert (mnt / "orders" / "0" / "committed" / "at" / "earliest").read_text().split() == ["a", "b", "c"]
    finally:
        finish_mount(lead)
