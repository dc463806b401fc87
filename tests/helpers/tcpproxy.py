"""A loopback TCP proxy a test can cut and heal: one node's road to ZooKeeper, and nothing else's.

The "node cut from ZooKeeper alone" scenario of issue 17 needs a partition between one node and the server while the
other nodes keep their sessions. A node is given ``zookeeper.connect=127.0.0.1:<proxy port>``; the proxy forwards
each accepted connection to the server. :meth:`TcpProxy.cut` drops every connection and then either refuses new ones
(``mode="refuse"``: the listener is closed, a connect gets ECONNREFUSED, as a dead host's closed port) or swallows
them (``mode="blackhole"``: connects succeed and then nothing comes back, as a partition that drops packets, so the
client only learns of it from its own timeouts). :meth:`TcpProxy.heal` lets traffic through again on the same port.

Threads, not trio: the tests are synchronous, and a thread per direction of a connection is plenty for a ZooKeeper
client's few packets a second. Every thread is a daemon and :meth:`TcpProxy.close` joins them.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from types import TracebackType
from typing import Literal

CutMode = Literal["refuse", "blackhole"]
_BUFFER = 65536


class TcpProxy:
    """Forwards ``127.0.0.1:port`` to ``target``; :meth:`cut` and :meth:`heal` it."""

    def __init__(self, target: tuple[str, int], port: int = 0) -> None:
        self.target = target
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._listener: socket.socket | None = None
        self._cut: CutMode | None = None
        self._closed = False
        self.accepted = 0
        self.port = port
        self._listen()

    @property
    def address(self) -> str:
        """``127.0.0.1:<port>``: what to give the proxied client instead of the target's address."""
        return f"127.0.0.1:{self.port}"

    @property
    def is_cut(self) -> bool:
        return self._cut is not None

    def _listen(self) -> None:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._spawn(self._accept_loop, listener)

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def _accept_loop(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # the listener was closed (cut with "refuse", or close)
            with self._lock:
                self.accepted += 1
                self._conns.add(client)
                blackholed = self._cut == "blackhole"
            if blackholed:
                continue  # keep it open and never answer; cut/heal/close closes it
            try:
                upstream = socket.create_connection(self.target, timeout=2.0)
                upstream.settimeout(None)
            except OSError:
                self._drop(client)
                continue
            with self._lock:
                if self._cut is not None or self._closed:
                    upstream.close()
                    continue
                self._conns.add(upstream)
            self._spawn(self._pump, client, upstream)
            self._spawn(self._pump, upstream, client)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(_BUFFER)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        self._drop(source)
        self._drop(sink)

    def _drop(self, conn: socket.socket) -> None:
        with self._lock:
            self._conns.discard(conn)
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            conn.close()

    def _drop_all(self) -> None:
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            self._drop(conn)

    def cut(self, mode: CutMode = "refuse") -> None:
        """Drop every connection; then refuse (ECONNREFUSED) or swallow (``blackhole``) new ones until :meth:`heal`."""
        with self._lock:
            self._cut = mode
            listener = self._listener if mode == "refuse" else None
            if listener is not None:
                self._listener = None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        self._drop_all()

    def heal(self) -> None:
        """Forward again, on the same port (connections swallowed by a blackhole are dropped, so clients retry)."""
        with self._lock:
            was = self._cut
            self._cut = None
        self._drop_all()
        if was == "refuse" and not self._closed:
            self._listen()

    def close(self) -> None:
        """Stop listening, drop everything and join the threads."""
        with self._lock:
            self._closed = True
            listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        self._drop_all()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(5.0)

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
