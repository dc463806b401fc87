"""Offset arithmetic of the ``logfs`` Spark source: pure functions of numbers, no pyspark and no I/O.

Theory of operation. A query reads *offset ranges* ``[start, end)`` of topic-partitions. The driver pins them when
it plans (a batch query once; a stream once per micro-batch) from the partitions' ``state`` files, which this module
sees as :class:`PartitionState` values; executors then read exactly those ranges (``at/<start>-<end>.kafka``), so
every task of a query, and every retry of a task, reads the same records.

* :func:`parse_offset_spec` reads ``startingOffsets``/``endingOffsets``: ``earliest``, ``latest`` or Spark's JSON
  ``{"topic": {"0": 42}}`` where -2 means earliest and -1 latest. As in Spark, a JSON spec names every partition
  the query subscribes to.
* :func:`resolve_offsets` turns a spec into offsets against the states; ``latest`` is the high watermark
  (``read_uncommitted``) or the last stable offset (``read_committed``).
* :class:`TimestampSpec` (``startingTimestamp``, ``startingOffsetsByTimestamp`` and the ending ones) names a
  timestamp per partition; the driver looks each up in the mount (``at/@<ms>``: the time index) and
  :func:`resolve_found` applies Spark's rule where no record is that late.
* :func:`plan_batch` pins the ranges of a batch query (applying the ``failOnDataLoss`` rule at the start).
* :func:`split_ranges` is Spark's ``KafkaOffsetRangeCalculator``: one Spark partition per topic-partition range,
  ranges cut to at most ``maxRecordsPerPartition`` records, and large ranges split when ``minPartitions`` asks for
  more partitions than there are ranges.
* :func:`rate_limit` is Spark's ``maxOffsetsPerTrigger``: the limit is spread over partitions in proportion to
  their backlog, and no partition with a backlog gets less than one offset.
* :func:`clamp_start` is the ``failOnDataLoss`` rule: a start below the log start offset fails (true) or moves up
  to the log start offset (false).
* :func:`offsets_to_json` / :func:`offsets_from_json`: streaming offsets as plain JSON, exactly Spark's Kafka
  source format ``{"topic": {"partition": offset}}``.

Any thread may call anything here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from logfs.core.errors import InvalidGroupId, InvalidTopic
from logfs.core.names import validate_group_id
from logfs.core.topicnames import validate_topic_name

TopicPartition: TypeAlias = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TimestampSpec:
    """Spark's ``startingTimestamp``/``startingOffsetsByTimestamp`` (or the ``ending`` ones): each partition starts
    (ends) at its first record with a timestamp at or after the one given, ``every`` partition the same one or each
    its own (``by_partition``, which names every subscribed partition, as Spark requires)."""

    every: int | None = None
    by_partition: dict[TopicPartition, int] | None = None

    def timestamps(self, partitions: Iterable[TopicPartition], option: str) -> dict[TopicPartition, int]:
        """The timestamp of each of ``partitions``; OffsetError when ``by_partition`` does not name exactly them."""
        wanted = set(partitions)
        if self.every is not None:
            return {tp: self.every for tp in sorted(wanted)}
        assert self.by_partition is not None
        check_names_every_partition(self.by_partition, wanted, option)
        return dict(sorted(self.by_partition.items()))


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """``startingOffsets=group:<group>``: each partition starts at the group's committed offset
    (``logfs/spark/groups.py``)."""

    group: str


OffsetSpec: TypeAlias = Literal["earliest", "latest"] | dict[TopicPartition, int] | TimestampSpec | GroupSpec
NoMatch: TypeAlias = Literal["error", "latest"]  # startingOffsetsByTimestampStrategy

EARLIEST = -2  # Spark's KafkaOffsetRangeLimit.EARLIEST in a JSON offset spec
LATEST = -1  # Spark's KafkaOffsetRangeLimit.LATEST


class OffsetError(ValueError):
    """An offset spec that does not parse, or that does not fit the partitions it is applied to."""


class DataLoss(RuntimeError):
    """Records a query asked for are gone (retention, delete-records, a deleted topic) and failOnDataLoss is true."""


@dataclass(frozen=True, slots=True)
class PartitionState:
    """The offsets of one partition that planning needs, from its ``state`` file."""

    log_start_offset: int
    high_watermark: int
    last_stable_offset: int

    def end_offset(self, read_committed: bool) -> int:
        """Where a read stops: the last stable offset under read_committed, else the high watermark."""
        return self.last_stable_offset if read_committed else self.high_watermark


@dataclass(frozen=True, slots=True, order=True)
class OffsetRange:
    """The records ``[start, end)`` of one topic-partition; one Spark partition reads one range."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def parse_offset_spec(text: str, option: str) -> OffsetSpec:
    """``"earliest"``, ``"latest"`` or a JSON object ``{"topic": {"0": 42}}`` → the spec; OffsetError otherwise."""
    value = text.strip()
    if value.startswith("group:"):
        group = value[len("group:") :]
        check_group(group, f"{option}: {text!r} does not name a consumer group (group:<group>)")
        return GroupSpec(group)
    if value.lower() in ("earliest", "latest"):
        return "earliest" if value.lower() == "earliest" else "latest"
    obj = _json_object(value)
    if obj is None:
        raise OffsetError(f'{option} must be earliest, latest or JSON like {{"topic": {{"0": 42}}}}, not {text!r}')
    return offsets_from_json(obj, option)


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        obj: Any = json.loads(text)
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def parse_timestamp_spec(every: str | None, by_partition: str | None, option: str) -> TimestampSpec:
    """``startingTimestamp`` (one timestamp in epoch milliseconds) or, when it is absent, ``startingOffsetsByTimestamp``
    (JSON ``{"topic": {"0": 1700000000000}}``) → the spec; OffsetError for anything else."""
    if every is not None:
        value = every.strip()
        if not (value.isascii() and value.isdigit()):
            raise OffsetError(f"{option}Timestamp must be a timestamp in epoch milliseconds, not {every!r}")
        return TimestampSpec(every=int(value))
    assert by_partition is not None
    name = f"{option}OffsetsByTimestamp"
    obj = _json_object(by_partition)
    if obj is None:
        raise OffsetError(f'{name} must be JSON like {{"topic": {{"0": 1700000000000}}}}, not {by_partition!r}')
    stamps = offsets_from_json(obj, name)
    if any(ts < 0 for ts in stamps.values()):
        raise OffsetError(f"{name}: timestamps are epoch milliseconds, not negative")
    return TimestampSpec(by_partition=stamps)


