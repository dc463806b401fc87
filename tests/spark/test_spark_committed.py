"""The Spark data source under ``kafka.isolation.level=read_committed`` over transactional data (docs/spark.md,
"The `logfs` data source"; docs/mount.md, "Files, modes and caching", ``committed/``), with a real local Spark session
over a real mount.

The store is written with the core before it is mounted (``test_mount_committed``'s script: two producers over two
partitions, one transaction committed and one aborted, plain records between); a transaction left open is begun
through the mount. read_committed must return the committed and plain records only, and stop at the last stable offset;
read_uncommitted every data record up to the HW.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from committed_store import ALL_VALUES, COMMITTED_VALUES, SCRIPT, begin_open_transaction, build_store
from conftest import Mount, finish_mount, start_mount

pyspark = pytest.importorskip("pyspark")


@pytest.fixture(scope="module")
def mount(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mount]:
    root = tmp_path_factory.mktemp("spark-committed")
    build_store(root / "store", SCRIPT, topics=("orders",))
    m = start_mount(root / "store", root / "mnt")
    try:
        yield m
    finally:
        finish_mount(m)


def values(spark: Any, mnt: Path, topic: str, **options: str) -> dict[int, list[str]]:
    reader = spark.read.format("logfs").option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    rows = reader.load(str(mnt)).select("partition", "offset", "value").collect()
    out: dict[int, list[str]] = {}
    for r in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
        out.setdefault(r["partition"], []).append(bytes(r["value"]).decode())
    return out


def test_read_committed_leaves_the_aborted_transaction_out(spark: Any, mount: Mount) -> None:
    committed = values(spark, mount.path, "orders", **{"kafka.isolation.level": "read_committed"})
    uncommitted = values(spark, mount.path, "orders", **{"kafka.isolation.level": "read_uncommitted"})
    assert committed == COMMITTED_VALUES
    assert uncommitted == ALL_VALUES


def test_read_committed_stops_at_the_last_stable_offset(spark: Any, mount: Mount) -> None:
    begin_open_transaction(mount.path)  # pending/0: before, an open transaction's open-1, after
    state = json.loads((mount.path / "pending" / "0" / "state").read_bytes())
    assert (state["last_stable_offset"], state["high_watermark"]) == (1, 3)
    committed = values(spark, mount.path, "pending", **{"kafka.isolation.level": "read_committed"})
    assert committed == {0: ["before"], 1: ["other"]}
    uncommitted = values(spark, mount.path, "pending")
    assert uncommitted == {0: ["before", "open-1", "after"], 1: ["other"]}
