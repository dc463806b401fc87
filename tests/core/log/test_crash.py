"""The crash suite: a writer killed with SIGKILL, its tail damaged, then ``Store.open`` (docs/storage.md, "Rules worth
knowing").

Each iteration runs ``tests/helpers/crash_writer.py`` in a child process: it appends seeded batches through the core as
the leader, flushing every few batches and printing each flushed log end offset. The test kills it with SIGKILL a random
moment after a random number of flushes, then applies one damage to the part of the log that recovery scans (the
segments from the one holding the checkpointed recovery point on), then reopens the store. Damages, one per
iteration, in turn:

* ``truncate``: a segment's ``.log`` cut at a random byte (a torn write);
* ``garbage``: random bytes appended to a segment's ``.log`` (a write that landed but was never acknowledged);
* ``zero``: a random range of a ``.log`` zeroed (a lost page);
* ``index-delete``: a ``.index`` or ``.timeindex`` deleted (anywhere in the log);
* ``index-overwrite``: a ``.index`` or ``.timeindex`` replaced by random bytes.

An independent reader (kafka-python's batch and CRC-32C code, plus the offset rules) computes what recovery must
keep: segment by segment, the batches up to the first that is torn, fails its size, magic or CRC check, or steps its
offsets back; the first segment that loses bytes ends the log. The reopened store must match it exactly: the same
segments holding exactly those bytes, the cut bytes (and every later segment whole) in ``.quarantine`` files, every
batch not touched by the damage byte-identical to what the writer stored (rebuilt from the seed), every offset the
writer reported flushed before the damage still there, and indexes that answer every offset and timestamp.

Replay: the master seed is printed; ``LOGFS_CRASH_SEED=<seed> pytest tests/core/log/test_crash.py -k 'iteration-7'``
runs iteration 7 of that seed again (the seed fixes the records, the configs, the kill's flush count and delay, and the
damage; the exact instant of the kill is the scheduler's). ``LOGFS_CRASH_ITERATIONS`` changes the count (30).
A failing iteration's store stays in pytest's temporary directory, whose path the test prints.
"""

from __future__ import annotations

import bisect
import importlib.util
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest
from kafka.record.default_records import DefaultRecordBatch

from logfs.core.checkpoint import OffsetCheckpointFile, TopicPartition
from logfs.core.configtext import parse_store_config
from logfs.core.format.batch import read_header
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_values
from logfs.core.log.loader import LoadEvent
from logfs.core.log.log import Isolation, Log
from logfs.core.log.segment import QUARANTINE_SUFFIX
from logfs.core.store import Store
from logfs.core.storedir import HIGH_WATERMARK_CHECKPOINT, RECOVERY_POINT_CHECKPOINT


