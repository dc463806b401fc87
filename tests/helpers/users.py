"""Real Unix users for the tests of a shared mount (docs/mount.md, "Sharing a mount"): made with ``useradd`` as root,
commands run as them with ``runuser``, and a directory every one of them can reach for the mount points (pytest's
own temporary directory is its user's alone)."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PREFIX = "logfs-"  # every user the tests make: no clash with a real account
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, in reach of every user (scripts/setup installs python3)


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int

    def run(self, command: str, cwd: Path | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """``command`` in bash as this user (umask 022, as a login's)."""
        return subprocess.run(
            ["runuser", "-u", self.name, "--", "bash", "-c", f"umask 022; {command}"],
            cwd=cwd or "/", capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip

    def python(self, script: str, *args: str) -> subprocess.Popen[str]:
        """The system's Python (this test's own interpreter may sit where this user cannot reach) running ``script``
        with ``args`` as this user, its standard input and output pipes: a program that holds files open while the
        test acts."""
        return subprocess.Popen(
            ["runuser", "-u", self.name, "--", SYSTEM_PYTHON, "-c", script, *args], cwd="/",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def ok(self, command: str, cwd: Path | None = None) -> str:
        """``command`` as this user; its stdout; pytest.fail with its stderr when it fails."""
        done = self.run(command, cwd)
        if done.returncode != 0:
            pytest.fail(f"as {self.name}: {command!r} exited {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def refused(self, command: str, cwd: Path | None = None) -> str:
        """``command`` as this user must fail; its stderr (the tool's message, with the errno's words)."""
        done = self.run(command, cwd)
        assert done.returncode != 0, f"as {self.name}: {command!r} should have failed; it printed {done.stdout!r}"
        return done.stderr


def user(name: str) -> User:
    """The test user ``logfs-<name>``, made if missing (a system account without a home or a login shell)."""
    if os.geteuid() != 0:
        pytest.skip("the shared-mount tests make Unix users: run them as root (CI does)")
    full = PREFIX + name
    try:
        entry = pwd.getpwnam(full)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", full], check=True)
        entry = pwd.getpwnam(full)
    return User(full, entry.pw_uid, entry.pw_gid)


@contextlib.contextmanager
def shared_dir() -> Iterator[Path]:
    """A fresh directory under /tmp that every user may traverse (mode 0755), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="logfs-shared-", dir="/tmp"))
    try:
        path.chmod(0o755)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
