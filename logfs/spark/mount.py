"""A mount as the Spark source and sink see it: topics, partitions, ``state`` files, and the range files executors
read, with the rule for a mount that has not caught up yet (docs/spark.md, "The `logfs` data source"). No pyspark, no
pyarrow.

Paths used (docs/mount.md, "Files, modes and caching")::

    MOUNT/<topic>/                              a topic (names starting with "." are not topics)
    MOUNT/<topic>/<partition>/state             JSON: log_start_offset, high_watermark, last_stable_offset …
    MOUNT/<topic>/<partition>/at/<s>-<e>.kafka  records [s, e) as the stored RecordBatch bytes (whole batches)
    MOUNT/<topic>/<partition>/committed/at/…    the same, bounded by the last stable offset (read_committed)
    MOUNT/.logfs/partitions                     JSON lines: every partition's topic, partition and offsets

Opening a range (:func:`open_range`, on an executor). ``at/<s>-<e>.kafka`` is an immutable snapshot, so once it is
open every byte of the range can be read, even if retention deletes its segments meanwhile. The lookup answers
ENOENT in two cases, told apart by reading ``state``:

* the log now starts after ``s`` (retention or delete-records ran since the query was planned): the failOnDataLoss
  rule — fail with :class:`~logfs.spark.offsets.DataLoss`, or read from the log start offset;
* the mount's high watermark (LSO under read_committed) is below ``e``, or the partition is not there yet: this
  mount is a follower that has not caught up with the offsets the driver pinned. The task waits, re-reading
  ``state`` with a growing pause (10 ms to 500 ms), for at most ``timeout_s``, then fails with
  :class:`MountBehind` — it never returns fewer rows than were pinned.

Planning (:func:`load_catalog`, on the driver). A plan needs the offsets of every subscribed partition, and a
``subscribePattern`` needs every topic's name. ``.logfs/partitions`` gives all of them in one open (docs/mount.md);
reading each partition's ``state`` instead costs an open, a read and a close per partition (six FUSE requests),
so O(partitions) round trips per plan and per micro-batch. A mount without that file (an older logfs) is planned
the old way: directory listings and one ``state`` file per partition, read when asked.

Threads: any; the functions block on the mount.
"""

from __future__ import annotations

import errno
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from logfs.core.internaltopics import INTERNAL_TOPICS
from logfs.spark.offsets import OffsetRange, PartitionState, TopicPartition, clamp_start

WAIT_FIRST_S = 0.01
WAIT_MAX_S = 0.5
LISTING = Path(".logfs") / "partitions"


class MountBehind(RuntimeError):
    """The mount an executor reads does not hold a range the driver pinned, and did not catch up in time."""


def list_topics(mount: Path) -> list[str]:
    """The topics of a mount, sorted (directories whose names do not start with ``.``), without the internal ones
    (``__consumer_offsets``, ``__transaction_state``: Kafka's consumers leave internal topics out of patterns,
    exclude.internal.topics)."""
    out = []
    with os.scandir(mount) as entries:
        for entry in entries:
            if not entry.name.startswith(".") and entry.name not in INTERNAL_TOPICS and entry.is_dir():
                out.append(entry.name)
    return sorted(out)


def list_partitions(mount: Path, topic: str) -> list[int]:
    """The partition numbers of ``topic``, sorted; [] when the topic does not exist."""
    try:
        names = os.listdir(mount / topic)
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if n.isascii() and n.isdigit())


def read_state(mount: Path, topic: str, partition: int) -> PartitionState | None:
    """The offsets in ``<topic>/<partition>/state``; None when the partition does not exist."""
    try:
        raw = (mount / topic / str(partition) / "state").read_bytes()
    except FileNotFoundError:
        return None
    obj = json.loads(raw)
    return PartitionState(
        log_start_offset=int(obj["log_start_offset"]),
        high_watermark=int(obj["high_watermark"]),
        last_stable_offset=int(obj.get("last_stable_offset", obj["high_watermark"])),
    )


def offset_for_timestamp(
    mount: Path, topic: str, partition: int, timestamp: int, *, read_committed: bool
) -> int | None:
    """The offset of the partition's first record with a timestamp at or after ``timestamp`` (epoch ms), below its
    HW (its LSO under read_committed); None when no record is that late, or the partition is gone. It is the first
    line of ``at/@<timestamp>.jsonl`` (the mount finds it with the time index); only that line is read."""
    base = mount / topic / str(partition)
    path = (base / "committed" if read_committed else base) / "at" / f"@{timestamp}.jsonl"
    try:
        with open(path, "rb") as f:
            line = f.readline()
    except FileNotFoundError:
        return None
    if not line:
        return None
    return int(json.loads(line)["offset"])


def partitions_of(mount: Path, topics: Iterable[str]) -> list[TopicPartition]:
    return [(t, p) for t in topics for p in list_partitions(mount, t)]


