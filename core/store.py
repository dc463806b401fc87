"""A store: one directory of partitions laid out as a Kafka log directory (Kafka's LogManager), owned by one process.

Layout (docs/storage.md, "On disk")::

    STORE/
      <topic>-<partition>/              one Log each (core/log/log.py), loaded by core/log/loader.py
      recovery-point-offset-checkpoint  flushed offsets, per partition            (Kafka's text format)
      log-start-offset-checkpoint       log start offsets above the first segment's base
      replication-offset-checkpoint     high watermarks
      meta.properties                   node.id (and Kafka's version, cluster.id, directory.id), fixed at first use
      .kafka_cleanshutdown              written last by a clean close; deleted as soon as a load reads it
      .lock                             flock'ed by the owner: a second owner fails with StoreLocked
      .logfs-topic.<topic>.properties   topic config overrides: a plain file at the root, which a Kafka broker
                                        ignores (it parses every *directory* of a log dir as <topic>-<partition>
                                        and fails to start on any other, so logfs keeps no directory of its own);
                                        a name too long for a file name is shortened
                                        (overrides_file_name, core/topicnames.py)
      .logfs-topic.<topic>.owner        who owns a topic, a group (.logfs-group.<group>.owner) and the root
                                        (.logfs-root.owner): core/owners.py

Loading. The clean-shutdown marker is read and *deleted at once*, so a crash during the load counts as unclean next
time. Each partition directory is loaded with the checkpoints' recovery point, log start offset and HW; after an
unclean shutdown each recovers from its recovery point. ``*-delete`` directories (a deletion that was interrupted)
are removed. A symbolic link in the store directory or a partition directory stops the open before anything is
written (LinkInStore, naming it: core/storelinks.py). New topic names follow Kafka's rules, collisions included
(core/topicnames.py).

Periodic work. The core has no threads of its own: :meth:`Store.tick` runs what is due (retention, deferred
deletes, ``flush.ms`` flushes, checkpoint writes) and the process that owns the store calls it from a worker thread;
the work and its state are core/storetasks.py's. The store directory's own files (the lock, meta.properties, the
checkpoint files) are core/storedir.py's, and the names of topics and their directories core/topicnames.py's.

Threads: every method may be called from any thread; topic creation and deletion are serialised by ``_lock``; each
Log serialises its own writes.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from logfs.core.checkpoint import TopicPartition
from logfs.core.collector import collector_paused
from logfs.core.config import LogConfig
from logfs.core.configtext import apply_overrides, load_topic_overrides, save_topic_overrides
from logfs.core.durable import fsync_dir, fsync_dirs, replace_file
from logfs.core.errors import (
    InvalidPartitions,
    LogfsError,
    StoreOffline,
    TopicExists,
    TopicNotEmpty,
    UnknownTopicOrPartition,
)
from logfs.core.log.handles import MAX_OPEN_SEGMENTS_DEFAULT, HandleCache
from logfs.core.log.loader import EventSink, load_log
from logfs.core.log.log import Log
from logfs.core.logdirfailure import Failure, LogDirFailureChannel, register, unregister
from logfs.core.owners import Owner, Owners
from logfs.core.storeconfig import StoreConfig
from logfs.core.storedir import (
    CLEAN_SHUTDOWN_FILE,
    HIGH_WATERMARK_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    check_meta_properties,
    lock_store,
    read_checkpoint,
    sync_new_store_directory,
)
from logfs.core.storelinks import refuse_link, refuse_links
from logfs.core.storetasks import StoreTasks, flush_all
from logfs.core.topicnames import (
    DELETE_DIR_SUFFIX,
    TopicCollisions,
    collision_error,
    delete_dir_name,
    overrides_file_name,
    parse_partition_dir,
    partition_dir_name,
    validate_topic_name,
)
from logfs.core.txn.coordinator import TransactionCoordinator
from logfs.core.txn.producerids import ProducerIdAllocator

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NewTopic:
    """One topic of :meth:`Store.create_topics`: its name, partition count (None: ``num.partitions``), config
    overrides, and owner (None: the store's default, ``core/owners.py``)."""

    name: str
    partitions: int | None = None
    overrides: dict[str, str] | None = None
    owner: Owner | None = None


class Store:
    """An open store. Create with :meth:`open`; end with :meth:`close`."""

    def __init__(
        self,
        path: Path,
        config: StoreConfig,
        lock_fd: int,
        *,
        handles: HandleCache,
        had_clean_shutdown: bool,
        on_event: EventSink | None,
        failure: LogDirFailureChannel,
    ) -> None:
        self.path = path
        self.config = config
        self.handles = handles
        self.had_clean_shutdown = had_clean_shutdown
        self.created = False  # Store.open found no store there (an absent or empty directory) and made one
        self._lock_fd = lock_fd
        self._on_event = on_event
        # The one owner of the offline state (Kafka's LogDirFailureChannel, core/logdirfailure.py): registered for
        # the root before Store.open writes or loads a file, so that every file of the store finds it.
        self.failure: LogDirFailureChannel = failure
        self._lock = threading.RLock()
        self._logs: dict[TopicPartition, Log] = {}
        # The same logs by topic, so that a lookup of one topic costs what that topic has, never O(partitions):
        # the mount asks it on every lookup and getattr (kept in step with _logs by _add_log and _drop_log).
        self._by_topic: dict[str, dict[int, Log]] = {}
        # Topics by unified spelling (Kafka's Topic.hasCollision) for creations; kept by _add_log and _drop_log.
        self._collisions = TopicCollisions()
        # Moves with every partition added or dropped: a reader that saw the same value knows the set of partitions
        # is the same without walking it (logfs/cluster/isr.py's sync of the ISRs it recorded).
        self.topology_version = 0
        self._overrides: dict[str, dict[str, str]] = {}
        self.owners = Owners(path)  # who owns each topic, group and the root (core/owners.py)
        # The periodic work and its state (core/storetasks.py), over this registry of logs.
        self.tasks = StoreTasks(path, config, self._logs)
        self._closed = False
        # Idempotent producers' ids and the transaction coordinator: files in the store root, opened after the logs
        # (see open); the mount writes the markers, the store only owns the files.
        self.producer_ids: ProducerIdAllocator | None = None
        self.transactions: TransactionCoordinator | None = None

    # --- opening ------------------------------------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        config: StoreConfig | None = None,
        *,
        max_open_segments: int = MAX_OPEN_SEGMENTS_DEFAULT,
        on_event: EventSink | None = None,
    ) -> Store:
        """Lock and load the store at ``path`` (created if missing). StoreLocked if another process owns it."""
        root = Path(os.path.abspath(path))  # absolute and plain: every file's failure channel is found by its path
        config = config or StoreConfig()
        created = not root.is_dir() or next(root.iterdir(), None) is None  # nothing to recover: not "unclean"
        root.mkdir(parents=True, exist_ok=True)
        lock_fd = lock_store(root)
        failure = register(root)  # a fresh, online channel: before the first write of a store file
        try:
            # One listing of the root, from the directory entries' types (no stat each): no link (before any file of
            # the store is written), then the partition directories and which topics have an overrides file.
            with os.scandir(root) as it:
                listing = sorted(it, key=lambda e: e.name)
            refuse_links(listing)
            fresh = check_meta_properties(root, config.node_id) or created
            if fresh:
                sync_new_store_directory(root, failure)
            marker = root / CLEAN_SHUTDOWN_FILE
            clean = marker.exists()
            if clean:
                marker.unlink()
                fsync_dir(root)
            store = cls(
                root,
                config,
                lock_fd,
                handles=HandleCache(max_open_segments),
                had_clean_shutdown=clean or created,
                on_event=on_event,
                failure=failure,
            )
            store.created = created
        except BaseException:
            os.close(lock_fd)
            unregister(failure)
            raise
        try:
            with collector_paused():  # ~600,000 long-lived objects at 10,000 partitions (core/collector.py)
                store._load_all(listing)
            store.producer_ids = ProducerIdAllocator(root)
            store.transactions = TransactionCoordinator.open(root, store.producer_ids.allocate)
            try:
                store.transactions.replicated_labels.catch_up(store)
            except (LogfsError, OSError) as exc:  # the store serves on; labels come back at the next catch-up
                _log.error("store %s: cannot read the committed labels of __transaction_state: %s", root, exc)
        except BaseException:
            store.abandon()  # the partitions loaded so far give their descriptors back, then the lock goes
            raise
        return store

    def _load_all(self, listing: list[os.DirEntry[str]]) -> None:
        """Load every partition directory of ``listing`` (the root's, made by :meth:`open`: no entry is a link).
        The listing also tells which topics have an overrides file: a topic without one is not looked up on disk."""
        recovery = read_checkpoint(self.path / RECOVERY_POINT_CHECKPOINT)
        starts = read_checkpoint(self.path / LOG_START_OFFSET_CHECKPOINT)
        hws = read_checkpoint(self.path / HIGH_WATERMARK_CHECKPOINT)
        entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in listing]
        files = {name for name, is_dir in entries if not is_dir}
        self.owners.load(files)
        for name, is_dir in entries:
            if not is_dir:
                continue
            entry = self.path / name
            if name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(entry, ignore_errors=True)
                _log.info("removed %s, left by an interrupted topic deletion", entry)
                continue
            tp = parse_partition_dir(name)
            if tp is None:
                continue
            if tp.topic not in self._overrides and overrides_file_name(tp.topic) not in files:
                self._overrides[tp.topic] = {}
            self._add_log(tp, load_log(
                entry,
                self.topic_config(tp.topic),
                self.handles,
                had_clean_shutdown=self.had_clean_shutdown,
                recovery_point=recovery.get(tp, 0),
                log_start_offset=starts.get(tp, 0),
                high_watermark=hws.get(tp, 0),
                on_event=self._on_event,
            ))  # fmt: skip
        _log.info(
            "opened store %s: %d partitions, %s",
            self.path, len(self._logs),
            "a new store" if self.created else "clean shutdown" if self.had_clean_shutdown else "unclean shutdown",
        )  # fmt: skip

    @property
    def offline(self) -> Failure | None:
        """The I/O failure that took the store offline (no write, roll, flush or fsync is taken since), or None."""
        return self.failure.offline

    # --- topics and partitions -------------------------------------------------------------------------------------

    def topics(self) -> list[str]:
        return sorted(self._by_topic)

    def partitions(self, topic: str) -> list[int]:
        return sorted(self._by_topic.get(topic, ()))

    def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has (0: no such topic), without building a list."""
        return len(self._by_topic.get(topic, ()))

    def has_topic(self, topic: str) -> bool:
        return topic in self._by_topic

    def _add_log(self, tp: TopicPartition, log: Log) -> None:
        log.on_change = functools.partial(self.tasks.dirty.changed, log)
        self._logs[tp] = log
        logs = self._by_topic.get(tp.topic)
        if logs is None:
            logs = self._by_topic[tp.topic] = {}
            self._collisions.add(tp.topic)
        logs[tp.partition] = log
        self.topology_version += 1

    def _drop_log(self, tp: TopicPartition) -> Log:
        log = self._logs.pop(tp)
        self.tasks.dirty.forget(log)
        logs = self._by_topic[tp.topic]
        del logs[tp.partition]
        if not logs:
            del self._by_topic[tp.topic]
            self._collisions.remove(tp.topic)
        self.topology_version += 1
        return log

    def logs(self) -> Iterator[tuple[TopicPartition, Log]]:
        yield from sorted(self._logs.items())

    def log(self, topic: str, partition: int) -> Log:
        try:
            return self._logs[TopicPartition(topic, partition)]
        except KeyError:
            raise UnknownTopicOrPartition(f"no partition {partition} of topic {topic!r}") from None

    def create_topic(self, topic: str, partitions: int | None = None, overrides: dict[str, str] | None = None) -> None:
        """Create ``topic`` with ``partitions`` (default ``num.partitions``) empty partitions."""
        self.create_topics([NewTopic(topic, partitions, overrides)])

    def ensure_internal_topic(self, topic: str, partitions: int, overrides: dict[str, str]) -> None:
        """Create an internal topic (``__consumer_offsets``, ``__transaction_state``) unless it exists, as a
        coordinator does at its first write; a concurrent creation is not an error."""
        if self.has_topic(topic):
            return
        try:
            self.create_topic(topic, partitions, dict(overrides))
        except TopicExists:
            pass

    def create_topics(self, topics: list[NewTopic], *, copied: bool = False) -> None:
        """Create several topics at once, with one fsync of the store directory for all of them (a follower
        catching up thousands of topics; see :meth:`_create_partitions`). Every topic is checked first: an invalid
        or existing one (TopicExists, also for a name twice in the list) creates nothing, and so does one whose name
        collides with an existing topic's or another new one's (InvalidTopic: Kafka's ``Topic.hasCollision``).
        ``copied``: a leader's topics, which a follower copies as they are (a collision is the leader's to refuse)."""
        counts: dict[str, int] = {}
        spellings = TopicCollisions()  # the new topics' own, so that two new ones cannot collide either
        for new in topics:
            validate_topic_name(new.name)
            count = self.config.num_partitions if new.partitions is None else new.partitions
            if count < 1:
                raise InvalidPartitions(f"a topic needs at least one partition, not {count}")
            if new.overrides:
                apply_overrides(self.config.log_defaults(), new.overrides)  # ConfigError before anything is made
            if new.name in counts:
                raise TopicExists(f"topic {new.name!r} is given twice")
            if not copied and (clash := spellings.colliding(new.name)):
                raise collision_error(new.name, clash, "topic created with it")
            spellings.add(new.name)
            counts[new.name] = count
        with self._lock:
            for new in topics:
                if self.has_topic(new.name):
                    raise TopicExists(f"topic {new.name!r} exists")
                if not copied and (clash := self._collisions.colliding(new.name)):
                    raise collision_error(new.name, clash)
            for new in topics:
                if new.overrides:
                    self.set_topic_overrides(new.name, new.overrides)
                if new.owner is not None:  # before the topic exists: it never shows without its owner (the one
                    self.owners.set(Owners.topic_file(new.name), new.owner, sync_dir=False)  # fsync: below)
            self._create_partitions([TopicPartition(new.name, p) for new in topics for p in range(counts[new.name])])

    def add_partition(self, topic: str, partition: int) -> None:
        """Add partition ``partition``, which must be the next number (Kafka only grows partition counts)."""
        with self._lock:
            existing = self.partition_count(topic)
            if not existing:
                raise UnknownTopicOrPartition(f"no topic {topic!r}")
            if partition != existing:
                raise InvalidPartitions(f"topic {topic!r} has {existing} partitions: the next is {existing}")
            self._create_partitions([TopicPartition(topic, partition)])

    def _create_partitions(self, tps: list[TopicPartition]) -> None:
        """Make the partition directories of ``tps``, each with its first segment, durably, then add them.

        Crash safety: a partition exists for readers and writers (is acknowledged) only once its directory entry in
        the store directory and its first segment's entry in its own directory are on disk: a partition that a
        crash lost after a producer saw it would lose the records acknowledged to it. So every new directory is
        fsynced (its segment's name) and then the store directory once (every new directory's name) before any
        of them is added (Kafka's LogManager flushes the parent of each new log directory). Grouping the store
        directory's fsync makes a batch of N partitions N + 1 fsyncs instead of 2N, and the per-directory ones run
        several at once (``durable.fsync_dirs``: the file system merges journal commits that overlap). A
        failure part way adds the partitions already made, as their directories exist and a restart would load
        them. Under ``_lock``."""
        self.failure.check()
        made: list[tuple[TopicPartition, Log]] = []
        try:
            configs: dict[str, LogConfig] = {}
            for tp in tps:
                config = configs.get(tp.topic) or configs.setdefault(tp.topic, self.topic_config(tp.topic))
                directory = self.path / partition_dir_name(tp.topic, tp.partition)
                refuse_link(directory)  # one put there since the open: the load would list and write through it
                made.append((tp, load_log(directory, config, self.handles, had_clean_shutdown=True)))
            fsync_dirs([log.directory for _, log in made])  # each one's first segment's name; then their own names
            fsync_dir(self.path)
        finally:
            for tp, log in made:
                self._add_log(tp, log)

    def delete_topic(self, topic: str, *, only_if_empty: bool = False) -> None:
        """Delete ``topic`` and all its data (``only_if_empty``: refuse with TopicNotEmpty when it has records)."""
        self.failure.check()  # offline: nothing is closed, renamed or forgotten
        with self._lock:
            tps = [TopicPartition(topic, p) for p in sorted(self._by_topic.get(topic, ()))]
            if not tps:
                raise UnknownTopicOrPartition(f"no topic {topic!r}")
            if only_if_empty and any(self._logs[tp].log_end_offset > 0 for tp in tps):
                raise TopicNotEmpty(f"topic {topic!r} holds records")
            for tp in tps:
                log = self._drop_log(tp)
                log.close()
                doomed = log.directory.with_name(delete_dir_name(tp))
                with self.failure.guard(log.directory, "rename"):
                    os.rename(log.directory, doomed)
                shutil.rmtree(doomed, ignore_errors=True)
            self._overrides_path(topic).unlink(missing_ok=True)
            self._overrides.pop(topic, None)
            self.owners.forget(Owners.topic_file(topic))
            fsync_dir(self.path)
            self.tasks.write_checkpoints(hw=True, offsets=True)

    # --- configs ---------------------------------------------------------------------------------------------------

    def _overrides_path(self, topic: str) -> Path:
        return self.path / overrides_file_name(topic)

    def topic_overrides(self, topic: str) -> dict[str, str]:
        if topic not in self._overrides:
            self._overrides[topic] = load_topic_overrides(self._overrides_path(topic))
        return dict(self._overrides[topic])

    def topic_config(self, topic: str) -> LogConfig:
        """The effective config of ``topic``: the store's defaults with the topic's overrides on top (the defaults
        themselves, shared, when it has none: a LogConfig is frozen, and building one per partition was a fifth of
        a clean open)."""
        overrides = self.topic_overrides(topic)
        if not overrides:
            return self.config.log_defaults()
        return apply_overrides(self.config.log_defaults(), overrides)

    def set_topic_overrides(self, topic: str, overrides: dict[str, str]) -> None:
        """Persist a topic's overrides and apply them to its logs (ConfigError leaves everything unchanged)."""
        effective = apply_overrides(self.config.log_defaults(), overrides)
        save_topic_overrides(self._overrides_path(topic), overrides)
        with self._lock:
            self._overrides[topic] = dict(overrides)
            logs = list(self._by_topic.get(topic, {}).values())
            for log in logs:
                log.config = effective
            self.tasks.dirty.requeue_all_flushes(logs)  # flush.ms may have changed: a queued due time may be wrong

    # --- records and periodic work ---------------------------------------------------------------------------------

    def delete_records(self, topic: str, partition: int, offset: int) -> None:
        """Kafka's deleteRecords: raise the log start offset to ``offset`` (never past the HW), then retention."""
        self.failure.check()  # offline: the log start offset does not move either
        log = self.log(topic, partition)
        log.maybe_increment_log_start_offset(offset)
        log.delete_old_segments()
        self.tasks.write_checkpoints(hw=False, offsets=True)

    def tick(self, now_ms: int | None = None) -> None:
        """Run the periodic jobs that are due (see the module docstring). Blocking: call from a worker thread.

        Offline (``core/logdirfailure.py``), it does nothing: no flush, checkpoint or deletion is written any more,
        and a failure during it is logged once by the failure channel, not raised again here."""
        if self.offline is not None:
            return  # reads go on; only a restart on a healthy disk brings the store back
        try:
            self.tasks.run_due(now_ms)
        except StoreOffline:
            pass  # this tick took the store offline: logged once, at ERROR, where it failed

    # --- closing ---------------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Clean shutdown: flush and close every log, write the checkpoints, then the clean-shutdown marker.

        Offline (or going offline on the way), it gives every descriptor and the lock back without writing anything
        more, and raises StoreOffline: the shutdown was not clean, and the next open recovers."""
        with self._lock:
            if self._closed:
                return
            if self.offline is not None:  # closed as after a crash, and said so: the shutdown was not clean
                _log.error("store %s is offline (%s): closed without a flush, a checkpoint or the clean-shutdown "
                           "marker; the next open recovers it", self.path, self.offline.describe())  # fmt: skip
                self.abandon()
                self.failure.check()
            try:
                if self.transactions is not None:
                    self.transactions.close()
                flush_all([log for log in self._logs.values() if log.local.needs_flush])
                for log in self._logs.values():
                    log.close()
                self.tasks.write_checkpoints(hw=True, offsets=True)
                replace_file(self.path / CLEAN_SHUTDOWN_FILE, json.dumps({"version": 0, "brokerEpoch": 0}).encode())
            except StoreOffline:
                self.abandon()  # the failure is logged; no marker: the next open recovers
                raise
            self._closed = True
            os.close(self._lock_fd)
            unregister(self.failure)

    def abandon(self) -> None:
        """Give back every descriptor and the lock without a clean shutdown: no flush, no checkpoint, no marker
        (tests that simulate a crash, failed opens). Idempotent, and a no-op after close()."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self.transactions is not None:
                with contextlib.suppress(Exception):
                    self.transactions.close()
            for log in self._logs.values():
                for segment in log.segments:
                    segment.close_handler()
            with contextlib.suppress(OSError):
                os.close(self._lock_fd)
            unregister(self.failure)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
