"""The ``logfs`` sink: rows of a DataFrame appended to topics through a mount's ``batches`` files
(docs/spark.md, "The `logfs` sink").

Columns, as Spark's Kafka sink takes them (others are ignored): ``value`` (binary or string, required), ``key``
(binary or string), ``topic`` (string; the ``topic`` option overrides it), ``partition`` (int), ``headers``
(``array<struct<key: string, value: binary>>``). Strings are stored as their UTF-8 bytes.

Theory of operation. Each Spark task (one ``write`` of the Spark writer) turns its rows into records with the append
time as a CreateTime timestamp, as a Kafka producer does, and chooses each record's partition as Kafka's default
partitioner does: the ``partition`` column when it is not null; else ``murmur2(key)`` for a non-null key
(``core/format/partitioner.py``); else, for null keys, one partition per incoming Arrow batch, in turn (the sticky
rule). Records are encoded with ``core/format/batch.py`` into RecordBatch v2 batches (keys, headers and timestamps
survive, which ``append.jsonl`` could not promise for binary data), kept below the topic's ``max.message.bytes``, and
written to ``<topic>/<partition>/batches`` in writes of about WRITE_BYTES. Before the task reports success every handle
is fsync'ed — acks=all: the records are on disk and replicated to the ISR — so a micro-batch Spark commits is durable.
The produce responses of each handle (opened O_RDWR) give the offsets each task appended, which go back to the driver in
the commit message.

Delivery, as a Kafka producer's (``retries``, ``buffer.memory``, ``delivery.timeout.ms``): what a task wrote to a
partition since its last fsync is kept (the *unacknowledged* batches), and once the task holds ``ACK_BYTES`` of them
over all its partitions, every partition it wrote is fsync'ed before more is written, which bounds the memory. A
write, fsync or open (or the mkdir of a new topic) refused with an errno that says "not acknowledged, try again"
(``RETRIABLE``: EIO when a leader change left the write unacknowledged, EROFS, ENOTCONN, ECONNABORTED, EAGAIN,
ETIMEDOUT) is made again after a backoff — a refused write or fsync by closing the handle, opening the file again
(through a cluster node's mount, the partition's leader now: docs/replication.md, "Writes through any node") and
writing every unacknowledged batch again, then fsyncing — until ``kafka.delivery.timeout.ms`` (default 120 s) has
passed since the first refusal. So the sink survives a change of leader; a batch the old leader had stored without
acknowledging it may then be stored twice (at-least-once, as Kafka's producer without idempotence). A task of an
``exactlyOnce`` write does not write again: it fails, and its transaction is aborted (Spark's retry of the task
writes in a new one).

A topic that does not exist is created with ``mkdir`` (the mount's ``num.partitions``), as a Kafka broker with
``auto.create.topics.enable`` does. Without ``exactlyOnce`` the sink is at-least-once: a task that fails after some
of its writes and is retried appends those rows again. With it, each task writes in a transaction of its own, which
the driver commits with the micro-batch (``logfs/spark/transactions.py``).

Threads: one :class:`MountWriter` per task, used by one thread.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import logging
import os
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from logfs.core.format.batch import RECORD_BATCH_OVERHEAD, Header, Record
from logfs.core.format.compression import Compression
from logfs.core.format.encode import encode_batch
from logfs.core.format.partitioner import partition_for_key
from logfs.spark.mount import list_partitions
from logfs.spark.offsets import OffsetError, check_topic
from logfs.spark.transactions import abort, new_transaction, transaction_dir

WRITE_BYTES = 1024 * 1024  # bytes per write(2): one FUSE request at the mount's max_write
BATCH_BYTES_MAX = 1024 * 1024  # Kafka's producer batches are far smaller (batch.size 16 KiB); one request's worth
BATCH_SAFETY = 0.9  # room for a codec's framing on incompressible data (gzip ~20 B + 0.1 %)
RECORD_OVERHEAD_MAX = 36  # length, attributes, timestamp, offset, key and value lengths, header count: widest varints
HEADER_OVERHEAD_MAX = 10  # header key and value length varints
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024 + 12

SINK_COLUMNS = ("key", "value", "topic", "partition", "headers")
T = TypeVar("T")
_log = logging.getLogger(__name__)
ACK_BYTES = 32 * 1024 * 1024  # a task's unacknowledged bytes before its partitions are fsync'ed (buffer.memory)
DELIVERY_TIMEOUT_MS = 120_000  # Kafka's delivery.timeout.ms: how long a refused write is tried again
RETRY_BACKOFF_S = 0.1  # the first wait before a write is tried again (Kafka's retry.backoff.ms), doubling up to
RETRY_BACKOFF_MAX_S = 1.0  # Kafka's retry.backoff.max.ms
# "not acknowledged, try again": a leader change (EIO from fsync: the new leader cannot vouch for what the old one
# held; EROFS: no longer leads), a leader's mount gone (ENOTCONN, ECONNABORTED), no leader or too few in-sync
# replicas for now (EAGAIN), a replication timeout (ETIMEDOUT)
RETRIABLE = frozenset({errno.EIO, errno.EROFS, errno.ENOTCONN, errno.ECONNABORTED, errno.EAGAIN, errno.ETIMEDOUT})


class SinkError(RuntimeError):
    """Rows the sink cannot append: a missing topic, a bad partition, a refusal of the mount."""


@dataclass(frozen=True, slots=True)
class Appended:
    """What one task appended to one partition: ``records`` records at offsets first..last."""

    topic: str
    partition: int
    records: int
    first_offset: int
    last_offset: int


@dataclass
class _Partition:
    fd: int
    path: Path
    limit: int  # payload bytes per batch
    records: list[Record] = field(default_factory=list)
    pending_bytes: int = 0  # estimated encoded size of ``records``
    out: list[bytes] = field(default_factory=list)
    out_bytes: int = 0
    unacked: list[bytes] = field(default_factory=list)  # written since the last fsync (written again on a refusal)
    unacked_bytes: int = 0
    acked: bytes = b""  # the produce responses read after each fsync


class MountWriter:
    """Appends rows (Arrow batches of the sink's columns) for one Spark task; :meth:`close` fsyncs and reports."""

    def __init__(
        self,
        mount: Path,
        *,
        topic: str | None,
        compression: Compression = Compression.NONE,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        rng: random.Random | None = None,
        transactional_id: str | None = None,
        delivery_timeout_ms: int = DELIVERY_TIMEOUT_MS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``transactional_id`` (exactlyOnce): the rows go into a transaction of this task's own, begun at the first
        row (``logfs/spark/transactions.py``); :attr:`transaction` names it for the driver's commit.
        ``delivery_timeout_ms``: how long a refused write is tried again (the module docstring)."""
        self._mount = mount
        self._delivery_timeout_s = delivery_timeout_ms / 1000
        self._sleep = sleep
        self._transactional_id = transactional_id
        self.transaction: str | None = None
        self._topic = topic
        self._compression = compression
        self._clock_ms = clock_ms
        self._rng = rng or random.Random()
        self._partitions: dict[str, int] = {}  # topic -> partition count
        self._sticky: dict[str, int] = {}  # topic -> next partition for null keys
        self._open: dict[tuple[str, int], _Partition] = {}
        self._unacked_bytes = 0  # over all of _open (Kafka's buffer.memory): counted, not summed per write

    # --- rows ------------------------------------------------------------------------------------------------

    def write(self, batch: pa.RecordBatch) -> None:
        """Add the rows of one Arrow batch (buffered; written out in WRITE_BYTES pieces)."""
        n = batch.num_rows
        if n == 0:
            return
        names = set(batch.schema.names)
        if "value" not in names:
            raise SinkError("the logfs sink needs a value column (binary or string)")
        values = _bytes_column(batch.column("value"))
        keys = _bytes_column(batch.column("key")) if "key" in names else [None] * n
        if self._topic is not None:
            topics: list[Any] = [self._topic] * n
        elif "topic" in names:
            topics = batch.column("topic").to_pylist()
        else:
            raise SinkError("the logfs sink needs a topic: a topic column or the topic option")
        partitions = batch.column("partition").to_pylist() if "partition" in names else [None] * n
        headers = batch.column("headers").to_pylist() if "headers" in names else None
        now = self._clock_ms()
        sticky: dict[str, int] = {}  # this batch's partition for null keys, per topic
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise SinkError("a row has a null topic and no topic option is set")
            count = self._partition_count(topic)
            partition = partitions[i]
            key = keys[i]
            if partition is None:
                if key is not None:
                    partition = partition_for_key(key, count)
                else:
                    if topic not in sticky:
                        sticky[topic] = self._next_sticky(topic, count)
                    partition = sticky[topic]
            elif not 0 <= partition < count:
                raise SinkError(f"partition {partition} of topic {topic!r} does not exist (it has {count})")
            hdrs: tuple[Header, ...] = ()
            if headers is not None and headers[i]:
                hdrs = tuple(Header(h["key"], _as_bytes(h["value"])) for h in headers[i])
            self._add(topic, partition, key, values[i], hdrs, now)

    def _add(
        self, topic: str, partition: int, key: bytes | None, value: bytes | None, headers: tuple[Header, ...], now: int
    ) -> None:
        p = self._open.get((topic, partition)) or self._open_partition(topic, partition)
        size = RECORD_OVERHEAD_MAX + len(key or b"") + len(value or b"")
        for h in headers:
            size += HEADER_OVERHEAD_MAX + len(h.key.encode("utf-8")) + len(h.value or b"")
        if p.records and p.pending_bytes + size > p.limit:
            self._encode(p)
        p.records.append(Record(len(p.records), now, key, value, headers))
        p.pending_bytes += size

    def _encode(self, p: _Partition) -> None:
        raw = encode_batch(p.records, compression=self._compression)
        p.records, p.pending_bytes = [], 0
        p.out.append(raw)
        p.out_bytes += len(raw)
        if p.out_bytes >= WRITE_BYTES:
            self._flush(p)

    def _flush(self, p: _Partition) -> None:
        data = b"".join(p.out)
        p.out, p.out_bytes = [], 0
        p.unacked.append(data)
        p.unacked_bytes += len(data)
        self._unacked_bytes += len(data)
        try:
            _write_all(p.fd, data)
        except OSError as exc:
            self._deliver_again(p, exc)
            return
        if self._unacked_bytes >= ACK_BYTES:  # the task's, as Kafka's buffer.memory
            for q in self._open.values():
                if q.unacked:
                    self._ack(q)

    def _ack(self, p: _Partition) -> None:
        """fsync the partition (acks=all), so that what it wrote need not be kept; a refusal writes it again."""
        try:
            os.fsync(p.fd)
        except OSError as exc:
            self._deliver_again(p, exc)
            return
        self._acknowledged(p)

    def _acknowledged(self, p: _Partition) -> None:
        """``p``'s handle was fsync'ed: nothing of it is written again. Its produce responses are read for the
        report; a read that fails (a forwarded handle whose leader changed since) loses only the offsets reported."""
        self._unacked_bytes -= p.unacked_bytes
        p.unacked, p.unacked_bytes = [], 0
        try:
            p.acked += _read_responses(p.fd)
        except OSError as exc:
            _log.warning("%s: acknowledged, but its offsets cannot be read (%s): not reported", p.path, exc)

    def _deliver_again(self, p: _Partition, first: OSError) -> None:
        """A write or fsync of ``p`` was refused with ``first``: open the file again and write every unacknowledged
        batch, then fsync, until that succeeds or ``delivery_timeout_ms`` passed (the module docstring). The refusal
        itself when it is not RETRIABLE, or in a transaction (its task fails instead, and is tried again by Spark)."""

        def attempt() -> None:
            with contextlib.suppress(OSError):
                os.close(p.fd)  # its responses are of writes not acknowledged: the new handle's replace them
            p.fd = -1
            p.fd = os.open(p.path, os.O_RDWR)
            for data in p.unacked:
                _write_all(p.fd, data)
            os.fsync(p.fd)

        self._retrying(attempt, p.path, first)
        self._acknowledged(p)

    def _retrying(
        self,
        attempt: Callable[[], T],
        path: Path,
        first: OSError | None = None,
        refused: Callable[[OSError, Path], SinkError] | None = None,
    ) -> T:
        """``attempt()``, made again after a RETRIABLE refusal (``first``: one already met) with a backoff, until
        ``delivery_timeout_ms`` has passed since the first refusal; in a transaction, never again. Otherwise the
        SinkError ``refused`` makes of the refusal (an append's by default)."""
        refused = refused or _refusal
        if first is not None and (first.errno not in RETRIABLE or self._transactional_id is not None):
            raise refused(first, path) from first
        deadline = None if first is None else time.monotonic() + self._delivery_timeout_s
        wait, last = RETRY_BACKOFF_S, first
        while True:
            if last is not None:
                assert deadline is not None
                if time.monotonic() >= deadline:
                    raise SinkError(f"{refused(last, path)}; still refused after delivery.timeout.ms "
                                    f"({self._delivery_timeout_s:.0f} s)") from last
                self._sleep(wait)
                wait = min(wait * 2, RETRY_BACKOFF_MAX_S)
            try:
                return attempt()
            except OSError as exc:
                if exc.errno not in RETRIABLE or self._transactional_id is not None:
                    raise refused(exc, path) from exc
                if deadline is None:
                    deadline = time.monotonic() + self._delivery_timeout_s
                last = exc

    # --- topics and partitions ---------------------------------------------------------------------------------

    def _partition_count(self, topic: str) -> int:
        count = self._partitions.get(topic)
        if count is None:
            try:  # before any path is made of a row's topic: "../x" would list, mkdir and write outside the mount
                check_topic(topic, "a row's topic")
            except OffsetError as exc:
                raise SinkError(str(exc)) from None
            count = len(list_partitions(self._mount, topic))
            if count == 0:
                try:  # auto-create, like Kafka's auto.create.topics.enable (through a node with no leader yet: again)
                    self._retrying(functools.partial(os.mkdir, self._mount / topic), self._mount / topic,
                                   refused=_mkdir_refusal)  # fmt: skip
                except SinkError as exc:
                    if not isinstance(exc.__cause__, FileExistsError):
                        raise
                    # another task created it first
                count = len(list_partitions(self._mount, topic))
                if count == 0:
                    raise SinkError(f"topic {topic!r} under {self._mount} has no partitions")
            self._partitions[topic] = count
        return count

    def _next_sticky(self, topic: str, count: int) -> int:
        nxt = self._sticky.get(topic)
        if nxt is None:
            nxt = self._rng.randrange(count)  # tasks start on different partitions
        self._sticky[topic] = (nxt + 1) % count
        return nxt

    def _open_partition(self, topic: str, partition: int) -> _Partition:
        base = self._mount
        if self._transactional_id is not None:
            if self.transaction is None:
                self.transaction = new_transaction(self._mount, self._transactional_id)
            base = transaction_dir(self._mount, self.transaction)
        path = base / topic / str(partition) / "batches"
        fd = self._retrying(functools.partial(os.open, path, os.O_RDWR), path)
        limit = int(min(_max_message_bytes(self._mount, topic), BATCH_BYTES_MAX) * BATCH_SAFETY)
        p = _Partition(fd, path, limit - RECORD_BATCH_OVERHEAD)
        self._open[(topic, partition)] = p
        return p

    # --- the end -------------------------------------------------------------------------------------------------

    def close(self) -> list[Appended]:
        """Write what is buffered, fsync every partition written (durable and replicated: acks=all), read the
        produce responses and close. Raises SinkError when anything was refused."""
        try:
            for p in self._open.values():
                if p.records:
                    self._encode(p)
                if p.out:
                    self._flush(p)
            for p in self._open.values():
                if p.unacked:
                    self._ack(p)
            return [a for (topic, partition), p in sorted(self._open.items()) for a in _responses(topic, partition, p)]
        finally:
            self.abort()

    def abort_transaction(self) -> None:
        """The task failed: abort its transaction, if it began one (without exactlyOnce what was written stays)."""
        if self.transaction is not None:
            abort(self._mount, self.transaction)

    def abort(self) -> None:
        """Close every handle (:meth:`abort_transaction` decides what becomes of the rows of a transaction)."""
        handles, self._open, self._unacked_bytes = self._open, {}, 0
        for p in handles.values():
            if p.fd < 0:
                continue  # closed by a delivery that gave up
            try:
                os.close(p.fd)
            except OSError:
                pass  # close(2) reports a buffered tail's error; batches are whole here, so there is none


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data``, going on after a short write."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_responses(fd: int) -> bytes:
    """The produce responses a handle holds now (each read takes them: ``mount/reads.py``)."""
    raw = b""
    while chunk := os.read(fd, 65536):
        raw += chunk
    return raw


def _responses(topic: str, partition: int, p: _Partition) -> list[Appended]:
    """The produce responses of a partition's acknowledged writes (``<partition> <first> <last>`` lines) summed
    up."""
    raw = p.acked
    spans = [tuple(int(x) for x in line.split()) for line in raw.decode().splitlines() if line.strip()]
    if not spans:
        return []
    records = sum(last - first + 1 for _, first, last in spans)
    return [Appended(topic, partition, records, min(s[1] for s in spans), max(s[2] for s in spans))]


def _max_message_bytes(mount: Path, topic: str) -> int:
    try:
        lines = (mount / topic / "config").read_text().splitlines()
    except OSError:
        return DEFAULT_MAX_MESSAGE_BYTES
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "max.message.bytes" and value.strip().isdigit():
            return int(value)
    return DEFAULT_MAX_MESSAGE_BYTES


def _refusal(exc: OSError, path: Path) -> SinkError:
    reasons = {
        errno.EROFS: "the mount is a follower's (read-only): write to the leader's mount",
        errno.EFBIG: "a record is larger than the topic's max.message.bytes",
        errno.ENOENT: "no such topic or partition (deleted while writing?)",
        errno.EIO: "not acknowledged (acks=all: too few in-sync replicas, or a replication timeout)",
        errno.EAGAIN: "too few in-sync replicas (min.insync.replicas)",
    }
    reason = reasons.get(exc.errno or 0, os.strerror(exc.errno or 0))
    return SinkError(f"appending to {path}: {reason} [{errno.errorcode.get(exc.errno or 0, exc.errno)}]")


def _mkdir_refusal(exc: OSError, path: Path) -> SinkError:
    return SinkError(f"cannot create topic {path.name!r} under {path.parent}: {os.strerror(exc.errno or 0)} "
                     f"[{errno.errorcode.get(exc.errno or 0, exc.errno)}]")  # fmt: skip


def _bytes_column(column: pa.Array | pa.ChunkedArray) -> list[bytes | None]:
    """A binary or string column as bytes (strings as UTF-8); a column of nulls only may have Arrow's null type."""
    if pa.types.is_null(column.type):
        return [None] * len(column)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return [None if s is None else s.encode("utf-8") for s in column.to_pylist()]
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return column.to_pylist()
    raise SinkError(f"a key or value column must be binary or string, not {column.type}")


def _as_bytes(value: bytes | str | None) -> bytes | None:
    return value.encode("utf-8") if isinstance(value, str) else value


def summarize(appended: Iterable[Appended]) -> dict[tuple[str, int], tuple[int, int, int]]:
    """Per partition: records, first offset, last offset, over many tasks' reports."""
    out: dict[tuple[str, int], tuple[int, int, int]] = {}

    def key(a: Appended) -> tuple[str, int]:
        return a.topic, a.partition

    for tp, group in itertools.groupby(sorted(appended, key=key), key=key):
        items = list(group)
        out[tp] = (
            sum(a.records for a in items),
            min(a.first_offset for a in items),
            max(a.last_offset for a in items),
        )
    return out
