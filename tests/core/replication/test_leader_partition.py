"""The leader's side of replication in the core: Kafka's PartitionTest scenarios (and ProducerFailureHandlingTest's)
ported to ``LeaderPartition`` with Kafka's numbers, the fetch answer (``core/replication/fetch.py``) and the start of a
leader epoch with its promotion rules (``core/replication/promotion.py``).

Kafka's PartitionTest runs on a MockTime; here every call that reads a clock is given ``now_ms``. Kafka's broker 101
is node 0 here and its followers 1 and 2. Kafka changes an ISR through AlterPartition and counts pending members in
a "maximal ISR" until the controller commits it; logfs has no controller and commits at once, so where Kafka's test
checks the state before and after ``completeIsrUpdate`` the port checks the state after it (the comments say so).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from logfs.core.checkpoint import TopicPartition
from logfs.core.config import LogConfig
from logfs.core.errors import (
    LockBusy,
    NotEnoughReplicas,
    NotEnoughReplicasAfterAppend,
    NotLeaderOrFollower,
    PromotionRefused,
    UnknownReplica,
)
from logfs.core.format.batch import Record, iter_batch_positions, read_header
from logfs.core.format.encode import encode_batch
from logfs.core.log.epoch import EpochEndOffset
from logfs.core.log.handles import HandleCache
from logfs.core.log.loader import load_log
from logfs.core.log.log import Log
from logfs.core.replication.fetch import OFFSET_OUT_OF_RANGE, accept_fetch, fetch_response, read_batches
from logfs.core.replication.leaderreplicas import LeaderReplicas, shrink_check_interval_ms
from logfs.core.replication.promotion import (
    REPLICA_STATE_FILE,
    PersistedReplicaState,
    read_replica_state,
    start_leader_epoch,
    write_replica_state,
)
from logfs.core.replication.replica import (
    FETCH_OK,
    FETCH_OUT_OF_RANGE,
    UNKNOWN_OFFSET,
    FetchValidation,
    LeaderPartition,
    ReplicaState,
)
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig

LEADER, F1, F2 = 0, 1, 2
LAG_MS = 30_000  # ReplicationConfigs.REPLICA_LAG_TIME_MAX_MS_DEFAULT, as PartitionTest uses it
T0 = 1_700_000_000_000  # the mock clock's start


def new_log(tmp_path: Path, **config: int) -> Log:
    return load_log(tmp_path / "topic-0", LogConfig(**config), HandleCache(), had_clean_shutdown=True)


def append(log: Log, count: int, epoch: int) -> None:
    """``MemoryRecords.withRecords(0L, NONE, epoch, count records)`` appended as leader: one batch of ``count``."""
    records = [Record(i, T0, f"k{i}".encode(), f"v{i}".encode()) for i in range(count)]
    log.append_as_leader(encode_batch(records), epoch)


def seed(log: Log, records: int, epoch: int) -> None:
    """PartitionTest.seedLogData: ``records`` one-record batches in ``epoch``."""
    for _ in range(records):
        append(log, 1, epoch)


def leader(log: Log, *, epoch: int, replicas: tuple[int, ...], isr: tuple[int, ...] = (), now: int = T0,
           lag_ms: int = LAG_MS) -> LeaderPartition:  # fmt: skip
    """Kafka's makeLeader with the controller's ISR (logfs itself always starts with the leader alone)."""
    return LeaderPartition(
        log, node_id=LEADER, replica_ids=replicas, leader_epoch=epoch, replica_lag_time_max_ms=lag_ms, isr=isr,
        now_ms=now,
    )  # fmt: skip


def fetch(p: LeaderPartition, replica: int, offset: int, now: int = T0, epoch: int = -1) -> FetchValidation:
    """PartitionTest.fetchFollower: validate, then record (as ``Partition.fetchRecords`` with updateFetchState)."""
    validation, _ = accept_fetch(p, replica, offset, epoch, now)
    return validation


# --- Kafka's PartitionTest scenarios -----------------------------------------------------------------------------


def test_follower_does_not_join_isr_until_caught_up_to_the_current_epoch_start(tmp_path: Path) -> None:
    """PartitionTest.testFollowerDoesNotJoinISRUntilCaughtUpToOffsetWithinCurrentLeaderEpoch"""
    log = new_log(tmp_path)
    p = leader(log, epoch=8, replicas=(LEADER, F1, F2), isr=(LEADER, F2))
    assert p.leader_epoch == 8 and p.isr == (LEADER, F2)
    append(log, 2, 8)  # acks=0: the HW rule runs after each append
    p.maybe_increment_high_watermark(T0)
    last_offset_of_first_batch = 1
    append(log, 3, 8)
    p.maybe_increment_high_watermark(T0)
    assert log.high_watermark == log.log_start_offset == 0  # f2 is in the ISR and has fetched nothing
    fetch(p, F2, 0)
    fetch(p, F2, last_offset_of_first_batch)
    assert log.high_watermark == last_offset_of_first_batch
    # Leader again at epoch 10 with the ISR {leader, f2}: the epoch starts at the LEO, 5.
    p = leader(log, epoch=10, replicas=(LEADER, F1, F2), isr=(LEADER, F2))
    current_leader_epoch_start_offset = log.log_end_offset
    assert p.leader_epoch_start_offset == current_leader_epoch_start_offset == 5
    append(log, 2, 10)
    p.maybe_increment_high_watermark(T0)
    fetch(p, F1, 0)
    fetch(p, F1, last_offset_of_first_batch)  # at the HW (1), but below the epoch's start
    assert p.isr == (LEADER, F2)
    fetch(p, F1, current_leader_epoch_start_offset)
    assert p.isr == (LEADER, F1, F2)  # Kafka: maximal ISR now, committed ISR after the AlterPartition


def test_isr_expansion(tmp_path: Path) -> None:
    """PartitionTest.testIsrExpansion"""
    log = new_log(tmp_path)
    seed(log, 10, 4)
    p = leader(log, epoch=5, replicas=(LEADER, F1))
    assert p.isr == (LEADER,)
    assert p.replica_state(F1) == ReplicaState(UNKNOWN_OFFSET, 0)
    fetch(p, F1, 3, now=T0)
    assert p.isr == (LEADER,)
    assert (p.replica_state(F1).log_end_offset, p.replica_state(F1).last_caught_up_ms) == (3, 0)
    fetch(p, F1, 10, now=T0)
    assert p.isr == (LEADER, F1)  # Kafka: after completeIsrUpdate
    assert (p.replica_state(F1).log_end_offset, p.replica_state(F1).last_caught_up_ms) == (10, T0)


def test_maybe_shrink_isr(tmp_path: Path) -> None:
    """PartitionTest.testMaybeShrinkIsr"""
    log = new_log(tmp_path)
    seed(log, 10, 4)
    p = leader(log, epoch=5, replicas=(LEADER, F1, F2), isr=(LEADER, F1, F2), now=T0)
    assert log.high_watermark == 0
    fetch(p, F1, log.log_end_offset, now=T0)
    assert p.replica_state(F2) == ReplicaState(UNKNOWN_OFFSET, T0)
    assert not p.maybe_shrink_isr(T0).isr_changed  # on initialization a replica counts as caught up
    assert p.isr == (LEADER, F1, F2)
    change = p.maybe_shrink_isr(T0 + LAG_MS + 1)
    assert change.isr_changed and change.high_watermark_moved
    assert p.isr == (LEADER, F1)  # Kafka: after completeIsrUpdate; before it the HW stays 0
    assert log.high_watermark == log.log_end_offset == 10


def test_should_not_shrink_isr_if_previous_fetch_is_caught_up(tmp_path: Path) -> None:
    """PartitionTest.testShouldNotShrinkIsrIfPreviousFetchIsCaughtUp"""
    log = new_log(tmp_path)
    seed(log, 10, 4)
    p = leader(log, epoch=5, replicas=(LEADER, F1), isr=(LEADER, F1), now=T0)
    assert log.high_watermark == 0
    assert p.replica_state(F1) == ReplicaState(UNKNOWN_OFFSET, T0)
    first_fetch = T0 + 5000
    fetch(p, F1, 5, now=first_fetch)
    assert (p.replica_state(F1).log_end_offset, p.replica_state(F1).last_caught_up_ms) == (5, T0)
    assert log.high_watermark == 5
    now = first_fetch + 5001
    seed(log, 5, 5)
    fetch(p, F1, 10, now=now)
    assert (p.replica_state(F1).log_end_offset, p.replica_state(F1).last_caught_up_ms) == (10, first_fetch)
    assert log.high_watermark == 10
    assert not p.maybe_shrink_isr(now).isr_changed
    assert p.isr == (LEADER, F1)


def test_should_not_shrink_isr_if_follower_caught_up_to_log_end(tmp_path: Path) -> None:
    """PartitionTest.testShouldNotShrinkIsrIfFollowerCaughtUpToLogEnd"""
    log = new_log(tmp_path)
    seed(log, 10, 4)
    p = leader(log, epoch=5, replicas=(LEADER, F1), isr=(LEADER, F1), now=T0)
    assert log.high_watermark == 0
    fetch(p, F1, 10, now=T0)
    assert (p.replica_state(F1).log_end_offset, p.replica_state(F1).last_caught_up_ms) == (10, T0)
    assert log.high_watermark == 10
    assert not p.maybe_shrink_isr(T0 + 30_001).isr_changed
    assert p.isr == (LEADER, F1)


def test_high_watermark_does_not_advance_under_min_isr(tmp_path: Path) -> None:
    """PartitionTest.testHighWatermarkAdvanceShouldNotAdvanceWhenUnderMinISR"""
    log = new_log(tmp_path, min_insync_replicas=3)
    seed(log, 10, 4)
    p = leader(log, epoch=5, replicas=(LEADER, F1, F2), isr=(LEADER, F1))
    assert p.under_min_isr
    assert log.high_watermark == 0
    fetch(p, F1, log.log_end_offset)
    assert log.high_watermark == 0
    fetch(p, F2, log.log_end_offset)  # Kafka: the HW stays 0 until completeIsrUpdate commits the ISR of 3
    assert not p.under_min_isr
    assert log.high_watermark == log.log_end_offset == 10


def test_last_fetched_offset_validation(tmp_path: Path) -> None:
    """PartitionTest.testLastFetchedOffsetValidation"""
    log = new_log(tmp_path)
    for epoch, count in [(0, 2), (3, 3), (3, 3), (4, 5), (7, 1), (9, 3)]:
        append(log, count, epoch)
    assert log.log_end_offset == 17
    p = leader(log, epoch=10, replicas=(LEADER, F1), isr=(LEADER, F1))

    def read(last_fetched_epoch: int, fetch_offset: int) -> FetchValidation:
        return p.validate_fetch(fetch_offset, last_fetched_epoch)

    def diverging(epoch: int, end_offset: int) -> FetchValidation:
        return FetchValidation(diverging_epoch=EpochEndOffset(epoch, end_offset))

    assert read(2, 5) == diverging(0, 2)
    assert read(0, 4) == diverging(0, 2)
    assert read(6, 6) == diverging(4, 13)
    assert read(5, 9) == diverging(4, 13)
    assert read(10, 18) == diverging(10, 17)
    for epoch, offset in [(0, 2), (7, 14), (9, 17), (10, 17)]:
        assert read(epoch, offset) == FETCH_OK
    assert read(11, 5) == FETCH_OUT_OF_RANGE  # an epoch above every epoch the leader knows
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(5)  # into the middle of epoch 3
    assert read(2, 8) == diverging(2, 5)
    assert read(0, 5) == FETCH_OK
    assert read(3, 5) == FETCH_OK
    assert read(0, 0) == FETCH_OUT_OF_RANGE
    log.maybe_increment_log_start_offset(10)
    assert read(5, 6) == FETCH_OUT_OF_RANGE  # diverging, but below the log start first
    assert read(3, 6) == FETCH_OUT_OF_RANGE


def test_a_diverging_or_out_of_range_fetch_is_not_recorded(tmp_path: Path) -> None:
    """Kafka updates a follower's fetch state only for a fetch without a diverging epoch (Partition.fetchRecords)."""
    log = new_log(tmp_path)
    append(log, 5, 0)
    p = leader(log, epoch=1, replicas=(LEADER, F1))
    validation, change = accept_fetch(p, F1, 9, 0, T0)
    assert validation == FetchValidation(diverging_epoch=EpochEndOffset(0, 5)) and not change.any
    validation, change = accept_fetch(p, F1, 6, -1, T0)
    assert validation == FETCH_OUT_OF_RANGE and not change.any
    assert p.replica_state(F1).log_end_offset == UNKNOWN_OFFSET


