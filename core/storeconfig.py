"""The store's own config (Kafka's KafkaConfig, for the keys logfs implements): what ``logfs mount --config`` sets for
one process, its keys, and the broker spellings of topic keys that ``--config`` also accepts.

Kept apart from the topic config (core/config.py's LogConfig) because it is another level, as in Kafka: it lives
only as long as the process that was given it (it is never persisted), and it carries the topic defaults that every
topic's LogConfig starts from. The table of every key, store keys included, is core/config.py's docstring; how a
value is read and checked is core/configdef.py, how ``--config`` is read is core/configtext.py.

Threads: every value here is immutable; any thread may read anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from logfs.core.config import LOG_KEYS, TRANSACTION_MAX_TIMEOUT_MS, LogConfig
from logfs.core.configdef import (
    DOUBLE_MAX,
    MS_PER_HOUR,
    MS_PER_MINUTE,
    BrokerSynonym,
    ConfigKey,
    ValueType,
    invalid_value,
    key_field,
    keys_of,
)
from logfs.core.errors import ConfigError
from logfs.core.format.varint import INT32_MAX


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """What ``logfs mount --config`` sets for one process (a broker's server.properties); not persisted.

    ``replica_ids`` given as ``()`` means ``(node_id,)``, a store with no followers. ``topic_defaults`` is the
    LogConfig every topic starts from (:meth:`log_defaults`). Building one checks every field. Any thread.
    """

    node_id: int = field(default=0, metadata=key_field(
        "node.id", ValueType.INT,
        "This store's replica id; a store remembers the first id it served under (meta.properties) and refuses "
        "another.",
        minimum=0,
    ))  # fmt: skip
    replica_ids: tuple[int, ...] = field(default=(), metadata=key_field(
        "replica.ids", ValueType.REPLICA_IDS,
        "The replica set of every partition, the leader's own id included; fetches from other ids are refused.",
        default_text="node.id",
    ))  # fmt: skip
    num_partitions: int = field(default=1, metadata=key_field(
        "num.partitions", ValueType.INT,
        "Partitions of a topic created by mkdir.",
        minimum=1,
    ))  # fmt: skip
    log_retention_check_interval_ms: int = field(default=5 * MS_PER_MINUTE, metadata=key_field(
        "log.retention.check.interval.ms", ValueType.LONG,
        "How often retention looks for segments to delete (5 minutes).",
        minimum=1,
    ))  # fmt: skip
    replica_lag_time_max_ms: int = field(default=30_000, metadata=key_field(
        "replica.lag.time.max.ms", ValueType.LONG,
        "A follower that has not caught up with the leader's log end offset for this long leaves the ISR "
        "(30 seconds).",
        minimum=1,
    ))  # fmt: skip
    request_timeout_ms: int = field(default=30_000, metadata=key_field(
        "request.timeout.ms", ValueType.INT,
        "How long fsync(2) waits for the in-sync replicas (acks=all) before it fails with EIO (30 seconds).",
        minimum=0,
    ))  # fmt: skip
    transaction_timeout_ms: int = field(default=MS_PER_MINUTE, metadata=key_field(
        "transaction.timeout.ms", ValueType.INT,
        "A transaction left open this long is aborted (1 minute; Kafka's coordinator refuses more than "
        "transaction.max.timeout.ms).",
        minimum=1, maximum=TRANSACTION_MAX_TIMEOUT_MS,
    ))  # fmt: skip
    max_follow_readers: int = field(default=1000, metadata=key_field(
        "max.follow.readers", ValueType.INT,
        "logfs's own: `follow/` handles that may be open at once in the whole mount; one more fails with EMFILE.",
        minimum=1,
    ))  # fmt: skip
    max_follow_readers_per_user: int = field(default=INT32_MAX, metadata=key_field(
        "max.follow.readers.per.user", ValueType.INT,
        "logfs's own, for a shared mount: `follow/` handles one user (uid, root included) may hold open at once; "
        "one more fails with EMFILE, so no user takes every one of max.follow.readers from the others (Kafka's "
        "max.connections.per.ip, per user; Int.MAX: no limit but the mount's).",
        minimum=1,
    ))  # fmt: skip
    log_cleaner_enable: bool = field(default=True, metadata=key_field(
        "log.cleaner.enable", ValueType.BOOLEAN,
        "Run the log cleaner; when false compacted topics are never cleaned (nor, as in Kafka, retained).",
    ))  # fmt: skip
    log_cleaner_threads: int = field(default=1, metadata=key_field(
        "log.cleaner.threads", ValueType.INT,
        "Cleaner threads; each cleans one log at a time.",
        minimum=0,
    ))  # fmt: skip
    log_cleaner_dedupe_buffer_size: int = field(default=128 * 1024 * 1024, metadata=key_field(
        "log.cleaner.dedupe.buffer.size", ValueType.LONG,
        "Memory of the cleaners' offset maps, shared among the threads (24 bytes a key; 128 MiB); more than "
        "1 MiB a thread.",
        minimum=0,
    ))  # fmt: skip
    log_cleaner_io_max_bytes_per_second: float = field(default=DOUBLE_MAX, metadata=key_field(
        "log.cleaner.io.max.bytes.per.second", ValueType.DOUBLE,
        "The cleaners' read plus write rate, all threads together (Double.MAX: unthrottled).",
        minimum=1, default_text="Double.MAX_VALUE",
    ))  # fmt: skip
    log_cleaner_backoff_ms: int = field(default=15_000, metadata=key_field(
        "log.cleaner.backoff.ms", ValueType.LONG,
        "How long a cleaner thread sleeps after finding no log to clean (15 seconds).",
        minimum=0,
    ))  # fmt: skip
    # Automatic failover through ZooKeeper (issue 17: logfs/cluster/, docs/replication.md); off without it.
    mount_allow_other: bool = field(default=False, metadata=key_field(
        "mount.allow.other", ValueType.BOOLEAN,
        "Share every mount this process makes with other users (FUSE's allow_other, the kernel checking each "
        "node's owner and mode); `--allow-other` sets it. Users other than root need user_allow_other in "
        "/etc/fuse.conf.",
    ))  # fmt: skip
    replica_users: str = field(default="", metadata=key_field(
        "replica.users", ValueType.STRING,
        "On a mount shared with --allow-other: the users (names or uids, comma-separated) whose lookups under "
        ".logfs/fetch/ may fetch, besides the mounting user and root (a fetch moves the ISR and the high watermark).",
    ))  # fmt: skip
    zookeeper_connect: str = field(default="", metadata=key_field(
        "zookeeper.connect", ValueType.STRING,
        "HOST:PORT[,HOST:PORT…][/chroot] of ZooKeeper: the node joins a cluster that elects its leader there "
        "(empty: no ZooKeeper, this node leads).",
    ))  # fmt: skip
    zookeeper_session_timeout_ms: int = field(default=6000, metadata=key_field(
        "zookeeper.session.timeout.ms", ValueType.INT,
        "The ZooKeeper session timeout: a leader whose session expired is replaced (6 seconds, Kafka's before 2.5).",
        minimum=1,
    ))  # fmt: skip
    advertised_mount: str = field(default="", metadata=key_field(
        "advertised.mount", ValueType.STRING,
        "With ZooKeeper: where the other nodes reach this node's mount (they tail it while it leads); empty: the "
        "mount point.",
    ))  # fmt: skip
    node_mounts: str = field(default="", metadata=key_field(
        "node.mounts", ValueType.STRING,
        "With ZooKeeper: ID:PATH,… — where this node reaches another node's mount (an sshfs mount of each peer), "
        "instead of the mount that node registered; for forwarded writes. Empty: the registered mounts.",
    ))  # fmt: skip
    unclean_leader_election_enable: bool = field(default=False, metadata=key_field(
        "unclean.leader.election.enable", ValueType.BOOLEAN,
        "With ZooKeeper: elect a live node outside the ISR when no ISR member is live (records may be lost).",
    ))  # fmt: skip
    zookeeper_set_acl: bool = field(default=False, metadata=key_field(
        "zookeeper.set.acl", ValueType.BOOLEAN,
        "With ZooKeeper: every znode the node creates gets Kafka's secure ACL, readable by anyone and changed only "
        "with the credential of zookeeper.auth.file (needed); `logfs zk-acls` secures a cluster made without.",
    ))  # fmt: skip
    zookeeper_auth_file: str = field(default="", metadata=key_field(
        "zookeeper.auth.file", ValueType.STRING,
        "logfs's own (Kafka reads JAAS): with ZooKeeper, a file whose first line is the node's digest credential "
        "user:password; refused unless only its owner, the mount's user, may read it.",
    ))  # fmt: skip
    topic_defaults: LogConfig = field(default_factory=LogConfig)

    def node_mount_paths(self) -> dict[int, str]:
        """``node.mounts`` as node id → path (ConfigError when it does not parse: an id twice, a relative path)."""
        out: dict[int, str] = {}
        for item in filter(None, (part.strip() for part in self.node_mounts.split(","))):
            node, colon, path = item.partition(":")
            node = node.strip()
            digits = node.isascii() and node.isdecimal()  # "²".isdigit() is True, and int() refuses it
            if not colon or not digits or not path.startswith("/") or int(node) in out:
                raise invalid_value("node.mounts", self.node_mounts, "must be ID:/absolute/path,… with each id once")
            out[int(node)] = path
        return out

    def __post_init__(self) -> None:
        for key in STORE_KEYS.values():
            key.check(getattr(self, key.attribute))
        per_thread = self.log_cleaner_dedupe_buffer_size // max(self.log_cleaner_threads, 1)
        if self.log_cleaner_threads > 0 and per_thread <= 1024 * 1024:  # KafkaConfig's require, its wording
            raise ConfigError("log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread.")
        if not self.replica_ids:
            object.__setattr__(self, "replica_ids", (self.node_id,))
        if self.node_id not in self.replica_ids:
            raise invalid_value(
                "replica.ids", ",".join(map(str, self.replica_ids)), f"must include this store's node.id {self.node_id}"
            )
        if len(set(self.replica_ids)) != len(self.replica_ids):
            raise invalid_value("replica.ids", ",".join(map(str, self.replica_ids)), "a replica id is listed twice")
        self.node_mount_paths()  # refused here when it does not parse
        if self.zookeeper_set_acl and not self.zookeeper_auth_file:
            raise invalid_value("zookeeper.set.acl", "true", "needs zookeeper.auth.file, the credential that alone "
                                "may change the znodes")  # fmt: skip
        if (self.zookeeper_set_acl or self.zookeeper_auth_file) and not self.zookeeper_connect:
            raise ConfigError("zookeeper.set.acl and zookeeper.auth.file apply only with zookeeper.connect")
        if not isinstance(self.topic_defaults, LogConfig):
            raise ConfigError(f"topic defaults must be a LogConfig, not {type(self.topic_defaults).__name__}")

    def log_defaults(self) -> LogConfig:
        """The config of a topic with no overrides: Kafka's defaults with this process's ``--config``. Any thread."""
        return self.topic_defaults


STORE_KEYS: dict[str, ConfigKey] = keys_of(StoreConfig)
"""The store-only keys of ``--config``, by Kafka name (the topic keys are :data:`LOG_KEYS`)."""

assert not STORE_KEYS.keys() & LOG_KEYS.keys()


# Kafka's ServerTopicConfigSynonyms for the keys logfs implements, in Kafka's order of precedence per topic key.
BROKER_SYNONYMS: dict[str, BrokerSynonym] = {
    s.name: s
    for s in (
        BrokerSynonym("log.segment.bytes", "segment.bytes"),
        BrokerSynonym("log.roll.ms", "segment.ms"),
        BrokerSynonym("log.roll.hours", "segment.ms", ValueType.INT, MS_PER_HOUR, minimum=1),
        BrokerSynonym("log.roll.jitter.ms", "segment.jitter.ms"),
        BrokerSynonym("log.roll.jitter.hours", "segment.jitter.ms", ValueType.INT, MS_PER_HOUR, minimum=0),
        BrokerSynonym("log.index.size.max.bytes", "segment.index.bytes"),
        BrokerSynonym("log.flush.interval.messages", "flush.messages"),
        BrokerSynonym("log.flush.interval.ms", "flush.ms"),
        BrokerSynonym("log.flush.scheduler.interval.ms", "flush.ms"),
        BrokerSynonym("log.retention.bytes", "retention.bytes"),
        BrokerSynonym("log.retention.ms", "retention.ms", retention_time=True),
        BrokerSynonym("log.retention.minutes", "retention.ms", ValueType.INT, MS_PER_MINUTE,
                      retention_time=True),
        BrokerSynonym("log.retention.hours", "retention.ms", ValueType.INT, MS_PER_HOUR,
                      retention_time=True),
        BrokerSynonym("message.max.bytes", "max.message.bytes"),
        BrokerSynonym("log.index.interval.bytes", "index.interval.bytes"),
        BrokerSynonym("log.segment.delete.delay.ms", "file.delete.delay.ms"),
        BrokerSynonym("log.cleanup.policy", "cleanup.policy"),
        BrokerSynonym("log.cleaner.min.cleanable.ratio", "min.cleanable.dirty.ratio"),
        BrokerSynonym("log.cleaner.min.compaction.lag.ms", "min.compaction.lag.ms"),
        BrokerSynonym("log.cleaner.max.compaction.lag.ms", "max.compaction.lag.ms"),
        BrokerSynonym("log.cleaner.delete.retention.ms", "delete.retention.ms"),
        BrokerSynonym("log.message.timestamp.type", "message.timestamp.type"),
        BrokerSynonym("log.message.timestamp.before.max.ms", "message.timestamp.before.max.ms"),
        BrokerSynonym("log.message.timestamp.after.max.ms", "message.timestamp.after.max.ms"),
    )
}  # fmt: skip

assert all(s.topic_key in LOG_KEYS for s in BROKER_SYNONYMS.values())
assert not BROKER_SYNONYMS.keys() & (LOG_KEYS.keys() | STORE_KEYS.keys())
