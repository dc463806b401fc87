"""A logfs store on the fault filesystem (tests/helpers/faultfs.py), for the storage-fault tests and campaigns
(issue 16).

:class:`FaultyStore` holds the three layers a test needs: ``src/`` (the "disk": a plain tmp directory), the faultfs
mounted over it at ``ffs/`` and a ``logfs mount`` of ``ffs/store`` at ``mnt/``. A test schedules a fault
(:meth:`FaultyStore.fault`), provokes it through the logfs mount, checks what the contract says, then
:meth:`FaultyStore.restart_healthy` stops both and mounts the same store directly on ``src/`` (a healthy disk) to
check what survived. :meth:`FaultyStore.close` (the fixture's teardown) unmounts whatever is still up, lazily as a
last resort, even when the test failed.

Also here: the acknowledgement oracle (:func:`assert_acked`: every acknowledged value exactly once) and
``logfs check`` of a store.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from conftest import LOGFS, Mount, clear_mount, errno_of, finish_mount, start_mount, write_all
from faultmodel import POLL_S

FAULTFS = Path(__file__).parent / "faultfs.py"  # run as its own process

# What the mount logs when the store goes offline or a read fails (WARNING/ERROR lines a fault test expects).
FAULT_LOG = (
    r"offline|I/O error|EIO|ENOSPC|Input/output|CRC|corrupt|No space|refused|damage|recover|unclean|quarantin"
    r"|truncat|torn|transaction \S+ completed"
)
OFFLINE_WAIT_S = 10.0


class FaultyStore:
    """``src/`` (the disk) → faultfs at ``ffs/`` → ``logfs mount`` of ``ffs/store`` at ``mnt/``."""

    def __init__(self, root: Path, store: str = "store") -> None:
        """``store``: the store's path relative to the faultfs (``a/b/store``: under directories that the first
        ``start(make="script")`` makes, as ``mkdir -p`` would)."""
        self.root = root
        self.ffs = FaultFS(root / "src", root / "ffs", root / "control")
        self.mount: Mount | None = None
        self._store = store

    @property
    def store(self) -> Path:
        """The store as the logfs mount sees it (on the faultfs)."""
        return self.ffs.mountpoint / self._store

    @property
    def disk_store(self) -> Path:
        """The same store on the plain directory underneath (the healthy disk)."""
        return self.ffs.source / self._store

    @property
    def mnt(self) -> Path:
        return self.root / "mnt"

    def start(self, *config: str, make: str = "durable") -> Mount:
        """faultfs (if not up) with an empty schedule, then ``logfs mount`` of the store on it.

        A missing store directory is made first: by default durably (mkdir, then fsync of its parent, as an admin
        would); ``make="script"`` makes it, and every missing directory above it, without an fsync (a script's
        ``mkdir -p`` a moment before the mount)."""
        if self.ffs.proc is None or self.ffs.proc.poll() is not None:
            self.ffs.start()
        self.ffs.schedule([])
        if not self.store.exists() and make == "script":
            self.store.mkdir(parents=True)
        if not self.store.exists() and make == "durable":
            self.store.mkdir()
            fd = os.open(self.store.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self.mount = start_mount(self.store, self.mnt, *config)
        self.mount.allow_log(FAULT_LOG)
        return self.mount

    def fault(self, op: str, path: str, **rule: Any) -> None:
        """Schedule one fault (tests/helpers/faultfs.py's rule fields: nth, times, errno, drop, short, flip)."""
        self.ffs.schedule([{"op": op, "path": path, **rule}])

    def fired(self) -> list[dict[str, Any]]:
        return self.ffs.fired()

    def alive(self) -> bool:
        """The logfs mount's process is running and its mount point answers."""
        if self.mount is None or self.mount.proc.poll() is not None:
            return False
        try:
            os.stat(self.mnt / ".logfs")
        except OSError:
            return False
        return True

    def stop_logfs(self) -> int | None:
        """Unmount the logfs mount (its exit code; None when it had to be killed)."""
        if self.mount is None:
            return None
        mount, self.mount = self.mount, None
        return mount.stop()

    def kill_logfs(self) -> None:
        """kill -9 of the logfs mount and an abort of its FUSE connection (as a power cut drops every request in
        flight), then its stale mount point cleared. Without the abort a request the dying process never answers
        can keep its writers, and any child forked meanwhile (which flushes the inherited descriptors), waiting."""
        if self.mount is None:
            return
        mount, self.mount = self.mount, None
        connection = fuse_connection(mount.path)
        with contextlib.suppress(ProcessLookupError):
            os.kill(mount.pid, signal.SIGKILL)
        if connection is not None:
            with contextlib.suppress(OSError), open(connection / "abort", "w") as abort:
                abort.write("1")
        self._wait_for_killed(mount)
        clear_mount(mount.path)

    def _wait_for_killed(self, mount: Mount, timeout: float = 20.0) -> None:
        """Wait until the killed mount's process is gone, stat'ing the faultfs root meanwhile.

        pyfuse3's request loop (the faultfs's) reads /dev/fuse with a blocking read, holding the GIL, once the
        descriptor polled readable. When the request that made it readable is withdrawn before the read — its sender
        killed, as here — the read blocks the faultfs's whole process until the next request: an fsync the killed
        mount's last thread sent is then never answered, that thread never exits, and without the connection abort
        (``/sys/fs/fuse/connections`` is not mounted everywhere) its FUSE mount is never torn down: the campaign
        hung. A stat from this process is such a next request."""
        deadline = time.monotonic() + timeout
        while mount.proc.poll() is None:
            if time.monotonic() > deadline:
                mount.proc.wait(0)  # TimeoutExpired, naming the process
            with contextlib.suppress(OSError):
                os.stat(self.ffs.mountpoint)
            time.sleep(0.05)

    def restart_healthy(self, *config: str) -> Mount:
        """Stop the logfs mount and the faultfs, then mount the store directly on the healthy disk."""
        self.stop_logfs()
        self.ffs.stop()
        self.mount = start_mount(self.disk_store, self.mnt, *config)
        self.mount.allow_log(FAULT_LOG)  # recovery after the failure reports what it cut
        return self.mount

    def finish(self) -> None:
        """Unmount the healthy mount and check its exit code and log (conftest.finish_mount)."""
        assert self.mount is not None
        mount, self.mount = self.mount, None
        finish_mount(mount)

    def close(self) -> None:
        """Teardown: everything unmounted, whatever state the test left."""
        try:
            if self.mount is not None:
                self.stop_logfs()
        finally:
            self.ffs.stop()
            clear_mount(self.mnt)


def fuse_connection(mountpoint: Path) -> Path | None:
    """``/sys/fs/fuse/connections/<minor>`` of the FUSE mount at ``mountpoint`` (from /proc/self/mountinfo)."""
    where = os.path.realpath(mountpoint)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if len(fields) > 4 and fields[4] == where:
                return Path("/sys/fs/fuse/connections") / fields[2].split(":")[1]
    return None


def values(path: Path) -> list[bytes]:
    """The record values of a plain rendering (``at/earliest``), one per line."""
    return path.read_bytes().splitlines()


def assert_acked(present: Iterable[bytes], acked: Iterable[bytes]) -> None:
    """Every acknowledged value is present exactly once (values are unique per write)."""
    counts = Counter(present)
    missing = [v for v in acked if counts[v] == 0]
    doubled = [v for v in acked if counts[v] > 1]
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {missing[:5]}"
    assert not doubled, f"{len(doubled)} acknowledged records stored twice, e.g. {doubled[:5]}"


def logfs_check(store: Path) -> subprocess.CompletedProcess[str]:
    """``logfs check STORE`` (offline verification; exit 0 when clean)."""
    return subprocess.run([LOGFS, "check", str(store)], capture_output=True, text=True, timeout=120, check=False)


def partition_state(mnt: Path, topic: str, partition: int = 0) -> dict[str, Any]:
    return dict(json.loads((mnt / topic / str(partition) / "state").read_bytes()))


def metrics_text(mnt: Path) -> str:
    return (mnt / ".logfs" / "metrics").read_text()


def acked_appends(append: Path, tag: str, count: int) -> list[bytes]:
    """``count`` records written to ``append`` one write(2) each, each acknowledged by fsync; their values."""
    out = []
    fd = os.open(append, os.O_WRONLY)
    try:
        for i in range(count):
            value = f"{tag}-{i}".encode()
            os.write(fd, value + b"\n")
            os.fsync(fd)
            out.append(value)
    finally:
        os.close(fd)
    return out


def wait_offline(mnt: Path, topic: str, timeout: float = OFFLINE_WAIT_S) -> dict[str, Any]:
    """The partition's ``state["offline"]`` once it is set (pytest fails after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        offline = partition_state(mnt, topic).get("offline")
        if offline:
            return dict(offline)
        assert time.monotonic() < deadline, f"the store did not go offline within {timeout} s"
        time.sleep(0.05)


def expect_offline(
    fs: FaultyStore, topic: str, file_part: str, operation: str | None = None, cause: str = "EIO"
) -> dict[str, Any]:
    """The contract of a store taken offline by a failed write or sync: ``state`` names the file, the operation and
    the errno the disk gave (``cause``: an ENOSPC from fsync is reported as such, and answered as EIO);
    ``.logfs/metrics`` has a gauge at 1; every later write and O_SYNC write fails with EIO; the log names the file;
    the mount is still up. The ``offline`` object."""
    offline = wait_offline(fs.mnt, topic)
    assert file_part in offline["file"], offline
    assert offline["errno"] == cause, offline
    if operation is not None:
        assert offline["operation"] == operation, offline
    append = fs.mnt / topic / "0" / "append"
    assert errno_of(write_all, append, b"after-offline\n") == errno.EIO
    assert errno_of(write_all, append, b"after-offline-sync\n", os.O_WRONLY | os.O_SYNC) == errno.EIO
    gauge = re.search(r"^logfs_\w*offline\w*(\{[^}]*\})? 1(\.0)?$", metrics_text(fs.mnt), re.M)
    assert gauge, "no offline gauge at 1 in .logfs/metrics"
    assert fs.mount is not None and re.search(rf"offline.*{re.escape(file_part)}", fs.mount.log_text())
    assert fs.alive(), "the mount died"
    return offline


def expect_online(fs: FaultyStore, topic: str) -> list[bytes]:
    """The store is online: ``state`` says so and an fsync'd write succeeds (its value)."""
    assert not partition_state(fs.mnt, topic).get("offline")
    return acked_appends(fs.mnt / topic / "0" / "append", "online", 1)


def expect_survivors(fs: FaultyStore, topic: str, acked: list[bytes], *config: str, partitions: int = 1) -> list[bytes]:
    """Restart on the healthy disk: every acknowledged value exactly once, nothing written after the store went
    offline, and a clean ``logfs check`` after a clean unmount. The values present."""
    assert fs.alive(), "the mount died before the restart"
    fs.restart_healthy(*config)
    present: list[bytes] = []
    for p in range(partitions):
        present += values(fs.mnt / topic / str(p) / "at" / "earliest")
    assert_acked(present, acked)
    assert not [v for v in present if v.startswith(b"after-offline")]
    fs.finish()
    check = logfs_check(fs.disk_store)
    assert check.returncode == 0, check.stdout + check.stderr
    return present


class FaultFS:
    """A running faultfs subprocess, from the test's side: the schedule, the status, the power cut, the unmount."""

    def __init__(self, source: Path, mountpoint: Path, control: Path) -> None:
        self.source, self.mountpoint, self.control = source, mountpoint, control
        self.status_path = control.with_name(control.name + ".status")
        self.log_path = control.with_name(control.name + ".log")
        self.gen = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> FaultFS:
        self.source.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.control.unlink(missing_ok=True)
        self.status_path.unlink(missing_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(FAULTFS), str(self.source), str(self.mountpoint), "--control", str(self.control)],
                stdout=subprocess.DEVNULL, stderr=log, cwd="/",
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not os.path.ismount(self.mountpoint):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"faultfs did not mount:\n{self.log_path.read_text(errors='replace')}")
            time.sleep(0.02)
        self.schedule([])
        return self

    def command(self, **command: Any) -> dict[str, Any]:
        """Write a control command and wait until the filesystem has taken it; its status."""
        self.gen += 1
        tmp = self.control.with_name(self.control.name + ".tmp")
        tmp.write_text(json.dumps({"gen": self.gen, **command}))
        os.replace(tmp, self.control)
        deadline = time.monotonic() + 10
        while True:
            status = self.status()
            if status.get("gen") == self.gen:
                return status
            if time.monotonic() > deadline or (self.proc is not None and self.proc.poll() is not None):
                raise RuntimeError(f"faultfs did not take command {self.gen}:\n{self.log_text()}")
            time.sleep(POLL_S / 2)

    def schedule(self, rules: list[dict[str, Any]]) -> dict[str, Any]:
        return self.command(rules=rules)

    def status(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.status_path.read_text()))
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def fired(self) -> list[dict[str, Any]]:
        """The faults fired so far (as of the latest status the filesystem wrote: allow it POLL_S)."""
        time.sleep(POLL_S * 3)
        return list(self.status().get("fired", []))

    def powercut(self) -> dict[str, Any]:
        """Freeze and apply the power-cut model (the store's process must be dead); the summary."""
        return dict(self.command(rules=[], powercut=True)["powercut"])

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> int | None:
        """Unmount (lazily if busy) and wait for the process; its exit code (None when it had to be killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            done = subprocess.run(["fusermount3", "-u", str(self.mountpoint)], capture_output=True, check=False)
            if done.returncode != 0:
                subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], capture_output=True, check=False)
            try:
                return self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(20)
        clear_mount(self.mountpoint)
        return self.proc.returncode
