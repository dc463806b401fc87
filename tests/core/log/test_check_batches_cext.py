"""A request's producer batches checked by the compiled helper (``core/cext/clientcheck.c`` through
``appendcheck.check_leader_request``) give what the reference (``check_leader_batch`` per batch, ``LOGFS_NO_CEXT``'s
path) gives, on valid and damaged batches, uncompressed or compressed with every codec (damaged compressed payloads
included): the same checked batches, or the same error (type and message) after the same batches; and a batch the
helper says needs no stamp is one ``set_max_timestamp`` leaves as it is.

The extension must be built here (the import of ``logfs.core.cext._helpers`` fails the file otherwise); the
compiled side is used whatever ``LOGFS_NO_CEXT`` says. Damage is drawn from a seed that hypothesis prints with any
failure.
"""

from __future__ import annotations

import random
from typing import Any

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logfs.core.cext import _helpers  # noqa: F401  (fails the file when the extension is not built)
from logfs.core.config import LogConfig
from logfs.core.errors import CorruptRecord, InvalidRecord
from logfs.core.format import compression, validate
from logfs.core.format.batch import Header, Record, TimestampType, set_max_timestamp
from logfs.core.format.compression import Compression
from logfs.core.format.encode import encode_batch
from logfs.core.log.appendcheck import check_leader_request

NOW = 1_700_000_000_000
SETTINGS: dict[str, Any] = {
    "derandomize": True,
    "database": None,
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


def a_batch(rng: random.Random) -> bytes:
    """A producer batch of 1-30 records with keys, headers, timestamps around NOW; now and then compressed, an
    idempotent or transactional producer's, LOG_APPEND_TIME, or with a wrong maxTimestamp in its header."""
    n = rng.randint(1, 30)
    records = [
        Record(j, NOW - rng.randint(-2_000, 5_000), rng.randbytes(rng.randint(0, 32)) if rng.random() < 0.9 else None,
               rng.randbytes(rng.randint(0, 1_500)), tuple(Header(f"h{k}", b"v") for k in range(rng.randint(0, 2))))
        for j in range(n)
    ]  # fmt: skip
    kind = rng.random()
    extra: dict[str, Any] = {}
    if kind < 0.1:
        extra = {"producer_id": 7, "producer_epoch": 0, "base_sequence": 0}
    elif kind < 0.15:
        extra = {"producer_id": 8, "producer_epoch": 3, "base_sequence": 40, "is_transactional": True}
    elif kind < 0.2:
        extra = {"timestamp_type": TimestampType.LOG_APPEND_TIME, "max_timestamp": NOW}
    elif kind < 0.3:
        extra = {"max_timestamp": NOW - 99_999}  # the leader corrects it: a stamp is needed
    codec = Compression.NONE if rng.random() < 0.5 else rng.choice(list(Compression)[1:])
    return encode_batch(records, compression=codec, **extra)


def with_crc(data: bytearray) -> bytearray:
    """The batch with its CRC made right again, so that what is wrong behind it is what fails."""
    data[17:21] = crc32c.crc32c(bytes(data[21:])).to_bytes(4, "big")
    return data


def damage(batch: bytes, rng: random.Random) -> bytes | bytearray | memoryview:
    """One fault of many kinds (or none), and now and then a buffer the leader must copy."""
    data = bytearray(batch)
    kind = rng.randrange(13)
    if kind == 1:
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)  # a bit anywhere: CRC, header or record
    elif kind == 2:
        del data[rng.randrange(61, len(data)) :]  # truncated records
    elif kind == 3:  # a header field rewritten with the CRC kept right, so that the rule behind it is what fails
        field = rng.choice([(0, 8), (23, 4), (57, 4), (21, 2), (43, 8), (16, 1), (8, 4), (51, 2), (53, 4)])
        at, width = field
        data[at : at + width] = rng.randbytes(width)
        with_crc(data)
    elif kind == 4:
        return bytes(data)  # read-only: checked by the reference, stamped in a copy
    elif kind == 5:
        return memoryview(bytearray(data) + b"\0")[:-1]  # a writable view, stamped in place
    elif kind == 6:  # a bit of the (compressed) records, CRC right: the inflate or the walk fails, or not
        data[rng.randrange(61, len(data))] ^= 1 << rng.randrange(8)
        with_crc(data)
    elif kind == 7:  # records cut short, CRC right: a truncated compressed stream
        del data[rng.randrange(61, len(data)) :]
        data[8:12] = (len(data) - 12).to_bytes(4, "big")
        with_crc(data)
    elif kind == 8:  # another codec id than the records were compressed with (5-7: none Kafka defines)
        data[22] = (data[22] & ~0x07) | rng.randrange(8)
        with_crc(data)
    return data


@pytest.mark.parametrize("log_append", [False, True])
@settings(max_examples=300, **SETTINGS)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 12))
def test_the_compiled_check_equals_the_reference(log_append: bool, seed: int, count: int) -> None:
    rng = random.Random(seed)
    config = LogConfig(
        message_timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
        message_timestamp_before_max_ms=rng.choice([2**63 - 1, 3_000]),
        message_timestamp_after_max_ms=rng.choice([2**63 - 1, 1_000]),
        max_message_bytes=rng.choice([1_048_588, 20_000]),
    )
    batches = [damage(a_batch(rng), rng) for _ in range(count)]
    copies = [b if isinstance(b, bytes) else bytearray(b) for b in batches]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(validate, "USE_CEXT", False)
        expected, expected_error = check_leader_request(copies, 0, config, NOW)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(validate, "USE_CEXT", True)  # the compiled path, whatever LOGFS_NO_CEXT says
        got, error = check_leader_request(batches, 0, config, NOW)
    assert (type(error), str(error)) == (type(expected_error), str(expected_error))
    assert [row[1:6] for row in got] == [row[1:6] for row in expected]
    assert [bytes(row[0]) for row in got] == [bytes(row[0]) for row in expected]
    for row in got:
        data, size, _, _, max_ts, _, stamp = row
        if not stamp:  # the helper skips set_max_timestamp: it must be a no-op on that batch
            stamped = bytearray(data)
            ts_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
            set_max_timestamp(stamped, 0, size, ts_type, NOW if log_append else max_ts)
            assert stamped == bytes(data)


