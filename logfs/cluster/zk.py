"""The only module that talks to ZooKeeper (kazoo): the cluster's znodes, read and written with Kafka's layout and
conditional writes, and kazoo's events handed to trio.

The znodes and their layout: ``logfs/cluster/znodes.py``; what a call answers besides its result (ZkUnavailable,
Fenced, …): ``logfs/cluster/zkerrors.py``.

At scale (10,000 partitions; docs/replication.md, "Elections at scale"): nothing here is one request per
partition in series. An election writes the state znodes in multis of at most ``MULTI_MAX_OPS`` writes and
``MULTI_MAX_BYTES`` (a quarter of ``jute.maxbuffer``'s default 1 MB), each led by the check of
``/controller_epoch``'s version (KAFKA-6082), several in flight at once, and writes the leadership **last**, in its
own multi with the same check, only once every state multi applied. A controller that dies or is deposed part-way
leaves states in the new epoch under a leadership still in the old one: nodes act only on the leadership, so none
acts on the half-written election; a leader of the old epoch that records an ISR meets a newer version and is fenced
(or, named again, waits to adopt); and the next controller elects above every recorded epoch and rewrites every
state, completing it (``rules.plan_election``). Reads of every state go in multiReads (``MultiRead``); the leader's
own state writes (new partitions, ISR changes) go in multis too, and the writes of a refused multi are made again
one request each.

Threads: kazoo runs its own threads; their callbacks (session state, one-shot watches) only hand a word to trio
(``trio.lowlevel.TrioToken.run_sync_soon`` → a memory channel) and never touch anything else. Every other method is
a blocking call for a trio worker thread (never the trio thread), with a deadline of ``REQUEST_TIMEOUT_S``.
"""

from __future__ import annotations

import functools
import json
import logging
from collections import deque, namedtuple
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import trio
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    EXCEPTIONS,
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    UnimplementedError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import (
    MultiHeader,
    Transaction,
    ZnodeStat,
    int_struct,
    multiheader_struct,
    read_buffer,
    read_string,
    stat_struct,
    write_string,
)

from logfs.cluster.rules import (
    NO_LEADERSHIP,
    BadZnode,
    Broker,
    Leadership,
    PartitionState,
    controller_data,
    controller_id,
)
from logfs.cluster.zkerrors import Conflict, Fenced, StillRegistered, Superseded, ZkUnavailable
from logfs.cluster.znodes import (
    BROKERS,
    CONTROLLER,
    CONTROLLER_EPOCH,
    DELETE_TOPICS,
    LEADERSHIP,
    TOPICS,
    Versioned,
    split_connect,
    state_path,
)

_log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 5.0  # a call that ZooKeeper does not answer in time fails (the caller retries or fences)
# A controller multi carries at most this many state writes and this many bytes of request (kazoo's serialised
# Transaction): a quarter of jute.maxbuffer's default 1 MB, so a multi is never refused for its size, with room for
# topic names of 249 characters. 1,000 state writes of an ordinary topic name are about 150 KB.
MULTI_MAX_OPS = 1000
MULTI_MAX_BYTES = 256 * 1024
# At most this many asynchronous requests in flight on the session (reads and the leader's writes): enough to keep
# the connection busy, few enough that a slow answer times out one request, not thousands queued behind it.
PIPELINE_DEPTH = 512
# Multis in flight at once: ZooKeeper answers a session's requests in order, heartbeats included, so a heartbeat sent
# behind many large multis waits for all of them; a few keep the connection busy without starving it.
MULTI_DEPTH = 4

# Events handed to trio (words on the channel).
SESSION_CONNECTED = "connected"
SESSION_SUSPENDED = "suspended"
SESSION_EXPIRED = "expired"
CHANGED = "changed"  # a watched znode or child list changed: read again


@dataclass(slots=True)
class MultiLog:
    """What the controller's multis cost, for the logs and the tests: how many were sent and the largest request
    body in bytes (kazoo's serialised Transaction, the size ZooKeeper checks against ``jute.maxbuffer``)."""

    sent: int = 0
    largest: int = 0

    def record(self, size: int) -> None:
        self.sent += 1
        self.largest = max(self.largest, size)


GET_DATA, GET_CHILDREN = 4, 8  # ZooKeeper's OpCode.getData and OpCode.getChildren


