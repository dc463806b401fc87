"""The follower's side of the fetch protocol: the path it looks up in the leader's mount, and what it reads there.

The contract (docs/replication.md has the whole of it; the leader's mount builds the files)::

    LEADER_MOUNT/.logfs/fetch/<replica-id>/<topic>/<partition>/<fetch-offset>.<last-fetched-epoch>[.<leader-epoch>]

is looked up, never listed (-1 when the follower has no epoch yet). The optional third part is the leader epoch the
follower believes current (a cluster node's fetcher always sends it; ``logfs follow`` does not): when it is not the
leader's the answer has no batches and ``error`` FENCED_LEADER_EPOCH (ours is older) or UNKNOWN_LEADER_EPOCH (newer).
Reading it returns a snapshot fixed at lookup:
one JSON line, then exactly ``records_bytes`` bytes of whole RecordBatch v2 batches as the leader stores them
(LOG_END isolation), from the batch holding the fetch offset, at most 1 MiB, at least one whole batch if any::

    {"leader_epoch": 3, "high_watermark": 120, "log_start_offset": 0, "log_end_offset": 140, "isr": [1, 2],
     "diverging_epoch": null, "error": null, "segment_bases": [128], "records_bytes": 2048}\\n
    <2048 bytes of batches>

``diverging_epoch`` is ``{"epoch": e, "end_offset": o}`` when the follower's last fetched epoch ended earlier on
the leader (Kafka's divergingEpoch), ``error`` is ``"OFFSET_OUT_OF_RANGE"``, one of the two above, or null.
A lookup at the leader's LEO
waits up to 500 ms for new data (long poll). An id not in the leader's ``replica.ids`` answers EPERM; an unknown
topic or partition ENOENT.

How this side reads it: one ``open`` (the lookup: the leader takes its snapshot and records the follower's LEO),
then reads until the JSON line and its ``records_bytes`` are in, never trusting ``st_size``: through a network
filesystem (sshfs) the size may come from a lookup of its own, which is another snapshot. A response that does not
parse, or ends short, raises :class:`FetchProtocolError`; the caller logs it and fetches again.

This module is pure (no trio, no store): :class:`FetchReader` blocks on the leader's mount and runs in a worker thread;
the truncation rules are functions of numbers, tested with Kafka's own
(``PartitionTest.testLastFetchedOffsetValidation``).

Threads: any.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from logfs.core.log.epoch import UNDEFINED_EPOCH, EpochEndOffset

FETCH_DIR = (".logfs", "fetch")
NO_EPOCH = -1  # the last fetched epoch of a follower that has none
OFFSET_OUT_OF_RANGE = "OFFSET_OUT_OF_RANGE"
FENCED_LEADER_EPOCH = "FENCED_LEADER_EPOCH"  # our current leader epoch is older than the leader's
UNKNOWN_LEADER_EPOCH = "UNKNOWN_LEADER_EPOCH"  # ours is newer: the leader has not learnt it, or was replaced
LEADER_EPOCH_ERRORS = frozenset({FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH})
KNOWN_ERRORS = frozenset({OFFSET_OUT_OF_RANGE}) | LEADER_EPOCH_ERRORS

# Limits. A response holds at most 1 MiB of batches (the leader's cut, replica.fetch.max.bytes) plus its JSON line.
FETCH_RECORDS_BYTES_MAX = 1024 * 1024
READ_CHUNK_BYTES = FETCH_RECORDS_BYTES_MAX + 64 * 1024  # one read(2) into a buffer this size takes most answers
HEADER_BYTES_MAX = 4 * 1024 * 1024  # segment_bases of tiny segments make a long line; anything longer is garbage


class FetchProtocolError(Exception):
    """A fetch response this side cannot use: not the contract's JSON line, or fewer bytes than it announced."""


@dataclass(frozen=True, slots=True)
class DivergingEpoch:
    """Where the follower's last fetched epoch ended on the leader (Kafka's FetchResponse divergingEpoch)."""

    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class FetchResponse:
    """One parsed fetch file."""

    leader_epoch: int
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    isr: tuple[int, ...]
    diverging_epoch: DivergingEpoch | None
    error: str | None
    segment_bases: tuple[int, ...]
    records: memoryview  # whole batches; of a FetchReader's buffer: valid until its next read

    @property
    def out_of_range(self) -> bool:
        return self.error == OFFSET_OUT_OF_RANGE

    @property
    def epoch_refused(self) -> bool:
        """The leader refused our current leader epoch: nothing to apply; learn the leadership again."""
        return self.error in LEADER_EPOCH_ERRORS


