"""How the checked batches of one leader append split into runs (``Log.append_batches_as_leader``): per-batch costs
paid once per run, the rules of a one-by-one append kept to the batch.

A *run* is a sequence of batches the log writes to its active segment at once: one ``pwritev``, the index entries in
one write each, the LEO published and the leader epoch recorded once (``LocalLog.append_parts``). Kafka appends a
produce request's whole MemoryRecords the same way. :func:`plan_runs` stamps each batch of a run in place (offsets
from the LEO, the leader epoch, maxTimestamp) and yields the run when it ends; a batch that must go alone is yielded
as it came, after the run before it, for the Log's one-batch append:

* a batch with a producer id: the idempotence and transaction rules check it against the producer state, which the
  batches before it of the same producer must have updated (the Log applies an update only once its bytes are
  stored);
* a batch that the roll rules (``LocalLog.should_roll``, asked with the run's bytes added to the segment's) would
  roll for: it starts the next segment, so rolls happen at exactly the batch a one-by-one append rolls at;
* the first batch of an empty segment (its time-based roll rule counts from that batch's timestamp), and a batch
  past the slots the indexes have left (a run cannot fill an index halfway).

The generator reads the log end offset again after each batch that went alone, so the Log must have appended it
before asking for the next step. Threads: the Log's writer, under its lock.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from logfs.core.format.batch import TimestampType, assign_offset_and_epoch, set_max_timestamp
from logfs.core.log.appendcheck import CheckedBatch
from logfs.core.log.local import LocalLog
from logfs.core.log.segment import SegmentPart
from logfs.core.offsets import AppendInfo


@dataclass(slots=True)
class Run:
    """Stamped batches for one write to the active segment, with what each append will report once stored."""

    parts: list[SegmentPart] = field(default_factory=list)
    infos: list[AppendInfo] = field(default_factory=list)
    records: int = 0
    size: int = 0


def plan_runs(checked: Sequence[CheckedBatch], local: LocalLog, leader_epoch: int, now: int
              ) -> Iterator[Run | CheckedBatch]:  # fmt: skip
    """The runs and lone batches of ``checked``, in order (see the module docstring)."""
    run = Run()
    room = 0
    next_offset = local.log_end_offset
    for batch in checked:
        data, valid, log_append = batch
        header = valid.header
        size = header.size
        max_ts = now if log_append else valid.max_timestamp
        last = next_offset + header.last_offset_delta
        if not run.parts:
            active = local.active_segment
            room = active.index_room() - 1 if active.size_bytes else 0
        if header.producer_id >= 0 or len(run.parts) >= room or local.should_roll(run.size + size, max_ts, last, now):
            if run.parts:
                yield run
                run = Run()
            yield batch
            next_offset = local.log_end_offset  # the Log appended it (or found it a duplicate)
            continue
        ts_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
        set_max_timestamp(data, 0, size, ts_type, max_ts)
        assign_offset_and_epoch(data, 0, next_offset, leader_epoch)
        run.parts.append((data, last, max_ts, last))
        run.infos.append(
            AppendInfo(next_offset, last, max_ts, last, now if log_append else -1, header.records_count, size)
        )
        run.records += header.records_count
        run.size += size
        next_offset = last + 1
    if run.parts:
        yield run
