"""Test oracle: what a read_committed consumer keeps of a fetch (Kafka's ``CompletedFetch.nextFetchedRecord`` filter).

Input: the fetched batches (raw bytes, whole batches; a cut last batch is ignored) and the aborted transactions the
fetch returned (``FetchDataInfo.aborted_transactions``). Rule, as Kafka's consumer applies it (its ``CompletedFetch``):

* before each batch with a producer id, every aborted transaction whose first offset is at or below the batch's last
  offset joins the set of aborted producers (the list is consumed in first-offset order);
* an ABORT marker removes its producer from the set (its aborted transaction ends there);
* a transactional batch whose producer is in the set is skipped;
* control batches are never returned.

Everything else (committed transactional records and plain records) is yielded in offset order. Pure: no I/O. The
product never filters records this way (its ``committed/`` views leave out whole batches:
``core/format/abortedbatches.py``); the tests check the core's read_committed answers and those views against it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator

from logfs.core.format.batch import Record, iter_batch_positions, read_header
from logfs.core.format.control import ControlType
from logfs.core.format.decode import decode_records
from logfs.core.txn.index import AbortedTxn
from logfs.core.txn.producerentry import read_marker


def committed_records(data: bytes | bytearray | memoryview, aborted: Iterable[AbortedTxn]) -> Iterator[Record]:
    """The records of ``data`` a read_committed consumer sees, given the fetch's aborted transactions."""
    pending = [(t.first_offset, t.producer_id) for t in aborted]
    heapq.heapify(pending)
    aborted_producers: set[int] = set()
    for position, _size in iter_batch_positions(data):
        h = read_header(data, position)
        if h.producer_id >= 0:
            while pending and pending[0][0] <= h.last_offset:
                aborted_producers.add(heapq.heappop(pending)[1])
        if h.is_control:
            if h.producer_id >= 0 and read_marker(data, position).control_type == ControlType.ABORT:
                aborted_producers.discard(h.producer_id)
            continue
        if h.is_transactional and h.producer_id in aborted_producers:
            continue
        yield from decode_records(data, position)
