"""Opening one partition directory as a :class:`~logfs.core.log.log.Log`, with Kafka's load passes (``LogLoader``).

0. An interrupted swap of the log cleaner (``cleaner-swap.intent``) is undone or completed whole
   (``core/log/cleaner/swap.py``), before Kafka's passes, which then find none of its files.
1. Temp files: every ``*.deleted`` file goes; ``*.cleaned`` files go, and ``*.swap`` files at or above the lowest
   cleaned base (an interrupted split); other swaps are kept for pass 2.
2. Swaps: the segments a swap replaces (its offset range) are deleted and the swap takes its name.
3. Segments: an index without its ``.log`` is deleted; each ``.log`` becomes a segment; a missing or corrupt offset
   index sends that segment to recovery whatever the shutdown was.
4. Recovery: the segments of step 3 and, after an unclean shutdown, every segment from the one holding the
   recovery point to the end are validated batch by batch and their indexes rebuilt (``core/log/recovery.py``). The
   first segment that had to be cut ends the log: every later segment is moved into quarantine
   (``<name>.log.<ms>.quarantine``, its indexes deleted) — Kafka deletes them; logfs keeps the bytes for inspection
   (docs/storage.md, "Rules worth knowing"). So the log is always a prefix of what was written, with no hole; Kafka
   keeps the later segments when the cut one was recovered for a bad index.
5. Afterwards: a damaged ``leader-epoch-checkpoint`` (moved to quarantine when it was read) is rebuilt from the
   batches' leader epochs; a log ending below the checkpointed log start offset is emptied; an empty directory gets
   one segment at the log start offset; the active segment's indexes get their full size back; the epoch cache is
   trimmed to ``[log start, LEO]``.
6. Producer state (Kafka's ``rebuildProducerState``; docs/storage.md, "Idempotent producers and transactions"):
   snapshots above the LEO or below the first segment go; the newest snapshot at or below the LEO that parses is loaded
   (a corrupt one is skipped with a warning) and the log replayed from its offset to the LEO. Recovery (step 4)
   positions one state at the first recovered segment the same way and replays each recovered segment into it, which
   rebuilds its ``.txnindex``. After a clean shutdown with no snapshot at all (a store written before producer state
   existed), the state starts empty at the LEO, as Kafka's does, rather than scanning every segment.

A clean load opens no ``.log`` beyond a ``stat`` and reads only the active segment's tail (for the LEO), so opening a
large clean store does not scan its logs. Each finding is reported to ``on_event`` (the store logs them; ``logfs
check`` prints them).
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from logfs.core.checkpoint import LeaderEpochCheckpointFile
from logfs.core.config import LogConfig
from logfs.core.durable import fsync_dir
from logfs.core.errors import CorruptCheckpoint, CorruptIndex, CorruptRecord, StorageError
from logfs.core.log.cleaner.swap import CLEANED_SUFFIX, INTENT_FILE, SWAP_SUFFIX, complete_interrupted_swap
from logfs.core.log.epoch import LeaderEpochFileCache
from logfs.core.log.handles import HandleCache
from logfs.core.log.local import new_segment
from logfs.core.log.log import Log
from logfs.core.log.logfile import LogFile
from logfs.core.log.recovery import ScanResult, quarantine_path, recover_segment
from logfs.core.log.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    QUARANTINE_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    offset_from_filename,
)
from logfs.core.storelinks import refuse_links
from logfs.core.txn.producerreplay import replay
from logfs.core.txn.producerstate import ProducerStateManager

_log = logging.getLogger(__name__)

INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
NO_LIMIT = 2**63 - 1


@dataclass(frozen=True, slots=True)
class LoadEvent:
    """Something the load found and did: ``kind`` is one of temp-file, orphan-index, bad-index, bad-checkpoint,
    truncated, quarantined, emptied. ``dropped_bytes`` is what it cut from the log into quarantine: the tail of a
    truncated segment, all of a quarantined one (0 for the other kinds)."""

    kind: str
    path: Path
    detail: str
    dropped_bytes: int = 0


EventSink = Callable[[LoadEvent], None]


def _report(
    on_event: EventSink | None, kind: str, path: Path, detail: str, dropped_bytes: int = 0, *, expected: bool = False
) -> None:
    """Log (at WARNING for damage, INFO for the rest and for what an unclean stop leaves as a matter of course) and
    pass the event on."""
    damage = kind in ("truncated", "quarantined", "bad-index", "bad-checkpoint")
    level = logging.WARNING if damage and not expected else logging.INFO
    _log.log(level, "%s: %s: %s", path, kind, detail)
    if on_event is not None:
        on_event(LoadEvent(kind, path, detail, dropped_bytes))


def load_log(
    directory: Path,
    config: LogConfig,
    handles: HandleCache,
    *,
    had_clean_shutdown: bool,
    recovery_point: int = 0,
    log_start_offset: int = 0,
    high_watermark: int = 0,
    on_event: EventSink | None = None,
) -> Log:
    """Open the partition in ``directory`` (created if missing). Writer thread of the new log."""
    entries = _listing(directory)
    if _may_hold_temp_files(entries):
        complete_interrupted_swap(directory, lambda path, what: _report(on_event, "temp-file", path, what))
        _remove_temp_files(directory, on_event)
        entries = _listing(directory)
    epoch_cache, epochs_lost = _load_epoch_cache(directory, on_event)
    checked_below = NO_LIMIT if had_clean_shutdown else recovery_point
    segments, needs_recovery = _load_segments(directory, entries, config, handles, on_event,
                                              full_check_below=checked_below)  # fmt: skip
    first = len(segments)  # a clean log recovers only the segments of step 3
    if not had_clean_shutdown:
        first = max((i for i, s in enumerate(segments) if s.base_offset <= recovery_point), default=0)
    producer_state = ProducerStateManager(directory)
    recovery_start = max(log_start_offset, segments[0].base_offset) if segments else log_start_offset
    segments = _recover(segments, first, needs_recovery, epoch_cache, on_event, producer_state, recovery_start)
    if epochs_lost:
        _rebuild_epochs(segments, epoch_cache)
    leo = segments[-1].read_next_offset() if segments else log_start_offset
    recovered_to_leo = producer_state.map_end_offset == leo and (first < len(segments) or bool(needs_recovery))
    if segments and leo < log_start_offset:
        for segment in segments:
            segment.delete_if_exists()
        _report(on_event, "emptied", directory, f"log end offset {leo} is below the log start offset checkpoint")
        segments = []
        epoch_cache.clear_and_flush()
        producer_state.delete_snapshots_above(-1)
        recovered_to_leo = False
    if not segments:
        segments = [new_segment(directory, log_start_offset, config, handles, log_size_bytes=0)]
        segments[0].log_file.create()  # so that the next load finds it, as Kafka's does (see LocalLog._new_segment)
        leo = log_start_offset
    active = segments[-1]
    active.offset_index.reserve(config.segment_index_bytes)  # grown by its first append (AbstractIndex.reserve)
    active.time_index.reserve(config.segment_index_bytes)
    recovery = leo if had_clean_shutdown else min(recovery_point, leo)
    start = max(log_start_offset, segments[0].base_offset)
    epoch_cache.truncate_from_end(leo)
    epoch_cache.truncate_from_start(start)
    _load_producer_state(producer_state, segments, start, leo, clean=had_clean_shutdown, recovered=recovered_to_leo)
    return Log(
        directory,
        config,
        handles,
        epoch_cache,
        segments,
        log_start_offset=start,
        recovery_point=recovery,
        high_watermark=high_watermark,
        log_end_offset=leo,
        producer_state=producer_state,
    )


def _load_producer_state(
    state: ProducerStateManager, segments: list[LogSegment], start: int, leo: int, *, clean: bool, recovered: bool
) -> None:
    """Step 6: the producer state at the LEO. ``recovered``: recovery already replayed the log up to the LEO into
    ``state``, which is kept."""
    state.delete_snapshots_above(leo)
    state.delete_snapshots_before(segments[0].base_offset)
    if recovered:
        return
    if clean and not state.snapshot_offsets():
        state.clear(leo)
        return
    loaded = state.load_snapshot(leo)
    replay(state, segments, start if loaded is None else max(loaded, start), leo)


def _position_producer_state(
    state: ProducerStateManager, segments: list[LogSegment], index: int, log_start_offset: int
) -> None:
    """Bring ``state`` to ``segments[index]``'s base offset: newest snapshot at or below it, then replay."""
    base = segments[index].base_offset
    loaded = state.load_snapshot(base)
    replay(state, segments[:index], log_start_offset if loaded is None else max(loaded, log_start_offset), base)


