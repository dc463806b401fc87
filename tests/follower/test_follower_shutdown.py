"""``logfs follow`` exits promptly on SIGTERM, and leaves the leader's mount answering (logfs/follower/inflight.py).

The bug this holds off: a follower that exited while one of its fetches was still queued in the leader's mount
withdrew it, which could leave the leader's FUSE loop blocked in a read of ``/dev/fuse`` (pyfuse3 reads after a
readiness wake-up that the withdrawn request had caused); the follower's other fetches, already long-polling there,
then never got an answer and its exit hung (tests/mount/test_groups.py's follower test failed in CI that way, about
one run in eight on a loaded machine). The follower now waits for its calls into the leader's mount before it exits.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

from conftest import finish_mount, make_topic, start_mount
from follower_procs import append_lines, in_isr, start_follower, wait_for

PARTITIONS = 16  # idle partitions: at any moment nearly all of their fetches are long-polling in the leader's mount
ROUNDS = int(os.environ.get("LOGFS_FOLLOWER_SHUTDOWN_ROUNDS", "1"))
WAITED = re.compile(r"shutdown: waited for (\d+) call\(s\) into the leader's mount, (\d+) still running")
PROMPT_EXIT_S = 10.0  # a long poll ends within 0.5 s; the drain waits at most 2 s; generous for a loaded machine


def leader_main_thread_blocked_in_fuse_read(pid: int, samples: int = 20, interval_s: float = 0.05) -> bool:
    """Whether the leader's trio thread sits in a read of /dev/fuse at every sample over ~1 s while nobody touches
    its mount (its wchan, from /proc: no request to the mount). An idle mount waits in epoll instead."""
    wchan = Path(f"/proc/{pid}/task/{pid}/wchan")
    for _ in range(samples):
        if wchan.read_text() != "fuse_dev_do_read":
            return False
        time.sleep(interval_s)
    return True


def test_a_follower_exits_promptly_on_sigterm_after_its_fetches_came_back(tmp_path: Path) -> None:
    lead = start_mount(tmp_path / "L", tmp_path / "L.mnt", "node.id=1", "replica.ids=1,2")
    try:
        make_topic(lead.path, "t", PARTITIONS)
        for p in range(0, PARTITIONS, 5):
            append_lines(lead.path / "t" / str(p) / "append", [f"r{p}"])
        for r in range(ROUNDS):
            follower = start_follower(lead.path, tmp_path / "F", 2)
            try:
                wait_for("the follower in every ISR", lambda: in_isr(lead, "t", PARTITIONS, 2), lead, follower)
                time.sleep(0.2)  # every fetch now long-polls at the log end
                started = time.monotonic()
                code = follower.stop()
                took = time.monotonic() - started
            finally:
                follower.stop()
            log = follower.log_text()
            assert code == 0, f"round {r}: logfs follow exited {code} ({took:.1f} s after SIGTERM):\n{log[-4000:]}"
            assert took < PROMPT_EXIT_S, f"round {r}: exit took {took:.1f} s"
            waited = WAITED.search(log)
            assert waited is not None, f"round {r}: no fetch was in flight at SIGTERM?\n{log[-4000:]}"
            assert int(waited.group(1)) >= 1 and waited.group(2) == "0", waited.group(0)
            assert not leader_main_thread_blocked_in_fuse_read(lead.proc.pid), f"round {r}: the leader's mount hangs"
            (tmp_path / "F.follow2.log").rename(tmp_path / f"F.follow2.round{r}.log")
    finally:
        finish_mount(lead)


def test_a_follower_of_a_stopped_leader_shuts_down_and_exits_when_it_resumes(tmp_path: Path) -> None:
    """The leader is stopped (SIGSTOP: a hung mount, or a paused node of a cluster) while the follower's session is
    open on it: the follower's own mount keeps answering, and SIGTERM takes it through its whole shutdown (its mount
    unmounted, its store closed); the process itself ends once the leader answers the calls it had already taken
    (the kernel holds a thread whose FUSE request was read until it is answered). Closing the session's file is a
    flush the stopped leader never answers: done on the follower's trio thread, it froze the follower's mount and
    its shutdown (a cluster node that took over from a paused leader stopped answering in the failover campaign)."""
    lead = start_mount(tmp_path / "L", tmp_path / "L.mnt", "node.id=1", "replica.ids=1,2")
    paused = False
    try:
        make_topic(lead.path, "t", 3)
        append_lines(lead.path / "t" / "0" / "append", ["r0"])
        follower = start_follower(lead.path, tmp_path / "F", 2, mount=tmp_path / "F.mnt")
        try:
            wait_for("the follower in every ISR", lambda: in_isr(lead, "t", 3, 2), lead, follower)
            os.kill(lead.proc.pid, signal.SIGSTOP)
            paused = True
            time.sleep(1.0)  # the session's next exchange is now queued in the stopped leader
            assert (tmp_path / "F.mnt" / "t" / "0" / "state").read_text()  # the follower's mount answers
            follower.proc.send_signal(signal.SIGTERM)
            wait_for("the follower's shutdown to close its store", lambda: "closed store" in follower.log_text(),
                     lead, follower, timeout_s=PROMPT_EXIT_S)  # fmt: skip
            os.kill(lead.proc.pid, signal.SIGCONT)
            paused = False
            code = follower.proc.wait(PROMPT_EXIT_S)
        finally:
            follower.stop()
        assert code == 0, follower.log_text()[-4000:]
    finally:
        if paused:
            os.kill(lead.proc.pid, signal.SIGCONT)
        finish_mount(lead)
