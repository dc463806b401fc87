"""A campaign of hostile names through every door a name comes in by, and of hostile store contents, through real
mounts (issue 26: "Several users on one mount").

Names: every byte value 1-255 as a one-character name and inside a name, ``.``, ``..``, a leading dot, names of
249, 250 and 255 characters, names that differ from an existing topic's only in ``.`` against ``_``, and
``LOGFS_NAMES_ROUNDS`` random byte strings (16 unless set: a seeded generator, so a failure repeats; set it to
thousands for a long run). Doors: ``mkdir MOUNT/<topic>``, ``logfs create-topic`` and ``logfs delete-topic`` (the
admin functions the command runs, in this process, for every name; the real command for a sample, for its exit
codes and messages), ``.logfs/delete-topic`` and ``.logfs/delete-records`` lines, consumer groups
(``.logfs/groups/<group>``, a commit there, ``logfs groups --group``), ``mkdir .logfs/transactions/<id>``, and a
follower's fetch-session lines. After every attempt: the errno is the one Kafka's rule gives the name (written
again below from the issue's words, not imported from logfs), what was accepted is there and is removed again, the
store holds no other topic, and nothing changed outside the store (the directories around it, two levels up, with a
stranger's files in them).

Store contents: a segment that is a symbolic link, and a partition directory linked to a directory outside the
store: ``logfs mount`` exits 1 naming the link, mounts nothing, and changes nothing where the links point;
``logfs check`` reports the links.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import LOGFS, Mount, errno_of, finish_mount, running_mount, start_mount, write_all

from logfs import admin
from logfs import groups as groups_cli

KAFKA_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
ROUNDS = int(os.environ.get("LOGFS_NAMES_ROUNDS", "16"))


def kafka_rule(text: str) -> int | None:
    """The errno the issue's rule gives a name (None: a legal one): over 249 characters ENAMETOOLONG; empty, ``.``,
    ``..``, a leading ``.`` (logfs's own names) or a character outside ``[A-Za-z0-9._-]`` EINVAL."""
    if len(text) > 249:
        return errno.ENAMETOOLONG
    if not text or text.startswith(".") or not set(text) <= KAFKA_CHARS:
        return errno.EINVAL
    return None


def campaign_names() -> list[bytes]:
    names = [bytes([b]) for b in range(1, 256)]
    names += [b"in" + bytes([b]) + b"side" for b in range(1, 256)]
    names += [b".", b"..", b"...", b".hidden", b"..x", b"L" * 249, b"M" * 250, b"N" * 255]
    names += ["été".encode(), "in\u2028side".encode(), "in\x85side".encode()]  # line breaks to str.splitlines
    rng = random.Random(26)
    for _ in range(ROUNDS):
        alphabet = rng.choice([bytes(range(1, 256)), b"abc._-/\x00 \n\xff", b"ab._-"])
        names.append(bytes(rng.choice(alphabet) for _ in range(rng.choice([1, 2, 5, 40, 249, 250, 255]))))
    return names


NAMES = campaign_names()


def one_component(name: bytes) -> bool:
    """Whether the kernel passes ``name`` to the mount as one path component (no ``/``, no NUL, at most 255 bytes)."""
    return b"/" not in name and b"\0" not in name and len(name) <= 255


def strict(name: bytes) -> str | None:
    try:
        return name.decode()
    except UnicodeDecodeError:
        return None


DOTS = (b".", b"..")  # as a path component the kernel's: the directory itself, its parent


def component_errno(name: bytes, *, not_utf8: int, hidden: int | None = None) -> int | None:
    """The errno a name given as one path component gets: ``not_utf8`` for bytes that are not UTF-8 (mkdir refuses
    them, EINVAL; a lookup finds nothing, ENOENT), ``hidden`` (when given) for a leading dot that a lookup hides
    (ENOENT), else Kafka's rule."""
    text = strict(name)
    if text is None:
        return not_utf8
    if hidden is not None and text.startswith("."):
        return hidden
    return kafka_rule(text)


def mkdir_errno(name: bytes) -> int | None:
    """A mkdir's: EEXIST for ``.`` and ``..`` (the kernel's), EINVAL for bytes that are not UTF-8, else the rule."""
    return errno.EEXIST if name in DOTS else component_errno(name, not_utf8=errno.EINVAL)


def lookup_errno(name: bytes) -> int | None:
    """A lookup's: ``.`` and ``..`` are found (the directory, its parent); bytes that are not UTF-8 and a leading
    dot name nothing (ENOENT); else the rule."""
    return None if name in DOTS else component_errno(name, not_utf8=errno.ENOENT, hidden=errno.ENOENT)


def components(
    directory: Path, op: Callable[[bytes], object], want: Callable[[bytes], int | None]
) -> Iterator[tuple[bytes, bytes, int | None]]:
    """``op`` of every campaign name that is one path component, in ``directory``: checks that it fails with
    ``want(name)`` (or succeeds, None), then yields the name, its path and that errno for the caller's checks."""
    for name in filter(one_component, NAMES):
        path = os.path.join(bytes(directory), name)
        assert errno_of(op, path) == want(name), name
        yield name, path, want(name)


# --- what must not change -------------------------------------------------------------------------------------------


class Watch:
    """The store's topic-bearing names (its directories and override files) and everything around it, outside it."""

    def __init__(self, base: Path, store: Path, skip: list[Path]) -> None:
        self.base, self.store, self.skip = base, store, set(skip)
        self.outside = self._outside()
        self.topics = self._topics()

    def _outside(self) -> dict[str, tuple[bool, bytes, int]]:
        out: dict[str, tuple[bool, bytes, int]] = {}
        for directory, dirs, files in os.walk(self.base):
            dirs[:] = [d for d in dirs if Path(directory, d) not in self.skip]
            for name in dirs + files:
                path = Path(directory, name)
                if path in self.skip:
                    continue
                st = path.lstat()
                data = path.read_bytes() if path.is_file() and not path.is_symlink() else b""
                out[str(path.relative_to(self.base))] = (path.is_dir(), data, st.st_mtime_ns)
        return out

    def _topics(self) -> list[str]:
        with os.scandir(self.store) as it:
            return sorted(e.name for e in it if e.is_dir(follow_symlinks=False) or e.name.startswith(".logfs-topic."))

    def unchanged(self, what: object) -> None:
        assert self._outside() == self.outside, f"something outside the store changed after {what!r}"
        assert self._topics() == self.topics, f"the store's topics changed after {what!r}"


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Mount, Watch]]:
    """A mount whose store sits two levels below a directory holding a stranger's files, with topic ``victim``
    (one record), ``__consumer_offsets`` and the transaction files made before the watch starts."""
    base = tmp_path_factory.mktemp("hostile")
    home = base / "a" / "b"
    home.mkdir(parents=True)
    for stranger in (base / "mine", home / "outside"):
        stranger.mkdir()
        (stranger / "precious").write_bytes(b"not the store's\n")
    with running_mount(home / "store", home / "mnt", "num.partitions=1") as mount:
        mnt = mount.path
        mount.allow_refusals(".*")  # every refusal of the campaign is logged at WARNING, with its reason
        os.mkdir(mnt / "victim")
        write_all(mnt / "victim/0/append", b"safe\n")
        write_all(mnt / ".logfs/groups/setup/victim/0/offset", b"1\n")  # makes __consumer_offsets
        os.rmdir(mnt / ".logfs/groups/setup")
        os.mkdir(mnt / ".logfs/transactions/setup")
        write_all(mnt / ".logfs/transactions/setup/control", b"abort\n")
        yield mount, Watch(base, home / "store", [home / "store", home / "mnt", mount.log_path])


