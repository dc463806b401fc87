"""``logfs dump``: Kafka segment files as text, one line per batch or index entry (like kafka-dump-log).

Plain functions that yield lines, so the CLI prints them as they come and tests read them as lists:

* ``.log``: one line per batch (base and last offset, count, position, size, header fields, ``crc=ok`` or
  ``crc=invalid``, and ``invalid=<reason>`` when the framing breaks a rule), with ``records=True`` one ``|`` line
  per record; a torn or damaged tail is reported where the scan stops. Offsets no batch (or, with ``records``, no
  record of a batch) holds are a ``gap: offsets A..B (n) hold no batch`` line, with ``(removed by compaction)``
  only when the store's ``cleaner-offset-checkpoint`` says the cleaner has been past them; a batch with a
  delete horizon (a cleaned batch that kept a tombstone or a marker) shows ``deleteHorizonMs``.
* The header fields the CRC does not cover (issue 23) are held to the rule the mount's reads apply
  (``core/log/batchcheck.scan_python``): a base offset at or below the previous batch's last offset or the
  segment's base, a last offset at or past the next segment's base (or beyond a relative offset), a leader epoch
  below -1 or above what the partition's ``leader-epoch-checkpoint`` gives its offset show as ``invalid=`` damage
  (exit 1). A gap is not damage: compaction makes them.
* ``.index`` / ``.timeindex``: one line per entry, stopping at the zero-filled preallocated tail as Kafka's tool
  does (an entry back at the base offset after the first one).
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from logfs.core.checkpoint import LeaderEpochCheckpointFile, OffsetCheckpointFile, TopicPartition
from logfs.core.errors import CorruptCheckpoint, CorruptRecord, InvalidRecord
from logfs.core.format.batch import (
    ATTRIBUTES_OFFSET,
    DELETE_HORIZON_MASK,
    TimestampType,
    read_header,
)
from logfs.core.format.compression import Compression
from logfs.core.format.decode import decode_records
from logfs.core.format.framewalk import FrameWalk
from logfs.core.format.validate import validate_batch
from logfs.core.format.varint import INT32_MAX
from logfs.core.log.batchcheck import BAD_EPOCH, BAD_OFFSETS, NO_OFFSET_BOUND, pack_epochs, scan_python
from logfs.core.log.cleaner.logcleaner import CLEANER_CHECKPOINT
from logfs.core.log.index import OffsetIndex, OffsetPosition, TimeIndex

PAYLOAD_PREVIEW_BYTES = 200


@dataclass
class DumpResult:
    """Counts gathered while dumping, for the exit code: damage found means exit 1."""

    batches: int = 0
    damaged: int = 0


def dump_file(path: Path, *, records: bool, result: DumpResult) -> Iterator[str]:
    """Lines describing ``path``, chosen by its suffix."""
    if path.suffix not in (".log", ".index", ".timeindex"):
        raise ValueError(f"{path}: not a .log, .index or .timeindex file")
    base_offset = _base_offset(path)
    yield f"Dumping {path}"
    if path.suffix == ".log":
        yield from _dump_log(path, records=records, result=result)
        return
    index = (OffsetIndex if path.suffix == ".index" else TimeIndex)(path, base_offset, writable=False)
    try:
        for n in range(index.entries()):
            entry = index.entry(n)
            if n > 0 and entry.offset == base_offset:
                break  # the zero-filled, preallocated tail of an active segment's index, as Kafka's tool stops
            if isinstance(entry, OffsetPosition):
                yield f"offset: {entry.offset} position: {entry.position}"
            else:
                yield f"timestamp: {entry.timestamp} offset: {entry.offset}"
    finally:
        index.close_handler()


def _base_offset(path: Path) -> int:
    try:
        return int(path.name.split(".", 1)[0])
    except ValueError:
        raise ValueError(f"{path}: a segment file is named <20-digit base offset>.<suffix>") from None


@dataclass
class _Segment:
    """What the files around a ``.log`` tell about its batches: the bounds of the read check and the cleaner's
    progress (a store's layout: ``<root>/<topic>-<partition>/<base>.log``; anything missing leaves a bound open)."""

    base_offset: int
    max_last: int = NO_OFFSET_BOUND
    epochs: bytes = b""
    cleaned_to: int | None = None  # the cleaner's checkpoint for this partition: it has been past every offset below
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, path: Path) -> _Segment:
        base = _base_offset(path)
        seg = cls(base, base + INT32_MAX)
        later = [b for b in (_base_or_none(p) for p in path.parent.glob("*.log")) if b is not None and b > base]
        if later:
            seg.max_last = min(later) - 1
        try:
            seg.epochs = pack_epochs(LeaderEpochCheckpointFile.in_dir(path.parent).read())
        except (CorruptCheckpoint, OSError) as exc:
            seg.notes.append(f"note: leader-epoch-checkpoint not read ({exc}): leader epochs are not checked")
        topic, _, partition = path.parent.name.rpartition("-")
        checkpoint = path.parent.parent / CLEANER_CHECKPOINT
        if topic and partition.isdigit() and checkpoint.exists():
            try:
                seg.cleaned_to = OffsetCheckpointFile(checkpoint).read().get(TopicPartition(topic, int(partition)))
            except (CorruptCheckpoint, OSError) as exc:
                seg.notes.append(f"note: {CLEANER_CHECKPOINT} not read ({exc})")
        return seg

    def gap_line(self, first: int, end: int) -> str:
        """Offsets ``[first, end)`` that no batch holds: removed by the log cleaner when its checkpoint says it has
        been past them, else only a gap (a segment that starts after its name's offset, or damage elsewhere)."""
        cleaned = self.cleaned_to is not None and end <= self.cleaned_to
        return f"gap: offsets {first}..{end - 1} ({end - first}) hold no batch" + (
            " (removed by compaction)" if cleaned else ""
        )


