"""``logfs mount``: serve a store under a mount point until SIGINT, SIGTERM or an unmount, then shut down cleanly.

Order of events (docs/mount.md, "Lifecycle"):

1. Check the mount point, before the store is touched, so that a mount that cannot proceed (a live mount there, a
   missing directory, a file) leaves no store directory behind: clear a stale mount left by a process that died
   (``stat`` answers ENOTCONN, "Transport endpoint is not connected") with ``fusermount3 -u -z`` and a warning in
   the log; refuse anything else that is not an unmounted directory (MountError).
2. Open the store (created if missing; its exclusive lock: StoreLocked when another process owns it; recovery after
   a crash), and start a new leader epoch (``core/replication/promotion.py``: PromotionRefused for a store that was
   out of the ISR, unless ``--unclean``).
3. ``pyfuse3.init`` with ``fsname=logfs``, ``subtype=logfs`` and ``noatime``. Not ``default_permissions`` unless the
   mount is shared (``--allow-other``: ``allow_other`` and ``default_permissions``, mount/access.py): root bypasses
   the kernel's mode checks anyway, so logfs refuses wrong open modes itself. Never the writeback cache
   (``Operations.enable_writeback_cache`` is False): the kernel would merge writes and re-send pages, and an
   append-only file would store them twice. A follower's mount (``logfs follow --mount``, which runs
   :func:`run_mount` with the follower as a background task) is mounted ``ro`` as well.
4. In one trio nursery: ``pyfuse3.main`` with ``max_tasks`` raised for ``max.follow.readers`` waiting readers; a
   signal receiver that turns SIGINT/SIGTERM into ``pyfuse3.terminate()`` (after waking every waiting follow reader,
   which would otherwise hold the main loop open); ``Store.tick`` in a worker thread every second (retention,
   deferred deletes, flush.ms, checkpoints); and the watcher that interrupts blocked follow readers whose process
   has a signal pending (``Operations.watch_signals``); with followers, the ISR shrink timer
   (``Operations.watch_replicas``). The soft descriptor limit is raised to the hard one first.
   A watcher reads ``/proc/self/mountinfo`` every :data:`UNMOUNT_CHECK_S`: once the mount point has left it while
   the session lives on (``logfs umount --lazy`` / ``fusermount3 -u -z`` with files still open), it shuts down as
   SIGTERM does: waiting ``follow/`` readers get EOF (and so does every later ``follow/`` read), their processes
   close their files, and the last close ends the session; a file still open :data:`LAZY_GRACE_S` later does not
   keep the process alive (the session is ended, and that file answers ENOTCONN).
5. Whatever happens, in ``finally``: release every open view, ``pyfuse3.close(unmount=True)``, then
   ``Store.close()`` (flush, checkpoints, the clean-shutdown marker).

Exit codes: :func:`serve` returns 0 after a clean shutdown, 1 when the mount could not be made or the main loop
failed; the CLI maps a bad config to 2 and StoreLocked / an unclearable stale mount to 1.

Threads: the main thread runs :func:`serve`; trio's worker threads run the blocking work.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import resource
import signal
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import pyfuse3
import trio

from logfs.core.collector import freeze_loaded
from logfs.core.errors import StorageError
from logfs.core.replication.promotion import start_leader_epoch
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig
from logfs.mount.cleaning import CleanerTask
from logfs.mount.fusermount import unmount
from logfs.mount.operations import Operations
from logfs.mount.predecessor import stuck_predecessor_message

_log = logging.getLogger(__name__)

TICK_INTERVAL_S = 1.0
UNMOUNT_CHECK_S = 0.5  # how often the mount looks for its own (lazy) unmount in /proc/self/mountinfo
LAZY_GRACE_S = 10.0  # how long open files may keep a lazily unmounted session up once its follow/ readers ended
MOUNT_OPTIONS = frozenset({"fsname=logfs", "subtype=logfs", "noatime"})


class MountError(StorageError):
    """The mount point cannot be used: missing, a live mount, or a stale mount that would not clear."""


FUSE_CONF = Path("/etc/fuse.conf")


CAP_SYS_ADMIN = 21  # its bit in /proc/self/status's CapEff: mount(2) itself, without fusermount3


def allow_other_refusal(euid: int, fuse_conf: str | None, *, cap_sys_admin: bool = False) -> str | None:
    """Why a process of ``euid`` cannot mount with ``allow_other`` given ``fuse_conf`` (the text of /etc/fuse.conf,
    None: no such file), or None when it can: root, or a process that may mount(2) itself, always; another user only
    with a ``user_allow_other`` line, as fusermount3 reads the file (comments from ``#``, blanks around, and only
    lines that end in a newline), which refuses the mount otherwise, after the store would have been opened."""
    if euid == 0 or cap_sys_admin:
        return None
    lines = [line.split("#", 1)[0].strip() for line in (fuse_conf or "").split("\n")[:-1]]
    if "user_allow_other" in lines:
        return None
    return (f"--allow-other (mount.allow.other): a user other than root needs user_allow_other in {FUSE_CONF}; "
            "root adds it with: bash scripts/setup --user-allow-other")  # fmt: skip


def check_allow_other(config: StoreConfig) -> None:
    """MountError when ``config`` shares the mount and this user may not (:func:`allow_other_refusal`): at the start,
    before the store is opened or created."""
    if not config.mount_allow_other:
        return
    try:
        text: str | None = FUSE_CONF.read_text(errors="replace")
    except PermissionError:
        return  # a file kept from this user (0640 root:fuse): setuid fusermount3 reads it and decides
    except OSError:
        text = None
    refusal = allow_other_refusal(os.geteuid(), text, cap_sys_admin=_has_cap_sys_admin())
    if refusal is not None:
        raise MountError(refusal)


def _has_cap_sys_admin() -> bool:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_SYS_ADMIN & 1)
    except (OSError, ValueError):
        pass
    return False


def clear_stale_mount(mountpoint: Path, store: Path | None = None) -> None:
    """Unmount a dead FUSE mount at ``mountpoint`` (lazily); MountError when that fails or it is a live mount, and
    first (from /proc, before a stat that could hang) when ``store``'s last owner was killed but cannot exit, with
    what to do (mount/predecessor.py)."""
    stuck = None if store is None else stuck_predecessor_message(store, mountpoint)
    if stuck is not None:
        raise MountError(stuck)
    try:
        os.stat(mountpoint)
    except OSError as exc:
        if exc.errno != errno.ENOTCONN:
            raise MountError(f"mount point {mountpoint}: {exc.strerror}") from None
        _log.warning("%s is a stale mount left by a logfs process that died: unmounting it", mountpoint)
        done = unmount(mountpoint, lazy=True)
        if done.returncode != 0:
            raise MountError(f"cannot clear the stale mount at {mountpoint}: {done.stderr.strip()}") from None
        os.stat(mountpoint)
        return
    if os.path.ismount(mountpoint):
        raise MountError(f"{mountpoint} is already a mount point (another logfs? `logfs umount {mountpoint}`)")
    if not mountpoint.is_dir():
        raise MountError(f"mount point {mountpoint} is not a directory")


def raise_open_file_limit() -> None:
    """Lift the soft descriptor limit to the hard one: each follow/ reader keeps its opener's /proc status open and
    each open view pins segments, so 1,000 readers exceed the usual soft limit of 1,024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def serve(store_path: Path, mountpoint: Path, config: StoreConfig, *, unclean: bool = False) -> int:
    """Mount ``store_path`` at ``mountpoint`` in the foreground as the leader of a new leader epoch; return the exit
    code. Main thread.

    Raises MountError (before the store is opened or created), StoreLocked (another process owns the store),
    ConfigError (a node.id the store refuses) and PromotionRefused (the store was out of the ISR when it last
    followed, and not ``unclean``) before anything is mounted.
    """
    raise_open_file_limit()
    check_allow_other(config)
    clear_stale_mount(mountpoint, store_path)  # first: an unusable mount point must leave no new store directory
    store = Store.open(store_path, config)
    freeze_loaded()  # a store kept for the process's life (core/collector.py)
    try:
        leader_epoch = start_leader_epoch(store, unclean=unclean)
        return trio.run(_run, store, mountpoint, leader_epoch)
    finally:
        store.close()
        _log.info("closed store %s", store_path)


