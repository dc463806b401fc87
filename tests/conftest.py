"""Fixtures shared by the test files: a real ``logfs mount`` in a subprocess (after pyfuse3's ``test/util.py``).

A mount runs as its own process (a FUSE read blocked inside the test process could not be interrupted), logs at
INFO to a file, and is always unmounted in ``finally``: ``logfs umount``, then SIGTERM, then SIGKILL and
``fusermount3 -u -z`` as the last resort. The fixture then checks that the process exited 0 and that its log holds
no WARNING or ERROR line the test did not announce with :meth:`Mount.allow_log` (pytest_checklogs.py's rule).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

LOGFS = str(Path(sys.executable).with_name("logfs"))
MOUNT_TIMEOUT_S = 20.0
EXIT_TIMEOUT_S = 20.0
_LOUD = re.compile(r" (WARNING|ERROR|CRITICAL) ")


@dataclass
class Mount:
    """A running ``logfs mount``: unpacks as ``store, path``."""

    store: Path
    path: Path
    proc: subprocess.Popen[bytes]
    log_path: Path
    allowed: list[re.Pattern[str]] = field(default_factory=list)

    def __iter__(self) -> Iterator[Path]:
        yield self.store
        yield self.path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def allow_log(self, pattern: str) -> None:
        """Announce a WARNING/ERROR line (a regex searched in it) this test expects the mount to log."""
        self.allowed.append(re.compile(pattern))

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def unexpected_log_lines(self) -> list[str]:
        return [
            line
            for line in self.log_text().splitlines()
            if _LOUD.search(line) and not any(p.search(line) for p in self.allowed)
        ]

    def stop(self) -> int | None:
        """Unmount and wait for the process; its exit code (None when it had to be killed)."""
        if self.proc.poll() is None:
            done = subprocess.run([LOGFS, "umount", str(self.path)], capture_output=True, timeout=30, check=False)
            if done.returncode != 0:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(EXIT_TIMEOUT_S)
                subprocess.run(["fusermount3", "-u", "-z", str(self.path)], capture_output=True, check=False)
                return None
        if os.path.ismount(self.path) or _stale(self.path):
            subprocess.run(["fusermount3", "-u", "-z", str(self.path)], capture_output=True, check=False)
        return self.proc.returncode


def default_signals() -> None:
    """preexec_fn for a child the test will interrupt: SIGINT as a terminal gives it, whatever pytest inherited (a
    background job of a non-interactive shell ignores SIGINT, and so would every child it starts)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def _stale(path: Path) -> bool:
    try:
        os.stat(path)
    except OSError:
        return True
    return False


def start_mount(store: Path, path: Path, *config: str, log_path: Path | None = None) -> Mount:
    """Start ``logfs mount`` and wait until the mount point is a mount; pytest.fail when it is not in time."""
    store.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):  # a stale mount point (ENOTCONN) counts as existing too
        path.mkdir(parents=True)
    log_path = log_path or path.with_name(path.name + ".log")
    args = [LOGFS, "--log-level", "info", "mount", str(store), str(path)]
    for pair in config:
        args += ["--config", pair]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=log, cwd="/")
    mount = Mount(store, path, proc, log_path)
    deadline = time.monotonic() + MOUNT_TIMEOUT_S
    while not os.path.ismount(path):
        if proc.poll() is not None:
            pytest.fail(f"logfs mount exited {proc.returncode} before mounting:\n{mount.log_text()}")
        if time.monotonic() > deadline:
            mount.stop()
            pytest.fail(f"logfs mount did not mount {path} within {MOUNT_TIMEOUT_S} s:\n{mount.log_text()}")
        time.sleep(0.02)
    return mount


def finish_mount(mount: Mount) -> None:
    """Unmount, then check the exit code and the log (used by every mount fixture's finally)."""
    code = mount.stop()
    assert code == 0, f"logfs mount exited {code}:\n{mount.log_text()}"
    bad = mount.unexpected_log_lines()
    assert not bad, "unexpected warnings or errors in the mount's log:\n" + "\n".join(bad)


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[Mount]:
    """A fresh store mounted for one test."""
    mount = start_mount(tmp_path / "store", tmp_path / "mnt")
    try:
        yield mount
    finally:
        finish_mount(mount)


@pytest.fixture(scope="module")
def shared_mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mount]:
    """One store mounted for a whole test module (tests use topics of their own)."""
    root = tmp_path_factory.mktemp("shared")
    mount = start_mount(root / "store", root / "mnt", "num.partitions=1")
    try:
        yield mount
    finally:
        finish_mount(mount)


# --- small helpers of the mount tests -------------------------------------------------------------------------------


def sh(command: str, cwd: Path, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """A shell command line, as a user types it under the mount."""
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def errno_of(fn, *args) -> int | None:  # type: ignore[no-untyped-def]
    """The errno ``fn(*args)`` fails with, None when it succeeds."""
    try:
        fn(*args)
    except OSError as exc:
        return exc.errno
    return None


def write_all(path: Path, data: bytes, flags: int = os.O_WRONLY) -> None:
    """One open, every byte written (write(2) may take less than asked), one close."""
    fd = os.open(path, flags)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


# What ``ls MOUNT/.logfs`` shows (fetch/ is looked up, never listed).
LOGFS_LISTING = ["delete-records", "delete-topic", "labels", "metrics", "producer-id", "transactions"]


def state(mnt: Path, topic: str, partition: int = 0) -> dict:  # type: ignore[type-arg]
    """A partition's ``state`` file, parsed."""
    return json.loads((mnt / topic / str(partition) / "state").read_bytes())


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local Spark session for every Spark test module (a start costs ~6-10 s)."""
    pytest.importorskip("pyspark")
    from logfs.spark.source import local_session

    session = local_session("logfs-tests")
    try:
        yield session
    finally:
        session.stop()
