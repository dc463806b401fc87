"""A new user's first hour (issue 23 item 8): ``--log-level`` after the command, the documented wait for a mount
that gives up when the mount process exits, ``logfs dump … | head`` ending quietly, and a "did you mean" for a
mistyped config key wherever a key is read. Each through the installed console script, a real mount and real
shell tools.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import (
    LOGFS,
    Mount,
    errno_of,
    finish_mount,
    make_topic,
    running_mount,
    spawn_logfs,
    wait_started,
    write_all,
)

from logfs.cli import main

BIN = Path(sys.executable).parent
DOCS = Path(__file__).resolve().parents[2] / "docs"
SNIPPET_TIMEOUT_S = 120.0
GIVE_UP_WITHIN_S = 20.0  # the mount process fails within a second; generous for a busy machine


def run(args: list[str], cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [LOGFS, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


# --- --log-level after the command ----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", sorted(main.commands))
def test_every_command_takes_log_level_after_its_name(command: str, tmp_path: Path) -> None:
    """An unknown option fails the parse before --help is acted on, so exit 0 proves the option is known there."""
    done = run([command, "--log-level", "info", "--help"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "--log-level" in done.stdout
    done = run([command, "--log-level", "loud"], tmp_path)
    assert done.returncode == 2
    assert "Invalid value for '--log-level': 'loud' is not one of" in done.stderr


def test_log_level_after_the_command_takes_effect_and_the_later_one_wins(tmp_path: Path) -> None:
    missing = tmp_path / "nostore"
    done = run(["check", str(missing), "--log-level", "debug"], tmp_path)
    assert done.returncode == 1
    assert " DEBUG logfs.cli: command failed: FileNotFoundError: no store at" in done.stderr
    done = run(["--log-level", "debug", "check", str(missing), "--log-level", "error"], tmp_path)
    assert done.returncode == 1
    assert " DEBUG " not in done.stderr
    assert done.stderr.splitlines()[-1] == f"Error: no store at {missing}"


def test_mount_with_log_level_after_its_arguments_serves_and_logs_at_that_level(tmp_path: Path) -> None:
    """The issue's own command: `logfs mount STORE MNT --log-level info` was a usage error."""
    store, path, log = tmp_path / "store", tmp_path / "mnt", tmp_path / "mnt.log"
    path.mkdir()
    mount = Mount(store, path, spawn_logfs(["mount", str(store), str(path), "--log-level", "info"], log), log)
    wait_started(mount, lambda: os.path.ismount(path), "logfs mount … --log-level info", 20.0)
    try:
        write_all(make_topic(path, "t") / "0" / "append", b"hello\n")
        assert (path / "t/0/at/earliest").read_bytes() == b"hello\n"
        assert " INFO logfs." in mount.log_text()
    finally:
        finish_mount(mount)


# --- the documented wait for a mount ---------------------------------------------------------------------------------


def quick_start_blocks() -> list[str]:
    """The ```sh blocks of docs/mount.md's Quick start, as written."""
    text = (DOCS / "mount.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```sh\n(.*?)```", section, flags=re.S)


