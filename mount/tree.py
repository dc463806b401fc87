"""The tree under the mount point (spec §2) as node kinds, and the inode table that names them to the kernel.

Paths::

    /                                   ROOT
    /.logfs/                            LOGFS_DIR
        metrics                         METRICS            r   Prometheus text
        delete-topic, delete-records    DELETE_TOPIC, DELETE_RECORDS   w   one command per line
        producer-id                     PRODUCER_ID        r   each open: a fresh "<producer id> <epoch>"
        labels/<label>                  LABELS_DIR, LABEL  exists once a commit recorded <label> (lists nothing)
        transactions/                   TXN_DIR            lists the open transactions; mkdir <id> begins one
            <id>/                       TXN                while transaction <id> is open
                control                 TXN_CONTROL        w   "commit [<label>]" or "abort"
                <topic>/<partition>/    TXN_TOPIC, TXN_PARTITION
                    append, append.jsonl, batches   APPEND, APPEND_JSONL, BATCHES (Node.txn = <id>)   w
        fetch/                          FETCH_DIR          the replication fetch files (docs/replication.md); looked up,
            <replica id>/               FETCH_REPLICA      never listed: every directory below lists nothing
                <topic>/                FETCH_TOPIC
                    <partition>/        FETCH_PARTITION
                        <offset>.<epoch>    FETCH_FILE     r   a follower's fetch: a snapshot fixed at lookup
    /<topic>/                           TOPIC              mkdir creates it, rmdir removes it when it holds no record
        append, append.jsonl            TOPIC_APPEND, TOPIC_APPEND_JSONL   w   partitioned as Kafka's producer does
        config                          CONFIG             rw  key=value lines
        <partition>/                    PARTITION          0 … N-1, written without leading zeros
            append, append.jsonl, batches   APPEND, APPEND_JSONL, BATCHES   w
            state                       STATE              r   JSON
            at/                         AT_DIR             lists nothing; <offset>, earliest, @<ms>, <a>-<b>
                <name>                  AT_FILE            r   a snapshot fixed at lookup
            follow/                     FOLLOW_DIR         lists nothing; <offset>, earliest, @<ms>, latest
                <name>                  FOLLOW_FILE        r   a stream
            hw/                         HW_DIR             one <20-digit base offset>.jsonl per segment
                <file>                  HW_FILE            r   committed records of that segment
            committed/                  COMMITTED          at/, follow/ and hw/ again, bounded by the last stable
                                                           offset, aborted transactions and markers left out

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
* pyfuse3 answers READDIRPLUS, so a listed entry is a lookup too: a listed write file gets its own fresh inode,
  counted like one from ``lookup``, and every listed entry carries exact attributes (the kernel caches them).
* ``.logfs/fetch/…`` files are fresh too (each lookup is one fetch: the leader records the follower's offset and
  fixes the response), and the directories above them are stable but list nothing, as ``at/`` does.
* ``at/`` and ``follow/`` list nothing (their names are looked up, never enumerated, so ``ls -R``, ``find`` and
  Spark never walk an unbounded set of offsets). Lookups of names starting with ``.`` or ``_`` below the root
  (Spark's ``.<name>.crc`` and ``_spark_metadata``) answer ENOENT at once.

Threads: the trio thread only (the table is not locked). Nothing here blocks: topic and partition existence come
from the store's in-memory maps.
"""

from __future__ import annotations

import enum
import errno
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyfuse3

from logfs.core.store import Store
from logfs.mount.views import Format, parse_range, parse_view_name

ROOT_INODE: int = pyfuse3.ROOT_INODE
LOGFS_DIR_NAME = ".logfs"
_PARTITION_NAME = re.compile(r"0|[1-9][0-9]{0,9}")


