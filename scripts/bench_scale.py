#!/usr/bin/env python3
"""Scale (issue 24): each figure at N partitions beside the same figure at 10 partitions, taken in the same run.

    .venv/bin/python scripts/bench_scale.py [--partitions 10000] [--readers 2000] [--only mount,follower] [--markdown]

N is ``--partitions`` (default ``LOGFS_SCALE_PARTITIONS`` or 10,000: 2,000 topics × 5 partitions); the baseline is
``--baseline`` partitions (10: 2 topics × 5), built and measured the same way in the same run. Every row is: the
figure, its value at N, its value at the baseline, issue 24's target, and whether the target is met. Sections
(``--only`` takes a comma-separated list of them; all by default):

* **store**: both stores are built before anything is mounted, with the core API (``Store.create_topics`` of every
  topic at once, one record appended to each partition): its time is the first row. Every other section but readers and
  zk mounts these stores (with ``node.id=1``).
* **mount**: one real ``logfs mount`` per size. Per-operation medians, on the same ten partitions' names (spread over
  the store) at both sizes: a lookup (``stat(2)`` of a partition directory relative to an open descriptor of its
  topic, each name left alone for longer than the kernel's entry timeout, so the mount answers every one); a
  ``stat(2)`` of one partition's ``state`` (its size is rendered for each); an open + write of one line + close of
  ``append``. Then ``ls -R`` of the whole mount; the mount's RSS and open descriptors after it; the mount's CPU over
  ``--idle-seconds`` with nothing asked; the unmount (``fusermount3 -u``, as ``logfs umount`` does, until the
  process has shut down cleanly and exited); a clean remount (``logfs mount`` until a lookup answers); a remount
  after ``kill -9`` of the mount (the stale mount point cleared with ``fusermount3 -u -z``, then ``logfs mount``
  until a lookup answers); ``logfs check`` of the store, unmounted.
* **readers**: ``--readers`` ``cat follow/latest`` of one partition started at once on a fresh mount, against 10
  (``scripts/bench_followers.py``'s procedure and functions): all open, the mount's CPU while they wait, one record
  to every reader.
* **follower**: the store mounted as a leader (``replica.ids=1,2``) and ``logfs follow`` of it into a fresh store:
  the time until every partition has HW = LEO with the follower in its ISR and at the leader's LEO (the leader's
  ``state`` files, or its ``.logfs/partitions`` listing where it has one), the follower's threads and open
  descriptors (the most seen while it caught up) and its peak RSS; then acks=all appends (write(2) + fsync(2)) to
  one partition beside the N−1 idle ones (``--latency`` of them, or as many as ``--latency-timeout`` allows): p50
  and p99.
* **zk**: a three-node cluster with ZooKeeper (tests/helpers/zkserver.py, tests/cluster/zkcluster.py), the topics made
  by ``mkdir`` on the leader's mount, every partition's ISR full; the leader killed (SIGKILL): the time until an
  acks=all append to the new leader returns, against the session timeout + 5 s.
* **spark**: the ``logfs`` source's planning of a batch query with ``subscribePattern`` over every topic (the
  partitions it reads: ``df.rdd.getNumPartitions()``), best of three after a warm-up.

Every process is real and separate, and stopped in ``finally`` (mounts unmounted, or killed and cleared); a section
that fails prints one row saying why and the others still run (the exit status is then 1). The figures depend on
the machine: run it on an idle one (``scripts/bench_runs.py`` runs it three times and merges the tables).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchutil import LOGFS, print_rows  # scripts/ is sys.path[0]

SECTIONS = ("store", "mount", "readers", "follower", "zk", "spark")
PER_TOPIC = 5  # issue 24's shape: 2,000 topics × 5 partitions
ENTRY_TIMEOUT_S = 1.0  # the kernel keeps a partition directory's entry this long (docs/mount.md): a lookup is
LOOKUP_GAP_S = ENTRY_TIMEOUT_S + 0.2  # only sent to the mount once it has expired
SAMPLED = 10  # the partitions the per-operation rows use, at both sizes
START_TIMEOUT_S = 120.0


# --- rows ------------------------------------------------------------------------------------------------------------


@dataclass
class Row:
    """One figure: its value at N, at the baseline, the target and whether N meets it."""

    figure: str
    at_n: str
    at_base: str
    target: str
    met: str

    def cells(self) -> list[str]:
        return [self.figure, self.at_n, self.at_base, self.target, self.met]


def yes(ok: bool) -> str:
    return "yes" if ok else "no"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.2f} ms"


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs"


def secs(seconds: float) -> str:
    return f"{seconds:,.2f} s"


def ratio_row(figure: str, at_n: float, at_base: float, fmt: Callable[[float], str], factor: float = 2.0) -> Row:
    """A per-operation row whose target is ``factor`` times the baseline's figure."""
    return Row(figure, fmt(at_n), fmt(at_base), f"≤ {factor:g}× the baseline", yes(at_n <= factor * at_base))


