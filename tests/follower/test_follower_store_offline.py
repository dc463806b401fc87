"""A follower whose store goes offline (issue 16): it stops fetching, says so once, leaves the leader's ISR, and its
``--mount`` keeps serving what it stored.

The follower's store lives on the fault filesystem (tests/helpers/faultfs.py); the leader is a plain mount. Every
``pwrite`` of a segment then fails with EIO: the follower's next append takes its store offline.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from conftest import finish_mount, make_topic, start_mount
from faultstore import FaultFS
from follower_procs import append_lines, finish_follower, in_isr, start_follower, state, values, wait_for

# How long the test watches an offline follower for a log line per retry: the fetch backoff tops out at 1 s.
WATCH_S = 3.0


def test_a_follower_whose_store_goes_offline_stops_fetching_leaves_the_isr_and_serves_reads(tmp_path: Path) -> None:
    config = ("node.id=1", "replica.ids=1,2", "replica.lag.time.max.ms=1000")
    lead = start_mount(tmp_path / "L", tmp_path / "L.mnt", *config)
    ffs = FaultFS(tmp_path / "src", tmp_path / "ffs", tmp_path / "control")
    follower = None
    try:
        ffs.start()
        make_topic(lead.path, "t", 1)
        first = [f"before-{i}" for i in range(50)]
        append_lines(lead.path / "t" / "0" / "append", first)
        mnt = tmp_path / "F.mnt"
        follower = start_follower(lead.path, ffs.mountpoint / "F", 2, mount=mnt, log_path=tmp_path / "F.log")
        wait_for("the follower's HW at 50", lambda: state(mnt, "t", 0)["high_watermark"] == 50, lead, follower)
        wait_for("the follower in the ISR", lambda: in_isr(lead, "t", 1, 2), lead, follower)

        ffs.schedule([{"op": "pwrite", "path": "F/t-0/*.log", "nth": 1, "times": 0, "errno": "EIO"}])
        append_lines(lead.path / "t" / "0" / "append", [f"after-{i}" for i in range(20)])
        wait_for("the follower stopped fetching", lambda: "stopped fetching" in follower.log_text(), lead, follower)
        assert ffs.fired(), "no pwrite of the follower's .log failed"
        lead.allow_log(r"replica 2 leaves the ISR")
        wait_for("the follower out of the ISR", lambda: not in_isr(lead, "t", 1, 2), lead, follower)
        time.sleep(WATCH_S)  # fetching on would log a line per backoff (1 s at most) and append (pwrite) again

        text = follower.log_text()
        assert len(re.findall(r"stopped fetching", text)) == 1, text
        assert not re.search(r"cannot apply|fetch failed|Traceback", text), text
        assert len(ffs.fired()) == 1, "the follower wrote its .log again after its store went offline"
        assert values(mnt, "t", 0) == first  # the mount serves what it stored, bounded by its HW
        offline = state(mnt, "t", 0)["offline"]
        assert offline["operation"] == "write" and offline["errno"] == "EIO", json.dumps(offline)
        code = follower.stop()  # 1, as `logfs mount` of an offline store: the shutdown was not clean, and said so
        assert code == 1 and "closed without a flush" in follower.log_text(), follower.log_text()
        follower = None

        ffs.stop()  # a restart on the healthy disk: recovery, then it follows again and rejoins the ISR
        follower = start_follower(lead.path, tmp_path / "src" / "F", 2, mount=mnt, log_path=tmp_path / "F2.log")
        follower.allow_log(r"unclean|recover|truncat")
        after = [f"after-{i}" for i in range(20)]
        wait_for("the follower caught up", lambda: values(mnt, "t", 0) == first + after, lead, follower)
        wait_for("the follower back in the ISR", lambda: in_isr(lead, "t", 1, 2), lead, follower)
        finish_follower(follower)
        follower = None
    finally:
        if follower is not None:
            follower.stop()
        ffs.stop()
        finish_mount(lead)
