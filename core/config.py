"""Topic and store configuration: Kafka's keys, Kafka's defaults, Kafka's types and ranges.

Two levels, as in Kafka. :class:`LogConfig` is one topic's effective config (Kafka's LogConfig): the store's topic
defaults with the topic's overrides on top. :class:`StoreConfig` is what ``logfs mount --config key=value`` sets for
one process, as a broker's server.properties does; it is not persisted, and it carries the topic defaults
(:meth:`StoreConfig.log_defaults`). A topic's overrides are written to ``MOUNT/<topic>/config`` and persist in the
store (:func:`save_topic_overrides`); the store's defaults do not, so a topic follows the defaults of the process
that serves it wherever it has no override of its own.

Every key, topic keys first (``<topic>/config`` and ``--config``), then store keys (``--config`` only), with the
broker spellings ``--config`` also accepts (Kafka's ServerTopicConfigSynonyms) and, for those, the conversion Kafka
applies. Rolling is reference §3, retention §8, min.insync.replicas §6.3; docs/config.md holds the same table::

    key                             default             valid values; meaning; broker spellings
    cleanup.policy                  delete              delete. Retention deletes old segments; compact is refused:
                                                        logfs does not implement log compaction. Broker:
                                                        log.cleanup.policy.
    file.delete.delay.ms            60000               long, at least 0. Wait this long after retention renames a
                                                        segment to .deleted before unlinking its files (1 minute).
                                                        Broker: log.segment.delete.delay.ms.
    flush.messages                  9223372036854775807 long, at least 1. fsync a partition's log once this many records
                                                        were appended since its last flush (Long.MAX: never; durability
                                                        comes from replication and fsync(2) on a handle). Broker:
                                                        log.flush.interval.messages.
    flush.ms                        9223372036854775807 long, at least 0. fsync a partition's log once its last flush is
                                                        this old (Long.MAX: never). Broker: log.flush.interval.ms,
                                                        log.flush.scheduler.interval.ms.
    index.interval.bytes            4096                int, at least 0. Add an offset and a time index entry once this
                                                        many bytes were appended since the last entry (sparse indexes).
                                                        Broker: log.index.interval.bytes.
    max.message.bytes               1048588             int, at least 0. Largest batch accepted, as stored (compressed),
                                                        in bytes: 1 MiB plus the 12-byte log overhead; a larger one
                                                        fails with EFBIG. Broker: message.max.bytes.
    message.timestamp.after.max.ms  9223372036854775807 long, at least 0. With CreateTime, refuse a batch whose
                                                        timestamp is more than this after the leader's clock (Long.MAX:
                                                        no limit). Broker: log.message.timestamp.after.max.ms.
    message.timestamp.before.max.ms 9223372036854775807 long, at least 0. With CreateTime, refuse a batch whose
                                                        timestamp is more than this before the leader's clock (Long.MAX:
                                                        no limit). Broker: log.message.timestamp.before.max.ms.
    message.timestamp.type          CreateTime          CreateTime, LogAppendTime. CreateTime keeps the producer's
                                                        timestamps; LogAppendTime stamps each batch with the leader's
                                                        clock when it is appended. Broker: log.message.timestamp.type.
    min.insync.replicas             1                   int, at least 1. acks=all (fsync(2), O_SYNC, O_DSYNC) needs this
                                                        many in-sync replicas, capped at the number of replicas.
    retention.bytes                 -1                  long. Delete the oldest segments while the partition is larger
                                                        than this many bytes; any negative value: no size limit. Broker:
                                                        log.retention.bytes.
    retention.ms                    604800000           long, at least -1. Delete a closed segment once its newest
                                                        record is older than this (7 days); -1: keep forever. Broker:
                                                        log.retention.ms (negative: -1; 0 refused),
                                                        log.retention.minutes (minutes to ms; int; negative: -1; 0
                                                        refused), log.retention.hours (hours to ms; int; negative: -1; 0
                                                        refused).
    segment.bytes                   1073741824          int, at least 14. Roll a new segment before an append would take
                                                        the active one past this size (1 GiB); a single append larger
                                                        than this fails with EFBIG. Broker: log.segment.bytes.
    segment.index.bytes             10485760            int, at least 12. Size a new .index and .timeindex is
                                                        preallocated to (10 MiB); a full index rolls the segment.
                                                        Broker: log.index.size.max.bytes.
    segment.jitter.ms               0                   long, at least 0. Subtract a random amount below min(this,
                                                        segment.ms), fixed per segment, from segment.ms so that segments
                                                        do not all roll at once. Broker: log.roll.jitter.ms,
                                                        log.roll.jitter.hours (hours to ms; int, at least 0).
    segment.ms                      604800000           long, at least 1. Roll a new segment once an append's records
                                                        are this much newer than the active segment's first batch (7
                                                        days); an empty segment never rolls for time. Broker:
                                                        log.roll.ms, log.roll.hours (hours to ms; int, at least 1).

    log.retention.check.interval.ms 300000              long, at least 1. How often retention looks for segments to
                                                        delete (5 minutes).
    max.follow.readers              1000                int, at least 1. logfs's own: follow/ handles that may be open
                                                        at once in the whole mount; one more fails with EMFILE.
    node.id                         0                   int, at least 0. This store's replica id; a store remembers the
                                                        first id it served under (meta.properties) and refuses another.
    num.partitions                  1                   int, at least 1. Partitions of a topic created by mkdir.
    replica.ids                     node.id             comma-separated ints, at least 0, node.id among them. The
                                                        replica set of every partition, the leader's own id included;
                                                        fetches from other ids are refused.
    replica.lag.time.max.ms         30000               long, at least 1. A follower that has not caught up with the
                                                        leader's log end offset for this long leaves the ISR (30
                                                        seconds).
    request.timeout.ms              30000               int, at least 0. How long fsync(2) waits for the in-sync
                                                        replicas (acks=all) before it fails with EIO (30 seconds).
    transaction.timeout.ms          60000               int, 1 to 900000. A transaction left open this long is aborted
                                                        (1 minute; Kafka's coordinator refuses more than
                                                        transaction.max.timeout.ms).

Values are read as Kafka's ConfigDef reads them: surrounding whitespace is trimmed; an int or long is an optional
sign and ASCII digits within Java's int (32-bit) or long (64-bit) range; enum values are spelt exactly as Kafka
spells them (``CreateTime``, not ``createtime``); a list is comma-separated. A bad value is refused with Kafka's
wording, ``Invalid value <value> for configuration <key>: <rule>``. Every range is Kafka's (at the reference
commit) except where logfs is stricter, each for a reason: ``segment.index.bytes`` is at least 12, not Kafka's 4,
because a smaller index cannot hold one 12-byte time index entry, and Kafka accepts such a value only to fail when
it next creates a segment; ``cleanup.policy`` must be ``delete``; the store keys that Kafka leaves unchecked get the
smallest value that makes sense, and ``transaction.timeout.ms`` the cap Kafka's transaction coordinator applies.
(Kafka 4.0 raised the minimum of ``segment.bytes`` to 1 MiB, KIP-1030; logfs keeps the reference's 14,
``RECORD_OVERHEAD_V0``, which small-segment tests need, as Kafka's own now get through ``internal.segment.bytes``.)

Kafka's other topic keys (``compression.type``, ``min.compaction.lag.ms``, ``remote.storage.enable`` …) are known
here by name, so that setting one is refused as known to Kafka but not implemented by logfs rather than as an
unknown key: logfs never pretends to honour a setting that it ignores.

Writing ``<topic>/config`` (spec §3, :func:`parse_config_lines`): each line ``key=value`` sets an override, ``key=``
removes it, blank lines are ignored, and a write is applied whole or not at all: any bad line (no ``=``, an unknown
key, a key logfs does not implement, a bad value) refuses the whole write with one ConfigError that lists every bad
line by number, and the overrides stay as they were. Lines apply in order, so a key set twice keeps its last value.
Overrides are kept in canonical form (``segment.bytes= +1024`` is kept as ``1024``).

Reading ``<topic>/config`` (:func:`render_config`) shows every topic key's effective value as ``key=value``,
overrides and defaults alike as the spec asks, sorted by key as ``kafka-configs --describe --all`` sorts them: the
same config always reads as the same bytes, and two topics' configs diff line by line. What was read can be written
back unchanged; that changes no value, though it turns each default into an override.

``--config`` (spec §6, :func:`parse_store_config`): each argument is ``key=value``; the same key given twice keeps
its last value, as in a properties file; every bad argument is reported at once, in one ConfigError. A topic key may
be given under its topic spelling or a broker spelling; when several spellings of one key are given, the first in
the order of the table wins (topic spelling first, then Kafka's order: ``log.retention.ms`` over
``log.retention.minutes`` over ``log.retention.hours``), and as in Kafka the others are ignored.

Overrides on disk (:func:`save_topic_overrides`, :func:`load_topic_overrides`): one small ``.properties``-style file
per topic, a comment line and then ``key=value`` lines sorted by key, replaced atomically (write ``<file>.tmp``,
fsync, rename, fsync the directory), so a crash leaves either the old overrides or the new ones. The caller (the
store) chooses the path.

Threads: everything here is a pure function of immutable values, except that :func:`load_topic_overrides` and
:func:`save_topic_overrides` block on the disk (keep them off the trio thread); any thread may call anything.
"""