def test_an_epoch_with_no_batch_yet_ends_at_its_start(tmp_path: Path) -> None:
    """The current epoch counts from its start before its first batch (Kafka assigns it at makeLeader)."""
    log = new_log(tmp_path)
    append(log, 3, 2)
    p = leader(log, epoch=7, replicas=(LEADER, F1))
    assert log.epoch_cache.latest_epoch() == 2
    assert p.end_offset_for_epoch(7) == (7, 3)
    assert p.end_offset_for_epoch(5) == (2, 3)
    assert p.end_offset_for_epoch(2) == (2, 3)
    assert p.end_offset_for_epoch(1) == (1, 0)
    assert p.end_offset_for_epoch(8) == (-1, -1)
    empty = leader(new_log(tmp_path / "empty"), epoch=4, replicas=(LEADER, F1))
    assert empty.end_offset_for_epoch(3) == (3, 0)


# --- acks=all (scenario 72 and Kafka's DelayedProduce rules) -----------------------------------------------------


def test_not_enough_replicas_after_a_broker_shutdown(tmp_path: Path) -> None:
    """ProducerFailureHandlingTest.testNotEnoughReplicasAfterBrokerShutdown"""
    log = new_log(tmp_path, min_insync_replicas=3)
    p = leader(log, epoch=0, replicas=(LEADER, F1, F2), lag_ms=10_000)
    fetch(p, F1, 0)
    fetch(p, F2, 0)
    assert p.isr == (LEADER, F1, F2)
    p.check_enough_replicas()  # all three up: the send goes ahead
    append(log, 1, 0)
    p.maybe_increment_high_watermark(T0)
    assert not p.check_replicated(1)
    fetch(p, F1, 1, now=T0 + 1)
    fetch(p, F2, 1, now=T0 + 1)
    assert p.check_replicated(1)
    append(log, 1, 0)  # then broker f2 shuts down: it fetches no more
    fetch(p, F1, 2, now=T0 + 2)
    assert not p.check_replicated(2)  # still waiting: f2 may come back within the lag time
    assert p.maybe_shrink_isr(T0 + 20_000).isr_changed
    with pytest.raises(NotEnoughReplicasAfterAppend):
        p.check_replicated(2)  # the records are in the log, not acknowledged
    with pytest.raises(NotEnoughReplicas):
        p.check_enough_replicas()  # the next send: nothing written
    assert log.high_watermark == 1


