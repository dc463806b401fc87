"""Failover end to end with the documented procedure (docs/replication.md, "Failover, step by step"): the leader dies,
``logfs mount`` of an in-sync follower's store makes it the leader under a new epoch, and ``logfs follow
NEW_LEADER_MOUNT OLD_STORE --replica-id <id>`` makes the old leader's store a follower that truncates what the new
leader does not have.

Every process is real: leaders are ``logfs mount``, followers ``logfs follow``, each with its own store.
"""

from __future__ import annotations

import os
from pathlib import Path

from conftest import Mount, finish_mount, start_mount
from follower_procs import (
    append_lines,
    finish_follower,
    following,
    identical,
    in_isr,
    start_follower,
    state,
    values,
    wait_for,
)

TOPIC = "t"
PARTITIONS = 2


def lead(store: Path, node_id: int) -> Mount:
    return start_mount(store, store.with_name(store.name + ".mnt"), f"node.id={node_id}", "replica.ids=1,2")


def epochs(store: Path, partition: int) -> list[tuple[int, int]]:
    """The leader-epoch-checkpoint of a partition: (epoch, start offset) entries."""
    lines = (store / f"{TOPIC}-{partition}" / "leader-epoch-checkpoint").read_text().splitlines()
    return [(int(e), int(o)) for e, o in (line.split() for line in lines[2:])]


def test_failover_with_a_divergent_tail_keeps_every_acked_record(tmp_path: Path) -> None:
    """The old leader appended records no follower fetched; after the failover and its rejoin both stores hold the
    same records (the new leader's), the divergent tail is gone, and every record acknowledged by fsync survived."""
    s1, s2 = tmp_path / "S1", tmp_path / "S2"
    old = lead(s1, 1)
    try:
        os.mkdir(old.path / TOPIC)
        os.mkdir(old.path / TOPIC / "1")
        f2 = start_follower(old.path, s2, 2)
        try:
            wait_for("follower 2 in the ISR", lambda: in_isr(old, TOPIC, PARTITIONS, 2), old, f2)
            for p in range(PARTITIONS):
                for w in range(3):  # acks=all: fsync returned, so follower 2 holds them
                    append_lines(old.path / TOPIC / str(p) / "append", [f"acked-{p}-{w}-{i}" for i in range(10)],
                                 fsync=True)  # fmt: skip
            old_epoch = state(old.path, TOPIC, 0)["leader_epoch"]
        finally:
            finish_follower(f2)
        for p in range(PARTITIONS):  # the divergent tail: acks=1, and no follower is fetching
            append_lines(old.path / TOPIC / str(p) / "append", [f"lost-{p}-{i}" for i in range(7)])
        old.proc.kill()  # the leader dies
        old.proc.wait()
    finally:
        old.stop()  # clears the dead mount

    new = lead(s2, 2)
    try:
        assert state(new.path, TOPIC, 0)["leader_epoch"] > old_epoch
        for p in range(PARTITIONS):
            append_lines(new.path / TOPIC / str(p) / "append", [f"new-{p}-{i}" for i in range(5)])
        with following(new.path, s1, 1) as f1:
            wait_for("the old leader identical to the new", lambda: identical(s2, s1, TOPIC, PARTITIONS), new, f1)
            wait_for("the old leader in the new ISR", lambda: in_isr(new, TOPIC, PARTITIONS, 1), new, f1)
            assert "truncated" in f1.log_text()
        for p in range(PARTITIONS):
            got = values(new.path, TOPIC, p)
            acked = [f"acked-{p}-{w}-{i}" for w in range(3) for i in range(10)]
            assert got == acked + [f"new-{p}-{i}" for i in range(5)]
            assert epochs(s1, p) == epochs(s2, p)
    finally:
        finish_mount(new)


def _lead_one_turn(turn: int, leader_store: Path, leader_id: int, follower_store: Path, follower_id: int) -> int:
    """One leadership: mount ``leader_store`` (a new epoch), let the other store follow it and catch up on one
    acks=all record per partition, stop both; the epoch."""
    leader = lead(leader_store, leader_id)
    try:
        if turn == 0:
            os.mkdir(leader.path / TOPIC)
            os.mkdir(leader.path / TOPIC / "1")
        epoch: int = state(leader.path, TOPIC, 0)["leader_epoch"]
        with following(leader.path, follower_store, follower_id) as follower:
            wait_for("the follower in the ISR", lambda: in_isr(leader, TOPIC, PARTITIONS, follower_id),
                     leader, follower)  # fmt: skip
            for p in range(PARTITIONS):
                append_lines(leader.path / TOPIC / str(p) / "append", [f"turn{turn}-{p}"], fsync=True)
            wait_for("identical", lambda: identical(leader_store, follower_store, TOPIC, PARTITIONS),
                     leader, follower)  # fmt: skip
        return epoch
    finally:
        finish_mount(leader)


def test_two_failovers_in_a_row_never_reuse_an_epoch(tmp_path: Path) -> None:
    """S1 leads, S2 follows; S2 takes over; S1 follows it; S1 takes over again: three epochs, strictly rising, in
    every partition's leader-epoch checkpoint of both stores alike."""
    s1, s2 = tmp_path / "S1", tmp_path / "S2"
    seen = [
        _lead_one_turn(0, s1, 1, s2, 2),
        _lead_one_turn(1, s2, 2, s1, 1),
        _lead_one_turn(2, s1, 1, s2, 2),
    ]
    assert seen == sorted(set(seen)), seen
    for p in range(PARTITIONS):
        assert [e for e, _ in epochs(s1, p)] == seen
        assert epochs(s1, p) == epochs(s2, p)
