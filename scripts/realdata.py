#!/usr/bin/env python3
"""Seeded realistic data for the benchmarks (issue 14): web events instead of uniform 100-byte records.

Uniform records take the column-by-column fast paths of the record walk and renderer; real data does not. This
module makes the data the issue measures with, the same bytes for the same seed on every machine:

* **events**: web events as compact JSON objects of 150-1,500 bytes (median ~450, a log-normal size with a long
  tail): ids, ISO timestamps, ``user-<n>`` ids (a few heavy users, many light ones), URLs with queries, user agents,
  nested geo/device objects, numbers, booleans, nulls, arrays of cart items. One per line for ``append``.
* **jsonl**: the same events as ``{"key":"user-<n>","value":<event>}`` lines for ``append.jsonl``.
* **batches**: the events as a producer sends them: RecordBatch v2 built by kafka-python's own
  ``DefaultRecordBatchBuilder`` with Kafka's default ``batch.size`` (16 KiB of uncompressed records), keys of 8-32
  bytes, one header (a W3C ``traceparent``) per record, batches in the cycle none, lz4, none, zstd (half
  uncompressed, a quarter each compressed), producer id -1 (not idempotent: a file can be written twice).
* **uniform**: the second row, today's benchmark file: batches of 1,000 records of 100 bytes (``encode_values``).

Imported as ``realdata`` by the benchmarks (scripts/ is ``sys.path[0]`` when they run); tests import it by path.
CLI: ``python scripts/realdata.py events|jsonl|batches|uniform --mib N [--seed S] [--timestamp MS] OUT``.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

MIB = 1024 * 1024
BATCH_SIZE = 16 * 1024  # Kafka's default batch.size (the producer's uncompressed bound)
BASE_TIMESTAMP = 1_700_000_000_000  # the default first record timestamp (ms); benchmarks pass "now" for retention
MIN_EVENT, MAX_EVENT = 150, 1500
UNIFORM_PER_BATCH, UNIFORM_BYTES = 1000, 100
# codec per batch, cycled: half uncompressed, a quarter lz4, a quarter zstd (kafka-python's CODEC_* values)
CODEC_CYCLE = (0, 3, 0, 4)
CODEC_NAMES = {0: "none", 3: "lz4", 4: "zstd"}

_UAS = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/119.0.0.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 "
    "Safari/605.1.15",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 "
    "Mobile/15E148 Safari/604.1",
    "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/119.0.6045.163 Mobile "
    "Safari/537.36",
    "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/119.0.0.0 Safari/537.36 "
    "Edg/119.0.2151.72",
    "okhttp/4.12.0",
)
_TYPES = ("page_view",) * 9 + ("click",) * 5 + ("search",) * 2 + ("add_to_cart", "purchase", "login", "error")
_PATHS = ("products", "category", "cart", "checkout", "account", "search", "blog", "help", "deals", "orders")
_WORDS = ("red", "shoes", "laptop", "wireless", "headphones", "organic", "coffee", "kids", "garden", "lamp", "usb-c",
          "winter", "jacket", "desk", "chair", "4k", "monitor", "running", "yoga", "mat", "über", "café")  # fmt: skip
_CITIES = (("DE", "Berlin", 52.52, 13.405), ("US", "Austin", 30.267, -97.743), ("FR", "Lyon", 45.764, 4.836),
           ("JP", "Osaka", 34.694, 135.502), ("BR", "Recife", -8.054, -34.881), ("IN", "Pune", 18.52, 73.857),
           ("GB", "Leeds", 53.8, -1.549), ("NG", "Lagos", 6.524, 3.379))  # fmt: skip


class Event(NamedTuple):
    """One web event: its user's number (the key's ``user-<n>``), its time (ms) and its compact JSON text."""

    user: int
    timestamp: int
    body: bytes


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _size(value: object) -> int:
    """Bytes of ``value`` as compact UTF-8 JSON (some words are not ASCII)."""
    return len(_compact(value).encode())


def _hex(rng: random.Random, digits: int) -> str:
    return f"{rng.getrandbits(digits * 4):0{digits}x}"


def _uuid(rng: random.Random) -> str:
    h = _hex(rng, 32)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _url(rng: random.Random) -> str:
    path = "/".join(rng.choice(_PATHS) if i == 0 else rng.choice(_WORDS) for i in range(rng.randint(1, 3)))
    url = f"https://shop.example.com/{path}"
    if rng.random() < 0.4:
        url += f"?utm_source={rng.choice(('google', 'newsletter', 'partner'))}&utm_campaign=c{rng.randint(1, 300)}"
    return url


def _item(rng: random.Random) -> dict[str, object]:
    return {"sku": f"SKU-{rng.randint(10000, 99999)}", "name": " ".join(rng.choice(_WORDS) for _ in range(2)),
            "price": round(rng.uniform(1, 500), 2), "qty": rng.randint(1, 4)}  # fmt: skip


def _device(rng: random.Random) -> dict[str, object]:
    screen = {"w": rng.choice((390, 1280, 1920)), "h": rng.choice((844, 800, 1080))}
    return {"mobile": rng.random() < 0.45, "screen": screen, "dnt": rng.random() < 0.1}


def _optional(rng: random.Random, kind: str) -> list[tuple[str, object]]:
    """The optional fields of an event, most likely first: the event takes them while its target size allows."""
    country, city, lat, lon = rng.choice(_CITIES)
    fields: list[tuple[str, object]] = [
        ("session_id", _hex(rng, 16)),
        ("url", _url(rng)),
        ("logged_in", rng.random() < 0.6),
        ("duration_ms", rng.randint(1, 30000)),
        ("referrer", _url(rng) if rng.random() < 0.5 else None),
        ("user_agent", rng.choice(_UAS)),
        ("ip", f"{rng.randint(1, 223)}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"),
        ("geo", {"country": country, "city": city, "lat": lat, "lon": lon}),
        ("device", _device(rng)),
        ("experiments", [f"exp-{rng.randint(1, 60)}:{rng.choice('ab')}" for _ in range(rng.randint(1, 4))]),
    ]
    if kind == "search":
        fields.insert(1, ("query", " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 4)))))
    if kind == "error":
        fields.insert(1, ("error", {"code": rng.choice((404, 500, 503)), "message": "upstream timed out"}))
    return fields


def iter_events(seed: int = 0, timestamp: int = BASE_TIMESTAMP) -> Iterator[Event]:
    """Endless seeded web events, a few milliseconds apart from ``timestamp`` on."""
    rng = random.Random(seed)
    ts = timestamp
    while True:
        ts += rng.randint(0, 3)
        target = min(MAX_EVENT, max(MIN_EVENT, int(rng.lognormvariate(math.log(450), 0.5))))
        user = int(2_000_000 ** rng.random())  # log-uniform: a few heavy users, a long tail of light ones
        kind = rng.choice(_TYPES)
        when = datetime.fromtimestamp(ts / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        event: dict[str, object] = {"event_id": _uuid(rng),
                                    "type": kind, "ts": when, "user_id": f"user-{user}"}  # fmt: skip
        size = _size(event)
        for name, value in _optional(rng, kind):
            cost = len(name) + _size(value) + 4
            if size + cost <= target:
                event[name] = value
                size += cost
        items: list[dict[str, object]] = []
        while True:  # cart items fill the rest of a large event (~75 bytes each)
            item = _item(rng)
            cost = _size(item) + 1 + (10 if not items else 0)
            if size + cost > target:
                break
            items.append(item)
            size += cost
        if items:
            event["items"] = items
        body = _compact(event).encode()
        if len(body) < MIN_EVENT:  # tiny targets: pad with a note so that the floor holds
            event["note"] = "x" * (MIN_EVENT - len(body))
            body = _compact(event).encode()
        yield Event(user, ts, body)


def events(total_bytes: int, seed: int = 0, timestamp: int = BASE_TIMESTAMP) -> list[Event]:
    """Events whose lines (body + newline) add up to at least ``total_bytes``."""
    out: list[Event] = []
    size = 0
    for event in iter_events(seed, timestamp):
        if size >= total_bytes:
            break
        out.append(event)
        size += len(event.body) + 1
    return out


def event_lines(evs: Iterable[Event]) -> bytes:
    """The events as text lines, for ``append``."""
    return b"".join(e.body + b"\n" for e in evs)


def jsonl_lines(evs: Iterable[Event]) -> bytes:
    """The events as ``{"key":"user-<n>","value":<event>}`` lines, for ``append.jsonl``."""
    return b"".join(b'{"key":"user-%d","value":%s}\n' % (e.user, e.body) for e in evs)


def _key(rng: random.Random, user: int) -> bytes:
    """A key of 8-32 bytes that starts with the user: ``user-<n>``, then ``/`` and a session suffix to its length."""
    key = f"user-{user:03d}"
    length = rng.randint(max(8, len(key)), 32)
    if length > len(key) + 1:
        key += "/" + _hex(rng, 24)[: length - len(key) - 1]
    return key.ljust(length, "0").encode()


def producer_batches(evs: Sequence[Event], seed: int = 0) -> list[bytes]:
    """``evs`` as a kafka-python producer sends them: 16 KiB batches, codecs cycling none/lz4/none/zstd."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    rng = random.Random(seed ^ 0x5EED)
    out: list[bytes] = []
    i = 0
    while i < len(evs):
        codec = CODEC_CYCLE[len(out) % len(CODEC_CYCLE)]
        builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, BATCH_SIZE)
        offset = 0
        while i < len(evs):
            e = evs[i]
            header = ("traceparent", f"00-{_hex(rng, 32)}-{_hex(rng, 16)}-01".encode())
            if builder.append(offset, e.timestamp, _key(rng, e.user), e.body, [header]) is None:
                break
            offset += 1
            i += 1
        out.append(bytes(builder.build()))
    return out