def resolve_found(
    found: Mapping[TopicPartition, int | None],
    states: Mapping[TopicPartition, PartitionState],
    *,
    read_committed: bool,
    no_match: NoMatch | None,
    option: str,
) -> dict[TopicPartition, int]:
    """Offsets from a timestamp lookup (``found``: the first offset at or after each partition's timestamp, None
    when no record is that late). Where there is none: a start fails (``no_match="error"``, Spark's default) or
    takes the end offset (``"latest"``); an end (``no_match=None``) takes the end offset, as Spark's does. An offset
    past the end offset of ``states`` (a record appended since they were read) is that end offset: the query's
    ranges stay within what its states pinned."""
    out = {}
    for tp, offset in found.items():
        end = states[tp].end_offset(read_committed)
        if offset is None and no_match == "error":
            raise OffsetError(
                f"{option}: {tp[0]}-{tp[1]} has no record at or after the timestamp given (set "
                "startingOffsetsByTimestampStrategy=latest to start such partitions at their latest offset)"
            )
        out[tp] = end if offset is None else min(offset, end)
    return out


def offsets_from_json(obj: Mapping[str, Any], what: str = "offsets") -> dict[TopicPartition, int]:
    """``{"topic": {"0": 42}}`` (decoded JSON) → ``{("topic", 0): 42}``; OffsetError for any other shape."""
    out: dict[TopicPartition, int] = {}
    for topic, partitions in obj.items():
        if not isinstance(topic, str) or not isinstance(partitions, dict):
            raise OffsetError(f'{what}: expected {{"topic": {{"partition": offset}}}}, got {json.dumps(obj)}')
        check_topic(topic, what)
        for partition, offset in partitions.items():
            if not (isinstance(partition, str) and partition.isascii() and partition.isdigit()):
                raise OffsetError(f"{what}: partition {partition!r} of topic {topic!r} is not a partition number")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise OffsetError(f"{what}: offset {offset!r} of {topic}-{partition} is not an offset, -1 or -2")
            out[(topic, int(partition))] = offset
    return out


