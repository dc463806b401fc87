"""JSON lines of stored batches walked together (docs/mount.md, "Reads"), byte for byte the reference's
(``render.jsonl_from_columns``).

Three paths, fastest first:

* A block of records of one layout without headers whose keys and values are all printable ASCII other than ``"``
  and ``\\`` (their JSON string is then the bytes in quotes) and whose timestamps are not negative becomes
  :class:`Rows`: one matrix per digit width of the offsets and timestamps, constant text broadcast into its columns.
* Other records, when the compiled helpers are selected (``cext.USE_CEXT``): the compiled renderer, one C loop for all
  (escapes, base64, headers; :func:`jsonl_compiled`).
* Else, records whose keys and values need no escape are formatted per record with bytes formatting, and anything
  else is encoded field by field as the reference does (UTF-8 text, escapes, base64). Walked batches hold records with
  headers only from the compiled walker.

Any thread.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from json.encoder import encode_basestring  # the C string encoder that leaves non-ASCII as is

import numpy as np
import numpy.typing as npt

from logfs.core import cext
from logfs.core.format.batch import TimestampType
from logfs.core.format.columns import IntArray
from logfs.core.format.render import json_bytes
from logfs.core.format.storedparts import Part, Rows, strided
from logfs.core.format.storedpieces import BLOCK_MIN_RECORDS, Walked, block_runs, has_headers

# Printable ASCII that JSON writes as is (no escape): 0x20-0x7f less '"' and '\\'.
_JSON_PLAIN_BYTES = bytes(b for b in range(0x20, 0x80) if b not in (0x22, 0x5C))
_HIGH_BYTES = bytes(range(0x80, 0x100))  # UTF-8 beyond ASCII, written as is when valid
POW10 = np.array([10**k for k in range(19)], dtype=np.int64)
# The constant text of a JSON line, less the lead (topic and partition), the timestamp type and the key and value.
JSONL_MIDDLE = b',"timestamp":,"timestampType":0,"key":,"value":'
JSONL_TAIL = b',"headers":[]}\n'


def jsonl_walked(g: Walked, i0: int, i1: int, topic: str, partition: int, parts: list[Part]) -> None:
    """Append the JSON lines of records ``i0…i1-1`` of ``g`` to ``parts``: blocks as :class:`Rows` where they
    qualify (no headers), the records between them formatted one by one: by the compiled renderer when the compiled
    walker is in use (:func:`jsonl_compiled`), else in Python."""
    lead = jsonl_lead(topic, partition)
    between = jsonl_compiled if cext.USE_CEXT else _jsonl_records
    pending = i0  # records [pending, lo) wait to be formatted one by one
    for run, lo, hi, batch in block_runs(g, i0, i1):
        if run is None or has_headers(g, lo, hi):
            continue
        block = _jsonl_block(g, batch, g.layout.run_step[run], lo, hi, lead)
        if not isinstance(block, list):
            continue
        if pending < lo:
            parts.append(between(g, pending, lo, lead))
        parts.extend(block)
        pending = hi
    if pending < i1:
        parts.append(between(g, pending, i1, lead))


def jsonl_compiled(g: Walked, i0: int, i1: int, lead: bytes) -> bytes:
    """Records ``i0…i1-1`` of ``g`` as JSON lines by the compiled renderer (``core/cext/jsonlrender.c``): the
    per-record paths below in one C loop (escapes, base64, headers), byte for byte the reference's. ~0.3 µs for a
    500-byte record, where the bytes-formatting path takes ~1 µs and the field-by-field one ~3 µs; uniform blocks
    stay with :class:`Rows` (~20 % faster than this on 100-byte records)."""
    assert cext.CEXT is not None
    out: bytes = cext.CEXT.render_jsonl(g.data, lead, compiled_columns(g, i0, i1), i1 - i0)
    return out


def jsonl_sizes_compiled(g: Walked, i0: int, i1: int, lead: bytes) -> IntArray:
    """The length of each JSON line :func:`jsonl_compiled` gives for records ``i0…i1-1`` of ``g``, counted by the
    compiled renderer without rendering (one loop shared with it, so byte-exact). A ``.jsonl`` file's size is due at
    its lookup (docs/mount.md, "Files, modes and caching"): counting costs a fraction of rendering the lines and finding
    their newlines."""
    assert cext.CEXT is not None
    sizes = np.empty(i1 - i0, dtype=np.int64)
    cext.CEXT.jsonl_sizes(g.data, lead, compiled_columns(g, i0, i1), i1 - i0, sizes)
    return sizes


def compiled_columns(g: Walked, i0: int, i1: int) -> tuple[IntArray, ...]:
    """The nine contiguous columns the compiled renderer reads for records ``i0…i1-1`` of ``g``."""
    lay = g.layout
    first = np.array(g.first, dtype=np.int64)
    counts = first[1:] - first[:-1]
    appended = [h.timestamp_type == TimestampType.LOG_APPEND_TIME for h in g.headers]
    types = np.repeat(np.array(appended, dtype=np.uint8), counts)[i0:i1]
    zeros = np.zeros(i1 - i0, dtype=np.int64)
    hp = zeros if lay.header_position is None else lay.header_position[i0:i1]
    hn = zeros if lay.header_count is None else lay.header_count[i0:i1]
    columns = [g.offsets[i0:i1], g.timestamps[i0:i1], types, lay.key_position[i0:i1], lay.key_length[i0:i1]]
    columns += [lay.value_position[i0:i1], lay.value_length[i0:i1], hp, hn]
    return tuple(np.ascontiguousarray(c) for c in columns)


def jsonl_lead(topic: str, partition: int) -> bytes:
    """The start of every JSON line of a partition, up to its offset."""
    return ('{"topic":' + encode_basestring(topic) + ',"partition":' + str(partition) + ',"offset":').encode()


def json_plain(g: Walked, lo: int, hi: int, step: int | None) -> bool:
    """Is every key and value of records ``lo…hi-1`` its JSON string text in quotes? ``step``: they form one block
    of records that many bytes apart (checked through strided views, for plain ASCII only), else they are gathered
    and checked (:func:`_unescaped`)."""
    lay = g.layout
    if step is not None:
        arr = np.frombuffer(g.data, dtype=np.uint8)
        n = hi - lo
        kl, vl = int(lay.key_length[lo]), int(lay.value_length[lo])
        return (kl < 0 or _plain_ascii(strided(arr, int(lay.key_position[lo]), n, kl, step))) and (
            vl < 0 or _plain_ascii(strided(arr, int(lay.value_position[lo]), n, vl, step))
        )
    data = g.data
    spans = [
        (p, p + n)
        for ps, ns in ((lay.key_position, lay.key_length), (lay.value_position, lay.value_length))
        for p, n in zip(ps[lo:hi].tolist(), ns[lo:hi].tolist(), strict=True)
        if n > 0
    ]
    return _unescaped([data[a:b] for a, b in spans])


def _unescaped(texts: list[bytes]) -> bool:
    """Is each of these keys and values its own JSON string text (in quotes)? True when no byte needs an escape
    (none below 0x20, no ``"`` or ``\\``) and each is valid UTF-8: the reference then writes its bytes as they
    are (``encode_basestring`` leaves non-ASCII text alone)."""
    text = b"".join(texts)
    rest = text.translate(None, _JSON_PLAIN_BYTES)  # what is not printable ASCII
    if not rest:
        return True
    if rest.translate(None, _HIGH_BYTES):
        return False  # control bytes, quotes or backslashes
    try:
        for t in texts:
            t.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _plain_ascii(view: npt.NDArray[np.uint8]) -> bool:
    """Are all these bytes JSON-plain (printable ASCII but ``"`` and ``\\``)? (A contiguous copy first: numpy's
    reductions run several times faster on it than on a strided view.)"""
    if view.size == 0:
        return True
    c = np.ascontiguousarray(view)
    return bool(c.min() >= 0x20 and c.max() < 0x80 and not (c == 0x22).any() and not (c == 0x5C).any())


def _jsonl_block(
    g: Walked, j: int, step: int, lo: int, hi: int, lead: bytes, *, size_only: bool = False
) -> list[Rows] | int | None:
    """Records ``lo…hi-1`` of batch ``j`` (one layout, ``step`` bytes each) as rows of one matrix per digit width
    (or, ``size_only``, the size of those rows), or None when their keys or values need escaping or encoding, or a
    timestamp is negative (the per-record paths handle those)."""
    lay = g.layout
    arr = np.frombuffer(g.data, dtype=np.uint8)
    n = hi - lo
    kl, vl = int(lay.key_length[lo]), int(lay.value_length[lo])
    keys = strided(arr, int(lay.key_position[lo]), n, kl, step) if kl >= 0 else None
    values = strided(arr, int(lay.value_position[lo]), n, vl, step) if vl >= 0 else None
    if (keys is not None and not _plain_ascii(keys)) or (values is not None and not _plain_ascii(values)):
        return None
    offsets, timestamps = g.offsets[lo:hi], g.timestamps[lo:hi]
    if int(timestamps.min()) < 0:
        return None
    w_off = np.maximum(np.searchsorted(POW10, offsets, side="right"), 1)
    w_ts = np.maximum(np.searchsorted(POW10, timestamps, side="right"), 1)
    ts_type = b"1" if g.headers[j].timestamp_type == TimestampType.LOG_APPEND_TIME else b"0"
    # One row: lead, offset, ',"timestamp":', timestamp, ',"timestampType":T,"key":', key, ',"value":', value, tail.
    pieces: list[bytes | IntArray | npt.NDArray[np.uint8]] = [
        lead,
        offsets,
        b',"timestamp":',
        timestamps,
        b',"timestampType":' + ts_type + b',"key":',
    ]
    pieces += [b"null"] if keys is None else [b'"', keys, b'"']
    pieces.append(b',"value":')
    pieces += [b"null"] if values is None else [b'"', values, b'"']
    pieces.append(b',"headers":[]}\n')
    if size_only:
        fixed = sum(
            len(p) if isinstance(p, bytes) else p.shape[1] for p in pieces if isinstance(p, bytes) or p.ndim == 2
        )
        return n * fixed + int(w_off.sum()) + int(w_ts.sum())
    cuts = [0, *(np.flatnonzero(np.diff(w_off * 32 + w_ts)) + 1).tolist(), n]
    if len(cuts) > 2 + n // BLOCK_MIN_RECORDS:
        return None
    return [
        _rows([p if isinstance(p, bytes) else p[a:b] for p in pieces], int(w_off[a]), int(w_ts[a]))
        for a, b in itertools.pairwise(cuts)
    ]


def _rows(pieces: list[bytes | IntArray | npt.NDArray[np.uint8]], *widths: int) -> Rows:
    """One row per record from constant ``bytes`` pieces, numbers (1-D, one per row, each as many digits as the next
    of ``widths``) and byte matrices (2-D, one row per record), side by side."""
    template = bytearray()
    fills: list[tuple[int, IntArray | npt.NDArray[np.uint8], int]] = []
    digit_widths = iter(widths)
    n = 0
    for p in pieces:
        if isinstance(p, bytes):
            template += p
            continue
        n = len(p)
        if p.ndim == 2:
            fills.append((len(template), p, -1))
            template += bytes(p.shape[1])
            continue
        width = next(digit_widths)
        low, high = int(p.min()), int(p.max())
        k = 0  # the last k digits differ between the numbers; the others are the same for all
        while k < width and low // 10**k != high // 10**k:
            k += 1
        head = low // 10**k
        if k < width:
            template += str(head).encode()
        fills.append((len(template), p - head * 10**k if k else p, k))
        template += bytes(k)
    return Rows(bytes(template), fills, n)


def _jsonl_records(g: Walked, lo: int, hi: int, lead: bytes) -> bytes:
    """Records ``lo…hi-1`` of ``g`` formatted one by one: bytes formatting when no key or value needs escaping or
    base64 (:func:`_unescaped`), else the reference's per-field encoding."""
    lay = g.layout
    data = g.data
    kps, kls = lay.key_position[lo:hi].tolist(), lay.key_length[lo:hi].tolist()
    vps, vls = lay.value_position[lo:hi].tolist(), lay.value_length[lo:hi].tolist()
    keys = [None if n < 0 else data[p : p + n] for p, n in zip(kps, kls, strict=True)]
    values = [None if n < 0 else data[p : p + n] for p, n in zip(vps, vls, strict=True)]
    offsets, timestamps = g.offsets[lo:hi].tolist(), g.timestamps[lo:hi].tolist()
    types = []
    for j, a, b in _batch_ranges(g, lo, hi):
        t = b"1" if g.headers[j].timestamp_type == TimestampType.LOG_APPEND_TIME else b"0"
        types += [t] * (b - a)
    if _unescaped([k for k in keys if k] + [v for v in values if v]):
        keys_j = [b"null" if k is None else b'"' + k + b'"' for k in keys]
        values_j = [b"null" if v is None else b'"' + v + b'"' for v in values]
        return b"".join(
            [
                b'%b%d,"timestamp":%d,"timestampType":%b,"key":%b,"value":%b,"headers":[]}\n' % fields
                for fields in zip(
                    itertools.repeat(lead, hi - lo), offsets, timestamps, types, keys_j, values_j, strict=False
                )
            ]
        )
    lead_s = lead.decode()
    lines = [
        lead_s
        + str(o)
        + ',"timestamp":'
        + str(t)
        + ',"timestampType":'
        + tt.decode()
        + ',"key":'
        + json_bytes(k, "key")
        + ',"value":'
        + json_bytes(v, "value")
        + ',"headers":[]}\n'
        for o, t, tt, k, v in zip(offsets, timestamps, types, keys, values, strict=True)
    ]
    return "".join(lines).encode("utf-8")


def _batch_ranges(g: Walked, i0: int, i1: int) -> Iterator[tuple[int, int, int]]:
    """``(batch number, lo, hi)`` of each batch's records within ``[i0, i1)``, in order."""
    for j in range(len(g.headers)):
        lo, hi = max(g.first[j], i0), min(g.first[j + 1], i1)
        if lo < hi:
            yield j, lo, hi
