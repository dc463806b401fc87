"""Names without a mount: the parsers of ``mount/names.py`` (partitions, fetch files, ``at/`` and ``follow/``
names, ``hw/`` files) and the tree that resolves them (``mount/tree.py``)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from logfs.core.store import Store
from logfs.mount.errno import errno_for
from logfs.mount.errors import InvalidName, NoEntry
from logfs.mount.names import (
    ViewName,
    decode_name,
    hw_file_name,
    is_hidden,
    parse_at_name,
    parse_fetch_name,
    parse_follow_name,
    parse_partition_name,
)
from logfs.mount.nodes import Kind, Node, parent_of
from logfs.mount.render.renderspan import Format
from logfs.mount.tree import Tree


def test_partition_names_are_canonical_decimals() -> None:
    assert [parse_partition_name(n) for n in ("0", "7", "10", "4294967295")] == [0, 7, 10, 4294967295]
    for name in ("", "07", "00", "-1", "x", "1.0", "12345678901", " 1"):
        assert parse_partition_name(name) is None, name


def test_fetch_names_are_offset_dot_epoch_and_an_optional_leader_epoch() -> None:
    assert parse_fetch_name("0.-1") == (0, -1, None)
    assert parse_fetch_name("42.3") == (42, 3, None)
    assert parse_fetch_name("42.3.5") == (42, 3, 5) and parse_fetch_name("0.-1.0") == (0, -1, 0)
    for name in ("42", "42.", ".3", "042.3", "42.03", "42.-2", "x.1", "42.3.jsonl", "42.3.", "42.3.-1", "42.3.05",
                 "42.3.4.5"):  # fmt: skip
        with pytest.raises(NoEntry):
            parse_fetch_name(name)


def test_at_and_follow_names_take_their_own_stems() -> None:
    assert parse_at_name("10-20.jsonl") == ViewName("10-20", Format.JSONL, (10, 20))
    assert parse_at_name("@1700000000000.kafka") == ViewName("@1700000000000", Format.KAFKA, None)
    assert parse_follow_name("latest") == ViewName("latest", Format.PLAIN, None)
    assert parse_follow_name("0017.jsonl") == ViewName("0017", Format.JSONL, None)
    for bad in ("latest", "latest.jsonl", "x", "1-", "@", "5.txt"):
        with pytest.raises(NoEntry):
            parse_at_name(bad)
    for bad in ("1-2", "1-2.kafka", "x", "earliest.json"):
        with pytest.raises(NoEntry):
            parse_follow_name(bad)


def test_hw_file_names_sort_in_offset_order() -> None:
    names = [hw_file_name(b) for b in (0, 9, 10, 123456789)]
    assert names[0] == "00000000000000000000.jsonl" and names == sorted(names)


def test_hidden_and_undecodable_names() -> None:
    assert is_hidden(".a.crc") and is_hidden("_spark_metadata") and not is_hidden("a.b")
    assert decode_name("t\u00e9".encode()) == "t\u00e9"
    with pytest.raises(NoEntry):
        decode_name(b"\xff")
    with pytest.raises(InvalidName):
        decode_name(b"\xff", InvalidName)


def test_tree_names(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    try:
        store.create_topic("t", 2)
        tree = Tree(store)
        root = Node(Kind.ROOT)
        topic = tree.resolve(root, "t")
        assert topic == Node(Kind.TOPIC, "t")
        part = tree.resolve(topic, "1")
        assert tree.resolve(part, "batches").kind is Kind.BATCHES
        at = tree.resolve(part, "at")
        assert tree.resolve(at, "5.jsonl").kind is Kind.AT_FILE
        committed_at = tree.resolve(tree.resolve(part, "committed"), "at")
        assert committed_at.committed and parent_of(committed_at).kind is Kind.COMMITTED
        for parent, name in ((root, "u"), (root, ".x"), (topic, "2"), (topic, "01"), (part, ".a.crc"),
                             (at, "latest"), (at, "x"), (tree.resolve(part, "follow"), "1-2"),
                             (part, "_spark_metadata")):  # fmt: skip
            with pytest.raises(NoEntry) as info:
                tree.resolve(parent, name)
            assert errno_for(info.value) == errno.ENOENT
        released = []
        tree = Tree(store, on_release=released.append)
        entry = tree.add_fresh(Node(Kind.APPEND, "t", 0))
        tree.remember(entry)
        tree.opened(entry)
        tree.forget(entry.inode, 1)
        assert released == []  # still open
        tree.closed(entry)
        assert released == [entry]
        assert tree.stable_inode(topic) == tree.stable_inode(Node(Kind.TOPIC, "t"))
    finally:
        store.close()
