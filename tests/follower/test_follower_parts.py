"""The follower's pieces without a mount: the fetch response parser (``logfs/follower/fetch.py``), Kafka's truncation
rules, and one response applied to a real log (``logfs/follower/replica.py``), against an in-process fake of the
leader's fetch files (:func:`fake_fetch`, the contract of docs/replication.md computed from a leader ``Log``).

The real thing, leader and followers as processes with their mounts, is ``tests/follower/test_follower.py`` (and
``tests/follower/test_failover.py`` for a follower made leader).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from logfs.core.config import LogConfig
from logfs.core.format.batch import Record, iter_batch_positions, read_header
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_batch
from logfs.core.log.epoch import UNDEFINED_EPOCH_END_OFFSET, EpochEndOffset
from logfs.core.log.handles import HandleCache
from logfs.core.log.loader import load_log
from logfs.core.log.log import Isolation, Log
from logfs.core.replication.promotion import PersistedReplicaState
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig
from logfs.follower.fetch import (
    DivergingEpoch,
    FetchProtocolError,
    FetchReader,
    FetchResponse,
    OutOfRange,
    Truncation,
    diverging_truncation,
    fetch_path,
    out_of_range_action,
    parse_fetch_response,
)
from logfs.follower.replica import (
    ApplyFailed,
    ApplyGate,
    aggregate_replica_state,
    append_fetched,
    apply_fetch,
    fetch_and_apply,
    truncate_at_batch,
)

SEED = 20261122
FETCH_BYTES = 1024 * 1024


def open_log(directory: Path, **config: int) -> Log:
    return load_log(directory, LogConfig(**config), HandleCache(), had_clean_shutdown=True)


def batch(offset: int, count: int, epoch: int, size: int = 20, ts: int | None = None) -> bytes:
    ts = time.time_ns() // 1_000_000 if ts is None else ts  # recent: retention.ms (7 days) deletes nothing
    records = [Record(offset + i, ts + i, None, bytes([65 + (offset + i) % 26]) * size) for i in range(count)]
    return encode_batch(records, base_offset=offset, partition_leader_epoch=epoch)


def produce(log: Log, batches: int, epoch: int, rng: random.Random) -> None:
    for _ in range(batches):
        n = rng.randint(1, 5)
        log.append_as_leader(bytearray(batch(0, n, -1, size=rng.randint(5, 60))), epoch)


def fake_fetch(leader: Log, fetch_offset: int, last_epoch: int, *, isr: tuple[int, ...] = (1, 2)) -> FetchResponse:
    """What the leader's fetch file holds (docs/replication.md), computed in process from the leader's log."""
    leo = leader.log_end_offset
    epoch = leader.epoch_cache.latest_epoch()
    common = {
        "leader_epoch": -1 if epoch is None else epoch,
        "high_watermark": leader.high_watermark,
        "log_start_offset": leader.log_start_offset,
        "log_end_offset": leo,
        "isr": list(isr),
    }
    out_of_range = {**common, "diverging_epoch": None, "error": "OFFSET_OUT_OF_RANGE", "segment_bases": []}
    # Kafka's order (Partition.readRecords): the last fetched epoch first, then the log start, then the read.
    if last_epoch >= 0:
        end = leader.epoch_cache.end_offset_for(last_epoch, leo)
        if end == UNDEFINED_EPOCH_END_OFFSET or fetch_offset < leader.log_start_offset:
            return _encode(out_of_range, b"")
        if end.leader_epoch < last_epoch or end.end_offset < fetch_offset:
            diverging = {"epoch": end.leader_epoch, "end_offset": end.end_offset}
            return _encode({**common, "diverging_epoch": diverging, "error": None, "segment_bases": []}, b"")
    if fetch_offset < leader.log_start_offset or fetch_offset > leo:
        return _encode(out_of_range, b"")
    data = leader.read(fetch_offset, FETCH_BYTES, Isolation.LOG_END).records
    last = fetch_offset
    for pos, _ in iter_batch_positions(data):
        last = read_header(data, pos).last_offset
    bases = [s.base_offset for s in leader.segments if fetch_offset <= s.base_offset <= last]
    return _encode({**common, "diverging_epoch": None, "error": None, "segment_bases": bases}, data)


def _encode(head: dict[str, object], data: bytes) -> FetchResponse:
    raw = json.dumps({**head, "records_bytes": len(data)}).encode() + b"\n" + data
    return parse_fetch_response(raw)


def replicate(leader: Log, follower: Log, *, rounds: int = 1000) -> None:
    """Fetch until the follower holds everything (and its HW is the leader's)."""
    for _ in range(rounds):
        epoch = follower.epoch_cache.latest_epoch()
        offset = follower.log_end_offset
        applied = apply_fetch(follower, offset, fake_fetch(leader, offset, -1 if epoch is None else epoch))
        if not applied.changed and offset == leader.log_end_offset:
            return
    raise AssertionError("the follower did not catch up")


def log_files(log: Log) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.directory.glob("*.log"))}


