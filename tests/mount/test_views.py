"""The read files' contents (docs/mount.md, "Reads") without FUSE: ``mount/render/views.py`` and
``mount/render/rendersize.py`` against an independent oracle.

The oracle decodes every stored batch with ``core.format.decode.decode_records`` and renders records with ``json.dumps``
(not ``core/format/render.py``), so a view's size and bytes are checked against what the spec says they are: plain =
each value and a newline, JSON lines = the spec's keys in the spec's order, ``.kafka`` = the stored batches unchanged.
Random tests are seeded and print their seed.
"""

from __future__ import annotations

import base64
import itertools
import json
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from logfs.core.configtext import parse_store_config
from logfs.core.errors import OffsetOutOfRange, StorageError
from logfs.core.format.batch import Header, Record, TimestampType, iter_batch_positions, read_header
from logfs.core.format.compression import Compression
from logfs.core.format.control import ControlType
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_batch, encode_end_txn_marker, encode_values
from logfs.core.log.log import Log
from logfs.core.store import Store
from logfs.mount.names import parse_range, parse_view_name
from logfs.mount.render import rendersize, renderspan, segmentindex
from logfs.mount.render.rangeview import RangeView, open_range
from logfs.mount.render.rendersize import RenderCache
from logfs.mount.render.renderspan import Format
from logfs.mount.render.views import hw_files, render_follow_chunk, render_state, resolve_start

SEED = 20250101
TOPIC = "t"
NOW_MS = int(time.time() * 1000)
BASE_TS = NOW_MS - 10_000_000
CHUNK_SIZES = [64, 700, rendersize.CHUNK_BYTES_DEFAULT]
JSON_KEYS = ["topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers"]


# --- the oracle -----------------------------------------------------------------------------------------------------


@dataclass
class StoredBatch:
    base_offset: int
    last_offset: int
    is_control: bool
    log_append_time: bool
    data: bytes
    records: list[Record]


def stored_batches(log: Log) -> list[StoredBatch]:
    out = []
    for segment in log.segments:
        data = segment.log_file.read(0, segment.size_bytes)
        for position, size in iter_batch_positions(data):
            h = read_header(data, position)
            out.append(
                StoredBatch(
                    h.base_offset,
                    h.last_offset,
                    h.is_control,
                    h.timestamp_type == TimestampType.LOG_APPEND_TIME,
                    data[position : position + size],
                    decode_records(data, position),
                )
            )
    return out


def _json_bytes(obj: dict[str, object], name: str, raw: bytes | None) -> None:
    if raw is None:
        obj[name] = None
        return
    try:
        obj[name] = raw.decode("utf-8")
    except UnicodeDecodeError:
        obj[name] = base64.b64encode(raw).decode("ascii")
        obj[name + "Encoding"] = "base64"


def json_line(topic: str, partition: int, batch: StoredBatch, r: Record) -> bytes:
    obj: dict[str, object] = {
        "topic": topic,
        "partition": partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "timestampType": 1 if batch.log_append_time else 0,
    }
    _json_bytes(obj, "key", r.key)
    _json_bytes(obj, "value", r.value)
    headers = []
    for h in r.headers:
        ho: dict[str, object] = {"key": h.key}
        _json_bytes(ho, "value", h.value)
        headers.append(ho)
    obj["headers"] = headers
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


def expected(batches: list[StoredBatch], fmt: Format, start: int, end: int, topic: str = TOPIC) -> bytes:
    if end <= start:
        return b""
    if fmt is Format.KAFKA:
        return b"".join(b.data for b in batches if b.last_offset >= start and b.base_offset < end)
    out = []
    for b in batches:
        if b.is_control:
            continue
        for r in b.records:
            if start <= r.offset < end:
                out.append((r.value or b"") + b"\n" if fmt is Format.PLAIN else json_line(topic, 0, b, r))
    return b"".join(out)


# --- building logs --------------------------------------------------------------------------------------------------


def random_bytes(rng: random.Random) -> bytes | None:
    kind = rng.random()
    if kind < 0.1:
        return None
    if kind < 0.2:
        return bytes([0xFF, 0xFE]) + rng.randbytes(rng.randrange(0, 8))  # never valid UTF-8
    if kind < 0.3:
        return 'é✓ "quoted" \\ tab\t line\nbreak'.encode()
    return b"v-%d-" % rng.randrange(10**6) + b"x" * rng.randrange(0, 40)