def _load_epoch_cache(directory: Path, on_event: EventSink | None) -> tuple[LeaderEpochFileCache, bool]:
    """The partition's leader epoch cache, and whether its checkpoint was damaged (moved to quarantine, the cache
    starts empty and must be rebuilt from the batches; Kafka takes the whole log directory offline instead)."""
    checkpoint = LeaderEpochCheckpointFile.in_dir(directory)
    try:
        return LeaderEpochFileCache(checkpoint), False
    except CorruptCheckpoint as exc:
        target = quarantine_path(checkpoint.path)
        os.rename(checkpoint.path, target)
        _report(
            on_event, "bad-checkpoint", checkpoint.path,
            f"{exc.reason}; kept as {target.name}, the epochs are rebuilt from the batches",
        )  # fmt: skip
        return LeaderEpochFileCache(checkpoint), True


def _rebuild_epochs(segments: list[LogSegment], epoch_cache: LeaderEpochFileCache) -> None:
    """Assign the leader epoch of every batch that starts a newer one, from the batch headers (no CRC check)."""
    epoch_cache.clear()
    for segment in segments:
        try:
            for b in segment.batches():
                latest = epoch_cache.latest_epoch()
                if b.partition_leader_epoch >= 0 and (latest is None or b.partition_leader_epoch > latest):
                    epoch_cache.assign(b.partition_leader_epoch, b.base_offset)
        except CorruptRecord:
            return  # damage below the recovery point, which recovery did not scan: keep the epochs found so far
    epoch_cache.flush()


