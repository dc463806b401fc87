"""The five codecs Kafka allows for a RecordBatch's records, byte-compatible with Kafka's Java client.

The compression id lives in the low three bits of the batch attributes (Kafka's ``DefaultRecordBatch``). Everything
after the 61-byte batch header is compressed as one blob:

=====  ======  ===============================================================================================
id     name    framing Kafka writes (and we write), and what we accept on read
=====  ======  ===============================================================================================
0      none    the records as they are
1      gzip    an RFC 1952 gzip member (``java.util.zip.GZIPOutputStream``)
2      snappy  snappy-java's stream framing: ``82 'SNAPPY' 00``, int32 version 1, int32 compatible 1, then
               blocks of int32 big-endian length + raw snappy block. On read a buffer without that magic is
               taken as one raw snappy block, as snappy-java's ``SnappyInputStream`` does.
3      lz4     an LZ4 frame as ``KafkaLZ4BlockOutputStream`` writes it: FLG 0x60 (version 01, independent
               blocks, no checksums, no content size), BD 0x40 (64 KiB blocks), header checksum 0x82. On read
               any valid LZ4 frame is accepted.
4      zstd    a zstd frame
=====  ======  ===============================================================================================

cramjam provides the primitives (one wheel, no system libraries); the frames Kafka pins down (snappy-java's
stream and Kafka's LZ4 frame) are assembled here so the bytes match what Java clients read. kafka-python's codecs
(python-snappy, lz4, zstandard) are the independent oracle in the tests, both ways.

The zstd inflate takes python-zstandard first when it is importable (a runtime dependency; cramjam stays the
fallback and the reference): a reused per-thread ``ZstdDecompressor`` inflates a single frame that declares its
content size in 11-13 us against cramjam's 20-25 us (a realistic 16 KiB batch, issue 14). It answers only when
it can answer alone and exactly as cramjam would (see :func:`_zstandard_one_frame`); anything else goes to cramjam,
so what is accepted, the bound and every message stay cramjam's. LZ4 stays on cramjam: python-lz4's frame
decompress (4.4 us against 6.8 us) has no output bound, and its bounded decompressor object costs 22 us.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable
from enum import IntEnum
from typing import Any

import cramjam
import numpy as np

try:
    import zstandard as _zstandard
except ImportError:  # a wheel installed without it: cramjam inflates zstd alone
    _zstandard = None  # type: ignore[assignment]

from logfs.core.errors import CorruptRecord, UnsupportedCompression


class Compression(IntEnum):
    """Kafka's compression ids (``CompressionType``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


SNAPPY_MAGIC = b"\x82SNAPPY\x00"
_SNAPPY_HEADER = SNAPPY_MAGIC + struct.pack(">ii", 1, 1)
SNAPPY_BLOCK_BYTES = 32 * 1024  # snappy-java's default block size

LZ4_MAGIC = b"\x04\x22\x4d\x18"
# FLG 0x60 = version 01 + block independence; BD 0x40 = 64 KiB max block; HC = (xxh32(FLG BD) >> 8) & 0xff.
_LZ4_FRAME_HEADER = LZ4_MAGIC + b"\x60\x40\x82"
LZ4_BLOCK_BYTES = 64 * 1024
_LZ4_END_MARK = b"\x00\x00\x00\x00"
_LZ4_UNCOMPRESSED_BIT = 0x80000000

# Bound on what one batch may inflate to: Kafka has no explicit bound, but a decompression bomb must not take the
# daemon's memory. 64 MiB is 64x the default max.message.bytes.
DECOMPRESSED_MAX_BYTES = 64 * 1024 * 1024


