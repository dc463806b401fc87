"""Damage to a store that is not running, one damage per test, as LevelDB's ``log_test.cc`` does it (docs/storage.md,
"On disk" and "Rules worth knowing").

Each test writes a store (``crashed``: the process died without a clean shutdown and no checkpoint was written, so
recovery scans every segment; ``closed``: a clean shutdown), applies one damage with the helpers below, opens the
store again and asserts both the records that remain and the bytes dropped: the size of what went to ``.quarantine``
files (the load events report it) and the bytes of those files. The store-level refusals (a locked store, a store of
another node, damaged checkpoint files) close the file.

The records: batch ``i`` holds ``i % 3 + 1`` records ``b"record i.j"`` with timestamp ``T0 + i``; 1 KiB segments hold
a few batches each, and an index entry is written every 128 bytes.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import logfs.core.log.recovery as recovery_module
from logfs.core.checkpoint import OffsetCheckpointFile, TopicPartition
from logfs.core.config import LogConfig
from logfs.core.configtext import parse_store_config
from logfs.core.errors import ConfigError, StoreLocked
from logfs.core.format.batch import RECORDS_OFFSET, iter_batch_positions, read_header
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_values
from logfs.core.log.loader import LoadEvent
from logfs.core.log.log import Isolation, Log
from logfs.core.log.segment import QUARANTINE_SUFFIX
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig
from logfs.core.storedir import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
)

TOPIC = "topic"
TP = TopicPartition(TOPIC, 0)
T0 = time.time_ns() // 1_000_000  # record timestamps: recent, so that retention (7 days) keeps every segment
BATCHES = 40
CONFIG = StoreConfig(topic_defaults=LogConfig(segment_bytes=1024, index_interval_bytes=128))


# --- writing and reading a store ---------------------------------------------------------------------------------


def batch_values(i: int) -> list[bytes]:
    return [f"record {i}.{j}".encode() for j in range(i % 3 + 1)]


def expected_records(batches: int = BATCHES) -> list[tuple[int, bytes]]:
    """(offset, value) of every record of the first ``batches`` batches."""
    values = [v for i in range(batches) for v in batch_values(i)]
    return list(enumerate(values))


def write_store(
    path: Path, *, shutdown: str, batches: int = BATCHES, checkpoints: bool = False, epoch_batches: int = BATCHES
) -> None:
    """Append ``batches`` batches to partition 0 of a new topic, a new leader epoch every ``epoch_batches``, then
    shut down: ``closed`` (cleanly) or ``crashed`` (no close; with ``checkpoints``, after one tick wrote the
    checkpoints)."""
    store = Store.open(path, CONFIG)
    store.create_topic(TOPIC, 1)
    log = store.log(TOPIC, 0)
    for i in range(batches):
        log.append_as_leader(encode_values(batch_values(i), T0 + i), i // epoch_batches, now_ms=T0 + i)
    log.update_high_watermark(log.log_end_offset)
    if shutdown == "closed":
        store.close()
        return
    if checkpoints:
        store.tick()
    for segment in log.segments:
        segment.close_handler()
    store.abandon()


def reopen(path: Path, config: StoreConfig = CONFIG) -> tuple[Store, Log, list[LoadEvent]]:
    events: list[LoadEvent] = []
    store = Store.open(path, config, on_event=events.append)
    return store, store.log(TOPIC, 0), events


def reopen_cut_at(path: Path, end: int, cut: bytes) -> tuple[Store, Log, list[LoadEvent]]:
    """Reopen the store at ``path``: its log ends at offset ``end`` with every record below it, and the ``cut`` bytes
    (the rest of the last segment) are what was dropped, and quarantined."""
    store, log, events = reopen(path)
    assert log.log_end_offset == end
    assert read_records(log) == expected_records()[:end]
    assert dropped_bytes(events) == len(cut)
    assert quarantined(path) == [cut]
    return store, log, events


def read_records(log: Log) -> list[tuple[int, bytes]]:
    """Every record from the log start offset to the log end, through ``Log.read`` (so through the indexes)."""
    out: list[tuple[int, bytes]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20, Isolation.LOG_END).records
        for position, _ in iter_batch_positions(data):
            out += [(r.offset, r.value or b"") for r in decode_records(data, position) if r.offset >= offset]
        offset = out[-1][0] + 1
    return out


def assert_every_offset_readable(log: Log) -> None:
    """Each offset, read alone, comes back in the batch that holds it: the indexes point where they should."""
    for offset in range(log.log_start_offset, log.log_end_offset):
        header = read_header(log.read(offset, 1, Isolation.LOG_END, min_one_message=True).records)
        assert header.base_offset <= offset <= header.last_offset, f"offset {offset}"


@dataclass(frozen=True)
class Batch:
    position: int
    size: int
    base_offset: int


def segment_files(path: Path) -> list[Path]:
    return sorted((path / f"{TOPIC}-0").glob("*.log"))


def batches_of(log_file: Path) -> list[Batch]:
    data = log_file.read_bytes()
    return [Batch(p, s, read_header(data, p).base_offset) for p, s in iter_batch_positions(data)]


def quarantined(path: Path) -> list[bytes]:
    return [p.read_bytes() for p in sorted((path / f"{TOPIC}-0").glob(f"*{QUARANTINE_SUFFIX}"))]


def dropped_bytes(events: list[LoadEvent]) -> int:
    return sum(e.dropped_bytes for e in events)


# --- damage ----------------------------------------------------------------------------------------------------------


def flip_bit(path: Path, position: int, bit: int = 0) -> None:
    """Damage: one bit of the file flipped (a disk error)."""
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ (1 << bit)]))


def zero(path: Path, position: int, length: int) -> None:
    """Damage: a range of the file reads back as zeros (a lost page)."""
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(bytes(length))


def truncate(path: Path, size: int) -> None:
    """Damage: the file ends early (a torn write)."""
    with open(path, "r+b") as f:
        f.truncate(size)


def overwrite(path: Path, position: int, data: bytes) -> None:
    """Damage: ``data`` written over the file at ``position``."""
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)


# --- damaged segments ----------------------------------------------------------------------------------------------


def test_bit_flip_in_a_middle_segment_cuts_it_and_quarantines_every_later_segment(tmp_path: Path) -> None:
    write_store(tmp_path, shutdown="crashed")
    files = segment_files(tmp_path)
    assert len(files) >= 3
    middle = len(files) // 2
    victim = batches_of(files[middle])[1]
    flip_bit(files[middle], victim.position + RECORDS_OFFSET + 3)
    cut = files[middle].read_bytes()[victim.position :]
    later = [f.read_bytes() for f in files[middle + 1 :]]

    store, log, events = reopen(tmp_path)

    assert log.log_end_offset == victim.base_offset
    assert read_records(log) == expected_records()[: victim.base_offset]
    assert [s.log_path for s in log.segments] == files[: middle + 1]
    assert dropped_bytes(events) == len(cut) + sum(map(len, later))
    assert sorted(quarantined(tmp_path)) == sorted([cut, *later])
    store.close()


def test_torn_tail_loses_only_the_last_batch(tmp_path: Path) -> None:
    write_store(tmp_path, shutdown="crashed")
    last_file = segment_files(tmp_path)[-1]
    last = batches_of(last_file)[-1]
    truncate(last_file, last.position + last.size - 5)
    cut = last_file.read_bytes()[last.position :]

    store, _, _ = reopen_cut_at(tmp_path, last.base_offset, cut)

    assert len(cut) == last.size - 5
    store.close()


def test_zeroed_range_cuts_the_log_at_the_batch_holding_it(tmp_path: Path) -> None:
    write_store(tmp_path, shutdown="crashed")
    last_file = segment_files(tmp_path)[-1]
    victim = batches_of(last_file)[1]
    zero(last_file, victim.position + RECORDS_OFFSET, 16)
    cut = last_file.read_bytes()[victim.position :]

    store, _, _ = reopen_cut_at(tmp_path, victim.base_offset, cut)

    store.close()


def test_zeroed_base_offset_outside_the_crc_cuts_the_log_at_that_batch(tmp_path: Path) -> None:
    """The CRC does not cover baseOffset: recovery must still refuse a batch whose offsets step back (Kafka's
    recovery fails its index append instead, and empties the whole segment)."""
    write_store(tmp_path, shutdown="crashed")
    last_file = segment_files(tmp_path)[-1]
    victim = batches_of(last_file)[2]
    zero(last_file, victim.position, 8)
    cut = last_file.read_bytes()[victim.position :]

    store, _, events = reopen_cut_at(tmp_path, victim.base_offset, cut)

    assert [e.kind for e in events if e.dropped_bytes] == ["truncated"]
    assert "offsets must ascend" in next(e.detail for e in events if e.kind == "truncated")
    store.close()


def test_a_leader_epoch_below_minus_one_outside_the_crc_cuts_the_log_at_that_batch(tmp_path: Path) -> None:
    """The CRC does not cover the partition leader epoch either: the sign bit flipped is the read check's damage
    (core/log/batchcheck.py, issue 23), and recovery quarantines the tail from that batch as it does a step back."""
    write_store(tmp_path, shutdown="crashed")
    last_file = segment_files(tmp_path)[-1]
    victim = batches_of(last_file)[2]
    with open(last_file, "r+b") as f:
        f.seek(victim.position + 12)
        byte = f.read(1)[0]
        f.seek(victim.position + 12)
        f.write(bytes([byte ^ 0x80]))
    cut = last_file.read_bytes()[victim.position :]

    store, _, events = reopen_cut_at(tmp_path, victim.base_offset, cut)

    assert "partition leader epoch" in next(e.detail for e in events if e.kind == "truncated")
    store.close()


def test_garbage_after_the_last_batch_is_cut_and_every_record_stays(tmp_path: Path) -> None:
    write_store(tmp_path, shutdown="crashed")
    last_file = segment_files(tmp_path)[-1]
    garbage = bytes(range(256)) * 3
    with open(last_file, "ab") as f:
        f.write(garbage)

    store, log, events = reopen(tmp_path)

    assert read_records(log) == expected_records()
    assert dropped_bytes(events) == len(garbage)
    assert quarantined(tmp_path) == [garbage]
    store.close()


def test_second_cut_of_a_segment_within_one_millisecond_keeps_both_quarantine_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quarantine files are named by the millisecond: a second one in the same millisecond takes the next name
    instead of overwriting the first or failing the load."""
    monkeypatch.setattr(recovery_module, "wall_clock_ms", lambda: T0)
    write_store(tmp_path, shutdown="crashed")
    last_file = segment_files(tmp_path)[-1]
    cuts = []
    for _ in range(2):
        last = batches_of(last_file)[-1]
        truncate(last_file, last.position + 7)
        cuts.append(last_file.read_bytes()[last.position :])
        store, log, events = reopen(tmp_path)
        assert log.log_end_offset == last.base_offset and dropped_bytes(events) == 7
        for segment in log.segments:
            segment.close_handler()
        store.abandon()

    names = sorted(p.name for p in (tmp_path / f"{TOPIC}-0").glob(f"*{QUARANTINE_SUFFIX}"))
    assert names == [f"{last_file.name}.{T0}{QUARANTINE_SUFFIX}", f"{last_file.name}.{T0 + 1}{QUARANTINE_SUFFIX}"]
    assert quarantined(tmp_path) == cuts


