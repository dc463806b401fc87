"""``logfs groups MOUNT``: consumer groups and lag printed like kafka-consumer-groups --describe, through a real
mount; exit 1 for an unknown --group or a directory that is not a mount."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import LOGFS, Mount, make_topic
from follower_procs import append_lines


def logfs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LOGFS, *args], capture_output=True, text=True, timeout=30, check=False)


def test_groups_prints_committed_offsets_and_lag_per_partition(mounted: Mount) -> None:
    mnt = mounted.path
    make_topic(mnt, "clicks", 2)
    append_lines(mnt / "clicks" / "0" / "append", [f"c{i}" for i in range(7)])
    append_lines(mnt / "clicks" / "1" / "append", ["d0", "d1"])
    groups = mnt / ".logfs" / "groups"
    (groups / "reporting" / "clicks" / "0" / "offset").write_text("3\n")
    (groups / "reporting" / "clicks" / "1" / "offset").write_text("2\n")
    (groups / "audit" / "clicks" / "0" / "offset").write_text("7\n")
    out = logfs("groups", str(mnt))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "GROUP     TOPIC  PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID",
        "audit     clicks 0         7              7              0   -           -    -",
        "reporting clicks 0         3              7              4   -           -    -",
        "reporting clicks 1         2              2              0   -           -    -",
    ]
    only = logfs("groups", str(mnt), "--group", "audit")
    assert only.returncode == 0 and len(only.stdout.splitlines()) == 2
    missing = logfs("groups", str(mnt), "--group", "nope")
    assert missing.returncode == 1 and "consumer group 'nope' does not exist" in missing.stderr


def test_groups_prints_nothing_without_commits_and_refuses_a_non_mount(mounted: Mount, tmp_path: Path) -> None:
    out = logfs("groups", str(mounted.path))
    assert (out.returncode, out.stdout) == (0, "")
    plain = tmp_path / "plain"
    plain.mkdir()
    refused = logfs("groups", str(plain))
    assert refused.returncode == 1 and "not a logfs mount" in refused.stderr
