"""ZooKeeper mode at scale (issue 24), against a real ZooKeeper (tests/helpers/zkserver.py): the controller's election
goes in pipelined multis each within ``MULTI_MAX_BYTES`` and led by the check of ``/controller_epoch``, the leadership
last; a deposed controller's multis change nothing; an election left half-written is completed by the next
controller; a node leading every partition fails over within the session timeout + 5 s; and a follower registered
again between two of the controller's looks leaves the ISR.

Sizes: ``LOGFS_SCALE_PARTITIONS`` sets them all (10,000 for the issue's figure); by default 1,000 partitions for
the ZooKeeper-level tests and 150 for the failover with real nodes, whose follower must first hold every partition.
The ZooKeeper-level tests use long topic names (240 characters, Kafka allows 249) so that even the CI size needs
more than one multi: the tests see the chunking, not just its arithmetic.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
from conftest import clear_mount, finish_mount, start_mount
from follower_procs import wait_for

from logfs.cluster.rules import Leader, Leadership, PartitionState, plan_election
from logfs.cluster.zk import ZooKeeper
from logfs.cluster.zkerrors import Conflict, Fenced
from logfs.cluster.zksession import MULTI_MAX_BYTES, MULTI_MAX_OPS, MultiLog
from logfs.cluster.znodes import CONTROLLER, LEADERSHIP, state_path

T = TypeVar("T")
PARTITIONS = int(os.environ.get("LOGFS_SCALE_PARTITIONS", "1000"))
PER_TOPIC = 5
SESSION_MS = 2000  # the nodes' (the failover is timed against it)
TEST_SESSION_MS = 6000  # the ZooKeeper-level tests' sessions (Kafka's default; these tests time nothing)


def topic_name(i: int) -> str:
    return f"t{i:05d}-" + "x" * 233  # 240 characters


def keys(partitions: int) -> list[tuple[str, int]]:
    return [(topic_name(i // PER_TOPIC), i % PER_TOPIC) for i in range(partitions)]


def with_zk(connect: str, body: Callable[[Callable[[int], ZooKeeper]], T]) -> T:
    """Run ``body`` inside trio (ZooKeeper captures the trio token) with a factory of sessions, all closed after."""
    made: list[ZooKeeper] = []

    def session(node_id: int) -> ZooKeeper:
        zk = ZooKeeper(connect, TEST_SESSION_MS)
        made.append(zk)
        zk.start(10.0)
        return zk

    async def main() -> T:
        try:
            return body(session)
        finally:
            for zk in made:
                zk.stop()

    return trio.run(main)


def stats(client: Any, path: str) -> Any:
    return client.get(path)[1]


def versions(client: Any, paths: list[str]) -> list[Any]:
    """The stats of many znodes, pipelined (the test's own reads stay cheap at 10,000 partitions)."""
    return [r.get(timeout=10)[1] for r in [client.get_async(path) for path in paths]]


def chrooted(connect: str, chroot: str) -> Any:
    """A started kazoo client of ``connect`` under ``chroot`` (made first: kazoo warns of a missing one)."""
    from kazoo.client import KazooClient

    root = KazooClient(hosts=connect)
    root.start(timeout=10)
    root.ensure_path(chroot)
    root.stop()
    root.close()
    client = KazooClient(hosts=connect + chroot)
    client.start(timeout=10)
    return client


@pytest.fixture
def kazoo(zookeeper: Any) -> Iterator[Any]:
    client = chrooted(zookeeper.connect, "/scale")
    try:
        yield client
    finally:
        client.stop()
        client.close()


def seed(zk: ZooKeeper, partitions: int) -> dict[tuple[str, int], PartitionState]:
    """Node 1 leads every partition in epoch 0: the leader's creation path (pipelined) and a first election."""
    first = PartitionState(1, 0, (1, 2), 1)
    answers = zk.write_states([(t, p, first, None) for t, p in keys(partitions)])
    assert set(answers.values()) == {0}, "every state znode created in version 0"
    recorded = zk.partition_states()
    assert {k: v.state for k, v in recorded.items()} == {k: first for k in keys(partitions)}
    return {k: v.state for k, v in recorded.items()}


def elect(zk: ZooKeeper, node_id: int, epoch_version: int, controller_epoch: int) -> tuple[Leadership, int]:
    """What node.py's controller does: read, plan (rules.plan_election), write; the leadership and the multis."""
    current, version = zk.leadership(watch=False)
    recorded = zk.partition_states()
    leadership, states = plan_election(current, {k: (v.state, v.version) for k, v in recorded.items()}, [],
                                       Leader(node_id, f"/mnt/{node_id}", -1, controller_epoch),
                                       lambda isr: tuple(r for r in isr if r == node_id) or (node_id,))  # fmt: skip
    return leadership, zk.write_election(epoch_version, leadership, version, states)


def test_an_election_goes_in_bounded_multis_with_the_leadership_last(zookeeper: Any, kazoo: Any) -> None:
    def body(session: Callable[[int], ZooKeeper]) -> None:
        zk = session(1)
        seed(zk, PARTITIONS)
        won = zk.try_become_controller(1)
        assert won is not None
        zk.multis = MultiLog()
        leadership, multis = elect(zk, 2, won[1], won[0])
        state_multis = math.ceil(PARTITIONS / MULTI_MAX_OPS)
        assert multis == zk.multis.sent >= state_multis + 1
        # each multi within the limit, and together more than one multi may carry: the chunking was needed
        assert zk.multis.largest <= MULTI_MAX_BYTES
        assert zk.multis.sent * zk.multis.largest > MULTI_MAX_BYTES
        expected = PartitionState(2, leadership.leader_epoch, (2,), won[0])
        recorded = zk.partition_states()
        assert len(recorded) == PARTITIONS and {v.state for v in recorded.values()} == {expected}
        # the leadership was written after every state: its modification is the last in ZooKeeper's order
        led = stats(kazoo, LEADERSHIP)
        latest = max(s.mzxid for s in versions(kazoo, [state_path(t, p) for t, p in keys(PARTITIONS)]))
        assert led.mzxid > latest
        assert zk.leadership(watch=False)[0] == leadership

    with_zk(zookeeper.connect + "/scale", body)


def test_a_deposed_controllers_multis_change_nothing(zookeeper: Any, kazoo: Any) -> None:
    def body(session: Callable[[int], ZooKeeper]) -> None:
        a, b = session(1), session(2)
        seed(a, PARTITIONS)
        won_a = a.try_become_controller(1)
        assert won_a is not None
        elect(a, 1, won_a[1], won_a[0])
        paths = [state_path(*k) for k in keys(PARTITIONS)]
        before = [s.version for s in versions(kazoo, paths)]
        led_before = stats(kazoo, LEADERSHIP).version
        # node 1's /controller goes (its session as ZooKeeper sees it) and node 2 wins a newer controller epoch;
        # node 1 has not noticed and elects with its old epoch's version
        kazoo.delete(CONTROLLER)
        won_b = b.try_become_controller(2)
        assert won_b is not None and won_b[0] == won_a[0] + 1
        with pytest.raises(Fenced, match="controller_epoch"):
            elect(a, 3, won_a[1], won_a[0])
        assert [s.version for s in versions(kazoo, paths)] == before
        assert stats(kazoo, LEADERSHIP).version == led_before
        leadership, _ = elect(b, 2, won_b[1], won_b[0])  # the new controller's multis are taken
        assert a.leadership(watch=False)[0] == leadership

    with_zk(zookeeper.connect + "/scale", body)


def test_an_election_left_half_written_is_completed_by_the_next_controller(zookeeper: Any, kazoo: Any) -> None:
    def body(session: Callable[[int], ZooKeeper]) -> None:
        a = session(1)
        seed(a, PARTITIONS)
        won_a = a.try_become_controller(1)
        assert won_a is not None
        old, _ = elect(a, 1, won_a[1], won_a[0])
        # the leader records an ISR in the last partition between the controller's read and its last multi: that
        # multi is refused; the others apply, and the leadership is not written
        last = keys(PARTITIONS)[-1]
        current, version = a.leadership(watch=False)
        recorded = a.partition_states()
        kazoo.set(state_path(*last), kazoo.get(state_path(*last))[0])  # after the controller's read
        half, states = plan_election(current, {k: (v.state, v.version) for k, v in recorded.items()}, [],
                                     Leader(2, "/mnt/2", -1, won_a[0]), lambda isr: (2,))  # fmt: skip
        with pytest.raises(Conflict):
            a.write_election(won_a[1], half, version, states)
        assert a.leadership(watch=False)[0] == old, "nodes act on the leadership: it still says the old epoch"
        recorded = a.partition_states()
        epochs = {v.state.leader_epoch for v in recorded.values()}
        assert epochs == {old.leader_epoch, half.leader_epoch}, "some states went to the new epoch, some did not"
        # the controller dies; the next one reads the states as they are and elects above every recorded epoch
        a.stop()
        b = session(2)
        won_b = b.try_become_controller(2)
        assert won_b is not None
        done, _ = elect(b, 2, won_b[1], won_b[0])
        assert done.leader_epoch > half.leader_epoch
        recorded = b.partition_states()
        assert {(v.state.leader, v.state.leader_epoch) for v in recorded.values()} == {(2, done.leader_epoch)}
        assert b.leadership(watch=False)[0] == done

    with_zk(zookeeper.connect + "/scale", body)


# --- real nodes ---------------------------------------------------------------------------------------------------

NODE_PARTITIONS = int(os.environ.get("LOGFS_SCALE_PARTITIONS", "0")) or 150


def node_config(node_id: int, connect: str) -> list[str]:
    return [f"node.id={node_id}", "replica.ids=1,2", "min.insync.replicas=1", f"num.partitions={PER_TOPIC}",
            f"zookeeper.connect={connect}/logfs", f"zookeeper.session.timeout.ms={SESSION_MS}",
            "replica.lag.time.max.ms=30000"]  # fmt: skip


def leader_of(mount: Path) -> int:
    doc: dict[str, Any] = json.loads((mount / ".logfs" / "leader").read_text())
    return int(doc["node_id"])


def test_a_node_leading_every_partition_fails_over_within_the_session_timeout(tmp_path: Path, zookeeper: Any) -> None:
    topics = max(1, NODE_PARTITIONS // PER_TOPIC)
    names = [f"s{i:05d}" for i in range(topics)]
    mounts = {}
    client = chrooted(zookeeper.connect, "/logfs")
    try:
        mounts[1] = start_mount(tmp_path / "store1", tmp_path / "mnt1", *node_config(1, zookeeper.connect))
        m1 = mounts[1].path
        wait_for("node 1 leads", lambda: leader_of(m1) == 1)
        for name in names:
            (m1 / name).mkdir()
        mounts[2] = start_mount(tmp_path / "store2", tmp_path / "mnt2", *node_config(2, zookeeper.connect))
        m2 = mounts[2].path
        for mount in mounts.values():
            mount.allow_log(r"leader .* unreachable|fetch failed|no leader")

        paths = [f"/brokers/topics/{name}/partitions/{p}/state" for name in names for p in range(PER_TOPIC)]

        def every_isr(isr: list[int], leader: int) -> bool:
            """Every state names ``leader`` with ``isr`` (the reads pipelined: the probe must not be what is slow)."""
            from kazoo.exceptions import NoNodeError

            try:
                docs = [json.loads(r.get(timeout=10)[0]) for r in [client.get_async(path) for path in paths]]
            except NoNodeError:
                return False
            return all(doc["isr"] == isr and doc["leader"] == leader for doc in docs)

        wait_for("node 2 in every ISR", lambda: every_isr([1, 2], 1), timeout_s=120)
        killed = time.monotonic()
        mounts[1].proc.send_signal(signal.SIGKILL)
        mounts[1].proc.wait(10)
        wait_for("node 2 leads", lambda: leader_of(m2) == 2, timeout_s=SESSION_MS / 1000 + 30)
        wait_for("every state names node 2", lambda: every_isr([2], 2), timeout_s=30)
        took = time.monotonic() - killed
        print(f"failover of {topics * PER_TOPIC} partitions: {took:.2f} s (session timeout {SESSION_MS} ms)")
        assert took <= SESSION_MS / 1000 + 5.0, f"failover of {topics * PER_TOPIC} partitions took {took:.2f} s"
        wrote = re.findall(r"wrote leader epoch \d+: (\d+) partition states in (\d+) multis \(largest (\d+) bytes\)",
                           mounts[2].log_text())  # fmt: skip
        assert wrote, "the controller logs each election's multis"
        count, multis, largest = (int(x) for x in wrote[-1])
        assert count == topics * PER_TOPIC and multis >= 2 and largest <= MULTI_MAX_BYTES
    finally:
        stop_all(client, mounts)


def test_a_half_written_election_of_the_same_leader_is_completed_by_the_next_controller(
    tmp_path: Path, zookeeper: Any
) -> None:
    """A controller wrote some states of an election naming the same leader (its removal of a dead replica) and
    died before the leadership multi: the leadership is behind the states. The next controller finds states above
    the leadership's epoch and completes it with a leadership above them, rewriting no state (nothing else changed);
    the leader adopts it and goes on leading each partition in its own recorded epoch, and its follower fetches
    each in that epoch: acks=all writes to a partition of each epoch are acknowledged and replicated."""
    mounts = {}
    client = chrooted(zookeeper.connect, "/logfs")
    try:
        for i in (1, 2):
            mounts[i] = start_mount(tmp_path / f"store{i}", tmp_path / f"mnt{i}", *node_config(i, zookeeper.connect))
            # node 2 leads once node 1 stops at the end, and may make h then, as ZooKeeper records it, if its
            # discovery had not seen it yet
            mounts[i].allow_log(r"leader .* unreachable|fetch failed|no leader|fenced|adopt|made topic h as ZooKeeper")
        m1, m2 = mounts[1].path, mounts[2].path
        wait_for("node 1 leads", lambda: leader_of(m1) == 1 and leader_of(m2) == 1)
        (m1 / "h").mkdir()

        def state(p: int) -> tuple[dict[str, Any], Any]:
            data, stat = client.get(f"/brokers/topics/h/partitions/{p}/state")
            return json.loads(data), stat

        def recorded() -> bool:
            from kazoo.exceptions import NoNodeError

            try:
                return all(state(p)[0]["isr"] == [1, 2] for p in range(PER_TOPIC))
            except NoNodeError:
                return False

        wait_for("every ISR recorded", recorded)
        led = json.loads(client.get(LEADERSHIP)[0])
        controller_epoch = int(client.get("/controller_epoch")[0])
        # what a controller of the next controller epoch leaves when it dies after its first multi
        for p in range(2):
            doc, stat = state(p)
            doc.update(leader_epoch=led["leader_epoch"] + 1, controller_epoch=controller_epoch + 1)
            client.set(f"/brokers/topics/h/partitions/{p}/state", json.dumps(doc).encode(), version=stat.version)
        client.delete(CONTROLLER)  # that controller is gone: a new one is chosen

        old, bumped = led["leader_epoch"], led["leader_epoch"] + 1
        by_partition = [bumped, bumped] + [old] * (PER_TOPIC - 2)

        def completed() -> int | None:
            now = json.loads(client.get(LEADERSHIP)[0])
            epochs = [state(p)[0]["leader_epoch"] for p in range(PER_TOPIC)]
            done = now["leader"] == 1 and now["leader_epoch"] > bumped and epochs == by_partition
            return int(now["leader_epoch"]) if done else None

        epoch = wait_for("the election completed", completed, timeout_s=20)
        wait_for("node 1 adopted it", lambda: json.loads((m1 / ".logfs/leader").read_text())["leader_epoch"] == epoch)
        assert leader_of(m1) == leader_of(m2) == 1
        for p in (0, PER_TOPIC - 1):  # one partition of each epoch: acks=all, so node 2's fetches are taken
            fd = os.open(m1 / "h" / str(p) / "append", os.O_WRONLY)
            try:
                os.write(fd, b"after\n")
                os.fsync(fd)
            finally:
                os.close(fd)
            wait_for(f"node 2 holding h/{p}", lambda p=p: (m2 / "h" / str(p) / "at/earliest").read_text() == "after\n")
            for mount in (m1, m2):  # the leader's epoch of the partition, as the leader and its follower show it
                shown = json.loads((mount / "h" / str(p) / "state").read_text())["leader_epoch"]
                assert shown == by_partition[p], (mount, p, shown)
                leader = json.loads((mount / "h" / str(p) / "leader").read_text())
                assert (leader["node_id"], leader["leader_epoch"]) == (1, by_partition[p]), (mount, p, leader)
    finally:
        stop_all(client, mounts)


def stop_all(client: Any, mounts: dict[int, Any]) -> None:
    """The test's own ZooKeeper client stopped, every node finished (checked) or, when it died, its mount cleared."""
    client.stop()
    client.close()
    for mount in mounts.values():
        if mount.proc.poll() is None:
            finish_mount(mount)
        else:
            clear_mount(mount.path)


def packets_received(server: Any) -> int:
    """ZooKeeper's own count of the requests it received (``mntr``)."""
    from zkserver import four_letter

    answer = four_letter(server.port, "mntr") or ""
    found = re.search(r"^zk_packets_received\s+(\d+)", answer, re.MULTILINE)
    assert found, answer
    return int(found.group(1))


def test_a_shrink_of_every_partition_is_recorded_in_a_few_requests(tmp_path: Path, zookeeper: Any) -> None:
    """A follower that stops fetching leaves the ISR of every partition at once: the leader records the shrinks in
    one batch (ZooKeeper counts the requests), then makes them; every recorded ISR is the smaller one."""
    from logfs.cluster.isr import IsrRecorder
    from logfs.core.replication.leaderreplicas import LeaderReplicas
    from logfs.core.store import Store
    from logfs.core.storeconfig import StoreConfig

    partitions = int(os.environ.get("LOGFS_SCALE_PARTITIONS", "250"))
    lag_ms = 200 + partitions  # the leader takes every partition well within it (the first shrink finds nothing)
    store = Store.open(tmp_path / "store", StoreConfig(replica_ids=(0, 1), replica_lag_time_max_ms=lag_ms))
    try:
        for i in range(partitions // PER_TOPIC):
            store.create_topic(f"s{i:05d}", PER_TOPIC)

        def body(session: Callable[[int], ZooKeeper]) -> None:
            zk = session(0)
            recorded = PartitionState(0, 3, (0, 1), 1)
            zk.write_states([(tp.topic, tp.partition, recorded, None) for tp, _ in store.logs()])
            states = zk.partition_states()
            leaders = LeaderReplicas(store, 3, isr=lambda tp: (0, 1))
            recorder = IsrRecorder(zk, leaders, states, controller_epoch=1)
            assert recorder.shrink() == []  # follower 1 is within replica.lag.time.max.ms
            time.sleep(lag_ms * 1.5 / 1000)
            before = packets_received(zookeeper)
            changed = recorder.shrink()
            sent = packets_received(zookeeper) - before
            assert len(changed) == partitions and recorder.fenced is None
            assert all(p.isr == (0,) for _, p in leaders.partitions())
            assert {v.state.isr for v in zk.partition_states().values()} == {(0,)}
            # a batch: a few multis (and heartbeats), not a request per partition
            assert sent <= partitions // 10, f"{sent} requests for {partitions} shrinks"

        with_zk(zookeeper.connect + "/scale", body)
    finally:
        store.close()


def test_an_idle_leaders_isr_sync_walks_no_partition(tmp_path: Path, zookeeper: Any) -> None:
    """The leader's ISR sync runs ten times a second: once everything is recorded it walks no partition until a
    partition is created or deleted or an ISR changes (then it walks and records that, once)."""
    from logfs.cluster.isr import IsrRecorder
    from logfs.core.replication.leaderreplicas import LeaderReplicas
    from logfs.core.store import Store
    from logfs.core.storeconfig import StoreConfig

    store = Store.open(tmp_path / "store", StoreConfig(replica_ids=(0, 1)))
    try:
        for i in range(40):
            store.create_topic(f"i{i:03d}", PER_TOPIC)

        def body(session: Callable[[int], ZooKeeper]) -> None:
            zk = session(0)
            leaders = LeaderReplicas(store, 3)
            recorder = IsrRecorder(zk, leaders, {}, controller_epoch=1)
            walks = []
            walk = leaders.partitions

            def counted() -> Any:
                walks.append(1)
                return walk()

            leaders.partitions = counted  # type: ignore[method-assign]
            recorder.sync()  # records every new partition
            assert len(zk.partition_states()) == 40 * PER_TOPIC and len(walks) == 1
            for _ in range(20):
                recorder.sync()
            assert len(walks) == 1, "an idle sync walked the partitions"
            store.create_topic("later", PER_TOPIC)
            leaders.partition("later", 0)
            recorder.sync()
            assert len(walks) == 2 and ("later", 0) in zk.partition_states()
            recorder.sync()
            assert len(walks) == 2
            p = leaders.partition("i000", 0)
            p.record_fetch(1, p.log.log_end_offset)  # caught up: replica 1 joins the ISR
            assert p.isr == (0, 1)
            recorder.sync()
            assert len(walks) == 3 and zk.partition_states()[("i000", 0)].state.isr == (0, 1)
            recorder.sync()
            assert len(walks) == 3

        with_zk(zookeeper.connect + "/idle", body)
    finally:
        store.close()


def test_a_leader_records_the_deletion_only_of_a_topic_it_held(tmp_path: Path, zookeeper: Any) -> None:
    """A leader elected before it fetched a new topic finds the topic's states in ZooKeeper and no log of it: that is
    not a deletion (recording one deleted the topic on every replica, seen at 10,000 partitions when a loaded leader
    lost its session while topics were being created). A topic it held and then deleted is recorded."""
    from logfs.cluster.isr import IsrRecorder
    from logfs.core.replication.leaderreplicas import LeaderReplicas
    from logfs.core.store import Store
    from logfs.core.storeconfig import StoreConfig

    store = Store.open(tmp_path / "store", StoreConfig(replica_ids=(0, 1)))
    try:
        store.create_topic("here", 2)

        def body(session: Callable[[int], ZooKeeper]) -> None:
            zk = session(0)
            state = PartitionState(1, 2, (0, 1), 1)
            zk.write_states([(t, p, state, None) for t in ("here", "elsewhere") for p in range(2)])
            leaders = LeaderReplicas(store, 3, isr=lambda tp: (0, 1))
            recorder = IsrRecorder(zk, leaders, zk.partition_states(), controller_epoch=1)
            assert recorder.sync() == []
            assert zk.pending_deletions(watch=False) == {}
            assert {t for t, _ in zk.partition_states()} == {"here", "elsewhere"}
            store.delete_topic("here")
            assert recorder.sync() == ["here"]
            assert set(zk.pending_deletions(watch=False)) == {"here"}
            assert {t for t, _ in zk.partition_states()} == {"elsewhere"}

        with_zk(zookeeper.connect + "/held", body)
    finally:
        store.close()


def test_a_follower_registered_again_between_two_looks_leaves_the_isr(zookeeper: Any) -> None:
    """Kafka's bounced broker (CIT testControllerDetectsBouncedBrokers), at a controller's look: node 2's old session
    ended and a new one registered it again before the controller looked, so it never saw node 2 gone. The leadership
    records every live node's broker epoch, so the controller sees the new one, and takes node 2 out of the ISR (in a
    new epoch, as for a dead node: a restarted node may have lost what it held) and records its new epoch; node 2
    rejoins by the leader's rule. A node that merely registered (node 4, new) is not bounced."""
    from logfs.cluster.controller import Controller
    from logfs.cluster.rules import Broker
    from logfs.core.storeconfig import StoreConfig

    def body(session: Callable[[int], ZooKeeper]) -> None:
        zks = {i: session(i) for i in (1, 2, 3)}
        epochs = {i: zk.register(Broker(i, f"/mnt/{i}", -1)) for i, zk in zks.items()}
        controller = Controller(zks[1], 1, StoreConfig(node_id=1, replica_ids=(1, 2, 3, 4)))
        controller.control(True)  # the controller, and the leadership of node 1 (no partition yet)
        led, _ = zks[1].leadership(watch=False)
        assert led.leader == 1 and dict(led.brokers) == epochs
        zks[1].create_state("t", 0, PartitionState(1, led.leader_epoch, (1, 2, 3), led.controller_epoch))
        zks[1].create_state("u", 0, PartitionState(1, led.leader_epoch, (1, 3), led.controller_epoch))
        controller.control(True)
        assert zks[1].leadership(watch=False)[0] == led  # nothing to do
        zks[2].stop()  # node 2 restarts between two looks
        zks[2] = session(2)
        epochs[2] = zks[2].register(Broker(2, "/mnt/2", -1))
        zks[4] = session(4)
        epochs[4] = zks[4].register(Broker(4, "/mnt/4", -1))
        controller.control(True)
        recorded = zks[1].partition_states()
        after = recorded[("t", 0)].state
        assert (after.leader, after.isr) == (1, (1, 3)) and after.leader_epoch > led.leader_epoch
        assert recorded[("u", 0)].state.leader_epoch == led.leader_epoch  # node 2 was not in its ISR: untouched
        now, _ = zks[1].leadership(watch=False)
        assert now.leader == 1 and now.leader_epoch == after.leader_epoch and dict(now.brokers) == epochs
        controller.control(True)  # node 2 is in good standing in its new registration: nothing more
        assert zks[1].partition_states()[("t", 0)].state == after and zks[1].leadership(watch=False)[0] == now

    with_zk(zookeeper.connect + "/bounce", body)


def test_an_election_of_another_node_left_half_written_is_named_back_with_the_leader_in_its_isr(
    zookeeper: Any,
) -> None:
    """A controller died after writing a partition's state for an election of node 2 (ISR: node 2 alone, as an
    unclean pick writes) and before the leadership: the leadership still names node 1, which never stopped leading.
    The next look names that state back to node 1 above its epoch, and node 1 is in its ISR (a leader outside its own
    ISR would be refused by every rule that reads it)."""
    from logfs.cluster.controller import Controller
    from logfs.cluster.rules import Broker
    from logfs.core.storeconfig import StoreConfig

    def body(session: Callable[[int], ZooKeeper]) -> None:
        zks = {i: session(i) for i in (1, 2, 3)}
        for i, zk in zks.items():
            zk.register(Broker(i, f"/mnt/{i}", -1))
        controller = Controller(zks[1], 1, StoreConfig(node_id=1, replica_ids=(1, 2, 3)))
        controller.control(True)
        led, _ = zks[1].leadership(watch=False)
        assert led.leader == 1
        zks[1].create_state("t", 0, PartitionState(2, led.leader_epoch + 1, (2,), led.controller_epoch))
        zks[1].create_state("u", 0, PartitionState(1, led.leader_epoch, (1, 2, 3), led.controller_epoch))
        controller.control(True)
        recorded = zks[1].partition_states()
        named_back = recorded[("t", 0)].state
        assert named_back.leader == 1 and named_back.isr == (1, 2)
        assert named_back.leader_epoch > led.leader_epoch + 1
        assert recorded[("u", 0)].state.leader_epoch == led.leader_epoch  # nothing to change there: untouched
        now, _ = zks[1].leadership(watch=False)
        assert (now.leader, now.leader_epoch) == (1, named_back.leader_epoch)

    with_zk(zookeeper.connect + "/named-back", body)
