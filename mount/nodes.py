"""The tree under the mount point (docs/mount.md, "Files, modes and caching") as node kinds: what each path is, by its
parts, and its parent.

Paths::

    /                                   ROOT
    /.logfs/                            LOGFS_DIR
        metrics                         METRICS            r   Prometheus text
        errors                          ERRORS             r   the last refusals, JSON lines (mount/refusals.py)
        leader                          LEADER             r   {"node_id","mount","leader_epoch"} of the leader
        partitions                      PARTITIONS         r   every partition's offsets, JSON lines (fresh per lookup)
        delete-topic, delete-records    DELETE_TOPIC, DELETE_RECORDS   w   one command per line
        producer-id                     PRODUCER_ID        r   each open: a fresh "<producer id> <epoch>"
        labels/<label>                  LABELS_DIR, LABEL  exists once a commit recorded <label> (lists nothing)
        transactions/                   TXN_DIR            lists the open transactions; mkdir <id> begins one
            <id>/                       TXN                while transaction <id> is open
                control                 TXN_CONTROL        w   "commit [<label>]" or "abort"
                <topic>/<partition>/    TXN_TOPIC, TXN_PARTITION
                    append, append.jsonl, batches   APPEND, APPEND_JSONL, BATCHES (Node.txn = <id>)   w
        groups/                         GROUPS_DIR         consumer groups (mount/groups.py); rmdir <group> deletes one
            <group>/                    GROUP              any name; lists config, lag and the topics it committed
                config                  GROUP_CONFIG       rw  auto.offset.reset, auto.commit.interval.ms
                lag                     GROUP_LAG          r   "<topic> <partition> <committed> <hw> <leo> <lag>"
                <topic>/<partition>/    GROUP_TOPIC, GROUP_PARTITION
                    offset              GROUP_OFFSET       rw  "<offset>[ <metadata>]": read, or write to commit
                    follow              GROUP_FOLLOW       r   a follow/ stream from the committed offset
        fetch/                          FETCH_DIR          the replication fetch files (docs/replication.md); looked up,
            <replica id>/               FETCH_REPLICA      never listed: every directory below lists nothing
                <topic>/                FETCH_TOPIC
                    <partition>/        FETCH_PARTITION
                        <offset>.<epoch>    FETCH_FILE     r   a follower's fetch: a snapshot fixed at lookup
                .session                FETCH_SESSION  rw  the follower's fetch session (mount/session.py)
        forward/                        FORWARD_DIR        writes another node forwards here (mount/forwarding.py);
            <topic>/<partition>/        FORWARD_TOPIC, FORWARD_PARTITION   looked up, never listed
                append, append.jsonl, batches   APPEND, APPEND_JSONL, BATCHES (forwarded)   w   never forwarded on
            <topic>/append, append.jsonl    TOPIC_APPEND, TOPIC_APPEND_JSONL (forwarded)  w
            <topic>/config              CONFIG (forwarded)   w   a config change made through another node
            .dirs                       FORWARD_DIRS       w   mkdir, rmdir and group claims made through another node
            .groups/<group>/…           GROUP… (forwarded)     config, <topic>/<p>/offset: commits through another node
            .transactions/<id>/…        TXN… (forwarded)       control, <topic>/<p>/append…: a transaction through
                                                               another node (begun by a ``begin`` line of .dirs);
                                                               its directory shows the transaction's owner
            .labels/<label>             LABEL (forwarded)      another node's lookup of a committed label
    /<topic>/                           TOPIC              mkdir creates it, rmdir removes it when it holds no record
        append, append.jsonl            TOPIC_APPEND, TOPIC_APPEND_JSONL   w   partitioned as Kafka's producer does
        config                          CONFIG             rw  key=value lines
        <partition>/                    PARTITION          0 … N-1, written without leading zeros
            append, append.jsonl, batches   APPEND, APPEND_JSONL, BATCHES   w
            state                       STATE              r   JSON
            leader                      PARTITION_LEADER   r   JSON: who leads this partition
            at/                         AT_DIR             lists nothing; <offset>, earliest, @<ms>, <a>-<b>
                <name>                  AT_FILE            r   a snapshot fixed at lookup
            follow/                     FOLLOW_DIR         lists nothing; <offset>, earliest, @<ms>, latest
                <name>                  FOLLOW_FILE        r   a stream
            hw/                         HW_DIR             one <20-digit base offset>.jsonl per segment
                <file>                  HW_FILE            r   committed records of that segment
            committed/                  COMMITTED          at/, follow/ and hw/ again, bounded by the last stable
                                                           offset, aborted transactions and markers left out

A :class:`Node` is a name, not an object: equal paths are equal nodes, and nothing here looks at the store (which
names exist is ``mount/tree.py``'s question; how a name parses is ``mount/names.py``'s).

Threads: any (immutable values and pure functions).
"""

