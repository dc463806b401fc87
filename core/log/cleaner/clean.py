"""One cleaning round over one log (Kafka's ``Cleaner.doClean``; docs/compaction.md, "How a log is cleaned"): the offset
map of the dirty section, then a recopy of the log from its start, merge by merge, each merge swapped in as one segment.

1. **Map** (:func:`build_offset_map`, Kafka's ``Cleaner.buildOffsetMap``): from the first dirty offset (the batch the
   offset index points at) up to the round's uncleanable bound, every keyed record of a batch that is not aborted data
   and not a control batch puts ``key → offset``; the map's latest offset follows each batch and, at the end of each
   segment, jumps to the next segment's base - 1 (offsets removed earlier are skipped). When the map is full the round
   stops there: its end offset is the map's latest offset + 1, and the rest is cleaned by later rounds.
2. **Recopy** (:func:`clean_log`, Kafka's ``Cleaner.cleanSegments``): every segment from the first through the one
   holding the end offset - 1 is read again, in merges (``merge.py``). Each merge becomes one ``.cleaned``
   segment (``swap.create_cleaned_segment``): each source batch goes through the rules of ``filtering.py``
   with the aborted transactions of its range and the producers' last batches as they were when the round began; the
   aborted transactions the new segment still holds data of go to its ``.txnindex``. The segment gets its final
   time-index entry, trimmed indexes, an fsync and the mtime of the merge's last source segment, and is swapped in
   (``swap.replace_segments``).

The round reads without the log's lock (the segments it reads are non-active and below the HW and the LSO, so
nothing appends to them) and pins each segment while it reads it; only each swap takes the lock, briefly. A swap
that finds its segments changed (retention or a truncation meanwhile) aborts the round: the ``.cleaned`` segment is
deleted and the checkpoint is not advanced (:class:`CleaningAborted`). Every byte read and written is charged to
the throttler.

Threads: one cleaner thread's. Blocking (disk and CPU).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from logfs.core.format.batch import BatchHeader, read_header
from logfs.core.format.control import parse_control_key
from logfs.core.format.decode import record_columns, records_from_columns
from logfs.core.format.framewalk import FrameWalk, by_read
from logfs.core.log.cleaner.filtering import BatchFilter, FilterCounts, ProducerLast
from logfs.core.log.cleaner.merge import SegmentSizes, plan_merges
from logfs.core.log.cleaner.offsetmap import SHORT_KEY_BYTES, OffsetMap, key_id
from logfs.core.log.cleaner.scan import walk_batches, walkable
from logfs.core.log.cleaner.swap import create_cleaned_segment, discard_cleaned_segment, replace_segments, set_mtime
from logfs.core.log.cleaner.transactions import CleanedTransactionMetadata
from logfs.core.log.log import Log
from logfs.core.log.segment import LogSegment, SegmentPart
from logfs.core.offsets import Isolation

# Kafka reads 256 KiB at a time; a chunk is walked in one call (scan.py), so a larger one costs fewer rounds
# of Python, but the Python work of a chunk holds the GIL: 1 MiB keeps it to ~1 ms (see throttler.PAUSE_S).
READ_CHUNK_BYTES = 1 << 20
OFFSET_ENTRY_BYTES = 8
TIME_ENTRY_BYTES = 12


class CleaningAborted(Exception):
    """The log changed under the round (retention or a truncation); nothing was swapped for the current merge."""


@dataclass(slots=True)
class CleanStats:
    """What one round did (Kafka's ``CleanerStats``), for the log line, ``state`` and the cleaner's metrics."""

    first_dirty_offset: int = 0
    end_offset: int = 0  # the new checkpoint: the map's latest offset + 1
    first_uncleanable_offset: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    bytes_read: int = 0  # recopy
    bytes_written: int = 0
    counts: FilterCounts = field(default_factory=FilterCounts)
    buffer_utilization: float = 0.0
    merges: int = 0
    segments_before: int = 0
    segments_after: int = 0
    elapsed_s: float = 0.0

    @property
    def messages_read(self) -> int:
        return self.counts.messages_read

    @property
    def messages_written(self) -> int:
        return self.counts.messages_written

    @property
    def invalid_messages(self) -> int:
        return self.counts.invalid_messages


Throttle = Callable[[int], None]


def _chunks(
    segment: LogSegment, position: int, throttle: Throttle
) -> Iterator[tuple[bytes, list[tuple[int, BatchHeader]]]]:
    """The segment's batches from ``position`` on, read a chunk at a time: ``(chunk, [(position in chunk,
    header)…])``, by the framing walk every reader of a ``.log`` shares (``core/format/framewalk.py``). A batch
    larger than a chunk is read whole; a torn tail ends the walk (recovery's business)."""
    log_file = segment.log_file
    walk = FrameWalk(log_file.read, position, segment.size_bytes, first_read=READ_CHUNK_BYTES,
                     on_read=lambda data, _: throttle(len(data)))  # fmt: skip
    for data, _, ats, _ in by_read(walk):
        yield data, [(at, read_header(data, at)) for at in ats]


def build_offset_map(
    log: Log, start: int, end: int, offset_map: OffsetMap, stats: CleanStats, throttle: Throttle
) -> bool:
    """Fill ``offset_map`` from the dirty section ``[start, end)`` (module docstring, step 1); True if it filled."""
    transactions = CleanedTransactionMetadata()
    transactions.add_aborted_transactions(log.collect_aborted_transactions(start, end))
    # The one range read of the log (core/log/rangeread.py), its bytes checked before a key is taken from them (a
    # damaged batch stops the round, it is not mapped). It starts where Kafka's map starts reading: at the offset
    # index's entry for start (the segment's first batch when it has none), so the map reads the records Kafka's reads.
    floor = log.segment_snapshot.floor(start)
    read_from = max(floor.offset_index.lookup(start).offset, log.log_start_offset) if floor is not None else start
    with log.read_range(min(read_from, start), end, Isolation.LOG_END) as read:
        for part in read:
            for data, _, ats, _ in part.stored.buffers(part.lo, part.hi):
                throttle(len(data))
                stats.map_bytes_read += len(data)
                batches = [(at, read_header(data, at)) for at in ats]
                full, ended = _map_chunk(data, batches, start, end, transactions, offset_map, stats)
                if full:
                    return True
                if ended:
                    break
            offset_map.latest_offset = part.filter_until - 1
        offset_map.latest_offset = read.end - 1
    return False


def _map_chunk(
    data: bytes,
    batches: list[tuple[int, BatchHeader]],
    start: int,
    end: int,
    transactions: CleanedTransactionMetadata,
    offset_map: OffsetMap,
    stats: CleanStats,
) -> tuple[bool, bool]:
    """The keys of one chunk's batches into the map: (the map filled, the chunk reached ``end``). The uncompressed
    batches are walked together (``scan.py``) and put in one ``dict.update`` when the map has room for every
    record of the chunk; otherwise, and for compressed batches, batch by batch (:func:`_map_batch`), so the map
    stops at the very record Kafka's would."""
    owned = data if isinstance(data, bytes) else bytes(data)  # slices of bytes are bytes: hashable
    bulk = sum(h.records_count for _, h in batches) <= offset_map.capacity - len(offset_map.entries)
    pending: list[tuple[int, BatchHeader]] = []

    def flush() -> None:
        if pending:
            records = walk_batches(owned, pending)
            rows = np.flatnonzero((records.key_length >= 0) & (records.offset >= start))
            offset_map.entries.update(zip(records.key_ids(rows), records.offset[rows].tolist(), strict=True))
            stats.map_messages_read += len(records)
            pending.clear()

    for pos, header in batches:
        if header.last_offset >= end:
            flush()
            return False, True
        if header.is_control:
            kind = None
            if header.records_count:
                h, cols = record_columns(owned, pos)
                kind = parse_control_key(records_from_columns(h, cols)[0].key)
            transactions.on_control_batch_read(header, kind)
        elif not transactions.on_batch_read(header):
            if bulk and walkable(header):
                pending.append((pos, header))
            else:
                flush()
                if _map_batch(owned, pos, header, start, offset_map, stats):
                    return True, False
        if header.last_offset >= start:
            offset_map.latest_offset = header.last_offset
    flush()
    return False, False


def _map_batch(
    data: bytes, pos: int, header: BatchHeader, start: int, offset_map: OffsetMap, stats: CleanStats
) -> bool:
    """The keys of one data batch into the map, record by record (the reference of :func:`_map_chunk`); True when
    the map filled before a record (Kafka's "is it full" test counts keys already in the map too)."""
    _, cols = record_columns(data, pos)
    cols = cols.lists()
    raw = cols.data
    owned = raw if isinstance(raw, bytes) else bytes(raw)
    entries = offset_map.entries
    capacity = offset_map.capacity
    base = header.base_offset
    read = 0
    for od, kp, kl in zip(cols.offset_delta, cols.key_position, cols.key_length, strict=True):
        offset = base + od
        if kl >= 0 and offset >= start:
            if len(entries) >= capacity:
                stats.map_messages_read += read
                return True
            key = owned[kp : kp + kl]
            entries[key if kl <= SHORT_KEY_BYTES else key_id(key)] = offset  # key_id, inlined
        read += 1
    stats.map_messages_read += read
    return False


def clean_log(
    log: Log,
    first_dirty: int,
    first_uncleanable: int,
    offset_map: OffsetMap,
    now_ms: int,
    throttle: Throttle,
    producers: dict[int, ProducerLast],
) -> CleanStats:
    """One round (module docstring); the stats, whose ``end_offset`` is the new checkpoint. CleaningAborted when a
    swap finds the log changed. Blocking."""
    started = time.monotonic()
    stats = CleanStats(first_dirty_offset=first_dirty, first_uncleanable_offset=first_uncleanable)
    offset_map.clear()
    build_offset_map(log, first_dirty, first_uncleanable, offset_map, stats, throttle)
    end_offset = offset_map.latest_offset + 1
    stats.end_offset = end_offset
    stats.buffer_utilization = offset_map.utilization
    view = log.segment_snapshot
    recopy = [s for s, b in zip(view.segments[:-1], view.bases[:-1], strict=True) if b < end_offset]
    stats.segments_before = len(view.segments)
    sizes = [
        SegmentSizes(
            s.base_offset, s.size_bytes, s.offset_index.entries() * OFFSET_ENTRY_BYTES,
            s.time_index.entries() * TIME_ENTRY_BYTES,
        )
        for s in recopy
    ]  # fmt: skip
    config = log.config
    merges = plan_merges(sizes, config.segment_bytes, config.segment_index_bytes, first_uncleanable)
    stats.merges = len(merges)
    for merge in merges:
        members = [recopy[i] for i in merge]
        following = view.segments[view.segments.index(members[-1]) + 1]
        _clean_merge(log, members, following.base_offset, offset_map, now_ms, throttle, producers, stats,
                     first_uncleanable)  # fmt: skip
    stats.segments_after = len(log.segment_snapshot.segments)
    stats.elapsed_s = time.monotonic() - started
    return stats


def _append(cleaned: LogSegment, parts: list[SegmentPart]) -> None:
    """Append the kept batches of one chunk, in runs the indexes have room for (``append_parts`` adds at most one
    entry a batch, and only past ``index.interval.bytes``, so a run as long as the room can never fill them)."""
    done = 0
    while done < len(parts):
        run = max(1, min(len(parts) - done, cleaned.index_room()))
        cleaned.append_parts(parts[done : done + run])
        done += run


def _clean_merge(
    log: Log,
    members: list[LogSegment],
    merge_end: int,
    offset_map: OffsetMap,
    now_ms: int,
    throttle: Throttle,
    producers: dict[int, ProducerLast],
    stats: CleanStats,
    first_uncleanable: int,
) -> None:
    """Recopy one merge into a ``.cleaned`` segment and swap it in (module docstring, step 2)."""
    cleaned = create_cleaned_segment(log.local, members[0].base_offset)
    try:
        transactions = CleanedTransactionMetadata(on_kept_abort=cleaned.append_aborted_txn)
        batch_filter = BatchFilter(
            offset_map, transactions, producers, first_uncleanable, now_ms, log.config.delete_retention_ms,
            stats.counts,
        )  # fmt: skip
        for n, segment in enumerate(members):
            upper = members[n + 1].base_offset if n + 1 < len(members) else merge_end
            transactions.add_aborted_transactions(log.collect_aborted_transactions(segment.base_offset, upper))
            with segment.pin():
                for data, batches in _chunks(segment, 0, throttle):
                    stats.bytes_read += len(data)
                    parts: list[SegmentPart] = []
                    batch_filter.prepare(data, batches)
                    for pos, header in batches:
                        out = batch_filter.filter(data, pos, header)
                        if out is None:
                            continue
                        unchanged = isinstance(out, memoryview)
                        max_ts = header.max_timestamp if unchanged else read_header(out).max_timestamp
                        parts.append((out, header.last_offset, max_ts, header.last_offset))
                    if parts:
                        _append(cleaned, parts)
                        written = sum(len(p[0]) for p in parts)
                        stats.bytes_written += written
                        throttle(written)
        cleaned.on_become_inactive_segment()
        cleaned.flush()
        mtime = members[-1].last_modified_ms / 1000
        for f in (cleaned.log_path, cleaned.offset_index.path, cleaned.time_index.path):
            if f.exists():
                set_mtime(f, mtime)
    except BaseException:
        discard_cleaned_segment(cleaned)
        raise
    # A failure inside the swap leaves its files to the loader's recovery (the intent file says what to finish or
    # undo): deleting the new segment here could lose records once the old ones are renamed.
    if not replace_segments(log.local, cleaned, members, now_ms):
        discard_cleaned_segment(cleaned)
        raise CleaningAborted(f"{log.directory.name}: the log changed during the clean")
