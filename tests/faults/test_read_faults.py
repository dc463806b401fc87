"""Read faults under a live mount (issue 16): EIO from the disk, and a bit flipped in a stored batch, fail that read
with EIO — in every rendering, ``.kafka`` included (a client never receives bytes known to be bad) — while the mount
stays up and online; reads succeed again once the disk does."""

from __future__ import annotations

import errno
import json
import re

import pytest
from conftest import errno_of, make_topic, write_all
from faultstore import FaultyStore, expect_online, expect_survivors, metrics_text, partition_state

SEGMENT = "store/t-0/*.log"
LINES = b"".join(b"record-%04d %s\n" % (i, b"x" * 40) for i in range(200))  # one write: one batch


@pytest.mark.parametrize("suffix", ["", ".jsonl", ".kafka"])
def test_a_bit_flipped_on_read_fails_the_read_with_eio(faulty: FaultyStore, suffix: str) -> None:
    faulty.start()
    write_all(make_topic(faulty.mnt, "t") / "0" / "append", LINES)
    view = faulty.mnt / "t" / "0" / "at" / f"earliest{suffix}"
    # The view's first read is under the fault: every byte it renders comes off the disk now (a read of a range
    # rendered before may be answered from the mount's memory, which holds only bytes that passed).
    faulty.fault("pread", SEGMENT, errno=None, flip=True, times=0)
    assert errno_of(view.read_bytes) == errno.EIO
    assert any(f["op"] == "pread" for f in faulty.fired())
    assert faulty.mount is not None
    assert re.search(r"00000000000000000000\.log.*(position|byte)", faulty.mount.log_text()), "the log names no batch"
    faulty.ffs.schedule([])
    good = view.read_bytes()  # nothing bad was kept: the next read of the healthy bytes succeeds, and is right
    if suffix == "":
        assert good == LINES
    elif suffix == ".jsonl":
        assert [json.loads(line)["value"] for line in good.splitlines()] == LINES.decode().splitlines()
    else:
        (segment,) = faulty.disk_store.glob("t-0/*.log")
        assert good == segment.read_bytes()  # the stored batch, unchanged
    assert not partition_state(faulty.mnt, "t").get("offline")
    acked = expect_online(faulty, "t")
    expect_survivors(faulty, "t", [*LINES.splitlines(), *acked])


def test_eio_on_read_fails_the_read_and_is_counted(faulty: FaultyStore) -> None:
    faulty.start()
    write_all(make_topic(faulty.mnt, "t") / "0" / "append", LINES)
    view = faulty.mnt / "t" / "0" / "at" / "earliest"
    faulty.fault("pread", SEGMENT, times=0)
    assert errno_of(view.read_bytes) == errno.EIO
    assert re.search(r'^logfs_errors_total\{errno="EIO"\} [1-9]', metrics_text(faulty.mnt), re.M)
    assert faulty.mount is not None and "00000000000000000000.log" in faulty.mount.log_text()
    faulty.ffs.schedule([])
    assert view.read_bytes() == LINES
    acked = expect_online(faulty, "t")
    expect_survivors(faulty, "t", [*LINES.splitlines(), *acked])