def _listing(directory: Path) -> list[os.DirEntry[str]]:
    """The partition directory's entries, the directory made first when it is missing. One listing serves passes 0
    to 3 of a partition that holds no temporary file (almost every one: 10,000 partitions open at each remount); a
    stat-free check that it exists, not a mkdir that fails with EEXIST and a stat after it. LinkInStore for an entry
    that is a symbolic link (core/storelinks.py: no file is opened, written or deleted through one)."""
    try:
        with os.scandir(directory) as it:
            entries = list(it)
    except FileNotFoundError:
        directory.mkdir(parents=True, exist_ok=True)
        return []
    refuse_links(entries)
    return entries


def _may_hold_temp_files(entries: list[os.DirEntry[str]]) -> bool:
    """Whether passes 0 to 2 have anything to look at: a name of the cleaner's swap protocol, or a ``.deleted``,
    ``.cleaned`` or ``.swap`` file. Nothing else to do, in a partition that has none, than read the listing once."""
    for entry in entries:
        name = entry.name
        if name.startswith(INTENT_FILE) or name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX)):
            return True
    return False


def _remove_temp_files(directory: Path, on_event: EventSink | None) -> None:
    """Passes 1 and 2: ``.deleted`` and ``.cleaned`` files go; swaps replace what they cover."""
    cleaned_bases: list[int] = []
    swaps: list[Path] = []
    for entry in sorted(directory.iterdir()):
        name = entry.name
        if name.endswith(DELETED_SUFFIX) and not name.endswith(".checkpoint" + DELETED_SUFFIX):
            entry.unlink(missing_ok=True)
            _report(on_event, "temp-file", entry, "deleted (left by an interrupted deletion)")
        elif name.endswith(CLEANED_SUFFIX):
            cleaned_bases.append(_base_or(name, -1))
            entry.unlink(missing_ok=True)
            _report(on_event, "temp-file", entry, "deleted (left by an interrupted clean)")
        elif name.endswith(SWAP_SUFFIX):
            swaps.append(entry)
    min_cleaned = min((b for b in cleaned_bases if b >= 0), default=None)
    for swap in list(swaps):
        if min_cleaned is not None and _base_or(swap.name, -1) >= min_cleaned:
            swap.unlink(missing_ok=True)
            swaps.remove(swap)
            _report(on_event, "temp-file", swap, "deleted (an incomplete split)")
    log_swaps = [s for s in swaps if s.name.endswith(LOG_SUFFIX + SWAP_SUFFIX)]
    if log_swaps:
        low = min(_base_or(s.name, 0) for s in log_swaps)
        high = max(_swap_next_offset(s) for s in log_swaps)
        for entry in directory.iterdir():
            name = entry.name
            if name.endswith(SWAP_SUFFIX) or not name.endswith((LOG_SUFFIX, *INDEX_SUFFIXES)):
                continue
            base = _base_or(name, -1)
            if low <= base < high:
                entry.unlink(missing_ok=True)
                _report(on_event, "temp-file", entry, "deleted (replaced by a swap)")
    for swap in swaps:
        swap.rename(swap.with_name(swap.name[: -len(SWAP_SUFFIX)]))
        _report(on_event, "temp-file", swap, "swap renamed into place")


def _swap_next_offset(path: Path) -> int:
    next_offset = _base_or(path.name, 0)
    for b in LogFile(path).batches():
        next_offset = b.last_offset + 1
    return next_offset


def _base_or(name: str, default: int) -> int:
    try:
        return offset_from_filename(name)
    except ValueError:
        return default


