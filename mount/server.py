"""``logfs mount``: serve a store under a mount point until SIGINT, SIGTERM or an unmount, then shut down cleanly.

Order of events (spec §6):

1. Open the store (its exclusive lock; StoreLocked when another process owns it; recovery after a crash), and start
   a new leader epoch (``core/replication/promotion.py``: PromotionRefused for a store that was out of the ISR, unless
   ``--unclean``).
2. Clear a stale mount left at the mount point by a process that died (``stat`` answers ENOTCONN, "Transport
   endpoint is not connected"): ``fusermount3 -u -z``, with a warning in the log. A live mount there is refused.
3. ``pyfuse3.init`` with ``fsname=logfs``, ``subtype=logfs`` and ``noatime``. Not ``default_permissions``: root
   bypasses the kernel's mode checks anyway, so logfs refuses wrong open modes itself. Never the writeback cache
   (``Operations.enable_writeback_cache`` is False): the kernel would merge writes and re-send pages, and an
   append-only file would store them twice. A follower's mount (``logfs follow --mount``, which runs
   :func:`run_mount` with the follower as a background task) is mounted ``ro`` as well.
4. In one trio nursery: ``pyfuse3.main`` with ``max_tasks`` raised for ``max.follow.readers`` waiting readers; a
   signal receiver that turns SIGINT/SIGTERM into ``pyfuse3.terminate()`` (after waking every waiting follow reader,
   which would otherwise hold the main loop open); ``Store.tick`` in a worker thread every second (retention,
   deferred deletes, flush.ms, checkpoints); and the watcher that interrupts blocked follow readers whose process
   has a signal pending (``Operations.watch_signals``); with followers, the ISR shrink timer
   (``Operations.watch_replicas``). The soft descriptor limit is raised to the hard one first.
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
import subprocess
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import pyfuse3
import trio

from logfs.core.config import StoreConfig
from logfs.core.errors import StorageError
from logfs.core.replication.promotion import start_leader_epoch
from logfs.core.store import Store
from logfs.mount.operations import Operations

_log = logging.getLogger(__name__)

TICK_INTERVAL_S = 1.0
MOUNT_OPTIONS = frozenset({"fsname=logfs", "subtype=logfs", "noatime"})
FUSERMOUNT = "fusermount3"


class MountError(StorageError):
    """The mount point cannot be used: missing, a live mount, or a stale mount that would not clear."""


def clear_stale_mount(mountpoint: Path) -> None:
    """Unmount a dead FUSE mount at ``mountpoint`` (lazily); MountError when that fails or it is a live mount."""
    try:
        os.stat(mountpoint)
    except OSError as exc:
        if exc.errno != errno.ENOTCONN:
            raise MountError(f"mount point {mountpoint}: {exc.strerror}") from None
        _log.warning("%s is a stale mount left by a logfs process that died: unmounting it", mountpoint)
        done = subprocess.run(
            [FUSERMOUNT, "-u", "-z", str(mountpoint)], capture_output=True, text=True, timeout=30, check=False
        )
        if done.returncode != 0:
            raise MountError(f"cannot clear the stale mount at {mountpoint}: {done.stderr.strip()}") from None
        os.stat(mountpoint)
        return
    if os.path.ismount(mountpoint):
        raise MountError(f"{mountpoint} is already a mount point (another logfs? `logfs umount {mountpoint}`)")
    if not mountpoint.is_dir():
        raise MountError(f"mount point {mountpoint} is not a directory")


def unmount(mountpoint: Path, *, lazy: bool = False) -> subprocess.CompletedProcess[str]:
    """``fusermount3 -u [-z] MOUNTPOINT`` (the daemon then sees the unmount and shuts down cleanly)."""
    args = [FUSERMOUNT, "-u", *(["-z"] if lazy else []), str(mountpoint)]
    return subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)


def raise_open_file_limit() -> None:
    """Lift the soft descriptor limit to the hard one: each follow/ reader keeps its opener's /proc status open and
    each open view pins segments, so 1,000 readers exceed the usual soft limit of 1,024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def serve(store_path: Path, mountpoint: Path, config: StoreConfig, *, unclean: bool = False) -> int:
    """Mount ``store_path`` at ``mountpoint`` in the foreground as the leader of a new leader epoch; return the exit
    code. Main thread.

    Raises StoreLocked (another process owns the store), ConfigError (a node.id the store refuses),
    PromotionRefused (the store was out of the ISR when it last followed, and not ``unclean``) and MountError before
    anything is mounted.
    """
    raise_open_file_limit()
    store = Store.open(store_path, config)
    try:
        leader_epoch = start_leader_epoch(store, unclean=unclean)
        clear_stale_mount(mountpoint)
        return trio.run(_run, store, mountpoint, leader_epoch)
    finally:
        store.close()
        _log.info("closed store %s", store_path)


async def _run(store: Store, mountpoint: Path, leader_epoch: int) -> int:
    ops = Operations(store, leader_epoch=leader_epoch)
    background: list[Callable[[], Awaitable[None]]] = [
        functools.partial(_on_signals, ops), functools.partial(_tick, store), ops.watch_replicas,
        ops.watch_transactions,
    ]  # fmt: skip
    return await run_mount(ops, mountpoint, background)


async def run_mount(ops: Operations, mountpoint: Path, background: Sequence[Callable[[], Awaitable[None]]] = ()) -> int:
    """Mount ``ops`` at ``mountpoint`` and serve until the main loop ends (an unmount, or :func:`stop_mount`); the
    exit code (0, or 1 when the main loop failed). ``background`` tasks run in the same nursery beside the main loop
    and the signal watcher, and are cancelled when it ends. Whatever happens, every view is released and the mount
    point unmounted before this returns. A read-only ``ops`` (a follower's) is mounted ``ro``. Trio thread."""
    options = set(MOUNT_OPTIONS | ({"ro"} if ops.read_only else set()))
    pyfuse3.init(ops, str(mountpoint), options)
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
