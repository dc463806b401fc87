"""The ``committed/`` renderings (read_committed; docs/mount.md, "Files, modes and caching") without FUSE:
``mount/render/rangeview.py``, ``mount/render/views.py``, ``mount/render/rendersize.py`` and
``core/format/renderstored.py`` with an aborted-transaction filter, against two independent oracles.

The logs are built with the core (transactional batches of several producers, COMMIT and ABORT markers, plain
batches, small segments). The first oracle is the test's own model of which transactions it aborted: a batch is kept
iff it is not a control batch and not a transactional batch between its producer's first offset and ABORT marker; its
records are rendered by ``test_views``' oracle (``json.dumps``, not ``core/format/render.py``). The second is Kafka's
consumer filter (``tests/helpers/consumer_filter.py``) over the stored bytes with the aborted transactions the model
knows: both must agree on the records. Random tests are seeded and print their seed.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from consumer_filter import committed_records
from test_views import StoredBatch, json_line, read_all, seeded, stored_batches

from logfs.core.configtext import parse_store_config
from logfs.core.format.abortedbatches import AbortedBatches
from logfs.core.format.batch import BatchHeader, Record, read_header
from logfs.core.format.encode import encode_batch, encode_values
from logfs.core.log.log import Log
from logfs.core.store import Store
from logfs.core.txn.index import AbortedTxn
from logfs.mount.render import rendersize
from logfs.mount.render.rangeview import open_range
from logfs.mount.render.rendersize import RenderCache
from logfs.mount.render.renderspan import Format
from logfs.mount.render.views import hw_files, render_follow_chunk, render_state, resolve_start

SEED = 20261122
TOPIC = "t"
BASE_TS = int(time.time() * 1000) - 10_000_000
FORMATS = [Format.PLAIN, Format.JSONL, Format.KAFKA]


# --- building transactional logs ------------------------------------------------------------------------------------


@dataclass
class Model:
    """What the test appended: each producer's next sequence and open transaction, and the aborted transactions."""

    sequences: dict[int, int] = field(default_factory=dict)
    open: dict[int, int] = field(default_factory=dict)  # producer id → first offset
    aborted: list[tuple[int, int, int]] = field(default_factory=list)  # (producer id, first offset, marker offset)

    def txn(self, log: Log, pid: int, values: list[bytes]) -> None:
        seq = self.sequences.get(pid, 0)
        ts = BASE_TS + log.log_end_offset
        records = [Record(i, ts + i, b"k%d" % pid, v) for i, v in enumerate(values)]
        batch = encode_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True)
        info = log.append_as_leader(batch, 0)
        self.sequences[pid] = seq + len(values)
        self.open.setdefault(pid, info.first_offset)

    def end(self, log: Log, pid: int, *, commit: bool) -> None:
        info = log.append_end_txn_marker(pid, 0, commit=commit, coordinator_epoch=0, leader_epoch=0)
        first = self.open.pop(pid)
        if not commit:
            self.aborted.append((pid, first, info.first_offset))

    def plain(self, log: Log, values: list[bytes]) -> None:
        log.append_as_leader(encode_values(values, BASE_TS + log.log_end_offset), 0)

    def kept(self, b: StoredBatch) -> bool:
        """The model's rule: a reader of committed data sees this batch."""
        if b.is_control:
            return False
        h = _header(b)
        if not h.is_transactional:
            return True
        return not any(p == h.producer_id and f <= b.base_offset <= m for p, f, m in self.aborted)

    def aborted_txns(self) -> list[AbortedTxn]:
        return [AbortedTxn(p, f, m, m + 1) for p, f, m in self.aborted]


def _header(b: StoredBatch) -> BatchHeader:
    return read_header(b.data, 0)


