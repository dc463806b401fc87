"""``logfs follow LEADER_MOUNT STORE --replica-id N [--mount MOUNTPOINT]``: the follower daemon
(docs/replication.md, "The follower: `logfs follow`").

It replicates every topic and partition of a leader into its own store by reading files of the leader's mount
only (``logfs/follower/fetch.py`` reads the fetch files; docs/replication.md has the protocol), with Kafka's follower
rules (Kafka's ``ReplicaFetcherThread`` and ``AbstractFetcherThread``).

Theory of operation.

* **The fetch session** (``logfs/follower/session.py``; docs/replication.md, "Fetch sessions"): one task fetches
  every partition through one session file of the leader's mount: it writes the partitions to (re)fetch (all of
  them when the session opens; then those whose entry carried batches, an error or a diverging epoch, at their new
  LEO; a refused epoch, a stale answer or a failed apply after ``SESSION_RETRY_S``), reads one answer in one worker
  thread, records what it says of the leader (one replica state write per answer, not per partition) and applies
  its entries in one worker call (:func:`apply_fetch` each). Threads do not grow with partitions. A leader without
  sessions (ENOENT at the open, its mount up) makes the follower fall back to the tasks below.
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
* **Discovery** (every ``DISCOVER_INTERVAL_S``, ``logfs/follower/discovery.py``): list the leader's root and each
  ``<topic>/``; create what is missing here (topics, partitions), copy each topic's ``config`` into this store's
  topic overrides when it changed, start a fetch task per new partition, and delete a topic here that the leader
  deleted (one seen on the leader during this run that its root no longer lists, while ``.logfs`` is still there:
  the leader is up and the topic is gone).
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
  and listing retries with backoff (``BACKOFF_*``); the first failure and the recovery are logged once.
* **The replica state** (``.logfs-replica-state.json`` at the store's root; replaced atomically, fsynced, whenever
  it changes): the highest leader epoch seen, and the ISR, so that ``logfs mount`` of this store (a promotion)
  takes an epoch above every epoch ever used and refuses a store that was out of the ISR without ``--unclean``.
  With several partitions, ``isr`` is the intersection of the last ISR seen for each, so ``in_isr`` is true only
  when this replica was in the ISR of every partition.
* **The log cleaner** (``logfs.mount.cleaning.CleanerTask``, the same task as ``logfs mount`` runs): compacted
  topics are cleaned by this replica on its own, as Kafka's replicas do. It appends what the leader's log holds,
  cleaned or not (gaps, and segments the leader's cleaner grouped: the leader's ``segment_bases`` are where it
  rolls), so a caught-up follower of a compacted topic agrees with the leader on offsets and on the latest record
  per key, not on bytes (docs/replication.md, "Compacted topics").
* **Shutdown** on SIGINT/SIGTERM (or an unmount of ``--mount``): the tasks are cancelled (a fetch blocked in the
  leader's mount is abandoned), the mount is unmounted, the abandoned calls into the leader's mount are waited for
  (up to ``SHUTDOWN_DRAIN_S``; ``logfs/follower/inflight.py`` says why an exit must not withdraw one), the store
  closed cleanly; exit 0.
* **The store offline** (an I/O error of its disk, issue 16; :meth:`Follower.store_offline`): fetching stops (the
  leader drops this replica from its ISR), one ERROR says so, ``--mount`` keeps serving reads; exit 1 at shutdown.

Known limitations: records between a leader's segment base and its log start (after delete-records inside a
segment) are never fetched, so a follower that starts there has a first segment of its own.
Against a leader without sessions, one lookup per partition per round: thousands of partitions cost thousands of
long polls on the leader.

Threads: the trio thread runs :class:`Follower`; :func:`apply_fetch` and the store calls run in worker threads.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import trio

from logfs.core.collector import freeze_loaded
from logfs.core.errors import LogfsError, StoreOffline
from logfs.core.log.log import Log
from logfs.core.replication.promotion import (
    PersistedReplicaState,
    UnreadableReplicaState,
    read_replica_state,
    write_replica_state,
)
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig
from logfs.follower.discovery import LEADER_DOWN, LOGFS_DIR, create_topics, ensure_topic, list_leader
from logfs.follower.fetch import NO_EPOCH, FetchProtocolError, FetchReader, FetchResponse, fetch_path
from logfs.follower.inflight import LeaderCalls
from logfs.follower.replica import (
    Applied,
    ApplyFailed,
    ApplyGate,
    aggregate_replica_state,
    apply_fetch,
    fetch_and_apply,
)
from logfs.follower.session import (
    PartitionFetch,
    SessionAnswer,
    SessionClient,
    SessionUnreadable,
    has_sessions_marker,
    session_path,
)
from logfs.mount.cleaning import CleanerTask

_log = logging.getLogger(__name__)

T = TypeVar("T")

# Limits and intervals.
FETCH_THREADS = 16  # fetch lookups blocked at once (each may long-poll 500 ms in the leader's mount), at least
# One per partition followed, up to this: an idle partition's fetch holds its thread for the whole long poll, so with
# fewer threads than partitions a busy partition's fetch queued behind idle ones (50 idle partitions of
# __consumer_offsets and 16 threads: acks=all of a busy partition took 2.5 s at p50 instead of 3 ms).
FETCH_THREADS_MAX = 256
DISK_THREADS = 4  # appends, truncations and topic changes at once (one per partition at a time)
DISCOVER_INTERVAL_S = 1.0  # how often the leader's topics, partitions and configs are listed
DISCOVER_SLICE_MIN = 64  # known topics whose partitions and config a round looks at again, at least; and at least
DISCOVER_FULL_ROUNDS = 10  # every known topic once in this many rounds (new topics and deletions: every round)
TICK_INTERVAL_S = 1.0  # Store.tick: retention, deferred deletes, flush.ms, checkpoints (as the mount's)
BACKOFF_INITIAL_S = 0.05  # first retry after a failed fetch; doubles up to
BACKOFF_MAX_S = 1.0  # (Kafka's replica.fetch.backoff.ms is 1 s)
EMPTY_FETCH_PAUSE_S = 0.01  # a fetch that returned nothing at once (no long poll) waits this long before the next
SESSION_RETRY_S = 1.0  # a partition the session answered with nothing to do (a refused epoch, a stale answer, a
# failed apply) is written again after this (Kafka's replica.fetch.backoff.ms)
# At shutdown, how long to wait for the calls into the leader's mount still running (a long poll ends within 500 ms;
# a hung leader mount's never do, and then the exit waits on them anyway)
SHUTDOWN_DRAIN_S = 2.0
# A close of the session's file on a leader's mount that does not answer is abandoned after this: short, because a
# cluster node taking over from a paused leader closes it on its way to leading (the failover waits for it)
SESSION_CLOSE_WAIT_S = 0.1

TP = tuple[str, int]


@dataclass
class PartitionView:
    """What the last fetch of one partition said about the leader (``state`` of the follower mount shows it)."""

    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    answered: bool = False


@dataclass
class _Backoff:
    delay_s: float = BACKOFF_INITIAL_S

    async def wait(self) -> None:
        await trio.sleep(self.delay_s)
        self.delay_s = min(self.delay_s * 2, BACKOFF_MAX_S)

    def reset(self) -> None:
        self.delay_s = BACKOFF_INITIAL_S


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
    ) -> None:
        self.leader = leader_mount
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
        self._views: dict[tuple[str, int], PartitionView] = {}
        self._tasks: dict[tuple[str, int], _PartitionTask] = {}
        self._configs: dict[str, str] = {}  # topic → the config text last copied
        self._seen_topics: set[str] = set()  # topics the leader listed during this run
        self._leader_ok: bool | None = None
        self._failing: set[tuple[str, int]] = set()  # partitions whose failed fetch was logged (once)
        self._offline_logged = False  # the store went offline and this follower said it stopped fetching
        self._state_lock = trio.Lock()
        # The fetch session (logfs/follower/session.py): used unless the leader has none (then one task a partition)
        self._session_mode = True
        self._nursery: trio.Nursery | None = None
        self._members: set[TP] = set()  # the partitions this follower fetches through the session
        self._updates: dict[TP, None] = {}  # members to write in the next request (an ordered set)
        self._drops: set[TP] = set()  # partitions to drop from the session in the next request
        self._retry_at: dict[TP, float] = {}  # members written again at that trio time
        self._sent: dict[TP, int] = {}  # the fetch offset last written for each member
        self._apply_lock = trio.Lock()  # applies of an answer, or a topic's deletion here: one at a time
        self._ensured: dict[str, tuple[int, str | None]] = {}  # topic → (partitions, config) discovery last made
        self._discover_round = 0
        try:
            previous = read_replica_state(store.path)
        except UnreadableReplicaState as exc:
            _log.warning("%s: starting without it (the first fetch rewrites it)", exc)
            previous = None
        epochs = [log.epoch_cache.latest_epoch() for _, log in store.logs()]
        self._highest_epoch = max(
            [e for e in epochs if e is not None] + ([previous.highest_epoch] if previous is not None else []),
            default=-1,
        )
        self._written: PersistedReplicaState | None = previous

    # --- what the mount asks (trio thread) --------------------------------------------------------------------------

    def partition_view(self, topic: str, partition: int) -> tuple[int, tuple[int, ...]]:
        """(leader epoch, ISR) as the last fetch of that partition told; (-1, ()) before any."""
        view = self._views.get((topic, partition))
        if view is None or not view.answered:
            return -1, ()
        return view.leader_epoch, view.isr

    # --- running ------------------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Replicate until cancelled."""
        _log.info("following %s as replica %d into %s", self.leader, self.replica_id, self.store.path)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._tick)
                nursery.start_soon(self._run_session)
                for tp, _ in self.store.logs():  # resume what this store holds (the leader may not list it yet)
                    self._start_partition(nursery, tp.topic, tp.partition)
                await self._discover(nursery)
        finally:
            # A fetch worker that the cancellation abandoned may be applying: wait for it, and keep later ones off.
            gates = [task.gate for task in self._tasks.values()]
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(_close_gates, gates)

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
                self.leader, _describe(exc), BACKOFF_MAX_S,
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

    # --- discovery ----------------------------------------------------------------------------------------------------

    async def _discover(self, nursery: trio.Nursery) -> None:
        backoff = _Backoff()
        while True:
            if self.store_offline():
                await trio.sleep_forever()  # no topic is created or deleted here any more; the other tasks go on
            known = self._known_slice()
            try:
                listing = await self._leader_call(list_leader, self.leader, self.replica_id, known)
            except OSError as exc:
                self._leader_failed(exc)
                await backoff.wait()
                continue
            backoff.reset()
            self._leader_answered()
            missing = {t: v for t, v in listing.topics.items() if not self.store.has_topic(t)}
            if len(missing) > 1:  # one fsync of the store directory for all of them (a follower's first round)
                for topic in await self._thread(self._disk_limiter, create_topics, self.store, missing):
                    count, config = missing[topic]
                    if config is not None:
                        self._configs[topic] = config
                    self._seen_topics.add(topic)
                    self._ensured[topic] = (count, config)
            for topic, (count, config) in listing.topics.items():
                if self._ensured.get(topic) == (count, config) and self.store.has_topic(topic):
                    for p in range(count):  # as the last round made it: no worker call per topic per round
                        self._start_partition(nursery, topic, p)  # (back in the session if it left it)
                    continue
                try:
                    copied = self._configs.get(topic)
                    await self._thread(self._disk_limiter, ensure_topic, self.store, topic, count, config, copied)
                except (LogfsError, OSError) as exc:
                    _log.error("cannot create topic %s here: %s", topic, exc)
                    continue
                if config is not None:
                    self._configs[topic] = config
                self._seen_topics.add(topic)
                self._ensured[topic] = (count, config)
                for p in range(count):
                    self._start_partition(nursery, topic, p)
            for topic in sorted(self._seen_topics - set(listing.topics)):
                await self._delete_topic(topic)
            await trio.sleep(DISCOVER_INTERVAL_S)

    def _known_slice(self) -> dict[str, tuple[int, str | None]]:
        """What discovery may take as known this round: every topic made here before, but a rotating slice of them
        (at least DISCOVER_SLICE_MIN, every one within DISCOVER_FULL_ROUNDS rounds), whose partitions and config are
        listed again. So a new partition or a config change of a known topic is seen within DISCOVER_FULL_ROUNDS
        seconds; a new topic and a deleted one within one round."""
        topics = sorted(self._ensured)
        if not topics:
            return {}
        size = max(DISCOVER_SLICE_MIN, -(-len(topics) // DISCOVER_FULL_ROUNDS))
        start = self._discover_round * size % len(topics)
        self._discover_round += 1
        again = set(topics[start : start + size]) | set(topics[: max(0, start + size - len(topics))])
        return {t: self._ensured[t] for t in topics if t not in again}

    async def _delete_topic(self, topic: str) -> None:
        self._seen_topics.discard(topic)
        self._configs.pop(topic, None)
        self._ensured.pop(topic, None)
        for key in [k for k in self._members if k[0] == topic]:
            self._leave_session(key)
            self._drops.add(key)
        stopping = [self._tasks.pop(k) for k in list(self._tasks) if k[0] == topic]
        for task in stopping:
            task.scope.cancel()
        for task in stopping:  # none of them may be appending while the topic goes
            await task.done.wait()
        await trio.to_thread.run_sync(_close_gates, [task.gate for task in stopping])  # nor an abandoned worker
        for key in [k for k in self._views if k[0] == topic]:
            del self._views[key]
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
        await self._write_state()

    # --- the fetch session --------------------------------------------------------------------------------------------

    async def _run_session(self) -> None:
        """Fetch every member partition through one session (``logfs/follower/session.py``): write what changed,
        read one answer, apply it, again. One blocking exchange at a time in one worker thread, whatever the number
        of partitions; a leader without sessions (ENOENT) makes this fall back to a task per partition."""
        backoff = _Backoff()
        limiter = trio.CapacityLimiter(1)
        client: SessionClient | None = None
        path = session_path(self.leader, self.replica_id)
        try:
            while True:
                if self.store_offline():
                    return  # fetch no more (logged once); the mount's reads go on
                if client is None:
                    try:
                        client = await self._leader_call(SessionClient, path, limiter=limiter)
                    except OSError as exc:
                        if await self._session_refused(exc):
                            return
                        await backoff.wait()
                        continue
                    self._failing.discard(("", -1))  # a later refusal of the session is logged again
                    self._updates = dict.fromkeys([*self._updates, *sorted(self._members)])  # a new session
                    self._drops.clear()
                request = self._session_request()
                try:
                    answer = await self._leader_call(client.exchange, request, limiter=limiter)
                except (OSError, FetchProtocolError) as exc:
                    await self._close_session(client)
                    client = None
                    if isinstance(exc, SessionUnreadable):  # a network filesystem between (sshfs): per partition
                        _log.info("%s: fetching one partition at a time", exc)
                        self._fall_back()
                        return
                    if isinstance(exc, OSError):
                        await self._session_refused(exc)
                    else:
                        _log.error("fetch session: %s: reopening it", exc)
                    await backoff.wait()
                    continue
                self._leader_answered()
                if answer.error is not None:  # the mount stopped leading (ZooKeeper): a new session later
                    _log.info("fetch session: the leader answers %s: reopening", answer.error)
                    await self._close_session(client)
                    client = None
                    await backoff.wait()
                    continue
                backoff.reset()
                await self._session_answer(answer)
        finally:
            if client is not None:
                await self._close_session(client)

    async def _close_session(self, client: SessionClient) -> None:
        """Close the session's file in a worker thread, waiting for it at most SESSION_CLOSE_WAIT_S, even while
        cancelled: a close on the leader's mount is a FUSE flush, which a stopped or hung leader never answers, and
        the trio thread must never wait for it (in a cluster node it also serves that node's own mount, which would
        stop answering). An abandoned close ends when the leader answers; shutdown waits for it a while
        (:meth:`drain_leader_calls`)."""
        with trio.move_on_after(SESSION_CLOSE_WAIT_S) as scope:
            scope.shield = True
            await self._leader_call(client.close, limiter=trio.to_thread.current_default_thread_limiter())

    async def _leader_reachable(self, exc: OSError) -> bool:
        """After a failed call into the leader's mount: is that mount still there (an error of the call itself),
        or is the leader down (its mount gone, hung or unreachable)? The check runs in a worker: a hung sshfs
        blocks."""
        if exc.errno in LEADER_DOWN and exc.errno != errno.EIO:
            return False
        return await self._leader_call(os.path.isdir, self.leader / LOGFS_DIR)

    async def _session_refused(self, exc: OSError) -> bool:
        """A failed open or exchange of the session: True when the leader has no sessions (ENOENT with its mount up:
        an older leader), after starting a fetch task per partition instead; else log it (once) and False."""
        if not await self._leader_reachable(exc):
            self._leader_failed(exc)
        elif exc.errno == errno.ENOENT and not await self._leader_call(
            os.path.exists, has_sessions_marker(self.leader)
        ):
            _log.info("the leader %s has no fetch sessions: one fetch per partition", self.leader)
            self._fall_back()
            return True
        elif exc.errno == errno.ENOENT:  # sessions, but no fetches served now (session.has_sessions_marker)
            if ("", -1) not in self._failing:
                self._failing.add(("", -1))
                _log.info("%s serves no fetches now (it does not lead): asking again", self.leader)
        elif ("", -1) not in self._failing:
            self._failing.add(("", -1))
            if exc.errno == errno.EPERM:
                _log.error("the leader refuses fetches from replica %d (not in its replica.ids): retrying",
                           self.replica_id)  # fmt: skip
            else:
                _log.warning("fetch session failed (%s): retrying", _describe(exc))
        return False

    def _fall_back(self) -> None:
        """No sessions on this leader: a fetch task per partition, as before sessions."""
        self._session_mode = False
        members, self._members = sorted(self._members), set()
        self._updates.clear()
        self._drops.clear()
        self._retry_at.clear()
        assert self._nursery is not None
        for topic, partition in members:
            self._start_partition(self._nursery, topic, partition)

    def _leave_session(self, key: TP) -> None:
        self._members.discard(key)
        self._updates.pop(key, None)
        self._retry_at.pop(key, None)
        self._sent.pop(key, None)

    def _session_request(self) -> list[PartitionFetch]:
        """The next request: each member to write (its LEO and latest epoch: a fetch from there) and the drops.
        O(partitions written)."""
        now = trio.current_time()
        if self._retry_at:
            for key in [k for k, at in self._retry_at.items() if at <= now]:
                del self._retry_at[key]
                self._updates[key] = None
        request = [PartitionFetch(topic, partition, drop=True) for topic, partition in sorted(self._drops)]
        self._drops.clear()
        for key in self._updates:
            try:
                log = self.store.log(*key)
            except LogfsError:
                continue  # deleted here: discovery drops it
            epoch = log.epoch_cache.latest_epoch()
            offset = log.log_end_offset
            self._sent[key] = offset
            request.append(PartitionFetch(key[0], key[1], offset, NO_EPOCH if epoch is None else epoch,
                                          self.leader_epoch))  # fmt: skip
        self._updates.clear()
        return request

    async def _session_answer(self, answer: SessionAnswer) -> None:
        """Apply one answer: what it says of the leader first (one replica state write for all its partitions), then
        its batches in one worker call, then each partition that the leader now keeps silent is written again."""
        now = trio.current_time()
        jobs: list[tuple[TP, Log, int, FetchResponse]] = []
        changed = False
        for entry in answer.entries:
            key = (entry.topic, entry.partition)
            if key not in self._members:
                continue
            response = entry.response
            if response is None:  # not on the leader (deleted, or not yet there): discovery adds it again
                self._leave_session(key)
                _log.debug("%s-%d: not on the leader: waiting", *key)
                continue
            if response.epoch_refused:
                self._epoch_refused(key[0], key[1], response)
                self._retry_at[key] = now + SESSION_RETRY_S
                continue
            try:
                log = self.store.log(*key)
            except LogfsError:
                continue
            changed |= self._note(key[0], key[1], response)
            jobs.append((key, log, self._sent.get(key, log.log_end_offset), response))
        if changed:
            await self._write_state()
        if not jobs:
            return
        async with self._apply_lock:
            results = await self._thread(self._disk_limiter, _apply_all, jobs)
        for (key, log, offset, response), result in zip(jobs, results, strict=True):
            if key not in self._members:
                continue  # dropped meanwhile
            paused = bool(response.records) or response.error is not None or response.diverging_epoch is not None
            if isinstance(result, Exception):
                if self.store.offline is not None:
                    return  # the loop's first line stops fetching
                _log.error("%s-%d: cannot apply the fetch at offset %d: %s", key[0], key[1], offset, result)
                self._retry_at[key] = now + SESSION_RETRY_S
                continue
            self._failing.discard(key)
            self._applied(key[0], key[1], log, offset, response, result)
            if result.stale:
                self._retry_at[key] = now + SESSION_RETRY_S
            elif paused:
                self._updates[key] = None  # the leader waits for our new fetch offset

    # --- fetching ---------------------------------------------------------------------------------------------------

    def _start_partition(self, nursery: trio.Nursery, topic: str, partition: int) -> None:
        key = (topic, partition)
        if self._session_mode:
            if key not in self._members:
                self._members.add(key)
                self._updates[key] = None
                self._drops.discard(key)
                self._views.setdefault(key, PartitionView())
            return
        if key in self._tasks:
            return
        task = self._tasks[key] = _PartitionTask()
        self._fetch_limiter.total_tokens = min(FETCH_THREADS_MAX, max(FETCH_THREADS, len(self._tasks)))
        self._views[key] = PartitionView()
        nursery.start_soon(self._follow_partition, topic, partition, task)

    async def _follow_partition(self, topic: str, partition: int, task: _PartitionTask) -> None:
        try:
            with task.scope:
                await self._fetch_forever(topic, partition, task)
        finally:
            task.done.set()

    async def _fetch_forever(self, topic: str, partition: int, task: _PartitionTask) -> None:
        backoff = _Backoff()
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
            path = fetch_path(self.leader, self.replica_id, topic, partition, offset, epoch, self.leader_epoch)
            view = self._views.get((topic, partition))
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
                      response.leader_epoch, self.leader_epoch, response.error)  # fmt: skip
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
            else:
                _log.warning("%s-%d: fetch failed (%s): retrying", topic, partition, _describe(exc))

    async def _heard(self, topic: str, partition: int, response: FetchResponse) -> None:
        """What a response says of the leader (its epoch, the ISR): logged when it changes, shown by the mount's
        ``state``, persisted in the replica state file. Before the response is applied: it holds even if that fails."""
        if self._note(topic, partition, response):
            await self._write_state()

    def _note(self, topic: str, partition: int, response: FetchResponse) -> bool:
        """:meth:`_heard` without the write: whether the view changed (a session answer writes the state once for all
        its partitions: one O(partitions) computation per answer, not per partition)."""
        name = f"{topic}-{partition}"
        view = self._views.setdefault((topic, partition), PartitionView())
        if view.answered and (self.replica_id in view.isr) != (self.replica_id in response.isr):
            joined = self.replica_id in response.isr
            _log.info("%s: %s the ISR %s", name, "joined" if joined else "left", list(response.isr))
        if view.leader_epoch != response.leader_epoch:
            _log.info("%s: leader epoch %d", name, response.leader_epoch)
        if view.answered and (view.leader_epoch, view.isr) == (response.leader_epoch, response.isr):
            return False  # nothing new: no O(partitions) state computation per fetch
        view.leader_epoch, view.isr, view.answered = response.leader_epoch, response.isr, True
        return True

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

    async def _write_state(self) -> None:
        async with self._state_lock:
            state = aggregate_replica_state(
                self.replica_id, self._highest_epoch,
                ((v.leader_epoch, v.isr) for v in self._views.values() if v.answered),
            )  # fmt: skip
            if state is None:
                return
            previous = self._written
            if (
                state.in_isr
                and previous is not None
                and not previous.in_isr
                and not all(v.answered for v in self._views.values())
            ):
                # Out of the ISR at the last fetch before this run: not back in until every partition has said so.
                state = dataclasses.replace(state, in_isr=False)
            if state == previous:
                return
            self._highest_epoch = state.highest_epoch
            try:
                await self._thread(self._disk_limiter, write_replica_state, self.store.path, state)
            except StoreOffline:
                return  # logged once by the failure channel; the fetch loops stop at their next turn
            self._written = state
            _log.debug("replica state: %s", state)


def _apply_all(jobs: list[tuple[TP, Log, int, FetchResponse]]) -> list[Applied | Exception]:
    """Apply each partition's part of one session answer in turn (one worker call per answer): what each did, or
    why it failed (a core error, a bad batch, the local disk). Worker thread."""
    results: list[Applied | Exception] = []
    for _, log, offset, response in jobs:
        try:
            results.append(apply_fetch(log, offset, response))
        except (LogfsError, FetchProtocolError, OSError) as exc:
            results.append(exc)
    return results


def _close_gates(gates: list[ApplyGate]) -> None:
    for gate in gates:
        gate.close()


def _describe(exc: OSError) -> str:
    name = errno.errorcode.get(exc.errno or 0, "")
    return f"{name}: {exc.strerror or exc}" if name else str(exc)


# --- the command ------------------------------------------------------------------------------------------------------


def follow(leader_mount: Path, store_path: Path, replica_id: int, config: StoreConfig, mountpoint: Path | None) -> int:
    """Run the follower (and its read-only mount) in the foreground until SIGINT/SIGTERM; the exit code. Main
    thread. Raises MountError (before the store is opened or created), StoreLocked and ConfigError (a node.id the
    store refuses) before anything runs."""
    if mountpoint is not None:
        from logfs.mount.server import clear_stale_mount, raise_open_file_limit

        raise_open_file_limit()
        clear_stale_mount(mountpoint)  # first: a mount point that cannot be used must not leave a new store behind
    store = Store.open(store_path, config)
    freeze_loaded()  # a store kept for the process's life (core/collector.py)
    try:
        if mountpoint is None:
            return trio.run(_run_plain, leader_mount, store, replica_id)
        return trio.run(_run_mounted, leader_mount, store, replica_id, mountpoint)
    finally:
        store.close()
        _log.info("closed store %s", store_path)


async def _run_plain(leader_mount: Path, store: Store, replica_id: int) -> int:
    follower = Follower(leader_mount, store, replica_id)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(follower.run)
        nursery.start_soon(CleanerTask(store).run)  # replicas clean their own logs, as Kafka's do
        await _wait_for_signal()
        nursery.cancel_scope.cancel()
    await follower.drain_leader_calls()
    return 0


async def _run_mounted(leader_mount: Path, store: Store, replica_id: int, mountpoint: Path) -> int:
    from logfs.mount.operations import Operations
    from logfs.mount.server import run_mount, stop_mount

    follower = Follower(leader_mount, store, replica_id)
    ops = Operations(store, follower=follower.partition_view)
    follower.on_hw_moved = ops.notify_hw
    follower.on_topic_deleted = ops.topic_deleted

    async def on_signals() -> None:
        await _wait_for_signal()
        await stop_mount(ops)

    cleaner = CleanerTask(store)  # replicas clean their own logs, as Kafka's do
    ops.reader.cleaner = cleaner
    background: list[Callable[[], Awaitable[None]]] = [follower.run, on_signals, cleaner.run]
    code = await run_mount(ops, mountpoint, background)
    await follower.drain_leader_calls()
    return code


async def _wait_for_signal() -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            _log.info("%s: shutting down", signal.Signals(signum).name)
            return
