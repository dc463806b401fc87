"""A standalone ZooKeeper server for the failover tests, the cluster demo and the replication benchmark.

Issue 17 uses the real engine (Debian's ``zookeeper`` package, installed by ``scripts/setup``) rather than a fake:
the sessions, ephemeral znodes and conditional writes the failover relies on are ZooKeeper's own. A server runs as a
``java … ZooKeeperServerMain zoo.cfg`` process in its own session (so a test's SIGINT does not reach it), on a free
loopback port, with a temporary data directory and ``tickTime=200`` so that session timeouts down to 400 ms are
allowed (ZooKeeper clamps a client's timeout to [2, 20] ticks unless min/maxSessionTimeout say otherwise).

:meth:`ZooKeeperServer.kill` then :meth:`ZooKeeperServer.start` restarts it on the same port and data directory, as
the "ZooKeeper killed and restarted" scenario needs: sessions survive a restart that is shorter than their timeout,
because the server reloads them from its snapshot and transaction log.

:func:`zkcli` runs ZooKeeper's own command line client (the package's ``zkCli.sh``), as an operator would, for the
tests that check what a client without logfs's credential may do (docs/replication.md, "Securing ZooKeeper and
followers").

Also runnable by hand: ``python tests/helpers/zkserver.py DIR [PORT]`` starts a server in DIR, prints its connect string
and runs until SIGTERM or SIGINT (scripts/cluster-demo and the benchmark import the module instead).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

#: Debian's jar; its manifest's Class-Path names every dependency under /usr/share/java.
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
#: The same package's command line client (``org.apache.zookeeper.ZooKeeperMain`` on that jar).
ZKCLI = Path("/usr/share/zookeeper/bin/zkCli.sh")
ZKCLI_TIMEOUT_S = 60.0
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
#: A small heap and the client JIT: the server holds a few hundred znodes, and a fast start keeps tests short.
JVM_OPTIONS = ("-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true")


class ZooKeeperError(RuntimeError):
    """The server could not be started (no Java, no jar, or it did not answer ``ruok`` in time)."""


def free_port() -> int:
    """A loopback TCP port nobody listens on now (the kernel's pick; a race with another process is unlikely)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def four_letter(port: int, command: str, timeout_s: float = 1.0) -> str | None:
    """Send a four-letter word (``ruok``, ``srvr``, ``mntr``, ``cons``) and return the answer; None when unreachable."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            s.sendall(command.encode())
            chunks = []
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return None


def available() -> str | None:
    """Why a server cannot start here (None when it can): the tests skip with this reason instead of failing."""
    if shutil.which("java") is None:
        return "no java on PATH (scripts/setup installs one)"
    if not ZOOKEEPER_JAR.exists():
        return f"{ZOOKEEPER_JAR} missing: install Debian's zookeeper package (scripts/setup does)"
    return None


def zkcli(connect: str, *command: str) -> subprocess.CompletedProcess[str]:
    """``zkCli.sh -server CONNECT COMMAND…``: one command of ZooKeeper's own client, unauthenticated (as anyone who
    can reach the port); its exit code (1 when the command failed), stdout and stderr (where it says why, e.g.
    ``Insufficient permission : PATH``)."""
    if not ZKCLI.exists():
        raise ZooKeeperError(f"{ZKCLI} missing: install Debian's zookeeper package (scripts/setup does)")
    env = {**os.environ, "CLIENT_JVMFLAGS": " ".join(JVM_OPTIONS)}  # the server's fast-start options (above)
    return subprocess.run([str(ZKCLI), "-server", connect, *command], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=env, timeout=ZKCLI_TIMEOUT_S, check=False)  # fmt: skip


class ZooKeeperServer:
    """One standalone ZooKeeper server process; start, kill -9, stop and restart it on the same port and data."""

    def __init__(
        self,
        directory: Path,
        *,
        port: int | None = None,
        tick_ms: int = 200,
        min_session_ms: int = 400,
        max_session_ms: int = 60_000,
    ) -> None:
        self.directory = directory
        self.data_dir = directory / "data"
        self.config_path = directory / "zoo.cfg"
        self.log_path = directory / "zookeeper.log"
        self.port = port if port is not None else free_port()
        self.tick_ms = tick_ms
        self.min_session_ms = min_session_ms
        self.max_session_ms = max_session_ms
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def connect(self) -> str:
        """The ``zookeeper.connect`` value of this server (append a chroot as ``/name`` if wanted)."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={self.tick_ms}",
            f"minSessionTimeout={self.min_session_ms}",
            f"maxSessionTimeout={self.max_session_ms}",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1",
            "maxClientCnxns=0",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons,dump",
            "admin.enableServer=false",
            # A killed server keeps its writes in the page cache; fsync per transaction would only slow the tests.
            "forceSync=no",
            "preAllocSize=1024",
            "autopurge.purgeInterval=0",
        ]
        self.config_path.write_text("\n".join(lines) + "\n")

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the server (again: same port, same data) and wait until it answers ``ruok`` with ``imok``."""
        if self.running():
            return
        reason = available()
        if reason is not None:
            raise ZooKeeperError(reason)
        self._write_config()
        java = shutil.which("java")
        assert java is not None
        cmd = [java, *JVM_OPTIONS, "-cp", str(ZOOKEEPER_JAR), MAIN_CLASS, str(self.config_path)]
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts + 1} on port {self.port}: {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.starts += 1
        deadline = time.monotonic() + timeout_s
        while True:
            if four_letter(self.port, "ruok", 0.5) == "imok":
                # imok only says the JVM listens; srvr answers once the server has loaded its data and serves.
                answer = four_letter(self.port, "srvr", 0.5)
                if answer is not None and "Mode:" in answer:
                    return
            if self.proc.poll() is not None:
                raise ZooKeeperError(
                    f"ZooKeeper exited {self.proc.returncode} while starting:\n{self.log_text()[-4000:]}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise ZooKeeperError(
                    f"ZooKeeper did not answer on port {self.port} in {timeout_s} s:\n{self.log_text()[-4000:]}"
                )
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL, as a crash; the data directory stays for a restart."""
        self._signal_and_wait(signal.SIGKILL)

    def stop(self) -> None:
        """SIGTERM (then SIGKILL if it hangs); safe to call when not running."""
        self._signal_and_wait(signal.SIGTERM)

    def restart(self, down_s: float = 0.0) -> None:
        """kill -9, stay down ``down_s`` seconds, start again on the same port and data directory."""
        self.kill()
        if down_s > 0:
            time.sleep(down_s)
        self.start()

    def _signal_and_wait(self, sig: int) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT_S)
        self.proc = None
        # The port is free again once the kernel closed the listening socket: wait so that a restart can bind it.
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while four_letter(self.port, "ruok", 0.2) is not None and time.monotonic() < deadline:
            time.sleep(0.05)

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main(argv: list[str]) -> int:
    """``python tests/helpers/zkserver.py DIR [PORT]``: run a server until SIGINT/SIGTERM; prints its connect string."""
    if not argv or len(argv) > 2:
        print("usage: python tests/helpers/zkserver.py DIR [PORT]", file=sys.stderr)
        return 2
    server = ZooKeeperServer(Path(argv[0]).absolute(), port=int(argv[1]) if len(argv) > 1 else None)
    server.start()
    print(server.connect, flush=True)
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        while not stop and server.running():
            time.sleep(0.2)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
