"""Which stored batches a read_committed reader never sees: the filter the committed renderings and views apply.

Kafka's read_committed consumer drops the batches of aborted transactions using the aborted-transaction list a fetch
returns (``FetchResponse.abortedTransactions``, from the ``.txnindex`` files); logfs does the same for its
``committed/`` views, one test per batch made before any of its records is walked.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from logfs.core.format.batch import BatchHeader
from logfs.core.txn.index import AbortedTxn


class AbortedBatches:
    """Which stored batches a read_committed reader never sees, besides control batches: a transactional batch whose
    producer has an aborted transaction ``(producer_id, first_offset, last_offset = ABORT marker offset)`` with
    ``first_offset <= base offset <= last_offset`` (a producer has one transaction open at a time, so the batches
    between its first offset and its marker are that transaction's).

    Built from the aborted transactions of a range (``Log.collect_aborted_transactions``), it is right for the
    batches of that range: complete there, and an extra transaction (one outside the range) only ever covers its own
    batches. So a filter collected for a larger range leaves every batch of the smaller one as it was, which is what
    lets an index built with the one be extended with the other. Immutable; any thread.
    """

    __slots__ = ("_by_producer", "_lasts", "_min_first_after", "_set", "transactions")

    def __init__(self, aborted: Sequence[AbortedTxn]) -> None:
        self._set = frozenset(aborted)
        self.transactions = tuple(sorted(self._set, key=lambda t: (t.last_offset, t.producer_id)))
        by_producer: dict[int, tuple[list[int], list[int]]] = {}
        for t in sorted(self.transactions, key=lambda t: (t.producer_id, t.first_offset)):
            firsts, lasts = by_producer.setdefault(t.producer_id, ([], []))
            firsts.append(t.first_offset)
            lasts.append(t.last_offset)
        self._by_producer = by_producer
        # For touches(): marker offsets ascending, and the least first offset of the transactions from each on.
        self._lasts = [t.last_offset for t in self.transactions]
        least = [0] * len(self.transactions)
        running: int | None = None
        for i in range(len(self.transactions) - 1, -1, -1):
            first = self.transactions[i].first_offset
            running = first if running is None else min(running, first)
            least[i] = running
        self._min_first_after = least

    def __bool__(self) -> bool:
        return bool(self.transactions)

    def __len__(self) -> int:
        return len(self.transactions)

    def __repr__(self) -> str:
        return f"AbortedBatches({list(self.transactions)!r})"

    def touches(self, lo: int, hi: int) -> bool:
        """Does any of these transactions overlap offsets ``[lo, hi)`` (so that it may cover a batch there)?
        O(log n)."""
        i = bisect.bisect_left(self._lasts, lo)
        return i < len(self._lasts) and self._min_first_after[i] < hi

    def kept_in(self, other: AbortedBatches, lo: int, hi: int) -> bool:
        """Is every one of these transactions that overlaps ``[lo, hi)`` in ``other`` too? False means the log lost
        an ABORT marker in between (a truncation): what was built with this filter is stale."""
        start = bisect.bisect_left(self._lasts, lo)
        return all(t in other._set for t in self.transactions[start:] if t.first_offset < hi)

    def covers(self, header: BatchHeader) -> bool:
        """Is the batch of ``header`` (not a control batch) one of an aborted transaction?"""
        if not header.is_transactional:
            return False
        found = self._by_producer.get(header.producer_id)
        if found is None:
            return False
        firsts, lasts = found
        i = bisect.bisect_right(firsts, header.base_offset) - 1
        return i >= 0 and header.base_offset <= lasts[i]

    def leaves_out(self, header: BatchHeader) -> bool:
        """Does a read_committed reader skip this batch: a control batch, or one this filter covers?"""
        return header.is_control or self.covers(header)