# --- damaged indexes -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_missing_index_after_a_clean_shutdown_is_rebuilt(tmp_path: Path, suffix: str) -> None:
    """A missing offset index forces recovery even after a clean shutdown (Kafka's LogLoader; docs/storage.md, "Rules
    worth knowing"); a missing time index does not, as in Kafka (an empty one stands in), but the offset index still
    works."""
    write_store(tmp_path, shutdown="closed")
    middle = segment_files(tmp_path)[1]
    index = middle.with_suffix(suffix)
    entries = index.stat().st_size
    index.unlink()

    store, log, events = reopen(tmp_path)

    assert store.had_clean_shutdown
    assert read_records(log) == expected_records()
    assert_every_offset_readable(log)
    assert dropped_bytes(events) == 0 and quarantined(tmp_path) == []
    if suffix == ".index":
        assert [e.kind for e in events] == ["bad-index"]
        assert index.stat().st_size == entries, "the offset index should have been rebuilt as it was"
    else:
        assert events == []
    store.close()


def test_overwritten_index_after_a_clean_shutdown_is_rebuilt(tmp_path: Path) -> None:
    write_store(tmp_path, shutdown="closed")
    middle = segment_files(tmp_path)[1]
    index = middle.with_suffix(".index")
    before = index.read_bytes()
    index.write_bytes(b"  ")

    assert_index_rebuilt_as_before(tmp_path, index, before)


