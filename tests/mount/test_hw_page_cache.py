"""An active segment's ``hw/`` file keeps the kernel's page cache between opens (issue 14: Spark's repeated reads of
unchanged data never reach the mount), and the cache never serves stale bytes: its size moves with every commit and
the kernel drops the cached pages when a getattr reports a new size, so each read, by a fresh open or a handle held
across appends, equals ``at/earliest.jsonl`` (a fresh snapshot inode)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from conftest import Mount, make_topic


def render_cache_lookups(mnt: Path) -> int:
    """Hits plus misses of the mount's render cache: every read request of a view that reaches the mount asks it."""
    text = (mnt / ".logfs" / "metrics").read_text()
    found = {m[0]: int(float(m[1])) for m in re.findall(r"^logfs_render_cache_(hits|misses)\S* (\S+)$", text, re.M)}
    assert set(found) == {"hits", "misses"}, text
    return found["hits"] + found["misses"]


def test_an_active_hw_file_is_cached_between_opens_and_never_stale(mounted: Mount) -> None:
    mnt = mounted.path
    partition = make_topic(mnt, "t") / "0"
    held = None
    try:
        for i in range(120):  # lines of odd lengths: growth often lands inside the last cached page
            with open(partition / "append", "ab") as f:
                f.write(b"x" * (i % 37) + b"-%d\n" % i)
            (hw,) = sorted((partition / "hw").iterdir())
            want = (partition / "at" / "earliest.jsonl").read_bytes()
            assert want.count(b"\n") == i + 1
            assert hw.read_bytes() == want, i
            if held is None:
                held = open(hw, "rb")  # noqa: SIM115 (held across the appends on purpose)
            held.seek(0)
            assert held.read() == want, i
        before = render_cache_lookups(mnt)
        for _ in range(3):
            assert hw.read_bytes() == want
        assert render_cache_lookups(mnt) == before, "a re-read of unchanged data reached the mount"
        with open(partition / "append", "ab") as f:
            f.write(b"one more\n")
        assert hw.read_bytes() == (partition / "at" / "earliest.jsonl").read_bytes()
        assert render_cache_lookups(mnt) > before
    finally:
        if held is not None:
            held.close()


def test_a_listing_of_a_partition_sizes_its_hw_files_exactly_as_the_log_grows(mounted: Mount) -> None:
    """A readdir of a partition directory sizes its newest ``hw/`` and ``committed/hw/`` files in the same worker
    call as ``state`` (mount/reads.py, ``render_state``): the sizes it remembers must be the files' exact sizes, and
    a moved HW must not be answered with a remembered one."""
    part = make_topic(mounted.path, "grow") / "0"
    for round_ in range(4):
        with open(part / "append", "ab") as f:
            f.write(b"".join(b"record %d of round %d, %s\n" % (n, round_, b"x" * (n * 7 % 50)) for n in range(30)))
        assert "state" in os.listdir(part)  # the readdir that sizes them
        for view in (part / "hw", part / "committed" / "hw"):
            names = sorted(os.listdir(view))
            assert names, view
            for name in names:
                assert (view / name).stat().st_size == len((view / name).read_bytes()), (round_, view, name)
