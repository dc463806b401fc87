"""What the log cleaner knows of transactions while it walks a range of batches (Kafka's
``CleanedTransactionMetadata``, in LogCleaner.scala).

Fed the aborted transactions of the range (from the ``.txnindex`` files, ordered by first offset) and then every
batch in order, it answers for each batch whether it *can be discarded*:

* a data batch of a transaction that was aborted: yes (its producer's aborted transaction has begun by then and
  is still open), and the batch is *observed* for that transaction;
* any other data batch: no; a transactional one marks its producer's committed transaction observed;
* an ABORT marker: no if batches of its transaction were observed in this pass (then the aborted transaction is
  recorded again in the cleaned segment's ``.txnindex``), else yes;
* a COMMIT marker: yes unless a batch of its producer's transaction was observed in this pass;
* a control batch with no record (emptied by an earlier round): yes; a control record of another type: no.

A discardable marker is not dropped at once: the cleaner gives it a delete horizon first (``filtering.py``).
Because the cleaner never passes the last stable offset, every transaction it meets is decided.

Threads: one round's; not shared.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

from logfs.core.format.batch import BatchHeader
from logfs.core.format.control import ControlType
from logfs.core.txn.index import AbortedTxn


class CleanedTransactionMetadata:
    """See the module docstring. ``on_kept_abort`` receives each aborted transaction the cleaned segment keeps."""

    def __init__(self, on_kept_abort: Callable[[AbortedTxn], None] | None = None) -> None:
        self._aborted: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, tuple[AbortedTxn, bool]] = {}  # pid -> (txn, a batch was observed)
        self._serial = 0
        self.on_kept_abort = on_kept_abort

    def add_aborted_transactions(self, aborted: Iterable[AbortedTxn]) -> None:
        for txn in aborted:
            heapq.heappush(self._aborted, (txn.first_offset, self._serial, txn))
            self._serial += 1

    def _consume_aborted_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            _, _, txn = heapq.heappop(self._aborted)
            # Kafka's getOrElseUpdate: a transaction met again (each segment of a merge lists the transactions that
            # overlap it) keeps what was observed of it.
            self._ongoing_aborted.setdefault(txn.producer_id, (txn, False))

    def on_batch_read(self, header: BatchHeader) -> bool:
        """A data batch: whether it belongs to an aborted transaction (and may be discarded)."""
        self._consume_aborted_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        pid = header.producer_id
        ongoing = self._ongoing_aborted.get(pid)
        if ongoing is not None:
            self._ongoing_aborted[pid] = (ongoing[0], True)
            return True
        self._ongoing_committed.add(pid)
        return False

    def on_control_batch_read(self, header: BatchHeader, control_type: ControlType | int | None) -> bool:
        """A control batch (``control_type`` None when it has no record left): whether it may be discarded."""
        self._consume_aborted_up_to(header.last_offset)
        if control_type is None:
            return True
        pid = header.producer_id
        if control_type == ControlType.ABORT:
            ongoing = self._ongoing_aborted.pop(pid, None)
            if ongoing is not None and ongoing[1]:
                if self.on_kept_abort is not None:
                    self.on_kept_abort(ongoing[0])
                return False
            return True
        if control_type == ControlType.COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False
