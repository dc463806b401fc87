"""A cluster node's fetcher names the leader epoch ZooKeeper gave it (the three-part fetch name), so a follower
that missed an election is refused by the leader (FENCED_LEADER_EPOCH) instead of fetching; once it hears from
ZooKeeper again it fetches at the new epoch and acks go on (issue 17: "Followers fetch only from the leader
ZooKeeper names, at the epoch they know; the fetch answer refuses a fetcher with another epoch")."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from conftest import make_topic
from zkcluster import Cluster, append_acked, wait_until
from zkserver import ZooKeeperServer

SESSION_MS = 6000  # long enough that the cut node's session outlives the cut: it misses the epoch, not its session
TOPIC = "t"
WAIT_S = 20.0


def fetch_head(mount: Path, replica: int, name: str) -> dict:  # type: ignore[type-arg]
    data = (mount / ".logfs/fetch" / str(replica) / TOPIC / "0" / name).read_bytes()
    head: dict = json.loads(data.partition(b"\n")[0])  # type: ignore[type-arg]
    return head


def test_a_follower_that_missed_an_epoch_is_fenced_until_zookeeper_tells_it(
    tmp_path: Path, zookeeper: ZooKeeperServer
) -> None:
    with Cluster(tmp_path / "cluster", 3, session_timeout_ms=SESSION_MS, zookeeper=zookeeper) as cluster:
        missed_epoch_is_fenced(cluster)
        codes = cluster.close()
    assert all(code == 0 for code in codes.values()), f"exit codes {codes}"


def missed_epoch_is_fenced(cluster: Cluster) -> None:
    leader, info = cluster.wait_leader(WAIT_S)
    assert info.leader_epoch == 0
    cut, stopped = (cluster.nodes[i] for i in cluster.ids if i != leader.node_id)
    # The cut node must not be the controller: a cut controller keeps /controller for its whole session, and nobody
    # would act on the stopped node meanwhile. A controller among the followers is the one stopped (its clean stop
    # hands the controller over at once).
    controller = wait_until("a controller", cluster.controller_id, WAIT_S, logs=cluster.logs)
    if controller == cut.node_id:
        cut, stopped = stopped, cut
    r = cut.node_id
    make_topic(leader.mount, TOPIC)
    append_acked(leader.mount, TOPIC, 0, ["a", "b"])
    isr = lambda: (z := cluster.partition_znode(TOPIC, 0)) and z  # noqa: E731
    wait_until("every node in the ISR", lambda: (z := isr()) and sorted(z["isr"]) == [1, 2, 3], WAIT_S,
               logs=cluster.logs)  # fmt: skip
    # what every cluster fetcher sends, tried by hand: the leader refuses another epoch than its own
    assert fetch_head(leader.mount, r, "2.0.1")["error"] == "UNKNOWN_LEADER_EPOCH"
    assert fetch_head(leader.mount, r, "2.0.0")["error"] is None

    cut.proxy.cut("refuse")  # it keeps its session (6 s) and its fetcher, but hears nothing from ZooKeeper
    stopped.stop()  # a clean stop closes its session: the controller takes it out of the ISR in epoch 1
    remaining = sorted([leader.node_id, r])
    z = wait_until("the stopped node out of the ISR in a new epoch",
                   lambda: (z := isr()) and sorted(z["isr"]) == remaining and z, WAIT_S, logs=cluster.logs)  # fmt: skip
    assert (z["leader"], z["leader_epoch"]) == (leader.node_id, 1)
    wait_until("the leader adopted epoch 1", lambda: (v := leader.leader()) and v.leader_epoch == 1, WAIT_S)
    wait_until("the cut node fenced at epoch 0", lambda: "refuses our leader epoch 0: FENCED_LEADER_EPOCH"
               in cut.log_text(), WAIT_S, logs=cluster.logs)  # fmt: skip
    assert fetch_head(leader.mount, r, "2.0.0")["error"] == "FENCED_LEADER_EPOCH"
    fd = os.open(leader.mount / TOPIC / "0/append", os.O_WRONLY)  # acks=1: no fsync, nothing waits for node 2
    try:
        os.write(fd, b"c\n")
    finally:
        os.close(fd)
    time.sleep(0.5)  # a fetcher at epoch 0 gets nothing meanwhile
    state = leader.partition_state(TOPIC, 0)
    assert state is not None and state["replicas"][str(r)]["log_end_offset"] <= 2, state
    assert (cut.leader() or info).leader_epoch == 0  # it still believes epoch 0: it heard nothing

    cut.proxy.heal()  # it hears epoch 1 from ZooKeeper and fetches at it: acks=all goes on with it
    wait_until("the cut node at epoch 1", lambda: (v := cut.leader()) and v.leader_epoch == 1, WAIT_S,
               logs=cluster.logs)  # fmt: skip
    append_acked(leader.mount, TOPIC, 0, ["d"])
    wait_until("the cut node holds every record",
               lambda: (cut.mount / TOPIC / "0/at/earliest").read_bytes() == b"a\nb\nc\nd\n", WAIT_S)  # fmt: skip
