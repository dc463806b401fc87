"""``at/@<time>`` and ``follow/@<time>`` take an ISO-8601 time as well as epoch milliseconds (issue 15 item 8),
through a real mount: with ``Z``, with an offset, with a fraction, with no offset (UTC), a date alone; with the
``.jsonl`` and ``.kafka`` suffixes and under ``committed/``; each lookup a fresh inode (docs/mount.md, "Reads");
impossible or misspelt times name nothing (ENOENT)."""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Mount, errno_of, make_topic, sh, write_all

T0 = 1_795_687_200_000  # 2026-11-26T10:00:00Z
RECORDS = [("before", T0 - 1000), ("at", T0), ("quarter", T0 + 250), ("later", T0 + 3_600_000)]


@pytest.fixture(scope="module")
def partition(shared_mount: Mount) -> Iterator[Path]:
    topic = make_topic(shared_mount.path, "timed")
    lines = b"".join(json.dumps({"value": v, "timestamp": ts}).encode() + b"\n" for v, ts in RECORDS)
    write_all(topic / "0" / "append.jsonl", lines)
    yield topic / "0"


def _values(data: bytes) -> list[str]:
    return data.decode().splitlines()


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("@2026-11-26T10:00:00Z", ["at", "quarter", "later"]),
        ("@2026-11-26T10:00:00", ["at", "quarter", "later"]),  # no offset: UTC
        ("@2026-11-26T10:00", ["at", "quarter", "later"]),
        ("@2026-11-26T11:00:00.250+01:00", ["quarter", "later"]),
        ("@2026-11-26T10:00:00.250+01:00", ["before", "at", "quarter", "later"]),  # 09:00:00.250Z
        ("@2026-11-26T10:00:00.001Z", ["quarter", "later"]),  # the first record at or after the time
        ("@2026-11-26T05:30:00.25-05:00", ["later"]),  # 10:30:00.250Z
        ("@2026-11-26", ["before", "at", "quarter", "later"]),  # midnight UTC
        ("@2026-11-27T00:00:00Z", []),  # none that late: an empty file
        (f"@{T0}", ["at", "quarter", "later"]),  # epoch ms, as before
    ],
)
def test_at_time_reads_from_the_first_record_at_or_after_it(partition: Path, name: str, expected: list[str]) -> None:
    assert _values((partition / "at" / name).read_bytes()) == expected
    assert _values((partition / "committed" / "at" / name).read_bytes()) == expected


def test_iso_and_epoch_ms_names_give_the_same_bytes_in_every_format(partition: Path) -> None:
    for suffix in ("", ".jsonl", ".kafka"):
        iso = (partition / "at" / f"@2026-11-26T11:00:00.250+01:00{suffix}").read_bytes()
        assert iso == (partition / "at" / f"@{T0 + 250}{suffix}").read_bytes()
        assert iso == (partition / "committed" / "at" / f"@2026-11-26T10:00:00.250Z{suffix}").read_bytes()
    rows = [json.loads(line) for line in (partition / "at" / "@2026-11-26T10:00:00.jsonl").read_bytes().splitlines()]
    assert [(r["offset"], r["timestamp"], r["value"]) for r in rows] == [
        (1, T0, "at"), (2, T0 + 250, "quarter"), (3, T0 + 3_600_000, "later")
    ]  # fmt: skip


def test_shell_tools_take_iso_names(partition: Path) -> None:
    done = sh("cat at/@2026-11-26T10:00:00Z; head -n 2 follow/@2026-11-26T10:00:00.250Z.jsonl", partition)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:3] == ["at", "quarter", "later"]
    assert [json.loads(line)["value"] for line in lines[3:]] == ["quarter", "later"]


def test_each_lookup_of_a_time_name_is_a_fresh_inode(shared_mount: Mount) -> None:
    topic = make_topic(shared_mount.path, "timed-fresh")
    at = topic / "0" / "at" / "@2026-11-26T10:00:00Z"
    write_all(topic / "0" / "append.jsonl", b'{"value":"one","timestamp":%d}\n' % T0)
    first, second = os.stat(at), os.stat(at)
    assert first.st_ino != second.st_ino and first.st_size == second.st_size == 4
    with open(at, "rb") as before:
        write_all(topic / "0" / "append.jsonl", b'{"value":"two","timestamp":%d}\n' % (T0 + 1))
        after = os.stat(at)
        assert after.st_ino != os.fstat(before.fileno()).st_ino and after.st_size == 8
        assert before.read() == b"one\n"  # an open snapshot never changes
    assert at.read_bytes() == b"one\ntwo\n"


@pytest.mark.parametrize(
    "name",
    [
        "@2026-02-30T10:00:00Z",  # no such day
        "@2026-11-26T24:00:00Z",
        "@2026-11-26T10:00:00+0100",  # the offset needs its colon
        "@2026-11-26T10:00:00z",
        "@2026-11-26 10:00:00",
        "@26-11-26T10:00:00Z",
        "@2026-11-26T10:00:00.1234567890Z",  # at most nanoseconds
        "@2026-11-26T10:00:00Z.json",
        "@-1",
        "@",
    ],
)
def test_times_it_does_not_take_name_nothing(partition: Path, name: str) -> None:
    assert errno_of(os.stat, partition / "at" / name) == errno.ENOENT
    assert errno_of(os.stat, partition / "follow" / name) == errno.ENOENT
