"""The child process of ``tests/core/log/test_crash.py``: appends to a store through the core until it is killed.

Run as ``python -u crash_writer.py STORE SEED``. It opens the store with :func:`store_config` of the seed, creates
topic ``crash`` (one partition) if needed, and appends :func:`planned_batch` 0, 1, 2 … as the leader, moving the
high watermark to the log end after each. Every few batches (:func:`flush_every`) it flushes the log and prints the
flushed log end offset as ``flushed <offset>`` (stdout, unbuffered); after every few flushes
(:func:`checkpoint_every`; never, for some seeds) it runs ``Store.tick`` on a clock that advances a checkpoint
interval per call, so the recovery point and HW checkpoints follow the flushes at a distance, as they do in Kafka,
and recovery has more than the last segment to scan. It never closes the store: the test kills it with SIGKILL.

Everything here is a function of the seed, so the test rebuilds the exact bytes every batch was stored as (the
leader stamps the base offset and the leader epoch; the CRC and the rest are the producer's). A safety limit ends
the child after ``MAX_BATCHES`` batches or ``MAX_SECONDS`` seconds if no one kills it.
"""

from __future__ import annotations

import random
import sys
import time

from logfs.core.configtext import parse_store_config
from logfs.core.format.batch import assign_offset_and_epoch
from logfs.core.format.compression import Compression
from logfs.core.format.encode import encode_values
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig
from logfs.core.storetasks import OFFSET_CHECKPOINT_INTERVAL_MS

TOPIC = "crash"
BASE_TIMESTAMP_MS = 1_700_000_000_000  # record timestamps: BASE + 10 ms per batch, CREATE_TIME
TIMESTAMP_STEP_MS = 10
MAX_BATCHES = 20_000
MAX_SECONDS = 20


def store_config_pairs(seed: int) -> list[str]:
    """The ``--config`` a seed runs with: small segments and indexes, so that a few hundred batches roll often (by
    size, by a full index and by time). Retention is off: the fake checkpoint clock must not expire anything."""
    rng = random.Random(f"config/{seed}")
    return [
        f"segment.bytes={rng.choice([1536, 4096, 8192])}",
        f"index.interval.bytes={rng.choice([0, 100, 512, 4096])}",
        f"segment.index.bytes={rng.choice([96, 480, 10 * 1024 * 1024])}",
        f"segment.ms={rng.choice([300, 7 * 24 * 3600 * 1000])}",
        "retention.ms=-1",
    ]


def store_config(seed: int) -> StoreConfig:
    return parse_store_config(store_config_pairs(seed))


def flush_every(seed: int) -> int:
    return random.Random(f"flush/{seed}").randint(2, 8)


def checkpoint_every(seed: int) -> int | None:
    """Flushes between two checkpoint writes; None: the checkpoints are never written (recovery from offset 0)."""
    return random.Random(f"checkpoint/{seed}").choice([1, 3, 6, None])


def planned_batch(seed: int, index: int) -> tuple[bytes, int, int]:
    """Batch ``index`` as the producer sends it, its leader epoch and its record count."""
    rng = random.Random(f"batch/{seed}/{index}")
    count = rng.randint(1, 5)
    values = [rng.randbytes(rng.choice([0, 1, 7, 40, 120])) for _ in range(count)]
    codecs = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
    codec = rng.choice([Compression.NONE] * 6 + codecs)
    epoch_length = 5 + seed % 30
    timestamp = BASE_TIMESTAMP_MS + index * TIMESTAMP_STEP_MS
    return encode_values(values, timestamp, compression=codec), index // epoch_length, count


def stored_batches(seed: int, end_offset: int) -> list[tuple[int, int, bytes]]:
    """``(first offset, leader epoch, stored bytes)`` of every planned batch that starts below ``end_offset``."""
    out = []
    offset = 0
    index = 0
    while offset < end_offset:
        batch, epoch, count = planned_batch(seed, index)
        stored = bytearray(batch)
        assign_offset_and_epoch(stored, 0, offset, epoch)
        out.append((offset, epoch, bytes(stored)))
        offset += count
        index += 1
    return out


def main(argv: list[str]) -> int:
    path, seed = argv[1], int(argv[2])
    every = flush_every(seed)
    checkpoints = checkpoint_every(seed)
    store = Store.open(path, store_config(seed))
    if not store.has_topic(TOPIC):
        store.create_topic(TOPIC, 1)
    log = store.log(TOPIC, 0)
    clock = BASE_TIMESTAMP_MS
    deadline = time.monotonic() + MAX_SECONDS
    for index in range(MAX_BATCHES):
        batch, epoch, _ = planned_batch(seed, index)
        log.append_as_leader(batch, epoch, now_ms=BASE_TIMESTAMP_MS + index * TIMESTAMP_STEP_MS)
        log.update_high_watermark(log.log_end_offset)
        if (index + 1) % every == 0:
            log.flush()
            print(f"flushed {log.log_end_offset}", flush=True)
            if checkpoints is not None and (index + 1) % (every * checkpoints) == 0:
                clock += OFFSET_CHECKPOINT_INTERVAL_MS + 1
                store.tick(clock)
        if time.monotonic() > deadline:
            break
    return 3  # not killed: the test failed to kill us


if __name__ == "__main__":
    sys.exit(main(sys.argv))