@enum.unique
class Kind(enum.Enum):
    """What a node is. The value: (a unique name, is a directory, permission bits, fresh inode per lookup); the
    name keeps members with equal properties distinct (Enum makes members with equal values aliases)."""

    ROOT = ("root", True, 0o755, False)
    LOGFS_DIR = ("logfs_dir", True, 0o555, False)
    METRICS = ("metrics", False, 0o444, False)
    DELETE_TOPIC = ("delete_topic", False, 0o220, False)
    DELETE_RECORDS = ("delete_records", False, 0o220, False)
    TOPIC = ("topic", True, 0o755, False)
    TOPIC_APPEND = ("topic_append", False, 0o660, True)
    TOPIC_APPEND_JSONL = ("topic_append_jsonl", False, 0o660, True)
    CONFIG = ("config", False, 0o644, False)
    PARTITION = ("partition", True, 0o555, False)
    APPEND = ("append", False, 0o660, True)
    APPEND_JSONL = ("append_jsonl", False, 0o660, True)
    BATCHES = ("batches", False, 0o660, True)
    STATE = ("state", False, 0o444, False)
    COMMITTED = ("committed", True, 0o555, False)
    AT_DIR = ("at_dir", True, 0o555, False)
    FOLLOW_DIR = ("follow_dir", True, 0o555, False)
    HW_DIR = ("hw_dir", True, 0o555, False)
    AT_FILE = ("at_file", False, 0o444, True)
    FOLLOW_FILE = ("follow_file", False, 0o444, True)
    HW_FILE = ("hw_file", False, 0o444, False)
    FETCH_DIR = ("fetch_dir", True, 0o555, False)
    FETCH_REPLICA = ("fetch_replica", True, 0o555, False)
    FETCH_TOPIC = ("fetch_topic", True, 0o555, False)
    FETCH_PARTITION = ("fetch_partition", True, 0o555, False)
    FETCH_FILE = ("fetch_file", False, 0o444, True)
    PRODUCER_ID = ("producer_id", False, 0o444, False)
    LABELS_DIR = ("labels_dir", True, 0o555, False)
    LABEL = ("label", False, 0o444, True)
    TXN_DIR = ("txn_dir", True, 0o755, False)
    TXN = ("txn", True, 0o755, False)
    TXN_CONTROL = ("txn_control", False, 0o220, False)
    TXN_TOPIC = ("txn_topic", True, 0o555, False)
    TXN_PARTITION = ("txn_partition", True, 0o555, False)

    @property
    def is_dir(self) -> bool:
        return bool(self.value[1])

    @property
    def permissions(self) -> int:
        return int(self.value[2])

    @property
    def mode(self) -> int:
        return (stat.S_IFDIR if self.is_dir else stat.S_IFREG) | self.permissions

    @property
    def fresh(self) -> bool:
        return bool(self.value[3])

    @property
    def write_only(self) -> bool:
        """A write file: an O_RDONLY open is refused (EACCES); O_RDWR reads produce responses."""
        return self in WRITE_KINDS

    @property
    def read_only(self) -> bool:
        return not self.is_dir and self.permissions & 0o222 == 0

    @property
    def is_fetch(self) -> bool:
        """Under ``.logfs/fetch/``: served only by a leader's mount."""
        return self in FETCH_KINDS


_APPEND_KINDS = frozenset({Kind.TOPIC_APPEND, Kind.TOPIC_APPEND_JSONL, Kind.APPEND, Kind.APPEND_JSONL, Kind.BATCHES})
WRITE_KINDS = _APPEND_KINDS | {Kind.DELETE_TOPIC, Kind.DELETE_RECORDS, Kind.TXN_CONTROL}
TXN_KINDS = frozenset({Kind.TXN_DIR, Kind.TXN, Kind.TXN_CONTROL, Kind.TXN_TOPIC, Kind.TXN_PARTITION})
FETCH_KINDS = frozenset({Kind.FETCH_DIR, Kind.FETCH_REPLICA, Kind.FETCH_TOPIC, Kind.FETCH_PARTITION, Kind.FETCH_FILE})


