"""Topic and store config: Kafka's defaults, synonyms and ranges; the ``<topic>/config`` write rules; persistence."""

from __future__ import annotations

import dataclasses
import errno
import re
from pathlib import Path

import pytest

from logfs.core import config, configtext
from logfs.core.config import KAFKA_TOPIC_KEYS, LOG_KEYS, LogConfig
from logfs.core.configtext import (
    apply_overrides,
    load_topic_overrides,
    parse_config_lines,
    parse_store_config,
    render_config,
    render_key_table,
    save_topic_overrides,
)
from logfs.core.errors import ConfigError, DiskFull
from logfs.core.format.batch import TimestampType
from logfs.core.storeconfig import BROKER_SYNONYMS, STORE_KEYS, StoreConfig

ROOT = Path(__file__).resolve().parents[2]

# Kafka's defaults as Kafka writes them (LogConfig, ServerLogConfigs, ServerConfigs, ReplicationConfigs at the
# reference commit), typed out here rather than read from the module under test.
KAFKA_TOPIC_DEFAULTS = {
    "cleanup.policy": "delete",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "index.interval.bytes": "4096",
    "max.compaction.lag.ms": "9223372036854775807",
    "max.message.bytes": "1048588",
    "message.timestamp.after.max.ms": "9223372036854775807",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "segment.ms": "604800000",
}


def render_defaults(**changes: object) -> str:
    """What ``<topic>/config`` reads for Kafka's defaults with ``changes`` (Kafka key -> text)."""
    values = {**KAFKA_TOPIC_DEFAULTS, **{k: str(v) for k, v in changes.items()}}
    return "".join(f"{key}={value}\n" for key, value in sorted(values.items()))


def error_of(excinfo: pytest.ExceptionInfo[ConfigError]) -> str:
    return str(excinfo.value)


# --- defaults ------------------------------------------------------------------------------------------------------


def test_topic_defaults_are_kafkas() -> None:
    assert render_config(LogConfig(), {}) == render_defaults()


def test_topic_defaults_as_python_values() -> None:
    defaults = LogConfig()
    assert defaults.segment_bytes == 1024**3
    assert defaults.segment_ms == defaults.retention_ms == 7 * 24 * 3600 * 1000
    assert defaults.max_message_bytes == 1024 * 1024 + 12
    assert defaults.message_timestamp_type is TimestampType.CREATE_TIME
    assert defaults.message_timestamp_before_max_ms == defaults.flush_ms == 2**63 - 1


def test_store_defaults_are_kafkas() -> None:
    store = parse_store_config([])
    assert store == StoreConfig()
    assert (store.node_id, store.replica_ids, store.num_partitions) == (0, (0,), 1)
    assert store.log_retention_check_interval_ms == 300_000
    assert store.replica_lag_time_max_ms == 30_000
    assert store.request_timeout_ms == 30_000
    assert store.transaction_timeout_ms == 60_000
    assert store.max_follow_readers == 1000
    assert store.log_defaults() == LogConfig()


def test_segment_index_bytes_agrees_with_the_index() -> None:
    from logfs.core.log import index

    assert LogConfig().segment_index_bytes == index.SEGMENT_INDEX_BYTES_DEFAULT
    assert LOG_KEYS["segment.index.bytes"].minimum == index.TIME_INDEX_ENTRY_BYTES  # the larger entry fits


def test_kafka_topic_keys_are_kafkas_36() -> None:
    """LogConfig's ConfigDef at the reference commit defines 36 topic keys; logfs implements 20 of them."""
    assert (len(KAFKA_TOPIC_KEYS), len(LOG_KEYS)) == (36, 20)


def test_every_implemented_key_is_a_kafka_topic_key_in_snake_case() -> None:
    assert set(KAFKA_TOPIC_DEFAULTS) == set(LOG_KEYS) <= KAFKA_TOPIC_KEYS
    assert [f.name for f in dataclasses.fields(LogConfig)] == [k.replace(".", "_") for k in LOG_KEYS]


# --- --config: synonyms and conversions ----------------------------------------------------------------------------


