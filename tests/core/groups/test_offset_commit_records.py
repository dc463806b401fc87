"""Kafka's offset-commit key (v1) and value (v3) bytes, the older value versions, and the group → partition rule."""

from __future__ import annotations

import struct

import pytest

from logfs.core.errors import InvalidOffsetCommit
from logfs.core.groups.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    java_string_hash,
    partition_for_group,
)

# Kafka's RecordHelpersTest.testNewOffsetCommitRecord values, laid out by hand from OffsetCommitKey.json (v1) and
# OffsetCommitValue.json (v3): int16 version, strings as int16 length + UTF-8, big-endian integers.
KEY_BYTES = bytes.fromhex("0001000867726f75702d69640003666f6f00000001")
VALUE_BYTES = bytes.fromhex("000300000000000000640000000a00086d6574616461746100000000000004d2")


def test_the_key_of_kafkas_test_encodes_to_the_hand_checked_bytes() -> None:
    assert encode_key(OffsetCommitKey("group-id", "foo", 1)) == KEY_BYTES
    assert decode_key(KEY_BYTES) == OffsetCommitKey("group-id", "foo", 1)


def test_the_value_of_kafkas_test_encodes_as_version_3_to_the_hand_checked_bytes() -> None:
    value = OffsetCommitValue(100, "metadata", 1234, leader_epoch=10)
    assert encode_value(value) == VALUE_BYTES
    assert decode_value(VALUE_BYTES) == value


@pytest.mark.parametrize(
    "value",
    [
        OffsetCommitValue(0, "", 0),
        OffsetCommitValue(2**63 - 1, "é ✓ 😀", 2**62, leader_epoch=2**31 - 1),
        OffsetCommitValue(537, "x" * 4096, 1_700_000_000_000, leader_epoch=15),
    ],
)
def test_values_round_trip(value: OffsetCommitValue) -> None:
    assert decode_value(encode_value(value)) == value


def test_older_value_versions_decode() -> None:
    """Versions 0 and 2 lack the leader epoch; version 1 carries an expire timestamp (GroupMetadataManager)."""
    meta = struct.pack(">h", 2) + b"md"
    v0 = struct.pack(">hq", 0, 7) + meta + struct.pack(">q", 99)
    v1 = struct.pack(">hq", 1, 7) + meta + struct.pack(">qq", 99, 555)
    v2 = struct.pack(">hq", 2, 7) + meta + struct.pack(">q", 99)
    assert decode_value(v0) == OffsetCommitValue(7, "md", 99)
    assert decode_value(v1) == OffsetCommitValue(7, "md", 99, expire_timestamp=555)
    assert decode_value(v2) == OffsetCommitValue(7, "md", 99)


def test_a_group_metadata_key_is_not_an_offset_commit() -> None:
    assert decode_key(struct.pack(">h", 2) + struct.pack(">h", 1) + b"g") is None


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00", KEY_BYTES[:-1], struct.pack(">h", 3) + KEY_BYTES[2:], KEY_BYTES[:2] + b"\x7f\xff" + KEY_BYTES[4:]],
)
def test_damaged_keys_are_refused(data: bytes) -> None:
    with pytest.raises(InvalidOffsetCommit):
        decode_key(data)


@pytest.mark.parametrize("data", [VALUE_BYTES[:-1], struct.pack(">h", 4) + VALUE_BYTES[2:], b"\x00\x03"])
def test_damaged_or_unknown_values_are_refused(data: bytes) -> None:
    with pytest.raises(InvalidOffsetCommit):
        decode_value(data)


def test_a_string_longer_than_int16_is_refused() -> None:
    with pytest.raises(InvalidOffsetCommit):
        encode_key(OffsetCommitKey("g" * 40_000, "t", 0))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),  # Java: "hello".hashCode()
        ("Aa", 2112),  # the classic collision with "BB"
        ("BB", 2112),
        ("polygenelubricants", -(2**31)),  # hashCode() == Integer.MIN_VALUE
        ("😀", 0xD83D * 31 + 0xDE00),  # two UTF-16 code units
    ],
)
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_the_partition_rule_is_kafkas() -> None:
    """Utils.abs(groupId.hashCode) % 50: MIN_VALUE maps to 0, negative hashes by absolute value."""
    assert partition_for_group("polygenelubricants") == 0
    assert partition_for_group("hello") == 99162322 % 50
    negative = "my-group"
    assert java_string_hash(negative) < 0
    assert partition_for_group(negative) == abs(java_string_hash(negative)) % 50
    assert partition_for_group("hello", 3) == 99162322 % 3