class MultiRead(namedtuple("MultiRead", "operations")):
    """ZooKeeper's multiRead (OpCode 22, ZooKeeper 3.6+): many getData / getChildren in one request, each answered
    on its own (a missing znode is that op's NoNodeError, not the request's). kazoo has no call for it; this is its
    wire format in kazoo's request shape (``type``, ``serialize``, ``deserialize``), sent as kazoo sends a
    Transaction. Why: kazoo wakes its connection thread once per request, and on a loaded machine each wake-up
    costs about half a millisecond of thread switching, so 10,000 single gets took seconds; 10 multiReads do not."""

    type = 22

    def serialize(self) -> bytearray:
        b = bytearray()
        for kind, path in self.operations:
            b.extend(MultiHeader(kind, False, -1).serialize() + write_string(path) + b"\0")  # no watch
        return b + multiheader_struct.pack(-1, True, -1)

    @classmethod
    def deserialize(cls, data: bytes, offset: int) -> list[Any]:
        out: list[Any] = []
        header, offset = MultiHeader.deserialize(data, offset)
        while not header.done:
            if header.type == GET_DATA:
                value, offset = read_buffer(data, offset)
                out.append((value, ZnodeStat._make(stat_struct.unpack_from(data, offset))))
                offset += stat_struct.size
            elif header.type == GET_CHILDREN:
                (count,) = int_struct.unpack_from(data, offset)
                offset += int_struct.size
                names = []
                for _ in range(max(count, 0)):
                    name, offset = read_string(data, offset)
                    names.append(name)
                out.append(names)
            else:  # -1: this op's error
                (err,) = int_struct.unpack_from(data, offset)
                offset += int_struct.size
                out.append(EXCEPTIONS[err]())
            header, offset = MultiHeader.deserialize(data, offset)
        return out