SPELLING_CASES = [
    ("log.segment.bytes=1048576", "segment_bytes", 1048576),
    ("log.roll.ms=1000", "segment_ms", 1000),
    ("log.roll.hours=2", "segment_ms", 2 * 3600_000),
    ("log.roll.jitter.ms=500", "segment_jitter_ms", 500),
    ("log.roll.jitter.hours=1", "segment_jitter_ms", 3600_000),
    ("log.index.size.max.bytes=4096", "segment_index_bytes", 4096),
    ("log.index.interval.bytes=1", "index_interval_bytes", 1),
    ("log.retention.ms=5000", "retention_ms", 5000),
    ("log.retention.minutes=3", "retention_ms", 3 * 60_000),
    ("log.retention.hours=24", "retention_ms", 24 * 3600_000),
    ("log.retention.bytes=1000000", "retention_bytes", 1000000),
    ("log.segment.delete.delay.ms=0", "file_delete_delay_ms", 0),
    ("message.max.bytes=2000", "max_message_bytes", 2000),
    ("log.message.timestamp.type=LogAppendTime", "message_timestamp_type", TimestampType.LOG_APPEND_TIME),
    ("log.message.timestamp.before.max.ms=10", "message_timestamp_before_max_ms", 10),
    ("log.message.timestamp.after.max.ms=20", "message_timestamp_after_max_ms", 20),
    ("log.flush.interval.messages=100", "flush_messages", 100),
    ("log.flush.interval.ms=250", "flush_ms", 250),
    ("log.flush.scheduler.interval.ms=300", "flush_ms", 300),
    ("log.cleanup.policy=delete", "cleanup_policy", "delete"),
    ("log.cleanup.policy=compact", "cleanup_policy", "compact"),
    ("log.cleaner.min.cleanable.ratio=0.75", "min_cleanable_dirty_ratio", 0.75),
    ("log.cleaner.min.compaction.lag.ms=60000", "min_compaction_lag_ms", 60000),
    ("log.cleaner.max.compaction.lag.ms=3600000", "max_compaction_lag_ms", 3600000),
    ("log.cleaner.delete.retention.ms=1000", "delete_retention_ms", 1000),
    ("min.insync.replicas=2", "min_insync_replicas", 2),
    ("segment.bytes=4096", "segment_bytes", 4096),
]


@pytest.mark.parametrize(("pair", "attribute", "value"), SPELLING_CASES)
def test_broker_spelling_sets_the_topic_default(pair: str, attribute: str, value: object) -> None:
    defaults = parse_store_config([pair]).log_defaults()
    assert getattr(defaults, attribute) == value
    assert dataclasses.replace(defaults, **{attribute: getattr(LogConfig(), attribute)}) == LogConfig()


def test_every_broker_spelling_is_tested() -> None:
    assert set(BROKER_SYNONYMS) <= {pair.split("=")[0] for pair, _, _ in SPELLING_CASES}


def test_log_retention_hours_provided() -> None:
    """KafkaConfigTest.testLogRetentionTimeHoursProvided: log.retention.hours=1 is 3,600,000 ms."""
    assert parse_store_config(["log.retention.hours=1"]).log_defaults().retention_ms == 60 * 60 * 1000


def test_log_retention_minutes_over_hours() -> None:
    """KafkaConfigTest.testLogRetentionTimeBothMinutesAndHoursProvided: minutes win over hours."""
    store = parse_store_config(["log.retention.minutes=30", "log.retention.hours=1"])
    assert store.log_defaults().retention_ms == 30 * 60 * 1000


def test_log_retention_ms_over_minutes() -> None:
    """KafkaConfigTest.testLogRetentionTimeBothMinutesAndMsProvided: ms win over minutes, in any order given."""
    store = parse_store_config(["log.retention.minutes=10", "log.retention.ms=1800000"])
    assert store.log_defaults().retention_ms == 30 * 60 * 1000


def test_log_roll_ms_over_hours() -> None:
    """KafkaConfigTest.testLogRollTimeBothMsAndHoursProvided: log.roll.ms wins over log.roll.hours."""
    assert parse_store_config(["log.roll.hours=1", "log.roll.ms=1800000"]).log_defaults().segment_ms == 1800000


def test_topic_spelling_wins_over_broker_spelling() -> None:
    store = parse_store_config(["log.segment.bytes=2048", "segment.bytes=4096"])
    assert store.log_defaults().segment_bytes == 4096


