"""GroupOffsets replayed from a real store's __consumer_offsets: latest commit wins, tombstones delete, catch-up
reads only what is new, a truncated partition is replayed again, and a bound (a follower's HW) is respected."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from logfs.core.errors import InvalidOffsetCommit
from logfs.core.format.batch import iter_batch_positions
from logfs.core.format.decode import decode_records
from logfs.core.groups.offsets import (
    GroupOffsets,
    check_commit_offset,
    commit_batch,
    ensure_offsets_topic,
    parse_commit,
    tombstone_batch,
)
from logfs.core.groups.records import OFFSETS_TOPIC, decode_key, decode_value, partition_for_group
from logfs.core.log.log import Log
from logfs.core.replication.fetch import read_batches
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig

PARTITIONS = 3


def _end(log: Log) -> int:
    return log.log_end_offset


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "store", StoreConfig())
    ensure_offsets_topic(s, PARTITIONS)
    yield s
    s.close()


def _append(store: Store, group: str, batch: bytes) -> Log:
    log = store.log(OFFSETS_TOPIC, partition_for_group(group, PARTITIONS))
    log.append_as_leader(bytearray(batch), 0)
    log.update_high_watermark(log.log_end_offset)  # no followers: committed at once (the cleaner stops at the HW)
    return log


def test_the_topic_is_compacted_with_the_partitions_asked(store: Store) -> None:
    assert store.partitions(OFFSETS_TOPIC) == list(range(PARTITIONS))
    assert "compact" in store.topic_overrides(OFFSETS_TOPIC)["cleanup.policy"]
    ensure_offsets_topic(store, PARTITIONS)  # a second call changes nothing


def test_the_latest_commit_wins_and_a_tombstone_deletes(store: Store) -> None:
    offsets = GroupOffsets()
    _append(store, "g", commit_batch("g", [("t", 0, 5, "first"), ("t", 1, 7, "")], 1000))
    _append(store, "g", commit_batch("g", [("t", 0, 9, "second")], 2000))
    _append(store, "h", commit_batch("h", [("t", 0, 3, "")], 3000))
    offsets.catch_up(store, _end)
    assert offsets.groups() == ["g", "h"]
    latest = offsets.committed("g", "t", 0)
    assert latest is not None and (latest.offset, latest.metadata, latest.commit_timestamp) == (9, "second", 2000)
    assert offsets.committed("g", "t", 1) is not None
    _append(store, "g", tombstone_batch("g", [("t", 0), ("t", 1)], 4000))
    offsets.catch_up(store, _end)
    assert offsets.groups() == ["h"]
    assert offsets.committed("g", "t", 0) is None


def test_records_decode_with_kafkas_schemas(store: Store) -> None:
    log = _append(store, "g", commit_batch("g", [("t", 2, 42, "m")], 1234))
    stored, _ = read_batches(log, 0, log.log_end_offset, 1 << 20)
    (record,) = decode_records(bytes(stored))
    assert record.key is not None and record.value is not None
    key, value = decode_key(record.key), decode_value(record.value)
    assert key is not None and (key.group, key.topic, key.partition) == ("g", "t", 2)
    assert (value.offset, value.metadata, value.commit_timestamp, value.leader_epoch) == (42, "m", 1234, -1)
    assert record.value[:2] == b"\x00\x03" and record.key[:2] == b"\x00\x01"


def test_catch_up_respects_the_bound_and_reads_only_what_is_new(store: Store) -> None:
    offsets = GroupOffsets()
    log = _append(store, "g", commit_batch("g", [("t", 0, 1, "")], 1))
    _append(store, "g", commit_batch("g", [("t", 0, 2, "")], 2))
    offsets.catch_up(store, lambda _log: 1)  # a follower whose HW is 1
    commit = offsets.committed("g", "t", 0)
    assert commit is not None and commit.offset == 1
    offsets.catch_up(store, _end)
    commit = offsets.committed("g", "t", 0)
    assert commit is not None and commit.offset == 2
    assert log.log_end_offset == 2


def test_a_truncated_partition_is_replayed_from_its_start(store: Store) -> None:
    offsets = GroupOffsets()
    log = _append(store, "g", commit_batch("g", [("t", 0, 1, "")], 1))
    _append(store, "g", commit_batch("g", [("t", 0, 2, "")], 2))
    offsets.catch_up(store, _end)
    log.truncate_to(1)  # a follower dropping a divergent tail
    offsets.catch_up(store, _end)
    commit = offsets.committed("g", "t", 0)
    assert commit is not None and commit.offset == 1


def test_a_reopened_store_replays_the_same_commits(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s", StoreConfig()) as s:
        ensure_offsets_topic(s, PARTITIONS)
        _append(s, "g", commit_batch("g", [("t", 0, 11, "x")], 1))
    with Store.open(tmp_path / "s", StoreConfig()) as s:
        offsets = GroupOffsets()
        offsets.catch_up(s, _end)
        commit = offsets.committed("g", "t", 0)
        assert commit is not None and (commit.offset, commit.metadata) == (11, "x")


@pytest.mark.parametrize("line", [b"", b"x", b"-1", b"1x", b" 5", b"\xd9\xa3", b"5 " + b"m" * 5000])
def test_malformed_commit_lines_are_refused(line: bytes) -> None:
    with pytest.raises(InvalidOffsetCommit):
        parse_commit(line)


def test_commit_lines_parse() -> None:
    assert parse_commit(b"12") == (12, "")
    assert parse_commit(b"12 some metadata here") == (12, "some metadata here")


def test_a_commit_outside_the_log_is_refused(store: Store) -> None:
    store.create_topic("t", 1)
    log = store.log("t", 0)
    check_commit_offset(log, "t", 0, 0)  # an empty log: 0 is both its start and its end
    with pytest.raises(InvalidOffsetCommit):
        check_commit_offset(log, "t", 0, 1)


def test_the_cleaner_keeps_the_latest_commit_per_key_and_drops_deleted_commits(store: Store) -> None:
    """Compaction (core/log/cleaner/logcleaner.py) of __consumer_offsets: old commits of a key go, the latest stays, a
    group deleted by tombstones is gone once delete.retention.ms passed; a replay of the cleaned log gives the same
    state."""
    from logfs.core.log.cleaner.logcleaner import LogCleaner

    store.set_topic_overrides(
        OFFSETS_TOPIC, {"cleanup.policy": "compact", "segment.bytes": "1024", "delete.retention.ms": "0"}
    )
    log = store.log(OFFSETS_TOPIC, partition_for_group("g", PARTITIONS))
    for i in range(60):
        _append(store, "g", commit_batch("g", [("t", 0, i, ""), ("t", 1, 2 * i, "m")], 1000 + i))
    before = GroupOffsets()
    before.catch_up(store, _end)
    log.roll()
    LogCleaner.for_store(store, map_memory=1 << 20).clean_log(log)
    stored, _ = read_batches(log, log.log_start_offset, log.log_end_offset, 1 << 24)
    records = [r for pos, _ in iter_batch_positions(stored) for r in decode_records(stored, pos)]
    assert len(records) == 2  # one per key: the latest commits of t-0 and t-1
    after = GroupOffsets()
    after.catch_up(store, _end)
    assert after.commits("g") == before.commits("g")
    commit = after.committed("g", "t", 1)
    assert commit is not None and (commit.offset, commit.metadata) == (118, "m")
    _append(store, "g", tombstone_batch("g", [("t", 0), ("t", 1)], 5000))
    log.roll()
    cleaner = LogCleaner.for_store(store, map_memory=1 << 20)
    cleaner.clean_log(log)  # the tombstones are kept this round (they are dirty: consumers must see them)
    _append(store, "g", commit_batch("g", [("u", 0, 5, "")], 6000))
    log.roll()
    cleaner.clean_log(log)  # now they are past delete.retention.ms (0) in a cleaned segment: gone
    stored, _ = read_batches(log, log.log_start_offset, log.log_end_offset, 1 << 24)
    left = [r for pos, _ in iter_batch_positions(stored) for r in decode_records(stored, pos)]
    assert [(r.offset, r.value is None) for r in left] == [(122, False)]
    gone = GroupOffsets()
    gone.catch_up(store, _end)
    assert list(gone.commits("g")) == [("u", 0)]
