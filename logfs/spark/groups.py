"""Consumer groups for the ``logfs`` Spark source (issue 19): ``startingOffsets=group:<group>`` and
``commitToGroup=<group>``, through the mount's ``.logfs/groups/`` files (docs/mount.md). No pyspark.

* :func:`group_starting_offsets` (driver, planning): each subscribed partition's committed offset; a partition the
  group has no commit for starts where the group's ``auto.offset.reset`` says (its ``config`` file: ``earliest`` —
  the log start offset — or ``latest``, Kafka's default).
* :func:`commit_to_group` (driver, the stream reader's ``commit``, which Spark calls after it has written the
  micro-batch to its commit log): each partition's end offset is written to its ``offset`` file and fsynced
  (acks=all), unless the group's committed offset is already at or past it — a restarted query that replays a
  batch never moves the group backwards. Spark's checkpoint stays the query's source of truth; the group is for
  humans and tools (``lag``, ``logfs groups``).

Threads: any; the functions block on the mount.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from pathlib import Path

from logfs.spark.offsets import PartitionState, TopicPartition

GROUPS_DIR = Path(".logfs") / "groups"


def offset_path(mount: Path, group: str, topic: str, partition: int) -> Path:
    return mount / GROUPS_DIR / group / topic / str(partition) / "offset"


def committed_offset(mount: Path, group: str, topic: str, partition: int) -> int | None:
    """The group's committed offset of one partition; None when it has none (ENOENT)."""
    try:
        line = offset_path(mount, group, topic, partition).read_text()
    except FileNotFoundError:
        return None
    return int(line.split(maxsplit=1)[0])


def auto_offset_reset(mount: Path, group: str) -> str:
    """The group's ``auto.offset.reset`` (``latest`` when the mount does not say)."""
    try:
        text = (mount / GROUPS_DIR / group / "config").read_text()
    except FileNotFoundError:
        return "latest"
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "auto.offset.reset":
            return value.strip()
    return "latest"


def group_starting_offsets(
    mount: Path, group: str, states: Mapping[TopicPartition, PartitionState], *, read_committed: bool
) -> dict[TopicPartition, int]:
    """Where a query starting from ``group`` starts each partition of ``states``."""
    reset = auto_offset_reset(mount, group)
    out = {}
    for tp, s in states.items():
        committed = committed_offset(mount, group, *tp)
        if committed is None:
            committed = s.log_start_offset if reset == "earliest" else s.end_offset(read_committed)
        out[tp] = committed
    return out


def commit_to_group(mount: Path, group: str, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Commit ``offsets`` (a micro-batch's end offsets) to ``group``, never moving a partition backwards; each write
    is fsynced (acks=all). The offsets actually written. OSError from the mount goes up."""
    written = {}
    for (topic, partition), offset in sorted(offsets.items()):
        current = committed_offset(mount, group, topic, partition)
        if current is not None and current >= offset:
            continue
        fd = os.open(offset_path(mount, group, topic, partition), os.O_WRONLY)
        try:
            data = f"{offset}\n".encode()
            if os.write(fd, data) != len(data):
                raise OSError(errno.EIO, "a short write of a commit")
            os.fsync(fd)
        finally:
            os.close(fd)
        written[(topic, partition)] = offset
    return written