from __future__ import annotations

import dataclasses
import enum
import errno
import os
import re
import textwrap
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logfs.core.durable import replace_file
from logfs.core.errors import ConfigError, DiskFull, StorageError
from logfs.core.format.batch import LOG_OVERHEAD, MIN_DECLARED_BATCH_BYTES, TimestampType
from logfs.core.format.varint import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

# --- constants: units, Kafka's spellings, and the limits behind the rules ------------------------------------------

MS_PER_MINUTE = 60 * 1000
MS_PER_HOUR = 60 * MS_PER_MINUTE
MS_PER_DAY = 24 * MS_PER_HOUR
LONG_MAX = INT64_MAX  # Kafka's Long.MAX_VALUE: "never" / "no limit"

TIMESTAMP_TYPE_NAMES = {TimestampType.CREATE_TIME: "CreateTime", TimestampType.LOG_APPEND_TIME: "LogAppendTime"}
CLEANUP_POLICY_DELETE = "delete"
CLEANUP_POLICY_COMPACT = "compact"
TRANSACTION_MAX_TIMEOUT_MS = 15 * MS_PER_MINUTE  # Kafka's transaction.max.timeout.ms default: the coordinator's cap
TIME_INDEX_ENTRY_BYTES = 12  # the larger index entry (core/log/index.py); segment.index.bytes must hold one

