"""The storage core's exception tree.

Every failure the core reports is one of these types; the mount layer turns them into errno values in exactly one
place (``logfs.mount.errno``), and the core itself never mentions an errno. Each class names the Kafka exception it
stands for, so a reader of Kafka's code finds the same rule here. Errors carry the numbers that explain them as
attributes (offsets, positions, sizes), not only in their message, so callers and tests can inspect them.

::

    LogfsError
    ├── RecordError                       bytes that are not a valid RecordBatch v2
    │   ├── CorruptRecord                 too short, bad magic, CRC mismatch (CorruptRecordException)
    │   └── InvalidRecord                 framing: counts, lengths, varints, deltas, trailing bytes
    │       ├── ControlRecordNotAllowed   a client wrote a control batch
    │       ├── InvalidTimestamp          outside message.timestamp.{before,after}.max.ms
    │       ├── NoKeyOnCompactedTopic     a record without a key for a topic whose cleanup.policy has compact
    │       └── UnsupportedCompression    codec id 5-7, or a codec library that is missing
    ├── RecordTooLarge                    one batch over max.message.bytes (RecordTooLargeException)
    ├── RecordBatchTooLarge               one append over segment.bytes (RecordBatchTooLargeException)
    ├── OffsetError
    │   ├── OffsetOutOfRange              below the log start offset or above the log end offset
    │   ├── InvalidOffset                 an index append that does not move forward
    │   ├── OffsetOverflow                offset - base offset outside [0, 2**31 - 1]
    │   ├── UnexpectedAppendOffset        a follower append below the log end offset
    │   └── OffsetsOutOfOrder             a follower append whose batches do not ascend
    ├── IndexFull                         an append to an index with no free slot
    ├── TimestampOutOfOrder               a time index append whose timestamp is below the last entry's
    ├── InvalidLeaderEpoch                a leader append in a negative leader epoch
    ├── LockBusy                          a blocking=False call that found a lock held (never reaches a client)
    ├── ReplicationError
    │   ├── NotEnoughReplicas             ISR below min.insync.replicas before an append (nothing written)
    │   ├── NotEnoughReplicasAfterAppend  written, but the ISR shrank below min.insync.replicas before the ack
    │   ├── ReplicationTimeout            written, but not replicated within request.timeout.ms
    │   ├── UnknownReplica                a fetch from an id that is not one of this leader's followers
    │   └── PromotionRefused              leading a store that was out of the ISR, without --unclean
    ├── ProducerError
    │   ├── OutOfOrderSequence            an idempotent producer skipped or reused a sequence number
    │   ├── ProducerFenced                an older producer epoch than the one the log knows
    │   ├── InvalidTxnState               a plain batch from a producer whose transaction is open; a coordinator
    │   │                                 call on a transactional id in a state that does not allow it
    │   ├── TransactionInProgress         begin while that transactional id has a transaction open or pending
    │   ├── InvalidTransactionalId        a transactional id outside the topic-name rules
    │   │   └── TransactionalIdTooLong    over 249 characters
    │   └── CoordinatorFenced             a marker from an older coordinator epoch than the log knows
    ├── ConfigError                       unknown key, unsupported key or bad value
    ├── InvalidJsonRecord                 an append.jsonl line that is not a record of the spec's shape
    ├── InvalidOffsetCommit               a consumer-group commit that is malformed or outside the log (EINVAL)
    ├── InvalidGroupId                    a consumer group id outside the topic-name rules (InvalidGroupIdException)
    │   └── GroupIdTooLong                over 249 characters
    ├── TopicError
    │   ├── InvalidTopic                  a name outside Kafka's rules (InvalidTopicException)
    │   │   └── TopicNameTooLong          over 249 characters
    │   ├── TopicExists                   create of a topic that exists (TopicExistsException)
    │   ├── UnknownTopicOrPartition       no such topic or partition (UnknownTopicOrPartitionException)
    │   ├── InvalidPartitions             adding a partition other than the next number; a count below 1
    │   ├── InvalidReplicationFactor      below 1 or above the live nodes (InvalidReplicationFactorException)
    │   └── TopicNotEmpty                 removing a topic that holds records without the explicit delete
    └── StorageError                      the disk failed us: I/O error, disk full, store locked, damaged file
        ├── DiskFull
        ├── StoreOffline                  an earlier write or sync of a store file failed: no write is taken any more
        ├── ReadFailed                    a read of a store file met an I/O error (that read fails; nothing else)
        ├── CorruptStoredBatch            a stored batch that fails its CRC or framing when read for a client
        ├── StoreLocked
        ├── LinkInStore                   a symbolic link in the store directory or a partition directory
        ├── CorruptIndex                  an index file that fails its sanity check (CorruptIndexException)
        ├── CorruptTransactionLog         damage before the end of the coordinator's transaction log
        ├── CorruptSnapshot               a producer snapshot that fails its checks (skipped by the loader)
        └── CorruptCheckpoint             a checkpoint file with a bad version, line or entry count
"""

