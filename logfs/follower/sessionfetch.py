"""The follower's fetch session (docs/replication.md, "Fetch sessions"): one task fetches every partition through
one session file of the leader's mount (``logfs/follower/session.py`` is its client). It writes the partitions to
(re)fetch (all of them when the session opens; then those whose entry carried batches, an error or a diverging
epoch, at their new LEO; a refused epoch, a stale answer or a failed apply after ``SESSION_RETRY_S``), reads one
answer in one worker thread, records what it says of the leader (one replica state write per answer, not per
partition) and applies its entries in one worker call (``apply_fetch`` each). Threads do not grow with partitions.

A leader without sessions (ENOENT at the open, its mount up), a session file this follower may not open read-write
(EACCES: a read-only view of the leader, such as the read-only SFTP login of docs/replication.md, "Securing ZooKeeper
and followers", which reads the per-partition fetch files only), or a session file that cannot be read whole through
the filesystem between (sshfs), makes it fall back to a fetch task per partition (``logfs/follower/daemon.py``).

Its own class because it owns which partitions the session fetches and what the next request writes for them
(:attr:`SessionFetcher.members`, :attr:`SessionFetcher.updates`, :attr:`SessionFetcher.drops`); the follower adds and
removes partitions through :meth:`SessionFetcher.join` and :meth:`SessionFetcher.leave`.

Threads: the trio thread; each exchange with the leader and each apply in a worker thread.
"""

from __future__ import annotations

import errno
import logging
import os
from typing import TYPE_CHECKING

import trio

from logfs.core.errors import LogfsError
from logfs.core.log.log import Log
from logfs.follower.fetch import NO_EPOCH, FetchProtocolError, FetchResponse
from logfs.follower.replica import Applied, apply_fetch
from logfs.follower.retry import Backoff, describe
from logfs.follower.session import (
    PartitionFetch,
    SessionAnswer,
    SessionClient,
    SessionUnreadable,
    has_sessions_marker,
    session_path,
)

if TYPE_CHECKING:
    from logfs.follower.daemon import Follower

_log = logging.getLogger(__name__)

SESSION_RETRY_S = 1.0  # a partition the session answered with nothing to do (a refused epoch, a stale answer, a
# failed apply) is written again after this (Kafka's replica.fetch.backoff.ms)
# A close of the session's file on a leader's mount that does not answer is abandoned after this: short, because a
# cluster node taking over from a paused leader closes it on its way to leading (the failover waits for it)
SESSION_CLOSE_WAIT_S = 0.1

TP = tuple[str, int]


