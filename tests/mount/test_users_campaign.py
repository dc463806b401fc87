"""A campaign of hostile users on one shared mount (issue 26; docs/mount.md, "Sharing a mount"), with a checker.

Three real users (tests/helpers/users.py) and root act at random through real shell commands (``runuser``): alice,
bob, and carol, who is in alice's group, so a topic's group bits decide for her. Each step is one request a user may
or may not be allowed: create a topic under a random umask, append, read, ``chmod`` (the owner's own and anyone
else's attempts, through chmod(1) and a bare chmod(2)), ``chown`` (root's alone), change a topic's config, ``rmdir``
it, delete its records, delete it through ``.logfs/delete-topic``, commit to a consumer group and read its commit,
``chmod`` and ``rmdir`` a group, a transaction begun by one user that another tries to end, a lookup under
``.logfs/fetch/``, and reading ``.logfs/errors``. A model written from the contract's words (not from logfs's code)
predicts each outcome: allowed or refused, and for an allowed step what it changes. The checker fails the first step
whose outcome differs, and every few steps (and after a remount at the end) compares the whole mount, read as root,
with the model: every topic's records and config, every owner and mode, every group's owner and mode (an unclaimed
one's included); and each user's view of ``.logfs/errors`` holds that user's refusals only. So nothing a refused
request sent lands anywhere, and nothing an allowed one did is lost.

``LOGFS_USERS_ROUNDS`` steps (150 unless set; a seeded generator, ``LOGFS_USERS_SEED``, so a failure repeats).
"""

from __future__ import annotations

import json
import os
import random
import stat
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import Mount, finish_mount, start_mount
from users import SYSTEM_PYTHON, User, shared_dir, user

ROUNDS = int(os.environ.get("LOGFS_USERS_ROUNDS", "150"))
SEED = int(os.environ.get("LOGFS_USERS_SEED", "26"))
CHECK_EVERY = 25
TOPIC_MODES = (0o700, 0o711, 0o750, 0o755, 0o770, 0o775, 0o777, 0o705, 0o751)
GROUP_MODES = (0o700, 0o750, 0o755, 0o770, 0o777)
UMASKS = (0o022, 0o027, 0o077, 0o002, 0o007)
ROOT = User("root", 0, 0)
MOUNT_GID = 0  # the mount runs as root: an unclaimed group shows root's group


@dataclass
class Owned:
    uid: int
    gid: int
    mode: int


@dataclass
class Topic:
    owner: Owned
    records: list[tuple[int, str]] = field(default_factory=list)  # (offset, value), as appended
    leo: int = 0  # offsets taken: records and transaction markers
    start: int = 0  # the log start offset (delete-records moves it)
    retention: int | None = None  # the last retention.ms its config took

    def visible(self) -> list[str]:
        return [value for offset, value in self.records if offset >= self.start]


@dataclass
class Group:
    owner: Owned | None = None  # None: nobody claimed it
    commits: dict[str, int] = field(default_factory=dict)  # topic → the offset it committed there


def groups_of(u: User) -> frozenset[int]:
    return frozenset(os.getgrouplist(u.name, u.gid)) if u.uid else frozenset({0})


def digit(u: User, owned: Owned, member: dict[int, frozenset[int]]) -> int:
    """The rwx bits ``owned``'s mode gives ``u`` (the Unix rule; root: all)."""
    if u.uid == 0:
        return 7
    if u.uid == owned.uid:
        return owned.mode >> 6 & 7
    if owned.gid in member[u.uid]:
        return owned.mode >> 3 & 7
    return owned.mode & 7


