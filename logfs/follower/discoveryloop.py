"""The follower's discovery task: every ``DISCOVER_INTERVAL_S`` it lists the leader's root and each ``<topic>/``
(``logfs/follower/discovery.py`` does the listing and the making, in worker threads), creates here what is missing
(topics, partitions), copies each topic's ``config`` into this store's topic overrides when it changed, starts
fetching each new partition, and has the follower delete a topic here that the leader deleted (one seen on the
leader during this run that its root no longer lists, while ``.logfs`` is still there: the leader is up and the
topic is gone).

Its own task, apart from :class:`~logfs.follower.daemon.Follower`, because it owns what it learnt of the leader's
topics (the configs copied, the topics seen, what each round made) and decides, round by round, which known topics
to list again (:meth:`DiscoveryLoop._known_slice`): at 10,000 partitions a round that listed every topic again would
cost the leader thousands of lookups a second.

Threads: the trio thread; listings and store changes in worker threads.
"""

from __future__ import annotations

import bisect
import logging
from typing import TYPE_CHECKING

import trio

from logfs.core.errors import LogfsError
from logfs.core.owners import Owner
from logfs.follower.discovery import (
    GroupsKnown,
    LeaderTopic,
    Listing,
    create_topics,
    ensure_topic,
    list_leader,
    plan_owners,
)
from logfs.follower.retry import Backoff

if TYPE_CHECKING:
    from logfs.follower.daemon import Follower

_log = logging.getLogger(__name__)

DISCOVER_INTERVAL_S = 1.0  # how often the leader's topics, partitions and configs are listed
DISCOVER_SLICE_MIN = 64  # known topics whose partitions and config a round looks at again, at least; and at least
DISCOVER_FULL_ROUNDS = 10  # every known topic once in this many rounds (new topics and deletions: every round)


class DiscoveryLoop:
    """Discovery of one follower's leader. See the module docstring."""

    def __init__(self, follower: Follower) -> None:
        self.follower = follower
        self._configs: dict[str, str] = {}  # topic → the config text last copied
        self._seen_topics: set[str] = set()  # topics the leader listed during this run
        self._ensured: dict[str, LeaderTopic] = {}  # topic → what discovery last made of it
        self._cursors: dict[str, str] = {}  # "topics", "groups" → the last name a slice held (see _rotating)
        self._groups: dict[str, Owner | None] = {}  # every group the leader listed → its owner (None: unclaimed)
        self._wake = trio.Event()  # set: the next round now, not DISCOVER_INTERVAL_S after the last

    def wake(self) -> None:
        """Look at the leader now: a mkdir or rmdir, or a config change, this node forwarded to it is waiting to be
        seen here (mount/forwarding.py). Trio thread."""
        self._wake.set()

    def forget(self, topic: str) -> None:
        """A topic deleted here: a later listing of it on the leader makes it anew."""
        self._seen_topics.discard(topic)
        self._configs.pop(topic, None)
        self._ensured.pop(topic, None)

    async def run(self, nursery: trio.Nursery) -> None:
        """List the leader and match it here, round after round, until cancelled."""
        backoff = Backoff()
        while True:
            if self.follower.store_offline():
                await trio.sleep_forever()  # no topic is created or deleted here any more; the other tasks go on
            known = self._known_slice()
            try:
                groups = GroupsKnown(dict(self._groups), frozenset(self._rotating("groups", sorted(self._groups))))
                listing = await self.follower._leader_call(
                    list_leader, self.follower.leader, self.follower.replica_id, known, groups
                )
            except OSError as exc:
                self.follower._leader_failed(exc)
                await backoff.wait()
                continue
            backoff.reset()
            self.follower._leader_answered()
            await self._take_owners(listing)
            missing = {t: v for t, v in listing.topics.items() if not self.follower.store.has_topic(t)}
            if len(missing) > 1:  # one fsync of the store directory for all of them (a follower's first round)
                for topic in await self.follower._thread(
                    self.follower._disk_limiter, create_topics, self.follower.store, missing
                ):
                    made = missing[topic].config
                    if made is not None:
                        self._configs[topic] = made
                    self._seen_topics.add(topic)
                    self._ensured[topic] = missing[topic]
            for topic, seen in listing.topics.items():
                count, config, _ = seen
                if self._ensured.get(topic) == seen and self.follower.store.has_topic(topic):
                    for p in range(count):  # as the last round made it: no worker call per topic per round
                        self.follower._start_partition(nursery, topic, p)  # (back in the session if it left it)
                    continue
                try:
                    copied = self._configs.get(topic)
                    await self.follower._thread(
                        self.follower._disk_limiter, ensure_topic, self.follower.store, topic, seen, copied
                    )
                except (LogfsError, OSError) as exc:
                    _log.error("cannot create topic %s here: %s", topic, exc)
                    continue
                if config is not None:
                    self._configs[topic] = config
                self._seen_topics.add(topic)
                self._ensured[topic] = seen
                for p in range(count):
                    self.follower._start_partition(nursery, topic, p)
            for topic in sorted(self._seen_topics - set(listing.topics)):
                await self.follower._delete_topic(topic)
            with trio.move_on_after(DISCOVER_INTERVAL_S):
                await self._wake.wait()
            self._wake = trio.Event()

    async def _take_owners(self, listing: Listing) -> None:
        """The owners a shared leader shows for its root and its claimed groups, taken when they differ from this
        store's (a topic's owner comes with the topic: ``ensure_topic``); a group owner recorded here that the
        leader does not show as claimed (deleted there, or unclaimed) is forgotten, so a node that comes to lead
        lets its next committer claim it, as the leader would (``plan_owners``). Nothing for an unshared leader."""
        if listing.root is None:
            return  # an unshared leader: its attributes say nothing of owners
        root, groups = listing.root, listing.groups

        def take() -> None:
            changed, gone = plan_owners(self.follower.store, root, groups)
            for name, owner in changed.items():
                self.follower.store.owners.set(name, owner)
            self.follower.store.owners.forget_all(gone)

        try:
            await self.follower._thread(self.follower._disk_limiter, take)
        except (LogfsError, OSError) as exc:
            _log.error("cannot take the leader's owners here: %s", exc)
            return
        if groups is not None:
            self._groups = groups

    def _known_slice(self) -> dict[str, LeaderTopic]:
        """What discovery may take as known this round: every topic made here before, but a rotating slice of them
        (at least DISCOVER_SLICE_MIN, every one within DISCOVER_FULL_ROUNDS rounds), whose partitions and config are
        listed again. So a new partition or a config change of a known topic is seen within DISCOVER_FULL_ROUNDS
        seconds; a new topic and a deleted one within one round."""
        topics = sorted(self._ensured)
        again = self._rotating("topics", topics)
        return {t: self._ensured[t] for t in topics if t not in again}

    def _rotating(self, kind: str, names: list[str]) -> set[str]:
        """This round's slice of ``names`` (sorted): at least DISCOVER_SLICE_MIN of them, going on from the last
        name the previous slice of ``kind`` held, so each name is in one within DISCOVER_FULL_ROUNDS rounds even
        while names come and go (a slice kept by name, not by position)."""
        if not names:
            return set()
        # one round in hand for the names added meanwhile, which lengthen the cycle
        size = min(len(names), max(DISCOVER_SLICE_MIN, -(-len(names) // (DISCOVER_FULL_ROUNDS - 1))))
        start = bisect.bisect_right(names, self._cursors.get(kind, "")) % len(names)
        picked = [names[(start + i) % len(names)] for i in range(size)]
        self._cursors[kind] = picked[-1]
        return set(picked)
