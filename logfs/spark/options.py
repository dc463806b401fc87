"""The options of the ``logfs`` Spark source and sink, parsed and checked once, on the driver
(docs/spark.md, "The `logfs` data source" and "The `logfs` sink").

Names and meanings are those of Spark's own Kafka source (``spark-sql-kafka``), so that a job switches by changing
the format name and replacing ``kafka.bootstrap.servers`` with the mount point given to ``load()``/``save()``:

=============================  ===========================================================================
option                         meaning here
=============================  ===========================================================================
``path`` (``load``/``save``)   the mount point (a leader's, or a follower's for reads); required
``subscribe``                  comma-separated topics
``subscribePattern``           a Python regular expression matched in full against topic names
``assign``                     JSON ``{"topic": [0, 1]}``: exactly these partitions
``startingOffsets``            ``earliest`` | ``latest`` | JSON ``{"topic": {"0": 42}}`` (-2 earliest, -1 latest)
``endingOffsets``              batch only: ``latest`` | JSON (-1 latest)
``startingTimestamp``          epoch ms: every partition starts at its first record at or after it (Spark's
                               precedence: over ``startingOffsetsByTimestamp``, which is over ``startingOffsets``)
``startingOffsetsByTimestamp`` JSON ``{"topic": {"0": 1700000000000}}``, naming every subscribed partition
``startingOffsetsByTimestampStrategy``  ``error`` (default: no record that late fails the query) | ``latest``
``endingTimestamp``, ``endingOffsetsByTimestamp``  batch only: the same for the end; no record that late → latest
``kafka.isolation.level``      ``read_uncommitted`` (to the HW, default) | ``read_committed`` (to the LSO);
                               ``isolation.level`` is accepted as a synonym
``includeHeaders``             ``true`` adds the ``headers`` column
``minPartitions``              split large ranges so that there are about this many Spark partitions
``maxRecordsPerPartition``     cut ranges so that no Spark partition reads more records than this
``maxOffsetsPerTrigger``       streaming: at most this many offsets per micro-batch, spread by lag
``failOnDataLoss``             ``true`` (default): a range below the log start offset fails the query;
                               ``false``: skip to the log start offset
``kafkaConsumer.pollTimeoutMs``  how long an executor waits for its (follower) mount to reach a pinned range
                               before failing the task (default 120000, Spark's network timeout)
``topic`` (sink)               the topic of every row (overrides a ``topic`` column)
``kafka.compression.type``     sink: ``none`` (default) | ``gzip`` | ``snappy`` | ``lz4`` | ``zstd``
``exactlyOnce`` (sink)         ``true``: each task writes in a transaction of its own, committed when Spark commits
                              the micro-batch (``docs/spark.md``); needs ``transactional.id``
``transactional.id`` (sink)    with exactlyOnce: a name for the query, stable across its restarts and used by no
                              other query (``[A-Za-z0-9._-]``, at most 200 characters); ``kafka.transactional.id``
                              is the same option
``kafka.delivery.timeout.ms``  sink: how long a write refused for now (a leader change, no leader yet) is tried
                              again before the task fails (default 120000, Kafka's producer's); ``delivery.timeout.ms``
                              is the same option
=============================  ===========================================================================

Other ``kafka.*`` options are accepted and ignored (they configure a Kafka consumer or producer that logfs does not
need). Options of Spark's Kafka source that would change which records are read but that logfs does not implement
(``minOffsetsPerTrigger``, ``maxTriggerDelay``) are refused with :class:`OptionError`
rather than silently ignored. Everything here is pure: no pyspark, no I/O. Any thread.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from logfs.core.format.compression import Compression
from logfs.spark.offsets import (
    NoMatch,
    OffsetError,
    OffsetSpec,
    check_group,
    check_topic,
    parse_offset_spec,
    parse_timestamp_spec,
)

DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's kafkaConsumer.pollTimeoutMs default (spark.network.timeout)
READ_UNCOMMITTED = "read_uncommitted"
READ_COMMITTED = "read_committed"

# Options of Spark's Kafka source that logfs does not implement and that would change the rows read.
UNSUPPORTED_OPTIONS = (
    "minoffsetspertrigger",
    "maxtriggerdelay",
)


class OptionError(ValueError):
    """An option of the logfs source or sink that is missing, malformed, or not supported."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which partitions a query reads: ``topics`` (subscribe), ``pattern`` (subscribePattern) or ``assign``."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        if self.assign:
            return any(t == topic for t, _ in self.assign)
        return topic in self.topics


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The options of one ``spark.read``/``spark.readStream`` of format ``logfs``, checked."""

    path: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    read_committed: bool
    include_headers: bool
    min_partitions: int | None
    max_records_per_partition: int | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    poll_timeout_s: float
    timestamp_no_match: NoMatch = "error"  # startingOffsetsByTimestampStrategy
    commit_to_group: str | None = None  # commitToGroup: micro-batch end offsets to a group (logfs/spark/groups.py)


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The options of one ``df.write``/``df.writeStream`` of format ``logfs``, checked."""

    path: str
    topic: str | None
    compression: Compression
    transactional_id: str | None = None  # set: exactlyOnce
    delivery_timeout_ms: int = 120_000  # kafka.delivery.timeout.ms (logfs/spark/sink.py: delivery)


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _path(o: Mapping[str, str], verb: str) -> str:
    path = o.get("path", "").strip()
    if not path:
        raise OptionError(f"give the mount point as the path: .{verb}('/mnt/logs') (the logfs format reads a mount)")
    return path