def assert_index_rebuilt_as_before(path: Path, index: Path, before: bytes) -> None:
    """Reopen the store at ``path``: the damaged ``index`` (whose bytes were ``before``) is the one event, rebuilt
    byte for byte, and nothing else changed (every record there and readable, nothing dropped or quarantined)."""
    store, log, events = reopen(path)

    assert [e.kind for e in events] == ["bad-index"]
    assert read_records(log) == expected_records()
    assert_every_offset_readable(log)
    assert dropped_bytes(events) == 0 and quarantined(path) == []
    assert index.read_bytes() == before
    store.close()


def test_damaged_index_below_the_recovery_point_is_rebuilt_after_a_crash(tmp_path: Path) -> None:
    """Recovery rebuilds the indexes from the recovery point on; the trimmed indexes of the segments below it are
    sanity-checked, so one whose last entry lies below its base offset is rebuilt rather than trusted."""
    write_store(tmp_path, shutdown="crashed", checkpoints=True)
    recovery_point = OffsetCheckpointFile(tmp_path / RECOVERY_POINT_CHECKPOINT).read()[TP]
    files = segment_files(tmp_path)
    first_index = files[0].with_suffix(".index")
    assert int(files[1].name.split(".")[0]) <= recovery_point and first_index.stat().st_size >= 8
    before = first_index.read_bytes()
    overwrite(first_index, len(before) - 8, (-1).to_bytes(4, "big", signed=True) + (12345).to_bytes(4, "big"))

    assert_index_rebuilt_as_before(tmp_path, first_index, before)