def fill(log: Log, model: Model, rng: random.Random, steps: int, *, pids: tuple[int, ...] = (1, 2, 3)) -> None:
    """Interleave transactions of ``pids`` (some committed, some aborted), plain batches, and HW moves."""
    for n in range(steps):
        kind = rng.random()
        pid = rng.choice(pids)
        if kind < 0.45:
            count = rng.choice([1, 3, 20])
            model.txn(log, pid, [b"t%d-%d-%d" % (pid, n, i) + b"." * rng.randrange(20) for i in range(count)])
        elif kind < 0.65 and model.open:
            model.end(log, rng.choice(sorted(model.open)), commit=rng.random() < 0.5)
        else:
            count = rng.choice([1, 5, 40])
            quote = b'"q\\' if rng.random() < 0.2 else b""
            model.plain(log, [b"p%d-%d" % (n, i) + quote for i in range(count)])
        if rng.random() < 0.3:
            log.update_high_watermark(log.log_end_offset)


def close_all(log: Log, model: Model, rng: random.Random) -> None:
    for pid in sorted(model.open):
        model.end(log, pid, commit=rng.random() < 0.5)
    log.update_high_watermark(log.log_end_offset)


def new_store(tmp_path: Path, *config: str) -> Store:
    store = Store.open(tmp_path, parse_store_config(["segment.bytes=3000", *config]))
    store.create_topic(TOPIC, 1)
    return store


def expected(batches: list[StoredBatch], model: Model, fmt: Format, start: int, end: int) -> bytes:
    """The committed rendering of ``[start, end)`` by the model's rule."""
    if end <= start:
        return b""
    kept = [b for b in batches if model.kept(b) and b.last_offset >= start and b.base_offset < end]
    if fmt is Format.KAFKA:
        return b"".join(b.data for b in kept)
    out = []
    for b in kept:
        for r in b.records:
            if start <= r.offset < end:
                out.append((r.value or b"") + b"\n" if fmt is Format.PLAIN else json_line(TOPIC, 0, b, r))
    return b"".join(out)


def kafka_filter_offsets(batches: list[StoredBatch], model: Model, end: int) -> list[int]:
    """The offsets Kafka's consumer filter keeps below ``end``."""
    data = b"".join(b.data for b in batches if b.base_offset < end)
    return [r.offset for r in committed_records(data, model.aborted_txns()) if r.offset < end]


@pytest.fixture(scope="module")
def txn_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Log, Model, list[StoredBatch]]]:
    rng = seeded(SEED)
    with new_store(tmp_path_factory.mktemp("store"), "segment.bytes=4000") as store:
        log = store.log(TOPIC, 0)
        model = Model()
        fill(log, model, rng, 260)
        close_all(log, model, rng)
        assert len(log.segments) >= 8 and model.aborted
        assert log.last_stable_offset == log.high_watermark == log.log_end_offset
        yield log, model, stored_batches(log)


# --- the filter -----------------------------------------------------------------------------------------------------


def test_aborted_batches_cover_a_producers_batches_from_its_first_offset_to_its_marker(tmp_path: Path) -> None:
    with new_store(tmp_path) as store:
        log = store.log(TOPIC, 0)
        model = Model()
        model.txn(log, 1, [b"a"])  # 0
        model.plain(log, [b"x"])  # 1
        model.txn(log, 2, [b"b"])  # 2
        model.txn(log, 1, [b"c"])  # 3
        model.end(log, 1, commit=False)  # 4
        model.end(log, 2, commit=True)  # 5
        model.txn(log, 1, [b"d"])  # 6
        batches = stored_batches(log)
        f = AbortedBatches([AbortedTxn(1, 0, 4, 2)])
        covered = [f.covers(_header(b)) for b in batches if not b.is_control]
        assert covered == [True, False, False, True, False]
        assert [f.leaves_out(_header(b)) for b in batches] == [True, False, False, True, True, True, False]
        assert not AbortedBatches([]) and len(f) == 1


