"""An executor opening its pinned range (``logfs.spark.mount.open_range``): the failOnDataLoss rule and the wait for
a mount that is behind (a lagging follower), on a directory laid out like a mount (no FUSE: a file exists where
the mount would answer the lookup) with a fake clock. The same rules through a real mount and Spark are in
tests/spark/test_spark_source.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from logfs.spark.mount import MountBehind, list_partitions, list_topics, open_range, read_state
from logfs.spark.offsets import DataLoss, OffsetRange, PartitionState


class FakeMount:
    """A directory with the files of one partition ``t/0``; ``set`` moves its offsets as a mount's would move."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "t" / "0" / "at").mkdir(parents=True)
        (root / ".logfs").mkdir()

    def set(self, log_start: int, hw: int) -> None:
        state = {"topic": "t", "partition": 0, "log_start_offset": log_start, "high_watermark": hw,
                 "last_stable_offset": hw, "log_end_offset": hw}  # fmt: skip
        (self.root / "t/0/state").write_text(json.dumps(state))
        at = self.root / "t/0/at"
        for old in at.iterdir():
            old.unlink()
        for start in range(log_start, hw + 1):  # every range the mount would answer, end ≤ HW
            for end in range(start, hw + 1):
                (at / f"{start}-{end}.kafka").write_bytes(b"%d-%d" % (start, end))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.on_sleep: list[tuple[int, FakeMount, int, int]] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        for when, mount, log_start, hw in self.on_sleep:
            if when == len(self.sleeps):
                mount.set(log_start, hw)


def open_it(root: Path, clock: Clock, start: int, end: int, *, fail: bool = True, timeout_s: float = 5.0) -> Any:
    return open_range(
        root, OffsetRange("t", 0, start, end), read_committed=False, fail_on_data_loss=fail, timeout_s=timeout_s,
        sleep=clock.sleep, clock=lambda: clock.now,
    )  # fmt: skip


def test_listing_and_state(tmp_path: Path) -> None:
    m = FakeMount(tmp_path)
    m.set(2, 5)
    assert (
        list_topics(tmp_path) == ["t"]
        and list_partitions(tmp_path, "t") == [0]
        and list_partitions(tmp_path, "x") == []
    )
    assert read_state(tmp_path, "t", 0) == PartitionState(2, 5, 5) and read_state(tmp_path, "t", 1) is None


def test_a_range_the_mount_holds_opens_at_once(tmp_path: Path) -> None:
    m, clock = FakeMount(tmp_path), Clock()
    m.set(0, 10)
    f, rng = open_it(tmp_path, clock, 2, 7)
    with f:
        assert f.read() == b"2-7" and rng == OffsetRange("t", 0, 2, 7) and clock.sleeps == []
    assert open_it(tmp_path, clock, 4, 4) is None


def test_data_loss_fails_or_moves_the_start_up(tmp_path: Path) -> None:
    m, clock = FakeMount(tmp_path), Clock()
    m.set(5, 10)
    with pytest.raises(DataLoss, match=r"t-0: offsets 2\.\.4 are gone"):
        open_it(tmp_path, clock, 2, 7)
    f, rng = open_it(tmp_path, clock, 2, 7, fail=False)
    with f:
        assert f.read() == b"5-7" and rng.start == 5
    assert open_it(tmp_path, clock, 1, 4, fail=False) is None  # all of it gone


def test_a_mount_behind_is_waited_for_then_every_row_is_read(tmp_path: Path) -> None:
    m, clock = FakeMount(tmp_path), Clock()
    m.set(0, 3)
    clock.on_sleep.append((4, m, 0, 8))  # the follower catches up during the fourth pause
    f, rng = open_it(tmp_path, clock, 2, 8)
    with f:
        assert f.read() == b"2-8" and rng == OffsetRange("t", 0, 2, 8)
    assert clock.sleeps == [0.01, 0.02, 0.04, 0.08]


def test_a_mount_that_stays_behind_fails_the_task_after_the_timeout(tmp_path: Path) -> None:
    m, clock = FakeMount(tmp_path), Clock()
    m.set(0, 3)
    with pytest.raises(MountBehind, match=r"holds offsets below 3, but the query pinned \[2, 8\); waited 2 s"):
        open_it(tmp_path, clock, 2, 8, timeout_s=2.0)
    assert sum(clock.sleeps) == pytest.approx(2.0) and max(clock.sleeps) == 0.5


def test_a_partition_the_mount_does_not_have_yet_is_waited_for(tmp_path: Path) -> None:
    clock = Clock()
    FakeMount(tmp_path)
    with pytest.raises(MountBehind, match="does not have the partition"):
        open_it(tmp_path, clock, 0, 1, timeout_s=0.1)