def all_records(log: Log) -> list[tuple[int, bytes | None]]:
    data = log.read(log.log_start_offset, 1 << 30, Isolation.LOG_END).records
    out = []
    for pos, _ in iter_batch_positions(data):
        out += [(r.offset, r.value) for r in decode_records(data, pos)]
    return [r for r in out if r[0] >= log.log_start_offset]


# --- the response -------------------------------------------------------------------------------------------------


GOOD = {
    "leader_epoch": 3,
    "high_watermark": 120,
    "log_start_offset": 0,
    "log_end_offset": 140,
    "isr": [1, 2],
    "diverging_epoch": None,
    "error": None,
    "segment_bases": [128],
}


def test_a_response_parses_into_its_fields_and_bytes() -> None:
    data = batch(120, 3, 3)
    raw = json.dumps({**GOOD, "records_bytes": len(data)}).encode() + b"\n" + data
    r = parse_fetch_response(raw)
    assert (r.leader_epoch, r.high_watermark, r.log_start_offset, r.log_end_offset) == (3, 120, 0, 140)
    assert r.isr == (1, 2) and r.segment_bases == (128,) and r.records == data
    assert r.diverging_epoch is None and not r.out_of_range


def test_a_diverging_epoch_and_an_error_parse() -> None:
    head = {**GOOD, "diverging_epoch": {"epoch": 2, "end_offset": 90}, "records_bytes": 0}
    assert parse_fetch_response(json.dumps(head).encode() + b"\n").diverging_epoch == DivergingEpoch(2, 90)
    head = {**GOOD, "error": "OFFSET_OUT_OF_RANGE", "records_bytes": 0}
    assert parse_fetch_response(json.dumps(head).encode() + b"\n").out_of_range


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"", "no JSON line"),
        (b"not json\n", "not JSON"),
        (b"[1]\n", "not a JSON object"),
        (json.dumps({**GOOD, "records_bytes": 5}).encode() + b"\nabc", "5, 3 bytes follow"),
        (json.dumps({**GOOD, "records_bytes": 0}).encode() + b"\nabc", "0, 3 bytes follow"),
        (json.dumps({**GOOD, "isr": "1,2", "records_bytes": 0}).encode() + b"\n", "isr"),
        (json.dumps({**GOOD, "high_watermark": None, "records_bytes": 0}).encode() + b"\n", "high_watermark"),
        (json.dumps({**GOOD, "error": "NOT_LEADER", "records_bytes": 0}).encode() + b"\n", "unknown error"),
        (json.dumps({**GOOD, "diverging_epoch": 3, "records_bytes": 0}).encode() + b"\n", "diverging_epoch"),
    ],
)
def test_a_malformed_response_is_refused_saying_why(raw: bytes, says: str) -> None:
    with pytest.raises(FetchProtocolError, match=says):
        parse_fetch_response(raw)