def fill(log: Log, rng: random.Random, batches: int, *, big: bool = False) -> None:
    """Append a mix of batches: plain values, keyed records with headers, every codec, big batches (the numpy
    walker), transaction markers (appended as a follower would, at the LEO)."""
    for n in range(batches):
        ts = BASE_TS + 10 * log.log_end_offset
        kind = rng.random()
        if kind < 0.08:
            marker = encode_end_txn_marker(
                rng.choice([ControlType.COMMIT, ControlType.ABORT]),
                producer_id=7,
                producer_epoch=0,
                coordinator_epoch=0,
                timestamp=ts,
                base_offset=log.log_end_offset,
                partition_leader_epoch=0,
            )
            log.append_as_follower(marker)
        elif kind < 0.5:
            count = 300 if big and n % 25 == 0 else rng.choice([1, 2, 5, 30])
            values = [b"line-%d-%d" % (n, i) + b"." * rng.randrange(0, 30 if count < 300 else 3) for i in range(count)]
            log.append_as_leader(encode_values(values, ts, compression=rng.choice(list(Compression))), 0)
        else:
            count = rng.randrange(1, 12)
            records = []
            for i in range(count):
                headers: tuple[Header, ...] = ()
                if rng.random() < 0.4:
                    headers = tuple(Header(f"h{j}-é", random_bytes(rng)) for j in range(rng.randrange(1, 3)))
                records.append(Record(i, ts + i, random_bytes(rng), random_bytes(rng), headers))
            log.append_as_leader(encode_batch(records, compression=rng.choice(list(Compression))), 0)


def seeded(seed: int) -> random.Random:
    """A Random of ``seed``, printed so that a failure can be replayed."""
    print("seed", seed)
    return random.Random(seed)


@pytest.fixture(scope="module")
def populated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Log, list[StoredBatch]]]:
    rng = seeded(SEED)
    path = tmp_path_factory.mktemp("store")
    with Store.open(path, parse_store_config(["segment.bytes=8000"])) as store:
        store.create_topic(TOPIC, 1)
        log = store.log(TOPIC, 0)
        fill(log, rng, 240, big=True)
        log.update_high_watermark(log.log_end_offset)
        assert len(log.segments) >= 8
        yield log, stored_batches(log)


def new_store(tmp_path: Path, *config: str) -> Store:
    store = Store.open(tmp_path, parse_store_config(["segment.bytes=3000", *config]))
    store.create_topic(TOPIC, 1)
    return store


def boundaries(batches: list[StoredBatch]) -> list[int]:
    return sorted({b.base_offset for b in batches} | {b.last_offset + 1 for b in batches})


def interesting_ranges(batches: list[StoredBatch], hw: int, rng: random.Random, count: int) -> list[tuple[int, int]]:
    edges = boundaries(batches)
    ranges = [(0, hw), (0, 1), (hw - 1, hw), (hw, hw), (5, 5), (7, 3)]
    for _ in range(count):
        a = rng.choice([rng.randrange(hw), rng.choice(edges), rng.choice(edges) + 1])
        b = rng.choice([rng.randrange(hw + 1), rng.choice(edges), rng.choice(edges) - 1, hw])
        ranges.append((min(a, hw), min(max(b, 0), hw)))
    return ranges


def read_all(view: RangeView, step: int) -> bytes:
    return b"".join(view.read(p, step) for p in range(0, view.size, step))


# --- names ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "stem", "fmt"),
    [
        ("42", "42", Format.PLAIN),
        ("42.jsonl", "42", Format.JSONL),
        ("42.kafka", "42", Format.KAFKA),
        ("earliest", "earliest", Format.PLAIN),
        ("earliest.jsonl", "earliest", Format.JSONL),
        ("@1700000000000.kafka", "@1700000000000", Format.KAFKA),
        ("10-20", "10-20", Format.PLAIN),
        ("10-20.jsonl", "10-20", Format.JSONL),
        ("latest", "latest", Format.PLAIN),
        ("00000000000000000042.jsonl", "00000000000000000042", Format.JSONL),
    ],
)
def test_view_names_split_into_stem_and_format(name: str, stem: str, fmt: Format) -> None:
    assert parse_view_name(name) == (stem, fmt)


