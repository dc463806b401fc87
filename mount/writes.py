"""The write path of the mount: framing, encoding and appending what write requests carry (docs/mount.md, "Writes").

``Operations.write``, ``flush`` and ``fsync`` hand their WriteHandle to :class:`Writer`; this module does the rest:

* Framing on the trio thread (``core/format/framing.py``): a memcpy per request, in the order requests arrived (the
  handle's FIFO lock, taken by the caller before its first await).
* Encoding and appending in one worker-thread call (:func:`append_batches`), one append at a time per partition
  (``PartitionState.append_lock``, waited on in trio, not in a worker thread; readers never take it). Everything a
  request carries is encoded before anything is appended, so a record too large for a batch stores nothing (and,
  for lines, leaves the handle refusing every later write: docs/mount.md, "Over-long lines").
* Each append is the core's leader append (``LeaderPartition.append_records_to_leader``): the mount's leader epoch
  stamped, then the replication HW rule (with no followers the HW moves to the LEO at once; with followers it waits
  for them). A HW move wakes ``follow/`` readers, pollers and acks=all waits; any append wakes fetches long-polling
  at the log end.
* acks=all (docs/replication.md, "acks=all through the mount"): fsync(2) flushes every partition the handle appended to,
  then waits (a trio wait, no lock held: other writers go on) until each one's HW passes what the handle wrote
  (``mount/replication.py``): EIO at once when the ISR is below ``min.insync.replicas``, or after
  ``request.timeout.ms``. An O_SYNC/O_DSYNC handle first checks the ISR (EAGAIN, nothing framed or written, when it is
  too small), then writes, flushes and waits like fsync.
* Produce responses (O_RDWR) and the command files (``config``, ``.logfs/delete-topic``, ``.logfs/delete-records``).

Threads: :class:`Writer` runs on the trio thread; :func:`append_batches` in a worker thread.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import pyfuse3
import trio

from logfs.core.configtext import parse_config_lines
from logfs.core.durable import now_ms
from logfs.core.errors import InvalidJsonRecord, NoKeyOnCompactedTopic, RecordError, RecordTooLarge
from logfs.core.format.batch import Record
from logfs.core.format.framing import BatchFramer, LineFramer
from logfs.core.format.lines import (
    encode_jsonl_lines,
    encode_jsonl_run,
    encode_record_batches,
    encode_text_batches,
    encode_text_run,
    parse_json_lines,
)
from logfs.core.format.partitioner import partition_for_key
from logfs.core.log.log import Log
from logfs.core.replication.replica import BatchTransform, LeaderAppend, LeaderPartition
from logfs.core.store import NewTopic, Store
from logfs.core.topicnames import validate_topic_name
from logfs.core.txn.coordinator import TransactionCoordinator
from logfs.mount.access import Access, Caller
from logfs.mount.errors import (
    BadFileHandle,
    BrokenByTooLarge,
    BrokenFraming,
    InvalidCommand,
    KeylessLines,
    NoEntry,
    ReadOnlyMount,
    UnfinishedBatch,
)
from logfs.mount.forwarding import DirChange, Forwarder
from logfs.mount.groups import GROUP_WRITE_KINDS, Groups
from logfs.mount.handles import Partitions, WriteHandle
from logfs.mount.internal import refuse_internal
from logfs.mount.metrics import Metrics
from logfs.mount.nodes import Kind
from logfs.mount.replication import LeaderReplication
from logfs.mount.runner import Runner
from logfs.mount.transactions import Transactions, transactional_batches
from logfs.mount.tree import ROOT_INODE

_log = logging.getLogger(__name__)

T = TypeVar("T")


APPEND_KINDS = frozenset({Kind.APPEND, Kind.APPEND_JSONL, Kind.BATCHES, Kind.TOPIC_APPEND, Kind.TOPIC_APPEND_JSONL})
TEXT_KINDS = frozenset({Kind.APPEND, Kind.TOPIC_APPEND})  # one record per line


def append_batches(
    leader: LeaderPartition,
    make_batches: Callable[[], Sequence[bytes | bytearray | memoryview]],
    flush: bool,
    txn: TxnWrite | None = None,
) -> LeaderAppend:
    """Encode (``make_batches``) and append the batches as leader (``LeaderPartition.append_records_to_leader``:
    the leader epoch, the HW rule, the flush when asked). Worker thread: blocks on the disk.

    Everything is encoded before anything is appended, so an encoding error (a record too large) stores nothing.
    ``txn``: the batches belong to that transaction (``mount/transactions.py``): the partition is recorded in the
    transaction log first (fenced or ended: the error goes up, nothing appended), and they carry its producer id,
    epoch and sequences.
    """
    batches = make_batches()
    scope = None if txn is None else _in_transaction(txn, leader.log)
    return leader.append_records_to_leader(batches, flush=flush, scope=scope)


@contextlib.contextmanager
def _in_transaction(txn: TxnWrite, log: Log) -> Iterator[BatchTransform]:
    """Hold ``txn`` open around the appends; the batches get its producer fields inside."""
    with txn.coordinator.transactional_write(txn.transactional_id, txn.producer_epoch, txn.topic,
                                             txn.partition) as info:  # fmt: skip
        yield lambda batches: transactional_batches(log, info, batches)


@dataclass(frozen=True, slots=True)
class TxnWrite:
    """An append inside transaction ``transactional_id`` (in the epoch its handle was opened in)."""

    coordinator: TransactionCoordinator
    transactional_id: str
    producer_epoch: int
    topic: str
    partition: int


def max_batch_bytes(log: Log) -> int:
    return min(log.config.max_message_bytes, log.config.segment_bytes)


class Writer:
    """The write path for one mount. Trio thread."""

    def __init__(
        self,
        store: Store,
        partitions: Partitions,
        metrics: Metrics,
        *,
        read_thread: Runner,
        write_thread: Runner,
        replication: LeaderReplication | None = None,
        access: Access,
    ) -> None:
        """``replication`` is None in a follower's mount, which never appends (EROFS before anything gets here).
        ``access``: a command file's lines name topics its opener must own (mount/access.py)."""
        self.store = store
        self.access = access
        self.partitions = partitions
        self.metrics = metrics
        self.replication = replication
        self._read_thread = read_thread
        self._write_thread = write_thread
        self._sticky: dict[str, int] = {}
        self.transactions: Transactions | None = None  # a leader's mount: .logfs/transactions/
        self.groups: Groups | None = None  # .logfs/groups/: commits and group config (mount/groups.py)
        # a node that does not lead: the delete-* lines a caller may make go to the leader (mount/forwarding.py)
        self.forwarder: Forwarder | None = None
        # a cluster's leader: returns once ZooKeeper records the topics as they are now (logfs/cluster/node.py)
        self.record_topics: Callable[[], Awaitable[None]] | None = None

    async def topics_changed(self) -> None:
        """A topic was made, grown or deleted here: on a cluster's leader, answer only once ZooKeeper records it
        (NotRecorded otherwise), so that an acknowledged mkdir or rmdir survives this node's death."""
        if self.record_topics is not None:
            await self.record_topics()

    async def write(self, h: WriteHandle, buf: bytes) -> None:
        """One write request on ``h`` (the caller holds ``h.lock``)."""
        if h.broken is not None:
            raise h.broken(f"{h.node}: an earlier write lost this handle's framing")
        if h.sync and h.node.kind in APPEND_KINDS:
            self._check_enough_replicas(h)  # before framing: a refused request leaves nothing behind, even buffered
        if isinstance(h.framer, BatchFramer):
            await self._batches(h, buf)
            return
        assert h.framer is not None
        try:
            run = h.framer.feed_run(buf)
            if run is None:
                return
            if h.node.kind is Kind.APPEND_JSONL:
                await self._jsonl(h, functools.partial(encode_jsonl_run, run))
            elif h.node.kind in TEXT_KINDS:
                text_run = run
                await self._text(h, lambda now, limit: encode_text_run(text_run, now, limit))
            else:
                await self._lines(h, run.lines())
        except RecordTooLarge:
            # A line too long (LineTooLong, from the framer) or a record too large (the encoder): nothing of this
            # request is stored, and the handle refuses every later write. When the line began in an earlier request
            # of the same write(2), the kernel reports that request's bytes as written (a short count) and the
            # program re-sends the rest of the line: taken as a new line, that rest would be stored as a record.
            h.broken = BrokenByTooLarge
            raise

    async def tail(self, h: WriteHandle) -> None:
        """close(2) of a descriptor: a partial line becomes a record; a partial batch is an error (EBADMSG)."""
        if isinstance(h.framer, LineFramer):
            tail = h.framer.take_tail()
            if tail is not None and h.broken is None:
                await self._lines(h, [tail])
        elif isinstance(h.framer, BatchFramer):
            dropped = h.framer.take_tail()
            if dropped and h.broken is None:
                _log.info("%s: close with %d bytes of an unfinished batch (not stored)", h.node, dropped)
                raise UnfinishedBatch(f"{h.node}: {dropped} bytes of an unfinished batch")

    async def fsync(self, h: WriteHandle) -> None:
        """acks=all: flush every partition ``h`` appended to, then wait until their HWs pass what ``h`` wrote."""
        for partition in sorted(h.touched):
            log = self.store.log(h.node.topic, partition)
            await self._write_thread(log.flush_records)
        if h.touched:
            await self._wait_replicated(h.node.topic, h.touched)

    def _check_enough_replicas(self, h: WriteHandle) -> None:
        node = h.node
        partitions = [node.partition] if node.partition >= 0 else self.store.partitions(node.topic)
        self._leader_replication().check_enough_replicas(node.topic, partitions)

    async def _wait_replicated(self, topic: str, required: dict[int, int]) -> None:
        await self._leader_replication().wait_replicated(topic, required, self.store.config.request_timeout_ms)

    def _forwarding(self) -> Forwarder | None:
        """The forwarder, on a node that does not lead (its changes are the leader's); None on the leader."""
        return self.forwarder if self.forwarder is not None and self.forwarder.enabled and self.replication is None \
            else None  # fmt: skip

    def _leader_replication(self) -> LeaderReplication:
        if self.replication is None:
            raise ReadOnlyMount("a follower's mount appends nothing")
        return self.replication

    async def _dir_change(self, change: DirChange) -> None:
        """A mkdir, rmdir, group claim or transaction's begin another node forwarded (``mount/forwarding.py``; it
        checked its caller's rights): made here as that node's caller would have made it here, when this node leads
        (EROFS otherwise, before anything changes: that node tries the next leader)."""
        self._leader_replication()
        topic = change.topic
        if change.op in ("mkdir", "rmdir", "delete-topic", "delete-records"):  # as the asking node refused it
            refuse_internal(topic)
        if change.uid >= 0 and self.store.has_topic(topic):  # a change of a topic: its owner's, here too
            self.access.check_topic_owner(Caller(change.uid, -1, 0), topic, f"{change.op} through another node")
        if change.op == "claim":
            assert change.owner is not None and self.groups is not None
            await self.groups.claim_as(change.group, change.owner.uid, change.owner.gid)
        elif change.op == "delete-group":  # the owner's or root's, as this node's own rmdir allows
            assert self.groups is not None
            await self.groups.delete(change.group, Caller(change.uid, -1, 0))
        elif change.op == "begin":  # EEXIST while one of that id is open, as mkdir here answers
            assert change.owner is not None and self.transactions is not None
            await self.transactions.begin(change.group, (change.owner.uid, change.owner.gid))
        elif change.op == "delete-topic":
            validate_topic_name(topic)
            if not self.store.has_topic(topic):
                raise NoEntry(f"no topic {topic!r}")
            await self.delete_topic(topic, only_if_empty=False, invalidate=True)
            await self.topics_changed()
        elif change.op == "delete-records":
            await self._delete_records_at(topic, change.partition, change.offset)
        elif change.op == "rmdir":
            if not self.store.has_topic(topic):
                raise NoEntry(f"no topic {topic!r}")
            await self.delete_topic(topic, only_if_empty=True, invalidate=True)
            await self.topics_changed()
        elif change.partition >= 0:
            await self._write_thread(self.store.add_partition, topic, change.partition)
            _log.info("added partition %d to topic %s (through another node)", change.partition, topic)
            await self.topics_changed()
        else:
            await self._write_thread(self.store.create_topics, [NewTopic(topic, owner=change.owner)])
            pyfuse3.invalidate_entry_async(ROOT_INODE, topic.encode(), ignore_enoent=True)
            _log.info("created topic %s with %d partition(s) (through another node)", topic,
                      len(self.store.partitions(topic)))  # fmt: skip
            await self.topics_changed()

    async def delete_topic(self, topic: str, *, only_if_empty: bool, invalidate: bool) -> None:
        """Delete a topic (rmdir: only without records) with no append in flight on any of its partitions."""
        states = [self.partitions.get(topic, p) for p in self.store.partitions(topic)]
        async with _all_locked([s.append_lock for s in states]):
            await self._write_thread(functools.partial(self.store.delete_topic, topic, only_if_empty=only_if_empty))
        self.partitions.drop_topic(topic)
        self._sticky.pop(topic, None)
        _log.info("deleted topic %s", topic)
        if invalidate:
            pyfuse3.invalidate_entry_async(ROOT_INODE, topic.encode(), ignore_enoent=True)

    async def _batches(self, h: WriteHandle, buf: bytes) -> None:
        framer = h.framer
        assert isinstance(framer, BatchFramer)
        batches = framer.feed(buf)
        try:
            if batches:
                await self._append(h, h.node.partition, lambda: batches)
        except NoKeyOnCompactedTopic:
            raise  # a whole batch refused: the framing is intact
        except RecordError:
            h.broken = BrokenFraming  # docs/mount.md, "Writes": the handle's framing is lost; it refuses further writes
            raise
        if framer.failure is not None:
            h.broken = BrokenByTooLarge if isinstance(framer.failure, RecordTooLarge) else BrokenFraming
            raise framer.failure

    async def _lines(self, h: WriteHandle, lines: list[bytes]) -> None:
        """Complete lines written to ``h``: records (append files) or commands (config, .logfs/)."""
        node = h.node
        kind = node.kind
        if kind in TEXT_KINDS:
            await self._text(h, lambda now, limit: encode_text_batches(lines, now, limit))
        elif kind is Kind.APPEND_JSONL:
            await self._jsonl(h, functools.partial(encode_jsonl_lines, lines))
        elif kind is Kind.TOPIC_APPEND_JSONL:
            await self._topic_jsonl(h, lines)
        elif kind is Kind.CONFIG:
            await self._config_lines(node.topic, lines)
        elif kind is Kind.DELETE_TOPIC:
            for line in _commands(lines):
                validate_topic_name(line)  # EINVAL / ENAMETOOLONG before "no such topic" (core/names.py)
                refuse_internal(line)
                if not self.store.has_topic(line):
                    raise NoEntry(f"no topic {line!r}")
                self._check_owner(h, line, "delete-topic")
                if (forwarder := self._forwarding()) is not None:  # made by the leader (mount/forwarding.py)
                    gone = functools.partial(_lacks, self.store, line)
                    await forwarder.change(DirChange("delete-topic", line, uid=_uid(h)), gone)
                    continue
                await self.delete_topic(line, only_if_empty=False, invalidate=True)
                await self.topics_changed()
        elif kind is Kind.DELETE_RECORDS:
            for line in _commands(lines):
                await self._delete_records(h, line)
        elif kind is Kind.FORWARD_DIRS:
            for line in _commands(lines):
                await self._dir_change(DirChange.parse(line))
        elif kind is Kind.TXN_CONTROL:
            await self._control(h, _commands(lines))
        elif kind in GROUP_WRITE_KINDS and self.groups is not None:
            await self.groups.lines(h, lines)
        else:
            raise BadFileHandle(f"{node} takes no lines")

    async def _jsonl(self, h: WriteHandle, encode: Callable[[int, int], Sequence[bytes | bytearray]]) -> None:
        """Lines written to a partition's ``append.jsonl``: ``encode(now_ms, max_batch_bytes)`` parses and encodes
        them in the worker thread that appends them (one thread hand-off per request)."""
        node = h.node
        limit = max_batch_bytes(self.store.log(node.topic, node.partition))
        await self._append(h, node.partition, lambda: encode(now_ms(), limit))

    async def _text(self, h: WriteHandle, encode: Callable[[int, int], Sequence[bytes | bytearray]]) -> None:
        """Lines written to ``append`` (the file's partition) or the topic's ``append`` (Kafka's sticky rule), one
        record each; ``encode(now_ms, max_batch_bytes)`` makes the batches in the worker thread."""
        node = h.node
        partition = node.partition if node.kind is Kind.APPEND else self._next_sticky(node.topic)
        limit = max_batch_bytes(self.store.log(node.topic, partition))
        await self._append(h, partition, lambda: encode(now_ms(), limit))

    def _next_sticky(self, topic: str) -> int:
        """Kafka's sticky rule for null keys, per write: each batch to the next partition in turn."""
        partitions = self.store.partitions(topic)
        if not partitions:
            raise NoEntry(f"topic {topic!r} has no partition")
        turn = (self._sticky.get(topic, -1) + 1) % len(partitions)
        self._sticky[topic] = turn
        return partitions[turn]

    async def _topic_jsonl(self, h: WriteHandle, lines: list[bytes]) -> None:
        topic = h.node.topic
        partitions = self.store.partitions(topic)
        records = await self._read_thread(parse_json_lines, lines, now_ms())
        if partitions and self.store.log(topic, partitions[0]).config.compact:
            keyless = next((n for n, r in enumerate(records) if r.record.key is None), None)
            if keyless is not None:  # before any partition's append: nothing of the write stored
                raise KeylessLines(f"{h.node}: line {keyless + 1} of the write has no key; {topic!r} is compacted")
        groups: dict[int, list[Record]] = {}
        sticky: int | None = None
        for r in records:
            if r.partition is not None:
                if r.partition not in partitions:
                    raise InvalidJsonRecord(f"topic {topic!r} has no partition {r.partition}")
                partition = r.partition
            elif r.record.key is not None:
                partition = partition_for_key(r.record.key, len(partitions))
            else:
                if sticky is None:
                    sticky = self._next_sticky(topic)
                partition = sticky
            groups.setdefault(partition, []).append(r.record)
        encoded: dict[int, list[bytes | bytearray]] = {}
        for partition, group in groups.items():  # encode all before appending any: EFBIG stores nothing
            limit = max_batch_bytes(self.store.log(topic, partition))
            encoded[partition] = await self._read_thread(encode_record_batches, group, limit)
        for partition, batches in encoded.items():
            await self._append(h, partition, lambda b=batches: b)  # type: ignore[misc]

    async def _append(
        self, h: WriteHandle, partition: int, make_batches: Callable[[], Sequence[bytes | bytearray | memoryview]]
    ) -> None:
        topic = h.node.topic
        # taken once: a role change during the append must not answer EROFS ("nothing stored", which a forwarding
        # node retries elsewhere, mount/forwarding.py) for records it stored; the fenced replication's waits fail EIO
        replication = self._leader_replication()
        leader = replication.partition(topic, partition)
        state = self.partitions.get(topic, partition)
        txn = None
        if h.txn is not None:
            assert self.transactions is not None
            txn = TxnWrite(self.transactions.coordinator, h.txn[0], h.txn[1], topic, partition)
        async with state.append_lock:
            done = await self._write_thread(append_batches, leader, make_batches, h.sync, txn)
        infos, error = done.infos, done.error
        if infos:
            h.touched[partition] = infos[-1].last_offset + 1
            self.metrics.appended(
                (topic, partition), sum(i.records_count for i in infos), sum(i.size_bytes for i in infos), len(infos)
            )
            if h.read_write:
                h.responses += "".join(f"{partition} {i.first_offset} {i.last_offset}\n" for i in infos).encode()
            if done.high_watermark_moved:
                state.notify()
            else:
                state.appended()
        if isinstance(error, NoKeyOnCompactedTopic) and h.node.kind is not Kind.BATCHES:
            raise KeylessLines(f"{h.node}: {error.reason}") from error  # lines: EINVAL, batches: EBADMSG
        if error is not None:
            raise error
        if infos and h.sync:  # O_SYNC / O_DSYNC: write + fsync (flushed in the append call)
            await replication.wait_replicated(topic, {partition: infos[-1].last_offset + 1},
                                              self.store.config.request_timeout_ms)  # fmt: skip

    async def _control(self, h: WriteHandle, commands: list[str]) -> None:
        """``commit`` or ``abort`` (one line) ends the handle's transaction; anything else is EINVAL. ``commit
        <label>`` records the label with the decision (``.logfs/labels/<label>`` then exists: how a writer that
        retries learns that its earlier commit happened). A handle of an ended (or taken over) transaction is
        fenced: ESTALE."""
        assert h.txn is not None and self.transactions is not None
        for command in commands:
            words = command.split()
            if not (words == ["abort"] or (words[0] == "commit" and len(words) <= 2)):
                raise InvalidCommand(f"{command!r} is neither 'commit [<label>]' nor 'abort'")
            label = words[1] if len(words) == 2 else None
            await self.transactions.end(h.txn[0], h.txn[1], commit=words[0] == "commit", label=label)

    async def _config_lines(self, topic: str, lines: list[bytes]) -> None:
        text = b"\n".join(lines).decode("utf-8", "replace")

        def apply() -> None:
            overrides = parse_config_lines(text, self.store.topic_overrides(topic))
            self.store.set_topic_overrides(topic, overrides)

        await self._write_thread(apply)
        _log.info("topic %s: config changed", topic)

    def _check_owner(self, h: WriteHandle, topic: str, what: str) -> None:
        """A command file's line changes ``topic`` itself: its opener must own it (mount/access.py)."""
        if h.caller is not None:
            self.access.check_topic_owner(h.caller, topic, what)

    async def _delete_records(self, h: WriteHandle, line: str) -> None:
        parts = line.split()
        if len(parts) != 3 or not parts[1].isdigit() or not parts[2].lstrip("-").isdigit():
            raise InvalidCommand(f"{line!r} is not '<topic> <partition> <offset>'")
        topic, partition, offset = parts[0], int(parts[1]), int(parts[2])
        validate_topic_name(topic)
        refuse_internal(topic)
        log = self.store.log(topic, partition)
        self._check_owner(h, topic, "delete-records")
        forwarder = self._forwarding()
        if forwarder is not None and offset >= 0:  # the leader checks the offset against its HW
            change = DirChange("delete-records", topic, partition, offset=offset, uid=_uid(h))
            await forwarder.change(change, lambda: log.log_start_offset >= offset)
            return
        await self._delete_records_at(topic, partition, offset)

    async def _delete_records_at(self, topic: str, partition: int, offset: int) -> None:
        """Move the partition's log start to ``offset`` (at most its HW: Kafka's DeleteRecords)."""
        log = self.store.log(topic, partition)
        if offset < 0 or offset > log.high_watermark:
            raise InvalidCommand(f"offset {offset} of {topic}-{partition} is outside [0, HW={log.high_watermark}]")
        state = self.partitions.get(topic, partition)
        async with state.append_lock:
            await self._write_thread(self.store.delete_records, topic, partition, offset)
        state.notify()  # the log start moved: fetch sessions tell their followers (mount/session.py)
        _log.info("delete-records: %s-%d now starts at %d", topic, partition, log.log_start_offset)


def _uid(h: WriteHandle) -> int:
    """Who opened ``h`` (root when not known: a handle made without a caller, as in tests of the core paths)."""
    return 0 if h.caller is None else h.caller.uid


def _lacks(store: Store, topic: str) -> bool:
    return not store.has_topic(topic)


def _commands(lines: list[bytes]) -> list[str]:
    """The non-blank lines of a command file, without the ASCII blanks around them; every other byte is the command's
    (so a name that starts or ends with a control character is refused by the name's rule, not trimmed into another
    name). A line of nothing but blanks, Unicode's included, is skipped."""
    return [text for line in lines if (text := line.strip().decode("utf-8", "replace")).strip()]


class _all_locked:  # a context manager, named like one
    """Hold every lock of ``locks`` (in order) for the body."""

    def __init__(self, locks: list[trio.Lock]) -> None:
        self._locks = locks
        self._held: list[trio.Lock] = []

    async def __aenter__(self) -> None:
        try:
            for lock in self._locks:
                await lock.acquire()
                self._held.append(lock)
        except BaseException:
            self._release()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._release()

    def _release(self) -> None:
        while self._held:
            self._held.pop().release()
