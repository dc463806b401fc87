"""Damaged RecordBatch v2 bytes, one damage per test, as LevelDB's ``db/log_test.cc`` does.

Each test builds a good batch, applies exactly one damage with the helpers below, and asserts the error type and
that its message names the fault. Damage to fields under the CRC is followed by :func:`recrc`, so the check under
test is the framing rule itself and not the CRC. Then the exhaustive single-byte flips (every byte, two masks),
the leader's in-place edits (which must keep the CRC valid), and framing over a buffer torn at every byte.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import textwrap
import tracemalloc
import zlib
from pathlib import Path

import crc32c
import pytest

from logfs.core.errors import ControlRecordNotAllowed, CorruptRecord, InvalidRecord, RecordError, UnsupportedCompression
from logfs.core.format.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER,
    Header,
    Record,
    TimestampType,
    assign_offset_and_epoch,
    batch_size_at,
    iter_batch_positions,
    read_header,
    set_max_timestamp,
)
from logfs.core.format.compression import DECOMPRESSED_MAX_BYTES, Compression
from logfs.core.format.control import ControlType
from logfs.core.format.decode import decode_records, record_columns
from logfs.core.format.encode import encode_batch, encode_end_txn_marker, encode_values
from logfs.core.format.render import render_jsonl, render_plain
from logfs.core.format.validate import validate_batch
from logfs.core.format.varint import encode_varint

# Header field positions (Kafka's DefaultRecordBatch).
BASE_OFFSET = (0, ">q")
BATCH_LENGTH = (8, ">i")
LEADER_EPOCH = (12, ">i")
MAGIC = (16, ">b")
ATTRIBUTES = (21, ">h")
LAST_OFFSET_DELTA = (23, ">i")
MAX_TIMESTAMP = (35, ">q")
PRODUCER_ID = (43, ">q")
PRODUCER_EPOCH = (51, ">h")
BASE_SEQUENCE = (53, ">i")
RECORDS_COUNT = (57, ">i")

# --- damage helpers ---------------------------------------------------------------------------------------------------


def recrc(buf: bytes | bytearray, position: int = 0) -> bytes:
    """The batch at ``position`` with its CRC-32C recomputed over [attributes, end of batch)."""
    out = bytearray(buf)
    (length,) = struct.unpack_from(">i", out, position + 8)
    end = position + 12 + length
    struct.pack_into(">I", out, position + CRC_OFFSET, crc32c.crc32c(bytes(out[position + ATTRIBUTES_OFFSET : end])))
    return bytes(out)


def put(buf: bytes, field: tuple[int, str], value: int, *, fix_crc: bool = True) -> bytes:
    """``buf`` with one header field set (and the CRC recomputed, unless asked not to)."""
    out = bytearray(buf)
    struct.pack_into(field[1], out, field[0], value)
    return recrc(out) if fix_crc else bytes(out)


def flip(buf: bytes, position: int, mask: int = 0xFF) -> bytes:
    out = bytearray(buf)
    out[position] ^= mask
    return bytes(out)


def with_records_section(buf: bytes, section: bytes) -> bytes:
    """``buf``'s header over a new records section, batchLength and CRC made to match."""
    out = bytearray(buf[:61]) + section
    struct.pack_into(">i", out, 8, len(out) - 12)
    return recrc(out)


def zz(n: int) -> bytes:
    return encode_varint(n)


def raw_record(
    offset_delta: int,
    *,
    key: bytes | None = None,
    value: bytes | None = b"v",
    headers: tuple[tuple[bytes, bytes | None], ...] = (),
    ts_delta: int = 0,
    key_length: int | None = None,
    value_length: int | None = None,
    header_count: int | None = None,
    headers_raw: bytes | None = None,
    length_change: int = 0,
) -> bytes:
    """One record written field by field, so that any field can hold a value no encoder would write
    (``headers_raw`` replaces the encoded headers)."""
    body = b"\x00" + zz(ts_delta) + zz(offset_delta)
    body += zz(key_length if key_length is not None else -1 if key is None else len(key)) + (key or b"")
    body += zz(value_length if value_length is not None else -1 if value is None else len(value)) + (value or b"")
    body += zz(header_count if header_count is not None else len(headers))
    for hk, hv in headers:
        body += zz(len(hk)) + hk + (zz(-1) if hv is None else zz(len(hv)) + hv)
    body += headers_raw or b""
    return zz(len(body) + length_change) + body