from __future__ import annotations

import enum
import stat
from dataclasses import dataclass

LOGFS_DIR_NAME = ".logfs"
FORWARD_DIR_NAME = "forward"
FORWARD_DIRS_NAME = ".dirs"  # .logfs/forward/.dirs: a leading dot, so no topic name is ever the same
FORWARD_GROUPS_NAME = ".groups"  # .logfs/forward/.groups/: another node's group commits (a leading dot, as above)
FORWARD_TXNS_NAME = ".transactions"  # .logfs/forward/.transactions/: another node's transactions (the same)
FORWARD_LABELS_NAME = ".labels"  # .logfs/forward/.labels/: another node's lookups of committed labels (the same)


@enum.unique
class Kind(enum.Enum):
    """What a node is. The value: (a unique name, is a directory, permission bits, fresh inode per lookup); the
    name keeps members with equal properties distinct (Enum makes members with equal values aliases)."""

    ROOT = ("root", True, 0o755, False)
    LOGFS_DIR = ("logfs_dir", True, 0o555, False)
    METRICS = ("metrics", False, 0o444, False)
    ERRORS = ("errors", False, 0o444, False)
    LEADER = ("leader", False, 0o444, False)
    PARTITIONS = ("partitions", False, 0o444, True)
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
    PARTITION_LEADER = ("partition_leader", False, 0o444, False)
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
    FETCH_SESSION = ("fetch_session", False, 0o660, False)
    FORWARD_DIR = ("forward_dir", True, 0o555, False)
    FORWARD_TOPIC = ("forward_topic", True, 0o555, False)
    FORWARD_DIRS = ("forward_dirs", False, 0o200, False)
    FORWARD_PARTITION = ("forward_partition", True, 0o555, False)
    PRODUCER_ID = ("producer_id", False, 0o444, False)
    LABELS_DIR = ("labels_dir", True, 0o555, False)
    LABEL = ("label", False, 0o444, True)
    TXN_DIR = ("txn_dir", True, 0o755, False)
    TXN = ("txn", True, 0o755, False)
    TXN_CONTROL = ("txn_control", False, 0o220, False)
    TXN_TOPIC = ("txn_topic", True, 0o555, False)
    TXN_PARTITION = ("txn_partition", True, 0o555, False)
    GROUPS_DIR = ("groups_dir", True, 0o755, False)
    GROUP = ("group", True, 0o755, False)
    GROUP_CONFIG = ("group_config", False, 0o644, False)
    GROUP_LAG = ("group_lag", False, 0o444, False)
    GROUP_TOPIC = ("group_topic", True, 0o555, False)
    GROUP_PARTITION = ("group_partition", True, 0o555, False)
    GROUP_OFFSET = ("group_offset", False, 0o644, False)
    GROUP_FOLLOW = ("group_follow", False, 0o444, True)

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


