"""The mount's counters and their Prometheus text exposition (``.logfs/metrics``; docs/mount.md, "Files, modes and
caching").

Counters live here, keyed by (topic, partition) or errno name, and only grow (a deleted topic's counters stay, as
Prometheus expects of a counter). Gauges (offsets, HW lag, open readers) are read from the store when the file is
rendered. :meth:`Metrics.statistics` gives a frozen snapshot; :func:`render` turns a snapshot into the exposition
format (version 0.0.4): ``# HELP`` and ``# TYPE`` lines, then one sample per label set, sorted.

The mount's refusal log (``mount/refusals.py``: the ring behind ``.logfs/errors``) lives here too, as
:attr:`Metrics.refusals`: it is what the mount reports about the requests it answered, as ``logfs_errors_total`` is.

Threads: the trio thread updates and renders (worker threads report back through it); no lock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from logfs.core import cext
from logfs.mount.refusals import RefusalLog

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class PartitionGauges:
    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    size_bytes: int
    segments: int
    recovery_point: int = 0  # the offset up to which the log is flushed to disk (Kafka's recovery point)
    durable_offset: int = 0  # records below it are on disk (fsync(2) through the mount syncs records only)
    isr: tuple[int, ...] = ()  # the in-sync replicas (a follower's mount: as its leader's last answer said)
    under_min_isr: bool = False
    replicas: dict[int, int] = field(default_factory=dict)  # leader only: each follower's LEO as it last fetched


@dataclass(frozen=True, slots=True)
class Statistics:
    """One snapshot of everything ``.logfs/metrics`` shows."""

    appended_records: dict[TopicPartitionKey, int]
    appended_bytes: dict[TopicPartitionKey, int]
    appended_batches: dict[TopicPartitionKey, int]
    fetched_bytes: dict[TopicPartitionKey, int]
    fetches: dict[TopicPartitionKey, int]
    errors: dict[str, int]
    gauges: dict[TopicPartitionKey, PartitionGauges]
    follow_readers: int
    fresh_inodes: int
    render_cache: dict[str, int] = field(default_factory=dict)
    read_opens: dict[str, int] = field(default_factory=dict)  # opens of read files, by kind (mount/nodes.py)


class Metrics:
    """The mount's counters. Trio thread."""

    def __init__(self) -> None:
        self.appended_records: Counter[TopicPartitionKey] = Counter()
        self.appended_bytes: Counter[TopicPartitionKey] = Counter()
        self.appended_batches: Counter[TopicPartitionKey] = Counter()
        self.fetched_bytes: Counter[TopicPartitionKey] = Counter()
        self.fetches: Counter[TopicPartitionKey] = Counter()
        self.errors: Counter[str] = Counter()
        # Opens of read files by kind: what a client's work costs the mount in opens (e.g. a Spark plan reads one
        # .logfs/partitions, not one state file per partition: tests/spark/test_spark_planning.py counts them).
        self.read_opens: Counter[str] = Counter()
        self.refusals = RefusalLog()

    def appended(self, key: TopicPartitionKey, records: int, size_bytes: int, batches: int = 1) -> None:
        self.appended_records[key] += records
        self.appended_bytes[key] += size_bytes
        self.appended_batches[key] += batches

    def fetched(self, key: TopicPartitionKey, size_bytes: int) -> None:
        self.fetches[key] += 1
        self.fetched_bytes[key] += size_bytes

    def error(self, errno_name: str) -> None:
        self.errors[errno_name] += 1

    def read_opened(self, kind_name: str) -> None:
        self.read_opens[kind_name] += 1

    def statistics(
        self,
        gauges: dict[TopicPartitionKey, PartitionGauges],
        *,
        follow_readers: int,
        fresh_inodes: int,
        render_cache: dict[str, int] | None = None,
    ) -> Statistics:
        return Statistics(
            dict(self.appended_records), dict(self.appended_bytes), dict(self.appended_batches),
            dict(self.fetched_bytes), dict(self.fetches), dict(self.errors), dict(gauges),
            follow_readers, fresh_inodes, dict(render_cache or {}), dict(self.read_opens),
        )  # fmt: skip


def _labels(key: TopicPartitionKey, replica: int | None = None) -> str:
    # Topic names are [A-Za-z0-9._-]: nothing to escape.
    extra = "" if replica is None else f',replica="{replica}"'
    return f'{{topic="{key[0]}",partition="{key[1]}"{extra}}}'