def _bool(o: Mapping[str, str], name: str, default: bool) -> bool:
    raw = o.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise OptionError(f"option {name} must be true or false, not {raw!r}")
    return value == "true"


def _positive(o: Mapping[str, str], name: str) -> int | None:
    raw = o.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise OptionError(f"option {name} must be a positive integer, not {raw!r}") from None
    if value <= 0:
        raise OptionError(f"option {name} must be a positive integer, not {raw!r}")
    return value


def _subscription(o: Mapping[str, str]) -> Subscription:
    given = [name for name in ("subscribe", "subscribepattern", "assign") if o.get(name, "").strip()]
    if len(given) != 1:
        raise OptionError(
            "give exactly one of the options subscribe, subscribePattern and assign"
            + (f" (got {', '.join(given)})" if given else "")
        )
    kind = given[0]
    raw = o[kind].strip()
    if kind == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError(f"option subscribe names no topic: {raw!r}")
        for topic in topics:
            _name(check_topic, topic, "subscribe")
        return Subscription(topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise OptionError(f"option subscribePattern is not a regular expression: {raw!r} ({exc})") from None
        return Subscription(pattern=raw)
    return Subscription(assign=_assignment(raw))


def _assignment(raw: str) -> tuple[tuple[str, int], ...]:
    try:
        obj: Any = json.loads(raw)
    except ValueError:
        obj = None
    ok = isinstance(obj, dict) and all(
        isinstance(t, str) and isinstance(ps, list) and all(isinstance(p, int) and p >= 0 for p in ps)
        for t, ps in obj.items()
    )
    if not ok or not obj:
        raise OptionError(f'option assign must be JSON like {{"topic": [0, 1]}}, not {raw!r}')
    for topic in obj:
        _name(check_topic, topic, "assign")
    return tuple(sorted((t, p) for t, ps in obj.items() for p in set(ps)))


def _name(check: Callable[[str, str], None], name: str, option: str) -> None:
    """A topic or group name given in ``option``, held to the mount's name rules (``check``: logfs/spark/offsets.py's
    check_topic or check_group); OptionError naming the option and the rule it breaks."""
    try:
        check(name, f"option {option}")
    except OffsetError as exc:
        raise OptionError(str(exc)) from None


def _isolation(o: Mapping[str, str]) -> bool:
    raw = o.get("kafka.isolation.level") or o.get("isolation.level") or READ_UNCOMMITTED
    value = raw.strip().lower()
    if value not in (READ_UNCOMMITTED, READ_COMMITTED):
        raise OptionError(f"option kafka.isolation.level must be read_uncommitted or read_committed, not {raw!r}")
    return value == READ_COMMITTED


def source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check the options of a read (``streaming`` for ``readStream``); raise :class:`OptionError` naming the option."""
    o = _lower(options)
    for name in UNSUPPORTED_OPTIONS:
        if name in o:
            raise OptionError(f"option {name} of Spark's Kafka source is not supported by logfs")
    for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
        if streaming and name.lower() in o:
            raise OptionError(f"option {name} is for batch queries only (a stream has no end)")
    if not streaming and "maxoffsetspertrigger" in o:
        raise OptionError("option maxOffsetsPerTrigger is for streaming queries only")
    try:
        starting = _offsets(o, "starting", "latest" if streaming else "earliest")
        ending = _offsets(o, "ending", "latest")
    except OffsetError as exc:
        raise OptionError(str(exc)) from None
    no_match = o.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if no_match not in ("error", "latest"):
        raise OptionError(f"option startingOffsetsByTimestampStrategy must be error or latest, not {no_match!r}")
    if not streaming and starting == "latest":
        raise OptionError("startingOffsets=latest is not allowed in a batch query (it would read nothing)")
    if ending == "earliest":
        raise OptionError("endingOffsets=earliest is not allowed (it would read nothing)")
    commit_group = o.get("committogroup", "").strip() or None
    if commit_group is not None and not streaming:
        raise OptionError("option commitToGroup is for streaming queries only (a batch query has no micro-batches)")
    if commit_group is not None:
        _name(check_group, commit_group, "commitToGroup")
    timeout_ms = _positive(o, "kafkaConsumer.pollTimeoutMs")
    return SourceOptions(
        path=_path(o, "load"),
        subscription=_subscription(o),
        starting=starting,
        ending=ending,
        read_committed=_isolation(o),
        include_headers=_bool(o, "includeHeaders", False),
        min_partitions=_positive(o, "minPartitions"),
        max_records_per_partition=_positive(o, "maxRecordsPerPartition"),
        max_offsets_per_trigger=_positive(o, "maxOffsetsPerTrigger"),
        fail_on_data_loss=_bool(o, "failOnDataLoss", True),
        poll_timeout_s=(DEFAULT_POLL_TIMEOUT_MS if timeout_ms is None else timeout_ms) / 1000,
        timestamp_no_match="latest" if no_match == "latest" else "error",
        commit_to_group=commit_group,
    )


def _offsets(o: Mapping[str, str], which: str, default: str) -> OffsetSpec:
    """``<which>Timestamp``, else ``<which>OffsetsByTimestamp``, else ``<which>Offsets`` (Spark's precedence)."""
    every, by_partition = o.get(f"{which}timestamp"), o.get(f"{which}offsetsbytimestamp")
    if every is not None or by_partition is not None:
        return parse_timestamp_spec(every, by_partition, which)
    return parse_offset_spec(o.get(f"{which}offsets", default), f"{which}Offsets")


def sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Check the options of a write; raise :class:`OptionError` naming the option."""
    o = _lower(options)
    transactional_id = (o.get("kafka.transactional.id") or o.get("transactional.id") or "").strip() or None
    if _bool(o, "exactlyOnce", False):
        if transactional_id is None:
            raise OptionError(
                "option exactlyOnce needs option transactional.id: a name for this query, stable across its restarts "
                "and used by no other query (its transactions and commit labels are named after it)"
            )
        if not _TRANSACTIONAL_ID.fullmatch(transactional_id):
            raise OptionError(
                f"option transactional.id must be 1-200 of [A-Za-z0-9._-], not starting with '.': {transactional_id!r}"
            )
    else:
        transactional_id = None  # without exactlyOnce the sink is at-least-once: no transactions
    raw = (o.get("kafka.compression.type") or o.get("compression.type") or "none").strip().lower()
    names = {c.name.lower(): c for c in Compression}
    if raw not in names:
        raise OptionError(f"option kafka.compression.type must be one of {', '.join(names)}, not {raw!r}")
    topic = o.get("topic", "").strip() or None
    if topic is not None:
        _name(check_topic, topic, "topic")
    delivery = _positive(o, "kafka.delivery.timeout.ms") or _positive(o, "delivery.timeout.ms") or 120_000
    return SinkOptions(path=_path(o, "save"), topic=topic, compression=names[raw], transactional_id=transactional_id,
                       delivery_timeout_ms=delivery)  # fmt: skip


# A transactional.id, with room for the suffixes of the sink's transaction ids and labels within the 249 of a name.
_TRANSACTIONAL_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,199}")
