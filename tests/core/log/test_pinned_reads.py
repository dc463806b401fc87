"""Retention never pulls data out from under an open reader (docs/mount.md, "Reads"): a pinned segment stays
readable."""

from __future__ import annotations

from pathlib import Path

import pytest

from logfs.core.configtext import parse_store_config
from logfs.core.errors import StorageError
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_values
from logfs.core.log.log import Log
from logfs.core.store import Store


def filled_log(store: Store) -> Log:
    """Topic ``t`` with 12 batches of three records ``record-NN`` in segments of 300 bytes, all below the HW."""
    store.create_topic("t", 1)
    log = store.log("t", 0)
    for i in range(12):
        log.append_as_leader(encode_values([b"record-%02d" % i] * 3, 1000 + i), 0)
    log.update_high_watermark(log.log_end_offset)
    return log


def test_a_reader_pinning_a_segment_keeps_reading_it_after_retention_unlinks_it(tmp_path: Path) -> None:
    config = parse_store_config(["segment.bytes=300", "file.delete.delay.ms=0", "retention.ms=-1"])
    with Store.open(tmp_path, config) as store:
        log = filled_log(store)
        first = log.segments[0]
        expected = first.log_file.read(0, first.size_bytes)
        with first.pin():
            store.delete_records("t", 0, log.segments[2].base_offset)
            assert log.log_start_offset == log.segments[0].base_offset > first.base_offset
            assert log.delete_expired_files(now_ms=2**62) >= 2
            assert not first.log_path.exists()  # unlinked ...
            data = first.log_file.read(0, first.size_bytes)  # ... and still readable through the pin
            assert data == expected
            assert [r.value for r in decode_records(data)] == [b"record-00"] * 3
        assert not any(p.name.endswith(".deleted") for p in (tmp_path / "t-0").iterdir())


def test_an_unpinned_deleted_segment_is_gone(tmp_path: Path) -> None:
    config = parse_store_config(["segment.bytes=300", "file.delete.delay.ms=0"])
    with Store.open(tmp_path, config) as store:
        log = filled_log(store)
        first = log.segments[0]
        store.delete_records("t", 0, log.segments[2].base_offset)
        log.delete_expired_files(now_ms=2**62)
        assert not first.log_path.exists()
        with pytest.raises(StorageError, match="No such file"):
            first.log_file.read(0, 10)
        assert not first.log_path.exists()  # the failed read created nothing
