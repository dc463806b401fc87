"""RecordBatch v2 test vectors, byte for byte (Kafka's DefaultRecordBatch, DefaultRecord and EndTransactionMarker).

Every vector here comes from outside logfs: the reference's worked 69-byte batch, the batches a real 0.11 broker
wrote (published as the ``record_batch_data_v2`` fixture of kafka-python's ``test/record/test_records.py``), the
varint examples of Kafka's ``ByteUtils``, and the transaction-marker sizes of ``EndTransactionMarker``. A codec that
is only self-consistent passes a round trip; only vectors like these catch a field that is written and read back in
the same wrong place.
"""

from __future__ import annotations

import struct

import crc32c
import pytest
from kafka.record.util import decode_varint as kafka_decode_varint
from kafka.record.util import encode_varint as kafka_encode_varint

from logfs.core.errors import ControlRecordNotAllowed, InvalidRecord
from logfs.core.format.batch import HEADER, Header, Record, TimestampType, iter_batch_positions, read_header
from logfs.core.format.control import ControlType, parse_control_key
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import END_TXN_MARKER_BATCH_BYTES, encode_batch, encode_end_txn_marker, encode_values
from logfs.core.format.validate import validate_batch
from logfs.core.format.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    VARINT,
    VARINT_TABLE_SIZE,
    decode_varint,
    encode_varint,
    size_of_varint,
    varint,
)

# --- the worked example of core/format/batch.py's docstring -----------------------------------------------------------

# value "a", null key, no headers, baseOffset 0, partitionLeaderEpoch 0, timestamp 1000, no producer.
SINGLE_RECORD_BATCH = bytes.fromhex(
    "0000000000000000"  # baseOffset
    "00000039"  # batchLength 57
    "00000000"  # partitionLeaderEpoch 0
    "02"  # magic
    "ebf1884b"  # crc
    "0000"  # attributes
    "00000000"  # lastOffsetDelta
    "00000000000003e8"  # baseTimestamp 1000
    "00000000000003e8"  # maxTimestamp 1000
    "ffffffffffffffff"  # producerId -1
    "ffff"  # producerEpoch -1
    "ffffffff"  # baseSequence -1
    "00000001"  # recordsCount
    "0e00000001026100"  # length 7, attributes, tsDelta 0, offsetDelta 0, key -1, valueLength 1, "a", 0 headers
)


def test_reference_single_record_batch_is_69_bytes_from_encode_batch() -> None:
    out = encode_batch([Record(0, 1000, None, b"a")], partition_leader_epoch=0)
    assert out.hex() == SINGLE_RECORD_BATCH.hex()
    assert len(out) == 69


def test_reference_single_record_batch_is_69_bytes_from_encode_values() -> None:
    out = encode_values([b"a"], 1000, partition_leader_epoch=0)
    assert out.hex() == SINGLE_RECORD_BATCH.hex()


def test_reference_single_record_batch_validates_and_decodes() -> None:
    valid = validate_batch(SINGLE_RECORD_BATCH)
    assert valid.size == 69 and valid.max_timestamp == 1000
    assert valid.header.crc == 0xEBF1884B and valid.header.partition_leader_epoch == 0
    assert decode_records(SINGLE_RECORD_BATCH) == [Record(0, 1000, None, b"a")]


# --- a batch a real 0.11 broker wrote (kafka-python's fixture) --------------------------------------------------------

BROKER_TIMESTAMP = 1503229838908  # 0x15dff7b063c, from the fixture
BROKER_CRC = 0x0318A270
BROKER_RECORD = bytes.fromhex("12000000010631323300")  # length 9, tsDelta 0, offsetDelta 0, key -1, "123", 0 headers

