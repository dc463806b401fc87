"""Who may do what on a shared mount (``logfs mount --allow-other``; docs/mount.md, "Sharing a mount").

Two checkers split the work, as Kafka's authorizer and the file system split it for a broker's files:

* **The kernel**, with ``default_permissions``, checks every open, lookup, mkdir and rmdir against the attributes
  this module gives each node: a topic is its owner's, with the mode ``mkdir`` passed; its partitions and files take
  their bits from it (read files its r bits, data files its w bits, which also let a writer read its produce
  responses, directories its r and x bits). The mount root's owner and mode decide who creates topics (``chmod
  1777`` lets everyone, each deleting only their own: the sticky bit is the kernel's check too).
* **logfs** checks what the kernel cannot see: changes to a topic itself (its ``config``, a new partition, deleting
  it or its records: Kafka's ALTER and DELETE as opposed to WRITE) are the owner's or root's alone, whatever the mode
  (:meth:`Access.check_topic_owner`); a lookup under ``.logfs/fetch/`` is a fetch, which moves a replica's position,
  the ISR and the high watermark, so only the users named in ``replica.users`` may make one
  (:meth:`Access.check_replica_user`); ``chmod``, ``chgrp`` and ``chown`` follow the Unix rules (:meth:`Access.change`).

Ownership is the store's (``core/owners.py``): it survives a remount and reaches every replica. Without
``--allow-other`` nobody but the mounting user reaches the mount, and every node shows the modes it always had
(:attr:`Access.shared` is False): the owners are still recorded, so sharing a store later shows them.

A consumer group belongs to the first user who commits to it or sets its config (an unclaimed group is open to
all); a transaction to the user who began it (recorded with its begin in the store's transaction log).

Threads: the trio thread; the writes of owners run in worker threads (the callers'). A caller's supplementary groups
are read from ``/proc/<pid>/status`` on the trio thread: procfs answers from the kernel's memory, never the disk,
and it is what the kernel itself checks (a lookup in the user database could wait on a network directory).
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from logfs.core.configdef import invalid_value
from logfs.core.internaltopics import INTERNAL_TOPICS
from logfs.core.owners import DEFAULT_MODE, GROUP_MODE_BITS, MODE_BITS, UNCLAIMED_GROUP_MODE, Owner, Owners
from logfs.core.store import Store
from logfs.mount.coordinatorview import CoordinatorView
from logfs.mount.errors import AccessDenied, NoEntry, NotPermitted
from logfs.mount.nodes import APPEND_KINDS, FORWARD_DIR_KINDS, GROUP_KINDS, TXN_KINDS, Kind, Node
from logfs.mount.runner import Runner

ROOT_UID = 0
TXN_MODE = 0o700  # an open transaction: its owner's alone

# Files a topic's readers open: they take the topic's r bits.
_READ_KINDS = frozenset({Kind.STATE, Kind.PARTITION_LEADER, Kind.AT_FILE, Kind.FOLLOW_FILE, Kind.HW_FILE})
# Directories inside a topic: they take its r and x bits (nothing is made in them by mkdir).
_TOPIC_DIR_KINDS = frozenset({Kind.PARTITION, Kind.COMMITTED, Kind.AT_DIR, Kind.FOLLOW_DIR, Kind.HW_DIR})
# Under .logfs/: readable by all; the command files writable by all (logfs checks the topic each line names).
_ALL_READ_KINDS = frozenset({Kind.METRICS, Kind.ERRORS, Kind.LEADER, Kind.PARTITIONS, Kind.PRODUCER_ID, Kind.LABEL})
_COMMAND_KINDS = frozenset({Kind.DELETE_TOPIC, Kind.DELETE_RECORDS})


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request (pyfuse3's ``RequestContext``)."""

    uid: int
    gid: int
    pid: int

    @property
    def is_root(self) -> bool:
        return self.uid == ROOT_UID


