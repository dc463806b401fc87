"""What this node knows of the cluster's topics: each one's replica assignment as ``/brokers/topics/<t>`` records it
(Kafka's JSON, ``rules.encode_assignment``), with the znode's version (docs/replication.md, "The znodes").

Kept apart from the node's loop (``logfs/cluster/node.py``) because it is one piece of state with two writers: the
node's reconcile reads ZooKeeper into it (:meth:`Assignments.refresh`), and a leader that records a new topic or
partition (``logfs/cluster/isr.py``) puts what it wrote here at once, so its own ``state`` shows it without a
round trip. Readers (a partition's ``state``) take :meth:`Assignments.replicas`.

Cost: ``refresh`` lists ``/brokers/topics`` (one request, watched: a topic made or deleted anywhere wakes the node)
and reads the data of only the topics not known yet or marked stale, in multiReads; a reader that meets a partition
the known assignment lacks (one added since) marks its topic stale and nudges the node. Nothing here is read per
FUSE request from ZooKeeper.

Threads: any, except that a reader meeting a stale topic calls ``on_stale`` (the node's ``nudge``: the trio thread's,
where ``state`` is rendered); one lock guards the maps (held for dictionary work only, never across a ZooKeeper
call).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from logfs.cluster.assignment import Assignment
from logfs.cluster.zk import ZooKeeper

_log = logging.getLogger(__name__)

Recorded = tuple[Assignment | None, int]  # (the assignment, None for an empty znode; the znode's version)


class Assignments:
    """Every topic's recorded assignment, as this node last read or wrote it. See the module docstring."""

    def __init__(self, on_stale: Callable[[], None] | None = None) -> None:
        """``on_stale``: called (from the reader's thread) when a reader meets a partition the known assignment
        lacks, so that the node reads ZooKeeper again soon (its ``nudge``)."""
        self._lock = threading.Lock()
        self._known: dict[str, Recorded] = {}
        self._stale: set[str] = set()
        self._on_stale = on_stale

    def recorded(self, topic: str) -> Recorded | None:
        with self._lock:
            return self._known.get(topic)

    def all(self) -> dict[str, Recorded]:
        with self._lock:
            return dict(self._known)

    def record(self, topic: str, assignment: Assignment, version: int) -> None:
        """A leader wrote ``assignment`` for ``topic`` (its znode now at ``version``)."""
        with self._lock:
            known = self._known.get(topic)
            if known is None or known[1] <= version:
                self._known[topic] = (dict(assignment), version)
            self._stale.discard(topic)

    def record_empty(self, topic: str, version: int) -> None:
        """ZooKeeper holds ``topic``'s znode without an assignment (made by an earlier logfs)."""
        with self._lock:
            self._known.setdefault(topic, (None, version))

    def forget(self, topic: str) -> None:
        """What is known of ``topic`` may be out of date (a write of it was refused): read it again."""
        with self._lock:
            self._known.pop(topic, None)
            self._stale.discard(topic)

    def replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        """The partition's replicas in assignment order (the preferred leader first); () while not known, and then
        the topic is read again at the node's next reconcile."""
        with self._lock:
            known = self._known.get(topic)
            replicas = None if known is None or known[0] is None else known[0].get(partition)
            if replicas is not None:
                return replicas
            fresh = topic not in self._stale
            self._stale.add(topic)
        if fresh and self._on_stale is not None:
            self._on_stale()
        return ()

    def refresh(self, zk: ZooKeeper, *, everything: bool = False) -> None:
        """Worker thread: list the topics (watched), forget the ones gone, read the ones new or stale; with
        ``everything``, every one (a node about to lead, which must not act on what it read as a follower)."""
        listed = set(zk.topics(watch=True))
        with self._lock:
            for gone in set(self._known) - listed:
                del self._known[gone]
            wanted = sorted(listed if everything else (listed - set(self._known)) | (self._stale & listed))
            self._stale &= listed
        if not wanted:
            return
        read = zk.assignments(wanted)
        with self._lock:
            for topic, recorded in read.items():
                known = self._known.get(topic)
                if everything or known is None or known[1] <= recorded[1]:
                    self._known[topic] = recorded
                self._stale.discard(topic)