async def _run(store: Store, mountpoint: Path, leader_epoch: int) -> int:
    ops = Operations(store, leader_epoch=leader_epoch)
    background = [*standard_tasks(ops, store), ops.watch_replicas, ops.watch_transactions]
    return await run_mount(ops, mountpoint, background)


def standard_tasks(ops: Operations, store: Store) -> list[Callable[[], Awaitable[None]]]:
    """What every ``logfs mount`` runs beside the main loop (a ZooKeeper node too, ``logfs/cluster/serve.py``):
    SIGINT/SIGTERM → a clean shutdown, the store's periodic work, and the log cleaner (``mount/cleaning.py``:
    one per store, whatever role the node plays, as every Kafka broker cleans its own replicas)."""
    cleaner = CleanerTask(store)
    ops.reader.status.cleaner = cleaner
    return [functools.partial(_on_signals, ops), functools.partial(_tick, store), cleaner.run]


class _GoneRequestReplies(logging.Filter):
    """pyfuse3 logs at ERROR a reply that the kernel refused with ENOENT. The kernel no longer held that request:
    its caller was killed while it waited, or a lazily unmounted mount's last files were closed while the kernel tore
    the connection down (seen as ``fuse_release(): fuse_reply_* failed with No such file or directory`` in a lazy
    unmount test). Nobody waits for such a reply, so nothing is lost; the line goes to DEBUG."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and record.getMessage().endswith(GONE_REQUEST):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


GONE_REQUEST = "fuse_reply_* failed with No such file or directory"  # pyfuse3's words, strerror(ENOENT)
_GONE_REQUEST_REPLIES = _GoneRequestReplies()


async def run_mount(ops: Operations, mountpoint: Path, background: Sequence[Callable[[], Awaitable[None]]] = ()) -> int:
    """Mount ``ops`` at ``mountpoint`` and serve until the main loop ends (an unmount, or :func:`stop_mount`); the
    exit code (0, or 1 when the main loop failed). ``background`` tasks run in the same nursery beside the main loop
    and the signal watcher, and are cancelled when it ends. Whatever happens, every view is released and the mount
    point unmounted before this returns. A read-only ``ops`` (a follower's) is mounted ``ro``. Trio thread."""
    # ro for a follower's mount; never with ZooKeeper (logfs/cluster/), where the node may come to lead in place
    read_only = ops.read_only and not ops.store.config.zookeeper_connect
    options = set(MOUNT_OPTIONS | ({"ro"} if read_only else set()))
    if ops.permissions.shared:  # other users, and the kernel checking each node's owner and mode (mount/access.py)
        options |= {"allow_other", "default_permissions"}
    where = os.path.realpath(mountpoint)  # before mounting: after it, resolving it would ask this very process
    ops.reader.status.mountpoint = ops.reader.status.mountpoint or where
    pyfuse3.init(ops, str(mountpoint), options)
    logging.getLogger("pyfuse3").addFilter(_GONE_REQUEST_REPLIES)  # once: a filter object is added only once
    _log.info(
        "serving %s at %s%s (max.follow.readers=%d)",
        ops.store.path, mountpoint, " read-only" if ops.read_only else "", ops.max_follow_readers,
    )  # fmt: skip
    code = 0
    try:
        async with trio.open_nursery() as nursery:
            for task in background:
                nursery.start_soon(task)
            nursery.start_soon(ops.watch_signals)
            nursery.start_soon(ops.watch_groups)
            nursery.start_soon(_watch_unmount, ops, where)
            await pyfuse3.main(min_tasks=1, max_tasks=ops.max_tasks)
            nursery.cancel_scope.cancel()
    except BaseException as exc:  # trio wraps errors (even KeyboardInterrupt) in an ExceptionGroup
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        _log.error("the FUSE main loop failed: %r", exc, exc_info=True)
        code = 1
    finally:
        ops.close()
        pyfuse3.close(unmount=True)
        _log.info("unmounted %s", mountpoint)
    return code


async def stop_mount(ops: Operations) -> None:
    """End the main loop of :func:`run_mount` cleanly: wake every waiting follow/ reader (they answer EOF while the
    session is still up), then ``pyfuse3.terminate()``. Trio thread."""
    await ops.begin_shutdown()
    pyfuse3.terminate()


def mount_points() -> set[str]:
    """Every mount point of this process's mount namespace (``/proc/self/mountinfo``'s fifth field, its octal
    escapes undone). procfs: no disk, no FUSE request, so the trio thread may call it."""
    with open("/proc/self/mountinfo", "rb") as f:
        lines = f.read().splitlines()
    return {_unescape(line.split(b" ")[4]) for line in lines if line.count(b" ") >= 4}


def _unescape(field: bytes) -> str:
    r"""``/a\040b`` → ``/a b``: mountinfo writes space, tab, newline and backslash as three octal digits."""
    out, i = bytearray(), 0
    while i < len(field):
        if field[i : i + 1] == b"\\" and field[i + 1 : i + 4].isdigit():
            out.append(int(field[i + 1 : i + 4], 8))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return os.fsdecode(bytes(out))


async def _watch_unmount(ops: Operations, where: str) -> None:
    """Shut down (as SIGTERM does) once ``where`` is no longer a mount point while the session is still up: a lazy
    unmount detached it with files open, and their readers would otherwise keep this process alive. Only after
    ``where`` was seen mounted (a path the table spells differently never stops a mount). Runs until cancelled."""
    seen = False
    while True:
        mounted = where in mount_points()
        if mounted:
            seen = True
        elif seen:
            _log.info("%s was unmounted while files were open (lazy unmount): ending their readers", where)
            await ops.begin_shutdown()  # follow/ readers answer EOF, and so does every later follow/ read
            # Their processes now close those files; the last close ends the session (the main loop returns and
            # cancels this task). A file that stays open (a writer, a shell's working directory) would keep this
            # process alive for ever: after LAZY_GRACE_S the session is ended anyway (that file then answers
            # ENOTCONN). Ending it at once would fail the readers' close(2) with ECONNABORTED.
            await trio.sleep(LAZY_GRACE_S)
            _log.warning("files under %s are still open %.0f s after a lazy unmount: ending the session",
                         where, LAZY_GRACE_S)  # fmt: skip
            pyfuse3.terminate()
            return
        await trio.sleep(UNMOUNT_CHECK_S)


async def _on_signals(ops: Operations) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            _log.info("%s: shutting down", signal.Signals(signum).name)
            await stop_mount(ops)
            return


async def _tick(store: Store) -> None:
    limiter = trio.CapacityLimiter(1)
    while True:
        await trio.sleep(TICK_INTERVAL_S)
        try:
            await trio.to_thread.run_sync(store.tick, limiter=limiter)
        except Exception:
            _log.exception("periodic store work failed (retrying in %.0f s)", TICK_INTERVAL_S)
