"""The ``logfs`` Spark data source (Python Data Source API, PySpark ≥ 4.2): the format, its batch and stream
readers, and the way to the sink's writers (docs/spark.md, "Plain files" and "The `logfs` data source").

::

    from logfs.spark import LogfsDataSource
    spark.dataSource.register(LogfsDataSource)
    df = spark.read.format("logfs").option("subscribe", "orders").load("/mnt/logs")
    df.write.format("logfs").option("topic", "out").mode("append").save("/mnt/logs")

This module is the thin glue between Spark and the modules that know nothing of Spark (``schema`` has the columns and
``writer`` the sink's Spark side):

* ``options``: the options, checked on the driver;
* ``offsets``: offset-range arithmetic (pinning, minPartitions, maxOffsetsPerTrigger, failOnDataLoss);
* ``mount`` and ``arrow``: on an executor, open the pinned range ``at/<start>-<end>.kafka`` (waiting
  for a follower mount that is behind) and decode it into Arrow batches;
* ``sink``: append rows through ``<topic>/<partition>/batches`` and fsync.

Where things run. ``reader``/``streamReader``/``writer`` run in a Python process Spark starts on the driver to plan;
``partitions`` pins the ranges there (a batch query once, a stream once per micro-batch, from the ``state`` files);
the reader or writer object is then pickled to executors, whose ``read``/``write`` open files under the same mount
path (each node mounts the log, or a follower of it). Streaming offsets are plain JSON, exactly the Kafka source's
``{"topic": {"0": 42}}``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from logfs.spark.arrow import read_range
from logfs.spark.groups import commit_to_group, group_starting_offsets
from logfs.spark.interpreter import default_worker_python, settle_worker_python
from logfs.spark.mount import load_catalog, offset_for_timestamp, open_range
from logfs.spark.offsets import (
    DataLoss,
    GroupSpec,
    OffsetRange,
    OffsetSpec,
    PartitionState,
    TimestampSpec,
    TopicPartition,
    offsets_from_json,
    offsets_to_json,
    plan_batch,
    rate_limit,
    resolve_found,
    resolve_offsets,
    split_ranges,
)
from logfs.spark.options import OptionError, SourceOptions, source_options
from logfs.spark.schema import HEADERS_COLUMN, KAFKA_SCHEMA, check_read_schema
from logfs.spark.writer import LogfsBatchWriter, LogfsStreamWriter, sink_for

__all__ = ["LogfsDataSource", "local_session", "register"]

_log = logging.getLogger(__name__)


def register(spark: Any) -> None:
    """Register the ``logfs`` format with a SparkSession (``spark.dataSource.register(LogfsDataSource)``), its
    Python workers running this interpreter unless PYSPARK_PYTHON chose another that can import logfs
    (``logfs/spark/interpreter.py``: WorkerPythonError otherwise)."""
    _settle(spark)
    spark.dataSource.register(LogfsDataSource)


def _settle(spark: Any) -> None:
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect has no SparkContext: its server starts the workers
        return
    settle_worker_python(sc)


def _settle_active_context() -> None:
    """At import: a context already running gets this interpreter's workers too (``spark.dataSource.register``
    reads ``sc.pythonExec`` when it registers), and later contexts default to it."""
    from pyspark import SparkContext

    active = SparkContext._active_spark_context
    if active is not None:
        settle_worker_python(active)
    default_worker_python()


def local_session(app: str, master: str = "local[2]", **conf: str) -> Any:
    """A ``local[2]`` SparkSession for the demo, the benchmark and the tests on a small machine, ``logfs``
    registered: no UI, two shuffle partitions, UTC, C1-only JIT (a first result in ~6 s instead of ~8 s), logs at
    ERROR; ``conf`` adds or overrides settings (``spark_driver_memory="2g"`` → ``spark.driver.memory``); ``master``
    ``"local[2,2]"`` retries a failed task once.

    Spark's Python workers run this interpreter (PYSPARK_PYTHON, unless set).
    """
    from pyspark.sql import SparkSession

    default_worker_python()
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
    }
    settings.update({key.replace("_", "."): value for key, value in conf.items()})
    builder = SparkSession.builder.master(master).appName(app)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


_settle_active_context()


class LogfsDataSource(DataSource):
    """The ``logfs`` format: Spark's Kafka source and sink over a mounted logfs store (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return "logfs"

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return f"{KAFKA_SCHEMA}, {HEADERS_COLUMN}" if include else KAFKA_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        options = source_options(self.options, streaming=False)
        check_read_schema(schema, options.include_headers)
        return LogfsBatchReader(options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        options = source_options(self.options, streaming=True)
        check_read_schema(schema, options.include_headers)
        return LogfsStreamReader(options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return LogfsBatchWriter(sink_for(self.options, schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return LogfsStreamWriter(sink_for(self.options, schema, overwrite))


# --- reading ---------------------------------------------------------------------------------------------------------


class RangePartition(InputPartition):
    """One Spark partition: the records ``[start, end)`` of one topic-partition, pinned by the driver."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(None)
        self.topic, self.partition, self.start, self.end = rng.topic, rng.partition, rng.start, rng.end

    @property
    def range(self) -> OffsetRange:
        return OffsetRange(self.topic, self.partition, self.start, self.end)


def _read_partition(options: SourceOptions, schema: StructType, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """An executor's read of one pinned range (both readers)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    if not isinstance(partition, RangePartition):
        return  # no range to read: Spark plans one InputPartition(None) when partitions() returns none
    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    opened = open_range(
        Path(options.path),
        partition.range,
        read_committed=options.read_committed,
        fail_on_data_loss=options.fail_on_data_loss,
        timeout_s=options.poll_timeout_s,
    )
    if opened is None:
        return
    f, rng = opened
    with f:
        yield from read_range(f, rng, arrow_schema)


def _subscribed(options: SourceOptions, warned: set[str] | None = None) -> dict[TopicPartition, PartitionState]:
    """The states of the partitions a query subscribes to (driver), from one read of ``.logfs/partitions`` (a
    mount without it: one ``state`` file per partition; ``logfs/spark/mount.py``). A ``subscribe`` topic that does
    not exist fails a batch query (OptionError); a stream (``warned``: the topics it warned about) warns once and
    reads it from offset 0 once it appears, as Spark's Kafka source waits for a topic."""
    mount = Path(options.path)
    if not mount.is_dir():
        raise OptionError(f"{options.path} is not a directory (the path must be a logfs mount point)")
    catalog = load_catalog(mount)
    sub = options.subscription
    if sub.assign:
        return catalog.states(sub.assign)
    topics = list(sub.topics) if sub.topics else [t for t in catalog.topics() if sub.matches(t)]
    missing = [t for t in sub.topics if not catalog.has_topic(t)]
    if missing and warned is None:
        raise OptionError(f"subscribe: no topic {', '.join(map(repr, missing))} under {mount} (create it with"
                          " `logfs create-topic` or mkdir; a stream waits for it)")  # fmt: skip
    for topic in missing:
        if warned is not None and topic not in warned:
            warned.add(topic)
            _log.warning("logfs: subscribed topic %r does not exist under %s yet: waiting for it", topic, mount)
    return catalog.states(catalog.partitions_of(topics))


def _resolve(
    spec: OffsetSpec,
    states: dict[TopicPartition, PartitionState],
    options: SourceOptions,
    *,
    option: str,
    allow_latest: bool = True,
    allow_earliest: bool = True,
) -> dict[TopicPartition, int]:
    """The offsets ``spec`` names for the subscribed partitions (driver): a timestamp spec is looked up in the mount
    (each partition's first record at or after its timestamp), the others are arithmetic on ``states``."""
    rc = options.read_committed
    if isinstance(spec, GroupSpec):
        return group_starting_offsets(Path(options.path), spec.group, states, read_committed=rc)
    if isinstance(spec, TimestampSpec):
        mount = Path(options.path)
        found = {
            tp: offset_for_timestamp(mount, tp[0], tp[1], ts, read_committed=rc)
            for tp, ts in spec.timestamps(states, option).items()
        }
        no_match = options.timestamp_no_match if option == "startingOffsets" else None
        return resolve_found(found, states, read_committed=rc, no_match=no_match, option=option)
    return resolve_offsets(
        spec, states, read_committed=rc, option=option, allow_latest=allow_latest, allow_earliest=allow_earliest
    )


def _partitions(ranges: list[OffsetRange], options: SourceOptions) -> list[InputPartition]:
    split = split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
    return [RangePartition(r) for r in split]


class LogfsBatchReader(DataSourceReader):
    """``spark.read.format("logfs")``: the ranges are pinned once, when Spark asks for the partitions."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        o = self.options
        states = _subscribed(o)
        rc = o.read_committed
        starting = _resolve(o.starting, states, o, option="startingOffsets", allow_latest=False)
        ending = _resolve(o.ending, states, o, option="endingOffsets", allow_earliest=False)
        ranges = plan_batch(starting, ending, states, read_committed=rc, fail_on_data_loss=o.fail_on_data_loss)
        _log.info("logfs: batch read of %d range(s), %d record(s)", len(ranges), sum(r.size for r in ranges))
        return _partitions(ranges, o)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.options, self.schema, partition)


class LogfsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("logfs")``: offsets are ``{"topic": {"partition": offset}}``.

    Partitions that appear while the query runs (a new partition, a new topic matching subscribePattern) are read
    from offset 0, as Spark reads new Kafka partitions from the earliest offset; if their log no longer starts at
    0, the failOnDataLoss rule applies when the range is read.
    """

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._target: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow: the offsets to stop at
        self._warned: set[str] = set()  # subscribed topics not there yet, warned about once
        self._group_done: dict[TopicPartition, int] = {}  # commitToGroup: offsets this reader found committed

    def _latest(self) -> dict[TopicPartition, int]:
        rc = self.options.read_committed
        return {tp: s.end_offset(rc) for tp, s in _subscribed(self.options, self._warned).items()}

    def initialOffset(self) -> dict[str, Any]:
        o = self.options
        states = _subscribed(o, self._warned)
        return offsets_to_json(_resolve(o.starting, states, o, option="startingOffsets"))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return offsets_to_json(self._latest())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = offsets_from_json(start, "start offset")
        self._commit_to_group(begin)  # ``start`` ends the last batch in Spark's commit log (see commit)
        latest = self._latest()
        for tp, offset in begin.items():
            now = latest.get(tp)
            if now is not None and now >= offset:
                continue
            what = "is gone (topic deleted?)" if now is None else f"now ends at {now}, before offset {offset}"
            if self.options.fail_on_data_loss:
                raise DataLoss(f"{tp[0]}-{tp[1]} {what}. Set failOnDataLoss=false to go on without it.")
            _log.warning("logfs: %s-%s %s; going on (failOnDataLoss=false)", tp[0], tp[1], what)
            latest[tp] = offset
        if self._target is not None:
            latest = {tp: min(end, self._target.get(tp, begin.get(tp, 0))) for tp, end in latest.items()}
            latest = {tp: max(end, begin.get(tp, 0)) for tp, end in latest.items()}
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(begin, latest, limit.max_rows)
        return offsets_to_json(latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin = offsets_from_json(start, "start offset")
        until = offsets_from_json(end, "end offset")
        ranges = [OffsetRange(t, p, begin.get((t, p), 0), e) for (t, p), e in sorted(until.items())]
        return _partitions([r for r in ranges if r.size > 0], self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read_partition(self.options, self.schema, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark completed the micro-batch ending at ``end`` (called when it plans the batch after it)."""
        self._commit_to_group(offsets_from_json(end, "end offset"))

    def _commit_to_group(self, offsets: dict[TopicPartition, int]) -> None:
        """With commitToGroup, the group gets ``offsets``, never moved backwards (logfs/spark/groups.py).

        Spark calls ``latestOffset(start)`` at every trigger with ``start`` the end of the last batch it completed
        (its commit log holds it; after a restart an uncommitted batch is re-run before any latestOffset), and calls
        ``commit`` only once it plans the batch after: committing at ``latestOffset`` lets the group reach the
        query's position within one trigger, idle or not. A failed commit is logged, not raised: the group is for
        humans and tools, and the next trigger commits again."""
        group = self.options.commit_to_group
        todo = {tp: o for tp, o in offsets.items() if o >= 0 and self._group_done.get(tp) != o}
        if group is None or not todo:
            return
        try:
            written = commit_to_group(Path(self.options.path), group, todo)
        except OSError as exc:
            _log.warning("logfs: commitToGroup=%s: committing %s failed: %s", group, offsets_to_json(todo), exc)
            return
        self._group_done.update(todo)
        if written:
            _log.info("logfs: committed %s to group %s", offsets_to_json(written), group)
