"""Helpers of the replication tests: ``logfs follow`` as a subprocess, and comparisons of stores on disk.

A follower runs as its own process (as a leader does, ``conftest.start_mount``), logs at INFO to a file, and is
always stopped in ``finally``: SIGTERM, then SIGKILL and ``fusermount3 -u -z`` of its ``--mount`` as the last
resort. :func:`finish_follower` checks that it exited 0 and logged no WARNING or ERROR the test did not announce.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from conftest import Mount, clear_mount, spawn_logfs, unexpected_lines, wait_started

START_TIMEOUT_S = 20.0
EXIT_TIMEOUT_S = 20.0
CATCH_UP_TIMEOUT_S = 30.0

T = TypeVar("T")


@dataclass
class Follower:
    """A running ``logfs follow``."""

    leader: Path
    store: Path
    replica_id: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    mount: Path | None = None
    allowed: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def allow_log(self, pattern: str) -> None:
        """Announce a WARNING/ERROR line (a regex searched in it) this test expects the follower to log."""
        self.allowed.append(pattern)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """Signal the follower and wait; its exit code (None when it had to be killed)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
            try:
                self.proc.wait(EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(EXIT_TIMEOUT_S)
                self._clear_mount()
                return None
        self._clear_mount()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL, as a crash: no clean shutdown, the --mount left stale (and then cleared)."""
        self.stop(signal.SIGKILL)

    def _clear_mount(self) -> None:
        if self.mount is not None:
            clear_mount(self.mount)


def start_follower(
    leader: Path,
    store: Path,
    replica_id: int,
    *,
    mount: Path | None = None,
    log_path: Path | None = None,
    config: tuple[str, ...] = (),
) -> Follower:
    """Start ``logfs follow`` (``config``: its ``--config`` pairs) and wait until it runs (its --mount mounted, or its
    first log line)."""
    if mount is not None:
        with contextlib.suppress(FileExistsError):
            mount.mkdir(parents=True)
    log_path = log_path or store.with_name(store.name + f".follow{replica_id}.log")
    args = ["--log-level", "info", "follow", str(leader), str(store), "--replica-id", str(replica_id)]
    if mount is not None:
        args += ["--mount", str(mount)]
    for pair in config:
        args += ["--config", pair]
    follower = Follower(leader, store, replica_id, spawn_logfs(args, log_path), log_path, mount)
    wait_started(
        follower,
        lambda: os.path.ismount(mount) if mount is not None else "following" in follower.log_text(),
        "logfs follow",
        START_TIMEOUT_S,
    )
    return follower


def finish_follower(follower: Follower) -> None:
    """Stop (SIGTERM), then check the exit code and the log."""
    code = follower.stop()
    assert code == 0, f"logfs follow exited {code}:\n{follower.log_text()}"
    bad = unexpected_lines(follower.log_text(), follower.allowed)
    assert not bad, "unexpected warnings or errors in the follower's log:\n" + "\n".join(bad)


@contextlib.contextmanager
def following(
    leader: Path,
    store: Path,
    replica_id: int,
    *,
    mount: Path | None = None,
    allow: tuple[str, ...] = (),
    config: tuple[str, ...] = (),
) -> Iterator[Follower]:
    """A follower for the body of a ``with``; always stopped, checked when the body did not fail."""
    follower = start_follower(leader, store, replica_id, mount=mount, config=config)
    for pattern in allow:
        follower.allow_log(pattern)
    try:
        yield follower
    except BaseException:
        follower.stop()
        raise
    finish_follower(follower)


# --- waiting and comparing -----------------------------------------------------------------------------------------


def wait_for(
    what: str, probe: Callable[[], T | None], *logs: Any, timeout_s: float = CATCH_UP_TIMEOUT_S, poll_s: float = 0.05
) -> T:
    """Poll ``probe`` until it returns something truthy; pytest.fail naming ``what`` (and the logs) on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = probe()
        except OSError:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            texts = "\n".join(f"--- {getattr(x, 'log_path', x)}:\n{x.log_text()[-6000:]}" for x in logs)
            pytest.fail(f"timed out after {timeout_s} s waiting for {what}\n{texts}")
        time.sleep(poll_s)


def segment_files(store: Path, topic: str, partition: int) -> dict[str, bytes]:
    """The ``.log`` files of one partition, by name."""
    directory = store / f"{topic}-{partition}"
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.log"))}


def identical(leader_store: Path, follower_store: Path, topic: str, partitions: int) -> bool:
    """Every ``.log`` file of every partition byte-identical (and at least one record there)."""
    for p in range(partitions):
        mine, theirs = segment_files(follower_store, topic, p), segment_files(leader_store, topic, p)
        if mine != theirs or not any(theirs.values()):
            return False
    return True


def state(mount: Path, topic: str, partition: int) -> dict[str, Any]:
    """A partition's ``state`` file, parsed."""
    result: dict[str, Any] = json.loads((mount / topic / str(partition) / "state").read_bytes())
    return result


def in_isr(leader: Mount, topic: str, partitions: int, *replica_ids: int) -> bool:
    return all(set(replica_ids) <= set(state(leader.path, topic, p)["isr"]) for p in range(partitions))


def append_lines(path: Path, lines: list[str], *, fsync: bool = False) -> None:
    """Write ``lines`` to an append file in one write(2); with ``fsync``, fsync(2) it (acks=all)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        data = "".join(f"{line}\n" for line in lines).encode()
        assert os.write(fd, data) == len(data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def values(mount: Path, topic: str, partition: int) -> list[str]:
    """Every committed record value of a partition (``at/earliest``), one per line."""
    return (mount / topic / str(partition) / "at" / "earliest").read_text().splitlines()
