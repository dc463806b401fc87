"""The README's failover demo runs in CI: ``scripts/cluster-demo`` (set-up, then ZooKeeper and three nodes, acks=all
writes, kill -9 of the leader, the new leader taking the writes with every acknowledged record, the old leader
rejoining) in a directory of the test's own, with everything stopped and unmounted at the end."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.alone  # a ZooKeeper cluster: session timeouts and a failover bound
@pytest.mark.timeout(240)
def test_the_cluster_demo_fails_over_and_keeps_every_acknowledged_record(tmp_path: Path) -> None:
    where = tmp_path / "demo"
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "cluster-demo"), "--dir", str(where), "--seconds", "1.5"],
        cwd=ROOT, capture_output=True, text=True, timeout=200, stdin=subprocess.DEVNULL, check=False,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, f"scripts/cluster-demo exited {done.returncode}:\n{out}\n{done.stderr[-4000:]}"
    for step in range(1, 7):
        assert f"[{step}/6]" in out
    killed = re.search(r"kill -9 node (\d)", out)
    new = re.search(r"node (\d) leads in epoch (\d+) after ([\d.]+) s", out)
    assert killed and new and killed.group(1) != new.group(1), out
    assert float(new.group(3)) <= 2.0 + 1.0 + 0.2, out  # the demo's session timeout (2000 ms) + 1 s, polled
    assert "acknowledged records missing: 0" in out
    through = re.search(r"records acknowledged \(([\d,]+) through any node\)", out)
    assert through and int(through.group(1).replace(",", "")) > 0, out  # writes forwarded by followers
    assert '"version": 3, "partitions": {"0": [' in out, out  # the assignment znode, Kafka's JSON
    zk = re.search(r"ZooKeeper at (127\.0\.0\.1:\d+) ", out)
    assert zk, out
    for node in (1, 2, 3):  # issue 23 item 8: each node's proxied zookeeper.connect is explained
        proxy = re.search(rf"--config node\.id={node} --config zookeeper\.connect=(127\.0\.0\.1:\d+) ", out)
        assert proxy and proxy.group(1) != zk.group(1) and f"node {node} {proxy.group(1)}" in out, out
    assert f"all forwarding to ZooKeeper at {zk.group(1)}" in out
    assert "every acknowledged record survived the failover" in out
    codes = re.search(r"exit codes (\{[^}]*\})", out)
    assert codes and ast.literal_eval(codes.group(1)) == {1: 0, 2: 0, 3: 0}, out
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(where) not in mounts, "a node's mount was left mounted"
