"""``logfs follow`` against a real leader: leader and followers as separate processes, each with its own store and
mount, replicating through the leader's ``.logfs/fetch/`` files (docs/replication.md, "The follower: `logfs follow`";
issue 5).

Each test starts what it needs and stops it in ``finally`` (``conftest.finish_mount``, ``follower_procs.following``),
checking exit codes and that no unexpected WARNING or ERROR was logged.
"""

from __future__ import annotations

import errno
import os
import random
import re
import signal
from pathlib import Path

import pytest
from conftest import Mount, finish_mount, make_topic, start_mount
from follower_procs import (
    append_lines,
    finish_follower,
    following,
    identical,
    in_isr,
    segment_files,
    start_follower,
    state,
    values,
    wait_for,
)

SEED = 5005


def leader(tmp_path: Path, *config: str, name: str = "L") -> Mount:
    return start_mount(tmp_path / name, tmp_path / f"{name}.mnt", *config)


def produce(mount: Path, topic: str, partition: int, count: int, rng: random.Random, tag: str = "r") -> list[str]:
    """``count`` records of varied sizes, in write requests of varied record counts (so batches differ)."""
    lines = [f"{tag}-{partition}-{i}-" + "x" * rng.randint(0, 300) for i in range(count)]
    path = mount / topic / str(partition) / "append"
    i = 0
    while i < count:
        n = rng.randint(1, 200)
        append_lines(path, lines[i : i + n])
        i += n
    return lines


def test_a_follower_replicates_a_multi_partition_topic_byte_identical(tmp_path: Path) -> None:
    """Topics, partitions and configs are discovered; every .log file ends equal, rolls included, live too."""
    rng = random.Random(SEED)
    print("seed", SEED)
    lead = leader(tmp_path, "node.id=1", "replica.ids=1,2")
    try:
        make_topic(lead.path, "orders", 3, **{"segment.bytes": 20_000, "retention.ms": 86_400_000})
        for p in range(3):
            produce(lead.path, "orders", p, 400, rng)
        with following(lead.path, tmp_path / "F", 2) as follower:
            wait_for("byte-identical partitions", lambda: identical(lead.store, tmp_path / "F", "orders", 3),
                     lead, follower)  # fmt: skip
            assert all(len(segment_files(lead.store, "orders", p)) > 2 for p in range(3))
            for p in range(3):  # live: records appended while it follows
                produce(lead.path, "orders", p, 100, rng, tag="live")
            make_topic(lead.path, "events", 1)  # a topic created while it follows
            produce(lead.path, "events", 0, 10, rng)
            wait_for("live records replicated", lambda: identical(lead.store, tmp_path / "F", "orders", 3)
                     and identical(lead.store, tmp_path / "F", "events", 1), lead, follower)  # fmt: skip
            wait_for("the follower in the ISR", lambda: in_isr(lead, "orders", 3, 2), lead, follower)
            # A deletion on the leader is mirrored here. A fetch of the topic long-polling on the leader when it is
            # deleted may answer EIO there (a leader-side race, reported), and the follower retries.
            lead.allow_log(r"lookup\(.*failed with EIO: StorageError: cannot open .*events-0")
            follower.allow_log(r"events-0: fetch failed \(EIO")
            (lead.path / ".logfs" / "delete-topic").write_text("events\n")
            wait_for("events deleted here", lambda: not (tmp_path / "F" / "events-0").exists(), lead, follower)
        overrides = (tmp_path / "F" / ".logfs-topic.orders.properties").read_text()
        assert "segment.bytes=20000" in overrides and "retention.ms=86400000" in overrides
        for p in range(3):
            epochs = (tmp_path / "F" / f"orders-{p}" / "leader-epoch-checkpoint").read_text()
            assert epochs == (lead.store / f"orders-{p}" / "leader-epoch-checkpoint").read_text()
    finally:
        finish_mount(lead)


