"""The batches a read_committed reader never sees in a segment's stored bytes (control batches and those of aborted
transactions), as byte spans found by one walk of the batch headers: what committed ``.kafka`` views cut out
(``StoredBatches.kept_spans``, ``core/log/storedbatches.py``). The aborted-transaction filter is the log's, so its
application to stored bytes is too. Any thread (serialised by ``LeftOutBatches.lock``).
"""

from __future__ import annotations

import bisect
import threading
from typing import TYPE_CHECKING

from logfs.core.format.abortedbatches import AbortedBatches
from logfs.core.format.batch import ATTRIBUTES_OFFSET, CONTROL_MASK, TRANSACTIONAL_MASK, read_header

if TYPE_CHECKING:
    from logfs.core.log.storedbatches import StoredBatches

_ATTRIBUTES_LOW = ATTRIBUTES_OFFSET + 1  # the low byte of the big-endian attributes, which holds both flags
_TRANSACTIONAL_OR_CONTROL = TRANSACTIONAL_MASK | CONTROL_MASK


class LeftOutBatches:
    """Where the batches a read_committed reader never sees lie in one segment's ``.log`` (control batches and those
    of aborted transactions): what ``committed/…/*.kafka`` views cut out of the stored bytes (aborted-ness is a
    property of a whole batch, so they leave out whole batches). Found by one walk of the batch headers up to where
    views have needed, extended as they need more; kept as sorted byte spans (one per left-out batch: a control
    batch per transaction, so few). The filter rules are those of the mount's committed rendered-size indexes
    (``mount/render/segmentindex.py``). Any thread (serialised by ``lock``).
    """

    def __init__(self, stored: StoredBatches) -> None:
        self.stored = stored
        self.lock = threading.Lock()
        self.aborted = AbortedBatches(())
        self.aborted_until = -1
        self._scanned = 0  # batches below this byte position are walked
        self._generation = stored.generation  # the segment's truncations when the walk began
        self._starts: list[int] = []
        self._ends: list[int] = []

    def kept(self, lo: int, hi: int, aborted: AbortedBatches, until: int) -> list[tuple[int, int]]:
        """The byte spans of ``[lo, hi)`` (batch boundaries; every batch in it below offset ``until``) that hold
        batches a read_committed reader sees, given the aborted transactions below ``until``."""
        with self.lock:
            self._validate()
            if self.aborted_until >= 0 and not self.aborted.kept_in(
                aborted, self.stored.base_offset, min(until, self.aborted_until)
            ):
                self._start_over()  # an ABORT marker was truncated away (see SegmentIndex.admit)
            if until > self.aborted_until:
                self.aborted, self.aborted_until = aborted, until
            if hi > self._scanned:
                self._scan(hi)
            i = bisect.bisect_left(self._ends, lo + 1)  # the first left-out batch ending after lo
            spans: list[tuple[int, int]] = []
            at = lo
            while i < len(self._starts) and self._starts[i] < hi:
                if self._starts[i] > at:
                    spans.append((at, self._starts[i]))
                at = max(at, self._ends[i])
                i += 1
            if at < hi:
                spans.append((at, hi))
            return spans

    def _validate(self) -> None:
        if self.stored.generation != self._generation:  # truncated: walk again
            self._start_over()

    def _start_over(self) -> None:
        self._scanned, self._generation = 0, self.stored.generation
        self._starts.clear()
        self._ends.clear()
        self.aborted_until = -1

    def _scan(self, hi: int) -> None:
        aborted = self.aborted
        scanned = self._scanned
        for buf, at, size, position, _ in self.stored.batches(self._scanned, hi):
            # Only a transactional batch can be left out (control batches are transactional too): one byte decides
            # for all the others, so a segment without transactions costs the walk alone.
            if buf[at + _ATTRIBUTES_LOW] & _TRANSACTIONAL_OR_CONTROL and aborted.leaves_out(read_header(buf, at)):
                self._starts.append(position)
                self._ends.append(position + size)
            scanned = position + size
        self._scanned = scanned
