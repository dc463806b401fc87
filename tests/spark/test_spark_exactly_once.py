"""Exactly-once from Spark into logfs (docs/spark.md, "Exactly once", ``exactlyOnce``; issue 7): a streaming query whose
driver is killed (kill -9 of the whole Spark process group) between writing a micro-batch and committing it, or right
after its transactions committed but before Spark recorded the batch, and one whose tasks fail once after writing — each
restarted from its checkpoint — leaves every input record exactly once in the output's ``committed/`` view.

The query runs as a separate Spark driver process (``JOB`` below), so that it can be killed like a real one; the
fault points are the sink's test hooks (``logfs.spark.PAUSE_ENV``, ``FAIL_TASK_ONCE_ENV``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Mount, finish_mount, start_mount, write_all

from logfs.spark.writer import FAIL_TASK_ONCE_ENV, PAUSE_ENV

JOB = """
import sys
from logfs.spark.source import local_session
mnt, checkpoint, master = sys.argv[1:4]
spark = local_session("exactly-once", master=master)
source = (spark.readStream.format("logfs").option("subscribe", "in").option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "300").load(mnt))
query = (source.selectExpr("key", "value").writeStream.format("logfs").option("topic", "out")
         .option("exactlyOnce", "true").option("transactional.id", "clicks-job")
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start(mnt))
query.awaitTermination()
spark.stop()
"""

RECORDS = 600  # 2 micro-batches of at most 300 records (maxOffsetsPerTrigger), over 2 input partitions


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Mount]:
    m = start_mount(tmp_path / "store", tmp_path / "mnt", "num.partitions=2", "transaction.timeout.ms=60000")
    m.allow_log(r"left open by an earlier run")
    try:
        mnt = m.path
        os.mkdir(mnt / "in")
        os.mkdir(mnt / "out")
        for p in (0, 1):
            write_all(mnt / f"in/{p}/append", b"".join(b"%d-%04d\n" % (p, i) for i in range(p, RECORDS, 2)))
        yield m
    finally:
        finish_mount(m)


def run_job(mnt: Path, checkpoint: Path, *, env: dict[str, str] | None = None, master: str = "local[2]",
            kill_when: Path | None = None) -> int:  # fmt: skip
    """Run the query to its end (availableNow) and return its exit code; with ``kill_when``, kill -9 the driver's
    whole process group (JVM and Python workers) as soon as that file appears."""
    proc = subprocess.Popen(
        [sys.executable, "-c", JOB, str(mnt), str(checkpoint), master],
        env={**os.environ, **(env or {})}, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 240
    try:
        while proc.poll() is None:
            if kill_when is not None and kill_when.exists():
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)
                return -9
            assert time.monotonic() < deadline, "the Spark job did not finish"
            time.sleep(0.1)
        return proc.returncode
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        assert proc.stderr is not None
        err = proc.stderr.read().decode(errors="replace")
        if proc.returncode not in (0, -9):
            print(err[-4000:])


def committed_output(mnt: Path) -> list[str]:
    return sorted(line for p in (0, 1) for line in (mnt / f"out/{p}/committed/at/earliest").read_text().splitlines())


def expected() -> list[str]:
    return sorted(f"{i % 2}-{i:04d}" for i in range(RECORDS))


def test_a_query_killed_before_then_after_its_commit_and_tasks_failing_once_leave_no_duplicate_or_loss(
    mount: Mount, tmp_path: Path
) -> None:
    """Every fault in one query's life (one Spark start for each, none to spare): killed between writing its first
    micro-batch and committing it; restarted, killed right after that micro-batch's transactions committed but
    before Spark recorded it; restarted again with every task's first attempt failing after it wrote (its
    transaction aborted, the retry writing in a new one), it ends with every record exactly once."""
    mnt, checkpoint = mount.path, tmp_path / "checkpoint"
    marker = tmp_path / "paused-before"
    assert run_job(mnt, checkpoint, env={PAUSE_ENV: f"before-commit:{marker}"}, kill_when=marker) == -9, \
        "the job ended before reaching its fault point"  # fmt: skip
    assert committed_output(mnt) == [] and os.listdir(mnt / ".logfs/transactions")  # written, not committed
    marker = tmp_path / "paused-after"
    assert run_job(mnt, checkpoint, env={PAUSE_ENV: f"after-commit:{marker}"}, kill_when=marker) == -9, \
        "the restarted job ended before reaching its fault point"  # fmt: skip
    # the first micro-batch, replayed, is in committed/ although Spark never recorded it; the first run's
    # transactions were aborted by its first commit
    assert len(committed_output(mnt)) == 300
    before = sum(len((mnt / f"out/{p}/at/earliest").read_text().splitlines()) for p in (0, 1))
    # replays the first micro-batch (its labels found: its new transactions aborted), then writes the second; each
    # task's first attempt fails after writing (local[2,2]: Spark tries a task twice)
    assert run_job(mnt, checkpoint, env={FAIL_TASK_ONCE_ENV: "1"}, master="local[2,2]") == 0
    assert committed_output(mnt) == expected()
    assert os.listdir(mnt / ".logfs/transactions") == []
    everything = [line for p in (0, 1) for line in (mnt / f"out/{p}/at/earliest").read_text().splitlines()]
    # this run wrote each of its micro-batches' rows twice (the failed attempt's, aborted, and the retry's): 600
    # rows of the replayed first micro-batch (both attempts aborted) and 600 of the second (one aborted)
    assert len(everything) - before == 2 * RECORDS
