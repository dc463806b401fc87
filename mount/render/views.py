"""What the read files of a partition hold (docs/mount.md, "Reads"), as pure functions: no pyfuse3, no trio.

The mount (``mount/reads.py``) resolves a name under ``<topic>/<partition>/`` and calls in here:

* ``at/<name>``: ``mount/names.py`` splits the name into a stem and a :class:`Format`; :func:`resolve_start`
  (or the name's range for ``<start>-<end>``) gives the start offset; the end is the HW at lookup (:func:`view_end`);
  then ``mount/render/rangeview.py``'s ``open_range`` fixes a ``RangeView``, an immutable snapshot whose exact size is
  known at once.
* ``hw/``: :func:`hw_files` lists one file per segment, each again an ``open_range`` per lookup.
* ``follow/<name>``: :func:`render_follow_chunk` renders whole records from the reader's offset up to the HW.
* ``state``: :func:`render_state`.

Every read of records asks the core for its range (``Log.read_range``, ``core/log/rangeread.py``): the isolation
bound, the aborted transactions, the batches at both ends, the checks of every batch, the pins, and the rule that
turns a segment removed by retention under a reader into OffsetOutOfRange live there, once.

Read committed (``committed/``; docs/mount.md, "Files, modes and caching"). ``hw_files(log, committed=True)`` and
``render_follow_chunk(..., committed=True)`` are bounded by the caller at the last stable offset (:func:`view_end`) and
leave out the batches a read_committed consumer skips: control batches (which plain and JSON lines never show anyway)
and transactional batches of aborted transactions (the range read's ``aborted`` filter, one per chunk). Below the LSO
every transaction is decided, so ``hw/`` files only grow.

Threads: every function may be called from any thread; :func:`resolve_start` (``@`` lookups) and
:func:`render_follow_chunk` do blocking disk I/O (call them from a worker thread, never the trio thread).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from logfs.core.format.batch import read_header
from logfs.core.log.log import Log
from logfs.core.log.storedbatches import SCAN_READ_BYTES
from logfs.core.logdirfailure import offline_state
from logfs.core.offsets import Isolation
from logfs.mount.names import hw_file_name, parse_time
from logfs.mount.render.rendersize import RenderCache, RenderCacheStatistics
from logfs.mount.render.renderspan import Format, render_batch

# --- where a view starts and ends -----------------------------------------------------------------------------------


def view_end(log: Log, committed: bool) -> int:
    """Where the views of a partition end now: the HW, or under ``committed/`` the last stable offset (the core's
    isolation bound, ``Log.bound``). Any thread."""
    return log.bound(Isolation.TXN_COMMITTED if committed else Isolation.HIGH_WATERMARK)


def resolve_start(log: Log, stem: str, committed: bool = False) -> int:
    """The start offset a stem names: ``earliest`` → the log start offset; ``<digits>`` → that offset;
    ``@<time>`` (epoch ms or ISO-8601: ``mount/names.py``'s :func:`~logfs.mount.names.parse_time`) → the offset of
    the first record with timestamp ≥ that time (time index lookup), or the HW when none is that late (an empty
    view); ``latest`` → the HW. ``committed``: the LSO where the HW is said. ValueError for anything else (ranges
    included: see :func:`parse_range`). Any thread; the ``@`` lookup reads indexes and batches."""
    if stem == "earliest":
        return log.log_start_offset
    if stem == "latest":
        return view_end(log, committed)
    if stem.isascii() and stem.isdigit():
        return int(stem)
    if stem.startswith("@"):
        found = log.fetch_offset_by_timestamp(parse_time(stem[1:]))  # ValueError for a time it does not take
        return view_end(log, committed) if found is None else found.offset
    raise ValueError(f"{stem!r} names no start offset")


# --- hw/ ------------------------------------------------------------------------------------------------------------


def hw_files(log: Log, committed: bool = False) -> list[tuple[str, int, int]]:
    """The ``hw/`` directory: one ``(name, start, end)`` per segment holding committed records at or after the log
    start offset, ``name = <20-digit base offset>.jsonl``, ``start = max(base, log start)``,
    ``end = min(next segment's base, HW)`` (the LSO for ``committed/hw/``: a segment whose offsets below it are all
    aborted or markers has a file, empty). Any thread; reads no file."""
    segments = log.segments
    log_start, hw = log.log_start_offset, view_end(log, committed)
    files = []
    for n, segment in enumerate(segments):
        start = max(segment.base_offset, log_start)
        end = min(segments[n + 1].base_offset, hw) if n + 1 < len(segments) else hw
        if start < end:
            files.append((hw_file_name(segment.base_offset), start, end))
    return files


# --- follow/ --------------------------------------------------------------------------------------------------------


def render_follow_chunk(
    log: Log,
    cache: RenderCache,
    topic: str,
    partition: int,
    fmt: Format,
    offset: int,
    end_offset: int,
    max_bytes: int,
    committed: bool = False,
) -> tuple[bytes, int]:
    """Whole rendered records from ``offset`` up to ``end_offset`` (the HW a follow reader saw), at most about
    ``max_bytes`` but at least one batch's worth when there is one, and the offset to continue from.

    ``committed`` (``end_offset`` then at most the LSO): the batches of aborted transactions are passed over like
    control batches, and ``.kafka`` passes over control batches too.

    Plain and JSON lines start exactly at ``offset`` and stop before ``end_offset``; ``.kafka`` gives whole batches
    (the next offset is then after the last batch). Control batches render as nothing but are passed over, so
    ``(b"", next)`` with ``next > offset`` means "call again". ``offset >= end_offset`` → ``(b"", offset)``.
    OffsetOutOfRange below the log start or above the LEO. Renderings go through the cache's shared LRU, so many
    followers at the same position render each batch once. Blocking disk I/O; any thread.
    """
    isolation = Isolation.TXN_COMMITTED if committed else Isolation.HIGH_WATERMARK
    parts: list[bytes | memoryview] = []
    total = scanned = 0
    next_offset = offset
    # Retention removing the segment under the reader: OffsetOutOfRange (the core's rule, core/log/rangeread.py).
    with log.read_range(offset, end_offset, isolation) as read:
        end = read.end
        skip = read.aborted
        if skip is not None and not skip and fmt is not Format.KAFKA:
            skip = None  # control batches render as nothing anyway: the HW path as it is
        for part in read:
            stored = part.stored
            index = None if fmt is Format.KAFKA else cache.segment_index(stored, fmt, topic, partition)
            for buf, at, size, position, _ in stored.batches(part.lo, part.hi):
                header = read_header(buf, at)
                data: bytes | memoryview
                if skip is not None and skip.leaves_out(header):
                    data = b""
                    after = header.last_offset + 1 if index is None else min(header.last_offset + 1, end)
                elif index is None:
                    data, after = buf[at : at + size], header.last_offset + 1
                else:
                    lo = next_offset if next_offset > header.base_offset else None
                    hi = end if end <= header.last_offset else None
                    data = cache.rendered(
                        (index.token, position, position + size, lo, hi),
                        functools.partial(render_batch, buf, at, fmt, topic, partition, lo, hi),
                    )
                    after = min(header.last_offset + 1, end)
                if parts and total + len(data) > max_bytes:
                    return b"".join(parts), next_offset
                if data:
                    parts.append(data)
                total += len(data)
                scanned += size
                next_offset = read.offset = after
                if total >= max_bytes or scanned >= max(max_bytes, SCAN_READ_BYTES) or next_offset >= end:
                    return b"".join(parts), next_offset
    return b"".join(parts), next_offset


# --- state ----------------------------------------------------------------------------------------------------------


def render_state(
    log: Log,
    topic: str,
    partition: int,
    *,
    role: str = "leader",
    leader_epoch: int | None = None,
    isr: Sequence[int] = (0,),
    replicas: Mapping[int, Mapping[str, int]] | None = None,
    open_transactions: Sequence[Mapping[str, int]] | None = None,
    last_stable_offset: int | None = None,
    cleaner: Mapping[str, Any] | None = None,
) -> bytes:
    """The ``state`` file (docs/replication.md, "`state` of a leader"): one compact JSON object and a newline.

    ``leader_epoch`` defaults to the latest epoch of the log's leader-epoch cache (-1 when it has none);
    ``last_stable_offset`` to the log's, ``open_transactions`` to the log's open transactions (``producer_id``,
    ``first_offset``, by first offset). Each segment gives ``base_offset``, ``size_bytes`` and
    ``largest_timestamp`` (-1 when its records carry none). ``cleaner``: a compacted topic's
    ``{"first_dirty_offset", "dirty_ratio"}`` (``mount/cleaning.py``), null for other topics. Any thread; reads each
    segment's time index once (then cached by the segment).
    """
    if open_transactions is None:
        open_transactions = [
            {"producer_id": pid, "first_offset": first}
            for pid, first in sorted(log.open_transactions(), key=lambda t: (t[1], t[0]))
        ]
    if last_stable_offset is None:
        last_stable_offset = log.last_stable_offset
    hw = log.high_watermark
    if leader_epoch is None:
        latest = log.epoch_cache.latest_epoch()
        leader_epoch = -1 if latest is None else latest
    state = {
        "topic": topic,
        "partition": partition,
        "role": role,
        "offline": offline_state(log.directory),  # issue 16: false, or the I/O failure that took the store offline
        "leader_epoch": leader_epoch,
        "log_start_offset": log.log_start_offset,
        "high_watermark": hw,
        "last_stable_offset": last_stable_offset,
        "log_end_offset": log.log_end_offset,
        "isr": list(isr),
        "replicas": {str(k): dict(v) for k, v in (replicas or {}).items()},
        "open_transactions": [dict(t) for t in open_transactions],
        "segments": [
            {"base_offset": s.base_offset, "size_bytes": s.size_bytes, "largest_timestamp": s.max_timestamp_so_far}
            for s in log.segments
        ],
        "cleaner": None if cleaner is None else dict(cleaner),  # a compacted topic's dirty section (issue 18)
    }
    return json.dumps(state, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


__all__ = [
    "Format",
    "RenderCache",
    "RenderCacheStatistics",
    "hw_files",
    "render_follow_chunk",
    "render_state",
    "resolve_start",
    "view_end",
]