@pytest.mark.parametrize("bases", [1, 40_000, 300_000])
def test_read_fetch_reads_the_announced_bytes_whatever_the_header_length(tmp_path: Path, bases: int) -> None:
    """A short or a long segment_bases line (tiny segments; longer than one read) and a body are read whole."""
    data = b"".join(batch(i * 3, 3, 0) for i in range(2000))
    head = {**GOOD, "segment_bases": list(range(0, 3 * bases, 3)), "records_bytes": len(data)}
    path = tmp_path / "10.-1"
    path.write_bytes(json.dumps(head).encode() + b"\n" + data)
    r = FetchReader().read(path)
    assert r.records == data and len(r.segment_bases) == bases
    path.write_bytes(json.dumps(head).encode() + b"\n" + data[:-1])
    with pytest.raises(FetchProtocolError):
        FetchReader().read(path)


def test_a_reader_reuses_its_buffer_and_each_answer_is_whole_until_the_next_read(tmp_path: Path) -> None:
    """One FetchReader reads answers of growing and shrinking sizes (past its buffer: it grows, keeping what it had
    read); each answer's records are exactly its file's until the next read, which reuses the buffer."""
    reader = FetchReader(size=4096)
    small = batch(0, 3, 0)
    big = b"".join(batch(i * 3, 3, 0) for i in range(200))  # > 4096 bytes: the buffer grows
    answers = []
    for n, data in enumerate([small, big, small, batch(7, 2, 0, size=30), b""]):
        path = tmp_path / f"{n}.-1"
        path.write_bytes(json.dumps({**GOOD, "records_bytes": len(data)}).encode() + b"\n" + data)
        r = reader.read(path)
        assert bytes(r.records) == data and r.high_watermark == 120
        answers.append(r)
    assert bytes(answers[2].records) != small  # overwritten by the next read, as documented: the buffer is reused
    assert len(answers[4].records) == 0


def test_fetch_and_apply_applies_an_answer_without_news_at_once_and_returns_one_with_news(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    follower = open_log(tmp_path / "follower")
    produce(leader, 5, 0, random.Random(SEED))
    data = leader.read(0, FETCH_BYTES, Isolation.LOG_END).records
    head = {**GOOD, "leader_epoch": 0, "high_watermark": 0, "log_end_offset": leader.log_end_offset,
            "segment_bases": [0], "records_bytes": len(data)}  # fmt: skip
    path = tmp_path / "0.-1"
    path.write_bytes(json.dumps(head).encode() + b"\n" + data)
    slots = threading.BoundedSemaphore(1)
    news = fetch_and_apply(FetchReader(), path, follower, 0, (0, (1,)), ApplyGate(), slots)  # another ISR: news
    assert news.applied is None and follower.log_end_offset == 0
    gate = ApplyGate()
    done = fetch_and_apply(FetchReader(), path, follower, 0, (0, (1, 2)), gate, slots)
    assert done.applied is not None and done.applied.records > 0
    assert follower.log_end_offset == leader.log_end_offset and all_records(follower) == all_records(leader)
    gate.close()  # a partition let go of: an answer that comes back later is not applied
    produce(leader, 2, 0, random.Random(SEED + 1))
    more = leader.read(follower.log_end_offset, FETCH_BYTES, Isolation.LOG_END).records
    path.write_bytes(json.dumps({**head, "records_bytes": len(more)}).encode() + b"\n" + more)
    end = follower.log_end_offset
    assert fetch_and_apply(FetchReader(), path, follower, end, (0, (1, 2)), gate, slots).applied is None
    assert follower.log_end_offset == end
    path.write_bytes(json.dumps({**head, "records_bytes": 61}).encode() + b"\n" + bytes(61))  # not a batch
    with pytest.raises(ApplyFailed, match="cannot apply the fetch at offset"):
        fetch_and_apply(FetchReader(), path, follower, end, (0, (1, 2)), ApplyGate(), slots)
    leader.close()
    follower.close()


def test_closing_a_gate_waits_for_the_apply_in_progress() -> None:
    gate = ApplyGate()
    inside, release, closed = threading.Event(), threading.Event(), threading.Event()

    def apply() -> None:
        with gate.entered() as open_:
            assert open_
            inside.set()
            release.wait(5)

    worker = threading.Thread(target=apply)
    worker.start()
    assert inside.wait(5)
    closer = threading.Thread(target=lambda: (gate.close(), closed.set()))
    closer.start()
    assert not closed.wait(0.2)  # the apply is still running
    release.set()
    assert closed.wait(5)
    worker.join(5)
    closer.join(5)
    with gate.entered() as open_:
        assert not open_


def test_the_fetch_path_carries_replica_topic_partition_offset_and_epoch() -> None:
    assert fetch_path(Path("/m"), 2, "orders", 3, 120, 4) == Path("/m/.logfs/fetch/2/orders/3/120.4")
    assert fetch_path(Path("/m"), 2, "orders", 0, 0, -1) == Path("/m/.logfs/fetch/2/orders/0/0.-1")


# --- Kafka's truncation rules -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("diverging", "local", "leo", "expected"),
    [
        # the follower knows the epoch: min(leader end, its own end, LEO), complete
        (DivergingEpoch(1, 8), EpochEndOffset(1, 10), 15, Truncation(8, True)),
        (DivergingEpoch(1, 12), EpochEndOffset(1, 10), 15, Truncation(10, True)),
        (DivergingEpoch(1, 30), EpochEndOffset(1, 20), 15, Truncation(15, True)),
        # its floor epoch is another one: truncate to its end of that epoch and ask again
        (DivergingEpoch(2, 12), EpochEndOffset(1, 10), 15, Truncation(10, False)),
        # it has no epoch at or below: the leader's end, complete
        (DivergingEpoch(2, 12), UNDEFINED_EPOCH_END_OFFSET, 15, Truncation(12, True)),
    ],
)
def test_diverging_truncation_follows_get_offset_truncation_state(
    diverging: DivergingEpoch, local: EpochEndOffset, leo: int, expected: Truncation
) -> None:
    """AbstractFetcherThread.getOffsetTruncationState (Kafka's AbstractFetcherThread.scala)."""
    assert diverging_truncation(diverging, local, leo) == expected


