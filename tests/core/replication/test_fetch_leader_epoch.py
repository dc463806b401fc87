"""The fetcher's current leader epoch (Kafka's FetchRequest currentLeaderEpoch, checked by
``Partition.checkCurrentLeaderEpoch``): a fetch at another epoch than the leader's is refused with
FENCED_LEADER_EPOCH (older) or UNKNOWN_LEADER_EPOCH (newer), carries no batches and records nothing; a fetch that
does not say its epoch (``logfs follow``) is answered as before."""

from __future__ import annotations

import json
from pathlib import Path

from logfs.core.config import LogConfig
from logfs.core.format.batch import Record
from logfs.core.format.encode import encode_batch
from logfs.core.log.handles import HandleCache
from logfs.core.log.loader import load_log
from logfs.core.log.log import Log
from logfs.core.replication.fetch import (
    FENCED_LEADER_EPOCH,
    UNKNOWN_LEADER_EPOCH,
    accept_fetch,
    check_leader_epoch,
    fetch_response,
)
from logfs.core.replication.replica import UNKNOWN_OFFSET, LeaderPartition

LEADER, F1 = 0, 1
T0 = 1_700_000_000_000


def leader_of(tmp_path: Path, epoch: int) -> LeaderPartition:
    log: Log = load_log(tmp_path / "t-0", LogConfig(), HandleCache(), had_clean_shutdown=True)
    log.append_as_leader(encode_batch([Record(i, T0, None, f"v{i}".encode()) for i in range(3)]), epoch)
    return LeaderPartition(log, node_id=LEADER, replica_ids=(LEADER, F1), leader_epoch=epoch,
                           replica_lag_time_max_ms=30_000, isr=(LEADER,), now_ms=T0)  # fmt: skip


def test_check_leader_epoch_names_older_fenced_newer_unknown_and_none_or_equal_ok() -> None:
    assert check_leader_epoch(5, None) is None
    assert check_leader_epoch(5, 5) is None
    assert check_leader_epoch(5, 4) == FENCED_LEADER_EPOCH
    assert check_leader_epoch(5, 0) == FENCED_LEADER_EPOCH
    assert check_leader_epoch(5, 6) == UNKNOWN_LEADER_EPOCH


def test_a_fetch_at_another_leader_epoch_has_no_batches_and_records_nothing(tmp_path: Path) -> None:
    p = leader_of(tmp_path, 4)
    for current, error in ((3, FENCED_LEADER_EPOCH), (5, UNKNOWN_LEADER_EPOCH)):
        validation, change = accept_fetch(p, F1, 3, 4, T0, current_leader_epoch=current)
        assert not validation.ok and validation.leader_epoch_error == error and not change.any
        response = fetch_response(p, 3, validation)
        assert response.error == error and response.records == b"" and response.diverging_epoch is None
        head = json.loads(bytes(response.render()))
        assert head["error"] == error and head["leader_epoch"] == 4 and head["records_bytes"] == 0
    assert p.replica_state(F1).log_end_offset == UNKNOWN_OFFSET  # the refused fetches left no trace
    assert p.isr == (LEADER,)


def test_the_epoch_is_checked_before_the_offset_as_kafka_does(tmp_path: Path) -> None:
    """Even an out-of-range or diverging fetch at a stale epoch answers FENCED_LEADER_EPOCH: the follower must
    learn the leadership before anything the leader says about its log is worth acting on."""
    p = leader_of(tmp_path, 4)
    assert accept_fetch(p, F1, 99, -1, T0, current_leader_epoch=2)[0].leader_epoch_error == FENCED_LEADER_EPOCH
    assert accept_fetch(p, F1, 3, 9, T0, current_leader_epoch=2)[0].leader_epoch_error == FENCED_LEADER_EPOCH


def test_a_fetch_at_the_leaders_epoch_or_without_one_is_answered_and_recorded(tmp_path: Path) -> None:
    for current in (4, None):
        p = leader_of(tmp_path / str(current), 4)
        validation, change = accept_fetch(p, F1, 0, -1, T0, current_leader_epoch=current)
        assert validation.ok and validation.leader_epoch_error is None
        response = fetch_response(p, 0, validation)
        assert response.error is None and len(response.records) > 0
        validation, change = accept_fetch(p, F1, 3, 4, T0, current_leader_epoch=current)
        assert validation.ok and change.isr_changed and p.isr == (LEADER, F1)
        assert p.replica_state(F1).log_end_offset == 3
