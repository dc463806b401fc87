"""The compiled helpers (core/cext/*.c) against the pure-Python reference, through two real mounts.

The helpers sit in every write (the client batch check, text and JSON lines to batches) and every read (the record
walk, the ``.jsonl`` renderer, the stored-batch check, the cleaner's scan). Hypothesis tests hold each helper equal to
its reference function by function (tests/core/format/test_walk_cext.py, tests/core/log/test_check_batches_cext.py);
this test holds the *product* equal: one mount started with ``LOGFS_NO_CEXT=1`` (the reference alone), one without,
the same realistic workload written to both with real file I/O (scripts/realdata.py's events, varied sizes, keys and
headers; text lines through ``append``, JSON lines through ``append.jsonl``, producer batches rotating all five
codecs through ``batches``, transactions committed, aborted and left open, a compacted topic cleaned), then:

* every read view byte-identical: ``at/`` in each format and at several starts, ``hw/``, ``committed/``, fetch
  answers under ``.logfs/fetch/``, ``state``;
* the same answers to a set of bad inputs and of records either side of ``max.message.bytes``: errno of each write,
  and ``.logfs/errors`` (op, path, errno, reason);
* after both unmount, every ``.log``, ``.index``, ``.timeindex`` and ``.txnindex`` of the stores byte-identical.
* a ``logfs follow`` of each kind replicating its leader: its ``.log`` files the leader's, its index files the other
  follower's (the compacted topic left out: a follower cleans it on its own schedule).

Timestamps the mount takes from its clock (a text line's append time, a marker's) differ between the two mounts by
nature: in those topics (``CLOCK_TOPICS``) a batch's two timestamps and its CRC are zeroed before comparing (after
checking the CRC; a record's timestamp delta is not touched, so it must be equal), ``.jsonl`` timestamps are zeroed,
and ``.timeindex`` files are not compared (their entries depend on when the clock ticked). In the compacted topic a
cleaned batch keeping a tombstone has the cleaner's delete horizon (clock + ``delete.retention.ms``) as base timestamp,
so its batches are compared through their records' absolute timestamps (``HORIZON_TOPIC``). Every other topic carries
the writer's timestamps and is compared byte for byte. Each mount's ``logfs_compiled_helpers`` gauge is checked first,
so the comparison is never of two mounts of the same kind.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import importlib.util
import json
import os
import random
import re
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import crc32c
import pytest
from conftest import Mount, errno_of, running_mount, state
from follower_procs import following, identical, wait_for
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from logfs.core.cext import CEXT

pytestmark = pytest.mark.skipif(CEXT is None, reason="the compiled helpers are not built: nothing to compare")

_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "realdata.py"


def _realdata() -> ModuleType:
    spec = importlib.util.spec_from_file_location("realdata", _SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("realdata", module)
    spec.loader.exec_module(module)
    return module


realdata = _realdata()

SEED = 0  # every seed of the workload is offset by this (a campaign of other workloads edits it)
MOUNT_CONFIG = ("replica.ids=0,1", "log.cleaner.backoff.ms=50", "transaction.timeout.ms=900000")
# retention.ms=-1: the writer's timestamps are of 2023, and a retention check must not race the comparison
SEGMENT = {"segment.bytes": 65536, "retention.ms": -1}
TS0 = realdata.BASE_TIMESTAMP
CLOCK_TOPICS = {"text", "txn", "bad"}  # topics holding timestamps of the mount's clock
HORIZON_TOPIC = "kv"  # the compacted topic: its cleaned batches hold the cleaner's delete horizon
TOPICS = {"text": 2, "json": 2, "prod": 1, "txn": 1, "kv": 1, "bad": 1}  # partitions
BAD_MAX = 10_000  # max.message.bytes of the refusal topic


# --- the workload -----------------------------------------------------------------------------------------------------


def _chunks(data: bytes, rng: random.Random) -> Iterator[bytes]:
    """``data`` in write requests of varied sizes (1 byte to 200 KB): lines and batches cut at arbitrary places."""
    i = 0
    while i < len(data):
        size = rng.choice((1, 17, 4096, rng.randint(1, 200_000), rng.randint(1, 20_000)))
        yield data[i : i + size]
        i += size


def _write(path: Path, data: bytes, seed: int) -> None:
    """One open, ``data`` in varied requests (each written whole, short writes retried), one close."""
    fd = os.open(path, os.O_WRONLY)
    try:
        for chunk in _chunks(data, random.Random(seed)):
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _text_lines() -> bytes:
    """Realistic event lines, and the odd ones: empty, CR, NUL, tabs, non-UTF-8, UTF-8, one of 60 KB (a batch of its
    own)."""
    odd = [b"", b"\r", b"a\x00b", b"\ttab\t", b"caf\xc3\xa9 \xf0\x9f\x98\x80", b"\xff\xfe not utf-8 \xc3"]
    odd.append(b"x" * 60_000)
    lines = [e.body for e in realdata.events(600_000, seed=SEED + 11)]
    for i, line in enumerate(odd):
        lines.insert(i * 97 % len(lines), line)
    return b"".join(line + b"\n" for line in lines)


def _json_lines(seed: int, count_bytes: int) -> bytes:
    """``{"key","value","timestamp"}`` lines of realistic events (the writer's timestamps), with headers in both
    forms, base64 keys and values, nulls, numbers the normalizer must keep exact, escapes, and blank lines."""
    rng = random.Random(seed)
    out = []
    for i, e in enumerate(realdata.events(count_bytes, seed=seed)):
        line = b'{"key":"user-%d","value":%s,"timestamp":%d' % (e.user, e.body, e.timestamp)
        if i % 5 == 1:
            line += b',"headers":[{"key":"trace","value":"%x"},{"key":"trace","value":null},{"key":"n","value":7}]' % (
                rng.getrandbits(64)
            )
        if i % 7 == 2:
            line += b',"headers":{"source":"web","v":{"a" : [1, 2.50]}}'
        out.append(line + b"}\n")
    odd = [
        b'{"key":null,"value":null,"timestamp":%d}' % TS0,
        b'  {"key" : "sp" , "value" : { "a" : [ 1 , -0.0 , 1E+2 , 0.1 , true , false , null ] } , "timestamp" : %d }  '
        % TS0,
        b'{"key":"big","value":123456789012345678901234567890,"timestamp":%d}' % TS0,
        b'{"key":"esc","value":"\\u00e9\\ud83d\\ude00 \\/ \\" \\\\ \\n\\t","timestamp":%d}' % TS0,
        b'{"key":"caf\xc3\xa9","value":["\xf0\x9f\x98\x80",{"\xc3\xa9":""}],"timestamp":%d}' % TS0,
        b'{"key":"AP8=","keyEncoding":"base64","value":"//79AA==","valueEncoding":"base64","timestamp":%d}' % TS0,
        b'{"key":"h","value":"v","headers":[{"key":"b","value":"AAEC","valueEncoding":"base64"}],"timestamp":%d}' % TS0,
        b'{"key":"copied","value":"x","topic":"elsewhere","offset":5,"timestampType":"CreateTime","timestamp":%d}'
        % (TS0 + 1),
        b'{"value":"no key","timestamp":%d}' % (TS0 + 2),
        b"",
        b'{"key":"s","value":"   ","timestamp":%d}' % (TS0 + 3),
        b'{"key":"num","value":-12.5e-3,"timestamp":%d}' % (TS0 + 4),
    ]
    for i, line in enumerate(odd):
        out.insert(i * 31 % len(out), line + b"\n")
    return b"".join(out)


@functools.cache  # built once: a gzip stream holds the time it was made, and both mounts must get the same bytes
def _producer_batches(seed: int) -> bytes:
    """Producer batches as kafka-python builds them: codecs rotating none/gzip/snappy/lz4/zstd, keys (some null),
    values (some null, some with newlines or bytes that are not UTF-8), zero to three headers per record."""
    rng = random.Random(seed)
    evs = realdata.events(900_000, seed=seed)
    out = []
    i = 0
    while i < len(evs):
        codec = len(out) % 5
        builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, rng.choice((2048, 16384, 65536)))
        offset = 0
        while i < len(evs):
            e = evs[i]
            key = None if i % 11 == 0 else f"user-{e.user}".encode()
            value = None if i % 29 == 0 else e.body if i % 13 else e.body + b"\n\xff\x00 tail"
            headers = [(f"h{n}", b"" if n == 2 else rng.randbytes(rng.randint(1, 40))) for n in range(i % 4)]
            if builder.append(offset, e.timestamp, key, value, headers) is None:
                break
            offset += 1
            i += 1
        out.append(bytes(builder.build()))
    return b"".join(out)


def _json_value(rng: random.Random, depth: int = 0) -> object:
    """A random JSON value: every kind of number (exponents, -0.0, beyond 64 bits), strings of any code point
    (controls, astral planes), nesting."""
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return rng.choice((None, True, False))
    if kind == 1:
        return rng.choice((0, -1, 2**63 - 1, -(2**63), 2**64 + 1, -(10**30), rng.randint(-(10**6), 10**6)))
    if kind == 2:
        return rng.choice((-0.0, 1e-7, 1.5e300, 0.1, 2.5, -3.0e-5, 123456.789, rng.uniform(-1e9, 1e9)))
    if kind in (3, 4, 5):
        chars = [chr(rng.choice((rng.randint(0, 0x7F), rng.randint(0x80, 0xD7FF), rng.randint(0x10000, 0x10FFFF))))
                 for _ in range(rng.randint(0, 12))]  # fmt: skip
        return "".join(chars)
    if kind in (6, 7):
        return [_json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {str(_json_value(rng, 3)): _json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _fuzzed_json_lines(seed: int, count: int = 400) -> bytes:
    """Random records as JSON lines written in varied styles (ASCII-escaped or not, spaced or compact): keys, values
    and header values of every JSON kind, base64 keys and values of random bytes."""
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        record: dict[str, object] = {"key": rng.choice((None, str(_json_value(rng, 3)))), "value": _json_value(rng)}
        if rng.random() < 0.3:
            record["headers"] = [{"key": f"h{n}", "value": _json_value(rng, 2)} for n in range(rng.randint(0, 3))]
        if rng.random() < 0.15:
            key, value = rng.randbytes(rng.randint(0, 20)), rng.randbytes(rng.randint(0, 60))
            record = {"key": base64.b64encode(key).decode(), "keyEncoding": "base64",
                      "value": base64.b64encode(value).decode(), "valueEncoding": "base64"}  # fmt: skip
        record["timestamp"] = TS0 + i
        separators = rng.choice(((",", ":"), (", ", ": "), (" , ", " : ")))
        lines.append(json.dumps(record, ensure_ascii=rng.random() < 0.5, separators=separators).encode() + b"\n")
    return b"".join(lines)


@functools.cache  # as _producer_batches
def _random_batches(seed: int) -> bytes:
    """Producer batches of random bytes: keys and values that are not UTF-8, or are but hold controls and quotes,
    header names of any code point; each codec."""
    rng = random.Random(seed)
    out = []
    for n in range(40):
        builder = DefaultRecordBatchBuilder(2, n % 5, False, -1, -1, -1, 1 << 20)
        for offset in range(rng.randint(1, 30)):
            key = rng.choice((None, rng.randbytes(rng.randint(0, 16)), '"\\\n\x01é'.encode()))
            value = rng.choice((None, rng.randbytes(rng.randint(0, 300)), "ok \x7f\u2028 😀".encode()))
            headers = [(chr(rng.randint(32, 0x2FFF)) * rng.randint(1, 3), rng.randbytes(rng.randint(0, 9)))
                       for _ in range(rng.randint(0, 2))]  # fmt: skip
            builder.append(offset, TS0 + offset, key, value, headers)
        out.append(bytes(builder.build()))
    return b"".join(out)


def _keyed(seed: int, count: int) -> bytes:
    """Keyed JSON lines for the compacted topic: 40 keys, a tombstone every 9th record."""
    rng = random.Random(seed)
    lines = []
    for i in range(count):
        value = "null" if i % 9 == 4 else json.dumps(f"v{i}-" + "y" * rng.randint(0, 300))
        lines.append(b'{"key":"k%d","value":%s,"timestamp":%d}\n' % (i % 40, value.encode(), TS0 + i))
    return b"".join(lines)


def _run_workload(mnt: Path) -> None:
    """The same writes, in the same order and the same requests, on one mount."""
    for topic, partitions in TOPICS.items():
        os.mkdir(mnt / topic)
        for p in range(1, partitions):
            os.mkdir(mnt / topic / str(p))
    for topic in ("text", "json", "prod", "txn"):
        (mnt / topic / "config").write_text("".join(f"{k}={v}\n" for k, v in SEGMENT.items()))
    (mnt / "kv/config").write_text("segment.bytes=4096\nmin.cleanable.dirty.ratio=0.01\nretention.ms=-1\n")
    (mnt / "bad/config").write_text(f"max.message.bytes={BAD_MAX}\nretention.ms=-1\n")

    text = _text_lines()
    _write(mnt / "text/0/append", text, seed=SEED + 1)
    _write(mnt / "text/append", text[: len(text) // 3], seed=SEED + 2)  # null keys: partitions in turn
    _write(mnt / "json/append.jsonl", _json_lines(SEED + 21, 700_000), seed=SEED + 3)  # murmur2 of the keys
    _write(mnt / "json/1/append.jsonl", _json_lines(SEED + 22, 200_000) + _fuzzed_json_lines(SEED + 23), seed=SEED + 4)
    _write(mnt / "prod/0/batches", _producer_batches(SEED + 31) + _random_batches(SEED + 32), seed=SEED + 5)
    _write(mnt / "kv/0/append.jsonl", _keyed(SEED + 41, 1500), seed=SEED + 6)

    txns = mnt / ".logfs/transactions"
    _write(mnt / "txn/0/append.jsonl", _json_lines(SEED + 51, 30_000), seed=SEED + 7)
    os.mkdir(txns / "job1")
    _write(txns / "job1/txn/0/append.jsonl", _json_lines(SEED + 52, 40_000), seed=SEED + 8)
    _write(txns / "job1/txn/0/append", b"in job1\n" * 50, seed=9)
    _write(mnt / "txn/0/append", b"plain between\n" * 20, seed=10)
    (txns / "job1/control").write_text("commit\n")
    os.mkdir(txns / "job2")
    _write(txns / "job2/txn/0/batches", _small_batches(), seed=11)
    (txns / "job2/control").write_text("abort\n")
    os.mkdir(txns / "job3")  # left open: committed/ stops at its first offset
    _write(txns / "job3/txn/0/append.jsonl", _json_lines(SEED + 54, 10_000), seed=SEED + 12)
    _write(mnt / "txn/0/append", b"plain after the open one\n" * 30, seed=13)

    (mnt / "kv/config").write_text("cleanup.policy=compact\n")  # everything written: one clean, the same on both


@functools.cache  # as _producer_batches
def _small_batches() -> bytes:
    """A few small producer batches (one per codec) for a transaction."""
    out = []
    for codec in range(5):
        builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 16384)
        for n in range(10):
            builder.append(n, TS0 + n, b"k%d" % n, b"aborted %d %d" % (codec, n), [])
        out.append(bytes(builder.build()))
    return b"".join(out)


# --- refusals ---------------------------------------------------------------------------------------------------------


def _batch(codec: int = 0, count: int = 3) -> bytearray:
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 16384)
    for n in range(count):
        builder.append(n, TS0 + n, b"k", b"value %d" % n, [("h", b"v")])
    return bytearray(builder.build())


def _recrc(batch: bytearray) -> bytearray:
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return batch


def _bad_batches() -> list[bytes]:
    crc = _batch()
    crc[-1] ^= 1  # a value byte: the CRC no longer matches
    magic = _batch()
    magic[16] = 1
    short = _batch()
    struct.pack_into(">i", short, 8, 10)  # a declared length below Kafka's minimum
    big = _batch()
    struct.pack_into(">i", big, 8, BAD_MAX + 100)
    count = _batch()
    struct.pack_into(">i", count, 57, 4)  # one record more than the batch holds
    control = _batch()
    struct.pack_into(">h", control, 21, 0x20)
    varint = _batch(count=1)
    varint[61:66] = b"\xff\xff\xff\xff\xff"  # the first record's length: a varint that never ends
    lz4 = _batch(codec=3, count=20)
    lz4[70] ^= 0x55  # inside the compressed records
    delta = _batch()
    struct.pack_into(">i", delta, 23, 5)  # last offset delta 5 for 3 records
    good = bytes(_batch())
    return [
        bytes(crc),
        bytes(magic),
        bytes(short),
        bytes(big),
        bytes(_recrc(count)),
        bytes(_recrc(control)),
        bytes(_recrc(varint)),
        bytes(_recrc(lz4)),
        bytes(_recrc(delta)),
        good + bytes(crc),  # the good batch before the bad one stays
    ]


BAD_JSON = [
    b"{bad\n",
    b'{"key":5}\n',
    b'{"partiton":1}\n',
    b'{"value":NaN}\n',
    b'{"key":"AP8","keyEncoding":"base64"}\n',
    b'{"headers":[{"key":1}]}\n',
    b'{"timestamp":-1}\n',
    b'{"timestamp":1.5}\n',
    b"[1,2]\n",
    b'{"value":"\xff"}\n',
    b'{"value":"\\ud800"}\n',
    b'{"value":1e999}\n',
    b'{"value":"ok"}\n{"value":"ok"}\n{"key":[]}\n',
    b'{"key":"a","partition":9}\n',
    b'{"value":"x","valueEncoding":"hex"}\n',
    b'{"key":"k","value":"' + b"z" * BAD_MAX + b'"}\n',
]


def _refusals(mnt: Path) -> list[tuple[str, int | None]]:
    """Write each bad input through its own open file; what each answered (errno, and a second write's errno where
    a handle refuses further writes)."""
    answers: list[tuple[str, int | None]] = []
    for i, line in enumerate(BAD_JSON):
        target = mnt / ("bad/append.jsonl" if i % 2 else "bad/0/append.jsonl")
        answers.append((f"json {i}", errno_of(_write_once, target, line)))
    for i, batch in enumerate(_bad_batches()):
        fd = os.open(mnt / "bad/0/batches", os.O_WRONLY)
        try:
            answers.append((f"batch {i}", errno_of(os.write, fd, batch)))
            answers.append((f"batch {i} again", errno_of(os.write, fd, bytes(_batch()))))
        finally:
            answers.append((f"batch {i} close", errno_of(os.close, fd)))
    fd = os.open(mnt / "bad/0/batches", os.O_WRONLY)  # part of a batch at close
    os.write(fd, bytes(_batch())[:30])
    answers.append(("partial batch close", errno_of(os.close, fd)))
    fd = os.open(mnt / "bad/0/append", os.O_WRONLY)
    answers.append(("long line", errno_of(os.write, fd, b"y" * (BAD_MAX + 10) + b"\n")))
    answers.append(("long line again", errno_of(os.write, fd, b"short\n")))
    answers.append(("long line close", errno_of(os.close, fd)))
    for size in range(BAD_MAX - 90, BAD_MAX - 40):  # one record near max.message.bytes, on both sides of it
        answers.append((f"line of {size}", errno_of(_write_once, mnt / "bad/0/append", b"n" * size + b"\n")))
        line = b'{"key":"k","value":"%s","headers":{"h":"v"}}\n' % (b"j" * (size - 8))
        answers.append((f"json line of {size}", errno_of(_write_once, mnt / "bad/0/append.jsonl", line)))
    rng = random.Random(SEED + 61)  # requests of many lines cut into batches near the limit
    for n in range(6):
        lines = b"".join(b"c" * rng.randint(0, 2500) + b"\n" for _ in range(rng.randint(5, 40)))
        answers.append((f"lines {n}", errno_of(_write_once, mnt / "bad/0/append", lines)))
        lines = b"".join(b'{"value":"%s"}\n' % (b"d" * rng.randint(0, 2500)) for _ in range(rng.randint(5, 40)))
        answers.append((f"json lines {n}", errno_of(_write_once, mnt / "bad/0/append.jsonl", lines)))
    for name in ("at/99999", "at/0-99999", "at/@x", "follow/-1", "at/0.txt"):
        answers.append((name, errno_of(os.stat, mnt / "bad/0" / name)))
    return answers


def _write_once(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _errors(mnt: Path) -> list[dict[str, object]]:
    rows = [json.loads(line) for line in (mnt / ".logfs/errors").read_text().splitlines()]
    for row in rows:
        row.pop("time")
    return rows


# --- reading and normalizing ------------------------------------------------------------------------------------------


def _batches_normalized(data: bytes, topic: str) -> bytes:
    """Kafka bytes as they are; in a clock topic with each batch's two timestamps and CRC zeroed (after checking the
    CRC); in the compacted topic each batch's CRC and base timestamp zeroed and its records decoded (the cleaner
    writes a batch that keeps a tombstone with its delete horizon, a time of the clock, as base timestamp, and the
    records' timestamp deltas relative to it: only the records' absolute timestamps are the writer's)."""
    if topic not in CLOCK_TOPICS and topic != HORIZON_TOPIC:
        return data
    out = bytearray()
    pos = 0
    while pos + 12 <= len(data):
        size = 12 + struct.unpack_from(">i", data, pos + 8)[0]
        assert pos + size <= len(data), f"a batch at {pos} runs past the end"
        batch = bytearray(data[pos : pos + size])
        assert crc32c.crc32c(bytes(batch[21:])) == struct.unpack_from(">I", batch, 17)[0], f"bad CRC at {pos}"
        batch[17:21] = bytes(4)
        if topic in CLOCK_TOPICS:
            batch[27:43] = bytes(16)
        else:
            records = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in DefaultRecordBatch(bytes(batch))]
            batch = batch[:27] + bytes(8) + batch[35:61] + repr(records).encode()
        out += batch
        pos += size
    assert pos == len(data), f"{len(data) - pos} bytes after the last batch"
    return bytes(out)