def test_a_hw_past_the_records_is_an_ack_even_if_the_isr_shrank_since(tmp_path: Path) -> None:
    """The HW never moves under min ISR, so once it passed the records they were on min.insync.replicas replicas."""
    log = new_log(tmp_path, min_insync_replicas=2)
    p = leader(log, epoch=0, replicas=(LEADER, F1))
    fetch(p, F1, 0)
    append(log, 2, 0)
    fetch(p, F1, 2, now=T0 + 1)
    assert log.high_watermark == 2
    append(log, 1, 0)
    assert p.maybe_shrink_isr(T0 + LAG_MS + 2).isr_changed
    assert p.check_replicated(2)
    with pytest.raises(NotEnoughReplicasAfterAppend):
        p.check_replicated(3)


def test_with_no_followers_the_hw_is_the_leo_at_once(tmp_path: Path) -> None:
    """replica.ids = node.id alone: every append is committed as it lands (RF=1), whatever min.insync.replicas."""
    log = new_log(tmp_path, min_insync_replicas=3)
    append(log, 3, 0)
    p = leader(log, epoch=1, replicas=(LEADER,))
    assert p.min_insync_replicas == 1 and log.high_watermark == 3
    append(log, 2, 1)
    assert p.maybe_increment_high_watermark(T0) and log.high_watermark == 5
    assert p.check_replicated(5)


