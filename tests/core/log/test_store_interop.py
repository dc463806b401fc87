"""kafka-python as the oracle of the storage core's files, in both directions (docs/records.md,
"Interoperability", and docs/storage.md, "On disk": a segment written by logfs parses with any independent Kafka
record reader; a partition directory copied from a stopped Kafka broker can be mounted and read).

* The ``.log`` files a store writes (rolled segments and the active one, every codec, keys, headers, leader epochs)
  parse whole with ``kafka.record.MemoryRecords``: consecutive offsets, valid CRCs, the same records.
* A ``.log`` made of batches ``DefaultRecordBatchBuilder`` built, stamped as a broker stamps them (base offset and
  leader epoch written in place, outside the CRC), placed in a partition directory with no index files, loads,
  recovers and reads back here: after an unclean shutdown (no clean-shutdown marker) and after a clean one (the
  missing offset indexes force recovery anyway).

``DefaultRecordBatchBuilder`` is a producer's builder: it writes baseOffset 0 and offset deltas from the offsets
given to ``append``, so records are appended with deltas 0, 1, 2 … and the batch's base offset is then set to the
absolute offset of its first record, which is what a broker's log holds. Random inputs come from a seeded generator;
each test prints its seed.
"""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import pytest
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from logfs.core.config import LogConfig
from logfs.core.format.batch import Header, Record, iter_batch_positions
from logfs.core.format.compression import Compression
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_batch
from logfs.core.log.loader import LoadEvent
from logfs.core.log.log import Isolation, Log
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig
from logfs.core.storedir import CLEAN_SHUTDOWN_FILE

TOPIC = "interop"
CONFIG = StoreConfig(topic_defaults=LogConfig(segment_bytes=4096, index_interval_bytes=256))
T0 = 1_700_000_000_000

# One record as kafka-python yields it: (offset, timestamp, key, value, headers as (str, bytes | None) pairs).
KafkaRecord = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def seeded_rng(seed: int) -> random.Random:
    print(f"seed {seed}")
    return random.Random(seed)


def random_records(rng: random.Random, count: int, timestamp: int) -> list[Record]:
    """``count`` records with offsets from 0 (the producer's view), sometimes a key, a null value or headers."""
    records = []
    for i in range(count):
        key = None if rng.random() < 0.5 else f"key-{rng.randrange(100)}".encode()
        value = None if rng.random() < 0.1 else rng.choice([b"", b"log", "é".encode(), rng.randbytes(60)]) * 3
        header_count = rng.randrange(3)
        headers = tuple(Header(f"h{j}", None if rng.random() < 0.3 else rng.randbytes(4)) for j in range(header_count))
        records.append(Record(i, timestamp + rng.randrange(1000), key, value, headers))
    return records


def read_with_kafka_python(data: bytes) -> list[tuple[DefaultRecordBatch, list[KafkaRecord]]]:
    """Every batch of a whole ``.log`` through kafka-python, each CRC-checked, with its records."""
    out = []
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert isinstance(batch, DefaultRecordBatch)
        assert batch.validate_crc(), f"kafka-python finds a bad CRC in the batch at offset {batch.base_offset}"
        out.append((batch, [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]) for r in batch]))
    assert records.valid_bytes() == len(data), "kafka-python stopped before the end of the segment"
    return out


def as_kafka(records: list[Record]) -> list[KafkaRecord]:
    return [(r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers]) for r in records]


def read_log(log: Log) -> list[Record]:
    """Every record from the log start offset to the log end, through ``Log.read``."""
    out: list[Record] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20, Isolation.LOG_END).records
        for position, _ in iter_batch_positions(data):
            out += [r for r in decode_records(data, position) if r.offset >= offset]
        offset = out[-1].offset + 1
    return out


# --- logfs writes, kafka-python reads ------------------------------------------------------------------------------


def test_segments_a_store_writes_parse_whole_with_kafka_python(tmp_path: Path) -> None:
    rng = seeded_rng(4_001)
    written: list[tuple[int, list[Record]]] = []  # (leader epoch, records as produced)
    with Store.open(tmp_path, CONFIG) as store:
        store.create_topic(TOPIC, 1)
        log = store.log(TOPIC, 0)
        for i in range(60):
            records = random_records(rng, rng.randint(1, 6), T0 + 1000 * i)
            codec = list(Compression)[i % len(Compression)]
            epoch = i // 20
            log.append_as_leader(encode_batch(records, compression=codec), epoch, now_ms=T0 + 1000 * i)
            written.append((epoch, records))
        assert len(log.segments) > 3
        files = [s.log_path for s in log.segments]

    batches = [b for path in files for b in read_with_kafka_python(path.read_bytes())]

    assert len(batches) == len(written)
    offset = 0
    for (batch, records), (epoch, produced) in zip(batches, written, strict=True):
        assert batch.base_offset == offset and batch.leader_epoch == epoch
        assert batch.last_offset == offset + len(produced) - 1
        expected = [Record(offset + r.offset, r.timestamp, r.key, r.value, r.headers) for r in produced]
        assert records == as_kafka(expected)
        offset += len(produced)