def test_a_follower_killed_mid_backlog_resumes_and_ends_identical(tmp_path: Path) -> None:
    """SIGKILL halfway through a backlog of many segments; a restart recovers its store and fetches on from its LEO."""
    lead = leader(tmp_path, "node.id=1", "replica.ids=1,2")
    try:
        make_topic(lead.path, "big", 1, **{"segment.bytes": 1_048_576})
        record = "y" * 990
        for _ in range(12):  # 12 MB in 12,000 records of 1 KB, in 1 MB write requests
            append_lines(lead.path / "big" / "0" / "append", [record] * 1000)
        store = tmp_path / "F"
        first = start_follower(lead.path, store, 2)
        try:
            wait_for("a part of the backlog", lambda: sum(p.stat().st_size for p in (store / "big-0").glob("*.log"))
                     > 1_000_000, lead, first, poll_s=0.005)  # fmt: skip
        finally:
            first.kill()
        assert not identical(lead.store, store, "big", 1), "the follower was not stopped mid-backlog"
        # the kill may land inside a write: a torn tail, cut on restart
        # (the recovery's own line comes from logfs.core.log.recovery since the core's split into subpackages)
        torn = r"logfs\.core\.(log\.)?(loader|segment|recovery): .*(recover|torn tail)"
        with following(lead.path, store, 2, allow=(torn,)) as second:
            wait_for("byte-identical after the restart", lambda: identical(lead.store, store, "big", 1), lead, second)
    finally:
        finish_mount(lead)


def test_retention_on_the_leader_moves_the_follower_log_start(tmp_path: Path) -> None:
    """delete-records on the leader raises the follower's log start offset; its segments below it go too. A follower
    that comes back behind the leader's log start empties its log and starts there (OFFSET_OUT_OF_RANGE)."""
    lead = leader(tmp_path, "node.id=1", "replica.ids=1,2", "replica.lag.time.max.ms=500")
    try:
        make_topic(lead.path, "t", 1, **{"segment.bytes": 4096})
        append_lines(lead.path / "t" / "0" / "append", [f"v{i:04d}" + "z" * 100 for i in range(200)])
        mnt = tmp_path / "F.mnt"
        with following(lead.path, tmp_path / "F", 2, mount=mnt) as follower:
            wait_for("the follower's HW at 200", lambda: state(mnt, "t", 0)["high_watermark"] == 200, lead, follower)
            (lead.path / ".logfs" / "delete-records").write_text("t 0 150\n")
            wait_for("the follower's log start at 150", lambda: state(mnt, "t", 0)["log_start_offset"] == 150,
                     lead, follower)  # fmt: skip
            bases = [s["base_offset"] for s in state(mnt, "t", 0)["segments"]]
            assert bases[0] <= 150 < (bases[1] if len(bases) > 1 else 201)
            assert bases == [s["base_offset"] for s in state(lead.path, "t", 0)["segments"]]
            assert values(mnt, "t", 0)[0].startswith("v0150")
        lead.allow_log("replica 2 leaves the ISR")
        append_lines(lead.path / "t" / "0" / "append", [f"v{i:04d}" + "z" * 100 for i in range(200, 300)])
        wait_for("the stopped follower out of the ISR", lambda: state(lead.path, "t", 0)["high_watermark"] == 300, lead)
        (lead.path / ".logfs" / "delete-records").write_text("t 0 290\n")
        with following(lead.path, tmp_path / "F", 2, mount=mnt) as follower:
            # 290 falls inside a leader batch: the empty log started at 290 starts over at that batch's first
            # offset and takes it whole, as Kafka's follower does; then its log start is the leader's again.
            again = re.compile(r"emptied and started at (2[0-8][0-9]) ")
            wait_for("the follower started over inside the batch", lambda: again.search(follower.log_text()), follower)
            assert "emptied and started at 290 " in follower.log_text()
            wait_for("the same records from 290", lambda: values(mnt, "t", 0) == values(lead.path, "t", 0), follower)
            assert state(mnt, "t", 0)["log_start_offset"] == 290 and values(mnt, "t", 0)[0].startswith("v0290")
    finally:
        finish_mount(lead)


