"""Producer batches in a request's runs (``core/log/appendruns.py``): idempotent and transactional batches join the
run their request writes, each checked against the producer state as the run's earlier batches of its producer
leave it; the files, offsets, duplicates, errors, producer state and LSO come out as one ``append_as_leader`` per
batch makes them, and such a request is written in runs, not batch by batch."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from logfs.core.config import LogConfig
from logfs.core.errors import ProducerError
from logfs.core.format.batch import Record
from logfs.core.format.compression import Compression
from logfs.core.format.encode import encode_batch
from logfs.core.log.appends import Appender
from logfs.core.log.handles import HandleCache
from logfs.core.log.loader import load_log
from logfs.core.log.log import Log
from logfs.core.offsets import AppendInfo

ROUNDS = int(os.environ.get("LOGFS_PRODUCER_RUNS_ROUNDS", "6"))


def new_log(directory: Path, config: LogConfig) -> Log:
    return load_log(directory, config, HandleCache(), had_clean_shutdown=True)


def producer_traffic(seed: int, count: int, now: int) -> list[bytes]:
    """Batches of three idempotent producers, one transactional one and plain ones, interleaved: sequences mostly in
    order, with retries (a batch sent again: a duplicate), gaps (out of sequence), an epoch bump (a restart) and an
    older epoch (fenced)."""
    rng = random.Random(seed)
    sequences = {7: 0, 8: 0, 9: 0, 10: 0}
    epochs = {7: 0, 8: 0, 9: 0, 10: 0}
    sent: list[bytes] = []
    out: list[bytes] = []
    for _ in range(count):
        n = rng.randint(1, 12)
        records = [Record(j, now - rng.randint(0, 2_000), b"k%d" % rng.randrange(50),
                          rng.randbytes(rng.randint(0, 900))) for j in range(n)]  # fmt: skip
        codec = rng.choice([Compression.NONE, Compression.NONE, Compression.LZ4])
        roll = rng.random()
        if roll < 0.2:
            out.append(encode_batch(records, compression=codec))
            continue
        if roll < 0.26 and sent:
            out.append(rng.choice(sent[-4:]))  # a retry of a recent batch
            continue
        pid = rng.choice([7, 8, 9, 10])
        sequence = sequences[pid]
        epoch = epochs[pid]
        advance = True
        if roll < 0.29:
            sequence += rng.randint(2, 5)  # a gap: out of sequence
            advance = False
        elif roll < 0.31:
            epochs[pid] = epoch = epoch + 1  # a restart: a new epoch from sequence 0
            sequence = 0
        elif roll < 0.32 and epoch > 0:
            epoch -= 1  # a zombie of the older epoch: fenced
            advance = False
        batch = encode_batch(records, compression=codec, producer_id=pid, producer_epoch=epoch, base_sequence=sequence,
                             is_transactional=pid == 10)  # fmt: skip
        if advance:
            sequences[pid] = sequence + n
        out.append(batch)
        sent.append(batch)
    return out


def requests(batches: list[bytes], seed: int) -> list[list[bytes]]:
    rng = random.Random(seed)
    out, at = [], 0
    while at < len(batches):
        n = rng.randint(1, 25)
        out.append(batches[at : at + n])
        at += n
    return out


def summary(infos: list[AppendInfo]) -> list[tuple[int, int, int, int, int, bool]]:
    return [(i.first_offset, i.last_offset, i.max_timestamp, i.records_count, i.size_bytes, i.duplicate) for i in infos]


def files(log: Log) -> dict[str, bytes]:
    log.close()
    return {p.name: p.read_bytes() for p in sorted(log.directory.iterdir()) if p.suffix != ".snapshot"}


def one_by_one(log: Log, request: list[bytes], now: int) -> tuple[list[AppendInfo], type[Exception] | None]:
    """The request as one append per batch, stopping at the first refusal (as a request does)."""
    infos = []
    for batch in request:
        try:
            infos.append(log.append_as_leader(bytearray(batch), 2, now))
        except ProducerError as exc:
            return infos, type(exc)
    return infos, None


@pytest.mark.parametrize("seed", range(ROUNDS))
@pytest.mark.parametrize(
    "config", [LogConfig(), LogConfig(segment_bytes=120_000, index_interval_bytes=2_000)], ids=["default", "rolls"]
)
def test_producer_batches_in_runs_store_what_one_append_per_batch_stores(
    tmp_path: Path, config: LogConfig, seed: int
) -> None:
    now = time.time_ns() // 1_000_000
    batches = producer_traffic(seed, 250, now)
    single = new_log(tmp_path / "single" / "t-0", config)
    multi = new_log(tmp_path / "multi" / "t-0", config)
    refusals = 0
    for request in requests(batches, seed + 100):
        want, want_error = one_by_one(single, request, now)
        got, error = multi.append_batches_as_leader([bytearray(b) for b in request], 2, now)
        assert summary(got) == summary(want)
        assert (type(error) if error is not None else None) is want_error
        refusals += want_error is not None
        assert multi.log_end_offset == single.log_end_offset
        assert multi.last_stable_offset == single.last_stable_offset
        assert multi.open_transactions() == single.open_transactions()
        for pid in (7, 8, 9, 10):
            assert multi.producer_state.last_entry(pid) == single.producer_state.last_entry(pid)
    assert refusals > 0  # the traffic did exercise the refusals
    assert files(multi) == files(single)


def test_an_idempotent_producers_request_is_written_in_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In-sequence batches of two idempotent producers and a transactional one: only the first batch of the empty
    segment goes alone; a retry of the request is all duplicates, each reported with its first append's offsets."""
    now = time.time_ns() // 1_000_000
    sequences = {1: 0, 2: 0, 3: 0}
    request = []
    for i in range(40):
        pid = 1 + i % 3
        records = [Record(j, now, b"k", b"v%d" % i) for j in range(3)]
        request.append(encode_batch(records, producer_id=pid, producer_epoch=0, base_sequence=sequences[pid],
                                    is_transactional=pid == 3))  # fmt: skip
        sequences[pid] += 3
    log = new_log(tmp_path / "t-0", LogConfig())
    alone = []
    real = Appender.one

    def counted(self: Appender, *args: object) -> AppendInfo:
        alone.append(args)
        return real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Appender, "one", counted)
    infos, error = log.append_batches_as_leader([bytearray(b) for b in request], 0, now)
    assert error is None and len(infos) == 40 and log.log_end_offset == 120
    assert len(alone) == 1
    assert log.open_transactions() == [(3, 6)]  # the transactional producer's first batch (the third: offsets 6-8)
    assert log.first_unstable_offset == 6  # the LSO, once the HW passes it
    retry, error = log.append_batches_as_leader([bytearray(b) for b in request[-5:]], 0, now)
    assert error is None and all(i.duplicate for i in retry)
    assert [i.first_offset for i in retry] == [i.first_offset for i in infos[-5:]]
    assert log.log_end_offset == 120
