"""A PySpark job started in the project directory reads a mount through the ``logfs`` source and writes through its
sink (issue 13): the checkout's bare ``logfs/`` folder comes first on ``sys.path`` there, in the driver and in Spark's
Python workers, and ``logfs.core`` must still import.

The job is what a user writes — a plain ``SparkSession``, ``from logfs.spark import LogfsDataSource`` — run as
``python -c`` with the checkout as its working directory, so that ``sys.path[0]`` is the checkout as it is for
``python job.py`` there; no ``-P`` and no ``PYTHONSAFEPATH``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Mount, make_topic, running_mount, write_all

ROOT = Path(__file__).resolve().parents[2]

JOB = """
import json, sys
import logfs
from pyspark.sql import SparkSession
from logfs.spark import LogfsDataSource

mnt = sys.argv[1]
spark = (SparkSession.builder.master("local[2]").appName("from-checkout")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
spark.dataSource.register(LogfsDataSource)
rows = spark.read.format("logfs").option("subscribe", "in").load(mnt)
rows.selectExpr("CAST(value AS STRING) AS key", "upper(CAST(value AS STRING)) AS value") \\
    .write.format("logfs").option("topic", "out").mode("append").save(mnt)

def worker_logfs(_):
    import logfs.core.log.log, logfs.mount  # what the executors import
    yield logfs.core.log.log.__file__

workers = spark.sparkContext.parallelize(range(2), 2).mapPartitions(worker_logfs).collect()
print(json.dumps({"driver": logfs.__file__, "workers": workers, "read": rows.count()}))
spark.stop()
"""


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Mount]:
    with running_mount(tmp_path / "store", tmp_path / "mnt", "num.partitions=2") as m:
        make_topic(m.path, "out")  # num.partitions=2: mkdir makes both partitions
        topic = make_topic(m.path, "in")
        for p in (0, 1):
            write_all(topic / f"{p}/append", b"".join(b"r%d-%03d\n" % (p, i) for i in range(50)))
        yield m


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_spark_job_run_in_the_checkout_reads_and_writes_a_mount(mount: Mount) -> None:
    pytest.importorskip("pyspark")
    # No PYSPARK_PYTHON: registering the source makes the workers run this interpreter (logfs/spark/interpreter.py).
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONSAFEPATH", "PYTHONPATH", "PYSPARK_PYTHON")}
    job = subprocess.run(
        [sys.executable, "-c", JOB, str(mount.path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=280
    )
    assert job.returncode == 0, job.stderr[-4000:]
    report = json.loads(job.stdout.strip().splitlines()[-1])
    # The driver and the workers imported the checkout's own files (sys.path[0] is the checkout), and they worked.
    assert Path(report["driver"]).resolve() == ROOT / "logfs" / "__init__.py"
    assert [Path(f).resolve() for f in report["workers"]] == [ROOT / "core" / "log" / "log.py"] * 2
    assert report["read"] == 100
    written = sorted(
        line for p in (0, 1) for line in (mount.path / f"out/{p}/at/earliest").read_bytes().decode().splitlines()
    )
    assert written == sorted(f"R{p}-{i:03d}" for p in (0, 1) for i in range(50))
