"""Lines written to the append files as producer batches (docs/mount.md, "Writes"): pure functions, any thread.

* :func:`encode_text_batches` (``append``: one record per line, null key) and :func:`encode_record_batches` (records
  from ``append.jsonl``) cut records into batches no larger than a limit (Kafka's max.message.bytes), every batch
  encoded before anything is appended, so that a record too large for any batch refuses the whole write
  (RecordTooLarge → EFBIG) with nothing stored.
* :func:`parse_json_record` reads one ``append.jsonl`` line (docs/mount.md, "JSON lines in (`append.jsonl`)") with
  orjson: ``key``, ``value``, ``headers``, ``timestamp``, ``partition`` and the ``…Encoding`` fields (the rendering's
  ``topic``, ``offset`` and ``timestampType`` ignored); an unknown field, a key that is not text, anything malformed
  raises InvalidJsonRecord (EINVAL in ``mount/errno.py``) with a reason naming it. :func:`parse_json_lines` reads a
  write's lines, naming the bad line by its number and first bytes.

Cutting a byte stream into lines across write requests is ``core/format/framing.py``'s (one framer per write handle):
it depends on how the kernel splits a write(2), these functions only on the lines.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import itertools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson

from logfs.core.cext import CEXT, USE_CEXT
from logfs.core.errors import InvalidJsonRecord, RecordTooLarge
from logfs.core.format.batch import (
    NO_PARTITION_LEADER_EPOCH,
    RECORD_BATCH_OVERHEAD,
    Header,
    Record,
    assign_offset_and_epoch,
)
from logfs.core.format.encode import encode_batch, encode_values, stamp_values_header
from logfs.core.format.varint import INT64_MAX, size_of_varint

# The most a record's framing adds to its key, value and headers in a v2 batch: attributes (1), timestampDelta
# (≤ 10), offsetDelta (≤ 5), key and value lengths (≤ 5 each), header count (≤ 5), the record's length varint (≤ 5).
# An upper bound, so a chunk cut by it never exceeds its limit; per header: two lengths (≤ 5 each).
RECORD_FRAMING_BYTES_MAX = 36
HEADER_FRAMING_BYTES_MAX = 10


B = TypeVar("B", bytes, bytearray)


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


@dataclass(frozen=True, slots=True)
class LineRun:
    """The complete lines of one write request, unsplit: ``head`` (the partial line kept from earlier requests)
    joined to ``data[:end]``, which ends with a newline (``data[end:]``, the partial line kept for later, holds
    none). Kept as one buffer so that :func:`encode_text_run` can encode the lines without a bytes object per line
    (core/format/framing.py makes it)."""

    head: bytes
    data: bytes
    end: int

    def lines(self) -> list[bytes]:
        """The lines, without their newlines (one split of the request: no slice of it first)."""
        lines = self.data.split(b"\n")
        lines.pop()  # what follows the last newline: not a line of this run
        if self.head:
            lines[0] = self.head + lines[0]
        return lines


def max_text_line_bytes(max_batch_bytes: int) -> int:
    """The longest line ``append`` takes: the largest value whose batch of one record (null key, no headers, deltas
    0) is at most ``max_batch_bytes``. The batch is the 61-byte header, the record's length varint and its body:
    attributes, timestampDelta, offsetDelta, key length -1 and header count (one byte each), the value's length
    varint and the value (at Kafka's default 1048588: lines up to 1,048,516 bytes, 72 bytes of framing)."""
    value = max_batch_bytes - RECORD_BATCH_OVERHEAD - 5
    while value > 0:
        body = 5 + size_of_varint(value) + value
        if RECORD_BATCH_OVERHEAD + size_of_varint(body) + body <= max_batch_bytes:
            return value
        value -= 1
    return 0


def encode_text_run(run: LineRun, timestamp: int, max_batch_bytes: int) -> list[bytes | bytearray]:
    """:func:`encode_text_batches` of ``run.lines()``, byte for byte (same cuts, same records, same RecordTooLarge):
    with the compiled helper (core/cext/textbatches.c) the records sections are written straight from the
    request's buffer, ~2,000 lines of a 1 MiB request without an object each; without it (or LOGFS_NO_CEXT=1), the
    reference."""
    if CEXT is None or not USE_CEXT:
        return list(encode_text_batches(run.lines(), timestamp, max_batch_bytes))
    return encode_text_run_c(run, timestamp, max_batch_bytes)


def encode_text_run_c(run: LineRun, timestamp: int, max_batch_bytes: int) -> list[bytes | bytearray]:
    """:func:`encode_text_run` with the compiled helper, whatever ``LOGFS_NO_CEXT`` says (the equivalence tests call
    it): bytearrays, whose headers are packed in place. The helper must be built."""
    assert CEXT is not None
    sections = CEXT.text_batches(
        run.head, run.data, run.end, max_batch_bytes - RECORD_BATCH_OVERHEAD, RECORD_FRAMING_BYTES_MAX,
        RECORD_BATCH_OVERHEAD,
    )  # fmt: skip
    return [_checked(stamp_values_header(batch, count, timestamp), max_batch_bytes) for batch, count in sections]


def encode_jsonl_lines(lines: Sequence[bytes], now_ms: int, max_batch_bytes: int) -> list[bytes | bytearray]:
    """A partition's ``append.jsonl`` lines as batches, the reference: every line parsed (:func:`parse_json_lines`)
    before any is encoded, so a bad line or a record too large stores nothing."""
    return encode_record_batches([r.record for r in parse_json_lines(lines, now_ms)], max_batch_bytes)


def encode_jsonl_run(run: LineRun, now_ms: int, max_batch_bytes: int) -> list[bytes | bytearray]:
    """:func:`encode_jsonl_lines` of ``run.lines()``, byte for byte: with the compiled helper
    (core/cext/jsonlbatches.c) when every line of the write is ``{"key": string or null, "value": any}`` of the
    JSON it takes (no Python object per line); the reference for any other write, which so decides every refusal."""
    if CEXT is not None and USE_CEXT:
        batches = encode_jsonl_run_c(run, now_ms, max_batch_bytes)
        if batches is not None:
            return batches
    return encode_jsonl_lines(run.lines(), now_ms, max_batch_bytes)


def encode_jsonl_run_c(run: LineRun, now_ms: int, max_batch_bytes: int) -> list[bytes | bytearray] | None:
    """:func:`encode_jsonl_run` with the compiled helper only, whatever ``LOGFS_NO_CEXT`` says (the equivalence tests
    call it): None when a line is not of the shape it takes. The helper must be built."""
    assert CEXT is not None
    sections = CEXT.jsonl_batches(
        run.head, run.data, run.end, max_batch_bytes - RECORD_BATCH_OVERHEAD, RECORD_FRAMING_BYTES_MAX,
        RECORD_BATCH_OVERHEAD,
    )  # fmt: skip
    if sections is None:
        return None
    return [_checked(stamp_values_header(batch, count, now_ms), max_batch_bytes) for batch, count in sections]


def encode_record_batches(records: Sequence[Record], max_batch_bytes: int) -> list[bytes | bytearray]:
    """Records (offsets ignored; renumbered from 0 per batch) as producer batches of at most ``max_batch_bytes``
    (bytearrays where they were stamped: the leader append takes a bytearray over without a copy)."""
    batches: list[bytes | bytearray] = []
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


def _encode_chunk(chunk: Sequence[Record], max_batch_bytes: int) -> bytes | bytearray:
    # baseTimestamp is the first record's: later records may be older (a negative delta is valid in Kafka's format).
    first = chunk[0].offset
    if [r.offset for r in chunk] == list(range(first, first + len(chunk))):  # parse_json_lines numbers them so
        # encoded from the given offsets (no record rebuilt), then baseOffset set back to 0, as a producer sends it
        # (outside the CRC, which starts at the attributes)
        batch = bytearray(encode_batch(chunk, base_offset=first))
        assign_offset_and_epoch(batch, 0, 0, NO_PARTITION_LEADER_EPOCH)
        return _checked(batch, max_batch_bytes)
    renumbered = [Record(i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(chunk)]
    return _checked(encode_batch(renumbered), max_batch_bytes)


def _checked(batch: B, max_batch_bytes: int) -> B:
    if len(batch) > max_batch_bytes:
        raise RecordTooLarge(len(batch), max_batch_bytes)
    return batch


# --- JSON lines -----------------------------------------------------------------------------------------------------

# The fields an ``append.jsonl`` object may carry: the ones read, and the ones a ``.jsonl`` rendering adds, which are
# ignored so that rendered lines can be written back (docs/mount.md, "JSON lines in (`append.jsonl`)"). Anything else (a
# typo such as ``partiton``) refuses the line rather than being dropped silently.
READ_FIELDS = ("key", "keyEncoding", "value", "valueEncoding", "headers", "timestamp", "partition")
IGNORED_FIELDS = ("topic", "offset", "timestampType")
JSON_FIELDS = frozenset(READ_FIELDS + IGNORED_FIELDS)
HEADER_FIELDS = frozenset(("key", "value", "valueEncoding"))

# How much of a refused line its reason quotes.
QUOTED_LINE_BYTES = 40

# orjson reads an integer beyond 64 bits as a float (1.2345678901234568e+29 for a 30-digit id), which it then writes
# with an exponent: a value whose compact text has ``e+`` in it, from a line with a run of 20 digits, is read again by
# the standard library, which keeps every integer exact (a regex over every line would cost more than the parse).
_LONG_DIGITS = re.compile(rb"[0-9]{20}")


class _Inexact(Exception):
    """A value's compact text may hold a float orjson made of a long integer (see ``_LONG_DIGITS``)."""


@dataclass(frozen=True, slots=True)
class JsonRecord:
    """One parsed ``append.jsonl`` line: the record (its offset: 0, or its place among the records of the write
    :func:`parse_json_lines` read) and the partition it names, if any."""

    record: Record
    partition: int | None


def parse_json_record(line: bytes, now_ms: int) -> JsonRecord:
    """One ``append.jsonl`` line as a record (docs/mount.md, "JSON lines in (`append.jsonl`)"). InvalidJsonRecord for
    anything malformed.

    ``key`` is a string or null (with ``"keyEncoding":"base64"``: the base64 of the bytes); a number or any other
    JSON is refused rather than guessed at. ``value`` is a string (stored as its UTF-8 text), null, or any other
    JSON (stored as its compact JSON text, which orjson writes). ``headers`` is a list of ``{key, value}`` objects
    or one object of ``name: value`` pairs. ``topic``, ``offset`` and ``timestampType`` are ignored; ``timestamp``
    absent or null means ``now_ms``; any other field is refused, named.
    """
    return _parse_line(line, now_ms, 0)


def _parse_line(line: bytes, now_ms: int, offset: int) -> JsonRecord:
    try:
        return _json_record(_loads(line), now_ms, offset, exact=False)
    except _Inexact:
        obj = _loads_exact(line) if _LONG_DIGITS.search(line) else _loads(line)
        return _json_record(obj, now_ms, offset, exact=True)


def _json_record(obj: Any, now_ms: int, offset: int, *, exact: bool) -> JsonRecord:
    """The record of a parsed line; ``exact=False`` raises _Inexact for a value whose text may have lost digits."""
    if type(obj) is not dict:
        raise InvalidJsonRecord(f"a record is a JSON object, not {_json_type(obj)}")
    if not obj.keys() <= JSON_FIELDS:
        raise InvalidJsonRecord(_unknown_fields(obj, JSON_FIELDS, "a record's fields are"))
    key = obj.get("key")
    if type(key) is str and "keyEncoding" not in obj:  # the usual shapes first: one call less per record
        key = _utf8(key, "key")
    elif key is not None or "keyEncoding" in obj:
        key = _payload(obj, "key", "keyEncoding", exact)
    value = obj.get("value")
    kind = type(value)
    if "valueEncoding" in obj:
        value = _payload(obj, "value", "valueEncoding", exact)
    elif kind is dict or kind is list:
        value = _dumps(value, exact)
    elif isinstance(value, str):
        value = _utf8(value, "value")
    elif value is not None:
        value = _dumps(value, exact)
    timestamp = obj.get("timestamp")
    if timestamp is None:
        timestamp = now_ms
    elif not _is_int(timestamp) or not 0 <= timestamp <= INT64_MAX:
        raise InvalidJsonRecord(f"timestamp must be a non-negative 64-bit integer (ms), not {_quote(timestamp)}")
    partition = obj.get("partition")
    if partition is not None and (not _is_int(partition) or partition < 0):
        raise InvalidJsonRecord(f"partition must be a non-negative integer, not {_quote(partition)}")
    raw_headers = obj.get("headers")
    headers = () if raw_headers is None else _headers(raw_headers, exact)
    return JsonRecord(Record(offset, timestamp, key, value, headers), partition)


def parse_json_lines(lines: Sequence[bytes], now_ms: int) -> list[JsonRecord]:
    """Every non-blank line of one write as a record, numbered from offset 0 in order (so that
    :func:`encode_record_batches` needs no renumbering); InvalidJsonRecord (so nothing of the write is stored) for any
    bad one, naming it: its number among the write's lines and its first bytes."""
    records: list[JsonRecord] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(_parse_line(line, now_ms, len(records)))
        except InvalidJsonRecord as exc:
            raise InvalidJsonRecord(f"line {number} of the write ({_first_bytes(line)}): {exc}") from None
    return records


def _loads(line: bytes) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise InvalidJsonRecord(f"not JSON: {exc}") from None


def _loads_exact(line: bytes) -> Any:
    """The standard library's reading: integers of any size exact; NaN, Infinity and overflowing numbers refused."""
    try:
        return json.loads(line, parse_constant=_no_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as exc:
        raise InvalidJsonRecord(f"not JSON: {exc}") from None


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"number {text[:20]} is out of range for a double")
    return number


def _dumps(raw: Any, exact: bool = True) -> bytes:
    """Compact JSON text, UTF-8 written as is: orjson's, or the standard library's for an integer orjson cannot
    write (beyond 64 bits, which only the standard library's reading gives). ``exact=False``: _Inexact when the text
    has an exponent (``e+``) that a long integer read by orjson would have given."""
    try:
        text = orjson.dumps(raw)
        if not exact and b"e+" in text:
            raise _Inexact
        return text
    except orjson.JSONEncodeError:
        return json.dumps(raw, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "surrogatepass")


def _first_bytes(line: bytes) -> str:
    head = line[:QUOTED_LINE_BYTES].decode("utf-8", "replace")
    return repr(head + "…") if len(line) > QUOTED_LINE_BYTES else repr(head)


def _quote(x: Any) -> str:
    text = _dumps(x).decode("utf-8", "replace")
    return text if len(text) <= QUOTED_LINE_BYTES else text[:QUOTED_LINE_BYTES] + "…"


def _json_type(x: Any) -> str:
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "a boolean"
    if isinstance(x, int | float):
        return "a number"
    if isinstance(x, str):
        return "a string"
    return "an array" if isinstance(x, list) else "an object"


def _unknown_fields(obj: dict[str, Any], allowed: frozenset[str], what: str) -> str:
    unknown = sorted(set(obj) - allowed)
    names = ", ".join(repr(u) for u in unknown)
    return f"unknown field{'s' if len(unknown) > 1 else ''} {names} ({what} {', '.join(sorted(allowed))})"


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _payload(obj: dict[str, Any], field: str, encoding_field: str, exact: bool = True) -> bytes | None:
    """A key, value or header value: a string (UTF-8, or base64 with its encoding field), null, or (a value or a
    header value) other JSON as compact text; a key that is not a string or null is refused."""
    raw = obj.get(field)
    encoding = obj.get(encoding_field)
    if encoding is not None and encoding != "base64":
        raise InvalidJsonRecord(f'{encoding_field} must be "base64", not {_quote(encoding)}')
    if raw is None:
        return None
    if type(raw) is str:
        if encoding is None:
            return _utf8(raw, field)
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidJsonRecord(f"{field} is not valid base64") from None
    if encoding is not None:
        raise InvalidJsonRecord(f"{field} with {encoding_field} base64 must be a string")
    if field == "key":
        raise InvalidJsonRecord(
            f"key must be a string or null, not {_json_type(raw)} ({_quote(raw)}); to key by that text, quote it"
        )
    return _dumps(raw, exact)


def _utf8(text: str, field: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a \ud800 escape
        raise InvalidJsonRecord(f"{field} is not encodable as UTF-8 (a lone surrogate)") from None


def _headers(raw: Any, exact: bool) -> tuple[Header, ...]:
    """A list of ``{"key": name, "value": …}`` objects (as ``.jsonl`` renders them, repeated names allowed), or one
    object ``{name: value, …}``."""
    if type(raw) is dict:
        return tuple(Header(_header_key(name), _header_value(value, exact)) for name, value in raw.items())
    if type(raw) is not list:
        raise InvalidJsonRecord(
            f"headers must be a list of {{key, value}} objects or an object of name: value pairs, not {_json_type(raw)}"
        )
    headers = []
    for h in raw:
        if type(h) is not dict or type(h.get("key")) is not str:
            raise InvalidJsonRecord("each header in a list is an object with a string key")
        if not h.keys() <= HEADER_FIELDS:
            raise InvalidJsonRecord(_unknown_fields(h, HEADER_FIELDS, "a header's fields are"))
        headers.append(Header(_header_key(h["key"]), _payload(h, "value", "valueEncoding", exact)))
    return tuple(headers)


def _header_value(value: Any, exact: bool) -> bytes | None:
    """A value of the object form: null, a string's UTF-8 text, other JSON as compact text (no encoding field: binary
    values take the list form with ``"valueEncoding":"base64"``)."""
    if value is None:
        return None
    if type(value) is str:
        return _utf8(value, "header value")
    return _dumps(value, exact)


def _header_key(key: str) -> str:
    _utf8(key, "header key")
    return key