# the data files: records are appended through them (a node that does not lead their partition forwards them to its
# leader, mount/forwarding.py)
APPEND_KINDS = frozenset({Kind.TOPIC_APPEND, Kind.TOPIC_APPEND_JSONL, Kind.APPEND, Kind.APPEND_JSONL, Kind.BATCHES})
WRITE_KINDS = APPEND_KINDS | {Kind.DELETE_TOPIC, Kind.DELETE_RECORDS, Kind.TXN_CONTROL, Kind.FORWARD_DIRS}
# what a node that does not lead forwards whole to the leader (mount/forwarding.py): the data files and a topic's config
FORWARDED_KINDS = APPEND_KINDS | {Kind.CONFIG}
TXN_KINDS = frozenset({Kind.TXN_DIR, Kind.TXN, Kind.TXN_CONTROL, Kind.TXN_TOPIC, Kind.TXN_PARTITION})
GROUP_KINDS = frozenset({Kind.GROUPS_DIR, Kind.GROUP, Kind.GROUP_CONFIG, Kind.GROUP_LAG, Kind.GROUP_TOPIC,
                         Kind.GROUP_PARTITION, Kind.GROUP_OFFSET, Kind.GROUP_FOLLOW})  # fmt: skip
FETCH_KINDS = frozenset({Kind.FETCH_DIR, Kind.FETCH_REPLICA, Kind.FETCH_TOPIC, Kind.FETCH_PARTITION, Kind.FETCH_FILE,
                         Kind.FETCH_SESSION})  # fmt: skip
FORWARD_DIR_KINDS = frozenset({Kind.FORWARD_DIR, Kind.FORWARD_TOPIC, Kind.FORWARD_PARTITION})


@dataclass(frozen=True, slots=True)
class Node:
    """A path, by its parts: the kind, and the topic, partition, ``committed/`` flag, file name, (under
    ``.logfs/fetch/``) replica id, (under ``.logfs/transactions/``) transactional id, (under ``.logfs/groups/``)
    consumer group it needs, and whether it is a data file under ``.logfs/forward/`` (``forwarded``)."""

    kind: Kind
    topic: str = ""
    partition: int = -1
    committed: bool = False
    name: str = ""
    replica: int = -1
    txn: str = ""
    group: str = ""
    forwarded: bool = False

    def __str__(self) -> str:
        if self.kind in GROUP_KINDS:
            where = [FORWARD_DIR_NAME, FORWARD_GROUPS_NAME] if self.forwarded else [GROUPS_DIR_NAME]
            parts = [LOGFS_DIR_NAME, *where, self.group, self.topic]
            parts += [str(self.partition)] if self.partition >= 0 else []
            parts += [_GROUP_FILE_NAMES.get(self.kind, "")]
            return "/" + "/".join(p for p in parts if p)
        if self.txn or self.kind is Kind.TXN_DIR:
            where = [FORWARD_DIR_NAME, FORWARD_TXNS_NAME] if self.forwarded else [TXN_DIR_NAME]
            parts = [LOGFS_DIR_NAME, *where, self.txn, self.topic]
            parts += [str(self.partition)] if self.partition >= 0 else []
            parts += [] if self.kind in TXN_KINDS and self.kind is not Kind.TXN_CONTROL else [_NAMES[self.kind]]
            return "/" + "/".join(p for p in parts if p)
        if self.kind in (Kind.LABELS_DIR, Kind.LABEL):
            where = [FORWARD_DIR_NAME, FORWARD_LABELS_NAME] if self.forwarded else [LABELS_DIR_NAME]
            return "/" + "/".join(p for p in (LOGFS_DIR_NAME, *where, self.name) if p)
        if self.forwarded or self.kind in FORWARD_DIR_KINDS:
            parts = [LOGFS_DIR_NAME, FORWARD_DIR_NAME, self.topic]
            parts += [str(self.partition)] if self.partition >= 0 else []
            parts += [_NAMES[self.kind]] if self.forwarded else []
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
    Kind.ERRORS: ".logfs/errors",
    Kind.LEADER: ".logfs/leader",
    Kind.PARTITIONS: ".logfs/partitions",
    Kind.DELETE_TOPIC: ".logfs/delete-topic",
    Kind.DELETE_RECORDS: ".logfs/delete-records",
    Kind.TOPIC_APPEND: "append",
    Kind.TOPIC_APPEND_JSONL: "append.jsonl",
    Kind.CONFIG: "config",
    Kind.APPEND: "append",
    Kind.APPEND_JSONL: "append.jsonl",
    Kind.BATCHES: "batches",
    Kind.STATE: "state",
    Kind.PARTITION_LEADER: "leader",
    Kind.AT_DIR: "at",
    Kind.FOLLOW_DIR: "follow",
    Kind.HW_DIR: "hw",
    Kind.TXN_CONTROL: "control",
    Kind.FORWARD_DIRS: f"{LOGFS_DIR_NAME}/{FORWARD_DIR_NAME}/{FORWARD_DIRS_NAME}",
}

