"""Owners on a ZooKeeper cluster of shared mounts (issue 26; docs/mount.md, "Sharing a mount"): every node reads
``mount.allow.other``, its followers take each topic's, group's and the root's owner and mode from the leader's
mount, so the node elected after the leader is killed shows and enforces the same, for real Unix users
(tests/helpers/users.py), as the old leader did."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from conftest import errno_of
from users import User, shared_dir, user
from zkcluster import Cluster, append_acked, wait_until
from zkserver import ZooKeeperServer

SESSION_MS = 1500
WAIT_S = 30.0


def owner(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def produce_acked(who: User, mount: Path, topic: str, line: str) -> None:
    """One acks=all write as ``who``: ``dd`` appends the line and fsyncs before it exits."""
    who.ok(f"printf '%s\\n' {line} | dd of={mount}/{topic}/0/append oflag=append conv=notrunc,fsync status=none")


def test_the_leader_elected_after_a_kill_shows_and_enforces_the_same_owners(zookeeper: ZooKeeperServer) -> None:
    alice, bob = user("alice"), user("bob")
    with shared_dir() as shared, Cluster(shared / "cluster", 3, session_timeout_ms=SESSION_MS, zookeeper=zookeeper,
                                          config=["mount.allow.other=true"]) as cluster:  # fmt: skip
        leader, info = cluster.wait_leader(WAIT_S)
        mnt = leader.mount
        os.chmod(mnt, 0o1777)
        alice.ok(f"mkdir {mnt}/private {mnt}/public && chmod 0700 {mnt}/private")
        produce_acked(alice, mnt, "private", "secret")
        produce_acked(alice, mnt, "public", "news")
        alice.ok(f"echo 1 > {mnt}/.logfs/groups/g/public/0/offset")
        alice.ok(f"chmod 0750 {mnt}/.logfs/groups/g")
        expected = {
            "": (0, 0, 0o1777),
            "private": (alice.uid, alice.gid, 0o700),
            "public": (alice.uid, alice.gid, 0o755),
            ".logfs/groups/g": (alice.uid, alice.gid, 0o750),
        }
        for node in cluster.nodes.values():  # every follower took them from the leader's mount
            wait_until(f"node {node.node_id}'s owners", lambda n=node: all(  # type: ignore[misc]
                owner(n.mount / path) == want for path, want in expected.items()), WAIT_S, logs=cluster.logs)
            wait_until(f"node {node.node_id}'s records", lambda n=node: (n.mount / "private/0/at/earliest").read_text()
                       == "secret\n", WAIT_S, logs=cluster.logs)  # fmt: skip

        leader.kill()
        new, _ = cluster.wait_leader(WAIT_S, min_epoch=info.leader_epoch + 1, exclude=[leader.node_id])
        mnt = new.mount
        assert {path: owner(mnt / path) for path in expected} == expected
        assert "Permission denied" in bob.refused(f"cat {mnt}/private/0/at/earliest")
        assert alice.ok(f"cat {mnt}/private/0/at/earliest") == "secret\n"
        assert bob.ok(f"cat {mnt}/public/0/at/earliest") == "news\n"
        assert "Permission denied" in bob.refused(f"echo forged >> {mnt}/public/0/append")
        assert "Permission denied" in bob.refused(f"echo retention.ms=1 > {mnt}/public/config")  # the owner's alone
        assert "Permission denied" in bob.refused(f"echo 2 > {mnt}/.logfs/groups/g/public/0/offset")
        assert "Permission denied" in bob.refused(f"stat {mnt}/.logfs/fetch/{leader.node_id}")  # not a replica user
        assert "Operation not permitted" in bob.refused(f"rmdir {mnt}/public")  # the sticky root's rule (EPERM)
        produce_acked(alice, mnt, "public", "more")  # the owner writes through the new leader, acks=all
        # through the third node, which follows: the writer is checked there, then the write is the leader's
        other = next(n for n in cluster.nodes.values() if n.node_id not in (leader.node_id, new.node_id))
        wait_until("the third node's owners", lambda: owner(other.mount / "public") == expected["public"], WAIT_S)
        assert "Permission denied" in bob.refused(f"echo forged >> {other.mount}/public/0/append")
        produce_acked(alice, other.mount, "public", "forwarded")
        assert (mnt / "public/0/at/earliest").read_text() == "news\nmore\nforwarded\n"
        # the leader's .logfs/forward/ is for the nodes' users only (replica.users), not for bob
        assert "Permission denied" in bob.refused(f"echo forged >> {mnt}/.logfs/forward/public/0/append")
        bob.ok(f"mkdir {mnt}/bobs")  # the root's 1777, enforced by the new leader: anyone creates a topic
        assert owner(mnt / "bobs")[0] == bob.uid
        # mkdir through the node that follows: made on the leader with bob and the mode his mkdir passed, and
        # there on this node when mkdir returns; his partition too; alice may not add one to his topic, nor
        # remove it, nor change its config (checked here, before anything is forwarded)
        bob.ok(f"mkdir -m 0750 {other.mount}/bobs2 && mkdir {other.mount}/bobs2/1 && ls {other.mount}/bobs2/1")
        for node in (other, new):
            wait_until(f"bobs2 on node {node.node_id}", lambda n=node: owner(n.mount / "bobs2") ==
                       (bob.uid, bob.gid, 0o750) and (n.mount / "bobs2/1").is_dir(), WAIT_S)  # fmt: skip
        assert "Permission denied" in alice.refused(f"mkdir {other.mount}/bobs2/2")
        assert "Permission denied" in alice.refused(f"echo retention.ms=1 > {other.mount}/bobs2/config")
        assert "Operation not permitted" in alice.refused(f"rmdir {other.mount}/bobs2")  # the sticky root
        bob.ok(f"echo retention.ms=86400000 > {other.mount}/bobs2/config && grep -x retention.ms=86400000 "
               f"{other.mount}/bobs2/config")  # fmt: skip
        # the leader checks the owner again (a node may show an owner the leader no longer has): alice's rmdir
        # refused there too, and nobody but a replica user reads or writes the forwarded files
        with open(mnt / ".logfs/forward/.dirs", "wb", buffering=0) as f:
            assert errno_of(f.write, f"rmdir bobs2 {alice.uid}\n".encode()) == errno.EACCES
        assert "Permission denied" in bob.refused(f"cat {mnt}/.logfs/forward/bobs2/config")
        assert "retention.ms=86400000" in (mnt / "bobs2/config").read_text().split()
        bob.ok(f"rmdir {other.mount}/bobs2 && test ! -e {other.mount}/bobs2")
        assert not (mnt / "bobs2").exists()
        # bob's first commit to a new group through the node that follows claims it for him on the leader; alice
        # may not commit to it then (checked here, with her groups); the leader holds bob's commit
        bob.ok(f"echo 0 > {other.mount}/.logfs/groups/bobs-group/public/0/offset")
        for node in (other, new):
            wait_until(f"bob's group on node {node.node_id}", lambda n=node: owner(n.mount / ".logfs/groups/bobs-group")
                       == (bob.uid, bob.gid, 0o755), WAIT_S)  # fmt: skip
        assert "Permission denied" in alice.refused(f"echo 1 > {other.mount}/.logfs/groups/bobs-group/public/0/offset")
        assert (mnt / ".logfs/groups/bobs-group/public/0/offset").read_text().split()[:1] == ["0"]
        # the forwarded changes themselves are for the nodes' users only
        assert "Permission denied" in bob.refused(f"echo rmdir bobs >> {mnt}/.logfs/forward/.dirs")
        # a transaction bob begins through the node that follows is his on the coordinator (the leader) and shown as
        # his there (0700): alice may neither write into it nor end it, nor use the coordinator's forwarded files;
        # bob's record, committed through that node, is in the leader's committed view
        txn = f"{other.mount}/.logfs/transactions/bobs-txn"
        bob.ok(f"mkdir {txn}")
        assert owner(mnt / ".logfs/transactions/bobs-txn") == (bob.uid, bob.gid, 0o700)
        assert owner(Path(txn)) == (bob.uid, bob.gid, 0o700)
        assert "Permission denied" in alice.refused(f"echo forged >> {txn}/bobs/0/append")
        assert "Permission denied" in alice.refused(f"echo abort > {txn}/control")
        assert "Permission denied" in alice.refused(
            f"echo forged >> {mnt}/.logfs/forward/.transactions/bobs-txn/bobs/0/append")
        bob.ok(f"echo in-txn >> {txn}/bobs/0/append && echo commit > {txn}/control && test ! -e {txn}")
        wait_until("bob's transaction committed on the leader", lambda: (mnt / "bobs/0/committed/at/earliest")
                   .read_text() == "in-txn\n", WAIT_S, logs=cluster.logs)  # fmt: skip
        # the id ended on the leader and begun again there by alice while the node that follows may still hold
        # bob's directory entry (its kernel keeps one for 1 s): bob's open there is refused all the same (each
        # open asks the coordinator whose the transaction is now, and the stale entry is dropped), and alice's
        # works at once
        bob.ok(f"mkdir {txn} && test -d {txn} && echo abort > {mnt}/.logfs/transactions/bobs-txn/control")
        alice.ok(f"mkdir {mnt}/.logfs/transactions/bobs-txn")
        assert "Permission denied" in bob.refused(f"echo forged >> {txn}/bobs/0/append")
        alice.ok(f"echo abort > {txn}/control")
        # alice's group may not be deleted by bob through the node that follows (its kernel: the sticky groups/),
        # nor through the leader's .dirs in his name (the leader's own check); she deletes it through that node
        assert "Operation not permitted" in bob.refused(f"rmdir {other.mount}/.logfs/groups/g")
        with open(mnt / ".logfs/forward/.dirs", "wb", buffering=0) as f:
            assert errno_of(f.write, f'delete-group {bob.uid} "g"\n'.encode()) == errno.EACCES
        alice.ok(f"rmdir {other.mount}/.logfs/groups/g")
        assert "g" not in os.listdir(other.mount / ".logfs/groups") and "g" not in os.listdir(mnt / ".logfs/groups")
        append_acked(mnt, "bobs", 0, ["root writes anywhere"])