def test_a_follower_mount_reads_up_to_its_hw_and_refuses_writes(tmp_path: Path) -> None:
    """Reads bounded by the follower's own HW (min(leader HW, own LEO)); every write EROFS; state says follower.

    Replica 3 fetches once at offset 0 by hand (a `cat` of its fetch file) and so joins the ISR; then it never
    fetches again and holds the leader's HW (and so follower 2's) at 0 while replica 2 holds every record. Its
    second fetch, at the LEO, lets both HWs move.
    """
    lead = leader(tmp_path, "node.id=1", "replica.ids=1,2,3", "replica.lag.time.max.ms=600000")
    try:
        make_topic(lead.path, "t", 1)
        fetch = lead.path / ".logfs" / "fetch" / "3" / "t" / "0"
        (fetch / "0.-1").read_bytes()
        assert in_isr(lead, "t", 1, 3)
        mnt = tmp_path / "F.mnt"
        with following(lead.path, tmp_path / "F", 2, mount=mnt) as follower:
            append_lines(lead.path / "t" / "0" / "append", [f"r{i}" for i in range(5)])
            wait_for("the follower's LEO at 5", lambda: state(mnt, "t", 0)["log_end_offset"] == 5, lead, follower)
            s = state(mnt, "t", 0)
            assert (s["role"], s["high_watermark"], s["log_end_offset"]) == ("follower", 0, 5)
            assert s["leader_epoch"] == state(lead.path, "t", 0)["leader_epoch"]
            assert values(mnt, "t", 0) == []  # bounded by the HW: nothing committed yet
            assert (mnt / "t" / "0" / "at" / "3").read_bytes() == b""  # between the HW and the LEO: empty
            (fetch / f"5.{s['leader_epoch']}").read_bytes()  # replica 3 catches up: the HW moves to 5
            wait_for("the follower's HW at 5", lambda: state(mnt, "t", 0)["high_watermark"] == 5, lead, follower)
            assert values(mnt, "t", 0) == [f"r{i}" for i in range(5)]
            assert sorted(state(mnt, "t", 0)["isr"]) == [1, 2, 3]
            for attempt in (
                lambda: append_lines(mnt / "t" / "0" / "append", ["no"]),
                lambda: (mnt / "t" / "config").write_text("retention.ms=1000\n"),
                lambda: os.mkdir(mnt / "u"),
                lambda: os.rmdir(mnt / "t"),
                lambda: (mnt / ".logfs" / "delete-topic").write_text("t\n"),
                lambda: os.unlink(mnt / "t" / "0" / "state"),
            ):
                with pytest.raises(OSError) as info:
                    attempt()
                assert info.value.errno == errno.EROFS, attempt
            assert values(mnt, "t", 0) == [f"r{i}" for i in range(5)]
    finally:
        finish_mount(lead)


def test_replication_factor_3_with_two_followers_and_acks_all(tmp_path: Path) -> None:
    """min.insync.replicas=3: fsync returns once both followers hold the records; all three stores end equal."""
    lead = leader(tmp_path, "node.id=1", "replica.ids=1,2,3", "min.insync.replicas=3")
    try:
        make_topic(lead.path, "t", 2)
        with following(lead.path, tmp_path / "F2", 2), following(lead.path, tmp_path / "F3", 3):
            wait_for("both followers in the ISR", lambda: in_isr(lead, "t", 2, 2, 3), lead)
            for p in range(2):
                append_lines(lead.path / "t" / str(p) / "append", [f"acked-{p}-{i}" for i in range(50)], fsync=True)
                assert state(lead.path, "t", p)["high_watermark"] == 50
            for store in (tmp_path / "F2", tmp_path / "F3"):
                wait_for(f"{store.name} identical", lambda s=store: identical(lead.store, s, "t", 2), lead)
    finally:
        finish_mount(lead)


def test_a_follower_rides_out_a_leader_restart(tmp_path: Path) -> None:
    """The leader's mount goes away and comes back (same store): the follower retries with backoff, then goes on."""
    lead = leader(tmp_path, "node.id=1", "replica.ids=1,2")
    store = tmp_path / "F"
    follower = start_follower(lead.path, store, 2)
    follower.allow_log("leader .* unreachable")
    try:
        make_topic(lead.path, "t", 1)
        append_lines(lead.path / "t" / "0" / "append", ["before"])
        wait_for("the first record", lambda: identical(lead.store, store, "t", 1), lead, follower)
        finish_mount(lead)
        wait_for("the follower to notice", lambda: "unreachable" in follower.log_text(), follower)
        lead = leader(tmp_path, "node.id=1", "replica.ids=1,2")
        append_lines(lead.path / "t" / "0" / "append", ["after"])
        wait_for("the record after the restart", lambda: identical(lead.store, store, "t", 1), lead, follower)
        assert "reachable again" in follower.log_text()
        assert follower.proc.poll() is None
        finish_follower(follower)
    finally:
        follower.stop(signal.SIGTERM)
        finish_mount(lead)