@dataclass(frozen=True, slots=True)
class Node:
    """A path, by its parts: the kind, and the topic, partition, ``committed/`` flag, file name, (under
    ``.logfs/fetch/``) replica id and (under ``.logfs/transactions/``) transactional id it needs."""

    kind: Kind
    topic: str = ""
    partition: int = -1
    committed: bool = False
    name: str = ""
    replica: int = -1
    txn: str = ""

    def __str__(self) -> str:
        if self.kind in (Kind.LABELS_DIR, Kind.LABEL):
            return "/" + "/".join(p for p in (LOGFS_DIR_NAME, LABELS_DIR_NAME, self.name) if p)
        if self.txn or self.kind is Kind.TXN_DIR:
            parts = [LOGFS_DIR_NAME, TXN_DIR_NAME, self.txn, self.topic]
            parts += [str(self.partition)] if self.partition >= 0 else []
            parts += [] if self.kind in TXN_KINDS and self.kind is not Kind.TXN_CONTROL else [_NAMES[self.kind]]
            return "/" + "/".join(p for p in parts if p)
        if self.kind.is_fetch:
            fetch = [LOGFS_DIR_NAME, "fetch", *([str(self.replica)] if self.replica >= 0 else [])]
            fetch += [self.topic] if self.topic else []
            fetch += [str(self.partition)] if self.partition >= 0 else []
            return "/" + "/".join([*fetch, *([self.name] if self.name else [])])
        parts = [self.topic] if self.topic else []
        if self.partition >= 0:
            parts.append(str(self.partition))
        if self.committed:
            parts.append("committed")
        parts.append(_NAMES.get(self.kind, self.name))
        return "/" + "/".join(p for p in parts if p)


_NAMES = {
    Kind.ROOT: "",
    Kind.LOGFS_DIR: LOGFS_DIR_NAME,
    Kind.TOPIC: "",
    Kind.PARTITION: "",
    Kind.COMMITTED: "",
    Kind.METRICS: ".logfs/metrics",
    Kind.DELETE_TOPIC: ".logfs/delete-topic",
    Kind.DELETE_RECORDS: ".logfs/delete-records",
    Kind.TOPIC_APPEND: "append",
    Kind.TOPIC_APPEND_JSONL: "append.jsonl",
    Kind.CONFIG: "config",
    Kind.APPEND: "append",
    Kind.APPEND_JSONL: "append.jsonl",
    Kind.BATCHES: "batches",
    Kind.STATE: "state",
    Kind.AT_DIR: "at",
    Kind.FOLLOW_DIR: "follow",
    Kind.HW_DIR: "hw",
    Kind.TXN_CONTROL: "control",
}

# Children with fixed names, per directory kind.
TXN_DIR_NAME = "transactions"
LABELS_DIR_NAME = "labels"
_LOGFS_CHILDREN = {
    "metrics": Kind.METRICS,
    "delete-topic": Kind.DELETE_TOPIC,
    "delete-records": Kind.DELETE_RECORDS,
    "producer-id": Kind.PRODUCER_ID,
    TXN_DIR_NAME: Kind.TXN_DIR,
    LABELS_DIR_NAME: Kind.LABELS_DIR,
}
_TXN_PARTITION_CHILDREN = {"append": Kind.APPEND, "append.jsonl": Kind.APPEND_JSONL, "batches": Kind.BATCHES}
_TOPIC_CHILDREN = {"append": Kind.TOPIC_APPEND, "append.jsonl": Kind.TOPIC_APPEND_JSONL, "config": Kind.CONFIG}
_PARTITION_CHILDREN = {
    "append": Kind.APPEND,
    "append.jsonl": Kind.APPEND_JSONL,
    "batches": Kind.BATCHES,
    "state": Kind.STATE,
    "at": Kind.AT_DIR,
    "follow": Kind.FOLLOW_DIR,
    "hw": Kind.HW_DIR,
    "committed": Kind.COMMITTED,
}
_COMMITTED_CHILDREN = {"at": Kind.AT_DIR, "follow": Kind.FOLLOW_DIR, "hw": Kind.HW_DIR}


_FETCH_NAME = re.compile(r"(0|[1-9][0-9]{0,18})\.(-1|0|[1-9][0-9]{0,9})")
FETCH_DIR_NAME = "fetch"


def no_entry() -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(errno.ENOENT)


def parse_fetch_name(name: str) -> tuple[int, int]:
    """A fetch file's name ``<fetch offset>.<last fetched epoch>`` → ``(offset, epoch)`` (epoch -1: none); ENOENT
    for anything else."""
    m = _FETCH_NAME.fullmatch(name)
    if m is None:
        raise no_entry()
    return int(m[1]), int(m[2])


def parse_partition_name(name: str) -> int | None:
    """``"7"`` → 7; None for anything that is not a partition directory's name (``"07"``, ``"x"``)."""
    return int(name) if _PARTITION_NAME.fullmatch(name) else None


@dataclass(frozen=True, slots=True)
class ViewName:
    """A parsed ``at/`` or ``follow/`` name: its stem, format, and the range when the stem is ``<start>-<end>``."""

    stem: str
    fmt: Format
    range: tuple[int, int] | None