# The most a single ``<topic>/config`` write may carry. Every key with a long value is ~60 bytes, so 64 KiB is far
# above any real write and still bounds the parse.
CONFIG_TEXT_BYTES_MAX = 64 * 1024

assert MIN_DECLARED_BATCH_BYTES == 14  # Kafka's LegacyRecord.RECORD_OVERHEAD_V0, segment.bytes's minimum


class ValueType(enum.Enum):
    """How a key's value is written and read; INT and LONG are Java's 32- and 64-bit integers."""

    INT = "int"
    LONG = "long"
    TIMESTAMP_TYPE = "timestamp type"
    CLEANUP_POLICY = "cleanup policy"
    REPLICA_IDS = "replica ids"


_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")  # Java's parseInt/parseLong over ASCII
_LIST_SEPARATOR = re.compile(r"\s*,\s*")  # ConfigDef's LIST: COMMA_WITH_WHITESPACE
_INTEGER_BOUNDS = {ValueType.INT: (INT32_MIN, INT32_MAX), ValueType.LONG: (INT64_MIN, INT64_MAX)}


def _invalid(name: str, text: object, reason: str) -> ConfigError:
    """Kafka's ConfigException wording, so a Kafka user recognises it."""
    return ConfigError(f"Invalid value {text} for configuration {name}: {reason}")


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One key: Kafka's name, its value type and range, and what it means; its default is the field's default.

    ``attribute`` (the Python name) and ``default`` are filled in from the dataclass field the key describes.
    """

    name: str
    type: ValueType
    doc: str
    minimum: int | None = None
    maximum: int | None = None
    attribute: str = ""
    default: Any = None
    default_text: str | None = None  # the Default column when the value alone does not say it (replica.ids)

    def parse(self, text: str, *, spelling: str | None = None) -> Any:
        """The value ``text`` stands for; ConfigError naming ``spelling`` (default: this key) when it is bad."""
        name = spelling or self.name
        trimmed = text.strip()
        if self.type in _INTEGER_BOUNDS:
            low, high = _INTEGER_BOUNDS[self.type]
            if not _JAVA_INTEGER.fullmatch(trimmed) or not low <= int(trimmed) <= high:
                raise _invalid(name, trimmed, f"Not a number of type {self.type.name}")
            value: Any = int(trimmed)
        elif self.type is ValueType.TIMESTAMP_TYPE:
            by_name = {spelt: kind for kind, spelt in TIMESTAMP_TYPE_NAMES.items()}
            if trimmed not in by_name:
                raise _invalid(name, trimmed, f"String must be one of: {', '.join(by_name)}")
            value = by_name[trimmed]
        elif self.type is ValueType.CLEANUP_POLICY:
            value = _parse_cleanup_policy(name, trimmed)
        else:
            value = _parse_replica_ids(name, trimmed)
        self.check(value, spelling=name, text=trimmed)
        return value

    def check(self, value: Any, *, spelling: str | None = None, text: str | None = None) -> None:
        """Raise ConfigError unless ``value`` is of this key's type and in its range."""
        name = spelling or self.name
        shown = self.format(value) if text is None else text
        if self.type in _INTEGER_BOUNDS:
            low, high = _INTEGER_BOUNDS[self.type]
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
                raise _invalid(name, shown, f"Not a number of type {self.type.name}")
            if self.minimum is not None and value < self.minimum:
                raise _invalid(name, shown, f"Value must be at least {self.minimum}")
            if self.maximum is not None and value > self.maximum:
                raise _invalid(name, shown, f"Value must be no more than {self.maximum}")
        elif self.type is ValueType.TIMESTAMP_TYPE:
            if not isinstance(value, TimestampType):
                raise _invalid(name, shown, "must be a TimestampType")
        elif self.type is ValueType.CLEANUP_POLICY:
            if value != CLEANUP_POLICY_DELETE:
                raise _invalid(name, shown, f"logfs implements only {self.name}={CLEANUP_POLICY_DELETE}")
        elif not isinstance(value, tuple) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= INT32_MAX for i in value
        ):
            raise _invalid(name, shown, "must be a tuple of replica ids, each an int of at least 0")

    def format(self, value: Any) -> str:
        """``value`` as it is written in a config file; :meth:`parse` reads it back."""
        if self.type is ValueType.TIMESTAMP_TYPE:
            return TIMESTAMP_TYPE_NAMES[value]
        if self.type is ValueType.REPLICA_IDS:
            return ",".join(str(i) for i in value)
        return str(value)

    def valid_values(self) -> str:
        """The Valid values column of the docs table."""
        if self.type is ValueType.TIMESTAMP_TYPE:
            return ", ".join(f"`{name}`" for name in TIMESTAMP_TYPE_NAMES.values())
        if self.type is ValueType.CLEANUP_POLICY:
            return f"`{CLEANUP_POLICY_DELETE}`"
        if self.type is ValueType.REPLICA_IDS:
            return "comma-separated ints, at least 0, node.id among them"
        if self.minimum is not None and self.maximum is not None:
            return f"{self.type.value}, {self.minimum} to {self.maximum}"
        if self.minimum is not None:
            return f"{self.type.value}, at least {self.minimum}"
        return self.type.value


