"""Writes through any node (issue 27, "Writes through any node"), through three real ``logfs mount`` nodes and a
real ZooKeeper (tests/cluster/zkcluster.py): a write to a partition's files on a node that does not lead it is
forwarded to the leader's mount (``.logfs/forward/``) and answered with the leader's result — the records, the
offsets read back on O_RDWR, the errno, fsync's acks=all — by shell tools and Python alike; a handle moves to the
new leader after a kill -9 when it stands at a record boundary, and an fsync cannot vouch for what the old leader
held unacknowledged; with no leader reachable a write waits ``request.timeout.ms`` and fails with EAGAIN, nothing
stored.

Every process is stopped and every mount unmounted when the test ends, failed or not (``Cluster.close``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import errno_of, make_topic
from zkcluster import Cluster, append_acked, checked_cluster, wait_until
from zkserver import ZooKeeperServer

from logfs.core.format.partitioner import partition_for_key

SESSION_MS = 1500
WAIT_S = 30.0
TIMEOUT_MS = 3000  # request.timeout.ms of the cluster without a reachable leader


@pytest.fixture
def cluster(tmp_path: Path, zookeeper: ZooKeeperServer) -> Iterator[Cluster]:
    with checked_cluster(tmp_path / "cluster", zookeeper, 3, session_timeout_ms=SESSION_MS) as c:
        yield c


def values(mount: Path, topic: str, partition: int) -> list[str]:
    return (mount / topic / str(partition) / "at" / "earliest").read_text().split()


def everywhere(cluster: Cluster, topic: str, partition: int, expected: list[str]) -> None:
    for node in cluster.reachable():
        wait_until(f"node {node.node_id} holding {expected} in {topic}/{partition}",
                   lambda n=node: values(n.mount, topic, partition) == expected, WAIT_S, logs=cluster.logs)  # fmt: skip


def test_writes_through_every_node_are_the_leaders_and_move_to_a_new_leader(cluster: Cluster) -> None:
    leader, info = cluster.wait_leader(WAIT_S)
    followers = [n for n in cluster.nodes.values() if n is not leader]
    make_topic(leader.mount, "t", 2)
    for node in cluster.nodes.values():
        wait_until(f"node {node.node_id} shows t/1", lambda n=node: (n.mount / "t/1/append").exists(), WAIT_S)
    a, b = followers
    # the shell: echo >> (one write, then close: acks=1) and dd conv=fsync (acks=all) on a follower's files
    done = subprocess.run(f"echo one >> {a.mount}/t/0/append && printf 'two\\nthree' >> {a.mount}/t/0/append && "
                          f"printf 'four\\n' | dd of={b.mount}/t/0/append conv=fsync status=none",
                          shell=True, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    # a last line without a newline was stored at close (the leader's flush), before dd's write: in this order
    everywhere(cluster, "t", 0, ["one", "two", "three", "four"])
    # acks=all through a follower: once fsync returns, the leader's HW covers the record (every ISR member has it)
    append_acked(b.mount, "t", 1, ["x", "y"])
    assert values(leader.mount, "t", 1) == ["x", "y"]
    # Python, O_RDWR: the produce responses are the leader's offsets
    fd = os.open(a.mount / "t/1/append.jsonl", os.O_RDWR)
    try:
        os.write(fd, b'{"value":"z1"}\n{"value":"z2"}\n')
        os.fsync(fd)
        assert os.read(fd, 4096) == b"1 2 3\n"  # partition 1, offsets 2 to 3
        # the leader's errno: a bad JSON line is EINVAL there, and nothing of it is stored
        assert errno_of(os.write, fd, b'{"value":\n') == errno.EINVAL
    finally:
        os.close(fd)
    # over the limit: a line longer than max.message.bytes, cut by dd into 64 KiB writes, is EFBIG from the leader
    # as soon as the limit is passed, and none of it is stored
    big = subprocess.run(f"head -c 1200000 /dev/zero | tr '\\0' x | dd of={b.mount}/t/1/append bs=64K status=none",
                         shell=True, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert big.returncode != 0 and "File too large" in big.stderr, big.stderr
    everywhere(cluster, "t", 1, ["x", "y", "z1", "z2"])
    # the refusal is recorded on the node the writer used, with the leader's errno
    errors = (a.mount / ".logfs/errors").read_text()
    assert "EINVAL" in errors and "/t/1/append.jsonl" in errors, errors
    # the leader serves the forwarded path itself; a follower refuses it (a forwarded write is never forwarded on)
    assert errno_of(os.open, b.mount / ".logfs/forward/t/0/append", os.O_WRONLY) == errno.EROFS
    with open(leader.mount / ".logfs/forward/t/0/append", "w") as f:
        f.write("five\n")
    everywhere(cluster, "t", 0, ["one", "two", "three", "four", "five"])
    # mkdir, rmdir and config through a follower: made on the leader, shown on the follower when they return
    subprocess.run(f"mkdir {a.mount}/u && mkdir {a.mount}/u/1 && echo u1 >> {a.mount}/u/1/append",
                   shell=True, check=True, timeout=60)  # fmt: skip
    wait_until("u/1 on node b", lambda: (b.mount / "u/1").is_dir(), WAIT_S)  # the other nodes see it within a round
    subprocess.run(f"echo retention.ms=7200000 > {b.mount}/u/config && grep -qx retention.ms=7200000 "
                   f"{b.mount}/u/config", shell=True, check=True, timeout=60)  # fmt: skip
    assert "retention.ms=7200000" in (leader.mount / "u/config").read_text().split()
    everywhere(cluster, "u", 1, ["u1"])
    assert errno_of(os.mkdir, b.mount / "u") == errno.EEXIST  # the leader's answers
    assert errno_of(os.mkdir, b.mount / "u/3") == errno.EINVAL  # not the next partition
    assert errno_of(os.mkdir, b.mount / "bad:name") == errno.EINVAL
    # a name that would make more than one line of the leader's .dirs is refused here, and nothing happens there
    assert errno_of(os.mkdir, b.mount / "x 0 0 777\nrmdir u\nmkdir y") == errno.EINVAL
    assert errno_of(os.rmdir, b.mount / "u") == errno.ENOTEMPTY  # it holds a record: nothing removed
    subprocess.run(f"mkdir {b.mount}/v && rmdir {b.mount}/v && test ! -e {b.mount}/v", shell=True, check=True)
    for node in cluster.nodes.values():
        wait_until(f"v gone from node {node.node_id}", lambda n=node: not (n.mount / "v").exists(), WAIT_S)
    # a group commit and a group config change through a follower: the leader of the group's offsets partition
    # takes them (a group follow there is served from its replica: test_a_transaction_and_a_group_deletion_…)
    subprocess.run(f"echo 1 > {a.mount}/.logfs/groups/g/u/1/offset && echo auto.offset.reset=latest > "
                   f"{b.mount}/.logfs/groups/g/config", shell=True, check=True, timeout=60)  # fmt: skip
    assert (leader.mount / ".logfs/groups/g/u/1/offset").read_text().split()[0] == "1"
    assert "auto.offset.reset=latest" in (leader.mount / ".logfs/groups/g/config").read_text().split()
    for node in cluster.nodes.values():
        wait_until(f"the commit on node {node.node_id}", lambda n=node: (n.mount / ".logfs/groups/g/u/1/offset")
                   .read_text().split()[:1] == ["1"], WAIT_S)  # fmt: skip
    with open(a.mount / ".logfs/groups/g/u/1/follow", "rb", buffering=0):
        pass  # opened there, at the leader's commit; closed with nothing delivered: nothing committed
    # the delete-* command files through a follower: made by the leader, shown here when the write returns
    with open(a.mount / ".logfs/delete-records", "wb", buffering=0) as f:
        assert errno_of(f.write, b"u 1 5\n") == errno.EINVAL  # above the leader's HW: nothing deleted
        f.write(b"u 1 1\n")
    assert values(a.mount, "u", 1) == [] and values(leader.mount, "u", 1) == []
    subprocess.run(f"echo u > {b.mount}/.logfs/delete-topic && test ! -e {b.mount}/u", shell=True, check=True)
    for node in cluster.nodes.values():
        wait_until(f"u gone from node {node.node_id}", lambda n=node: not (n.mount / "u").exists(), WAIT_S)
    # a forwarded change on a follower is refused (never forwarded on); malformed lines are EINVAL on the leader
    assert errno_of(os.open, a.mount / ".logfs/forward/.dirs", os.O_WRONLY) == errno.EROFS
    with open(leader.mount / ".logfs/forward/.dirs", "wb", buffering=0) as f:
        for bad in (b"mkdir x\n", b"mkdir x 1 2 999\n", b"mkdir x/01\n", b"drop x\n", b"mkdir x -1 0 755\n"):
            assert errno_of(f.write, bad) == errno.EINVAL, bad
    assert not (leader.mount / "x").exists()
    # a topic-level file: the record goes to its key's partition (Kafka's murmur2), told in the response
    make_topic(leader.mount, "k", 3)
    wait_until("k/2 on node a", lambda: (a.mount / "k/2").exists(), WAIT_S)
    fd = os.open(a.mount / "k/append.jsonl", os.O_RDWR)
    try:
        os.write(fd, b'{"key":"user-1","value":"v1"}\n')
        os.fsync(fd)
        partition, first, last = map(int, os.read(fd, 4096).split())
    finally:
        os.close(fd)
    assert (partition, first, last) == (partition_for_key(b"user-1", 3), 0, 0)
    everywhere(cluster, "k", partition, ["v1"])

    # a handle moves to the new leader after a kill -9, at a record boundary (one cluster for both parts: CI's time)
    make_topic(leader.mount, "m")
    writer = max((n for n in cluster.nodes.values() if n is not leader), key=lambda n: n.node_id)  # stays a follower
    wait_until("m on the writer's node", lambda: (writer.mount / "m/0/append").exists(), WAIT_S)
    acked = os.open(writer.mount / "m/0/append", os.O_WRONLY)
    unacked = os.open(writer.mount / "m/0/append", os.O_WRONLY)
    partial = os.open(writer.mount / "m/0/append", os.O_WRONLY)
    try:
        os.write(acked, b"a\n")
        os.fsync(acked)
        os.write(unacked, b"b\n")  # acks=1: the failover may lose it, and no later fsync of this handle vouches
        os.write(partial, b"half of a li")  # part of a line: it cannot be finished on another leader
        # an acknowledged mkdir survives the leader killed right after it, before any other node's discovery saw
        # the topic: mkdir returns once ZooKeeper records it, and the next leader makes what ZooKeeper records
        os.mkdir(leader.mount / "late")
        leader.kill()
        cluster.wait_leader(WAIT_S + cluster.session_timeout_s, min_epoch=info.leader_epoch + 1,
                            exclude=[leader.node_id])  # fmt: skip
        os.write(acked, b"c\n")  # the old leader's mount is gone: the handle moves, the write is made there
        os.fsync(acked)
        os.write(unacked, b"d\n")
        assert errno_of(os.fsync, unacked) == errno.EIO
        assert errno_of(os.write, partial, b"ne\n") == errno.EIO
    finally:
        for fd in (acked, unacked, partial):
            with contextlib.suppress(OSError):
                os.close(fd)
    live = cluster.reachable()
    for node in live:
        wait_until(f"node {node.node_id} showing late/0", lambda n=node: (n.mount / "late/0").is_dir(), WAIT_S,
                   logs=cluster.logs)
        got = wait_until(f"node {node.node_id} holding c", lambda n=node: "c" in values(n.mount, "m", 0) and
                         values(n.mount, "m", 0), WAIT_S, logs=cluster.logs)  # fmt: skip
        assert got.index("a") < got.index("c") and "ne" not in got and "half" not in " ".join(got), got


def committed(mount: Path, topic: str, partition: int) -> list[str]:
    return (mount / topic / str(partition) / "committed" / "at" / "earliest").read_text().split()


def test_a_transaction_and_a_group_deletion_through_nodes_that_do_not_lead_are_the_leaders(cluster: Cluster) -> None:
    leader, _ = cluster.wait_leader(WAIT_S)
    a, b = (n for n in cluster.nodes.values() if n is not leader)
    make_topic(leader.mount, "tx", 2)
    for node in cluster.nodes.values():
        wait_until(f"node {node.node_id} shows tx/1", lambda n=node: (n.mount / "tx/1/append").exists(), WAIT_S)
    txns = {node.node_id: node.mount / ".logfs/transactions" for node in cluster.nodes.values()}
    # begun through a follower: on the coordinator (the leader), listed and refused again through every node
    os.mkdir(txns[a.node_id] / "job")
    assert (txns[leader.node_id] / "job").is_dir()
    for node in (a, b):
        assert os.listdir(txns[node.node_id]) == ["job"]
        assert errno_of(os.mkdir, txns[node.node_id] / "job") == errno.EEXIST  # the coordinator's answer
    # a node that does not lead refuses what another node forwards to it: that node then tries the next leader
    assert errno_of(os.stat, a.mount / ".logfs/forward/.transactions/job") == errno.EROFS
    assert errno_of(os.listdir, a.mount / ".logfs/forward/.transactions") == errno.EROFS
    assert os.stat(leader.mount / ".logfs/forward/.transactions/job")
    assert errno_of(os.mkdir, txns[b.node_id] / "bad name") == errno.EINVAL
    assert errno_of(os.mkdir, txns[b.node_id] / ("x" * 250)) == errno.ENAMETOOLONG
    assert not (txns[b.node_id] / "nobody").exists()
    # its records through both followers, by the shell and by Python: in the logs at once, not committed
    done = subprocess.run(f"echo one >> {txns[a.node_id]}/job/tx/0/append", shell=True, capture_output=True)
    assert done.returncode == 0, done.stderr
    with open(txns[b.node_id] / "job/tx/1/append.jsonl", "w") as f:
        f.write(json.dumps({"key": "k", "value": "two"}) + "\n")
    wait_until("the records in the leader's log", lambda: values(leader.mount, "tx", 0) == ["one"] and
               values(leader.mount, "tx", 1) == ["two"], WAIT_S, logs=cluster.logs)  # fmt: skip
    assert committed(leader.mount, "tx", 0) == [] and committed(leader.mount, "tx", 1) == []
    # committed through a follower with a label: its directory gone there at once, the label seen through
    # every node, the records committed on every node
    (txns[a.node_id] / "job/control").write_text("commit run-1\n")
    assert not (txns[a.node_id] / "job").exists() and not (txns[leader.node_id] / "job").exists()
    assert errno_of(open, txns[a.node_id] / "job/control", "w") == errno.ENOENT
    assert errno_of(os.stat, b.mount / ".logfs/forward/.labels/run-1") == errno.EROFS
    for node in cluster.nodes.values():
        assert (node.mount / ".logfs/labels/run-1").exists()
        assert not (node.mount / ".logfs/labels/run-2").exists()
        wait_until(f"node {node.node_id} committed the transaction", lambda n=node: committed(n.mount, "tx", 0) ==
                   ["one"] and committed(n.mount, "tx", 1) == ["two"], WAIT_S, logs=cluster.logs)  # fmt: skip
    # begun again and aborted through the other follower: its record stays out of every committed view
    os.mkdir(txns[b.node_id] / "job")
    with open(txns[b.node_id] / "job/tx/0/append", "wb", buffering=0) as raw:
        raw.write(b"three\n")
    assert os.listdir(txns[a.node_id]) == ["job"]
    (txns[b.node_id] / "job/control").write_text("abort\n")
    assert os.listdir(txns[b.node_id]) == [] and os.listdir(txns[leader.node_id]) == []
    for node in cluster.nodes.values():
        wait_until(f"node {node.node_id} aborted the transaction", lambda n=node: values(n.mount, "tx", 0) ==
                   ["one", "three"] and committed(n.mount, "tx", 0) == ["one"], WAIT_S, logs=cluster.logs)  # fmt: skip
        assert json.loads((node.mount / "tx/0/state").read_text())["open_transactions"] == []
    # a group's follow through a follower: served from that node's replica, from the commit and with the config
    # the leader holds (set through the other follower), and what it delivered committed on the leader at close
    (b.mount / ".logfs/groups/f/config").write_text("auto.offset.reset=earliest\n")
    with open(a.mount / ".logfs/groups/f/tx/1/follow", "rb", buffering=0) as stream:
        assert stream.read(4096) == b"two\n"
    wait_until("the leader holding the follow's commit", lambda: (leader.mount / ".logfs/groups/f/tx/1/offset")
               .exists() and int((leader.mount / ".logfs/groups/f/tx/1/offset").read_text().split()[0]) >= 1,
               WAIT_S, logs=cluster.logs)  # fmt: skip
    append_acked(leader.mount, "tx", 1, ["four"])
    with open(b.mount / ".logfs/groups/f/tx/1/follow", "rb", buffering=0) as stream:
        assert stream.read(4096) == b"four\n"  # from the commit the first follow made through the other node
    assert errno_of(open, a.mount / ".logfs/forward/.groups/f/tx/1/offset", "rb") == errno.EROFS  # not a leader's
    # a consumer group deleted through a follower: on the leader of its offsets partition, which tombstones its
    # commits; gone on that follower when rmdir returns, then on every node
    (a.mount / ".logfs/groups/g/tx/0/offset").write_text("1\n")
    for node in cluster.nodes.values():
        wait_until(f"node {node.node_id} showing group g", lambda n=node: "g" in os.listdir(n.mount / ".logfs/groups"),
                   WAIT_S, logs=cluster.logs)  # fmt: skip
    os.rmdir(b.mount / ".logfs/groups/g")
    assert "g" not in os.listdir(b.mount / ".logfs/groups") and "g" not in os.listdir(leader.mount / ".logfs/groups")
    wait_until("node a no longer showing group g", lambda: "g" not in os.listdir(a.mount / ".logfs/groups"), WAIT_S)
    assert errno_of(os.rmdir, a.mount / ".logfs/groups/g") == errno.ENOENT  # the leader's answer


def test_with_no_leader_reachable_a_forwarded_write_fails_eagain_and_stores_nothing(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    # every node reaches every other through a path where nothing is mounted (node.mounts)
    nowhere = ",".join(f"{i}:/nonexistent/n{i}" for i in (1, 2, 3))
    config = [f"node.mounts={nowhere}", f"request.timeout.ms={TIMEOUT_MS}"]
    with checked_cluster(tmp_path / "cluster", zookeeper, 3, session_timeout_ms=SESSION_MS, config=config) as c:
        leader, _ = c.wait_leader(WAIT_S)
        make_topic(leader.mount, "t")
        other = next(n for n in c.nodes.values() if n is not leader)
        wait_until("t on another node", lambda: (other.mount / "t/0/append").exists(), WAIT_S)
        started = time.monotonic()
        assert errno_of(os.open, other.mount / "t/0/append", os.O_WRONLY) == errno.EAGAIN
        took = time.monotonic() - started
        assert TIMEOUT_MS / 1000 <= took < TIMEOUT_MS / 1000 + 5, took
        assert "no leader took the write within request.timeout.ms" in (other.mount / ".logfs/errors").read_text()
        append_acked(leader.mount, "t", 0, ["only"])  # the leader itself takes writes; nothing else was stored
        for node in c.nodes.values():
            wait_until(f"node {node.node_id} holding the record",
                       lambda n=node: values(n.mount, "t", 0) == ["only"], WAIT_S, logs=c.logs)  # fmt: skip
        assert json.loads((other.mount / "t/0/leader").read_text())["node_id"] == leader.node_id
