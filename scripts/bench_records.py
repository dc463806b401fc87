#!/usr/bin/env python3
"""Benchmark the RecordBatch v2 codec against kafka-python's, in the same run.

For 100-byte values in batches of 1, 100 and 10,000 records it measures, for logfs and for kafka-python's
``kafka.record`` (the independent implementation the tests use as an oracle):

* encode: records -> batch bytes (logfs: ``encode_values``, the append path; kafka-python: DefaultRecordBatchBuilder)
* validate: the full check of a producer's batch, CRC plus every record's framing (logfs: ``validate_batch``;
  kafka-python: ``validate_crc`` plus iterating every record, which is how it walks the framing)
* decode: batch -> record objects (``decode_records``; kafka-python: iterating DefaultRecordBatch)
* render: the plain rendering (docs/mount.md, "Reads"), values one per line (``render_plain``; kafka-python: iterate +
  join)
* crc: the CRC-32C pass alone over the batch (``crc32c`` package; kafka-python's ``calc_crc32c``)

The "(events)" rows (issue 14) do the same on realistic records: a kafka-python producer's uncompressed 16 KiB
batches of web events (scripts/realdata.py, seeded; keys, one header each, values of 150-1,500 bytes). Run with
``LOGFS_NO_CEXT=1`` for the pure-Python record walker (the compiled one, core/cext/recordwalk.c, is used when built).

Each cell repeats its operation until ~0.4 s has passed and reports the best of three such runs. Targets (issue 2)
for 10,000-record batches: validate >= 2,000,000 records/s, crc >= 5 GB/s, encode >= 1,000,000 records/s,
render >= 2,000,000 records/s.

Usage: ``python scripts/bench_records.py [--quick] [--markdown]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

import crc32c
from benchutil import print_rows

from logfs.core.format.batch import ATTRIBUTES_OFFSET
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_values
from logfs.core.format.render import render_plain
from logfs.core.format.validate import validate_batch

try:
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder, calc_crc32c
except ImportError:  # pragma: no cover - kafka-python is a test extra
    DefaultRecordBatch = None

VALUE_BYTES = 100
TIMESTAMP = 1_700_000_000_000
TARGETS = {"encode": 1_000_000, "validate": 2_000_000, "render": 2_000_000}
CRC_TARGET_GBPS = 5.0


def best_rate(fn: Callable[[], object], units_per_call: int, budget_s: float) -> float:
    """Units per second of ``fn``: the best of three runs of at least ``budget_s / 3`` seconds each."""
    best = 0.0
    for _ in range(3):
        calls = 0
        start = time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= budget_s / 3:
                break
        best = max(best, calls * units_per_call / elapsed)
    return best


def kp_build(values: list[bytes]) -> bytes:
    b = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 64 * 1024 * 1024)
    for i, v in enumerate(values):
        b.append(i, TIMESTAMP, None, v, [])
    return bytes(b.build())


def kp_validate(batch: bytes) -> None:
    b = DefaultRecordBatch(batch)
    if not b.validate_crc():
        raise AssertionError("kafka-python: CRC mismatch")
    for _ in b:
        pass


def kp_render(batch: bytes) -> bytes:
    return b"".join((r.value or b"") + b"\n" for r in DefaultRecordBatch(batch))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="shorter runs (noisier figures)")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args()
    budget = 0.15 if args.quick else 0.4
    rows: list[tuple[str, int, str, float, float | None, str]] = []
    for n in (1, 100, 10_000):
        values = [os.urandom(VALUE_BYTES // 2).hex().encode() for _ in range(n)]
        batch = encode_values(values, TIMESTAMP)
        mb = len(batch) / n / 1e6  # MB per record
        ours = {
            "encode": best_rate(lambda v=values: encode_values(v, TIMESTAMP), n, budget),
            "validate": best_rate(lambda b=batch: validate_batch(b), n, budget),
            "decode": best_rate(lambda b=batch: decode_records(b), n, budget),
            "render": best_rate(lambda b=batch: render_plain(b), n, budget),
        }
        theirs: dict[str, float | None] = dict.fromkeys(ours)
        if DefaultRecordBatch is not None:
            theirs = {
                "encode": best_rate(lambda v=values: kp_build(v), n, budget),
                "validate": best_rate(lambda b=batch: kp_validate(b), n, budget),
                "decode": best_rate(lambda b=batch: list(DefaultRecordBatch(b)), n, budget),
                "render": best_rate(lambda b=batch: kp_render(b), n, budget),
            }
        for op, rate in ours.items():
            other = theirs[op]
            target = TARGETS.get(op) if n == 10_000 else None
            verdict = "" if target is None else ("ok" if rate >= target else f"below {target:,}")
            rows.append((op, n, "rec/s", rate, other, verdict))
            rows.append((op, n, "MB/s", rate * mb, None if other is None else other * mb, ""))
        view = memoryview(batch)[ATTRIBUTES_OFFSET:]
        crc_ours = best_rate(lambda v=view: crc32c.crc32c(v), len(view), budget) / 1e9
        crc_theirs = None
        if DefaultRecordBatch is not None:
            crc_theirs = best_rate(lambda v=bytes(view): calc_crc32c(v), len(view), budget) / 1e9
        verdict = ("ok" if crc_ours >= CRC_TARGET_GBPS else f"below {CRC_TARGET_GBPS}") if n == 10_000 else ""
        rows.append(("crc", n, "GB/s", crc_ours, crc_theirs, verdict))
    rows += realistic_rows(budget)
    print_table(rows, markdown=args.markdown)
    return 0


def realistic_rows(budget: float) -> list[tuple[str, int, str, float, float | None, str]]:
    """validate, decode and render of realistic producer batches (issue 14; scripts/realdata.py, seeded): the
    uncompressed 16 KiB batches of a kafka-python producer, web events of 150-1,500 bytes with keys and one header
    each. The batch column is their mean record count; figures are over all of them."""
    import realdata  # scripts/ is sys.path[0]

    batches = [b for b in realdata.producer_file(4 * 1024 * 1024) if realdata.batch_codec(b) == 0]
    n = sum(int.from_bytes(b[57:61], "big") for b in batches)
    mb = sum(len(b) for b in batches) / n / 1e6
    ops: dict[str, Callable[[bytes], object]] = {"validate": validate_batch, "decode": decode_records}
    ops["render"] = render_plain
    theirs: dict[str, Callable[[bytes], object]] = {"validate": kp_validate, "render": kp_render}
    theirs["decode"] = lambda b: list(DefaultRecordBatch(b))
    rows: list[tuple[str, int, str, float, float | None, str]] = []
    for op, fn in ops.items():
        rate = best_rate(lambda f=fn: [f(b) for b in batches], n, budget)
        other = None
        if DefaultRecordBatch is not None:
            other = best_rate(lambda f=theirs[op]: [f(b) for b in batches], n, budget)
        rows.append((f"{op} (events)", n // len(batches), "rec/s", rate, other, ""))
        rows.append((f"{op} (events)", n // len(batches), "MB/s", rate * mb, None if other is None else other * mb, ""))
    return rows


def print_table(rows: list[tuple[str, int, str, float, float | None, str]], *, markdown: bool) -> None:
    head = ("operation", "batch", "unit", "logfs", "kafka-python", "ratio", "target")
    lines = []
    for op, n, unit, ours, theirs, verdict in rows:
        fmt = "{:,.2f}" if unit == "GB/s" else ("{:,.1f}" if unit == "MB/s" else "{:,.0f}")
        lines.append(
            (
                op,
                f"{n:,}",
                unit,
                fmt.format(ours),
                "-" if theirs is None else fmt.format(theirs),
                "-" if not theirs else f"{ours / theirs:,.1f}x",
                verdict,
            )
        )
    print_rows(head, lines, markdown=markdown, right=lambda i: i >= 3)


if __name__ == "__main__":
    sys.exit(main())
