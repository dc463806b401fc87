"""The leader's side of replication through a real mount: the fetch files, the ISR and HW they drive, acks=all
(fsync, O_SYNC), leader epochs per mount, promotion refusal, and ``state`` (docs/replication.md, "acks=all through the
mount", "Leader epochs and promotion" and "`state` of a leader").

Followers are simulated by reading fetch files with plain Python, as ``cat`` would (``logfs follow`` has tests of
its own in test_follower.py and test_failover.py): :class:`FakeFollower` fetches from its offset and moves on past
what it got, without storing anything. A fetch lookup never blocks longer than the leader's 500 ms long poll, so
fetches run in the test process; fsyncs that wait for replication run in subprocesses with timeouts. Every mount is
unmounted in ``finally`` (conftest.finish_mount), and the WARNING/ERROR lines a test causes are announced.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import LOGFS, LOGFS_LISTING, Mount, finish_mount, running_mount, start_mount

from logfs.core.format.batch import iter_batch_positions, read_header

pytestmark = pytest.mark.alone  # lag and ISR timers bounded to a fraction of a second

FETCH_WAIT_S = 0.5
LEAVES_ISR = r"leaves the ISR"
FSYNC_EIO = r"fsync\(.*failed with EIO: (NotEnoughReplicasAfterAppend|ReplicationTimeout)"


@contextlib.contextmanager
def leader(tmp_path: Path, *config: str, name: str = "leader", allow: tuple[str, ...] = ()) -> Iterator[Mount]:
    """A leader mount with topic ``t`` (one partition) for the body of a ``with``; ``allow``: the WARNING/ERROR
    lines it is expected to log."""
    with running_mount(tmp_path / f"{name}-store", tmp_path / name, *config) as mount:
        for pattern in allow:
            mount.allow_log(pattern)
        os.mkdir(mount.path / "t")
        yield mount


def fetch(mnt: Path, replica: int, topic: str, offset: int, epoch: int = -1, partition: int = 0) -> tuple[dict, bytes]:
# type: ignore[type-arg]
    data = (mnt / ".logfs/fetch" / str(replica) / topic / str(partition) / f"{offset}.{epoch}").read_bytes()
    line, _, records = data.partition(b"\n")
    head = json.loads(line)
    assert len(records) == head["records_bytes"]
    return head, records


def batches(records: bytes) -> list[tuple[int, int, int]]:
    """(base offset, last offset, partition leader epoch) of each batch."""
    out = []
    for position, _ in iter_batch_positions(records):
        h = read_header(records, position)
        out.append((h.base_offset, h.last_offset, h.partition_leader_epoch))
    return out


class FakeFollower:
    """Fetches like a follower (from its LEO, with the epoch of its last batch) and stores nothing."""

    def __init__(self, mnt: Path, replica: int, topic: str, partition: int = 0) -> None:
        self.mnt, self.replica, self.topic, self.partition = mnt, replica, topic, partition
        self.offset, self.epoch = 0, -1
        self.last: dict = {}  # type: ignore[type-arg]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def fetch(self) -> dict:  # type: ignore[type-arg]
        head, records = fetch(self.mnt, self.replica, self.topic, self.offset, self.epoch, self.partition)
        got = batches(records)
        if got:
            self.offset, self.epoch = got[-1][1] + 1, got[-1][2]
        self.last = head
        return head

    def catch_up(self) -> dict:  # type: ignore[type-arg]
        """Fetch until at the leader's LEO; then once more, so the leader learns that LEO (and moves its HW)."""
        while True:
            head = self.fetch()
            if self.offset >= head["log_end_offset"]:
                return self.fetch()

    def start(self) -> FakeFollower:
        def run() -> None:
            while not self._stop.is_set():
                self.fetch()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)


def state(mnt: Path, topic: str, partition: int = 0) -> dict:  # type: ignore[type-arg]
    return json.loads((mnt / topic / str(partition) / "state").read_bytes())


