"""Fetch sessions: one file per follower that answers for whichever of its partitions has news (Kafka's incremental
fetch sessions, KIP-227, in a filesystem's shape; docs/replication.md, "Fetch sessions", has the protocol).

Why: a per-partition fetch (``mount/replication.py``) is one long poll per partition, so a follower of P partitions
holds P lookups (and P threads) waiting, and a busy partition waits behind idle ones once the follower runs out of
threads. A session is one open file: the follower writes what changed (partitions added, their new fetch offsets,
partitions dropped) and reads one answer for all of them.

* **Open** ``.logfs/fetch/<replica id>/.session`` O_RDWR: one :class:`FetchSession` per open, owned by its handle;
  closing the file ends the session (no state survives it: a follower that reopens adds its partitions again).
* **A write** is request lines, one JSON object a line (a line may span writes: the kernel splits big writes):
  ``{"topic": t, "partition": p, "fetch_offset": o, "last_fetched_epoch": e, "current_leader_epoch": c}`` adds or
  changes a partition (``current_leader_epoch`` may be null or absent: not checked), ``{"topic": t, "partition":
  p, "drop": true}`` drops it. Each add or change is a fetch, with its effects at once (:func:`accept_fetch`: the
  follower's LEO, the ISR, the HW, acks=all waiters released), exactly as a per-partition lookup.
* **A read** returns the next answer (or the rest of the current one): one JSON line
  ``{"error": null, "partitions": [...], "records_bytes": N}`` then exactly N bytes, the batches of the partitions
  in the line's order, each entry being a per-partition fetch answer's line (``core/replication/fetch.py``) with
  ``topic`` and ``partition``. The reader knows the end from the line and N. Reads come in at most 128 KiB at a time
  (FUSE's max_read): an answer spans as many reads as it needs.
* **Only partitions with news appear** (incremental): data past the fetch offset, an error, a HW or ISR other than
  the last answer told, or nothing told yet. A partition whose entry held batches, an error or a diverging epoch is
  then silent until the follower writes it again (its new fetch offset): the leader never sends the same batches
  twice, and the follower says where it is after each answer it used. An entry of only a HW or ISR leaves the
  partition live at the same fetch offset.
* **Cost**: a partition's appends and HW or ISR changes call the session's wake-up (``PartitionState.watchers``),
  which marks it; an answer looks only at marked partitions, so it costs O(partitions with news), never O(session
  partitions). A read with nothing to say waits on one event up to ``FETCH_WAIT_MAX_S`` (replica.fetch.wait.max.ms)
  and then answers an empty answer; it holds no lock other readers need and never blocks the trio thread (the
  batches are read in a worker thread).
* **Limits**: an answer holds at most ``RESPONSE_MAX_BYTES`` of batches (replica.fetch.response.max.bytes; its
  first partition at least one batch), ``PARTITION_MAX_BYTES`` a partition (replica.fetch.max.bytes) and
  ``ANSWER_PARTITIONS_MAX`` entries; what did not fit stays marked for the next read, which answers at once.

Errors per partition (Kafka's names): UNKNOWN_TOPIC_OR_PARTITION (then dropped from the session: the follower adds
it again once its discovery sees it), FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH, OFFSET_OUT_OF_RANGE, or a
diverging epoch; the whole answer's ``error`` is NOT_LEADER_OR_FOLLOWER once this mount stopped leading (ZooKeeper
mode), and the follower reopens.

Interruption: a read waits at most ``FETCH_WAIT_MAX_S``, as a per-partition lookup does, so a signal to the follower
is answered within that bound; the mount's shutdown wakes every session at once (``Partitions.notify_all``).

Threads: the trio thread; the batches are read in a worker thread through the runner given.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from logfs.core.errors import LockBusy, LogfsError
from logfs.core.replication.fetch import FETCH_RECORDS_BYTES_MAX, accept_fetch, fetch_response
from logfs.core.replication.replica import FetchValidation, LeaderPartition, ReplicaChange
from logfs.core.topicnames import validate_topic_name
from logfs.mount.errors import InvalidCommand
from logfs.mount.handles import Handle, Partitions
from logfs.mount.replication import FETCH_HW_NEWS_WAIT_S, FETCH_WAIT_MAX_S, LeaderReplication
from logfs.mount.runner import Runner

_log = logging.getLogger(__name__)

RESPONSE_MAX_BYTES = 10 * 1024 * 1024  # replica.fetch.response.max.bytes (Kafka's default): batches of one answer
PARTITION_MAX_BYTES = FETCH_RECORDS_BYTES_MAX  # replica.fetch.max.bytes (Kafka's default): batches of one partition
ANSWER_PARTITIONS_MAX = 1000  # entries in one answer: keeps its JSON line within a few hundred KiB
REQUEST_LINE_MAX = 64 * 1024  # one request line (a topic name is at most 249 bytes): longer is garbage
LOG_START_SWEEP_S = 5.0  # how often a session looks for log starts that retention moved (nothing wakes it for those)
ACCEPT_SLICE = 256  # request lines handled between two yields of the trio thread (a first request adds thousands)

UNKNOWN_TOPIC_OR_PARTITION = "UNKNOWN_TOPIC_OR_PARTITION"
NOT_LEADER_OR_FOLLOWER = "NOT_LEADER_OR_FOLLOWER"

TP = tuple[str, int]


@dataclass(slots=True)
class SessionPartition:
    """One partition of a session: where the follower said it is, what that fetch's checks said, what the last
    answer told it, and whether it waits for the follower's next word on it."""

    fetch_offset: int
    last_fetched_epoch: int
    validation: FetchValidation | None  # None: the leader has no such partition (UNKNOWN_TOPIC_OR_PARTITION)
    leader: LeaderPartition | None
    told: tuple[int, tuple[int, ...]] | None = None  # (HW, ISR) of the last answer that held it
    told_start: int = -1  # the log start offset that answer told
    answered: bool = False  # in an answer since the follower last wrote it: silent until it writes it again