def _family(name: str, kind: str, help_text: str, samples: Iterable[tuple[str, int]]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    lines.extend(f"{name}{labels} {value}" for labels, value in samples)
    return lines


def render(stats: Statistics) -> bytes:
    """The Prometheus text exposition of ``stats``."""
    keys = sorted(set(stats.gauges) | set(stats.appended_records) | set(stats.fetched_bytes))

    def per_partition(values: dict[TopicPartitionKey, int]) -> list[tuple[str, int]]:
        return [(_labels(k), values.get(k, 0)) for k in keys]

    def gauge(attr: str) -> list[tuple[str, int]]:
        return [(_labels(k), getattr(g, attr)) for k, g in sorted(stats.gauges.items())]

    lines: list[str] = []
    lines += _family("logfs_appended_records_total", "counter", "Records appended through the mount.",
                     per_partition(stats.appended_records))  # fmt: skip
    lines += _family("logfs_appended_bytes_total", "counter", "Batch bytes appended through the mount.",
                     per_partition(stats.appended_bytes))  # fmt: skip
    lines += _family("logfs_appended_batches_total", "counter", "Batches appended through the mount.",
                     per_partition(stats.appended_batches))  # fmt: skip
    lines += _family("logfs_fetches_total", "counter", "Read requests served from at/, follow/ and hw/ files.",
                     per_partition(stats.fetches))  # fmt: skip
    lines += _family("logfs_fetched_bytes_total", "counter", "Bytes served from at/, follow/ and hw/ files.",
                     per_partition(stats.fetched_bytes))  # fmt: skip
    lines += _family("logfs_errors_total", "counter", "Errors answered to FUSE requests, by errno.",
                     [(f'{{errno="{name}"}}', n) for name, n in sorted(stats.errors.items())])  # fmt: skip
    lines += _family("logfs_log_start_offset", "gauge", "Log start offset.", gauge("log_start_offset"))
    lines += _family("logfs_high_watermark", "gauge", "High watermark.", gauge("high_watermark"))
    lines += _family("logfs_log_end_offset", "gauge", "Log end offset.", gauge("log_end_offset"))
    lag = [(_labels(k), g.log_end_offset - g.high_watermark) for k, g in sorted(stats.gauges.items())]
    lines += _family("logfs_high_watermark_lag", "gauge", "Log end offset minus high watermark.", lag)
    lines += _family("logfs_recovery_point", "gauge", "Offset below which every record is flushed to disk.",
                     gauge("recovery_point"))  # fmt: skip
    lines += _family("logfs_durable_offset", "gauge", "Offset below which every record is on disk (fsync, O_SYNC).",
                     gauge("durable_offset"))  # fmt: skip
    lines += _family("logfs_log_size_bytes", "gauge", "Bytes in the partition's segments.", gauge("size_bytes"))
    lines += _family("logfs_log_segments", "gauge", "Segments of the partition.", gauge("segments"))
    replication = sorted((k, g) for k, g in stats.gauges.items() if g.isr)
    lines += _family("logfs_isr_size", "gauge", "Replicas in the ISR (this node included).",
                     [(_labels(k), len(g.isr)) for k, g in replication])  # fmt: skip
    lines += _family("logfs_under_min_isr", "gauge", "1 while the ISR is below min.insync.replicas (acks=all fails).",
                     [(_labels(k), int(g.under_min_isr)) for k, g in replication])  # fmt: skip
    followers = [(k, g, r, leo) for k, g in replication for r, leo in sorted(g.replicas.items())]
    lines += _family("logfs_replica_log_end_offset", "gauge", "A follower's log end offset as its last fetch said.",
                     [(_labels(k, r), leo) for k, _, r, leo in followers])  # fmt: skip
    lines += _family("logfs_replica_lag_offsets", "gauge", "Records a follower is behind the leader's log end.",
                     [(_labels(k, r), max(0, g.log_end_offset - leo)) for k, g, r, leo in followers])  # fmt: skip
    lines += _family("logfs_replica_in_sync", "gauge", "1 when the follower is in the ISR.",
                     [(_labels(k, r), int(r in g.isr)) for k, g, r, _ in followers])  # fmt: skip
    lines += _family("logfs_follow_readers", "gauge", "Open follow/ handles.", [("", stats.follow_readers)])
    lines += _family("logfs_read_opens_total", "counter", "Opens of read files, by kind of file.",
                     [(f'{{file="{name}"}}', n) for name, n in sorted(stats.read_opens.items())])  # fmt: skip
    # Which record code serves this mount: a build without a compiler (or LOGFS_NO_CEXT=1) is correct but slower,
    # and an operator should be able to see that without reading the start-up log (tests/mount/test_cext_differential.py
    # starts one mount of each kind and checks this before comparing them).
    lines += _family("logfs_compiled_helpers", "gauge",
                     "1 when the compiled record helpers (core/cext/*.c) are used, 0 for the pure-Python reference.",
                     [("", int(cext.USE_CEXT))])  # fmt: skip
    lines += _family("logfs_fresh_inodes", "gauge", "at/, follow/ and write-file inodes the kernel holds.",
                     [("", stats.fresh_inodes)])  # fmt: skip
    for name, value in sorted(stats.render_cache.items()):
        lines += _family(f"logfs_render_cache_{name}", "gauge", f"Render cache: {name.replace('_', ' ')}.",
                         [("", value)])  # fmt: skip
    return ("\n".join(lines) + "\n").encode()


def render_store_health(offline: bool, read_errors: int, corrupt_batches: int) -> bytes:
    """The store's failure families (issue 16, ``core/logdirfailure.py``): the offline gauge and the read-failure
    counters; appended after :func:`render`'s."""
    lines = _family("logfs_store_offline", "gauge", "1 once an I/O error writing or syncing a store file took the "
                    "store offline (every write and fsync fails with EIO).", [("", int(offline))])  # fmt: skip
    lines += _family("logfs_read_errors_total", "counter", "Reads of store files that met an I/O error (EIO).",
                     [("", read_errors)])  # fmt: skip
    lines += _family("logfs_corrupt_batches_total", "counter", "Reads that met a stored batch failing its CRC or "
                     "framing (EIO, never served).", [("", corrupt_batches)])  # fmt: skip
    return ("\n".join(lines) + "\n").encode()
