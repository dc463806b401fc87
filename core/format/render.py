"""The two text renderings of stored batches that readers see (docs/mount.md, "Reads"): plain values and JSON lines.

Both are pure functions of a batch's bytes, so the bytes of a given offset range never change and a reader may
compute the size of a rendering once and cache it. Control batches (transaction markers) render as nothing.

* Plain: each record's value followed by ``\\n``; a null value is an empty line.
* JSON lines: one compact object per record, keys in the spec's order (``topic, partition, offset, timestamp,
  timestampType, key[, keyEncoding], value[, valueEncoding], headers``); text that is valid UTF-8 is written as is
  (not ``\\u``-escaped), anything else as base64 with ``"…Encoding":"base64"`` after it.

Records before ``from_offset`` are left out, so a rendering starts exactly at the offset asked for even when it
falls inside a batch. Any thread may call these functions.

:func:`render_plain` and :func:`render_jsonl` render one batch with a loop over its records: the reference.
:mod:`logfs.core.format.renderstored` renders every batch of a buffer read from a ``.log`` at once, vectorised with
numpy, for the mount's readers, and is held to these functions by its tests.
"""

from __future__ import annotations

import base64
import bisect
from json.encoder import encode_basestring  # the C string encoder that leaves non-ASCII as is

from logfs.core.format.batch import BatchHeader, TimestampType
from logfs.core.format.columns import RecordColumns
from logfs.core.format.decode import record_columns


def render_plain(buf: bytes | bytearray | memoryview, position: int = 0, from_offset: int = -1) -> bytes:
    """The plain rendering of the batch at ``position``: values one per line."""
    header, cols = record_columns(buf, position)
    return plain_from_columns(header, cols, from_offset)


def plain_from_columns(header: BatchHeader, cols: RecordColumns, from_offset: int = -1) -> bytes:
    if header.is_control or not len(cols):
        return b""
    first = first_index(header, cols, from_offset)
    data = cols.data
    starts, ends = cols.value_spans(first)
    values = [data[a:b] for a, b in zip(starts, ends, strict=True)]
    if not values:
        return b""
    values.append(b"")
    return b"\n".join(values)


def render_jsonl(
    buf: bytes | bytearray | memoryview, topic: str, partition: int, position: int = 0, from_offset: int = -1
) -> bytes:
    """The JSON-lines rendering of the batch at ``position``."""
    header, cols = record_columns(buf, position)
    return jsonl_from_columns(header, cols, topic, partition, from_offset)


def jsonl_from_columns(
    header: BatchHeader, cols: RecordColumns, topic: str, partition: int, from_offset: int = -1
) -> bytes:
    if header.is_control or not len(cols):
        return b""
    first = first_index(header, cols, from_offset)
    cols = cols.lists()
    data = cols.data
    log_append = header.timestamp_type == TimestampType.LOG_APPEND_TIME
    prefix = '{"topic":' + encode_basestring(topic) + ',"partition":' + str(partition) + ',"offset":'
    ts_type = ',"timestampType":' + ("1" if log_append else "0")
    lines = []
    for i in range(first, len(cols)):
        ts = header.max_timestamp if log_append else header.base_timestamp + cols.timestamp_delta[i]
        kp, kn = cols.key_position[i], cols.key_length[i]
        vp, vn = cols.value_position[i], cols.value_length[i]
        hdrs = cols.headers[i]
        lines.append(
            prefix
            + str(header.base_offset + cols.offset_delta[i])
            + ',"timestamp":'
            + str(ts)
            + ts_type
            + ',"key":'
            + json_bytes(None if kn < 0 else data[kp : kp + kn], "key")
            + ',"value":'
            + json_bytes(None if vn < 0 else data[vp : vp + vn], "value")
            + ',"headers":['
            + (",".join(json_header(k, v) for k, v in hdrs) if hdrs else "")
            + "]}\n"
        )
    return "".join(lines).encode("utf-8")


def json_bytes(raw: bytes | bytearray | None, field: str) -> str:
    """The JSON value of a key or value, with its ``…Encoding`` member when it is not UTF-8 text."""
    if raw is None:
        return "null"
    try:
        return encode_basestring(bytes(raw).decode("utf-8"))
    except UnicodeDecodeError:
        return '"' + base64.b64encode(raw).decode("ascii") + '","' + field + 'Encoding":"base64"'


def json_header(key: str, value: bytes | None) -> str:
    return '{"key":' + encode_basestring(key) + ',"value":' + json_bytes(value, "value") + "}"


def first_index(header: BatchHeader, cols: RecordColumns, from_offset: int) -> int:
    """Index of the first record at or after ``from_offset`` (offset deltas ascend, so a bisection)."""
    delta = from_offset - header.base_offset
    if delta <= 0:
        return 0
    return int(bisect.bisect_left(cols.offset_delta, delta))
