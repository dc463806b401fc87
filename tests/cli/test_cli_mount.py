"""``logfs mount`` and ``logfs follow --mount`` as a new user meets them (issue 15 item 8): a mount that cannot
proceed (the mount point in use, missing, a file) exits non-zero and leaves no store directory behind; a brand-new
store is logged as new, never as an "unclean shutdown", by a leader and by a follower alike.

Each test runs the installed console script in a subprocess; every mount it makes is unmounted in ``finally``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Mount, finish_mount, make_topic, running_mount, start_mount, write_all
from follower_procs import following, values, wait_for

from logfs.mount.server import allow_other_refusal

LOGFS = str(Path(sys.executable).with_name("logfs"))


def _logfs(*args: str | Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LOGFS, *map(str, args)], capture_output=True, text=True, timeout=timeout, check=False)


def _follow(leader: Path, store: Path, mountpoint: Path) -> subprocess.CompletedProcess[str]:
    return _logfs("follow", leader, store, "--replica-id", "1", "--mount", mountpoint)


def test_mounting_on_a_mount_point_in_use_fails_and_creates_no_store(mounted: Mount, tmp_path: Path) -> None:
    for store in (tmp_path / "second", tmp_path / "deeper" / "store"):
        done = _logfs("mount", store, mounted.path)
        assert done.returncode == 1, done.stderr
        assert f"Error: {mounted.path} is already a mount point" in done.stderr
        done = _follow(mounted.path, store, mounted.path)
        assert done.returncode == 1 and "is already a mount point" in done.stderr, done.stderr
        assert not store.exists() and not (tmp_path / "deeper").exists()
    assert (mounted.path / ".logfs").is_dir()  # the mount in use is untouched


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_an_unusable_mount_point_fails_and_creates_no_store(tmp_path: Path, kind: str) -> None:
    where = tmp_path / "mnt"
    if kind == "file":
        where.write_text("not a directory\n")
    store = tmp_path / "store"
    done = _logfs("mount", store, where)
    assert done.returncode != 0 and "Error:" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    done = _follow(tmp_path, store, where)
    assert done.returncode != 0 and "Error:" in done.stderr, done.stderr
    assert not store.exists()


def test_a_new_store_is_logged_as_new_then_as_cleanly_shut_down(tmp_path: Path) -> None:
    store, mnt = tmp_path / "fresh", tmp_path / "mnt"
    for expected in ("a new store", "clean shutdown"):
        mount = start_mount(store, mnt)  # start_mount makes the (empty) store directory, as `mkdir store` does
        finish_mount(mount)
        opened = [line for line in mount.log_text().splitlines() if "opened store" in line]
        assert opened and opened[-1].endswith(f"0 partitions, {expected}"), opened
    assert "unclean" not in mount.log_text()


def test_a_brand_new_follower_store_does_not_log_an_unclean_shutdown(tmp_path: Path) -> None:
    with running_mount(tmp_path / "L", tmp_path / "L.mnt", "replica.ids=0,1") as leader:
        topic = make_topic(leader.path, "t")
        write_all(topic / "0" / "append", b"a\nb\n")
        with following(leader.path, tmp_path / "F", 1, mount=tmp_path / "F.mnt") as follower:
            wait_for("the follower caught up", lambda: values(tmp_path / "F.mnt", "t", 0) == ["a", "b"])
            log = follower.log_text()
        assert "opened store" in log and "a new store" in log, log
        assert "unclean" not in log, log


@pytest.mark.parametrize(
    ("euid", "conf", "allowed"),
    [
        (0, None, True),  # root always
        (1000, None, False),  # no /etc/fuse.conf
        (1000, "#user_allow_other\n", False),  # Debian's file as shipped: commented out
        (1000, "# user_allow_other - Using the allow_other mount option\n", False),
        (1000, "mount_max = 1000\nuser_allow_other\n", True),
        (1000, "  user_allow_other   # for logfs --allow-other\n", True),
        (1000, "user_allow_others\n", False),
        (1000, "mount_max = 10\nuser_allow_other", False),  # no newline at its end: fusermount3 ignores the line
    ],
)
def test_allow_other_as_a_user_needs_user_allow_other(euid: int, conf: str | None, allowed: bool) -> None:
    """What ``logfs mount --allow-other`` checks before it opens the store (mount/server.py): fusermount3 would
    refuse the mount only after that, with a message that does not say what to do."""
    refusal = allow_other_refusal(euid, conf)
    assert (refusal is None) == allowed
    assert allow_other_refusal(euid, conf, cap_sys_admin=True) is None  # mount(2) itself, no fusermount3
    if refusal is not None:
        assert "user_allow_other in /etc/fuse.conf" in refusal and "scripts/setup --user-allow-other" in refusal
