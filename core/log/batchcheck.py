"""The read-side check of stored batches: every batch served to a client passes its framing and CRC-32C first.

Why (issue 16; docs/storage.md, "Storage faults"). A sector that rots, or a page the kernel dropped after a failed
fsync, must never reach a client as records: ``cat``, Spark and a follower would take the bad bytes for data (a
``.kafka`` reader might check the CRC; a text reader cannot). Every read that renders stored batches (text, ``.jsonl``
and ``.kafka`` under ``at/``, ``hw/``, ``committed/``, ``follow/``, and a follower's fetch answers) passes its buffer
through :func:`check_batches` first; a batch that fails fails the read with
:class:`~logfs.core.errors.CorruptStoredBatch` (EIO through the mount), counted and logged with segment and
position by the store's failure channel (``core/logdirfailure.py``).

What is checked per batch: the declared length (at least Kafka's 14 bytes, the batch within the span read), magic
2, and the CRC-32C of the bytes after the CRC field (the crc32c package's C function: ~23 GB/s, so the cost is the
per-batch call, ~0.3 µs). The record walk is the renderer's; the CRC covers those bytes. Then the header fields the
CRC does not cover (issue 23, :func:`scan_python`): base offsets that rise from batch to batch within the bounds the
partition gives (:meth:`Log.read_bounds <logfs.core.log.log.Log.read_bounds>`: the segment's base, the offset
index, the next segment or the log end offset) and leader epochs the epoch cache allows; header fields only, no
per-record cost. docs/storage.md, "Header fields outside the CRC", states the rule and its limit.

Every batch that lies whole in what a read reads is checked, on every read: a disk may hand back different bytes on
a re-read (a flaky sector, a transport that flips bits), so a verdict on earlier bytes does not stand for bytes read
now. What the verdict cache (:class:`VerifiedRanges`, one per ``.log``: byte ranges whose batches passed, their ends
batch boundaries) saves is reading whole the batches a read only touches. A ``.kafka`` view is read at arbitrary
offsets (128 KiB at a time by the kernel), and a batch can only be checked whole: :func:`read_checked` reads the
batch that crosses the end of a read whole once, and the next reads, which start inside it, trust its verdict
instead of reading it whole again — so a sequential reader of 1 MiB batches reads each byte about twice (in its
window and in its whole batch), not eight times.

The limit this leaves (issue 16's "honest rule", docs/storage.md "Storage faults"): bytes a ``.kafka`` read serves
on an earlier read's verdict instead of a check of its own are (1) the part of the batch crossing the read's end
when that batch is larger than REREAD_BYTES and the cache holds it whole, and (2) the part of the batch the read
starts in when no batch boundary is known within REREAD_BYTES before the read (the offset index has an entry every
``index.interval.bytes``) and the cache holds that batch. A bit that flips between two reads there is served.
Bytes below a segment's published size never change while its ``LogFile`` lives — appends go past the end, the
cleaner and recovery build new files — except by a truncation, which clears the cache (``LogFile.truncate_to``);
so it holds for the active segment too. The text renderings need no cache of their own: the view's render cache
keeps what was rendered.

Any thread.
"""

from __future__ import annotations

import bisect
import struct
import threading
import weakref
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

import crc32c as _crc32c

from logfs.core.cext import CEXT, USE_CEXT
from logfs.core.errors import CorruptStoredBatch
from logfs.core.format.batch import (
    ATTRIBUTES_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    MIN_DECLARED_BATCH_BYTES,
    RECORD_BATCH_OVERHEAD,
)
from logfs.core.format.varint import INT32_MAX, INT64_MAX

if TYPE_CHECKING:
    from logfs.core.log.logfile import LogFile
    from logfs.core.log.segment import LogSegment

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc: the 21 bytes before what the CRC covers.
_HEAD = struct.Struct(">qiibI")
assert _HEAD.size == ATTRIBUTES_OFFSET
_crc = _crc32c.crc32c

# More ranges than this in one file (a random reader) and the cache starts over: its memory stays bounded.
MAX_RANGES = 4096
# How far before a .kafka read read_checked goes back to a batch boundary, to check the batch the read starts in.
REREAD_BYTES = 64 * 1024


