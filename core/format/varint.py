"""Kafka's record-level integers: zigzag varints (int32) and varlongs (int64), protobuf style.

A value ``n`` is first zigzagged, ``zz(n) = (n << 1) ^ (n >> 63)``, so small magnitudes of either sign stay small,
then written seven bits at a time, least significant group first, with the high bit of each byte set while more
bytes follow (Kafka's ``ByteUtils.writeVarint`` / ``readVarint``)::

    0 -> 00     -1 -> 01     1 -> 02     63 -> 7e     -64 -> 7f     64 -> 80 01     300 -> d8 04

The record codec is the hot path of logfs (every append and every read walks it), so the common case is a table
lookup rather than a loop: ``VARINT[n]`` holds the encoding of every ``0 <= n < VARINT_TABLE_SIZE`` and
``NEG_ONE`` the encoding of -1 (null lengths). Measured on the development machine, a table lookup is ~30 ns where
the loop in :func:`encode_varint` is ~400 ns.

Decoding is done inline by the batch walker for speed; :func:`decode_varint` is the reference implementation, used
where speed does not matter and by the tests.
"""

from __future__ import annotations

# A varint (int32) is at most 5 bytes; a varlong (int64) at most 10.
VARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# Covers every record length, offset delta and key/value length of a 1 MiB batch of small records, and every
# length below 64 KiB; larger values take the loop.
VARINT_TABLE_SIZE = 1 << 16  # _varint_table's formulas assume it


def zigzag(n: int) -> int:
    """Map a signed 64-bit integer onto an unsigned one so small magnitudes stay small."""
    return (n << 1) ^ (n >> 63)


def unzigzag(v: int) -> int:
    """Inverse of :func:`zigzag`."""
    return (v >> 1) ^ -(v & 1)


def encode_varint(n: int) -> bytes:
    """The zigzag varint encoding of ``n`` (valid for int32 and int64 alike)."""
    if not INT64_MIN <= n <= INT64_MAX:
        raise ValueError(f"{n} does not fit a varlong")
    return encode_unsigned_varint(zigzag(n) & 0xFFFFFFFFFFFFFFFF)


def encode_unsigned_varint(v: int) -> bytes:
    """Seven bits of ``v >= 0`` per byte, least significant first, without the zigzag (the message schemas'
    unsigned varint: core/format/fields.py)."""
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _varint_table() -> tuple[bytes, ...]:
    """``VARINT``: the zigzag encodings of 0 … 2**16 - 1 are one byte below 64, two below 8192, three above, built
    by those formulas: half the import time of calling :func:`encode_varint` 65,536 times, which every mount paid
    at start (~40 ms of its ~0.45 s). tests/core/format/test_batch_vectors.py holds the table to kafka-python's
    encoding."""
    one = [bytes((n << 1,)) for n in range(64)]
    two = [bytes((((n << 1) & 0x7F) | 0x80, n >> 6)) for n in range(64, 8192)]
    three = [bytes((((n << 1) & 0x7F) | 0x80, ((n >> 6) & 0x7F) | 0x80, n >> 13)) for n in range(8192, 1 << 16)]
    return tuple(one + two + three)


VARINT: tuple[bytes, ...] = _varint_table()
NEG_ONE = encode_varint(-1)

assert VARINT[0] == b"\x00" and NEG_ONE == b"\x01" and VARINT[64] == b"\x80\x01" and VARINT[300] == b"\xd8\x04"


def varint(n: int) -> bytes:
    """Encoding of ``n``, from the table when it is small and non-negative."""
    if 0 <= n < VARINT_TABLE_SIZE:
        return VARINT[n]
    return encode_varint(n)


def size_of_varint(n: int) -> int:
    """Number of bytes :func:`encode_varint` uses for ``n``."""
    v = zigzag(n) & 0xFFFFFFFFFFFFFFFF
    size = 1
    while v >= 0x80:
        v >>= 7
        size += 1
    return size


def decode_varint(buf: bytes | bytearray | memoryview, pos: int, max_bytes: int = VARLONG_MAX_BYTES) -> tuple[int, int]:
    """Decode one varint at ``pos``: returns ``(value, next position)``.

    Raises ValueError when the buffer ends inside the varint or it runs over ``max_bytes`` bytes; callers turn
    that into the typed error of their context.
    """
    shift = 0
    value = 0
    for i in range(max_bytes):
        if pos + i >= len(buf):
            raise ValueError("buffer ends inside a varint")
        b = buf[pos + i]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return unzigzag(value), pos + i + 1
        shift += 7
    raise ValueError(f"varint longer than {max_bytes} bytes")