from __future__ import annotations


class LogfsError(Exception):
    """Base of every error the core raises on purpose."""


# --- bytes -------------------------------------------------------------------------------------------------------


class RecordError(LogfsError):
    """Bytes that are not a valid RecordBatch v2.

    ``position`` is the byte position of the offending batch in the buffer or file it was read from (None when
    unknown); ``reason`` is the human sentence without the position.
    """

    def __init__(self, reason: str, *, position: int | None = None) -> None:
        self.reason = reason
        self.position = position
        where = f" (batch at byte {position})" if position is not None else ""
        super().__init__(f"{reason}{where}")


class CorruptRecord(RecordError):
    """The batch is damaged: shorter than its header, wrong magic, or a CRC-32C mismatch (CorruptRecordException)."""


class InvalidRecord(RecordError):
    """The batch passes its CRC but its framing breaks a rule of the format (InvalidRecordException)."""


class ControlRecordNotAllowed(InvalidRecord):
    """A client batch carries the control attribute: only the transaction machinery may write markers."""


class InvalidTimestamp(InvalidRecord):
    """A CREATE_TIME timestamp outside ``message.timestamp.before.max.ms`` / ``after.max.ms`` of now."""


class NoKeyOnCompactedTopic(InvalidRecord):
    """A record without a key appended to a compacted topic (Kafka's INVALID_RECORD, "Compacted topic cannot accept
    message without key"): the cleaner keeps the latest record per key, so a keyless one could never be kept.
    ``batch_index`` is the batch's place in its request, ``record_index`` the record's in its batch."""

    def __init__(self, reason: str, *, batch_index: int, record_index: int) -> None:
        self.batch_index = batch_index
        self.record_index = record_index
        super().__init__(reason)


class UnsupportedCompression(InvalidRecord):
    """A compression id Kafka does not define, or one whose codec library is not installed."""


class RecordTooLarge(LogfsError):
    """One batch is larger than ``max.message.bytes`` (RecordTooLargeException)."""

    def __init__(self, size_bytes: int, max_bytes: int) -> None:
        self.size_bytes = size_bytes
        self.max_bytes = max_bytes
        super().__init__(f"batch of {size_bytes} bytes exceeds max.message.bytes={max_bytes}")


class RecordBatchTooLarge(LogfsError):
    """One append is larger than ``segment.bytes`` (RecordBatchTooLargeException)."""

    def __init__(self, size_bytes: int, segment_bytes: int) -> None:
        self.size_bytes = size_bytes
        self.segment_bytes = segment_bytes
        super().__init__(f"append of {size_bytes} bytes exceeds segment.bytes={segment_bytes}")


# --- offsets -----------------------------------------------------------------------------------------------------


class OffsetError(LogfsError):
    """A logical offset that the log or an index cannot accept or serve."""


