"""Kafka's transaction-log records (core/txn/records.py) and the schema field encodings under them
(core/format/fields.py): bytes assembled here by hand from Kafka's TransactionLogKey.json / TransactionLogValue.json,
both ways; Kafka's own tagged fields read past; logfs's label and owner tags; committed-label records; every
truncation and malformed length refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logfs.core.checkpoint import TopicPartition
from logfs.core.format.fields import FieldReader, compact_string, tagged_fields, uvarint
from logfs.core.txn.records import (
    LABEL_TAG,
    OWNER_TAG,
    LabelKey,
    TxnKey,
    decode_key,
    decode_label_value,
    decode_txn_value,
    encode_label_key,
    encode_label_value,
    encode_txn_key,
    encode_txn_value,
    partition_for_transactional_id,
)
from logfs.core.txn.state import TxnInfo, TxnState

ONGOING = TxnInfo("t", 5, 1, TxnState.ONGOING, frozenset({TopicPartition("a", 2), TopicPartition("a", 0)}), 9, 60000,
                  10)  # fmt: skip
# Kafka's version-1 layout, field by field
ONGOING_V1 = bytes.fromhex(
    "0001"  # version 1
    "0000000000000005"  # producer id
    "0001"  # producer epoch
    "0000ea60"  # transaction timeout ms: 60000
    "01"  # status: Ongoing
    "02"  # partitions: a compact array of 1 topic (1 + 1)
    "0261"  # topic "a" as a compact string (1 + 1, then the byte)
    "03" "00000000" "00000002"  # its partition ids: a compact array of 2
    "00"  # the topic entry's tagged fields: none
    "000000000000000a"  # last update ms
    "0000000000000009"  # start ms
    "00"  # the value's tagged fields: none
)


def reader(data: bytes) -> FieldReader:
    return FieldReader(data, "a test field", ValueError)


@pytest.mark.parametrize(("n", "encoded"), [(0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"),
                                            (2**32 - 1, "ffffffff0f")])  # fmt: skip
def test_unsigned_varints_are_kafkas_without_the_zigzag(n: int, encoded: str) -> None:
    assert uvarint(n).hex() == encoded
    r = reader(bytes.fromhex(encoded))
    assert r.uvarint() == n
    r.end()


def test_a_varint_out_of_range_or_too_long_is_refused() -> None:
    with pytest.raises(ValueError):
        uvarint(2**32)
    with pytest.raises(ValueError):
        uvarint(-1)
    with pytest.raises(ValueError, match="longer than 5 bytes"):
        reader(bytes.fromhex("ffffffffff01")).uvarint()
    with pytest.raises(ValueError, match="inside a varint"):
        reader(bytes.fromhex("ff")).uvarint()


def test_the_key_and_the_worked_example_value_are_kafkas_bytes() -> None:
    assert encode_txn_key("t").hex() == "0000000174"
    assert decode_key(bytes.fromhex("0000000174")) == TxnKey("t")
    assert encode_txn_value(ONGOING) == ONGOING_V1
    assert decode_txn_value("t", ONGOING_V1) == ONGOING


def test_a_version_0_value_as_an_older_kafka_writes_it_is_read() -> None:
    v0 = bytes.fromhex(
        "0000"  # version 0: classic strings and arrays, no tagged fields
        "0000000000000005" "0001" "0000ea60"
        "02"  # PrepareCommit
        "00000001"  # one topic
        "000161"  # "a": int16 length
        "00000002" "00000000" "00000002"  # two partition ids
        "000000000000000a" "0000000000000009"
    )  # fmt: skip
    info = decode_txn_value("t", v0)
    assert info.state is TxnState.PREPARE_COMMIT
    assert info.partitions == ONGOING.partitions and (info.label, info.owner) == (None, None)
    # a null partition list (Kafka writes one for an Empty transaction): no partitions
    empty = bytes.fromhex("0000" "0000000000000005" "0001" "0000ea60" "00" "ffffffff" "ffffffffffffffff"
                          "ffffffffffffffff")  # fmt: skip
    assert decode_txn_value("t", empty).partitions == frozenset()
    assert decode_txn_value("t", empty).state is TxnState.EMPTY
    empty_v1 = bytes.fromhex("0001" "0000000000000005" "0001" "0000ea60" "00" "00" "ffffffffffffffff"
                             "ffffffffffffffff" "00")  # fmt: skip
    assert decode_txn_value("t", empty_v1).partitions == frozenset()


def test_kafkas_own_tagged_fields_are_read_past_and_logfs_label_and_owner_round_trip() -> None:
    labelled = TxnInfo("job", 7, 3, TxnState.COMPLETE_COMMIT, frozenset(), 1, 2, 3, "q-1/42", (1001, 100))
    encoded = encode_txn_value(labelled)
    assert decode_txn_value("job", encoded) == labelled
    # the same value with Kafka's PreviousProducerId (0), NextProducerId (1) and ClientTransactionVersion (2) and an
    # unknown tag 77 before logfs's: only logfs's are taken
    tags = {0: bytes.fromhex("0000000000000006"), 1: bytes.fromhex("0000000000000008"), 2: bytes.fromhex("0002"),
            77: b"\x01\x02", LABEL_TAG: compact_string("q-1/42"),
            OWNER_TAG: bytes.fromhex("000003e900000064")}  # fmt: skip
    fixed = encode_txn_value(TxnInfo("job", 7, 3, TxnState.COMPLETE_COMMIT, frozenset(), 1, 2, 3))
    with_kafkas = fixed[:-1] + tagged_fields(tags)
    assert decode_txn_value("job", with_kafkas) == labelled
    # logfs's tags by hand: two fields; tag 10000 (904e), 7 bytes, the compact string "q-1/42"; tag 10001 (914e),
    # 8 bytes, uid 1001 and gid 100
    assert encoded == fixed[:-1] + bytes.fromhex("02" "904e" "07" "07712d312f3432" "914e" "08" "000003e900000064")
    big = TxnInfo("job", 7, 3, TxnState.ONGOING, frozenset(), 1, 2, 3, None, (2**32 - 2, 2**31))  # nobody's uid
    assert decode_txn_value("job", encode_txn_value(big)) == big
    with pytest.raises(ValueError, match="not a uid and gid"):
        encode_txn_value(TxnInfo("job", 7, 3, TxnState.ONGOING, frozenset(), 1, 2, 3, None, (2**32, 0)))


def test_tagged_fields_out_of_order_or_repeated_are_refused() -> None:
    fixed = encode_txn_value(ONGOING)[:-1]
    out_of_order = uvarint(2) + uvarint(5) + uvarint(0) + uvarint(3) + uvarint(0)
    with pytest.raises(ValueError, match="out of ascending order"):
        decode_txn_value("t", fixed + out_of_order)
    repeated = uvarint(2) + uvarint(5) + uvarint(0) + uvarint(5) + uvarint(0)
    with pytest.raises(ValueError, match="out of ascending order"):
        decode_txn_value("t", fixed + repeated)


def test_every_truncation_and_a_trailing_byte_are_refused() -> None:
    for encoded in (ONGOING_V1, encode_txn_value(TxnInfo("j", 1, 0, TxnState.ONGOING, frozenset(), 0, 1, 2, "l",
                                                         (5, 6)))):  # fmt: skip
        for cut in range(len(encoded)):
            with pytest.raises(ValueError):
                decode_txn_value("t", encoded[:cut])
        with pytest.raises(ValueError, match="after its last field"):
            decode_txn_value("t", encoded + b"\x00")


@pytest.mark.parametrize(("status", "why"), [(6, "Dead"), (7, "PrepareEpochFence"), (8, "status 8"),
                                             (-1, "status -1")])  # fmt: skip
def test_a_status_never_written_is_refused(status: int, why: str) -> None:
    data = bytearray(ONGOING_V1)
    data[16] = status & 0xFF
    with pytest.raises(ValueError, match=why):
        decode_txn_value("t", bytes(data))


def test_an_unknown_value_version_and_a_huge_array_count_are_refused() -> None:
    with pytest.raises(ValueError, match="version 2"):
        decode_txn_value("t", bytes.fromhex("0002") + ONGOING_V1[2:])
    huge = ONGOING_V1[:17] + uvarint(1_000_000) + ONGOING_V1[18:]
    with pytest.raises(ValueError, match="past its end"):
        decode_txn_value("t", huge)


def test_label_records_use_a_key_version_kafka_skips_and_unknown_keys_are_skipped() -> None:
    key = encode_label_key("q-1/42")
    assert key[:2] == bytes.fromhex("7fff")
    assert decode_key(key) == LabelKey("q-1/42")
    assert decode_label_value(encode_label_value(1_700_000_000_000)) == 1_700_000_000_000
    with pytest.raises(ValueError, match="version 1"):
        decode_label_value(bytes.fromhex("0001") + encode_label_value(5)[2:])
    for version in (1, 2, 100, -1):  # neither Kafka's key nor logfs's: skipped, as Kafka's coordinator does
        assert decode_key(version.to_bytes(2, "big", signed=True) + b"\x00\x01t") is None
    with pytest.raises(ValueError):
        decode_key(bytes.fromhex("000000"))
    with pytest.raises(ValueError, match="after its last field"):
        decode_key(encode_txn_key("t") + b"x")


def test_the_partition_is_kafkas_partition_for() -> None:
    # "test".hashCode() == 3556498 in Java; 3556498 % 50 == 48
    assert partition_for_transactional_id("test") == 48
    assert partition_for_transactional_id("test", 7) == 3556498 % 7


states = st.sampled_from(list(TxnState))
names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40)
partitions = st.frozensets(st.builds(TopicPartition, names, st.integers(0, 2**31 - 1)), max_size=20)
longs = st.integers(-(2**63), 2**63 - 1)


@given(names, st.integers(0, 2**63 - 1), st.integers(-(2**15), 2**15 - 1), states, partitions, longs,
       st.integers(-(2**31), 2**31 - 1), longs, st.none() | names,
       st.none() | st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)))  # fmt: skip
def test_every_state_round_trips(
    tid: str,
    producer_id: int,
    epoch: int,
    state: TxnState,
    parts: frozenset[TopicPartition],
    start: int,
    timeout: int,
    last: int,
    label: str | None,
    owner: tuple[int, int] | None,
) -> None:
    info = TxnInfo(tid, producer_id, epoch, state, parts, start, timeout, last, label, owner)
    assert decode_txn_value(tid, encode_txn_value(info)) == info
    assert decode_key(encode_txn_key(tid)) == TxnKey(tid)