def _load_writer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("crash_writer", WRITER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WRITER = Path(__file__).resolve().parents[2] / "helpers" / "crash_writer.py"
writer = _load_writer()

MASTER_SEED = int(os.environ.get("LOGFS_CRASH_SEED") or random.SystemRandom().randrange(2**32))
ITERATIONS = int(os.environ.get("LOGFS_CRASH_ITERATIONS", "30"))
DAMAGES = ("truncate", "garbage", "zero", "index-delete", "index-overwrite")
TP = TopicPartition(writer.TOPIC, 0)
HEADER_SIZE_UP_TO_MAGIC = 17  # what an independent reader needs before it can frame a batch
RECORD_BATCH_OVERHEAD = 61
PLE_FIELD = range(12, 16)  # partitionLeaderEpoch: outside the CRC, so zeroing it leaves a valid batch
INT32_MAX = 2**31 - 1


def iteration_seed(iteration: int) -> int:
    return random.Random(f"{MASTER_SEED}/{iteration}").randrange(2**63)


# --- the independent reader ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """A batch recovery keeps: its segment, where it lies, and its offsets."""

    segment: int
    position: int
    size: int
    base_offset: int
    last_offset: int

    @property
    def end(self) -> int:
        return self.position + self.size


def valid_prefix(data: bytes, segment: int) -> list[Batch]:
    """The batches of a segment's bytes up to the first one recovery must refuse (kafka-python checks the CRC).

    Refused, from its first byte on: fewer than 17 bytes left or a declared size running past the end (torn), a size
    below the 61-byte header, a magic other than 2, a CRC-32C mismatch, a base offset below where the previous batch
    ended (or the segment's base), a last offset beyond 2**31 - 1 of the segment's base.
    """
    batches: list[Batch] = []
    position, next_offset = 0, segment
    while len(data) - position >= HEADER_SIZE_UP_TO_MAGIC:
        base_offset, length = struct.unpack_from(">qi", data, position)
        size = length + 12
        if size < RECORD_BATCH_OVERHEAD or size > len(data) - position or data[position + 16] != 2:
            break
        batch = DefaultRecordBatch(data[position : position + size])
        if not batch.validate_crc():
            break
        last_offset = base_offset + batch.last_offset_delta
        if base_offset < next_offset or not 0 <= last_offset - segment <= INT32_MAX:
            break
        batches.append(Batch(segment, position, size, base_offset, last_offset))
        position += size
        next_offset = last_offset + 1
    return batches


@dataclass
class Expected:
    """What the reopened store must hold, from the damaged files."""

    kept: dict[int, bytes] = field(default_factory=dict)  # segment base -> its .log after recovery
    quarantined: dict[int, bytes] = field(default_factory=dict)  # segment base -> bytes moved to quarantine
    batches: list[Batch] = field(default_factory=list)
    log_end_offset: int = 0


def expected_recovery(files: dict[int, bytes], recovery_point: int) -> Expected:
    bases = sorted(files)
    first = max((i for i, base in enumerate(bases) if base <= recovery_point), default=0)
    out = Expected()
    for i, base in enumerate(bases):
        data = files[base]
        found = valid_prefix(data, base)
        valid = found[-1].end if found else 0
        if i < first:
            assert valid == len(data), f"segment {base} lies below the recovery point yet is damaged: a test bug"
        out.kept[base] = data[:valid]
        out.batches += found
        out.log_end_offset = found[-1].last_offset + 1 if found else base
        if valid < len(data):
            out.quarantined[base] = data[valid:]
            out.quarantined.update((later, files[later]) for later in bases[i + 1 :])
            break
    return out


# --- the writer and its kill ---------------------------------------------------------------------------------------


def run_and_kill(store: Path, seed: int, rng: random.Random) -> list[int]:
    """Run the writer until it has reported a random number of flushes, let it go on a random moment, SIGKILL it.
    Returns every flushed log end offset it reported."""
    flushes = rng.randint(1, 12)
    delay_s = rng.uniform(0, 0.004)
    child = subprocess.Popen(
        [sys.executable, "-u", str(WRITER), str(store), str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=store.parent,
        text=True,
    )
    reported: list[int] = []
    try:
        assert child.stdout is not None
        while len(reported) < flushes:
            line = child.stdout.readline()
            if not line:
                break
            reported.append(int(line.split()[1]))
        time.sleep(delay_s)
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL, f"the writer ended by itself ({child.returncode}): {err}"
    reported += [int(line.split()[1]) for line in out.splitlines()]
    assert len(reported) >= flushes
    return reported


# --- damage ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Damage:
    kind: str
    path: Path
    segment: int | None = None  # the .log damaged, by base offset (None: an index)
    position: int = 0  # where the damage starts in that .log
    end: int = 0  # where it ends

    def __str__(self) -> str:
        return f"{self.kind} {self.path.name} [{self.position}, {self.end})"


def segment_bases(partition: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in partition.glob("*.log"))


def damage_store(kind: str, partition: Path, recovery_point: int, rng: random.Random) -> Damage:
    """Apply one damage of ``kind`` to a segment that recovery scans (any segment for an index deletion)."""
    bases = segment_bases(partition)
    first = max((i for i, base in enumerate(bases) if base <= recovery_point), default=0)
    scanned = bases[first:]
    sizes = {base: (partition / f"{base:020d}.log").stat().st_size for base in bases}
    if kind in ("index-delete", "index-overwrite"):
        pool = bases if kind == "index-delete" else scanned
        candidates = [
            partition / f"{base:020d}{suffix}"
            for base in pool
            for suffix in (".index", ".timeindex")
            if (partition / f"{base:020d}{suffix}").exists()
        ]
        if candidates:
            path = rng.choice(candidates)
            if kind == "index-delete":
                path.unlink()
            else:
                path.write_bytes(rng.randbytes(rng.choice([2, 8, 12, 24, rng.randint(1, 256)])))
            return Damage(kind, path)
        kind = "garbage"  # no index file yet (an unflushed first segment): damage its log instead
    non_empty = [base for base in scanned if sizes[base] > 0]
    if kind == "garbage" or not non_empty:
        base = scanned[-1] if rng.random() < 0.7 else rng.choice(scanned)
        path = partition / f"{base:020d}.log"
        garbage = rng.randbytes(rng.randint(1, 1024))
        with open(path, "ab") as f:
            f.write(garbage)
        return Damage("garbage", path, base, sizes[base], sizes[base] + len(garbage))
    base = rng.choice(non_empty)
    path = partition / f"{base:020d}.log"
    position = rng.randrange(sizes[base])
    if kind == "truncate":
        os.truncate(path, position)
        return Damage(kind, path, base, position, sizes[base])
    length = min(rng.randint(1, 64), sizes[base] - position)
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(bytes(length))
    return Damage(kind, path, base, position, position + length)


def first_offset_touched(damage: Damage, before: dict[int, bytes]) -> int | None:
    """The first offset whose batch the damage touched, in log order (None: no ``.log`` was damaged)."""
    if damage.segment is None:
        return None
    batches = valid_prefix(before[damage.segment], damage.segment)
    for b in batches:
        if b.end > damage.position:
            return b.base_offset
    return batches[-1].last_offset + 1 if batches else damage.segment


def overlaps(batch: Batch, damage: Damage) -> bool:
    return batch.segment == damage.segment and batch.position < damage.end and damage.position < batch.end


# --- the test ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("iteration", range(ITERATIONS), ids=lambda i: f"iteration-{i}")
def test_crash_then_damage_keeps_the_longest_valid_prefix(tmp_path: Path, iteration: int) -> None:
    seed = iteration_seed(iteration)
    rng = random.Random(seed)
    kind = DAMAGES[iteration % len(DAMAGES)]
    print(f"LOGFS_CRASH_SEED={MASTER_SEED} iteration {iteration}: seed {seed}, damage {kind}, store {tmp_path}")
    store_path = tmp_path / "store"
    partition = store_path / f"{writer.TOPIC}-0"

    flushed = run_and_kill(store_path, seed, rng)
    assert not (store_path / ".kafka_cleanshutdown").exists()
    recovery_point = checkpointed(store_path / RECOVERY_POINT_CHECKPOINT)
    high_watermark = checkpointed(store_path / HIGH_WATERMARK_CHECKPOINT)
    before = {base: (partition / f"{base:020d}.log").read_bytes() for base in segment_bases(partition)}
    damage = damage_store(kind, partition, recovery_point, rng)
    after = {base: (partition / f"{base:020d}.log").read_bytes() for base in segment_bases(partition)}
    expected = expected_recovery(after, recovery_point)
    print(
        f"flushed {flushed}, recovery point {recovery_point}, {len(before)} segments, damage {damage}, "
        f"expected log end {expected.log_end_offset}, quarantined {sorted(expected.quarantined)}"
    )

    events: list[LoadEvent] = []
    store = Store.open(store_path, writer.store_config(seed), on_event=events.append)
    try:
        log = store.log(writer.TOPIC, 0)
        assert_segments_and_quarantine(log, partition, expected, events)
        assert_flushed_records_survive(seed, expected, damage, before, max(flushed))
        assert_readable_through_indexes(log, expected)
        assert log.log_start_offset == 0
        assert log.recovery_point == min(recovery_point, expected.log_end_offset)
        assert log.high_watermark == min(high_watermark, expected.log_end_offset)
        if not any(touches_epoch(b, damage) for b in expected.batches):  # a zeroed epoch passes the CRC
            assert_epochs(log, seed, expected)
        appended = append_more(log, seed)
    finally:
        store.close()

    reopened: list[LoadEvent] = []
    with Store.open(store_path, writer.store_config(seed), on_event=reopened.append) as store:
        log = store.log(writer.TOPIC, 0)
        assert log.log_end_offset == expected.log_end_offset + appended
        assert reopened == [], "a clean reopen after recovery finds nothing to repair"


def checkpointed(path: Path) -> int:
    return OffsetCheckpointFile(path).read().get(TP, 0) if path.exists() else 0


def touches_epoch(batch: Batch, damage: Damage) -> bool:
    """Whether the damage changed the batch's leader epoch, which the CRC does not cover."""
    hit = range(damage.position, damage.end)
    return batch.segment == damage.segment and any(batch.position + i in hit for i in PLE_FIELD)


def assert_segments_and_quarantine(log: Log, partition: Path, expected: Expected, events: list[LoadEvent]) -> None:
    """Exactly the valid prefix stays; exactly what was cut is in quarantine, one file per segment."""
    assert [s.base_offset for s in log.segments] == sorted(expected.kept)
    for segment in log.segments:
        assert segment.log_path.read_bytes() == expected.kept[segment.base_offset], f"segment {segment.base_offset}"
    assert log.log_end_offset == expected.log_end_offset
    files = sorted(partition.glob(f"*{QUARANTINE_SUFFIX}"))
    assert sorted((int(p.name.split(".")[0]), p.read_bytes()) for p in files) == sorted(expected.quarantined.items())
    cuts = [e for e in events if e.kind in ("truncated", "quarantined")]
    dropped = {int(e.path.name.split(".")[0]): e.dropped_bytes for e in cuts}
    assert dropped == {base: len(data) for base, data in expected.quarantined.items()}
    for base in expected.quarantined:
        if base not in expected.kept:
            assert not list(partition.glob(f"{base:020d}.*index")), f"quarantined segment {base} kept an index"


def assert_flushed_records_survive(
    seed: int, expected: Expected, damage: Damage, before: dict[int, bytes], flushed: int
) -> None:
    """Every batch the damage did not touch is byte-identical to what the writer stored; every offset flushed
    before the damage is kept."""
    touched = first_offset_touched(damage, before)
    must_keep = flushed if touched is None else min(flushed, touched)
    assert expected.log_end_offset >= must_keep, f"flushed offsets below {must_keep} were lost"
    planned = {offset: stored for offset, _, stored in writer.stored_batches(seed, expected.log_end_offset)}
    for b in expected.batches:
        if overlaps(b, damage):
            continue
        data = expected.kept[b.segment][b.position : b.end]
        assert data == planned[b.base_offset], f"batch at offset {b.base_offset} differs from what was written"


def assert_readable_through_indexes(log: Log, expected: Expected) -> None:
    """Every offset reads back through the indexes as the batch holding it; every index entry points at a batch."""
    lasts = [b.last_offset for b in expected.batches]
    for offset in range(log.log_start_offset, log.log_end_offset):
        want = expected.batches[bisect.bisect_left(lasts, offset)]
        fetched = log.read(offset, 1, Isolation.LOG_END, min_one_message=True)
        header = read_header(fetched.records)
        assert (header.base_offset, header.last_offset) == (want.base_offset, want.last_offset), f"offset {offset}"
        metadata = fetched.fetch_offset_metadata
        assert (metadata.segment_base_offset, metadata.relative_position) == (want.segment, want.position)
    by_position = {(b.segment, b.position): b for b in expected.batches}
    for segment in log.segments:
        index = segment.offset_index
        for n in range(index.entries()):
            entry = index.entry(n)
            b = by_position.get((segment.base_offset, entry.position))
            assert b is not None and b.last_offset == entry.offset, f"{index.path} entry {n} = {entry}"
        time_index = segment.time_index
        for n in range(time_index.entries()):
            entry = time_index.entry(n)
            assert any(b.last_offset == entry.offset for b in expected.batches if b.segment == segment.base_offset)
    for b in expected.batches:
        data = expected.kept[b.segment][b.position : b.end]
        timestamp = read_header(data).max_timestamp
        found = log.fetch_offset_by_timestamp(timestamp)
        assert found is not None and found.offset == b.base_offset, f"timestamp {timestamp}"


def assert_epochs(log: Log, seed: int, expected: Expected) -> None:
    """The epoch cache holds the first batch of each leader epoch among the kept batches."""
    want: list[tuple[int, int]] = []
    for offset, epoch, _ in writer.stored_batches(seed, expected.log_end_offset):
        if not want or epoch > want[-1][0]:
            want.append((epoch, offset))
    assert [(e.epoch, e.start_offset) for e in log.epoch_cache.epoch_entries()] == want


def append_more(log: Log, seed: int) -> int:
    """The recovered log takes appends again; returns how many records."""
    epoch = log.epoch_cache.latest_epoch() or 0
    values = [f"after recovery {i}".encode() for i in range(3)]
    info = log.append_as_leader(encode_values(values, writer.BASE_TIMESTAMP_MS), epoch)
    assert info.first_offset == log.log_end_offset - 3
    records = decode_records(log.read(info.first_offset, 1 << 20, Isolation.LOG_END).records)
    assert [r.value for r in records] == values
    return 3


# --- a crash during recovery ---------------------------------------------------------------------------------------

RECOVERY_CONFIG = ["segment.bytes=1024", "index.interval.bytes=128"]
KILL_HOOKS = {
    # after the first segment behind the damage went to quarantine
    "later-segment": "import logfs.core.log.loader as m; target, name = m, '_quarantine_segment'",
    # after the damaged tail was copied to quarantine, before the .log was cut
    "tail-copy": "import logfs.core.log.recovery as m; target, name = m, 'quarantine_tail'",
    # right after the .log was cut
    "cut": "from logfs.core.log.logfile import LogFile as m; target, name = m, 'truncate_to'",
}


@pytest.mark.parametrize("kill_point", list(KILL_HOOKS))
def test_crash_during_recovery_then_recovery_again_ends_as_one_recovery(tmp_path: Path, kill_point: str) -> None:
    """A store whose recovery is killed (SIGKILL) at any step recovers on the next open to the state one
    uninterrupted recovery gives, and every byte cut is in quarantine: later segments go aside before the cut, so
    a kill after it cannot leave them behind a shortened segment (a hole)."""
    store_path = tmp_path / "store"
    with Store.open(store_path, parse_store_config(RECOVERY_CONFIG)) as store:
        store.create_topic(writer.TOPIC, 1)
        log = store.log(writer.TOPIC, 0)
        for i in range(40):
            log.append_as_leader(encode_values([f"record {i}".encode()] * 3, writer.BASE_TIMESTAMP_MS), 0)
    # As if the process had died before its first checkpoint: recovery scans every segment.
    (store_path / ".kafka_cleanshutdown").unlink()
    (store_path / RECOVERY_POINT_CHECKPOINT).unlink()
    partition = store_path / f"{writer.TOPIC}-0"
    files = sorted(partition.glob("*.log"))
    assert len(files) >= 4
    victim = valid_prefix(files[1].read_bytes(), int(files[1].name.split(".")[0]))[1]
    with open(files[1], "r+b") as f:  # a bit flip inside the second batch of the second segment
        f.seek(victim.position + RECORD_BATCH_OVERHEAD + 2)
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0x10]))
    reference = tmp_path / "reference"
    shutil.copytree(store_path, reference)
    with Store.open(reference, parse_store_config(RECOVERY_CONFIG)) as store:
        want_end = store.log(writer.TOPIC, 0).log_end_offset
    want = {p.name: p.read_bytes() for p in (reference / f"{writer.TOPIC}-0").glob("*.log")}
    want_quarantined = {p.read_bytes() for p in (reference / f"{writer.TOPIC}-0").glob(f"*{QUARANTINE_SUFFIX}")}
    assert want_end == victim.base_offset and len(want_quarantined) == len(files) - 1

    code = f"""
import os, signal
from logfs.core.configtext import parse_store_config
from logfs.core.store import Store
{KILL_HOOKS[kill_point]}
original = getattr(target, name)
def killed_after(*args, **kwargs):
    original(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
setattr(target, name, killed_after)
Store.open({str(store_path)!r}, parse_store_config({RECOVERY_CONFIG!r}))
"""
    child = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr

    with Store.open(store_path, parse_store_config(RECOVERY_CONFIG)) as store:
        assert store.log(writer.TOPIC, 0).log_end_offset == want_end
    assert {p.name: p.read_bytes() for p in partition.glob("*.log")} == want
    assert {p.read_bytes() for p in partition.glob(f"*{QUARANTINE_SUFFIX}")} == want_quarantined
