"""Transactions through the mount (``.logfs/transactions/``; docs/mount.md, "Idempotent producers and transactions"):
begin, write, commit or abort, time out.

The decisions and their durability are the core's (``core/txn/coordinator.py``: the transaction log in the store); the
markers are the log's (``Log.append_end_txn_marker``). This module runs them for a leader's mount:

* ``mkdir .logfs/transactions/<id>`` → :meth:`Transactions.begin` (a new producer epoch; EEXIST while one is open).
* A write under ``<id>/<topic>/<partition>/`` → :func:`transactional_batches`, called by the write path
  (``mount/writes.py``) in its worker thread inside ``coordinator.transactional_write``: the partition is recorded
  in the transaction log before its first batch lands, and each batch is given the transaction's producer id,
  epoch and the partition's next sequence (from the log's producer state, so a remount continues the sequence).
* ``echo commit > <id>/control`` (or ``abort``) → :meth:`Transactions.end`: the decision is made durable, then a
  marker goes to every partition touched (flushed, the leader's HW rule applied), then readers are woken and the
  directory entry is dropped. Handles opened under the old epoch are fenced from then on (ESTALE).
* :meth:`Transactions.watch` (a task of the server's nursery) completes decided transactions left by a crash at
  start, aborts transactions open in a log that the store's transaction log does not know (a promoted follower's,
  whose coordinator was its old leader), then aborts transactions older than their ``transaction.timeout.ms`` every
  ``EXPIRE_INTERVAL_S``.

Threads: the trio thread; coordinator and log calls in worker threads (they fsync).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

import pyfuse3
import trio

from logfs.core.checkpoint import TopicPartition
from logfs.core.durable import now_ms
from logfs.core.errors import InvalidTxnState, LogfsError, UnknownTopicOrPartition
from logfs.core.format.batch import increment_sequence, read_header, set_producer
from logfs.core.log.log import Log
from logfs.core.names import validate_transactional_id
from logfs.core.store import Store
from logfs.core.txn.coordinator import MarkerWriter, TransactionCoordinator
from logfs.core.txn.labellog import ensure_transaction_state_topic, label_batch
from logfs.core.txn.records import TRANSACTION_STATE_TOPIC, partition_for_transactional_id
from logfs.core.txn.state import TxnInfo
from logfs.mount.errors import NoEntry
from logfs.mount.handles import Partitions
from logfs.mount.internal import append_internal, create_internal_topic
from logfs.mount.nodes import Kind, Node
from logfs.mount.replication import LeaderReplication
from logfs.mount.runner import Runner
from logfs.mount.tree import Tree

_log = logging.getLogger(__name__)


EXPIRE_INTERVAL_S = 1.0  # how often forgotten transactions are looked for (timeouts are 1 s or more)


def transactional_batches(
    log: Log, info: TxnInfo, batches: Sequence[bytes | bytearray | memoryview]
) -> list[bytearray | memoryview]:
    """``batches`` as the transaction's producer writes them: its id and epoch, the transactional bit, and base
    sequences continuing the producer's last one in this partition (0 in a new epoch, as Kafka requires). Writer
    thread, under the partition's append lock (so no other append of this producer can interleave)."""
    entry = log.producer_state.last_entry(info.producer_id)
    if entry is None or entry.producer_epoch != info.producer_epoch or entry.last_seq < 0:
        sequence = 0
    else:
        sequence = increment_sequence(entry.last_seq, 1)
    out: list[bytearray | memoryview] = []
    for batch in batches:
        data = (
            batch
            if isinstance(batch, bytearray) or (isinstance(batch, memoryview) and not batch.readonly)
            else (bytearray(batch))
        )
        set_producer(data, 0, len(data), producer_id=info.producer_id, producer_epoch=info.producer_epoch,
                     base_sequence=sequence, transactional=True)  # fmt: skip
        sequence = increment_sequence(sequence, read_header(data).records_count)
        out.append(data)
    return out


