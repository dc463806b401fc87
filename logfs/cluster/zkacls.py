"""``logfs zk-acls``: set the ACL of every znode logfs uses to the secure one or back to the open one, on a cluster
running or stopped (Kafka's ``zookeeper-security-migration --zookeeper.acl secure|unsecure``; docs/replication.md,
"Securing ZooKeeper and followers").

Why a command: ``zookeeper.set.acl=true`` secures only the znodes a node creates from then on (kazoo's
``default_acl``, ``logfs/cluster/zksession.py``); the partition states, ``/controller_epoch`` and the other
persistent znodes of a cluster made without it keep ZooKeeper's default, ``world:anyone:cdrwa``, until something
sets theirs. The order, as Kafka's: to secure, restart every node with ``zookeeper.auth.file`` and
``zookeeper.set.acl=true`` first (so that no node is left unable to change what is then secured), then run
``--secure``; to go back, restart the nodes with ``zookeeper.set.acl=false`` (keeping the credential), run
``--unsecure``, then drop the credential.

What is set: the chroot node itself when ``--zookeeper`` names one (logfs made it, and ZooKeeper checks a deletion
against the parent's ACL, so an open chroot would let anyone delete ``/controller``), then every root of
``logfs/cluster/znodes.py`` and every znode below it, level by level: each level's ACLs set in pipelined requests,
its children listed in multiReads. Without a chroot ``/`` keeps its ACL: it belongs to the ZooKeeper's other users
(Kafka's tool sets it; logfs does not presume), so the command warns that ``/controller`` and ``/controller_epoch``
can then still be deleted by anyone.

Threads: the command line's, blocking; kazoo runs its own threads (the session hands nothing over outside trio).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

from logfs.cluster.zkauth import read_credential
from logfs.cluster.zkerrors import NoNode, ZkUnavailable
from logfs.cluster.zksession import GET_CHILDREN, ZkSession, acl_text
from logfs.cluster.znodes import BROKERS, CONTROLLER, CONTROLLER_EPOCH, DELETE_TOPICS, LEADERSHIP, TOPICS
from logfs.core.errors import ConfigError

#: The top-level znodes logfs makes under its chroot: ``/brokers``, ``/admin``, ``/logfs`` and the two controller
#: znodes, from the paths of ``znodes.py``.
ROOTS = tuple(sorted({"/" + path.split("/")[1] for path in (BROKERS, TOPICS, DELETE_TOPICS, LEADERSHIP, CONTROLLER,
                                                              CONTROLLER_EPOCH)}))  # fmt: skip
SESSION_TIMEOUT_MS = 10_000
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Migrated:
    """What ``logfs zk-acls`` did: how many znodes now carry ``acl`` (zkCli's spelling), and the chroot, which was
    among them (empty: there is none, and ``/`` kept its ACL)."""

    znodes: int
    acl: str
    chroot: str
    secure: bool

    @property
    def warning(self) -> str | None:
        """What a secured cluster without a chroot leaves open (None when nothing)."""
        if not self.secure or self.chroot:
            return None
        return ("no chroot: / keeps its ACL, so whoever may delete its children may delete /controller and "
                "/controller_epoch; give the cluster a chroot (zookeeper.connect=HOST:PORT/logfs)")  # fmt: skip


class AclUsage(ConfigError):
    """``logfs zk-acls`` was not told which ACL, or told two, or ``--secure`` without the credential."""


class AclMigration(ZkSession):
    """A session that sets the ACL its creates would carry (secure or open) on every znode logfs uses."""

    def set_every_acl(self) -> Migrated:
        """Set the ACL on the chroot (if any) and every znode under :data:`ROOTS`; how many. NotAuthorized when a
        znode's ACL does not let this credential change it (those before it keep the new ACL; run again with the
        right credential), ZkUnavailable when ZooKeeper does not answer."""
        count = 0
        if self.chroot:
            count += len(self._set_acls([""]))
        level = list(ROOTS)
        while level:
            there = self._set_acls(level)
            count += len(there)
            listed = self._read_many(GET_CHILDREN, there)
            level = [f"{parent}/{name}" for parent, names in zip(there, listed, strict=True)
                     if not isinstance(names, Exception) for name in names]  # fmt: skip
        return Migrated(count, acl_text(self.acl), self.chroot, self.secure)

    def _set_acls(self, paths: list[str]) -> list[str]:
        """Set this session's ACL on every path (pipelined); the paths that exist (a znode gone meanwhile is
        skipped)."""
        answers = self._many([functools.partial(self._client.set_acls_async, self._p(path), self.acl)
                              for path in paths])  # fmt: skip
        there = []
        for path, answer in zip(paths, answers, strict=True):
            if isinstance(answer, NoNode):
                continue
            if isinstance(answer, Exception):
                raise ZkUnavailable(f"setting the ACL of {self._p(path)}: {answer!r}")
            there.append(path)
        return there


def wanted(secure: bool | None, acl: str | None, auth_file: str | os.PathLike[str] | None) -> bool:
    """Whether ``--secure`` / ``--unsecure`` or Kafka's ``--zookeeper.acl secure|unsecure`` ask for the secure ACL;
    AclUsage when neither or both (disagreeing) are given, or ``--secure`` without ``--auth-file``."""
    if acl is not None and secure is not None and secure != (acl == "secure"):
        raise AclUsage(f"--zookeeper.acl {acl} contradicts --{'secure' if secure else 'unsecure'}")
    if acl is None and secure is None:
        raise AclUsage("say which ACL: --secure or --unsecure")
    chosen = secure if secure is not None else acl == "secure"
    if chosen and auth_file is None:
        raise AclUsage("--secure needs --auth-file: the credential that alone may change the znodes")
    return chosen


def migrate(connect: str, auth_file: str | os.PathLike[str] | None, *, secure: bool) -> Migrated:
    """``logfs zk-acls``: read the credential of ``auth_file`` (CredentialFileError), connect to ``connect``
    (``HOST:PORT[,…][/chroot]``, as ``zookeeper.connect``) with it, and set the secure ACL (``secure``, which needs
    the credential) or the open one on every znode logfs uses. ZkUnavailable (NotAuthorized among them) when it
    could not."""
    credential = read_credential(auth_file) if auth_file is not None else None
    session = AclMigration(connect, SESSION_TIMEOUT_MS, credential, secure=secure)
    session.start(CONNECT_TIMEOUT_S, make_parents=False)
    try:
        return session.set_every_acl()
    except ZkUnavailable as exc:
        raise type(exc)(f"ZooKeeper at {connect}: {exc}") from None
    finally:
        session.stop()