def test_a_follower_that_joins_behind_the_leo_holds_the_hw_until_it_fetches_on(tmp_path: Path) -> None:
    """The HW is the smallest LEO in the ISR: "HW stays put until the follower fetches past it, then moves"."""
    log = new_log(tmp_path)
    append(log, 4, 0)
    p = leader(log, epoch=1, replicas=(LEADER, F1))
    assert log.high_watermark == 4
    append(log, 2, 1)
    fetch(p, F1, 4, now=T0)
    assert p.isr == (LEADER, F1)  # 4 ≥ HW 4 and ≥ the epoch start 4, though not caught up (LEO 6)
    assert log.high_watermark == 4
    fetch(p, F1, 6, now=T0 + 1)
    assert log.high_watermark == 6


def test_a_follower_that_joins_behind_the_leo_counts_as_caught_up_when_it_joins(tmp_path: Path) -> None:
    """Its first fetch came after appends, so no fetch caught it up yet: it does not leave at the next check (the
    mount checks every 500 ms, before its next fetch could catch it up), only after replica.lag.time.max.ms."""
    log = new_log(tmp_path)
    append(log, 4, 0)
    p = leader(log, epoch=1, replicas=(LEADER, F1))
    append(log, 2, 1)
    fetch(p, F1, 4, now=T0 + 100)
    assert p.isr == (LEADER, F1) and p.replica_state(F1).last_caught_up_ms == T0 + 100
    assert not p.maybe_shrink_isr(T0 + 600).isr_changed
    assert p.maybe_shrink_isr(T0 + 100 + LAG_MS + 1).isr_changed  # never fetched on: it leaves after the lag
    assert p.isr == (LEADER,)