def test_mkdir_of_a_topic(campaign: tuple[Mount, Watch]) -> None:
    mount, watch = campaign
    for name, _, want in components(mount.path, os.mkdir, mkdir_errno):
        if want is None:
            assert f"{name.decode()}-0" in os.listdir(watch.store), name
            write_all(mount.path / ".logfs/delete-topic", name + b"\n")
        watch.unchanged(name)


def command_text(line: bytes) -> str:
    """A command file's line as the mount reads it (docs/mount.md): ASCII blanks around it dropped, UTF-8 with
    replacement characters."""
    return line.strip().decode("utf-8", "replace")


def test_delete_topic_and_delete_records_lines(campaign: tuple[Mount, Watch]) -> None:
    mount, watch = campaign
    logfs_dir = mount.path / ".logfs"
    for name in (n for n in NAMES if b"\n" not in n):  # a newline ends a command: such a name is two commands
        text = command_text(name)
        want = None if not text.strip() else kafka_rule(text) or errno.ENOENT  # a blank line is no command
        assert errno_of(write_all, logfs_dir / "delete-topic", name + b"\n") == want, name
        parts = command_text(name + b" 0 0").split()
        want = errno.EINVAL if len(parts) != 3 else kafka_rule(parts[0]) or errno.ENOENT
        assert errno_of(write_all, logfs_dir / "delete-records", name + b" 0 0\n") == want, name
        watch.unchanged(name)
    assert (mount.path / "victim/0/at/earliest").read_bytes() == b"safe\n"


