"""The ``logfs`` Spark data source and sink (PySpark >= 4.2): ``from logfs.spark import LogfsDataSource``.

The package is split so that its pure parts import without Spark: ``options`` (the options, checked on the driver)
and ``offsets`` (offset-range arithmetic) import neither pyspark nor pyarrow (tests/project/test_layering.py checks);
``mount`` and ``arrow`` run on executors; ``sink`` and ``transactions`` write; ``schema`` holds the columns; ``source``
(the readers) and ``writer`` (the writers) are the thin glue that Spark calls.

Why the names below are looked up lazily (PEP 562): importing ``logfs.spark.offsets`` runs this file first, and an
eager ``from logfs.spark.source import …`` here would pull pyspark into every import of the pure modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from logfs.spark.schema import HEADERS_COLUMN, JSONL_SCHEMA, KAFKA_SCHEMA
    from logfs.spark.source import LogfsDataSource, local_session, register
    from logfs.spark.writer import FAIL_TASK_ONCE_ENV, PAUSE_ENV

# Each exported name, and the module that defines it.
_EXPORTS = {
    "FAIL_TASK_ONCE_ENV": "logfs.spark.writer",
    "HEADERS_COLUMN": "logfs.spark.schema",
    "JSONL_SCHEMA": "logfs.spark.schema",
    "KAFKA_SCHEMA": "logfs.spark.schema",
    "PAUSE_ENV": "logfs.spark.writer",
    "LogfsDataSource": "logfs.spark.source",
    "local_session": "logfs.spark.source",
    "register": "logfs.spark.source",
}

__all__ = [
    "FAIL_TASK_ONCE_ENV",
    "HEADERS_COLUMN",
    "JSONL_SCHEMA",
    "KAFKA_SCHEMA",
    "PAUSE_ENV",
    "LogfsDataSource",
    "local_session",
    "register",
]

assert sorted(_EXPORTS) == sorted(__all__)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'logfs.spark' has no attribute {name!r}")