@pytest.mark.parametrize(
    "name",
    ["", ".jsonl", "42.json", "42.jsonl.kafka", "-1", "@", "@-5", "10-", "-20", "1-2-3", "x", "earliest2",
     ".42.crc", "_spark_metadata", "4 2", "٤٢", "42.JSONL", "Earliest"],
)  # fmt: skip
def test_other_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError):
        parse_view_name(name)


def test_ranges_parse_and_other_stems_are_not_ranges() -> None:
    assert parse_range("10-20") == (10, 20)
    assert parse_range("10") is None
    assert parse_range("earliest") is None


def test_resolve_start_for_earliest_latest_digits_timestamps_and_garbage(tmp_path: Path) -> None:
    with new_store(tmp_path) as store:
        log = store.log(TOPIC, 0)
        for i in range(40):
            log.append_as_leader(encode_values([b"a%d" % i, b"b%d" % i], BASE_TS + 100 * i), 0)
        log.update_high_watermark(60)
        store.delete_records(TOPIC, 0, 10)
        assert resolve_start(log, "earliest") == 10
        assert resolve_start(log, "latest") == 60
        assert resolve_start(log, "17") == 17
        assert resolve_start(log, "0017") == 17
        assert resolve_start(log, f"@{BASE_TS + 100 * 20}") == 40  # batch 20 holds offsets 40, 41
        assert resolve_start(log, f"@{BASE_TS + 100 * 20 + 1}") == 42
        assert resolve_start(log, f"@{BASE_TS}") == 10  # never below the log start offset
        assert resolve_start(log, f"@{BASE_TS + 10**9}") == 60  # none that late: the HW, an empty view
        assert open_range(log, RenderCache(), TOPIC, 0, Format.PLAIN, 60, 60).size == 0
        for garbage in ["", "x", "@", "@x", "-3", "10-20", "1.5", "٣"]:
            with pytest.raises(ValueError):
                resolve_start(log, garbage)


# --- sizes and bytes ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk_bytes", CHUNK_SIZES)
@pytest.mark.parametrize("fmt", list(Format))
def test_size_and_bytes_equal_the_full_rendering_for_many_ranges(
    populated: tuple[Log, list[StoredBatch]], fmt: Format, chunk_bytes: int
) -> None:
    log, batches = populated
    hw = log.high_watermark
    rng = random.Random(SEED + chunk_bytes)
    cache = RenderCache(chunk_bytes=chunk_bytes)
    for start, end in interesting_ranges(batches, hw, rng, 60):
        want = expected(batches, fmt, start, end)
        with open_range(log, cache, TOPIC, 0, fmt, start, end) as view:
            assert view.size == len(want), (start, end)
            assert view.read(0, view.size + 100) == want, (start, end)
            assert read_all(view, rng.choice([1000, 4096, 131072])) == want
            for _ in range(20):
                p = rng.randrange(view.size + 2)
                n = rng.randrange(300)
                assert view.read(p, n) == want[p : p + n], (start, end, p, n)


@pytest.mark.parametrize("fmt", list(Format))
def test_reads_at_every_byte_position_equal_slices_of_the_rendering(
    populated: tuple[Log, list[StoredBatch]], fmt: Format
) -> None:
    log, batches = populated
    edges = boundaries(batches)
    start, end = edges[40] + 1, edges[70] - 1  # both inside batches
    want = expected(batches, fmt, start, end)
    assert 3000 < len(want) < 60000
    with open_range(log, RenderCache(chunk_bytes=700), TOPIC, 0, fmt, start, end) as view:
        assert view.size == len(want)
        for p in range(view.size + 1):
            for n in (1, 61):
                assert view.read(p, n) == want[p : p + n], (p, n)


def test_plain_is_the_values_one_per_line(populated: tuple[Log, list[StoredBatch]]) -> None:
    log, batches = populated
    values = [r.value or b"" for b in batches if not b.is_control for r in b.records if 3 <= r.offset < 500]
    with open_range(log, RenderCache(), TOPIC, 0, Format.PLAIN, 3, 500) as view:
        assert view.read(0, view.size) == b"".join(v + b"\n" for v in values)


