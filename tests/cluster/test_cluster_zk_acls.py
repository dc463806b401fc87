"""Secure ZooKeeper (issue 26; docs/replication.md, "Securing ZooKeeper and followers") against a real ZooKeeper, real
``logfs mount`` nodes and ZooKeeper's own client (zkCli.sh, tests/helpers/zkserver.py): with ``zookeeper.set.acl=true``
every znode the cluster makes is readable by anyone and changed only with the nodes' credential, so zkCli without it
gets "Insufficient permission" rewriting or deleting a partition's state, the leadership or ``/controller``, and
leadership does not move; with the credential the cluster still elects and records its ISR changes. ``logfs
zk-acls`` secures a cluster made without ACLs, and opens it again."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from conftest import LOGFS, make_topic
from zkcluster import Cluster, LeaderInfo, Node, append_acked, wait_until
from zkserver import ZooKeeperServer, zkcli

from logfs.cluster.rules import Broker
from logfs.cluster.zk import ZooKeeper
from logfs.cluster.zkauth import Credential
from logfs.cluster.zkerrors import NotAuthorized

CHROOT = "/logfs"
SESSION_MS = 1500
TOPIC = "t"
PARTITIONS = 2
WAIT_S = 30.0
USER = "logfs"
ALL, READ = 31, 1  # ZooKeeper's permission bits: cdrwa, r
# The ACLs as a client without the credential reads them: ZooKeeper shows a digest id as "user:x" to a client
# that may not administer the znode.
SECURE = frozenset({("digest", f"{USER}:x", ALL), ("world", "anyone", READ)})
OPEN = frozenset({("world", "anyone", ALL)})
# What the cluster keeps in ZooKeeper once a topic exists (under the chroot, "/" being the chroot itself).
EXPECTED = {"/", "/brokers/ids/1", "/brokers/ids/2", "/brokers/ids/3", "/controller", "/controller_epoch",
            "/logfs/leadership", "/admin/delete_topics", *(f"/brokers/topics/{TOPIC}/partitions/{p}/state"
                                                           for p in range(PARTITIONS))}  # fmt: skip


@pytest.fixture
def credential(tmp_path: Path) -> Path:
    path = tmp_path / "zk.cred"
    path.write_text(f"{USER}:s3cret pass:word\n")  # a space and a colon in the password: only the first splits
    path.chmod(0o600)
    return path


def secure_config(credential: Path) -> list[str]:
    return ["zookeeper.set.acl=true", f"zookeeper.auth.file={credential}"]


def acls(client: Any, expected: set[str] = EXPECTED) -> dict[str, frozenset[tuple[str, str, int]]]:
    """The ACL of the chroot and of every znode under it, read by ``client`` (chrooted, no credential); ``expected``
    among them."""
    found: dict[str, frozenset[tuple[str, str, int]]] = {}

    def walk(path: str) -> None:
        acl, _ = client.get_acls(path)
        found[path] = frozenset((entry.id.scheme, entry.id.id, entry.perms) for entry in acl)
        for child in client.get_children(path):
            walk(f"{path.rstrip('/')}/{child}")

    walk("/")
    assert set(found) >= expected, sorted(found)
    return found


def full_isr(cluster: Cluster, members: list[int]) -> bool:
    return all(sorted((cluster.partition_znode(TOPIC, p) or {"isr": []})["isr"]) == members for p in range(PARTITIONS))


def with_topic(cluster: Cluster) -> tuple[Node, LeaderInfo]:
    """The settled leader, once it made the topic, acknowledged a write and every node is in every recorded ISR."""
    leader, info = cluster.wait_leader(WAIT_S)
    make_topic(leader.mount, TOPIC, PARTITIONS)
    try:
        append_acked(leader.mount, TOPIC, 0, ["a", "b"])
    except OSError as e:
        raise AssertionError(f"{e}\n{cluster.logs()}") from e
    wait_until("every node in every ISR", lambda: full_isr(cluster, cluster.ids), WAIT_S, logs=cluster.logs)
    return leader, info


def refused(connect: str, *command: str) -> None:
    """zkCli without the credential: the command fails with ZooKeeper's NoAuth."""
    done = zkcli(connect, *command)
    assert done.returncode == 1, (command, done.stdout, done.stderr)
    assert f"Insufficient permission : {command[1]}" in done.stderr, (command, done.stderr)


