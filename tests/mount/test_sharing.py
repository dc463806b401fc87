"""A mount shared between Unix users (``logfs mount --allow-other``; docs/mount.md, "Sharing a mount"): real users
made with useradd, commands run as them with runuser against a real mount, as root mounts it.

The kernel checks each open, lookup, mkdir and rmdir against the owner and mode logfs reports (default_permissions);
logfs checks what changes a topic itself (config, partitions, deletion) and who may fetch. Ownership lives in the
store: a remount and a follower's mount show and enforce the same."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import LOGFS, Mount, finish_mount, running_mount, start_mount
from follower_procs import following, state, wait_for
from users import SYSTEM_PYTHON, User, shared_dir, user


@pytest.fixture
def people() -> tuple[User, User]:
    return user("alice"), user("bob")


@pytest.fixture
def place(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(a store, a mount point every user can reach)."""
    with shared_dir() as shared:
        yield tmp_path / "store", shared / "mnt"


@contextlib.contextmanager
def shared_mount(store: Path, mnt: Path, *config: str) -> Iterator[Mount]:
    """``logfs mount --allow-other`` for the body of a ``with``: always unmounted and its log checked."""
    mount = start_mount(store, mnt, *config, flags=("--allow-other",))
    mount.allow_refusals("/")  # the refusals are what these tests make
    try:
        yield mount
    finally:
        finish_mount(mount)