# --- views ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("chunk_bytes", [64, 700, rendersize.CHUNK_BYTES_DEFAULT])
def test_committed_views_equal_the_model_and_kafkas_consumer_filter(
    txn_log: tuple[Log, Model, list[StoredBatch]], fmt: Format, chunk_bytes: int
) -> None:
    log, model, batches = txn_log
    rng = random.Random(SEED + chunk_bytes)
    cache = RenderCache(chunk_bytes=chunk_bytes)
    lso = log.last_stable_offset
    edges = sorted({b.base_offset for b in batches} | {b.last_offset + 1 for b in batches})
    ranges = [(0, lso), (0, 1), (lso - 1, lso)]
    for _ in range(40):
        a = rng.choice([rng.randrange(lso), rng.choice(edges)])
        b = rng.choice([rng.randrange(lso + 1), rng.choice(edges), lso])
        ranges.append((min(a, lso), min(b, lso)))
    for start, end in ranges:
        with open_range(log, cache, TOPIC, 0, fmt, start, end, committed=True) as view:
            want = expected(batches, model, fmt, start, end)
            assert view.size == len(want), (start, end)
            assert read_all(view, 1000) == want, (start, end)
            if view.size:
                p = rng.randrange(view.size)
                assert view.read(p, 77) == want[p : p + 77]
    # Kafka's consumer filter keeps the same records.
    with open_range(log, cache, TOPIC, 0, Format.JSONL, 0, lso, committed=True) as view:
        offsets = [json.loads(line)["offset"] for line in read_all(view, 4096).splitlines()]
    assert offsets == kafka_filter_offsets(batches, model, lso)
    # And the uncommitted views still hold everything.
    with open_range(log, cache, TOPIC, 0, Format.PLAIN, 0, lso) as view:
        assert view.size == sum(len(r.value or b"") + 1 for b in batches if not b.is_control for r in b.records)


def test_without_transactions_committed_views_are_the_hw_views_and_share_their_index(tmp_path: Path) -> None:
    with new_store(tmp_path) as store:
        log = store.log(TOPIC, 0)
        for i in range(80):
            log.append_as_leader(encode_values([b"v%d-%d" % (i, j) for j in range(7)], BASE_TS + i), 0)
        log.update_high_watermark(log.log_end_offset)
        cache = RenderCache(chunk_bytes=500)
        hw = log.high_watermark
        for fmt in FORMATS:
            with (
                open_range(log, cache, TOPIC, 0, fmt, 3, hw, committed=True) as c,
                open_range(log, cache, TOPIC, 0, fmt, 3, hw) as h,
            ):
                assert c.size == h.size and read_all(c, 999) == read_all(h, 999)
        # Plain and JSON lines used the HW views' indexes: no committed index was made.
        assert cache.statistics().segment_indexes == 2 * len(log.segments)


