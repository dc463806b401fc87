"""The ``logfs`` sink's Spark side (Python Data Source API): ``df.write`` and ``df.writeStream`` with format ``logfs``.

Each write task appends its rows through ``<topic>/<partition>/batches`` and fsyncs (``sink.MountWriter``), and its
commit message says what it appended. With ``exactlyOnce`` every task writes in its own transaction, and the driver
commits them all when Spark commits the write (a streaming micro-batch's with labels, so a replayed micro-batch
whose transactions were committed before aborts its new ones), after aborting any other open transaction of the
query (a killed run's); without it, rows appended by tasks that succeeded stay when the write is aborted.

Where things run: ``write`` on executors, ``commit`` and ``abort`` on the driver.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from logfs.spark import transactions as txn
from logfs.spark.options import OptionError, SinkOptions, sink_options
from logfs.spark.schema import check_write_schema
from logfs.spark.sink import Appended, MountWriter, summarize

_log = logging.getLogger(__name__)

# Fault injection for the exactly-once tests (tests/spark/test_spark_exactly_once.py); unset in normal use.
FAIL_TASK_ONCE_ENV = "LOGFS_SPARK_TEST_FAIL_TASK_ONCE"  # the first attempt of every write task fails after writing
PAUSE_ENV = "LOGFS_SPARK_TEST_PAUSE"  # "<before-commit|after-commit>:<file>": create it, wait to be killed


@dataclass
class LogfsCommitMessage(WriterCommitMessage):
    """What one task appended, per partition; with exactlyOnce, its transaction and Spark partition id."""

    appended: list[Appended]
    transaction: str | None = None
    task_partition: int = -1


def sink_for(options: Any, schema: StructType, overwrite: bool) -> SinkOptions:
    """Check the options and the DataFrame's columns of a write (driver)."""
    if overwrite:
        raise OptionError("the logfs sink only appends: use mode('append') (a log is never overwritten)")
    sink = sink_options(options)
    check_write_schema(schema, topic_option=sink.topic is not None)
    return sink


def _write_task(sink: SinkOptions, batches: Iterator[pa.RecordBatch]) -> LogfsCommitMessage:
    writer = MountWriter(
        Path(sink.path), topic=sink.topic, compression=sink.compression, transactional_id=sink.transactional_id,
        delivery_timeout_ms=sink.delivery_timeout_ms,
    )  # fmt: skip
    context = TaskContext.get()
    try:
        for batch in batches:
            writer.write(batch)
        appended = writer.close()
        if os.environ.get(FAIL_TASK_ONCE_ENV) and context is not None and context.attemptNumber() == 0:
            raise RuntimeError(f"{FAIL_TASK_ONCE_ENV}: this task attempt fails after writing (a test's fault)")
        return LogfsCommitMessage(appended, writer.transaction, -1 if context is None else context.partitionId())
    except BaseException:
        writer.abort_transaction()
        raise
    finally:
        writer.abort()


def _commit_transactions(sink: SinkOptions, messages: list[Any], batch_id: int | None) -> None:
    """Commit the tasks' transactions of a write (exactlyOnce), after aborting any other open transaction of the
    query (an earlier run's). A streaming micro-batch's carry labels, so a replayed micro-batch whose transactions
    were committed before aborts its new ones (no duplicate)."""
    if sink.transactional_id is None:
        return
    _test_pause("before-commit")
    mount = Path(sink.path)
    ours = [m for m in messages if isinstance(m, LogfsCommitMessage) and m.transaction is not None]
    # Micro-batches run one after another: any other open transaction of this query is a leftover (a killed
    # driver's or executor's), which would hold the last stable offset until its timeout.
    txn.abort_stale(mount, sink.transactional_id, keep={m.transaction for m in ours if m.transaction})
    for m in ours:
        assert m.transaction is not None
        name = None if batch_id is None else txn.label(sink.transactional_id, batch_id, m.task_partition)
        txn.commit(mount, m.transaction, name)
    _test_pause("after-commit")


def _abort_transactions(sink: SinkOptions, messages: list[Any]) -> None:
    if sink.transactional_id is None:
        return
    for m in messages:
        if isinstance(m, LogfsCommitMessage) and m.transaction is not None:
            txn.abort(Path(sink.path), m.transaction)


def _test_pause(point: str) -> None:
    """A fault-injection point for the exactly-once tests: with ``LOGFS_SPARK_TEST_PAUSE=<point>:<file>`` set,
    create ``<file>`` and wait there to be killed (kill -9 of the whole query at that moment)."""
    wanted, _, marker = os.environ.get(PAUSE_ENV, "").partition(":")
    if wanted == point and marker:
        Path(marker).touch()
        while True:
            time.sleep(1)


def _log_commit(messages: list[Any], what: str) -> None:
    appended = [a for m in messages if isinstance(m, LogfsCommitMessage) for a in m.appended]
    for (topic, partition), (records, first, last) in sorted(summarize(appended).items()):
        _log.info(
            "logfs: %s appended %d record(s) to %s-%d, offsets %d..%d", what, records, topic, partition, first, last
        )


class LogfsBatchWriter(DataSourceArrowWriter):
    """``df.write.format("logfs").mode("append")``: each task appends and fsyncs its rows."""

    def __init__(self, sink: SinkOptions) -> None:
        self.sink = sink

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LogfsCommitMessage:
        return _write_task(self.sink, iterator)

    def commit(self, messages: list[Any]) -> None:
        _commit_transactions(self.sink, messages, None)
        _log_commit(messages, "write")

    def abort(self, messages: list[Any]) -> None:
        _abort_transactions(self.sink, messages)
        if self.sink.transactional_id is None:
            _log.warning("logfs: write aborted; rows appended by tasks that succeeded stay (no exactlyOnce)")


class LogfsStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("logfs")``: each micro-batch's tasks append and fsync before Spark commits it."""

    def __init__(self, sink: SinkOptions) -> None:
        self.sink = sink

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LogfsCommitMessage:
        return _write_task(self.sink, iterator)

    def commit(self, messages: list[Any], batchId: int) -> None:
        _commit_transactions(self.sink, messages, batchId)
        _log_commit(messages, f"micro-batch {batchId}")

    def abort(self, messages: list[Any], batchId: int) -> None:
        _abort_transactions(self.sink, messages)
        if self.sink.transactional_id is None:
            _log.warning("logfs: micro-batch %d aborted; rows appended by its finished tasks stay", batchId)
