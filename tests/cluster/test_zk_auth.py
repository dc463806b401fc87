"""The ZooKeeper credential and its keys without a ZooKeeper (issue 26; docs/replication.md, "Securing ZooKeeper and
followers"): the credential file's rules (logfs/cluster/zkauth.py), ``zookeeper.set.acl`` without
``zookeeper.auth.file`` refused, and what ``logfs mount`` and ``logfs zk-acls`` say for each before they touch
anything (a mount point, a store, a connection)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import LOGFS

from logfs.cluster.zkauth import Credential, CredentialFileError, read_credential
from logfs.core.configtext import parse_store_config
from logfs.core.errors import ConfigError

NOBODY = 65534  # Debian's nobody


def credential_file(tmp_path: Path, data: bytes | str, mode: int = 0o600) -> Path:
    path = tmp_path / "zk.cred"
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)
    return path


def refusal(path: Path) -> str:
    with pytest.raises(CredentialFileError) as excinfo:
        read_credential(path)
    message = str(excinfo.value)
    assert message.startswith(f"zookeeper.auth.file {path}: "), message
    return message


@pytest.mark.parametrize(
    ("data", "user", "password"),
    [
        ("logfs:s3cret\n", "logfs", "s3cret"),
        ("logfs:s3cret", "logfs", "s3cret"),  # no newline at the end
        ("logfs:s3cret\r\nsecond line ignored\n", "logfs", "s3cret"),
        ("logfs:pass word:with colons \n", "logfs", "pass word:with colons "),  # only the first colon splits
    ],
)
def test_the_first_line_without_its_newline_is_the_credential(
    tmp_path: Path, data: str, user: str, password: str
) -> None:
    path = credential_file(tmp_path, data)
    credential = read_credential(path)
    assert credential == Credential(user, password, path)
    assert credential.text == f"{user}:{password}"
    assert password not in repr(credential)  # a repr that reaches a log line does not leak it


def test_an_owner_only_file_of_mode_0400_is_taken(tmp_path: Path) -> None:
    assert read_credential(credential_file(tmp_path, "u:p\n", 0o400)).user == "u"


def test_a_missing_file_is_refused_naming_it(tmp_path: Path) -> None:
    assert "cannot read it: No such file or directory" in refusal(tmp_path / "nothing")


@pytest.mark.parametrize("data", ["", "\n", "\nlogfs:s3cret\n"])
def test_an_empty_first_line_is_refused(tmp_path: Path, data: str) -> None:
    assert "its first line is empty; write the credential there as user:password" in refusal(
        credential_file(tmp_path, data)
    )


@pytest.mark.parametrize("data", ["logfs\n", "logfs s3cret\n", ":s3cret\n", "logfs:\n"])
def test_a_first_line_that_is_not_user_colon_password_is_refused(tmp_path: Path, data: str) -> None:
    assert "its first line is not user:password" in refusal(credential_file(tmp_path, data))


def test_a_first_line_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    assert "not UTF-8" in refusal(credential_file(tmp_path, b"logfs:\xff\xfe\n"))


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o620, 0o601, 0o660])
def test_a_file_others_may_read_or_write_is_refused_with_the_fix(tmp_path: Path, mode: int) -> None:
    path = credential_file(tmp_path, "logfs:s3cret\n", mode)
    message = refusal(path)
    assert f"mode {mode:04o} gives users other than its owner access" in message
    assert message.endswith(f"chmod 600 {path}")


def test_a_file_of_another_user_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a file to another user")  # scripts/test runs as root in CI
    path = credential_file(tmp_path, "logfs:s3cret\n")
    os.chown(path, NOBODY, -1)
    message = refusal(path)
    assert f"owned by uid {NOBODY}, not by this process's user (uid 0)" in message
    assert "chmod 600" in message


def test_a_directory_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "dir"
    directory.mkdir(mode=0o700)
    assert "not a regular file" in refusal(directory)


# --- the keys ---------------------------------------------------------------------------------------------------


def test_set_acl_without_an_auth_file_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"Invalid value true for configuration zookeeper.set.acl: needs "
                                          r"zookeeper.auth.file"):  # fmt: skip
        parse_store_config(["zookeeper.connect=127.0.0.1:2181", "zookeeper.set.acl=true"])


@pytest.mark.parametrize("pair", ["zookeeper.set.acl=true", "zookeeper.auth.file=/etc/zk.cred"])
def test_the_acl_keys_without_zookeeper_are_refused(pair: str) -> None:
    with pytest.raises(ConfigError, match=r"apply only with zookeeper\.connect"):
        parse_store_config([pair, "zookeeper.auth.file=/etc/zk.cred"])


def test_the_acl_keys_read_as_given() -> None:
    config = parse_store_config(["zookeeper.connect=h:1/c", "zookeeper.set.acl=true", "zookeeper.auth.file=/x"])
    assert (config.zookeeper_set_acl, config.zookeeper_auth_file) == (True, "/x")
    assert parse_store_config([]).zookeeper_set_acl is False


# --- the commands refuse before touching anything --------------------------------------------------------------


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LOGFS, *args], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_mount_refuses_a_readable_credential_file_before_mounting(tmp_path: Path) -> None:
    path = credential_file(tmp_path, "logfs:s3cret\n", 0o644)
    store, mountpoint = tmp_path / "store", tmp_path / "mnt"
    mountpoint.mkdir()
    done = run("mount", str(store), str(mountpoint), "--config", "zookeeper.connect=127.0.0.1:9/logfs",
               "--config", "zookeeper.set.acl=true", "--config", f"zookeeper.auth.file={path}")  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"zookeeper.auth.file {path}: mode 0644 gives users other than its owner access" in done.stderr
    assert f"chmod 600 {path}" in done.stderr
    assert not os.path.ismount(mountpoint)
    assert not store.exists()


def test_mount_refuses_set_acl_without_an_auth_file(tmp_path: Path) -> None:
    done = run("mount", str(tmp_path / "store"), str(tmp_path), "--config", "zookeeper.connect=127.0.0.1:9",
               "--config", "zookeeper.set.acl=true")  # fmt: skip
    assert done.returncode == 2
    assert "zookeeper.set.acl: needs zookeeper.auth.file" in done.stderr


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ([], "say which ACL: --secure or --unsecure"),
        (["--secure"], "--secure needs --auth-file"),
        (["--zookeeper.acl", "secure"], "--secure needs --auth-file"),
        (["--secure", "--zookeeper.acl", "unsecure"], "--zookeeper.acl unsecure contradicts --secure"),
        (["--zookeeper.acl", "open"], "'open' is not one of 'secure', 'unsecure'"),
    ],
)
def test_zk_acls_usage_errors_exit_2(flags: list[str], said: str) -> None:
    done = run("zk-acls", "--zookeeper", "127.0.0.1:9/logfs", *flags)
    assert done.returncode == 2
    assert said in done.stderr


def test_zk_acls_refuses_a_bad_auth_file_before_connecting(tmp_path: Path) -> None:
    path = credential_file(tmp_path, "no colon here\n")
    done = run("zk-acls", "--zookeeper", "127.0.0.1:9/logfs", "--secure", "--auth-file", str(path))
    assert done.returncode == 2
    assert f"zookeeper.auth.file {path}: its first line is not user:password" in done.stderr