def test_an_open_transaction_pins_the_lso_and_committed_views_stop_there(tmp_path: Path) -> None:
    with new_store(tmp_path) as store:
        log = store.log(TOPIC, 0)
        model = Model()
        model.plain(log, [b"a", b"b"])  # 0-1
        model.txn(log, 5, [b"t1", b"t2"])  # 2-3 (open)
        model.plain(log, [b"c"])  # 4
        log.update_high_watermark(log.log_end_offset)
        assert (log.last_stable_offset, log.high_watermark) == (2, 5)
        cache = RenderCache()
        assert resolve_start(log, "latest", committed=True) == 2
        assert resolve_start(log, "latest") == 5
        assert resolve_start(log, f"@{BASE_TS + 10**6}", committed=True) == 2
        end = log.last_stable_offset
        with open_range(log, cache, TOPIC, 0, Format.PLAIN, 0, end, committed=True) as view:
            assert read_all(view, 100) == b"a\nb\n"
        assert [(s, e) for _, s, e in hw_files(log, committed=True)] == [(0, 2)]
        assert render_follow_chunk(log, cache, TOPIC, 0, Format.PLAIN, 0, end, 1 << 20, True) == (b"a\nb\n", 2)
        state = json.loads(render_state(log, TOPIC, 0))
        assert state["last_stable_offset"] == 2
        assert state["open_transactions"] == [{"producer_id": 5, "first_offset": 2}]
        # The marker (abort) releases it; the aborted records never show.
        model.end(log, 5, commit=False)  # 5
        assert log.last_stable_offset == 2  # pinned until the marker is below the HW
        log.update_high_watermark(log.log_end_offset)
        assert log.last_stable_offset == 6
        for fmt, want in [(Format.PLAIN, b"a\nb\nc\n"), (Format.KAFKA, None)]:
            with open_range(log, cache, TOPIC, 0, fmt, 0, 6, committed=True) as view:
                got = read_all(view, 100)
            assert got == (want if want is not None else expected(stored_batches(log), model, fmt, 0, 6))
        assert render_follow_chunk(log, cache, TOPIC, 0, Format.PLAIN, 2, 6, 1 << 20, True) == (b"c\n", 6)
        assert json.loads(render_state(log, TOPIC, 0))["open_transactions"] == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_committed_hw_files_only_grow_as_the_lso_moves_and_equal_the_model(tmp_path: Path, fmt: Format) -> None:
    rng = seeded(SEED + 1)
    with new_store(tmp_path, "segment.bytes=2500") as store:
        log = store.log(TOPIC, 0)
        model = Model()
        cache = RenderCache(chunk_bytes=300)
        seen: dict[str, bytes] = {}
        for _ in range(30):
            fill(log, model, rng, 12)
            lso = log.last_stable_offset
            assert lso <= log.high_watermark
            batches = stored_batches(log)
            whole = b""
            for name, start, end in hw_files(log, committed=True):
                with open_range(log, cache, TOPIC, 0, fmt, start, end, committed=True) as view:
                    data = read_all(view, 512)
                    assert view.size == len(data)
                assert data.startswith(seen.get(name, b"")), name  # prefix-stable
                seen[name] = data
                whole += data
            assert whole == expected(batches, model, fmt, 0, lso)  # (.kafka: no batch twice across segments)
            # A follow reader from 0 gets the same bytes, chunk by chunk.
            out, position = b"", 0
            while position < lso:
                data, position = render_follow_chunk(log, cache, TOPIC, 0, fmt, position, lso, 700, True)
                out += data
            assert out == expected(batches, model, fmt, 0, lso)
        close_all(log, model, rng)


def test_a_committed_index_is_extended_as_the_lso_passes_new_aborts(tmp_path: Path) -> None:
    """The index built while a transaction was open (its filter knowing fewer aborts) stays right after the abort."""
    with new_store(tmp_path, "segment.bytes=100000") as store:
        log = store.log(TOPIC, 0)
        model = Model()
        cache = RenderCache(chunk_bytes=200)
        for round_ in range(6):
            model.txn(log, 1, [b"r%d-%d" % (round_, i) for i in range(20)])
            model.plain(log, [b"plain%d" % round_] * 10)
            model.txn(log, 2, [b"s%d-%d" % (round_, i) for i in range(20)])
            model.end(log, 1, commit=round_ % 2 == 0)
            log.update_high_watermark(log.log_end_offset)  # producer 2 still open: the LSO stops at its first
            lso = log.last_stable_offset
            for fmt in FORMATS:
                with open_range(log, cache, TOPIC, 0, fmt, 0, lso, committed=True) as view:
                    assert read_all(view, 333) == expected(stored_batches(log), model, fmt, 0, lso), (round_, fmt)
            model.end(log, 2, commit=round_ % 3 == 0)
            log.update_high_watermark(log.log_end_offset)


def test_aborted_batches_know_which_offset_ranges_they_touch() -> None:
    f = AbortedBatches([AbortedTxn(1, 10, 20, 21), AbortedTxn(2, 5, 40, 41), AbortedTxn(3, 50, 52, 53)])
    assert f.touches(0, 6) and f.touches(20, 21) and f.touches(41, 51) and f.touches(52, 53)
    assert not f.touches(0, 5) and not f.touches(53, 100) and not f.touches(41, 50)
    assert not AbortedBatches([]).touches(0, 100)


