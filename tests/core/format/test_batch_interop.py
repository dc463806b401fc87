"""kafka-python as the oracle of the RecordBatch v2 codec, in both directions (as h11's test_against_stdlib_http).

* Batches logfs encodes are parsed by ``kafka.record`` (``DefaultRecordBatch``, ``MemoryRecords``), pass its CRC
  check and yield the same records.
* Batches ``DefaultRecordBatchBuilder`` builds pass ``validate_batch(client=True)`` here and decode to the records it
  was given.
* The codecs: kafka-python's (python-snappy, python-lz4, zstandard, gzip) frames inflate here, and ours inflate
  there, with payloads over 64 KiB so that multi-block LZ4 frames and multi-block snappy streams occur.

Random inputs come from seeded generators; each test prints its seed (``pytest -s``).
"""

from __future__ import annotations

import random
from typing import Any

import lz4.frame
import pytest
from kafka.codec import (
    gzip_decode,
    gzip_encode,
    lz4_decode,
    lz4_encode,
    snappy_decode,
    snappy_encode,
    zstd_decode,
    zstd_encode,
)
from kafka.record import MemoryRecords
from kafka.record.default_records import ControlRecord, DefaultRecordBatch, DefaultRecordBatchBuilder

from logfs.core.format.batch import Header, Record, TimestampType, read_header
from logfs.core.format.compression import LZ4_MAGIC, Compression, compress, decompress
from logfs.core.format.control import ControlType
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_batch, encode_end_txn_marker, encode_values
from logfs.core.format.validate import validate_batch

CODECS = list(Compression)
CODEC_IDS = [c.name.lower() for c in CODECS]


def seeded_rng(seed: int) -> random.Random:
    print(f"seed {seed}")
    return random.Random(seed)


WORDS = [b"kafka", b"log", b"segment", b"offset", b"batch", b"record", b"\xff\xfe", b"", b"\x00", "é".encode()]


def compressible(rng: random.Random, size: int) -> bytes:
    """Text-like bytes that every codec shrinks, so kafka-python keeps its compressed batch."""
    out = bytearray()
    while len(out) < size:
        out += rng.choice(WORDS) + b" "
    return bytes(out[:size])


def sample_records(rng: random.Random, count: int, *, headers: bool = True, base_offset: int = 0) -> list[Record]:
    """Records with null, empty, text and binary keys and values, headers with null values and unicode keys."""
    base_ts = rng.randint(0, 2**41)
    records = []
    for i in range(count):
        key = rng.choice([None, b"", b"key-%d" % i, rng.randbytes(rng.randint(1, 16))])
        value = rng.choice([None, b"", compressible(rng, rng.randint(1, 200)), rng.randbytes(rng.randint(1, 64))])
        hdrs: tuple[Header, ...] = ()
        if headers and rng.random() < 0.5:
            hdrs = tuple(
                Header(rng.choice(["h", "trace-id", "ключ", "鍵🔑", ""]), rng.choice([None, b"", rng.randbytes(8)]))
                for _ in range(rng.randint(1, 3))
            )
        records.append(Record(base_offset + i, base_ts + rng.randint(-5000, 5000), key, value, hdrs))
    return records


def kafka_records(batch: DefaultRecordBatch) -> list[Record]:
    """kafka-python's view of a batch, as logfs Records."""
    return [Record(r.offset, r.timestamp, r.key, r.value, tuple(Header(k, v) for k, v in r.headers)) for r in batch]


# --- (a) logfs encodes, kafka-python reads ----------------------------------------------------------------------------

PRODUCERS = [
    pytest.param({}, id="no-producer"),
    pytest.param({"producer_id": 123456789, "producer_epoch": 3, "base_sequence": 17}, id="idempotent"),
    pytest.param(
        {"producer_id": 2**62, "producer_epoch": 32767, "base_sequence": 2**31 - 5, "is_transactional": True},
        id="transactional",
    ),
]


@pytest.mark.parametrize("producer", PRODUCERS)
@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_kafka_python_reads_our_batch(codec: Compression, producer: dict[str, Any]) -> None:
    rng = seeded_rng(1000 + 10 * int(codec) + len(producer))
    records = sample_records(rng, 120, base_offset=5000)
    buf = encode_batch(records, base_offset=5000, compression=codec, partition_leader_epoch=9, **producer)
    batch = DefaultRecordBatch(buf)
    assert batch.validate_crc()
    assert (batch.base_offset, batch.leader_epoch, batch.magic) == (5000, 9, 2)
    assert batch.compression_type == codec and batch.size_in_bytes == len(buf)
    assert (batch.last_offset_delta, batch.records_count) == (119, 120)
    assert batch.first_timestamp == records[0].timestamp
    assert batch.max_timestamp == max(r.timestamp for r in records)
    assert batch.producer_id == producer.get("producer_id", -1)
    assert batch.producer_epoch == producer.get("producer_epoch", -1)
    assert batch.base_sequence == producer.get("base_sequence", -1)
    assert batch.is_transactional == producer.get("is_transactional", False)
    assert not batch.is_control_batch and batch.timestamp_type == 0
    assert kafka_records(batch) == records


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_kafka_python_reads_our_log_append_time_batch_at_max_timestamp(codec: Compression) -> None:
    records = [Record(i, 1000 + i, None, b"v%d" % i) for i in range(10)]
    buf = encode_batch(records, compression=codec, timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=77777)
    batch = DefaultRecordBatch(buf)
    assert batch.validate_crc() and batch.timestamp_type == 1
    assert [(r.offset, r.timestamp, r.timestamp_type, r.value) for r in batch] == [
        (i, 77777, 1, b"v%d" % i) for i in range(10)
    ]


