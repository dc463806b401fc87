"""``.logfs/partitions``: every partition of the mount and its offsets, one JSON object per line (docs/mount.md).

Why one file: a planner that needs the offsets of every partition (the Spark source, docs/spark.md, planning a
``subscribePattern`` query) would otherwise open, read and close one ``state`` file per partition — six FUSE
requests each, so O(P) round trips per plan and per micro-batch. This file answers the same question in one open:
rendering it is O(P) Python work, in a worker thread, but the client pays one open and a few reads.

Each line holds the fields of ``state`` that a planner needs, under the same names: ``topic``, ``partition``,
``log_start_offset``, ``high_watermark``, ``last_stable_offset``, ``log_end_offset``. Lines are sorted by topic,
then partition number. Each partition's offsets are read in the order log start, LSO, HW, LEO: each only moves up
and each is at most the next at any moment, so read in that order they keep ``log_start_offset <=
last_stable_offset <= high_watermark <= log_end_offset`` even while appends, fetches and retention move them
(``state`` reads the LSO before the HW for the same reason; retention may take the log start past an LSO read
earlier, which a planner treats like any retention after planning).

The file is a snapshot (``mount/tree.py``: a fresh inode per lookup whose size and bytes never change), so stat, the
fstat of an open handle and the bytes read agree, as tools and Spark need (docs/mount.md).

Threads: any (the store's maps and the logs' offsets may be read from any thread: ``core/store.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from logfs.core.checkpoint import TopicPartition
from logfs.core.log.log import Log

FIELDS = ("topic", "partition", "log_start_offset", "high_watermark", "last_stable_offset", "log_end_offset")


def partition_line(topic: str, partition: int, log: Log) -> str:
    """One line of the file (with its newline). Topic names are Kafka's ``[A-Za-z0-9._-]`` (validated when a topic
    is made), so they need no JSON escaping: an f-string is several times cheaper than ``json.dumps`` at 10,000
    lines. A name that would need escaping (none should) goes through ``json.dumps`` all the same."""
    plain = topic.isascii() and topic.isprintable() and '"' not in topic and "\\" not in topic
    name = topic if plain else json.dumps(topic)[1:-1]
    start = log.log_start_offset
    lso = log.last_stable_offset
    hw = log.high_watermark
    leo = log.log_end_offset
    return (
        f'{{"topic":"{name}","partition":{partition},"log_start_offset":{start},"high_watermark":{hw},'
        f'"last_stable_offset":{lso},"log_end_offset":{leo}}}\n'
    )


def render_partitions(logs: Iterable[tuple[TopicPartition, Log]]) -> bytes:
    """The file's bytes for ``logs`` (``Store.logs()``: sorted by topic, then partition)."""
    return "".join(partition_line(tp.topic, tp.partition, log) for tp, log in logs).encode()