@pytest.mark.parametrize("chunk_bytes", [64, rendersize.CHUNK_BYTES_DEFAULT])
def test_a_truncation_that_takes_an_abort_marker_away_is_seen_by_committed_views(
    tmp_path: Path, chunk_bytes: int
) -> None:
    """A follower's truncation below its HW (an unclean election) removes an ABORT marker; the transaction then
    commits. Views opened afterwards show its records: nothing built with the old filter is reused."""
    with new_store(tmp_path, "segment.bytes=100000") as store:
        log = store.log(TOPIC, 0)
        model = Model()
        cache = RenderCache(chunk_bytes=chunk_bytes)
        model.txn(log, 1, [b"maybe-%d" % i for i in range(5)])  # 0-4
        for i in range(6):
            model.plain(log, [b"plain-%d" % i] * 3)  # 5-22
        marker = log.log_end_offset
        model.end(log, 1, commit=False)  # 23
        model.plain(log, [b"late"])  # 24
        log.update_high_watermark(log.log_end_offset)
        for fmt in FORMATS:
            with open_range(log, cache, TOPIC, 0, fmt, 0, marker, committed=True) as view:
                assert read_all(view, 50) == expected(stored_batches(log), model, fmt, 0, marker)
        with open_range(log, cache, TOPIC, 0, Format.PLAIN, 0, marker, committed=True) as view:
            assert b"maybe" not in read_all(view, 99)
        log.truncate_to(marker)
        model.aborted.clear()
        model.open[1] = 0
        assert log.last_stable_offset == 0  # the transaction is open again
        model.end(log, 1, commit=True)  # 23 again, now a COMMIT
        log.update_high_watermark(log.log_end_offset)
        assert log.last_stable_offset == marker + 1
        for fmt in FORMATS:
            with open_range(log, cache, TOPIC, 0, fmt, 0, marker, committed=True) as view:
                got = read_all(view, 50)
                assert view.size == len(got)
                assert got == expected(stored_batches(log), model, fmt, 0, marker), fmt
        with open_range(log, cache, TOPIC, 0, Format.PLAIN, 0, marker, committed=True) as view:
            assert read_all(view, 99).startswith(b"maybe-0\n")


def test_committed_views_opened_while_transactions_run_keep_their_promise(tmp_path: Path) -> None:
    """Readers open committed views (every format, sharing one cache) at whatever LSO they find while a writer thread
    appends transactions, markers and plain batches and moves the HW. Below the LSO nothing changes, so each view
    must equal the final log's committed rendering of its range."""
    rng = seeded(SEED + 2)
    with new_store(tmp_path, "segment.bytes=3000") as store:
        log = store.log(TOPIC, 0)
        model = Model()
        cache = RenderCache(chunk_bytes=256)
        seen: list[tuple[Format, int, int, bytes]] = []
        done = threading.Event()
        errors: list[BaseException] = []

        def read(seed: int) -> None:
            r = random.Random(seed)
            try:
                while not done.is_set():
                    end = log.last_stable_offset
                    start = r.randrange(log.log_start_offset, end + 1)
                    fmt = r.choice(FORMATS)
                    with open_range(log, cache, TOPIC, 0, fmt, start, end, committed=True) as view:
                        data = read_all(view, r.choice([100, 4096]))
                        assert len(data) == view.size
                    seen.append((fmt, start, end, data))
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        readers = [threading.Thread(target=read, args=(SEED + n,)) for n in range(3)]
        for t in readers:
            t.start()
        try:
            fill(log, model, rng, 300)
            close_all(log, model, rng)
        finally:
            done.set()
            for t in readers:
                t.join()
        assert not errors, errors[0]
        batches = stored_batches(log)
        assert len(seen) > 10
        for fmt, start, end, data in seen:
            assert data == expected(batches, model, fmt, start, end), (fmt, start, end)
