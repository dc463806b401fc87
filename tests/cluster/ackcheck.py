"""acks=all writers that record what was acknowledged, and the checker of issue 17's promises about it.

A :class:`Writer` is a thread that finds the leader from the nodes' ``.logfs/leader`` files and appends unique
values (``<writer>-<sequence>``) to ``<topic>/<p>/append`` on the leader's mount, each write followed by fsync(2)
(or an O_SYNC write): an :class:`Ack` is recorded only when that returned success, with the node whose mount
acknowledged it. A failed attempt is counted by errno and never retried with the same values (an unacknowledged
value may or may not be stored; an acknowledged one must be stored exactly once).

The checker (:func:`check_history`) reads the stores themselves (segment files, after the cluster is quiet):

* every acknowledged value is in its partition on the final leader exactly once;
* the replicas converge byte-identical (sha256 of every ``.log`` file; ``cleanup.policy=delete`` topics);
* no offset holds two different records on two replicas;
* leader epochs only grow: in each store's batches and leader-epoch-checkpoint, and in every state znode version
  the test's watch saw (:class:`EpochWatch`);
* at most one node acknowledged in any epoch (the epoch of an acknowledged record is its batch's
  partitionLeaderEpoch in the final log).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zkcluster import Cluster, ClusterError, append_acked, wait_until

from logfs.core.format.batch import iter_batch_positions, read_header
from logfs.core.format.decode import decode_records


@dataclass(frozen=True)
class Ack:
    """One acknowledged produce: its values, where they went, who acknowledged them and when."""

    values: tuple[str, ...]
    topic: str
    partition: int
    node_id: int  # the node the writer picked as leader; -1 for a write through any node (forwarded: the leader
    # that acknowledged it is not known to the writer)
    seen_epoch: int  # the epoch in .logfs/leader when the writer picked that node
    sent: float  # time.monotonic() before the write(2)
    acked: float  # time.monotonic() after fsync(2) returned


class Writer(threading.Thread):
    """An acks=all writer thread over a cluster (``start()``, then ``stop()``); ``label`` prefixes its values."""

    def __init__(self, cluster: Cluster, topic: str, partitions: int, label: str = "w", *, batch: int = 5,
                 o_sync: bool = False, interval_s: float = 0.0, through_any: bool = False) -> None:  # fmt: skip
        """``through_any``: write through a node picked at random among the reachable ones, which forwards the write
        to the leader when it does not lead (mount/forwarding.py), instead of through the leader named."""
        super().__init__(name=f"writer-{label}", daemon=True)
        self.cluster = cluster
        self.topic = topic
        self.partitions = partitions
        self.label = label
        self.batch = batch
        self.o_sync = o_sync
        self.interval_s = interval_s
        self.through_any = through_any
        self._rng = random.Random(label)
        self.acks: list[Ack] = []
        self.errors: Counter[str] = Counter()
        self.attempts = 0
        self._halt = threading.Event()
        self._seq = 0

    def stop(self, timeout_s: float = 30.0) -> None:
        """Ask the thread to end and join it (resume paused nodes first: a write into a paused mount waits)."""
        self._halt.set()
        self.join(timeout_s)
        if self.is_alive():
            raise ClusterError(f"writer {self.label} did not stop in {timeout_s} s (a write blocked in a mount?)")

    def acked_values(self) -> int:
        return sum(len(a.values) for a in self.acks)

    def last_ack(self) -> Ack | None:
        return self.acks[-1] if self.acks else None

    def _pick(self) -> tuple[int, Path, int] | None:
        """(node id, mount, epoch seen) to write through: the leader the nodes name, or any reachable node."""
        if self.through_any:
            nodes = self.cluster.reachable()
            return (-1, self._rng.choice(nodes).mount, -1) if nodes else None
        found = self.cluster.current_leader()
        if found is None:
            return None
        node, info = found
        return node.node_id, Path(info.mount), info.leader_epoch

    def run(self) -> None:
        partition = 0
        while not self._halt.is_set():
            found = self._pick()
            if found is None:
                time.sleep(0.02)
                continue
            node_id, mount, seen_epoch = found
            values = tuple(f"{self.label}-{self._seq + i}" for i in range(self.batch))
            self._seq += self.batch
            self.attempts += 1
            sent = time.monotonic()
            try:
                append_acked(mount, self.topic, partition, list(values), o_sync=self.o_sync)
            except OSError as exc:
                self.errors[errno.errorcode.get(exc.errno or 0, str(exc.errno))] += 1
                time.sleep(0.02)
                continue
            self.acks.append(Ack(values, self.topic, partition, node_id, seen_epoch, sent, time.monotonic()))
            partition = (partition + 1) % self.partitions
            if self.interval_s:
                time.sleep(self.interval_s)


class TopicMaker:
    """mkdir of new topics (``<prefix>-<n>``) through nodes picked at random (a node that does not lead forwards it
    to the leader: mount/forwarding.py), a few at a time between a campaign's faults, so that the next fault (a
    leader killed, say) often comes before the followers' discovery has seen them. ``acked``: the names whose mkdir
    returned 0 — each must be on every node at the end, whatever failed over since (an acknowledged mkdir is recorded
    in ZooKeeper before it returns: docs/replication.md, "An acknowledged mkdir or rmdir survives the leader");
    ``tried``: every name attempted (nothing else may appear).

    Not while a fault is under way: a topic made while some node is down starts with an ISR without it, and with one
    leader for every partition a dead leader alone in one partition's ISR leaves the whole cluster without a clean
    leader (the campaign would measure that limit, not the mkdir)."""

    def __init__(self, cluster: Cluster, prefix: str = "made", seed: int = 0) -> None:
        self.cluster = cluster
        self.prefix = prefix
        self.acked: list[str] = []
        self.tried: list[str] = []
        self.errors: Counter[str] = Counter()
        self._rng = random.Random(seed)

    def make(self, count: int) -> None:
        for _ in range(count):
            nodes = self.cluster.reachable()
            if not nodes:
                return
            name = f"{self.prefix}-{len(self.tried)}"
            self.tried.append(name)
            path = self._rng.choice(nodes).mount / name
            try:
                os.mkdir(path)
                # a node that died before the mkdir leaves its mount point a plain directory, where a mkdir
                # succeeds: only a topic the mount shows (its partition 0) counts as acknowledged by logfs
                made = (path / "0").is_dir()
            except OSError as exc:
                self.errors[errno.errorcode.get(exc.errno or 0, str(exc.errno))] += 1
                continue
            if made:
                self.acked.append(name)
            else:
                self.errors["not a logfs mount"] += 1

    def check(self, timeout_s: float) -> None:
        """Every acknowledged topic on every reachable node (their discovery may take a round), and no topic of this
        maker that was never attempted."""
        tried, acked = set(self.tried), set(self.acked)
        for node in self.cluster.reachable():
            deadline = time.monotonic() + timeout_s
            while True:
                present = {p.name for p in node.mount.iterdir() if p.name.startswith(f"{self.prefix}-")}
                if acked <= present <= tried:
                    break
                if time.monotonic() > deadline:
                    raise ClusterError(f"node {node.node_id} lacks acknowledged topics {sorted(acked - present)} "
                                       f"and shows topics never asked for {sorted(present - tried)}\n"
                                       f"{self.cluster.logs()}")  # fmt: skip
                time.sleep(0.1)


@contextlib.contextmanager
def writing(cluster: Cluster, topic: str, partitions: int, label: str = "w", **options: Any) -> Iterator[Writer]:
    """A running :class:`Writer` for the body of a ``with``; always stopped (paused nodes resumed first, so that a
    write waiting in a zombie's mount returns)."""
    writer = Writer(cluster, topic, partitions, label, **options)
    writer.start()
    try:
        yield writer
    finally:
        for node in cluster.nodes.values():
            node.resume()
        writer.stop()


def wait_acks(writer: Writer, count: int, timeout_s: float, *, node_id: int | None = None, after: float = 0.0) -> Ack:
    """Wait until ``writer`` has ``count`` more acknowledgements (from ``node_id`` if given, sent after ``after``);
    the first such one."""

    def probe() -> Ack | None:
        fresh = [a for a in list(writer.acks) if a.sent >= after and (node_id is None or a.node_id == node_id)]
        return fresh[0] if len(fresh) >= count else None

    return wait_until(f"{count} acks by writer {writer.label} (node {node_id}) after {after:.2f}", probe, timeout_s,
                      logs=writer.cluster.logs)  # fmt: skip


# --- the stores, read from disk ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    """One record of a replica's log as the checker sees it."""

    offset: int
    epoch: int
    value: str


def stored_records(store: Path, topic: str, partition: int) -> list[Stored]:
    """Every record in a partition's ``.log`` files, with its batch's partitionLeaderEpoch (control batches
    skipped)."""
    out = []
    for path in sorted((store / f"{topic}-{partition}").glob("*.log")):
        data = path.read_bytes()
        for position, _size in iter_batch_positions(data):
            header = read_header(data, position)
            if header.is_control:
                continue
            for record in decode_records(data, position):
                value = record.value.decode() if record.value is not None else ""
                out.append(Stored(record.offset, header.partition_leader_epoch, value))
    return out


def log_digests(store: Path, topic: str, partition: int) -> dict[str, str]:
    """sha256 of every ``.log`` file of a partition, by name."""
    directory = store / f"{topic}-{partition}"
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.glob("*.log"))}


