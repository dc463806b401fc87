"""``.logfs/partitions`` through a real mount (docs/mount.md): one JSON line per partition with the offsets its
``state`` file shows, sorted; a snapshot whose stat size, fstat size and bytes agree for cat, wc, stat and Python;
topics created, written, extended and deleted show up in the next open, never in a handle already open.
"""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
from pathlib import Path

from conftest import Mount, errno_of, make_topic, state, write_all

FIELDS = ["topic", "partition", "log_start_offset", "high_watermark", "last_stable_offset", "log_end_offset"]


def listing_path(mnt: Path) -> Path:
    return mnt / ".logfs" / "partitions"


def read_listing(mnt: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in listing_path(mnt).read_bytes().splitlines()]


def read_opens(mnt: Path, kind: str) -> int:
    found = re.search(rf'^logfs_read_opens_total\{{file="{kind}"\}} (\d+)$', (mnt / ".logfs/metrics").read_text(), re.M)
    return int(found.group(1)) if found else 0


def test_each_line_is_what_state_shows_sorted(mounted: Mount) -> None:
    _, mnt = mounted
    make_topic(mnt, "b-topic", 3)
    make_topic(mnt, "a-topic", 2)
    write_all(mnt / "b-topic" / "1" / "append", b"".join(b"r%d\n" % i for i in range(7)))
    write_all(mnt / "a-topic" / "0" / "append", b"x\ny\nz\n")
    (mnt / ".logfs" / "delete-records").write_text("b-topic 1 4\n")  # the log start moves to 4
    os.mkdir(mnt / ".logfs" / "transactions" / "job")  # an open transaction holds the LSO of a-topic/1 back
    write_all(mnt / ".logfs" / "transactions" / "job" / "a-topic" / "1" / "append", b"t1\nt2\n")
    write_all(mnt / "a-topic" / "1" / "append", b"after\n")
    try:
        lines = read_listing(mnt)
        keys = [(str(d["topic"]), int(d["partition"])) for d in lines]  # type: ignore[call-overload]
        assert keys == sorted(keys) and len(set(keys)) == len(keys)
        assert {k for k in keys if not k[0].startswith("_")} == {("a-topic", 0), ("a-topic", 1), ("b-topic", 0),
                                                                  ("b-topic", 1), ("b-topic", 2)}  # fmt: skip
        for line in lines:
            assert list(line) == FIELDS
            s = state(mnt, str(line["topic"]), int(line["partition"]))  # type: ignore[call-overload]
            assert {f: s[f] for f in FIELDS} == line
        by_key = {(d["topic"], d["partition"]): d for d in lines}
        assert by_key[("b-topic", 1)]["log_start_offset"] == 4 and by_key[("b-topic", 1)]["high_watermark"] == 7
        moved = by_key[("a-topic", 1)]
        assert (moved["last_stable_offset"], moved["high_watermark"], moved["log_end_offset"]) == (0, 3, 3)
    finally:
        (mnt / ".logfs" / "transactions" / "job" / "control").write_text("abort\n")
    assert {f: state(mnt, "a-topic", 1)[f] for f in FIELDS} == read_listing(mnt)[1]  # LSO past the abort marker


def test_size_is_exact_for_stat_wc_cat_and_python(mounted: Mount) -> None:
    _, mnt = mounted
    make_topic(mnt, "sized", 4)
    path = listing_path(mnt)
    size = int(subprocess.run(["stat", "-c", "%s", path], capture_output=True, text=True, check=True).stdout)
    wc = int(subprocess.run(["wc", "-c", path], capture_output=True, text=True, check=True).stdout.split()[0])
    cat = len(subprocess.run(["cat", path], capture_output=True, check=True).stdout)
    assert size == wc == cat == len(path.read_bytes()) == path.stat().st_size > 0
    # An open handle is a snapshot: writes after the open change the next open, not this one's size or bytes.
    with open(path, "rb") as f:
        before = os.fstat(f.fileno()).st_size
        write_all(mnt / "sized" / "2" / "append", b"".join(b"%d\n" % i for i in range(1000)))
        assert os.fstat(f.fileno()).st_size == before
        data = f.read()
    assert len(data) == before and b'"topic":"sized","partition":2,"log_start_offset":0,"high_watermark":0,' in data
    after = path.read_bytes()
    assert b'"topic":"sized","partition":2,"log_start_offset":0,"high_watermark":1000,' in after
    assert len(after) == path.stat().st_size == before + 9  # HW, LSO and LEO: "1000" where "0" was
    mounted.allow_refusals(r"/\.logfs/partitions", "open for writing")
    assert errno_of(os.open, path, os.O_WRONLY) == errno.EACCES


def test_topics_created_deleted_and_grown_show_in_the_next_open(mounted: Mount) -> None:
    _, mnt = mounted
    path = listing_path(mnt)

    def keys() -> set[tuple[str, int]]:
        return {(str(d["topic"]), int(d["partition"])) for d in read_listing(mnt)}  # type: ignore[call-overload]

    assert not {k for k in keys() if k[0] == "t"}
    opens = read_opens(mnt, "partitions")
    states = read_opens(mnt, "state")
    make_topic(mnt, "t", 2)
    assert {k for k in keys() if k[0] == "t"} == {("t", 0), ("t", 1)}
    held = open(path, "rb")  # noqa: SIM115 - held across the changes below
    try:
        os.mkdir(mnt / "t" / "2")
        assert ("t", 2) in keys()
        (mnt / ".logfs" / "delete-topic").write_text("t\n")
        assert not {k for k in keys() if k[0] == "t"}
        assert not [d for d in read_listing(mnt) if d["topic"] == "t"]
        old = [json.loads(line) for line in held.read().splitlines()]
        assert {(d["topic"], d["partition"]) for d in old if d["topic"] == "t"} == {("t", 0), ("t", 1)}
    finally:
        held.close()
    # Five opens of the file since the count (the held one included), and not one state file opened for them.
    assert read_opens(mnt, "partitions") - opens == 5
    assert read_opens(mnt, "state") == states
