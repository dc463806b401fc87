"""The follower daemon (docs/replication.md, "The follower: `logfs follow`"): :class:`Follower` replicates every topic
and partition of a leader into its own store by reading files of the leader's mount only
(``logfs/follower/fetch.py`` reads the fetch files; docs/replication.md has the protocol), with Kafka's follower
rules (Kafka's ``ReplicaFetcherThread`` and ``AbstractFetcherThread``). ``logfs follow`` runs it
(``logfs/follower/command.py``); so does a cluster node that follows (``logfs/cluster/node.py``).

Theory of operation.

* **The fetch session** (``logfs/follower/sessionfetch.py``): one task fetches every partition through one session
  file of the leader's mount and applies each answer in one worker call. Threads do not grow with partitions. A
  leader without sessions (ENOENT at the open, its mount up) makes the follower fall back to the tasks below.
* **Tasks** (without a session). One trio nursery: a discovery task, one fetch task per partition, the store's
  periodic work (``Store.tick`` every second: retention, deferred deletes, checkpoints) and, with ``--mount``,
  the read-only FUSE mount of the store (``logfs.mount.server.run_mount``). Every blocking call runs in a worker
  thread under a CapacityLimiter: fetches (which long-poll on the leader for up to 500 ms) under one thread per
  partition (``FETCH_THREADS`` to ``FETCH_THREADS_MAX``: an idle partition never delays a busy one), truncations
  and topic changes under ``DISK_THREADS``, and appends at most ``DISK_THREADS`` at once too. No thread of its own.
* **One worker call per fetch** (``logfs/follower/replica.py``'s :func:`fetch_and_apply`): read the answer into the
  partition's reused buffer and, when it brings no news of the leader's epoch or ISR, apply it in the same thread
  (one hand-off to trio per fetch, not two). An answer with news comes back unapplied: the trio task records the
  news (the replica state file) first, then applies it in a worker. A fetch blocked in the leader's mount is
  abandoned on cancellation, so applies pass the partition's :class:`ApplyGate`, which the follower closes before
  it deletes the topic or closes the store.
* **Discovery** (``logfs/follower/discoveryloop.py``, with ``logfs/follower/discovery.py``'s listings): the
  leader's topics, partitions and configs made here, a fetch started per new partition, and a topic the leader
  deleted deleted here (:meth:`Follower._delete_topic`).
* **A fetch** (``logfs/follower/replica.py``'s :func:`apply_fetch`, one partition at a time): from this log's LEO
  with its latest epoch. Then, in Kafka's order: OFFSET_OUT_OF_RANGE → truncate to the leader's LEO when it is below
  ours, or truncate fully and start at the leader's log start when that is above our LEO; a diverging epoch →
  truncate as ``getOffsetTruncationState`` says (``logfs/follower/fetch.py``), then fetch again; otherwise append
  the batches as follower (offsets and epochs as the leader assigned them), rolling a new segment exactly where the
  leader's ``segment_bases`` say it rolled, so a caught-up follower's ``.log`` files are byte-identical to the
  leader's; then HW = min(leader HW, own LEO) and the log start offset raised to the leader's (retention and
  delete-records on the leader), which lets this store's retention delete the segments below it at once.
* **Resuming.** Nothing is kept but the store: a restarted follower fetches from its own LEO (recovered after a
  crash); the leader's epochs tell it what to truncate.
* **A leader that is gone** (its mount dead — ENOTCONN —, unmounted, or an sshfs that lost its server): every fetch
  and listing retries with backoff (``logfs/follower/retry.py``); the first failure and the recovery are logged once.
* **The replica state** (``.logfs-replica-state.json`` at the store's root; ``logfs/follower/replicastate.py``):
  the highest leader epoch seen, and the ISR, so that ``logfs mount`` of this store (a promotion) takes an epoch
  above every epoch ever used and refuses a store that was out of the ISR without ``--unclean``.
* **The log cleaner** (``logfs.mount.cleaning.CleanerTask``, the same task as ``logfs mount`` runs): compacted
  topics are cleaned by this replica on its own, as Kafka's replicas do. It appends what the leader's log holds,
  cleaned or not (gaps, and segments the leader's cleaner grouped: the leader's ``segment_bases`` are where it
  rolls), so a caught-up follower of a compacted topic agrees with the leader on offsets and on the latest record
  per key, not on bytes (docs/replication.md, "Compacted topics").
* **Shutdown** (``logfs/follower/command.py``): the tasks are cancelled (a fetch blocked in the leader's mount is
  abandoned), then the abandoned calls into the leader's mount are waited for (:meth:`Follower.drain_leader_calls`,
  up to ``SHUTDOWN_DRAIN_S``; ``logfs/follower/inflight.py`` says why an exit must not withdraw one).
* **The store offline** (an I/O error of its disk, issue 16; :meth:`Follower.store_offline`): fetching stops (the
  leader drops this replica from its ISR), one ERROR says so, ``--mount`` keeps serving reads; exit 1 at shutdown.

Known limitations: records between a leader's segment base and its log start (after delete-records inside a
segment) are never fetched, so a follower that starts there has a first segment of its own.
Against a leader without sessions, one lookup per partition per round: thousands of partitions cost thousands of
long polls on the leader.

Threads: the trio thread runs :class:`Follower`; :func:`apply_fetch` and the store calls run in worker threads.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import trio

from logfs.core.errors import LogfsError
from logfs.core.log.log import Log
from logfs.core.store import Store
from logfs.follower.discovery import LEADER_DOWN, LOGFS_DIR
from logfs.follower.discoveryloop import DiscoveryLoop
from logfs.follower.fetch import NO_EPOCH, FetchProtocolError, FetchReader, FetchResponse, fetch_path
from logfs.follower.inflight import LeaderCalls
from logfs.follower.replica import Applied, ApplyFailed, ApplyGate, apply_fetch, fetch_and_apply
from logfs.follower.replicastate import PartitionView, ReplicaState
from logfs.follower.retry import BACKOFF_MAX_S, Backoff, describe
from logfs.follower.sessionfetch import SessionFetcher

_log = logging.getLogger(__name__)

T = TypeVar("T")

# Limits and intervals.
FETCH_THREADS = 16  # fetch lookups blocked at once (each may long-poll 500 ms in the leader's mount), at least
# One per partition followed, up to this: an idle partition's fetch holds its thread for the whole long poll, so with
# fewer threads than partitions a busy partition's fetch queued behind idle ones (50 idle partitions of
# __consumer_offsets and 16 threads: acks=all of a busy partition took 2.5 s at p50 instead of 3 ms).
FETCH_THREADS_MAX = 256
DISK_THREADS = 4  # appends, truncations and topic changes at once (one per partition at a time)
TICK_INTERVAL_S = 1.0  # Store.tick: retention, deferred deletes, flush.ms, checkpoints (as the mount's)
EMPTY_FETCH_PAUSE_S = 0.01  # a fetch that returned nothing at once (no long poll) waits this long before the next
# At shutdown, how long to wait for the calls into the leader's mount still running (a long poll ends within 500 ms;
# a hung leader mount's never do, and then the exit waits on them anyway)
SHUTDOWN_DRAIN_S = 2.0

TP = tuple[str, int]


@dataclass
class _PartitionTask:
    """One partition's fetch task: its cancel scope, and the event it sets when it has ended."""

    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    done: trio.Event = field(default_factory=trio.Event)
    gate: ApplyGate = field(default_factory=ApplyGate)  # closed once the task has ended: no abandoned apply after


