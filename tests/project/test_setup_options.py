"""``scripts/setup --user-allow-other`` (docs/mount.md, "Sharing a mount"): setup leaves /etc/fuse.conf alone unless
asked; asked, it uncomments Debian's ``#user_allow_other`` line or adds one, once. The file is a copy
(``LOGFS_FUSE_CONF``): the test never edits this machine's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEBIAN = "# user_allow_other - Using the allow_other mount option works fine as root\n\n#user_allow_other\n\n#x = 1\n"


def setup(conf: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOGFS_FUSE_CONF": str(conf)}
    return subprocess.run(["bash", str(ROOT / "scripts/setup"), *args], capture_output=True, text=True, env=env,
                          timeout=600, stdin=subprocess.DEVNULL, check=False)  # fmt: skip


@pytest.mark.parametrize(("before", "after", "said"), [
    (DEBIAN, DEBIAN.replace("\n#user_allow_other\n", "\nuser_allow_other\n"), "uncommented"),
    ("mount_max = 10\n", "mount_max = 10\nuser_allow_other\n", "added"),
    ("mount_max = 10", "mount_max = 10\nuser_allow_other\n", "added"),  # a last line without its newline
    ("#user_allow_other", "user_allow_other\n", "uncommented"),
    ("", "user_allow_other\n", "added"),
])  # fmt: skip
def test_user_allow_other_only_when_asked_and_once(tmp_path: Path, before: str, after: str, said: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("setup installs Debian packages as root (CI runs as root)")
    conf = tmp_path / "fuse.conf"
    conf.write_text(before)
    done = setup(conf)
    assert done.returncode == 0, done.stderr
    assert conf.read_text() == before  # not asked: untouched
    done = setup(conf, "--user-allow-other")
    assert done.returncode == 0, done.stderr
    assert conf.read_text() == after and f"setup:   {said}" in done.stderr
    done = setup(conf, "--user-allow-other")
    assert done.returncode == 0, done.stderr
    assert conf.read_text() == after and "setup:   already there" in done.stderr


def test_an_unknown_argument_is_refused(tmp_path: Path) -> None:
    done = setup(tmp_path / "fuse.conf", "--allow-other")
    assert done.returncode == 2 and "unknown argument --allow-other" in done.stderr