def _data_bits(mode: int) -> int:
    """A data file's bits from its topic's mode: the w bits, and the r bit of each class that may write."""
    w = mode & 0o222
    return w | (w << 1)


class Access:
    """The permission rules of one mount (see the module docstring). Trio thread."""

    def __init__(
        self, store: Store, *, shared: bool, uid: int, gid: int, replica_users: frozenset[int], write_thread: Runner
    ) -> None:
        self.store = store
        self._write_thread = write_thread
        self.shared = shared
        self.uid = uid  # the mounting user: the owner of everything nobody else owns
        self.gid = gid
        self._replica_users = replica_users | {uid}
        self._default = Owner(uid, gid, DEFAULT_MODE)
        self._offsets = Owner(uid, gid, 0o700)
        self._claiming = trio.Lock()  # one claim of a group at a time: its check and its write are one step
        # on a node that does not lead: the owners the coordinator's node showed (the tree's; mount/operations.py)
        self.coordinator_view: Callable[[], CoordinatorView | None] = lambda: None

    # --- owners ---------------------------------------------------------------------------------------------------

    def root(self) -> Owner:
        return self.store.owners.get(Owners.root_file()) or self._default

    def topic(self, topic: str) -> Owner:
        recorded = self.store.owners.get(Owners.topic_file(topic))
        if recorded is not None:
            return recorded
        # __consumer_offsets holds every group's commits: the mounting user's alone, groups are read through
        # .logfs/groups/ with their own modes; __transaction_state's labels are looked up under .logfs/labels/.
        return self._offsets if topic in INTERNAL_TOPICS else self._default

    def group(self, group: str) -> Owner | None:
        """The group's owner; None while nobody claimed it."""
        return self.store.owners.get(Owners.group_file(group))

    def new_topic(self, caller: Caller, mode: int) -> Owner:
        """The owner of a topic ``caller`` makes with ``mkdir``'s ``mode`` (the kernel applied the caller's umask)."""
        return Owner(caller.uid, caller.gid, mode & MODE_BITS)

    def transaction(self, txn: str) -> Owner:
        """The owner of open transaction ``txn``: who began it (recorded with the begin in the store's transaction
        log, core/txn/state.py), mode 0700; the mounting user's for one begun before owners were recorded."""
        coordinator, view = self.store.transactions, self.coordinator_view()
        if view is not None:  # a node that does not lead: as the coordinator's node showed it
            owner = view.owner(txn)
        else:
            info = None if coordinator is None else coordinator.get(txn)
            owner = None if info is None else info.owner
        if owner is None:
            return Owner(self.uid, self.gid, TXN_MODE)
        return Owner(owner[0], owner[1], TXN_MODE)

    # --- attributes -----------------------------------------------------------------------------------------------

    def attributes(self, node: Node) -> tuple[int, int, int]:
        """``(uid, gid, st_mode)`` of ``node``: what the kernel checks each request against on a shared mount; the
        mounting user and the kind's own mode otherwise."""
        kind = node.kind
        if not self.shared:
            return self.uid, self.gid, kind.mode
        file_type = stat.S_IFDIR if kind.is_dir else stat.S_IFREG
        if kind is Kind.ROOT:
            owner = self.root()
            return owner.uid, owner.gid, file_type | owner.mode
        if kind is Kind.FETCH_SESSION or node.forwarded:  # logfs checks replica.users at open (check_replica_user)
            # a forwarded transaction's directory names its owner, for the node that forwards (mount/forwarding.py)
            owner = self.transaction(node.txn) if kind is Kind.TXN and node.forwarded else self._default
            return owner.uid, owner.gid, file_type | (0o755 if kind.is_dir else 0o666)
        if kind in FORWARD_DIR_KINDS:
            return self.uid, self.gid, kind.mode
        if node.topic and not kind.is_fetch and kind not in GROUP_KINDS and kind not in TXN_KINDS:
            owner = self.topic(node.topic)
            return owner.uid, owner.gid, file_type | self._topic_bits(kind, owner.mode)
        if kind in GROUP_KINDS and node.group:
            claimed = self.group(node.group)
            # a claimed group shows its permission bits only: only an unclaimed one has the sticky bit
            owner = (Owner(claimed.uid, claimed.gid, claimed.mode & GROUP_MODE_BITS) if claimed is not None
                     else Owner(self.uid, self.gid, UNCLAIMED_GROUP_MODE))  # fmt: skip
            return owner.uid, owner.gid, file_type | self._group_bits(kind, owner.mode)
        if kind in TXN_KINDS and node.txn:
            owner = self.transaction(node.txn)
            return owner.uid, owner.gid, file_type | (owner.mode if kind.is_dir else 0o200)
        if kind in (Kind.TXN_DIR, Kind.GROUPS_DIR):
            return self.uid, self.gid, file_type | stat.S_ISVTX | 0o777  # anyone begins or commits; keeps their own
        if kind in _ALL_READ_KINDS:
            return self.uid, self.gid, file_type | 0o444
        if kind in _COMMAND_KINDS:
            return self.uid, self.gid, file_type | 0o222
        return self.uid, self.gid, kind.mode  # .logfs/ itself, fetch/, labels/: as they are

    @staticmethod
    def _topic_bits(kind: Kind, mode: int) -> int:
        if kind is Kind.TOPIC:
            return mode
        if kind in _TOPIC_DIR_KINDS:
            return mode & 0o555
        if kind in APPEND_KINDS:  # producers' files: the w bits (and the matching r bits: responses are read back)
            return _data_bits(mode)
        if kind is Kind.CONFIG:
            return (mode & 0o444) | 0o200  # read as the topic says; written by its owner (checked by logfs too)
        return mode & 0o444  # the read files

    @staticmethod
    def _group_bits(kind: Kind, mode: int) -> int:
        if kind is Kind.GROUP:
            return mode
        if kind in (Kind.GROUP_TOPIC, Kind.GROUP_PARTITION):
            return mode & 0o555
        if kind in (Kind.GROUP_OFFSET, Kind.GROUP_CONFIG):
            return (mode & 0o444) | (mode & 0o222)  # read the commit; write one
        if kind is Kind.GROUP_FOLLOW:
            return (mode & 0o222) << 1  # reading it commits: those who may commit read it
        return mode & 0o444  # lag

    # --- logfs's own checks ---------------------------------------------------------------------------------------

    def check_topic_owner(self, caller: Caller, topic: str, what: str) -> None:
        """AccessDenied unless ``caller`` owns ``topic`` (or is root, or the mount is not shared): ``what`` changes
        the topic itself."""
        if not self.shared or caller.is_root:
            return
        owner = self.topic(topic)
        if caller.uid != owner.uid:
            raise AccessDenied(f"{what}: topic {topic!r} belongs to uid {owner.uid}, not to uid {caller.uid}")

    def check_transaction_owner(self, caller: Caller, txn: str, owner: tuple[int, int] | None) -> None:
        """Before a transaction's file is forwarded to its coordinator (which checks only that the forwarding node
        is a replica user): AccessDenied unless ``caller`` began it (``owner``, as the coordinator shows it now) or
        is root, on a shared mount; NoEntry when it is not open there."""
        if owner is None:
            raise NoEntry(f"transaction {txn!r} is not open")
        if self.shared and not caller.is_root and caller.uid != owner[0]:
            raise AccessDenied(f"transaction {txn!r} belongs to uid {owner[0]}, not to uid {caller.uid}")

    def check_replica_user(self, caller: Caller) -> None:
        """AccessDenied unless ``caller`` is root or named in ``replica.users``: a fetch moves a replica's position,
        the ISR and the high watermark, and it happens at lookup; a forwarded write (``.logfs/forward/``) was
        checked against its writer by the node that forwards it, so only that node's user may make one."""
        if self.shared and not caller.is_root and caller.uid not in self._replica_users:
            raise AccessDenied(f"uid {caller.uid} is not in replica.users: only replicas fetch")

    def may_see_all_refusals(self, caller: Caller) -> bool:
        """Root and the mounting user read every refusal in ``.logfs/errors``; anyone else only their own."""
        return not self.shared or caller.is_root or caller.uid == self.uid

    async def claim_group(self, caller: Caller, group: str) -> bool:
        """A commit, a config change or a group ``follow`` by ``caller``: it claims ``group`` when nobody did yet
        (mode 0755: others read its commits and lag, the owner commits; ``chmod g+w`` shares it); then AccessDenied
        unless ``caller`` may write the group (its owner, its group or others by the mode, or root). The kernel
        checked the mode it saw before the open, which a claim since may have changed. True if this call claimed
        it."""
        if not self.shared:
            return False
        owner, claimed = await self.claim_group_as(group, caller.uid, caller.gid)
        self.check_group_write(caller, group, owner)
        return claimed

    async def claim_group_as(self, group: str, uid: int, gid: int) -> tuple[Owner, bool]:
        """``group``'s owner, made ``uid``:``gid`` (mode 0755) when nobody claimed it yet, atomically; and whether
        this call claimed it. Also a claim another node forwarded for its caller (mount/forwarding.py), whose right
        to write the group that node checks once it shows the owner."""
        async with self._claiming:
            owner = self.group(group)
            if owner is not None:
                return owner, False
            owner = Owner(uid, gid, DEFAULT_MODE)
            await self._write_thread(self.store.owners.set, Owners.group_file(group), owner)
            return owner, True

    def check_group_write(self, caller: Caller, group: str, owner: Owner | None = None) -> None:
        """AccessDenied unless ``caller`` may commit to ``group`` by its owner's mode (or is root, or the mount is not
        shared, or nobody claimed it yet)."""
        owner = owner if owner is not None else self.group(group) if self.shared else None
        if owner is not None and not caller.is_root and not _allows(owner, caller, 0o2):
            raise AccessDenied(f"group {group!r} belongs to uid {owner.uid}: uid {caller.uid} may not commit to it")

    def check_topic_read(self, caller: Caller, topic: str) -> None:
        """AccessDenied unless ``caller`` may read ``topic`` by its mode (or is root): a group's ``follow`` streams
        the topic's records, which the group's own mode does not guard."""
        if self.shared and not caller.is_root and not _allows(self.topic(topic), caller, 0o4):
            raise AccessDenied(f"topic {topic!r} is not readable by uid {caller.uid}")

    def check_group_owner(self, caller: Caller, group: str) -> None:
        """AccessDenied unless ``caller`` owns ``group`` (or root, or nobody claimed it): deleting it."""
        owner = self.group(group) if self.shared and not caller.is_root else None
        if owner is not None and owner.uid != caller.uid:
            raise AccessDenied(f"group {group!r} belongs to uid {owner.uid}, not to uid {caller.uid}")

    # --- chmod, chgrp, chown ----------------------------------------------------------------------------------------

    async def setattr(self, node: Node, attr: Any, fields: Any, caller: Caller) -> None:
        """A setattr request: chmod, chgrp or chown of the root, a topic or a consumer group (:meth:`change`), stored
        with the store's owners; NotPermitted for anything else (truncate, utimes, every other node)."""
        if fields.update_size or fields.update_atime or fields.update_mtime:
            raise NotPermitted("setattr: only chmod, chgrp and chown, of the root, a topic or a group")
        kind = node.kind
        if kind is Kind.ROOT:
            name, current = Owners.root_file(), self.root()
        elif kind is Kind.TOPIC:
            name, current = Owners.topic_file(node.topic), self.topic(node.topic)
        elif kind is Kind.GROUP:
            claimed = self.group(node.group)
            if claimed is None:
                raise NotPermitted(f"group {node.group!r} belongs to nobody yet: its first commit claims it")
            name, current = Owners.group_file(node.group), claimed
        else:
            raise NotPermitted(f"chmod and chown of {node}: only the mount root, a topic or a group have owners")
        mode_bits = GROUP_MODE_BITS if kind is Kind.GROUP else MODE_BITS  # a group's set-id and sticky bits: dropped
        new = self.change(
            caller, current, mode=attr.st_mode & mode_bits if fields.update_mode else None,
            uid=attr.st_uid if fields.update_uid else None, gid=attr.st_gid if fields.update_gid else None,
        )  # fmt: skip
        if new != current:
            await self._write_thread(self.store.owners.set, name, new)

    def change(
        self, caller: Caller, current: Owner, *, mode: int | None, uid: int | None, gid: int | None
    ) -> Owner:
        """What ``chmod`` / ``chown`` / ``chgrp`` by ``caller`` makes of ``current`` (the Unix rules): the owner (or
        root) changes the mode and the group, to one of the owner's own groups unless root; only root changes the
        owner. NotPermitted otherwise (EPERM, as chmod(2) answers)."""
        if not self.shared:
            raise NotPermitted("chmod and chown need a shared mount (logfs mount --allow-other)")
        owner_or_root = caller.is_root or caller.uid == current.uid
        new = current
        if uid is not None and uid != current.uid:
            if not caller.is_root:
                raise NotPermitted(f"only root changes an owner (uid {caller.uid} asked for {uid})")
            new = Owner(uid, new.gid, new.mode)
        if gid is not None and gid != current.gid:
            if not owner_or_root:
                raise NotPermitted(f"uid {caller.uid} does not own this (uid {current.uid} does)")
            if not caller.is_root and gid not in _groups_of(caller):
                raise NotPermitted(f"uid {caller.uid} is not in group {gid}")
            new = Owner(new.uid, gid, new.mode)
        if mode is not None and mode & MODE_BITS != current.mode:
            if not owner_or_root:
                raise NotPermitted(f"uid {caller.uid} does not own this (uid {current.uid} does)")
            new = Owner(new.uid, new.gid, mode & MODE_BITS)
        return new