def compress(codec: int, data: bytes) -> bytes:
    """Compress a batch's records section with ``codec``, in the framing Kafka writes."""
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        c = zlib.compressobj(6, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == Compression.SNAPPY:
        parts = [_SNAPPY_HEADER]
        for start in range(0, len(data), SNAPPY_BLOCK_BYTES):
            block = bytes(cramjam.snappy.compress_raw(data[start : start + SNAPPY_BLOCK_BYTES]))
            parts.append(struct.pack(">i", len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == Compression.LZ4:
        parts = [_LZ4_FRAME_HEADER]
        for start in range(0, len(data), LZ4_BLOCK_BYTES):
            chunk = data[start : start + LZ4_BLOCK_BYTES]
            block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
            if len(block) >= len(chunk):  # incompressible: store it raw, as the reference encoder does
                parts.append(struct.pack("<I", len(chunk) | _LZ4_UNCOMPRESSED_BIT))
                parts.append(chunk)
            else:
                parts.append(struct.pack("<I", len(block)))
                parts.append(block)
        parts.append(_LZ4_END_MARK)
        return b"".join(parts)
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise UnsupportedCompression(f"compression id {codec} is not one Kafka defines (0-4)")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """Inflate a batch's records section; damage raises CorruptRecord, an unknown id UnsupportedCompression."""
    if codec == Compression.NONE:
        return bytes(data)
    try:
        if codec == Compression.GZIP:
            d = zlib.decompressobj(31)
            out = d.decompress(data, DECOMPRESSED_MAX_BYTES)
            if d.unconsumed_tail:
                raise CorruptRecord(f"gzip records inflate past {DECOMPRESSED_MAX_BYTES} bytes")
            if not d.eof:
                raise CorruptRecord("gzip stream is truncated")
            return out
        if codec == Compression.SNAPPY:
            return _snappy_decompress(bytes(data))
        if codec == Compression.LZ4:
            return _bounded(cramjam.lz4.decompress_into, bytes(data))
        if codec == Compression.ZSTD:
            data = bytes(data)
            return _zstandard_one_frame(data) or _bounded(cramjam.zstd.decompress_into, data)
        raise UnsupportedCompression(f"compression id {codec} is not one Kafka defines (0-4)")
    except (zlib.error, cramjam.DecompressionError, ValueError, struct.error) as exc:
        name = Compression(codec).name.lower() if codec in Compression.__members__.values() else str(codec)
        raise CorruptRecord(
            f"{name} records do not decompress (damaged, or inflating past {DECOMPRESSED_MAX_BYTES} bytes): {exc}"
        ) from None


DECOMPRESS_BUFFER_START_BYTES = 1 << 20  # a thread's first inflate buffer; grown 4x at a time up to the bound

_buffers = threading.local()


def _bounded(decompress_into: Callable[[Any, Any], int], data: bytes) -> bytes:
    """Inflate into a reused per-thread buffer of at most DECOMPRESSED_MAX_BYTES, so a decompression bomb fails
    instead of taking memory.

    cramjam refuses (DecompressionError) an output that does not fit; the buffer then grows 4x and the inflate is
    retried, up to the bound, where the refusal stands. A fresh 64 MiB ``np.empty`` per call, as before, cost an mmap,
    an munmap and a page fault per 4 KiB of output: 42 us of a 16 KiB zstd batch against 21 us for the inflate alone.
    Any thread (each has its own buffer).
    """
    out = getattr(_buffers, "out", None)
    if out is None:
        out = _buffers.out = np.empty(DECOMPRESS_BUFFER_START_BYTES, dtype=np.uint8)
    while True:
        try:
            written = decompress_into(data, out)
        except cramjam.DecompressionError:
            if len(out) >= DECOMPRESSED_MAX_BYTES:
                raise
            out = _buffers.out = np.empty(min(len(out) * 4, DECOMPRESSED_MAX_BYTES), dtype=np.uint8)
            continue
        return out[:written].tobytes()


def _zstandard_one_frame(data: bytes) -> bytes | None:
    """The records of a zstd section that is exactly one frame declaring its content size (at most the bound),
    inflated by python-zstandard; None when zstandard is not installed or cannot answer alone, and cramjam decides.

    None (never an error) for: no declared size (Java's ``ZstdOutputStream`` streams frames without one), a declared
    size over DECOMPRESSED_MAX_BYTES, an unreadable header, and any zstandard error (damage, a size that lies, a
    second frame or trailing bytes: ``allow_extra_data=False``). What zstandard returns is then the one frame's
    content of the declared length, which is also what cramjam returns for these bytes; so acceptance, the bound and
    the error messages are cramjam's. b"" (a frame of no records) is falsy and goes to cramjam too, harmlessly.
    The decompressor is per thread (python-zstandard's are not thread-safe) and reused, as its context is the cost.
    """
    if _zstandard is None:
        return None
    try:
        size = _zstandard.frame_content_size(data)
        if size < 0 or size > DECOMPRESSED_MAX_BYTES:
            return None
        dctx = getattr(_buffers, "zstd", None)
        if dctx is None:
            dctx = _buffers.zstd = _zstandard.ZstdDecompressor()
        return dctx.decompress(data, allow_extra_data=False)
    except _zstandard.ZstdError:
        return None


def _snappy_raw(block: bytes) -> bytes:
    """One raw snappy block, refused before inflating when its length preamble is over the bound."""
    if cramjam.snappy.decompress_raw_len(block) > DECOMPRESSED_MAX_BYTES:
        raise CorruptRecord(f"a snappy block declares more than {DECOMPRESSED_MAX_BYTES} bytes")
    return bytes(cramjam.snappy.decompress_raw(block))


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(SNAPPY_MAGIC):
        return _snappy_raw(data)
    pos = len(_SNAPPY_HEADER)
    if len(data) < pos:
        raise CorruptRecord("snappy stream header is truncated")
    parts = []
    total = 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise CorruptRecord("snappy block length is truncated")
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise CorruptRecord(f"snappy block of {size} bytes runs past the records")
        block = _snappy_raw(data[pos : pos + size])
        total += len(block)
        if total > DECOMPRESSED_MAX_BYTES:
            raise CorruptRecord(f"snappy records inflate past {DECOMPRESSED_MAX_BYTES} bytes")
        parts.append(block)
        pos += size
    return b"".join(parts)