def _base_or_none(path: Path) -> int | None:
    try:
        return int(path.name.split(".", 1)[0])
    except ValueError:
        return None


def _dump_log(path: Path, *, records: bool, result: DumpResult) -> Iterator[str]:
    seg = _Segment.of(path)
    yield from seg.notes
    with path.open("rb") as f:
        size = path.stat().st_size
        if size == 0:
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            buf = memoryview(mm)
            try:
                yield from _dump_batches(buf, records=records, result=result, seg=seg)
            finally:
                buf.release()


def _dump_batches(buf: memoryview, *, records: bool, result: DumpResult, seg: _Segment) -> Iterator[str]:
    # The framing walk every reader of a .log shares (core/format/framewalk.py), over the whole mapped file in one
    # "read": each frame's data is the file, so a batch's place in it is its position.
    walk = FrameWalk(lambda position, size: buf[position : position + size], 0, len(buf), first_read=len(buf))
    expected = seg.base_offset  # the next offset if nothing were missing: a batch past it shows a gap
    last_good = -1  # the position of the last batch whose offsets passed
    try:
        for data, position, size, _, _ in walk:
            result.batches += 1
            problem = ""
            if size >= 61:
                header = read_header(data, position)
                problem = _header_problem(data, position, size, seg, expected, last_good)
                if not problem:
                    if header.base_offset > expected:
                        yield seg.gap_line(expected, header.base_offset)
                    expected = max(expected, header.last_offset + 1)
                    last_good = position
            yield _batch_line(data, position, size, records=records, result=result, header_problem=problem)
            if records:
                yield from _record_lines(data, position, seg)
    except CorruptRecord as exc:
        result.damaged += 1
        yield f"corrupt at position {walk.end}: {exc.reason}; {len(buf) - walk.end} bytes not read"
        return
    if walk.torn:
        result.damaged += 1
        yield f"torn tail at position {walk.end}: {len(buf) - walk.end} bytes, less than a whole batch"


def _header_problem(buf: memoryview, position: int, size: int, seg: _Segment, expected: int, last_good: int) -> str:
    """The read check's verdict on the header fields the CRC does not cover (``batchcheck.scan_python``, the same
    rule the mount's reads apply), as an ``invalid=`` reason; "" when they pass (or the CRC fails: shown already)."""
    view = buf[position : position + size]
    try:
        _, kind, value, _ = scan_python(view, 0, size, expected, NO_OFFSET_BOUND, seg.max_last, seg.epochs)
    finally:
        view.release()
    if kind == BAD_OFFSETS:
        last = value + int.from_bytes(buf[position + 23 : position + 27], "big", signed=True)
        after = f"the batch at position {last_good}" if last_good >= 0 else f"the segment's base {seg.base_offset}"
        return (
            f" invalid=offsets {value}..{last} outside [{expected}, {seg.max_last}] (going back or overlapping "
            f"{after}, or past the next segment: the base offset is not covered by the CRC)"
        )
    if kind == BAD_EPOCH:
        return (
            f" invalid=partition leader epoch {value} is not one the leader-epoch-checkpoint allows at this offset "
            "(not covered by the CRC)"
        )
    return ""


def _batch_line(
    buf: memoryview, position: int, size: int, *, records: bool, result: DumpResult, header_problem: str = ""
) -> str:
    if size < ATTRIBUTES_OFFSET + 4:
        result.damaged += 1
        return f"position: {position} size: {size} crc=invalid invalid=batch shorter than its header"
    h = read_header(buf, position) if size >= 61 else None
    crc_ok = h is not None and crc32c.crc32c(buf[position + ATTRIBUTES_OFFSET : position + size]) == h.crc
    problem = ""
    try:
        validate_batch(buf, position, client=False, size=size)
    except (CorruptRecord, InvalidRecord) as exc:
        problem = f" invalid={exc.reason}"
        result.damaged += 1
    if header_problem and not problem:
        problem = header_problem
        result.damaged += 1
    if h is None:
        return f"position: {position} size: {size} crc=invalid{problem}"
    codec = Compression(h.compression).name.lower() if h.compression <= Compression.ZSTD else str(h.compression)
    ts_name = "LogAppendTime" if h.timestamp_type == TimestampType.LOG_APPEND_TIME else "CreateTime"
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
        f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
        f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
        f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
        f"position: {position} {ts_name}: {h.max_timestamp} size: {size} magic: {h.magic} "
        f"compresscodec: {codec} crc={'ok' if crc_ok else 'invalid'}{problem}"
        + (f" deleteHorizonMs: {h.base_timestamp}" if h.attributes & DELETE_HORIZON_MASK else "")
    )


def _record_lines(buf: memoryview, position: int, seg: _Segment) -> Iterator[str]:
    try:
        decoded = decode_records(buf, position)
        header = read_header(buf, position)
    except (CorruptRecord, InvalidRecord) as exc:
        yield f"| records not readable: {exc.reason}"
        return
    ts_name = "LogAppendTime" if header.timestamp_type == TimestampType.LOG_APPEND_TIME else "CreateTime"
    expected = header.base_offset
    for r in decoded:
        if r.offset > expected:
            yield f"| {seg.gap_line(expected, r.offset)}"
        expected = r.offset + 1
        payload = "" if r.value is None else r.value[:PAYLOAD_PREVIEW_BYTES].decode("utf-8", "backslashreplace")
        yield (
            f"| offset: {r.offset} {ts_name}: {r.timestamp} keySize: {-1 if r.key is None else len(r.key)} "
            f"valueSize: {-1 if r.value is None else len(r.value)} "
            f"headerKeys: [{','.join(h.key for h in r.headers)}] payload: {payload}"
        )