# --- kafka-python writes, logfs reads ------------------------------------------------------------------------------


def kafka_python_batch(records: list[Record], base_offset: int, leader_epoch: int, codec: int) -> bytes:
    """A batch built by ``DefaultRecordBatchBuilder`` and stamped as a broker stamps it."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for r in records:
        headers = [(h.key, h.value) for h in r.headers]
        assert builder.append(r.offset, timestamp=r.timestamp, key=r.key, value=r.value, headers=headers) is not None
    buffer = builder.build()
    struct.pack_into(">q", buffer, 0, base_offset)  # baseOffset: outside the CRC, set by the broker
    struct.pack_into(">i", buffer, 12, leader_epoch)  # partitionLeaderEpoch: the same
    return bytes(buffer)


def write_kafka_partition(directory: Path, rng: random.Random) -> tuple[list[Record], list[tuple[int, int]]]:
    """Two segments of kafka-python batches in ``directory`` (``.log`` files only). Returns the records with their
    absolute offsets, and the (epoch, start offset) of each leader epoch."""
    directory.mkdir(parents=True)
    records: list[Record] = []
    epochs: list[tuple[int, int]] = []
    segments: dict[int, bytearray] = {}
    base = 0
    offset = 0
    for i in range(40):
        produced = random_records(rng, rng.randint(1, 5), T0 + 1000 * i)
        epoch = 3 + i // 15
        if not epochs or epochs[-1][0] != epoch:
            epochs.append((epoch, offset))
        if i == 25:
            base = offset  # the broker rolled here
        codec = [0, 1, 2, 3, 4][i % 5]
        segments.setdefault(base, bytearray()).extend(kafka_python_batch(produced, offset, epoch, codec))
        records += [Record(offset + r.offset, r.timestamp, r.key, r.value, r.headers) for r in produced]
        offset += len(produced)
    for segment_base, data in segments.items():
        (directory / f"{segment_base:020d}.log").write_bytes(data)
    return records, epochs


@pytest.mark.parametrize("shutdown", ["unclean", "clean"])
def test_kafka_python_batches_without_indexes_load_recover_and_read_back(tmp_path: Path, shutdown: str) -> None:
    rng = seeded_rng(4_002)
    partition = tmp_path / f"{TOPIC}-0"
    records, epochs = write_kafka_partition(partition, rng)
    logs = sorted(partition.glob("*.log"))
    originals = [p.read_bytes() for p in logs]
    if shutdown == "clean":
        (tmp_path / CLEAN_SHUTDOWN_FILE).write_text(json.dumps({"version": 0, "brokerEpoch": 7}))
    events: list[LoadEvent] = []

    store = Store.open(tmp_path, CONFIG, on_event=events.append)

    log = store.log(TOPIC, 0)
    assert store.had_clean_shutdown == (shutdown == "clean")
    assert sorted((e.kind, e.path) for e in events) == [("bad-index", p) for p in logs], "missing indexes: recover"
    assert sum(e.dropped_bytes for e in events) == 0
    assert [s.size_bytes for s in log.segments] == [len(data) for data in originals]
    assert log.log_end_offset == len(records)
    assert read_log(log) == records
    for offset in range(len(records)):  # the rebuilt indexes find every offset
        first = decode_records(log.read(offset, 1, Isolation.LOG_END, min_one_message=True).records)
        assert first[0].offset <= offset <= first[-1].offset
    assert all(s.offset_index.path.exists() and s.time_index.path.exists() for s in log.segments)
    # No leader-epoch-checkpoint came with the files: recovery rebuilt it from the batches' leader epochs.
    assert [(e.epoch, e.start_offset) for e in log.epoch_cache.epoch_entries()] == epochs
    store.close()

    assert [path.read_bytes() for path in logs] == originals, "recovery must not change a valid segment"
    reopened: list[LoadEvent] = []
    with Store.open(tmp_path, CONFIG, on_event=reopened.append) as store:
        assert reopened == [] and read_log(store.log(TOPIC, 0)) == records