class VerifiedRanges:
    """Byte ranges of one ``.log`` whose batches passed :func:`check_batches`: a flat sorted list of boundaries,
    ``[b0, b1), [b2, b3), …``, disjoint and not adjacent (adjacent ranges merge). Any thread."""

    __slots__ = ("_bounds", "_lock")

    def __init__(self) -> None:
        self._bounds: list[int] = []
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._bounds) // 2

    def covers(self, lo: int, hi: int) -> bool:
        """Whether ``[lo, hi)`` lies inside one checked range."""
        bounds = self._bounds
        i = bisect.bisect_right(bounds, lo)
        return i % 2 == 1 and hi <= bounds[i]

    def containing(self, position: int) -> tuple[int, int] | None:
        """The checked range holding byte ``position``, or None."""
        bounds = self._bounds
        i = bisect.bisect_right(bounds, position)
        return (bounds[i - 1], bounds[i]) if i % 2 == 1 else None

    def boundary_at_or_below(self, position: int) -> int:
        """The largest range end point at or below ``position`` (a batch boundary), or -1."""
        bounds = self._bounds
        i = bisect.bisect_right(bounds, position)
        return bounds[i - 1] if i else -1

    def add(self, lo: int, hi: int) -> None:
        """Record that the batches of ``[lo, hi)`` (batch boundaries) passed."""
        if hi <= lo:
            return
        with self._lock:
            bounds = self._bounds
            if len(bounds) >= 2 * MAX_RANGES:
                bounds.clear()
            i = bisect.bisect_left(bounds, lo)
            j = bisect.bisect_right(bounds, hi)
            new: list[int] = []
            if i % 2 == 0:
                new.append(lo)  # lo is outside every range (or the start of one): it starts the merged range
            if j % 2 == 0:
                new.append(hi)
            bounds[i:j] = new

    def clear(self) -> None:
        """Forget every verdict (the file was truncated)."""
        with self._lock:
            self._bounds.clear()


def check_batches(
    log_file: LogFile, buf: bytes | bytearray | memoryview, position: int, span_end: int, min_base: int | None = None
) -> int | None:
    """Check the whole batches at the start of ``buf`` (the bytes of ``log_file`` from ``position``, a batch
    boundary); a batch cut short by the end of ``buf`` but within ``span_end`` (the end of the span the caller reads,
    a batch boundary) is left for the caller's next read. CorruptStoredBatch for a batch that fails; what passes is
    recorded in the file's verdict cache. ``min_base``: what the caller knows the first base offset is at least (the
    previous read's answer plus one). Returns the last offset of the batches that passed (None for none), for the
    caller's next read."""
    if not buf:
        return None
    at, last = _check(log_file, memoryview(buf), position, span_end, min_base)
    return last if at else None


# What scan_python (and the compiled check_stored) found: (where it stopped, a kind, a value, a last offset).
OK, BAD_FRAMING, BAD_MAGIC, BAD_CRC, BAD_OFFSETS, BAD_EPOCH = 0, 1, 2, 3, 4, 5
Scan = Callable[[memoryview, int, int, int, int, int, bytes], tuple[int, int, int, int]]
NO_OFFSET_BOUND = INT64_MAX
_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_AT = ATTRIBUTES_OFFSET + 2  # lastOffsetDelta follows the 2-byte attributes
_EPOCH_ENTRY = struct.Struct("=qq")  # (start offset, epoch): the packed leader-epoch cache a scan is given


def pack_epochs(entries: Sequence[tuple[int, int]]) -> bytes:
    """The leader-epoch cache ``(epoch, start_offset)`` entries (oldest first), packed as scan takes them."""
    return b"".join(_EPOCH_ENTRY.pack(start, epoch) for epoch, start in entries)