def bound_row(figure: str, at_n: float | None, at_base: float | None, fmt: Callable[[float], str], limit: float,
              target: str) -> Row:  # fmt: skip
    """A row whose target is an absolute bound (None: not reached, e.g. a timeout)."""
    shown_n = "not reached" if at_n is None else fmt(at_n)
    shown_base = "not reached" if at_base is None else fmt(at_base)
    return Row(figure, shown_n, shown_base, target, yes(at_n is not None and at_n <= limit))


# --- processes -------------------------------------------------------------------------------------------------------


def proc_status(pid: int, key: str) -> int:
    """A ``kB`` (or count) field of /proc/<pid>/status, e.g. VmRSS, VmHWM, Threads; 0 when the process is gone."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def fd_hard_limit(pid: int) -> int:
    """The process's hard limit of open descriptors (/proc/<pid>/limits; 0 when unknown)."""
    with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[4])
    return 0


def threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def cpu_seconds(pid: int) -> float:
    """CPU time of the process and of the children it waited for (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def idle_cpu(pid: int, seconds: float) -> float:
    """The share of one core ``pid`` used over ``seconds`` of nothing asked of it."""
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)


def mount_points() -> list[str]:
    """Every mount point, from /proc/self/mountinfo (never a stat(2): one of a dead FUSE mount fails with ENOTCONN,
    and os.path.ismount says False then)."""
    with open("/proc/self/mountinfo") as info:
        return [line.split()[4].replace("\\040", " ") for line in info]


def clear_mount(mnt: Path) -> None:
    """``fusermount3 -u -z`` of a mount point a dead process left."""
    if str(mnt) in mount_points():
        subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True, check=False)


def clear_mounts_under(work: Path) -> None:
    """Detach whatever is still mounted under ``work`` before it is deleted: a removal that went into a live mount
    would delete topics through it."""
    for point in mount_points():
        if point.startswith(str(work) + "/"):
            subprocess.run(["fusermount3", "-u", "-z", point], capture_output=True, check=False)


@dataclass
class Mounted:
    """A running ``logfs mount`` (its stderr in ``log``)."""

    store: Path
    path: Path
    config: tuple[str, ...]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        clear_mount(self.path)
        self.path.mkdir(parents=True, exist_ok=True)
        args = [LOGFS, "mount", str(self.store), str(self.path)]
        for pair in self.config:
            args += ["--config", pair]
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + timeout_s
        while not os.path.ismount(self.path):
            if self.proc.poll() is not None:
                raise RuntimeError(f"logfs mount exited {self.proc.returncode}: {self.log_tail()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"logfs mount was not mounted within {timeout_s} s")
            time.sleep(0.01)

    def log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-600:]
        except OSError:
            return ""

    def stop(self) -> None:
        """``fusermount3 -u`` (what ``logfs umount`` runs, without starting one more Python) and wait for the mount
        to shut down cleanly and exit; SIGTERM, then SIGKILL and a lazy unmount, if it does not."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            subprocess.run(["fusermount3", "-u", str(self.path)], capture_output=True, check=False, timeout=120)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.proc = None
        clear_mount(self.path)

    def kill(self) -> None:
        """SIGKILL (a crash) and clear the stale mount point."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None
        clear_mount(self.path)


@contextlib.contextmanager
def mounted(store: Path, path: Path, *config: str) -> Iterator[Mounted]:
    m = Mounted(store, path, config, path.with_name(path.name + ".log"))
    m.start()
    try:
        yield m
    finally:
        m.stop()


def wait_for(what: str, probe: Callable[[], object], timeout_s: float, poll_s: float = 0.01) -> float:
    """Poll ``probe`` (an OSError counts as not yet) until truthy; the seconds it took. TimeoutError otherwise."""
    began = time.monotonic()
    while True:
        try:
            if probe():
                return time.monotonic() - began
        except OSError:
            pass
        if time.monotonic() - began > timeout_s:
            raise TimeoutError(f"{what}: not within {timeout_s:g} s")
        time.sleep(poll_s)


# --- the stores ------------------------------------------------------------------------------------------------------


def topic_name(i: int) -> str:
    return f"s{i:05d}"


def partitions_of(count: int) -> list[tuple[str, int]]:
    return [(topic_name(i // PER_TOPIC), i % PER_TOPIC) for i in range(count)]


def sampled(count: int) -> list[tuple[str, int]]:
    """The ``SAMPLED`` partitions the per-operation rows use: spread evenly over the store."""
    every = partitions_of(count)
    step = max(1, len(every) // SAMPLED)
    return every[::step][:SAMPLED]


def build_store(root: Path, count: int) -> float:
    """A store of ``count`` partitions (``count // 5`` topics of 5) with one record each, made with the core API
    (node.id 1, as every mount of it here); seconds. A record's HW is the LEO: no follower yet."""
    from logfs.core.configtext import parse_store_config
    from logfs.core.format.encode import encode_values
    from logfs.core.store import NewTopic, Store

    began = time.perf_counter()
    store = Store.open(root, parse_store_config(["node.id=1", f"num.partitions={PER_TOPIC}"]))
    try:
        now = time.time_ns() // 1_000_000
        store.create_topics([NewTopic(topic_name(t), PER_TOPIC) for t in range(count // PER_TOPIC)])
        for t in range(count // PER_TOPIC):
            topic = topic_name(t)
            for p in range(PER_TOPIC):
                log = store.log(topic, p)
                log.append_as_leader(encode_values([b"scale %d" % (t * PER_TOPIC + p)], now), 0)
                log.update_high_watermark(log.log_end_offset)
    finally:
        store.close()
    return time.perf_counter() - began


@dataclass
class Sizes:
    """The two sizes of a run and their stores."""

    n: int
    base: int
    work: Path
    built: dict[int, float] = field(default_factory=dict)

    def store(self, count: int) -> Path:
        path = self.work / f"store-{count}"
        if count not in self.built:
            self.built[count] = build_store(path, count)
            # the build leaves ~40,000 files' dirty pages: written back now, not by the kernel's flusher in the
            # middle of the figures that follow (its 2 cores are the mount's and the tools')
            os.sync()
        return path

    def both(self) -> tuple[int, int]:
        return self.n, self.base


# --- mount -----------------------------------------------------------------------------------------------------------


def lookup_times(mnt: Path, names: list[tuple[str, int]], samples: int) -> list[float]:
    """Seconds of ``stat(2)`` of a partition directory, relative to its topic's open descriptor (only the
    partition's name is looked up), each name looked up again only once the kernel's entry for it has expired."""
    last = dict.fromkeys(names, time.monotonic())  # each may have been looked up just before
    out: list[float] = []
    while len(out) < samples:
        for name in names:
            if len(out) >= samples:
                break
            wait = last.get(name, 0.0) + LOOKUP_GAP_S - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            topic, partition = name
            fd = os.open(mnt / topic, os.O_RDONLY | os.O_DIRECTORY)
            try:
                began = time.perf_counter()
                os.stat(str(partition), dir_fd=fd)
                out.append(time.perf_counter() - began)
            finally:
                os.close(fd)
            last[name] = time.monotonic()
    return out


def state_times(mnt: Path, name: tuple[str, int], samples: int) -> list[float]:
    path = mnt / name[0] / str(name[1]) / "state"
    os.stat(path)  # the entry, cached from here on: the samples are the getattr (the rendered size)
    out = []
    for _ in range(samples):
        began = time.perf_counter()
        os.stat(path)
        out.append(time.perf_counter() - began)
    return out


def append_times(mnt: Path, names: list[tuple[str, int]], samples: int) -> list[float]:
    paths = [mnt / t / str(p) / "append" for t, p in names]
    out = []
    for i in range(samples):
        path = paths[i % len(paths)]
        began = time.perf_counter()
        fd = os.open(path, os.O_WRONLY)
        try:
            os.write(fd, b"scale append %d\n" % i)
        finally:
            os.close(fd)
        out.append(time.perf_counter() - began)
    return out


def ls_r(mnt: Path, timeout_s: float) -> float | None:
    """Seconds of ``ls -R`` of the whole mount (None: still running after ``timeout_s``, then killed)."""
    began = time.perf_counter()
    try:
        subprocess.run(["ls", "-R", str(mnt)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=timeout_s, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - began


@dataclass
class MountFigures:
    lookup: float
    state: float
    append: float
    ls: float | None
    rss_mb: float
    fds: int
    fd_limit: int
    idle: float
    remount: float
    unmount: float
    crash_remount: float | None
    check: float | None
    check_rc: int


def measure_mount(work: Path, store: Path, count: int, args: argparse.Namespace) -> MountFigures:
    names = sampled(count)
    mnt = work / f"mnt-{count}"
    m = Mounted(store, mnt, ("node.id=1",), work / f"mnt-{count}.log")
    m.start()
    try:
        topic, partition = names[0]
        first = mnt / topic / str(partition)
        for t, p in names:  # warm-up: the first open of a partition's files is not the figure
            append_times(mnt, [(t, p)], 1)
        lookup = statistics.median(lookup_times(mnt, names, args.lookups))
        state = statistics.median(state_times(mnt, names[0], args.ops))
        append = statistics.median(append_times(mnt, names, args.ops))
        listing = ls_r(mnt, args.ls_timeout)
        rss_mb = proc_status(m.pid, "VmRSS") / 1024
        fds, fd_limit = open_fds(m.pid), fd_hard_limit(m.pid)
        idle = idle_cpu(m.pid, args.idle_seconds)
        began = time.perf_counter()
        m.stop()
        unmounted = time.perf_counter() - began
        began = time.perf_counter()
        m.start()
        wait_for("a lookup after the remount", first.is_dir, 120)
        remount = time.perf_counter() - began
        append_times(mnt, names, len(names))  # records the crash leaves unflushed
        killed = time.perf_counter()
        m.kill()
        m.start()
        crash: float | None = None
        with contextlib.suppress(TimeoutError):
            wait_for("a lookup after kill -9", first.is_dir, 120)
            crash = time.perf_counter() - killed
    finally:
        m.stop()
    began = time.perf_counter()
    try:
        done = subprocess.run([LOGFS, "check", str(store)], capture_output=True, timeout=args.check_timeout,
                              check=False)  # fmt: skip
        check: float | None = time.perf_counter() - began
        check_rc = done.returncode
    except subprocess.TimeoutExpired:
        check, check_rc = None, -1
    return MountFigures(
        lookup, state, append, listing, rss_mb, fds, fd_limit, idle, remount, unmounted, crash, check, check_rc
    )


def section_mount(sizes: Sizes, args: argparse.Namespace) -> list[Row]:
    n, b = (measure_mount(sizes.work, sizes.store(c), c, args) for c in sizes.both())
    return [
        ratio_row("lookup: stat(2) of a partition directory (median)", n.lookup, b.lookup, us),
        ratio_row("stat(2) of `state` (median)", n.state, b.state, us),
        ratio_row("open + write + close of `append` (median)", n.append, b.append, us),
        bound_row("`ls -R` of the whole mount", n.ls, b.ls, secs, 30, "≤ 30 s"),
        bound_row("mount's RSS after `ls -R`", n.rss_mb, b.rss_mb, lambda v: f"{v:,.0f} MB", 500, "≤ 500 MB"),
        bound_row(
            "mount's open descriptors after `ls -R`",
            n.fds,
            b.fds,
            lambda v: f"{v:,.0f}",
            n.fd_limit - 1,
            f"< {n.fd_limit:,} (its hard limit)",
        ),
        bound_row(
            f"mount's CPU, idle {args.idle_seconds:g} s (one core)", n.idle, b.idle, lambda v: f"{v:.1%}", 0.05, "≤ 5 %"
        ),
        bound_row("clean remount: `logfs mount` → a lookup answers", n.remount, b.remount, secs, 5, "≤ 5 s"),
        Row(
            "unmount: `fusermount3 -u` → the mount process exits (clean shutdown)",
            secs(n.unmount),
            secs(b.unmount),
            "",
            "",
        ),
        bound_row("remount after kill -9 → a lookup answers", n.crash_remount, b.crash_remount, secs, 20, "≤ 20 s"),
        Row(
            "`logfs check` of the store",
            f"{n.check:,.2f} s (exit {n.check_rc})" if n.check is not None else "not done",
            f"{b.check:,.2f} s (exit {b.check_rc})" if b.check is not None else "not done",
            "≤ 60 s",
            yes(n.check is not None and n.check <= 60 and n.check_rc == 0),
        ),
    ]


# --- readers ---------------------------------------------------------------------------------------------------------


@dataclass
class ReaderFigures:
    open_s: float
    idle: float
    fanout_s: float


def measure_readers(work: Path, count: int, idle_s: float) -> ReaderFigures:
    """``scripts/bench_followers.py``'s procedure, with its functions: ``count`` readers of one partition's
    ``follow/latest`` started at once on a fresh mount."""
    from bench_followers import readers_open, start_cats, stop

    readers: list[subprocess.Popen[bytes]] = []
    with mounted(work / f"readers-store-{count}", work / f"readers-mnt-{count}",
                 f"max.follow.readers={count + 100}") as m:  # fmt: skip
        try:
            os.mkdir(m.path / "t")
            began = time.monotonic()
            readers = start_cats(str(m.path / "t" / "0" / "follow" / "latest"), count)
            wait_for(f"{count} readers open", lambda: readers_open(m.path) >= count, 120)
            open_s = time.monotonic() - began
            time.sleep(0.5)
            idle = idle_cpu(m.pid, idle_s)
            pending = {p.stdout.fileno(): p for p in readers if p.stdout is not None}
            poller = select.poll()
            for fd in pending:
                poller.register(fd, select.POLLIN)
            began = time.monotonic()
            with open(m.path / "t" / "0" / "append", "w") as f:
                f.write("hello\n")
            while pending and time.monotonic() - began < 60:
                for fd, _ in poller.poll(1000):
                    if os.read(fd, 64):
                        poller.unregister(fd)
                        del pending[fd]
            if pending:
                raise TimeoutError(f"{len(pending)} of {count} readers did not get the record within 60 s")
            fanout = time.monotonic() - began
        finally:
            stop(readers)
    return ReaderFigures(open_s, idle, fanout)


def section_readers(sizes: Sizes, args: argparse.Namespace) -> list[Row]:
    n = measure_readers(sizes.work, args.readers, args.idle_seconds)
    b = measure_readers(sizes.work, args.base_readers, args.idle_seconds)
    what = f"{args.readers:,} `follow/` readers (baseline {args.base_readers:,})"
    return [
        bound_row(f"{what}: all open", n.open_s, b.open_s, secs, 10, "≤ 10 s"),
        bound_row(
            f"{what}: mount's CPU while they wait (one core)", n.idle, b.idle, lambda v: f"{v:.1%}", 0.10, "≤ 10 %"
        ),
        bound_row(f"{what}: one record → every reader", n.fanout_s, b.fanout_s, secs, 3, "≤ 3 s"),
    ]


# --- follower --------------------------------------------------------------------------------------------------------


def state_of(mnt: Path, topic: str, partition: int) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((mnt / topic / str(partition) / "state").read_bytes())
    return result


def listing(mnt: Path) -> dict[tuple[str, int], dict[str, Any]] | None:
    """The leader's ``.logfs/partitions`` (one JSON object per partition) by partition; None where it has none."""
    try:
        text = (mnt / ".logfs" / "partitions").read_text()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        if line.strip():
            obj = json.loads(line)
            out[(str(obj["topic"]), int(obj["partition"]))] = obj
    return out


def caught_up(obj: dict[str, Any], replica: int) -> bool | None:
    """Whether a partition's line (a ``state`` file, or a listing's line) says HW = LEO with ``replica`` in the ISR
    and at the leader's LEO; None when the line does not say (a listing without the ISR)."""
    hw, leo = obj.get("high_watermark"), obj.get("log_end_offset")
    if hw is None or leo is None or hw != leo:
        return False
    if "isr" not in obj:
        return None
    if replica not in obj["isr"]:
        return False
    replicas = obj.get("replicas")
    if isinstance(replicas, dict) and str(replica) in replicas:
        return bool(replicas[str(replica)].get("log_end_offset") == leo)
    return True


def wait_caught_up(mnt: Path, count: int, replica: int, timeout_s: float, on_poll: Callable[[], None]) -> float:
    """Seconds until every partition is caught up (see :func:`caught_up`): only the partitions not yet seen so are
    read again, from the listing where there is one (its lines without the ISR settled by the ``state`` file)."""
    began = time.monotonic()
    pending = set(partitions_of(count))
    while pending:
        on_poll()
        if time.monotonic() - began > timeout_s:
            raise TimeoutError(f"{len(pending)} of {count} partitions not caught up within {timeout_s:g} s")
        listed = listing(mnt)
        for i, tp in enumerate(sorted(pending)):
            verdict = caught_up(listed[tp], replica) if listed is not None and tp in listed else None
            if verdict is None:
                with contextlib.suppress(OSError, ValueError):
                    verdict = caught_up(state_of(mnt, *tp), replica)
            if verdict:
                pending.discard(tp)
            if i % 200 == 199:  # a round over many partitions is long: sample the follower within it too
                on_poll()
        if pending:
            time.sleep(0.1)
    return time.monotonic() - began


def acks_all(mnt: Path, name: tuple[str, int], samples: int, timeout_s: float) -> list[float]:
    """Seconds of each write(2) + fsync(2) of one line to ``append`` (acks=all: on every ISR replica): ``samples``
    of them, or as many as ``timeout_s`` allows (a follower that serves a busy partition late makes each slow)."""
    fd = os.open(mnt / name[0] / str(name[1]) / "append", os.O_WRONLY)
    out: list[float] = []
    deadline = time.monotonic() + timeout_s
    try:
        for i in range(samples):
            if out and time.monotonic() > deadline:
                break
            began = time.perf_counter()
            os.write(fd, b"acks all %d\n" % i)
            os.fsync(fd)
            out.append(time.perf_counter() - began)
    finally:
        os.close(fd)
    return out


@dataclass
class FollowerFigures:
    catch_up: float | None
    threads: int
    fds: int
    fd_limit: int
    rss_peak_mb: float
    p50: float
    p99: float
    samples: int


def measure_follower(work: Path, store: Path, count: int, args: argparse.Namespace) -> FollowerFigures:
    lmnt = work / f"leader-{count}"
    fstore = work / f"follower-store-{count}"
    shutil.rmtree(fstore, ignore_errors=True)
    most_threads = most_fds = fd_limit = 0
    with mounted(store, lmnt, "node.id=1", "replica.ids=1,2") as leader:
        log = work / f"follower-{count}.log"
        with open(log, "ab") as err:
            follower = subprocess.Popen(
                [LOGFS, "follow", str(leader.path), str(fstore), "--replica-id", "2"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            )  # fmt: skip
        try:

            def sample() -> None:
                nonlocal most_threads, most_fds, fd_limit
                most_threads = max(most_threads, threads(follower.pid))
                most_fds = max(most_fds, open_fds(follower.pid))
                fd_limit = fd_limit or fd_hard_limit(follower.pid)
                if follower.poll() is not None:
                    raise RuntimeError(f"logfs follow exited {follower.returncode}")

            catch_up: float | None = None
            with contextlib.suppress(TimeoutError):
                catch_up = wait_caught_up(leader.path, count, 2, args.catch_up_timeout, sample)
            sample()
            rss_peak = proc_status(follower.pid, "VmHWM") / 1024
            latencies = sorted(acks_all(leader.path, sampled(count)[0], args.latency, args.latency_timeout))
        finally:
            if follower.poll() is None:
                follower.send_signal(signal.SIGTERM)
                try:
                    follower.wait(60)
                except subprocess.TimeoutExpired:
                    follower.kill()
                    follower.wait()
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return FollowerFigures(
        catch_up, most_threads, most_fds, fd_limit, rss_peak, statistics.median(latencies), p99, len(latencies)
    )


def section_follower(sizes: Sizes, args: argparse.Namespace) -> list[Row]:
    n, b = (measure_follower(sizes.work, sizes.store(c), c, args) for c in sizes.both())
    return [
        bound_row(
            "follower: start → caught up (HW = LEO, in the ISR, everywhere)", n.catch_up, b.catch_up, secs, 60, "≤ 60 s"
        ),
        bound_row(
            "follower: threads (most seen while catching up)", n.threads, b.threads, lambda v: f"{v:,.0f}", 100, "≤ 100"
        ),
        bound_row(
            "follower: open descriptors (most seen while catching up)",
            n.fds,
            b.fds,
            lambda v: f"{v:,.0f}",
            n.fd_limit - 1,
            f"< {n.fd_limit:,} (its hard limit)",
        ),
        bound_row("follower: peak RSS", n.rss_peak_mb, b.rss_peak_mb, lambda v: f"{v:,.0f} MB", 1024, "≤ 1 GB"),
        Row(
            f"acks=all append (write + fsync) to one partition beside the idle others (up to {args.latency} "
            f"samples, {args.latency_timeout:g} s)",
            f"p50 {ms(n.p50)}, p99 {ms(n.p99)} ({n.samples} samples)",
            f"p50 {ms(b.p50)}, p99 {ms(b.p99)} ({b.samples} samples)",
            "p99 ≤ 50 ms",
            yes(n.p99 <= 0.050),
        ),
    ]


# --- zk --------------------------------------------------------------------------------------------------------------


@dataclass
class ZkFigures:
    create: float
    isr: float
    failover: float | None


def measure_zk(work: Path, count: int, session_ms: int, timeout_s: float) -> ZkFigures:
    root = Path(__file__).resolve().parents[1]
    for extra in (root / "tests" / "helpers", root / "tests" / "cluster"):
        if str(extra) not in sys.path:
            sys.path.insert(0, str(extra))
    from zkcluster import Cluster, append_acked, wait_until

    cluster = Cluster(work / f"zk-{count}", 3, session_timeout_ms=session_ms, config=[f"num.partitions={PER_TOPIC}"])
    try:
        cluster.start()
        leader, info = cluster.wait_leader(60)
        began = time.monotonic()
        for t in range(count // PER_TOPIC):
            (leader.mount / topic_name(t)).mkdir()
        create = time.monotonic() - began
        pending = set(partitions_of(count))

        def full_isr() -> bool:
            for tp in sorted(pending):
                znode = cluster.partition_znode(*tp)
                if znode is not None and len(znode.get("isr", ())) == len(cluster.ids):
                    pending.discard(tp)
            return not pending

        wait_until("every partition's ISR full", full_isr, timeout_s, poll_s=0.2, logs=cluster.logs)
        isr = time.monotonic() - began
        leader, info = cluster.wait_leader(60)
        target = topic_name(0)
        killed = time.monotonic()
        leader.kill()
        failover: float | None = None
        seq = 0
        while time.monotonic() - killed < timeout_s:
            found = cluster.current_leader()
            if found is None or found[0] is leader or found[1].leader_epoch <= info.leader_epoch:
                time.sleep(0.005)
                continue
            seq += 1
            try:
                append_acked(Path(found[1].mount), target, 0, [f"failover {seq}"])
            except OSError:
                time.sleep(0.005)
                continue
            failover = time.monotonic() - killed
            break
    finally:
        cluster.close()
    return ZkFigures(create, isr, failover)


def section_zk(sizes: Sizes, args: argparse.Namespace) -> list[Row]:
    n, b = (measure_zk(sizes.work, c, args.zk_session_ms, args.zk_timeout) for c in sizes.both())
    bound = args.zk_session_ms / 1000 + 5
    return [
        Row("ZooKeeper mode: the topics made by mkdir on the leader", secs(n.create), secs(b.create), "", ""),
        Row("ZooKeeper mode: mkdir → every partition's ISR full", secs(n.isr), secs(b.isr), "", ""),
        bound_row(
            f"ZooKeeper failover: kill -9 of the leader → an acks=all append on the new one "
            f"(session {args.zk_session_ms} ms)",
            n.failover,
            b.failover,
            secs,
            bound,
            f"≤ {bound:g} s (session + 5 s)",
        ),
    ]


# --- spark -----------------------------------------------------------------------------------------------------------


def section_spark(sizes: Sizes, args: argparse.Namespace) -> list[Row]:
    from logfs.spark.source import local_session

    spark = local_session("logfs-bench-scale")
    best: dict[int, float] = {}
    try:
        for count in sizes.both():
            mnt = sizes.work / f"spark-mnt-{count}"
            with mounted(sizes.store(count), mnt, "node.id=1"):

                def plan(mnt: Path = mnt) -> int:
                    df = spark.read.format("logfs").option("subscribePattern", "s[0-9]+").load(str(mnt))
                    return int(df.rdd.getNumPartitions())

                plan()  # warm-up: the source's first use in the session
                times = []
                for _ in range(3):
                    began = time.perf_counter()
                    plan()
                    times.append(time.perf_counter() - began)
                best[count] = min(times)
    finally:
        spark.stop()
    n, b = best[sizes.n], best[sizes.base]
    return [bound_row("Spark: planning of a `subscribePattern` query over every partition (best of 3)", n, b, secs,
                      10, "≤ 10 s")]  # fmt: skip


# --- main ------------------------------------------------------------------------------------------------------------

RUNNERS: dict[str, Callable[[Sizes, argparse.Namespace], list[Row]]] = {
    "mount": section_mount,
    "readers": section_readers,
    "follower": section_follower,
    "zk": section_zk,
    "spark": section_spark,
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    env = os.environ.get
    ap.add_argument("--partitions", type=int, default=int(env("LOGFS_SCALE_PARTITIONS", "10000")),
                    help="N, a multiple of 5 (default LOGFS_SCALE_PARTITIONS or 10000)")  # fmt: skip
    ap.add_argument("--baseline", type=int, default=10, help="the baseline's partitions (default 10)")
    ap.add_argument("--readers", type=int, default=int(env("LOGFS_SCALE_READERS", "2000")),
                    help="follow/ readers (default LOGFS_SCALE_READERS or 2000)")  # fmt: skip
    ap.add_argument("--base-readers", type=int, default=10, help="the readers' baseline (default 10)")
    ap.add_argument("--only", default=",".join(SECTIONS), help=f"sections, comma-separated: {','.join(SECTIONS)}")
    ap.add_argument("--ops", type=int, default=200, help="samples of each per-operation row (default 200)")
    ap.add_argument("--lookups", type=int, default=40, help="lookup samples (each name 1.2 s apart; default 40)")
    ap.add_argument("--idle-seconds", type=float, default=20.0, help="idle CPU measured over (default 20)")
    ap.add_argument("--latency", type=int, default=200, help="acks=all samples (default 200)")
    ap.add_argument("--latency-timeout", type=float, default=60.0, help="stop the acks=all samples after (60 s)")
    ap.add_argument("--ls-timeout", type=float, default=600.0, help="give up `ls -R` after (default 600 s)")
    ap.add_argument("--check-timeout", type=float, default=600.0, help="give up `logfs check` after (600 s)")
    ap.add_argument("--catch-up-timeout", type=float, default=600.0, help="give up the follower after (600 s)")
    ap.add_argument("--zk-session-ms", type=int, default=6000, help="zookeeper.session.timeout.ms (default 6000)")
    ap.add_argument("--zk-timeout", type=float, default=600.0, help="give up a ZooKeeper wait after (600 s)")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table (default: aligned text)")
    ap.add_argument("--dir", type=Path, default=None, help="where to work (default: a temporary directory)")
    args = ap.parse_args(argv)
    unknown = set(args.only.split(",")) - set(SECTIONS)
    if unknown:
        ap.error(f"--only: no section {', '.join(sorted(unknown))} (known: {', '.join(SECTIONS)})")
    for name in ("partitions", "baseline"):
        value = getattr(args, name)
        if value < PER_TOPIC or value % PER_TOPIC:
            ap.error(f"--{name} must be a positive multiple of {PER_TOPIC}, not {value}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    chosen = [s for s in SECTIONS if s in args.only.split(",")]
    rows: list[Row] = []
    failed = False
    work = Path(tempfile.mkdtemp(prefix="bench-scale-", dir=args.dir))
    sizes = Sizes(args.partitions, args.baseline, work)
    try:
        if "store" in chosen:
            for count in sizes.both():
                sizes.store(count)
            rows.append(Row(f"build the store: {args.partitions // PER_TOPIC:,} topics × {PER_TOPIC} (baseline "
                            f"{args.baseline // PER_TOPIC} × {PER_TOPIC}), one record each, core API",
                            secs(sizes.built[sizes.n]), secs(sizes.built[sizes.base]), "", ""))  # fmt: skip
        for name in chosen:
            if name == "store":
                continue
            print(f"bench_scale: {name} …", file=sys.stderr, flush=True)
            try:
                rows += RUNNERS[name](sizes, args)
            except Exception as exc:  # one section's failure must not hide the others' figures
                failed = True
                rows.append(Row(f"{name}: failed", f"{type(exc).__name__}: {exc}"[:300].replace("|", "/"), "", "",
                                "no"))  # fmt: skip
    finally:
        clear_mounts_under(work)
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.partitions:,} partitions against {args.baseline:,}, the same run; {os.uname().nodename}, "
          f"{os.cpu_count()} CPUs shared with whatever else runs: the figures are noisy\n")  # fmt: skip
    head = ["figure", f"at {args.partitions:,} partitions", f"at {args.baseline:,} (baseline)", "target", "met"]
    print_rows(head, [r.cells() for r in rows], markdown=args.markdown, right=lambda i: i in (1, 2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
