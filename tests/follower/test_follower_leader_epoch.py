"""The follower's side of the fetcher's leader epoch: the three-part fetch path, the two refusals parsed and never
applied, and a Follower run in-process (as a cluster node runs it) against a real leader mount: at an epoch the
leader does not have it applies nothing, tells ``on_epoch_refused`` and asks again; once told the right epoch it
replicates; told which partitions it follows and each one's epoch (``follows``), it fetches those alone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import trio
from conftest import finish_mount, start_mount

from logfs.core.config import LogConfig
from logfs.core.log.handles import HandleCache
from logfs.core.log.loader import load_log
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig
from logfs.follower.daemon import Follower
from logfs.follower.fetch import (
    FENCED_LEADER_EPOCH,
    UNKNOWN_LEADER_EPOCH,
    FetchResponse,
    fetch_path,
    parse_fetch_response,
)
from logfs.follower.replica import apply_fetch


def test_the_fetch_path_names_the_current_leader_epoch_when_given() -> None:
    assert fetch_path(Path("/m"), 2, "t", 3, 120, 4, 7) == Path("/m/.logfs/fetch/2/t/3/120.4.7")
    assert fetch_path(Path("/m"), 2, "t", 0, 0, -1, 0) == Path("/m/.logfs/fetch/2/t/0/0.-1.0")
    assert fetch_path(Path("/m"), 2, "t", 0, 0, -1) == Path("/m/.logfs/fetch/2/t/0/0.-1")  # `logfs follow`


def test_a_refusal_parses_and_is_never_applied(tmp_path: Path) -> None:
    log = load_log(tmp_path / "t-0", LogConfig(), HandleCache(), had_clean_shutdown=True)
    for error in (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH):
        head = {"leader_epoch": 3, "high_watermark": 9, "log_start_offset": 0, "log_end_offset": 9, "isr": [0, 1],
                "diverging_epoch": None, "error": error, "segment_bases": [], "records_bytes": 0}  # fmt: skip
        response = parse_fetch_response(json.dumps(head).encode() + b"\n")
        assert response.epoch_refused and not response.out_of_range
        applied = apply_fetch(log, 0, response)
        assert applied.stale and not applied.changed
        assert log.log_end_offset == 0 and log.high_watermark == 0  # the leader's HW was not believed


def test_an_in_process_follower_at_another_epoch_asks_again_and_replicates_once_told(tmp_path: Path) -> None:
    leader = start_mount(tmp_path / "L", tmp_path / "L.mnt", "node.id=0", "replica.ids=0,1")  # leader epoch 0
    try:
        os.mkdir(leader.path / "t")
        fd = os.open(leader.path / "t/0/append", os.O_WRONLY)
        try:
            os.write(fd, b"".join(b"record-%d\n" % i for i in range(20)))
        finally:
            os.close(fd)
        store = Store.open(tmp_path / "F", StoreConfig(node_id=1))
        refused: list[tuple[str, int, str | None]] = []

        async def main() -> None:
            def on_refused(topic: str, partition: int, response: FetchResponse) -> None:
                refused.append((topic, partition, response.error))

            follower = Follower(leader.path, store, 1, leader_epoch=5, on_epoch_refused=on_refused)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(follower.run)
                with trio.fail_after(10):
                    while not refused:
                        await trio.sleep(0.05)
                await trio.sleep(0.3)  # more refusals, backing off; nothing applied meanwhile
                assert store.log("t", 0).log_end_offset == 0
                assert follower.replica_state.partition_view("t", 0) == (-1, ())  # a refusal is not news of the leader
                follower.leader_epoch = 0  # as a cluster node does once ZooKeeper said the epoch
                with trio.fail_after(10):
                    while store.log("t", 0).high_watermark < 20:
                        await trio.sleep(0.05)
                nursery.cancel_scope.cancel()

        try:
            trio.run(main)
        finally:
            store.close()
        assert refused[0] == ("t", 0, UNKNOWN_LEADER_EPOCH)
        assert {e for _, _, e in refused} == {UNKNOWN_LEADER_EPOCH}
    finally:
        finish_mount(leader)


def test_a_follower_fetches_only_the_partitions_it_follows_each_at_its_own_epoch_and_refollows(tmp_path: Path) -> None:
    """A node that leads some partitions and follows others runs one Follower per leader, each told which partitions
    it fetches and at which leader epoch (``follows``): the others are never fetched; a wrong epoch for one partition
    is refused for that one alone; after ``refollow`` a partition that moved here is fetched, one that moved away is
    no longer (nothing of it applied after refollow returns)."""
    leader = start_mount(tmp_path / "L", tmp_path / "L.mnt", "node.id=0", "replica.ids=0,1")  # leader epoch 0
    try:
        os.mkdir(leader.path / "t")
        os.mkdir(leader.path / "t/1")

        def write(partition: int, first: int, count: int) -> None:
            fd = os.open(leader.path / f"t/{partition}/append", os.O_WRONLY)
            try:
                os.write(fd, b"".join(b"record-%d\n" % i for i in range(first, first + count)))
            finally:
                os.close(fd)

        write(0, 0, 10)
        write(1, 0, 10)
        store = Store.open(tmp_path / "F", StoreConfig(node_id=1))
        follows: dict[tuple[str, int], int] = {("t", 0): 0, ("t", 1): 5}  # partition 1 at an epoch it lacks
        refused: list[tuple[str, int]] = []

        def ends() -> tuple[int, int]:
            return store.log("t", 0).log_end_offset, store.log("t", 1).log_end_offset

        async def main() -> None:
            follower = Follower(leader.path, store, 1, follows=lambda t, p: follows.get((t, p)),
                                on_epoch_refused=lambda t, p, r: refused.append((t, p)))  # fmt: skip
            async with trio.open_nursery() as nursery:
                nursery.start_soon(follower.run)
                with trio.fail_after(10):
                    while not store.has_topic("t") or store.log("t", 0).high_watermark < 10:
                        await trio.sleep(0.05)
                    while ("t", 1) not in refused:
                        await trio.sleep(0.05)
                assert ends() == (10, 0) and ("t", 0) not in refused
                # partition 0 now led here (or by another node): not fetched; partition 1 at the right epoch
                del follows[("t", 0)]
                follows[("t", 1)] = 0
                await follower.refollow()
                write(0, 10, 5)
                write(1, 10, 5)
                with trio.fail_after(10):
                    while store.log("t", 1).high_watermark < 15:
                        await trio.sleep(0.05)
                await trio.sleep(0.5)  # a long poll's worth: partition 0 would have been fetched by now
                assert ends() == (10, 15)
                nursery.cancel_scope.cancel()

        try:
            trio.run(main)
        finally:
            store.close()
    finally:
        finish_mount(leader)