def test_out_of_range_truncates_to_the_leader_end_or_starts_at_its_log_start() -> None:
    """AbstractFetcherThread.fetchOffsetAndTruncate (Kafka's AbstractFetcherThread.scala)."""
    assert out_of_range_action(0, 10, 15) == OutOfRange(truncate_to=10)
    assert out_of_range_action(20, 30, 15) == OutOfRange(start_at=20)
    assert out_of_range_action(0, 30, 15) == OutOfRange()


# --- one response applied to a log ----------------------------------------------------------------------------------


def test_a_follower_fed_by_the_fake_leader_ends_byte_identical_segment_by_segment(tmp_path: Path) -> None:
    """Rolls at the leader's segment_bases: every .log file equal, epochs equal, HW = the leader's."""
    rng = random.Random(SEED)
    print("seed", SEED)
    leader = open_log(tmp_path / "L" / "t-0", segment_bytes=700)
    follower = open_log(tmp_path / "F" / "t-0", segment_bytes=700)
    for epoch in (0, 1, 3):
        produce(leader, 40, epoch, rng)
        leader.update_high_watermark(leader.log_end_offset - 3)
        replicate(leader, follower)
    assert len(leader.segments) > 5
    assert log_files(follower) == log_files(leader)
    assert follower.epoch_cache.epoch_entries() == leader.epoch_cache.epoch_entries()
    assert follower.high_watermark == leader.high_watermark == leader.log_end_offset - 3


def test_a_fetch_resumes_mid_segment_and_rolls_only_at_leader_bases(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "L" / "t-0", segment_bytes=400)
    follower = open_log(tmp_path / "F" / "t-0", segment_bytes=400)
    for i in range(30):
        leader.append_as_leader(bytearray(batch(0, 2, -1)), 0)
        if i % 7 == 0:  # fetch between appends: responses that start and end inside leader segments
            replicate(leader, follower)
    replicate(leader, follower)
    assert [s.base_offset for s in follower.segments] == [s.base_offset for s in leader.segments]
    assert log_files(follower) == log_files(leader)