def test_kafka_python_memory_records_reads_several_of_our_batches() -> None:
    rng = seeded_rng(2024)
    batches, expected = [], []
    offset = 0
    for codec in [*CODECS, *CODECS]:
        count = rng.randint(1, 80)
        records = sample_records(rng, count, base_offset=offset)
        batches.append(encode_batch(records, base_offset=offset, compression=codec, partition_leader_epoch=1))
        expected.append(records)
        offset += count
    values = [b"line %d" % i for i in range(300)]
    batches.append(encode_values(values, 42, base_offset=offset, compression=Compression.LZ4))
    expected.append([Record(offset + i, 42, None, v) for i, v in enumerate(values)])
    buf = b"".join(batches)
    memory = MemoryRecords(buf)
    assert memory.valid_bytes() == len(buf)
    seen = []
    while memory.has_next():
        batch = memory.next_batch()
        assert batch.validate_crc()
        seen.append(kafka_records(batch))
    assert seen == expected


@pytest.mark.parametrize("control_type", [ControlType.COMMIT, ControlType.ABORT])
def test_kafka_python_reads_our_transaction_marker(control_type: ControlType) -> None:
    marker = encode_end_txn_marker(
        control_type, producer_id=77, producer_epoch=4, coordinator_epoch=12, timestamp=5555, base_offset=31
    )
    batch = DefaultRecordBatch(marker)
    assert batch.validate_crc() and batch.is_control_batch and batch.is_transactional
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 4, -1)
    (record,) = list(batch)
    assert isinstance(record, ControlRecord)
    assert (record.offset, record.timestamp, record.version, record.type) == (31, 5555, 0, int(control_type))
    assert record.commit == (control_type is ControlType.COMMIT)
    assert record.value == b"\x00\x00\x00\x00\x00\x0c"


def test_kafka_python_reads_our_lz4_batch_of_several_64k_blocks() -> None:
    rng = seeded_rng(77)
    records = [Record(i, 10, None, compressible(rng, 3000) + rng.randbytes(1000)) for i in range(100)]
    buf = encode_batch(records, compression=Compression.LZ4)
    assert len(buf) > 64 * 1024  # some blocks stay raw: the random part does not compress
    batch = DefaultRecordBatch(buf)
    assert batch.validate_crc()
    assert kafka_records(batch) == records


# --- (b) kafka-python builds, logfs reads -----------------------------------------------------------------------------


def build_with_kafka_python(
    records: list[Record],
    *,
    codec: int,
    is_transactional: bool,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=is_transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=16 * 1024 * 1024,
    )
    for r in records:
        meta = builder.append(r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers])
        assert meta is not None
    return bytes(builder.build())


KAFKA_PYTHON_PRODUCERS = [
    pytest.param({"producer_id": -1, "producer_epoch": -1, "base_sequence": -1, "is_transactional": False}, id="none"),
    pytest.param({"producer_id": 42, "producer_epoch": 0, "base_sequence": 0, "is_transactional": False}, id="idem"),
    pytest.param(
        {"producer_id": 2**40, "producer_epoch": 9, "base_sequence": 1000, "is_transactional": True}, id="transactional"
    ),
]


@pytest.mark.parametrize("producer", KAFKA_PYTHON_PRODUCERS)
@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_we_read_kafka_python_batches(codec: Compression, producer: dict[str, Any]) -> None:
    rng = seeded_rng(3000 + 10 * int(codec) + producer["base_sequence"] % 7)
    records = sample_records(rng, 90)
    buf = build_with_kafka_python(records, codec=codec, **producer)
    header = read_header(buf)
    assert header.compression == codec  # kafka-python keeps the compressed form only when it is smaller
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        producer["producer_id"],
        producer["producer_epoch"],
        producer["base_sequence"],
    )
    assert header.is_transactional == producer["is_transactional"]
    valid = validate_batch(buf, client=True)
    assert valid.size == len(buf) and valid.max_timestamp == max(r.timestamp for r in records)
    assert decode_records(buf) == records


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_we_read_kafka_python_batches_of_large_values(codec: Compression) -> None:
    """Values past 8 KiB (3-byte varints) and a records section past 64 KiB (multi-block frames)."""
    rng = seeded_rng(4000 + int(codec))
    records = [Record(i, 1_600_000_000_000 + i, b"k", compressible(rng, rng.randint(8192, 20_000))) for i in range(12)]
    buf = build_with_kafka_python(
        records, codec=codec, is_transactional=False, producer_id=-1, producer_epoch=-1, base_sequence=-1
    )
    assert read_header(buf).compression == codec
    validate_batch(buf, client=True)
    assert decode_records(buf) == records


