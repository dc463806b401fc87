"""Kafka's message-schema field encodings: how the classes Kafka generates from its ``common/message`` JSON schemas
write a key or a value of its internal topics (``__consumer_offsets``, ``__transaction_state``).

Every integer is big-endian and fixed-size (int8, int16, int32, int64). A schema version is either *classic* or
*flexible* (``flexibleVersions``)::

    classic    string   int16 byte length, then UTF-8            (-1: null, where nullable)
               array    int32 element count, then the elements   (-1: null)
    flexible   string   unsigned varint of length + 1, then UTF-8 (0: null)
               array    unsigned varint of count + 1, then the elements (0: null)
               every struct (the top level too) ends with its tagged fields: an unsigned varint count, then per
               field, in ascending tag order, unsigned varint tag, unsigned varint size, the field's bytes

An unsigned varint is seven bits per byte, least significant group first, high bit set while more bytes follow
(Kafka's ``ByteUtils.writeUnsignedVarint``), without the zigzag of record-level varints (core/format/varint.py):
``0 -> 00``, ``1 -> 01``, ``127 -> 7f``, ``128 -> 80 01``, ``300 -> ac 02``. A reader skips tags it does not know,
which is what lets a newer writer add fields without a new version.

Kept apart from the record-batch codec: these are the payloads *inside* a record's key and value, read rarely (a
coordinator loading its partition), where clarity beats speed. Pure functions and a cursor; any thread.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping

from logfs.core.format.varint import encode_unsigned_varint

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")
U32 = struct.Struct(">I")  # not Kafka's: logfs's own tagged fields (a uid or gid)
STRING_BYTES_MAX = 0x7FFF  # a classic string's int16 length
UVARINT_MAX_BYTES = 5  # an unsigned int32


def uvarint(n: int) -> bytes:
    """The unsigned varint of ``0 <= n < 2**32``."""
    if not 0 <= n < 1 << 32:
        raise ValueError(f"{n} does not fit an unsigned varint")
    return encode_unsigned_varint(n)


def string(text: str, error: Callable[[str], Exception]) -> bytes:
    """A classic string; ``error`` (the caller's typed error) when its UTF-8 does not fit an int16 length."""
    data = text.encode("utf-8")
    if len(data) > STRING_BYTES_MAX:
        raise error(f"a string of {len(data)} bytes does not fit Kafka's int16 length")
    return I16.pack(len(data)) + data


def compact_string(text: str) -> bytes:
    data = text.encode("utf-8")
    return uvarint(len(data) + 1) + data


def tagged_fields(fields: Mapping[int, bytes]) -> bytes:
    """A struct's tagged-field section: ``fields`` (tag → the field's bytes) in ascending tag order."""
    out = bytearray(uvarint(len(fields)))
    for tag in sorted(fields):
        out += uvarint(tag) + uvarint(len(fields[tag])) + fields[tag]
    return bytes(out)


class FieldReader:
    """A cursor over one key or value: every read past the end, or of a malformed length, raises ``error`` (the
    caller's typed error) with a message naming ``what`` is read."""

    def __init__(self, data: bytes, what: str, error: Callable[[str], Exception]) -> None:
        self.data = data
        self.position = 0
        self.what = what
        self.error = error

    def fail(self, why: str) -> Exception:
        return self.error(f"{self.what} {why}")

    def take(self, fmt: struct.Struct) -> int:
        if self.position + fmt.size > len(self.data):
            raise self.fail(f"ends at byte {len(self.data)} inside a field")
        (number,) = fmt.unpack_from(self.data, self.position)
        self.position += fmt.size
        return int(number)

    def uvarint(self) -> int:
        value = 0
        for i in range(UVARINT_MAX_BYTES):
            if self.position >= len(self.data):
                raise self.fail(f"ends at byte {len(self.data)} inside a varint")
            b = self.data[self.position]
            self.position += 1
            value |= (b & 0x7F) << (7 * i)
            if b < 0x80:
                return value
        raise self.fail(f"has a varint longer than {UVARINT_MAX_BYTES} bytes")

    def raw(self, length: int) -> bytes:
        if length < 0 or self.position + length > len(self.data):
            raise self.fail(f"has a field of length {length} past its end")
        out = self.data[self.position : self.position + length]
        self.position += length
        return out

    def string(self) -> str:
        return self.raw(self.take(I16)).decode("utf-8", "replace")

    def compact_string(self) -> str:
        length = self.uvarint() - 1
        if length < 0:
            raise self.fail("has a null string where one is required")
        return self.raw(length).decode("utf-8", "replace")

    def array_length(self) -> int | None:
        """A classic array's element count; None for a null array."""
        count = self.take(I32)
        return None if count == -1 else self._count(count)

    def compact_array_length(self) -> int | None:
        """A flexible array's element count; None for a null array."""
        count = self.uvarint() - 1
        return None if count == -1 else self._count(count)

    def _count(self, count: int) -> int:
        if count < 0 or count > len(self.data) - self.position:  # every element takes a byte at least
            raise self.fail(f"has an array of {count} elements past its end")
        return count

    def tagged_fields(self) -> dict[int, bytes]:
        """A struct's tagged fields, tag → bytes; a tag out of ascending order or repeated is malformed (stricter
        than Kafka's readers, which take any order: its writers, like logfs's, always sort them)."""
        fields: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            if fields and tag <= max(fields):
                raise self.fail(f"has tagged field {tag} out of ascending order")
            fields[tag] = self.raw(self.uvarint())
        return fields

    def end(self) -> None:
        """Nothing may follow the last field."""
        if self.position != len(self.data):
            raise self.fail(f"has {len(self.data) - self.position} bytes after its last field")