# Children with fixed names, per directory kind.
TXN_DIR_NAME = "transactions"
LABELS_DIR_NAME = "labels"
GROUPS_DIR_NAME = "groups"
LOGFS_CHILDREN = {
    "metrics": Kind.METRICS,
    "errors": Kind.ERRORS,
    "leader": Kind.LEADER,
    "partitions": Kind.PARTITIONS,
    "delete-topic": Kind.DELETE_TOPIC,
    "delete-records": Kind.DELETE_RECORDS,
    "producer-id": Kind.PRODUCER_ID,
    TXN_DIR_NAME: Kind.TXN_DIR,
    LABELS_DIR_NAME: Kind.LABELS_DIR,
    GROUPS_DIR_NAME: Kind.GROUPS_DIR,
}
GROUP_CHILDREN = {"config": Kind.GROUP_CONFIG, "lag": Kind.GROUP_LAG}
GROUP_PARTITION_CHILDREN = {"offset": Kind.GROUP_OFFSET, "follow": Kind.GROUP_FOLLOW}
_GROUP_FILE_NAMES = {
    Kind.GROUP_CONFIG: "config", Kind.GROUP_LAG: "lag", Kind.GROUP_OFFSET: "offset", Kind.GROUP_FOLLOW: "follow"
}
TXN_PARTITION_CHILDREN = {"append": Kind.APPEND, "append.jsonl": Kind.APPEND_JSONL, "batches": Kind.BATCHES}
TOPIC_CHILDREN = {"append": Kind.TOPIC_APPEND, "append.jsonl": Kind.TOPIC_APPEND_JSONL, "config": Kind.CONFIG}
PARTITION_CHILDREN = {
    "append": Kind.APPEND,
    "append.jsonl": Kind.APPEND_JSONL,
    "batches": Kind.BATCHES,
    "state": Kind.STATE,
    "leader": Kind.PARTITION_LEADER,
    "at": Kind.AT_DIR,
    "follow": Kind.FOLLOW_DIR,
    "hw": Kind.HW_DIR,
    "committed": Kind.COMMITTED,
}
COMMITTED_CHILDREN = {"at": Kind.AT_DIR, "follow": Kind.FOLLOW_DIR, "hw": Kind.HW_DIR}


FETCH_DIR_NAME = "fetch"
FETCH_SESSION_NAME = ".session"  # .logfs/fetch/<replica id>/.session (mount/session.py)


_LOGFS_DIR_CHILDREN = frozenset(LOGFS_CHILDREN.values())