_TS = re.compile(rb'"timestamp":\d+')


def _jsonl_normalized(data: bytes, clock: bool) -> bytes:
    return _TS.sub(b'"timestamp":0', data) if clock else data


def _read(path: Path) -> bytes | int:
    """A file's bytes, or the errno reading it failed with."""
    try:
        return path.read_bytes()
    except OSError as exc:
        assert exc.errno is not None
        return exc.errno


def _view(path: Path, topic: str) -> bytes | int:
    data = _read(path)
    if isinstance(data, int):
        return data
    if path.name.endswith(".kafka"):
        return _batches_normalized(data, topic)
    if path.name.endswith(".jsonl"):
        return _jsonl_normalized(data, topic in CLOCK_TOPICS)
    return data


_TIMES = re.compile(r"(time|_ms$|_at$|last_fetch|age)")


def _timeless(value: object) -> object:
    """``state`` without the keys that hold times."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if not _TIMES.search(k)}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def _views(mnt: Path) -> dict[str, object]:
    """Every read view of every partition (and fetch answers), normalized for the clock topics."""
    out: dict[str, object] = {}
    for topic, partitions in TOPICS.items():
        clock = topic in CLOCK_TOPICS
        for p in range(partitions):
            part = mnt / topic / str(p)
            st = state(mnt, topic, p)
            out[f"{topic}/{p}/state"] = _timeless(st)
            hw, start = st["high_watermark"], st["log_start_offset"]
            starts = sorted({start, (start + hw) // 3, hw // 2, max(start, hw - 1)})
            names = ["earliest", *map(str, starts), f"{start}-{hw}", f"{hw // 4}-{hw // 2}"]
            if not clock:
                names += [f"@{TS0 + 500}", f"@{TS0 + 100_000}"]
            for base in ("", "committed/"):
                for name in names:
                    for suffix in ("", ".jsonl", ".kafka"):
                        path = part / f"{base}at/{name}{suffix}"
                        out[f"{topic}/{p}/{base}at/{name}{suffix}"] = _view(path, topic)
                listing = sorted(os.listdir(part / f"{base}hw"))
                out[f"{topic}/{p}/{base}hw/"] = listing
                for name in listing:
                    out[f"{topic}/{p}/{base}hw/{name}"] = _view(part / f"{base}hw" / name, topic)
    for topic, partitions in TOPICS.items():  # after the states: a fetch records the replica's position
        for p in range(partitions):
            hw = state(mnt, topic, p)["high_watermark"]
            for offset in sorted({0, hw // 3, hw // 2, max(0, hw - 1)}):
                data = _read(mnt / f".logfs/fetch/1/{topic}/{p}/{offset}.-1")
                if isinstance(data, bytes):
                    head, _, records = data.partition(b"\n")
                    data = head + b"\n" + _batches_normalized(records, topic)
                out[f"fetch {topic}/{p} {offset}"] = data
    return out


def _stored(store: Path, skip: str = "") -> dict[str, bytes]:
    """The segment files of a store (``.timeindex`` of the clock topics left out, and topic ``skip``), normalized."""
    out: dict[str, bytes] = {}
    for directory in sorted(store.iterdir()):
        topic = directory.name.rpartition("-")[0]
        if not directory.is_dir() or topic not in TOPICS or topic == skip:
            continue
        clock = topic in CLOCK_TOPICS
        for f in sorted(directory.iterdir()):
            if f.suffix not in (".log", ".index", ".timeindex", ".txnindex") or (clock and f.suffix == ".timeindex"):
                continue
            data = f.read_bytes()
            out[f"{directory.name}/{f.name}"] = _batches_normalized(data, topic) if f.suffix == ".log" else data
    return out


def _wait_cleaned(mnt: Path, store: Path) -> None:
    """Until the cleaner has cleaned ``kv`` up to its active segment (then nothing is dirty: no further clean)."""
    deadline = time.monotonic() + 60
    while True:
        cleaner = state(mnt, "kv")["cleaner"]
        active = max(int(f.stem) for f in (store / "kv-0").glob("*.log"))
        if cleaner is not None and cleaner["first_dirty_offset"] == active and active > 0:
            return
        assert time.monotonic() < deadline, f"kv was not cleaned within 60 s: {cleaner}, active segment {active}"
        time.sleep(0.05)


@contextlib.contextmanager
def _env(no_cext: bool) -> Iterator[None]:
    """LOGFS_NO_CEXT for the processes started in the body (the mount inherits this process's environment)."""
    saved = os.environ.pop("LOGFS_NO_CEXT", None)
    if no_cext:
        os.environ["LOGFS_NO_CEXT"] = "1"
    try:
        yield
    finally:
        os.environ.pop("LOGFS_NO_CEXT", None)
        if saved is not None:
            os.environ["LOGFS_NO_CEXT"] = saved


def _uses_compiled_helpers(mnt: Path) -> bool:
    metrics = (mnt / ".logfs/metrics").read_text()
    found = re.search(r"^logfs_compiled_helpers (\d)$", metrics, re.M)
    assert found is not None, "no logfs_compiled_helpers in .logfs/metrics"
    return found[1] == "1"


def test_the_compiled_helpers_and_the_reference_store_and_serve_the_same_bytes(tmp_path: Path) -> None:
    answers, errors, views = {}, {}, {}
    with contextlib.ExitStack() as stack:
        mounts: dict[str, Mount] = {}
        for name, no_cext in (("python", True), ("compiled", False)):
            with _env(no_cext):
                mounts[name] = stack.enter_context(
                    running_mount(tmp_path / f"{name}-store", tmp_path / f"{name}-mnt", *MOUNT_CONFIG)
                )
            mounts[name].allow_refusals("/bad/")
        assert not _uses_compiled_helpers(mounts["python"].path), "the LOGFS_NO_CEXT=1 mount uses the helpers"
        assert _uses_compiled_helpers(mounts["compiled"].path), "the other mount does not use the helpers"
        for name, mount in mounts.items():
            _run_workload(mount.path)
            answers[name] = _refusals(mount.path)
            errors[name] = _errors(mount.path)
        for name, mount in mounts.items():
            _wait_cleaned(mount.path, mount.store)
            views[name] = _views(mount.path)
        for name, mount in mounts.items():  # a follower of each kind replicates its leader (stored checks, indexes)
            with _env(name == "python"):
                follower = stack.enter_context(following(mount.path, tmp_path / f"{name}-follower", 1))
            wait_for(
                f"the {name} follower to catch up",
                lambda m=mount, n=name: all(  # type: ignore[misc]
                    identical(m.store, tmp_path / f"{n}-follower", topic, partitions)
                    for topic, partitions in TOPICS.items()
                    if topic != HORIZON_TOPIC  # a follower cleans on its own schedule: its segments group otherwise
                ),
                follower,
                mount,
                timeout_s=60,
            )

    assert answers["python"] == answers["compiled"]
    refused = [a for a in answers["python"] if a[1] is not None]
    assert len(refused) >= 40, answers["python"]  # the bad inputs were refused (not quietly stored)
    assert errors["python"] == errors["compiled"]
    assert len(errors["python"]) >= 25, errors["python"]

    py, c = views["python"], views["compiled"]
    assert list(py) == list(c)
    different = [key for key in py if py[key] != c[key]]
    assert not different, f"{len(different)} views differ, first {different[:5]}"
    for topic, partitions in TOPICS.items():  # not vacuous: every partition holds committed records
        for p in range(partitions):
            earliest = py[f"{topic}/{p}/at/earliest.kafka"]
            assert isinstance(earliest, bytes) and earliest, f"{topic}/{p} is empty"
    assert py["txn/0/committed/at/earliest.jsonl"] != py["txn/0/at/earliest.jsonl"]  # transactions left out
    kv = py["kv/0/at/earliest.jsonl"]
    assert isinstance(kv, bytes) and 40 <= len(kv.splitlines()) < 1500  # cleaned

    py_files, c_files = _stored(tmp_path / "python-store"), _stored(tmp_path / "compiled-store")
    assert sorted(py_files) == sorted(c_files)
    assert sum(f.endswith(".log") for f in py_files) > 20  # rolls happened
    different_files = [name for name in py_files if py_files[name] != c_files[name]]
    assert not different_files, f"stored files differ: {different_files}"
    py_files, c_files = (_stored(tmp_path / f"{name}-follower", skip=HORIZON_TOPIC) for name in ("python", "compiled"))
    assert sorted(py_files) == sorted(c_files) and py_files
    different_files = [name for name in py_files if py_files[name] != c_files[name]]
    assert not different_files, f"the followers' stored files differ: {different_files}"
