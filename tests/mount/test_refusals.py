"""Refusals a user caused are readable without restarting the mount: each is logged at WARNING with its reason
(rate-limited) and kept in ``.logfs/errors``; failed lookups and opens for reading are neither (mount/refusals.py)."""

from __future__ import annotations

import datetime
import errno
import json
import os
import re
import time
from pathlib import Path

import pytest
from conftest import errno_of, finish_mount, sh, start_mount, write_all

from logfs.mount.refusals import BURST, RATE_PER_S, RING_SIZE, RefusalLog

WARNING = re.compile(r" WARNING logfs\.mount\.refusals: (.*)")


def refusals(mnt: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (mnt / ".logfs/errors").read_text().splitlines()]


def warnings(log_text: str) -> list[str]:
    return [m[1] for line in log_text.splitlines() if (m := WARNING.search(line))]


def test_each_kind_of_refusal_is_logged_at_warning_and_kept_in_logfs_errors(tmp_path: Path) -> None:
    mount = start_mount(tmp_path / "store", tmp_path / "mnt")
    try:
        mnt = mount.path
        mount.allow_refusals("/")
        os.mkdir(mnt / "t")
        write_all(mnt / "t/0/append", b"kept\n")
        assert errno_of(write_all, mnt / "t/0/append.jsonl", b'{"value":"fine"}\n{bad\n') == errno.EINVAL
        assert errno_of(os.mkdir, mnt / "my topic") == errno.EINVAL
        assert errno_of(os.mkdir, mnt / "t/5") == errno.EINVAL
        assert errno_of(write_all, mnt / "t/config", b"retention.ms=1\nbogus.key=2\n") == errno.EINVAL
        assert errno_of(os.open, mnt / "t/0/state", os.O_WRONLY) == errno.EACCES
        assert errno_of(write_all, mnt / ".logfs/delete-topic", b"nosuch\n") == errno.ENOENT
        assert errno_of(os.rmdir, mnt / "t") == errno.ENOTEMPTY
        assert errno_of(os.open, mnt / "t/0/apend", os.O_WRONLY | os.O_CREAT, 0o644) == errno.EPERM  # a typo
        expected = [  # (op, path, errno, a piece of the reason)
            ("write", "/t/0/append.jsonl", "EINVAL", "line 2 of the write"),
            ("mkdir", "/my topic", "EINVAL", "topic name 'my topic' has characters outside [A-Za-z0-9._-]"),
            ("mkdir", "/t/5", "EINVAL", "the next is 1"),
            ("config write", "/t/config", "EINVAL", "unknown topic config key 'bogus.key'"),
            ("open for writing", "/t/0/state", "EACCES", "is for reading"),
            ("write", "/.logfs/delete-topic", "ENOENT", "no topic 'nosuch'"),
            ("rmdir", "/t", "ENOTEMPTY", "holds records"),
            ("open for writing", "/t/0/apend", "EPERM", "no file can be created here"),
        ]
        kept = refusals(mnt)
        assert [(r["op"], r["path"], r["errno"]) for r in kept] == [e[:3] for e in expected]
        for refusal, (_, _, _, why) in zip(kept, expected, strict=True):
            assert why in str(refusal["reason"]), refusal
            assert list(refusal) == ["time", "op", "path", "errno", "reason", "uid"]
            assert refusal["uid"] == os.getuid()  # whose request it was (mount/access.py shows each user theirs)
            when = datetime.datetime.fromisoformat(str(refusal["time"]).replace("Z", "+00:00"))
            assert abs(when.timestamp() - time.time()) < 60
        logged = warnings(mount.log_text())  # readable now, while the mount runs
        assert len(logged) == len(expected)
        for line, (op, path, code, why) in zip(logged, expected, strict=True):
            assert line.startswith(f"refused {op} {path}: {code}: ") and why in line, line
        assert (mnt / "t/0/at/0").read_bytes() == b"kept\n"  # nothing of the refused write was stored
        assert (mnt / ".logfs/errors").stat().st_mode & 0o777 == 0o444
    finally:
        finish_mount(mount)


