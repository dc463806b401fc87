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
* :func:`plan_batch` pins the ranges of a batch query (applying the ``failOnDataLoss`` rule at the start).
* :func:`split_ranges` is Spark's ``KafkaOffsetRangeCalculator``: one Spark partition per topic-partition range,
  large ranges split when ``minPartitions`` asks for more partitions than there are ranges.
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

TopicPartition: TypeAlias = tuple[str, int]
OffsetSpec: TypeAlias = Literal["earliest", "latest"] | dict[TopicPartition, int]

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
    if value.lower() in ("earliest", "latest"):
        return "earliest" if value.lower() == "earliest" else "latest"
    try:
        obj: Any = json.loads(value)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        raise OffsetError(f'{option} must be earliest, latest or JSON like {{"topic": {{"0": 42}}}}, not {text!r}')
    return offsets_from_json(obj, option)


def offsets_from_json(obj: Mapping[str, Any], what: str = "offsets") -> dict[TopicPartition, int]:
    """``{"topic": {"0": 42}}`` (decoded JSON) → ``{("topic", 0): 42}``; OffsetError for any other shape."""
    out: dict[TopicPartition, int] = {}
    for topic, partitions in obj.items():
        if not isinstance(topic, str) or not isinstance(partitions, dict):
            raise OffsetError(f'{what}: expected {{"topic": {{"partition": offset}}}}, got {json.dumps(obj)}')
        for partition, offset in partitions.items():
            if not (isinstance(partition, str) and partition.isascii() and partition.isdigit()):
                raise OffsetError(f"{what}: partition {partition!r} of topic {topic!r} is not a partition number")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise OffsetError(f"{what}: offset {offset!r} of {topic}-{partition} is not an offset, -1 or -2")
            out[(topic, int(partition))] = offset
    return out


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
    if spec == "earliest":
        return {tp: s.log_start_offset for tp, s in states.items()}
    if spec == "latest":
        return {tp: s.end_offset(read_committed) for tp, s in states.items()}
    assert isinstance(spec, dict)
    if set(spec) != set(states):
        missing = sorted(set(states) - set(spec))
        unknown = sorted(set(spec) - set(states))
        raise OffsetError(
            f"{option} must name every subscribed partition (use -2 for earliest, -1 for latest)"
            + (f"; missing: {_names(missing)}" if missing else "")
            + (f"; not subscribed or not found: {_names(unknown)}" if unknown else "")
        )
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


def split_ranges(ranges: Iterable[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Spark partitions for ``ranges``: one per non-empty range, or, when ``min_partitions`` is more than that,
    large ranges cut into about ``size / total * min_partitions`` equal parts (KafkaOffsetRangeCalculator)."""
    ranges = [r for r in ranges if r.size > 0]
    if min_partitions is None or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    # Ranges that would get one part anyway stay whole and leave the proportional split to the others.
    whole = {r for r in ranges if _parts(r.size, total, min_partitions) == 1}
    split_total = total - sum(r.size for r in whole)
    split_min = max(min_partitions - len(whole), 1)
    out = []
    for r in ranges:
        parts = 1 if r in whole else _parts(r.size, split_total, split_min)
        remaining, start = r.size, r.start
        for part in range(parts):
            this = remaining // (parts - part)  # the last part takes the rounding
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