def _parse_cleanup_policy(name: str, text: str) -> str:
    policies = _LIST_SEPARATOR.split(text) if text else []
    for policy in policies:
        if policy not in (CLEANUP_POLICY_COMPACT, CLEANUP_POLICY_DELETE):
            raise _invalid(name, text, f"String must be one of: {CLEANUP_POLICY_COMPACT}, {CLEANUP_POLICY_DELETE}")
    if CLEANUP_POLICY_COMPACT in policies:
        raise _invalid(name, text, "logfs does not implement log compaction; the only policy is delete")
    if not policies:
        raise _invalid(name, text, "logfs implements only cleanup.policy=delete")
    return CLEANUP_POLICY_DELETE


def _parse_replica_ids(name: str, text: str) -> tuple[int, ...]:
    ids: list[int] = []
    for item in _LIST_SEPARATOR.split(text):
        if not _JAVA_INTEGER.fullmatch(item) or not 0 <= int(item) <= INT32_MAX:
            raise _invalid(name, text, f"{item!r} is not a replica id (an int of at least 0)")
        if int(item) in ids:
            raise _invalid(name, text, f"replica id {int(item)} is listed twice")
        ids.append(int(item))
    return tuple(ids)


def _key(name: str, type: ValueType, doc: str, **rules: Any) -> dict[str, ConfigKey]:
    """The metadata of a config field: its :class:`ConfigKey` (the field's default is the key's default)."""
    return {"key": ConfigKey(name, type, doc, **rules)}


def _keys_of(cls: type) -> dict[str, ConfigKey]:
    """The ConfigKeys of a config dataclass by Kafka name, each completed with its attribute and default."""
    keys = {}
    for f in dataclasses.fields(cls):
        if "key" in f.metadata:
            keys[f.metadata["key"].name] = dataclasses.replace(f.metadata["key"], attribute=f.name, default=f.default)
    return keys