def leader_of_40_and_empty_follower(tmp_path: Path) -> tuple[Log, Log]:
    """A leader log holding offsets 0..39 (20 batches of 2, segments of 300 bytes), all below its HW, and an empty
    follower log with the same segment size."""
    leader = open_log(tmp_path / "L" / "t-0", segment_bytes=300)
    follower = open_log(tmp_path / "F" / "t-0", segment_bytes=300)
    for _ in range(20):
        leader.append_as_leader(bytearray(batch(0, 2, -1)), 0)
    leader.update_high_watermark(leader.log_end_offset)
    return leader, follower


def test_the_leader_log_start_moves_the_follower_log_start_never_past_its_hw(tmp_path: Path) -> None:
    leader, follower = leader_of_40_and_empty_follower(tmp_path)
    replicate(leader, follower)
    leader.maybe_increment_log_start_offset(17)
    leader.delete_old_segments()
    apply_fetch(follower, follower.log_end_offset, fake_fetch(leader, follower.log_end_offset, 0))
    assert follower.log_start_offset == 17
    assert follower.segments[0].base_offset == leader.segments[0].base_offset


@pytest.mark.parametrize("start", [30, 31])
def test_behind_the_leader_log_start_the_follower_starts_over_there(tmp_path: Path, start: int) -> None:
    """fetchOffsetAndTruncate; with a log start inside a batch (31: delete-records), the empty log then starts at
    that batch's first offset and takes it (Partition.appendRecordsToFollowerOrFutureReplica), its log start the
    leader's again."""
    leader, follower = leader_of_40_and_empty_follower(tmp_path)
    leader.maybe_increment_log_start_offset(start)
    leader.delete_old_segments()
    applied = apply_fetch(follower, 0, fake_fetch(leader, 0, -1))
    assert applied.started_at == start
    assert (follower.log_start_offset, follower.log_end_offset) == (start, start)
    replicate(leader, follower)
    assert follower.log_start_offset == leader.log_start_offset == start
    assert all_records(follower) == all_records(leader)


def test_a_divergent_tail_is_truncated_by_epochs_then_replaced(tmp_path: Path) -> None:
    """The old leader's tail in epoch 1 that the new leader (epoch 2) never had goes; records below it stay."""
    old = open_log(tmp_path / "old" / "t-0", segment_bytes=500)
    new = open_log(tmp_path / "new" / "t-0", segment_bytes=500)
    for _ in range(10):
        old.append_as_leader(bytearray(batch(0, 3, -1)), 1)
    replicate(old, new)  # both hold 0..29 in epoch 1
    for _ in range(4):
        old.append_as_leader(bytearray(batch(0, 2, -1, size=33)), 1)  # 30..37: no follower fetched these
    for _ in range(5):
        new.append_as_leader(bytearray(batch(0, 1, -1, size=44)), 2)  # the new leader's epoch 2 from 30
    new.update_high_watermark(new.log_end_offset)
    epoch = old.epoch_cache.latest_epoch()
    assert epoch == 1
    applied = apply_fetch(old, 38, fake_fetch(new, 38, epoch))
    assert applied.truncated_to == 30
    replicate(new, old)
    assert all_records(old) == all_records(new)
    assert old.epoch_cache.epoch_entries() == new.epoch_cache.epoch_entries()
    assert log_files(old) == log_files(new)


def test_a_leader_log_ending_below_ours_truncates_to_its_end(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "L" / "t-0")
    follower = open_log(tmp_path / "F" / "t-0")
    follower.append_as_follower(batch(0, 5, 0) + batch(5, 5, 0))
    leader.append_as_follower(batch(0, 5, 0))
    applied = apply_fetch(follower, 10, fake_fetch(leader, 10, -1))  # no epoch sent: out of range
    assert applied.truncated_to == 5 and follower.log_end_offset == 5