class Campaign:
    """The model, the actors and the checker of one campaign."""

    def __init__(self, mnt: Path, rng: random.Random, actors: list[User]) -> None:
        self.mnt = mnt
        self.rng = rng
        self.actors = actors
        self.member = {u.uid: groups_of(u) for u in actors}
        self.topics: dict[str, Topic] = {}
        self.groups: dict[str, Group] = {f"g{i}": Group() for i in range(3)}
        self.made = 0
        self.step = 0
        self.history: list[str] = []
        self.outcomes: Counter[tuple[str, bool]] = Counter()  # (what, allowed) → steps: the campaign's reach

    def run(self, u: User, command: str) -> subprocess.CompletedProcess[str]:
        done = u.run(command, timeout=60)
        self.history.append(f"{self.step}: {u.name}: {command} -> {done.returncode} {done.stderr.strip()[:120]}")
        return done

    def expect(self, u: User, command: str, allowed: bool, what: str) -> subprocess.CompletedProcess[str]:
        done = self.run(u, command)
        label = what.split(" of ")[0].split(" to ")[0] + (" (group)" if " group " in f" {what} " else "")
        self.outcomes[(label, allowed)] += 1
        if (done.returncode == 0) != allowed:
            recent = "\n".join(self.history[-15:])
            pytest.fail(f"seed {SEED} step {self.step}: {what} by {u.name} should be "
                        f"{'allowed' if allowed else 'refused'}: {command!r} exited {done.returncode}: "
                        f"{done.stderr.strip()}\nlast steps:\n{recent}")  # fmt: skip
        return done

    def other(self, u: User) -> User:
        return self.rng.choice([a for a in self.actors if a.uid != u.uid and a.uid != 0])

    # --- steps ------------------------------------------------------------------------------------------------------

    def step_once(self) -> None:
        self.step += 1
        u = self.rng.choice(self.actors)
        live = sorted(self.topics)
        choices = ["mkdir"] if len(live) < 2 else []
        choices += ["mkdir"] * (len(live) < 6)
        if live:
            choices += ["append"] * 4 + ["read"] * 3 + ["chmod"] * 2
            choices += ["config", "rmdir", "delete_records", "delete_topic", "commit", "commit", "txn"]
            choices += ["chown"]
        choices += ["group_chmod", "group_read", "group_rmdir", "fetch", "errors"]
        getattr(self, choices[self.rng.randrange(len(choices))])(u, live)

    def mkdir(self, u: User, live: list[str]) -> None:
        self.made += 1
        name = f"t{self.made}"
        umask = self.rng.choice(UMASKS)
        self.expect(u, f"umask {umask:03o}; mkdir {self.mnt}/{name}", True, "mkdir under a 1777 root")
        self.topics[name] = Topic(Owned(u.uid, u.gid, 0o777 & ~umask))

    def append(self, u: User, live: list[str]) -> None:
        name = self.rng.choice(live)
        t = self.topics[name]
        value = f"v{self.step}"
        allowed = digit(u, t.owner, self.member) & 3 == 3  # x to pass the topic and partition, w to open append
        self.expect(u, f"echo {value} >> {self.mnt}/{name}/0/append", allowed, f"append to {name} {t.owner}")
        if allowed:
            t.records.append((t.leo, value))
            t.leo += 1

    def read(self, u: User, live: list[str]) -> None:
        name = self.rng.choice(live)
        t = self.topics[name]
        if not t.visible():
            return
        allowed = digit(u, t.owner, self.member) & 5 == 5
        done = self.expect(u, f"cat {self.mnt}/{name}/0/at/earliest", allowed, f"read of {name} {t.owner}")
        if allowed:
            assert done.stdout.splitlines() == t.visible(), (SEED, self.step, name)

    def chmod(self, u: User, live: list[str]) -> None:
        name = self.rng.choice(live)
        t = self.topics[name]
        mode = self.rng.choice(TOPIC_MODES)
        allowed = u.uid in (0, t.owner.uid)
        self.expect(u, self.chmod_command(self.mnt / name, mode), allowed, f"chmod of {name} {t.owner}")
        if allowed:
            t.owner.mode = mode

    def chmod_command(self, path: Path, mode: int) -> str:
        """chmod(1), which stats the file first, or chmod(2) alone (the kernel then checks the owner it holds)."""
        if self.rng.random() < 0.5:
            return f"chmod {mode:o} {path}"
        return f"{SYSTEM_PYTHON} -c 'import os, sys; os.chmod(sys.argv[1], {mode:#o})' {path}"

    def chown(self, u: User, live: list[str]) -> None:
        name = self.rng.choice(live)
        t = self.topics[name]
        heir = self.rng.choice([a for a in self.actors if a.uid != 0])
        allowed = u.uid == 0  # root alone gives a topic away
        self.expect(u, f"chown {heir.uid} {self.mnt}/{name}", allowed or heir.uid == t.owner.uid == u.uid,
                    f"chown of {name}")  # fmt: skip
        if allowed:
            t.owner.uid = heir.uid

    def config(self, u: User, live: list[str]) -> None:
        name = self.rng.choice(live)
        t = self.topics[name]
        value = 86_400_000 + self.step
        allowed = u.uid in (0, t.owner.uid)  # the owner's alone, whatever the mode (and the owner always has x)
        self.expect(u, f"echo retention.ms={value} > {self.mnt}/{name}/config", allowed, f"config of {name}")
        if allowed:
            t.retention = value

    def rmdir(self, u: User, live: list[str]) -> None:
        name = self.rng.choice(live)
        t = self.topics[name]
        allowed = u.uid in (0, t.owner.uid) and t.leo == 0  # the sticky root; only a topic without records
        self.expect(u, f"rmdir {self.mnt}/{name}", allowed, f"rmdir of {name} (leo {t.leo})")
        if allowed:
            del self.topics[name]

    def delete_topic(self, u: User, live: list[str]) -> None:
        name = self.rng.choice(live)
        t = self.topics[name]
        allowed = u.uid in (0, t.owner.uid)  # records or not: the owner's (logfs checks the line's topic)
        self.expect(u, f"echo {name} > {self.mnt}/.logfs/delete-topic", allowed, f"delete-topic of {name}")
        if allowed:
            del self.topics[name]

    def delete_records(self, u: User, live: list[str]) -> None:
        name = self.rng.choice(live)
        t = self.topics[name]
        offset = self.rng.randint(t.start, t.leo)
        allowed = u.uid in (0, t.owner.uid)
        self.expect(u, f"echo '{name} 0 {offset}' > {self.mnt}/.logfs/delete-records", allowed,
                    f"delete-records of {name}")  # fmt: skip
        if allowed:
            t.start = max(t.start, offset)

    def commit(self, u: User, live: list[str]) -> None:
        name = self.rng.choice(live)
        gname = self.rng.choice(sorted(self.groups))
        g = self.groups[gname]
        offset = self.rng.randint(self.topics[name].start, self.topics[name].leo)  # a commit outside is EINVAL
        allowed = g.owner is None or digit(u, g.owner, self.member) & 3 == 3
        self.expect(u, f"echo {offset} > {self.mnt}/.logfs/groups/{gname}/{name}/0/offset", allowed,
                    f"commit to {gname}")  # fmt: skip
        if allowed:
            if g.owner is None:
                g.owner = Owned(u.uid, u.gid, 0o755)  # the first commit claims it
            g.commits[name] = offset

    def group_chmod(self, u: User, live: list[str]) -> None:
        gname = self.rng.choice(sorted(self.groups))
        g = self.groups[gname]
        mode = self.rng.choice(GROUP_MODES)
        allowed = g.owner is not None and u.uid in (0, g.owner.uid)  # an unclaimed group has no owner to chmod
        path = self.mnt / ".logfs/groups" / gname
        self.expect(u, self.chmod_command(path, mode), allowed, f"chmod of group {gname}")
        if allowed and g.owner is not None:
            g.owner.mode = mode

    def group_rmdir(self, u: User, live: list[str]) -> None:
        gname = self.rng.choice(sorted(self.groups))
        g = self.groups[gname]
        allowed = g.owner is not None and u.uid in (0, g.owner.uid)  # a claimed group has commits; its owner's
        self.expect(u, f"rmdir {self.mnt}/.logfs/groups/{gname}", allowed, f"rmdir of group {gname}")
        if allowed:
            self.groups[gname] = Group()  # gone: unclaimed, nothing committed

    def group_read(self, u: User, live: list[str]) -> None:
        committed = [(gname, t) for gname, g in self.groups.items() for t in sorted(g.commits) if t in self.topics]
        if not committed:
            return
        gname, name = self.rng.choice(committed)
        g = self.groups[gname]
        assert g.owner is not None
        allowed = digit(u, g.owner, self.member) & 5 == 5
        offset_file = f"{self.mnt}/.logfs/groups/{gname}/{name}/0/offset"
        done = self.expect(u, f"cat {offset_file}", allowed, f"group read of {gname}")
        if allowed:
            assert done.stdout.split()[0] == str(g.commits[name])

    def txn(self, u: User, live: list[str]) -> None:
        """``u`` begins a transaction and appends in it (the topic's w bit decides), another user's commit is
        refused (the transaction is ``u``'s), then ``u`` commits."""
        name = self.rng.choice(live)
        t = self.topics[name]
        txn = f"{self.mnt}/.logfs/transactions/x{self.step}"
        self.expect(u, f"mkdir {txn}", True, "begin")
        value = f"x{self.step}"
        allowed = digit(u, t.owner, self.member) & 2 == 2
        self.expect(u, f"echo {value} >> {txn}/{name}/0/append", allowed, f"append in a transaction to {name}")
        thief = self.other(u)
        self.expect(thief, f"echo commit > {txn}/control", False, f"ending {u.name}'s transaction")
        self.expect(u, f"echo commit > {txn}/control", True, "commit")
        if allowed:
            t.records.append((t.leo, value))
            t.leo += 2  # the record and the commit marker

    def fetch(self, u: User, live: list[str]) -> None:
        if u.uid == 0:
            return
        self.expect(u, f"stat {self.mnt}/.logfs/fetch/1", False, "a lookup under .logfs/fetch/")

    def errors(self, u: User, live: list[str]) -> None:
        if u.uid == 0:
            return
        done = self.expect(u, f"cat {self.mnt}/.logfs/errors", True, "reading .logfs/errors")
        uids = {json.loads(line)["uid"] for line in done.stdout.splitlines()}
        assert uids <= {u.uid}, (SEED, self.step, u.name, uids)

    # --- the whole mount against the model ----------------------------------------------------------------------

    def check_all(self) -> None:
        root_listing = {n for n in os.listdir(self.mnt) if not n.startswith((".", "__"))}
        assert root_listing == set(self.topics), (SEED, self.step, root_listing)
        for name, t in self.topics.items():
            st = os.stat(self.mnt / name)
            assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (t.owner.uid, t.owner.gid, t.owner.mode), name
            state = json.loads((self.mnt / name / "0/state").read_text())
            assert (state["log_start_offset"], state["log_end_offset"]) == (t.start, t.leo), (name, state)
            if t.visible():
                assert (self.mnt / name / "0/at/earliest").read_text().splitlines() == t.visible(), name
            config = (self.mnt / name / "config").read_text()
            if t.retention is not None:
                assert f"retention.ms={t.retention}\n" in config, (name, config)
        for gname, g in self.groups.items():
            st = os.stat(self.mnt / ".logfs/groups" / gname)
            owned = g.owner or Owned(0, MOUNT_GID, 0o1777)  # unclaimed: the mounting user's, with the sticky bit
            assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (owned.uid, owned.gid, owned.mode), gname


