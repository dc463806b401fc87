"""Owners in the store (core/owners.py): recorded durably one file per name, read back by a store's open, and
never read from disk after it (a shared mount asks on every getattr)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from logfs.core.errors import StorageError
from logfs.core.owners import Owner, Owners, default_owner
from logfs.core.store import NewTopic, Store
from logfs.core.storeconfig import StoreConfig


def test_owners_survive_a_reopen_and_go_with_their_topic(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "s", StoreConfig())
    try:
        alice = Owner(1000, 1000, 0o750)
        store.create_topics([NewTopic("t", 2, owner=alice)])
        store.create_topic("plain")
        store.owners.set(Owners.root_file(), Owner(0, 0, 0o1777))
        long_name = "x" * 249  # a file name too long for the plain form: shortened with a digest
        store.create_topics([NewTopic(long_name, owner=alice)])
        assert len(Owners.topic_file(long_name).encode()) <= 255 - len(".tmp")
    finally:
        store.close()
    assert (tmp_path / "s" / ".logfs-topic.t.owner").read_text() == "1000 1000 750\n"
    store = Store.open(tmp_path / "s", StoreConfig())
    try:
        assert store.owners.get(Owners.topic_file("t")) == alice
        assert store.owners.get(Owners.topic_file(long_name)) == alice
        assert store.owners.get(Owners.topic_file("plain")) is None  # made without one: the mount's default
        assert store.owners.get(Owners.root_file()) == Owner(0, 0, 0o1777)
        (tmp_path / "s" / ".logfs-topic.late.owner").write_text("5 5 700\n")  # behind the open store's back
        assert store.owners.get(Owners.topic_file("late")) is None  # never read after the open: no disk on getattr
        store.delete_topic("t")
        assert store.owners.get(Owners.topic_file("t")) is None
        assert not (tmp_path / "s" / ".logfs-topic.t.owner").exists()
    finally:
        store.close()


@pytest.mark.parametrize("text", [b"", b"1000 1000\n", b"a b c\n", b"1 1 99999\n", b"-1 0 755\n", b"1 1 8\n"])
def test_a_damaged_owner_file_is_named_when_the_store_opens(tmp_path: Path, text: bytes) -> None:
    Store.open(tmp_path / "s", StoreConfig()).close()
    (tmp_path / "s" / ".logfs-topic.t.owner").write_bytes(text)
    with pytest.raises(StorageError, match=r"\.logfs-topic\.t\.owner"):
        Store.open(tmp_path / "s", StoreConfig())


def test_the_default_owner_is_this_process_at_0755() -> None:
    assert default_owner() == Owner(os.getuid(), os.getgid(), 0o755)