def scan_python(
    view: memoryview,
    position: int,
    span_end: int,
    min_base: int = 0,
    first_max_last: int = NO_OFFSET_BOUND,
    max_last: int = NO_OFFSET_BOUND,
    epochs: bytes = b"",
) -> tuple[int, int, int, int]:
    """The reference walk of the check: ``(at, kind, value, last)`` — ``at`` where it stopped (the end of the last
    whole batch in ``view`` when kind is OK, else the bad batch), ``kind`` OK, BAD_FRAMING (value: the declared
    length), BAD_MAGIC (value: the magic), BAD_CRC, BAD_OFFSETS (value: the base offset) or BAD_EPOCH (value: the
    leader epoch); ``last`` the last offset of the last batch that passed (``min_base - 1`` when none did).

    The header fields the CRC does not cover (issue 23, point 5), per batch, after its CRC: the base offset at least
    ``min_base`` for the first batch and above the previous batch's last offset for the others (a gap is fine, going
    back or overlapping is not), the last offset (base + lastOffsetDelta) not below the base, at most ``max_last``,
    and for the first batch at most ``first_max_last``; the partition leader epoch at least -1 (no epoch) and, when
    ``epochs`` (:func:`pack_epochs`) is not empty, at most the epoch the cache gives the base offset (its last entry
    starting at or below it; the first entry's below the first start). ``core/cext/storedcheck.c`` is the same
    walk in C."""
    at = 0
    end = len(view)
    last = min_base - 1
    n_epochs = len(epochs) // _EPOCH_ENTRY.size
    k = 0  # the epoch entry of the current base offset: bases only rise, so the walk only moves forward
    first = True
    while at + LOG_OVERHEAD <= end:
        if at + ATTRIBUTES_OFFSET <= end:
            base, length, epoch, magic, crc = _HEAD.unpack_from(view, at)
        else:  # not even the header in this buffer: only its length is known, and the batch is read next
            length, magic, crc = int.from_bytes(view[at + 8 : at + 12], "big", signed=True), MAGIC, -1
            base = epoch = 0
        size = length + LOG_OVERHEAD
        if length < MIN_DECLARED_BATCH_BYTES or position + at + size > span_end:
            return at, BAD_FRAMING, length, last
        if at + size > end:
            break  # a whole batch, only not all in this buffer: the caller reads it next
        if magic != MAGIC:
            return at, BAD_MAGIC, magic, last
        if _crc(view[at + ATTRIBUTES_OFFSET : at + size]) != crc:
            return at, BAD_CRC, 0, last
        if size < RECORD_BATCH_OVERHEAD:  # a CRC that passes over less than a v2 header: no lastOffsetDelta to read
            return at, BAD_FRAMING, length, last
        batch_last = base + _LAST_DELTA.unpack_from(view, at + _LAST_DELTA_AT)[0]
        if base <= last or batch_last < base or batch_last > max_last or (first and batch_last > first_max_last):
            return at, BAD_OFFSETS, base, last
        if epoch < -1:
            return at, BAD_EPOCH, epoch, last
        if n_epochs and epoch >= 0:
            while k + 1 < n_epochs and _EPOCH_ENTRY.unpack_from(epochs, (k + 1) * _EPOCH_ENTRY.size)[0] <= base:
                k += 1
            if epoch > _EPOCH_ENTRY.unpack_from(epochs, k * _EPOCH_ENTRY.size)[1]:
                return at, BAD_EPOCH, epoch, last
        last = batch_last
        first = False
        at += size
    return at, OK, 0, last


# The compiled walk when built, under the compiled helpers' one switch (logfs.core.cext.USE_CEXT: LOGFS_NO_CEXT=1
# selects the reference), read in that one place.
scan_compiled: Scan | None = CEXT.check_stored if CEXT is not None and hasattr(CEXT, "check_stored") else None
scan: Scan = scan_compiled if scan_compiled is not None and USE_CEXT else scan_python


class ReadBounds(NamedTuple):
    """What a check of a run of batches starting at a byte of a segment may assume (see :func:`scan_python`)."""

    min_base: int
    first_max_last: int
    max_last: int
    epochs: bytes


class BoundsSource(Protocol):
    """A partition that tells a check the bounds of its segments' batches (``core/log/log.py``'s Log)."""

    def read_bounds(self, segment_base: int, log_file: LogFile, position: int) -> ReadBounds: ...

    @property
    def read_lock(self) -> AbstractContextManager[object]: ...


# The partition of each open directory: a check of a segment's bytes asks its partition for offset and epoch bounds.
_sources: weakref.WeakValueDictionary[Path, BoundsSource] = weakref.WeakValueDictionary()


