"""The leader's answer to a follower's fetch (docs/replication.md has the protocol; Kafka's Partition.fetchRecords
for a follower, with ``replica.fetch.max.bytes`` = 1 MiB and LOG_END isolation).

A fetch names a follower, a partition, the follower's fetch offset (its LEO) and the epoch of its last batch, and
optionally the leader epoch the follower believes current (Kafka's currentLeaderEpoch: a cluster node's fetcher
always sends it). The leader answers in two steps, so that the mount can wait between them without holding anything:

1. :func:`accept_fetch`: the fetcher's leader epoch (:func:`check_leader_epoch`: another epoch than the leader's is
   refused with FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH, no batches and nothing recorded, as Kafka's
   ``Partition.checkCurrentLeaderEpoch``), Kafka's checks (:meth:`LeaderPartition.validate_fetch`) and, when they
   pass, the follower's new state (:meth:`LeaderPartition.record_fetch`: its LEO, the ISR, the HW).
2. :func:`fetch_response`: the snapshot the follower reads: the leader's epoch, HW, log start offset, LEO and ISR
   of that moment, the diverging epoch or the error when there is one, and otherwise the stored batches from the
   one holding the fetch offset, whole, as many as fit in ``FETCH_RECORDS_BYTES_MAX`` (always at least one), across
   segment boundaries, with the base offsets of the segments they enter (the follower rolls where the leader
   rolled, so its ``.log`` files end up byte-identical).

:meth:`FetchResponse.render` gives the file's bytes: one JSON line (keys in the contract's order, ``", "`` and
``": "`` between them so that ``cat`` shows it readably), then exactly ``records_bytes`` bytes of batches.

Threads: any; :func:`fetch_response` reads segment files (blocking: call it from a worker thread).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from dataclasses import dataclass

from logfs.core.durable import now_ms as wall_clock_ms
from logfs.core.errors import OffsetOutOfRange
from logfs.core.log.epoch import EpochEndOffset
from logfs.core.log.log import Log
from logfs.core.log.storedbatches import StoredBatches
from logfs.core.offsets import Isolation
from logfs.core.replication.replica import NO_CHANGE, FetchValidation, LeaderPartition, ReplicaChange

FETCH_RECORDS_BYTES_MAX = 1024 * 1024  # replica.fetch.max.bytes (Kafka's default): batches in one response
OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"  # Kafka's error name, as the response's "error" says it
FENCED_LEADER_EPOCH = "FENCED_LEADER_EPOCH"  # the fetcher's current leader epoch is older than the leader's
UNKNOWN_LEADER_EPOCH = "UNKNOWN_LEADER_EPOCH"  # the fetcher's current leader epoch is newer than the leader's
HEADER_ROOM = 1024  # bytes kept free before an answer's batches for its JSON line (render): usually ~250


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """One fetch file's contents. ``records`` are whole stored batches; ``segment_bases`` the bases of the leader's
    segments that start at or after the fetch offset and at or before the last returned offset."""

    leader_epoch: int
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    isr: tuple[int, ...]
    diverging_epoch: EpochEndOffset | None = None
    error: str | None = None
    segment_bases: tuple[int, ...] = ()
    records: bytes | memoryview = b""  # from read_batches: a view of the buffer the file's bytes are rendered in

    def header(self) -> dict[str, object]:
        diverging = self.diverging_epoch
        return {
            "leader_epoch": self.leader_epoch,
            "high_watermark": self.high_watermark,
            "log_start_offset": self.log_start_offset,
            "log_end_offset": self.log_end_offset,
            "isr": list(self.isr),
            "diverging_epoch": None
            if diverging is None
            else {"epoch": diverging.leader_epoch, "end_offset": diverging.end_offset},
            "error": self.error,
            "segment_bases": list(self.segment_bases),
            "records_bytes": len(self.records),
        }

    def render(self) -> bytes | memoryview:
        """The JSON line and the batches: what the fetch file holds.

        Batches from :func:`read_batches` lie in a buffer with room for the line before them: the line is written
        there and the file's bytes are a view of that buffer (no second copy of up to 1 MiB; measured, that copy
        and its fresh pages cost ~0.3 ms of the ~0.7 ms an answer took). A line longer than the room is joined.
        It writes into that buffer, so a response is rendered once (as the mount does), not twice with different
        lines."""
        line = json.dumps(self.header()).encode() + b"\n"
        records = self.records
        if isinstance(records, memoryview) and isinstance(records.obj, bytearray):
            buffer = records.obj
            start = len(buffer) - len(records) - len(line)  # read_batches' view ends where its buffer ends
            if start >= 0:
                buffer[start : start + len(line)] = line
                return memoryview(buffer)[start:]
        return line + bytes(records)


def check_leader_epoch(leader_epoch: int, current_leader_epoch: int | None) -> str | None:
    """Kafka's ``Partition.checkCurrentLeaderEpoch``: None when the fetcher did not say its leader epoch (a
    two-part fetch name: ``logfs follow``) or says the leader's; FENCED_LEADER_EPOCH when it is older (the fetcher
    missed an election: it must learn the new leadership before it fetches), UNKNOWN_LEADER_EPOCH when it is newer
    (this leader has not learnt its own new epoch yet, or was replaced)."""
    if current_leader_epoch is None or current_leader_epoch == leader_epoch:
        return None
    return FENCED_LEADER_EPOCH if current_leader_epoch < leader_epoch else UNKNOWN_LEADER_EPOCH


def accept_fetch(
    partition: LeaderPartition,
    replica_id: int,
    fetch_offset: int,
    last_fetched_epoch: int,
    now_ms: int | None = None,
    *,
    blocking: bool = True,
    current_leader_epoch: int | None = None,
) -> tuple[FetchValidation, ReplicaChange]:
    """Validate a fetch and, when it is valid, record it (the follower's LEO, the ISR, the HW). A fetch at another
    leader epoch (:func:`check_leader_epoch`), a diverging or an out-of-range fetch changes nothing, as in Kafka.
    UnknownReplica for an id that is not a follower.

    In-memory work only; ``blocking=False`` (the mount's trio thread) never waits for an append: see
    :meth:`LeaderPartition.record_fetch`."""
    partition.replica_state(replica_id)  # UnknownReplica before anything else
    epoch_error = check_leader_epoch(partition.leader_epoch, current_leader_epoch)
    if epoch_error is not None:
        return FetchValidation(leader_epoch_error=epoch_error), NO_CHANGE
    leader_end_offset = partition.log.log_end_offset  # Kafka's initialLogEndOffset: before the read
    validation = partition.validate_fetch(fetch_offset, last_fetched_epoch)
    if not validation.ok:
        return validation, NO_CHANGE
    now = wall_clock_ms() if now_ms is None else now_ms
    return validation, partition.record_fetch(replica_id, fetch_offset, leader_end_offset, now, blocking=blocking)


def fetch_response(
    partition: LeaderPartition,
    fetch_offset: int,
    validation: FetchValidation,
    max_bytes: int = FETCH_RECORDS_BYTES_MAX,
) -> FetchResponse:
    """The snapshot a follower reads for a fetch that :func:`accept_fetch` answered with ``validation``.

    The HW and log start are read before the LEO, so that ``HW <= LEO`` holds in the answer while appends go on;
    the batches stop at that LEO. A fetch that became out of range meanwhile (retention moved the log start past it)
    answers OFFSET_OUT_OF_RANGE. Blocking reads: worker thread.
    """
    log = partition.log
    hw = log.high_watermark
    log_start = log.log_start_offset
    leo = log.log_end_offset
    base = FetchResponse(partition.leader_epoch, hw, log_start, leo, partition.isr)
    if validation.leader_epoch_error is not None:
        return dataclasses.replace(base, error=validation.leader_epoch_error)
    if validation.diverging_epoch is not None:
        return dataclasses.replace(base, diverging_epoch=validation.diverging_epoch)
    if validation.out_of_range or not log_start <= fetch_offset <= leo:
        return dataclasses.replace(base, error=OFFSET_OUT_OF_RANGE)
    try:
        records, bases = read_batches(log, fetch_offset, leo, max_bytes)
    except OffsetOutOfRange:
        return dataclasses.replace(base, error=OFFSET_OUT_OF_RANGE)
    return dataclasses.replace(base, records=records, segment_bases=tuple(bases))


def read_batches(
    log: Log, fetch_offset: int, end_offset: int, max_bytes: int, *, room: int = HEADER_ROOM
) -> tuple[memoryview, list[int]]:
    """Whole stored batches from the one holding ``fetch_offset``, none at or past ``end_offset``, at most
    ``max_bytes`` in all but at least one batch when there is one, continuing into later segments; and the base
    offsets of the segments entered at or after ``fetch_offset``.

    The range is the core's one range read (``Log.read_range``, core/log/rangeread.py, at the log end: a replica's
    isolation), which finds each segment's span and checks a batch left out past the end; the batches are framed up
    to the byte budget, then read straight into one buffer that keeps ``room`` bytes free before them (for
    :meth:`FetchResponse.render`), every one checked (issue 16); they come back as the view of its tail.
    OffsetOutOfRange when retention removed a segment meanwhile (the log start is then past ``fetch_offset``).
    Blocking reads; any thread."""
    spans: list[tuple[StoredBatches, int, int]] = []  # (segment's batches, first byte, end byte)
    bases: list[int] = []
    total = 0
    # The pins outlive each segment's turn: the spans are read after the walk.
    with contextlib.ExitStack() as pins, log.read_range(fetch_offset, end_offset, Isolation.LOG_END, pins=pins) as read:
        for part in read:
            stored = part.stored
            full = False
            hi = part.lo
            last = -1
            for b in stored.headers(part.lo, part.hi):
                if total and total + b.size > max_bytes:
                    full = True
                    break
                hi = b.position + b.size
                total += b.size
                last = b.last_offset
            else:
                if hi < part.hi:  # the walk stopped at a batch declaring more bytes than the span holds
                    raise stored.corrupt(hi, f"declares a size past its span's end {part.hi} (framing)")
            if hi > part.lo:
                if stored.base_offset >= fetch_offset:
                    bases.append(stored.base_offset)
                spans.append((stored, part.lo, hi))
                read.offset = last + 1
            if full:
                break
        buffer = bytearray(room + total)
        view = memoryview(buffer)
        at = room
        for stored, lo, hi in spans:
            stored.read_into(lo, view[at : at + hi - lo])  # checked: no bad bytes to a follower (issue 16)
            at += hi - lo
    return view[room:], bases
