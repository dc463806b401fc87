"""``logfs follow LEADER_MOUNT STORE --replica-id N [--mount MOUNTPOINT]``: the command that runs the follower
daemon (``logfs/follower/daemon.py``) in the foreground, with the store's log cleaner and, with ``--mount``, the
read-only FUSE mount of its store (``logfs.mount.server.run_mount``); docs/replication.md, "The follower: `logfs
follow`".

Apart from the daemon because a cluster node (``logfs/cluster/node.py``) runs the same :class:`Follower` in its own
process, nursery and mount: only this command owns a process, its signals and its exit code.

Shutdown on SIGINT/SIGTERM (or an unmount of ``--mount``): the tasks are cancelled, the mount is unmounted, the
abandoned calls into the leader's mount are waited for (:meth:`Follower.drain_leader_calls`), the store closed
cleanly; exit 0.

Threads: the main thread runs :func:`follow`; everything else is the daemon's.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from logfs.core.collector import freeze_loaded
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig
from logfs.follower.daemon import Follower
from logfs.mount.cleaning import CleanerTask

_log = logging.getLogger(__name__)


def follow(leader_mount: Path, store_path: Path, replica_id: int, config: StoreConfig, mountpoint: Path | None) -> int:
    """Run the follower (and its read-only mount) in the foreground until SIGINT/SIGTERM; the exit code. Main
    thread. Raises MountError (before the store is opened or created), StoreLocked and ConfigError (a node.id the
    store refuses) before anything runs."""
    if mountpoint is not None:
        from logfs.mount.server import check_allow_other, clear_stale_mount, raise_open_file_limit

        raise_open_file_limit()
        check_allow_other(config)
        clear_stale_mount(mountpoint)  # first: a mount point that cannot be used must not leave a new store behind
    store = Store.open(store_path, config)
    freeze_loaded()  # a store kept for the process's life (core/collector.py)
    try:
        if mountpoint is None:
            return trio.run(_run_plain, leader_mount, store, replica_id)
        return trio.run(_run_mounted, leader_mount, store, replica_id, mountpoint)
    finally:
        store.close()
        _log.info("closed store %s", store_path)


async def _run_plain(leader_mount: Path, store: Store, replica_id: int) -> int:
    follower = Follower(leader_mount, store, replica_id)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(follower.run)
        nursery.start_soon(CleanerTask(store).run)  # replicas clean their own logs, as Kafka's do
        await _wait_for_signal()
        nursery.cancel_scope.cancel()
    await follower.drain_leader_calls()
    return 0


async def _run_mounted(leader_mount: Path, store: Store, replica_id: int, mountpoint: Path) -> int:
    from logfs.mount.operations import Operations
    from logfs.mount.server import run_mount, stop_mount

    follower = Follower(leader_mount, store, replica_id)
    ops = Operations(store, follower=follower.replica_state.partition_view)
    follower.on_hw_moved = ops.notify_hw
    follower.on_topic_deleted = ops.topic_deleted

    async def on_signals() -> None:
        await _wait_for_signal()
        await stop_mount(ops)

    cleaner = CleanerTask(store)  # replicas clean their own logs, as Kafka's do
    ops.reader.status.cleaner = cleaner
    background: list[Callable[[], Awaitable[None]]] = [follower.run, on_signals, cleaner.run]
    code = await run_mount(ops, mountpoint, background)
    await follower.drain_leader_calls()
    return code


async def _wait_for_signal() -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            _log.info("%s: shutting down", signal.Signals(signum).name)
            return
