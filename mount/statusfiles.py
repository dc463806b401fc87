"""What the small status files say: a partition's ``state``, a topic's ``config``, ``.logfs/leader`` and
``.logfs/metrics`` (docs/mount.md, "Files, modes and caching"; docs/replication.md, "`state` of a leader").

The read path (``mount/reads.py``) sizes and opens these files; this module renders them from the store, the
mount's role (a leader's replication, or what a follower's last fetch told it), the cleaner and, in a cluster, what
ZooKeeper says. Each is rendered whole at open (and per getattr, for the size). Trio thread; ``state`` reads the
disk in a worker thread.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from typing import Any, cast

from logfs.core.configtext import render_config
from logfs.core.log.log import Log
from logfs.core.store import Store
from logfs.mount.cleaning import CleanerTask
from logfs.mount.follow import FollowReaders
from logfs.mount.metrics import Metrics, PartitionGauges, render, render_store_health
from logfs.mount.nodes import Node
from logfs.mount.render.views import RenderCache, render_state
from logfs.mount.replication import LeaderReplication
from logfs.mount.runner import Runner
from logfs.mount.tree import Tree

# A follower mount's source of what its ``state`` shows: (topic, partition) → (leader epoch, ISR) as the follower's
# last fetch of that partition told it ((-1, ()) before any).
ReplicaView = Callable[[str, int], tuple[int, Sequence[int]]]


class StatusFiles:
    """The renderings of ``state``, ``config``, ``.logfs/leader`` and ``.logfs/metrics`` for one mount. Trio thread.

    The role (``replication`` / ``follower``) is switched in place by ``Operations.set_role``; the cluster, the
    server and the consumer groups add what they know through the attributes set after construction."""

    def __init__(
        self,
        store: Store,
        tree: Tree,
        metrics: Metrics,
        follows: FollowReaders,
        cache: RenderCache,
        *,
        read_thread: Runner,
        replication: LeaderReplication | None,
        follower: ReplicaView | None,
    ) -> None:
        self.store = store
        self.tree = tree
        self.metrics = metrics
        self.follows = follows
        self.cache = cache
        self.replication = replication
        self.follower = follower
        self._read_thread = read_thread
        self.extra_metrics: Callable[[], str] | None = None  # more .logfs/metrics lines (consumer groups)
        self.cleaner: CleanerTask | None = None  # the store's log cleaner (state's "cleaner", its metrics)
        self.mountpoint = ""  # where this mount is (set by the server): .logfs/leader of a leader without ZooKeeper
        # With ZooKeeper (logfs/cluster/node.py): .logfs/leader's object, and the fields ``state`` gains
        self.leader_info: Callable[[], dict[str, Any]] | None = None
        self.cluster_state: Callable[[], dict[str, Any]] | None = None
        # … and a partition's leader (``<topic>/<p>/leader``) and replicas in assignment order (its ``state``)
        self.partition_leader_info: Callable[[str, int], dict[str, Any]] | None = None
        self.assigned_replicas: Callable[[str, int], tuple[int, ...]] | None = None

    def _log(self, node: Node) -> Log:
        return self.store.log(node.topic, node.partition)

    def render_config(self, topic: str) -> bytes:
        return render_config(self.store.topic_config(topic), self.store.topic_overrides(topic)).encode()

    def render_leader(self) -> bytes:
        """``.logfs/leader``: the leader ZooKeeper names (``leader_info``); without ZooKeeper a leader's mount names
        itself, a follower's mount (``logfs follow --mount``) nobody (node_id -1)."""
        if self.leader_info is not None:
            doc = self.leader_info()
        elif self.replication is not None:
            config = self.store.config
            doc = {"node_id": config.node_id, "mount": config.advertised_mount or self.mountpoint,
                   "leader_epoch": self.replication.leader_epoch}  # fmt: skip
        else:
            doc = {"node_id": -1, "mount": "", "leader_epoch": -1}
        # Whether this mount is shared: only then do its attributes say who owns what (a follower copies them).
        doc = {**doc, "shared": self.store.config.mount_allow_other}
        return json.dumps(doc).encode() + b"\n"

    def render_partition_leader(self, node: Node) -> bytes:
        """``<topic>/<p>/leader``: the partition's leader as ``partition_leader_info`` says (a cluster); without
        ZooKeeper, the mount's leader (:meth:`render_leader`: every partition has the same one)."""
        if self.partition_leader_info is None:
            return self.render_leader()
        return json.dumps(self.partition_leader_info(node.topic, node.partition)).encode() + b"\n"

    async def render_state(self, node: Node) -> bytes:
        """``state`` (:meth:`_render_state`); in a cluster with ``zookeeper_session``, ``controller`` and ``leader``
        added, and ``replicas`` in assignment order (:func:`replicas_in_assignment_order`)."""
        data = await self._render_state(node)
        if self.cluster_state is None:
            return data
        doc = json.loads(data)
        doc.update(self.cluster_state())
        if self.partition_leader_info is not None:
            doc["leader"] = self.partition_leader_info(node.topic, node.partition)["node_id"]
        if self.assigned_replicas is not None:
            assigned = self.assigned_replicas(node.topic, node.partition)
            doc["replicas"] = replicas_in_assignment_order(doc["replicas"], assigned, self.store.config.node_id,
                                                           doc["log_end_offset"])  # fmt: skip
        return json.dumps(doc, separators=(",", ":")).encode() + b"\n"

    async def _render_state(self, node: Node) -> bytes:
        """The ``state`` file: a leader's epoch, ISR and replicas (this node at its LEO, caught up now; each follower
        as its fetches left it), or what a follower's last fetch told it."""
        log = self._log(node)
        if self.follower is not None:  # a follower's mount: the leader's epoch and ISR as its last fetch told
            epoch, isr = self.follower(node.topic, node.partition)
            job = functools.partial(_state_with_cleaner, self.cleaner, log, node.topic, node.partition,
                                    role="follower", leader_epoch=epoch, isr=isr, replicas={})  # fmt: skip
        else:
            assert self.replication is not None
            leader = self.replication.partition(node.topic, node.partition)
            job = functools.partial(_state_with_cleaner, self.cleaner, log, node.topic, node.partition,
                                    leader_epoch=leader.leader_epoch, isr=leader.isr,
                                    replicas=leader.replicas_view())  # fmt: skip
        return cast(bytes, await self._read_thread(job))

    def _replication_gauges(self, topic: str, partition: int) -> dict[str, Any]:
        """The ISR and the followers' LEOs of one partition, for ``.logfs/metrics``."""
        if self.follower is not None:
            _, isr = self.follower(topic, partition)
            return {"isr": tuple(isr)}
        assert self.replication is not None
        leader = self.replication.partition(topic, partition)
        return {
            "isr": leader.isr,
            "under_min_isr": leader.under_min_isr,
            "replicas": {r: leader.replica_state(r).log_end_offset for r in leader.followers},
        }

    def render_metrics(self) -> bytes:
        gauges = {
            (tp.topic, tp.partition): PartitionGauges(
                log.log_start_offset,
                log.high_watermark,
                log.log_end_offset,
                log.size_bytes,
                len(log.segments),
                log.recovery_point,
                log.durable_offset,
                **self._replication_gauges(tp.topic, tp.partition),
            )
            for tp, log in self.store.logs()
        }
        cache = self.cache.statistics()
        stats = self.metrics.statistics(
            gauges,
            follow_readers=self.follows.count,
            fresh_inodes=self.tree.fresh_entries,
            render_cache={
                "segment_indexes": cache.segment_indexes,
                "entries": cache.entries,
                "rendered_bytes": cache.rendered_bytes,
                "hits": cache.rendered_hits,
                "misses": cache.rendered_misses,
            },
        )
        extra = "" if self.extra_metrics is None else self.extra_metrics()
        failure = self.store.failure
        health = render_store_health(failure.offline is not None, failure.read_errors, failure.corrupt_batches)
        cleaner = "" if self.cleaner is None else self.cleaner.metrics_text()
        return render(stats) + health + self._followers_live().encode() + extra.encode() + cleaner.encode()

    def _followers_live(self) -> str:
        """A leader's ``logfs_follower_live`` lines: whether each follower is live, so that a topic created now
        starts with it in the ISR (core/replication/replica.py, ``LeaderReplicas.live_followers``)."""
        replication = self.replication
        if replication is None or not replication.leaders.followers:
            return ""
        leaders = replication.leaders
        live = set(leaders.live_followers())
        lines = [
            "# HELP logfs_follower_live 1 when the follower sent a fetch request within replica.lag.time.max.ms "
            "(a partition created now starts with it in the ISR).",
            "# TYPE logfs_follower_live gauge",
        ]
        lines += [f'logfs_follower_live{{replica="{r}"}} {int(r in live)}' for r in leaders.followers]
        return "\n".join(lines) + "\n"


def _state_with_cleaner(cleaner: CleanerTask | None, log: Log, topic: str, partition: int, **kwargs: Any) -> bytes:
    """``state`` with a compacted topic's dirty section (``mount/cleaning.py``). Worker thread: reads the disk."""
    dirty = None if cleaner is None else cleaner.state_of(topic, partition, log)
    return render_state(log, topic, partition, cleaner=dirty, **kwargs)


def replicas_in_assignment_order(
    known: dict[str, Any], assigned: tuple[int, ...], node_id: int, log_end_offset: int
) -> dict[str, Any]:
    """``state``'s ``replicas`` in a cluster: every assigned replica in assignment order (the preferred leader
    first) with what this node knows of it (a leader: each follower's progress; any node: its own log end), -1 where
    it knows nothing, then any replica known but not assigned (none, unless the assignment is not read yet)."""
    unknown = {"log_end_offset": -1, "last_caught_up_ms": -1}
    out: dict[str, Any] = {}
    for replica in assigned:
        own = {"log_end_offset": log_end_offset, "last_caught_up_ms": -1} if replica == node_id else unknown
        out[str(replica)] = known.get(str(replica), own)
    out.update((k, v) for k, v in known.items() if k not in out)
    return out
