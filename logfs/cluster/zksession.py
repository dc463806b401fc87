"""A node's ZooKeeper session and its requests: the only module that imports kazoo. Why apart from the cluster's
operations on znodes (``logfs/cluster/zk.py``): kazoo runs its own threads, and keeping its client here, alone, keeps
those threads and their callbacks in one place that can be read whole.

Threads: kazoo runs its own threads; their callbacks (session state, one-shot watches) only hand a word to trio
(``trio.lowlevel.TrioToken.run_sync_soon`` → a memory channel) and never touch anything else. Every other method is
a blocking call for a trio worker thread (never the trio thread), with a deadline of ``REQUEST_TIMEOUT_S``.

Requests: many at once, pipelined (``ZkSession._many``), never one request per partition in series; reads of many
znodes go in multiReads (``MultiRead``). Their answers leave this module in logfs's types
(``logfs/cluster/zkerrors.py``): ZkUnavailable when the session cannot be trusted, a kind of Refused for ZooKeeper's
answer about one znode (for ``zk.py`` to judge); kazoo's own errors never leave it.

Security (docs/replication.md, "Securing ZooKeeper and followers"): with a credential (``logfs/cluster/zkauth.py``)
the session authenticates with ZooKeeper's ``digest`` scheme, again on every reconnect (kazoo's ``auth_data``); with
``secure`` every znode it creates carries :func:`secure_acl` (world-readable, writable by that credential only:
Kafka's secure ZooKeeper), through kazoo's ``default_acl``, which its creates, ``ensure_path`` and multi creates all
take, so no create in ``zk.py`` can miss it.
"""

from __future__ import annotations

import functools
import logging
from collections import deque, namedtuple
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import trio
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    EXCEPTIONS,
    BadVersionError,
    KazooException,
    NoAuthError,
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
from kazoo.security import OPEN_ACL_UNSAFE, READ_ACL_UNSAFE, Permissions, make_digest_acl

from logfs.cluster.zkauth import Credential
from logfs.cluster.zkerrors import (
    BadVersion,
    NodeExists,
    NoNode,
    NotAuthorized,
    Refused,
    RolledBack,
    Unimplemented,
    ZkUnavailable,
)
from logfs.cluster.znodes import BROKERS, DELETE_TOPICS, TOPICS, split_connect

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

    def record(self, multi: Any) -> None:
        """Count ``multi`` (a kazoo transaction, before its commit) and its size."""
        size = len(Transaction(multi.operations).serialize())
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


def secure_acl(credential: Credential) -> list[Any]:
    """The ACL of a secured znode, Kafka's (its ``ZkData.defaultAcls`` when ``zookeeper.set.acl`` is true): anyone
    may read it, only ``credential`` (``digest``) may change, delete, create under it or change its ACL."""
    return [make_digest_acl(credential.user, credential.password, all=True), *READ_ACL_UNSAFE]


OPEN_ACL: list[Any] = list(OPEN_ACL_UNSAFE)  # ZooKeeper's default: world:anyone, every permission


def acl_text(acl: Sequence[Any]) -> str:
    """An ACL as zkCli's ``setAcl`` spells it: ``digest:user:hash:cdrwa,world:anyone:r``."""
    return ",".join(f"{entry.id.scheme}:{entry.id.id}:{_perms(entry.perms)}" for entry in acl)


def _perms(bits: int) -> str:
    return "".join(letter for letter, bit in (("c", Permissions.CREATE), ("d", Permissions.DELETE),
                                              ("r", Permissions.READ), ("w", Permissions.WRITE),
                                              ("a", Permissions.ADMIN)) if bits & bit)  # fmt: skip