def check_topic(topic: str, what: str) -> None:
    """OffsetError (its message beginning with ``what``) unless ``topic`` follows Kafka's topic-name rules
    (core/names.py): a name no mount can hold is refused when the options are read, before a path is made of it."""
    try:
        validate_topic_name(topic)
    except InvalidTopic as exc:
        raise OffsetError(f"{what}: {exc}") from None


def check_group(group: str, what: str) -> None:
    """OffsetError (its message beginning with ``what``) unless ``group`` follows the group-id rules (core/names.py)."""
    try:
        validate_group_id(group)
    except InvalidGroupId as exc:
        raise OffsetError(f"{what}: {exc}") from None


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{("topic", 0): 42}`` → ``{"topic": {"0": 42}}``, topics and partitions sorted (stable checkpoints)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def resolve_offsets(
    spec: OffsetSpec,
    states: Mapping[TopicPartition, PartitionState],
    *,
    read_committed: bool,
    option: str,
    allow_latest: bool = True,
    allow_earliest: bool = True,
) -> dict[TopicPartition, int]:
    """The offset ``spec`` names for each partition of ``states``.

    A JSON spec must name exactly the partitions of ``states`` (Spark's rule: "you must specify all
    TopicPartitions"); -2 resolves to the log start offset, -1 to the end offset. ``allow_latest`` /
    ``allow_earliest`` refuse -1 / -2 where Spark does (latest as a batch start, earliest as an end).
    """
    assert not isinstance(spec, (TimestampSpec, GroupSpec)), "looked up in the mount first (resolve_found, groups)"
    if spec == "earliest":
        return {tp: s.log_start_offset for tp, s in states.items()}
    if spec == "latest":
        return {tp: s.end_offset(read_committed) for tp, s in states.items()}
    assert isinstance(spec, dict)
    check_names_every_partition(spec, states, f"{option} (use -2 for earliest, -1 for latest)")
    out = {}
    for tp, offset in spec.items():
        if offset == LATEST:
            if not allow_latest:
                raise OffsetError(f"{option}: latest (-1) is not allowed for {tp[0]}-{tp[1]} here")
            offset = states[tp].end_offset(read_committed)
        elif offset == EARLIEST:
            if not allow_earliest:
                raise OffsetError(f"{option}: earliest (-2) is not allowed for {tp[0]}-{tp[1]} here")
            offset = states[tp].log_start_offset
        out[tp] = offset
    return out


def check_names_every_partition(
    named: Iterable[TopicPartition], subscribed: Iterable[TopicPartition], what: str
) -> None:
    """Spark's rule for a per-partition JSON spec ("you must specify all TopicPartitions"): OffsetError naming the
    partitions missing from it and those it names that are not subscribed."""
    named, subscribed = set(named), set(subscribed)
    if named != subscribed:
        missing, unknown = sorted(subscribed - named), sorted(named - subscribed)
        raise OffsetError(
            f"{what} must name every subscribed partition"
            + (f"; missing: {_names(missing)}" if missing else "")
            + (f"; not subscribed or not found: {_names(unknown)}" if unknown else "")
        )


def _names(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)


