"""The README's main command runs in CI: ``scripts/demo`` (set-up, then the whole pipeline of docs/spark.md, "The
pipeline: `scripts/demo`", with a real mount and a real Spark job), on a store and mount point of the test's own,
unmounted cleanly, within the two minutes the issue allows."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_demo_runs_the_pipeline_end_to_end_and_unmounts(tmp_path: Path) -> None:
    store, mnt = tmp_path / "store", tmp_path / "mnt"
    started = time.monotonic()
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo"), "--store", str(store), "--mount", str(mnt), "--events", "5000"],
        cwd=ROOT, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    out = done.stdout
    assert done.returncode == 0, f"scripts/demo exited {done.returncode}:\n{out}\n{done.stderr[-4000:]}"
    for step in range(1, 7):
        assert f"[{step}/6]" in out
    assert "compresscodec: zstd crc=ok" in out  # logfs dump of the segment the app's producer batches went to
    assert "read 6,000 click events from 3 partition(s)" in out
    assert "counts add up to the 6,000 events produced" in out
    assert "unmounted cleanly" in out and ": ok (" in out
    assert not os.path.ismount(mnt)
    assert elapsed < 120, f"the demo took {elapsed:.0f} s"