def checkpoint_epochs(store: Path, topic: str, partition: int) -> list[tuple[int, int]]:
    """The leader-epoch-checkpoint of a partition: (epoch, start offset) entries ([] when absent)."""
    path = store / f"{topic}-{partition}" / "leader-epoch-checkpoint"
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [(int(e), int(o)) for e, o in (line.split() for line in lines[2:] if line.strip())]


def converged(cluster: Cluster, topic: str, partitions: int) -> bool:
    """Every node's ``.log`` files byte-identical to every other's, for every partition (and something stored)."""
    for p in range(partitions):
        digests = [log_digests(n.store, topic, p) for n in cluster.nodes.values()]
        if not digests[0] or any(d != digests[0] for d in digests[1:]):
            return False
    return True


class EpochWatch:
    """Every version of the partitions' state znodes the test's kazoo client saw (a DataWatch per partition)."""

    def __init__(self, cluster: Cluster, topic: str, partitions: int) -> None:
        self.seen: dict[int, list[dict[str, Any]]] = defaultdict(list)
        self._lock = threading.Lock()
        client = cluster.kazoo()
        for p in range(partitions):
            client.DataWatch(f"/brokers/topics/{topic}/partitions/{p}/state", self._recorder(p))

    def _recorder(self, partition: int) -> Any:
        def record(data: bytes | None, stat: Any) -> None:
            if data:
                with self._lock:
                    self.seen[partition].append(json.loads(data))

        return record

    def epochs(self, partition: int) -> list[int]:
        with self._lock:
            return [int(s["leader_epoch"]) for s in self.seen[partition]]


