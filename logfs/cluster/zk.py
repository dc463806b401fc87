"""The cluster's operations on its znodes (``logfs/cluster/znodes.py``), read and written with Kafka's layout and
conditional writes: registration, the controller's election, the leadership, the partition states and deletions. Apart
from the session (``logfs/cluster/zksession.py``, the base class of ``ZooKeeper``) because what the cluster asks of
ZooKeeper is one idea and how kazoo is driven another: here kazoo is neither imported nor seen running; requests go
through the session's plumbing (kazoo's calls and transactions on its client) and come back as logfs's types
(``logfs/cluster/zkerrors.py``).

At scale (10,000 partitions; docs/replication.md, "Elections at scale"): nothing here is one request per
partition in series. An election writes the state znodes in multis of at most ``MULTI_MAX_OPS`` writes and
``MULTI_MAX_BYTES`` (a quarter of ``jute.maxbuffer``'s default 1 MB), each led by the check of
``/controller_epoch``'s version (KAFKA-6082), several in flight at once, and writes the leadership **last**, in its
own multi with the same check, only once every state multi applied. A controller that dies or is deposed part-way
leaves states in the new epoch under a leadership still in the old one: nodes act only on the leadership, so none
acts on the half-written election; a leader of the old epoch that records an ISR meets a newer version and is fenced
(or, named again, waits to adopt); and the next controller elects above every recorded epoch and rewrites every
state, completing it (``rules.plan_election``). Reads of every state go in multiReads (``zksession.MultiRead``); the
leader's own state writes (new partitions, ISR changes) go in multis too, and the writes of a refused multi are made
again one request each.

Threads: every method is a blocking call for a trio worker thread (never the trio thread).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from logfs.cluster.assignment import Assignment
from logfs.cluster.rules import (
    NO_LEADERSHIP,
    BadZnode,
    Broker,
    Leadership,
    PartitionState,
    controller_data,
    controller_id,
    decode_assignment,
    encode_assignment,
)
from logfs.cluster.zkerrors import (
    BadVersion,
    Conflict,
    Fenced,
    NodeExists,
    NoNode,
    RolledBack,
    StillRegistered,
    Superseded,
)
from logfs.cluster.zksession import GET_CHILDREN, GET_DATA, MULTI_DEPTH, MULTI_MAX_BYTES, MULTI_MAX_OPS, ZkSession
from logfs.cluster.znodes import (
    BROKERS,
    CONTROLLER,
    CONTROLLER_EPOCH,
    DELETE_TOPICS,
    LEADERSHIP,
    TOPICS,
    Versioned,
    state_path,
)

_log = logging.getLogger(__name__)


class ZooKeeper(ZkSession):
    """One node's ZooKeeper session (see ``zksession.ZkSession``) and the cluster's operations on its znodes. See
    the module docstring."""

    # --- brokers ------------------------------------------------------------------------------------------------------

    def register(self, broker: Broker) -> int:
        """Create this node's ephemeral ``/brokers/ids/<id>``; its czxid (the broker epoch). A registration of an
        earlier session of this node (a restart before it expired) is waited out: StillRegistered → retry later."""
        path = f"{BROKERS}/{broker.node_id}"
        try:
            created = self._do(self._client.create_async, self._p(path), broker.encode(), ephemeral=True)
        except NodeExists:
            try:
                _, stat = self._get(path)
            except NoNode:
                raise StillRegistered(f"{path} just went: try again") from None
            if stat.ephemeralOwner != self._client.client_id[0]:
                raise StillRegistered(f"{path} belongs to an earlier session (ephemeral owner "
                                      f"{stat.ephemeralOwner:#x})") from None  # fmt: skip
            return int(stat.czxid)
        del created
        _, stat = self._get(path)
        return int(stat.czxid)

    def reregister(self, broker: Broker) -> int:
        """Delete this node's registration and create it again: a new broker epoch (the controller then treats the
        node as restarted and elects again)."""
        try:
            self._do(self._client.delete_async, self._p(f"{BROKERS}/{broker.node_id}"))
        except NoNode:
            pass
        return self.register(broker)

    def live_brokers(self, *, watch: bool = True) -> dict[int, tuple[int, Broker]]:
        """Every registered node: id → (broker epoch, registration). Watches the list."""
        live: dict[int, tuple[int, Broker]] = {}
        for name in self._children(BROKERS, watch=watch):
            try:
                data, stat = self._get(f"{BROKERS}/{name}")
                live[int(name)] = (int(stat.czxid), Broker.decode(int(name), data))
            except (NoNode, ValueError, BadZnode) as exc:
                _log.debug("broker %s: %r", name, exc)
        return live

    # --- the controller -----------------------------------------------------------------------------------------------

    def controller(self, *, watch: bool = True) -> int | None:
        """The controller's node id, or None when there is none; watches ``/controller``."""
        try:
            stat = self._exists(CONTROLLER, watch=watch)
            if stat is None:
                return None
            data, _ = self._get(CONTROLLER)
            return controller_id(data)
        except (NoNode, BadZnode):
            return None

    def try_become_controller(self, node_id: int) -> tuple[int, int] | None:
        """Kafka's controller election: create ``/controller`` and bump ``/controller_epoch`` in one multi. (epoch,
        the epoch znode's version) when this node won, None when another did."""
        try:
            self._do(self._client.create_async, self._p(CONTROLLER_EPOCH), b"0")
        except NodeExists:
            pass
        data, stat = self._get(CONTROLLER_EPOCH)
        epoch = int(data or b"0") + 1
        tx = self._client.transaction()
        tx.create(self._p(CONTROLLER), controller_data(node_id), ephemeral=True)
        tx.set_data(self._p(CONTROLLER_EPOCH), str(epoch).encode(), version=stat.version)
        results = self._commit(tx)
        if any(isinstance(r, Exception) for r in results):
            return None
        return epoch, int(results[1].version)

    # --- leadership and partition states ------------------------------------------------------------------------------

    def leadership(self, *, watch: bool = True) -> tuple[Leadership, int]:
        """The recorded leadership and its znode version (NO_LEADERSHIP, -1 when none was ever written); watches it
        (an exists watch when it is missing, so its creation is seen)."""
        try:
            data, stat = self._get(LEADERSHIP, watch=watch)
        except NoNode:
            if watch:
                self._exists(LEADERSHIP, watch=True)
            return NO_LEADERSHIP, -1
        try:
            return Leadership.decode(data), int(stat.version)
        except BadZnode as exc:
            _log.error("%s holds no leadership (%s): treated as none", LEADERSHIP, exc)
            return NO_LEADERSHIP, int(stat.version)

    def partition_states(self) -> dict[tuple[str, int], Versioned]:
        """Every partition's recorded state, with its version: three rounds (the topics, every topic's partitions,
        every state), the last two in multiReads, so 10,000 partitions cost about 15 requests, not 12,000."""
        topics = self._children(TOPICS)
        listed = self._read_many(GET_CHILDREN, [f"{TOPICS}/{t}/partitions" for t in topics])
        keys: list[tuple[str, int]] = []
        for topic, names in zip(topics, listed, strict=True):
            if isinstance(names, Exception):
                continue  # a topic znode without partitions yet (its leader is creating them) or just deleted
            for name in names:
                try:
                    keys.append((topic, int(name)))
                except ValueError:
                    _log.debug("partition %s-%s: not a number", topic, name)
        got = self._read_many(GET_DATA, [state_path(t, p) for t, p in keys])
        states: dict[tuple[str, int], Versioned] = {}
        for key, answer in zip(keys, got, strict=True):
            try:
                if isinstance(answer, Exception):
                    raise answer
                data, stat = answer
                states[key] = Versioned(PartitionState.decode(data), int(stat.version))
            except (NoNode, BadZnode) as exc:
                _log.debug("partition %s-%s: %r", key[0], key[1], exc)
        return states

    # --- topics and their assignments ---------------------------------------------------------------------------------

    def topics(self, *, watch: bool = False) -> list[str]:
        """The topics recorded under ``/brokers/topics`` (a watch sees one made or deleted)."""
        return self._children(TOPICS, watch=watch)

    def assignments(self, topics: Sequence[str]) -> dict[str, tuple[Assignment | None, int]]:
        """The recorded assignment of each of ``topics`` and its znode version, in multiReads (None for an empty
        znode; a topic gone or holding bad JSON is left out, the latter logged)."""
        out: dict[str, tuple[Assignment | None, int]] = {}
        for topic, answer in zip(topics, self._read_many(GET_DATA, [f"{TOPICS}/{t}" for t in topics]), strict=True):
            if isinstance(answer, Exception):
                continue
            data, stat = answer
            try:
                out[topic] = (decode_assignment(data), int(stat.version))
            except BadZnode as exc:
                _log.error("%s/%s: %s: treated as no assignment", TOPICS, topic, exc)
                out[topic] = (None, int(stat.version))
        return out

    def write_assignment(self, topic: str, assignment: Assignment, version: int | None) -> int:
        """Record ``topic``'s assignment (Kafka's admin write): create its znode when ``version`` is None, else set it
        expecting ``version``; the znode's new version. Conflict when it was made or changed meanwhile (the caller
        reads it again)."""
        data = encode_assignment(assignment)
        try:
            if version is None:
                self._do(self._client.create_async, self._p(f"{TOPICS}/{topic}"), data)
                return 0
            return int(self._do(self._client.set_async, self._p(f"{TOPICS}/{topic}"), data, version).version)
        except (NodeExists, BadVersion, NoNode) as exc:
            raise Conflict(f"topic {topic}: its assignment changed meanwhile ({type(exc).__name__})") from None

    def write_election(
        self,
        controller_epoch_version: int,
        leadership: Leadership,
        leadership_version: int,
        states: Mapping[tuple[str, int], tuple[PartitionState, int]],
    ) -> int:
        """The controller's election (or its removal of dead replicas): every partition state (conditional on its
        version) in multis of at most ``MULTI_MAX_OPS`` writes and ``MULTI_MAX_BYTES``, pipelined, each led by the
        check of ``/controller_epoch``'s version; then, only once every one of them applied, the leadership
        (conditional on its version; -1: create) in a last multi with the same check. The number of multis sent.

        Order: the states first, the leadership last, because the leadership is what nodes act on. A controller that
        dies (or is deposed: its later multis fail their check) between the two leaves some states in the new epoch
        and the leadership in the old one: no node acts on that, a leader of the old epoch that writes an ISR meets
        the newer version and is fenced (or, named again, waits to adopt), and the next controller reads the states
        as they are, elects again in an epoch above every recorded one and completes it (docs/replication.md,
        "Elections at scale").

        Fenced when a check of ``/controller_epoch`` or of the leadership's version fails (a newer controller);
        Conflict when only a partition state's version does (the caller reads again and retries)."""
        check = self._p(CONTROLLER_EPOCH)
        chunks: list[Any] = []
        tx: Any = None
        size = 0
        for (topic, partition), (state, version) in states.items():
            path = self._p(state_path(topic, partition))
            data = state.encode()
            op_size = len(path) + len(data) + 32  # the op's header, lengths and version
            if tx is None or len(tx.operations) > MULTI_MAX_OPS or size + op_size > MULTI_MAX_BYTES:
                tx = self._client.transaction()
                tx.check(check, controller_epoch_version)
                chunks.append(tx)
                size = len(check) + 32
            tx.set_data(path, data, version=version)
            size += op_size
        last = self._client.transaction()
        last.check(check, controller_epoch_version)
        if leadership_version < 0:
            last.create(self._p(LEADERSHIP), leadership.encode())
        else:
            last.set_data(self._p(LEADERSHIP), leadership.encode(), version=leadership_version)
        for multi in chunks:
            self.multis.record(multi)
        answers = self._many([multi.commit_async for multi in chunks], MULTI_DEPTH)
        refused = [results for results in answers if _failed(results)]
        if any(isinstance(r, Exception) or not isinstance(r[0], RolledBack) for r in refused):  # the check
            raise Fenced(f"the election in epoch {leadership.leader_epoch} was refused: /controller_epoch changed "
                         f"({len(answers) - len(refused)} of {len(answers)} state multis applied)")  # fmt: skip
        if refused:
            raise Conflict(f"the election in epoch {leadership.leader_epoch}: {len(refused)} of {len(answers)} state "
                           f"multis met a newer partition state; the leadership was not written")  # fmt: skip
        self.multis.record(last)
        (results,) = self._many([last.commit_async])
        if _failed(results):
            raise Fenced(f"the leadership of epoch {leadership.leader_epoch} was refused: {results!r}")
        return len(chunks) + 1

    def write_states(
        self, writes: Sequence[tuple[str, int, PartitionState, int | None]]
    ) -> dict[tuple[str, int], int | Fenced | Superseded]:
        """The leader's ISR records: for each (topic, partition, state, version) a set expecting ``version``, or with
        version None the creation of a new partition's state znode (and of its parents; a creation also ends the
        record of an earlier deletion of the topic). Per partition: the new version, or the refusal (see
        :meth:`set_state` and :meth:`create_state` for how one is judged).

        In bulk: the writes go in multis of at most ``MULTI_MAX_OPS`` ops and ``MULTI_MAX_BYTES``, pipelined (a
        leader that takes or creates 10,000 partitions waits for a few requests, not 10,000 or 40,000); a multi is
        all-or-nothing, so the writes of one that was refused (a state changed, a znode existed) are made again one
        request each and judged one by one. These are the leader's writes, not the controller's: like Kafka's
        leader's ISR updates they are conditional on the state's version only. ZkUnavailable when ZooKeeper does not
        answer: nothing is known of any of them (the caller tries again)."""
        creating = sorted({topic for topic, _, _, version in writes if version is None})
        topics: set[str] = set(self._children(TOPICS)) if creating else set()
        dirs: dict[str, set[str]] = {}
        if creating:
            old = [t for t in creating if t in topics]
            for topic, names in zip(old, self._read_many(GET_CHILDREN, [f"{TOPICS}/{t}/partitions" for t in old]),
                                    strict=True):  # fmt: skip
                dirs[topic] = set() if isinstance(names, Exception) else set(names)
            # a topic made again ends the record of its deletion (a returning replica's old copy diverges in epochs)
            deleted = sorted(set(self._children(DELETE_TOPICS)) & set(creating))
            self._many([functools.partial(self._client.delete_async, self._p(f"{DELETE_TOPICS}/{t}")) for t in deleted])
        groups: list[list[tuple[str, int, PartitionState, int | None]]] = []
        multis: list[Any] = []
        own: list[list[int]] = []  # per multi, the index of each write's own op
        size = 0
        for write in writes:
            topic, partition, state, version = write
            path, data = self._p(state_path(topic, partition)), state.encode()
            parents: list[str] = []
            if version is None:
                if topic not in topics:
                    parents += [f"{TOPICS}/{topic}", f"{TOPICS}/{topic}/partitions"]
                    topics.add(topic)
                    dirs[topic] = set()
                if str(partition) not in dirs.setdefault(topic, set()):
                    parents.append(f"{TOPICS}/{topic}/partitions/{partition}")
                    dirs[topic].add(str(partition))
            op_size = sum(len(self._p(x)) + 32 for x in parents) + len(path) + len(data) + 32
            if not multis or len(multis[-1].operations) + len(parents) >= MULTI_MAX_OPS or size + op_size > \
                    MULTI_MAX_BYTES:  # fmt: skip
                multis.append(self._client.transaction())
                groups.append([])
                own.append([])
                size = 0
            tx = multis[-1]
            for parent in parents:
                tx.create(self._p(parent), b"")
            own[-1].append(len(tx.operations))
            if version is None:
                tx.create(path, data)
            else:
                tx.set_data(path, data, version=version)
            groups[-1].append(write)
            size += op_size
        out: dict[tuple[str, int], int | Fenced | Superseded] = {}
        again: list[tuple[str, int, PartitionState, int | None]] = []
        for group, indexes, results in zip(groups, own, self._many([tx.commit_async for tx in multis], MULTI_DEPTH),
                                          strict=True):  # fmt: skip
            if _failed(results):
                again += group
                continue
            for (topic, partition, _, version), index in zip(group, indexes, strict=True):
                out[(topic, partition)] = 0 if version is None else int(results[index].version)
        if again:
            out.update(self._write_singly(again))
        return out

    def _write_singly(
        self, writes: Sequence[tuple[str, int, PartitionState, int | None]]
    ) -> dict[tuple[str, int], int | Fenced | Superseded]:
        """The writes of a refused multi, one request each (pipelined), each refusal judged on its own."""
        starts: list[Callable[[], Any]] = []
        slots: list[int] = []  # index in starts of each write's own request
        for topic, partition, state, version in writes:
            path = self._p(state_path(topic, partition))
            if version is None:
                for parent in (f"{TOPICS}/{topic}", f"{TOPICS}/{topic}/partitions",
                               f"{TOPICS}/{topic}/partitions/{partition}"):  # fmt: skip
                    starts.append(functools.partial(self._client.create_async, self._p(parent), b""))
                slots.append(len(starts))
                starts.append(functools.partial(self._client.create_async, path, state.encode()))
            else:
                slots.append(len(starts))
                starts.append(functools.partial(self._client.set_async, path, state.encode(), version))
        answers = self._many(starts)
        out: dict[tuple[str, int], int | Fenced | Superseded] = {}
        for (topic, partition, state, version), slot in zip(writes, slots, strict=True):
            answer = answers[slot]
            if not isinstance(answer, Exception):
                out[(topic, partition)] = 0 if version is None else int(answer.version)
                continue
            try:
                out[(topic, partition)] = (self._created(topic, partition, state) if version is None
                                           else self._was_set(topic, partition, state, version))  # fmt: skip
            except (Fenced, Superseded) as exc:
                out[(topic, partition)] = exc
        return out

    def set_state(self, topic: str, partition: int, state: PartitionState, version: int) -> int:
        """The leader's ISR change: set the state expecting ``version``; the new version. Fenced on BadVersion
        unless the znode already holds exactly ``state`` (our earlier write whose answer was lost); Superseded when
        it holds a newer epoch naming this same leader."""
        return _raised(self.write_states([(topic, partition, state, version)])[(topic, partition)])

    def create_state(self, topic: str, partition: int, state: PartitionState) -> int:
        """A new partition's state znode (by its leader); its version. An existing one is taken when it names the
        same leader and epoch (Fenced otherwise)."""
        return _raised(self.write_states([(topic, partition, state, None)])[(topic, partition)])

    def _was_set(self, topic: str, partition: int, state: PartitionState, version: int) -> int:
        """A set refused (BadVersion, NoNode): judge what the znode holds now."""
        path = state_path(topic, partition)
        try:
            data, stat = self._get(path)
            found = PartitionState.decode(data)
            if found == state:
                return int(stat.version)
            if found.leader == state.leader and found.leader_epoch > state.leader_epoch:
                raise Superseded(f"{topic}-{partition}: leader epoch {found.leader_epoch} names this leader")
        except (NoNode, BadZnode):
            pass
        raise Fenced(f"{topic}-{partition}: the state changed under the leader (expected version {version})")

    def _created(self, topic: str, partition: int, state: PartitionState) -> int:
        """A creation refused (NodeExists): taken when the znode names the same leader and epoch."""
        data, stat = self._get(state_path(topic, partition))
        try:
            found = PartitionState.decode(data)
        except BadZnode as exc:
            raise Fenced(f"{topic}-{partition}: {exc}") from None
        if (found.leader, found.leader_epoch) == (state.leader, state.leader_epoch):
            return int(stat.version)
        raise Fenced(f"{topic}-{partition}: recorded for leader {found.leader} in epoch {found.leader_epoch}")

    # --- deletions ----------------------------------------------------------------------------------------------------

    def record_deletion(self, topic: str, done_by: Iterable[int]) -> None:
        """``/admin/delete_topics/<topic>`` with the ids that deleted it, and its state znodes gone."""
        try:
            self._do(self._client.create_async, self._p(f"{DELETE_TOPICS}/{topic}"), _ids(done_by))
        except NodeExists:
            pass
        self._delete_tree(f"{TOPICS}/{topic}")

    def pending_deletions(self, *, watch: bool = True) -> dict[str, tuple[set[int], int]]:
        """Topics deleted on a leader: topic → (ids that applied the deletion, znode version)."""
        pending: dict[str, tuple[set[int], int]] = {}
        topics = self._children(DELETE_TOPICS, watch=watch)
        got = self._read_many(GET_DATA, [f"{DELETE_TOPICS}/{t}" for t in topics])
        for topic, answer in zip(topics, got, strict=True):
            try:
                if isinstance(answer, Exception):
                    raise answer
                data, stat = answer
                done = json.loads(data or b"[]")
                pending[topic] = ({int(i) for i in done}, int(stat.version))
            except (NoNode, ValueError, TypeError) as exc:
                _log.debug("deletion %s: %r", topic, exc)
        return pending

    def deletion_applied(self, topic: str, node_id: int, replica_ids: Iterable[int]) -> None:
        """This node deleted ``topic``: add it to the znode's ids; remove the znode once every replica did."""
        path = f"{DELETE_TOPICS}/{topic}"
        for _ in range(5):
            try:
                data, stat = self._get(path)
            except NoNode:
                return
            done = {int(i) for i in json.loads(data or b"[]")} | {node_id}
            try:
                if done >= set(replica_ids):
                    self._do(self._client.delete_async, self._p(path), stat.version)
                else:
                    self._do(self._client.set_async, self._p(path), _ids(done), stat.version)
                return
            except (BadVersion, NoNode):
                continue


def _failed(results: Any) -> bool:
    """Whether a multi's answer is a refusal (a list with an error per op) rather than its results."""
    return isinstance(results, Exception) or any(isinstance(r, Exception) for r in results)


def _raised(answer: int | Fenced | Superseded) -> int:
    if isinstance(answer, Exception):
        raise answer
    return answer


def _ids(ids: Iterable[int]) -> bytes:
    return json.dumps(sorted(set(ids))).encode()