def _load_segments(
    directory: Path,
    entries: list[os.DirEntry[str]],
    config: LogConfig,
    handles: HandleCache,
    on_event: EventSink | None,
    *,
    full_check_below: int,
) -> tuple[list[LogSegment], set[int]]:
    """Pass 3: segments from the ``.log`` files among ``entries`` (the directory's listing), orphan indexes deleted,
    segments that need recovery noted.

    A missing offset index always means recovery. The indexes of every segment that ends at or below
    ``full_check_below`` are also sanity-checked: they were trimmed when the log rolled past them, so damage shows.
    That is every segment after a clean shutdown, and those wholly below the recovery point after an unclean one:
    recovery rebuilds the others' indexes anyway, and a preallocated active index would fail the check. (Kafka
    checks none; an index below the recovery point that is damaged but passes is still used as it is.)
    """
    logs: dict[int, int] = {}
    indexes: list[tuple[int, Path]] = []
    for entry in entries:
        name = entry.name
        if name.endswith(QUARANTINE_SUFFIX) or not entry.is_file():
            continue
        base = _base_or(name, -1)
        if base < 0:
            continue
        if name.endswith(LOG_SUFFIX):
            logs[base] = entry.stat().st_size
        elif name.endswith(INDEX_SUFFIXES):
            indexes.append((base, Path(entry.path)))
    for base, path in indexes:
        if base not in logs:
            path.unlink(missing_ok=True)
            _report(on_event, "orphan-index", path, "deleted (no .log beside it)")
    segments = []
    needs_recovery: set[int] = set()
    bases = sorted(logs)
    for base, next_base in itertools.pairwise([*bases, NO_LIMIT]):
        segment = new_segment(directory, base, config, handles, log_size_bytes=logs[base])
        if logs[base] > 0:
            try:
                segment.sanity_check(full=full_check_below == NO_LIMIT or next_base <= full_check_below)
            except CorruptIndex as exc:
                needs_recovery.add(base)
                # Past the recovery point of an unclean stop, indexes need not be on disk (an fsync through the
                # mount syncs the .log only) and the segment is recovered anyway: not a warning.
                unflushed = full_check_below != NO_LIMIT and next_base > full_check_below
                _report(on_event, "bad-index", segment.log_path, f"{exc}; the segment will be recovered",
                        expected=unflushed)  # fmt: skip
            if next_base != NO_LIMIT:  # the last one's offset index is read again at once, for the log end offset
                segment.close_handler()  # the check mapped its indexes: give them back (10,000 segments, 10,000 fds)
        segments.append(segment)
    return segments, needs_recovery


def _recover_one(
    segment: LogSegment,
    epoch_cache: LeaderEpochFileCache,
    on_event: EventSink | None,
    before_cut: Callable[[ScanResult], None] | None = None,
    producer_state: ProducerStateManager | None = None,
    stays_active: bool = False,
) -> ScanResult:
    result = recover_segment(
        segment, epoch_cache, before_cut=before_cut, producer_state=producer_state, stays_active=stays_active
    )
    if result.damaged_bytes:
        what = result.reason or "torn tail"
        _report(
            on_event, "truncated", segment.log_path, f"{what}: {result.damaged_bytes} bytes moved to quarantine",
            result.damaged_bytes,
        )  # fmt: skip
    return result


def _recover(
    segments: list[LogSegment],
    first: int,
    needs_recovery: set[int],
    epoch_cache: LeaderEpochFileCache,
    on_event: EventSink | None,
    producer_state: ProducerStateManager,
    log_start_offset: int,
) -> list[LogSegment]:
    """Pass 4: recover ``segments[first:]`` and every earlier one in ``needs_recovery``; the first segment that is
    cut ends the log, and the segments after it go to quarantine (before the cut: see ``recover_segment``).

    ``producer_state`` is carried through consecutive recovered segments (and positioned afresh after a skipped
    one), so each recovery rebuilds its segment's ``.txnindex`` from the state at its base."""
    previous = -2
    for i, segment in enumerate(segments):
        if i < first and segment.base_offset not in needs_recovery:
            continue
        if previous != i - 1:
            _position_producer_state(producer_state, segments, i, log_start_offset)
        previous = i
        quarantine_later = functools.partial(_quarantine_segments, segments[i + 1 :], on_event)
        last = i == len(segments) - 1
        if _recover_one(segment, epoch_cache, on_event, quarantine_later, producer_state, last).damaged_bytes:
            return segments[: i + 1]
    return segments


def _quarantine_segments(segments: list[LogSegment], on_event: EventSink | None, _cut: ScanResult) -> None:
    """The ``before_cut`` of a recovery: every segment after the one to be cut goes to quarantine, durably."""
    for segment in segments:
        _quarantine_segment(segment, on_event)
    if segments:
        fsync_dir(segments[0].log_path.parent)


def _quarantine_segment(segment: LogSegment, on_event: EventSink | None) -> None:
    """Move a whole segment's ``.log`` into quarantine, delete its indexes (they are rebuilt from a log) and let
    the handle cache forget it."""
    log_path = segment.log_path
    target = quarantine_path(log_path)
    size = segment.size_bytes
    segment.close_handler()
    try:
        os.rename(log_path, target)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StorageError(f"cannot quarantine {log_path}: {exc.strerror}") from exc
    segment.delete_if_exists()  # the .log is gone already: this takes the indexes
    _report(on_event, "quarantined", log_path, f"follows a truncated segment; kept as {target.name}", size)