# kafka-python test/record/test_records.py, record_batch_data_v2 (four batches, 299 bytes): written by a broker,
# the last one with a header. Kept verbatim so a reconstruction from the reference's fields can be compared to it.
KAFKA_PYTHON_V2_FIXTURE = [
    b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00;\x00\x00\x00\x01\x02\x03"
    b"\x18\xa2p\x00\x00\x00\x00\x00\x00\x00\x00\x01]\xff{\x06<\x00\x00\x01]"
    b"\xff{\x06<\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00"
    b"\x00\x00\x01\x12\x00\x00\x00\x01\x06123\x00",
    b"\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00@\x00\x00\x00\x02\x02\xc8"
    b"\\\xbd#\x00\x00\x00\x00\x00\x01\x00\x00\x01]\xff|\xddl\x00\x00\x01]\xff"
    b"|\xde\x14\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x00"
    b"\x00\x00\x02\x0c\x00\x00\x00\x01\x00\x00\x0e\x00\xd0\x02\x02\x01\x00"
    b"\x00",
    b"\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00;\x00\x00\x00\x02\x02.\x0b"
    b"\x85\xb7\x00\x00\x00\x00\x00\x00\x00\x00\x01]\xff|\xe7\x9d\x00\x00\x01]"
    b"\xff|\xe7\x9d\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"
    b"\x00\x00\x00\x01\x12\x00\x00\x00\x01\x06123\x00",
    b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00E\x00\x00\x00\x00\x02\\"
    b"\xd8\xefR\x00\x00\x00\x00\x00\x00\x00\x00\x01e\x85\xb6\xf3\xc1\x00\x00"
    b"\x01e\x85\xb6\xf3\xc1\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"
    b"\xff\xff\x00\x00\x00\x01&\x00\x00\x00\x01\x06hdr\x02\x08hkey\x08hval",
]


def broker_batch_from_reference_fields() -> bytes:
    """The broker batch rebuilt from the fields the reference lists, with the stored CRC."""
    header = HEADER.pack(
        0,  # baseOffset
        59,  # batchLength
        1,  # partitionLeaderEpoch
        2,  # magic
        BROKER_CRC,
        0,  # attributes
        0,  # lastOffsetDelta
        BROKER_TIMESTAMP,  # baseTimestamp
        BROKER_TIMESTAMP,  # maxTimestamp
        -1,  # producerId
        -1,  # producerEpoch
        -1,  # baseSequence
        1,  # recordsCount
    )
    return header + BROKER_RECORD


def test_broker_batch_rebuilt_from_reference_fields_matches_kafka_python_fixture() -> None:
    rebuilt = broker_batch_from_reference_fields()
    assert len(rebuilt) == 71
    assert rebuilt == KAFKA_PYTHON_V2_FIXTURE[0]


def test_crc32c_over_attributes_to_end_reproduces_broker_crc_0318a270() -> None:
    rebuilt = broker_batch_from_reference_fields()
    assert crc32c.crc32c(rebuilt[21:]) == BROKER_CRC
    # The fields outside the CRC (baseOffset, batchLength, partitionLeaderEpoch, magic) do not change it.
    assert crc32c.crc32c(rebuilt[17:]) != BROKER_CRC


def test_broker_batch_validates_and_decodes_value_123() -> None:
    rebuilt = broker_batch_from_reference_fields()
    valid = validate_batch(rebuilt, client=True)
    assert valid.size == 71 and valid.max_timestamp == BROKER_TIMESTAMP
    header = read_header(rebuilt)
    assert (header.batch_length, header.partition_leader_epoch, header.crc) == (59, 1, BROKER_CRC)
    assert decode_records(rebuilt) == [Record(0, BROKER_TIMESTAMP, None, b"123")]


def test_encode_batch_writes_the_broker_batch_byte_for_byte() -> None:
    out = encode_batch([Record(0, BROKER_TIMESTAMP, None, b"123")], partition_leader_epoch=1)
    assert out == KAFKA_PYTHON_V2_FIXTURE[0]


def test_all_four_kafka_python_fixture_batches_frame_validate_and_decode() -> None:
    buf = b"".join(KAFKA_PYTHON_V2_FIXTURE) + b"\x00" * 4  # kafka-python appends 4 stray bytes: a torn tail
    positions = list(iter_batch_positions(buf))
    assert positions == [(0, 71), (71, 76), (147, 71), (218, 81)]
    records = []
    for position, size in positions:
        validate_batch(buf, position, client=False, size=size)
        records.append(decode_records(buf, position))
    assert records[0] == [Record(0, 1503229838908, None, b"123")]
    # The second batch: two records, the second 168 ms later (timestampDelta d0 02), both empty values.
    assert records[1] == [Record(1, 1503229959532, None, b""), Record(2, 1503229959700, None, b"")]
    assert records[2] == [Record(3, 1503229962141, None, b"123")]
    assert records[3] == [Record(0, 1535546684353, None, b"hdr", (Header("hkey", b"hval"),))]


