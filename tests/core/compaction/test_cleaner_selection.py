"""The log cleaner's choice of log and its checkpoint (Kafka's LogCleanerManagerTest; docs/compaction.md, "How a log is
cleaned"), through :class:`~logfs.core.log.cleaner.logcleaner.LogCleaner` over a few logs."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
from compaction_log import OneLogStore, append, compact_config, int_record, now_ms, open_log
from test_cleaner_scenarios import marker, txn_producer

from logfs.core.checkpoint import TopicPartition
from logfs.core.config import LogConfig
from logfs.core.log.cleaner import clean as cleanerround
from logfs.core.log.cleaner.logcleaner import CLEANER_CHECKPOINT, LogCleaner
from logfs.core.log.cleaner.throttler import PAUSE_S, Throttler
from logfs.core.log.log import Log
from logfs.core.storeconfig import StoreConfig

HOUR_MS = 3_600_000


def log_of(tmp_path: Path, name: str, records: int, config: LogConfig | None = None, per_segment: int = 5) -> Log:
    """``records`` single-record batches of distinct keys, ``per_segment`` to a segment (the last one active)."""
    log = open_log(tmp_path / name, config or compact_config(segment_bytes=1 << 20))
    for i in range(records):
        append(log, int_record(i, i))
        if (i + 1) % per_segment == 0:
            log.roll()
    return log


def store_of(tmp_path: Path, *logs: Log, config: StoreConfig | None = None) -> OneLogStore:
    store = OneLogStore(tmp_path, config or StoreConfig())
    for log in logs:
        topic, _, partition = log.directory.name.rpartition("-")
        store.partitions[TopicPartition(topic, int(partition))] = log
    return store


def write_checkpoint(tmp_path: Path, entries: dict[TopicPartition, int]) -> None:
    lines = ["0", str(len(entries)), *(f"{tp.topic} {tp.partition} {o}" for tp, o in entries.items())]
    (tmp_path / CLEANER_CHECKPOINT).write_text("\n".join(lines) + "\n")


TP0, TP1, TP2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)


@pytest.mark.parametrize(("log_start", "checkpoint", "first_dirty"), [(0, 200, 0), (10, 0, 10)])
def test_checkpoint_outside_the_log_resets_to_the_log_start(
    tmp_path: Path, log_start: int, checkpoint: int, first_dirty: int
) -> None:
    """S27: a checkpoint of 200 on a log of 20 records cleans from 0; with log start 10, checkpoint 0 from 10."""
    log = log_of(tmp_path, "t-0", 20)
    log.maybe_increment_log_start_offset(log_start)
    write_checkpoint(tmp_path, {TP0: checkpoint})
    cleaner = LogCleaner(store_of(tmp_path, log))
    assert cleaner.dirty_info(TP0, log).first_dirty_offset == first_dirty


def test_reset_checkpoint_is_written_though_the_log_is_not_chosen(tmp_path: Path) -> None:
    """S27: log start 20 (= LEO), checkpoint 15 → nothing to clean, but the checkpoint becomes 20."""
    log = log_of(tmp_path, "t-0", 20)
    log.maybe_increment_log_start_offset(20)
    write_checkpoint(tmp_path, {TP0: 15})
    cleaner = LogCleaner(store_of(tmp_path, log))
    assert cleaner.clean_once() is None
    assert cleaner.checkpoints() == {TP0: 20}
    assert (tmp_path / CLEANER_CHECKPOINT).read_text() == "0\n1\nt 0 20\n"


def test_dirtier_log_chosen_and_the_other_checkpoint_reset(tmp_path: Path) -> None:
    """S27: tp0 (log start 15, checkpoint 10) and tp1 (checkpoint 5): tp1 is cleaned, tp0's checkpoint becomes 15."""
    log0, log1 = log_of(tmp_path, "t-0", 20), log_of(tmp_path, "t-1", 20)
    log0.maybe_increment_log_start_offset(15)
    write_checkpoint(tmp_path, {TP0: 10, TP1: 5})
    cleaner = LogCleaner(store_of(tmp_path, log0, log1))
    stats = cleaner.clean_once()
    assert stats is not None and stats.first_dirty_offset == 5
    assert cleaner.checkpoints() == {TP0: 15, TP1: 20}


def test_single_active_segment_has_nothing_to_clean(tmp_path: Path) -> None:
    """S27: a log with only its active segment (log start 2) is never chosen."""
    log = log_of(tmp_path, "t-0", 4)
    log.maybe_increment_log_start_offset(2)
    cleaner = LogCleaner(store_of(tmp_path, log))
    assert cleaner.dirty_info(TP0, log).cleanable_bytes == 0
    assert cleaner.clean_once() is None