# --- the topic config ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogConfig:
    """One topic's effective config (Kafka's LogConfig): the fields logfs implements, Kafka's defaults.

    Building one checks every field (ConfigError), so a LogConfig in hand is always valid. Any thread.
    """

    segment_bytes: int = field(default=1024 * 1024 * 1024, metadata=_key(
        "segment.bytes", ValueType.INT,
        "Roll a new segment before an append would take the active one past this size (1 GiB); a single append "
        "larger than this fails with EFBIG.",
        minimum=MIN_DECLARED_BATCH_BYTES,
    ))  # fmt: skip
    segment_ms: int = field(default=7 * MS_PER_DAY, metadata=_key(
        "segment.ms", ValueType.LONG,
        "Roll a new segment once an append's records are this much newer than the active segment's first batch "
        "(7 days); an empty segment never rolls for time.",
        minimum=1,
    ))  # fmt: skip
    segment_jitter_ms: int = field(default=0, metadata=_key(
        "segment.jitter.ms", ValueType.LONG,
        "Subtract a random amount below min(this, segment.ms), fixed per segment, from segment.ms so that "
        "segments do not all roll at once.",
        minimum=0,
    ))  # fmt: skip
    segment_index_bytes: int = field(default=10 * 1024 * 1024, metadata=_key(
        "segment.index.bytes", ValueType.INT,
        "Size a new `.index` and `.timeindex` is preallocated to (10 MiB); a full index rolls the segment.",
        minimum=TIME_INDEX_ENTRY_BYTES,
    ))  # fmt: skip
    index_interval_bytes: int = field(default=4096, metadata=_key(
        "index.interval.bytes", ValueType.INT,
        "Add an offset and a time index entry once this many bytes were appended since the last entry "
        "(sparse indexes).",
        minimum=0,
    ))  # fmt: skip
    retention_ms: int = field(default=7 * MS_PER_DAY, metadata=_key(
        "retention.ms", ValueType.LONG,
        "Delete a closed segment once its newest record is older than this (7 days); -1: keep forever.",
        minimum=-1,
    ))  # fmt: skip
    retention_bytes: int = field(default=-1, metadata=_key(
        "retention.bytes", ValueType.LONG,
        "Delete the oldest segments while the partition is larger than this many bytes; any negative value: "
        "no size limit.",
    ))  # fmt: skip
    file_delete_delay_ms: int = field(default=MS_PER_MINUTE, metadata=_key(
        "file.delete.delay.ms", ValueType.LONG,
        "Wait this long after retention renames a segment to `.deleted` before unlinking its files (1 minute).",
        minimum=0,
    ))  # fmt: skip
    max_message_bytes: int = field(default=1024 * 1024 + LOG_OVERHEAD, metadata=_key(
        "max.message.bytes", ValueType.INT,
        "Largest batch accepted, as stored (compressed), in bytes: 1 MiB plus the 12-byte log overhead; a larger "
        "one fails with EFBIG.",
        minimum=0,
    ))  # fmt: skip
    message_timestamp_type: TimestampType = field(default=TimestampType.CREATE_TIME, metadata=_key(
        "message.timestamp.type", ValueType.TIMESTAMP_TYPE,
        "CreateTime keeps the producer's timestamps; LogAppendTime stamps each batch with the leader's clock "
        "when it is appended.",
    ))  # fmt: skip
    message_timestamp_before_max_ms: int = field(default=LONG_MAX, metadata=_key(
        "message.timestamp.before.max.ms", ValueType.LONG,
        "With CreateTime, refuse a batch whose timestamp is more than this before the leader's clock "
        "(Long.MAX: no limit).",
        minimum=0,
    ))  # fmt: skip
    message_timestamp_after_max_ms: int = field(default=LONG_MAX, metadata=_key(
        "message.timestamp.after.max.ms", ValueType.LONG,
        "With CreateTime, refuse a batch whose timestamp is more than this after the leader's clock "
        "(Long.MAX: no limit).",
        minimum=0,
    ))  # fmt: skip
    min_insync_replicas: int = field(default=1, metadata=_key(
        "min.insync.replicas", ValueType.INT,
        "acks=all (fsync(2), O_SYNC, O_DSYNC) needs this many in-sync replicas, capped at the number of replicas.",
        minimum=1,
    ))  # fmt: skip
    cleanup_policy: str = field(default=CLEANUP_POLICY_DELETE, metadata=_key(
        "cleanup.policy", ValueType.CLEANUP_POLICY,
        "Retention deletes old segments; `compact` is refused: logfs does not implement log compaction.",
    ))  # fmt: skip
    flush_messages: int = field(default=LONG_MAX, metadata=_key(
        "flush.messages", ValueType.LONG,
        "fsync a partition's log once this many records were appended since its last flush (Long.MAX: never; "
        "durability comes from replication and fsync(2) on a handle).",
        minimum=1,
    ))  # fmt: skip
    flush_ms: int = field(default=LONG_MAX, metadata=_key(
        "flush.ms", ValueType.LONG,
        "fsync a partition's log once its last flush is this old (Long.MAX: never).",
        minimum=0,
    ))  # fmt: skip

    def __post_init__(self) -> None:
        for key in LOG_KEYS.values():
            key.check(getattr(self, key.attribute))


LOG_KEYS: dict[str, ConfigKey] = _keys_of(LogConfig)
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