@contextlib.contextmanager
def held_elsewhere(lock: Any) -> Iterator[None]:
    """``lock`` held by another thread (an append in a worker, as the mount sees it) for the block's duration."""
    taken, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            taken.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert taken.wait(10)
    try:
        yield
    finally:
        release.set()
        holder.join(10)


def test_a_fetch_recorded_without_blocking_defers_the_hw_while_an_append_holds_the_log(tmp_path: Path) -> None:
    """The mount records fetches on its trio thread with ``blocking=False``: while the log is busy the follower's
    LEO and ISR membership are recorded and the HW is left to recompute (in a worker); while the partition itself
    is busy nothing is recorded (LockBusy: the whole fetch goes to a worker). Nothing ever waits."""
    log = new_log(tmp_path)
    p = leader(log, epoch=0, replicas=(LEADER, F1))
    append(log, 4, 0)
    assert log.high_watermark == 0
    with held_elsewhere(log._lock):
        with pytest.raises(LockBusy):
            log.maybe_increment_high_watermark(log.log_end_offset_metadata, blocking=False)
        _, change = accept_fetch(p, F1, 4, 0, T0, blocking=False)
        assert change.isr_changed and change.high_watermark_deferred and not change.high_watermark_moved
        assert p.isr == (LEADER, F1) and p.replicas_view(T0)[F1]["log_end_offset"] == 4
        assert log.high_watermark == 0
    assert p.maybe_increment_high_watermark(T0) and log.high_watermark == 4
    append(log, 2, 0)
    with held_elsewhere(p._lock):
        with pytest.raises(LockBusy):
            accept_fetch(p, F1, 6, 0, T0 + 1, blocking=False)
    assert p.replicas_view(T0 + 1)[F1]["log_end_offset"] == 4 and log.high_watermark == 4  # nothing recorded
    _, change = accept_fetch(p, F1, 6, 0, T0 + 1, blocking=False)  # nothing held: all at once
    assert change.high_watermark_moved and not change.high_watermark_deferred and log.high_watermark == 6


def test_fetches_from_ids_that_are_not_followers_are_refused(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    p = leader(log, epoch=0, replicas=(LEADER, F1))
    for replica in (LEADER, 7):
        with pytest.raises(UnknownReplica):
            accept_fetch(p, replica, 0, -1, T0)


def test_shrink_check_interval() -> None:
    assert shrink_check_interval_ms(30_000) == 500
    assert shrink_check_interval_ms(600) == 300
    assert shrink_check_interval_ms(1) == 10


# --- the fetch answer ---------------------------------------------------------------------------------------------


def batches_of(data: bytes) -> list[tuple[int, int]]:
    return [
        (read_header(data, pos).base_offset, read_header(data, pos).last_offset)
        for pos, _ in iter_batch_positions(data)
    ]  # fmt: skip


def test_a_fetch_answer_is_one_json_line_then_whole_batches(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, 2, 0)
    append(log, 3, 0)
    p = leader(log, epoch=1, replicas=(LEADER, F1))
    validation, _ = accept_fetch(p, F1, 3, 0, T0)  # inside the second batch
    data = bytes(fetch_response(p, 3, validation).render())
    line, _, records = data.partition(b"\n")
    head = json.loads(line)
    assert list(head) == [
        "leader_epoch", "high_watermark", "log_start_offset", "log_end_offset", "isr", "diverging_epoch", "error",
        "segment_bases", "records_bytes",
    ]  # fmt: skip
    assert head == {
        "leader_epoch": 1, "high_watermark": 5, "log_start_offset": 0, "log_end_offset": 5, "isr": [0],
        "diverging_epoch": None, "error": None, "segment_bases": [], "records_bytes": len(records),
    }  # fmt: skip
    assert batches_of(records) == [(2, 4)]  # the whole batch holding offset 3, as stored
    assert records == log.segments[0].log_file.read(records_position(log, 2), len(records))


def test_an_answer_is_rendered_in_the_room_before_its_batches_or_joined_when_its_line_is_longer(
    tmp_path: Path,
) -> None:
    """read_batches leaves room for the JSON line before the batches, so the file's bytes need no second copy; a
    line longer than that room (many segment bases) is joined instead. Both are the same bytes, across segments."""
    log = new_log(tmp_path)
    for i in range(6):
        append(log, 2, 0)
        if i in (1, 3):
            log.roll()
    p = leader(log, epoch=1, replicas=(LEADER, F1))
    response = fetch_response(p, 0, FETCH_OK)
    rendered = response.render()
    assert isinstance(rendered, memoryview) and isinstance(response.records, memoryview)
    assert rendered.obj is response.records.obj  # one buffer: the line in its room, the batches after it
    line = json.dumps(response.header()).encode() + b"\n"
    assert bytes(rendered) == line + bytes(response.records)
    assert batches_of(response.records) == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11)]
    for room in (0, len(line) - 1, len(line)):
        records, _ = read_batches(log, 0, log.log_end_offset, 1024 * 1024, room=room)
        again = dataclasses.replace(response, records=records).render()
        assert bytes(again) == bytes(rendered) and isinstance(again, memoryview) == (room >= len(line))