def register(directory: Path, source: BoundsSource) -> None:
    """Let checks of the ``.log`` files in ``directory`` ask ``source`` for their bounds (the Log, when opened)."""
    _sources[directory] = source


def segment_base_of(log_file: LogFile) -> int:
    """The base offset a ``.log`` file's name carries (``<20 digits>.log``, or a cleaner's ``.cleaned``/``.swap``)."""
    try:
        return int(log_file.path.name.split(".", 1)[0])
    except ValueError:
        return 0


def _bounds(log_file: LogFile, position: int) -> tuple[ReadBounds, BoundsSource | None]:
    base = segment_base_of(log_file)
    source = _sources.get(log_file.path.parent)
    if source is None:  # a file no open partition owns (a tool, a test): the segment's own invariants only
        return ReadBounds(base, NO_OFFSET_BOUND, base + INT32_MAX, b""), None
    return source.read_bounds(base, log_file, position), source


def _check(log_file: LogFile, view: memoryview, position: int, span_end: int, min_base: int | None = None) -> tuple[
    int, int
]:  # fmt: skip
    """The check of :func:`check_batches`; returns where the last whole batch in ``view`` ends and the last offset
    of the batches that passed. ``min_base``: a lower bound on the first batch's base offset the caller knows (the
    batch before it ended below it)."""
    bounds, source = _bounds(log_file, position)
    lower = bounds.min_base if min_base is None else max(min_base, bounds.min_base)
    at, kind, value, last = scan(view, position, span_end, lower, bounds.first_max_last, bounds.max_last, bounds.epochs)
    if kind in (BAD_OFFSETS, BAD_EPOCH) and source is not None:
        # The log end offset and the epoch cache follow an append's bytes (core/log/local.py, core/log/log.py): a
        # batch read in between exceeds them. Under the log's lock that append has finished: look again.
        with source.read_lock:
            bounds = source.read_bounds(segment_base_of(log_file), log_file, position)
        lower = bounds.min_base if min_base is None else max(min_base, bounds.min_base)
        at, kind, value, last = scan(
            view, position, span_end, lower, bounds.first_max_last, bounds.max_last, bounds.epochs
        )
    if kind == BAD_FRAMING:
        raise _corrupt(log_file, position + at, f"declares {value} bytes (framing: outside its segment's span)")
    if kind == BAD_MAGIC:
        raise _corrupt(log_file, position + at, f"has magic {value}, not {MAGIC}")
    if kind == BAD_CRC:
        raise _corrupt(log_file, position + at, "fails its CRC-32C")
    if kind == BAD_OFFSETS:
        batch_last = value + _LAST_DELTA.unpack_from(view, at + _LAST_DELTA_AT)[0]
        if at == 0:
            limit = f"[{lower}, {min(bounds.max_last, bounds.first_max_last)}]"
            where = "the offsets its segment, the offset index and the log end offset allow"
        else:  # the damage may be this batch's base offset or the one before it: name both
            before = _previous_batch(view, at)
            limit = f"[{last + 1}, {bounds.max_last}]"
            where = f"the batch before it, at byte {position + before}, ends at {last}"
        raise _corrupt(
            log_file, position + at, f"has offsets {value}..{batch_last}, outside {limit} ({where}: the base offset "
            "is not covered by the CRC)"
        )  # fmt: skip
    if kind == BAD_EPOCH:
        raise _corrupt(
            log_file, position + at, f"has partition leader epoch {value}, which the leader-epoch cache does not "
            "allow at its offset (the epoch is not covered by the CRC)"
        )  # fmt: skip
    if position + at <= log_file.size_bytes:  # else a truncation cut these bytes while they were checked
        log_file.verified.add(position, position + at)
    return at, last


def check_left_out(source: BoundsSource, segment: LogSegment, position: int, base: int, last_offset: int) -> None:
    """A batch a read leaves out because its base offset is at or past the read's end (a fetch's, a view's) must
    still lie within its segment's bounds: a base offset flipped upward would otherwise end the read early, silently
    (issue 23). CorruptStoredBatch when it does not; an append whose bytes came before its log end offset is waited
    for under the log's lock, as in :func:`_check`. Any thread."""
    log_file = segment.log_file
    bounds = source.read_bounds(segment.base_offset, log_file, position)
    if base <= last_offset <= bounds.max_last:
        return
    with source.read_lock:
        bounds = source.read_bounds(segment.base_offset, log_file, position)
    if base <= last_offset <= bounds.max_last:
        return
    raise _corrupt(
        log_file, position, f"has offsets {base}..{last_offset}, past {bounds.max_last}, the last its segment and the "
        "log end offset allow (the base offset is not covered by the CRC)"
    )  # fmt: skip