def clamp_start(topic: str, partition: int, start: int, log_start_offset: int, fail_on_data_loss: bool) -> int:
    """The failOnDataLoss rule: ``start`` below ``log_start_offset`` raises DataLoss, or moves up to it."""
    if start >= log_start_offset:
        return start
    if fail_on_data_loss:
        raise DataLoss(
            f"{topic}-{partition}: offsets {start}..{log_start_offset - 1} are gone (the log starts at "
            f"{log_start_offset}: retention or delete-records removed them). Set the option failOnDataLoss=false "
            "to skip to the log start offset instead of failing."
        )
    return log_start_offset


def plan_batch(
    starting: Mapping[TopicPartition, int],
    ending: Mapping[TopicPartition, int],
    states: Mapping[TopicPartition, PartitionState],
    *,
    read_committed: bool,
    fail_on_data_loss: bool,
) -> list[OffsetRange]:
    """The ranges of a batch query, sorted; empty ranges dropped. Raises DataLoss or OffsetError."""
    out = []
    for tp in sorted(states):
        topic, partition = tp
        state = states[tp]
        start, end = starting[tp], ending[tp]
        limit = state.end_offset(read_committed)
        if end > limit:
            what = "last stable offset" if read_committed else "high watermark"
            raise OffsetError(f"endingOffsets: {end} for {topic}-{partition} is past its {what} {limit}")
        start = clamp_start(topic, partition, start, state.log_start_offset, fail_on_data_loss)
        if end < start:
            if end < state.log_start_offset and not fail_on_data_loss:
                continue  # the whole range is below the log start offset: skipped
            raise OffsetError(f"{topic}-{partition}: the starting offset {start} is after the ending offset {end}")
        if end > start:
            out.append(OffsetRange(topic, partition, start, end))
    return out


def split_ranges(
    ranges: Iterable[OffsetRange], min_partitions: int | None, max_records: int | None = None
) -> list[OffsetRange]:
    """Spark partitions for ``ranges`` (KafkaOffsetRangeCalculator): one per non-empty range; with ``max_records``
    (maxRecordsPerPartition) each range first cut into ``ceil(size / max_records)`` equal parts; then, when
    ``min_partitions`` is more than the parts so far, large ones cut into about ``size / total * min_partitions``."""
    ranges = [r for r in ranges if r.size > 0]
    if max_records is not None:
        ranges = [part for r in ranges for part in _divide(r, -(-r.size // max_records))]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    # Ranges that would get one part anyway stay whole and leave the proportional split to the others.
    whole = {r for r in ranges if _parts(r.size, total, min_partitions) == 1}
    split_total = total - sum(r.size for r in whole)
    split_min = max(min_partitions - len(whole), 1)
    return [part for r in ranges for part in _divide(r, 1 if r in whole else _parts(r.size, split_total, split_min))]


def _divide(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``r`` cut into ``parts`` consecutive ranges of equal size, the last taking the rounding (none empty)."""
    out = []
    remaining, start = r.size, r.start
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        end = min(start + this, r.end)
        if end > start:
            out.append(OffsetRange(r.topic, r.partition, start, end))
        start = end
    return out


def _parts(size: int, total: int, min_partitions: int) -> int:
    # Scala's math.round: half up
    return max(math.floor(size / total * min_partitions + 0.5), 1)


def rate_limit(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_offsets: int
) -> dict[TopicPartition, int]:
    """End offsets of a micro-batch that reads at most about ``max_offsets`` offsets from ``start`` toward
    ``latest``: each partition gets a share in proportion to its backlog (floored, but at least 1 when its share
    is below 1, so that small partitions are never starved), never past ``latest``. Partitions missing from
    ``start`` start at 0."""
    backlog = {tp: end - start.get(tp, 0) for tp, end in latest.items() if end - start.get(tp, 0) > 0}
    total = sum(backlog.values())
    if total < 1:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        if tp not in backlog:
            out[tp] = end
            continue
        share = max_offsets * (backlog[tp] / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, start.get(tp, 0) + step)
    return out