def test_json_lines_parse_with_the_spec_key_order(populated: tuple[Log, list[StoredBatch]]) -> None:
    log, batches = populated
    hw = log.high_watermark
    with open_range(log, RenderCache(), TOPIC, 0, Format.JSONL, 0, hw) as view:
        text = view.read(0, view.size).decode("utf-8")
    lines = text.splitlines()
    records = {r.offset: r for b in batches if not b.is_control for r in b.records}
    assert [json.loads(line)["offset"] for line in lines] == sorted(records)
    seen_encodings = set()
    for line in lines:
        obj = json.loads(line)
        keys = [k for k in obj if not k.endswith("Encoding")]
        assert keys == JSON_KEYS
        order = list(obj)
        for k in ("key", "value"):
            if k + "Encoding" in obj:
                assert order.index(k + "Encoding") == order.index(k) + 1
                seen_encodings.add(k)
                assert base64.b64decode(obj[k]) == (records[obj["offset"]].key if k == "key" else
                                                     records[obj["offset"]].value)  # fmt: skip
        assert json.dumps(obj, separators=(",", ":"), ensure_ascii=False) == line  # compact, UTF-8 as is
        assert all(list(h)[:2] == ["key", "value"] for h in obj["headers"])
    assert seen_encodings == {"key", "value"}
    assert "é✓" in text  # UTF-8 as is, not \u-escaped


def test_kafka_view_is_the_stored_batches_unchanged_the_first_holding_earlier_records(
    populated: tuple[Log, list[StoredBatch]],
) -> None:
    log, batches = populated
    inside = next(b for b in batches if b.last_offset - b.base_offset >= 4 and not b.is_control)
    start = inside.base_offset + 2
    with open_range(log, RenderCache(), TOPIC, 0, Format.KAFKA, start, log.high_watermark) as view:
        data = view.read(0, view.size)
    first = next(iter_batch_positions(data))
    assert data[: first[1]] == inside.data  # whole, with the records before start
    assert read_header(data, 0).base_offset < start
    assert data == b"".join(b.data for b in batches if b.last_offset >= start)


def test_control_batches_render_as_nothing_but_stay_in_kafka_views(tmp_path: Path) -> None:
    with new_store(tmp_path) as store:
        log = store.log(TOPIC, 0)
        log.append_as_leader(encode_values([b"a", b"b"], BASE_TS), 0)
        marker = encode_end_txn_marker(
            ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=BASE_TS,
            base_offset=2, partition_leader_epoch=0,
        )  # fmt: skip
        log.append_as_follower(marker)
        log.append_as_leader(encode_values([b"c"], BASE_TS), 0)
        log.update_high_watermark(4)
        cache = RenderCache()
        assert open_range(log, cache, TOPIC, 0, Format.PLAIN, 0, 4).read(0, 100) == b"a\nb\nc\n"
        assert open_range(log, cache, TOPIC, 0, Format.PLAIN, 2, 3).size == 0
        assert [json.loads(x)["offset"] for x in open_range(log, cache, TOPIC, 0, Format.JSONL, 1, 4).read(0, 999)
                .splitlines()] == [1, 3]  # fmt: skip
        kafka = open_range(log, cache, TOPIC, 0, Format.KAFKA, 2, 3).read(0, 999)
        assert kafka == marker and read_header(kafka).is_control


def test_log_append_time_batches_render_timestamp_type_1(tmp_path: Path) -> None:
    with Store.open(tmp_path, parse_store_config([])) as store:
        store.create_topic("lat", 1, {"message.timestamp.type": "LogAppendTime"})
        log = store.log("lat", 0)
        info = log.append_as_leader(encode_values([b"x", b"y"], BASE_TS), 0, now_ms=NOW_MS)
        log.update_high_watermark(2)
        lines = open_range(log, RenderCache(), "lat", 0, Format.JSONL, 0, 2).read(0, 999).splitlines()
        assert [(json.loads(x)["timestamp"], json.loads(x)["timestampType"]) for x in lines] == [(NOW_MS, 1)] * 2
        assert info.log_append_time == NOW_MS