def _previous_batch(view: memoryview, at: int) -> int:
    """The position in ``view`` of the batch that ends at ``at`` (the walk passed every batch before it)."""
    before = position = 0
    while position < at:
        before = position
        position += int.from_bytes(view[position + 8 : position + 12], "big", signed=True) + LOG_OVERHEAD
    return before


def _corrupt(log_file: LogFile, position: int, reason: str) -> CorruptStoredBatch:
    return log_file.failure_channel.corrupt_batch(log_file.path, position, reason)


def check_span(
    log_file: LogFile, buf: bytes | bytearray | memoryview, position: int, min_base: int | None = None
) -> int:
    """Check ``buf``, the whole batches of ``log_file`` from ``position``: every one passes, none is cut short.
    Returns the last offset of the last batch (``min_base`` as in :func:`check_batches`)."""
    done, last = _check(log_file, memoryview(buf), position, position + len(buf), min_base)
    if done != len(buf):
        raise _corrupt(log_file, position + done, "is cut short by the end of its span (framing)")
    return last


def read_checked(segment: LogSegment, lo: int, hi: int, at: int, size: int) -> bytes:
    """``size`` bytes of ``segment``'s ``.log`` from ``at`` — inside ``[lo, hi)``, a span of whole batches, at any
    byte — once the batches they touch passed (a ``.kafka`` view's read at an arbitrary offset, as the kernel asks).

    Every batch that lies whole in what is read is checked. The read starts at the nearest known batch boundary at
    or below ``at`` (a checked range's end point, the offset index's entry, or ``lo``) when that is at most
    REREAD_BYTES back; further back (``at`` deep inside a large batch), it starts at ``at`` when the verdict cache
    holds the batch there, and checks from the next indexed boundary on. The batch that crosses the end of the read
    is read whole and checked unless the cache holds it: a sequential reader's next read starts in it, so a large
    batch is read whole once, not once per read."""
    log_file = segment.log_file
    end = min(at + size, hi)
    if end <= at:
        return b""
    verified = log_file.verified
    start = max(lo, verified.boundary_at_or_below(at), _indexed_at_or_below(segment, at))
    check_from = start
    if at - start > REREAD_BYTES and verified.containing(at) is not None:
        start = at  # the batch holding ``at`` passed whole before; check what starts after it
        following = segment.offset_index.position_at_or_above(at)
        check_from = following if following is not None and following < end else end
    buf = log_file.read(start, end - start)
    if len(buf) != end - start:
        return buf[at - start :]  # the caller reports bytes that are not there
    done = check_from
    carried: int | None = None
    if check_from < end:
        checked, last = _check(log_file, memoryview(buf)[check_from - start :], check_from, hi)
        done += checked
        carried = last + 1 if checked else None
    if done < end:  # the last batch crosses the end of the read
        known = verified.containing(done)
        head = buf[done - start : done - start + LOG_OVERHEAD]  # _check passed its framing: its length is known
        if len(head) < LOG_OVERHEAD:
            head = log_file.read(done, LOG_OVERHEAD)
        length = int.from_bytes(head[8:12], "big", signed=True) if len(head) == LOG_OVERHEAD else 0
        # Read whole and checked unless the cache holds it and it is large: a batch of up to REREAD_BYTES is
        # checked on the bytes served by every read (the module docstring's limit).
        if known is None or known[1] < end or length + LOG_OVERHEAD <= REREAD_BYTES:
            check_span(log_file, log_file.read(done, max(length, 0) + LOG_OVERHEAD), done, carried)
    return buf[at - start :]


def _indexed_at_or_below(segment: LogSegment, position: int) -> int:
    """The position of the offset index's last entry at or below ``position`` (a batch boundary), or 0."""
    return segment.offset_index.position_at_or_below(position)