def owner(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def test_a_topic_is_its_makers_and_others_read_it_but_change_nothing(
    place: tuple[Path, Path], people: tuple[User, User]
) -> None:
    alice, bob = people
    store, mnt = place
    with shared_mount(store, mnt):
        assert owner(mnt) == (0, 0, 0o755)  # the mounting user's, until chmod says otherwise
        assert "Permission denied" in bob.refused(f"mkdir {mnt}/bobs")  # only root may create topics at 0755
        os.chmod(mnt, 0o1777)
        assert owner(mnt)[2] == 0o1777
        alice.ok(f"mkdir {mnt}/news && echo hello >> {mnt}/news/0/append")
        assert owner(mnt / "news") == (alice.uid, alice.gid, 0o755)
        assert owner(mnt / "news/0") == (alice.uid, alice.gid, 0o555)
        assert owner(mnt / "news/0/append")[2] == 0o600  # the topic's w bits, and r to read produce responses
        assert owner(mnt / "news/0/state")[2] == 0o444

        assert bob.ok(f"cat {mnt}/news/0/at/earliest") == "hello\n"  # others read at 0755
        assert "Permission denied" in bob.refused(f"echo no >> {mnt}/news/0/append")  # the kernel: no w bit
        assert "Permission denied" in bob.refused(f"echo retention.ms=1 > {mnt}/news/config")
        assert bob.run(f"rmdir {mnt}/news").returncode != 0  # the sticky root: only the owner removes it
        assert bob.run(f"echo news > {mnt}/.logfs/delete-topic").returncode != 0  # logfs: not bob's topic
        assert bob.run(f"echo 'news 0 1' > {mnt}/.logfs/delete-records").returncode != 0
        assert bob.run(f"chmod 777 {mnt}/news").returncode != 0  # EPERM: not the owner
        assert bob.run(f"mkdir {mnt}/news/1").returncode != 0
        assert (mnt / "news/0/at/earliest").read_text() == "hello\n"  # nothing of bob's landed

        made = subprocess.run(["bash", "-c", f"umask 027; {LOGFS} create-topic {mnt} made --partitions 2"],
                              capture_output=True, text=True)  # fmt: skip
        assert made.returncode == 0, made.stderr
        assert owner(mnt / "made") == (0, 0, 0o750)  # create-topic: 0755 less the caller's umask

        bob.ok(f"mkdir {mnt}/bobs")  # at 1777 anyone creates topics, owning them
        assert owner(mnt / "bobs")[0] == bob.uid
        assert alice.run(f"rmdir {mnt}/bobs").returncode != 0  # nor does alice delete bob's

        alice.ok(f"chmod 0700 {mnt}/news")
        assert "Permission denied" in bob.refused(f"cat {mnt}/news/0/at/earliest")
        assert alice.ok(f"cat {mnt}/news/0/at/earliest") == "hello\n"
        alice.ok(f"echo retention.ms=86400000 > {mnt}/news/config && mkdir {mnt}/news/1")  # the owner changes it
        assert alice.run(f"chown {bob.uid} {mnt}/news").returncode != 0  # only root changes an owner
        assert alice.run(f"chgrp {bob.gid} {mnt}/news").returncode != 0  # not one of alice's groups

    # A remount: the store kept every owner and mode.
    with shared_mount(store, mnt):
        assert owner(mnt)[2] == 0o1777
        assert owner(mnt / "news") == (alice.uid, alice.gid, 0o700)
        assert owner(mnt / "bobs")[0] == bob.uid
        assert "Permission denied" in bob.refused(f"cat {mnt}/news/0/at/earliest")
        os.chown(mnt / "news", bob.uid, -1)  # root may give it away
        assert owner(mnt / "news")[0] == bob.uid
        bob.ok(f"rmdir {mnt}/bobs")  # the owner deletes an empty topic


def test_a_chmod_or_a_claim_reaches_the_nodes_below_at_once(
    place: tuple[Path, Path], people: tuple[User, User]
) -> None:
    """The kernel caches a stable node's attributes for a second (mount/reads.py's STABLE_TIMEOUT_S); a chmod of a
    topic or a group, and a group's claim, make it ask again for every node below (mount/tree.py), so the next
    request is checked against the new mode, not the one cached."""
    alice, bob = people
    store, mnt = place
    with shared_mount(store, mnt):
        os.chmod(mnt, 0o1777)
        alice.ok(f"mkdir {mnt}/t && echo a >> {mnt}/t/0/append")
        bob.ok(f"cat {mnt}/t/0/state")  # the kernel now holds state's attributes: 0444
        alice.ok(f"chmod 0711 {mnt}/t")  # others pass through, read nothing
        assert "Permission denied" in bob.refused(f"cat {mnt}/t/0/state")
        alice.ok(f"chmod 0755 {mnt}/t")
        bob.ok(f"cat {mnt}/t/0/state")
        lag = mnt / ".logfs/groups/g/lag"
        bob.ok(f"cat {lag}")  # unclaimed: the kernel holds the group's nodes as anyone's
        alice.ok(f"echo 0 > {mnt}/.logfs/groups/g/t/0/offset")  # claims it: alice's, 0755
        assert owner(lag)[0] == alice.uid
        # chmod(2) alone, no stat first: the kernel checks its caller against the owner it holds of the group
        alice.ok(f"{SYSTEM_PYTHON} -c 'import os; os.chmod(\"{mnt}/.logfs/groups/g\", 0o700)'")
        assert "Permission denied" in bob.refused(f"cat {mnt}/.logfs/groups/g/t/0/offset")
        bob.ok(f"echo 0 > {mnt}/.logfs/groups/h/t/0/offset")  # bob claims h, then removes it at once
        bob.ok(f"rmdir {mnt}/.logfs/groups/h")  # the sticky groups/ directory: the kernel checks h's owner


def test_without_allow_other_modes_are_as_always_and_chmod_is_refused(tmp_path: Path) -> None:
    with running_mount(tmp_path / "store", tmp_path / "mnt") as mount:
        mount.allow_refusals("/")
        os.mkdir(mount.path / "t", 0o700)
        assert stat.S_IMODE(os.stat(mount.path / "t").st_mode) == 0o755
        assert stat.S_IMODE(os.stat(mount.path / "t/0/append").st_mode) == 0o660
        with pytest.raises(PermissionError):
            os.chmod(mount.path / "t", 0o700)


def test_only_replica_users_fetch_and_a_refused_lookup_moves_nothing(
    place: tuple[Path, Path], people: tuple[User, User]
) -> None:
    alice, bob = people
    store, mnt = place
    with shared_mount(store, mnt, "replica.ids=0,1", f"replica.users={alice.name}"):
        os.mkdir(mnt / "t")
        (mnt / "t/0/append").write_text("one\n")
        before = state(mnt, "t", 0)
        fetch = f"{mnt}/.logfs/fetch/1/t/0/0.0"
        assert "Permission denied" in bob.refused(f"stat {fetch}")
        assert "Permission denied" in bob.refused(f"ls {mnt}/.logfs/fetch/1")
        after = state(mnt, "t", 0)
        assert after["isr"] == before["isr"] == [0]
        assert after["replicas"]["1"] == before["replicas"]["1"]  # replica 1 was not heard from
        assert after["high_watermark"] == before["high_watermark"]
        alice.ok(f"stat {fetch}")  # a replica user fetches (here: replica 1, from offset 0)
        assert state(mnt, "t", 0)["replicas"]["1"]["log_end_offset"] == 0


def test_each_user_reads_only_their_own_refusals(place: tuple[Path, Path], people: tuple[User, User]) -> None:
    alice, bob = people
    store, mnt = place
    with shared_mount(store, mnt):
        os.chmod(mnt, 0o1777)
        alice.ok(f"mkdir {mnt}/a")
        alice.run(f"echo 'secret.key=hunter2' > {mnt}/a/config")  # refused (EINVAL): its text is quoted
        bob.run(f"mkdir {mnt}/'bad name'")
        mine = [json.loads(line) for line in alice.ok(f"cat {mnt}/.logfs/errors").splitlines()]
        theirs = [json.loads(line) for line in bob.ok(f"cat {mnt}/.logfs/errors").splitlines()]
        everyone = [json.loads(line) for line in (mnt / ".logfs/errors").read_text().splitlines()]
        assert [r["path"] for r in mine] == ["/a/config"] and all(r["uid"] == alice.uid for r in mine)
        assert [r["path"] for r in theirs] == ["/bad name"] and "hunter2" not in json.dumps(theirs)
        assert {r["uid"] for r in everyone} == {alice.uid, bob.uid}  # root sees all


def test_a_group_belongs_to_its_first_committer(place: tuple[Path, Path], people: tuple[User, User]) -> None:
    alice, bob = people
    store, mnt = place
    with shared_mount(store, mnt):
        os.chmod(mnt, 0o1777)
        os.mkdir(mnt / "t")
        os.chmod(mnt / "t", 0o755)
        (mnt / "t/0/append").write_text("a\nb\n")
        group = mnt / ".logfs/groups/g"
        alice.ok(f"echo 1 > {group}/t/0/offset")  # the first commit claims the group
        assert owner(group)[0] == alice.uid
        assert bob.ok(f"cat {group}/t/0/offset").split()[0] == "1"  # others read its commits at 0755
        assert bob.run(f"echo 2 > {group}/t/0/offset").returncode != 0
        alice.ok(f"chmod 0700 {group}")
        assert "Permission denied" in bob.refused(f"cat {group}/t/0/offset")
        assert bob.run(f"rmdir {group}").returncode != 0
        alice.ok(f"echo 2 > {group}/t/0/offset")
        assert (group / "t/0/offset").read_text().split()[0] == "2"
        assert owner(mnt / "__consumer_offsets")[2] == 0o700  # every group's commits: not through its at/ files
        assert "Permission denied" in bob.refused(f"cat {mnt}/__consumer_offsets/0/at/earliest")

        # A group's follow streams its topic: the topic's mode decides, not the group's (bob's own group here).
        alice.ok(f"mkdir {mnt}/secret && echo hidden >> {mnt}/secret/0/append && chmod 0700 {mnt}/secret")
        assert "Permission denied" in bob.refused(f"timeout 5 head -c 6 {mnt}/.logfs/groups/bobs/secret/0/follow")
        bob.ok(f"echo auto.offset.reset=earliest > {mnt}/.logfs/groups/bobs/config")
        assert bob.ok(f"timeout 5 head -c 2 {mnt}/.logfs/groups/bobs/t/0/follow") == "a\n"


def test_a_transaction_is_its_beginners_and_stays_so_across_a_remount(
    place: tuple[Path, Path], people: tuple[User, User]
) -> None:
    alice, bob = people
    store, mnt = place
    txn = mnt / ".logfs/transactions/a"
    with shared_mount(store, mnt):
        os.chmod(mnt, 0o1777)
        alice.ok(f"mkdir {mnt}/t && chmod 0777 {mnt}/t")  # anyone writes the topic itself
        alice.ok(f"mkdir {txn} && echo inside >> {txn}/t/0/append")
        assert owner(txn) == (alice.uid, alice.gid, 0o700)
        assert "File exists" in bob.refused(f"mkdir {txn}")  # an open id is not begun again, nor taken over
        assert "Permission denied" in bob.refused(f"echo abort > {txn}/control")
        assert "Permission denied" in bob.refused(f"echo x >> {txn}/t/0/append")
    with shared_mount(store, mnt):  # the owner was recorded with the begin
        assert owner(txn) == (alice.uid, alice.gid, 0o700)
        assert "Permission denied" in bob.refused(f"echo commit > {txn}/control")
        alice.ok(f"echo commit > {txn}/control")
        assert bob.ok(f"cat {mnt}/t/0/at/earliest") == "inside\n"
        bob.ok(f"mkdir {txn}")  # the id is free again: this transaction is bob's
        assert owner(txn) == (bob.uid, bob.gid, 0o700)
        assert "Permission denied" in alice.refused(f"echo commit > {txn}/control")
        bob.ok(f"echo abort > {txn}/control")


# Holds argv[2] follow/ readers of argv[1] open, says whether one more opened (or its errno's name), waits for a line
# on stdin, then reads one chunk from each at once and prints how many read b"x\n".
HOLD_READERS = r"""
import errno, os, sys, threading
path, n = sys.argv[1], int(sys.argv[2])
fds = [os.open(path, os.O_RDONLY) for _ in range(n)]
try:
    os.close(os.open(path, os.O_RDONLY))
    print("opened", flush=True)
except OSError as e:
    print(errno.errorcode[e.errno], flush=True)
sys.stdin.readline()
got = [b""] * n
def read(i):
    got[i] = os.read(fds[i], 100)
threads = [threading.Thread(target=read, args=(i,)) for i in range(n)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(sum(g == b"x\n" for g in got), flush=True)
"""


def test_readers_of_several_users_and_the_per_user_limit(place: tuple[Path, Path], people: tuple[User, User]) -> None:
    """One user cannot hold every follow/ reader of a shared mount: past max.follow.readers.per.user their next
    open is refused (EMFILE), another user's still opens until the mount's own limit; every held reader is woken by
    one write, and a released reader frees its user's share."""
    alice, bob = people
    store, mnt = place
    with shared_mount(store, mnt, "max.follow.readers=100", "max.follow.readers.per.user=60"):
        os.mkdir(mnt / "t")
        latest = str(mnt / "t/0/follow/latest")
        bobs = bob.python(HOLD_READERS, latest, "60")
        try:
            assert bobs.stdout is not None and bobs.stdin is not None
            assert bobs.stdout.readline().strip() == "EMFILE", bobs.stderr.read()  # bob's 61st: his share is held
            alices = alice.python(HOLD_READERS, latest, "40")
            try:
                assert alices.stdout is not None and alices.stdin is not None
                assert alices.stdout.readline().strip() == "EMFILE", alices.stderr.read()  # the mount's 101st
                (mnt / "t/0/append").write_text("x\n")
                for held, count in ((bobs, 60), (alices, 40)):
                    assert held.stdin is not None and held.stdout is not None
                    held.stdin.write("\n")
                    held.stdin.flush()
                    assert held.stdout.readline().strip() == str(count)
                    assert held.wait(timeout=30) == 0
            finally:
                alices.kill()
                alices.wait()
        finally:
            bobs.kill()
            bobs.wait()
        wait_for("every reader released", lambda: "logfs_follow_readers 0\n" in (mnt / ".logfs/metrics").read_text())
        again = bob.python(HOLD_READERS, latest, "60")  # his whole share is free again, and no more
        try:
            assert again.stdout is not None and again.stdin is not None
            assert again.stdout.readline().strip() == "EMFILE", again.stderr.read() if again.stderr else ""
        finally:
            again.kill()
            again.wait()

        # One handle, two threads reading with pread(2) (read(2) would queue in the kernel behind the file position
        # lock): the second read does not wait beside the first, each holding a task of the mount.
        fd = os.open(mnt / "t/0/follow/latest", os.O_RDONLY)
        answers: list[object] = []  # in the order the reads end

        def pread() -> None:
            try:
                answers.append(os.pread(fd, 100, 0))
            except OSError as exc:
                answers.append(exc.errno)

        try:
            readers = [threading.Thread(target=pread) for _ in range(2)]
            readers[0].start()
            time.sleep(0.5)  # a read's request reaches the mount in microseconds, and waits there
            readers[1].start()
            wait_for("one of the two reads to end", lambda: answers, timeout_s=5)  # at once: the one that came second
            assert answers == [errno.EBUSY] and sum(r.is_alive() for r in readers) == 1  # the other still waits
            (mnt / "t/0/append").write_text("y\n")  # wakes it
            for reader in readers:
                reader.join(timeout=10)
            assert answers == [errno.EBUSY, b"y\n"]
        finally:
            os.close(fd)


def test_a_followers_mount_shows_and_enforces_the_leaders_owners(
    place: tuple[Path, Path], people: tuple[User, User]
) -> None:
    alice, bob = people
    store, mnt = place
    with shared_mount(store, mnt, "replica.ids=0,1"):
        os.chmod(mnt, 0o1777)
        alice.ok(f"mkdir {mnt}/private && echo x >> {mnt}/private/0/append && chmod 0700 {mnt}/private")
        alice.ok(f"echo 1 > {mnt}/.logfs/groups/g/private/0/offset")
        alice.ok(f"chmod 0700 {mnt}/.logfs/groups/g")
        alice.ok(f"echo 1 > {mnt}/.logfs/groups/open/private/0/offset")
        alice.ok(f"chmod 1777 {mnt}/.logfs/groups/open")  # a group's sticky bit is dropped: 0777, still claimed
        assert owner(mnt / ".logfs/groups/open") == (alice.uid, alice.gid, 0o777)
        follower_mnt = mnt.with_name("follower")
        with following(mnt, store.with_name("follower-store"), 1, mount=follower_mnt,
                       config=("mount.allow.other=true",)) as follower:  # fmt: skip
            follower.allow_log(r"refused")
            wait_for("the topic on the follower", lambda: owner(follower_mnt / "private")[2] == 0o700, follower)
            assert owner(follower_mnt / "private")[0] == alice.uid
            wait_for("the root's mode on the follower", lambda: owner(follower_mnt)[2] == 0o1777, follower)
            wait_for("the record on the follower", lambda: (follower_mnt / "private/0/at/earliest").read_text())
            assert "Permission denied" in bob.refused(f"cat {follower_mnt}/private/0/at/earliest")
            assert alice.ok(f"cat {follower_mnt}/private/0/at/earliest") == "x\n"
            group = follower_mnt / ".logfs/groups/g"
            wait_for("the group's owner on the follower", lambda: owner(group) == (alice.uid, alice.gid, 0o700))
            open_group = follower_mnt / ".logfs/groups/open"
            wait_for("a 0777 group's owner", lambda: owner(open_group) == (alice.uid, alice.gid, 0o777), follower)
            alice.ok(f"chmod 0750 {mnt}/.logfs/groups/g")  # a known group's change reaches the follower too
            wait_for("the group's new mode", lambda: owner(group) == (alice.uid, alice.gid, 0o750), follower)
            alice.ok(f"rmdir {mnt}/.logfs/groups/open")  # deleted: unclaimed again, on the follower as well
            wait_for("the deleted group unclaimed", lambda: owner(open_group) == (0, 0, 0o1777), follower)