def attack(cluster: Cluster, leader: Node) -> None:
    """What zkCli without the credential tries: rewrite or delete a partition's state (naming another leader in a
    higher epoch), rewrite the leadership every node acts on, take or delete ``/controller``, forge a registration.
    Each is refused; each znode reads back as before (data and version); every node names the same leader."""
    connect = cluster.zk.connect
    other = next(i for i in cluster.ids if i != leader.node_id)
    state = f"{CHROOT}/brokers/topics/{TOPIC}/partitions/0/state"
    forged = json.dumps({"controller_epoch": 99, "leader": other, "version": 1, "leader_epoch": 99, "isr": [other]})
    watched = ["/brokers/topics/t/partitions/0/state", "/logfs/leadership", "/controller", "/controller_epoch"]
    client = cluster.kazoo()
    before = {path: client.get(path) for path in watched}
    views = cluster.views()
    refused(connect, "set", state, forged)
    refused(connect, "delete", state)
    refused(connect, "set", f"{CHROOT}/logfs/leadership", forged)
    refused(connect, "set", f"{CHROOT}/controller", json.dumps({"version": 1, "brokerid": other, "timestamp": "0"}))
    refused(connect, "delete", f"{CHROOT}/controller")
    refused(connect, "create", f"{CHROOT}/brokers/ids/9", "{}")
    # readable by anyone: zkCli reads the state as it is
    done = zkcli(connect, "get", state)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == json.loads(before[watched[0]][0])
    after = {path: client.get(path) for path in watched}
    assert {p: (data, stat.version) for p, (data, stat) in after.items()} == {
        p: (data, stat.version) for p, (data, stat) in before.items()
    }
    assert cluster.views() == views
    assert cluster.partition_znode(TOPIC, 0)["leader"] == leader.node_id  # type: ignore[index]


def refused_registration(connect: str, credential: Credential | None) -> str:
    """What a node's session (logfs/cluster/zksession.py) with ``credential`` (None: none) is told registering as
    node 9 in a secured cluster: NotAuthorized, logfs's type for ZooKeeper's NoAuth (its message)."""

    async def main() -> str:
        zk = ZooKeeper(connect, 6000, credential)
        try:
            await trio.to_thread.run_sync(zk.start, 10.0)
            with pytest.raises(NotAuthorized) as excinfo:
                await trio.to_thread.run_sync(zk.register, Broker(9, "/nowhere", -1))
            return str(excinfo.value)
        finally:
            await trio.to_thread.run_sync(zk.stop)

    return trio.run(main)


def quiet_about_acls(cluster: Cluster) -> None:
    """No node was refused by ZooKeeper's ACLs, nor warned of open znodes."""
    for node in cluster.nodes.values():
        text = node.log_text()
        assert "ZooKeeper refuses it" not in text and "anyone may change" not in text, text[-4000:]


@pytest.fixture
def secured(tmp_path: Path, zookeeper: ZooKeeperServer, credential: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path / "cluster", 3, session_timeout_ms=SESSION_MS, zookeeper=zookeeper, chroot=CHROOT,
                 config=secure_config(credential)) as cluster:  # fmt: skip
        yield cluster
        codes = cluster.close()
    assert all(code == 0 for code in codes.values()), f"exit codes {codes}\n{cluster.logs()}"


