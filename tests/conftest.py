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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest

LOGFS = str(Path(sys.executable).with_name("logfs"))
# The folders whose tests scripts/test runs two at a time (pytest-xdist): each test has its own mount, store, Spark
# session and temporary paths, and bounds only generous enough for a busy machine; a test there that asserts a
# latency, a CPU share or a timer's bound is marked ``alone`` and runs with the others, one test at a time (clusters
# and followers: ZooKeeper sessions and lag timers).
SHAREABLE_FOLDERS = ("mount", "cli", "project", "faults", "spark", "scripts")
_TESTS = Path(__file__).resolve().parent
MOUNT_TIMEOUT_S = 20.0
EXIT_TIMEOUT_S = 20.0
_LOUD = re.compile(r" (WARNING|ERROR|CRITICAL) ")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark ``shareable`` the tests of :data:`SHAREABLE_FOLDERS` not marked ``alone`` (scripts/test selects with
    ``-m shareable`` and ``-m "not shareable"``)."""
    for item in items:
        parts = Path(item.path).resolve().relative_to(_TESTS).parts
        if parts[0] in SHAREABLE_FOLDERS and item.get_closest_marker("alone") is None:
            item.add_marker(pytest.mark.shareable)


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

    def allow_refusals(self, path: str, op: str = r"[a-z ]+") -> None:
        """Announce refusals this test provokes on purpose (``path``, ``op``: regexes): the mount logs each at WARNING
        as ``refused <op> <path>: …`` (mount/refusals.py), and a burst of them one line counting what its rate limit
        held back."""
        self.allow_log(rf"refused {op} {path}")
        self.allow_log(r"more refused .* not logged \(rate limit")

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def unexpected_log_lines(self) -> list[str]:
        return unexpected_lines(self.log_text(), self.allowed)

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
        clear_mount(self.path)
        return self.proc.returncode


def default_signals() -> None:
    """preexec_fn for a child the test will interrupt: SIGINT as a terminal gives it, whatever pytest inherited (a
    background job of a non-interactive shell ignores SIGINT, and so would every child it starts)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def clear_mount(path: Path) -> None:
    """``fusermount3 -u -z`` of a mount point its process left mounted or stale (ENOTCONN) when it died."""
    if os.path.ismount(path) or _stale(path):
        subprocess.run(["fusermount3", "-u", "-z", str(path)], capture_output=True, check=False)


def _stale(path: Path) -> bool:
    try:
        os.stat(path)
    except OSError:
        return True
    return False


def unexpected_lines(log_text: str, allowed: Iterable[str | re.Pattern[str]]) -> list[str]:
    """The WARNING/ERROR/CRITICAL lines of a process's log that none of the ``allowed`` regexes matches."""
    patterns = list(allowed)
    return [
        line for line in log_text.splitlines() if _LOUD.search(line) and not any(re.search(p, line) for p in patterns)
    ]


class _Started(Protocol):
    """A process a test starts and waits for: a Mount or a follower_procs.Follower."""

    proc: subprocess.Popen[bytes]

    def log_text(self) -> str: ...

    def stop(self) -> int | None: ...


def spawn_logfs(args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    """``logfs <args>`` in the background, its stderr (the log) appended to ``log_path``."""
    with open(log_path, "ab") as log:
        return subprocess.Popen([LOGFS, *args], stdout=subprocess.DEVNULL, stderr=log, cwd="/")


def wait_started(started: _Started, ready: Callable[[], bool], what: str, timeout: float) -> None:
    """Poll ``ready`` until true; pytest.fail (with the log) when the process exits first or it takes longer than
    ``timeout`` seconds. Either way the process is stopped first: a mount that crashed after mounting leaves a stale
    mount point, which ``stop`` unmounts."""
    deadline = time.monotonic() + timeout
    while not ready():
        if started.proc.poll() is not None:
            started.stop()
            pytest.fail(f"{what} exited {started.proc.returncode} before it was up:\n{started.log_text()}")
        if time.monotonic() > deadline:
            started.stop()
            pytest.fail(f"{what} was not up within {timeout} s:\n{started.log_text()}")
        time.sleep(0.02)


def start_mount(
    store: Path, path: Path, *config: str, log_path: Path | None = None, flags: tuple[str, ...] = ()
) -> Mount:
    """Start ``logfs mount`` (``config``: its ``--config`` pairs; ``flags``: other options, such as
    ``--allow-other``) and wait until the mount point is a mount; pytest.fail when it is not in time."""
    store.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):  # a stale mount point (ENOTCONN) counts as existing too
        path.mkdir(parents=True)
    log_path = log_path or path.with_name(path.name + ".log")
    args = ["--log-level", "info", "mount", str(store), str(path), *flags]
    for pair in config:
        args += ["--config", pair]
    mount = Mount(store, path, spawn_logfs(args, log_path), log_path)
    wait_started(mount, lambda: os.path.ismount(path), f"logfs mount of {path}", MOUNT_TIMEOUT_S)
    return mount


def finish_mount(mount: Mount) -> None:
    """Unmount, then check the exit code and the log (used by every mount fixture's finally)."""
    code = mount.stop()
    assert code == 0, f"logfs mount exited {code}:\n{mount.log_text()}"
    bad = mount.unexpected_log_lines()
    assert not bad, "unexpected warnings or errors in the mount's log:\n" + "\n".join(bad)


@contextlib.contextmanager
def running_mount(store: Path, path: Path, *config: str) -> Iterator[Mount]:
    """A mount for the body of a ``with`` (or a fixture's yield): always unmounted and checked afterwards."""
    mount = start_mount(store, path, *config)
    try:
        yield mount
    finally:
        finish_mount(mount)


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[Mount]:
    """A fresh store mounted for one test."""
    with running_mount(tmp_path / "store", tmp_path / "mnt") as mount:
        yield mount


@pytest.fixture(scope="module")
def shared_mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mount]:
    """One store mounted for a whole test module (tests use topics of their own)."""
    root = tmp_path_factory.mktemp("shared")
    with running_mount(root / "store", root / "mnt", "num.partitions=1") as mount:
        yield mount


# --- small helpers of the mount tests -------------------------------------------------------------------------------


def make_topic(mnt: Path, topic: str, partitions: int = 1, **config: object) -> Path:
    """``mkdir`` of a topic and of its partitions after 0 under the mount; ``config`` (``segment_bytes=…`` or
    ``**{"segment.bytes": …}``) written to its ``config`` file. The topic's directory."""
    os.mkdir(mnt / topic)
    for p in range(1, partitions):
        os.mkdir(mnt / topic / str(p))
    if config:
        (mnt / topic / "config").write_text("".join(f"{k.replace('_', '.')}={v}\n" for k, v in config.items()))
    return mnt / topic


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
LOGFS_LISTING = [
    "delete-records", "delete-topic", "errors", "groups", "labels", "leader", "metrics", "partitions", "producer-id",
    "transactions",
]  # fmt: skip


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


@pytest.fixture
def zookeeper(tmp_path: Path) -> Iterator[Any]:
    """A standalone ZooKeeper server (tests/helpers/zkserver.py: Debian's package, a free loopback port, tickTime
    200 ms) for one test; always stopped. No ZooKeeper installed fails the test (scripts/setup installs it). Here rather
    than in tests/cluster/conftest.py: a second conftest.py would take the module name ``conftest`` that every test's
    ``from conftest import …`` relies on."""
    import zkserver

    server = zkserver.ZooKeeperServer(tmp_path / "zookeeper")
    server.start()
    try:
        yield server
    finally:
        server.stop()