def test_create_topic_and_delete_topic_commands(campaign: tuple[Mount, Watch]) -> None:
    """Every name through the functions ``logfs create-topic`` and ``logfs delete-topic`` run (argv decodes bytes
    that are not UTF-8 as surrogates, as here)."""
    mount, watch = campaign
    for name in NAMES:
        text = name.decode("utf-8", "surrogateescape")
        if kafka_rule(text) is None:
            assert admin.create_topic(mount.path, text, None, []) == 1, name
            admin.delete_topic(mount.path, text)
        else:
            with pytest.raises(admin.BadArgument):
                admin.create_topic(mount.path, text, None, [])
            with pytest.raises(admin.BadArgument):
                admin.delete_topic(mount.path, text)
        watch.unchanged(name)


def test_consumer_group_names(campaign: tuple[Mount, Watch]) -> None:
    mount, watch = campaign
    for name, group, want in components(mount.path / ".logfs/groups", os.stat, lookup_errno):
        text = strict(name)
        if want is None and name not in DOTS:
            write_all(Path(os.fsdecode(group)) / "victim/0/offset", b"1\n")
            assert (Path(os.fsdecode(group)) / "victim/0/offset").read_bytes() == b"1\n"
            assert [row.group for row in groups_cli.describe(mount.path, text)] == [text]
            os.rmdir(group)
        elif text is not None:
            with pytest.raises(admin.BadArgument):
                groups_cli.describe(mount.path, text)
        watch.unchanged(name)


def test_transactional_ids(campaign: tuple[Mount, Watch]) -> None:
    mount, watch = campaign
    transactions = mount.path / ".logfs/transactions"
    for name, txn, want in components(transactions, os.mkdir, mkdir_errno):
        if want is None:
            write_all(Path(os.fsdecode(txn)) / "control", b"abort\n")
            assert name.decode() not in os.listdir(transactions)
        watch.unchanged(name)


def test_topic_names_that_collide_are_refused_at_every_door(campaign: tuple[Mount, Watch]) -> None:
    mount, watch = campaign
    mnt = mount.path
    baseline = watch.topics
    for existing, new in (("coll_a", "coll.a"), ("coll.b", "coll_b"), ("x.y_z", "x_y.z"), ("q..", "q__")):
        os.mkdir(mnt / existing)
        watch.topics = watch._topics()
        assert f"{existing}-0" in watch.topics and not set(baseline) - set(watch.topics)
        assert errno_of(os.mkdir, mnt / new) == errno.EINVAL
        assert errno_of(os.mkdir, mnt / existing) == errno.EEXIST
        refusals = admin.read_refusals(mnt)
        assert [r["reason"] for r in refusals if r["path"] == f"/{new}"][-1] == (
            f"topic name '{new}' collides with existing topic '{existing}': Kafka refuses names that differ only in "
            "'.' and '_' (their metric names would be the same)"
        )
        with pytest.raises(admin.BadArgument, match=f"collides with existing topic '{existing}'"):
            admin.create_topic(mnt, new, None, [])
        watch.unchanged(new)
        write_all(mnt / ".logfs/delete-topic", existing.encode() + b"\n")
        os.mkdir(mnt / new)  # the other spelling is free once the first is gone
        write_all(mnt / ".logfs/delete-topic", new.encode() + b"\n")
        watch.topics = baseline
        watch.unchanged(existing)