def test_a_high_watermark_inside_a_batch_ends_text_views_exactly_there(tmp_path: Path) -> None:
    with new_store(tmp_path) as store:
        log = store.log(TOPIC, 0)
        log.append_as_leader(encode_values([b"%d" % i for i in range(10)], BASE_TS), 0)
        log.update_high_watermark(6)
        cache = RenderCache()
        assert open_range(log, cache, TOPIC, 0, Format.PLAIN, 2, 6).read(0, 99) == b"2\n3\n4\n5\n"
        assert open_range(log, cache, TOPIC, 0, Format.KAFKA, 2, 6).size == log.segments[0].size_bytes


def test_views_span_several_segments(tmp_path: Path) -> None:
    rng = random.Random(SEED + 1)
    with new_store(tmp_path, "segment.bytes=2000") as store:
        log = store.log(TOPIC, 0)
        fill(log, rng, 120)
        log.update_high_watermark(log.log_end_offset)
        assert len(log.segments) >= 10
        batches = stored_batches(log)
        cache = RenderCache(chunk_bytes=300)
        for fmt in Format:
            for start, end in [(0, log.high_watermark), (5, log.high_watermark - 5)]:
                with open_range(log, cache, TOPIC, 0, fmt, start, end) as view:
                    assert view.read(0, view.size) == expected(batches, fmt, start, end)


# --- the cache ------------------------------------------------------------------------------------------------------