def test_a_follower_the_leader_does_not_know_is_refused_and_keeps_asking(tmp_path: Path) -> None:
    """A replica id outside the leader's replica.ids: its fetch session answers EPERM; one error line, the topic
    discovered but no record here, and a clean exit."""
    lead = leader(tmp_path, "node.id=1", "replica.ids=1,2")
    try:
        make_topic(lead.path, "t", 1)
        append_lines(lead.path / "t" / "0" / "append", ["x"])
        with following(lead.path, tmp_path / "F", 9, allow=("refuses fetches from replica 9",)) as follower:
            # The session is refused whether or not the topic was discovered yet: wait for both
            wait_for("the refusal", lambda: "refuses fetches from replica 9" in follower.log_text(), lead, follower)
            wait_for("the topic created here", lambda: segment_files(tmp_path / "F", "t", 0), lead, follower)
            assert follower.log_text().count("refuses fetches") == 1
        assert segment_files(tmp_path / "F", "t", 0) == {"00000000000000000000.log": b""}
        assert 9 not in state(lead.path, "t", 0)["isr"]
    finally:
        finish_mount(lead)


def test_a_followers_committed_views_agree_with_the_leaders(tmp_path: Path) -> None:
    """Transactions replicate as their batches and markers: the follower's producer state, transaction index and
    LSO follow, so its ``committed/`` views (bounded by its own LSO) equal the leader's, open transaction included."""
    lead = leader(tmp_path, "node.id=1", "replica.ids=1,2")
    txns = lead.path / ".logfs" / "transactions"
    try:
        make_topic(lead.path, "t", 1)
        mnt = tmp_path / "F.mnt"
        with following(lead.path, tmp_path / "F", 2, mount=mnt) as follower:
            os.mkdir(txns / "keep")
            os.mkdir(txns / "drop")
            append_lines(txns / "keep" / "t" / "0" / "append", ["k1", "k2"])
            append_lines(txns / "drop" / "t" / "0" / "append", ["d1"])
            append_lines(lead.path / "t" / "0" / "append", ["plain"])
            (txns / "drop" / "control").write_text("abort\n")
            os.mkdir(txns / "open")
            append_lines(txns / "open" / "t" / "0" / "append", ["pending"])
            append_lines(lead.path / "t" / "0" / "append", ["after"])
            (txns / "keep" / "control").write_text("commit\n")
            leo = state(lead.path, "t", 0)["log_end_offset"]  # 8: k1 k2, d1, plain, abort, pending, after, commit
            both = (lead.path, mnt)
            wait_for("the HWs at the LEO", lambda: all(state(m, "t", 0)["high_watermark"] == leo for m in both),
                     lead, follower)  # fmt: skip
            leader_state = state(lead.path, "t", 0)
            assert leader_state["last_stable_offset"] == 5  # "pending", of the open transaction
            follower_state = state(mnt, "t", 0)
            assert follower_state["last_stable_offset"] == 5
            assert follower_state["open_transactions"] == leader_state["open_transactions"]
            for name in ("earliest", "earliest.jsonl"):
                committed = (lead.path / "t/0/committed/at" / name).read_bytes()
                assert (mnt / "t/0/committed/at" / name).read_bytes() == committed
            assert (mnt / "t/0/committed/at/earliest").read_text().splitlines() == ["k1", "k2", "plain"]
            (txns / "open" / "control").write_text("commit\n")
            wait_for("the follower's LSO past the last transaction",
                     lambda: state(mnt, "t", 0)["last_stable_offset"] == state(lead.path, "t", 0)["high_watermark"],
                     lead, follower)  # fmt: skip
            assert (mnt / "t/0/committed/at/earliest").read_text().splitlines() == [
                "k1", "k2", "plain", "pending", "after",
            ]  # fmt: skip
    finally:
        finish_mount(lead)