def read_states(mount: Path, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionState]:
    """The states of ``partitions``; a partition that does not exist (any more) is left out."""
    out = {}
    for topic, partition in partitions:
        state = read_state(mount, topic, partition)
        if state is not None:
            out[(topic, partition)] = state
    return out


def read_listing(mount: Path) -> dict[TopicPartition, PartitionState] | None:
    """Every partition's offsets from ``.logfs/partitions`` (one open); None when the mount has no such file."""
    try:
        raw = (mount / LISTING).read_bytes()
    except FileNotFoundError:
        return None
    out = {}
    # One json.loads of the lines as an array: a third of the time of one call per line (10,000 lines).
    for obj in json.loads(b"[" + raw.rstrip(b"\n").replace(b"\n", b",") + b"]"):
        out[(str(obj["topic"]), int(obj["partition"]))] = PartitionState(
            log_start_offset=int(obj["log_start_offset"]),
            high_watermark=int(obj["high_watermark"]),
            last_stable_offset=int(obj["last_stable_offset"]),
        )
    return out


@dataclass(frozen=True, slots=True)
class Catalog:
    """The partitions of a mount as a planner sees them: from ``.logfs/partitions`` when ``listing`` is not None
    (everything read at once, so every answer is from one moment of the mount; ``by_topic``: its partition numbers
    per topic, sorted), else from the directories and ``state`` files, read when asked (a mount without the file)."""

    mount: Path
    listing: dict[TopicPartition, PartitionState] | None = None
    by_topic: dict[str, list[int]] = field(default_factory=dict)

    def topics(self) -> list[str]:
        """The topics a pattern may match, sorted: every topic but the internal ones."""
        if self.listing is None:
            return list_topics(self.mount)
        return sorted(t for t in self.by_topic if t not in INTERNAL_TOPICS)

    def has_topic(self, topic: str) -> bool:
        if self.listing is None:
            return (self.mount / topic).is_dir()
        return topic in self.by_topic

    def partitions_of(self, topics: Iterable[str]) -> list[TopicPartition]:
        """The partitions of ``topics``, in that order of topics, each topic's by number."""
        if self.listing is None:
            return partitions_of(self.mount, topics)
        return [(t, p) for t in topics for p in self.by_topic.get(t, ())]

    def states(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionState]:
        """The states of ``partitions``; a partition that does not exist is left out."""
        if self.listing is None:
            return read_states(self.mount, partitions)
        return {tp: self.listing[tp] for tp in partitions if tp in self.listing}


def load_catalog(mount: Path, *, use_listing: bool = True) -> Catalog:
    """The mount's catalog now: through ``.logfs/partitions`` when the mount has it (and ``use_listing``)."""
    listing = read_listing(mount) if use_listing else None
    if listing is None:
        return Catalog(mount)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in listing:
        by_topic.setdefault(topic, []).append(partition)
    return Catalog(mount, listing, {t: sorted(ps) for t, ps in by_topic.items()})


def range_path(mount: Path, rng: OffsetRange, read_committed: bool) -> Path:
    base = mount / rng.topic / str(rng.partition)
    if read_committed:
        base = base / "committed"
    return base / "at" / f"{rng.start}-{rng.end}.kafka"


def open_range(
    mount: Path,
    rng: OffsetRange,
    *,
    read_committed: bool,
    fail_on_data_loss: bool,
    timeout_s: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[BinaryIO, OffsetRange] | None:
    """Open the ``.kafka`` file of ``rng`` (see the module docstring): the open file and the range it holds (its
    start moved up to the log start offset when failOnDataLoss is false), or None when nothing of the range is
    left. Raises DataLoss, MountBehind, or OSError for anything else the mount answers."""
    deadline = clock() + timeout_s
    pause = WAIT_FIRST_S
    while True:
        if rng.size <= 0:
            return None
        try:
            return open(range_path(mount, rng, read_committed), "rb", buffering=0), rng
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
        state = read_state(mount, rng.topic, rng.partition)
        if state is not None and state.log_start_offset > rng.start:
            start = clamp_start(rng.topic, rng.partition, rng.start, state.log_start_offset, fail_on_data_loss)
            rng = OffsetRange(rng.topic, rng.partition, min(start, rng.end), rng.end)
            continue
        end = None if state is None else state.end_offset(read_committed)
        if clock() >= deadline:
            if end is not None and end >= rng.end:  # the state says the range is there, the lookup says not
                raise FileNotFoundError(
                    errno.ENOENT, "the mount answers ENOENT", str(range_path(mount, rng, read_committed))
                )
            holds = "does not have the partition" if end is None else f"holds offsets below {end}"
            raise MountBehind(
                f"{rng.topic}-{rng.partition}: the mount at {mount} {holds}, but the query pinned "
                f"[{rng.start}, {rng.end}); waited {timeout_s:g} s for it to catch up (a follower behind its "
                "leader?). The option kafkaConsumer.pollTimeoutMs sets the wait."
            )
        sleep(min(pause, max(deadline - clock(), 0.0)))
        pause = min(pause * 2, WAIT_MAX_S)