@pytest.mark.parametrize("codec", list(Compression)[1:], ids=lambda c: c.name.lower())
def test_the_compiled_check_takes_compressed_batches_whole(codec: Compression, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compressed batches go through the helper too (inflated by compression.decompress, walked in C); a damaged
    payload stops it at that batch, and the reference gives the error."""
    monkeypatch.setattr(validate, "USE_CEXT", True)  # whatever LOGFS_NO_CEXT says
    rng = random.Random(4)
    records = [Record(j, NOW, b"k", rng.randbytes(50) * 4) for j in range(20)]
    batches = [bytearray(encode_batch(records, compression=codec)) for _ in range(4)]
    out: list[Any] = []
    limits: dict[str, Any] = {"max_message_bytes": 1 << 20, "segment_bytes": 1 << 30, "before": 2**63 - 1}
    assert validate.check_plain_batches(batches, 0, out, log_append=False, now=NOW, after=2**63 - 1, **limits) == 4
    assert [row[1:] for row in out] == [(len(b), 19, 20, NOW, -1, False) for b in batches]
    assert all(row[0] is b for row, b in zip(out, batches, strict=True))
    del batches[1][-3:]  # the compressed stream cut short, size and CRC made right
    batches[1][8:12] = (len(batches[1]) - 12).to_bytes(4, "big")
    with_crc(batches[1])
    out.clear()
    assert validate.check_plain_batches(batches, 0, out, log_append=False, now=NOW, after=2**63 - 1, **limits) == 1
    checked, error = check_leader_request(batches, 0, LogConfig(), NOW)
    assert len(checked) == 1
    assert isinstance(error, CorruptRecord | InvalidRecord), error


def test_the_compiled_check_keeps_the_inflate_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch inflating past compression.DECOMPRESSED_MAX_BYTES is refused by the helper too, with the reference's
    error: the bound is decompress's, read when it runs."""
    monkeypatch.setattr(compression, "DECOMPRESSED_MAX_BYTES", 1_000)
    batch = encode_batch([Record(0, NOW, None, bytes(5_000))], compression=Compression.GZIP)
    errors = []
    for compiled in (False, True):
        monkeypatch.setattr(validate, "USE_CEXT", compiled)
        checked, error = check_leader_request([bytearray(batch)], 0, LogConfig(), NOW)
        assert checked == []
        errors.append((type(error), str(error)))
    assert errors[0] == errors[1] == (CorruptRecord, "gzip records inflate past 1000 bytes (batch at byte 0)")


def test_the_compiled_check_takes_a_plain_request_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Uncompressed batches go through the helper in one call, stamping what needs it."""
    monkeypatch.setattr(validate, "USE_CEXT", True)  # whatever LOGFS_NO_CEXT says
    rng = random.Random(3)
    batches = [bytearray(encode_batch([Record(0, NOW, b"k", rng.randbytes(100))])) for _ in range(5)]
    out: list[Any] = []
    took = validate.check_plain_batches(
        batches, 0, out, max_message_bytes=1 << 20, segment_bytes=1 << 30, log_append=False, now=NOW,
        before=2**63 - 1, after=2**63 - 1,
    )  # fmt: skip
    assert took == 5
    assert [row[1:] for row in out] == [(len(b), 0, 1, NOW, -1, False) for b in batches]
    assert all(row[0] is b for row, b in zip(out, batches, strict=True))  # taken over, not copied
    batches[2][70] ^= 0x40  # a record byte: the CRC fails, the helper stops there and says nothing
    out.clear()
    assert validate.check_plain_batches(
        batches, 0, out, max_message_bytes=1 << 20, segment_bytes=1 << 30, log_append=False, now=NOW,
        before=2**63 - 1, after=2**63 - 1,
    ) == 2  # fmt: skip


def test_the_compiled_check_takes_idempotent_and_transactional_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches with a producer id (Kafka clients are idempotent by default) go through the helper too, with their
    producer id in the row for the Log's producer rules; a negative base sequence stops it at that batch, and the
    reference gives the error."""
    monkeypatch.setattr(validate, "USE_CEXT", True)  # whatever LOGFS_NO_CEXT says
    batches = [
        bytearray(encode_batch([Record(0, NOW, b"k", b"v%d" % i)], producer_id=5 + i % 2, producer_epoch=1,
                               base_sequence=i, is_transactional=i % 2 == 1))
        for i in range(4)
    ]  # fmt: skip
    limits: dict[str, Any] = {"max_message_bytes": 1 << 20, "segment_bytes": 1 << 30, "before": 2**63 - 1}
    out: list[Any] = []
    assert validate.check_plain_batches(batches, 0, out, log_append=False, now=NOW, after=2**63 - 1, **limits) == 4
    assert [row[5] for row in out] == [5, 6, 5, 6]
    batches[2][53:57] = (-3).to_bytes(4, "big", signed=True)
    with_crc(batches[2])
    out.clear()
    assert validate.check_plain_batches(batches, 0, out, log_append=False, now=NOW, after=2**63 - 1, **limits) == 2
    checked, error = check_leader_request(batches, 0, LogConfig(), NOW)
    assert len(checked) == 2 and isinstance(error, InvalidRecord) and "invalid epoch 1 or sequence -3" in str(error)