class OffsetOutOfRange(OffsetError):
    """A read below the log start offset or above the log end offset (OffsetOutOfRangeException)."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int, what: str = "read") -> None:
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        super().__init__(
            f"{what} at offset {offset} is outside [{log_start_offset}, {log_end_offset}] "
            "(log start offset, log end offset)"
        )


class InvalidOffset(OffsetError):
    """An index entry that would not move the index forward (InvalidOffsetException)."""


class OffsetOverflow(OffsetError):
    """``offset - base_offset`` does not fit a relative offset in ``[0, 2**31 - 1]``.

    Kafka's IndexOffsetOverflowException and LogSegmentOffsetOverflowException.
    """

    def __init__(self, offset: int, base_offset: int, where: str) -> None:
        self.offset = offset
        self.base_offset = base_offset
        super().__init__(f"offset {offset} cannot be stored relative to base offset {base_offset} in {where}")


class UnexpectedAppendOffset(OffsetError):
    """A follower append whose first offset is below the log end offset (UnexpectedAppendOffsetException)."""

    def __init__(self, first_offset: int, last_offset: int, log_end_offset: int) -> None:
        self.first_offset = first_offset
        self.last_offset = last_offset
        self.log_end_offset = log_end_offset
        super().__init__(
            f"follower append of offsets [{first_offset}, {last_offset}] starts below the log end offset "
            f"{log_end_offset}"
        )


class OffsetsOutOfOrder(OffsetError):
    """A follower append whose batches are not in ascending offset order (OffsetsOutOfOrderException)."""


class IndexFull(LogfsError):
    """An append to an index whose every slot is taken (Kafka's IllegalArgumentException "index is full")."""


class TimestampOutOfOrder(LogfsError):
    """A time index append whose timestamp is below the last entry's (Kafka's IllegalStateException).

    The segment only ever offers its largest timestamp so far, so this is a caller's bug; it is a typed error rather
    than an ``assert`` so that it still stops the append under ``python -O``.
    """

    def __init__(self, timestamp: int, last_timestamp: int, where: str) -> None:
        self.timestamp = timestamp
        self.last_timestamp = last_timestamp
        super().__init__(f"timestamp {timestamp} is below the last timestamp {last_timestamp} in {where}")


class InvalidLeaderEpoch(LogfsError):
    """A leader append asked for a negative leader epoch: a leader always has one, and a negative epoch stamped into
    a batch would read as "no epoch" to every follower and to the epoch cache. A logfs bug, not a client's."""

    def __init__(self, leader_epoch: int) -> None:
        self.leader_epoch = leader_epoch
        super().__init__(f"leader epoch {leader_epoch} is negative: a leader always has an epoch")


# --- replication -------------------------------------------------------------------------------------------------


class LockBusy(LogfsError):
    """A call made with ``blocking=False`` found a lock held (an append, a roll): nothing was changed, and the caller
    does the work in a worker thread instead. It never reaches a client."""


class ReplicationError(LogfsError):
    """acks=all could not be honoured."""


class NotEnoughReplicas(ReplicationError):
    """The ISR is below ``min.insync.replicas`` before the append: nothing was written; safe to retry."""


class NotEnoughReplicasAfterAppend(ReplicationError):
    """The records are in the log, but the ISR fell below ``min.insync.replicas`` before they were acknowledged."""


class ReplicationTimeout(ReplicationError):
    """The records are in the log, but the HW did not pass them within ``request.timeout.ms``."""


class UnknownReplica(ReplicationError):
    """A fetch from ``replica_id``, which is not in ``replica.ids`` or is the leader itself (Kafka's
    NOT_LEADER_OR_FOLLOWER / UNKNOWN_LEADER_EPOCH family: the leader does not know that replica)."""

    def __init__(self, replica_id: int, replica_ids: tuple[int, ...], node_id: int) -> None:
        self.replica_id = replica_id
        self.replica_ids = replica_ids
        self.node_id = node_id
        super().__init__(
            f"replica {replica_id} is not a follower of node {node_id} (replica.ids={','.join(map(str, replica_ids))})"
        )


class NotLeaderOrFollower(ReplicationError):
    """A request for a partition this node does not lead (Kafka's NOT_LEADER_OR_FOLLOWER): a fetch of it, or a write
    that reached it; the caller asks its leader (a node that does not lead forwards writes before they get here)."""


class PromotionRefused(ReplicationError):
    """``logfs mount`` of a store that was out of the ISR at its follower's last fetch, or whose replica state file
    cannot be read, without ``--unclean`` (Kafka's unclean leader election, off by default)."""


# --- producers ---------------------------------------------------------------------------------------------------


class ProducerError(LogfsError):
    """An idempotent or transactional producer broke its sequence or epoch rules."""


class OutOfOrderSequence(ProducerError):
    """A sequence number that is neither the next one nor a duplicate of the last five batches."""


class ProducerFenced(ProducerError):
    """A producer epoch older than the newest one the log has seen for that producer id."""


class InvalidTxnState(ProducerError):
    """A non-transactional batch from a producer with an open transaction (InvalidTxnStateException).

    The transaction coordinator raises it too: a write, a commit or an abort for a transactional id that has no open
    transaction (Kafka's INVALID_TXN_STATE).
    """


class TransactionInProgress(ProducerError):
    """A begin for a transactional id whose transaction is still open or has a decision still being completed.

    Kafka answers InitProducerId in that case with CONCURRENT_TRANSACTIONS; the mount answers mkdir with EEXIST.
    """


class InvalidTransactionalId(ProducerError):
    """A transactional id outside the topic-name rules: 1-249 of ``[A-Za-z0-9._-]``, no leading ``.``.

    Kafka accepts any string; logfs names each transaction's directory after it (``.logfs/transactions/<id>``).
    """


class TransactionalIdTooLong(InvalidTransactionalId):
    """A transactional id over 249 characters: its own type so that the mount answers ENAMETOOLONG, as for a topic."""


class CoordinatorFenced(ProducerError):
    """A transaction marker with an older coordinator epoch than the producer's last (TransactionCoordinatorFenced)."""


# --- configuration and storage -------------------------------------------------------------------------------------


class ConfigError(LogfsError):
    """An unknown or unsupported config key, or a value of the wrong type or range."""


class InvalidJsonRecord(LogfsError):
    """An ``append.jsonl`` line that is not a JSON object of the spec's shape (the mount answers EINVAL)."""


class InvalidOffsetCommit(LogfsError):
    """A consumer-group offset commit that is malformed, outside [log start, log end], or an undecodable
    ``__consumer_offsets`` record (Kafka's INVALID_COMMIT_OFFSET_SIZE / OFFSET_OUT_OF_RANGE of a commit)."""


class InvalidGroupId(LogfsError):
    """A consumer group id outside the topic-name rules (Kafka's InvalidGroupIdException). Kafka refuses only an
    empty id; logfs names each group's directory after it (``.logfs/groups/<group>``), so a group id is held to the
    rules of every other name a user gives (core/names.py)."""


class GroupIdTooLong(InvalidGroupId):
    """A group id over 249 characters: its own type so that the mount answers ENAMETOOLONG, as for a topic."""


class TopicError(LogfsError):
    """A topic or partition that cannot be created, found or removed as asked."""


class InvalidTopic(TopicError):
    """A topic name outside Kafka's rules: 1-249 of ``[A-Za-z0-9._-]``, not ``.`` or ``..``, no leading ``.``."""


class TopicNameTooLong(InvalidTopic):
    """A topic name over 249 characters (Kafka's limit, so that ``<topic>-<partition>`` fits a file name)."""


class TopicExists(TopicError):
    """The topic exists already."""


class UnknownTopicOrPartition(TopicError):
    """No such topic, or no such partition of it."""


class InvalidPartitions(TopicError):
    """A new partition number that is not the next one, or a partition count below 1."""


class InvalidReplicationFactor(TopicError):
    """A replication factor below 1, or above the number of live nodes (Kafka's INVALID_REPLICATION_FACTOR)."""


class TopicNotEmpty(TopicError):
    """The topic holds records; only the explicit delete removes it."""


class StorageError(LogfsError):
    """The disk or the store directory failed an operation (Kafka's KafkaStorageException)."""


class DiskFull(StorageError):
    """No space left on the store's device; nothing partial was kept."""


class StoreOffline(StorageError):
    """The store is offline (Kafka's log directory failure): an earlier write, sync, rename or truncate of one of its
    files failed, so nothing written since the last successful sync may be on disk and no later write, roll or fsync
    is taken. ``failure`` is the first failure (``core/logdirfailure.py``'s Failure), the same for every refusal."""

    def __init__(self, failure: object, reason: str) -> None:
        self.failure = failure
        super().__init__(reason)


class ReadFailed(StorageError):
    """A read of a store file failed with an I/O error: that read fails, the store stays online (Kafka serves reads
    of a log directory until a write fails). ``path`` and ``errno`` say where and what."""

    def __init__(self, path: str, errno: int, reason: str) -> None:
        self.path = path
        self.errno = errno
        super().__init__(reason)


class CorruptStoredBatch(StorageError):
    """A batch of a segment that fails its CRC-32C or its framing when read to be served: its bytes are never
    rendered. ``path`` is the ``.log`` file, ``position`` the batch's byte position in it."""

    def __init__(self, path: str, position: int, reason: str) -> None:
        self.path = path
        self.position = position
        self.reason = reason
        super().__init__(f"{path}: stored batch at byte {position} {reason}")


class StoreLocked(StorageError):
    """Another process owns the store (its exclusive lock is held); ``holder_pid`` is that process when known."""

    def __init__(self, path: str, holder_pid: int | None) -> None:
        self.path = path
        self.holder_pid = holder_pid
        holder = f" (process {holder_pid})" if holder_pid is not None else ""
        super().__init__(f"store {path} is in use by another logfs process{holder}")


class LinkInStore(StorageError):
    """A symbolic link in the store directory or in a partition directory (a segment, an index, a snapshot, a
    checkpoint, or a partition directory itself). The store writes and deletes its files by name, so a link would
    have it write, truncate or delete whatever the link points at, outside the store: the store is not opened (or
    the partition not made) until the link is replaced by what it points to, or removed. ``path`` is the link."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(
            f"{path} is a symbolic link: a store holds only its own files and directories, and logfs writes nothing "
            "through a link (it could point outside the store); replace the link with a copy of what it points "
            "to, or remove it"
        )


class CorruptIndex(StorageError):
    """An ``.index`` or ``.timeindex`` file that fails its sanity check (Kafka's CorruptIndexException).

    Indexes carry no checksum; the loader answers this by rebuilding the segment's indexes from its ``.log``, so it
    is a distinct type from a failing disk, which must not be papered over by a rebuild.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"corrupt index {path}: {reason}")


class CorruptTransactionLog(StorageError):
    """The transaction coordinator's log is damaged before its end, or holds a record it cannot read.

    A torn tail (the record a crash interrupted) is cut with a warning instead; damage with intact records after it
    cannot come from a crash of an append-only, fsynced file, so the coordinator refuses to guess. ``position`` is
    the byte where the bad record starts.
    """

    def __init__(self, path: str, position: int, reason: str) -> None:
        self.path = path
        self.position = position
        self.reason = reason
        super().__init__(f"corrupt transaction log {path} at byte {position}: {reason}")


class CorruptSnapshot(StorageError):
    """A producer snapshot (``.snapshot``) that is too short, of another version, or fails its CRC or count (Kafka's
    CorruptSnapshotException). The loader skips it for an older one."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"corrupt producer snapshot {path}: {reason}")


class CorruptCheckpoint(StorageError):
    """A checkpoint file with an unknown version, a malformed line or the wrong number of entries.

    Kafka's CheckpointFile raises a plain IOException here; LogManager then treats the recovery-point and log-start
    checkpoints as empty. ``line_number`` counts from 1 and is None when no single line is to blame.
    """

    def __init__(self, path: str, reason: str, line_number: int | None = None) -> None:
        self.path = path
        self.reason = reason
        self.line_number = line_number
        where = f" line {line_number}" if line_number is not None else ""
        super().__init__(f"corrupt checkpoint {path}{where}: {reason}")