class Follower:
    """The follower of one leader. Build and run inside ``trio.run``. See the module docstring."""

    def __init__(
        self,
        leader_mount: Path,
        store: Store,
        replica_id: int,
        *,
        on_hw_moved: Callable[[str, int], None] | None = None,
        on_topic_deleted: Callable[[str], None] | None = None,
        leader_epoch: int | None = None,
        on_epoch_refused: Callable[[str, int, FetchResponse], None] | None = None,
        follows: Callable[[str, int], int | None] | None = None,
        tick: bool = True,
        replica_state: ReplicaState | None = None,
    ) -> None:
        """``follows`` (a node that leads some partitions and follows others, each from its own leader): the leader
        epoch this follower fetches each partition at from this leader, None for a partition another node leads (or
        this one): not fetched here. Default: every partition, at ``leader_epoch``. ``tick``: run the store's
        periodic work (once per store: a node with a follower per leader runs it in one of them, or itself).
        ``replica_state``: the replica state to keep (shared by the followers of one store); a new one by default."""
        self.leader = leader_mount
        self.follows = follows
        self._ticks = tick
        # The leader epoch this follower believes current (a cluster node: ZooKeeper's); sent with every fetch (the
        # three-part name) when set. A refusal (FENCED_/UNKNOWN_LEADER_EPOCH) goes to on_epoch_refused (the node
        # reads ZooKeeper again and sets the new epoch here); the fetch backs off and asks again. None: `logfs follow`.
        self.leader_epoch = leader_epoch
        self.on_epoch_refused = on_epoch_refused
        self.store = store
        self.replica_id = replica_id
        self.on_hw_moved = on_hw_moved  # (topic, partition): the HW (or the log's bounds) moved
        self.on_topic_deleted = on_topic_deleted
        self._fetch_limiter = trio.CapacityLimiter(FETCH_THREADS)
        self._disk_limiter = trio.CapacityLimiter(DISK_THREADS)
        self._appends = threading.BoundedSemaphore(DISK_THREADS)  # applies inside fetch workers (fetch_and_apply)
        self._leader_calls = LeaderCalls()  # fetches and listings running in the leader's mount (shutdown waits)
        # What the leader said of each partition, and the replica state file (logfs/follower/replicastate.py)
        self.replica_state = replica_state or ReplicaState(store, replica_id, self._disk_limiter)
        self._tasks: dict[tuple[str, int], _PartitionTask] = {}
        self._leader_ok: bool | None = None
        self._failing: set[tuple[str, int]] = set()  # partitions whose failed fetch was logged (once)
        self._offline_logged = False  # the store went offline and this follower said it stopped fetching
        self._nursery: trio.Nursery | None = None
        # The fetch session (logfs/follower/sessionfetch.py): used unless the leader has none (then a task a partition)
        self._session = SessionFetcher(self)
        self._discovery = DiscoveryLoop(self)  # logfs/follower/discoveryloop.py
        self._apply_lock = trio.Lock()  # applies of an answer, or a topic's deletion here: one at a time

    # --- running ------------------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Replicate until cancelled."""
        _log.info("following %s as replica %d into %s", self.leader, self.replica_id, self.store.path)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if self._ticks:
                    nursery.start_soon(self._tick)
                nursery.start_soon(self._session.run)
                for tp, _ in self.store.logs():  # resume what this store holds (the leader may not list it yet)
                    self._start_partition(nursery, tp.topic, tp.partition)
                await self._discovery.run(nursery)
        finally:
            # A fetch worker that the cancellation abandoned may be applying: wait for it, and keep later ones off.
            gates = [task.gate for task in self._tasks.values()]
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_close_gates, gates)

    def fetch_epoch(self, topic: str, partition: int) -> int | None:
        """The leader epoch the fetches of a partition name (None: `logfs follow`, which names none)."""
        return self.leader_epoch if self.follows is None else self.follows(topic, partition)

    def followed(self, topic: str, partition: int) -> bool:
        """Whether this follower fetches the partition (``follows``)."""
        return self.follows is None or self.follows(topic, partition) is not None

    async def refollow(self) -> None:
        """``follows`` changed (a partition's leader moved, to or from this leader): stop fetching the partitions it
        no longer names here — returning once nothing fetched from this leader is being applied to them any more,
        so that their new leader's follower is the only one appending — and start the ones it names now. Trio
        thread."""
        for key in [k for k in self._session.members if not self.followed(*k)]:
            self._session.leave(key)
            self._session.drops.add(key)
        stopping = [self._tasks.pop(k) for k in [k for k in self._tasks if not self.followed(*k)]]
        for task in stopping:
            task.scope.cancel()
        for task in stopping:
            await task.done.wait()
        await trio.to_thread.run_sync(_close_gates, [task.gate for task in stopping])  # nor an abandoned worker
        async with self._apply_lock:
            pass  # an answer of the session being applied (it checks membership under this lock) has finished
        if self._nursery is not None:
            for tp, _ in self.store.logs():
                self._start_partition(self._nursery, tp.topic, tp.partition)

    def discover_now(self) -> None:
        """List the leader now rather than at the next discovery round (``DiscoveryLoop.wake``). Trio thread."""
        self._discovery.wake()

    async def drain_leader_calls(self) -> None:
        """After :meth:`run` ended, before the process exits: let every abandoned call into the leader's mount come
        back (at most ``SHUTDOWN_DRAIN_S``). An exit that withdraws one still queued there can leave the leader's mount
        blocked, and this process's exit waiting for ever for its other calls (logfs/follower/inflight.py). Not on
        a cluster node's role change, which exits nothing and must not wait."""
        running = self._leader_calls.running
        left = await trio.to_thread.run_sync(self._leader_calls.wait_idle, SHUTDOWN_DRAIN_S)
        if running:
            _log.info("shutdown: waited for %d call(s) into the leader's mount, %d still running", running, left)

    async def _leader_call(self, fn: Callable[..., T], *args: Any, limiter: trio.CapacityLimiter | None = None) -> T:
        """``fn(*args)``, a call into the leader's mount, in a worker thread that a cancellation abandons (a hung
        leader mount never returns), counted until it returns (:meth:`drain_leader_calls` waits for them at
        shutdown). ``limiter``: the fetch limiter unless given (the session's own)."""
        job = functools.partial(self._leader_calls.run, functools.partial(fn, *args))
        return await trio.to_thread.run_sync(job, limiter=limiter or self._fetch_limiter, abandon_on_cancel=True)

    async def _thread(self, limiter: trio.CapacityLimiter, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(functools.partial(fn, *args), limiter=limiter)

    async def _tick(self) -> None:
        limiter = trio.CapacityLimiter(1)
        while True:
            await trio.sleep(TICK_INTERVAL_S)
            try:
                await trio.to_thread.run_sync(self.store.tick, limiter=limiter)
            except Exception:
                _log.exception("periodic store work failed (retrying in %.0f s)", TICK_INTERVAL_S)

    # --- the leader up or down ----------------------------------------------------------------------------------------

    def _leader_failed(self, exc: OSError) -> None:
        if self._leader_ok is not False:
            _log.warning(
                "leader %s unreachable (%s): retrying with backoff up to %.0f s",
                self.leader, describe(exc), BACKOFF_MAX_S,
            )  # fmt: skip
        self._leader_ok = False

    def _leader_answered(self) -> None:
        if self._leader_ok is False:
            _log.info("leader %s reachable again", self.leader)
        self._leader_ok = True

    # --- the store offline -------------------------------------------------------------------------------------------

    def store_offline(self) -> bool:
        """Whether the store is offline (an I/O error of its disk, ``core/logdirfailure.py``): then this follower
        fetches no more — its fetch tasks end, discovery idles, the leader drops it from the ISR once it stops asking
        (Kafka's follower with an offline log directory) — and says so once, at ERROR; the mount's reads go on.
        Only a restart on a healthy disk brings it back. Trio thread."""
        failure = self.store.offline
        if failure is None:
            return False
        if not self._offline_logged:
            self._offline_logged = True
            _log.error(
                "store %s is offline (%s): stopped fetching from %s; the leader drops replica %d from its ISR; "
                "reads of what is stored go on; restart on a healthy disk to follow again",
                self.store.path, failure.describe(), self.leader, self.replica_id,
            )  # fmt: skip
        return True

    async def _delete_topic(self, topic: str) -> None:
        """The leader deleted ``topic`` (discovery saw it go): stop fetching it, then delete it here."""
        self._discovery.forget(topic)
        self._session.drop_topic(topic)
        stopping = [self._tasks.pop(k) for k in list(self._tasks) if k[0] == topic]
        for task in stopping:
            task.scope.cancel()
        for task in stopping:  # none of them may be appending while the topic goes
            await task.done.wait()
        await trio.to_thread.run_sync(_close_gates, [task.gate for task in stopping])  # nor an abandoned worker
        self.replica_state.forget_topic(topic)
        if self.store.has_topic(topic):
            try:
                async with self._apply_lock:  # no answer of the session is being applied to it meanwhile
                    await self._thread(self._disk_limiter, self.store.delete_topic, topic)
            except (LogfsError, OSError) as exc:
                _log.error("topic %s: the leader deleted it; deleting it here failed: %s", topic, exc)
                return
            _log.info("topic %s: the leader deleted it; deleted here", topic)
            if self.on_topic_deleted is not None:
                self.on_topic_deleted(topic)
        await self.replica_state.write()

    # --- fetching ---------------------------------------------------------------------------------------------------

    def _start_partition(self, nursery: trio.Nursery, topic: str, partition: int) -> None:
        key = (topic, partition)
        if not self.followed(topic, partition):
            return  # another node leads it (or this one): fetched from there, not here
        if self._session.active:
            if self._session.join(key):
                self.replica_state.views.setdefault(key, PartitionView())
            return
        if key in self._tasks:
            return
        task = self._tasks[key] = _PartitionTask()
        self._fetch_limiter.total_tokens = min(FETCH_THREADS_MAX, max(FETCH_THREADS, len(self._tasks)))
        self.replica_state.views[key] = PartitionView()
        nursery.start_soon(self._follow_partition, topic, partition, task)

    async def _follow_partition(self, topic: str, partition: int, task: _PartitionTask) -> None:
        try:
            with task.scope:
                await self._fetch_forever(topic, partition, task)
            if not task.scope.cancelled_caught and self._tasks.get((topic, partition)) is task:
                del self._tasks[(topic, partition)]  # it ended by itself (no longer followed): may start again later
        finally:
            task.done.set()

    async def _fetch_forever(self, topic: str, partition: int, task: _PartitionTask) -> None:
        backoff = Backoff()
        reader = FetchReader()  # each answer is applied before the next read overwrites it
        while True:
            if self.store_offline():
                return  # fetch no more (logged once); the mount's reads of this partition go on
            try:
                log = self.store.log(topic, partition)
            except LogfsError:
                return  # the topic was deleted here
            offset = log.log_end_offset
            epoch = log.epoch_cache.latest_epoch()
            epoch = NO_EPOCH if epoch is None else epoch
            if not self.followed(topic, partition):
                return  # its leader moved: fetched from the new one (refollow)
            path = fetch_path(self.leader, self.replica_id, topic, partition, offset, epoch,
                              self.fetch_epoch(topic, partition))  # fmt: skip
            view = self.replica_state.views.get((topic, partition))
            known = (view.leader_epoch, view.isr) if view is not None and view.answered else None
            started = trio.current_time()
            job = functools.partial(fetch_and_apply, reader, path, log, offset, known, task.gate, self._appends)
            try:
                fetched = await self._leader_call(job)
            except OSError as exc:
                await self._fetch_failed(topic, partition, exc)
                await backoff.wait()
                continue
            except (FetchProtocolError, ApplyFailed) as exc:
                if self.store.offline is not None:
                    continue  # the apply met (or took) the store offline: the loop's first line stops it
                _log.error("%s-%d: %s", topic, partition, exc)
                await backoff.wait()
                continue
            self._leader_answered()
            response, applied = fetched.response, fetched.applied
            if response.epoch_refused:  # nothing to apply or to believe: learn the leadership again, then ask again
                self._epoch_refused(topic, partition, response)
                await backoff.wait()
                continue
            await self._heard(topic, partition, response)
            if applied is None:  # news of the leader's epoch or ISR: recorded (above) before the log shows it
                try:
                    applied = await self._thread(self._disk_limiter, apply_fetch, log, offset, response)
                except (LogfsError, FetchProtocolError, OSError) as exc:
                    if self.store.offline is not None:
                        continue  # as above: stopped at the loop's first line
                    _log.error("%s-%d: cannot apply the fetch at offset %d: %s", topic, partition, offset, exc)
                    await backoff.wait()
                    continue
            self._failing.discard((topic, partition))
            self._applied(topic, partition, log, offset, response, applied)
            if applied.stale:
                await backoff.wait()
                continue
            backoff.reset()
            if not applied.changed and trio.current_time() - started < EMPTY_FETCH_PAUSE_S:
                await trio.sleep(EMPTY_FETCH_PAUSE_S)

    def _epoch_refused(self, topic: str, partition: int, response: FetchResponse) -> None:
        """The leader refused our leader epoch (logged once per partition until it fetches again)."""
        if (topic, partition) not in self._failing:
            self._failing.add((topic, partition))
            _log.info("%s-%d: the leader (epoch %d) refuses our leader epoch %s: %s", topic, partition,
                      response.leader_epoch, self.fetch_epoch(topic, partition), response.error)  # fmt: skip
        if self.on_epoch_refused is not None:
            self.on_epoch_refused(topic, partition, response)

    async def _fetch_failed(self, topic: str, partition: int, exc: OSError) -> None:
        """Log a failed fetch once (until the partition fetches again): refused (EPERM), not on the leader (ENOENT,
        quietly: discovery sees deletions), another error of a leader that is up, or a leader that is down."""
        key = (topic, partition)
        if not await self._leader_reachable(exc):
            self._leader_failed(exc)
        elif exc.errno == errno.ENOENT:
            _log.debug("%s-%d: not on the leader (ENOENT): waiting", topic, partition)
        elif key not in self._failing:
            self._failing.add(key)
            if exc.errno == errno.EPERM:
                _log.error(
                    "%s-%d: the leader refuses fetches from replica %d (not in its replica.ids): retrying",
                    topic, partition, self.replica_id,
                )  # fmt: skip
            elif exc.errno == errno.EACCES:  # mount/access.py's check of a shared mount
                _log.error("%s-%d: the leader's mount refuses this user's fetches (EACCES: a shared mount lets only "
                           "the users of its replica.users fetch): retrying", topic, partition)  # fmt: skip
            else:
                _log.warning("%s-%d: fetch failed (%s): retrying", topic, partition, describe(exc))

    async def _leader_reachable(self, exc: OSError) -> bool:
        """After a failed call into the leader's mount: is that mount still there (an error of the call itself),
        or is the leader down (its mount gone, hung or unreachable)? The check runs in a worker: a hung sshfs
        blocks."""
        if exc.errno in LEADER_DOWN and exc.errno != errno.EIO:
            return False
        return await self._leader_call(os.path.isdir, self.leader / LOGFS_DIR)

    async def _heard(self, topic: str, partition: int, response: FetchResponse) -> None:
        """What a response says of the leader (its epoch, the ISR): logged when it changes, shown by the mount's
        ``state``, persisted in the replica state file. Before the response is applied: it holds even if that fails."""
        if self.replica_state.note(topic, partition, response):
            await self.replica_state.write()

    def _applied(
        self, topic: str, partition: int, log: Log, offset: int, response: FetchResponse, applied: Applied
    ) -> None:
        """Log the events of one applied fetch and wake the mount's readers when the HW (or the log's bounds) moved."""
        name = f"{topic}-{partition}"
        if applied.truncated_to is not None:
            why = (
                f"diverging epoch {response.diverging_epoch.epoch} ending at {response.diverging_epoch.end_offset}"
                if response.diverging_epoch is not None
                else "the leader's log ends below ours"
                if response.out_of_range
                else "a batch straddled our end"
            )
            _log.info("%s: truncated from %d to %d (%s)", name, offset, applied.truncated_to, why)
        if applied.started_at is not None:
            _log.info(
                "%s: emptied and started at %d (the leader's log start is %d)", name, applied.started_at,
                response.log_start_offset,
            )  # fmt: skip
        if applied.stale and response.out_of_range:
            _log.warning(
                "%s: the leader (epoch %d) answers OFFSET_OUT_OF_RANGE at %d with our epoch %s: waiting", name,
                response.leader_epoch, offset, log.epoch_cache.latest_epoch(),
            )  # fmt: skip
        if applied.log_start_moved:
            _log.info("%s: log start offset %d, as the leader's", name, log.log_start_offset)
        moved = applied.hw_moved or applied.log_start_moved
        if (moved or applied.truncated_to is not None or applied.started_at is not None) and self.on_hw_moved:
            self.on_hw_moved(topic, partition)


def _close_gates(gates: list[ApplyGate]) -> None:
    for gate in gates:
        gate.close()