def run_logfs(*args: str | bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([LOGFS, *args], capture_output=True, timeout=60, cwd="/", check=False)


def test_the_commands_exit_2_naming_the_rule(campaign: tuple[Mount, Watch]) -> None:
    mount, watch = campaign
    mnt = str(mount.path)
    os.mkdir(mount.path / "dot_clash")
    watch.topics = watch._topics()
    cases: list[tuple[list[str | bytes], int, bytes]] = [
        (["create-topic", mnt, "a b"], 2, b"Error: topic name 'a b' has characters outside [A-Za-z0-9._-]\n"),
        (["create-topic", mnt, ".."], 2, b"Error: topic name '..' is not allowed\n"),
        (["create-topic", mnt, "../../mine/x"], 2, b"has characters outside [A-Za-z0-9._-]\n"),
        (["create-topic", mnt, "M" * 250], 2, b"Error: topic name of 250 characters exceeds 249\n"),
        (["create-topic", mnt, b"bad\xff"], 2, b"Error: topic name 'bad\\udcff' has characters outside [A-Za-z0-9._-]"),
        (["create-topic", mnt, "dot.clash"], 2, b"collides with existing topic 'dot_clash': Kafka refuses names "),
        (["delete-topic", mnt, "a\tb"], 2, b"Error: topic name 'a\\tb' has characters outside [A-Za-z0-9._-]\n"),
        (["groups", mnt, "--group", "g/../.."], 2, b"Error: group id 'g/../..' has characters outside"),
        (["groups", mnt, "--group", "g" * 250], 2, b"Error: group id of 250 characters exceeds 249\n"),
    ]
    for args, code, message in cases:
        done = run_logfs(*args)
        assert (done.returncode, message in done.stderr) == (code, True), (args, done.stderr)
        watch.unchanged(args)
    done = run_logfs("create-topic", mnt, "legal._-Name9")
    assert (done.returncode, done.stdout) == (0, b"created topic legal._-Name9 with 1 partition(s)\n"), done.stderr
    assert run_logfs("delete-topic", mnt, "legal._-Name9").returncode == 0
    write_all(mount.path / ".logfs/delete-topic", b"dot_clash\n")
    watch.topics = watch._topics()
    watch.unchanged("legal._-Name9")


def test_fetch_session_lines(tmp_path: Path) -> None:
    """A follower's session lines name topics too: a name outside the rule is refused (the session goes on), a legal
    one that does not exist is answered as Kafka's UNKNOWN_TOPIC_OR_PARTITION."""
    with running_mount(tmp_path / "store", tmp_path / "mnt", "replica.ids=0,1") as mount:
        mount.allow_refusals(".*")
        watch = Watch(tmp_path, tmp_path / "store", [tmp_path / "store", tmp_path / "mnt", mount.log_path])
        fd = os.open(mount.path / ".logfs/fetch/1/.session", os.O_RDWR)
        try:
            for name in NAMES:
                text = name.decode("latin-1")  # any character JSON can carry, NUL and "/" included
                line = json.dumps({"topic": text, "partition": 0, "fetch_offset": 0}).encode() + b"\n"
                assert errno_of(os.write, fd, line) == kafka_rule(text), name
                watch.unchanged(name)
        finally:
            os.close(fd)


# --- hostile store contents -------------------------------------------------------------------------------------


def stopped_store(path: Path) -> None:
    """A store with topic ``t`` (partition 0 holding a record, partition 1), made through a mount and unmounted."""
    mount = start_mount(path / "store", path / "mnt")
    try:
        os.mkdir(mount.path / "t")
        os.mkdir(mount.path / "t/1")
        write_all(mount.path / "t/0/append", b"r\n")
    finally:
        finish_mount(mount)


@pytest.mark.parametrize("link", ["segment", "partition directory"])
def test_a_store_with_a_link_does_not_mount_and_nothing_outside_changes(tmp_path: Path, link: str) -> None:
    stopped_store(tmp_path)
    store, mnt, outside = tmp_path / "store", tmp_path / "mnt", tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_bytes(b"not the store's\n")
    if link == "segment":
        path = store / "t-0/00000000000000000000.log"
        shutil.copy(path, outside / "segment.log")
        path.unlink()
        path.symlink_to(outside / "segment.log")
    else:
        path = store / "t-1"
        shutil.move(path, outside / "t-1")
        path.symlink_to(outside / "t-1")
    watch = Watch(tmp_path, store, [store, mnt])
    done = run_logfs("mount", str(store), str(mnt))
    assert done.returncode == 1
    assert done.stderr.decode().splitlines()[-1] == (
        f"Error: {path} is a symbolic link: a store holds only its own files and directories, and logfs writes nothing "
        "through a link (it could point outside the store); replace the link with a copy of what it points to, or "
        "remove it"
    )
    assert not os.path.ismount(mnt)
    watch.unchanged(link)
    checked = run_logfs("check", str(store))
    assert checked.returncode == 1
    assert f"DAMAGE: {path}: link: {path} is a symbolic link".encode() in checked.stdout
    watch.unchanged(link)