# --- varints (Kafka's ByteUtils) --------------------------------------------------------------------------------------

VARINT_EXAMPLES = [(0, "00"), (-1, "01"), (1, "02"), (63, "7e"), (-64, "7f"), (64, "8001"), (300, "d804")]


@pytest.mark.parametrize(("value", "hex_bytes"), VARINT_EXAMPLES)
def test_zigzag_varint_examples_encode_and_decode(value: int, hex_bytes: str) -> None:
    encoded = bytes.fromhex(hex_bytes)
    assert encode_varint(value) == encoded
    assert varint(value) == encoded
    assert size_of_varint(value) == len(encoded)
    assert decode_varint(encoded, 0) == (value, len(encoded))


def test_the_varint_table_holds_kafkas_encoding_of_every_value_below_its_size() -> None:
    """``VARINT`` is built by per-length formulas (one, two, three bytes), not by encode_varint: every entry is
    held to kafka-python's encoding, the boundaries 63/64 and 8191/8192 included."""
    assert len(VARINT) == VARINT_TABLE_SIZE
    for n in range(VARINT_TABLE_SIZE):
        theirs = bytearray()
        kafka_encode_varint(n, theirs.append)
        assert VARINT[n] == theirs, n


EXTREMES = [
    (INT32_MAX, 5),
    (INT32_MIN, 5),
    (INT32_MAX + 1, 5),
    (2**35 - 1, 6),
    (INT64_MAX, 10),
    (INT64_MIN, 10),
    (INT64_MAX // 2 + 1, 10),
    (INT64_MIN // 2, 9),
    (INT64_MIN // 2 - 1, 10),
]


@pytest.mark.parametrize(("value", "size"), EXTREMES)
def test_int32_and_int64_extremes_round_trip_through_decode_varint(value: int, size: int) -> None:
    encoded = encode_varint(value)
    assert len(encoded) == size == size_of_varint(value)
    # Decoding from the middle of a buffer returns the position just past the varint.
    assert decode_varint(b"\xff" + encoded + b"\x7f", 1) == (value, 1 + size)


@pytest.mark.parametrize(
    "value", [0, 1, -1, 63, -64, 64, 8191, -8192, 8192, 2**20, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN]
)
def test_varint_bytes_match_kafka_python_both_ways(value: int) -> None:
    theirs = bytearray()
    kafka_encode_varint(value, theirs.append)
    assert encode_varint(value) == bytes(theirs)
    assert kafka_decode_varint(encode_varint(value), 0) == (value, len(theirs))


def test_decode_varint_rejects_a_buffer_ending_inside_the_varint() -> None:
    with pytest.raises(ValueError, match="ends inside a varint"):
        decode_varint(b"\x80\x80", 0)


def test_decode_varint_rejects_more_than_max_bytes() -> None:
    with pytest.raises(ValueError, match="longer than 5 bytes"):
        decode_varint(b"\x80\x80\x80\x80\x80\x01", 0, max_bytes=5)


def test_encode_varint_rejects_values_outside_int64() -> None:
    with pytest.raises(ValueError):
        encode_varint(INT64_MAX + 1)
    with pytest.raises(ValueError):
        encode_varint(INT64_MIN - 1)


# --- transaction markers (Kafka's EndTransactionMarker) ---------------------------------------------------------------


@pytest.mark.parametrize(("control_type", "type_id"), [(ControlType.COMMIT, 1), (ControlType.ABORT, 0)])
def test_end_txn_marker_is_78_bytes_with_one_17_byte_record(control_type: ControlType, type_id: int) -> None:
    marker = encode_end_txn_marker(
        control_type,
        producer_id=4242,
        producer_epoch=7,
        coordinator_epoch=0x01020304,
        timestamp=1234,
        base_offset=10,
        partition_leader_epoch=3,
    )
    assert len(marker) == 78 == END_TXN_MARKER_BATCH_BYTES
    header = read_header(marker)
    assert header.attributes == 0x30  # transactional + control, CREATE_TIME, no compression
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 7, -1)
    assert (header.base_offset, header.partition_leader_epoch, header.records_count) == (10, 3, 1)
    assert header.last_offset_delta == 0 and header.base_timestamp == header.max_timestamp == 1234
    record = marker[61:]
    assert len(record) == 17 and record[0] == 16 << 1  # length varint 16 + 16-byte body
    # body: attributes, tsDelta 0, offsetDelta 0, keyLength 4, key, valueLength 6, value, 0 headers
    assert record[1:5] == b"\x00\x00\x00\x08"
    assert record[5:9] == struct.pack(">hh", 0, type_id)  # key: version 0, type
    assert record[9] == 6 << 1
    assert record[10:16] == struct.pack(">hi", 0, 0x01020304)  # value: version 0, coordinator epoch
    assert record[16] == 0


def test_end_txn_marker_validates_from_the_coordinator_and_decodes() -> None:
    marker = encode_end_txn_marker(
        ControlType.ABORT, producer_id=1, producer_epoch=0, coordinator_epoch=5, timestamp=99
    )
    valid = validate_batch(marker, client=False)
    assert valid.header.is_control and valid.header.is_transactional
    (record,) = decode_records(marker)
    assert parse_control_key(record.key) is ControlType.ABORT
    assert record.value == b"\x00\x00\x00\x00\x00\x05"


def test_end_txn_marker_from_a_client_is_refused() -> None:
    marker = encode_end_txn_marker(
        ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=5, timestamp=99
    )
    with pytest.raises(ControlRecordNotAllowed, match="control"):
        validate_batch(marker, client=True)


def test_end_txn_marker_refuses_a_control_type_that_is_not_commit_or_abort() -> None:
    with pytest.raises(ValueError, match="not a transaction marker"):
        encode_end_txn_marker(
            ControlType.LEADER_CHANGE, producer_id=1, producer_epoch=0, coordinator_epoch=5, timestamp=99
        )


# --- control keys (ControlRecordType.parse) ---------------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, b"", b"\x00", b"\x00\x00", b"\x00\x00\x00"])
def test_parse_control_key_rejects_keys_shorter_than_4_bytes(key: bytes | None) -> None:
    with pytest.raises(InvalidRecord, match="expected at least 4"):
        parse_control_key(key)


@pytest.mark.parametrize("version", [-1, -32768])
def test_parse_control_key_rejects_a_negative_version(version: int) -> None:
    with pytest.raises(InvalidRecord, match=f"negative version {version}"):
        parse_control_key(struct.pack(">hh", version, 1))


@pytest.mark.parametrize(
    ("type_id", "expected"),
    [(0, ControlType.ABORT), (1, ControlType.COMMIT), (2, ControlType.LEADER_CHANGE), (6, ControlType.KRAFT_VOTERS)],
)
def test_parse_control_key_returns_known_types_as_control_type(type_id: int, expected: ControlType) -> None:
    result = parse_control_key(struct.pack(">hh", 0, type_id))
    assert result is expected and isinstance(result, ControlType)


@pytest.mark.parametrize("type_id", [7, 99, 32767, -1])
def test_parse_control_key_returns_unknown_types_as_plain_int(type_id: int) -> None:
    result = parse_control_key(struct.pack(">hh", 0, type_id))
    assert result == type_id
    assert type(result) is int


def test_parse_control_key_accepts_a_newer_version_and_a_longer_key() -> None:
    # Kafka reads version and type from the first 4 bytes; a newer schema may add fields after them.
    assert parse_control_key(struct.pack(">hh", 3, 1) + b"\x00\x01") is ControlType.COMMIT


def test_log_append_time_attribute_is_bit_3() -> None:
    out = encode_batch([Record(0, 5, None, b"a")], timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=9)
    assert read_header(out).attributes == 0x08
    assert read_header(out).max_timestamp == 9
