"""How the checked batches of one leader append split into runs (``Log.append_batches_as_leader``): per-batch costs
paid once per run, the rules of a one-by-one append kept to the batch.

A *run* is a sequence of batches the log writes to its active segment at once: one ``pwritev``, the index entries in
one write each, the LEO published and the leader epoch recorded once (``LocalLog.append_parts``). Kafka appends a
produce request's whole MemoryRecords the same way. :func:`plan_runs` stamps each batch of a run in place (offsets
from the LEO, the leader epoch, maxTimestamp) and yields the run when it ends; a batch that must go alone is yielded
as it came, after the run before it, for the Log's one-batch append:

* a batch with a producer id (idempotent or transactional: Kafka clients since 3.0 are idempotent by default) joins
  the run when the idempotence and transaction rules pass it, checked against the producer state as the run's
  earlier batches of the same producer leave it (``Run.pending``: their updates, checked but not applied); the
  updates are applied in order once the run is stored, as the Log applies a lone batch's once its bytes are. A
  batch those rules refuse or find a duplicate goes alone after the run before it is stored, so the Log's
  one-batch append raises the same error or reports the same duplicate (Kafka's ``analyzeAndValidateProducerState``
  over a request, batch by batch in order);
* a batch that the roll rules (``LocalLog.should_roll``, asked with the run's bytes added to the segment's) would
  roll for: it starts the next segment, so rolls happen at exactly the batch a one-by-one append rolls at;
* the first batch of an empty segment (its time-based roll rule counts from that batch's timestamp), and a batch
  past the slots the indexes have left (a run cannot fill an index halfway).

The generator reads the log end offset again after each batch that went alone, so the Log must have appended it
before asking for the next step. Threads: the Log's writer, under its lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from logfs.core.errors import ProducerError
from logfs.core.format.batch import TimestampType, assign_offset_and_epoch, read_header, set_max_timestamp
from logfs.core.format.validate import RequestBatch, ValidBatch
from logfs.core.log.appendcheck import CheckedBatch
from logfs.core.log.epoch import LeaderEpochFileCache
from logfs.core.log.local import LocalLog
from logfs.core.log.producers import LogProducers
from logfs.core.log.segment import SegmentPart
from logfs.core.offsets import AppendInfo
from logfs.core.txn.producerentry import ProducerStateEntry, ProducerUpdate


@dataclass(slots=True)
class Run:
    """Stamped batches for one write to the active segment, with what each append will report once stored."""

    parts: list[SegmentPart] = field(default_factory=list)
    infos: list[AppendInfo] = field(default_factory=list)
    records: int = 0
    size: int = 0
    updates: list[ProducerUpdate] = field(default_factory=list)  # the producer batches', in order
    pending: dict[int, ProducerStateEntry] = field(default_factory=dict)  # producer id -> entry after its last batch


def append_request(
    checked: Sequence[RequestBatch],
    local: LocalLog,
    epoch_cache: LeaderEpochFileCache,
    append_one: Callable[[CheckedBatch, int, int], AppendInfo],
    producers: LogProducers,
    lso_moved: Callable[[], None],
    leader_epoch: int,
    now: int,
    log_append: bool,
) -> tuple[list[AppendInfo], Exception | None]:
    """Append a request's checked batches (``appendcheck.check_leader_request``) in runs, each lone batch through
    ``append_one`` (the Log's one-batch append); the appends done, and the error that stopped them (a run that
    fails to be written leaves nothing of itself; the runs before it stay). A run's producer updates are applied
    once it is stored, ``lso_moved`` called when one may have moved the LSO. The Log's writer, under its lock."""
    infos: list[AppendInfo] = []
    try:
        for step in plan_runs(checked, local, producers, leader_epoch, now, log_append):
            if isinstance(step, Run):
                local.append_parts(step.parts, step.records)
                infos.extend(step.infos)  # they count only once stored
                moved = [producers.apply(update, local.active_segment) for update in step.updates]
                if any(moved):
                    lso_moved()
                epoch_cache.assign(leader_epoch, step.infos[0].first_offset)
            else:
                infos.append(append_one(step, leader_epoch, now))
    except Exception as exc:
        return infos, exc
    return infos, None


def plan_runs(checked: Sequence[RequestBatch], local: LocalLog, producers: LogProducers, leader_epoch: int, now: int,
              log_append: bool) -> Iterator[Run | CheckedBatch]:  # fmt: skip
    """The runs and lone batches of ``checked``, in order (see the module docstring); ``log_append``: the topic
    stamps LOG_APPEND_TIME (as the config the batches were checked with says)."""
    run = Run()
    room = 0
    bounds = None
    next_offset = local.log_end_offset
    ts_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
    for batch in checked:
        data, size, last_delta, records, max_ts, producer_id, stamp = batch
        if log_append:
            max_ts = now
        last = next_offset + last_delta
        if not run.parts:  # the segment as it is now: the roll rules asked once for the whole run
            active = local.active_segment
            room = active.index_room() - 1 if active.size_bytes else 0
            bounds = local.roll_bounds(now)
        if (len(run.parts) >= room or bounds is None or bounds.rolls(run.size + size, max_ts, last)
                or (producer_id >= 0 and not _joined(run, producers, data, next_offset, max_ts))):  # fmt: skip
            if run.parts:
                yield run
                run = Run()
            yield data, ValidBatch(read_header(data, 0), 0, batch[4]), log_append
            next_offset = local.log_end_offset  # the Log appended it (or found it a duplicate)
            continue
        if stamp:
            set_max_timestamp(data, 0, size, ts_type, max_ts)
        assign_offset_and_epoch(data, 0, next_offset, leader_epoch)
        run.parts.append((data, last, max_ts, last))
        run.infos.append(AppendInfo(next_offset, last, max_ts, last, now if log_append else -1, records, size))
        run.records += records
        run.size += size
        next_offset = last + 1
    if run.parts:
        yield run


def _joined(run: Run, producers: LogProducers, data: bytes | bytearray | memoryview, first: int, max_ts: int) -> bool:
    """Whether a producer's batch at ``first`` joins ``run``: the producer rules pass it, against the state as the
    run's earlier batches leave it (its update then kept for when the run is stored)."""
    header = read_header(data, 0)
    try:
        found = producers.state.prepare_client_batch(header, first, max_ts, run.pending)
    except ProducerError:
        return False  # alone, after the run: the Log's one-batch append raises it
    if not isinstance(found, ProducerUpdate):
        return False  # a duplicate: reported by the one-batch append
    run.updates.append(found)
    run.pending[header.producer_id] = found.entry
    return True