@pytest.fixture
def actors() -> list[User]:
    alice, bob = user("alice"), user("bob")
    carol = user("carol")
    if alice.gid not in os.getgrouplist(carol.name, carol.gid):
        subprocess.run(["usermod", "-a", "-G", alice.name, carol.name], check=True)
    return [alice, bob, carol, ROOT]


@pytest.fixture
def place(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    with shared_dir() as shared:
        yield tmp_path / "store", shared / "mnt"


def mounted(store: Path, mnt: Path) -> Mount:
    mount = start_mount(store, mnt, "replica.ids=0", flags=("--allow-other",))
    mount.allow_refusals("/")  # the refusals are what this campaign makes
    return mount


def test_hostile_users_campaign(place: tuple[Path, Path], actors: list[User]) -> None:
    store, mnt = place
    campaign = Campaign(mnt, random.Random(SEED), actors)
    mount = mounted(store, mnt)
    try:
        os.chmod(mnt, 0o1777)
        for _ in range(ROUNDS):
            campaign.step_once()
            if campaign.step % CHECK_EVERY == 0:
                campaign.check_all()
        campaign.check_all()
    finally:
        finish_mount(mount)
    mount = mounted(store, mnt)  # everything the store kept: owners, modes, records, configs, claims
    try:
        campaign.check_all()
        for u in actors[:3]:
            campaign.errors(u, [])
    finally:
        finish_mount(mount)
    reach = ", ".join(f"{what} {'ok' if ok else 'refused'} {n}" for (what, ok), n in sorted(campaign.outcomes.items()))
    print(f"seed {SEED}: {campaign.step} steps, {len(campaign.history)} requests, {campaign.made} topics made: {reach}")
    refused = sum(n for (_, ok), n in campaign.outcomes.items() if not ok)
    assert refused >= len(campaign.history) // 10, "the campaign hardly tried anything it may not do"
