"""A real leader mount answers the three-part fetch name ``<offset>.<last epoch>.<current leader epoch>``: at its
own epoch as the two-part name does, at another one with no batches and FENCED_LEADER_EPOCH (older) or
UNKNOWN_LEADER_EPOCH (newer) at once (no long poll), and the refused fetch does not count as the follower's."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from conftest import finish_mount, start_mount


def read_fetch(mnt: Path, name: str, replica: int = 1) -> tuple[dict, bytes]:  # type: ignore[type-arg]
    data = (mnt / ".logfs/fetch" / str(replica) / "t/0" / name).read_bytes()
    line, _, records = data.partition(b"\n")
    head = json.loads(line)
    assert len(records) == head["records_bytes"]
    return head, records


def replica_leo(mnt: Path) -> int:
    return int(json.loads((mnt / "t/0/state").read_bytes())["replicas"]["1"]["log_end_offset"])


@pytest.mark.alone  # a refused fetch answered within 0.4 s
def test_the_third_part_of_a_fetch_name_is_checked_against_the_leader_epoch(tmp_path: Path) -> None:
    store, mnt = tmp_path / "s", tmp_path / "m"
    for _ in range(3):  # three mounts: leader epochs 0, 1, 2
        m = start_mount(store, mnt, "replica.ids=0,1")
        try:
            if not (mnt / "t").exists():
                os.mkdir(mnt / "t")
            fd = os.open(mnt / "t/0/append", os.O_WRONLY)
            try:
                os.write(fd, b"a\nb\n")
            finally:
                os.close(fd)
        finally:
            finish_mount(m)
    m = start_mount(store, mnt, "replica.ids=0,1")  # epoch 3: 6 records, LEO 6
    try:
        two_part, records = read_fetch(mnt, "0.-1")
        three_part, same = read_fetch(mnt, "0.-1.3")
        assert two_part["leader_epoch"] == 3 and two_part["error"] is None and records and same == records
        assert three_part == two_part
        for current, error in ((2, "FENCED_LEADER_EPOCH"), (0, "FENCED_LEADER_EPOCH"), (4, "UNKNOWN_LEADER_EPOCH")):
            started = time.monotonic()
            head, records = read_fetch(mnt, f"6.2.{current}")  # at the log end: a valid fetch would long-poll
            assert time.monotonic() - started < 0.4, "a refused fetch is answered at once"
            assert head["error"] == error and records == b"" and head["leader_epoch"] == 3
        assert replica_leo(mnt) == 0, "the refused fetches at offset 6 left no trace"
        head, _ = read_fetch(mnt, "2.0.3")  # a fetch at the leader's epoch is recorded
        assert head["error"] is None and replica_leo(mnt) == 2
    finally:
        finish_mount(m)