class Transactions:
    """The mount's side of the transaction coordinator. Trio thread."""

    def __init__(
        self,
        store: Store,
        tree: Tree,
        partitions: Partitions,
        replication: LeaderReplication,
        *,
        write_thread: Runner,
        topics_changed: Callable[[], Awaitable[None]],
    ) -> None:
        """``topics_changed``: the writer's, called once ``__transaction_state`` is made (mount/internal.py)."""
        assert store.transactions is not None
        self._topics_changed = topics_changed
        self.coordinator: TransactionCoordinator = store.transactions
        self.store = store
        self.tree = tree
        self.partitions = partitions
        self.replication = replication
        self._write_thread = write_thread

    def epoch_of(self, transactional_id: str) -> int:
        """The producer epoch of the open transaction ``transactional_id`` (a handle opened now writes in it)."""
        info = self.coordinator.get(transactional_id)
        if info is None or not info.state.is_open:
            raise NoEntry(f"transaction {transactional_id!r} is not open")
        return info.producer_epoch

    async def begin(self, transactional_id: str, owner: tuple[int, int]) -> TxnInfo:
        """mkdir by ``owner`` (uid, gid): a new transaction (EEXIST while one of that id is open), durable with its
        owner before the directory exists (mount/access.py shows it as theirs)."""
        timeout_ms = self.store.config.transaction_timeout_ms
        info: TxnInfo = await self._write_thread(
            lambda: self.coordinator.begin(transactional_id, timeout_ms=timeout_ms, now_ms=now_ms(), owner=owner)
        )
        _log.info("began transaction %s (producer id %d, epoch %d)", transactional_id, info.producer_id,
                  info.producer_epoch)  # fmt: skip
        return info

    async def end(self, transactional_id: str, producer_epoch: int, *, commit: bool, label: str | None = None) -> None:
        """``commit`` or ``abort`` written to ``control``: decide durably, mark every partition, wake the readers."""
        info = self.coordinator.get(transactional_id)
        if info is None or not info.state.is_open:
            raise InvalidTxnState(f"transaction {transactional_id!r} is not open")
        if label is not None:
            validate_transactional_id(label)  # a label is a file name under .logfs/labels/: the same rules
        marked: list[TopicPartition] = []
        ends: dict[TopicPartition, int] = {}
        try:
            await self._write_thread(
                lambda: self.coordinator.end(
                    transactional_id,
                    producer_epoch,
                    commit=commit,
                    marker_writer=self._marker_writer(marked, ends),
                    label=label,
                    now_ms=now_ms(),
                )
            )
        finally:
            self._woken(marked, [transactional_id])
        await self._wait_markers_replicated(ends)
        if commit and label is not None:
            await self._record_label(transactional_id, label)
        _log.info("%s transaction %s (%d partition(s))", "committed" if commit else "aborted", transactional_id,
                  len(marked))  # fmt: skip

    async def _record_label(self, transactional_id: str, label: str) -> None:
        """The committed ``label`` as a record of ``__transaction_state`` (the id's partition), flushed and
        replicated like the markers before it, so that it survives this node (core/txn/labellog.py says why it
        comes after the markers). A failure is the commit's fsync's (EIO): the commit stands; only its label may
        be lost with this node, and a replay then commits again."""
        labels = self.coordinator.replicated_labels
        await create_internal_topic(self.store, self._write_thread, self._topics_changed, TRANSACTION_STATE_TOPIC,
                                    ensure_transaction_state_topic)  # fmt: skip
        p = partition_for_transactional_id(transactional_id, len(self.store.partitions(TRANSACTION_STATE_TOPIC)))
        forgotten = labels.beyond_cap(p)
        end = await append_internal(self.replication, self.partitions, self._write_thread, TRANSACTION_STATE_TOPIC,
                                    p, label_batch(label, forgotten, now_ms()), flush=True)  # fmt: skip
        labels.add(p, label, forgotten)
        await self.replication.wait_replicated(TRANSACTION_STATE_TOPIC, {p: end}, self.store.config.request_timeout_ms)

    async def _wait_markers_replicated(self, ends: dict[TopicPartition, int]) -> None:
        """acks=all for the markers: ``control`` returns once every marker is below its partition's HW. The
        decision lives in this store's transaction log only, so a follower promoted before it holds a marker would
        abort the transaction as an orphan (``_abort_orphans``); once the markers are in the ISR, every future leader
        has them. A failure is the fsync's (NotEnoughReplicasAfterAppend, ReplicationTimeout: EIO): the decision
        stands on this leader, and survives a failover only if the markers do, as for any unacknowledged append."""
        by_topic: dict[str, dict[int, int]] = {}
        for tp, end in ends.items():
            by_topic.setdefault(tp.topic, {})[tp.partition] = end
        for topic, required in sorted(by_topic.items()):
            try:
                await self.replication.wait_replicated(topic, required, self.store.config.request_timeout_ms)
            except UnknownTopicOrPartition:  # deleted meanwhile: nothing left to replicate
                continue

    async def watch(self) -> None:
        """Complete what a crash left decided, then abort forgotten transactions every EXPIRE_INTERVAL_S. A task of
        the server's nursery; runs until cancelled."""
        ends: dict[TopicPartition, int] = {}
        completed = await self._sweep(lambda writer: self.coordinator.complete_pending(writer, now_ms=now_ms()),
                                      "completed", ends)  # fmt: skip
        await self._record_completed_labels(completed, ends)
        marked: list[TopicPartition] = []
        orphans: list[str] = []
        try:
            orphans = await self._write_thread(self._abort_orphans, marked)
        except (LogfsError, OSError) as exc:  # the mount serves on; the transactions stay open
            _log.error("transactions: aborting those the store does not know failed: %s", exc)
        except Exception:  # a bug: its traceback in the log, and the mount serves on (an error here would end it)
            _log.exception("transactions: aborting those the store does not know failed unexpectedly")
        finally:
            self._woken(marked, [])
        for orphan in orphans:
            _log.warning("aborted %s: open in the log, unknown to this store's transaction log", orphan)
        while True:
            await trio.sleep(EXPIRE_INTERVAL_S)
            await self._sweep(lambda writer: self.coordinator.expire(now_ms(), writer), "timed out and aborted")

    async def _record_completed_labels(self, completed: list[str], ends: dict[TopicPartition, int]) -> None:
        """The labels of commits a crash left decided and the start completed: recorded as :meth:`end` records
        them, once the markers are replicated. A failure is logged; that label then stays this store's own (a
        replay after a change of leader commits again)."""
        labelled: list[tuple[str, str]] = []
        for transactional_id in completed:
            info = self.coordinator.get(transactional_id)
            if info is not None and info.commit and info.label is not None:
                labelled.append((transactional_id, info.label))
        if not labelled:
            return
        try:
            await self._wait_markers_replicated(ends)
            for transactional_id, label in labelled:
                await self._record_label(transactional_id, label)
        except (LogfsError, OSError) as exc:
            _log.error("transactions: recording the labels of %s failed: %s", [t for t, _ in labelled], exc)

    async def _sweep(
        self, run: Callable[[MarkerWriter], list[str]], what: str, ends: dict[TopicPartition, int] | None = None
    ) -> list[str]:
        """``run`` the coordinator's sweep with a marker writer (the markers' ends into ``ends``); the ids it
        ended."""
        pending = [t for t in self.coordinator.open_transactions() if t.state.is_open]
        if not pending:
            return []
        marked: list[TopicPartition] = []
        ids: list[str] = []
        try:
            ids = await self._write_thread(lambda: run(self._marker_writer(marked, ends)))
        except (LogfsError, OSError) as exc:  # retried on the next sweep
            _log.error("transactions: %s failed: %s", what, exc)
        except Exception:  # a bug: its traceback in the log; the mount serves on and the next sweep retries
            _log.exception("transactions: %s failed unexpectedly", what)
        finally:
            self._woken(marked, ids)
        for transactional_id in ids:
            _log.warning("transaction %s %s", transactional_id, what)
        return ids

    def _abort_orphans(self, marked: list[TopicPartition]) -> list[str]:
        """At mount (worker thread): producer ids found in the logs are never handed out again (a promoted
        follower's logs hold its old leader's), and a transaction open in a log that this store's transaction log
        does not know as open (its coordinator was the old leader's) is aborted — nothing could ever end it, and it
        would hold the partition's last stable offset for good."""
        open_ids = {t.producer_id for t in self.coordinator.open_transactions() if t.state.is_open}
        allocator = self.store.producer_ids
        aborted = []
        for tp, log in self.store.logs():
            producers = log.producer_state.producers
            if producers and allocator is not None:
                allocator.advance_past(max(producers))
            for producer_id, first_offset in log.open_transactions():
                entry = producers.get(producer_id)
                if producer_id in open_ids or entry is None:
                    continue
                coordinator_epoch = max(entry.coordinator_epoch, self.coordinator.coordinator_epoch)
                leader = self.replication.partition(tp.topic, tp.partition)  # its epoch: each partition has its own
                log.append_end_txn_marker(producer_id, entry.producer_epoch, commit=False,
                                          coordinator_epoch=coordinator_epoch,
                                          leader_epoch=leader.leader_epoch)  # fmt: skip
                log.flush_records()
                leader.maybe_increment_high_watermark()
                marked.append(tp)
                aborted.append(
                    f"{tp.topic}-{tp.partition}: producer {producer_id}'s transaction from offset {first_offset}"
                )
        return aborted

    def _marker_writer(
        self, marked: list[TopicPartition], ends: dict[TopicPartition, int] | None = None
    ) -> MarkerWriter:
        """Markers for the coordinator (worker thread): appended in the partition's leader epoch and flushed
        (nothing writes a marker again once the transaction log says COMPLETE), then the leader's HW rule. A
        partition whose topic was deleted gets none. ``ends`` receives each marked partition's offset just past its
        marker."""

        def write(
            topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
        ) -> None:
            try:
                leader = self.replication.partition(topic, partition)
            except UnknownTopicOrPartition:
                return
            log = leader.log
            info = log.append_end_txn_marker(producer_id, producer_epoch, commit=commit,
                                             coordinator_epoch=coordinator_epoch,
                                             leader_epoch=leader.leader_epoch)  # fmt: skip
            log.flush_records()
            leader.maybe_increment_high_watermark()
            marked.append(TopicPartition(topic, partition))
            if ends is not None:
                ends[TopicPartition(topic, partition)] = info.last_offset + 1

        return write

    def _woken(self, marked: list[TopicPartition], ended: list[str]) -> None:
        """After markers: wake the partitions' readers and fetches (the LSO and maybe the HW moved), and drop the
        kernel's entries of the ended transactions' directories (and of their forwarded twins)."""
        for tp in marked:
            state = self.partitions.get(tp.topic, tp.partition)
            state.appended()
            state.notify()
        if ended:
            # the directory, and its twin that other nodes look up (mount/forwarding.py: whether it is open, whose)
            twins = [self.tree.stable_inode(Node(Kind.TXN_DIR, forwarded=forwarded)) for forwarded in (False, True)]
            for transactional_id in ended:
                for txn_dir in twins:
                    pyfuse3.invalidate_entry_async(txn_dir, transactional_id.encode(), ignore_enoent=True)
