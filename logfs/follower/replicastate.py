"""What the leader last said of each partition (its leader epoch, the ISR), and the replica state file the follower
keeps from it (``.logfs-replica-state.json``, ``core/replication/promotion.py``; docs/replication.md, "The replica
state").

One owner for both, because the file is computed from the views: the highest leader epoch seen, and the ISR as the
intersection of the last ISR seen for each partition, so that ``in_isr`` is true only when this replica was in the
ISR of every partition. It is replaced atomically, fsynced, whenever it changes, and before the answer that changed
it is applied (a news of the leader holds even if the apply fails), so that ``logfs mount`` of this store (a
promotion) takes an epoch above every epoch ever used and refuses a store that was out of the ISR without
``--unclean``. The views are also what a follower's mount shows in ``state`` (:meth:`ReplicaState.partition_view`).

Threads: the trio thread; the file is written in a worker thread under the follower's disk limiter.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass

import trio

from logfs.core.errors import StoreOffline
from logfs.core.replication.promotion import (
    PersistedReplicaState,
    UnreadableReplicaState,
    read_replica_state,
    write_replica_state,
)
from logfs.core.store import Store
from logfs.follower.fetch import FetchResponse
from logfs.follower.replica import aggregate_replica_state

_log = logging.getLogger(__name__)


@dataclass
class PartitionView:
    """What the last fetch of one partition said about the leader (``state`` of the follower mount shows it)."""

    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    answered: bool = False


class ReplicaState:
    """The views of every partition this follower fetches, and the replica state file. See the module docstring."""

    def __init__(self, store: Store, replica_id: int, disk_limiter: trio.CapacityLimiter) -> None:
        self.store = store
        self.replica_id = replica_id
        self._disk_limiter = disk_limiter
        self.views: dict[tuple[str, int], PartitionView] = {}
        self._lock = trio.Lock()
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

    def partition_view(self, topic: str, partition: int) -> tuple[int, tuple[int, ...]]:
        """(leader epoch, ISR) as the last fetch of that partition told; (-1, ()) before any."""
        view = self.views.get((topic, partition))
        if view is None or not view.answered:
            return -1, ()
        return view.leader_epoch, view.isr

    def forget_topic(self, topic: str) -> None:
        """A deleted topic's partitions leave the views (and so the ISR intersection)."""
        for key in [k for k in self.views if k[0] == topic]:
            del self.views[key]

    def note(self, topic: str, partition: int, response: FetchResponse) -> bool:
        """What a response says of the leader (its epoch, the ISR), logged when it changes, without the write:
        whether the view changed (a session answer writes the state once for all its partitions: one O(partitions)
        computation per answer, not per partition)."""
        name = f"{topic}-{partition}"
        view = self.views.setdefault((topic, partition), PartitionView())
        if view.answered and (self.replica_id in view.isr) != (self.replica_id in response.isr):
            joined = self.replica_id in response.isr
            _log.info("%s: %s the ISR %s", name, "joined" if joined else "left", list(response.isr))
        if view.leader_epoch != response.leader_epoch:
            _log.info("%s: leader epoch %d", name, response.leader_epoch)
        if view.answered and (view.leader_epoch, view.isr) == (response.leader_epoch, response.isr):
            return False  # nothing new: no O(partitions) state computation per fetch
        view.leader_epoch, view.isr, view.answered = response.leader_epoch, response.isr, True
        return True

    async def write(self) -> None:
        """Write the replica state file when what the views say changed."""
        async with self._lock:
            state = aggregate_replica_state(
                self.replica_id, self._highest_epoch,
                ((v.leader_epoch, v.isr) for v in self.views.values() if v.answered),
            )  # fmt: skip
            if state is None:
                return
            previous = self._written
            if (
                state.in_isr
                and previous is not None
                and not previous.in_isr
                and not all(v.answered for v in self.views.values())
            ):
                # Out of the ISR at the last fetch before this run: not back in until every partition has said so.
                state = dataclasses.replace(state, in_isr=False)
            if state == previous:
                return
            self._highest_epoch = state.highest_epoch
            try:
                await trio.to_thread.run_sync(
                    functools.partial(write_replica_state, self.store.path, state), limiter=self._disk_limiter
                )
            except StoreOffline:
                return  # logged once by the failure channel; the fetch loops stop at their next turn
            self._written = state
            _log.debug("replica state: %s", state)