def test_torn_segment_found_through_its_missing_index_ends_the_log_without_a_hole(tmp_path: Path) -> None:
    """A segment recovered for a bad index after a clean shutdown (a copy restored without its index, torn) cuts
    the log there like any recovery: the segments after it go to quarantine, so no offsets go missing in the middle
    (Kafka keeps them, leaving a hole)."""
    write_store(tmp_path, shutdown="closed")
    files = segment_files(tmp_path)
    victim = batches_of(files[1])[-1]
    truncate(files[1], victim.position + 20)
    files[1].with_suffix(".index").unlink()
    cut = files[1].read_bytes()[victim.position :]
    later = [f.read_bytes() for f in files[2:]]

    store, log, events = reopen(tmp_path)

    assert log.log_end_offset == victim.base_offset
    assert read_records(log) == expected_records()[: victim.base_offset]
    assert dropped_bytes(events) == len(cut) + sum(map(len, later))
    assert sorted(quarantined(tmp_path)) == sorted([cut, *later])
    store.close()


# --- damaged store files -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("checkpoint", "shutdown"),
    [
        (RECOVERY_POINT_CHECKPOINT, "crashed"),
        (LOG_START_OFFSET_CHECKPOINT, "closed"),
        (HIGH_WATERMARK_CHECKPOINT, "closed"),
    ],
)
def test_corrupt_checkpoint_is_read_as_empty_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, checkpoint: str, shutdown: str
) -> None:
    """Kafka's LogManager treats a checkpoint it cannot read as empty: recovery point 0, log start offset the first
    segment's base, high watermark 0 (which the log clamps up to its start)."""
    write_store(tmp_path, shutdown="closed")
    with Store.open(tmp_path, CONFIG) as store:  # a log start offset above the first segment's base, checkpointed
        store.delete_records(TOPIC, 0, 10)
        first_base = store.log(TOPIC, 0).segments[0].base_offset
        assert first_base < 10
        if shutdown == "crashed":
            store.tick()
            store.abandon()
    path = tmp_path / checkpoint
    assert OffsetCheckpointFile(path).read()[TP] > 0
    path.write_text("0\n1\ntopic 0 not-a-number\n")

    with caplog.at_level(logging.WARNING, logger="logfs.core.store"):
        store, log, events = reopen(tmp_path)

    assert any(checkpoint in r.getMessage() and "treating it as empty" in r.getMessage() for r in caplog.records)
    assert read_records(log) == expected_records()[log.log_start_offset :]
    assert dropped_bytes(events) == 0
    if checkpoint == RECOVERY_POINT_CHECKPOINT:
        assert log.recovery_point == 0
    elif checkpoint == LOG_START_OFFSET_CHECKPOINT:
        assert log.log_start_offset == first_base
    else:
        assert log.high_watermark == log.log_start_offset == 10  # 0, clamped up to the log start offset
    store.close()