def fetch_path(
    leader_mount: Path,
    replica_id: int,
    topic: str,
    partition: int,
    fetch_offset: int,
    last_fetched_epoch: int,
    current_leader_epoch: int | None = None,
) -> Path:
    """The fetch file of one partition for a follower at ``fetch_offset`` whose last batch had ``last_fetched_epoch``
    (NO_EPOCH when it has none); with ``current_leader_epoch`` (the epoch this follower believes the leader's) the
    three-part name, which the leader refuses at another epoch."""
    epoch = NO_EPOCH if last_fetched_epoch < 0 else last_fetched_epoch
    name = f"{fetch_offset}.{epoch}"
    if current_leader_epoch is not None:
        name += f".{current_leader_epoch}"
    return leader_mount.joinpath(*FETCH_DIR, str(replica_id), topic, str(partition), name)


class FetchReader:
    """Reads fetch files, one at a time, into one buffer that it reuses.

    A follower reads up to ~1 MiB per fetch, and a fresh buffer per read costs its page faults while the kernel copies
    the answer in (measured, a 1 MiB answer through a leader's mount: 0.77 ms into a new buffer, 0.30 ms into a
    reused one). The FetchResponse that :meth:`read` returns *views* this buffer: it is valid until the reader's next
    read, which is how a follower's partition task uses it (apply the answer, then fetch again). One thread at a
    time; a response larger than the buffer grows it (a new buffer: views of the old one stay intact).
    """

    def __init__(self, size: int = READ_CHUNK_BYTES) -> None:
        self._buf = bytearray(size)

    def read(self, path: Path) -> FetchResponse:
        """Look ``path`` up and read its snapshot whole. Blocks (up to the leader's 500 ms long poll, or as long as a
        hung network filesystem holds it): worker thread. OSError from the leader's mount as is; FetchProtocolError
        for a response that does not parse."""
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            head, header_end, size = self._read_whole(fd, path)
        finally:
            os.close(fd)
        return _response(head, memoryview(self._buf)[header_end + 1 : size], str(path))

    def _read_whole(self, fd: int, path: Path) -> tuple[dict[str, Any], int, int]:
        """Read until the JSON line and its ``records_bytes`` are in (or EOF: then the length check refuses it):
        (the parsed line, where it ends, the bytes read)."""
        size = 0
        head: dict[str, Any] | None = None
        header_end = need = -1
        while True:
            if head is None:
                header_end = self._buf.find(b"\n", 0, size)
                if header_end >= 0:
                    head = _head(bytes(self._buf[:header_end]), str(path))
                    need = header_end + 1 + _records_bytes(head, str(path))
                    if need > len(self._buf):
                        self._grow(need, size)
                elif size > HEADER_BYTES_MAX:
                    raise FetchProtocolError(f"{path}: no end of the JSON line in {size} bytes")
                elif size == len(self._buf):
                    self._grow(2 * size, size)
            if head is not None and size >= need:
                return head, header_end, size
            got = os.readv(fd, [memoryview(self._buf)[size : need if head is not None else len(self._buf)]])
            if not got:
                if head is None:
                    raise FetchProtocolError(f"{path}: no JSON line ({size} bytes)")
                return head, header_end, size
            size += got

    def _grow(self, capacity: int, keep: int) -> None:
        grown = bytearray(capacity)
        grown[:keep] = self._buf[:keep]
        self._buf = grown


def parse_fetch_response(data: bytes | bytearray, *, where: str = "fetch response") -> FetchResponse:
    """A whole fetch file (its JSON line and exactly ``records_bytes`` bytes) as a FetchResponse whose records view
    ``data``.

    FetchProtocolError names what is wrong: no JSON line, a missing or mistyped field, an unknown error, or a length
    that disagrees with ``records_bytes`` (a short read, or bytes after them).
    """
    header_end = data.find(b"\n")
    if header_end < 0:
        raise FetchProtocolError(f"{where}: no JSON line ({len(data)} bytes)")
    return _response(_head(bytes(data[:header_end]), where), memoryview(data)[header_end + 1 :], where)


