"""The follower's side of a fetch session: one file of the leader's mount that answers for all its partitions
(docs/replication.md, "Fetch sessions"; the leader's side is ``mount/session.py``).

::

    LEADER_MOUNT/.logfs/fetch/<replica-id>/.session      opened O_RDWR, kept open

A request is lines written to it, one JSON object a line: a partition's fetch (an add or a change: its fetch offset,
the epoch of its last batch, the leader epoch this follower believes current or null) or its drop. An answer is read
back: one JSON line ``{"error": …, "partitions": [...], "records_bytes": N}`` then exactly N bytes, each entry's
batches in turn (an entry is a per-partition fetch answer's line, ``logfs/follower/fetch.py``, with its ``topic`` and
``partition``). Only partitions with news appear; one that appeared stays silent until this side writes it again,
so after every answer the follower writes the new fetch offset of each partition it answered.

A leader without sessions (an older one) answers ENOENT to the open: the daemon falls back to per-partition fetches.

This module is pure (no trio, no store): :class:`SessionClient` blocks on the leader's mount, in a worker thread.

Threads: one thread at a time per client.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from logfs.follower.fetch import (
    FETCH_DIR,
    HEADER_BYTES_MAX,
    READ_CHUNK_BYTES,
    FetchProtocolError,
    FetchResponse,
    _head,
    _int,
    _response,
)

SESSION_NAME = ".session"
UNKNOWN_TOPIC_OR_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"
NOT_LEADER_OR_FOLLOWER = "NOT_LEADER_OR_FOLLOWER"
ANSWER_BYTES_MAX = 64 * 1024 * 1024  # more than any answer holds (10 MiB of batches and its line): else garbage


class SessionUnreadable(FetchProtocolError):
    """A read of the session returned end of file at once: the path to the leader does not pass the session's reads
    through. sshfs does that: the kernel believes the file's size (0) and answers EOF without asking. The follower
    then fetches per partition, whose files have their exact size."""


def session_path(leader_mount: Path, replica_id: int) -> Path:
    return leader_mount.joinpath(*FETCH_DIR, str(replica_id), SESSION_NAME)


def has_sessions_marker(leader_mount: Path) -> Path:
    """A file every mount that has fetch sessions shows, whatever its role (``.logfs/partitions``, of the same
    release). A session open refused with ENOENT means "no sessions" (an older leader: fetch per partition) only
    when this is missing too; with it, the mount has sessions but serves no fetches now (a cluster node that does
    not lead yet, or no more; a follower's read-only mount), and the follower asks again later."""
    return leader_mount / FETCH_DIR[0] / "partitions"


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """One line of a request: a partition's fetch (``drop`` False) or its removal from the session."""

    topic: str
    partition: int
    fetch_offset: int = 0
    last_fetched_epoch: int = -1
    current_leader_epoch: int | None = None
    drop: bool = False

    def line(self) -> bytes:
        if self.drop:
            return json.dumps({"topic": self.topic, "partition": self.partition, "drop": True}).encode() + b"\n"
        return json.dumps({
            "topic": self.topic, "partition": self.partition, "fetch_offset": self.fetch_offset,
            "last_fetched_epoch": self.last_fetched_epoch, "current_leader_epoch": self.current_leader_epoch,
        }).encode() + b"\n"  # fmt: skip


@dataclass(frozen=True, slots=True)
class SessionEntry:
    """One partition of an answer: its fetch answer, or None when the leader has no such partition (it left the
    session; add it again once the leader lists it)."""

    topic: str
    partition: int
    response: FetchResponse | None


@dataclass(frozen=True, slots=True)
class SessionAnswer:
    """One answer: NOT_LEADER_OR_FOLLOWER in ``error`` when the mount stopped leading (reopen later)."""

    error: str | None
    entries: tuple[SessionEntry, ...]


class SessionClient:
    """One open session on a leader's mount, with one reused buffer (the records of an answer's entries view it:
    valid until the next :meth:`exchange`). OSError of the leader's mount as is (ENOENT at open: a leader without
    sessions); FetchProtocolError for an answer that does not parse."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        self._buf = bytearray(READ_CHUNK_BYTES)

    def close(self) -> None:
        """Close the file, which ends the session on the leader. A dead leader mount fails the close (ENOTCONN):
        nothing to do about it, the descriptor is gone all the same."""
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            with contextlib.suppress(OSError):
                os.close(fd)

    def exchange(self, request: Iterable[PartitionFetch]) -> SessionAnswer:
        """Write ``request`` (possibly nothing), then read one answer whole. Blocks up to the leader's wait (500 ms)
        when nothing has news: worker thread."""
        data = b"".join(op.line() for op in request)
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        head, start, end = self._read_answer()
        return _answer(head, memoryview(self._buf)[start:end], str(self.path))

    def _read_answer(self) -> tuple[dict[str, Any], int, int]:
        size = 0
        head: dict[str, Any] | None = None
        start = need = -1
        while True:
            if head is None:
                newline = self._buf.find(b"\n", 0, size)
                if newline >= 0:
                    head = _head(bytes(self._buf[:newline]), str(self.path))
                    start = newline + 1
                    records = _int(head, "records_bytes", str(self.path))
                    if not 0 <= records <= ANSWER_BYTES_MAX:
                        raise FetchProtocolError(f"{self.path}: records_bytes {records} is not a byte count")
                    need = start + records
                    if need > len(self._buf):
                        self._grow(need, size)
                elif size > HEADER_BYTES_MAX:
                    raise FetchProtocolError(f"{self.path}: no end of the JSON line in {size} bytes")
                elif size == len(self._buf):
                    self._grow(2 * size, size)
            if head is not None and size >= need:
                return head, start, need
            got = os.readv(self._fd, [memoryview(self._buf)[size : need if head is not None else len(self._buf)]])
            if not got:
                if size == 0:
                    raise SessionUnreadable(f"{self.path}: a read returned end of file at once")
                raise FetchProtocolError(f"{self.path}: the answer ended after {size} bytes")
            size += got

    def _grow(self, capacity: int, keep: int) -> None:
        grown = bytearray(capacity)
        grown[:keep] = self._buf[:keep]
        self._buf = grown


def _answer(head: dict[str, Any], records: memoryview, where: str) -> SessionAnswer:
    """An answer's line and its batches as entries whose records view ``records``."""
    error = head.get("error")
    if error is not None and error != NOT_LEADER_OR_FOLLOWER:
        raise FetchProtocolError(f"{where}: unknown session error {error!r}")
    partitions = head.get("partitions")
    if not isinstance(partitions, list):
        raise FetchProtocolError(f"{where}: partitions is {partitions!r}, not a list")
    entries = []
    at = 0
    for item in partitions:
        if not isinstance(item, dict) or not isinstance(item.get("topic"), str):
            raise FetchProtocolError(f"{where}: a partition entry {item!r} has no topic")
        topic, partition = item["topic"], _int(item, "partition", where)
        if item.get("error") == UNKNOWN_TOPIC_OR_PARTITION:
            entries.append(SessionEntry(topic, partition, None))
            continue
        n = _int(item, "records_bytes", where)
        if n < 0 or at + n > len(records):
            raise FetchProtocolError(f"{where}: {topic}-{partition}'s {n} bytes pass the answer's end")
        entries.append(SessionEntry(topic, partition, _response(item, records[at : at + n], f"{where} {topic}")))
        at += n
    if at != len(records):
        raise FetchProtocolError(f"{where}: the entries hold {at} bytes, the answer {len(records)}")
    return SessionAnswer(error, tuple(entries))
