"""scripts/realdata.py, the benchmarks' realistic data: the same bytes for the same seed, events within their
size bounds, and producer batches that both logfs's validator and kafka-python accept, with the codecs, keys and
headers the issue names."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from kafka.record.memory_records import MemoryRecords

from logfs.core.errors import CorruptRecord
from logfs.core.format.validate import validate_batch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "realdata.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("realdata", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["realdata"] = module
    spec.loader.exec_module(module)
    return module


realdata = _load()


def test_same_seed_same_bytes_other_seed_other_bytes() -> None:
    for kind in ("events", "jsonl", "batches"):
        one = realdata.generate(kind, 256 * 1024, seed=3)
        assert one == realdata.generate(kind, 256 * 1024, seed=3)
        assert one != realdata.generate(kind, 256 * 1024, seed=4)
        assert len(one) >= 256 * 1024


def test_events_are_json_objects_of_150_to_1500_bytes_with_varied_sizes() -> None:
    evs = realdata.events(2 * 1024 * 1024, seed=1)
    sizes = sorted(len(e.body) for e in evs)
    assert sizes[0] >= 150 and sizes[-1] <= 1500
    assert 300 <= sizes[len(sizes) // 2] <= 600  # the median of a realistic distribution, not one size
    assert len(set(sizes)) > 500
    for e in evs[:500]:
        obj = json.loads(e.body)
        assert obj["user_id"] == f"user-{e.user}" and b"\n" not in e.body
    lines = realdata.jsonl_lines(evs[:50]).splitlines()
    assert [json.loads(line) for line in lines] == [{"key": f"user-{e.user}", "value": json.loads(e.body)}
                                                    for e in evs[:50]]  # fmt: skip


def test_producer_batches_are_valid_for_logfs_and_kafka_python() -> None:
    evs = realdata.events(2 * 1024 * 1024, seed=2)
    batches = realdata.producer_batches(evs, seed=2)
    codecs = [realdata.batch_codec(b) for b in batches]
    assert codecs.count(0) == pytest.approx(len(batches) / 2, abs=1)
    assert codecs.count(3) == pytest.approx(len(batches) / 4, abs=1)
    assert codecs.count(4) == pytest.approx(len(batches) / 4, abs=1)
    count = 0
    for b in batches:
        assert len(b) <= 16 * 1024
        count += validate_batch(bytearray(b), client=True).header.records_count
    assert count == len(evs)
    records = []
    memory = MemoryRecords(b"".join(batches))
    while (batch := memory.next_batch()) is not None:
        batch.validate_crc()
        records.extend(batch)
    assert [r.value for r in records] == [e.body for e in evs]
    assert all(8 <= len(r.key) <= 32 and r.key.startswith(b"user-") for r in records)
    assert all(len(r.headers) == 1 and r.headers[0][0] == "traceparent" for r in records)


def test_a_damaged_batch_is_refused_by_the_validator() -> None:
    batch = bytearray(realdata.producer_batches(realdata.events(64 * 1024), seed=0)[0])
    batch[-1] ^= 0xFF
    with pytest.raises(CorruptRecord):
        validate_batch(batch, client=True)


def test_cli_writes_the_uniform_file(tmp_path: Path) -> None:
    out = tmp_path / "uniform.bin"
    subprocess.run([sys.executable, str(SCRIPT), "uniform", "--mib", "1", str(out)], check=True)
    data = out.read_bytes()
    assert data == b"".join(realdata.uniform_file(1024 * 1024))
    first = validate_batch(bytearray(data), client=True)
    assert first.header.records_count == 1000
    with pytest.raises(SystemExit):
        realdata.main(["nonsense", str(out)])
