"""Listings name files without looking them up (mount/direntry.py; docs/mount.md, "Request costs at scale").

A READDIRPLUS entry with node id 0 lists a name, its inode number and type, and nothing more; the first stat or
open of it is a LOOKUP with exact attributes then. What a user sees must not change: names and types, inode numbers
that match stat's for stable names, sizes exact whenever they are asked for, even when the bytes changed after the
listing. What changes is what a listing costs: no write-file inode, no ``state`` rendered, no ``hw/`` file sized.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pyfuse3
from conftest import Mount, make_topic, write_all

from logfs.mount import direntry


def _fresh_inodes(mnt: Path) -> int:
    for line in (mnt / ".logfs/metrics").read_text().splitlines():
        if line.startswith("logfs_fresh_inodes "):
            return int(line.split()[1])
    raise AssertionError("no logfs_fresh_inodes in .logfs/metrics")


def _append(partition: Path, count: int, tag: str) -> None:
    lines = "".join(json.dumps({"value": f"{tag}-{i}", "key": f"k{i % 3}"}) + "\n" for i in range(count))
    write_all(partition / "append.jsonl", lines.encode())


def test_the_installed_pyfuse3_lets_an_entry_carry_no_node_id() -> None:
    """The layout check passes on the pyfuse3 the project installs: otherwise every listing silently falls back to
    full attributes (correct, but an ``ls -R`` of 10,000 partitions a third slower), and this test says so."""
    entry = direntry.listed_only(12345, stat.S_IFREG | 0o444)
    assert entry is not None, "pyfuse3's EntryAttributes layout changed: listings send full attributes"
    assert isinstance(entry, pyfuse3.EntryAttributes)
    assert entry.st_ino == 0  # the node id (pyfuse3's getter reads fuse_entry_param.ino)
    assert stat.S_ISREG(entry.st_mode)
    # an ordinary entry is untouched: st_ino is both the node id and the dirent's inode number
    full = pyfuse3.EntryAttributes()
    full.st_ino = 777
    assert full.st_ino == 777


def test_a_listing_takes_no_lookup_of_a_file_and_shows_every_name_and_type(mounted: Mount) -> None:
    mnt = mounted.path
    topic = make_topic(mnt, "listed", partitions=3)
    for p in range(3):
        _append(topic / str(p), 5, f"p{p}")
    before = _fresh_inodes(mnt)
    out = subprocess.run(["ls", "-R", str(topic)], capture_output=True, text=True, check=True, timeout=30).stdout
    after = _fresh_inodes(mnt)
    # 3 write files a partition and 2 of the topic's would each have been a fresh inode (READDIRPLUS lookups)
    assert after == before, f"the listing made {after - before} fresh inodes"
    for name in ("append", "append.jsonl", "config", "0", "1", "2"):
        assert f"\n{name}\n" in f"\n{out}"
    for name in ("at", "batches", "committed", "follow", "hw", "state", "leader", "00000000000000000000.jsonl"):
        assert f"\n{name}\n" in out
    with os.scandir(topic / "0") as it:
        kinds = {e.name: (e.is_dir(follow_symlinks=False), e.is_file(follow_symlinks=False)) for e in it}
    assert kinds == {
        "append": (False, True), "append.jsonl": (False, True), "batches": (False, True), "state": (False, True),
        "leader": (False, True), "at": (True, False), "committed": (True, False), "follow": (True, False),
        "hw": (True, False),
    }  # fmt: skip


def test_a_listed_stable_name_has_the_inode_number_stat_gives(mounted: Mount) -> None:
    mnt = mounted.path
    topic = make_topic(mnt, "inodes", partitions=1)
    _append(topic / "0", 3, "x")
    for directory in (topic, topic / "0", topic / "0" / "hw", topic / "0" / "committed" / "hw", mnt / ".logfs"):
        with os.scandir(directory) as it:
            entries = list(it)
        assert entries, directory
        for e in entries:
            if e.name in ("append", "append.jsonl", "batches", "partitions", "producer-id"):
                assert e.inode() != 0  # fresh per lookup: any number but 0 (glibc's readdir skips 0)
                continue
            assert e.inode() == os.stat(e.path).st_ino, e.path


def test_sizes_are_exact_when_asked_even_after_the_records_moved_on_since_the_listing(mounted: Mount) -> None:
    mnt = mounted.path
    partition = make_topic(mnt, "sizes", partitions=1) / "0"
    _append(partition, 4, "a")
    listed = sorted(os.listdir(partition / "hw"))
    state_listed = os.listdir(partition)
    assert "state" in state_listed and len(listed) == 1
    _append(partition, 6, "b")  # after the listing: the hw/ file and state grow
    hw_file = partition / "hw" / listed[0]
    data = hw_file.read_bytes()
    assert data.count(b"\n") == 10
    assert os.stat(hw_file).st_size == len(data)
    assert os.stat(partition / "state").st_size == len((partition / "state").read_bytes())
    # `ls -l` (a stat of each listed name) and `wc -c` agree on every read file of the partition
    out = subprocess.run(["ls", "-ln", str(partition / "hw"), str(partition / "committed" / "hw")],
                         capture_output=True, text=True, check=True, timeout=30).stdout  # fmt: skip
    sizes = [int(line.split()[4]) for line in out.splitlines() if line.startswith("-")]
    assert sizes == [len(data), len((partition / "committed" / "hw" / listed[0]).read_bytes())]


def test_a_listing_of_dot_logfs_renders_nothing_and_its_files_still_read(mounted: Mount) -> None:
    """``.logfs/partitions`` is O(partitions) to render: a listing of ``.logfs/`` no longer renders it."""
    mnt = mounted.path
    make_topic(mnt, "dotlogfs", partitions=2)
    names = set(os.listdir(mnt / ".logfs"))
    assert {"partitions", "metrics", "leader", "errors"} <= names
    rows = [json.loads(line) for line in (mnt / ".logfs/partitions").read_text().splitlines()]
    assert {(r["topic"], r["partition"]) for r in rows} >= {("dotlogfs", 0), ("dotlogfs", 1)}
    assert os.stat(mnt / ".logfs/metrics").st_size > 0