def batch_of(
    records: list[bytes],
    *,
    count: int | None = None,
    last_offset_delta: int | None = None,
    attributes: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A batch around hand-written records, with a correct batchLength and CRC."""
    section = b"".join(records)
    count = len(records) if count is None else count
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    header = HEADER.pack(
        0, 49 + len(section), 0, 2, 0, attributes, lod, 1000, 1000, producer_id, producer_epoch, base_sequence, count
    )
    return recrc(header + section)


def three_records() -> list[bytes]:
    return [raw_record(0, value=b"a"), raw_record(1, key=b"k", value=b"bb"), raw_record(2, value=None)]


def good_batch() -> bytes:
    """Three records: keys, a null value, and headers (one with a null value)."""
    return encode_batch(
        [
            Record(0, 1000, None, b"first"),
            Record(1, 1003, b"key", b"second", (Header("h1", b"x"), Header("h2", None))),
            Record(2, 999, b"", None),
        ],
        partition_leader_epoch=5,
    )


def test_helpers_build_a_valid_batch() -> None:
    """The damage helpers start from good bytes: every damage below is the only one."""
    buf = batch_of(three_records())
    assert validate_batch(buf).size == len(buf)
    assert decode_records(buf) == [
        Record(0, 1000, None, b"a"),
        Record(1, 1000, b"k", b"bb"),
        Record(2, 1000, None, None),
    ]
    assert recrc(good_batch()) == good_batch()


# --- framing and header -----------------------------------------------------------------------------------------------


def test_batch_shorter_than_61_bytes_is_corrupt() -> None:
    buf = good_batch()[:40]
    short = put(buf, BATCH_LENGTH, 28, fix_crc=False)  # declares exactly the 40 bytes there are
    with pytest.raises(CorruptRecord, match="40 bytes, shorter than the 61-byte header"):
        validate_batch(short)


def test_read_header_of_60_bytes_is_corrupt() -> None:
    with pytest.raises(CorruptRecord, match="shorter than the 61-byte header"):
        read_header(good_batch()[:60])


def test_batch_declaring_fewer_than_61_bytes_within_a_longer_buffer_is_corrupt() -> None:
    buf = put(good_batch(), BATCH_LENGTH, 40, fix_crc=False) + b"\x00" * 100  # 52 bytes declared
    with pytest.raises(CorruptRecord, match="52 bytes, shorter than the 61-byte header"):
        validate_batch(buf)


def test_batch_running_past_the_buffer_is_truncated() -> None:
    buf = good_batch()
    with pytest.raises(CorruptRecord, match="batch is truncated"):
        validate_batch(buf[:-1])


@pytest.mark.parametrize(
    "batch_length",
    [
        -(2**31),
        -12,
        -1,
        0,
        1,
        pytest.param(2, marks=()),
        pytest.param(13, marks=()),
    ],
)
def test_declared_batch_length_below_14_is_corrupt_in_batch_size_at(batch_length: int) -> None:
    """Kafka's FileLogInputStream.nextBatch: ``size < LegacyRecord.RECORD_OVERHEAD_V0`` (14), where ``size`` is
    the batchLength field, throws CorruptRecordException (docs/records.md, "Validation"); it is damage, not a torn
    tail."""
    buf = put(good_batch(), BATCH_LENGTH, batch_length, fix_crc=False)
    with pytest.raises(CorruptRecord, match="below the minimum"):
        batch_size_at(buf)


def test_declared_size_below_minimum_mid_buffer_names_its_position() -> None:
    first = good_batch()
    buf = first + put(good_batch(), BATCH_LENGTH, -5, fix_crc=False)
    with pytest.raises(CorruptRecord, match=f"batch at byte {len(first)}") as info:
        list(iter_batch_positions(buf))
    assert info.value.position == len(first)


def test_fewer_than_17_bytes_left_stop_the_scan_silently() -> None:
    first = good_batch()
    assert list(iter_batch_positions(first + b"\x00" * 16)) == [(0, len(first))]


def test_exactly_17_bytes_left_stop_the_scan_silently() -> None:
    first = good_batch()
    assert list(iter_batch_positions(first + b"\x00" * 17)) == [(0, len(first))]


def test_18_zero_bytes_after_a_batch_are_corrupt() -> None:
    """A zero-filled tail (preallocated file) longer than 17 bytes declares batchLength 0: damage, as in Kafka."""
    first = good_batch()
    with pytest.raises(CorruptRecord, match="below the minimum"):
        list(iter_batch_positions(first + b"\x00" * 18))


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_bad_magic_is_corrupt(magic: int) -> None:
    buf = put(good_batch(), MAGIC, magic, fix_crc=False)  # magic is outside the CRC
    with pytest.raises(CorruptRecord, match=f"magic {magic} is not 2"):
        validate_batch(buf)


def test_crc_mismatch_is_corrupt() -> None:
    buf = good_batch()
    damaged = flip(buf, len(buf) - 5, 0x01)  # a header value byte
    stored = read_header(buf).crc
    with pytest.raises(CorruptRecord, match=f"CRC-32C mismatch: stored {stored:08x}, computed [0-9a-f]{{8}}"):
        validate_batch(damaged)


def test_crc_mismatch_mid_buffer_names_the_batch_position() -> None:
    first = good_batch()
    buf = first + flip(good_batch(), 70) + good_batch()
    validate_batch(buf, 0)
    with pytest.raises(CorruptRecord, match=rf"CRC-32C mismatch.* \(batch at byte {len(first)}\)$") as info:
        validate_batch(buf, len(first))
    assert info.value.position == len(first) and info.value.reason.startswith("CRC-32C mismatch")


def test_shallow_validation_checks_the_crc_but_not_the_records() -> None:
    damaged = with_records_section(good_batch(), good_batch()[61:] + b"\x00")  # a trailing byte, valid CRC
    assert validate_batch(damaged, deep=False).size == len(damaged)
    with pytest.raises(InvalidRecord, match="1 trailing bytes"):
        validate_batch(damaged)
    with pytest.raises(CorruptRecord, match="CRC-32C mismatch"):
        validate_batch(flip(damaged, 65), deep=False)


# --- counts -----------------------------------------------------------------------------------------------------------


def test_records_count_above_last_offset_delta_plus_one_is_invalid_from_a_client() -> None:
    buf = batch_of(three_records(), count=4, last_offset_delta=2)
    with pytest.raises(InvalidRecord, match=r"recordsCount 4 does not match lastOffsetDelta 2 \+ 1"):
        validate_batch(buf, client=True)


def test_records_count_above_last_offset_delta_plus_one_is_invalid_in_a_stored_batch() -> None:
    buf = batch_of(three_records(), count=4, last_offset_delta=2)
    with pytest.raises(InvalidRecord, match=r"recordsCount 4 exceeds lastOffsetDelta 2 \+ 1"):
        validate_batch(buf, client=False)


def test_last_offset_delta_past_the_records_is_invalid_from_a_client() -> None:
    buf = batch_of(three_records(), count=3, last_offset_delta=5)
    with pytest.raises(InvalidRecord, match=r"recordsCount 3 does not match lastOffsetDelta 5 \+ 1"):
        validate_batch(buf, client=True)
    validate_batch(buf, client=False)  # compaction removed offsets 3-5: fine in a log


def test_records_count_below_the_records_present_leaves_trailing_bytes() -> None:
    buf = batch_of(three_records(), count=2, last_offset_delta=1)
    with pytest.raises(InvalidRecord, match="trailing bytes after the 2 records"):
        validate_batch(buf)


def test_records_count_above_the_records_present_is_a_missing_record() -> None:
    buf = batch_of(three_records(), count=4, last_offset_delta=3)
    with pytest.raises(InvalidRecord, match="record 3: missing"):
        validate_batch(buf)


def test_negative_records_count_is_invalid() -> None:
    buf = put(batch_of(three_records()), RECORDS_COUNT, -1)
    with pytest.raises(InvalidRecord, match="negative recordsCount -1"):
        validate_batch(buf, client=False)


def test_negative_last_offset_delta_is_invalid() -> None:
    buf = put(batch_of(three_records()), LAST_OFFSET_DELTA, -3)
    with pytest.raises(InvalidRecord, match="negative lastOffsetDelta -3"):
        validate_batch(buf, client=False)


def test_empty_batch_is_invalid_from_a_client_but_valid_in_a_log() -> None:
    buf = batch_of([], count=0, last_offset_delta=0)
    with pytest.raises(InvalidRecord, match="at least one record"):
        validate_batch(buf, client=True)
    valid = validate_batch(buf, client=False)  # compaction can empty a batch; its max timestamp is the header's
    assert valid.max_timestamp == 1000 and decode_records(buf) == []


def test_huge_records_count_is_refused_without_allocating_for_it() -> None:
    buf = batch_of(three_records(), count=10_000_000, last_offset_delta=9_999_999)
    tracemalloc.start()
    try:
        with pytest.raises(InvalidRecord, match="missing"):
            validate_batch(buf)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"validating a {len(buf)}-byte batch allocated {peak} bytes"


MEMORY_LIMITED_CHILD = """
    import resource, sys
    from logfs.core.format.validate import validate_batch
    from logfs.core.format.compression import decompress
    from logfs.core.errors import RecordError
    data = sys.stdin.buffer.read()
    with open("/proc/self/statm") as f:
        limit = int(f.read().split()[0]) * 4096 + (288 << 20)  # what is mapped now + 288 MiB
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        {call}
    except RecordError as exc:
        print(type(exc).__name__, exc)
"""


def run_memory_limited(call: str, data: bytes, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``call`` on ``data`` in a child whose address space is capped at what it has mapped + 288 MiB: room for
    a batch inflated to DECOMPRESSED_MAX_BYTES (64 MiB) and a copy, not for the 512 MiB a bomb inflates to."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(MEMORY_LIMITED_CHILD).format(call=call)],
        input=data,
        cwd=tmp_path,
        capture_output=True,
        timeout=60,
        check=False,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
    )


def test_records_count_of_int32_max_is_invalid_not_out_of_memory(tmp_path: Path) -> None:
    buf = batch_of(three_records(), count=2**31 - 1, last_offset_delta=2**31 - 2)
    proc = run_memory_limited("validate_batch(data)", buf, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(b"InvalidRecord record 3: missing")


# --- records ----------------------------------------------------------------------------------------------------------


def test_truncated_last_record_is_invalid() -> None:
    section = b"".join(three_records())
    buf = batch_of([])  # header only; the section is set below with batchLength and CRC to match
    buf = put(put(with_records_section(buf, section[:-2]), RECORDS_COUNT, 3), LAST_OFFSET_DELTA, 2)
    with pytest.raises(InvalidRecord, match="record 2: declared length 6 runs 2 bytes past the records section"):
        validate_batch(buf)


def test_trailing_bytes_after_the_last_record_are_invalid() -> None:
    buf = batch_of([*three_records(), b"\x00\x00\x00"], count=3)
    with pytest.raises(InvalidRecord, match="3 trailing bytes after the 3 records"):
        validate_batch(buf)


def test_negative_key_length_is_invalid() -> None:
    buf = batch_of([raw_record(0), raw_record(1, key_length=-2)])
    with pytest.raises(InvalidRecord, match="record 1: negative key length -2"):
        validate_batch(buf)


def test_negative_value_length_is_invalid() -> None:
    buf = batch_of([raw_record(0), raw_record(1, value=None, value_length=-5)])
    with pytest.raises(InvalidRecord, match="record 1: negative value length -5"):
        validate_batch(buf)


def test_negative_header_key_length_is_invalid() -> None:
    # headerKeyLength -1 (a null header key, which Kafka forbids), then headerValueLength -1
    buf = batch_of([raw_record(0), raw_record(1, header_count=1, headers_raw=zz(-1) + zz(-1))])
    with pytest.raises(InvalidRecord, match="record 1: header 0: negative key length -1"):
        validate_batch(buf)


def test_negative_header_value_length_below_minus_one_is_invalid() -> None:
    buf = batch_of([raw_record(0), raw_record(1, header_count=1, headers_raw=zz(1) + b"h" + zz(-2))])
    with pytest.raises(InvalidRecord, match="record 1: header 0: negative value length -2"):
        validate_batch(buf)


def test_negative_header_count_is_invalid() -> None:
    buf = batch_of([raw_record(0, header_count=-1)])
    with pytest.raises(InvalidRecord, match="record 0: negative header count -1"):
        validate_batch(buf)


def test_header_count_past_the_headers_present_is_invalid() -> None:
    buf = batch_of([raw_record(0, headers=((b"h", b"v"),), header_count=2)])
    with pytest.raises(InvalidRecord, match="record 0: header 1 of 2 runs past the record's declared length"):
        validate_batch(buf)


def test_record_length_shorter_than_its_fields_is_invalid() -> None:
    # The declared length ends one byte early: that byte (the header count) becomes the next record's length.
    buf = batch_of([raw_record(0, value=b"abc", length_change=-1)], count=1)
    with pytest.raises(InvalidRecord, match="record 0: headersCount runs past the record's declared length"):
        validate_batch(buf)


def test_record_length_longer_than_its_fields_is_invalid() -> None:
    record = raw_record(0, value=b"abc", length_change=1) + b"\x00"  # one unexplained byte inside the record
    buf = batch_of([record])
    with pytest.raises(InvalidRecord, match=r"record 0: declared length 10 but the fields take 9 bytes"):
        validate_batch(buf)


def test_record_length_below_the_minimum_body_is_invalid() -> None:
    buf = batch_of([zz(5) + b"\x00\x00\x00\x01\x00"])  # 5 bytes cannot hold the six mandatory fields
    with pytest.raises(InvalidRecord, match="record 0: declared length 5 is below the minimum of 6"):
        validate_batch(buf)


def test_value_running_past_the_record_is_invalid() -> None:
    buf = batch_of([raw_record(0, value=b"abc", value_length=9, length_change=0)])
    with pytest.raises(InvalidRecord, match="record 0: value of 9 bytes runs past the record's declared length"):
        validate_batch(buf)


def test_offset_delta_not_sequential_is_invalid_from_a_client() -> None:
    buf = batch_of([raw_record(0), raw_record(2), raw_record(3)], count=3, last_offset_delta=2)
    with pytest.raises(InvalidRecord, match=r"record 1: offsetDelta 2, expected 1"):
        validate_batch(buf, client=True)


def test_offset_delta_gaps_are_valid_in_a_stored_batch() -> None:
    buf = batch_of([raw_record(0), raw_record(2), raw_record(3)], count=3, last_offset_delta=3)
    validate_batch(buf, client=False)
    assert [r.offset for r in decode_records(buf)] == [0, 2, 3]


def test_offset_delta_repeated_is_invalid_in_a_stored_batch() -> None:
    buf = batch_of([raw_record(0), raw_record(2), raw_record(2)], count=3, last_offset_delta=3)
    with pytest.raises(InvalidRecord, match=r"record 2: offsetDelta 2 is not in \(2, 3\]"):
        validate_batch(buf, client=False)


def test_offset_delta_past_last_offset_delta_is_invalid_in_a_stored_batch() -> None:
    buf = batch_of([raw_record(0), raw_record(1), raw_record(4)], count=3, last_offset_delta=3)
    with pytest.raises(InvalidRecord, match=r"record 2: offsetDelta 4 is not in \(1, 3\]"):
        validate_batch(buf, client=False)


def test_varint_longer_than_5_bytes_is_invalid() -> None:
    body = b"\x00\x00" + b"\x80\x80\x80\x80\x80\x00" + b"\x01\x01\x00"  # offsetDelta in 6 bytes
    buf = batch_of([zz(len(body)) + body])
    with pytest.raises(InvalidRecord, match="record 0: offsetDelta varint is longer than 5 bytes"):
        validate_batch(buf, client=False)


def test_offset_delta_outside_int32_is_invalid() -> None:
    buf = batch_of([raw_record(2**31)], count=1, last_offset_delta=0)
    with pytest.raises(InvalidRecord, match=f"record 0: offsetDelta {2**31} does not fit an int32 varint"):
        validate_batch(buf, client=False)


# --- batch attributes and producer fields -----------------------------------------------------------------------------


def test_control_batch_from_a_client_is_refused() -> None:
    marker = encode_end_txn_marker(
        ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=1
    )
    with pytest.raises(ControlRecordNotAllowed, match="clients are not allowed to write control batches"):
        validate_batch(marker, client=True)


def test_control_batch_with_two_records_is_invalid() -> None:
    key = struct.pack(">hh", 0, 1)
    buf = batch_of(
        [raw_record(0, key=key, value=b"\x00" * 6), raw_record(1, key=key, value=b"\x00" * 6)],
        attributes=0x30,
        producer_id=1,
        producer_epoch=0,
    )
    with pytest.raises(InvalidRecord, match="a control batch holds 2 records, not 1"):
        validate_batch(buf, client=False)


def test_control_batch_with_a_3_byte_key_is_invalid() -> None:
    buf = batch_of(
        [raw_record(0, key=b"\x00\x00\x01", value=b"\x00" * 6)], attributes=0x30, producer_id=1, producer_epoch=0
    )
    with pytest.raises(InvalidRecord, match="control record key of 3 bytes, expected at least 4"):
        validate_batch(buf, client=False)


@pytest.mark.parametrize("codec_id", [5, 6, 7])
@pytest.mark.parametrize("client", [True, False])
def test_unknown_codec_id_is_unsupported_compression(codec_id: int, client: bool) -> None:
    buf = put(batch_of(three_records()), ATTRIBUTES, codec_id)
    with pytest.raises(UnsupportedCompression, match=f"compression id {codec_id} is not one Kafka defines"):
        validate_batch(buf, client=client)


def test_producer_id_with_negative_sequence_is_invalid() -> None:
    buf = batch_of(three_records(), producer_id=7, producer_epoch=0, base_sequence=-1)
    with pytest.raises(InvalidRecord, match="producer id 7 with invalid epoch 0 or sequence -1"):
        validate_batch(buf, client=True)


def test_producer_id_with_negative_epoch_is_invalid() -> None:
    buf = batch_of(three_records(), producer_id=7, producer_epoch=-1, base_sequence=0)
    with pytest.raises(InvalidRecord, match="producer id 7 with invalid epoch -1 or sequence 0"):
        validate_batch(buf, client=True)


def test_transactional_batch_without_producer_id_is_invalid() -> None:
    buf = batch_of(three_records(), attributes=0x10)
    with pytest.raises(InvalidRecord, match="a transactional batch must carry a producer id"):
        validate_batch(buf, client=True)


# --- compressed payloads ----------------------------------------------------------------------------------------------


def compressed_batch(codec: Compression) -> bytes:
    return encode_values([b"value number %d " % i * 3 for i in range(200)], 1000, compression=codec)


def truncate_payload(buf: bytes, nbytes: int) -> bytes:
    return with_records_section(buf, buf[61:-nbytes])


def garble_payload(buf: bytes, at: int) -> bytes:
    section = bytearray(buf[61:])
    for i in range(at, at + 8):
        section[i] ^= 0x5A
    return with_records_section(buf, bytes(section))


# (codec, damage, where a garbling starts, message). The garbling hits framing, not literal bytes: LZ4 and snappy
# carry no checksum in Kafka's framing, so garbled literals inflate to other bytes (which the CRC is there to catch).
COMPRESSED_DAMAGES = [
    (Compression.GZIP, "truncate", None, "gzip stream is truncated"),
    (Compression.GZIP, "garble", 24, "gzip records do not decompress"),
    (Compression.ZSTD, "truncate", None, "zstd records do not decompress"),
    (Compression.ZSTD, "garble", 0, "zstd records do not decompress.*Unknown frame descriptor"),
    (Compression.LZ4, "truncate", None, "lz4 records do not decompress"),
    (Compression.LZ4, "garble", 7, "lz4 records do not decompress"),  # the first block's size
    (Compression.SNAPPY, "truncate", None, "snappy block of [0-9]+ bytes runs past the records"),
    (Compression.SNAPPY, "garble", 20, "snappy records do not decompress"),  # the first block's preamble
]


@pytest.mark.parametrize(("codec", "damage", "at", "message"), COMPRESSED_DAMAGES)
def test_damaged_compressed_payload_is_corrupt(codec: Compression, damage: str, at: int | None, message: str) -> None:
    buf = compressed_batch(codec)
    validate_batch(buf)
    if at is None:
        damaged = truncate_payload(buf, 10)
    else:
        damaged = garble_payload(buf, at)
    with pytest.raises(CorruptRecord, match=message):
        validate_batch(damaged)


def test_gzip_payload_inflating_past_the_bound_is_corrupt() -> None:
    c = zlib.compressobj(1, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    bomb = b"".join(c.compress(chunk) for _ in range(DECOMPRESSED_MAX_BYTES // len(chunk) + 1)) + c.flush()
    buf = with_records_section(put(batch_of([raw_record(0)]), ATTRIBUTES, Compression.GZIP), bomb)
    with pytest.raises(CorruptRecord, match=f"gzip records inflate past {DECOMPRESSED_MAX_BYTES} bytes"):
        validate_batch(buf)


def zstd_of_zeros(size: int) -> bytes:
    import zstandard

    c = zstandard.ZstdCompressor(level=3).compressobj()
    chunk = bytes(1 << 20)
    return b"".join(c.compress(chunk) for _ in range(size // len(chunk))) + c.flush()


def lz4_of_zeros(size: int) -> bytes:
    import lz4.frame

    c = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB)
    chunk = bytes(1 << 20)
    return c.begin() + b"".join(c.compress(chunk) for _ in range(size // len(chunk))) + c.flush()


@pytest.mark.parametrize(
    ("codec", "payload"),
    [
        pytest.param(Compression.ZSTD, lambda: zstd_of_zeros(512 << 20), id="zstd-10KB-to-512MiB"),
        pytest.param(Compression.LZ4, lambda: lz4_of_zeros(512 << 20), id="lz4-2MB-to-512MiB"),
        pytest.param(Compression.SNAPPY, lambda: b"\xff\xff\xff\xff\x0f" + b"\x00" * 100, id="snappy-declares-4GiB"),
    ],
)
def test_payload_inflating_past_the_bound_is_corrupt_without_inflating_it(
    codec: Compression, payload: object, tmp_path: Path
) -> None:
    blob = payload()  # type: ignore[operator]
    buf = with_records_section(put(batch_of([raw_record(0)]), ATTRIBUTES, codec), blob)
    proc = run_memory_limited("validate_batch(data)", buf, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith(b"CorruptRecord"), proc.stdout


# --- reading a torn batch ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reader", ["decode_records", "record_columns", "render_plain", "render_jsonl"])
@pytest.mark.parametrize("records", [3, 60], ids=["3-records", "60-records"])
def test_reading_a_torn_batch_is_corrupt(reader: str, records: int) -> None:
    buf = encode_values([b"abc"] * records, 5)[:-5]
    call = {
        "decode_records": lambda: decode_records(buf),
        "record_columns": lambda: record_columns(buf),
        "render_plain": lambda: render_plain(buf),
        "render_jsonl": lambda: render_jsonl(buf, "t", 0),
    }[reader]
    with pytest.raises(CorruptRecord, match="truncated"):
        call()


# --- every single-byte flip -------------------------------------------------------------------------------------------

FLIP_BATCHES = {
    "plain": good_batch,
    "gzip": lambda: encode_batch(
        [
            Record(0, 1000, None, b"first"),
            Record(1, 1003, b"key", b"second", (Header("h", b"x"),)),
            Record(2, 999, b"", None),
        ],
        compression=Compression.GZIP,
        partition_leader_epoch=5,
    ),
    "zstd": lambda: encode_values([b"one", b"two", b"three"], 1000, compression=Compression.ZSTD),
}


@pytest.mark.parametrize("mask", [0xFF, 0x01], ids=["xor-ff", "xor-01"])
@pytest.mark.parametrize("name", list(FLIP_BATCHES))
def test_every_single_byte_flip_is_detected_except_base_offset_and_leader_epoch(name: str, mask: int) -> None:
    buf = FLIP_BATCHES[name]()
    header = read_header(buf)
    records = decode_records(buf)
    for pos in range(len(buf)):
        damaged = flip(buf, pos, mask)
        if pos < 8 or 12 <= pos < 16:
            # Outside the CRC by design: the leader rewrites these in place. The batch still validates and the new
            # value shows in the header (and, for baseOffset, in every record's offset).
            valid = validate_batch(damaged, client=False)
            changed = read_header(damaged)
            if pos < 8:
                assert changed.base_offset != header.base_offset, pos
                shift = changed.base_offset - header.base_offset
                assert [r.offset for r in decode_records(damaged)] == [r.offset + shift for r in records]
            else:
                assert changed.partition_leader_epoch != header.partition_leader_epoch, pos
            assert valid.header.crc == header.crc
        elif 8 <= pos < 12:
            # batchLength: framing catches it, as a size that disagrees with the bytes given...
            with pytest.raises(CorruptRecord, match=f"declared batch size {read_header(damaged).size} but"):
                validate_batch(damaged, size=len(buf))
            # ...and on its own (a size below the minimum, past the end, or cutting the CRC-covered bytes short).
            with pytest.raises(CorruptRecord):
                validate_batch(damaged)
        elif pos == 16:
            with pytest.raises(CorruptRecord, match="magic"):
                validate_batch(damaged)
        else:
            # Everything from the CRC on: CRC-32C catches every single-byte error.
            for client in (True, False):
                with pytest.raises(CorruptRecord, match="CRC-32C mismatch"):
                    validate_batch(damaged, client=client)


def test_flips_in_the_records_with_a_fixed_crc_are_still_caught_or_harmless() -> None:
    """With the CRC recomputed (a buggy writer, not a bad disk), damage to the records section is either caught by
    the framing rules or yields a batch that still decodes without an untyped error."""
    buf = good_batch()
    caught = 0
    for pos in range(61, len(buf)):
        for mask in (0xFF, 0x01, 0x80):
            damaged = recrc(flip(buf, pos, mask))
            try:
                validate_batch(damaged, client=False)
            except RecordError:
                caught += 1
                continue
            decode_records(damaged)  # must not raise anything else
    assert caught > (len(buf) - 61)  # most of them break the framing


# --- the leader's in-place edits --------------------------------------------------------------------------------------


def test_assign_offset_and_epoch_keeps_the_crc_valid() -> None:
    original = good_batch()
    buf = bytearray(original)
    assign_offset_and_epoch(buf, 0, 2**40, 77)
    assert buf[17:] == original[17:]  # nothing under the CRC changed, nor the CRC itself
    header = read_header(buf)
    assert (header.base_offset, header.partition_leader_epoch) == (2**40, 77)
    validate_batch(bytes(buf), client=False)
    assert [r.offset for r in decode_records(bytes(buf))] == [2**40, 2**40 + 1, 2**40 + 2]


def test_assign_offset_and_epoch_touches_only_its_batch() -> None:
    first, second = good_batch(), good_batch()
    buf = bytearray(first + second)
    assign_offset_and_epoch(memoryview(buf), len(first), 3, 1)
    assert buf[: len(first)] == first
    assert (read_header(buf, len(first)).base_offset, read_header(buf, len(first)).partition_leader_epoch) == (3, 1)
    validate_batch(bytes(buf), len(first), client=False)


def test_set_max_timestamp_to_log_append_time_recomputes_the_crc() -> None:
    original = good_batch()
    buf = bytearray(original)
    set_max_timestamp(buf, 0, len(buf), TimestampType.LOG_APPEND_TIME, 5_000_000)
    header = read_header(buf)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME and header.max_timestamp == 5_000_000
    assert header.crc != read_header(original).crc
    assert validate_batch(bytes(buf)).max_timestamp == 5_000_000
    assert {r.timestamp for r in decode_records(bytes(buf))} == {5_000_000}


def test_set_max_timestamp_back_restores_the_original_bytes() -> None:
    original = good_batch()
    buf = bytearray(original)
    set_max_timestamp(buf, 0, len(buf), TimestampType.LOG_APPEND_TIME, 5_000_000)
    set_max_timestamp(buf, 0, len(buf), TimestampType.CREATE_TIME, read_header(original).max_timestamp)
    assert bytes(buf) == original


def test_set_max_timestamp_of_create_time_recomputes_the_crc() -> None:
    buf = bytearray(good_batch())
    set_max_timestamp(buf, 0, len(buf), TimestampType.CREATE_TIME, 123)
    assert read_header(buf).max_timestamp == 123 and read_header(buf).timestamp_type is TimestampType.CREATE_TIME
    validate_batch(bytes(buf))


def test_set_max_timestamp_unchanged_is_a_no_op() -> None:
    """A no-op writes nothing, not even the CRC: shown on a batch whose CRC is deliberately wrong."""
    original = flip(good_batch(), CRC_OFFSET)
    buf = bytearray(original)
    header = read_header(buf)
    set_max_timestamp(buf, 0, len(buf), TimestampType.CREATE_TIME, header.max_timestamp)
    assert bytes(buf) == original


def test_set_max_timestamp_touches_only_its_batch() -> None:
    first, second = good_batch(), good_batch()
    buf = bytearray(first + second + first)
    set_max_timestamp(buf, len(first), len(second), TimestampType.LOG_APPEND_TIME, 9)
    assert buf[: len(first)] == first and buf[len(first) + len(second) :] == first
    assert validate_batch(bytes(buf), len(first)).max_timestamp == 9


# --- framing over a torn buffer ---------------------------------------------------------------------------------------


def several_batches() -> tuple[bytes, list[tuple[int, int]]]:
    batches = [
        good_batch(),
        encode_values([b"x" * i for i in range(60)], 7, base_offset=3, compression=Compression.LZ4),
        encode_end_txn_marker(ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=8),
        encode_values([b"tail"], 9, base_offset=64),
        encode_batch([Record(65, 10, b"k", b"v" * 300)], compression=Compression.GZIP, base_offset=65),
    ]
    positions, pos = [], 0
    for b in batches:
        positions.append((pos, len(b)))
        pos += len(b)
    return b"".join(batches), positions


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_iter_batch_positions_over_a_buffer_torn_at_every_byte_stops_silently(kind: type) -> None:
    buf, positions = several_batches()
    for cut in range(len(buf) + 1):
        torn = kind(buf[:cut])
        complete = [(p, n) for p, n in positions if p + n <= cut]
        assert list(iter_batch_positions(torn)) == complete, cut
        next_position = complete[-1][0] + complete[-1][1] if complete else 0
        assert batch_size_at(torn, next_position) is None, cut  # the torn tail (or nothing) after them
        for p, n in complete:
            assert batch_size_at(torn, p) == n


def test_iter_batch_positions_from_a_position_starts_there() -> None:
    buf, positions = several_batches()
    assert list(iter_batch_positions(buf, positions[2][0])) == positions[2:]
    for position, size in positions:
        validate_batch(buf, position, client=False, size=size)