# --- the store config -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """What ``logfs mount --config`` sets for one process (a broker's server.properties); not persisted.

    ``replica_ids`` given as ``()`` means ``(node_id,)``, a store with no followers. ``topic_defaults`` is the
    LogConfig every topic starts from (:meth:`log_defaults`). Building one checks every field. Any thread.
    """

    node_id: int = field(default=0, metadata=_key(
        "node.id", ValueType.INT,
        "This store's replica id; a store remembers the first id it served under (meta.properties) and refuses "
        "another.",
        minimum=0,
    ))  # fmt: skip
    replica_ids: tuple[int, ...] = field(default=(), metadata=_key(
        "replica.ids", ValueType.REPLICA_IDS,
        "The replica set of every partition, the leader's own id included; fetches from other ids are refused.",
        default_text="node.id",
    ))  # fmt: skip
    num_partitions: int = field(default=1, metadata=_key(
        "num.partitions", ValueType.INT,
        "Partitions of a topic created by mkdir.",
        minimum=1,
    ))  # fmt: skip
    log_retention_check_interval_ms: int = field(default=5 * MS_PER_MINUTE, metadata=_key(
        "log.retention.check.interval.ms", ValueType.LONG,
        "How often retention looks for segments to delete (5 minutes).",
        minimum=1,
    ))  # fmt: skip
    replica_lag_time_max_ms: int = field(default=30_000, metadata=_key(
        "replica.lag.time.max.ms", ValueType.LONG,
        "A follower that has not caught up with the leader's log end offset for this long leaves the ISR "
        "(30 seconds).",
        minimum=1,
    ))  # fmt: skip
    request_timeout_ms: int = field(default=30_000, metadata=_key(
        "request.timeout.ms", ValueType.INT,
        "How long fsync(2) waits for the in-sync replicas (acks=all) before it fails with EIO (30 seconds).",
        minimum=0,
    ))  # fmt: skip
    transaction_timeout_ms: int = field(default=MS_PER_MINUTE, metadata=_key(
        "transaction.timeout.ms", ValueType.INT,
        "A transaction left open this long is aborted (1 minute; Kafka's coordinator refuses more than "
        "transaction.max.timeout.ms).",
        minimum=1, maximum=TRANSACTION_MAX_TIMEOUT_MS,
    ))  # fmt: skip
    max_follow_readers: int = field(default=1000, metadata=_key(
        "max.follow.readers", ValueType.INT,
        "logfs's own: `follow/` handles that may be open at once in the whole mount; one more fails with EMFILE.",
        minimum=1,
    ))  # fmt: skip
    topic_defaults: LogConfig = field(default_factory=LogConfig)

    def __post_init__(self) -> None:
        for key in STORE_KEYS.values():
            key.check(getattr(self, key.attribute))
        if not self.replica_ids:
            object.__setattr__(self, "replica_ids", (self.node_id,))
        if self.node_id not in self.replica_ids:
            raise _invalid(
                "replica.ids", ",".join(map(str, self.replica_ids)), f"must include this store's node.id {self.node_id}"
            )
        if len(set(self.replica_ids)) != len(self.replica_ids):
            raise _invalid("replica.ids", ",".join(map(str, self.replica_ids)), "a replica id is listed twice")
        if not isinstance(self.topic_defaults, LogConfig):
            raise ConfigError(f"topic defaults must be a LogConfig, not {type(self.topic_defaults).__name__}")

    def log_defaults(self) -> LogConfig:
        """The config of a topic with no overrides: Kafka's defaults with this process's ``--config``. Any thread."""
        return self.topic_defaults


STORE_KEYS: dict[str, ConfigKey] = _keys_of(StoreConfig)
"""The store-only keys of ``--config``, by Kafka name (the topic keys are :data:`LOG_KEYS`)."""

assert not STORE_KEYS.keys() & LOG_KEYS.keys()


@dataclass(frozen=True, slots=True)
class BrokerSynonym:
    """A broker spelling of a topic key (Kafka's ConfigSynonym), read as ``type`` and scaled to the topic's unit.

    ``minimum`` is the broker key's own range, checked before scaling; the scaled value must then pass the topic
    key's. ``retention_time`` applies KafkaConfig's rules for the broker's retention time: any negative value is -1
    (unlimited, ``logRetentionTimeMillis``) and 0 is refused (``validateValues``), though a topic may set
    ``retention.ms=0``.
    """

    name: str
    topic_key: str
    type: ValueType | None = None  # None: the topic key's own type
    unit_ms: int = 1
    minimum: int | None = None
    retention_time: bool = False

    def parse(self, text: str) -> Any:
        """The topic key's value that ``text`` stands for; ConfigError naming this spelling when it is bad."""
        topic = LOG_KEYS[self.topic_key]
        if self.type is None and self.unit_ms == 1 and not self.retention_time:
            return topic.parse(text, spelling=self.name)
        own = ConfigKey(self.name, self.type or topic.type, "", minimum=self.minimum)
        value = own.parse(text) * self.unit_ms
        if self.retention_time and value < 0:
            value = -1
        if self.retention_time and value == 0:
            raise _invalid(self.name, text.strip(), "must be unlimited (-1) or at least 1 ms")
        try:
            topic.check(value, spelling=self.name, text=text.strip())
        except ConfigError as exc:
            raise ConfigError(f"{exc} (as {self.topic_key}={value})") from exc
        return value

    def conversion(self) -> str:
        """The Conversion column of the docs table."""
        parts = []
        if self.unit_ms == MS_PER_HOUR:
            parts.append("hours to ms")
        elif self.unit_ms == MS_PER_MINUTE:
            parts.append("minutes to ms")
        if self.type is not None:
            parts.append(self.type.value + (f", at least {self.minimum}" if self.minimum is not None else ""))
        if self.retention_time:
            parts.append("negative: -1; 0 refused")
        return "; ".join(parts)


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
        BrokerSynonym("log.message.timestamp.type", "message.timestamp.type"),
        BrokerSynonym("log.message.timestamp.before.max.ms", "message.timestamp.before.max.ms"),
        BrokerSynonym("log.message.timestamp.after.max.ms", "message.timestamp.after.max.ms"),
    )
}  # fmt: skip

assert all(s.topic_key in LOG_KEYS for s in BROKER_SYNONYMS.values())
assert not BROKER_SYNONYMS.keys() & (LOG_KEYS.keys() | STORE_KEYS.keys())


# --- parsing --------------------------------------------------------------------------------------------------------