def test_same_key_twice_keeps_the_last() -> None:
    assert parse_store_config(["num.partitions=2", "num.partitions=5"]).num_partitions == 5


@pytest.mark.parametrize("pair", ["log.retention.ms=-1", "log.retention.minutes=-1", "log.retention.hours=-1"])
def test_log_retention_unlimited(pair: str) -> None:
    """KafkaConfigTest.testLogRetentionUnlimited: -1 in any unit is unlimited."""
    assert parse_store_config([pair]).log_defaults().retention_ms == -1


def test_log_retention_negative_is_unlimited_and_ms_wins() -> None:
    """KafkaConfigTest.testLogRetentionUnlimited: log.retention.ms=-1 beside minutes=30 is still unlimited."""
    assert parse_store_config(["log.retention.ms=-1", "log.retention.minutes=30"]).log_defaults().retention_ms == -1
    assert parse_store_config(["log.retention.hours=-5"]).log_defaults().retention_ms == -1


@pytest.mark.parametrize("pair", ["log.retention.ms=0", "log.retention.minutes=0", "log.retention.hours=0"])
def test_log_retention_zero_refused(pair: str) -> None:
    """KafkaConfigTest.testLogRetentionValid: a broker retention of 0 in any unit is refused."""
    with pytest.raises(ConfigError) as excinfo:
        parse_store_config([pair])
    assert pair.split("=")[0] in error_of(excinfo)


def test_topic_retention_ms_zero_allowed() -> None:
    """A topic may set retention.ms=0 (LogConfig's range is at least -1); only the broker spelling refuses it."""
    assert apply_overrides(LogConfig(), {"retention.ms": "0"}).retention_ms == 0


def test_store_keys_parse() -> None:
    store = parse_store_config(
        [
            "node.id=2",
            "replica.ids=1, 2,3",
            "num.partitions=4",
            "log.retention.check.interval.ms=1000",
            "replica.lag.time.max.ms=500",
            "request.timeout.ms=0",
            "transaction.timeout.ms=900000",
            "max.follow.readers=5",
        ]
    )
    assert store == StoreConfig(2, (1, 2, 3), 4, 1000, 500, 0, 900000, 5)


def test_replica_ids_default_to_node_id() -> None:
    assert parse_store_config(["node.id=7"]).replica_ids == (7,)
    assert StoreConfig(node_id=3).replica_ids == (3,)


@pytest.mark.parametrize(
    ("pairs", "fragment"),
    [
        (["replica.ids=1,2"], "must include this store's node.id 0"),
        (["replica.ids=0,1,0"], "listed twice"),
        (["replica.ids=0,-1"], "'-1' is not a replica id"),
        (["replica.ids="], "'' is not a replica id"),
        (["node.id=-1"], "Value must be at least 0"),
        (["transaction.timeout.ms=900001"], "Value must be no more than 900000"),
        (["num.partitions=0"], "Value must be at least 1"),
    ],
)
def test_bad_store_values(pairs: list[str], fragment: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        parse_store_config(pairs)
    assert fragment in error_of(excinfo)


# --- bad values ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "text", "rule"),
    [
        ("segment.bytes", "-1", "Value must be at least 14"),
        ("segment.bytes", "13", "Value must be at least 14"),
        ("segment.bytes", "2147483648", "Not a number of type INT"),  # above Java's int
        ("segment.bytes", "abc", "Not a number of type INT"),
        ("segment.bytes", "1e6", "Not a number of type INT"),
        ("segment.bytes", "1_000", "Not a number of type INT"),  # Python's int() would take it, Java's does not
        ("segment.ms", "0", "Value must be at least 1"),
        ("segment.ms", "9223372036854775808", "Not a number of type LONG"),
        ("segment.jitter.ms", "-1", "Value must be at least 0"),
        ("segment.index.bytes", "11", "Value must be at least 12"),
        ("index.interval.bytes", "-1", "Value must be at least 0"),
        ("retention.ms", "-2", "Value must be at least -1"),
        ("retention.bytes", "not_a_number", "Not a number of type LONG"),
        ("file.delete.delay.ms", "-1", "Value must be at least 0"),
        ("max.message.bytes", "-1", "Value must be at least 0"),
        ("message.timestamp.type", "createtime", "String must be one of: CreateTime, LogAppendTime"),
        ("message.timestamp.type", "NoTimestampType", "String must be one of: CreateTime, LogAppendTime"),
        ("message.timestamp.before.max.ms", "-1", "Value must be at least 0"),
        ("message.timestamp.after.max.ms", "-1", "Value must be at least 0"),
        ("min.insync.replicas", "0", "Value must be at least 1"),
        ("min.insync.replicas", "-1", "Value must be at least 1"),
        ("cleanup.policy", "foobar", "String must be one of: compact, delete"),
        ("cleanup.policy", "true", "String must be one of: compact, delete"),
        ("flush.messages", "0", "Value must be at least 1"),
        ("flush.ms", "-1", "Value must be at least 0"),
    ],
)
def test_bad_value_names_key_value_and_rule(key: str, text: str, rule: str) -> None:
    """LogConfigTest.testFromPropsInvalid, for the keys logfs implements: through --config and <topic>/config."""
    expected = f"Invalid value {text} for configuration {key}: {rule}"
    with pytest.raises(ConfigError) as excinfo:
        parse_store_config([f"{key}={text}"])
    assert expected in error_of(excinfo)
    with pytest.raises(ConfigError) as excinfo:
        parse_config_lines(f"{key}={text}\n", {})
    assert f"line 1 of the write: {expected}" in error_of(excinfo)