def _snippet_env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def _leftovers(cwd: Path) -> list[int]:
    """Pids of logfs processes (this user's) whose working directory is ``cwd``: what a snippet started."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "cwd") == str(cwd) and b"logfs" in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _clean_up_snippet(cwd: Path, *mounts: str) -> None:
    for name in mounts:
        if os.path.ismount(cwd / name):
            subprocess.run(["fusermount3", "-u", "-z", str(cwd / name)], capture_output=True, check=False)
    for pid in _leftovers(cwd):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_the_quick_start_wait_loop_gives_up_when_the_mount_process_exits(tmp_path: Path) -> None:
    """The Quick start's lines up to its wait loop, literally, where `logfs mount` must fail (`mnt` is a file):
    the loop ends instead of spinning. (`until mountpoint -q mnt` waited for ever.)"""
    block = quick_start_blocks()[0]
    lines = block.splitlines()
    loop = next(i for i, line in enumerate(lines) if "mountpoint -q mnt" in line)
    assert "kill -0" in lines[loop]
    (tmp_path / "mnt").write_text("not a directory\n")
    script = "\n".join(lines[: loop + 1]) + "\necho loop-ended\n"
    started = time.monotonic()
    try:
        done = subprocess.run(
            ["bash", "-c", script], cwd=tmp_path, env=_snippet_env(), capture_output=True, text=True,
            timeout=GIVE_UP_WITHIN_S, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        _clean_up_snippet(tmp_path, "mnt")
    assert done.stdout == "loop-ended\n", done.stderr
    assert "Error:" in done.stderr and "mnt" in done.stderr  # logfs mount's own message
    assert time.monotonic() - started < GIVE_UP_WITHIN_S


def test_the_quick_start_and_follower_blocks_run_as_documented(tmp_path: Path) -> None:
    """The Quick start's first and last blocks, literally (the Spark block has tests of its own): the wait loops end
    once the mounts are up, every command works, and the closing `logfs umount`s end both processes."""
    blocks = quick_start_blocks()
    script = blocks[0] + "\n" + blocks[-1]
    out, err = tmp_path / "out", tmp_path / "err"
    try:
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            subprocess.run(
                ["bash", "-c", script], cwd=tmp_path, env=_snippet_env(), stdout=stdout, stderr=stderr,
                timeout=SNIPPET_TIMEOUT_S, stdin=subprocess.DEVNULL, check=False,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while _leftovers(tmp_path) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _leftovers(tmp_path), err.read_text()
    finally:
        _clean_up_snippet(tmp_path, "mnt", "fmnt")
    text = out.read_text()
    assert text.startswith("created topic clicks with 3 partition(s)\na\nb\n"), (text, err.read_text())
    # The follower's at/earliest last: caught up with a and b at least (c may still be on its way on a busy machine;
    # so may tail -f's output, which the page only promises "within a second").
    assert text.endswith(("\na\nb\n", "\na\nb\nc\n")) and text.count("a\nb\n") == 2, (text, err.read_text())
    assert not os.path.ismount(tmp_path / "mnt") and not os.path.ismount(tmp_path / "fmnt")


# --- making the cleaner run now ---------------------------------------------------------------------------------------


def _recipe(title: str) -> str:
    """The one ```sh block of the docs/mount.md section ``title``."""
    text = (DOCS / "mount.md").read_text()
    section = text.split(f"### {title}\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    return block


def test_the_clean_now_recipe_compacts_every_partition_and_restores_the_config(tmp_path: Path) -> None:
    """docs/mount.md's recipe, literally, on a compacted topic of two partitions at the default backoff (15 s)."""
    with running_mount(tmp_path / "store", tmp_path / "mnt") as mount:
        done = run(["create-topic", str(mount.path), "users", "--partitions", "2", "--config",
                    "cleanup.policy=compact"], tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr
        for p in (0, 1):
            lines = [json.dumps({"key": f"k{k}", "value": f"v{v}"}) for v in range(5) for k in range(3)]
            write_all(mount.path / "users" / str(p) / "append.jsonl", ("\n".join(lines) + "\n").encode())
        before = (mount.path / "users/config").read_text()
        done = subprocess.run(
            ["bash", "-c", _recipe("Making the cleaner run now")], cwd=tmp_path, capture_output=True, text=True,
            timeout=SNIPPET_TIMEOUT_S + 30, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert done.returncode == 0 and done.stderr == "", done.stderr
        for p in (0, 1):
            rows = [json.loads(line) for line in (mount.path / f"users/{p}/at/earliest.jsonl").read_text().splitlines()]
            assert [(r["offset"], r["key"], r["value"]) for r in rows] == [
                (12, "k0", "v4"), (13, "k1", "v4"), (14, "k2", "v4"), (15, "logfs-roll", None)
            ], p  # fmt: skip
            cleaner = json.loads((mount.path / f"users/{p}/state").read_bytes())["cleaner"]
            assert cleaner == {"first_dirty_offset": 15, "dirty_ratio": 0.0}
        assert (mount.path / "users/config").read_text() == before  # both keys back at the topic's defaults


# --- what the docs promise a new user ------------------------------------------------------------------------------


def test_a_json_object_value_reads_back_as_docs_mount_md_shows(mounted: Mount) -> None:
    """The example beside the JSON-lines table, run with MOUNT replaced: each command's output is its comment."""
    text = (DOCS / "mount.md").read_text()
    section = text.split("**A value given as JSON reads back as a string.**", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S)
    assert block
    make_topic(mounted.path, "events")
    for line in block.group(1).splitlines():
        command, _, shown = line.partition("  # ")
        done = subprocess.run(
            command.replace("MOUNT", str(mounted.path)), shell=True, capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
        if shown:
            head, elided, tail = shown.strip().partition("…")  # "{…,rest}": the fields before "key" are left out
            if not elided:
                assert done.stdout == head + "\n", (line, done.stdout)
            assert done.stdout.startswith(head) and done.stdout.endswith(tail + "\n"), (line, done.stdout)
    row = json.loads((mounted.path / "events/0/at/earliest.jsonl").read_text())
    assert json.loads(row["value"]) == {"page": "/home", "ms": 412}


def test_the_readme_names_every_package_setup_installs() -> None:
    root = DOCS.parent
    setup = (root / "scripts" / "setup").read_text()
    listed = re.search(r"^apt_packages=\((.*)\)$", setup, flags=re.M)
    assert listed
    packages = [*listed.group(1).split(), "zookeeper"]
    assert "sshfs" in packages and "openssh-server" in packages
    readme = " ".join((root / "README.md").read_text().split())
    paragraph = readme.split("Both set up everything on a fresh Debian 12 machine", 1)[1].split("```", 1)[0]
    for package in packages:
        assert re.search(rf"(?<![\w-]){re.escape(package)}(?![\w-])", paragraph), package