@pytest.mark.parametrize("shutdown", ["closed", "crashed"])
def test_corrupt_leader_epoch_checkpoint_is_quarantined_and_rebuilt_from_the_batches(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, shutdown: str
) -> None:
    """Kafka takes the log directory offline over a leader-epoch-checkpoint it cannot read; logfs moves it aside
    and rebuilds the epochs from the leader epoch every batch carries."""
    write_store(tmp_path, shutdown=shutdown, epoch_batches=7)
    path = tmp_path / f"{TOPIC}-0" / "leader-epoch-checkpoint"
    garbage = b"0\n6\n0 0\n"
    path.write_bytes(garbage)

    with caplog.at_level(logging.WARNING, logger="logfs.core.log.loader"):
        store, log, events = reopen(tmp_path)

    assert [e.kind for e in events] == ["bad-checkpoint"]
    assert any("leader-epoch-checkpoint" in r.getMessage() for r in caplog.records)
    starts = [sum(len(batch_values(i)) for i in range(b)) for b in range(0, BATCHES, 7)]
    assert [(e.epoch, e.start_offset) for e in log.epoch_cache.epoch_entries()] == list(enumerate(starts))
    assert read_records(log) == expected_records()
    assert dropped_bytes(events) == 0 and quarantined(tmp_path) == [garbage]
    store.close()
    assert path.read_text().splitlines()[1] == str(len(starts)), "the rebuilt checkpoint is written back"


def test_second_open_of_a_locked_store_fails_naming_the_holders_pid(tmp_path: Path) -> None:
    write_store(tmp_path, shutdown="closed")
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys
            from logfs.core.store import Store
            store = Store.open({str(tmp_path)!r})
            print("ready", flush=True)
            sys.stdin.read()
            store.close()
        """)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=tmp_path,
        text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
        with pytest.raises(StoreLocked) as raised:
            Store.open(tmp_path, CONFIG)
        assert raised.value.holder_pid == holder.pid
        assert f"process {holder.pid}" in str(raised.value)
    finally:
        holder.communicate(timeout=30)
    assert holder.returncode == 0

    store, log, events = reopen(tmp_path)  # the holder is gone: its lock went with it
    assert read_records(log) == expected_records() and events == []
    store.close()


def test_store_of_another_node_id_is_refused_and_left_unlocked(tmp_path: Path) -> None:
    write_store(tmp_path, shutdown="closed")

    with pytest.raises(ConfigError, match=r"node\.id=0"):
        Store.open(tmp_path, parse_store_config(["node.id=1"]))

    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists(), "a refused open must not consume the clean-shutdown marker"
    store, log, events = reopen(tmp_path)
    assert store.had_clean_shutdown and read_records(log) == expected_records() and events == []
    store.close()