def parse_at_name(name: str) -> ViewName:
    """An ``at/`` name (no ``latest``); ENOENT for anything else."""
    view = _parse_view(name)
    if view.stem == "latest":
        raise no_entry()
    return view


def parse_follow_name(name: str) -> ViewName:
    """A ``follow/`` name (no ranges); ENOENT for anything else."""
    view = _parse_view(name)
    if view.range is not None:
        raise no_entry()
    return view


def _parse_view(name: str) -> ViewName:
    try:
        stem, fmt = parse_view_name(name)
    except ValueError:
        raise no_entry() from None
    return ViewName(stem, fmt, parse_range(stem))


@dataclass(slots=True)
class Entry:
    """One inode the kernel knows: its node, lookup count and open handles (fresh nodes), and a payload."""

    inode: int
    node: Node
    lookups: int = 0
    opens: int = 0
    payload: Any = None
    created_ns: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Tree:
    """Names to nodes, nodes to inodes. See the module docstring. Trio thread only."""

    def __init__(self, store: Store, *, on_release: Callable[[Entry], None] | None = None) -> None:
        self.store = store
        self._on_release = on_release
        self._next_inode = ROOT_INODE + 1
        self._entries: dict[int, Entry] = {}
        self._stable: dict[Node, int] = {}
        root = Node(Kind.ROOT)
        self._entries[ROOT_INODE] = Entry(ROOT_INODE, root)
        self._stable[root] = ROOT_INODE

    # --- names --------------------------------------------------------------------------------------------------

    def resolve(self, parent: Node, name: str) -> Node:
        """The node ``name`` names in directory ``parent``; ENOENT when there is none.

        Existence of topics, partitions and ``hw/`` files is checked here; ``at/`` and ``follow/`` names only
        parse (their offsets are checked by the caller, which may need the disk).
        """
        kind = parent.kind
        if kind is Kind.ROOT:
            if name == LOGFS_DIR_NAME:
                return Node(Kind.LOGFS_DIR)
            if name.startswith((".", "_")) or not self.store.has_topic(name):
                raise no_entry()
            return Node(Kind.TOPIC, name)
        if name.startswith((".", "_")):
            raise no_entry()  # Spark's .<name>.crc and _spark_metadata, at once
        if kind is Kind.LOGFS_DIR:
            if name == FETCH_DIR_NAME:
                return Node(Kind.FETCH_DIR)  # looked up, never listed
            return Node(_child(_LOGFS_CHILDREN, name))
        if kind.is_fetch:
            return self._resolve_fetch(parent, name)
        if kind in TXN_KINDS:
            return self._resolve_txn(parent, name)
        if kind is Kind.LABELS_DIR:
            coordinator = self.store.transactions
            if coordinator is None or not coordinator.has_committed_label(name):
                raise no_entry()
            return Node(Kind.LABEL, name=name)
        if kind is Kind.TOPIC:
            if name in _TOPIC_CHILDREN:
                return Node(_TOPIC_CHILDREN[name], parent.topic)
            partition = parse_partition_name(name)
            if partition is None or partition not in self.store.partitions(parent.topic):
                raise no_entry()
            return Node(Kind.PARTITION, parent.topic, partition)
        if kind is Kind.PARTITION:
            return Node(_child(_PARTITION_CHILDREN, name), parent.topic, parent.partition)
        if kind is Kind.COMMITTED:
            return Node(_child(_COMMITTED_CHILDREN, name), parent.topic, parent.partition, committed=True)
        if kind is Kind.AT_DIR:
            parse_at_name(name)
            return Node(Kind.AT_FILE, parent.topic, parent.partition, parent.committed, name)
        if kind is Kind.FOLLOW_DIR:
            parse_follow_name(name)
            return Node(Kind.FOLLOW_FILE, parent.topic, parent.partition, parent.committed, name)
        if kind is Kind.HW_DIR:
            return Node(Kind.HW_FILE, parent.topic, parent.partition, parent.committed, name)
        raise no_entry()

    def open_transaction(self, transactional_id: str) -> bool:
        """Whether transaction ``transactional_id`` is open (its directory exists)."""
        coordinator = self.store.transactions
        info = None if coordinator is None else coordinator.get(transactional_id)
        return info is not None and info.state.is_open

    def _resolve_txn(self, parent: Node, name: str) -> Node:
        """A name under ``.logfs/transactions/``: an open transaction, its ``control``, and the topics and
        partitions that exist (writes there land in the transaction)."""
        kind, txn = parent.kind, parent.txn
        if kind is Kind.TXN_DIR:
            if not self.open_transaction(name):
                raise no_entry()
            return Node(Kind.TXN, txn=name)
        if kind is Kind.TXN:
            if name == "control":
                return Node(Kind.TXN_CONTROL, txn=txn)
            if not self.store.has_topic(name):
                raise no_entry()
            return Node(Kind.TXN_TOPIC, name, txn=txn)
        if kind is Kind.TXN_TOPIC:
            partition = parse_partition_name(name)
            if partition is None or partition not in self.store.partitions(parent.topic):
                raise no_entry()
            return Node(Kind.TXN_PARTITION, parent.topic, partition, txn=txn)
        if kind is Kind.TXN_PARTITION:
            return Node(_child(_TXN_PARTITION_CHILDREN, name), parent.topic, parent.partition, txn=txn)
        raise no_entry()

    def _resolve_fetch(self, parent: Node, name: str) -> Node:
        """A name under ``.logfs/fetch/``. The replica id only parses here (whether it may fetch is the mount's
        rule: EPERM); topics and partitions must exist."""
        kind = parent.kind
        if kind is Kind.FETCH_DIR:
            replica = parse_partition_name(name)  # the same canonical digits
            if replica is None:
                raise no_entry()
            return Node(Kind.FETCH_REPLICA, replica=replica)
        if kind is Kind.FETCH_REPLICA:
            if not self.store.has_topic(name):
                raise no_entry()
            return Node(Kind.FETCH_TOPIC, name, replica=parent.replica)
        if kind is Kind.FETCH_TOPIC:
            partition = parse_partition_name(name)
            if partition is None or partition not in self.store.partitions(parent.topic):
                raise no_entry()
            return Node(Kind.FETCH_PARTITION, parent.topic, partition, replica=parent.replica)
        if kind is Kind.FETCH_PARTITION:
            parse_fetch_name(name)
            return Node(Kind.FETCH_FILE, parent.topic, parent.partition, name=name, replica=parent.replica)
        raise no_entry()

    def parent(self, node: Node) -> Node:
        """The directory holding ``node`` (the root's parent is the root)."""
        k = node.kind
        if k in (Kind.ROOT, Kind.LOGFS_DIR, Kind.TOPIC):
            return Node(Kind.ROOT)
        if k.is_fetch:
            return _fetch_parent(node)
        if k in (Kind.METRICS, Kind.DELETE_TOPIC, Kind.DELETE_RECORDS, Kind.PRODUCER_ID, Kind.TXN_DIR, Kind.LABELS_DIR):
            return Node(Kind.LOGFS_DIR)
        if k is Kind.LABEL:
            return Node(Kind.LABELS_DIR)
        if node.txn:
            return _txn_parent(node)
        if k in (Kind.TOPIC_APPEND, Kind.TOPIC_APPEND_JSONL, Kind.CONFIG, Kind.PARTITION):
            return Node(Kind.TOPIC, node.topic)
        if k in (Kind.AT_FILE, Kind.FOLLOW_FILE, Kind.HW_FILE):
            dir_kind = {Kind.AT_FILE: Kind.AT_DIR, Kind.FOLLOW_FILE: Kind.FOLLOW_DIR, Kind.HW_FILE: Kind.HW_DIR}[k]
            return Node(dir_kind, node.topic, node.partition, node.committed)
        if node.committed and k in (Kind.AT_DIR, Kind.FOLLOW_DIR, Kind.HW_DIR):
            return Node(Kind.COMMITTED, node.topic, node.partition)
        return Node(Kind.PARTITION, node.topic, node.partition)

    def children(self, node: Node, hw_names: list[str] | None = None) -> list[tuple[str, Node]]:
        """What ``readdir`` lists in ``node`` (``hw_names``: the ``hw/`` files, which the caller computes)."""
        k = node.kind
        if k is Kind.ROOT:
            return [(LOGFS_DIR_NAME, Node(Kind.LOGFS_DIR))] + [(t, Node(Kind.TOPIC, t)) for t in self.store.topics()]
        if k is Kind.LOGFS_DIR:
            return [(name, Node(kind)) for name, kind in _LOGFS_CHILDREN.items()]
        if k is Kind.TXN_DIR:
            coordinator = self.store.transactions
            opened = [] if coordinator is None else coordinator.open_transactions()
            return [(t.transactional_id, Node(Kind.TXN, txn=t.transactional_id)) for t in opened if t.state.is_open]
        if k is Kind.TXN:
            topics = [(t, Node(Kind.TXN_TOPIC, t, txn=node.txn)) for t in self.store.topics()]
            return [("control", Node(Kind.TXN_CONTROL, txn=node.txn)), *topics]
        if k is Kind.TXN_TOPIC:
            return [
                (str(p), Node(Kind.TXN_PARTITION, node.topic, p, txn=node.txn))
                for p in self.store.partitions(node.topic)
            ]
        if k is Kind.TXN_PARTITION:
            return [
                (name, Node(kind, node.topic, node.partition, txn=node.txn))
                for name, kind in _TXN_PARTITION_CHILDREN.items()
            ]
        if k is Kind.TOPIC:
            fixed = [(name, Node(kind, node.topic)) for name, kind in _TOPIC_CHILDREN.items()]
            return fixed + [(str(p), Node(Kind.PARTITION, node.topic, p)) for p in self.store.partitions(node.topic)]
        if k is Kind.PARTITION:
            return [(name, Node(kind, node.topic, node.partition)) for name, kind in _PARTITION_CHILDREN.items()]
        if k is Kind.COMMITTED:
            return [
                (name, Node(kind, node.topic, node.partition, committed=True))
                for name, kind in _COMMITTED_CHILDREN.items()
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
        return inode

    def add_fresh(self, node: Node, payload: Any = None, created_ns: int = 0) -> Entry:
        """A new inode for one lookup of a fresh node; the caller counts the lookup with :meth:`remember`."""
        assert node.kind.fresh, f"{node} is not a fresh node"
        entry = Entry(self._allocate(), node, payload=payload, created_ns=created_ns)
        self._entries[entry.inode] = entry
        return entry

    def remember(self, entry: Entry) -> None:
        """Count one successful lookup (or mkdir) reply naming ``entry``."""
        entry.lookups += 1

    def entry(self, inode: int) -> Entry:
        """The entry of a known inode; ENOENT for one the table does not hold (forgotten, or never given)."""
        entry = self._entries.get(inode)
        if entry is None:
            raise no_entry()
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
            del self._entries[entry.inode]
            if self._on_release is not None:
                self._on_release(entry)

    def release_all(self) -> None:
        """At unmount: release every fresh entry's payload (the kernel need not forget everything)."""
        for entry in [e for e in self._entries.values() if e.node.kind.fresh]:
            del self._entries[entry.inode]
            if self._on_release is not None:
                self._on_release(entry)

    @property
    def fresh_entries(self) -> int:
        return sum(1 for e in self._entries.values() if e.node.kind.fresh)

    def _allocate(self) -> int:
        inode = self._next_inode
        self._next_inode += 1
        return inode


def _txn_parent(node: Node) -> Node:
    k = node.kind
    if k is Kind.TXN:
        return Node(Kind.TXN_DIR)
    if k in (Kind.TXN_CONTROL, Kind.TXN_TOPIC):
        return Node(Kind.TXN, txn=node.txn)
    if k is Kind.TXN_PARTITION:
        return Node(Kind.TXN_TOPIC, node.topic, txn=node.txn)
    return Node(Kind.TXN_PARTITION, node.topic, node.partition, txn=node.txn)  # the write files


def _fetch_parent(node: Node) -> Node:
    k = node.kind
    if k is Kind.FETCH_DIR:
        return Node(Kind.LOGFS_DIR)
    if k is Kind.FETCH_REPLICA:
        return Node(Kind.FETCH_DIR)
    if k is Kind.FETCH_TOPIC:
        return Node(Kind.FETCH_REPLICA, replica=node.replica)
    if k is Kind.FETCH_PARTITION:
        return Node(Kind.FETCH_TOPIC, node.topic, replica=node.replica)
    return Node(Kind.FETCH_PARTITION, node.topic, node.partition, replica=node.replica)


def _child(children: dict[str, Kind], name: str) -> Kind:
    kind = children.get(name)
    if kind is None:
        raise no_entry()
    return kind