def count_renders(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Batches sized and rendered (every size and rendering goes through the core's stored renderer and sizers, a span
    of batches a call, under the names the mount imports them by)."""
    counts = {"size": 0, "render": 0}
    size, render = renderspan.stored_size, renderspan.render_stored
    sizes = segmentindex.stored_sizes

    def counting_size(buf: bytes, positions: list[int], *args: object, **kwargs: object) -> int:
        counts["size"] += len(positions)
        return size(buf, positions, *args, **kwargs)  # type: ignore[arg-type]

    def counting_render(buf: bytes, positions: list[int], *args: object, **kwargs: object) -> bytes:
        counts["render"] += len(positions)
        return render(buf, positions, *args, **kwargs)  # type: ignore[arg-type]

    def counting_sizes(buf: bytes, positions: list[int], *args: object, **kwargs: object) -> list[int]:
        counts["size"] += len(positions)
        return sizes(buf, positions, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(renderspan, "stored_size", counting_size)
    monkeypatch.setattr(segmentindex, "stored_sizes", counting_sizes)  # the index sizes chunks through its own name
    monkeypatch.setattr(renderspan, "render_stored", counting_render)
    return counts


@pytest.mark.parametrize("fmt", [Format.PLAIN, Format.JSONL])
def test_a_second_open_of_the_same_range_renders_nothing(
    populated: tuple[Log, list[StoredBatch]], fmt: Format, monkeypatch: pytest.MonkeyPatch
) -> None:
    log, batches = populated
    counts = count_renders(monkeypatch)
    cache = RenderCache(chunk_bytes=700)
    edges = boundaries(batches)
    start, end = edges[10] + 1, edges[-20] - 1
    size = open_range(log, cache, TOPIC, 0, fmt, start, end).size
    assert counts["size"] + counts["render"] > 100
    counts["size"] = counts["render"] = 0
    assert open_range(log, cache, TOPIC, 0, fmt, start, end).size == size
    assert counts == {"size": 0, "render": 0}
    # A range inside the indexed one renders only its partial ends (at most about a chunk each).
    open_range(log, cache, TOPIC, 0, fmt, edges[50] + 1, edges[100] + 1)
    assert counts["size"] + counts["render"] <= 2 * (700 // 60 + 3)


def test_a_read_renders_only_the_chunk_it_touches(
    populated: tuple[Log, list[StoredBatch]], monkeypatch: pytest.MonkeyPatch
) -> None:
    log, batches = populated
    cache = RenderCache(chunk_bytes=2048, max_rendered_bytes=0)  # nothing shared: count every render
    smallest = min(len(b.data) for b in batches)
    with open_range(log, cache, TOPIC, 0, Format.PLAIN, 1, log.high_watermark) as view:
        counts = count_renders(monkeypatch)
        want = expected(batches, Format.PLAIN, 1, log.high_watermark)
        rng = random.Random(SEED)
        for _ in range(200):
            p = rng.randrange(view.size)
            counts["render"] = 0
            assert view.read(p, 1) == want[p : p + 1]
            assert counts["render"] <= 2048 // smallest + 3
    assert len(batches) > 200


def test_the_cache_stays_within_its_entry_budget_and_views_stay_right(
    populated: tuple[Log, list[StoredBatch]],
) -> None:
    log, batches = populated
    cache = RenderCache(max_entries=12, chunk_bytes=64)
    views = [open_range(log, cache, TOPIC, 0, fmt, 3, log.high_watermark) for fmt in (Format.PLAIN, Format.JSONL)]
    stats = cache.statistics()
    assert stats.evictions > 0
    assert stats.entries <= 12 or stats.segment_indexes == 1
    for fmt, view in zip((Format.PLAIN, Format.JSONL), views, strict=True):
        assert view.read(0, view.size) == expected(batches, fmt, 3, log.high_watermark)
        view.close()


def test_concurrent_opens_and_reads_agree(populated: tuple[Log, list[StoredBatch]]) -> None:
    log, batches = populated
    cache = RenderCache(chunk_bytes=500, max_rendered_bytes=20_000)
    hw = log.high_watermark
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(15):
                fmt = rng.choice([Format.PLAIN, Format.JSONL])
                start = rng.randrange(hw)
                end = rng.randrange(start, hw + 1)
                want = expected(batches, fmt, start, end)
                with open_range(log, cache, TOPIC, 0, fmt, start, end) as view:
                    assert view.size == len(want)
                    for _ in range(10):
                        p, n = rng.randrange(view.size + 1), rng.randrange(5000)
                        assert view.read(p, n) == want[p : p + n]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(SEED + i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# --- bounds and retention -------------------------------------------------------------------------------------------


def test_offsets_outside_the_log_are_out_of_range_and_empty_ranges_are_empty(tmp_path: Path) -> None:
    with new_store(tmp_path) as store:
        log = store.log(TOPIC, 0)
        for i in range(30):
            log.append_as_leader(encode_values([b"%d" % i] * 3, BASE_TS), 0)
        log.update_high_watermark(60)
        store.delete_records(TOPIC, 0, 20)
        cache = RenderCache()
        for start in (19, 0, 91, 10**30):
            with pytest.raises(OffsetOutOfRange):
                open_range(log, cache, TOPIC, 0, Format.PLAIN, start, 60)
        for fmt in Format:
            for start, end in [(30, 30), (30, 10), (70, 60), (90, 60), (70, 90)]:  # 70, 90: between the HW and the LEO
                view = open_range(log, cache, TOPIC, 0, fmt, start, end)
                assert view.size == 0 and view.read(0, 10) == b""
        for end in (90, 91, 10**30, None):  # an end past the HW (or none) is cut to it: the core's isolation bound
            view = open_range(log, cache, TOPIC, 0, Format.PLAIN, 20, end)
            assert view.end_offset == 60 and view.read(0, 1000).count(b"\n") == 40
            view.close()
        view = open_range(log, cache, TOPIC, 0, Format.PLAIN, 20, 50)
        assert view.read(0, 1000).count(b"\n") == 30
        view.close()
        view.close()  # idempotent
        assert view.closed


@pytest.mark.parametrize("fmt", list(Format))
def test_a_view_keeps_reading_after_retention_deleted_its_segments(tmp_path: Path, fmt: Format) -> None:
    with new_store(tmp_path, "segment.bytes=400", "file.delete.delay.ms=0", "retention.ms=-1") as store:
        log = store.log(TOPIC, 0)
        for i in range(40):
            log.append_as_leader(encode_values([b"record-%02d" % i] * 3, BASE_TS + i), 0)
        log.update_high_watermark(log.log_end_offset)
        batches = stored_batches(log)
        first_paths = [s.log_path for s in log.segments[:3]]
        want = expected(batches, fmt, 1, log.high_watermark)
        view = open_range(log, RenderCache(chunk_bytes=100), TOPIC, 0, fmt, 1, log.high_watermark)
        store.delete_records(TOPIC, 0, log.segments[3].base_offset)
        assert log.delete_expired_files(now_ms=2**62) >= 3
        assert not any(p.exists() for p in first_paths)
        assert read_all(view, 97) == want
        with pytest.raises(OffsetOutOfRange):
            open_range(log, RenderCache(), TOPIC, 0, fmt, 1, log.high_watermark)
        view.close()


def test_a_truncated_segment_is_indexed_again(tmp_path: Path) -> None:
    with new_store(tmp_path, "segment.bytes=100000") as store:
        log = store.log(TOPIC, 0)
        for i in range(50):
            log.append_as_leader(encode_values([b"old-%02d" % i] * 4, BASE_TS), 0)
        log.update_high_watermark(log.log_end_offset)
        cache = RenderCache(chunk_bytes=200)
        old = open_range(log, cache, TOPIC, 0, Format.PLAIN, 0, 200)
        assert old.read(0, 10) == b"old-00\nold"
        log.truncate_to(100)  # a follower's truncation below its HW (an unclean election)
        for i in range(50):
            log.append_as_leader(encode_values([b"new-record-%02d" % i] * 2, BASE_TS), 0)
        log.update_high_watermark(log.log_end_offset)
        for fmt in (Format.PLAIN, Format.JSONL):
            with open_range(log, cache, TOPIC, 0, fmt, 0, 200) as view:
                assert view.read(0, view.size) == expected(stored_batches(log), fmt, 0, 200)
        with pytest.raises(StorageError, match="truncated"):
            old.read(0, old.size)  # its promise cannot be kept: an error, never other bytes
        old.close()


# --- hw/ --------------------------------------------------------------------------------------------------------------


def test_hw_files_cover_the_committed_records_once(tmp_path: Path) -> None:
    rng = random.Random(SEED + 2)
    with new_store(tmp_path, "segment.bytes=1500") as store:
        log = store.log(TOPIC, 0)
        fill(log, rng, 80)
        log.update_high_watermark(log.log_end_offset - 3)
        segments = log.segments
        store.delete_records(TOPIC, 0, segments[1].base_offset + 2)
        segments = log.segments
        files = hw_files(log)
        assert [name for name, _, _ in files] == [f"{s.base_offset:020d}.jsonl" for s in segments][: len(files)]
        assert files[0][1] == log.log_start_offset > segments[0].base_offset
        assert files[-1][2] == log.high_watermark
        for (_, _, end), (_, start, _) in itertools.pairwise(files):
            assert end == start
        cache = RenderCache(chunk_bytes=400)
        text = b"".join(open_range(log, cache, TOPIC, 0, Format.JSONL, s, e).read(0, 10**9) for _, s, e in files)
        assert text == expected(stored_batches(log), Format.JSONL, log.log_start_offset, log.high_watermark)


def test_hw_files_skip_segments_with_nothing_committed(tmp_path: Path) -> None:
    with new_store(tmp_path, "segment.bytes=200") as store:
        log = store.log(TOPIC, 0)
        assert hw_files(log) == []
        for i in range(6):
            log.append_as_leader(encode_values([b"r%d" % i] * 5, BASE_TS), 0)
        assert len(log.segments) >= 3
        assert hw_files(log) == []  # HW 0
        log.update_high_watermark(log.segments[1].base_offset)
        assert hw_files(log) == [("00000000000000000000.jsonl", 0, log.segments[1].base_offset)]


def test_the_active_segments_hw_file_only_grows_at_the_end(tmp_path: Path) -> None:
    with new_store(tmp_path, "segment.bytes=1000000") as store:
        log = store.log(TOPIC, 0)
        cache = RenderCache(chunk_bytes=300)
        previous = b""
        for step in range(30):
            log.append_as_leader(encode_values([b"step-%d-%d" % (step, i) for i in range(7)], BASE_TS), 0)
            log.update_high_watermark(log.log_end_offset - 2)
            ((name, start, end),) = hw_files(log)
            assert name == "00000000000000000000.jsonl"
            view = open_range(log, cache, TOPIC, 0, Format.JSONL, start, end)
            data = view.read(0, view.size)
            assert len(data) == view.size > len(previous)
            assert data.startswith(previous)
            previous = data
            view.close()
        assert previous == expected(stored_batches(log), Format.JSONL, 0, log.high_watermark)


# --- follow/ --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", list(Format))
def test_follow_chunks_concatenate_to_the_rendering(populated: tuple[Log, list[StoredBatch]], fmt: Format) -> None:
    log, batches = populated
    cache = RenderCache()
    hw = log.high_watermark
    largest_batch = max(len(expected([b], fmt, 0, hw)) for b in batches)
    start = 3
    for max_bytes in (1, 500, 64 * 1024):
        offset, parts = start, []
        while offset < hw:
            data, nxt = render_follow_chunk(log, cache, TOPIC, 0, fmt, offset, hw, max_bytes)
            assert nxt > offset
            assert len(data) <= max(max_bytes, largest_batch)
            parts.append(data)
            offset = nxt
        assert offset == hw or fmt is Format.KAFKA
        assert b"".join(parts) == expected(batches, fmt, start, hw)
    assert render_follow_chunk(log, cache, TOPIC, 0, fmt, hw, hw, 100) == (b"", hw)
    with pytest.raises(OffsetOutOfRange):
        render_follow_chunk(log, cache, TOPIC, 0, fmt, log.log_end_offset + 1, hw, 100)


def test_follow_stops_exactly_at_its_end_inside_a_batch(tmp_path: Path) -> None:
    with new_store(tmp_path) as store:
        log = store.log(TOPIC, 0)
        log.append_as_leader(encode_values([b"%d" % i for i in range(10)], BASE_TS), 0)
        cache = RenderCache()
        log.update_high_watermark(8)
        assert render_follow_chunk(log, cache, TOPIC, 0, Format.PLAIN, 2, 5, 1000) == (b"2\n3\n4\n", 5)
        # An end past the HW is cut at it (the core's isolation bound), inside the batch too.
        assert render_follow_chunk(log, cache, TOPIC, 0, Format.PLAIN, 5, 10, 1000) == (b"5\n6\n7\n", 8)
        log.update_high_watermark(10)
        assert render_follow_chunk(log, cache, TOPIC, 0, Format.PLAIN, 5, 10, 1000) == (b"5\n6\n7\n8\n9\n", 10)


# --- state ----------------------------------------------------------------------------------------------------------


def test_state_is_one_json_object_with_the_spec_fields(tmp_path: Path) -> None:
    with new_store(tmp_path, "segment.bytes=300") as store:
        log = store.log(TOPIC, 0)
        for i in range(12):
            log.append_as_leader(encode_values([b"s%d" % i] * 3, BASE_TS + i), 4)
        log.update_high_watermark(30)
        text = render_state(log, TOPIC, 0)
        assert text.endswith(b"}\n") and b", " not in text and b": " not in text
        state = json.loads(text)
        assert list(state) == [
            "topic", "partition", "role", "offline", "leader_epoch", "log_start_offset", "high_watermark",
            "last_stable_offset", "log_end_offset", "isr", "replicas", "open_transactions", "segments", "cleaner",
        ]  # fmt: skip
        assert state["topic"] == TOPIC and state["partition"] == 0 and state["role"] == "leader"
        assert state["offline"] is False
        assert state["leader_epoch"] == 4
        assert (state["log_start_offset"], state["high_watermark"], state["last_stable_offset"]) == (0, 30, 30)
        assert state["log_end_offset"] == 36
        assert (state["isr"], state["replicas"], state["open_transactions"]) == ([0], {}, [])
        assert [s["base_offset"] for s in state["segments"]] == [s.base_offset for s in log.segments]
        assert [s["size_bytes"] for s in state["segments"]] == [s.size_bytes for s in log.segments]
        assert state["segments"][0]["largest_timestamp"] >= BASE_TS
        follower = json.loads(
            render_state(
                log, TOPIC, 0, role="follower", leader_epoch=7, isr=[1, 2], replicas={2: {"log_end_offset": 3}}
            )
        )
        assert (follower["role"], follower["leader_epoch"], follower["isr"]) == ("follower", 7, [1, 2])
        assert follower["replicas"] == {"2": {"log_end_offset": 3}}
