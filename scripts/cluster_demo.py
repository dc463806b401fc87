"""Automatic failover through ZooKeeper on one machine (issue 17), the demo behind ``scripts/cluster-demo``.

    .venv/bin/python scripts/cluster_demo.py [--dir var/cluster-demo] [--seconds 3] [--session-ms 2000]

Starts a standalone ZooKeeper (Debian's package, tickTime 200 ms, a free loopback port) and three nodes, each
``logfs mount STORE MOUNTPOINT --config node.id=N --config zookeeper.connect=… --config replica.ids=1,2,3 --config
min.insync.replicas=2 --config zookeeper.session.timeout.ms=…``. It creates a topic on the leader the nodes agree
on, writes with acks=all (a write(2) then fsync(2), which returns only once the in-sync replicas hold the records)
through the leader and through any node (a follower forwards to the leader), kills the leader with SIGKILL, shows
the new leader ZooKeeper elected and the writers going on there, checks that every acknowledged record is on the new
leader (read back through its mount's ``at/earliest``), restarts the old leader as a follower, and stops
everything. Exit 0 when every acknowledged record was found.

The processes are the ones the failover tests use (tests/helpers/zkserver.py, tests/cluster/zkcluster.py and
tests/cluster/ackcheck.py), so what this shows is what the tests check.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "helpers"), str(ROOT / "tests" / "cluster")]

from ackcheck import wait_acks, writing  # noqa: E402
from zkcluster import Cluster, wait_until  # noqa: E402

TOPIC = "orders"
PARTITIONS = 2


def say(text: str) -> None:
    print(text, flush=True)


def show_leader_files(cluster: Cluster) -> None:
    for node in cluster.reachable():
        text = (node.mount / ".logfs" / "leader").read_text().strip()
        say(f"    node {node.node_id}: cat {node.mount}/.logfs/leader  ->  {text}")


def show_znodes(cluster: Cluster) -> None:
    say(f"    /brokers/topics/{TOPIC} = {json.dumps(cluster.znode_json(f'/brokers/topics/{TOPIC}'))} (the assignment)")
    for p in range(PARTITIONS):
        say(f"    /brokers/topics/{TOPIC}/partitions/{p}/state = {json.dumps(cluster.partition_znode(TOPIC, p))}")
    say(f"    /controller names node {cluster.controller_id()}; live nodes under /brokers/ids: {cluster.registered()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=ROOT / "var" / "cluster-demo", help="where stores and mounts go")
    ap.add_argument("--seconds", type=float, default=3.0, help="seconds of writing before and after the kill")
    ap.add_argument("--session-ms", type=int, default=2000, help="zookeeper.session.timeout.ms (default 2000)")
    args = ap.parse_args()
    shutil.rmtree(args.dir, ignore_errors=True)
    session_s = args.session_ms / 1000
    ok = False
    with Cluster(args.dir.absolute(), 3, session_timeout_ms=args.session_ms) as cluster:
        say(f"[1/6] ZooKeeper at {cluster.zk.connect} (tickTime {cluster.zk.tick_ms} ms, data in {cluster.zk.data_dir})"
            " and three nodes:")  # fmt: skip
        for node in cluster.nodes.values():
            say(f"    logfs mount {node.store} {node.mount} " + " ".join(f"--config {c}" for c in node.config))
        proxies = ", ".join(f"node {n.node_id} {n.proxy.address}" for n in cluster.nodes.values())
        say(f"    (zookeeper.connect differs per node: each names a TCP proxy of its own ({proxies}), all forwarding "
            f"to ZooKeeper at {cluster.zk.connect}. The failover tests cut one node from ZooKeeper at its proxy "
            f"(tests/helpers/tcpproxy.py); this demo never does, so they only pass bytes through. Your own nodes give "
            f"ZooKeeper's address itself: --config zookeeper.connect={cluster.zk.connect}.)")  # fmt: skip
        leader, info = cluster.wait_leader(30)
        say(f"[2/6] ZooKeeper elected node {leader.node_id} (leader epoch {info.leader_epoch}); every node says so:")
        show_leader_files(cluster)
        (leader.mount / TOPIC).mkdir()
        for p in range(1, PARTITIONS):
            (leader.mount / TOPIC / str(p)).mkdir()

        def full_isr() -> bool:
            return all((z := cluster.partition_znode(TOPIC, p)) and len(z["isr"]) == 3 for p in range(PARTITIONS))

        wait_until("the followers in the ISR", full_isr, 30)
        say(f"    mkdir {leader.mount}/{TOPIC} (+ partition 1): replicated to the followers, in ZooKeeper:")
        show_znodes(cluster)
        with writing(cluster, TOPIC, PARTITIONS, "order", batch=10) as writer, \
                writing(cluster, TOPIC, PARTITIONS, "anywhere", batch=10, through_any=True) as anywhere:  # fmt: skip
            say(f"[3/6] a writer appends to {TOPIC}/<p>/append on the leader, fsync(2) after each write (acks=all); "
                "another does the same through any node's mount, picked at random: a follower forwards the write to "
                "the leader and answers with its result")  # fmt: skip
            time.sleep(args.seconds)
            before = writer.acked_values()
            say(f"    {before:,} records acknowledged by node {leader.node_id}; through any node: "
                f"{anywhere.acked_values():,}")  # fmt: skip
            say(f"[4/6] kill -9 node {leader.node_id} (the leader); its ZooKeeper session expires after "
                f"{args.session_ms} ms")  # fmt: skip
            killed = time.monotonic()
            leader.kill()
            new, new_info = cluster.wait_leader(session_s + 15, min_epoch=info.leader_epoch + 1,
                                                exclude=[leader.node_id], settled=False)  # fmt: skip
            first = wait_acks(writer, 1, 30, node_id=new.node_id, after=killed)
            took = time.monotonic() - killed
            say(f"    node {new.node_id} leads in epoch {new_info.leader_epoch} after {took:.2f} s; "
                f"the writer's first acknowledgement there came {first.acked - killed:.2f} s after the kill "
                f"(bound: session timeout + 1 s = {session_s + 1:.1f} s)")  # fmt: skip
            show_leader_files(cluster)
            show_znodes(cluster)
            time.sleep(args.seconds)
        acked = [(a.partition, v) for a in writer.acks + anywhere.acks for v in a.values]
        refused = dict(writer.errors + anywhere.errors) or "none"
        say(f"[5/6] the writers stopped: {len(acked):,} records acknowledged ({anywhere.acked_values():,} through any "
            f"node), {writer.acked_values() - before:,} of the leader writer's by node {new.node_id}; refused attempts "
            f"while no node could acknowledge: {refused}")  # fmt: skip
        stored = {p: set((new.mount / TOPIC / str(p) / "at" / "earliest").read_text().splitlines())
                  for p in range(PARTITIONS)}  # fmt: skip
        missing = [v for p, v in acked if v not in stored[p]]
        say(f"    cat {new.mount}/{TOPIC}/<p>/at/earliest: {sum(map(len, stored.values())):,} records; "
            f"acknowledged records missing: {len(missing)}")  # fmt: skip
        ok = not missing
        say(f"[6/6] node {leader.node_id} restarts and rejoins as a follower:")
        leader.start()
        wait_until("the old leader following", lambda: (v := leader.leader()) and v.node_id == new.node_id, 30)
        show_leader_files(cluster)
        codes = cluster.close()
        say(f"    stopped every node (exit codes {codes}) and ZooKeeper")
    say("every acknowledged record survived the failover" if ok else f"LOST acknowledged records: {missing[:10]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