def test_grab_filthiest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """S28: dirty ratio 0.05, checkpoint 20 for logs of 20/25/30 records: tp2, then (tp2 uncleanable) tp1, then
    none."""
    config = compact_config(segment_bytes=1 << 20, min_cleanable_dirty_ratio=0.05)
    logs = [log_of(tmp_path, f"t-{i}", n, config) for i, n in enumerate((20, 25, 30))]
    write_checkpoint(tmp_path, {TP0: 20, TP1: 20, TP2: 20})
    cleaner = LogCleaner(store_of(tmp_path, *logs))
    ratios = [cleaner.dirty_info(tp, log).dirty_ratio for tp, log in zip((TP0, TP1, TP2), logs, strict=True)]
    assert ratios[0] == 0 < ratios[1] < ratios[2]
    real_clean = cleanerround.clean_log

    def failing_for_tp2(log: Log, *args: object, **kwargs: object) -> object:
        if log is logs[2]:
            raise RuntimeError("injected")
        return real_clean(log, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("logfs.core.log.cleaner.logcleaner.clean_log", failing_for_tp2)
    assert cleaner.clean_once() is None  # tp2 chosen, failed: uncleanable
    assert list(cleaner.uncleanable_partitions()) == [TP2]
    assert cleaner.metrics().uncleanable_partitions_count == 1
    stats = cleaner.clean_once()
    assert stats is not None and cleaner.checkpoints()[TP1] == 25
    assert cleaner.clean_once() is None  # tp0 has nothing dirty, tp1 is clean now, tp2 uncleanable
    assert cleaner.max_dirty_ratio == 0


def test_ratio_must_be_strictly_above_the_minimum(tmp_path: Path) -> None:
    """Kafka's ``grabFilthiestCompactedLog``: a log is picked only if its ratio is strictly greater than
    min.cleanable.dirty.ratio."""
    log = log_of(tmp_path, "t-0", 20, compact_config(segment_bytes=1 << 20, min_cleanable_dirty_ratio=1.0))
    cleaner = LogCleaner(store_of(tmp_path, log))
    assert cleaner.dirty_info(TP0, log).dirty_ratio == 1.0
    assert cleaner.clean_once() is None
    log.config = compact_config(segment_bytes=1 << 20, min_cleanable_dirty_ratio=0.99)  # takes effect at once
    assert cleaner.clean_once() is not None


def test_delete_policy_logs_are_never_chosen(tmp_path: Path) -> None:
    log = log_of(tmp_path, "t-0", 20, compact_config(segment_bytes=1 << 20, cleanup_policy="delete"))
    assert LogCleaner(store_of(tmp_path, log)).clean_once() is None


def test_undecided_transactional_data_not_cleanable(tmp_path: Path) -> None:
    """S26 testUndecidedTransactionalDataNotCleanable (min lag 1 h): an open transaction bounds the cleanable range
    by the LSO; the lag bounds it by the first segment written within it."""
    config = compact_config(segment_bytes=1 << 20, min_compaction_lag_ms=HOUR_MS)
    log = open_log(tmp_path / "t-0", config)
    t0 = now_ms()
    send = txn_producer(log, 1)
    for k in (1, 2, 3):
        send([k])
    log.roll()
    cleaner = LogCleaner(store_of(tmp_path, log))
    info = cleaner.dirty_info(TP0, log, t0 + HOUR_MS + 1)
    assert (info.first_dirty_offset, info.first_uncleanable_offset) == (0, 0)
    marker(log, 1, commit=False)
    log.roll()
    info = cleaner.dirty_info(TP0, log, now_ms())
    assert (info.first_dirty_offset, info.first_uncleanable_offset) == (0, 3)
    info = cleaner.dirty_info(TP0, log, now_ms() + HOUR_MS + 1)
    assert (info.first_dirty_offset, info.first_uncleanable_offset) == (0, 4)


def test_uncleanable_bound_is_the_high_watermark(tmp_path: Path) -> None:
    """S26's related case: with no lag the bound is the LSO (here the HW), rounded down to its segment's base."""
    log = log_of(tmp_path, "t-0", 60, per_segment=10)
    cleaner = LogCleaner(store_of(tmp_path, log))
    assert cleaner.dirty_info(TP0, log).first_uncleanable_offset == 60
    log.update_high_watermark(35)
    assert cleaner.dirty_info(TP0, log).first_uncleanable_offset == 30


def test_max_compaction_lag_forces_a_clean(tmp_path: Path) -> None:
    """S29 (testMaxLogCompactionLag, with the clock given): ratio 1.0 never picks the log, max.compaction.lag.ms
    does once its oldest dirty segment is older than the lag."""
    config = compact_config(segment_bytes=1 << 20, min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=6 * HOUR_MS)
    log = open_log(tmp_path / "t-0", config)
    t0 = now_ms()
    for i in range(300):
        log.append_as_leader(bytearray(int_record(i % 100, i, t0)), 0, now_ms=t0)
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    for i in range(2):
        log.append_as_leader(bytearray(int_record(i, i, t0)), 0, now_ms=t0)
    log.update_high_watermark(log.log_end_offset)
    cleaner = LogCleaner(store_of(tmp_path, log))
    log.config = compact_config(segment_bytes=1 << 20, min_cleanable_dirty_ratio=0.99,
                                max_compaction_lag_ms=6 * HOUR_MS)  # fmt: skip
    early = cleaner.dirty_info(TP0, log, t0 + 3 * HOUR_MS)
    assert not early.needs_compaction_now
    late = cleaner.dirty_info(TP0, log, t0 + 6 * HOUR_MS + 1)
    assert late.needs_compaction_now and late.compaction_delay_ms == 1
    log.config = config
    assert cleaner.clean_once(t0 + 3 * HOUR_MS) is None
    stats = cleaner.clean_once(t0 + 6 * HOUR_MS + 1)
    assert stats is not None and stats.messages_written == 100


def test_max_compaction_lag_rolls_a_compacted_log(tmp_path: Path) -> None:
    """docs/compaction.md, "Configuration": a compacted log rolls by min(segment.ms, max.compaction.lag.ms)."""
    log = open_log(tmp_path / "t-0", compact_config(max_compaction_lag_ms=1000))
    t0 = now_ms()
    log.append_as_leader(bytearray(int_record(1, 1, t0)), 0, now_ms=t0)
    info = log.append_as_leader(bytearray(int_record(1, 2, t0 + 1001)), 0, now_ms=t0 + 1001)
    assert info.rolled and len(log.segments) == 2


def test_compact_only_policy_has_no_time_retention(tmp_path: Path) -> None:
    """docs/compaction.md, "Configuration": compact alone deletes only below the log start offset; compact,delete
    applies retention.ms too."""
    for policy, survivors in (("compact", 3), ("compact,delete", 1)):
        log = log_of(tmp_path, f"{policy.replace(',', '_')}-0", 10,
                     compact_config(segment_bytes=1 << 20, cleanup_policy=policy, retention_ms=1000))  # fmt: skip
        log.delete_old_segments(now_ms() + 10_000)
        assert len(log.segments) == survivors


def test_abort_stops_a_round_and_keeps_the_checkpoint(tmp_path: Path) -> None:
    log = log_of(tmp_path, "t-0", 20)
    cleaner = LogCleaner(store_of(tmp_path, log))
    before = sorted(p.name for p in log.directory.iterdir())
    cleaner.abort()
    assert cleaner.clean_log(log) is None
    assert cleaner.checkpoints() == {}
    assert sorted(p.name for p in log.directory.iterdir()) == before  # no .cleaned left
    assert cleaner.clean_log(log) is not None  # the next round runs


def test_metrics_after_a_round(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", compact_config(segment_bytes=1 << 20))
    for i in range(100):
        append(log, int_record(i % 10, i))
    log.roll()
    cleaner = LogCleaner(store_of(tmp_path, log))
    assert cleaner.clean_once() is not None
    metrics = cleaner.metrics().as_dict()
    assert 0 < metrics["cleaner-recopy-percent"] < 100
    assert metrics["max-dirty-percent"] == 100.0
    assert metrics["cleaner-io"] > 0 and metrics["uncleanable-partitions-count"] == 0


def test_too_small_map_refused_with_kafkas_words(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="offset map is too small to fit in even a single message"):
        LogCleaner(store_of(tmp_path), map_memory=24)


def test_throttler_keeps_the_rate_and_an_abort_ends_its_sleep() -> None:
    """Kafka's ``Throttler``: after a period of 300 ms at twice the rate, the caller sleeps as long again; an abort cuts
    the sleep."""
    clock = [0.0]
    slept: list[float] = []
    throttler = Throttler(1000.0, clock=lambda: clock[0], sleep=slept.append, pause_s=0.0)
    throttler.maybe_throttle(300)  # within the period: no sleep
    clock[0] = 0.3
    throttler.maybe_throttle(300)  # 600 bytes in 0.3 s at 1000 B/s: 0.3 s more
    assert slept == [pytest.approx(0.3)]
    abort = threading.Event()
    abort.set()
    started = time.monotonic()
    slow = Throttler(1.0)
    slow.maybe_throttle(10)
    time.sleep(0.31)
    slow.maybe_throttle(10_000, abort)  # would sleep ~3 hours
    assert time.monotonic() - started < 5


def test_a_throttled_cleaner_pauses_at_every_chunk_and_an_unthrottled_one_never() -> None:
    """The pause that hands the GIL to other threads (throttler.py): at each call of a throttled caller that does
    not sleep, never for Kafka's default rate (Double.MAX_VALUE)."""
    clock = [0.0]
    slept: list[float] = []
    throttled = Throttler(1e9, clock=lambda: clock[0], sleep=slept.append)
    throttled.maybe_throttle(300)
    clock[0] = 0.3
    throttled.maybe_throttle(300)  # a period under the rate: no throttling sleep, a pause
    assert slept == [PAUSE_S, PAUSE_S] and throttled.total_sleep_s == 0
    unthrottled = Throttler(sys.float_info.max, clock=lambda: clock[0], sleep=slept.append)
    unthrottled.maybe_throttle(1 << 30)
    clock[0] = 0.6
    unthrottled.maybe_throttle(1 << 30)
    assert slept == [PAUSE_S, PAUSE_S]
