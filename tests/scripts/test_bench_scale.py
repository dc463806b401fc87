"""scripts/bench_scale.py (issue 24) still runs: a smoke run of its mount section at a tiny size.

The project keeps benchmarks out of timed tests (their figures depend on the machine), so nothing here asserts a
figure's value: only that the script mounts, measures and prints every row of the section with a value at both
sizes, that ``logfs check`` passed on the stores it used, and that it leaves no mount and no work directory behind.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

MOUNT_ROWS = [
    "lookup: stat(2) of a partition directory",
    "stat(2) of `state`",
    "open + write + close of `append`",
    "`ls -R` of the whole mount",
    "mount's RSS after `ls -R`",
    "mount's open descriptors after `ls -R`",
    "mount's CPU, idle",
    "clean remount: `logfs mount` → a lookup answers",
    "unmount: `fusermount3 -u` → the mount process exits",
    "remount after kill -9 → a lookup answers",
    "`logfs check` of the store",
]


def table_rows(text: str) -> list[list[str]]:
    """The data rows of the Markdown table in ``text`` (its header and separator left out)."""
    rows = [[c.strip() for c in line.strip()[1:-1].split("|")] for line in text.splitlines() if line.startswith("|")]
    return rows[2:]


def mounts_under(path: Path) -> list[str]:
    with open("/proc/self/mountinfo") as info:
        return [line.split()[4] for line in info if line.split()[4].startswith(str(path))]


@pytest.mark.timeout(90)
def test_the_mount_section_prints_every_row_at_both_sizes_and_cleans_up(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_scale.py"), "--partitions", "20", "--only", "mount",
         "--idle-seconds", "1", "--lookups", "3", "--ops", "20", "--markdown", "--dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=80, stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"bench_scale.py exited {done.returncode}:\n{done.stdout}\n{done.stderr[-4000:]}"
    rows = table_rows(done.stdout)
    assert len(rows) == len(MOUNT_ROWS), done.stdout
    for row, want in zip(rows, MOUNT_ROWS, strict=True):
        assert row[0].startswith(want), (row, want)
    for figure, at_n, at_base, _target, met in rows:
        assert re.search(r"\d", at_n) and re.search(r"\d", at_base), (figure, at_n, at_base)
        assert "not reached" not in at_n + at_base, (figure, at_n, at_base)
        assert met in ("yes", "no", ""), (figure, met)
    check = rows[-1]
    assert "(exit 0)" in check[1] and "(exit 0)" in check[2], check
    assert mounts_under(tmp_path) == []
    assert list(tmp_path.iterdir()) == [], "the script left its work directory"
