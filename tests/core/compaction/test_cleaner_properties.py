"""Property tests of the cleaner (hypothesis): any sequence of keyed writes, tombstones, committed and aborted
transactions, rolls and cleans (with the clock moving past ``delete.retention.ms`` now and then) keeps a log whose

* latest value per key (aborted records left out, as a read_committed consumer leaves them) equals a dict model of
  what was written (a key whose last write was a tombstone has no value, or its tombstone);
* every surviving record is byte for byte the record written at its offset (key, value, headers, timestamp);
* read at any offset (Kafka's fetch, ``Log.read``) starts at the batch holding the next surviving offset;
* and which reloads (after an unclean stop) to the same records.

Each clean fsyncs its segment and its directory several times, so an example costs ~0.1-1 s on a busy disk: CI
runs ``LOGFS_CLEANER_PROPERTY_EXAMPLES`` examples (default 12).
"""

from __future__ import annotations

import os

from compaction_log import TP, OneLogStore, compact_config, open_log, records
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logfs.core.format.batch import Record, iter_batch_positions, read_header
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_batch
from logfs.core.log.cleaner.logcleaner import LogCleaner
from logfs.core.offsets import Isolation

DAY_MS = 86_400_000
T0 = 1_700_000_000_000
KEYS = [b"a", b"b", b"c", b"d", b"e"]

values = st.one_of(st.none(), st.binary(min_size=0, max_size=8))
writes = st.lists(st.tuples(st.sampled_from(KEYS), values), min_size=1, max_size=3)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), writes),
        st.tuples(st.just("txn"), st.lists(writes, min_size=1, max_size=2), st.booleans()),
        st.tuples(st.just("roll")),
        st.tuples(st.just("clean"), st.integers(0, 2 * DAY_MS)),
    ),
    min_size=1,
    max_size=20,
)


EXAMPLES = int(os.environ.get("LOGFS_CLEANER_PROPERTY_EXAMPLES", "12"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_cleaning_keeps_the_latest_value_per_key(tmp_path_factory, ops) -> None:  # type: ignore[no-untyped-def]
    directory = tmp_path_factory.mktemp("prop") / "topic-0"
    log = open_log(directory, compact_config(segment_bytes=400))
    store = OneLogStore(directory.parent, partitions={TP: log})
    cleaner = LogCleaner(store, map_memory=1 << 20)
    model: dict[bytes, bytes | None] = {}
    written: dict[int, Record] = {}
    aborted: set[int] = set()
    now = T0
    seq = 0

    def append(batch: bytes) -> list[Record]:
        info = log.append_as_leader(bytearray(batch), 0, now_ms=now)
        log.update_high_watermark(log.log_end_offset)
        got = [r for r in records(log) if info.first_offset <= r.offset <= info.last_offset]
        for r in got:
            written[r.offset] = r
        return got

    for op in ops:
        if op[0] == "put":
            append(encode_batch([Record(i, now + i, k, v) for i, (k, v) in enumerate(op[1])]))
            model.update(op[1])
        elif op[0] == "txn":
            for batch in op[1]:
                got = append(encode_batch(
                    [Record(i, now, k, v) for i, (k, v) in enumerate(batch)], producer_id=7, producer_epoch=0,
                    base_sequence=seq, is_transactional=True,
                ))  # fmt: skip
                seq += len(batch)
                if op[2]:
                    model.update(batch)
                else:
                    aborted.update(r.offset for r in got)
            log.append_end_txn_marker(7, 0, commit=op[2], coordinator_epoch=0, leader_epoch=0, now_ms=now)
            log.update_high_watermark(log.log_end_offset)
        elif op[0] == "roll":
            if log.active_segment.size_bytes:
                log.roll()
        else:
            now += op[1]
            cleaner.clean_log(log, now)

    surviving = [r for r in records(log) if r.offset in written]
    for r in surviving:
        assert r == written[r.offset]
    latest: dict[bytes, bytes | None] = {}
    for r in surviving:
        if r.offset not in aborted and r.key is not None:
            latest[r.key] = r.value
    for key in KEYS:
        if key not in model:
            assert key not in latest
        elif model[key] is None:
            assert latest.get(key) is None
        else:
            assert latest[key] == model[key]

    all_records = records(log)
    for offset in range(log.log_start_offset, log.log_end_offset):
        # Kafka's fetch: from the first batch whose last offset is at or past the offset (an emptied batch may be
        # all a read gets; the consumer goes on after its last offset).
        data = log.read(offset, 1 << 20, Isolation.LOG_END).records
        first_position = next(iter_batch_positions(data))[0]
        first = read_header(data, first_position)
        assert first.last_offset >= offset
        got = [r for r in decode_records(data, first_position) if r.offset >= offset]
        assert got == [r for r in all_records if offset <= r.offset <= first.last_offset]
    log.local.lock.acquire()
    for segment in log.segments:
        segment.close_handler()
    log.local.lock.release()
    reloaded = open_log(directory, compact_config(segment_bytes=400), clean=False)
    assert records(reloaded) == all_records
    reloaded.close()
