"""The ``logfs`` console script: help, version, exit codes 0 / 1 / 2, one log line per event.

Every test runs the installed console script (or ``python -m logfs``) of the environment running the tests, in a
subprocess started outside the checkout, as a user would.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

from conftest import Mount, errno_of, state, write_all

BIN = Path(sys.executable).parent
LOGFS = BIN / "logfs"
VERSION = metadata.version("logfs")


def run(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
    )


def test_help_describes_logfs_commands_and_exit_codes(tmp_path: Path) -> None:
    proc = run([str(LOGFS), "--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "Usage: logfs [OPTIONS] COMMAND [ARGS]..." in out
    assert "Kafka" in out and "FUSE" in out
    for text in ("--version", "--log-level", "Commands:", "version", "Exit codes:", "0  success", "2  bad usage"):
        assert text in out, f"{text!r} missing from logfs --help:\n{out}"


def test_version_option_and_command_print_the_installed_version(tmp_path: Path) -> None:
    for args in (["--version"], ["-V"], ["version"]):
        proc = run([str(LOGFS), *args], tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == f"logfs {VERSION}\n"


def test_python_dash_m_logfs_is_the_same_command(tmp_path: Path) -> None:
    proc = run([sys.executable, "-m", "logfs", "--version"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"logfs {VERSION}\n"


def test_unknown_subcommand_exits_2_naming_it(tmp_path: Path) -> None:
    proc = run([str(LOGFS), "no-such-command"], tmp_path)
    assert proc.returncode == 2
    assert "No such command 'no-such-command'" in proc.stderr
    assert proc.stdout == ""


def test_bad_log_level_exits_2(tmp_path: Path) -> None:
    proc = run([str(LOGFS), "--log-level", "loud", "version"], tmp_path)
    assert proc.returncode == 2
    assert "--log-level" in proc.stderr


def test_log_level_from_environment_is_validated_too(tmp_path: Path) -> None:
    proc = run([str(LOGFS), "version"], tmp_path, LOGFS_LOG_LEVEL="loud")
    assert proc.returncode == 2


def test_logfs_error_in_a_command_exits_1_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        from logfs.cli import main
        from logfs.core.errors import CorruptRecord

        @main.command("fail")
        def fail() -> None:
            raise CorruptRecord("CRC-32C mismatch", position=61)

        main(["fail"], prog_name="logfs")
        """
    )
    proc = run([sys.executable, "-c", code], tmp_path)
    assert proc.returncode == 1
    assert proc.stderr == "Error: CRC-32C mismatch (batch at byte 61)\n"  # the message a user reads, no class name
    proc = run([sys.executable, "-c", code.replace('main(["fail"]', 'main(["--log-level", "debug", "fail"]')], tmp_path)
    assert proc.returncode == 1
    assert " DEBUG logfs.cli: command failed: CorruptRecord: CRC-32C mismatch" in proc.stderr  # the type, for debugging
    assert proc.stderr.endswith("\nError: CRC-32C mismatch (batch at byte 61)\n")