def _head(line: bytes, where: str) -> dict[str, Any]:
    try:
        head = json.loads(line)
    except ValueError as exc:
        raise FetchProtocolError(f"{where}: the first line is not JSON: {exc} ({line[:200]!r})") from None
    if not isinstance(head, dict):
        raise FetchProtocolError(f"{where}: the first line is not a JSON object")
    return head


def _records_bytes(head: dict[str, Any], where: str) -> int:
    value = _int(head, "records_bytes", where)
    if not 0 <= value <= FETCH_RECORDS_BYTES_MAX * 64:
        raise FetchProtocolError(f"{where}: records_bytes {value!r} is not a byte count")
    return value


def _response(head: dict[str, Any], records: memoryview, where: str) -> FetchResponse:
    n = _records_bytes(head, where)
    if len(records) != n:
        raise FetchProtocolError(f"{where}: records_bytes says {n}, {len(records)} bytes follow the JSON line")
    error = head.get("error")
    if error is not None and error not in KNOWN_ERRORS:
        raise FetchProtocolError(f"{where}: unknown error {error!r}")
    diverging = head.get("diverging_epoch")
    if diverging is not None:
        if not isinstance(diverging, dict):
            raise FetchProtocolError(f"{where}: diverging_epoch {diverging!r} is not an object or null")
        diverging = DivergingEpoch(_int(diverging, "epoch", where), _int(diverging, "end_offset", where))
    return FetchResponse(
        leader_epoch=_int(head, "leader_epoch", where),
        high_watermark=_int(head, "high_watermark", where),
        log_start_offset=_int(head, "log_start_offset", where),
        log_end_offset=_int(head, "log_end_offset", where),
        isr=_ints(head, "isr", where),
        diverging_epoch=diverging,
        error=error,
        segment_bases=_ints(head, "segment_bases", where),
        records=records,
    )


def _int(obj: dict[str, Any], key: str, where: str) -> int:
    value = obj.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise FetchProtocolError(f"{where}: {key} is {value!r}, not an integer")
    return value


def _ints(obj: dict[str, Any], key: str, where: str) -> tuple[int, ...]:
    value = obj.get(key)
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise FetchProtocolError(f"{where}: {key} is {value!r}, not a list of integers")
    return tuple(value)


# --- truncation rules (Kafka's AbstractFetcherThread) ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Truncation:
    """Where to truncate, and whether that settles the divergence (False: truncate, then fetch again to learn more,
    Kafka's ``truncationCompleted = false``)."""

    offset: int
    complete: bool


def diverging_truncation(diverging: DivergingEpoch, local: EpochEndOffset, log_end_offset: int) -> Truncation:
    """Where a follower truncates on a diverging epoch (``getOffsetTruncationState``).

    ``local`` is the follower's own ``epoch_cache.end_offset_for(diverging.epoch, LEO)``:

    * it knows that epoch: ``min(leader's end, its own end of the epoch, LEO)``, complete;
    * its largest epoch at or below it is another one: ``min(its own end of that epoch, LEO)``, then ask again;
    * it has no epoch at or below it: ``min(leader's end, LEO)``, complete.
    """
    if local.leader_epoch == UNDEFINED_EPOCH or local.end_offset < 0:
        return Truncation(min(diverging.end_offset, log_end_offset), True)
    if local.leader_epoch != diverging.epoch:
        return Truncation(min(local.end_offset, log_end_offset), False)
    return Truncation(min(diverging.end_offset, local.end_offset, log_end_offset), True)


@dataclass(frozen=True, slots=True)
class OutOfRange:
    """What a follower does on OFFSET_OUT_OF_RANGE (``fetchOffsetAndTruncate``): truncate to ``truncate_to``, or
    start over empty at ``start_at``; both None when neither explains it (the leader is behind this follower's
    epochs: a stale leader, so wait and ask again)."""

    truncate_to: int | None = None
    start_at: int | None = None


def out_of_range_action(leader_log_start: int, leader_log_end: int, log_end_offset: int) -> OutOfRange:
    """Kafka's rule: the leader's LEO below ours → truncate to it; the leader's log start above our LEO → truncate
    fully and start at it; otherwise nothing to repair here."""
    if leader_log_end < log_end_offset:
        return OutOfRange(truncate_to=leader_log_end)
    if leader_log_start > log_end_offset:
        return OutOfRange(start_at=leader_log_start)
    return OutOfRange()