class ZkSession:
    """One node's ZooKeeper session. Build on the trio thread (it captures the trio token); ``events`` yields the
    words kazoo's callbacks hand over. Built outside trio (``logfs zk-acls``: ``logfs/cluster/zkacls.py``) it hands
    nothing over. The cluster's operations on znodes are its subclass, ``zk.ZooKeeper``; the methods named with an
    underscore are for it. ``credential``: authenticate with it; ``secure`` (which needs one): every znode created
    carries :func:`secure_acl`. See the module docstring."""

    def __init__(
        self, connect: str, session_timeout_ms: int, credential: Credential | None = None, *, secure: bool = False
    ) -> None:
        hosts, self.chroot = split_connect(connect)
        self.connect = connect
        # Reconnect attempts at most a fifth of the session timeout apart (kazoo's default backs off up to 60 s): a
        # ZooKeeper restarted within the timeout must see the session again before it expires it.
        retry = {"max_tries": -1, "delay": 0.05, "backoff": 2, "max_jitter": 0.1,
                 "max_delay": max(0.05, session_timeout_ms / 5000)}  # fmt: skip
        if secure and credential is None:
            raise ValueError("a secure session needs a credential")
        self.acl = secure_acl(credential) if secure and credential is not None else OPEN_ACL  # what creates carry
        self.secure = secure
        self._client = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000, connection_retry=retry,
                                   auth_data=[("digest", credential.text)] if credential is not None else None,
                                   default_acl=self.acl if secure else None)  # fmt: skip
        try:
            self._token: trio.lowlevel.TrioToken | None = trio.lowlevel.current_trio_token()
        except RuntimeError:  # not in trio (a command line tool): no words to hand over
            self._token = None
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

        if self._token is None:
            return
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

    def start(self, timeout_s: float, *, make_parents: bool = True) -> None:
        """Connect (a new session) and make the persistent parents (unless not ``make_parents``). ZkUnavailable
        when ZooKeeper does not answer; NotAuthorized when it refuses to make them (a secured cluster, and this
        session without its credential)."""
        try:
            self._client.start(timeout=timeout_s)
            if make_parents:
                for path in (BROKERS, TOPICS, DELETE_TOPICS, "/logfs"):
                    self._client.ensure_path(self._p(path))
                if self.secure:
                    self._warn_if_open()
        except (KazooException, KazooTimeoutError) as exc:
            raise _unavailable(exc, f"ZooKeeper at {self.connect}: ") from None

    def _warn_if_open(self) -> None:
        """A secure node on a cluster made without ACLs: its new znodes are secured, the old ones are not until
        ``logfs zk-acls --secure`` (Kafka's zookeeper-security-migration) sets theirs. Say so once, at the start."""
        acl, _ = self._client.get_acls(self._p(TOPICS))
        if any(entry.id.scheme == "world" and entry.perms & ~Permissions.READ for entry in acl):
            _log.warning("ZooKeeper at %s: anyone may change %s (its ACL: %s): znodes made before "
                         "zookeeper.set.acl=true keep their ACL; `logfs zk-acls --zookeeper %s --auth-file FILE "
                         "--secure` secures them", self.connect, self._p(TOPICS), acl_text(acl),
                         self.connect)  # fmt: skip

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
        """A kazoo async call, awaited with a deadline; NoNode, NodeExists or BadVersion for the caller to judge,
        ZkUnavailable for any other error."""
        try:
            return fn(*args, **kwargs).get(timeout=REQUEST_TIMEOUT_S)
        except (NoNodeError, NodeExistsError, BadVersionError) as exc:
            raise _refusal(exc) from None
        except (KazooException, KazooTimeoutError) as exc:
            raise _unavailable(exc) from None

    def _many(self, starts: Sequence[Callable[[], Any]], depth: int = PIPELINE_DEPTH) -> list[Any]:
        """Pipelining: start every request (at most ``depth`` in flight), each ``start`` a kazoo *_async
        call, and collect the answers in order: a result, or ZooKeeper's refusal of that request (NoNode, NodeExists,
        BadVersion…, for the caller to judge; a multi's answer is a list of a result or a Refused per op). ZooKeeper
        answers a session's requests in the order they were sent, so a request may rely on an earlier one in the list
        (a parent created before its child). ZkUnavailable when any request is not answered (connection loss, session
        expiry, timeout)."""
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
            if isinstance(result, KazooException) and not isinstance(result, _ANSWER_TYPES):
                raise _unavailable(result)
        return [_translated(result) for result in results]

    def _read_many(self, kind: int, paths: Sequence[str]) -> list[Any]:
        """getData (``GET_DATA``: (bytes, stat)) or getChildren (``GET_CHILDREN``: names) of every path, in
        multiReads of at most ``MULTI_MAX_OPS`` pipelined; each answer or its refusal (NoNode) in order. A server
        without multiRead (before 3.6) gets single requests instead."""
        chunks = [[(kind, self._p(path)) for path in paths[i : i + MULTI_MAX_OPS]]
                  for i in range(0, len(paths), MULTI_MAX_OPS)]  # fmt: skip
        if self._multi_read:
            answers = self._many([functools.partial(self._send_request, MultiRead(c)) for c in chunks], MULTI_DEPTH)
            if not any(isinstance(a, Unimplemented) for a in answers):
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
        except NoNode:
            return []

    def _exists(self, path: str, *, watch: bool = False) -> Any:
        """The znode's stat, or None when there is none (then a watch sees its creation)."""
        return self._do(self._client.exists_async, self._p(path), self._watch if watch else None)

    def _commit(self, tx: Any) -> list[Any]:
        """One multi (a kazoo transaction) and its answer per op, each a result or its Refused."""
        try:
            return _translated(tx.commit_async().get(timeout=REQUEST_TIMEOUT_S))
        except (KazooException, KazooTimeoutError) as exc:
            raise _unavailable(exc) from None

    def _delete_tree(self, path: str) -> None:
        """Delete ``path`` and every znode under it (kazoo's recursive delete, a request each); none there: done."""
        try:
            self._client.delete(self._p(path), recursive=True)
        except NoNodeError:
            pass
        except KazooException as exc:
            raise _unavailable(exc) from None


# ZooKeeper's answers about one znode (the caller judges them); any other error means the session cannot be trusted.
_ANSWERS: dict[type[Exception], type[Refused]] = {NoNodeError: NoNode, NodeExistsError: NodeExists,
                                                  BadVersionError: BadVersion, RolledBackError: RolledBack,
                                                  UnimplementedError: Unimplemented}  # fmt: skip
_ANSWER_TYPES = tuple(_ANSWERS)


def _unavailable(exc: Exception, prefix: str = "") -> ZkUnavailable:
    """An error that decided nothing, as logfs's type: NotAuthorized when a znode's ACL refused this session."""
    if isinstance(exc, NoAuthError):
        return NotAuthorized(f"{prefix}a znode's ACL refuses this session (it has no credential, or not the one the "
                             "znode was secured with)")  # fmt: skip
    return ZkUnavailable(f"{prefix}{exc!r}")


def _refusal(exc: Exception) -> Refused:
    """kazoo's error as its kind of Refused (an op of a refused multi may answer any other: Refused by its name)."""
    kind = _ANSWERS.get(type(exc))
    return kind() if kind is not None else Refused(type(exc).__name__)


def _translated(answer: Any) -> Any:
    """An answer with kazoo's errors as Refused: the request's own, or those among a multi's or multiRead's answers
    per op (a list)."""
    if isinstance(answer, KazooException):
        return _refusal(answer)
    if isinstance(answer, list):
        return [_refusal(r) if isinstance(r, KazooException) else r for r in answer]
    return answer