@dataclass(frozen=True, slots=True)
class _Entry:
    """What one answer says of one partition (rendered in a worker thread)."""

    key: TP
    part: SessionPartition  # the partition's state the entry answered (a later write replaces it)
    header: dict[str, Any]
    records: bytes | memoryview
    told: tuple[int, tuple[int, ...]] | None
    told_start: int = -1


class FetchSession:
    """One open ``.session`` file: its partitions, the ones marked since the last answer, and the answer being read.
    Trio thread; owned by its :class:`SessionHandle`."""

    def __init__(
        self,
        replication: LeaderReplication,
        current: Callable[[], LeaderReplication | None],
        replica: int,
        partitions: Partitions,
        read_thread: Runner,
    ) -> None:
        self._replication = replication
        self._current = current  # the mount's replication now: another one (or None) means it stopped leading
        self._replica = replica
        self._states = partitions
        self._read_thread = read_thread
        self._parts: dict[TP, SessionPartition] = {}
        self._marked: dict[TP, None] = {}  # an ordered set: first marked, first answered
        self._wake = trio.Event()
        self._request = bytearray()  # the start of a request line not yet whole
        self._answer: memoryview = memoryview(b"")
        self._read_lock = trio.Lock()  # one answer at a time
        self._write_lock = trio.Lock()  # request lines in the order they arrived
        self._closed = False
        self._next_sweep = trio.current_time() + LOG_START_SWEEP_S

    @property
    def size(self) -> int:
        return len(self._parts)

    # --- wake-ups ---------------------------------------------------------------------------------------------------

    def _mark(self, key: TP) -> None:
        """The partition may have news (an append, a HW or ISR change, a request): look at it in the next answer."""
        self._marked[key] = None
        self._wake.set()

    def _watch(self, key: TP) -> None:
        state = self._states.get(*key)
        if self not in state.watchers:
            state.watchers[self] = functools.partial(self._mark, key)

    def _unwatch(self, key: TP) -> None:
        state = self._states.maybe_get(*key)
        if state is not None:
            state.watchers.pop(self, None)

    def close(self) -> None:
        """The file was closed: forget every partition (O(session partitions), once)."""
        self._closed = True
        for key in self._parts:
            self._unwatch(key)
        self._parts.clear()
        self._marked.clear()
        self._wake.set()

    # --- requests ---------------------------------------------------------------------------------------------------

    async def write(self, data: bytes) -> None:
        """Request lines: adds, changes, drops (module docstring). InvalidCommand (EINVAL) for a line that is not
        one, InvalidTopic (EINVAL, ENAMETOOLONG when too long) for a topic name outside Kafka's rules; the lines before
        it were taken."""
        async with self._write_lock:
            self._request += data
            end = self._request.rfind(b"\n")
            if end < 0:
                if len(self._request) > REQUEST_LINE_MAX:
                    self._request.clear()
                    raise InvalidCommand(f"a fetch session request line longer than {REQUEST_LINE_MAX} bytes")
                return
            lines = bytes(self._request[:end]).split(b"\n")
            del self._request[: end + 1]
            for i, line in enumerate(lines):
                if i and i % ACCEPT_SLICE == 0:
                    await trio.lowlevel.checkpoint()
                if line.strip():
                    await self._request_line(line)

    async def _request_line(self, line: bytes) -> None:
        try:
            op = json.loads(line)
            topic, partition = op["topic"], op["partition"]
            if not isinstance(topic, str) or not isinstance(partition, int) or isinstance(partition, bool):
                raise TypeError("topic must be a string, partition an integer")
            validate_topic_name(topic)  # InvalidTopic (EINVAL) or TopicNameTooLong: no name outside the rule is kept
            if op.get("drop"):
                self._drop((topic, partition))
                return
            fetch_offset = int(op["fetch_offset"])
            last_epoch = int(op.get("last_fetched_epoch", -1))
            current = op.get("current_leader_epoch")
            current_epoch = None if current is None else int(current)
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidCommand(f"not a fetch session request line ({exc}): {line[:200]!r}") from None
        await self._fetch((topic, partition), fetch_offset, last_epoch, current_epoch)

    def _drop(self, key: TP) -> None:
        if self._parts.pop(key, None) is not None:
            self._unwatch(key)
        self._marked.pop(key, None)

    async def _fetch(self, key: TP, fetch_offset: int, last_epoch: int, current_epoch: int | None) -> None:
        """An add or a change: a fetch of that partition, recorded now (as ``LeaderReplication.fetch`` records a
        per-partition one), then marked so that the next answer looks at it."""
        replication = self._replication
        try:
            leader = replication.partition(*key)
        except LogfsError:
            self._parts[key] = SessionPartition(fetch_offset, last_epoch, None, None)
            self._mark(key)
            return
        accept = functools.partial(accept_fetch, leader, self._replica, fetch_offset, last_epoch,
                                   current_leader_epoch=current_epoch)  # fmt: skip
        try:  # in-memory work, done here unless an append holds the partition
            validation, change = accept(blocking=False)
        except LockBusy:
            validation, change = await self._read_thread(accept)
        if change.high_watermark_deferred:
            moved = await self._read_thread(leader.maybe_increment_high_watermark)
            change = ReplicaChange(change.isr_changed, moved)
        old = self._parts.get(key)
        self._parts[key] = SessionPartition(
            fetch_offset, last_epoch, validation, leader,
            told=None if old is None else old.told, told_start=-1 if old is None else old.told_start,
        )  # fmt: skip
        self._watch(key)
        if change.any:
            self._states.get(*key).notify()  # marks it here too
        self._mark(key)

    # --- answers ----------------------------------------------------------------------------------------------------

    async def read(self, size: int) -> bytes | memoryview:
        """The next ``size`` bytes of the answer being read, or of the next answer (waiting for news)."""
        async with self._read_lock:
            if not self._answer:
                self._answer = memoryview(await self._next_answer())
            data, self._answer = self._answer[:size], self._answer[size:]
            return data

    def _leading(self) -> bool:
        return self._current() is self._replication

    async def _next_answer(self) -> bytes:
        """Wait for news (at most FETCH_WAIT_MAX_S), then render it. A HW move that woke acks=all fsyncs and is the
        only news is held up to FETCH_HW_NEWS_WAIT_S for data to come with it (``mount/replication.py`` says why)."""
        if not self._leading():
            return _render(NOT_LEADER_OR_FOLLOWER, [])
        self._replication.leaders.follower_heard(self._replica)  # a live follower: a new partition's ISR holds it
        deadline = trio.current_time() + FETCH_WAIT_MAX_S
        if trio.current_time() >= self._next_sweep:
            await self._sweep_log_starts()
        held = False
        while True:
            wake = self._wake = trio.Event()
            news, hw_only = self._news()
            if news and (not hw_only or held):
                return await self._answer_with(news)
            if news:  # only a HW move that released acks=all writers: give their next batches a moment
                held = True
                for key in news:
                    self._marked[key] = None
                deadline = min(deadline, trio.current_time() + FETCH_HW_NEWS_WAIT_S)
            if self._closed or self._replication.closing or not self._leading():
                break
            with trio.move_on_at(deadline) as waited:
                await wake.wait()
            if waited.cancelled_caught:
                break
        if not self._leading():
            return _render(NOT_LEADER_OR_FOLLOWER, [])
        news, _ = self._news()
        return await self._answer_with(news)

    async def _sweep_log_starts(self) -> None:
        """Mark the partitions whose log start moved since their last answer. Retention (``Store.tick``) moves log
        starts without waking anyone, so this is the one O(session partitions) walk, every LOG_START_SWEEP_S, in
        slices that let other requests run. A delete-records wakes its partition at once (``mount/writes.py``)."""
        self._next_sweep = trio.current_time() + LOG_START_SWEEP_S
        for i, (key, part) in enumerate(list(self._parts.items())):
            if i and i % 1024 == 0:
                await trio.lowlevel.checkpoint()
            leader = part.leader
            if leader is not None and not part.answered and part.told_start != leader.log.log_start_offset:
                self._mark(key)

    def _news(self) -> tuple[list[TP], bool]:
        """The marked partitions that have something to tell (unmarked), in the order they were marked, at most
        ANSWER_PARTITIONS_MAX (the rest stay marked); and whether all of it is a HW move that released acks=all
        writers. O(marked partitions)."""
        news: list[TP] = []
        hw_only = True
        marked = self._marked
        while marked and len(news) < ANSWER_PARTITIONS_MAX:
            key = next(iter(marked))
            del marked[key]
            part = self._parts.get(key)
            if part is None or part.answered:
                continue
            if part.leader is None or part.validation is None or not part.validation.ok:
                news.append(key)
                hw_only = False
                continue
            try:
                leader = self._replication.partition(*key)
            except LogfsError:
                leader = None
            if leader is not part.leader:  # deleted (and perhaps made again) since the follower added it
                part.leader = part.validation = None
                news.append(key)
                hw_only = False
                continue
            log = leader.log
            told = part.told
            if (
                log.log_end_offset != part.fetch_offset
                or told is None
                or told[1] != leader.isr
                or log.log_start_offset != part.told_start
            ):
                news.append(key)
                hw_only = False
            elif told[0] != log.high_watermark:
                news.append(key)
                hw_only = hw_only and self._states.get(*key).released_acks
        return news, hw_only and bool(news)

    async def _answer_with(self, news: list[TP]) -> bytes:
        """Render ``news`` (a worker thread reads the batches); what did not fit stays marked."""
        jobs = [(key, self._parts[key]) for key in news if key in self._parts]
        entries, left, data = await self._read_thread(_entries, jobs)
        for key in left:
            self._marked[key] = None
        for entry in entries:
            part = self._parts.get(entry.key)
            if part is not entry.part:
                continue  # dropped or written again meanwhile (then marked: the next answer looks again)
            if part.leader is None:
                self._drop(entry.key)  # UNKNOWN_TOPIC_OR_PARTITION: the follower adds it again when it is there
                continue
            part.told, part.told_start = entry.told, entry.told_start
            # batches or an error: silent until the follower says where it is now; a HW or ISR alone: still live
            part.answered = (
                bool(entry.records)
                or entry.header["error"] is not None
                or (entry.header["diverging_epoch"] is not None)
            )
        if left:
            self._wake.set()
        return data


