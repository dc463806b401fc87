"""A follower's replica of one partition: one fetch response applied to its log, and the replica state file.

Functions over ``logfs.core`` (no trio): ``logfs/follower/daemon.py`` runs them in worker threads, the tests call them
directly with responses they build.

* :func:`fetch_and_apply` — one worker call per fetch: read the answer and, when it brings no news of the leader's
  epoch or ISR, apply it at once, behind the partition's :class:`ApplyGate` (no apply once the follower let go of
  the partition).

* :func:`apply_fetch` — Kafka's ``ReplicaFetcherThread.processPartitionData`` and the truncation paths of
  ``AbstractFetcherThread``, in this order: OFFSET_OUT_OF_RANGE (truncate to the leader's LEO below ours, or start
  over empty at the leader's log start above our LEO); a diverging epoch (truncate as ``logfs/follower/fetch.py``'s
  :func:`~logfs.follower.fetch.diverging_truncation` says; the next fetch goes on from there); otherwise append the
  batches as follower, rolling where the leader's segments start (``segment_bases``), then HW = min(leader HW, own
  LEO) and the log start offset raised to the leader's (never past our HW), the segments below it deleted at once.
* A truncation always ends the log on a whole batch (:func:`truncate_at_batch`): ``Log.truncate_to`` removes the
  batch holding the target and says LEO = target, so a target inside a batch would leave offsets the next fetch
  cannot append at. Cutting at that batch's start instead costs a refetch of what the leader has there anyway.
* ``.logfs-replica-state.json``: :func:`aggregate_replica_state` makes one store-wide state from what the fetches of
  every partition said; ``logfs.core.replication.promotion`` reads and writes the file (``logfs mount`` reads it
  before it makes this store a leader).

Threads: the functions on a Log are its writer's (one worker thread per partition at a time).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from logfs.core.errors import LogfsError, RecordBatchTooLarge
from logfs.core.format.batch import iter_batch_positions, read_header
from logfs.core.log.log import Log
from logfs.core.replication.promotion import PersistedReplicaState
from logfs.follower.fetch import (
    FetchProtocolError,
    FetchReader,
    FetchResponse,
    diverging_truncation,
    out_of_range_action,
)

_log = logging.getLogger(__name__)

# --- one fetch applied to one log (worker thread) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Applied:
    """What :func:`apply_fetch` did to the log."""

    records: int = 0  # records appended
    size_bytes: int = 0  # bytes appended
    rolls: int = 0  # segments rolled at the leader's bases
    truncated_to: int | None = None  # the LEO after a truncation (diverging epoch, out of range, a straddling batch)
    started_at: int | None = None  # the offset a full truncation started the log at (behind the leader's start)
    hw_moved: bool = False
    log_start_moved: bool = False
    stale: bool = False  # the response did not fit this log (it changed since the lookup, or the leader is stale)

    @property
    def changed(self) -> bool:
        return bool(self.records or self.rolls or self.hw_moved or self.log_start_moved) or (
            self.truncated_to is not None or self.started_at is not None
        )


def apply_fetch(log: Log, fetch_offset: int, response: FetchResponse) -> Applied:
    """Apply one fetch response, taken at ``fetch_offset`` (this log's LEO at the lookup), to ``log``. Writer
    thread (a worker: blocks on the disk). Core errors of a bad batch propagate (the caller logs and fetches again).
    """
    leo = log.log_end_offset
    if leo != fetch_offset or response.epoch_refused:
        return Applied(stale=True)
    if response.out_of_range:
        action = out_of_range_action(response.log_start_offset, response.log_end_offset, leo)
        if action.truncate_to is not None:
            return Applied(truncated_to=truncate_at_batch(log, action.truncate_to))
        if action.start_at is not None:
            log.truncate_fully_and_start_at(action.start_at)
            return Applied(started_at=action.start_at)
        return Applied(stale=True)
    if response.diverging_epoch is not None:
        local = log.epoch_cache.end_offset_for(response.diverging_epoch.epoch, leo)
        truncation = diverging_truncation(response.diverging_epoch, local, leo)
        if truncation.offset >= leo:
            return Applied(stale=True)  # nothing here to cut: the leader's answer does not fit this log
        return Applied(truncated_to=truncate_at_batch(log, truncation.offset))
    appended = append_fetched(log, response.records, response.segment_bases)
    if appended.truncated_to is not None:
        return appended  # this log ended inside a leader batch: fetch again from the batch's start
    hw_moved = log.maybe_update_high_watermark(min(response.high_watermark, log.log_end_offset)) is not None
    start_moved = False
    new_start = min(response.log_start_offset, log.high_watermark)
    if new_start > log.log_start_offset:
        start_moved = log.maybe_increment_log_start_offset(new_start)
        log.delete_old_segments()
    return Applied(
        records=appended.records, size_bytes=appended.size_bytes, rolls=appended.rolls,
        started_at=appended.started_at, hw_moved=hw_moved, log_start_moved=start_moved,
    )  # fmt: skip


class ApplyGate:
    """Lets worker threads apply fetched batches to one partition's log until it is closed; :meth:`close` waits for
    an apply in progress.

    Why: the follower reads a fetch and applies it in one worker call, which trio abandons when the partition's task
    is cancelled (the read may block on a hung leader mount for as long as that mount hangs). The abandoned thread may
    still come back with an answer; once the follower has closed the gate (a shutdown, a topic deleted), that answer
    never reaches the log, and closing waits for an apply already running, so the store is never closed under one.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closed = False

    @contextlib.contextmanager
    def entered(self) -> Iterator[bool]:
        """Hold the gate: True while it is open (apply), False once closed (do nothing)."""
        with self._lock:
            yield not self._closed

    def close(self) -> None:
        """Close the gate; blocks until an apply in progress has ended (a worker thread, or a shutdown path)."""
        with self._lock:
            self._closed = True


class ApplyFailed(Exception):
    """:func:`fetch_and_apply` read an answer and could not apply it; ``__cause__`` says why (a core error, a bad
    batch, the local disk)."""


@dataclass(frozen=True, slots=True)
class Fetched:
    """One fetch read, and what applying it did: None when it was not applied (it had news for the caller to record
    first, or the gate was closed)."""

    response: FetchResponse
    applied: Applied | None


def fetch_and_apply(
    reader: FetchReader,
    path: Path,
    log: Log,
    fetch_offset: int,
    known: tuple[int, tuple[int, ...]] | None,
    gate: ApplyGate,
    appends: threading.BoundedSemaphore,
) -> Fetched:
    """Read the fetch file at ``path`` and, when what it says of the leader (its epoch and the ISR) is ``known``
    already, apply it at once in the same worker thread (through ``gate``, at most ``appends`` at once across
    partitions): one hand-off between trio and a worker per fetch instead of two, ~0.4 ms of a 1 MiB fetch's round
    trip on a loaded 2-core machine. An answer with news comes back unapplied: the caller persists the news first
    (the replica state file must say what the follower heard before its log shows it), then applies it.

    Worker thread. OSError (the leader's mount) and FetchProtocolError of the read propagate as they are; an apply
    that fails raises ApplyFailed.
    """
    response = reader.read(path)
    if response.epoch_refused or known != (response.leader_epoch, response.isr):
        return Fetched(response, None)
    with appends, gate.entered() as open_:
        if not open_:
            return Fetched(response, None)
        try:
            return Fetched(response, apply_fetch(log, fetch_offset, response))
        except (LogfsError, FetchProtocolError, OSError) as exc:
            raise ApplyFailed(f"cannot apply the fetch at offset {fetch_offset}: {exc}") from exc


def truncate_at_batch(log: Log, target: int) -> int:
    """Truncate ``log`` to ``target``, or lower to the start of its batch that holds ``target``, so that the log
    ends on a whole batch (the next fetch then appends the leader's batch at exactly its LEO). Returns the LEO."""
    if log.log_start_offset <= target < log.log_end_offset:
        # The batch's base offset from the offset lookup alone: no bytes of it are read (nor checked), so a
        # damaged batch in the tail being cut away does not stop the cut.
        segment = log.segment_for(target)
        found = segment.translate_offset(target) if segment is not None else None
        if found is not None:
            target = min(target, found.base_offset)
    log.truncate_to(target)
    return log.log_end_offset


def append_fetched(log: Log, data: bytes | memoryview, segment_bases: Sequence[int]) -> Applied:
    """Append the batches of one response as follower, rolling where the leader's segments start.

    A response starts at the batch holding the fetch offset: batches that end below the LEO are skipped. One that
    straddles the LEO (its first offset below, its last at or above) is either the first batch of an empty log that
    starts inside it — the leader's log start falls inside that batch after delete-records, and this log was
    started there — and then the log starts over at the batch's first offset and takes it (Kafka's
    ``Partition.appendRecordsToFollowerOrFutureReplica``); or else this log ended inside a batch of the leader's,
    and it is truncated to that batch's start (the next fetch appends it whole). Batches between two of the
    leader's segment bases go in with one append.
    """
    batches = [(pos, size, read_header(data, pos)) for pos, size in iter_batch_positions(data)]
    if sum(size for _, size, _ in batches) != len(data):
        raise FetchProtocolError(f"{log.directory.name}: the fetched bytes end inside a batch")
    leo = log.log_end_offset
    while batches and batches[0][2].last_offset < leo:
        batches.pop(0)
    started_at = None
    if batches and batches[0][2].base_offset < leo:
        first = batches[0][2].base_offset
        if leo != log.log_start_offset or log.active_segment.size_bytes:
            return Applied(truncated_to=truncate_at_batch(log, first))
        log.truncate_fully_and_start_at(first)
        started_at = leo = first
    bases = sorted(b for b in set(segment_bases) if b >= leo)
    k = 0
    rolls = records = size_bytes = 0
    group: list[tuple[int, int]] = []  # (position, size) of batches waiting for one append

    def flush_group() -> None:
        nonlocal records, size_bytes
        if group:
            start, end = group[0][0], group[-1][0] + group[-1][1]
            info = _append(log, data[start:end])
            records += info
            size_bytes += end - start
            group.clear()

    for pos, size, header in batches:
        roll_to = None
        while k < len(bases) and bases[k] <= header.base_offset:
            roll_to = bases[k]
            k += 1
        if roll_to is not None and log.active_segment.base_offset < roll_to:
            flush_group()
            if log.active_segment.size_bytes or log.active_segment.base_offset != roll_to:
                log.roll(roll_to)
                rolls += 1
        group.append((pos, size))
    flush_group()
    # A leader segment that starts at our new LEO and holds nothing yet (the leader rolled an empty one: retention
    # deleted every segment, or a truncation): roll too, so that the next batch lands in the same file as there.
    end = log.log_end_offset
    for base in bases[k:]:
        if base == end and log.active_segment.base_offset < base and log.active_segment.size_bytes:
            log.roll(base)
            rolls += 1
    return Applied(records=records, size_bytes=size_bytes, rolls=rolls, started_at=started_at)


def _append(log: Log, chunk: bytes | memoryview) -> int:
    """Append ``chunk`` (whole batches) as follower; the records appended. A chunk larger than ``segment.bytes``
    (the leader's segments are larger than this topic's config now says) goes in batch by batch."""
    try:
        info = log.append_as_follower(chunk, roll=False)
        return 0 if info is None else info.records_count
    except RecordBatchTooLarge:
        total = 0
        for pos, size in iter_batch_positions(chunk):
            one = log.append_as_follower(chunk[pos : pos + size], roll=False)
            total += 0 if one is None else one.records_count
        return total


# --- the replica state file ------------------------------------------------------------------------------------------


def aggregate_replica_state(
    replica_id: int, highest_epoch: int, seen: Iterable[tuple[int, Sequence[int]]]
) -> PersistedReplicaState | None:
    """The store-wide replica state from each partition's last (leader epoch, ISR): the highest epoch seen (and
    ``highest_epoch``, what the store knew before), the intersection of the ISRs, so ``in_isr`` holds only when this
    replica was in the ISR of every partition. None before any fetch answered."""
    views = list(seen)
    if not views:
        return None
    epoch_seen = max(epoch for epoch, _ in views)
    isr = set(views[0][1])
    for _, other in views[1:]:
        isr &= set(other)
    return PersistedReplicaState(
        replica_id, epoch_seen, max(highest_epoch, epoch_seen), tuple(sorted(isr)), replica_id in isr
    )
