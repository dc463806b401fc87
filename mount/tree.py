"""Names to nodes against the store (which topics, partitions, transactions and ``hw/`` files exist), and the inode
table that names nodes to the kernel. The node kinds and the paths they stand for are ``mount/nodes.py``'s.

Design note: inode numbers and lookup counts (after pyfuse3's ``developer-notes/lookup_counts.rst``).

* *Stable* nodes (directories, ``config``, ``state``, ``.logfs/*``, ``hw/`` files) get one inode per node, allocated
  on first use and kept for the life of the mount: the node is a name, not an object, so a topic deleted and
  created again reuses its inode and every operation resolves the name afresh (a vanished topic answers ENOENT).
  Their lookup counts need no tracking: nothing is freed.
* *Fresh* nodes get a new inode on every lookup, freed when the kernel forgets it:
  ``at/`` files, because a snapshot's size belongs to its inode (getattr has no file handle), so stat, fstat and
  the bytes read agree only if each lookup is its own inode; write files (``append``, ``append.jsonl``,
  ``batches``), because the kernel holds the inode lock while it waits for a FUSE fsync, so writers sharing one inode
  would stall behind another's fsync; ``follow/`` files, whose names are unbounded. They answer with
  ``entry_timeout=0`` so the next open looks the name up again. Each fresh entry carries a payload (an ``at/``
  file's open RangeView) released when both its lookup count and its open handles reach zero.
* A ``follow/`` name (or a group's ``follow``) looked up again while the kernel holds the inode of its last
  lookup gets that same inode back (:meth:`Tree.follow_entry`), with the start this lookup resolved as its payload
  (``latest`` moves with the HW); each open binds the payload of the name's latest lookup and is a stream of its
  own. Without that, readers opening one name at once livelock in the kernel: with entry_timeout 0 every process
  that finds the dentry (or waits for a lookup of that name in flight) revalidates it by a LOOKUP; a new inode
  fails the revalidation, the kernel drops the dentry and looks the name up again, and that in turn fails the
  revalidations of the others. 200 ``cat follow/latest`` started at once cost 12,600 lookups (63 each), 500 took
  47–90 s to open, and 500 more while a writer appended 1,000 lines a second 22,000 lookups; with the same inode
  back each process needs one or two. The open still starts where ``latest`` was at some moment of the open(2)
  call: every path walk sends at least one LOOKUP (entry_timeout 0), and the payload the open binds comes from
  that lookup or a later one. One exception: while a size-polling reader (``tail``) holds the inode open, its
  start does not move (its size would shrink under ``tail -f``): a lookup with another start gets a new inode.
* pyfuse3 answers READDIRPLUS, so a listed entry is a lookup too: a listed write file gets its own fresh inode,
  counted like one from ``lookup``, and every listed entry carries exact attributes (the kernel caches them).
* ``.logfs/fetch/…`` files are fresh too (each lookup is one fetch: the leader records the follower's offset and
  fixes the response), and the directories above them are stable but list nothing, as ``at/`` does. One thing
  differs: a name looked up again while the kernel still holds its inode gets that same inode back, with the new
  snapshot as its payload (:meth:`Tree.fetch_entry`). With entry_timeout 0 the kernel revalidates a cached dentry by a
  LOOKUP; answered with the same inode it keeps the dentry and updates the size, so a follower at the log end
  (looking one name up again and again) pays one fetch per lookup, not two, and nothing needs the kernel to drop
  dentries (an ``invalidate_entry`` waits for the directory's lock, which a follower's long-polling lookup holds:
  killed then, the mount's process could never exit). The open binds the snapshot of the inode's latest lookup, so
  one fetcher per name is the rule (the follower daemon has one per replica and partition, and looks up, opens,
  reads and closes in turn); two fetchers of one name may read each other's answer, which is still an answer to
  that same name. The table keeps the last FETCH_NAMES_KEPT names per replica and partition; older ones with no
  open handle leave it at once (the kernel forgets their dentries when it reclaims them; a lookup of such a name
  again gets a new inode: a second fetch, as before).
* ``at/`` and ``follow/`` list nothing (their names are looked up, never enumerated, so ``ls -R``, ``find`` and
  Spark never walk an unbounded set of offsets). Lookups of names starting with ``.`` or ``_`` below the root
  (Spark's ``.<name>.crc`` and ``_spark_metadata``) answer ENOENT at once, but for a ``_`` where a user's name is
  looked up (a topic, a group, a transactional id: Kafka's rules allow it, core/names.py), so that what mkdir or a
  commit made can be reached (``_schemas``, a group ``_g``).

Threads: the trio thread only (the table is not locked). Nothing here blocks: topic and partition existence come
from the store's in-memory maps.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyfuse3

from logfs.core.names import validate_group_id
from logfs.core.store import Store
from logfs.mount.coordinatorview import CoordinatorView
from logfs.mount.errors import NoEntry, ReadOnlyMount
from logfs.mount.names import is_hidden, parse_at_name, parse_fetch_name, parse_follow_name, parse_partition_name
from logfs.mount.nodes import (
    APPEND_KINDS,
    COMMITTED_CHILDREN,
    FETCH_DIR_NAME,
    FETCH_SESSION_NAME,
    FORWARD_DIR_NAME,
    FORWARD_DIRS_NAME,
    FORWARD_GROUPS_NAME,
    FORWARD_LABELS_NAME,
    FORWARD_TXNS_NAME,
    FORWARDED_KINDS,
    GROUP_CHILDREN,
    GROUP_KINDS,
    GROUP_PARTITION_CHILDREN,
    LOGFS_CHILDREN,
    LOGFS_DIR_NAME,
    PARTITION_CHILDREN,
    TOPIC_CHILDREN,
    TXN_KINDS,
    TXN_PARTITION_CHILDREN,
    Kind,
    Node,
)

_log = logging.getLogger(__name__)

ROOT_INODE: int = pyfuse3.ROOT_INODE
FOLLOW_KINDS = frozenset({Kind.FOLLOW_FILE, Kind.GROUP_FOLLOW})  # streams: the same start, the same inode
FETCH_NAMES_KEPT = 4  # fetch names per replica and partition whose inodes the table keeps for a repeated lookup


@dataclass(slots=True)
class Entry:
    """One inode the kernel knows: its node, lookup count and open handles (fresh nodes), and a payload.

    Slots and no per-entry dict: with 10,000 partitions an ``ls -R`` leaves the kernel holding some 300,000 inodes,
    and every stable one keeps its entry (and node) for the life of the mount (docs/mount.md, "Request costs")."""

    inode: int
    node: Node
    lookups: int = 0
    opens: int = 0
    payload: Any = None
    created_ns: int = 0


# Directories whose entries are names users give (topics, group ids, transactional ids), where a leading "_" is a name.
_FORWARD_DOT_NAMES = frozenset({FORWARD_DIRS_NAME, FORWARD_GROUPS_NAME, FORWARD_TXNS_NAME, FORWARD_LABELS_NAME})
_NAMED_BY_USERS = frozenset({Kind.TXN_DIR, Kind.TXN, Kind.GROUPS_DIR, Kind.GROUP, Kind.FETCH_REPLICA, Kind.FORWARD_DIR})


class Tree:
    """Names to nodes, nodes to inodes. See the module docstring. Trio thread only."""

    def __init__(self, store: Store, *, on_release: Callable[[Entry], None] | None = None) -> None:
        self.store = store
        self._on_release = on_release
        self._next_inode = ROOT_INODE + 1
        self._entries: dict[int, Entry] = {}
        self._stable: dict[Node, int] = {}
        # on a node that does not lead and forwards (``uses_coordinator_view``, set by the mount): the transactions
        # and labels the coordinator's node showed it, in place of this store's transaction coordinator (not in use)
        self._coordinator_view = CoordinatorView()
        self.uses_coordinator_view: Callable[[], bool] = lambda: False
        # the stable inodes under each topic and each consumer group (what a chmod there changes the attributes of)
        self._stable_below: dict[tuple[str, str], list[int]] = {}
        self._fetch_names: dict[tuple[int, str, int], dict[Node, Entry]] = {}  # (replica, topic, partition): oldest 1st
        self._follow_names: dict[Node, Entry] = {}  # follow/ name → the entry its last counted lookup named
        self._fresh = 0  # how many of _entries are fresh: counted, not walked (the table may hold 300,000 entries)
        root = Node(Kind.ROOT)
        self._entries[ROOT_INODE] = Entry(ROOT_INODE, root)
        self._stable[root] = ROOT_INODE

    # --- names --------------------------------------------------------------------------------------------------

    def resolve(self, parent: Node, name: str) -> Node:
        """The node ``name`` names in directory ``parent``; NoEntry when there is none.

        Existence of topics, partitions and ``hw/`` files is checked here; ``at/`` and ``follow/`` names only
        parse (their offsets are checked by the caller, which may need the disk).
        """
        kind = parent.kind
        if kind is Kind.ROOT:
            if name == LOGFS_DIR_NAME:
                return Node(Kind.LOGFS_DIR)
            if name.startswith(".") or not self.store.has_topic(name):
                raise NoEntry(f"no topic {name!r}")  # "_x" is a topic like any (__consumer_offsets, _schemas)
            return Node(Kind.TOPIC, name)
        if is_hidden(name) and not (
            (name.startswith("_") and kind in _NAMED_BY_USERS)
            or (name == FETCH_SESSION_NAME and kind is Kind.FETCH_REPLICA)
            or (name in _FORWARD_DOT_NAMES and kind is Kind.FORWARD_DIR)
        ):
            raise NoEntry(name)  # Spark's .<name>.crc and _spark_metadata, at once
        if kind is Kind.LOGFS_DIR:
            if name == FETCH_DIR_NAME:
                return Node(Kind.FETCH_DIR)  # looked up, never listed
            if name == FORWARD_DIR_NAME:
                return Node(Kind.FORWARD_DIR)  # looked up, never listed
            return Node(_child(LOGFS_CHILDREN, name))
        if kind.is_fetch:
            return self._resolve_fetch(parent, name)
        if kind is Kind.FORWARD_DIR:
            if name == FORWARD_DIRS_NAME:
                return Node(Kind.FORWARD_DIRS)
            if name == FORWARD_GROUPS_NAME:
                return Node(Kind.GROUPS_DIR, forwarded=True)
            if name == FORWARD_TXNS_NAME:
                return Node(Kind.TXN_DIR, forwarded=True)
            if name == FORWARD_LABELS_NAME:
                return Node(Kind.LABELS_DIR, forwarded=True)
            self._existing_topic(name)
            return Node(Kind.FORWARD_TOPIC, name)
        if kind is Kind.FORWARD_TOPIC:
            if TOPIC_CHILDREN.get(name) in FORWARDED_KINDS:
                return Node(TOPIC_CHILDREN[name], parent.topic, forwarded=True)
            return Node(Kind.FORWARD_PARTITION, parent.topic, self._existing_partition(parent.topic, name))
        if kind is Kind.FORWARD_PARTITION:
            child = _child(PARTITION_CHILDREN, name)
            if child not in APPEND_KINDS:
                raise NoEntry(name)
            return Node(child, parent.topic, parent.partition, forwarded=True)
        if kind in TXN_KINDS:
            return self._resolve_txn(parent, name)
        if kind in GROUP_KINDS:
            return self._resolve_group(parent, name)
        if kind is Kind.LABELS_DIR:
            self.refuse_forwarded_here(parent)
            coordinator = self.store.transactions
            view = self.coordinator_view
            if not (view.has_label(name) if view is not None
                    else coordinator is not None and coordinator.has_committed_label(name)):  # fmt: skip
                raise NoEntry(name)
            return Node(Kind.LABEL, name=name)
        if kind is Kind.TOPIC:
            if name in TOPIC_CHILDREN:
                return Node(TOPIC_CHILDREN[name], parent.topic)
            partition = self._existing_partition(parent.topic, name)
            return Node(Kind.PARTITION, parent.topic, partition)
        if kind is Kind.PARTITION:
            return Node(_child(PARTITION_CHILDREN, name), parent.topic, parent.partition)
        if kind is Kind.COMMITTED:
            return Node(_child(COMMITTED_CHILDREN, name), parent.topic, parent.partition, committed=True)
        if kind is Kind.AT_DIR:
            parse_at_name(name)
            return Node(Kind.AT_FILE, parent.topic, parent.partition, parent.committed, name)
        if kind is Kind.FOLLOW_DIR:
            parse_follow_name(name)
            return Node(Kind.FOLLOW_FILE, parent.topic, parent.partition, parent.committed, name)
        if kind is Kind.HW_DIR:
            return Node(Kind.HW_FILE, parent.topic, parent.partition, parent.committed, name)
        raise NoEntry(name)

    @property
    def coordinator_view(self) -> CoordinatorView | None:
        """What the coordinator's node showed this node; None while this node answers from its own store."""
        return self._coordinator_view if self.uses_coordinator_view() else None

    def forget_coordinator_view(self) -> None:
        """The node's role changed: what another coordinator showed it is not to be trusted any more."""
        self._coordinator_view = CoordinatorView()

    def open_transaction(self, transactional_id: str) -> bool:
        """Whether transaction ``transactional_id`` is open (its directory exists): as this store's coordinator
        knows, or, on a node that does not lead, as the coordinator's node last showed (mount/coordinatorview.py)."""
        if self.coordinator_view is not None:
            return self.coordinator_view.owner(transactional_id) is not None
        coordinator = self.store.transactions
        info = None if coordinator is None else coordinator.get(transactional_id)
        return info is not None and info.state.is_open

    def _resolve_txn(self, parent: Node, name: str) -> Node:
        """A name under ``.logfs/transactions/``: an open transaction, its ``control``, and the topics and
        partitions that exist (writes there land in the transaction)."""
        kind, txn, fwd = parent.kind, parent.txn, parent.forwarded  # fwd: under .logfs/forward/.transactions/
        self.refuse_forwarded_here(parent)
        if kind is Kind.TXN_DIR:
            if not self.open_transaction(name):
                raise NoEntry(name)
            return Node(Kind.TXN, txn=name, forwarded=fwd)
        if kind is Kind.TXN:
            if name == "control":
                return Node(Kind.TXN_CONTROL, txn=txn, forwarded=fwd)
            self._existing_topic(name)
            return Node(Kind.TXN_TOPIC, name, txn=txn, forwarded=fwd)
        if kind is Kind.TXN_TOPIC:
            partition = self._existing_partition(parent.topic, name)
            return Node(Kind.TXN_PARTITION, parent.topic, partition, txn=txn, forwarded=fwd)
        if kind is Kind.TXN_PARTITION:
            return Node(_child(TXN_PARTITION_CHILDREN, name), parent.topic, parent.partition, txn=txn, forwarded=fwd)
        raise NoEntry(name)

    def refuse_forwarded_here(self, directory: Node) -> None:
        """A transaction's or label's forwarded twin (``.logfs/forward/.transactions/``, ``.labels/``) asked of a
        node that does not lead: EROFS, so the node that asks tries the next leader (never forwarded again)."""
        if directory.forwarded and self.coordinator_view is not None:
            raise ReadOnlyMount(f"{directory}: this node does not coordinate transactions now")

    def _existing_topic(self, name: str) -> None:
        """A topic name under a scoped directory (transactions, groups, fetch) names an existing topic, or ENOENT."""
        if not self.store.has_topic(name):
            raise NoEntry(name)

    def _existing_partition(self, topic: str, name: str) -> int:
        """A partition name (canonical digits) of an existing partition of ``topic``, or ENOENT."""
        partition = parse_partition_name(name)
        if partition is None or partition not in self.store.partitions(topic):
            raise NoEntry(name)
        return partition

    def _resolve_group(self, parent: Node, name: str) -> Node:
        """A name under ``.logfs/groups/``: any group id of Kafka's name rules (no mkdir: a commit makes it; another
        name is refused here, EINVAL or ENAMETOOLONG, since this lookup is where a group's name comes in), its
        ``config`` and ``lag``, and the topics and partitions that exist (mount/groups.py); the same names under
        ``.logfs/forward/.groups/`` for another node's commits (mount/forwarding.py)."""
        kind, group, fwd = parent.kind, parent.group, parent.forwarded  # under .logfs/forward/.groups/: forwarded
        if kind is Kind.GROUPS_DIR:
            validate_group_id(name)
            return Node(Kind.GROUP, group=name, forwarded=fwd)
        if kind is Kind.GROUP:
            if name in GROUP_CHILDREN:
                return Node(GROUP_CHILDREN[name], group=group, forwarded=fwd)
            self._existing_topic(name)
            return Node(Kind.GROUP_TOPIC, name, group=group, forwarded=fwd)
        if kind is Kind.GROUP_TOPIC:
            partition = self._existing_partition(parent.topic, name)
            return Node(Kind.GROUP_PARTITION, parent.topic, partition, group=group, forwarded=fwd)
        if kind is Kind.GROUP_PARTITION:
            child = _child(GROUP_PARTITION_CHILDREN, name)
            return Node(child, parent.topic, parent.partition, group=group, forwarded=fwd)
        raise NoEntry(name)

    def _resolve_fetch(self, parent: Node, name: str) -> Node:
        """A name under ``.logfs/fetch/``. The replica id only parses here (whether it may fetch is the mount's
        rule: EPERM); topics and partitions must exist."""
        kind = parent.kind
        if kind is Kind.FETCH_DIR:
            replica = parse_partition_name(name)  # the same canonical digits
            if replica is None:
                raise NoEntry(name)
            return Node(Kind.FETCH_REPLICA, replica=replica)
        if kind is Kind.FETCH_REPLICA:
            if name == FETCH_SESSION_NAME:  # no topic can take it: topic names never start with "."
                return Node(Kind.FETCH_SESSION, name=name, replica=parent.replica)
            self._existing_topic(name)
            return Node(Kind.FETCH_TOPIC, name, replica=parent.replica)
        if kind is Kind.FETCH_TOPIC:
            partition = self._existing_partition(parent.topic, name)
            return Node(Kind.FETCH_PARTITION, parent.topic, partition, replica=parent.replica)
        if kind is Kind.FETCH_PARTITION:
            parse_fetch_name(name)
            return Node(Kind.FETCH_FILE, parent.topic, parent.partition, name=name, replica=parent.replica)
        raise NoEntry(name)

    def children(self, node: Node, hw_names: list[str] | None = None) -> list[tuple[str, Node]]:
        """What ``readdir`` lists in ``node`` (``hw_names``: the ``hw/`` files, which the caller computes)."""
        k = node.kind
        if k is Kind.ROOT:
            return [(LOGFS_DIR_NAME, Node(Kind.LOGFS_DIR))] + [(t, Node(Kind.TOPIC, t)) for t in self.store.topics()]
        if k is Kind.LOGFS_DIR:
            return [(name, Node(kind)) for name, kind in LOGFS_CHILDREN.items()]
        fwd = node.forwarded
        if k is Kind.TXN_DIR:
            coordinator = self.store.transactions
            if self.coordinator_view is not None:
                names = self.coordinator_view.open_transactions()
            else:
                opened = [] if coordinator is None else coordinator.open_transactions()
                names = [t.transactional_id for t in opened if t.state.is_open]
            return [(t, Node(Kind.TXN, txn=t, forwarded=fwd)) for t in names]
        if k is Kind.TXN:
            topics = [(t, Node(Kind.TXN_TOPIC, t, txn=node.txn, forwarded=fwd)) for t in self.store.topics()]
            return [("control", Node(Kind.TXN_CONTROL, txn=node.txn, forwarded=fwd)), *topics]
        if k is Kind.TXN_TOPIC:
            return [
                (str(p), Node(Kind.TXN_PARTITION, node.topic, p, txn=node.txn, forwarded=fwd))
                for p in self.store.partitions(node.topic)
            ]
        if k is Kind.TXN_PARTITION:
            return [
                (name, Node(kind, node.topic, node.partition, txn=node.txn, forwarded=fwd))
                for name, kind in TXN_PARTITION_CHILDREN.items()
            ]
        if k is Kind.TOPIC:
            fixed = [(name, Node(kind, node.topic)) for name, kind in TOPIC_CHILDREN.items()]
            return fixed + [(str(p), Node(Kind.PARTITION, node.topic, p)) for p in self.store.partitions(node.topic)]
        if k is Kind.PARTITION:
            return [(name, Node(kind, node.topic, node.partition)) for name, kind in PARTITION_CHILDREN.items()]
        if k is Kind.COMMITTED:
            return [
                (name, Node(kind, node.topic, node.partition, committed=True))
                for name, kind in COMMITTED_CHILDREN.items()
            ]
        if k is Kind.HW_DIR:
            return [
                (name, Node(Kind.HW_FILE, node.topic, node.partition, node.committed, name)) for name in hw_names or []
            ]
        return []  # at/, follow/ and everything under .logfs/fetch/ list nothing

    # --- inodes -------------------------------------------------------------------------------------------------

    def stable_inode(self, node: Node) -> int:
        """The inode of a stable node (allocated on first use)."""
        assert not node.kind.fresh, f"{node} gets a fresh inode per lookup"
        inode = self._stable.get(node)
        if inode is None:
            inode = self._allocate()
            self._stable[node] = inode
            self._entries[inode] = Entry(inode, node)
            owner = _owning_name(node)
            if owner is not None:
                self._stable_below.setdefault(owner, []).append(inode)
        return inode

    def invalidate_attributes_below(self, node: Node, answered: int = 0) -> None:
        """After the owner or mode of ``node`` (a topic or a consumer group) changed (a chmod, chgrp or chown; a
        group's claim): the kernel forgets the attributes it cached of every stable node that takes its owner and
        mode from it (mount/access.py), which it would otherwise keep for up to a second (mount/reads.py's
        STABLE_TIMEOUT_S); ``answered``, the inode whose new attributes the request's reply carries, excepted. Fresh
        nodes are looked up again at every open. Attributes only: no page cache is dropped and no inode or directory
        lock is taken (no writeback cache; the kernel holds only its superblock's unmount lock for reading), so this
        cannot wait on another request. O(nodes of that topic or group), never of the mount."""
        owner = _owning_name(node)
        for inode in self._stable_below.get(owner, ()) if owner is not None else ():
            if inode != answered:
                try:
                    pyfuse3.invalidate_inode(pyfuse3.InodeT(inode), attr_only=True)
                except OSError as exc:
                    if exc.errno != errno.ENOENT:  # ENOENT: the kernel does not hold that inode
                        _log.warning("invalidating the attributes of inode %d: %s", inode, exc)
                        return

    def listed_inode(self, node: Node) -> int:
        """The inode number a listing gives a name it does not look up (``mount/direntry.py``): a stable node's
        inode; for a fresh node, whose every lookup is a new inode, a number of its own that no lookup will give."""
        return self._allocate() if node.kind.fresh else self.stable_inode(node)

    def add_fresh(self, node: Node, payload: Any = None, created_ns: int = 0) -> Entry:
        """A new inode for one lookup of a fresh node; the caller counts the lookup with :meth:`remember`."""
        assert node.kind.fresh, f"{node} is not a fresh node"
        entry = Entry(self._allocate(), node, payload=payload, created_ns=created_ns)
        self._entries[entry.inode] = entry
        self._fresh += 1
        return entry

    def fetch_entry(self, node: Node, payload: Any, created_ns: int) -> Entry:
        """The entry of one lookup of a fetch file: the inode of that name's last lookup when the table still holds it
        (its payload and time replaced: the open binds the latest), else a new one; the caller counts the lookup with
        :meth:`remember`. See the module docstring."""
        names = self._fetch_names.setdefault((node.replica, node.topic, node.partition), {})
        entry = names.pop(node, None)
        if entry is None:
            entry = self.add_fresh(node, payload, created_ns)
        else:
            entry.payload, entry.created_ns = payload, created_ns
        names[node] = entry  # the newest last
        excess = max(0, len(names) - FETCH_NAMES_KEPT)
        for old in [e for e in names.values() if e.opens == 0 and e.lookups and e is not entry][:excess]:
            del names[old.node]
            self._release(old)  # the kernel may still hold it: a getattr answers ENOENT, a lookup gets a new inode
        return entry

    def follow_entry(self, node: Node, payload: Any, created_ns: int) -> Entry:
        """The entry of one lookup of a ``follow/`` name or a group's ``follow``: the inode its last counted lookup
        named, while the kernel still holds it, with ``payload`` (a ``FollowStart``: format and start offset) as its
        payload now unless that is pinned (``FollowStart.pinned``: a size-polling reader holds it); else a new one.
        The caller counts the lookup with :meth:`remember`. See the module docstring."""
        entry = self._follow_names.get(node)
        if entry is not None and entry.lookups > 0:
            if entry.payload == payload:
                return entry
            if not entry.payload.pinned:
                entry.payload, entry.created_ns = payload, created_ns
                return entry
        return self.add_fresh(node, payload, created_ns)

    def remember(self, entry: Entry) -> None:
        """Count one successful lookup (or mkdir) reply naming ``entry``."""
        entry.lookups += 1
        if entry.node.kind in FOLLOW_KINDS:
            # A FORGET of all its earlier lookups may have been handled while this lookup awaited its attributes;
            # the reply names the inode again, so the table holds it again (a follow/ payload holds no resource).
            if entry.inode not in self._entries:
                self._entries[entry.inode] = entry
                self._fresh += 1
            self._follow_names[entry.node] = entry

    def entry(self, inode: int) -> Entry:
        """The entry of a known inode; NoEntry for one the table does not hold (forgotten, or never given)."""
        entry = self._entries.get(inode)
        if entry is None:
            raise NoEntry(f"inode {inode}")
        return entry

    def forget(self, inode: int, count: int) -> None:
        """The kernel dropped ``count`` lookups of ``inode``: a fresh entry with none left and no open handle goes."""
        entry = self._entries.get(inode)
        if entry is None or not entry.node.kind.fresh:
            return
        entry.lookups = max(0, entry.lookups - count)
        self._maybe_release(entry)

    def opened(self, entry: Entry) -> None:
        entry.opens += 1

    def closed(self, entry: Entry) -> None:
        entry.opens = max(0, entry.opens - 1)
        self._maybe_release(entry)

    def _maybe_release(self, entry: Entry) -> None:
        if entry.node.kind.fresh and entry.lookups == 0 and entry.opens == 0:
            if entry.node.kind is Kind.FETCH_FILE:
                key = (entry.node.replica, entry.node.topic, entry.node.partition)
                names = self._fetch_names.get(key, {})
                if names.get(entry.node) is entry:
                    del names[entry.node]
                if not names:
                    self._fetch_names.pop(key, None)
            elif entry.node.kind in FOLLOW_KINDS and self._follow_names.get(entry.node) is entry:
                del self._follow_names[entry.node]
            self._release(entry)

    def _release(self, entry: Entry) -> None:
        if self._entries.pop(entry.inode, None) is not None:
            self._fresh -= 1  # only fresh entries are ever released
            if self._on_release is not None:
                self._on_release(entry)

    def release_all(self) -> None:
        """At unmount: release every fresh entry's payload (the kernel need not forget everything)."""
        self._fetch_names.clear()
        self._follow_names.clear()
        for entry in [e for e in self._entries.values() if e.node.kind.fresh]:
            self._release(entry)

    @property
    def fresh_entries(self) -> int:
        """How many fresh inodes the table holds (``.logfs/metrics``); O(1)."""
        return self._fresh

    def _allocate(self) -> int:
        inode = self._next_inode
        self._next_inode += 1
        return inode


def _owning_name(node: Node) -> tuple[str, str] | None:
    """("topic", name) or ("group", name): whose owner and mode ``node``'s attributes take (mount/access.py); None for
    the rest (the root, ``.logfs/``, transactions, fetches)."""
    if node.group:
        return ("group", node.group)
    if node.topic and not node.txn and not node.kind.is_fetch:
        return ("topic", node.topic)
    return None


def _child(children: dict[str, Kind], name: str) -> Kind:
    kind = children.get(name)
    if kind is None:
        raise NoEntry(name)
    return kind
