"""Consumer groups through a real mount (.logfs/groups/, issue 19): commits, reads, refusals with nothing stored,
lag, rmdir, group follow files that resume after Ctrl-C, commits that survive kill -9 after fsync, the internal
topic's EPERM, and a follower's mount that serves the same commits and becomes a leader that still has them."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Mount, default_signals, errno_of, make_topic, running_mount, start_mount, state, write_all
from follower_procs import append_lines, following, in_isr, wait_for

from logfs.core.format.batch import iter_batch_positions
from logfs.core.format.decode import decode_records
from logfs.core.groups.records import OFFSETS_TOPIC, decode_key, decode_value, partition_for_group

GROUPS = Path(".logfs") / "groups"
COMMIT_WAIT_S = 20.0  # an auto-commit (an fsync) shown, on a machine that may be busy with other tests


def offset_file(mnt: Path, group: str, topic: str, partition: int = 0) -> Path:
    return mnt / GROUPS / group / topic / str(partition) / "offset"


def commit(mnt: Path, group: str, line: str, topic: str, partition: int = 0, *, fsync: bool = False) -> None:
    fd = os.open(offset_file(mnt, group, topic, partition), os.O_WRONLY)
    try:
        os.write(fd, line.encode())
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def stored_commits(mnt: Path, group: str) -> int:
    """How many records the ``__consumer_offsets`` partition of ``group`` holds (0 before the first commit)."""
    if not (mnt / OFFSETS_TOPIC).is_dir():
        return 0
    return int(state(mnt, OFFSETS_TOPIC, partition_for_group(group))["log_end_offset"])


def filled(mnt: Path, topic: str, count: int = 10) -> None:
    make_topic(mnt, topic)
    append_lines(mnt / topic / "0" / "append", [f"r{i}" for i in range(count)])


@pytest.fixture(scope="module")
def mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mount]:
    """One mount for the tests that need no store of their own (each uses its own topics and groups)."""
    root = tmp_path_factory.mktemp("groups")
    with running_mount(root / "store", root / "mnt") as m:
        yield m


def test_a_commit_reads_back_as_one_line_and_an_uncommitted_partition_is_enoent(mount: Mount) -> None:
    mnt = mount.path
    filled(mnt, "read")
    assert errno_of(offset_file(mnt, "rg", "read").read_text) == errno.ENOENT
    commit(mnt, "rg", "4\n", "read")
    assert offset_file(mnt, "rg", "read").read_text() == "4\n"
    commit(mnt, "rg", "7 checkpoint at noon\n", "read")
    assert offset_file(mnt, "rg", "read").read_text() == "7 checkpoint at noon\n"
    commit(mnt, "rg", "10", "read")  # no newline: the line is complete at close; the log end offset is allowed
    assert offset_file(mnt, "rg", "read").read_text() == "10\n"
    assert errno_of(offset_file(mnt, "rg-other", "read").read_text) == errno.ENOENT
    assert "rg" in os.listdir(mnt / GROUPS) and "rg-other" not in os.listdir(mnt / GROUPS)
    assert sorted(os.listdir(mnt / GROUPS / "rg")) == ["config", "lag", "read"]
    assert os.listdir(mnt / GROUPS / "rg" / "read") == ["0"]
    assert sorted(os.listdir(mnt / GROUPS / "rg" / "read" / "0")) == ["follow", "offset"]
    assert len(os.listdir(mnt / OFFSETS_TOPIC)) == 50 + 3  # Kafka's partition count, created at the first commit
    assert "cleanup.policy=compact" in (mnt / OFFSETS_TOPIC / "config").read_text()


def test_bad_commits_are_einval_and_store_nothing(mount: Mount) -> None:
    mnt = mount.path
    mount.allow_refusals(r"/\.logfs/groups/bad/bad/0/offset")
    filled(mnt, "bad", 5)
    (mnt / ".logfs" / "delete-records").write_text("bad 0 2\n")
    before = stored_commits(mnt, "bad")
    for line in ["11\n", "6\n", "1\n", "x\n", "-1\n", "\n", " 3\n", "3x\n", "2\nx\n"]:
        assert errno_of(commit, mnt, "bad", line, "bad") == errno.EINVAL, line
    assert stored_commits(mnt, "bad") == before  # nothing, not even the good line before a bad one
    commit(mnt, "bad", "2\n", "bad")
    for line in ["9\n", "abc\n"]:
        assert errno_of(commit, mnt, "bad", line, "bad") == errno.EINVAL, line
    assert stored_commits(mnt, "bad") == before + 1
    assert offset_file(mnt, "bad", "bad").read_text() == "2\n"
    assert errno_of(offset_file(mnt, "bad", "nosuchtopic").read_text) == errno.ENOENT
    assert errno_of(offset_file(mnt, "bad", "bad", 1).read_text) == errno.ENOENT


def test_the_stored_record_is_kafkas_offset_commit(mount: Mount) -> None:
    mnt = mount.path
    filled(mnt, "rec")
    commit(mnt, "my-group", "3 meta\n", "rec")
    raw = (mnt / OFFSETS_TOPIC / str(partition_for_group("my-group")) / "at" / "earliest.kafka").read_bytes()
    records = [r for pos, _ in iter_batch_positions(raw) for r in decode_records(raw, pos)]
    record = records[-1]
    assert record.key is not None and record.value is not None
    key, value = decode_key(record.key), decode_value(record.value)
    assert key is not None and (key.group, key.topic, key.partition) == ("my-group", "rec", 0)
    assert (value.offset, value.metadata, value.leader_epoch) == (3, "meta", -1)
    assert record.value[:2] == b"\x00\x03"  # value version 3, as Kafka 3.x writes


def test_the_internal_topic_is_readable_but_never_writable(mount: Mount) -> None:
    mnt = mount.path
    mount.allow_refusals(rf"/{OFFSETS_TOPIC}.*")
    filled(mnt, "internal")
    commit(mnt, "ig", "1\n", "internal")
    internal = mnt / OFFSETS_TOPIC
    for path in [internal / "0" / "append", internal / "append", internal / "0" / "batches", internal / "config"]:
        assert errno_of(write_all, path, b"x\n") == errno.EPERM, path
    assert errno_of(os.rmdir, mnt / OFFSETS_TOPIC) == errno.EPERM
    assert OFFSETS_TOPIC in os.listdir(mnt)
    assert len((mnt / OFFSETS_TOPIC / str(partition_for_group("ig")) / "at" / "earliest").read_bytes()) > 0


def test_lag_falls_as_commits_catch_up_and_rmdir_deletes_the_group(mount: Mount) -> None:
    mnt = mount.path
    mount.allow_refusals(r"/\.logfs/groups.*")
    filled(mnt, "lagt", 10)
    make_topic(mnt, "lagu", 2)
    append_lines(mnt / "lagu" / "1" / "append", ["a", "b", "c"])
    commit(mnt, "lg", "4\n", "lagt")
    commit(mnt, "lg", "1\n", "lagu", 1)
    lag = mnt / GROUPS / "lg" / "lag"
    assert lag.read_text() == "lagt 0 4 10 10 6\nlagu 1 1 3 3 2\n"
    commit(mnt, "lg", "10\n", "lagt")
    assert lag.read_text().splitlines()[0] == "lagt 0 10 10 10 0"
    metrics = (mnt / ".logfs" / "metrics").read_text()
    assert 'logfs_group_committed_offset{group="lg",topic="lagt",partition="0"} 10' in metrics
    assert 'logfs_group_lag{group="lg",topic="lagu",partition="1"} 2' in metrics
    before = stored_commits(mnt, "lg")
    os.rmdir(mnt / GROUPS / "lg")
    assert stored_commits(mnt, "lg") == before + 2  # one tombstone per committed partition
    assert "lg" not in os.listdir(mnt / GROUPS)
    assert errno_of(offset_file(mnt, "lg", "lagt").read_text) == errno.ENOENT
    assert lag.read_text() == ""
    assert errno_of(os.rmdir, mnt / GROUPS / "lg") == errno.ENOENT


def test_group_config_has_kafkas_defaults_and_refuses_bad_values(mount: Mount) -> None:
    mnt = mount.path
    mount.allow_refusals(r"/\.logfs/groups/cg/config")
    config = mnt / GROUPS / "cg" / "config"
    assert config.read_text() == "auto.offset.reset=latest\nauto.commit.interval.ms=5000\n"
    config.write_text("auto.offset.reset=earliest\n")
    assert config.read_text() == "auto.offset.reset=earliest\nauto.commit.interval.ms=5000\n"
    for bad in ["auto.offset.reset=none\n", "auto.commit.interval.ms=-5\n", "group.id=x\n", "junk\n"]:
        assert errno_of(write_all, config, bad.encode()) == errno.EINVAL, bad
    assert config.read_text() == "auto.offset.reset=earliest\nauto.commit.interval.ms=5000\n"
    assert "cg" in os.listdir(mnt / GROUPS)  # a group with settings is listed


def _read_until(proc: subprocess.Popen[bytes], lines: int, timeout_s: float = 10.0) -> list[bytes]:
    assert proc.stdout is not None
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < lines:
        assert time.monotonic() < deadline, f"only {got} within {timeout_s} s"
        got.append(proc.stdout.readline())
    return got


def test_a_group_follow_resumes_after_ctrl_c_where_the_reader_stopped(mount: Mount) -> None:
    """auto.offset.reset=earliest: the first reader starts at the log start; Ctrl-C (SIGINT) of its cat commits
    what it was given (at close); the next cat starts after it, and records written meanwhile follow."""
    mnt = mount.path
    filled(mnt, "res", 5)
    (mnt / GROUPS / "resg" / "config").write_text("auto.offset.reset=earliest\n")
    follow = mnt / GROUPS / "resg" / "res" / "0" / "follow"
    cat = subprocess.Popen(["cat", str(follow)], stdout=subprocess.PIPE, preexec_fn=default_signals)
    try:
        assert _read_until(cat, 5) == [f"r{i}\n".encode() for i in range(5)]
        cat.send_signal(signal.SIGINT)
        assert cat.wait(10) != 0
    finally:
        cat.kill()
        cat.wait()
    wait_for("the commit at close", lambda: offset_file(mnt, "resg", "res").read_text() == "5\n")
    append_lines(mnt / "res" / "0" / "append", ["r5", "r6"])
    out = subprocess.run(["timeout", "-s", "INT", "1", "cat", str(follow)], capture_output=True, check=False)
    assert out.stdout == b"r5\nr6\n"
    # The commit happens when the mount releases the handle, which may come after cat has exited.
    wait_for("the second commit at close", lambda: offset_file(mnt, "resg", "res").read_text() == "7\n")


def test_without_a_commit_a_group_follow_starts_at_the_log_end_by_default(mount: Mount) -> None:
    mnt = mount.path
    filled(mnt, "late", 3)
    follow = mnt / GROUPS / "fresh" / "late" / "0" / "follow"
    cat = subprocess.Popen(["cat", str(follow)], stdout=subprocess.PIPE, preexec_fn=default_signals)
    try:
        time.sleep(0.3)
        append_lines(mnt / "late" / "0" / "append", ["new"])
        assert _read_until(cat, 1) == [b"new\n"]
    finally:
        cat.send_signal(signal.SIGINT)
        cat.wait(10)
    wait_for("the commit at close", lambda: offset_file(mnt, "fresh", "late").read_text() == "4\n")


def test_a_group_follow_commits_every_auto_commit_interval_while_open(mount: Mount) -> None:
    mnt = mount.path
    filled(mnt, "auto", 3)
    (mnt / GROUPS / "ag" / "config").write_text("auto.offset.reset=earliest\nauto.commit.interval.ms=200\n")
    follow = mnt / GROUPS / "ag" / "auto" / "0" / "follow"
    cat = subprocess.Popen(["cat", str(follow)], stdout=subprocess.PIPE, preexec_fn=default_signals)
    try:
        assert len(_read_until(cat, 3)) == 3
        # each auto-commit is an fsync of __consumer_offsets: on a machine busy with other tests' fsyncs that may take
        # seconds, so the bound is generous (this test is about commits made while the file is open, not their delay)
        wait_for("an auto-commit while open", lambda: offset_file(mnt, "ag", "auto").read_text() == "3\n",
                 timeout_s=COMMIT_WAIT_S)  # fmt: skip
        append_lines(mnt / "auto" / "0" / "append", ["x"])
        assert _read_until(cat, 1) == [b"x\n"]
        wait_for("the next auto-commit", lambda: offset_file(mnt, "ag", "auto").read_text() == "4\n",
                 timeout_s=COMMIT_WAIT_S)  # fmt: skip
    finally:
        cat.send_signal(signal.SIGINT)
        cat.wait(10)


def test_a_commit_survives_kill_9_of_the_mount_after_fsync(tmp_path: Path) -> None:
    store, mnt = tmp_path / "store", tmp_path / "mnt"
    first = start_mount(store, mnt)
    try:
        filled(mnt, "t", 8)
        commit(mnt, "g", "6 durable\n", "t", fsync=True)
        first.proc.kill()
        first.proc.wait()
    finally:
        first.stop()
    with running_mount(store, mnt) as again:
        assert offset_file(again.path, "g", "t").read_text() == "6 durable\n"
        assert (again.path / GROUPS / "g" / "lag").read_text() == "t 0 6 8 8 2\n"


def test_a_follower_serves_the_same_commits_refuses_changes_and_keeps_them_as_leader(tmp_path: Path) -> None:
    """acks=all commits on a leader with one follower; the follower's mount reads them (EROFS for commits, group
    follow files and rmdir); after the leader dies the follower's store is mounted as leader with the commits."""
    s1, s2 = tmp_path / "S1", tmp_path / "S2"
    lead = start_mount(s1, tmp_path / "S1.mnt", "node.id=1", "replica.ids=1,2")
    try:
        filled(lead.path, "t", 6)
        commit(lead.path, "g", "2\n", "t")  # creates __consumer_offsets before the follower starts
        fmnt = tmp_path / "F.mnt"
        with following(lead.path, s2, 2, mount=fmnt) as follower:
            wait_for("follower 2 in the ISR", lambda: in_isr(lead, OFFSETS_TOPIC, 50, 2) and in_isr(lead, "t", 1, 2),
                     lead, follower)  # fmt: skip
            commit(lead.path, "g", "5 acked\n", "t", fsync=True)
            wait_for("the commit on the follower's mount",
                     lambda: offset_file(fmnt, "g", "t").read_text() == "5 acked\n", lead, follower)  # fmt: skip
            assert (fmnt / GROUPS / "g" / "lag").read_text() == "t 0 5 6 6 1\n"
            assert os.listdir(fmnt / GROUPS) == ["g"]
            assert errno_of(commit, fmnt, "g", "6\n", "t") == errno.EROFS
            assert errno_of((fmnt / GROUPS / "g" / "t" / "0" / "follow").read_bytes) == errno.EROFS
            assert errno_of(os.rmdir, fmnt / GROUPS / "g") == errno.EROFS
        lead.proc.kill()
        lead.proc.wait()
    finally:
        lead.stop()
    with running_mount(s2, tmp_path / "S2.mnt", "node.id=2") as new:
        assert offset_file(new.path, "g", "t").read_text() == "5 acked\n"
        out = subprocess.run(["timeout", "-s", "INT", "1", "cat", str(new.path / GROUPS / "g" / "t" / "0" / "follow")],
                             capture_output=True, check=False)  # fmt: skip
        assert out.stdout == b"r5\n"
        # The commit happens when the kernel releases cat's handle, which it does after close(2) has returned.
        wait_for("the commit of cat's close", lambda: offset_file(new.path, "g", "t").read_text() == "6\n", new,
                 timeout_s=10)  # fmt: skip


def test_any_group_id_of_the_name_rules_works_and_no_other(mount: Mount) -> None:
    """Group ids follow Kafka's topic-name rules (issue 26, docs/mount.md "Names"): the lookup of any other name
    under .logfs/groups/ is refused, so nothing can be committed under it (tests/mount/test_hostile_names.py sends
    every byte value)."""
    mnt = mount.path
    filled(mnt, "names", 2)
    names = ["dotted.id_with-dash", "_underscored", "a" * 249, "0"]
    for name in names:
        commit(mnt, name, "1\n", "names")
        assert offset_file(mnt, name, "names").read_text() == "1\n"
    assert set(names) <= set(os.listdir(mnt / GROUPS))
    for name, code in (("spaces in it", errno.EINVAL), ("ü-group", errno.EINVAL), ("a" * 250, errno.ENAMETOOLONG)):
        assert errno_of(commit, mnt, name, "1\n", "names") == code, name
        assert name not in os.listdir(mnt / GROUPS)