# --- a closed pipe ---------------------------------------------------------------------------------------------------


def test_dump_into_head_ends_quietly(tmp_path: Path) -> None:
    """`logfs dump … | head`: the reader goes away; no "Error: Broken pipe", no traceback (as coreutils)."""
    store, path = tmp_path / "store", tmp_path / "mnt"
    with running_mount(store, path) as mount:
        topic = make_topic(mount.path, "t")
        write_all(topic / "0" / "append", b"".join(b"record %d\n" % i for i in range(20_000)))
    segment = next((store / "t-0").glob("*.log"))
    done = subprocess.run(
        f"{LOGFS} dump --records {segment} | head -n 2; echo \"${{PIPESTATUS[0]}}\" >&2",
        shell=True, executable="bash", capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.stdout.startswith("Dumping ") and done.stdout.count("\n") == 2
    assert done.stderr == "1\n"  # nothing but the exit status: 1, as click ends on EPIPE


# --- "did you mean" for config keys --------------------------------------------------------------------------------


def test_a_mistyped_key_is_answered_with_a_suggestion_everywhere_keys_are_read(mounted: Mount, tmp_path: Path) -> None:
    """`--config` of mount, `logfs create-topic --config` and a write to <topic>/config: same errno/exit as before."""
    done = run(["mount", str(tmp_path / "s2"), str(tmp_path / "m2"), "--config", "segmnt.bytes=2048"], tmp_path)
    assert done.returncode == 2
    assert "unknown config key 'segmnt.bytes' (did you mean segment.bytes?)" in done.stderr
    assert not (tmp_path / "s2").exists()
    done = run(["create-topic", str(mounted.path), "t", "--config", "retention.msx=1000"], tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "Error: --config retention.msx=1000: unknown topic config key 'retention.msx' (did you mean retention.ms?)"
    )
    assert not (mounted.path / "t").exists()
    mounted.allow_refusals("/u/config", "config write")
    make_topic(mounted.path, "u")
    assert errno_of(write_all, mounted.path / "u" / "config", b"cleanup.polcy=compact\n") == errno.EINVAL
    last = json.loads((mounted.path / ".logfs" / "errors").read_text().splitlines()[-1])
    assert (last["op"], last["errno"]) == ("config write", "EINVAL")
    assert "unknown topic config key 'cleanup.polcy' (did you mean cleanup.policy?)" in last["reason"]