def _entries(jobs: list[tuple[TP, SessionPartition]]) -> tuple[list[_Entry], list[TP], bytes]:
    """Each partition's answer, within the answer's byte limit (the first one with batches at least one batch);
    the partitions left for the next answer; the answer's bytes. Worker thread (reads segment files, and joins up
    to 10 MiB: not on the trio thread)."""
    entries: list[_Entry] = []
    left: list[TP] = []
    total = 0
    for key, part in jobs:
        if total >= RESPONSE_MAX_BYTES:
            left.append(key)
            continue
        head: dict[str, Any] = {"topic": key[0], "partition": key[1]}
        if part.leader is None or part.validation is None:
            head.update(_unknown_header())
            entries.append(_Entry(key, part, head, b"", None))
            continue
        response = fetch_response(part.leader, part.fetch_offset, part.validation,
                                  min(PARTITION_MAX_BYTES, RESPONSE_MAX_BYTES - total))  # fmt: skip
        head.update(response.header())
        total += len(response.records)
        told = (response.high_watermark, response.isr)
        entries.append(_Entry(key, part, head, response.records, told, response.log_start_offset))
    return entries, left, _render(None, entries)


def _unknown_header() -> dict[str, Any]:
    return {
        "leader_epoch": -1, "high_watermark": -1, "log_start_offset": -1, "log_end_offset": -1, "isr": [],
        "diverging_epoch": None, "error": UNKNOWN_TOPIC_OR_PARTITION, "segment_bases": [], "records_bytes": 0,
    }  # fmt: skip


def _render(error: str | None, entries: list[_Entry]) -> bytes:
    """One answer: its JSON line, then every entry's batches in the line's order."""
    total = sum(len(e.records) for e in entries)
    line = json.dumps({"error": error, "partitions": [e.header for e in entries], "records_bytes": total})
    return b"".join([line.encode(), b"\n", *(e.records for e in entries)])


@dataclass(eq=False)
class SessionHandle(Handle):
    """An open ``.session`` file: its session."""

    session: FetchSession | None = None