class ZooKeeper:
    """One node's ZooKeeper session. Build on the trio thread (it captures the trio token); ``events`` yields the
    words kazoo's callbacks hand over. See the module docstring."""

    def __init__(self, connect: str, session_timeout_ms: int) -> None:
        hosts, self.chroot = split_connect(connect)
        self.connect = connect
        # Reconnect attempts at most a fifth of the session timeout apart (kazoo's default backs off up to 60 s): a
        # ZooKeeper restarted within the timeout must see the session again before it expires it.
        retry = {"max_tries": -1, "delay": 0.05, "backoff": 2, "max_jitter": 0.1,
                 "max_delay": max(0.05, session_timeout_ms / 5000)}  # fmt: skip
        self._client = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000, connection_retry=retry)
        self._token = trio.lowlevel.current_trio_token()
        self._send, self.events = trio.open_memory_channel[str](1000)
        self._client.add_listener(self._on_state)
        self.session = SESSION_SUSPENDED  # the last state kazoo reported (read on the trio thread)
        self.multis = MultiLog()  # the controller's multis since this session object was made
        self._multi_read = True  # until the server says it has no multiRead

    # --- kazoo's threads: hand over, nothing else ---------------------------------------------------------------------

    def _post(self, word: str) -> None:
        def send() -> None:
            if word in (SESSION_CONNECTED, SESSION_SUSPENDED, SESSION_EXPIRED):
                self.session = word
            try:
                self._send.send_nowait(word)
            except (trio.WouldBlock, trio.ClosedResourceError):
                pass  # a full channel already holds a word that makes the node read everything again

        try:
            self._token.run_sync_soon(send)
        except trio.RunFinishedError:
            pass

    def _on_state(self, state: str) -> None:
        self._post({KazooState.CONNECTED: SESSION_CONNECTED, KazooState.SUSPENDED: SESSION_SUSPENDED,
                    KazooState.LOST: SESSION_EXPIRED}.get(state, SESSION_SUSPENDED))  # fmt: skip

    def _watch(self, _event: Any) -> None:
        self._post(CHANGED)

    def nudge(self) -> None:
        """From the trio thread: make the node reconcile now."""
        try:
            self._send.send_nowait(CHANGED)
        except trio.WouldBlock:
            pass

    # --- lifecycle (worker thread) ------------------------------------------------------------------------------------

    def start(self, timeout_s: float) -> None:
        """Connect (a new session) and make the persistent parents. ZkUnavailable when ZooKeeper does not answer."""
        try:
            self._client.start(timeout=timeout_s)
            for path in (BROKERS, TOPICS, DELETE_TOPICS, "/logfs"):
                self._client.ensure_path(self._p(path))
        except (KazooException, KazooTimeoutError) as exc:
            raise ZkUnavailable(f"ZooKeeper at {self.connect}: {exc!r}") from None

    def stop(self) -> None:
        """Close the session (its ephemeral znodes go at once) and stop kazoo's threads."""
        try:
            self._client.stop()
            self._client.close()
        except KazooException:
            pass

    # --- plumbing -----------------------------------------------------------------------------------------------------

    def _p(self, path: str) -> str:
        return self.chroot + path

    def _do(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A kazoo async call, awaited with a deadline; ZkUnavailable for anything but the caller's typed errors."""
        try:
            return fn(*args, **kwargs).get(timeout=REQUEST_TIMEOUT_S)
        except (NoNodeError, NodeExistsError, BadVersionError):
            raise
        except (KazooException, KazooTimeoutError) as exc:
            raise ZkUnavailable(repr(exc)) from None

    def _many(self, starts: Sequence[Callable[[], Any]], depth: int = PIPELINE_DEPTH) -> list[Any]:
        """Pipelining: start every request (at most ``depth`` in flight), each ``start`` a kazoo *_async
        call, and collect the answers in order: a result, or the ZooKeeper error of that request (NoNode, NodeExists,
        BadVersion… for the caller to judge). ZooKeeper answers a session's requests in the order they were sent,
        so a request may rely on an earlier one in the list (a parent created before its child).
        ZkUnavailable when any request is not answered (connection loss, session expiry, timeout)."""
        results: list[Any] = [None] * len(starts)
        pending: deque[tuple[int, Any]] = deque()

        def collect() -> None:
            index, async_result = pending.popleft()
            try:
                results[index] = async_result.get(timeout=REQUEST_TIMEOUT_S)
            except KazooTimeoutError as exc:
                raise ZkUnavailable(f"no answer in {REQUEST_TIMEOUT_S} s: {exc!r}") from None
            except KazooException as exc:
                results[index] = exc

        for index, start in enumerate(starts):
            if len(pending) >= depth:
                collect()
            pending.append((index, start()))
        while pending:
            collect()
        for result in results:
            if isinstance(result, KazooException) and not isinstance(result, _ANSWERS):
                raise ZkUnavailable(repr(result))
        return results

    def _read_many(self, kind: int, paths: Sequence[str]) -> list[Any]:
        """getData (``GET_DATA``: (bytes, stat)) or getChildren (``GET_CHILDREN``: names) of every path, in
        multiReads of at most ``MULTI_MAX_OPS`` pipelined; each answer or its error (NoNodeError) in order. A server
        without multiRead (before 3.6) gets single requests instead."""
        chunks = [[(kind, self._p(path)) for path in paths[i : i + MULTI_MAX_OPS]]
                  for i in range(0, len(paths), MULTI_MAX_OPS)]  # fmt: skip
        if self._multi_read:
            answers = self._many([functools.partial(self._send_request, MultiRead(c)) for c in chunks], MULTI_DEPTH)
            if not any(isinstance(a, UnimplementedError) for a in answers):
                return [r for answer in answers for r in answer]
            self._multi_read = False
            _log.info("ZooKeeper at %s has no multiRead: reading znodes one request each", self.connect)
        single = self._client.get_async if kind == GET_DATA else self._client.get_children_async
        return self._many([functools.partial(single, self._p(path)) for path in paths])

    def _send_request(self, request: Any) -> Any:
        """Queue a request kazoo has no method for, as kazoo's own TransactionRequest.commit_async does."""
        async_result = self._client.handler.async_result()
        self._client._call(request, async_result)
        return async_result

    def _get(self, path: str, *, watch: bool = False) -> tuple[bytes, Any]:
        return self._do(self._client.get_async, self._p(path), self._watch if watch else None)

    def _children(self, path: str, *, watch: bool = False) -> list[str]:
        try:
            return self._do(self._client.get_children_async, self._p(path), self._watch if watch else None)
        except NoNodeError:
            return []

    # --- brokers ------------------------------------------------------------------------------------------------------

    def register(self, broker: Broker) -> int:
        """Create this node's ephemeral ``/brokers/ids/<id>``; its czxid (the broker epoch). A registration of an
        earlier session of this node (a restart before it expired) is waited out: StillRegistered → retry later."""
        path = f"{BROKERS}/{broker.node_id}"
        try:
            created = self._do(self._client.create_async, self._p(path), broker.encode(), ephemeral=True)
        except NodeExistsError:
            try:
                _, stat = self._get(path)
            except NoNodeError:
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
        except NoNodeError:
            pass
        return self.register(broker)

    def live_brokers(self, *, watch: bool = True) -> dict[int, tuple[int, Broker]]:
        """Every registered node: id → (broker epoch, registration). Watches the list."""
        live: dict[int, tuple[int, Broker]] = {}
        for name in self._children(BROKERS, watch=watch):
            try:
                data, stat = self._get(f"{BROKERS}/{name}")
                live[int(name)] = (int(stat.czxid), Broker.decode(int(name), data))
            except (NoNodeError, ValueError, BadZnode) as exc:
                _log.debug("broker %s: %r", name, exc)
        return live

    # --- the controller -----------------------------------------------------------------------------------------------

    def controller(self, *, watch: bool = True) -> int | None:
        """The controller's node id, or None when there is none; watches ``/controller``."""
        try:
            stat = self._do(self._client.exists_async, self._p(CONTROLLER), self._watch if watch else None)
            if stat is None:
                return None
            data, _ = self._get(CONTROLLER)
            return controller_id(data)
        except (NoNodeError, BadZnode):
            return None

    def try_become_controller(self, node_id: int) -> tuple[int, int] | None:
        """Kafka's controller election: create ``/controller`` and bump ``/controller_epoch`` in one multi. (epoch,
        the epoch znode's version) when this node won, None when another did."""
        try:
            self._do(self._client.create_async, self._p(CONTROLLER_EPOCH), b"0")
        except NodeExistsError:
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

    def _commit(self, tx: Any) -> list[Any]:
        try:
            return tx.commit_async().get(timeout=REQUEST_TIMEOUT_S)
        except (KazooException, KazooTimeoutError) as exc:
            raise ZkUnavailable(repr(exc)) from None

    # --- leadership and partition states ------------------------------------------------------------------------------

    def leadership(self, *, watch: bool = True) -> tuple[Leadership, int]:
        """The recorded leadership and its znode version (NO_LEADERSHIP, -1 when none was ever written); watches it
        (an exists watch when it is missing, so its creation is seen)."""
        try:
            data, stat = self._get(LEADERSHIP, watch=watch)
        except NoNodeError:
            if watch:
                self._do(self._client.exists_async, self._p(LEADERSHIP), self._watch)
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
            except (NoNodeError, BadZnode) as exc:
                _log.debug("partition %s-%s: %r", key[0], key[1], exc)
        return states

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
            self.multis.record(len(Transaction(multi.operations).serialize()))
        answers = self._many([multi.commit_async for multi in chunks], MULTI_DEPTH)
        refused = [results for results in answers if _failed(results)]
        if any(isinstance(r, Exception) or not isinstance(r[0], RolledBackError) for r in refused):  # the check
            raise Fenced(f"the election in epoch {leadership.leader_epoch} was refused: /controller_epoch changed "
                         f"({len(answers) - len(refused)} of {len(answers)} state multis applied)")  # fmt: skip
        if refused:
            raise Conflict(f"the election in epoch {leadership.leader_epoch}: {len(refused)} of {len(answers)} state "
                           f"multis met a newer partition state; the leadership was not written")  # fmt: skip
        self.multis.record(len(Transaction(last.operations).serialize()))
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
        except (NoNodeError, BadZnode):
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
        except NodeExistsError:
            pass
        try:
            self._client.delete(self._p(f"{TOPICS}/{topic}"), recursive=True)
        except NoNodeError:
            pass
        except KazooException as exc:
            raise ZkUnavailable(repr(exc)) from None

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
            except (NoNodeError, ValueError, TypeError) as exc:
                _log.debug("deletion %s: %r", topic, exc)
        return pending

    def deletion_applied(self, topic: str, node_id: int, replica_ids: Iterable[int]) -> None:
        """This node deleted ``topic``: add it to the znode's ids; remove the znode once every replica did."""
        path = f"{DELETE_TOPICS}/{topic}"
        for _ in range(5):
            try:
                data, stat = self._get(path)
            except NoNodeError:
                return
            done = {int(i) for i in json.loads(data or b"[]")} | {node_id}
            try:
                if done >= set(replica_ids):
                    self._do(self._client.delete_async, self._p(path), stat.version)
                else:
                    self._do(self._client.set_async, self._p(path), _ids(done), stat.version)
                return
            except (BadVersionError, NoNodeError):
                continue


def _failed(results: Any) -> bool:
    """Whether a multi's answer is a refusal (a list with an error per op) rather than its results."""
    return isinstance(results, Exception) or any(isinstance(r, Exception) for r in results)


def _raised(answer: int | Fenced | Superseded) -> int:
    if isinstance(answer, Exception):
        raise answer
    return answer


# ZooKeeper's answers about one znode (the caller judges them); any other error means the session cannot be trusted.
_ANSWERS = (NoNodeError, NodeExistsError, BadVersionError, RolledBackError, UnimplementedError)


def _ids(ids: Iterable[int]) -> bytes:
    return json.dumps(sorted(set(ids))).encode()