def test_bad_broker_spelling_value_names_the_spelling() -> None:
    with pytest.raises(ConfigError) as excinfo:
        parse_store_config(["log.segment.bytes=10"])
    assert "Invalid value 10 for configuration log.segment.bytes: Value must be at least 14" in error_of(excinfo)
    with pytest.raises(ConfigError) as excinfo:
        parse_store_config(["log.roll.hours=0"])
    assert "Invalid value 0 for configuration log.roll.hours: Value must be at least 1" in error_of(excinfo)
    with pytest.raises(ConfigError) as excinfo:
        parse_store_config(["log.retention.hours=2147483648"])
    assert "configuration log.retention.hours: Not a number of type INT" in error_of(excinfo)


@pytest.mark.parametrize(
    ("text", "policy", "compact", "delete"),
    [
        ("compact", "compact", True, False),
        ("compact,delete", "compact,delete", True, True),
        ("delete, compact", "compact,delete", True, True),
        ("delete,delete", "delete", False, True),
        ("compact,compact", "compact", True, False),
    ],
)
def test_compaction_policies_accepted_in_one_spelling(text: str, policy: str, compact: bool, delete: bool) -> None:
    config = parse_store_config([f"cleanup.policy={text}"]).log_defaults()
    assert (config.cleanup_policy, config.compact, config.delete) == (policy, compact, delete)
    assert parse_config_lines(f"cleanup.policy={text}\n", {}) == {"cleanup.policy": policy}


def test_empty_cleanup_policy_refused() -> None:
    with pytest.raises(ConfigError) as excinfo:
        parse_store_config(["cleanup.policy= "])
    assert "configuration cleanup.policy: logfs needs at least one of compact, delete" in error_of(excinfo)