def parent_of(node: Node) -> Node:
    """The directory holding ``node`` (the root's parent is the root)."""
    k = node.kind
    if k in (Kind.ROOT, Kind.LOGFS_DIR, Kind.TOPIC):
        return Node(Kind.ROOT)
    if k.is_fetch:
        return _fetch_parent(node)
    if k is Kind.GROUPS_DIR:
        return Node(Kind.FORWARD_DIR) if node.forwarded else Node(Kind.LOGFS_DIR)
    if k in GROUP_KINDS:
        return _group_parent(node)
    if node.txn or k is Kind.TXN_DIR:
        return _txn_parent(node)
    if k is Kind.LABEL:
        return Node(Kind.LABELS_DIR, forwarded=node.forwarded)
    if k is Kind.LABELS_DIR and node.forwarded:
        return Node(Kind.FORWARD_DIR)
    if node.forwarded:
        return Node(Kind.FORWARD_PARTITION, node.topic, node.partition) if node.partition >= 0 else \
            Node(Kind.FORWARD_TOPIC, node.topic)  # fmt: skip
    if k is Kind.FORWARD_DIRS:
        return Node(Kind.FORWARD_DIR)
    if k in FORWARD_DIR_KINDS:
        return {Kind.FORWARD_DIR: Node(Kind.LOGFS_DIR), Kind.FORWARD_TOPIC: Node(Kind.FORWARD_DIR),
                Kind.FORWARD_PARTITION: Node(Kind.FORWARD_TOPIC, node.topic)}[k]  # fmt: skip
    if k in _LOGFS_DIR_CHILDREN:
        return Node(Kind.LOGFS_DIR)
    if k in (Kind.TOPIC_APPEND, Kind.TOPIC_APPEND_JSONL, Kind.CONFIG, Kind.PARTITION):
        return Node(Kind.TOPIC, node.topic)
    if k in (Kind.AT_FILE, Kind.FOLLOW_FILE, Kind.HW_FILE):
        dir_kind = {Kind.AT_FILE: Kind.AT_DIR, Kind.FOLLOW_FILE: Kind.FOLLOW_DIR, Kind.HW_FILE: Kind.HW_DIR}[k]
        return Node(dir_kind, node.topic, node.partition, node.committed)
    if node.committed and k in (Kind.AT_DIR, Kind.FOLLOW_DIR, Kind.HW_DIR):
        return Node(Kind.COMMITTED, node.topic, node.partition)
    return Node(Kind.PARTITION, node.topic, node.partition)


def _txn_parent(node: Node) -> Node:
    k, fwd = node.kind, node.forwarded
    if k is Kind.TXN_DIR:
        return Node(Kind.FORWARD_DIR) if fwd else Node(Kind.LOGFS_DIR)
    if k is Kind.TXN:
        return Node(Kind.TXN_DIR, forwarded=fwd)
    if k in (Kind.TXN_CONTROL, Kind.TXN_TOPIC):
        return Node(Kind.TXN, txn=node.txn, forwarded=fwd)
    if k is Kind.TXN_PARTITION:
        return Node(Kind.TXN_TOPIC, node.topic, txn=node.txn, forwarded=fwd)
    return Node(Kind.TXN_PARTITION, node.topic, node.partition, txn=node.txn, forwarded=fwd)  # the write files


def _fetch_parent(node: Node) -> Node:
    k = node.kind
    if k is Kind.FETCH_DIR:
        return Node(Kind.LOGFS_DIR)
    if k is Kind.FETCH_REPLICA:
        return Node(Kind.FETCH_DIR)
    if k in (Kind.FETCH_TOPIC, Kind.FETCH_SESSION):
        return Node(Kind.FETCH_REPLICA, replica=node.replica)
    if k is Kind.FETCH_PARTITION:
        return Node(Kind.FETCH_TOPIC, node.topic, replica=node.replica)
    return Node(Kind.FETCH_PARTITION, node.topic, node.partition, replica=node.replica)


def _group_parent(node: Node) -> Node:
    k = node.kind
    if k is Kind.GROUP:
        return Node(Kind.GROUPS_DIR, forwarded=node.forwarded)
    if k in (Kind.GROUP_CONFIG, Kind.GROUP_LAG, Kind.GROUP_TOPIC):
        return Node(Kind.GROUP, group=node.group, forwarded=node.forwarded)
    if k is Kind.GROUP_PARTITION:
        return Node(Kind.GROUP_TOPIC, node.topic, group=node.group, forwarded=node.forwarded)
    # offset, follow
    return Node(Kind.GROUP_PARTITION, node.topic, node.partition, group=node.group, forwarded=node.forwarded)
