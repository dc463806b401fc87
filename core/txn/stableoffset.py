"""The last stable offset (LSO) of one partition, and the aborted transactions a read_committed fetch carries
(docs/storage.md, "Idempotent producers and transactions"; Kafka's ``UnifiedLog.maybeIncrementFirstUnstableOffset``,
``fetchLastStableOffsetMetadata`` and ``LocalLog.addAbortedTransactions``).

Rules:

* the *first unstable offset* is the earliest first offset over the transactions that are open and those completed
  whose marker the HW has not passed yet, raised to at least the log start offset (a deleteRecords may cut a
  transaction in half); None when there is none;
* the LSO is the first unstable offset when it is below the HW, else the HW: never above the HW, and pinned on a
  transaction's first offset until its marker is below the HW;
* a TXN_COMMITTED fetch's aborted list holds the ``.txnindex`` entries overlapping ``[fetch offset, upper bound)``,
  where the upper bound is the offset index's first entry past the fetched bytes, else the next segment's base,
  else the LEO; the segments are asked from the fetch's on until one's search is complete.

The log recomputes :class:`StableOffsets` under its lock on every HW move, log start move, truncation and append
that opens or ends a transaction, and publishes it as one immutable value, so a reader on any thread sees a first
unstable offset and an LSO that belong together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from logfs.core.log.segment import LogSegment
from logfs.core.offsets import FetchDataInfo
from logfs.core.txn.index import collect_aborted
from logfs.core.txn.producerstate import ProducerStateManager


@dataclass(frozen=True, slots=True)
class StableOffsets:
    """The first unstable offset (None: every transaction is decided and replicated) and the LSO."""

    first_unstable_offset: int | None
    last_stable_offset: int


def stable_offsets(state: ProducerStateManager, high_watermark: int, log_start_offset: int) -> StableOffsets:
    """Forget the completed transactions the HW has passed, then derive both offsets. Writer thread."""
    state.on_high_watermark_updated(high_watermark)
    first_unstable = state.first_unstable_offset()
    if first_unstable is None:
        return StableOffsets(None, high_watermark)
    first_unstable = max(first_unstable, log_start_offset)
    return StableOffsets(first_unstable, min(first_unstable, high_watermark))


def with_aborted_transactions(
    bases: Sequence[int], segments: Sequence[LogSegment], fetched: FetchDataInfo, log_end_offset: int
) -> FetchDataInfo:
    """``fetched`` with the aborted transactions of its range (an empty tuple when it holds nothing). Any thread."""
    start = fetched.fetch_offset_metadata
    if not fetched.records or start.message_offset_only:
        return replace(fetched, aborted_transactions=())
    i = next((k for k, base in enumerate(bases) if base == start.segment_base_offset), None)
    if i is None:
        return replace(fetched, aborted_transactions=())
    found = segments[i].offset_index.fetch_upper_bound_offset(start.relative_position, len(fetched.records))
    if found is not None:
        upper = found.offset
    else:
        upper = bases[i + 1] if i + 1 < len(bases) else log_end_offset
    aborted = collect_aborted(segments[i:], start.message_offset, upper)
    return replace(fetched, aborted_transactions=tuple(aborted))