def producer_file(total_bytes: int, seed: int = 0, timestamp: int = BASE_TIMESTAMP) -> list[bytes]:
    """Producer batches (see :func:`producer_batches`) adding up to at least ``total_bytes``."""
    out: list[bytes] = []
    size = 0
    stream = iter_events(seed, timestamp)
    chunk = 0
    while size < total_bytes:
        # ~2 MiB of events at a time; a batch never spans chunks, so the file stays the same for the same seed
        evs = [next(stream) for _ in range(4096)]
        for batch in producer_batches(evs, seed + chunk):
            out.append(batch)
            size += len(batch)
            if size >= total_bytes:
                break
        chunk += 1
    return out


def uniform_values(n: int) -> list[bytes]:
    """Today's benchmark records: ``n`` 100-byte values."""
    return [b"%010d" % i + b"." * (UNIFORM_BYTES - 10) for i in range(n)]


def uniform_file(total_bytes: int, timestamp: int = BASE_TIMESTAMP) -> list[bytes]:
    """Batches of 1,000 records of 100 bytes (logfs's encoder, uncompressed) adding up to ~``total_bytes``."""
    from logfs.core.format.encode import encode_values

    n = max(1, total_bytes // (UNIFORM_BYTES + 8) // UNIFORM_PER_BATCH) * UNIFORM_PER_BATCH
    data = uniform_values(n)
    return [encode_values(data[i : i + UNIFORM_PER_BATCH], timestamp) for i in range(0, n, UNIFORM_PER_BATCH)]


def batch_codec(batch: bytes) -> int:
    """The compression codec of a RecordBatch v2 (the low 3 bits of its attributes)."""
    return batch[22] & 0x07


def generate(kind: str, total_bytes: int, seed: int = 0, timestamp: int = BASE_TIMESTAMP) -> bytes:
    """The bytes of one of the four files."""
    if kind == "events":
        return event_lines(events(total_bytes, seed, timestamp))
    if kind == "jsonl":
        return jsonl_lines(events(total_bytes, seed, timestamp))
    if kind == "batches":
        return b"".join(producer_file(total_bytes, seed, timestamp))
    if kind == "uniform":
        return b"".join(uniform_file(total_bytes, timestamp))
    raise ValueError(f"unknown kind {kind!r}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=("events", "jsonl", "batches", "uniform"))
    ap.add_argument("out", type=Path)
    ap.add_argument("--mib", type=float, default=16.0, help="size of the file (MiB)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timestamp", type=int, default=BASE_TIMESTAMP, help="first record time (ms since the epoch)")
    args = ap.parse_args(argv)
    data = generate(args.kind, int(args.mib * MIB), args.seed, args.timestamp)
    args.out.write_bytes(data)
    print(f"{args.out}: {len(data):,} bytes of {args.kind}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