def test_compaction_keys_with_broker_synonyms() -> None:
    config = parse_store_config([
        "log.cleaner.min.cleanable.ratio=0.1", "log.cleaner.min.compaction.lag.ms=5",
        "log.cleaner.max.compaction.lag.ms=10", "log.cleaner.delete.retention.ms=7",
        "min.cleanable.dirty.ratio=0.25",
    ]).log_defaults()  # fmt: skip
    assert (config.min_cleanable_dirty_ratio, config.min_compaction_lag_ms) == (0.25, 5)  # topic spelling wins
    assert (config.max_compaction_lag_ms, config.delete_retention_ms) == (10, 7)
    defaults = LogConfig()
    assert (defaults.min_cleanable_dirty_ratio, defaults.min_compaction_lag_ms) == (0.5, 0)
    assert (defaults.max_compaction_lag_ms, defaults.delete_retention_ms) == (2**63 - 1, 86_400_000)


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("min.cleanable.dirty.ratio=1.5", "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: "
         "Value must be no more than 1"),
        ("min.cleanable.dirty.ratio=-0.1", "Value must be at least 0"),
        ("min.cleanable.dirty.ratio=half", "Invalid value half for configuration min.cleanable.dirty.ratio: "
         "Not a number of type DOUBLE"),
        ("min.cleanable.dirty.ratio=NaN", "Not a number of type DOUBLE"),
        ("min.compaction.lag.ms=-1", "Value must be at least 0"),
        ("max.compaction.lag.ms=0", "Value must be at least 1"),
        ("delete.retention.ms=-5", "Value must be at least 0"),
        ("min.compaction.lag.ms=10\nmax.compaction.lag.ms=5",
         "conflict topic config setting min.compaction.lag.ms (10) > max.compaction.lag.ms (5)"),
    ],
)  # fmt: skip
def test_bad_compaction_values_refused(line: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        apply_overrides(LogConfig(), parse_config_lines(line + "\n", {}))
    assert fragment in error_of(excinfo)


def test_cleaner_store_keys() -> None:
    config = parse_store_config([
        "log.cleaner.threads=2", "log.cleaner.dedupe.buffer.size=4194304", "log.cleaner.enable=FALSE",
        "log.cleaner.io.max.bytes.per.second=5e7", "log.cleaner.backoff.ms=200",
    ])  # fmt: skip
    assert (config.log_cleaner_threads, config.log_cleaner_dedupe_buffer_size) == (2, 4 * 1024 * 1024)
    assert (config.log_cleaner_enable, config.log_cleaner_io_max_bytes_per_second) == (False, 5e7)
    assert config.log_cleaner_backoff_ms == 200
    defaults = StoreConfig()
    assert (defaults.log_cleaner_threads, defaults.log_cleaner_dedupe_buffer_size) == (1, 128 * 1024 * 1024)
    assert (defaults.log_cleaner_enable, defaults.log_cleaner_backoff_ms) == (True, 15_000)
    assert defaults.log_cleaner_io_max_bytes_per_second == 1.7976931348623157e308


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["log.cleaner.threads=4", "log.cleaner.dedupe.buffer.size=4194304"],
         "log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread."),
        (["log.cleaner.enable=yes"], "Invalid value yes for configuration log.cleaner.enable: "
         "Expected value to be either true or false"),
        (["log.cleaner.io.max.bytes.per.second=0"], "Value must be at least 1"),
        (["log.cleaner.io.max.bytes.per.second=1e400"], "Not a number of type DOUBLE"),
        (["log.cleaner.threads=-1"], "Value must be at least 0"),
        (["log.cleaner.backoff.ms=x"], "Not a number of type LONG"),
    ],
)  # fmt: skip
def test_bad_cleaner_store_values_refused(args: list[str], fragment: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        parse_store_config(args)
    assert fragment in error_of(excinfo)


def test_unknown_store_key_named() -> None:
    with pytest.raises(ConfigError) as excinfo:
        parse_store_config(["num.partitions=2", "log.dirs=/tmp/x"])
    assert "unknown config key 'log.dirs'" in error_of(excinfo)


def test_store_config_reports_every_bad_argument() -> None:
    with pytest.raises(ConfigError) as excinfo:
        parse_store_config(["segment.bytes=-1", "bogus=1", "no-equals-sign", "compression.type=gzip"])
    message = error_of(excinfo)
    assert "segment.bytes" in message and "'bogus'" in message and "'no-equals-sign'" in message
    assert "compression.type is a Kafka topic config that logfs does not implement" in message


def test_values_trimmed_as_kafka_trims() -> None:
    assert parse_store_config([" segment.bytes =  2048 "]).log_defaults().segment_bytes == 2048
    assert parse_store_config(["message.timestamp.type= LogAppendTime"]).log_defaults().message_timestamp_type == (
        TimestampType.LOG_APPEND_TIME
    )
    assert parse_store_config(["segment.bytes=+2048"]).log_defaults().segment_bytes == 2048


def test_log_config_checks_its_fields() -> None:
    with pytest.raises(ConfigError, match=re.escape("configuration segment.bytes: Value must be at least 14")):
        LogConfig(segment_bytes=13)
    with pytest.raises(ConfigError, match=re.escape("configuration retention.ms: Not a number of type LONG")):
        LogConfig(retention_ms=2**63)
    with pytest.raises(ConfigError, match=re.escape("cleanup.policy")):
        LogConfig(cleanup_policy="delete,compact")  # only the canonical spellings
    with pytest.raises(ConfigError, match=re.escape("segment.ms")):
        dataclasses.replace(LogConfig(), segment_ms=0)


# --- <topic>/config writes -----------------------------------------------------------------------------------------


def test_config_line_sets_an_override() -> None:
    assert parse_config_lines("retention.ms=3600000\n", {}) == {"retention.ms": "3600000"}


def test_config_lines_set_several_and_keep_others() -> None:
    current = {"segment.bytes": "1048576"}
    new = parse_config_lines("retention.ms=1000\nmessage.timestamp.type=LogAppendTime\n", current)
    assert new == {"segment.bytes": "1048576", "retention.ms": "1000", "message.timestamp.type": "LogAppendTime"}
    assert current == {"segment.bytes": "1048576"}


def test_config_line_key_equals_nothing_removes_the_override() -> None:
    current = {"retention.ms": "1000", "segment.bytes": "1048576"}
    assert parse_config_lines("retention.ms=\n", current) == {"segment.bytes": "1048576"}
    assert parse_config_lines("retention.ms=   \n", current) == {"segment.bytes": "1048576"}


def test_removing_a_key_with_no_override_changes_nothing() -> None:
    assert parse_config_lines("retention.ms=\n", {"segment.bytes": "2048"}) == {"segment.bytes": "2048"}


def test_blank_lines_ignored_and_crlf_read() -> None:
    assert parse_config_lines("\n\n  \nsegment.ms=5\r\n\r\n\t\n", {}) == {"segment.ms": "5"}
    assert parse_config_lines("", {"segment.ms": "5"}) == {"segment.ms": "5"}


def test_config_lines_apply_in_order() -> None:
    assert parse_config_lines("segment.ms=5\nsegment.ms=6\n", {}) == {"segment.ms": "6"}
    assert parse_config_lines("segment.ms=5\nsegment.ms=\n", {}) == {}


def test_config_values_kept_in_canonical_form() -> None:
    assert parse_config_lines("segment.bytes= +1024 \ncleanup.policy = delete\n", {}) == {
        "segment.bytes": "1024",
        "cleanup.policy": "delete",
    }


def test_config_write_is_whole_or_nothing() -> None:
    current = {"segment.bytes": "1048576"}
    text = "retention.ms=1000\nsegment.bytes=-5\nsegment.ms=\n"
    with pytest.raises(ConfigError) as excinfo:
        parse_config_lines(text, current)
    assert error_of(excinfo).startswith(
        "config not changed: line 2 of the write: Invalid value -5 for configuration segment.bytes"
    )
    assert current == {"segment.bytes": "1048576"}


@pytest.mark.parametrize(
    ("line", "suggestion"),
    [
        ("retention.msx=1", "retention.ms"),
        ("segmnt.bytes=2048", "segment.bytes"),
        ("min.insync.replica=2", "min.insync.replicas"),
        ("SEGMENT.BYTES=2048", "segment.bytes"),  # keys are case-sensitive, as in Kafka: the spelling is named
        ("cleanup.polcy=compact", "cleanup.policy"),
    ],
)
def test_a_mistyped_topic_key_gets_a_suggestion(line: str, suggestion: str) -> None:
    """Issue 23 item 8: a typo names the key it resembles, in a write of <topic>/config and in --config."""
    key = line.partition("=")[0]
    with pytest.raises(ConfigError) as excinfo:
        parse_config_lines(line, {})
    assert f"unknown topic config key {key!r} (did you mean {suggestion}?)" in error_of(excinfo)
    with pytest.raises(ConfigError) as excinfo:
        parse_store_config([line])
    assert f"unknown config key {key!r} (did you mean {suggestion}?)" in error_of(excinfo)


@pytest.mark.parametrize(
    ("pair", "suggestion"),
    [("num.partition=2", "num.partitions"), ("replica.id=1", "replica.ids"),
     ("zookeper.connect=h:1", "zookeeper.connect"), ("log.retention.hour=1", "log.retention.hours")],
)  # fmt: skip
def test_a_mistyped_store_key_gets_a_suggestion(pair: str, suggestion: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        parse_store_config([pair])
    assert f"(did you mean {suggestion}?)" in error_of(excinfo)


def test_an_unrelated_key_gets_no_suggestion() -> None:
    """A suggestion only for a near miss: a word unlike any key is named alone, never with a misleading guess."""
    for line in ("bogus.key=1", "no.such.key=1", "log.dirs=/x", "flush=1"):
        with pytest.raises(ConfigError) as excinfo:
            parse_config_lines(line, {})
        assert "did you mean" not in error_of(excinfo)
        with pytest.raises(ConfigError) as excinfo:
            parse_store_config([line])
        assert "did you mean" not in error_of(excinfo)
    with pytest.raises(ConfigError) as excinfo:  # a store key is not suggested for a topic's config
        parse_config_lines("num.partition=2", {})
    assert "did you mean" not in error_of(excinfo)


def test_config_write_error_lists_every_bad_line() -> None:
    text = "segment.ms=5\nno equals sign\n\ncompression.type=gzip\nbogus.key=1\nsegment.bytes=x\n"
    with pytest.raises(ConfigError) as excinfo:
        parse_config_lines(text, {})
    message = error_of(excinfo)
    assert "line 2 of the write: expected key=value" in message
    assert "line 4 of the write: compression.type is a Kafka topic config that logfs does not implement" in message
    assert "line 5 of the write: unknown topic config key 'bogus.key'" in message
    assert "line 6 of the write: Invalid value x for configuration segment.bytes" in message
    assert "line 1" not in message and "line 3" not in message


@pytest.mark.parametrize("key", sorted(KAFKA_TOPIC_KEYS - LOG_KEYS.keys()))
def test_known_kafka_key_not_implemented_refused(key: str) -> None:
    for text in (f"{key}=1\n", f"{key}=\n"):
        with pytest.raises(ConfigError) as excinfo:
            parse_config_lines(text, {})
        assert f"line 1 of the write: {key} is a Kafka topic config that logfs does not implement" in error_of(excinfo)


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("no.such.key=1", "unknown topic config key 'no.such.key'"),
        ("=1", "expected key=value"),
        ("segment.bytes", "expected key=value"),
        ("log.segment.bytes=2048", "log.segment.bytes is a broker setting (logfs mount --config); the topic key is"),
        ("num.partitions=3", "num.partitions is a store setting"),
        ("SEGMENT.BYTES=2048", "unknown topic config key 'SEGMENT.BYTES'"),  # keys are case-sensitive, as in Kafka
    ],
)
def test_unknown_and_misplaced_keys_refused(line: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as excinfo:
        parse_config_lines(line, {})
    assert f"line 1 of the write: {fragment}" in error_of(excinfo)


def test_oversized_config_write_refused() -> None:
    text = "segment.ms=5\n" * (configtext.CONFIG_TEXT_BYTES_MAX // 13 + 1)
    with pytest.raises(ConfigError, match="exceeds"):
        parse_config_lines(text, {})


# --- reading <topic>/config ----------------------------------------------------------------------------------------


def test_render_lists_every_key_sorted_overrides_and_defaults_alike() -> None:
    overrides = {"segment.bytes": "2048", "message.timestamp.type": "LogAppendTime"}
    text = render_config(apply_overrides(LogConfig(), overrides), overrides)
    assert text == render_defaults(**overrides)
    keys = [line.split("=")[0] for line in text.splitlines()]
    assert keys == sorted(LOG_KEYS) == sorted(keys)


def test_render_reads_back_as_the_same_config() -> None:
    effective = apply_overrides(parse_store_config(["log.retention.hours=1"]).log_defaults(), {"segment.ms": "9"})
    text = render_config(effective, {"segment.ms": "9"})
    assert apply_overrides(LogConfig(), parse_config_lines(text, {})) == effective


def test_apply_overrides_over_store_defaults() -> None:
    defaults = parse_store_config(["log.segment.bytes=4096", "retention.ms=10"]).log_defaults()
    effective = apply_overrides(defaults, {"retention.ms": "-1"})
    assert (effective.segment_bytes, effective.retention_ms) == (4096, -1)
    assert defaults.retention_ms == 10


def test_apply_overrides_refuses_what_logfs_cannot_take() -> None:
    with pytest.raises(ConfigError) as excinfo:
        apply_overrides(LogConfig(), {"compression.type": "gzip", "segment.bytes": "x", "bogus": "1"})
    message = error_of(excinfo)
    assert "compression.type" in message and "segment.bytes" in message and "'bogus'" in message


# --- overrides on disk ---------------------------------------------------------------------------------------------


def test_save_load_round_trip_and_bytes(tmp_path: Path) -> None:
    path = tmp_path / "orders.properties"
    overrides = {"segment.bytes": "1048576", "cleanup.policy": "delete", "message.timestamp.type": "LogAppendTime"}
    save_topic_overrides(path, overrides)
    assert path.read_text() == (
        f"{configtext.TOPIC_OVERRIDES_HEADER}\n"
        "cleanup.policy=delete\nmessage.timestamp.type=LogAppendTime\nsegment.bytes=1048576\n"
    )
    assert load_topic_overrides(path) == overrides
    assert not path.with_name(path.name + ".tmp").exists()


def test_save_replaces_and_empty_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "t.properties"
    save_topic_overrides(path, {"segment.ms": "5"})
    save_topic_overrides(path, {})
    assert load_topic_overrides(path) == {}


def test_full_disk_is_disk_full_and_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.properties"
    save_topic_overrides(path, {"segment.ms": "5"})
    before = path.read_bytes()

    def no_space(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    # ENOSPC from a write that stored nothing (from fsync it would take the store offline:
    # docs/storage.md, "Storage faults")
    monkeypatch.setattr(configtext.os, "write", no_space)
    with pytest.raises(DiskFull, match="No space left"):
        save_topic_overrides(path, {"segment.ms": "6"})
    assert path.read_bytes() == before
    assert not path.with_name(path.name + ".tmp").exists()


def test_load_absent_file_has_no_overrides(tmp_path: Path) -> None:
    assert load_topic_overrides(tmp_path / "never-written.properties") == {}


def test_save_creates_missing_directories(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "t.properties"
    save_topic_overrides(path, {"retention.ms": "-1"})
    assert load_topic_overrides(path) == {"retention.ms": "-1"}


def test_save_refuses_bad_override_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t.properties"
    with pytest.raises(ConfigError, match=re.escape("segment.bytes")):
        save_topic_overrides(path, {"segment.bytes": "1"})
    assert not path.exists() and not path.with_name(path.name + ".tmp").exists()


def test_load_reads_properties_comments_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.properties"
    path.write_text("# a comment\n! another\n\nsegment.ms = 7\n")
    assert load_topic_overrides(path) == {"segment.ms": "7"}


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"segment.ms=5\ngarbage\n", "line 2: expected key=value"),
        (b"compression.type=gzip\n", "line 1: compression.type is a Kafka topic config that logfs does not implement"),
        (b"segment.bytes=-1\n", "line 1: Invalid value -1 for configuration segment.bytes"),
        (b"segment.ms=\xff\n", "not UTF-8 at byte 11"),
    ],
)
def test_load_damaged_file_names_file_and_line(tmp_path: Path, content: bytes, fragment: str) -> None:
    path = tmp_path / "t.properties"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as excinfo:
        load_topic_overrides(path)
    assert str(path) in error_of(excinfo) and fragment in error_of(excinfo)


# --- the docs ------------------------------------------------------------------------------------------------------


def test_module_docstring_holds_the_generated_table() -> None:
    indented = "".join(f"    {line}\n" if line else "\n" for line in render_key_table().splitlines())
    assert config.__doc__ is not None and indented in config.__doc__


def test_docs_page_holds_the_generated_table() -> None:
    assert render_key_table(markdown=True) in (ROOT / "docs" / "config.md").read_text()


def test_table_lists_every_key_and_spelling() -> None:
    table = render_key_table(markdown=True)
    for name in [*LOG_KEYS, *STORE_KEYS]:
        assert f"| `{name}` |" in table
    for name in BROKER_SYNONYMS:
        assert name in table