def test_we_read_a_single_record_kafka_python_batch_with_a_null_key_and_value() -> None:
    records = [Record(0, 0, None, None)]
    buf = build_with_kafka_python(
        records, codec=0, is_transactional=False, producer_id=-1, producer_epoch=-1, base_sequence=-1
    )
    validate_batch(buf, client=True)
    assert decode_records(buf) == records


# --- the codecs, both ways --------------------------------------------------------------------------------------------


def payloads() -> list[Any]:
    rng = random.Random(5)  # fixed: the same payloads every run
    return [
        pytest.param(compressible(rng, 300_000), id="text-300k"),
        pytest.param(rng.randbytes(150_000), id="random-150k"),
        pytest.param(b"\x00" * 200_000, id="zeros-200k"),
        pytest.param(b"x", id="one-byte"),
    ]


PAYLOADS = payloads()


@pytest.mark.parametrize("payload", PAYLOADS)
def test_kafka_python_lz4_frames_inflate_here(payload: bytes) -> None:
    assert decompress(Compression.LZ4, lz4_encode(payload)) == payload


@pytest.mark.parametrize("payload", PAYLOADS)
def test_python_lz4_default_frames_with_linked_blocks_and_checksums_inflate_here(payload: bytes) -> None:
    frame = lz4.frame.compress(
        payload,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=True,
        content_checksum=True,
        block_checksum=True,
        store_size=True,
    )
    assert decompress(Compression.LZ4, frame) == payload


@pytest.mark.parametrize("payload", PAYLOADS)
def test_our_lz4_frames_inflate_with_python_lz4(payload: bytes) -> None:
    frame = compress(Compression.LZ4, payload)
    # Kafka's frame header: FLG 0x60 (independent blocks, no checksums), BD 0x40 (64 KiB), header checksum 0x82.
    assert frame[:7] == LZ4_MAGIC + b"\x60\x40\x82"
    assert lz4.frame.decompress(frame) == payload
    assert lz4_decode(frame) == payload


@pytest.mark.parametrize("xerial", [True, False], ids=["xerial", "raw"])
@pytest.mark.parametrize("payload", PAYLOADS)
def test_kafka_python_snappy_inflates_here(payload: bytes, xerial: bool) -> None:
    assert decompress(Compression.SNAPPY, snappy_encode(payload, xerial_compatible=xerial)) == payload


@pytest.mark.parametrize("payload", PAYLOADS[:2])
def test_kafka_python_snappy_with_small_xerial_blocks_inflates_here(payload: bytes) -> None:
    assert decompress(Compression.SNAPPY, snappy_encode(payload, xerial_blocksize=4096)) == payload


@pytest.mark.parametrize("payload", PAYLOADS)
def test_our_snappy_inflates_with_kafka_python(payload: bytes) -> None:
    stream = compress(Compression.SNAPPY, payload)
    assert stream[:16] == b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"  # snappy-java's stream header
    assert snappy_decode(stream) == payload


@pytest.mark.parametrize("payload", PAYLOADS)
def test_gzip_both_ways(payload: bytes) -> None:
    assert decompress(Compression.GZIP, gzip_encode(payload)) == payload
    assert gzip_decode(compress(Compression.GZIP, payload)) == payload


@pytest.mark.parametrize("payload", PAYLOADS)
def test_zstd_both_ways(payload: bytes) -> None:
    assert decompress(Compression.ZSTD, zstd_encode(payload)) == payload
    assert zstd_decode(compress(Compression.ZSTD, payload)) == payload


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_IDS)
def test_random_batches_agree_with_kafka_python_both_ways(codec: Compression) -> None:
    """Forty seeded random batches per codec, each read by the other side."""
    rng = seeded_rng(6000 + int(codec))
    for _ in range(40):
        records = sample_records(rng, rng.randint(1, 150), headers=rng.random() < 0.7)
        ours = encode_batch(records, compression=codec)
        batch = DefaultRecordBatch(ours)
        assert batch.validate_crc()
        assert kafka_records(batch) == records
        theirs = build_with_kafka_python(
            records, codec=codec, is_transactional=False, producer_id=-1, producer_epoch=-1, base_sequence=-1
        )
        validate_batch(theirs, client=True)
        assert decode_records(theirs) == records
