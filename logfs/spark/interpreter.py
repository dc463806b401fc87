"""Which Python Spark's workers run, so that they can import logfs (issue 15 item 2).

Spark starts its Python workers (the data source's planner, readers and writers) with the interpreter named by
``SparkContext.pythonExec``: ``PYSPARK_PYTHON`` as it was when the context started (``spark-submit`` exports
``spark.pyspark.python`` as ``PYSPARK_PYTHON``), else ``python3`` from PATH — the system's, which has neither
logfs nor pyarrow when the job runs from a venv. ``pythonExec`` is read again each time a Python function is
wrapped for the JVM, which is what ``spark.dataSource.register`` does, so it can still be set on a running context.

The rule (:func:`settle_worker_python`, called when ``logfs.spark.source`` is imported and by
:func:`logfs.spark.register`):

* the workers already run this interpreter: nothing to do;
* nobody chose one (``PYSPARK_PYTHON`` unset when logfs was imported, Spark's default ``python3``): the context's
  ``pythonExec`` becomes this interpreter, and ``PYSPARK_PYTHON`` defaults to it for contexts started later;
* someone chose another: it is asked once (a subprocess, ~0.1 s) whether it imports logfs and pyarrow; if not,
  :class:`WorkerPythonError` says what to set, at registration instead of in the first task.

Threads: the driver's main thread.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
from typing import Any

_log = logging.getLogger(__name__)

SPARK_DEFAULT_PYTHON = "python3"  # what pyspark's SparkContext runs when PYSPARK_PYTHON is unset
CHECK_TIMEOUT_S = 60.0
CHECK_IMPORTS = "import logfs.spark.arrow, pyarrow"

# Captured before this module sets its default: whether the user chose the workers' interpreter.
USER_CHOSE = "PYSPARK_PYTHON" in os.environ


class WorkerPythonError(RuntimeError):
    """Spark's Python workers would run an interpreter that cannot import logfs (or pyarrow)."""


def default_worker_python() -> None:
    """Contexts started from now on run this interpreter's workers, unless ``PYSPARK_PYTHON`` says otherwise."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def settle_worker_python(sc: Any) -> None:
    """Make the workers of SparkContext ``sc`` run an interpreter that imports logfs (see the module docstring);
    WorkerPythonError when a chosen one cannot."""
    chosen = str(sc.pythonExec)
    if _is_this_python(chosen):
        return
    if not USER_CHOSE and chosen == SPARK_DEFAULT_PYTHON:
        _log.info("logfs: Spark's Python workers will run %s (PYSPARK_PYTHON was not set)", sys.executable)
        sc.pythonExec = sys.executable
        return
    problem = _import_problem(chosen)
    if problem:
        raise WorkerPythonError(
            f"Spark's Python workers run {chosen} (PYSPARK_PYTHON), which cannot import logfs: {problem}. Set"
            f" PYSPARK_PYTHON={sys.executable} (with spark-submit: --conf spark.pyspark.python={sys.executable})"
            " before the SparkContext starts, or unset it and logfs uses the interpreter that registers it"
        )


def _is_this_python(executable: str) -> bool:
    found = shutil.which(executable) or executable
    return os.path.abspath(found) == os.path.abspath(sys.executable)  # not realpath: a venv's python is a link


@functools.cache
def _import_problem(executable: str) -> str:
    """'' when ``executable`` imports logfs and pyarrow, else the last line of why not."""
    try:
        done = subprocess.run([executable, "-c", CHECK_IMPORTS], capture_output=True, text=True,
                              timeout=CHECK_TIMEOUT_S, check=False, cwd="/")  # fmt: skip
    except OSError as exc:
        return str(exc)
    except subprocess.TimeoutExpired:
        return f"`{executable} -c '{CHECK_IMPORTS}'` did not finish in {CHECK_TIMEOUT_S:.0f} s"
    if done.returncode == 0:
        return ""
    lines = done.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit code {done.returncode}"
