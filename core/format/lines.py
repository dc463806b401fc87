"""Lines written to the append files as producer batches (spec §3, §4): pure functions, any thread.

* :func:`encode_text_batches` (``append``: one record per line, null key) and :func:`encode_record_batches` (records
  from ``append.jsonl``) cut records into batches no larger than a limit (Kafka's max.message.bytes), every batch
  encoded before anything is appended, so that a record too large for any batch refuses the whole write
  (RecordTooLarge → EFBIG) with nothing stored.
* :func:`parse_json_record` reads one ``append.jsonl`` line (spec §4): ``key``, ``value``, ``headers``,
  ``timestamp``, ``partition`` and the ``…Encoding`` fields; anything malformed raises InvalidJsonRecord (EINVAL in
  ``mount/errno.py``). :func:`parse_json_lines` reads a write's lines, naming the bad line.

Cutting a byte stream into lines across write requests is the mount's (``mount/framing.py``): it depends on how the
kernel splits a write(2), these functions only on the lines.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from logfs.core.errors import InvalidJsonRecord, RecordTooLarge
from logfs.core.format.batch import RECORD_BATCH_OVERHEAD, Header, Record
from logfs.core.format.encode import encode_batch, encode_values

# The most a record's framing adds to its key, value and headers in a v2 batch: attributes (1), timestampDelta
# (≤ 10), offsetDelta (≤ 5), key and value lengths (≤ 5 each), header count (≤ 5), the record's length varint (≤ 5).
# An upper bound, so a chunk cut by it never exceeds its limit; per header: two lengths (≤ 5 each).
RECORD_FRAMING_BYTES_MAX = 36
HEADER_FRAMING_BYTES_MAX = 10


# --- batches --------------------------------------------------------------------------------------------------------


def encode_text_batches(values: Sequence[bytes], timestamp: int, max_batch_bytes: int) -> list[bytes]:
    """``values`` (null keys, one timestamp) as batches of at most ``max_batch_bytes`` each, in order.

    RecordTooLarge when one value alone cannot fit; then nothing is returned (the caller stores nothing). The cut
    points come from prefix sums of the lengths (itertools.accumulate and bisect, in C), not a Python loop per
    record: a 1 MiB write of 100-byte lines is ~10,000 records.
    """
    budget = max_batch_bytes - RECORD_BATCH_OVERHEAD
    n = len(values)
    lengths = [0, *itertools.accumulate(map(len, values))]  # lengths[i]: bytes of values [0, i)
    per = RECORD_FRAMING_BYTES_MAX
    if lengths[-1] + n * per <= budget:
        return [_checked(encode_values(values, timestamp), max_batch_bytes)]
    positions = range(n + 1)
    batches: list[bytes] = []
    start = 0
    while start < n:
        target = lengths[start] + start * per + budget  # the cost of records [0, i) is lengths[i] + i * per
        stop = bisect.bisect_right(positions, target, lo=start + 1, key=lambda i: lengths[i] + i * per) - 1
        stop = max(stop, start + 1)  # one record always goes; _checked refuses it if it is too large
        batches.append(_checked(encode_values(values[start:stop], timestamp), max_batch_bytes))
        start = stop
    return batches


def encode_record_batches(records: Sequence[Record], max_batch_bytes: int) -> list[bytes]:
    """Records (offsets ignored; renumbered from 0 per batch) as producer batches of at most ``max_batch_bytes``."""
    batches: list[bytes] = []
    budget = max_batch_bytes - RECORD_BATCH_OVERHEAD
    chunk: list[Record] = []
    used = 0
    for record in records:
        cost = _record_cost(record)
        if used + cost > budget and chunk:
            batches.append(_encode_chunk(chunk, max_batch_bytes))
            chunk, used = [], 0
        chunk.append(record)
        used += cost
    if chunk:
        batches.append(_encode_chunk(chunk, max_batch_bytes))
    return batches


def _record_cost(record: Record) -> int:
    cost = RECORD_FRAMING_BYTES_MAX + len(record.key or b"") + len(record.value or b"")
    for h in record.headers:
        cost += HEADER_FRAMING_BYTES_MAX + len(h.key.encode()) + len(h.value or b"")
    return cost


def _encode_chunk(chunk: Sequence[Record], max_batch_bytes: int) -> bytes:
    renumbered = [Record(i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(chunk)]
    # baseTimestamp is the first record's: later records may be older (a negative delta is valid in Kafka's format).
    return _checked(encode_batch(renumbered), max_batch_bytes)


def _checked(batch: bytes, max_batch_bytes: int) -> bytes:
    if len(batch) > max_batch_bytes:
        raise RecordTooLarge(len(batch), max_batch_bytes)
    return batch


# --- JSON lines -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JsonRecord:
    """One parsed ``append.jsonl`` line: the record (offset 0) and the partition it names, if any."""

    record: Record
    partition: int | None


def parse_json_record(line: bytes, now_ms: int) -> JsonRecord:
    """One ``append.jsonl`` line as a record (spec §4). InvalidJsonRecord for anything malformed.

    ``topic``, ``offset`` and ``timestampType`` are ignored; ``timestamp`` absent or null means ``now_ms``.
    """
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError) as exc:
        raise InvalidJsonRecord(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise InvalidJsonRecord(f"a record is a JSON object, not {type(obj).__name__}")
    key = _payload(obj, "key", "keyEncoding")
    value = _payload(obj, "value", "valueEncoding")
    timestamp = obj.get("timestamp")
    if timestamp is None:
        timestamp = now_ms
    elif not _is_int(timestamp) or timestamp < 0:
        raise InvalidJsonRecord(f"timestamp must be a non-negative integer (ms), not {timestamp!r}")
    partition = obj.get("partition")
    if partition is not None and (not _is_int(partition) or partition < 0):
        raise InvalidJsonRecord(f"partition must be a non-negative integer, not {partition!r}")
    headers = _headers(obj.get("headers"))
    return JsonRecord(Record(0, timestamp, key, value, headers), partition)


def parse_json_lines(lines: Sequence[bytes], now_ms: int) -> list[JsonRecord]:
    """Every non-blank line of one write as a record; InvalidJsonRecord (so nothing of the write is stored) for any
    bad one, naming its line."""
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(parse_json_record(line, now_ms))
        except InvalidJsonRecord as exc:
            raise InvalidJsonRecord(f"line {number} of the write: {exc}") from None
    return records


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _payload(obj: dict[str, Any], field: str, encoding_field: str) -> bytes | None:
    """A key or value: a string (UTF-8, or base64 with its encoding field), null, or other JSON as compact text."""
    raw = obj.get(field)
    encoding = obj.get(encoding_field)
    if encoding is not None and encoding != "base64":
        raise InvalidJsonRecord(f'{encoding_field} must be "base64", not {encoding!r}')
    if raw is None:
        return None
    if encoding == "base64":
        if not isinstance(raw, str):
            raise InvalidJsonRecord(f"{field} with {encoding_field} base64 must be a string")
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidJsonRecord(f"{field} is not valid base64") from None
    if isinstance(raw, str):
        return _utf8(raw, field)
    return _utf8(json.dumps(raw, separators=(",", ":"), ensure_ascii=False), field)


def _utf8(text: str, field: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a \ud800 escape
        raise InvalidJsonRecord(f"{field} is not encodable as UTF-8 (a lone surrogate)") from None


def _headers(raw: Any) -> tuple[Header, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise InvalidJsonRecord("headers must be a list of {key, value} objects")
    headers = []
    for h in raw:
        if not isinstance(h, dict) or not isinstance(h.get("key"), str):
            raise InvalidJsonRecord("each header is an object with a string key")
        value = _payload(h, "value", "valueEncoding")
        _utf8(h["key"], "header key")
        headers.append(Header(h["key"], value))
    return tuple(headers)