def records_position(log: Log, base_offset: int) -> int:
    found = log.segments[0].translate_offset(base_offset)
    assert found is not None
    return found.position


def test_the_answer_crosses_segments_and_names_their_bases(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    for i in range(6):
        append(log, 2, 0)
        if i in (1, 3):
            log.roll()
    assert [s.base_offset for s in log.segments] == [0, 4, 8]
    records, bases = read_batches(log, 0, log.log_end_offset, 1024 * 1024)
    assert batches_of(records) == [(0, 1), (2, 3), (4, 5), (6, 7), (8, 9), (10, 11)]
    assert bases == [0, 4, 8]
    records, bases = read_batches(log, 2, log.log_end_offset, 1024 * 1024)
    assert bases == [4, 8] and batches_of(records)[0] == (2, 3)
    records, bases = read_batches(log, 4, 9, 1024 * 1024)  # nothing at or past the end offset (a LEO snapshot)
    assert batches_of(records) == [(4, 5), (6, 7), (8, 9)] and bases == [4, 8]


def test_the_answer_holds_at_most_max_bytes_but_always_one_batch(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    for _ in range(4):
        append(log, 1, 0)
    size = log.segments[0].size_bytes // 4
    records, _ = read_batches(log, 0, 4, 2 * size + 1)
    assert batches_of(records) == [(0, 0), (1, 1)]
    records, _ = read_batches(log, 1, 4, 1)
    assert batches_of(records) == [(1, 1)]
    records, bases = read_batches(log, 4, 4, 1024)
    assert records == b"" and bases == []


def test_out_of_range_and_diverging_answers_carry_no_records(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, 3, 0)
    p = leader(log, epoch=1, replicas=(LEADER, F1))
    validation, _ = accept_fetch(p, F1, 4, -1, T0)
    head = json.loads(fetch_response(p, 4, validation).render())
    assert (head["error"], head["records_bytes"], head["diverging_epoch"]) == (OFFSET_OUT_OF_RANGE, 0, None)
    validation, _ = accept_fetch(p, F1, 3, 2, T0)  # epoch 2 was never used: above the leader's 1 → out of range
    assert json.loads(fetch_response(p, 3, validation).render())["error"] == OFFSET_OUT_OF_RANGE
    validation, _ = accept_fetch(p, F1, 5, 0, T0)
    head = json.loads(bytes(fetch_response(p, 5, validation).render()).partition(b"\n")[0])
    assert head["diverging_epoch"] == {"epoch": 0, "end_offset": 3} and head["records_bytes"] == 0


# --- leader epochs and promotion ---------------------------------------------------------------------------------


def store_with(tmp_path: Path, epochs: list[int], replica_ids: tuple[int, ...] = (0,)) -> Store:
    store = Store.open(tmp_path / "store", StoreConfig(replica_ids=replica_ids))
    store.create_topic("t", 2)
    for epoch in epochs:
        append(store.log("t", 0), 1, epoch)
    return store


def test_each_start_as_leader_takes_an_epoch_above_every_epoch_used(tmp_path: Path) -> None:
    with store_with(tmp_path, []) as store:
        assert start_leader_epoch(store) == 0
        assert start_leader_epoch(store) == 1  # nothing appended in epoch 0: the replica state file remembers it
        append(store.log("t", 1), 1, 6)
        assert start_leader_epoch(store) == 7
        assert read_replica_state(store.path) == PersistedReplicaState(0, 7, 7, (0,), True)


def test_a_promoted_follower_takes_an_epoch_above_the_highest_it_saw(tmp_path: Path) -> None:
    with store_with(tmp_path, [2, 3]) as store:
        write_replica_state(store.path, PersistedReplicaState(0, 9, 11, (0, 1), True))
        assert start_leader_epoch(store) == 12
        assert json.loads((store.path / REPLICA_STATE_FILE).read_text()) == {
            "replica_id": 0, "leader_epoch_seen": 12, "highest_epoch": 12, "isr": [0], "in_isr": True,
        }  # fmt: skip


def test_a_store_out_of_the_isr_is_refused_promotion_unless_unclean(tmp_path: Path) -> None:
    with store_with(tmp_path, [4]) as store:
        write_replica_state(store.path, PersistedReplicaState(0, 5, 5, (1, 2), False))
        with pytest.raises(PromotionRefused, match="not in the ISR"):
            start_leader_epoch(store)
        assert read_replica_state(store.path) == PersistedReplicaState(0, 5, 5, (1, 2), False)  # unchanged
        assert start_leader_epoch(store, unclean=True) == 6
        assert start_leader_epoch(store) == 7  # led since: in its own ISR


@pytest.mark.parametrize("damage", [b"{", b"[]", b'{"replica_id": 0}', b'{"replica_id": 0, "leader_epoch_seen": 1, '
                                    b'"highest_epoch": 1, "isr": [0], "in_isr": "yes"}'])  # fmt: skip
def test_an_unreadable_replica_state_is_refused_unless_unclean(tmp_path: Path, damage: bytes) -> None:
    with store_with(tmp_path, [4]) as store:
        (store.path / REPLICA_STATE_FILE).write_bytes(damage)
        with pytest.raises(PromotionRefused, match="cannot read"):
            start_leader_epoch(store)
        assert start_leader_epoch(store, unclean=True) == 5


def test_leader_replicas_take_every_partition_and_forget_deleted_ones(tmp_path: Path) -> None:
    with store_with(tmp_path, [0, 0], replica_ids=(0, 1)) as store:
        replicas = LeaderReplicas(store, 3, now_ms=T0)
        assert replicas.followers == (1,) and replicas.is_follower(1) and not replicas.is_follower(0)
        assert [tp.partition for tp, _ in replicas.partitions()] == [0, 1]
        assert store.log("t", 0).high_watermark == 2  # ISR = the leader alone: the HW is the LEO
        first = replicas.partition("t", 0)
        assert first.leader_epoch == 3 and first.leader_epoch_start_offset == 2
        store.delete_topic("t")
        assert replicas.partitions() == []
        store.create_topic("t", 1)
        assert replicas.partition("t", 0) is not first


def test_a_partition_created_while_leading_starts_with_the_live_followers_in_its_isr(tmp_path: Path) -> None:
    """Kafka's controller creates a partition with the ISR = its live assigned replicas. Here live = heard from (a
    request of the fetch protocol) within replica.lag.time.max.ms; the partitions held when the leader epoch began
    start with the leader alone (docs/replication.md, "The ISR and the high watermark")."""
    with store_with(tmp_path, [0], replica_ids=(0, 1, 2)) as store:
        assert store.config.replica_lag_time_max_ms == LAG_MS
        replicas = LeaderReplicas(store, 3, now_ms=T0)
        replicas.follower_heard(F1, now_ms=T0)
        replicas.follower_heard(7, now_ms=T0)  # not a follower: ignored
        assert replicas.partition("t", 0, now_ms=T0).isr == (LEADER,)  # held before: the leader alone
        assert replicas.live_followers(T0 + LAG_MS) == (F1,)
        store.create_topic("new", 1)
        fresh = replicas.partition("new", 0, now_ms=T0 + LAG_MS)
        assert fresh.isr == (LEADER, F1) and fresh.replica_state(F1).last_caught_up_ms == T0 + LAG_MS
        # acks=all is not refused, and waits for F1's first fetches of the new partition
        fresh.check_enough_replicas()
        append(fresh.log, 1, fresh.leader_epoch)
        fresh.maybe_increment_high_watermark(T0 + LAG_MS)
        assert not fresh.check_replicated(1)
        fresh.record_fetch(F1, 1, now_ms=T0 + LAG_MS + 5)
        assert fresh.check_replicated(1)
        # a follower not heard from for longer than the lag time is not live: a newer partition does not wait for it
        store.create_topic("later", 1)
        assert replicas.partition("later", 0, now_ms=T0 + LAG_MS + 1).isr == (LEADER,)
        replicas.follower_heard(F2, now_ms=T0 + LAG_MS + 2)
        store.create_topic("last", 1)
        assert replicas.partition("last", 0, now_ms=T0 + LAG_MS + 3).isr == (LEADER, F2)


def test_a_zookeeper_leader_takes_the_recorded_isr_and_gives_new_partitions_the_registered_nodes(
    tmp_path: Path,
) -> None:
    with store_with(tmp_path, [0], replica_ids=(0, 1, 2)) as store:
        registered = [0, 2, 9]
        replicas = LeaderReplicas(store, 3, now_ms=T0, isr=lambda tp: (0, 1, 9), live=lambda: registered)
        replicas.follower_heard(F1, now_ms=T0)
        assert replicas.partition("t", 0).isr == (LEADER, F1)  # as recorded; 9 is no replica: left out
        store.create_topic("new", 1)
        assert replicas.partition("new", 0).isr == (LEADER, F2)  # the registered nodes, not the fetchers
        store.delete_topic("t")
        store.create_topic("t", 1)
        registered = [0, 1, 2]
        assert replicas.partition("t", 0).isr == (LEADER, F1, F2)  # created again: not the old record


def test_a_node_leads_only_the_partitions_given_an_epoch_each_in_its_own(tmp_path: Path) -> None:
    """Kafka's makeLeader / makeFollower per partition (a node leads some partitions and follows others): only the
    partitions ``epochs`` names are taken, each in its epoch, with the recorded ISR; a partition given a new epoch is
    taken again in it (its epoch start is the LEO then, as Kafka's leaderEpochStartOffset); one given none is no
    longer led (NotLeaderOrFollower), and leaves partitions() at the next retake or look."""
    with store_with(tmp_path, [0, 0], replica_ids=(0, 1, 2)) as store:
        led = {TopicPartition("t", 0): 4}
        recorded = {TopicPartition("t", 0): (0, 1), TopicPartition("t", 1): (0, 2)}
        replicas = LeaderReplicas(store, 99, now_ms=T0, isr=lambda tp: recorded[tp], epochs=led.get)
        assert [(tp.partition, p.leader_epoch, p.isr) for tp, p in replicas.partitions()] == [(0, 4, (0, F1))]
        assert replicas.leads("t", 0) and not replicas.leads("t", 1)
        with pytest.raises(NotLeaderOrFollower):
            replicas.partition("t", 1)
        first = replicas.partition("t", 0)
        assert first.leader_epoch_start_offset == 2 and store.log("t", 0).high_watermark == 0  # F1 in the ISR
        append(first.log, 1, 4)
        # a new election: partition 0 in epoch 5 (the same leader), partition 1 led here too, in epoch 7
        led.update({TopicPartition("t", 0): 5, TopicPartition("t", 1): 7})
        replicas.retake(T0)
        again = replicas.partition("t", 0)
        assert again is not first and again.leader_epoch == 5 and again.leader_epoch_start_offset == 3
        assert again.isr == (0, F1) and replicas.partition("t", 1).isr == (0, F2)
        assert [(tp.partition, p.leader_epoch) for tp, p in replicas.partitions()] == [(0, 5), (1, 7)]
        changes = replicas.changes
        # partition 0 moves to another node: forgotten here at once, refused from then on
        del led[TopicPartition("t", 0)]
        assert [tp.partition for tp, _ in replicas.partitions()] == [1] and replicas.changes > changes
        with pytest.raises(NotLeaderOrFollower):
            replicas.partition("t", 0)
        replicas.retake(T0)
        assert [tp.partition for tp, _ in replicas.partitions()] == [1]
        # a partition created later and given an epoch starts with the live replicas, as before
        store.create_topic("new", 1)
        led[TopicPartition("new", 0)] = 2
        assert replicas.partition("new", 0).leader_epoch == 2