def test_truncation_inside_a_batch_cuts_at_the_batch_start(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_follower(batch(0, 5, 0) + batch(5, 5, 0) + batch(10, 5, 0))
    assert truncate_at_batch(log, 7) == 5
    assert truncate_at_batch(log, 5) == 5
    assert truncate_at_batch(log, 9) == 5  # at or past the end: nothing more


def test_a_response_starting_before_our_end_skips_what_we_hold(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_follower(batch(0, 5, 0))
    applied = append_fetched(log, batch(0, 5, 0) + batch(5, 5, 0), [])
    assert applied.records == 5 and log.log_end_offset == 10


def test_a_batch_straddling_our_end_truncates_to_its_start(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_follower(batch(0, 3, 0) + batch(3, 4, 0))
    log.truncate_to(5)  # ends inside no batch of its own now, but the leader's batch 3..9 straddles 5
    assert append_fetched(log, batch(3, 7, 0), []).truncated_to == 3


def test_a_torn_response_is_a_protocol_error(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    with pytest.raises(FetchProtocolError):
        append_fetched(log, batch(0, 5, 0)[:-3], [])


# --- the replica state -------------------------------------------------------------------------------------------


def test_the_replica_state_is_the_intersection_of_the_isrs_seen() -> None:
    assert aggregate_replica_state(2, 1, []) is None
    state = aggregate_replica_state(2, 1, [(3, (1, 2)), (3, (2, 1, 3))])
    assert state == PersistedReplicaState(2, 3, 3, (1, 2), True)
    state = aggregate_replica_state(2, 7, [(3, (1, 2)), (4, (1,))])
    assert state == PersistedReplicaState(2, 4, 7, (1,), False)


# --- the command line ---------------------------------------------------------------------------------------------


LOGFS = str(Path(sys.executable).with_name("logfs"))


def run_logfs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LOGFS, *args], capture_output=True, text=True, timeout=60, check=False, cwd="/")


def test_logfs_follow_needs_a_replica_id_and_takes_it_as_node_id(tmp_path: Path) -> None:
    """Exit 2: no --replica-id, a --config node.id beside it, a store that belongs to another node.id."""
    assert run_logfs("follow", str(tmp_path / "L"), str(tmp_path / "F")).returncode == 2
    done = run_logfs("follow", str(tmp_path), str(tmp_path / "F"), "--replica-id", "2", "--config", "node.id=2")
    assert done.returncode == 2 and "--replica-id" in done.stderr
    Store.open(tmp_path / "S", StoreConfig(node_id=1)).close()
    done = run_logfs("follow", str(tmp_path), str(tmp_path / "S"), "--replica-id", "2")
    assert done.returncode == 2 and "node.id=1" in done.stderr
    help_text = run_logfs("follow", "--help").stdout
    assert "LEADER_MOUNT" in help_text and "--mount" in help_text and "--replica-id" in help_text


def test_discovery_copies_a_leaders_topics_that_collide_and_still_refuses_illegal_names(tmp_path: Path) -> None:
    """A follower copies what its leader holds: two names that differ only in '.' and '_' are both made here (the
    leader refused such a pair when it was created, or holds both anyway); a name outside Kafka's rules is not."""
    from logfs.core.errors import InvalidTopic
    from logfs.core.store import NewTopic
    from logfs.follower.discovery import LeaderTopic, create_topics, ensure_topic

    with Store.open(tmp_path, StoreConfig()) as store:
        made = create_topics(store, {"a.b": LeaderTopic(1, None, None), "a_b": LeaderTopic(2, None, None)})
        assert made == ["a.b", "a_b"]
        store.create_topic("c.d")
        ensure_topic(store, "c_d", LeaderTopic(1, None, None), None)
        assert store.topics() == ["a.b", "a_b", "c.d", "c_d"] and store.partitions("a_b") == [0, 1]
        assert create_topics(store, {"e f": LeaderTopic(1, None, None)}) == []  # left to ensure_topic, which …
        with pytest.raises(InvalidTopic):
            ensure_topic(store, "e f", LeaderTopic(1, None, None), None)  # … reports it
        store.create_topics([NewTopic("g_h")], copied=True)
        with pytest.raises(InvalidTopic, match="collides with existing topic 'g_h'"):
            store.create_topic("g.h")  # not a copy: checked
