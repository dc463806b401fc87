"""Spark's Python workers and the ``logfs`` source with no environment tricks (issue 15 item 2): registering the
source makes the workers run the interpreter that registered it, or fails at once saying what to set; ``subscribe``
of a topic that does not exist fails a batch read clearly and makes a stream wait for the topic."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Mount, make_topic, running_mount, write_all

# A plain session started before logfs.spark is imported, PYSPARK_PYTHON unset, the venv not on PATH: without
# logfs's help the workers would start the system's python3, which has neither logfs nor pyarrow.
JOB = """
import sys
from pyspark.sql import SparkSession

spark = (SparkSession.builder.master("local[2]").appName("interpreter")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
from logfs.spark import LogfsDataSource
spark.dataSource.register(LogfsDataSource)
print("count", spark.read.format("logfs").option("subscribe", "in").load(sys.argv[1]).count())
spark.stop()
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    env.update(extra)
    return env


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Mount]:
    with running_mount(tmp_path / "store", tmp_path / "mnt", "num.partitions=2") as m:
        topic = make_topic(m.path, "in")  # num.partitions=2: mkdir makes both partitions
        for p in (0, 1):
            write_all(topic / f"{p}/append", b"".join(b"r%d\n" % i for i in range(25)))
        yield m


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_registering_the_source_makes_the_workers_run_this_interpreter(mount: Mount) -> None:
    pytest.importorskip("pyspark")
    job = subprocess.run([sys.executable, "-c", JOB, str(mount.path)], cwd="/", env=_env(), capture_output=True,
                         text=True, timeout=280)  # fmt: skip
    assert job.returncode == 0, job.stderr[-4000:]
    assert job.stdout.strip().splitlines()[-1] == "count 50"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_chosen_interpreter_without_logfs_fails_at_registration_saying_what_to_set(mount: Mount) -> None:
    pytest.importorskip("pyspark")
    system_python = "/usr/bin/python3"
    if not Path(system_python).exists():
        pytest.skip("no system python3")
    job = subprocess.run([sys.executable, "-c", JOB, str(mount.path)], cwd="/",
                         env=_env(PYSPARK_PYTHON=system_python), capture_output=True, text=True,
                         timeout=280)  # fmt: skip
    assert job.returncode == 1
    assert "WorkerPythonError" in job.stderr
    assert f"Spark's Python workers run {system_python} (PYSPARK_PYTHON), which cannot import logfs" in job.stderr
    assert f"Set PYSPARK_PYTHON={sys.executable}" in job.stderr
    assert "count" not in job.stdout


def test_a_batch_read_of_a_topic_that_does_not_exist_fails_clearly(spark: Any, mount: Mount) -> None:
    with pytest.raises(Exception, match=r"subscribe: no topic 'nosuch' under"):
        spark.read.format("logfs").option("subscribe", "in,nosuch").load(str(mount.path)).count()


@pytest.mark.timeout(200)
def test_a_stream_of_a_topic_that_does_not_exist_waits_for_it(spark: Any, mount: Mount, tmp_path: Path) -> None:
    query = (
        spark.readStream.format("logfs").option("subscribe", "later").load(str(mount.path))
        .selectExpr("CAST(value AS STRING) AS v").writeStream.format("memory").queryName("later_topic")
        .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(processingTime="200 milliseconds").start()
    )  # fmt: skip
    try:
        time.sleep(2)
        assert query.isActive, query.exception()
        assert spark.sql("SELECT * FROM later_topic").count() == 0
        make_topic(mount.path, "later")
        write_all(mount.path / "later/0/append", b"a\nb\n")
        deadline = time.monotonic() + 120
        while spark.sql("SELECT * FROM later_topic").count() < 2:
            assert query.isActive, query.exception()
            assert time.monotonic() < deadline, "the stream never read the topic once it appeared"
            time.sleep(0.5)
        assert sorted(r.v for r in spark.sql("SELECT v FROM later_topic").collect()) == ["a", "b"]
    finally:
        query.stop()
