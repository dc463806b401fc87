"""Sequential reads of ``at/`` and ``hw/`` views (``mount/render/views.py``): the read-ahead that renders the chunks
after the one read in the same call, and ``RangeView.read_cached`` (answers from the shared LRU only, for the trio
thread). Whatever the order and size of the reads, the bytes are the reference rendering of each stored batch
(``core.format.render.render_plain`` / ``render_jsonl``), or the stored bytes for ``.kafka`` (read ahead by blocks),
and read_cached answers those bytes or None, never others."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from logfs.core.configtext import parse_store_config
from logfs.core.format.batch import Record, iter_batch_positions
from logfs.core.format.encode import encode_batch, encode_values
from logfs.core.format.render import render_jsonl, render_plain
from logfs.core.log.log import Log
from logfs.core.store import Store
from logfs.mount.render.rangeview import open_range
from logfs.mount.render.rendersize import RenderCache
from logfs.mount.render.renderspan import Format

TOPIC = "t"
TS = 1_700_000_000_000


@pytest.fixture
def log(tmp_path: Path) -> Iterator[Log]:
    store = Store.open(tmp_path / "store", parse_store_config(["segment.bytes=150000"]))
    try:
        store.create_topic(TOPIC, 1)
        log = store.log(TOPIC, 0)
        rng = random.Random(5)
        for i in range(120):
            n = rng.choice([1, 3, 70, 300])
            if i % 3:
                batch = encode_values([b"v%06d-" % i + b"x" * rng.choice([0, 20, 100]) for _ in range(n)], TS)
            else:
                records = [Record(j, TS + j, rng.choice([None, b"k"]), b"%d" % j * rng.randint(0, 9)) for j in range(n)]
                batch = encode_batch(records)
            log.append_as_leader(bytearray(batch), 0)
        log.update_high_watermark(log.log_end_offset)
        assert len(log.segments) > 2
        yield log
    finally:
        store.close()


def reference(log: Log, fmt: Format, start: int) -> bytes:
    out = []
    for segment in log.segments:
        data = segment.log_file.read(0, segment.size_bytes)
        for at, _ in iter_batch_positions(data):
            if fmt is Format.PLAIN:
                out.append(render_plain(data, at, start))
            else:
                out.append(render_jsonl(data, TOPIC, 0, at, start))
    return b"".join(out)


@pytest.mark.parametrize("fmt", [Format.PLAIN, Format.JSONL])
@pytest.mark.parametrize("chunk_bytes", [500, 4096, 64 * 1024])
def test_sequential_reads_of_any_size_and_order_give_the_rendering(log: Log, fmt: Format, chunk_bytes: int) -> None:
    rng = random.Random(chunk_bytes)
    start = 7
    want = reference(log, fmt, start)
    cache = RenderCache(chunk_bytes=chunk_bytes)
    for size in (4096, 65536, 262144, 1_000_003):
        with open_range(log, cache, TOPIC, 0, fmt, start, log.high_watermark) as view:
            assert view.size == len(want)
            got = bytearray(len(want))
            positions = list(range(0, view.size, size))
            # The kernel's readahead sends a few requests at once, not always in order: swap neighbours now and then.
            for i in range(0, len(positions) - 1, 2):
                if rng.random() < 0.3:
                    positions[i], positions[i + 1] = positions[i + 1], positions[i]
            for p in positions:
                cached = view.read_cached(p, size)
                data = view.read(p, size)
                assert cached is None or cached == data
                got[p : p + len(data)] = data
            assert bytes(got) == want


@pytest.mark.parametrize("fmt", [Format.PLAIN, Format.JSONL])
def test_read_cached_answers_the_next_reads_of_a_sequential_reader(log: Log, fmt: Format) -> None:
    want = reference(log, fmt, 0)
    cache = RenderCache(chunk_bytes=2048)
    with open_range(log, cache, TOPIC, 0, fmt, 0, log.high_watermark) as view:
        assert view.read_cached(0, 4096) is None  # nothing rendered yet
        position, hits = 0, 0
        while position < view.size:
            data = view.read_cached(position, 4096)
            if data is None:
                data = view.read(position, 4096)
            else:
                hits += 1
            assert data == want[position : position + 4096]
            position += len(data)
        assert hits > position // 4096 // 2  # most reads after the first find their chunks rendered ahead


def test_concurrent_sequential_readers_of_one_view_agree(log: Log) -> None:
    want = reference(log, Format.JSONL, 0)
    cache = RenderCache(chunk_bytes=1024, max_rendered_bytes=1_000_000)
    errors: list[BaseException] = []
    with open_range(log, cache, TOPIC, 0, Format.JSONL, 0, log.high_watermark) as view:

        def reader(size: int) -> None:
            try:
                position = 0
                while chunk := view.read(position, size):
                    assert chunk == want[position : position + len(chunk)]
                    position += len(chunk)
                assert position == len(want)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=reader, args=(size,)) for size in (4096, 131072, 262144, 5000)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors


def stored(log: Log) -> bytes:
    return b"".join(segment.log_file.read(0, segment.size_bytes) for segment in log.segments)


@pytest.mark.parametrize("size", [4096, 131072, 262144, 1_000_003])
def test_a_sequential_kafka_reader_is_answered_from_blocks_read_ahead(log: Log, size: int) -> None:
    want = stored(log)
    cache = RenderCache()
    with open_range(log, cache, TOPIC, 0, Format.KAFKA, 0, log.high_watermark) as view:
        assert view.size == len(want)
        assert view.read_cached(0, size) is None  # nothing read yet
        position, hits = 0, 0
        while position < view.size:
            data = view.read_cached(position, size)
            if data is None:
                data = view.read(position, size)
            else:
                hits += 1
            assert data == want[position : position + size], position
            position += len(data)
        assert position == len(want)
        if size <= 4096:  # blocks end at segments (here ~150 KB): larger reads cross one at every other read
            assert hits > position // size // 2  # most reads after a block's first find it kept
    with open_range(log, RenderCache(), TOPIC, 0, Format.KAFKA, 0, log.high_watermark) as view:
        rng = random.Random(size)
        for _ in range(50):  # random reads: only their bytes, nothing kept for the trio thread
            p = rng.randrange(view.size)
            assert view.read(p, 4096) == want[p : p + 4096]


def test_kafka_blocks_follow_a_truncation(log: Log) -> None:
    """After a truncation and new appends at the same positions, a view reads the new bytes, never a block kept from
    before (blocks are named by the segment's generation, ``StoredBatches.generation``)."""
    cache = RenderCache()
    end = log.high_watermark
    with open_range(log, cache, TOPIC, 0, Format.KAFKA, 0, end) as view:
        view.read(0, 4096)
        view.read(4096, 4096)  # sequential: the first block is kept
        assert view.read_cached(8192, 4096) is not None
    cut = log.segments[-1].base_offset + 1
    log.truncate_to(cut)
    log.append_as_leader(bytearray(encode_values([b"after-the-cut"] * 5, TS)), 0)
    log.update_high_watermark(log.log_end_offset)
    want = stored(log)
    with open_range(log, cache, TOPIC, 0, Format.KAFKA, 0, log.high_watermark) as view:
        position = 0
        while chunk := view.read(position, 65536):
            assert chunk == want[position : position + len(chunk)]
            position += len(chunk)
        assert position == len(want)