def _topic_key_problem(key: str) -> str | None:
    """Why ``key`` cannot be a topic override, or None when logfs implements it."""
    if key in LOG_KEYS:
        return None
    if key in KAFKA_TOPIC_KEYS:
        return f"{key} is a Kafka topic config that logfs does not implement"
    if key in BROKER_SYNONYMS:
        return f"{key} is a broker setting (logfs mount --config); the topic key is {BROKER_SYNONYMS[key].topic_key}"
    if key in STORE_KEYS:
        return f"{key} is a store setting (logfs mount --config), not a topic config"
    return f"unknown topic config key {key!r}"


def _override_value(key: str, text: str) -> Any:
    """The value of override ``key=text``; ConfigError when logfs cannot take it."""
    problem = _topic_key_problem(key)
    if problem is not None:
        raise ConfigError(problem)
    return LOG_KEYS[key].parse(text)


def _canonical_override(key: str, text: str) -> str:
    """``text`` as logfs stores and shows it (``" +1024"`` is ``1024``); ConfigError when logfs cannot take it."""
    value = _override_value(key, text)
    return LOG_KEYS[key].format(value)


def parse_store_config(pairs: Iterable[str]) -> StoreConfig:
    """The StoreConfig that ``--config`` arguments ``key=value`` give, over Kafka's defaults. Any thread.

    Raises one ConfigError listing every bad argument: no ``=``, an unknown key (named), a Kafka key logfs does not
    implement, or a bad value (naming key, value and rule).
    """
    given: dict[str, str] = {}
    errors: list[str] = []
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            errors.append(f"expected key=value, got {pair!r}")
        elif key in LOG_KEYS or key in STORE_KEYS or key in BROKER_SYNONYMS:
            given[key] = text  # the last one given wins
        elif key in KAFKA_TOPIC_KEYS:
            errors.append(f"{key} is a Kafka topic config that logfs does not implement")
        else:
            errors.append(f"unknown config key {key!r}")

    store: dict[str, Any] = {}
    for key, text in given.items():
        if key in STORE_KEYS:
            try:
                store[STORE_KEYS[key].attribute] = STORE_KEYS[key].parse(text)
            except ConfigError as exc:
                errors.append(str(exc))
    topic: dict[str, Any] = {}
    for name, config_key in LOG_KEYS.items():
        spellings = [name, *(s.name for s in BROKER_SYNONYMS.values() if s.topic_key == name)]
        spelling = next((s for s in spellings if s in given), None)
        if spelling is None:
            continue
        try:
            if spelling == name:
                topic[config_key.attribute] = config_key.parse(given[name])
            else:
                topic[config_key.attribute] = BROKER_SYNONYMS[spelling].parse(given[spelling])
        except ConfigError as exc:
            errors.append(str(exc))
    if not errors:
        try:
            return StoreConfig(**store, topic_defaults=LogConfig(**topic))
        except ConfigError as exc:
            errors.append(str(exc))
    raise ConfigError("; ".join(errors))


def apply_overrides(defaults: LogConfig, overrides: Mapping[str, str]) -> LogConfig:
    """``defaults`` with a topic's ``overrides`` (Kafka key to value text) on top. Any thread.

    Raises one ConfigError listing every override logfs cannot take (unknown, not implemented, bad value).
    """
    changes: dict[str, Any] = {}
    errors: list[str] = []
    for key, text in overrides.items():
        try:
            value = _override_value(key, text)
        except ConfigError as exc:
            errors.append(str(exc))
        else:
            changes[LOG_KEYS[key].attribute] = value
    if errors:
        raise ConfigError("; ".join(errors))
    return dataclasses.replace(defaults, **changes)


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number from 1, line) for each line of ``text`` that is not blank, ``\\r\\n`` taken as ``\\n``."""
    for line_number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            yield line_number, line.removesuffix("\r")


def parse_config_lines(text: str, current_overrides: Mapping[str, str]) -> dict[str, str]:
    """The overrides after a write of ``text`` to ``<topic>/config`` over ``current_overrides``. Any thread.

    ``key=value`` sets an override, ``key=`` (or ``key=`` and blanks) removes it, blank lines are ignored; lines
    apply in order. The write is whole or nothing: one ConfigError lists every bad line by number, and then the
    caller keeps ``current_overrides``, which this never changes.
    """
    size_bytes = len(text.encode())
    if size_bytes > CONFIG_TEXT_BYTES_MAX:
        raise ConfigError(f"config write of {size_bytes} bytes exceeds {CONFIG_TEXT_BYTES_MAX} bytes")
    overrides = dict(current_overrides)
    errors: list[str] = []
    for line_number, line in _lines(text):
        key, sep, value = line.partition("=")
        key = key.strip()
        try:
            if not sep or not key:
                raise ConfigError(f"expected key=value, got {line!r}")
            if not value.strip():
                problem = _topic_key_problem(key)
                if problem is not None:
                    raise ConfigError(problem)
                overrides.pop(key, None)
            else:
                overrides[key] = _canonical_override(key, value)
        except ConfigError as exc:
            errors.append(f"line {line_number}: {exc}")
    if errors:
        raise ConfigError("config not changed: " + "; ".join(errors))
    return overrides


def render_config(effective: LogConfig, overrides: Mapping[str, str]) -> str:
    """What reading ``<topic>/config`` shows: ``key=value`` for every topic key, sorted by key. Any thread.

    Overrides and defaults look alike (spec §3); ``overrides`` only serves to check that ``effective`` includes
    them (a mismatch is a logfs bug).
    """
    for key, text in overrides.items():
        assert key in LOG_KEYS and LOG_KEYS[key].parse(text) == getattr(effective, LOG_KEYS[key].attribute), (
            f"override {key}={text} is not in the effective config"
        )
    return "".join(
        f"{name}={key.format(getattr(effective, key.attribute))}\n" for name, key in sorted(LOG_KEYS.items())
    )


# --- overrides on disk ----------------------------------------------------------------------------------------------

TOPIC_OVERRIDES_HEADER = "# logfs topic config overrides: written by logfs, changed through MOUNT/<topic>/config"


def load_topic_overrides(path: str | os.PathLike[str]) -> dict[str, str]:
    """A topic's overrides as :func:`save_topic_overrides` wrote them; an absent file holds none. Any thread (blocks).

    ``#`` and ``!`` lines are comments, as in a Java properties file. ConfigError names the file and line of an
    entry logfs cannot take; StorageError when the file cannot be read.
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise StorageError(f"cannot read topic config {path}: {exc.strerror or exc}") from exc
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"topic config {path}: not UTF-8 at byte {exc.start}") from exc
    overrides: dict[str, str] = {}
    for line_number, line in _lines(text):
        if line.lstrip().startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        try:
            if not sep:
                raise ConfigError(f"expected key=value, got {line!r}")
            overrides[key.strip()] = _canonical_override(key.strip(), value)
        except ConfigError as exc:
            raise ConfigError(f"topic config {path} line {line_number}: {exc}") from exc
    return overrides


