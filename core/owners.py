"""Who owns what in a store: the user, group and mode of each topic, each consumer group, and the store's root.

Why in the store. A shared mount (``logfs mount --allow-other``, docs/mount.md "Sharing a mount") shows each topic
with its owner and mode and lets the kernel check them; the owner alone changes the topic itself. That answer must
survive a remount and reach every replica (a follower's mount and a new leader enforce the same), so it is kept with
the topic's other metadata, not in the mount's memory. Kafka keeps the equivalent (its ACLs) in ZooKeeper; logfs has
no broker, so the store holds it, one small file per owned name at the store root, beside the topic overrides
(a Kafka broker ignores files there, and fails on any directory that is not a partition's):

    .logfs-root.owner                the mount root: who may create topics
    .logfs-topic.<topic>.owner       one topic
    .logfs-group.<group>.owner       one consumer group

Each holds one line, ``<uid> <gid> <mode, octal>``. One file per name keeps every change O(1) (10,000 topics do not
rewrite one table on each ``mkdir``); each is replaced atomically and durably (``core/durable.py``). A name without a
file has no recorded owner: the mount shows it as the mounting user's, with the mode it always had, so stores made
before ownership existed behave as they did.

Threads: reads from any thread, a dict lookup (the store's load reads every owner file once, so a getattr on the
mount's trio thread never waits for the disk); writes block (fsync): a worker thread.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from logfs.core.durable import fsync_dir, replace_file
from logfs.core.errors import StorageError
from logfs.core.topicnames import store_file_name

ROOT_FILE = ".logfs-root.owner"
TOPIC_PREFIX = ".logfs-topic."
GROUP_PREFIX = ".logfs-group."
OWNER_SUFFIX = ".owner"
DEFAULT_MODE = 0o755
MODE_BITS = 0o7777  # permission bits with set-id and sticky: what chmod may change
# How a shared mount shows a consumer group nobody claimed yet (mount/access.py), and how a follower tells one from
# a claimed group on its leader's mount (logfs/follower/discovery.py): the sticky bit, which a claimed group's mode
# never has (a chmod of a group keeps GROUP_MODE_BITS only), so a group its owner made 0777 still reads as claimed.
UNCLAIMED_GROUP_MODE = 0o1777
GROUP_MODE_BITS = 0o777


@dataclass(frozen=True, slots=True)
class Owner:
    """A user, a group and permission bits (``st_mode & 0o7777``)."""

    uid: int
    gid: int
    mode: int

    def render(self) -> bytes:
        return f"{self.uid} {self.gid} {self.mode:o}\n".encode()

    @classmethod
    def parse(cls, text: bytes, path: Path) -> Owner:
        try:
            uid, gid, mode = text.decode("ascii").split()
            owner = cls(int(uid), int(gid), int(mode, 8))
        except ValueError:
            raise StorageError(f"{path}: not '<uid> <gid> <octal mode>': {text[:80]!r}") from None
        if owner.uid < 0 or owner.gid < 0 or owner.mode & ~MODE_BITS:
            raise StorageError(f"{path}: out of range: {text[:80]!r}")
        return owner


def default_owner() -> Owner:
    """What every name without a record shows: this process's user and group, mode 0755 (a mount's default)."""
    return Owner(os.getuid(), os.getgid(), DEFAULT_MODE)


class Owners:
    """The owner files of one store (see the module docstring). One per store; any thread."""

    def __init__(self, store_dir: Path) -> None:
        self._dir = store_dir
        self._lock = threading.Lock()
        self._known: dict[str, Owner | None] = {}  # file name -> its owner, or None: no file
        self._loaded = False  # load() read every owner file: a name not known has none

    @staticmethod
    def root_file() -> str:
        return ROOT_FILE

    @staticmethod
    def topic_file(topic: str) -> str:
        return store_file_name(TOPIC_PREFIX, topic, OWNER_SUFFIX)

    @staticmethod
    def group_file(group: str) -> str:
        return store_file_name(GROUP_PREFIX, group, OWNER_SUFFIX)

    def load(self, files: set[str]) -> None:
        """Read every owner file among ``files`` (the store root's, as the store's load lists them), so that no
        later :meth:`get` touches the disk: the mount asks on the trio thread, for every getattr. Loader's thread."""
        for name in files:
            if name.endswith(OWNER_SUFFIX):
                self._known[name] = self._read(name)
        self._loaded = True

    def get(self, name: str) -> Owner | None:
        """The owner recorded in file ``name`` (:meth:`root_file`, :meth:`topic_file`, :meth:`group_file`), None
        when none is. A dict lookup once :meth:`load` ran (a store's open runs it); a read of the file before."""
        try:
            return self._known[name]
        except KeyError:
            pass
        if self._loaded:
            return None
        owner = self._read(name)
        with self._lock:
            return self._known.setdefault(name, owner)

    def _read(self, name: str) -> Owner | None:
        path = self._dir / name
        try:
            return Owner.parse(path.read_bytes(), path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(f"{path}: {exc.strerror}") from exc

    def set(self, name: str, owner: Owner, *, sync_dir: bool = True) -> None:
        """Record ``owner`` in file ``name``, durably (replaced atomically, the store directory fsynced unless
        ``sync_dir`` is False: the caller fsyncs it once for many). Blocks."""
        if self.get(name) == owner:
            return
        replace_file(self._dir / name, owner.render(), sync_dir=sync_dir)
        with self._lock:
            self._known[name] = owner

    def forget(self, name: str) -> None:
        """Remove file ``name`` (its topic or group is gone). Blocks (an unlink; the caller fsyncs the directory)."""
        with self._lock:
            self._known[name] = None
        try:
            os.unlink(self._dir / name)
        except FileNotFoundError:
            pass

    def forget_all(self, names: Iterable[str]) -> None:
        """:meth:`forget` each of ``names``, then fsync the store directory once, so that no forgotten owner comes
        back after a crash. Blocks."""
        names = list(names)
        for name in names:
            self.forget(name)
        if names:
            fsync_dir(self._dir)

    def recorded(self, prefix: str) -> frozenset[str]:
        """The owner files starting with ``prefix`` (``GROUP_PREFIX``, ``TOPIC_PREFIX``) that hold an owner now. A
        copy of the in-memory record (the store's open read them all): no disk. Any thread."""
        with self._lock:
            return frozenset(n for n, owner in self._known.items() if owner is not None and n.startswith(prefix))
