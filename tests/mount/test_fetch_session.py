"""Fetch sessions through a real leader mount (docs/replication.md, "Fetch sessions"; mount/session.py).

The session file is used raw from Python, as a tool would: opened O_RDWR, request lines written, answers read with
plain ``os.read`` in FUSE-sized pieces until the JSON line and its ``records_bytes`` are in. Then ``logfs follow``
of a few hundred partitions catches up with a bounded number of threads (counted in ``/proc/<pid>/task``). Every
mount and follower is stopped in ``finally`` (conftest.running_mount, follower_procs.following).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conftest import finish_mount, running_mount, start_mount
from follower_procs import append_lines, following, state, wait_for

from logfs.core.format.batch import iter_batch_positions, read_header

FUSE_READ = 128 * 1024  # what one FUSE read request carries at most


def session_file(mnt: Path, replica: int) -> Path:
    return mnt / ".logfs" / "fetch" / str(replica) / ".session"


@contextlib.contextmanager
def session(mnt: Path, replica: int) -> Iterator[int]:
    fd = os.open(session_file(mnt, replica), os.O_RDWR)
    try:
        yield fd
    finally:
        os.close(fd)


def request(fd: int, *ops: dict[str, Any]) -> None:
    data = b"".join(json.dumps(op).encode() + b"\n" for op in ops)
    assert os.write(fd, data) == len(data)


def add(topic: str, partition: int, offset: int, epoch: int = -1, current: int | None = None) -> dict[str, Any]:
    return {"topic": topic, "partition": partition, "fetch_offset": offset, "last_fetched_epoch": epoch,
            "current_leader_epoch": current}  # fmt: skip


def answer(fd: int) -> tuple[dict[str, Any], dict[tuple[str, int], tuple[dict[str, Any], bytes]], int]:
    """One answer: its line, each entry with its batches, and how many read(2) calls it took."""
    data = b""
    reads = 0
    while b"\n" not in data:
        chunk = os.read(fd, FUSE_READ)
        reads += 1
        assert chunk, f"the answer ended inside its JSON line: {data[:200]!r}"
        data += chunk
    line, _, rest = data.partition(b"\n")
    head = json.loads(line)
    while len(rest) < head["records_bytes"]:
        chunk = os.read(fd, FUSE_READ)
        reads += 1
        assert chunk, "the answer ended before its records_bytes"
        rest += chunk
    assert len(rest) == head["records_bytes"], "bytes past the answer's end"
    entries = {}
    at = 0
    for entry in head["partitions"]:
        n = entry["records_bytes"]
        entries[(entry["topic"], entry["partition"])] = (entry, rest[at : at + n])
        at += n
    return head, entries, reads


def last_batch(records: bytes) -> tuple[int, int]:
    """(last offset, partition leader epoch) of the last whole batch in ``records``."""
    positions = list(iter_batch_positions(records))
    assert sum(size for _, size in positions) == len(records), "records end inside a batch"
    h = read_header(records, positions[-1][0])
    return h.last_offset, h.partition_leader_epoch


def test_a_session_answers_only_what_changed_blocks_for_data_and_drops(tmp_path: Path) -> None:
    """Adds get a first answer each; then only a partition with data appears (incremental), a read waits for an
    append and returns with it, an idle read answers empty after the wait, a change moves the HW (the fetch's
    effect on the leader), a dropped partition is never answered again."""
    with running_mount(tmp_path / "store", tmp_path / "mnt", "replica.ids=0,1", "num.partitions=3") as m:
        os.mkdir(m.path / "t")
        with session(m.path, 1) as fd:
            request(fd, *(add("t", p, 0) for p in range(3)))
            head, entries, _ = answer(fd)
            assert head["error"] is None and sorted(entries) == [("t", 0), ("t", 1), ("t", 2)]
            assert all(e["isr"] == [0, 1] and e["high_watermark"] == 0 and not r for e, r in entries.values())

            head, entries, _ = answer(fd)  # nothing happened: an empty answer after replica.fetch.wait.max.ms
            assert entries == {} and head["records_bytes"] == 0

            def produce() -> None:
                time.sleep(0.2)
                append_lines(m.path / "t" / "1" / "append", ["hello", "world"])

            writer = threading.Thread(target=produce)
            writer.start()
            try:
                _, entries, _ = answer(fd)  # blocks until the append, then holds only t-1
                if not entries:  # a loaded machine: the append came after the wait ended
                    _, entries, _ = answer(fd)
            finally:
                writer.join()
            assert list(entries) == [("t", 1)]
            entry, records = entries[("t", 1)]
            assert entry["log_end_offset"] == 2 and entry["high_watermark"] == 0 and entry["error"] is None
            last, epoch = last_batch(records)
            assert last == 1

            request(fd, add("t", 1, last + 1, epoch))  # the follower is at the LEO now: the HW moves to it
            _, entries, _ = answer(fd)
            assert list(entries) == [("t", 1)]
            assert entries[("t", 1)][0]["high_watermark"] == 2 and entries[("t", 1)][1] == b""
            assert state(m.path, "t", 1)["high_watermark"] == 2

            request(fd, {"topic": "t", "partition": 1, "drop": True})
            append_lines(m.path / "t" / "1" / "append", ["dropped"])
            append_lines(m.path / "t" / "2" / "append", ["kept"])
            _, entries, _ = answer(fd)
            assert list(entries) == [("t", 2)]

            try:
                os.write(fd, b"not json\n")
            except OSError as exc:
                assert exc.errno == errno.EINVAL
            else:
                raise AssertionError("a request line that is not JSON was taken")


def test_session_errors_unknown_partition_fenced_epoch_out_of_range_and_diverging(tmp_path: Path) -> None:
    """Kafka's errors per partition: an unknown partition (answered once, then out of the session), a leader epoch
    older or newer than the leader's, a fetch offset past the log end, and a last fetched epoch that ended earlier
    on the leader (a diverging epoch). O_RDONLY is refused, and so is a replica that is not a follower."""
    store, path = tmp_path / "store", tmp_path / "mnt"
    first = start_mount(store, path, "replica.ids=0,1", "num.partitions=1")
    try:
        os.mkdir(first.path / "t")
        append_lines(first.path / "t" / "0" / "append", ["a", "b"])  # epoch 0 ends at offset 2
    finally:
        finish_mount(first)
    with running_mount(store, path, "replica.ids=0,1", "num.partitions=1") as m:  # leader epoch 1 now
        append_lines(m.path / "t" / "0" / "append", ["c"])
        for flags, replica, code in ((os.O_RDONLY, 1, errno.EACCES), (os.O_RDWR, 7, errno.EPERM)):
            try:
                os.close(os.open(session_file(m.path, replica), flags))
            except OSError as exc:
                assert exc.errno == code, (flags, replica, exc)
            else:
                raise AssertionError(f"opened the session with flags {flags} as replica {replica}")
        with session(m.path, 1) as fd:
            request(fd, add("nope", 0, 0), add("t", 0, 0, -1, current=0))
            _, entries, _ = answer(fd)
            assert entries[("nope", 0)][0]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"
            assert entries[("t", 0)][0]["error"] == "FENCED_LEADER_EPOCH" and entries[("t", 0)][1] == b""
            request(fd, add("t", 0, 0, -1, current=5))
            _, entries, _ = answer(fd)
            assert list(entries) == [("t", 0)] and entries[("t", 0)][0]["error"] == "UNKNOWN_LEADER_EPOCH"
            request(fd, add("t", 0, 100, -1, current=1))
            _, entries, _ = answer(fd)
            assert list(entries) == [("t", 0)] and entries[("t", 0)][0]["error"] == "OFFSET_OUT_OF_RANGE"
            request(fd, add("t", 0, 3, 0, current=1))  # epoch 0 ended at 2 on the leader
            _, entries, _ = answer(fd)
            assert entries[("t", 0)][0]["diverging_epoch"] == {"epoch": 0, "end_offset": 2}
            request(fd, add("t", 0, 0, -1, current=1))
            _, entries, _ = answer(fd)
            assert entries[("t", 0)][0]["error"] is None and last_batch(entries[("t", 0)][1])[0] == 2
            assert ("nope", 0) not in entries


def test_an_answer_larger_than_one_fuse_read_comes_in_several_reads(tmp_path: Path) -> None:
    """Two partitions of ~300 KiB each: one answer of ~600 KiB, read in 128 KiB pieces, whole batches each."""
    with running_mount(tmp_path / "store", tmp_path / "mnt", "replica.ids=0,1", "num.partitions=2") as m:
        os.mkdir(m.path / "t")
        for p in range(2):
            for chunk in range(3):
                lines = [f"{p}-{chunk}-{i:03d}-" + "x" * 990 for i in range(100)]
                append_lines(m.path / "t" / str(p) / "append", lines)
        with session(m.path, 1) as fd:
            request(fd, add("t", 0, 0), add("t", 1, 0))
            head, entries, reads = answer(fd)
            assert head["records_bytes"] > 4 * FUSE_READ and reads >= 5
            for p in range(2):
                entry, records = entries[("t", p)]
                assert entry["records_bytes"] == len(records) > 2 * FUSE_READ
                assert last_batch(records)[0] == 299


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def test_a_follower_of_300_partitions_catches_up_with_few_threads(tmp_path: Path) -> None:
    """60 topics × 5 partitions with a record each: ``logfs follow`` joins every ISR with HW = LEO on the leader,
    with at most 40 threads at any time (one session, not a fetch thread per partition: 256 before)."""
    topics, per_topic = 60, 5
    with running_mount(tmp_path / "L", tmp_path / "L.mnt", "node.id=1", "replica.ids=1,2",
                       f"num.partitions={per_topic}") as lead:  # fmt: skip
        for t in range(topics):
            os.mkdir(lead.path / f"t{t}")
        for t in range(topics):
            for p in range(per_topic):
                append_lines(lead.path / f"t{t}" / str(p) / "append", [f"{t}-{p}"])
        most = 0

        def caught_up() -> bool:
            nonlocal most
            most = max(most, threads(follower.pid))
            for t in range(topics):
                for p in range(per_topic):
                    s = state(lead.path, f"t{t}", p)
                    if 2 not in s["isr"] or s["high_watermark"] != s["log_end_offset"] or s["log_end_offset"] != 1:
                        return False
                    most = max(most, threads(follower.pid))
            return True

        with following(lead.path, tmp_path / "F", 2) as follower:
            wait_for("every partition in the ISR with HW = LEO", caught_up, lead, follower, timeout_s=60, poll_s=0.5)
            most = max(most, threads(follower.pid))
            assert most <= 40, f"the follower ran {most} threads"
            log = follower.log_text()
            assert "no fetch sessions" not in log


def test_a_follower_of_a_mount_that_does_not_lead_keeps_asking_for_a_session(tmp_path: Path) -> None:
    """A mount with sessions that serves no fetches (here a follower's read-only mount; in a cluster, a node that
    does not lead yet) refuses the session's open with ENOENT, as an older leader without sessions does. A follower
    of it must not take that for "no sessions" and start a fetch thread per partition for good (that is what a
    cluster node did when it followed a leader a few ms before the leader took its role: 256 threads and 2.3 GB at
    2,000 partitions): it asks again later, one session."""
    with running_mount(tmp_path / "L", tmp_path / "L.mnt", "node.id=1", "replica.ids=1,2,3",
                       "num.partitions=40") as lead:  # fmt: skip
        os.mkdir(lead.path / "t")
        with following(lead.path, tmp_path / "F2", 2, mount=tmp_path / "F2.mnt") as middle:
            assert middle.mount is not None
            wait_for("the topic on the follower's mount", lambda: (middle.mount / "t" / "39").is_dir(), lead, middle)
            assert errno_of_open(session_file(middle.mount, 3)) == errno.ENOENT
            with following(middle.mount, tmp_path / "F3", 3) as chained:
                wait_for("the refusal seen", lambda: "serves no fetches now" in chained.log_text(), lead, chained)
                time.sleep(1.0)  # a few retries
                assert "no fetch sessions" not in chained.log_text()
                assert threads(chained.pid) <= 40, f"{threads(chained.pid)} threads: a fetch thread per partition?"


def errno_of_open(path: Path) -> int | None:
    try:
        os.close(os.open(path, os.O_RDWR))
    except OSError as exc:
        return exc.errno
    return None