@dataclass
class Verdict:
    """What the checker counted; :func:`check_history` raises on the first broken promise."""

    acked_records: int = 0
    stored_records: int = 0
    lost: int = 0
    epochs: dict[int, list[int]] = field(default_factory=dict)
    ackers_by_epoch: dict[int, set[int]] = field(default_factory=dict)


def check_history(
    cluster: Cluster,
    acks: list[Ack],
    topic: str,
    partitions: int,
    *,
    watch: EpochWatch | None = None,
    converge_timeout_s: float = 60.0,
) -> Verdict:
    """Check issue 17's promises on a quiet cluster (writers stopped, every node running): see the module's
    docstring. Waits for a settled leader and for the replicas to converge first."""
    leader, _ = cluster.wait_leader(converge_timeout_s)
    wait_until("the replicas byte-identical", lambda: converged(cluster, topic, partitions), converge_timeout_s,
               poll_s=0.2, logs=cluster.logs)  # fmt: skip
    verdict = Verdict()
    problems: list[str] = []
    for p in range(partitions):
        replicas = {n.node_id: stored_records(n.store, topic, p) for n in cluster.nodes.values()}
        final = replicas[leader.node_id]
        verdict.stored_records += len(final)
        counts = Counter(r.value for r in final)
        epoch_of = {r.value: r.epoch for r in final}
        # no offset holds two different records on two replicas
        by_offset: dict[int, dict[int, str]] = defaultdict(dict)
        for node_id, records in replicas.items():
            for r in records:
                by_offset[r.offset][node_id] = r.value
        for offset, values in by_offset.items():
            if len(set(values.values())) > 1:
                problems.append(f"partition {p} offset {offset} differs across replicas: {values}")
        # epochs only grow, in each replica's batches and checkpoint
        for node_id, records in replicas.items():
            batch_epochs = [r.epoch for r in records]
            if batch_epochs != sorted(batch_epochs):
                problems.append(f"partition {p} on node {node_id}: batch epochs go down")
            entries = checkpoint_epochs(cluster.nodes[node_id].store, topic, p)
            if [e for e, _ in entries] != sorted({e for e, _ in entries}):
                problems.append(f"partition {p} on node {node_id}: checkpoint epochs not increasing: {entries}")
        if watch is not None:
            seen = watch.epochs(p)
            verdict.epochs[p] = seen
            if seen != sorted(seen):
                problems.append(f"partition {p}: the state znode's leader_epoch went down: {seen}")
        # every acknowledged value exactly once; one acknowledging node per epoch
        for ack in (a for a in acks if a.partition == p and a.topic == topic):
            for value in ack.values:
                verdict.acked_records += 1
                if counts[value] != 1:
                    verdict.lost += counts[value] == 0
                    problems.append(
                        f"acked {value} (node {ack.node_id}, epoch seen {ack.seen_epoch}) is stored {counts[value]} "
                        f"times in partition {p} of the final leader {leader.node_id}"
                    )
                    continue
                if ack.node_id >= 0:  # a forwarded write's acknowledging leader is not known to its writer
                    verdict.ackers_by_epoch.setdefault(epoch_of[value], set()).add(ack.node_id)
    for epoch, ackers in verdict.ackers_by_epoch.items():
        if len(ackers) > 1:
            problems.append(f"epoch {epoch} was acknowledged by nodes {sorted(ackers)}")
    if problems:
        shown = "\n".join(problems[:40])
        raise ClusterError(f"{len(problems)} broken promises:\n{shown}\n{cluster.logs()}")
    return verdict
