"""``logfs umount`` of a busy mount and ``logfs umount --lazy`` with ``follow/`` readers open (issue 15 item 7):
a busy unmount names the processes holding the mount; a lazy one ends the readers with end of file and the
``logfs mount`` process exits 0 once the mount is gone."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from conftest import LOGFS, Mount, make_topic, running_mount, write_all
from follower_procs import following

from logfs.mount import holders as holders_module

EXIT_WAIT_S = 15.0


def _readers(mounted: Mount, topic: Path, tmp_path: Path) -> list[tuple[subprocess.Popen[bytes], Path]]:
    """Two ``cat`` readers of follow/ files, once both have opened them."""
    readers = []
    for n, name in enumerate(["latest", "earliest.jsonl"]):
        out = tmp_path / f"cat{n}.out"
        with open(out, "wb") as f:
            proc = subprocess.Popen(["cat", str(topic / "0" / "follow" / name)], stdout=f, stderr=subprocess.PIPE)
        readers.append((proc, out))
    metrics = mounted.path / ".logfs" / "metrics"
    _wait_until(lambda: b"logfs_follow_readers 2\n" in metrics.read_bytes(), "both readers are open")
    return readers


def _wait_until(check, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + EXIT_WAIT_S
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_busy_umount_names_the_processes_holding_the_mount(mounted: Mount, tmp_path: Path) -> None:
    topic = make_topic(mounted.path, "busy")
    readers = _readers(mounted, topic, tmp_path)
    shell = subprocess.Popen(["sleep", "60"], cwd=topic)
    try:
        done = subprocess.run([LOGFS, "umount", str(mounted.path)], capture_output=True, text=True, timeout=30)
        assert done.returncode == 1
        assert "busy" in done.stderr
        for proc, _ in readers:
            assert f"{proc.pid} (cat): open mnt/busy/0/follow/" in done.stderr
        assert f"{shell.pid} (sleep): working directory" in done.stderr
        assert "logfs umount --lazy" in done.stderr
    finally:
        shell.kill()
        shell.wait()
        for proc, _ in readers:
            proc.kill()
            proc.wait()


def _not_traceable(task_dir: Path) -> list[str]:
    raise PermissionError(13, "Permission denied", str(task_dir / "syscall"))


def test_busy_umount_names_a_follower_holding_its_fetch_session(tmp_path: Path) -> None:
    """Issue 23 item 7, with fetch sessions (issue 24): `logfs follow` (without --mount) keeps the leader's mount busy
    through its open ``.logfs/fetch/<id>/.session``. The message names its pid, that file and its command line; a
    descriptor needs no tracing, so the follower is named for certain even where this user may not trace it. A
    `sleep` with its working directory in the mount makes every unmount fail."""
    with running_mount(tmp_path / "L", tmp_path / "L.mnt", "node.id=1", "replica.ids=1,2") as lead:
        make_topic(lead.path, "t")
        write_all(lead.path / "t" / "0" / "append", b"one\n")
        with following(lead.path, tmp_path / "F", 2) as follower:
            shell = subprocess.Popen(["sleep", "60"], cwd=lead.path)
            try:
                named = ""
                for _ in range(100):  # until the follower has opened its session
                    done = subprocess.run([LOGFS, "umount", str(lead.path)], capture_output=True, text=True, timeout=30)
                    assert done.returncode == 1, done.stderr
                    assert f"{shell.pid} (sleep): working directory" in done.stderr
                    named = next((line for line in done.stderr.splitlines() if f" {follower.pid} (" in line), "")
                    if " .session" in named or "/.session" in named:
                        break
                    time.sleep(0.05)
                assert named.startswith(f"  {follower.pid} (logfs): open L.mnt/.logfs/fetch/2/.session"), done.stderr
                assert "; command line: " in named
                assert f"{LOGFS} --log-level info follow {lead.path} {tmp_path / 'F'} --replica-id 2" in named
                with pytest.MonkeyPatch.context() as patch:  # Yama's ptrace_scope 1: syscall files are EACCES
                    patch.setattr(holders_module, "syscall_fields", _not_traceable)
                    found = holders_module.holders(lead.path)
                    mine = [h for h in found if h.pid == follower.pid]
                    assert [h.certain for h in mine] == [True], found
                    assert any(".logfs/fetch/2/.session" in hold for hold in mine[0].holds), mine
                    assert " follow " in mine[0].command_line
                    assert any(h.pid == shell.pid and h.certain for h in found)
            finally:
                shell.kill()
                shell.wait()


def test_lazy_umount_ends_follow_readers_and_the_mount_process_exits(mounted: Mount, tmp_path: Path) -> None:
    topic = make_topic(mounted.path, "lazy")
    write_all(topic / "0" / "append", b"before\n")
    readers = _readers(mounted, topic, tmp_path)
    try:
        write_all(topic / "0" / "append", b"after\n")
        _wait_until(lambda: readers[0][1].read_bytes() == b"after\n", "the latest reader got its record")
        done = subprocess.run([LOGFS, "umount", "--lazy", str(mounted.path)], capture_output=True, timeout=30)
        assert done.returncode == 0, done.stderr
        for proc, _ in readers:
            assert proc.wait(EXIT_WAIT_S) == 0, proc.stderr.read() if proc.stderr else ""  # EOF, as at SIGINT
        assert readers[0][1].read_bytes() == b"after\n"
        assert readers[1][1].read_bytes().count(b"\n") == 2
        assert mounted.proc.wait(EXIT_WAIT_S) == 0
        assert "unmounted while files were open (lazy unmount)" in mounted.log_text()
        assert "closed store" in mounted.log_text()
    finally:
        for proc, _ in readers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_lazy_umount_of_an_idle_mount_exits_at_once(mounted: Mount) -> None:
    done = subprocess.run([LOGFS, "umount", "--lazy", str(mounted.path)], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert mounted.proc.wait(EXIT_WAIT_S) == 0