class SessionFetcher:
    """The fetch session of one follower. See the module docstring."""

    def __init__(self, follower: Follower) -> None:
        self.follower = follower
        self.active = True  # until the leader turns out to have no sessions (then one task a partition)
        self.members: set[TP] = set()  # the partitions this follower fetches through the session
        self.updates: dict[TP, None] = {}  # members to write in the next request (an ordered set)
        self.drops: set[TP] = set()  # partitions to drop from the session in the next request
        self._retry_at: dict[TP, float] = {}  # members written again at that trio time
        self._sent: dict[TP, int] = {}  # the fetch offset last written for each member

    def join(self, key: TP) -> bool:
        """Fetch ``key`` through the session from the next request on; False when it is a member already."""
        if key in self.members:
            return False
        self.members.add(key)
        self.updates[key] = None
        self.drops.discard(key)
        return True

    def drop_topic(self, topic: str) -> None:
        """A topic deleted here: its partitions leave the session, and the next request drops them on the leader."""
        for key in [k for k in self.members if k[0] == topic]:
            self.leave(key)
            self.drops.add(key)

    async def run(self) -> None:
        """Fetch every member partition through one session (``logfs/follower/session.py``): write what changed,
        read one answer, apply it, again. One blocking exchange at a time in one worker thread, whatever the number
        of partitions; a leader without sessions (ENOENT) makes this fall back to a task per partition."""
        backoff = Backoff()
        limiter = trio.CapacityLimiter(1)
        client: SessionClient | None = None
        path = session_path(self.follower.leader, self.follower.replica_id)
        try:
            while True:
                if self.follower.store_offline():
                    return  # fetch no more (logged once); the mount's reads go on
                if client is None:
                    try:
                        client = await self.follower._leader_call(SessionClient, path, limiter=limiter)
                    except OSError as exc:
                        if await self._refused(exc):
                            return
                        await backoff.wait()
                        continue
                    self.follower._failing.discard(("", -1))  # a later refusal of the session is logged again
                    self.updates = dict.fromkeys([*self.updates, *sorted(self.members)])  # a new session
                    self.drops.clear()
                request = self._request()
                try:
                    answer = await self.follower._leader_call(client.exchange, request, limiter=limiter)
                except (OSError, FetchProtocolError) as exc:
                    await self._close(client)
                    client = None
                    if isinstance(exc, SessionUnreadable):  # a network filesystem between (sshfs): per partition
                        _log.info("%s: fetching one partition at a time", exc)
                        self._fall_back()
                        return
                    if isinstance(exc, OSError):
                        if await self._refused(exc):
                            return
                    else:
                        _log.error("fetch session: %s: reopening it", exc)
                    await backoff.wait()
                    continue
                self.follower._leader_answered()
                if answer.error is not None:  # the mount stopped leading (ZooKeeper): a new session later
                    _log.info("fetch session: the leader answers %s: reopening", answer.error)
                    await self._close(client)
                    client = None
                    await backoff.wait()
                    continue
                backoff.reset()
                await self._answer(answer)
        finally:
            if client is not None:
                await self._close(client)

    async def _close(self, client: SessionClient) -> None:
        """Close the session's file in a worker thread, waiting for it at most SESSION_CLOSE_WAIT_S, even while
        cancelled: a close on the leader's mount is a FUSE flush, which a stopped or hung leader never answers, and
        the trio thread must never wait for it (in a cluster node it also serves that node's own mount, which would
        stop answering). An abandoned close ends when the leader answers; shutdown waits for it a while
        (:meth:`Follower.drain_leader_calls`)."""
        with trio.move_on_after(SESSION_CLOSE_WAIT_S) as scope:
            scope.shield = True
            await self.follower._leader_call(client.close, limiter=trio.to_thread.current_default_thread_limiter())

    async def _refused(self, exc: OSError) -> bool:
        """A failed open or exchange of the session: True when the leader has no sessions (ENOENT with its mount up:
        an older leader) or none this follower may open (EACCES), after starting a fetch task per partition
        instead; else log it (once) and False."""
        if not await self.follower._leader_reachable(exc):
            self.follower._leader_failed(exc)
        elif exc.errno == errno.ENOENT and not await self.follower._leader_call(
            os.path.exists, has_sessions_marker(self.follower.leader)
        ):
            _log.info("the leader %s has no fetch sessions: one fetch per partition", self.follower.leader)
            self._fall_back()
            return True
        elif exc.errno == errno.EACCES:  # a read-only view of the leader: its fetch files still read
            _log.info("the fetch session of %s is not open to this follower (%s: a read-only login?): one fetch per "
                      "partition", self.follower.leader, describe(exc))  # fmt: skip
            self._fall_back()
            return True
        elif exc.errno == errno.ENOENT:  # sessions, but no fetches served now (session.has_sessions_marker)
            if ("", -1) not in self.follower._failing:
                self.follower._failing.add(("", -1))
                _log.info("%s serves no fetches now (it does not lead): asking again", self.follower.leader)
        elif ("", -1) not in self.follower._failing:
            self.follower._failing.add(("", -1))
            if exc.errno == errno.EPERM:
                _log.error("the leader refuses fetches from replica %d (not in its replica.ids): retrying",
                           self.follower.replica_id)  # fmt: skip
            else:
                _log.warning("fetch session failed (%s): retrying", describe(exc))
        return False

    def _fall_back(self) -> None:
        """No sessions on this leader: a fetch task per partition, as before sessions."""
        self.active = False
        members, self.members = sorted(self.members), set()
        self.updates.clear()
        self.drops.clear()
        self._retry_at.clear()
        assert self.follower._nursery is not None
        for topic, partition in members:
            self.follower._start_partition(self.follower._nursery, topic, partition)

    def leave(self, key: TP) -> None:
        self.members.discard(key)
        self.updates.pop(key, None)
        self._retry_at.pop(key, None)
        self._sent.pop(key, None)

    def _request(self) -> list[PartitionFetch]:
        """The next request: each member to write (its LEO and latest epoch: a fetch from there) and the drops.
        O(partitions written)."""
        now = trio.current_time()
        if self._retry_at:
            for key in [k for k, at in self._retry_at.items() if at <= now]:
                del self._retry_at[key]
                self.updates[key] = None
        request = [PartitionFetch(topic, partition, drop=True) for topic, partition in sorted(self.drops)]
        self.drops.clear()
        for key in self.updates:
            try:
                log = self.follower.store.log(*key)
            except LogfsError:
                continue  # deleted here: discovery drops it
            epoch = log.epoch_cache.latest_epoch()
            offset = log.log_end_offset
            self._sent[key] = offset
            request.append(PartitionFetch(key[0], key[1], offset, NO_EPOCH if epoch is None else epoch,
                                          self.follower.fetch_epoch(*key)))  # fmt: skip
        self.updates.clear()
        return request

    async def _answer(self, answer: SessionAnswer) -> None:
        """Apply one answer: what it says of the leader first (one replica state write for all its partitions), then
        its batches in one worker call, then each partition that the leader now keeps silent is written again."""
        now = trio.current_time()
        jobs: list[tuple[TP, Log, int, FetchResponse]] = []
        changed = False
        for entry in answer.entries:
            key = (entry.topic, entry.partition)
            if key not in self.members:
                continue
            response = entry.response
            if response is None:  # not on the leader (deleted, or not yet there): discovery adds it again
                self.leave(key)
                _log.debug("%s-%d: not on the leader: waiting", *key)
                continue
            if response.epoch_refused:
                self.follower._epoch_refused(key[0], key[1], response)
                self._retry_at[key] = now + SESSION_RETRY_S
                continue
            try:
                log = self.follower.store.log(*key)
            except LogfsError:
                continue
            changed |= self.follower.replica_state.note(key[0], key[1], response)
            jobs.append((key, log, self._sent.get(key, log.log_end_offset), response))
        if changed:
            await self.follower.replica_state.write()
        if not jobs:
            return
        async with self.follower._apply_lock:
            jobs = [job for job in jobs if job[0] in self.members]  # left meanwhile (refollow): another leader's now
            results = await self.follower._thread(self.follower._disk_limiter, _apply_all, jobs)
        for (key, log, offset, response), result in zip(jobs, results, strict=True):
            if key not in self.members:
                continue  # dropped meanwhile
            paused = bool(response.records) or response.error is not None or response.diverging_epoch is not None
            if isinstance(result, Exception):
                if self.follower.store.offline is not None:
                    return  # the loop's first line stops fetching
                _log.error("%s-%d: cannot apply the fetch at offset %d: %s", key[0], key[1], offset, result)
                self._retry_at[key] = now + SESSION_RETRY_S
                continue
            self.follower._failing.discard(key)
            self.follower._applied(key[0], key[1], log, offset, response, result)
            if result.stale:
                self._retry_at[key] = now + SESSION_RETRY_S
            elif paused:
                self.updates[key] = None  # the leader waits for our new fetch offset


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