def save_topic_overrides(path: str | os.PathLike[str], overrides: Mapping[str, str]) -> None:
    """Replace the file at ``path`` with ``overrides``, atomically and durably. Any thread (blocks: fsync).

    Writes ``<path>.tmp``, fsyncs it, renames it over ``path`` and fsyncs the directory, creating the directory
    (and fsyncing its parent) when it is missing. ConfigError (nothing written) for an override logfs cannot take;
    DiskFull or StorageError (the old file intact, no ``.tmp`` left) when the disk fails.
    """
    path = Path(path)
    lines = [TOPIC_OVERRIDES_HEADER]
    for key, text in sorted(overrides.items()):
        lines.append(f"{key}={_canonical_override(key, text)}")
    data = "".join(f"{line}\n" for line in lines).encode()
    try:
        replace_file(path, data, make_parents=True)
    except OSError as exc:
        error = DiskFull if exc.errno in (errno.ENOSPC, errno.EDQUOT) else StorageError
        raise error(f"cannot write topic config {path}: {exc.strerror or exc}") from exc


# --- the docs table -------------------------------------------------------------------------------------------------


def _table_rows() -> Iterator[tuple[str, str, str, str, str]]:
    """(key, default, valid values, meaning, broker spellings) of every key: topic keys, then store keys."""
    for keys in (LOG_KEYS, STORE_KEYS):
        for name, key in sorted(keys.items()):
            default = key.default_text if key.default_text is not None else key.format(key.default)
            spellings = ", ".join(
                s.name + (f" ({s.conversion()})" if s.conversion() else "")
                for s in BROKER_SYNONYMS.values()
                if s.topic_key == name
            )
            yield name, default, key.valid_values(), key.doc, spellings


def render_key_table(*, markdown: bool = False) -> str:
    """The table of every key: plain text within 116 columns (this docstring) or markdown (docs/config.md).

    Generated from the keys themselves; the tests check that both documents hold it as generated.
    """
    if markdown:
        lines = ["| Key | Level | Default | Valid values | Meaning | Broker spellings |", "|---|---|---|---|---|---|"]
        for name, default, valid, doc, spellings in _table_rows():
            shown = default if name in STORE_KEYS and STORE_KEYS[name].default_text else f"`{default}`"
            level = "topic" if name in LOG_KEYS else "store"
            lines.append(f"| `{name}` | {level} | {shown} | {valid} | {doc} | {spellings} |")
        return "\n".join(lines) + "\n"
    key_width, default_width, width = 32, 20, 116
    lines = [f"{'key':<{key_width}}{'default':<{default_width}}valid values; meaning; broker spellings"]
    for name, default, valid, doc, spellings in _table_rows():
        if name == next(iter(sorted(STORE_KEYS))):
            lines.append("")  # the store keys follow the topic keys
        text = f"{valid}. {doc}" + (f" Broker: {spellings}." if spellings else "")
        wrapped = textwrap.wrap(text.replace("`", ""), width - key_width - default_width)
        lines.append(f"{name:<{key_width}}{default:<{default_width}}{wrapped[0]}")
        lines.extend(" " * (key_width + default_width) + more for more in wrapped[1:])
    return "\n".join(line.rstrip() for line in lines) + "\n"