def test_a_flood_of_bad_writes_logs_a_bounded_number_of_lines_and_keeps_the_last_100(tmp_path: Path) -> None:
    mount = start_mount(tmp_path / "store", tmp_path / "mnt")
    try:
        mnt = mount.path
        mount.allow_refusals("/flood/0/append.jsonl:", "write")
        os.mkdir(mnt / "flood")
        started = time.monotonic()
        fd = os.open(mnt / "flood/0/append.jsonl", os.O_WRONLY)
        try:
            for i in range(1000):
                assert errno_of(os.write, fd, b'{"value": %d, "oops"}\n' % i) == errno.EINVAL
        finally:
            os.close(fd)
        elapsed = time.monotonic() - started
        kept = refusals(mnt)
        assert len(kept) == RING_SIZE
        assert [r["path"] for r in kept] == ["/flood/0/append.jsonl"] * RING_SIZE
        assert "line 1 of the write" in str(kept[-1]["reason"])
    finally:
        finish_mount(mount)
    logged = warnings(mount.log_text())
    refused = [line for line in logged if line.startswith("refused write /flood/0/append.jsonl: EINVAL: ")]
    assert BURST <= len(refused) <= BURST + elapsed * RATE_PER_S + 1, (len(refused), elapsed)
    held_back = [int(line.split()[0]) for line in logged if "not logged (rate limit" in line]
    assert held_back and len(refused) + sum(held_back) == 1000  # every one counted: logged, or in a summary line
    assert len(logged) == len(refused) + len(held_back)


def test_failed_lookups_and_opens_for_reading_log_nothing_and_keep_nothing(tmp_path: Path) -> None:
    mount = start_mount(tmp_path / "store", tmp_path / "mnt")
    try:
        mnt = mount.path
        os.mkdir(mnt / "t")
        write_all(mnt / "t/0/append", b"a\n")
        for _ in range(200):  # what ls, shells and Spark do by the thousand
            assert errno_of(os.stat, mnt / "nope") == errno.ENOENT
            assert errno_of(os.stat, mnt / "t/0/at/99") == errno.ENOENT
            assert errno_of(os.stat, mnt / "t/0/hw/_spark_metadata") == errno.ENOENT
        assert errno_of(os.open, mnt / "t/0/append", os.O_RDONLY) == errno.EACCES  # a read open: not a change
        assert errno_of(os.open, mnt / "t/7/append", os.O_WRONLY) == errno.ENOENT  # refused at lookup
        done = sh("ls nope; cat t/0/at/5; ls -R . > /dev/null", mnt)
        assert "No such file" in done.stderr
        assert (mnt / ".logfs/errors").read_bytes() == b""
        assert warnings(mount.log_text()) == []
    finally:
        finish_mount(mount)


# --- the rate limit itself, with a clock the test moves ----------------------------------------------------------


def test_the_rate_limit_is_per_op_and_refills_with_time(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    log = RefusalLog(clock=lambda: now[0])
    caplog.set_level("WARNING", logger="logfs.mount.refusals")
    for i in range(BURST + 5):
        log.refused("write", f"/t/{i}", "EINVAL", "bad")
    log.refused("mkdir", "/x y", "EINVAL", "bad name")  # another op has a bucket of its own
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == BURST + 1 and lines[-1] == "refused mkdir /x y: EINVAL: bad name"
    now[0] += 1 / RATE_PER_S  # one more token
    log.refused("write", "/t/late", "EINVAL", "bad")
    lines = [r.getMessage() for r in caplog.records]
    assert lines[-2].startswith("5 more refused write request(s) not logged")
    assert lines[-1] == "refused write /t/late: EINVAL: bad"
    log.refused("write", "/t/held", "EBADMSG", "bad", logged=False)
    log.close()  # at unmount: what is still held back is counted
    assert caplog.records[-1].getMessage().startswith("1 more refused write request(s) not logged")
    log.refused("fsync", "/t/0/append", "EIO", "timed out", logged=True)  # logged at ERROR already: no second line
    assert caplog.records[-1].getMessage().startswith("1 more refused write")
    kept = log.render().decode().splitlines()
    assert len(kept) == BURST + 5 + 1 + 1 + 1 + 1
    assert json.loads(kept[-1])["reason"] == "timed out"