def _allows(owner: Owner, caller: Caller, bit: int) -> bool:
    """Whether ``owner``'s mode grants ``caller`` ``bit`` (4 read, 2 write) by the Unix rule: the owner's bits for
    the owner, the group's for a member, the others' for everyone else."""
    if caller.uid == owner.uid:
        return bool(owner.mode & (bit << 6))
    if owner.gid in _groups_of(caller):
        return bool(owner.mode & (bit << 3))
    return bool(owner.mode & bit)


def _groups_of(caller: Caller) -> set[int]:
    """The caller's groups: its primary and supplementary groups, as its process has them now (``/proc``)."""
    groups = {caller.gid}
    try:
        with open(f"/proc/{caller.pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Groups:"):
                    groups.update(int(g) for g in line.split()[1:])
                    break
    except OSError:
        pass
    return groups


def replica_user_ids(text: str) -> frozenset[int]:
    """``replica.users`` as uids: each entry a user name (looked up now) or a uid. ConfigError for an unknown name."""
    ids: set[int] = set()
    for item in filter(None, (part.strip() for part in text.split(","))):
        if item.isdigit():
            ids.add(int(item))
            continue
        try:
            ids.add(pwd.getpwnam(item).pw_uid)
        except KeyError:
            raise invalid_value("replica.users", text, f"no user {item!r} on this machine") from None
    return frozenset(ids)


def caller_of(ctx: object) -> Caller:
    """The :class:`Caller` of a pyfuse3 request context."""
    return Caller(int(getattr(ctx, "uid", os.getuid())), int(getattr(ctx, "gid", os.getgid())),
                  int(getattr(ctx, "pid", 0)))  # fmt: skip
