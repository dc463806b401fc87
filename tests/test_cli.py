"""The ``logfs`` console script: help, version, exit codes 0 / 1 / 2, one log line per event.

Every test runs the installed console script (or ``python -m logfs``) of the environment running the tests, in a
subprocess started outside the checkout, as a user would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

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
    assert proc.stderr == "Error: CorruptRecord: CRC-32C mismatch (batch at byte 61)\n"


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
