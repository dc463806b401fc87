"""The ZooKeeper credential of a node (``zookeeper.auth.file``, docs/replication.md, "Securing ZooKeeper and
followers"): the file that holds it and the rules it must pass. No kazoo here: the session
(``logfs/cluster/zksession.py``) turns a :class:`Credential` into ZooKeeper's digest authentication and ACLs.

Why a file and not a ``--config`` value: a config value is seen in ``ps``, in shell histories and in logs, and
whoever holds the credential may rewrite every partition's state (move leadership, fence the leader). So the file is
refused, as ssh refuses a private key, unless its owner alone may read (or write) it and that owner is the user
running logfs; the message names the file and the fix (``chmod 600``). Its first line, without the newline, is the
credential ``user:password`` (ZooKeeper's ``digest`` scheme: the password may hold any character but a newline,
the user anything but a colon).

Threads: any; reading the file blocks.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from logfs.core.errors import ConfigError

FILE_KEY = "zookeeper.auth.file"


class CredentialFileError(ConfigError):
    """The credential file is missing, unreadable, badly formed, or readable by others: the node does not start."""


@dataclass(frozen=True, slots=True)
class Credential:
    """A ``digest`` credential, ``user:password``, and the file it came from. ``repr`` never shows the password
    (a credential may reach a log line through a repr)."""

    user: str
    password: str = field(repr=False)
    path: Path | None = None

    @property
    def text(self) -> str:
        """``user:password``, as ZooKeeper's digest scheme takes it (``addauth digest user:password``)."""
        return f"{self.user}:{self.password}"


def read_credential(path: str | os.PathLike[str]) -> Credential:
    """The credential in the file at ``path``: its first line without the newline. CredentialFileError (naming the
    file and what to do) when the file cannot be read, is not a regular file, is owned by another user than this
    process's, grants group or other users any access, or its first line is not ``user:password``."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise CredentialFileError(f"{FILE_KEY} {path}: cannot read it: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)  # the file opened, not a name that could be swapped between a check and the read
        _check_private(path, info)
        data = b""
        while b"\n" not in data and len(data) < 64 * 1024:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    line = data.split(b"\n", 1)[0].removesuffix(b"\r")
    try:
        text = line.decode()
    except UnicodeDecodeError:
        raise CredentialFileError(f"{FILE_KEY} {path}: its first line is not UTF-8 text") from None
    if not text:
        raise CredentialFileError(f"{FILE_KEY} {path}: its first line is empty; write the credential there as "
                                  "user:password")  # fmt: skip
    user, colon, password = text.partition(":")
    if not colon or not user or not password:
        raise CredentialFileError(f"{FILE_KEY} {path}: its first line is not user:password (a user, a colon, a "
                                  "password; neither empty)")  # fmt: skip
    return Credential(user, password, path)


def _check_private(path: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise CredentialFileError(f"{FILE_KEY} {path}: not a regular file")
    if info.st_uid != os.geteuid():
        raise CredentialFileError(f"{FILE_KEY} {path}: owned by uid {info.st_uid}, not by this process's user (uid "
                                  f"{os.geteuid()}), who alone may read it: chown {os.geteuid()} {path}; "
                                  f"chmod 600 {path}")  # fmt: skip
    if info.st_mode & 0o077:
        mode = stat.S_IMODE(info.st_mode)
        raise CredentialFileError(f"{FILE_KEY} {path}: mode {mode:04o} gives users other than its owner access; the "
                                  f"credential must be its owner's alone: chmod 600 {path}")  # fmt: skip
