"""A store holds no symbolic link (core/storelinks.py): a segment, index, snapshot or checkpoint that is a link, a
partition directory that is one (pointing outside the store or at another partition), a link put in place of a new
partition's directory while the store is open, or a ``.lock`` that is a link: the open (or the creation) fails with
LinkInStore naming the link, and nothing outside the store is written, created or changed. ``logfs check`` reports
every link as damage; ``--repair`` refuses as an open does."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from logfs.core.check import check_store, repair_store
from logfs.core.configtext import parse_store_config
from logfs.core.errors import LinkInStore
from logfs.core.format.encode import encode_values
from logfs.core.store import Store

NOW_MS = 1_700_000_000_000
SEGMENT = "00000000000000000000"


def tree(root: Path) -> dict[str, tuple[str, bytes | str, int]]:
    """Every entry under ``root`` (links not followed): kind, bytes or link target, and mtime in ns."""
    out: dict[str, tuple[str, bytes | str, int]] = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory, name)
            st = path.lstat()
            if path.is_symlink():
                out[str(path.relative_to(root))] = ("link", os.readlink(path), st.st_mtime_ns)
            elif path.is_dir():
                out[str(path.relative_to(root))] = ("dir", b"", st.st_mtime_ns)
            else:
                out[str(path.relative_to(root))] = ("file", path.read_bytes(), st.st_mtime_ns)
    return out


def make_store(path: Path) -> None:
    """Topic ``t``: partition 0 with three records (a .log, its indexes, a leader-epoch-checkpoint), partition 1
    empty; closed cleanly."""
    with Store.open(path, parse_store_config([])) as store:
        store.create_topic("t", 2)
        for i in range(3):
            store.log("t", 0).append_as_leader(bytearray(encode_values([b"v%d" % i], NOW_MS)), 0, NOW_MS)


def open_store(path: Path) -> Store:
    return Store.open(path, parse_store_config([]))


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the store with a file of someone else's in it."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "precious").write_bytes(b"not the store's\n")
    return out


@pytest.mark.parametrize(
    "name",
    [
        f"t-0/{SEGMENT}.log",
        f"t-0/{SEGMENT}.index",
        f"t-0/{SEGMENT}.timeindex",
        f"t-0/{SEGMENT}.txnindex",  # made only by aborted transactions: a link in its place is refused all the same
        f"t-0/{SEGMENT}.snapshot",
        "t-0/leader-epoch-checkpoint",
        f"t-1/{SEGMENT}.log",  # the active (and only) segment of an empty partition
        "replication-offset-checkpoint",  # the store directory's own files too
        "meta.properties",
    ],
)
def test_a_store_file_that_is_a_link_stops_the_open_and_nothing_outside_changes(
    tmp_path: Path, outside: Path, name: str
) -> None:
    store_path = tmp_path / "store"
    make_store(store_path)
    target = outside / "precious"
    original = store_path / name
    kept = original.read_bytes() if original.exists() else None
    original.unlink(missing_ok=True)
    original.symlink_to(target)
    before = tree(outside)
    with pytest.raises(LinkInStore) as caught:
        open_store(store_path)
    assert caught.value.path == str(original)
    assert str(original) in str(caught.value)
    assert tree(outside) == before
    original.unlink()  # the link gone (and the file back), the store opens: the failed open let go of the lock
    if kept is not None:
        original.write_bytes(kept)
    with open_store(store_path) as store:
        assert store.log("t", 0).log_end_offset == 3
    assert tree(outside) == before


@pytest.mark.parametrize("into", ["outside", "another partition"])
def test_a_partition_directory_that_is_a_link_stops_the_open(tmp_path: Path, outside: Path, into: str) -> None:
    store_path = tmp_path / "store"
    make_store(store_path)
    link = store_path / "t-1"
    if into == "outside":
        shutil.move(store_path / "t-1", outside / "t-1")
        link.symlink_to(outside / "t-1")
    else:
        shutil.rmtree(link)
        link.symlink_to(store_path / "t-0")
    before = tree(outside), tree(store_path / "t-0")
    with pytest.raises(LinkInStore, match=f"^{link} is a symbolic link"):
        open_store(store_path)
    assert (tree(outside), tree(store_path / "t-0")) == before


def test_a_lock_file_that_is_a_link_creates_nothing_where_it_points(tmp_path: Path, outside: Path) -> None:
    store_path = tmp_path / "store"
    make_store(store_path)
    (store_path / ".lock").unlink()
    (store_path / ".lock").symlink_to(outside / "made-by-logfs")
    before = tree(outside)
    with pytest.raises(LinkInStore, match=r"\.lock is a symbolic link"):
        open_store(store_path)
    assert tree(outside) == before
    assert not (outside / "made-by-logfs").exists()


def test_a_link_in_place_of_a_new_partitions_directory_refuses_that_creation(tmp_path: Path, outside: Path) -> None:
    store_path = tmp_path / "store"
    with open_store(store_path) as store:
        (store_path / "new-0").symlink_to(outside)  # put there while the store is open
        before = tree(outside)
        with pytest.raises(LinkInStore, match="new-0 is a symbolic link"):
            store.create_topic("new")
        assert not store.has_topic("new")
        assert tree(outside) == before
        (store_path / "new-0").unlink()
        store.create_topic("new")
        assert store.partitions("new") == [0]
    assert tree(outside) == before


def test_check_reports_every_link_as_damage_and_repair_refuses(tmp_path: Path, outside: Path) -> None:
    store_path = tmp_path / "store"
    make_store(store_path)
    shutil.move(store_path / "t-1", outside / "t-1")
    (store_path / "t-1").symlink_to(outside / "t-1")
    log = store_path / "t-0" / f"{SEGMENT}.log"
    shutil.move(log, outside / "segment.log")
    log.symlink_to(outside / "segment.log")
    before = tree(outside)
    findings = check_store(store_path)
    links = [f for f in findings if f.kind == "link"]
    assert [(f.path, f.damage) for f in links] == [(log, True), (store_path / "t-1", True)]
    assert all("is a symbolic link" in f.detail for f in links)
    inside = tree(store_path)
    with pytest.raises(LinkInStore, match=f"^{log} is a symbolic link"):
        repair_store(store_path)
    assert tree(outside) == before
    after = tree(store_path)
    assert after.pop(".lock")[1] == f"{os.getpid()}\n".encode()  # the lock was taken (and holds this pid) …
    inside.pop(".lock")
    assert after == inside  # … and nothing else changed: the clean-shutdown marker stays
