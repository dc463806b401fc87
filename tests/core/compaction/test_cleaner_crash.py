"""Crashes during a clean: the log afterwards reads exactly as before the round or exactly as after it, never a mix
(``core/log/cleaner/swap.py``: the intent file makes recovery complete or undo a swap whole).

Two ways: every file operation of a round is made to fail in turn in this process (the files are then as a crash at
that point leaves them: a round writes and fsyncs its ``.cleaned`` segment before the swap begins), and a kill -9
campaign of a child process that cleans (``cleaner_crash_child.py``), killed at random moments. After each crash the
partition is loaded as after an unclean shutdown, and then: its records equal the records before or after the
round, ``logfs check`` finds no damage, and kafka-python's record reader reads every segment.

The campaign runs ``LOGFS_CLEANER_CRASH_ROUNDS`` rounds (default 8, for CI's time budget).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from compaction_log import append, clean, int_record, one_group_config, open_log, records
from kafka.record import MemoryRecords

from logfs.core.check import check_store
from logfs.core.format.batch import Record
from logfs.core.log.cleaner.swap import INTENT_FILE
from logfs.core.log.log import Log

HERE = Path(__file__).parent
ROUNDS = int(os.environ.get("LOGFS_CLEANER_CRASH_ROUNDS", "8"))
NOW = 1_700_000_000_000


class Crash(BaseException):
    """Stands for the process dying: nothing after it runs."""


def build_store(root: Path) -> Path:
    """A store with one compacted partition of 6 rolled segments (one group: segment.bytes is large) with keys,
    tombstones and a transaction; closed cleanly. Returns the partition directory."""
    directory = root / "topic-0"
    log = open_log(directory, one_group_config())
    rng = random.Random(18)
    for n in range(600):
        value = None if rng.random() < 0.1 else f"value-{n}".encode()
        append(log, int_record(rng.randrange(40), None if value is None else n))
        if n % 100 == 99:
            log.roll()
    log.close()
    return directory


def partition_records(directory: Path) -> list[Record]:
    log = open_log(directory, one_group_config(), clean=False)
    try:
        return records(log)
    finally:
        log.close()


def abandon(log: Log) -> None:
    """Give back the descriptors as a dying process would, flushing nothing."""
    for segment in log.segments:
        segment.close_handler()


def check_after_crash(root: Path, directory: Path, before: list[Record], after: list[Record]) -> str:
    """Load after the crash and check it; which state it is in."""
    got = partition_records(directory)
    assert got in (before, after), "the log is neither as before the clean nor as after it"
    assert not (directory / INTENT_FILE).exists()
    assert not [p for p in directory.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    damage = [f for f in check_store(root) if f.damage]
    assert not damage, damage
    for log_path in sorted(directory.glob("*.log")):
        data = log_path.read_bytes()
        batches = MemoryRecords(data)
        while (batch := batches.next_batch()) is not None:
            list(batch)
    return "before" if got == before else "after"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Record], list[Record]]:
    """The store before, and the records before and after a round at NOW."""
    root = tmp_path_factory.mktemp("pristine")
    directory = build_store(root)
    before = partition_records(directory)
    done = tmp_path_factory.mktemp("done")
    shutil.copytree(root, done, dirs_exist_ok=True)
    log = open_log(done / "topic-0", one_group_config())
    clean(log, 0, now=NOW)
    log.close()
    after = partition_records(done / "topic-0")
    assert len(after) < len(before)
    return root, before, after


def counting(monkeypatch: pytest.MonkeyPatch, crash_at: int | None) -> list[str]:
    """Count (and at ``crash_at``, fail) every rename and unlink from now on."""
    calls: list[str] = []
    for name in ("rename", "replace", "unlink"):
        real: Callable[..., object] = getattr(os, name)

        def call(*args: object, _real: Callable[..., object] = real, _name: str = name, **kwargs: object) -> object:
            if crash_at is not None and len(calls) == crash_at:
                raise Crash(f"{_name} {args}")
            calls.append(f"{_name} {args[0]}")
            return _real(*args, **kwargs)

        monkeypatch.setattr(os, name, call)
    return calls


def test_crash_at_every_file_operation(
    pristine: tuple[Path, list[Record], list[Record]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, before, after = pristine
    probe = tmp_path / "probe"
    shutil.copytree(root, probe)
    log = open_log(probe / "topic-0", one_group_config())
    with monkeypatch.context() as patch:
        operations = counting(patch, None)
        clean(log, 0, now=NOW)
    log.close()
    assert len(operations) > 20
    seen = set()
    for n in range(len(operations)):
        copy = tmp_path / f"crash-{n}"
        shutil.copytree(root, copy)
        log = open_log(copy / "topic-0", one_group_config())
        with monkeypatch.context() as patch, pytest.raises(Crash):
            counting(patch, n)
            clean(log, 0, now=NOW)
        abandon(log)
        seen.add(check_after_crash(copy, copy / "topic-0", before, after))
        shutil.rmtree(copy)
    assert seen == {"before", "after"}


def test_kill_9_campaign(pristine: tuple[Path, list[Record], list[Record]], tmp_path: Path) -> None:
    root, before, after = pristine
    rng = random.Random(int(os.environ.get("LOGFS_CLEANER_CRASH_SEED", "1818")))
    env = {**os.environ, "PYTHONPATH": str(HERE)}

    def start(copy: Path) -> tuple[subprocess.Popen[str], float]:
        child = subprocess.Popen(
            [sys.executable, str(HERE / "cleaner_crash_child.py"), str(copy / "topic-0"), str(NOW)],
            stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        return child, time.monotonic()

    calibration = tmp_path / "calibration"
    shutil.copytree(root, calibration)
    child, started = start(calibration)
    assert child.stdout is not None and child.stdout.readline().strip() == "done"
    duration = time.monotonic() - started
    child.communicate(timeout=60)
    assert check_after_crash(calibration, calibration / "topic-0", before, after) == "after"
    outcomes = {"before": 0, "after": 0, "finished first": 0}
    for n in range(ROUNDS):
        copy = tmp_path / f"round-{n}"
        shutil.copytree(root, copy)
        child, started = start(copy)
        # Half the kills in the last third of the round, where the swap is.
        delay = duration * (rng.uniform(0.65, 1.0) if n % 2 else rng.uniform(0, 1.0))
        time.sleep(max(0.0, started + delay - time.monotonic()))
        child.send_signal(signal.SIGKILL)
        finished = child.communicate(timeout=60)[0].strip().endswith("done")
        state = check_after_crash(copy, copy / "topic-0", before, after)
        outcomes["finished first" if finished else state] += 1
        shutil.rmtree(copy)
    print(f"kill -9 campaign: {ROUNDS} rounds, {outcomes}, a round takes {duration * 1000:.0f} ms")
