"""Topic and store configuration: Kafka's keys, Kafka's defaults, Kafka's types and ranges.

Two levels, as in Kafka. :class:`LogConfig` is one topic's effective config (Kafka's LogConfig): the store's topic
defaults with the topic's overrides on top. ``StoreConfig`` (``core/storeconfig.py``) is what
``logfs mount --config key=value`` sets for one process, as a broker's server.properties does; it is not persisted,
and it carries the topic defaults (``StoreConfig.log_defaults``). A topic's overrides are written to
``MOUNT/<topic>/config`` and persist in the store (``save_topic_overrides`` in ``core/configtext.py``); the store's
defaults do not, so a topic follows the defaults of the process that serves it wherever it has no override of its
own.

Every key, topic keys first (``<topic>/config`` and ``--config``), then store keys (``--config`` only), with the
broker spellings ``--config`` also accepts (Kafka's ServerTopicConfigSynonyms) and, for those, the conversion Kafka
applies. Rolling is Kafka's ``LogSegment.shouldRoll``, retention its ``UnifiedLog.deleteOldSegments``,
min.insync.replicas its ``Partition.appendRecordsToLeader`` (docs/storage.md, "Rules worth knowing";
docs/replication.md, "acks=all through the mount"); docs/config.md holds the same table::

    key                                 default             valid values; meaning; broker spellings
    cleanup.policy                      delete              delete, compact, compact,delete (either order). delete:
                                                            retention deletes old segments; compact: the log cleaner
                                                            keeps the latest record per key (docs/compaction.md); both:
                                                            both. Broker: log.cleanup.policy.
    delete.retention.ms                 86400000            long, at least 0. How long the cleaner keeps a tombstone or
                                                            a removable transaction marker, from the first clean that
                                                            could remove it (1 day). Broker:
                                                            log.cleaner.delete.retention.ms.
    file.delete.delay.ms                60000               long, at least 0. Wait this long after retention renames a
                                                            segment to .deleted before unlinking its files (1 minute).
                                                            Broker: log.segment.delete.delay.ms.
    flush.messages                      9223372036854775807 long, at least 1. fsync a partition's log once this many
                                                            records were appended since its last flush (Long.MAX: never;
                                                            durability comes from replication and fsync(2) on a handle).
                                                            Broker: log.flush.interval.messages.
    flush.ms                            9223372036854775807 long, at least 0. fsync a partition's log once its last
                                                            flush is this old (Long.MAX: never). Broker:
                                                            log.flush.interval.ms, log.flush.scheduler.interval.ms.
    index.interval.bytes                4096                int, at least 0. Add an offset and a time index entry once
                                                            this many bytes were appended since the last entry (sparse
                                                            indexes). Broker: log.index.interval.bytes.
    max.compaction.lag.ms               9223372036854775807 long, at least 1. A compacted log whose oldest dirty segment
                                                            is this old is cleaned whatever its dirty ratio (Long.MAX:
                                                            never forced); it also caps segment.ms. Broker:
                                                            log.cleaner.max.compaction.lag.ms.
    max.message.bytes                   1048588             int, at least 0. Largest batch accepted, as stored
                                                            (compressed), in bytes: 1 MiB plus the 12-byte log overhead;
                                                            a larger one fails with EFBIG. Broker: message.max.bytes.
    message.timestamp.after.max.ms      9223372036854775807 long, at least 0. With CreateTime, refuse a batch whose
                                                            timestamp is more than this after the leader's clock
                                                            (Long.MAX: no limit). Broker:
                                                            log.message.timestamp.after.max.ms.
    message.timestamp.before.max.ms     9223372036854775807 long, at least 0. With CreateTime, refuse a batch whose
                                                            timestamp is more than this before the leader's clock
                                                            (Long.MAX: no limit). Broker:
                                                            log.message.timestamp.before.max.ms.
    message.timestamp.type              CreateTime          CreateTime, LogAppendTime. CreateTime keeps the producer's
                                                            timestamps; LogAppendTime stamps each batch with the
                                                            leader's clock when it is appended. Broker:
                                                            log.message.timestamp.type.
    min.cleanable.dirty.ratio           0.5                 double, 0 to 1. A compacted log is cleaned once its dirty
                                                            bytes are more than this share of its cleanable bytes.
                                                            Broker: log.cleaner.min.cleanable.ratio.
    min.compaction.lag.ms               0                   long, at least 0. The cleaner leaves a segment alone while
                                                            its newest record is younger than this. Broker:
                                                            log.cleaner.min.compaction.lag.ms.
    min.insync.replicas                 1                   int, at least 1. acks=all (fsync(2), O_SYNC, O_DSYNC) needs
                                                            this many in-sync replicas, capped at the number of
                                                            replicas.
    retention.bytes                     -1                  long. Delete the oldest segments while the partition is
                                                            larger than this many bytes; any negative value: no size
                                                            limit. Broker: log.retention.bytes.
    retention.ms                        604800000           long, at least -1. Delete a closed segment once its newest
                                                            record is older than this (7 days); -1: keep forever.
                                                            Broker: log.retention.ms (negative: -1; 0 refused),
                                                            log.retention.minutes (minutes to ms; int; negative: -1; 0
                                                            refused), log.retention.hours (hours to ms; int; negative:
                                                            -1; 0 refused).
    segment.bytes                       1073741824          int, at least 14. Roll a new segment before an append would
                                                            take the active one past this size (1 GiB); a single append
                                                            larger than this fails with EFBIG. Broker:
                                                            log.segment.bytes.
    segment.index.bytes                 10485760            int, at least 12. Size a new .index and .timeindex is
                                                            preallocated to (10 MiB); a full index rolls the segment.
                                                            Broker: log.index.size.max.bytes.
    segment.jitter.ms                   0                   long, at least 0. Subtract a random amount below min(this,
                                                            segment.ms), fixed per segment, from segment.ms so that
                                                            segments do not all roll at once. Broker:
                                                            log.roll.jitter.ms, log.roll.jitter.hours (hours to ms; int,
                                                            at least 0).
    segment.ms                          604800000           long, at least 1. Roll a new segment once an append's
                                                            records are this much newer than the active segment's first
                                                            batch (7 days); an empty segment never rolls for time.
                                                            Broker: log.roll.ms, log.roll.hours (hours to ms; int, at
                                                            least 1).

    advertised.mount                                        string. With ZooKeeper: where the other nodes reach this
                                                            node's mount (they tail it while it leads); empty: the mount
                                                            point.
    log.cleaner.backoff.ms              15000               long, at least 0. How long a cleaner thread sleeps after
                                                            finding no log to clean (15 seconds).
    log.cleaner.dedupe.buffer.size      134217728           long, at least 0. Memory of the cleaners' offset maps,
                                                            shared among the threads (24 bytes a key; 128 MiB); more
                                                            than 1 MiB a thread.
    log.cleaner.enable                  true                true, false. Run the log cleaner; when false compacted
                                                            topics are never cleaned (nor, as in Kafka, retained).
    log.cleaner.io.max.bytes.per.second Double.MAX_VALUE    double, at least 1. The cleaners' read plus write rate, all
                                                            threads together (Double.MAX: unthrottled).
    log.cleaner.threads                 1                   int, at least 0. Cleaner threads; each cleans one log at a
                                                            time.
    log.retention.check.interval.ms     300000              long, at least 1. How often retention looks for segments to
                                                            delete (5 minutes).
    max.follow.readers                  1000                int, at least 1. logfs's own: follow/ handles that may be
                                                            open at once in the whole mount; one more fails with EMFILE.
    max.follow.readers.per.user         2147483647          int, at least 1. logfs's own, for a shared mount: follow/
                                                            handles one user (uid, root included) may hold open at once;
                                                            one more fails with EMFILE, so no user takes every one of
                                                            max.follow.readers from the others (Kafka's
                                                            max.connections.per.ip, per user; Int.MAX: no limit but the
                                                            mount's).
    mount.allow.other                   false               true, false. Share every mount this process makes with other
                                                            users (FUSE's allow_other, the kernel checking each node's
                                                            owner and mode); --allow-other sets it. Users other than
                                                            root need user_allow_other in /etc/fuse.conf.
    node.id                             0                   int, at least 0. This store's replica id; a store remembers
                                                            the first id it served under (meta.properties) and refuses
                                                            another.
    node.mounts                                             string. With ZooKeeper: ID:PATH,… — where this node reaches
                                                            another node's mount (an sshfs mount of each peer), instead
                                                            of the mount that node registered; for forwarded writes.
                                                            Empty: the registered mounts.
    num.partitions                      1                   int, at least 1. Partitions of a topic created by mkdir.
    replica.ids                         node.id             comma-separated ints, at least 0, node.id among them. The
                                                            replica set of every partition, the leader's own id
                                                            included; fetches from other ids are refused.
    replica.lag.time.max.ms             30000               long, at least 1. A follower that has not caught up with the
                                                            leader's log end offset for this long leaves the ISR (30
                                                            seconds).
    replica.users                                           string. On a mount shared with --allow-other: the users
                                                            (names or uids, comma-separated) whose lookups under
                                                            .logfs/fetch/ may fetch, besides the mounting user and root
                                                            (a fetch moves the ISR and the high watermark).
    request.timeout.ms                  30000               int, at least 0. How long fsync(2) waits for the in-sync
                                                            replicas (acks=all) before it fails with EIO (30 seconds).
    transaction.timeout.ms              60000               int, 1 to 900000. A transaction left open this long is
                                                            aborted (1 minute; Kafka's coordinator refuses more than
                                                            transaction.max.timeout.ms).
    unclean.leader.election.enable      false               true, false. With ZooKeeper: elect a live node outside the
                                                            ISR when no ISR member is live (records may be lost).
    zookeeper.auth.file                                     string. logfs's own (Kafka reads JAAS): with ZooKeeper, a
                                                            file whose first line is the node's digest credential
                                                            user:password; refused unless only its owner, the mount's
                                                            user, may read it.
    zookeeper.connect                                       string. HOST:PORT[,HOST:PORT…][/chroot] of ZooKeeper: the
                                                            node joins a cluster that elects its leader there (empty: no
                                                            ZooKeeper, this node leads).
    zookeeper.session.timeout.ms        6000                int, at least 1. The ZooKeeper session timeout: a leader
                                                            whose session expired is replaced (6 seconds, Kafka's before
                                                            2.5).
    zookeeper.set.acl                   false               true, false. With ZooKeeper: every znode the node creates
                                                            gets Kafka's secure ACL, readable by anyone and changed only
                                                            with the credential of zookeeper.auth.file (needed); logfs
                                                            zk-acls secures a cluster made without.

Values are read as Kafka's ConfigDef reads them: surrounding whitespace is trimmed; an int or long is an optional
sign and ASCII digits within Java's int (32-bit) or long (64-bit) range; enum values are spelt exactly as Kafka
spells them (``CreateTime``, not ``createtime``); a list is comma-separated. A bad value is refused with Kafka's
wording, ``Invalid value <value> for configuration <key>: <rule>``. Every range is Kafka's (at the reference
commit) except where logfs is stricter, each for a reason: ``segment.index.bytes`` is at least 12, not Kafka's 4,
because a smaller index cannot hold one 12-byte time index entry, and Kafka accepts such a value only to fail when
it next creates a segment; an empty ``cleanup.policy`` is refused (it must name compact, delete or both, kept as
``delete``, ``compact`` or ``compact,delete``); ``log.cleaner.io.max.bytes.per.second`` is at least 1; the store
keys that Kafka leaves unchecked get the smallest value that makes sense, and ``transaction.timeout.ms`` the cap
Kafka's transaction coordinator applies.
(Kafka 4.0 raised the minimum of ``segment.bytes`` to 1 MiB, KIP-1030; logfs keeps Kafka 3.9's 14,
``RECORD_OVERHEAD_V0``, which small-segment tests need, as Kafka's own now get through ``internal.segment.bytes``.)

Kafka's other topic keys (``compression.type``, ``preallocate``, ``remote.storage.enable`` …) are known
here by name, so that setting one is refused as known to Kafka but not implemented by logfs rather than as an
unknown key: logfs never pretends to honour a setting that it ignores.

This module declares the topic keys; the store keys and the broker spellings are ``core/storeconfig.py``'s. How the
keys are read and checked is ``core/configdef.py``; how a config is read from and written as text (``--config``,
``<topic>/config``, the overrides file, the docs table) is ``core/configtext.py``.

Threads: every value here is immutable; any thread may read anything.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from logfs.core.configdef import (
    CLEANUP_POLICY_COMPACT,
    CLEANUP_POLICY_DELETE,
    MS_PER_DAY,
    MS_PER_MINUTE,
    ConfigKey,
    ValueType,
    key_field,
    keys_of,
)
from logfs.core.errors import ConfigError
from logfs.core.format.batch import LOG_OVERHEAD, MIN_DECLARED_BATCH_BYTES, TimestampType
from logfs.core.format.varint import INT64_MAX

# --- the limits behind the rules -------------------------------------------------------------------------------------

LONG_MAX = INT64_MAX  # Kafka's Long.MAX_VALUE: "never" / "no limit"
TRANSACTION_MAX_TIMEOUT_MS = 15 * MS_PER_MINUTE  # Kafka's transaction.max.timeout.ms default: the coordinator's cap
TIME_INDEX_ENTRY_BYTES = 12  # the larger index entry (core/log/index.py); segment.index.bytes must hold one

assert MIN_DECLARED_BATCH_BYTES == 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0, segment.bytes's minimum


# --- the topic config ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogConfig:
    """One topic's effective config (Kafka's LogConfig): the fields logfs implements, Kafka's defaults.

    Building one checks every field (ConfigError), so a LogConfig in hand is always valid. Any thread.
    """

    segment_bytes: int = field(default=1024 * 1024 * 1024, metadata=key_field(
        "segment.bytes", ValueType.INT,
        "Roll a new segment before an append would take the active one past this size (1 GiB); a single append "
        "larger than this fails with EFBIG.",
        minimum=MIN_DECLARED_BATCH_BYTES,
    ))  # fmt: skip
    segment_ms: int = field(default=7 * MS_PER_DAY, metadata=key_field(
        "segment.ms", ValueType.LONG,
        "Roll a new segment once an append's records are this much newer than the active segment's first batch "
        "(7 days); an empty segment never rolls for time.",
        minimum=1,
    ))  # fmt: skip
    segment_jitter_ms: int = field(default=0, metadata=key_field(
        "segment.jitter.ms", ValueType.LONG,
        "Subtract a random amount below min(this, segment.ms), fixed per segment, from segment.ms so that "
        "segments do not all roll at once.",
        minimum=0,
    ))  # fmt: skip
    segment_index_bytes: int = field(default=10 * 1024 * 1024, metadata=key_field(
        "segment.index.bytes", ValueType.INT,
        "Size a new `.index` and `.timeindex` is preallocated to (10 MiB); a full index rolls the segment.",
        minimum=TIME_INDEX_ENTRY_BYTES,
    ))  # fmt: skip
    index_interval_bytes: int = field(default=4096, metadata=key_field(
        "index.interval.bytes", ValueType.INT,
        "Add an offset and a time index entry once this many bytes were appended since the last entry "
        "(sparse indexes).",
        minimum=0,
    ))  # fmt: skip
    retention_ms: int = field(default=7 * MS_PER_DAY, metadata=key_field(
        "retention.ms", ValueType.LONG,
        "Delete a closed segment once its newest record is older than this (7 days); -1: keep forever.",
        minimum=-1,
    ))  # fmt: skip
    retention_bytes: int = field(default=-1, metadata=key_field(
        "retention.bytes", ValueType.LONG,
        "Delete the oldest segments while the partition is larger than this many bytes; any negative value: "
        "no size limit.",
    ))  # fmt: skip
    file_delete_delay_ms: int = field(default=MS_PER_MINUTE, metadata=key_field(
        "file.delete.delay.ms", ValueType.LONG,
        "Wait this long after retention renames a segment to `.deleted` before unlinking its files (1 minute).",
        minimum=0,
    ))  # fmt: skip
    max_message_bytes: int = field(default=1024 * 1024 + LOG_OVERHEAD, metadata=key_field(
        "max.message.bytes", ValueType.INT,
        "Largest batch accepted, as stored (compressed), in bytes: 1 MiB plus the 12-byte log overhead; a larger "
        "one fails with EFBIG.",
        minimum=0,
    ))  # fmt: skip
    message_timestamp_type: TimestampType = field(default=TimestampType.CREATE_TIME, metadata=key_field(
        "message.timestamp.type", ValueType.TIMESTAMP_TYPE,
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch with the leader's clock "
        "when it is appended.",
    ))  # fmt: skip
    message_timestamp_before_max_ms: int = field(default=LONG_MAX, metadata=key_field(
        "message.timestamp.before.max.ms", ValueType.LONG,
        "With CreateTime, refuse a batch whose timestamp is more than this before the leader's clock "
        "(Long.MAX: no limit).",
        minimum=0,
    ))  # fmt: skip
    message_timestamp_after_max_ms: int = field(default=LONG_MAX, metadata=key_field(
        "message.timestamp.after.max.ms", ValueType.LONG,
        "With CreateTime, refuse a batch whose timestamp is more than this after the leader's clock "
        "(Long.MAX: no limit).",
        minimum=0,
    ))  # fmt: skip
    min_insync_replicas: int = field(default=1, metadata=key_field(
        "min.insync.replicas", ValueType.INT,
        "acks=all (fsync(2), O_SYNC, O_DSYNC) needs this many in-sync replicas, capped at the number of replicas.",
        minimum=1,
    ))  # fmt: skip
    cleanup_policy: str = field(default=CLEANUP_POLICY_DELETE, metadata=key_field(
        "cleanup.policy", ValueType.CLEANUP_POLICY,
        "`delete`: retention deletes old segments; `compact`: the log cleaner keeps the latest record per key "
        "(docs/compaction.md); both: both.",
    ))  # fmt: skip
    min_cleanable_dirty_ratio: float = field(default=0.5, metadata=key_field(
        "min.cleanable.dirty.ratio", ValueType.DOUBLE,
        "A compacted log is cleaned once its dirty bytes are more than this share of its cleanable bytes.",
        minimum=0, maximum=1,
    ))  # fmt: skip
    min_compaction_lag_ms: int = field(default=0, metadata=key_field(
        "min.compaction.lag.ms", ValueType.LONG,
        "The cleaner leaves a segment alone while its newest record is younger than this.",
        minimum=0,
    ))  # fmt: skip
    max_compaction_lag_ms: int = field(default=LONG_MAX, metadata=key_field(
        "max.compaction.lag.ms", ValueType.LONG,
        "A compacted log whose oldest dirty segment is this old is cleaned whatever its dirty ratio (Long.MAX: "
        "never forced); it also caps segment.ms.",
        minimum=1,
    ))  # fmt: skip
    delete_retention_ms: int = field(default=MS_PER_DAY, metadata=key_field(
        "delete.retention.ms", ValueType.LONG,
        "How long the cleaner keeps a tombstone or a removable transaction marker, from the first clean that "
        "could remove it (1 day).",
        minimum=0,
    ))  # fmt: skip
    flush_messages: int = field(default=LONG_MAX, metadata=key_field(
        "flush.messages", ValueType.LONG,
        "fsync a partition's log once this many records were appended since its last flush (Long.MAX: never; "
        "durability comes from replication and fsync(2) on a handle).",
        minimum=1,
    ))  # fmt: skip
    flush_ms: int = field(default=LONG_MAX, metadata=key_field(
        "flush.ms", ValueType.LONG,
        "fsync a partition's log once its last flush is this old (Long.MAX: never).",
        minimum=0,
    ))  # fmt: skip

    def __post_init__(self) -> None:
        for key in LOG_KEYS.values():
            key.check(getattr(self, key.attribute))
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:  # Kafka's LogConfig.validate wording
            raise ConfigError(
                f"conflict topic config setting min.compaction.lag.ms ({self.min_compaction_lag_ms}) > "
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms})"
            )

    @property
    def compact(self) -> bool:
        """The log cleaner compacts this topic (``cleanup.policy`` has ``compact``)."""
        return CLEANUP_POLICY_COMPACT in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """Time and size retention run on this topic (``cleanup.policy`` has ``delete``)."""
        return CLEANUP_POLICY_DELETE in self.cleanup_policy.split(",")


LOG_KEYS: dict[str, ConfigKey] = keys_of(LogConfig)
"""The topic keys logfs implements, by Kafka name."""

# Every topic key Kafka defines (LogConfig's ConfigDef at the reference commit): the ones logfs does not implement
# are refused as such, not as unknown keys.
KAFKA_TOPIC_KEYS = frozenset([
    "cleanup.policy", "compression.gzip.level", "compression.lz4.level", "compression.type",
    "compression.zstd.level", "delete.retention.ms", "file.delete.delay.ms", "flush.messages", "flush.ms",
    "follower.replication.throttled.replicas", "index.interval.bytes", "leader.replication.throttled.replicas",
    "local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms", "max.message.bytes",
    "message.downconversion.enable", "message.format.version", "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.difference.max.ms", "message.timestamp.type",
    "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas", "preallocate",
    "remote.log.copy.disable", "remote.log.delete.on.disable", "remote.storage.enable", "retention.bytes",
    "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
    "unclean.leader.election.enable",
])  # fmt: skip

assert LOG_KEYS.keys() <= KAFKA_TOPIC_KEYS
assert [f.name for f in dataclasses.fields(LogConfig)] == [key.attribute for key in LOG_KEYS.values()]
assert all(key.attribute == key.name.replace(".", "_") for key in LOG_KEYS.values())  # snake_case of Kafka's name
