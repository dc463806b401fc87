"""An append a coordinator makes to an internal topic as its leader: a consumer group's commit or tombstones
(``__consumer_offsets``, mount/groups.py), a committed label (``__transaction_state``, mount/transactions.py); the
topic's creation at the first of them; and the refusal of every change a client asks of one.

The same steps as a client's append (mount/writes.py) without the framing: under the partition's append lock, in the
writer thread, the readers woken; the offset after the batch is what an acks=all wait needs.

Threads: the trio thread; the append in the writer thread.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from logfs.core.internaltopics import INTERNAL_TOPICS, internal_refusal
from logfs.core.store import Store
from logfs.mount.errors import NotPermitted
from logfs.mount.handles import Partitions
from logfs.mount.replication import LeaderReplication
from logfs.mount.runner import Runner


async def append_internal(
    replication: LeaderReplication,
    partitions: Partitions,
    write_thread: Runner,
    topic: str,
    partition: int,
    batch: bytes,
    *,
    flush: bool,
) -> int:
    """Append ``batch`` to ``topic``-``partition`` as its leader (flushed when ``flush``); the offset after it.
    The log's error as raised."""
    leader = replication.partition(topic, partition)
    state = partitions.get(topic, partition)
    async with state.append_lock:
        done = await write_thread(lambda: leader.append_records_to_leader([bytearray(batch)], flush=flush))
    if done.infos:
        state.notify() if done.high_watermark_moved else state.appended()
    if done.error is not None:
        raise done.error
    return int(done.infos[-1].last_offset) + 1


async def create_internal_topic(
    store: Store,
    write_thread: Runner,
    topics_changed: Callable[[], Awaitable[None]],
    topic: str,
    create: Callable[[Store], None],
) -> None:
    """``create(store)`` the internal ``topic`` unless it exists, then ``topics_changed`` (mount/writes.py): on a
    cluster's leader, the topic is recorded in ZooKeeper and its partitions are taken with the nodes registered now
    in their ISR before the first append waits for acks=all, as for a topic a client makes."""
    if store.has_topic(topic):
        return
    await write_thread(create, store)
    await topics_changed()


def refuse_internal(topic: str) -> None:
    """EPERM for a client's change of an internal topic (a write, mkdir, rmdir, a deletion of it or of its records):
    only its coordinator writes it (core/internaltopics.py)."""
    if topic in INTERNAL_TOPICS:
        raise NotPermitted(internal_refusal(topic))