def test_log_events_are_one_line_each_even_with_a_traceback(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import logging
        from logfs.cli import configure_logging

        configure_logging("info")
        configure_logging("info")  # a second call replaces the handler: still one line per event
        log = logging.getLogger("logfs.test")
        log.debug("hidden")
        log.info("first\\nevent")
        try:
            1 / 0
        except ZeroDivisionError:
            log.exception("second event")
        """
    )
    proc = run([sys.executable, "-c", code], tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 2, proc.stderr
    assert lines[0].endswith("INFO logfs.test: first | event")
    assert " ERROR logfs.test: second event | Traceback (most recent call last):" in lines[1]
    assert lines[1].endswith("ZeroDivisionError: division by zero")


# --- commands on a running mount: create-topic, delete-topic, errors; umount -------------------------------------


def test_create_topic_makes_partitions_and_config_and_delete_topic_removes_it(mounted: Mount, tmp_path: Path) -> None:
    mnt = mounted.path
    proc = run([str(LOGFS), "create-topic", str(mnt), "events", "--partitions", "3", "--config", "retention.ms=60000",
                "--config", "segment.bytes=1048576"], tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "created topic events with 3 partition(s)\n"
    assert sorted(os.listdir(mnt / "events")) == ["0", "1", "2", "append", "append.jsonl", "config"]
    config = (mnt / "events/config").read_text()
    assert "retention.ms=60000\n" in config and "segment.bytes=1048576\n" in config
    proc = run([str(LOGFS), "create-topic", str(mnt), "plain"], tmp_path)  # the mount's num.partitions (1)
    assert proc.returncode == 0, proc.stderr
    assert os.listdir(mnt / "plain").count("0") == 1 and "1" not in os.listdir(mnt / "plain")
    write_all(mnt / "events/2/append", b"gone soon\n")
    proc = run([str(LOGFS), "delete-topic", str(mnt), "events"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "deleted topic events\n"
    assert sorted(os.listdir(mnt)) == [".logfs", "plain"]
    assert (mnt / ".logfs/errors").read_bytes() == b""  # nothing was refused


def test_create_topic_and_delete_topic_fail_clearly_and_leave_nothing(mounted: Mount, tmp_path: Path) -> None:
    mnt = mounted.path
    mounted.allow_refusals("/(my topic|taken/3|\\.logfs/delete-topic):")
    os.mkdir(mnt / "taken")
    not_a_mount = f"Error: {tmp_path} is not a logfs mount (no .logfs/errors under it)"
    cases = [  # (arguments, exit code, the whole of stderr's last line)
        (["create-topic", str(mnt), "taken"], 1, f"Error: topic 'taken' exists in {mnt}"),
        (["create-topic", str(mnt), "my topic"], 2,
         "Error: topic name 'my topic' has characters outside [A-Za-z0-9._-]"),  # the mount's reason
        (["create-topic", str(mnt), "a/b"], 2,
         "Error: topic name 'a/b' has characters outside [A-Za-z0-9._-]"),  # checked before a path is made of it
        (["create-topic", str(mnt), ".."], 2, "Error: topic name '..' is not allowed"),
        (["delete-topic", str(mnt), "x" * 250], 2, "Error: topic name of 250 characters exceeds 249"),
        (["create-topic", str(mnt), "new", "--config", "bogus.key=1"], 2,
         "Error: --config bogus.key=1: unknown topic config key 'bogus.key'"),
        (["create-topic", str(mnt), "new", "--partitions", "0"], 2,
         "Error: Invalid value for '--partitions': 0 is not in the range x>=1."),
        (["create-topic", str(tmp_path), "new"], 1, not_a_mount),
        (["create-topic", str(tmp_path / "nowhere"), "new"], 1, f"Error: {tmp_path / 'nowhere'} does not exist"),
        (["delete-topic", str(mnt), "nosuch"], 1, f"Error: no topic 'nosuch' in {mnt}"),
        (["delete-topic", str(tmp_path), "taken"], 1, not_a_mount),
        (["errors", str(tmp_path)], 1, not_a_mount),
    ]  # fmt: skip
    for args, code, message in cases:
        proc = run([str(LOGFS), *args], tmp_path)
        assert (proc.returncode, proc.stderr.splitlines()[-1]) == (code, message), (args, proc.stderr)
        assert "Traceback" not in proc.stderr
    assert sorted(os.listdir(mnt)) == [".logfs", "taken"]  # nothing made by the failures
    assert state(mnt, "taken")["log_end_offset"] == 0


def test_create_topic_with_fewer_partitions_than_mkdir_makes_removes_what_it_made(tmp_path: Path) -> None:
    from conftest import running_mount

    with running_mount(tmp_path / "store", tmp_path / "mnt", "num.partitions=3") as mount:
        mnt = mount.path
        proc = run([str(LOGFS), "create-topic", str(mnt), "small", "--partitions", "2"], tmp_path)
        assert proc.returncode == 1
        assert proc.stderr == (
            "Error: topic 'small' not created: mkdir makes 3 partitions (the mount's num.partitions), more than 2, and"
            " a partition cannot be removed; ask for --partitions 3 or more; nothing was created\n"
        )
        assert os.listdir(mnt) == [".logfs"]
        proc = run([str(LOGFS), "create-topic", str(mnt), "big", "--partitions", "5"], tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert sorted(p for p in os.listdir(mnt / "big") if p.isdigit()) == ["0", "1", "2", "3", "4"]


def test_errors_prints_the_mounts_refusals_one_per_line_and_as_json(mounted: Mount, tmp_path: Path) -> None:
    mnt = mounted.path
    mounted.allow_refusals("/(bad name|t/0/append.jsonl):")
    proc = run([str(LOGFS), "errors", str(mnt)], tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    os.mkdir(mnt / "t")
    assert errno_of(write_all, mnt / "t/0/append.jsonl", b"{bad\n") == errno.EINVAL
    assert errno_of(os.mkdir, mnt / "bad name") == errno.EINVAL
    proc = run([str(LOGFS), "errors", str(mnt)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}"
    assert re.fullmatch(stamp + r" EINVAL write /t/0/append\.jsonl: line 1 of the write.*not JSON.*", lines[0]), lines
    assert re.fullmatch(
        stamp + r" EINVAL mkdir /bad name: topic name 'bad name' has characters outside \[A-Za-z0-9\._-\]", lines[1]
    ), lines
    proc = run([str(LOGFS), "errors", "--json", str(mnt)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (mnt / ".logfs/errors").read_text()
    assert [json.loads(line)["path"] for line in proc.stdout.splitlines()] == ["/t/0/append.jsonl", "/bad name"]


def test_a_second_umount_says_not_mounted(mounted: Mount, tmp_path: Path) -> None:
    mnt = mounted.path
    proc = run([str(LOGFS), "umount", str(mnt)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert mounted.proc.wait(timeout=20) == 0
    proc = run([str(LOGFS), "umount", str(mnt)], tmp_path)
    assert (proc.returncode, proc.stderr) == (1, f"Error: {mnt} is not mounted\n")
    proc = run([str(LOGFS), "umount", str(tmp_path / "nowhere")], tmp_path)
    assert (proc.returncode, proc.stderr) == (1, f"Error: {tmp_path / 'nowhere'} does not exist\n")