def test_zkcli_without_the_credential_is_refused_and_the_cluster_works_with_it(secured: Cluster) -> None:
    cluster = secured
    leader, info = with_topic(cluster)
    assert set(acls(cluster.kazoo()).values()) == {SECURE}
    attack(cluster, leader)
    for other in (None, Credential(USER, "another password")):  # logfs's own session without the credential
        said = refused_registration(cluster.zk.connect + CHROOT, other)
        assert "a znode's ACL refuses this session" in said
    assert cluster.registered() == cluster.ids

    # with the credential the cluster elects (the leader killed: the controller, in a new epoch) and records ISR
    # changes (the dead leader out, then back in once it returns and catches up)
    leader.kill()
    new, new_info = cluster.wait_leader(WAIT_S, min_epoch=info.leader_epoch + 1, exclude=[leader.node_id])
    survivors = sorted(i for i in cluster.ids if i != leader.node_id)
    wait_until("the dead leader out of every ISR", lambda: full_isr(cluster, survivors), WAIT_S, logs=cluster.logs)
    state = cluster.partition_znode(TOPIC, 1)
    assert state is not None and (state["leader"], state["leader_epoch"]) == (new.node_id, new_info.leader_epoch)
    append_acked(new.mount, TOPIC, 1, ["after the failover"])
    leader.start()
    wait_until("the old leader back in every ISR", lambda: full_isr(cluster, cluster.ids), WAIT_S, logs=cluster.logs)
    assert set(acls(cluster.kazoo()).values()) == {SECURE}  # the new registration and state writes too
    quiet_about_acls(cluster)


def zk_acls(connect: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LOGFS, "zk-acls", "--zookeeper", connect, *flags], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip


def test_zk_acls_secures_a_cluster_made_without_acls_and_opens_it_again(
    tmp_path: Path, zookeeper: ZooKeeperServer, credential: Path
) -> None:
    connect = zookeeper.connect + CHROOT
    with Cluster(tmp_path / "cluster", 3, session_timeout_ms=SESSION_MS, zookeeper=zookeeper, chroot=CHROOT) as cluster:
        with_topic(cluster)
        assert set(acls(cluster.kazoo()).values()) == {OPEN}
        # Kafka's order: every node restarted with the credential and zookeeper.set.acl=true, then the migration
        for node in cluster.nodes.values():
            assert node.stop() == 0, node.log_text()[-4000:]
            node.config += secure_config(credential)
            node.start()
        leader, _ = cluster.wait_leader(WAIT_S)
        wait_until("every node in every ISR", lambda: full_isr(cluster, cluster.ids), WAIT_S, logs=cluster.logs)
        for node in cluster.nodes.values():  # each said, at its start, that the old znodes are still open
            assert "anyone may change /logfs/brokers/topics (its ACL: world:anyone:cdrwa)" in node.log_text()

        done = zk_acls(connect, "--auth-file", str(credential), "--secure")
        assert done.returncode == 0, done.stderr
        found = acls(cluster.kazoo())
        assert done.stdout.startswith(f"{connect}: {len(found)} znode(s) now have the ACL digest:{USER}:")
        assert done.stdout.rstrip().endswith(":cdrwa,world:anyone:r")
        assert set(found.values()) == {SECURE}
        attack(cluster, leader)
        append_acked(leader.mount, TOPIC, 1, ["after the migration"])

        # without the credential nobody undoes it
        done = zk_acls(connect, "--unsecure")
        assert done.returncode == 1
        assert "a znode's ACL refuses this session" in done.stderr
        assert set(acls(cluster.kazoo()).values()) == {SECURE}
        codes = cluster.close()
    assert all(code == 0 for code in codes.values()), f"exit codes {codes}\n{cluster.logs()}"

    done = zk_acls(connect, "--zookeeper.acl", "unsecure", "--auth-file", str(credential))
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("now have the ACL world:anyone:cdrwa")
    state = f"{CHROOT}/brokers/topics/{TOPIC}/partitions/0/state"
    written = zkcli(zookeeper.connect, "set", state, '{"rewritten":"by anyone"}')
    assert written.returncode == 0, written.stderr
    from kazoo.client import KazooClient

    client = KazooClient(hosts=connect)
    client.start(timeout=15)
    try:
        stopped = {p for p in EXPECTED if not p.startswith("/brokers/ids/") and p != "/controller"}  # no sessions
        assert set(acls(client, stopped).values()) == {OPEN}
        assert client.get(state.removeprefix(CHROOT))[0] == b'{"rewritten":"by anyone"}'
    finally:
        client.stop()
        client.close()

