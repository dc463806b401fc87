"""The ``logfs`` Spark data source and sink (PySpark >= 4.2): ``from logfs.spark import LogfsDataSource``.

The package is split so that its pure parts import without Spark: ``options`` (the options, checked on the driver)
and ``offsets`` (offset-range arithmetic) import neither pyspark nor pyarrow; ``mount`` and ``arrow`` run on
executors; ``sink`` and ``transactions`` write; ``source`` is the thin glue that Spark calls.

Why the names below are looked up lazily (PEP 562): importing ``logfs.spark.offsets`` runs this file first, and an
eager ``from logfs.spark.source import …`` here would pull pyspark into every import of the pure modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from logfs.spark.source import (
        FAIL_TASK_ONCE_ENV,
        HEADERS_COLUMN,
        JSONL_SCHEMA,
        KAFKA_SCHEMA,
        PAUSE_ENV,
        LogfsDataSource,
        local_session,
        register,
    )

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


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("logfs.spark.source"), name)
    raise AttributeError(f"module 'logfs.spark' has no attribute {name!r}")
