"""``logfs mount STORE MOUNTPOINT --config zookeeper.connect=…``: a node of a ZooKeeper cluster.

As :func:`logfs.mount.server.serve`, except that no leader epoch is started here: the mount starts read-only with no
leader, and :class:`~logfs.cluster.node.ClusterNode` (a task beside the main loop) switches its role in place as
ZooKeeper's elections say. The mount point stays mounted through every role change.

Threads: the main thread runs :func:`serve_cluster`; trio's worker threads the blocking work; kazoo its own threads
(``logfs/cluster/zksession.py``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import trio

from logfs.cluster.node import ClusterNode
from logfs.cluster.zkauth import Credential, read_credential
from logfs.core.collector import freeze_loaded
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig
from logfs.mount.operations import Operations
from logfs.mount.server import (
    check_allow_other,
    clear_stale_mount,
    raise_open_file_limit,
    run_mount,
    standard_tasks,
)

_log = logging.getLogger(__name__)


def serve_cluster(store_path: Path, mountpoint: Path, config: StoreConfig) -> int:
    """Mount ``store_path`` at ``mountpoint`` as a node of the cluster ``config.zookeeper_connect`` names, until
    SIGINT, SIGTERM or an unmount; the exit code. Main thread. Raises as ``serve`` does before anything is mounted
    (MountError, StoreLocked, ConfigError: a bad ``zookeeper.auth.file`` too, read first)."""
    credential = read_credential(config.zookeeper_auth_file) if config.zookeeper_auth_file else None
    raise_open_file_limit()
    check_allow_other(config)
    clear_stale_mount(mountpoint, store_path)
    store = Store.open(store_path, config)
    freeze_loaded()  # a store kept for the process's life (core/collector.py)
    try:
        return trio.run(_run, store, mountpoint, credential)
    finally:
        store.close()
        _log.info("closed store %s", store_path)


async def _run(store: Store, mountpoint: Path, credential: Credential | None) -> int:
    ops = Operations(store, follower=lambda topic, partition: (-1, ()))
    node = ClusterNode(ops, store, store.config, Path(mountpoint).absolute(), credential)
    ops.reader.status.leader_info = node.leader_file
    ops.reader.status.cluster_state = node.state_fields
    ops.reader.status.partition_leader_info = node.partition_leader_file
    ops.reader.status.assigned_replicas = node.assignments.replicas
    groups = ops.reader.status.extra_metrics

    def metrics() -> str:
        return (groups() if groups is not None else "") + node.render_metrics()

    ops.reader.status.extra_metrics = metrics
    return await run_mount(ops, mountpoint, [*standard_tasks(ops, store), node.run])
