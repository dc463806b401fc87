"""Helpers of the compaction tests: a compacted log on disk, keyed appends as Kafka's LogCleanerTest makes them, and
what the log holds read back batch by batch (no mount, no store)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from logfs.core.checkpoint import TopicPartition
from logfs.core.config import LogConfig
from logfs.core.format.batch import BatchHeader, Record, iter_batch_positions, read_header
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_batch
from logfs.core.log.cleaner.clean import CleanStats, clean_log
from logfs.core.log.cleaner.offsetmap import OffsetMap
from logfs.core.log.handles import HandleCache
from logfs.core.log.loader import load_log
from logfs.core.log.log import Log
from logfs.core.storeconfig import StoreConfig

TP = TopicPartition("topic", 0)
LARGE_TIMESTAMP = 2**63 - 1 - 86_400_000 - 1  # LogCleanerTest's largeTimestamp


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def compact_config(**changes: object) -> LogConfig:
    """LogCleanerTest's logConfig: segment.bytes 1024, segment.index.bytes 1024, policy compact."""
    values: dict[str, object] = {"segment_bytes": 1024, "segment_index_bytes": 1024, "cleanup_policy": "compact"}
    values.update(changes)
    return LogConfig(**values)  # type: ignore[arg-type]


def one_group_config() -> LogConfig:
    """Segments that a round merges into one (segment.bytes and segment.index.bytes of 1 MiB): a round is one swap."""
    return compact_config(segment_bytes=1 << 20, segment_index_bytes=1 << 20)


def open_log(directory: Path, config: LogConfig | None = None, *, clean: bool = True) -> Log:
    return load_log(directory, config or compact_config(), HandleCache(), had_clean_shutdown=clean)


@dataclass
class OneLogStore:
    """What LogCleaner reads of a store, for one log (or a few)."""

    path: Path
    config: StoreConfig = field(default_factory=StoreConfig)
    partitions: dict[TopicPartition, Log] = field(default_factory=dict)

    def logs(self) -> Iterator[tuple[TopicPartition, Log]]:
        yield from sorted(self.partitions.items())


def record(key: bytes | None, value: bytes | None, timestamp: int = -1) -> bytes:
    """LogCleanerTest's ``record(k, v)``: a single-record batch."""
    return encode_batch([Record(0, timestamp, key, value)])


def int_record(key: int, value: int | None, timestamp: int = -1) -> bytes:
    return record(str(key).encode(), None if value is None else str(value).encode(), timestamp)


def append(log: Log, batch: bytes, now: int | None = None) -> int:
    """Append as leader, the HW following the LEO (Kafka's tests clean up to the active segment); the first offset."""
    info = log.append_as_leader(bytearray(batch), 0, now_ms=now_ms() if now is None else now)
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset


def make_cleaner_map(capacity: int) -> OffsetMap:
    """LogCleanerTest.makeCleaner(capacity): a FakeOffsetMap with load factor 0.75."""
    return OffsetMap.with_capacity(math.floor(capacity * 0.75))


def clean(
    log: Log, first_dirty: int, offset_map: OffsetMap | None = None, now: int | None = None,
    upper: int | None = None,
) -> CleanStats:  # fmt: skip
    """``cleaner.clean(LogToClean(log, first_dirty, active base))`` with every producer of the log as Kafka's
    lastRecordsOfActiveProducers gives them."""
    producers = {p: (e.last_data_offset, e.producer_epoch) for p, e in log.producer_state.producers.items()}
    bound = log.active_segment.base_offset if upper is None else upper
    return clean_log(
        log, first_dirty, bound, OffsetMap(1024 * 1024) if offset_map is None else offset_map,
        now_ms() if now is None else now,
        lambda _n: None, producers,
    )  # fmt: skip


def stored(log: Log) -> Iterator[tuple[bytes, int]]:
    """``(segment bytes, position)`` of every batch of the log, in order."""
    for segment in log.segments:
        data = segment.log_file.read(0, segment.size_bytes)
        for p, _ in iter_batch_positions(data):
            yield data, p


def batches(log: Log) -> list[BatchHeader]:
    return [read_header(data, p) for data, p in stored(log)]


def records(log: Log) -> list[Record]:
    return [r for data, p in stored(log) for r in decode_records(data, p)]


def data_records(log: Log) -> list[Record]:
    """The records of data batches (control records left out)."""
    return [r for data, p in stored(log) if not read_header(data, p).is_control for r in decode_records(data, p)]


def offsets(log: Log) -> list[int]:
    """LogCleanerTest's offsetsInLog: offsets of records with a key and a value, control records included."""
    return [r.offset for r in records(log) if r.key is not None and r.value is not None]


def keys(log: Log) -> list[int]:
    """LogCleanerTest's LogTestUtils.keysInLog: the keys of data records with a value, as ints."""
    return [int(r.key) for r in data_records(log) if r.key is not None and r.value is not None]


def last_offsets(log: Log) -> list[int]:
    return [b.last_offset for b in batches(log)]