def replication_metrics(mnt: Path) -> dict[str, int]:
    """The replication samples of ``.logfs/metrics`` (ISR size, under min ISR, each follower's LEO, lag, in sync)."""
    families = ("logfs_isr_size", "logfs_under_min_isr", "logfs_replica_")
    samples = [line.split() for line in (mnt / ".logfs/metrics").read_text().splitlines() if not line.startswith("#")]
    return {name: int(value) for name, value in samples if name.startswith(families)}


def append(mnt: Path, topic: str, *lines: str, partition: int = 0) -> None:
    fd = os.open(mnt / topic / str(partition) / "append", os.O_WRONLY)
    try:
        os.write(fd, "".join(f"{line}\n" for line in lines).encode())
    finally:
        os.close(fd)


def wait_for(what: str, check, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


# A writer in its own process: writes lines to a write file (opened with the flags given) and fsyncs, printing
# "ok <seconds>" or the errno name of what failed, with the time it took.
WRITE_AND_FSYNC = r"""
import errno, os, sys, time
path, flags, lines, do_fsync = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
mode = os.O_WRONLY | (os.O_SYNC if flags == "sync" else 0)
fd = os.open(path, mode)
t = time.monotonic()
try:
    os.write(fd, lines.replace("|", "\n").encode())
    if do_fsync:
        os.fsync(fd)
    print("ok", round(time.monotonic() - t, 3), flush=True)
except OSError as exc:
    print(errno.errorcode[exc.errno], round(time.monotonic() - t, 3), flush=True)
"""


def writer(mnt: Path, topic: str, lines: str, *, sync: bool = False, fsync: bool = True) -> subprocess.Popen[str]:
    path = mnt / topic / "0" / "append"
    args = [sys.executable, "-c", WRITE_AND_FSYNC, str(path), "sync" if sync else "-", lines, "1" if fsync else "0"]
    return subprocess.Popen(args, stdout=subprocess.PIPE, text=True)


def outcome(proc: subprocess.Popen[str], timeout: float = 30) -> tuple[str, float]:
    out, _ = proc.communicate(timeout=timeout)
    word, seconds = out.split()
    return word, float(seconds)


# --- the fetch files ----------------------------------------------------------------------------------------------


def test_a_fetch_file_is_a_json_line_then_the_stored_batches(tmp_path: Path) -> None:
    with leader(tmp_path, "replica.ids=0,1", "segment.bytes=300") as m:
        mnt = m.path
        for i in range(6):
            append(mnt, "t", f"record-{i}-" + "x" * 60)
        path = mnt / ".logfs/fetch/1/t/0/0.-1"
        shown = subprocess.run(["cat", str(path)], capture_output=True, check=True).stdout
        head, records = fetch(mnt, 1, "t", 0)
        assert shown.partition(b"\n")[0] == json.dumps(head).encode()  # what cat shows, a person can read
        assert head["leader_epoch"] == 0 and head["error"] is None and head["diverging_epoch"] is None
        assert (head["log_start_offset"], head["log_end_offset"], head["high_watermark"]) == (0, 6, 6)
        segments = sorted((m.store / "t-0").glob("*.log"))
        assert len(segments) >= 2
        on_disk = b"".join(p.read_bytes() for p in segments)
        assert records == on_disk  # whole batches, byte for byte as stored, across segments
        assert head["segment_bases"] == [int(p.stem) for p in segments]
        assert os.stat(path).st_size == len(shown)  # exact size (that lookup's own snapshot)
        head, records = fetch(mnt, 1, "t", 2, 0)
        assert batches(records)[0][0] == 2 and 0 not in head["segment_bases"]


def test_fetches_by_unassigned_ids_are_eperm_and_unknown_names_enoent(tmp_path: Path) -> None:
    with leader(tmp_path, "node.id=1", "replica.ids=1,2,3") as m:
        m.allow_refusals("/.logfs/fetch/2/t/0/0.-1: EACCES", "open for writing")
        mnt = m.path
        append(mnt, "t", "a")
        for replica in (1, 4, 0):  # the leader itself, and ids not in replica.ids
            with pytest.raises(PermissionError):
                (mnt / f".logfs/fetch/{replica}/t/0/0.-1").read_bytes()
        assert fetch(mnt, 2, "t", 0)[0]["records_bytes"] > 0
        for name in ["nope/0/0.-1", "t/1/0.-1", "t/0/0", "t/0/x.-1", "t/0/01.0", "t/0/0.-2", "t/0/0.-1.kafka"]:
            with pytest.raises(FileNotFoundError):
                (mnt / ".logfs/fetch/3" / name).read_bytes()
        with pytest.raises(FileNotFoundError):
            (mnt / ".logfs/fetch/x").stat()
        assert sorted(os.listdir(mnt / ".logfs")) == LOGFS_LISTING  # never listed
        assert os.listdir(mnt / ".logfs/fetch") == [] and os.listdir(mnt / ".logfs/fetch/2/t/0") == []
        with pytest.raises(PermissionError):
            os.open(mnt / ".logfs/fetch/2/t/0/0.-1", os.O_WRONLY)
        assert "refused a fetch by replica 4" in m.log_text()


def test_a_fetch_at_the_log_end_long_polls_and_an_append_wakes_it(tmp_path: Path) -> None:
    with leader(tmp_path, "replica.ids=0,1") as m:
        mnt = m.path
        append(mnt, "t", "a")
        f = FakeFollower(mnt, 1, "t")
        f.catch_up()  # at the end, and told the current HW and ISR
        t = time.monotonic()
        head = f.fetch()
        idle = time.monotonic() - t
        # One long poll (two if the kernel revalidated the name before the leader's dentry drop reached it).
        assert head["records_bytes"] == 0 and FETCH_WAIT_S - 0.05 <= idle < 2 * FETCH_WAIT_S + 0.4
        timer = threading.Timer(0.1, append, (mnt, "t", "b"))
        timer.start()
        t = time.monotonic()
        head = f.fetch()
        woken = time.monotonic() - t
        timer.join()
        assert head["records_bytes"] > 0 and f.offset == 2 and woken < 0.4


# An acks=all writer in its own process: "x" then fsync, then after a pause "y" (acks=1).
FSYNC_THEN_WRITE = r"""
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY)
os.write(fd, b"x\n")
os.fsync(fd)
time.sleep(float(sys.argv[2]))
os.write(fd, b"y\n")
os.close(fd)
"""


@pytest.mark.parametrize("pause", [0.0, 0.3])
def test_a_hw_move_that_answers_an_acks_all_fsync_is_held_briefly_for_the_next_batch(
    tmp_path: Path, pause: float
) -> None:
    """The follower's fetch that moves the HW past an fsync's records answers that fsync; instead of answering the
    follower with the HW alone at once, the leader holds it up to FETCH_HW_NEWS_WAIT_S (10 ms) for the writer's
    next batch: with a writer that goes on at once, the batch and the HW come in one answer (or the hold ran out
    first, on a slow machine); with a writer that pauses, the HW alone comes after the hold, not after the 500 ms
    long poll. A HW move that answered no fsync is told at once (the previous test's first fetches)."""
    with leader(tmp_path, "replica.ids=0,1", "min.insync.replicas=2") as m:
        mnt = m.path
        f = FakeFollower(mnt, 1, "t")
        f.fetch()
        path = mnt / "t/0/append"
        proc = subprocess.Popen([sys.executable, "-c", FSYNC_THEN_WRITE, str(path), str(pause)])
        try:
            wait_for("the fsync waiting", lambda: state(mnt, "t")["log_end_offset"] == 1)
            time.sleep(0.2)  # the fsync is waiting for the HW by now
            assert f.fetch()["high_watermark"] == 0 and f.offset == 1  # "x", the HW not moved yet
            t = time.monotonic()
            head = f.fetch()  # at offset 1: moves the HW to 1, which answers the fsync
            held = time.monotonic() - t
            assert head["high_watermark"] == 1
            if pause:
                assert head["records_bytes"] == 0 and 0.009 <= held < pause
            else:
                assert head["records_bytes"] > 0 or held >= 0.009
            assert proc.wait(10) == 0
        finally:
            proc.kill()
            proc.wait()


def test_out_of_range_and_diverging_fetches_through_the_mount(tmp_path: Path) -> None:
    store, mnt = tmp_path / "s", tmp_path / "m"
    for epoch in range(2):  # two mounts: epochs 0 and 1, one batch each
        m = start_mount(store, mnt, "replica.ids=0,1")
        try:
            if epoch == 0:
                os.mkdir(mnt / "t")
            append(mnt, "t", f"e{epoch}-a", f"e{epoch}-b")
        finally:
            finish_mount(m)
    m = start_mount(store, mnt, "replica.ids=0,1")
    try:
        assert fetch(m.path, 1, "t", 5)[0]["error"] == "OFFSET_OUT_OF_RANGE"
        head, records = fetch(m.path, 1, "t", 3, 0)  # epoch 0 ended at 2 here: truncate to 2
        assert head["diverging_epoch"] == {"epoch": 0, "end_offset": 2} and records == b""
        assert fetch(m.path, 1, "t", 2, 0)[0]["diverging_epoch"] is None
        assert fetch(m.path, 1, "t", 4, 9)[0]["error"] == "OFFSET_OUT_OF_RANGE"  # an epoch never used
        assert state(m.path, "t")["replicas"]["1"]["log_end_offset"] == 2  # the diverging fetch left no trace
    finally:
        finish_mount(m)


# --- ISR and HW ---------------------------------------------------------------------------------------------------


def test_the_hw_stays_until_the_follower_fetches_past_it_then_moves(tmp_path: Path) -> None:
    with leader(tmp_path, "replica.ids=0,1") as m:
        mnt = m.path
        f = FakeFollower(mnt, 1, "t")
        assert f.fetch()["isr"] == [0, 1]  # at the HW (0) and the epoch's start (0): it joins
        follow = subprocess.Popen(["head", "-n", "2", str(mnt / "t/0/follow/0")], stdout=subprocess.PIPE)
        try:
            append(mnt, "t", "one", "two")
            time.sleep(0.3)
            s = state(mnt, "t")
            assert (s["high_watermark"], s["log_end_offset"], s["isr"]) == (0, 2, [0, 1])
            assert (mnt / "t/0/at/0").read_bytes() == b"" and follow.poll() is None
            f.fetch()  # gets the records; the leader learns only at the next fetch that the follower has them
            assert state(mnt, "t")["high_watermark"] == 0
            head = f.fetch()
            assert head["high_watermark"] == 2 and head["records_bytes"] == 0  # told at once, no long poll
            assert follow.communicate(timeout=10)[0] == b"one\ntwo\n"  # the HW move woke the follow/ reader
            assert (mnt / "t/0/at/0").read_bytes() == b"one\ntwo\n"
        finally:
            follow.kill()
            follow.wait()


def test_replication_factor_3_the_hw_is_the_smallest_leo_of_the_isr(tmp_path: Path) -> None:
    with leader(tmp_path, "replica.ids=0,1,2") as m:
        mnt = m.path
        f1, f2 = FakeFollower(mnt, 1, "t"), FakeFollower(mnt, 2, "t")
        f1.fetch()
        f2.fetch()
        append(mnt, "t", "a", "b", "c")
        f1.catch_up()
        assert state(mnt, "t")["high_watermark"] == 0  # f2 holds it
        f2.fetch()
        f2.fetch()
        s = state(mnt, "t")
        assert (s["high_watermark"], s["isr"]) == (3, [0, 1, 2])
        assert {r: v["log_end_offset"] for r, v in s["replicas"].items()} == {"0": 3, "1": 3, "2": 3}


def test_a_follower_leaves_the_isr_after_the_lag_time_and_rejoins_after_catching_up(tmp_path: Path) -> None:
    with leader(tmp_path, "replica.ids=0,1", "replica.lag.time.max.ms=1000") as m:
        m.allow_log(LEAVES_ISR)
        mnt = m.path
        f = FakeFollower(mnt, 1, "t")
        f.catch_up()
        assert state(mnt, "t")["isr"] == [0, 1]
        tp, follower = 'topic="t",partition="0"', 'topic="t",partition="0",replica="1"'
        assert replication_metrics(mnt) == {
            f"logfs_isr_size{{{tp}}}": 2, f"logfs_under_min_isr{{{tp}}}": 0,
            f"logfs_replica_log_end_offset{{{follower}}}": 0, f"logfs_replica_lag_offsets{{{follower}}}": 0,
            f"logfs_replica_in_sync{{{follower}}}": 1,
        }  # fmt: skip
        append(mnt, "t", "a")  # the follower stops fetching (as if killed)
        t = time.monotonic()
        wait_for("the ISR to shrink", lambda: state(mnt, "t")["isr"] == [0], timeout=5)
        assert time.monotonic() - t <= 2.5  # 1 s after it was last caught up, checked every 0.5 s
        assert state(mnt, "t")["high_watermark"] == 1  # ISR = the leader alone (min.insync.replicas=1)
        gauges = replication_metrics(mnt)
        assert gauges[f"logfs_isr_size{{{tp}}}"] == 1 and gauges[f"logfs_replica_in_sync{{{follower}}}"] == 0
        assert gauges[f"logfs_replica_lag_offsets{{{follower}}}"] == 1
        append(mnt, "t", "b", "c")
        head = f.fetch()
        assert head["isr"] == [0] and f.offset == 3  # fetched at 0 < HW 3: not yet
        assert f.fetch()["isr"] == [0, 1]  # at the HW again: back in the ISR
        assert "replica 1 leaves the ISR" in m.log_text() and "replica 1 joins the ISR" in m.log_text()


# --- acks=all -----------------------------------------------------------------------------------------------------


def test_min_isr_2_fsync_fails_with_eio_while_the_follower_is_down_and_succeeds_once_it_is_back(
    tmp_path: Path,
) -> None:
    config = ("replica.ids=0,1", "min.insync.replicas=2", "replica.lag.time.max.ms=1000")
    with leader(tmp_path, *config, allow=(FSYNC_EIO, LEAVES_ISR)) as m:
        mnt = m.path
        word, seconds = outcome(writer(mnt, "t", "alone|"))
        assert word == "EIO" and seconds < 0.5  # at once: the ISR is the leader alone
        f = FakeFollower(mnt, 1, "t").start()
        try:
            wait_for("the follower in the ISR", lambda: state(mnt, "t")["isr"] == [0, 1])
            word, seconds = outcome(writer(mnt, "t", "together|"))
            assert word == "ok"
        finally:
            f.stop()
        proc = writer(mnt, "t", "down|")  # the follower is down: waits until it leaves the ISR, then EIO
        word, seconds = outcome(proc)
        assert word == "EIO" and 0.5 <= seconds <= 3
        f = FakeFollower(mnt, 1, "t")
        f.offset, f.epoch = f.last.get("log_end_offset", 0), 0
        f.start()
        try:
            wait_for("the follower back in the ISR", lambda: state(mnt, "t")["isr"] == [0, 1])
            assert outcome(writer(mnt, "t", "back|"))[0] == "ok"
        finally:
            f.stop()
        values = (mnt / "t/0/at/0").read_text().split()
        assert values == ["alone", "together", "down", "back"]  # EIO: in the log, just not acknowledged


def test_fsync_waits_for_the_follower_and_fails_with_eio_after_request_timeout(tmp_path: Path) -> None:
    with leader(tmp_path, "replica.ids=0,1", "min.insync.replicas=2", "request.timeout.ms=1000") as m:
        m.allow_log(FSYNC_EIO)
        mnt = m.path
        f = FakeFollower(mnt, 1, "t")
        f.fetch()
        proc = writer(mnt, "t", "x|")
        time.sleep(0.3)
        f.catch_up()
        assert outcome(proc)[0] == "ok"
        word, seconds = outcome(writer(mnt, "t", "y|"))  # the follower, still in the ISR, fetches no more
        assert word == "EIO" and 0.9 <= seconds <= 2.5
        assert "ReplicationTimeout" in m.log_text()


def test_o_sync_refuses_with_eagain_writing_nothing_and_otherwise_waits_like_fsync(tmp_path: Path) -> None:
    with leader(tmp_path, "replica.ids=0,1", "min.insync.replicas=2") as m:
        m.allow_refusals("/t/0/append: EAGAIN", "write")
        mnt = m.path
        fd = os.open(mnt / "t/0/append", os.O_WRONLY | os.O_DSYNC)
        try:
            with pytest.raises(BlockingIOError):  # EAGAIN: NOT_ENOUGH_REPLICAS, safe to retry
                os.write(fd, b"tail of a partial line")
        finally:
            os.close(fd)
        assert state(mnt, "t")["log_end_offset"] == 0  # nothing written, not even the partial line at close
        f = FakeFollower(mnt, 1, "t")
        f.fetch()
        proc = writer(mnt, "t", "synced|", sync=True, fsync=False)
        time.sleep(0.3)
        assert proc.poll() is None  # write(2) itself waits for the follower
        f.catch_up()
        assert outcome(proc)[0] == "ok"
        assert (mnt / "t/0/at/0").read_bytes() == b"synced\n"


def test_a_waiting_fsync_does_not_stall_other_writers_of_the_partition(tmp_path: Path) -> None:
    with leader(tmp_path, "replica.ids=0,1", "min.insync.replicas=2") as m:
        mnt = m.path
        f = FakeFollower(mnt, 1, "t")
        f.fetch()
        waiting = writer(mnt, "t", "acked|")
        time.sleep(0.2)
        t = time.monotonic()
        fd = os.open(mnt / "t/0/append", os.O_WRONLY)
        try:
            for i in range(200):
                os.write(fd, f"other-{i}\n".encode())
        finally:
            os.close(fd)
        assert time.monotonic() - t < 2 and waiting.poll() is None
        assert state(mnt, "t")["log_end_offset"] == 201
        f.catch_up()
        assert outcome(waiting)[0] == "ok"


def test_not_enough_replicas_after_a_broker_shutdown(tmp_path: Path) -> None:
    """ProducerFailureHandlingTest.testNotEnoughReplicasAfterBrokerShutdown, through the mount"""
    config = ("replica.ids=0,1,2", "min.insync.replicas=3", "replica.lag.time.max.ms=1000")
    with leader(tmp_path, *config, allow=(FSYNC_EIO, LEAVES_ISR)) as m:
        m.allow_refusals("/t/0/append: EAGAIN", "write")
        mnt = m.path
        f1, f2 = FakeFollower(mnt, 1, "t").start(), FakeFollower(mnt, 2, "t").start()
        try:
            wait_for("a full ISR", lambda: state(mnt, "t")["isr"] == [0, 1, 2])
            assert outcome(writer(mnt, "t", "all-up|"))[0] == "ok"
            f2.stop()  # broker 2 shuts down
            word, _ = outcome(writer(mnt, "t", "after|"))
            assert word == "EIO"  # NotEnoughReplicasAfterAppend (or a timeout)
            word, _ = outcome(writer(mnt, "t", "again|", sync=True, fsync=False))
            assert word == "EAGAIN"  # NotEnoughReplicas: nothing written
        finally:
            f1.stop()
            f2.stop()
        s = state(mnt, "t")
        assert (s["isr"], s["high_watermark"], s["log_end_offset"]) == ([0, 1], 1, 2)  # "after" is not committed
        assert (mnt / "t/0/at/0").read_text().split() == ["all-up"]


# --- leader epochs, promotion and state --------------------------------------------------------------------------


def test_each_mount_starts_a_new_leader_epoch_stamped_on_its_batches(tmp_path: Path) -> None:
    store, mnt = tmp_path / "s", tmp_path / "m"
    for epoch in range(3):
        m = start_mount(store, mnt)
        try:
            if epoch == 0:
                os.mkdir(mnt / "t")
            assert state(mnt, "t")["leader_epoch"] == epoch
            if epoch != 1:  # epoch 1 appends nothing: the next mount still takes 2
                append(mnt, "t", f"in-epoch-{epoch}")
        finally:
            finish_mount(m)
    m = start_mount(store, mnt)
    try:
        assert state(mnt, "t")["leader_epoch"] == 3
        assert [b[2] for b in batches((mnt / "t/0/at/0.kafka").read_bytes())] == [0, 2]
    finally:
        finish_mount(m)
    lines = (store / "t-0/leader-epoch-checkpoint").read_text().split("\n")
    assert lines[:4] == ["0", "2", "0 0", "2 1"]  # epochs are recorded with their first batch


def test_mount_refuses_a_store_out_of_the_isr_unless_unclean(tmp_path: Path) -> None:
    store, mnt = tmp_path / "s", tmp_path / "m"
    store.mkdir()
    mnt.mkdir()
    replica_state = {"replica_id": 0, "leader_epoch_seen": 6, "highest_epoch": 8, "isr": [1, 2], "in_isr": False}
    (store / ".logfs-replica-state.json").write_text(json.dumps(replica_state))
    done = subprocess.run([LOGFS, "mount", str(store), str(mnt)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "was not in the ISR" in done.stderr and "--unclean" in done.stderr
    assert not os.path.ismount(mnt)
    args = [LOGFS, "--log-level", "info", "mount", "--unclean", str(store), str(mnt)]
    with open(tmp_path / "m.log", "ab") as log:
        proc = subprocess.Popen(args, stderr=log, stdout=subprocess.DEVNULL)
    m = Mount(store, mnt, proc, tmp_path / "m.log")
    m.allow_log(r"unclean leader election")
    try:
        wait_for("the mount", lambda: os.path.ismount(mnt) or proc.poll() is not None)
        assert os.path.ismount(mnt), m.log_text()
        os.mkdir(mnt / "t")
        assert state(mnt, "t")["leader_epoch"] == 9  # above every epoch the follower saw
    finally:
        finish_mount(m)
    saved = json.loads((store / ".logfs-replica-state.json").read_text())
    assert saved == {"replica_id": 0, "leader_epoch_seen": 9, "highest_epoch": 9, "isr": [0], "in_isr": True}


def test_state_of_a_leader_shows_its_epoch_isr_and_replicas(tmp_path: Path) -> None:
    with leader(tmp_path, "node.id=1", "replica.ids=1,2,3") as m:
        mnt = m.path
        append(mnt, "t", "a", "b")
        before = time.time_ns() // 1_000_000
        FakeFollower(mnt, 2, "t").catch_up()
        s = state(mnt, "t")
        assert (s["role"], s["leader_epoch"], s["isr"]) == ("leader", 0, [1, 2])
        assert list(s["replicas"]) == ["1", "2", "3"]
        assert s["replicas"]["2"]["log_end_offset"] == 2 and s["replicas"]["2"]["last_caught_up_ms"] >= before
        assert s["replicas"]["3"] == {"log_end_offset": -1, "last_caught_up_ms": 0}
        assert s["replicas"]["1"]["log_end_offset"] == 2


def test_without_followers_everything_is_as_before(tmp_path: Path) -> None:
    with leader(tmp_path, "min.insync.replicas=2") as m:  # capped at the one replica there is
        mnt = m.path
        assert outcome(writer(mnt, "t", "a|b|"))[0] == "ok"
        assert outcome(writer(mnt, "t", "c|", sync=True, fsync=False))[0] == "ok"
        s = state(mnt, "t")
        assert (s["high_watermark"], s["log_end_offset"], s["isr"], list(s["replicas"])) == (3, 3, [0], ["0"])
        with pytest.raises(PermissionError):  # EPERM: no id may fetch, not even this node's
            (mnt / ".logfs/fetch/0/t/0/0.-1").read_bytes()
