"""``tail -f`` of ``follow/`` files (issue 15 item 6): a follow/ file's size is what was committed since its lookup,
never cached, so GNU tail, which polls st_size on FUSE, sees it grow; ``cat`` still blocks at the end."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Mount, make_topic, write_all

WAIT_S = 10.0


def _wait_for(path: Path, expected: str, proc: subprocess.Popen[bytes]) -> str:
    """The text of ``path`` once it holds ``expected`` (pytest.fail after WAIT_S or when ``proc`` exits first)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        text = path.read_text()
        if text == expected:
            return text
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"expected {expected!r}, got {text!r} (exit code {proc.poll()})")
        time.sleep(0.05)


@pytest.fixture
def topic(mounted: Mount) -> Iterator[Path]:
    yield make_topic(mounted.path, "tailed")


def _spawn(args: list[str], out: Path) -> subprocess.Popen[bytes]:
    with open(out, "wb") as f:
        return subprocess.Popen(args, stdout=f, stderr=subprocess.PIPE)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait(10)


def test_tail_f_of_follow_latest_prints_lines_appended_after_it_started(topic: Path, tmp_path: Path) -> None:
    write_all(topic / "0" / "append", b"old\n")
    out = tmp_path / "tail.out"
    proc = _spawn(["tail", "-s", "0.1", "-f", str(topic / "0" / "follow" / "latest")], out)
    try:
        time.sleep(0.5)  # tail is polling (an idle follow/latest has size 0: it read EOF at once)
        assert out.read_text() == ""
        write_all(topic / "0" / "append", b"new 1\nnew 2\n")
        _wait_for(out, "new 1\nnew 2\n", proc)
        write_all(topic / "0" / "append", b"new 3\n")
        _wait_for(out, "new 1\nnew 2\nnew 3\n", proc)
    finally:
        _stop(proc)


def test_tail_f_keeps_its_start_while_other_readers_look_the_name_up(topic: Path, tmp_path: Path) -> None:
    """Lookups of a follow/ name move the start of its inode (mount/tree.py), but not while tail holds it: the size
    it polls would shrink and tail would print "file truncated" and everything again."""
    latest = topic / "0" / "follow" / "latest"
    out = tmp_path / "tail.out"
    proc = _spawn(["tail", "-s", "0.1", "-f", str(latest)], out)
    try:
        time.sleep(0.5)  # tail is polling
        expected = ""
        for i in range(3):
            write_all(topic / "0" / "append", b"line %d\n" % i)
            expected += f"line {i}\n"
            _wait_for(out, expected, proc)
            os.stat(latest)  # another process's lookup: a new start
            os.close(os.open(latest, os.O_RDONLY))
        time.sleep(0.5)  # two more polls of tail's
        assert out.read_text() == expected
    finally:
        _stop(proc)
    assert proc.stderr is not None and b"truncated" not in proc.stderr.read()


def test_tail_n_plus_1_f_prints_the_start_then_new_lines(topic: Path, tmp_path: Path) -> None:
    write_all(topic / "0" / "append", b"a\nb\n")
    out = tmp_path / "tail.out"
    proc = _spawn(["tail", "-s", "0.1", "-n", "+1", "-f", str(topic / "0" / "follow" / "earliest.jsonl")], out)
    try:
        text = _wait_for_lines(out, 2, proc)
        assert [line.split('"value":"')[1][0] for line in text.splitlines()] == ["a", "b"]
        write_all(topic / "0" / "append", b"c\n")
        text = _wait_for_lines(out, 3, proc)
        assert '"offset":2' in text.splitlines()[2]
    finally:
        _stop(proc)


def test_tail_n_2_f_of_follow_offset_prints_the_last_two_lines_then_new_ones(topic: Path, tmp_path: Path) -> None:
    write_all(topic / "0" / "append", b"".join(b"r%d\n" % i for i in range(50)))
    out = tmp_path / "tail.out"
    proc = _spawn(["tail", "-s", "0.1", "-n", "2", "-f", str(topic / "0" / "follow" / "10")], out)
    try:
        _wait_for(out, "r48\nr49\n", proc)
        write_all(topic / "0" / "append", b"r50\n")
        _wait_for(out, "r48\nr49\nr50\n", proc)
    finally:
        _stop(proc)


def _wait_for_lines(path: Path, count: int, proc: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + WAIT_S
    while (text := path.read_text()).count("\n") < count:
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"expected {count} lines, got {text!r} (exit code {proc.poll()})")
        time.sleep(0.05)
    return text


def test_an_open_follow_file_reports_the_bytes_committed_since_its_lookup(topic: Path) -> None:
    write_all(topic / "0" / "append", b"before\n")
    fd = os.open(topic / "0" / "follow" / "latest", os.O_RDONLY)
    fd_jsonl = os.open(topic / "0" / "follow" / "earliest.jsonl", os.O_RDONLY)
    try:
        assert os.fstat(fd).st_size == 0
        jsonl_before = os.fstat(fd_jsonl).st_size
        assert jsonl_before > len(b"before\n")
        write_all(topic / "0" / "append", b"x\nyz\n")
        assert os.fstat(fd).st_size == len(b"x\nyz\n")  # never cached: the next fstat sees it grow
        assert os.fstat(fd_jsonl).st_size > jsonl_before
        assert os.read(fd, 100) == b"x\nyz\n"
    finally:
        os.close(fd)
        os.close(fd_jsonl)


def test_cat_of_follow_still_blocks_at_the_end(topic: Path, tmp_path: Path) -> None:
    out = tmp_path / "cat.out"
    proc = _spawn(["cat", str(topic / "0" / "follow" / "latest")], out)
    try:
        write_all(topic / "0" / "append", b"one\n")
        _wait_for(out, "one\n", proc)
        time.sleep(0.5)
        assert proc.poll() is None, "cat ended at the end of a follow/ stream"
        write_all(topic / "0" / "append", b"two\n")
        _wait_for(out, "one\ntwo\n", proc)
    finally:
        _stop(proc)


def test_tail_without_f_of_a_follow_file_ends(topic: Path) -> None:
    """tail without -f reads to the end it was shown and exits, instead of waiting for ever."""
    write_all(topic / "0" / "append", b"p\nq\nr\n")
    done = subprocess.run(["tail", "-n", "2", str(topic / "0" / "follow" / "earliest")], capture_output=True,
                          timeout=10)  # fmt: skip
    assert (done.returncode, done.stdout) == (0, b"q\nr\n")
