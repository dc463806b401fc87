"""Replication across machines, on one machine: the leader's mount exported over sshfs on loopback (the recipe of
docs/replication.md), and a follower that reads only that sshfs mount; then the secured recipe ("Securing ZooKeeper
and followers"): a shared leader mount read through a dedicated user's read-only SFTP login with key authentication.

Needs the Debian packages openssh-server and sshfs (scripts/setup installs them). sshd runs as a child of the test
with its own config, host key and authorized key, on a free loopback port; the test is skipped only when sshd
cannot run here (no binary, or it exits at start).
"""

from __future__ import annotations

import contextlib
import errno
import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import errno_of, finish_mount, start_mount
from follower_procs import append_lines, following, identical, in_isr, wait_for
from users import shared_dir, user

SSHD = "/usr/sbin/sshd"
# The recipe: no caching of names, attributes or data, so each lookup of a fetch file reaches the leader (it is a
# snapshot taken at lookup) and each read returns what the leader's file holds; a few connections, since an SFTP
# server answers one request at a time and a fetch may long-poll there for 500 ms.
SSHFS_OPTIONS = "dir_cache=no,direct_io,entry_timeout=0,attr_timeout=0,negative_timeout=0,max_conns=4"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def sshd(tmp_path: Path, match: str = "") -> Iterator[tuple[int, Path]]:
    """A private sshd on loopback: (port, the client's private key). ``match``: ``Match`` blocks to end its config
    with. Skips the test when sshd cannot run."""
    if not os.path.exists(SSHD) or shutil.which("sshfs") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("openssh-server or sshfs is not installed (scripts/setup installs them)")
    d = tmp_path / "sshd"
    d.mkdir()
    for name in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / name)], check=True)
    shutil.copy(d / "client.pub", d / "authorized_keys")
    port = _free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d / 'host'}\nAuthorizedKeysFile {d / 'authorized_keys'}\n"
        f"PidFile {d / 'sshd.pid'}\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nPermitRootLogin prohibit-password\nSubsystem sftp internal-sftp\nLogLevel ERROR\n" + match
    )
    with contextlib.suppress(OSError):
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    log = open(d / "sshd.log", "wb")  # noqa: SIM115 (closed in finally)
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 10
        while True:
            if proc.poll() is not None:
                pytest.skip(f"sshd cannot run here (exit {proc.returncode}): {(d / 'sshd.log').read_text()[-500:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                pytest.skip("sshd did not listen within 10 s")
            time.sleep(0.05)
        yield port, d / "client"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@contextlib.contextmanager
def sshfs(port: int, key: Path, remote: Path, local: Path, login: str | None = None) -> Iterator[Path]:
    """``remote`` mounted at ``local`` over sshfs with the recipe's options, logged in as ``login`` (default: this
    user); unmounted in ``finally``."""
    local.mkdir()
    ssh_options = f"IdentityFile={key},StrictHostKeyChecking=no,UserKnownHostsFile=/dev/null,BatchMode=yes"
    args = ["sshfs", f"{login or getpass.getuser()}@127.0.0.1:{remote}", str(local), "-p", str(port),
            "-o", f"{SSHFS_OPTIONS},{ssh_options}"]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, f"sshfs failed: {done.stderr}"
    try:
        yield local
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(local)], capture_output=True, check=False)


def test_a_follower_replicates_through_the_leaders_mount_over_sshfs(tmp_path: Path) -> None:
    """The follower sees the leader only through sshfs: discovery, fetches, ISR and acks=all all work across it."""
    with sshd(tmp_path) as (port, key):
        lead = start_mount(tmp_path / "L", tmp_path / "L.mnt", "node.id=1", "replica.ids=1,2")
        try:
            os.mkdir(lead.path / "t")
            os.mkdir(lead.path / "t" / "1")
            (lead.path / "t" / "config").write_text("segment.bytes=8192\n")
            for p in range(2):
                append_lines(lead.path / "t" / str(p) / "append", [f"before-{p}-{i}-" + "s" * 50 for i in range(300)])
            with (
                sshfs(port, key, lead.path, tmp_path / "remote") as remote,
                following(remote, tmp_path / "F", 2) as follower,
            ):
                wait_for("identical over sshfs", lambda: identical(lead.store, tmp_path / "F", "t", 2), lead, follower)
                wait_for("the follower in the ISR", lambda: in_isr(lead, "t", 2, 2), lead, follower)
                for p in range(2):  # acks=all through the leader's mount, with its follower behind sshfs
                    append_lines(lead.path / "t" / str(p) / "append", [f"acked-{p}"], fsync=True)
                wait_for("identical again", lambda: identical(lead.store, tmp_path / "F", "t", 2), lead, follower)
        finally:
            finish_mount(lead)


# docs/replication.md's sshd_config block for the dedicated user, as written there.
READ_ONLY_LOGIN = """\
Match User {user}
    AuthenticationMethods publickey
    ForceCommand internal-sftp -R
    AllowTcpForwarding no
    X11Forwarding no
    PermitTTY no
"""


def test_a_dedicated_read_only_login_replicates_a_shared_leader(tmp_path: Path) -> None:
    """The secured recipe: the leader mounted --allow-other with the ssh user in replica.users, that user allowed only
    a read-only SFTP login (``internal-sftp -R``) with its key. Through it nothing can be written, the fetch session
    cannot be opened (read-write), and the follower fetches per partition instead: it replicates, joins the ISR and
    acks=all returns."""
    replica = user("replica")
    # unlocked (this test's sshd runs without PAM, which refuses useradd's "!" password), still with no password
    subprocess.run(["usermod", "-p", "*", replica.name], check=True)
    with shared_dir() as shared, sshd(shared, READ_ONLY_LOGIN.format(user=replica.name)) as (port, key):
        lead = start_mount(shared / "L", shared / "L.mnt", "node.id=1", "replica.ids=1,2",
                           f"replica.users={replica.name}", flags=("--allow-other",))  # fmt: skip
        try:
            os.mkdir(lead.path / "t")
            os.mkdir(lead.path / "t" / "1")
            for p in range(2):
                append_lines(lead.path / "t" / str(p) / "append", [f"before-{p}-{i}" for i in range(100)])
            with sshfs(port, key, lead.path, tmp_path / "remote", login=replica.name) as remote:
                assert errno_of(os.open, remote / "t" / "0" / "append", os.O_WRONLY) == errno.EACCES
                assert errno_of(os.open, remote / ".logfs" / "fetch" / "2" / ".session", os.O_RDWR) == errno.EACCES
                # a group offset commit, which the mount lets any user make (1777): refused by the login itself
                offset = remote / ".logfs" / "groups" / "g" / "t" / "0" / "offset"
                assert errno_of(os.open, offset, os.O_WRONLY) == errno.EACCES
                assert os.listdir(lead.path / ".logfs" / "groups") == []
                with following(remote, tmp_path / "F", 2) as follower:
                    wait_for("identical", lambda: identical(lead.store, tmp_path / "F", "t", 2), lead, follower)
                    wait_for("the follower in the ISR", lambda: in_isr(lead, "t", 2, 2), lead, follower)
                    for p in range(2):
                        append_lines(lead.path / "t" / str(p) / "append", [f"acked-{p}"], fsync=True)
                    wait_for("identical again", lambda: identical(lead.store, tmp_path / "F", "t", 2), lead, follower)
                    assert "is not open to this follower (EACCES" in follower.log_text()
        finally:
            finish_mount(lead)
