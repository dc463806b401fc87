"""Compacted topics through a real mount (issue 18, the edges): keyless writes refused with nothing stored, tombstones
stored as null values, a policy change from delete to compact without a restart, reads across the gaps the cleaner
leaves, a stable open handle while the cleaner replaces its segment, ``hw/`` files never served from the kernel's
cache, and the cleaner's ``state`` and ``.logfs/metrics``."""

from __future__ import annotations

import errno
import json
import os
import re
import time
from pathlib import Path

from compacted_store import KEPT, build_store
from conftest import Mount, errno_of, make_topic, running_mount, state, write_all
from test_hw_page_cache import render_cache_lookups

from logfs.core.format.batch import Record
from logfs.core.format.decode import decode_records
from logfs.core.format.encode import encode_batch

COMPACT = {"cleanup.policy": "compact"}


def leo(mnt: Path, topic: str, partition: int = 0) -> int:
    return int(state(mnt, topic, partition)["log_end_offset"])


def jsonl(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def keyed_batch(*pairs: tuple[bytes | None, bytes | None]) -> bytes:
    return encode_batch([Record(n, int(time.time() * 1000), k, v) for n, (k, v) in enumerate(pairs)])


# --- writes ---------------------------------------------------------------------------------------------------------


def test_keyless_writes_are_refused_and_store_nothing(mounted: Mount) -> None:
    mnt = mounted.path
    mounted.allow_refusals(r"/c/")
    topic = make_topic(mnt, "c", 2, **COMPACT)
    part = topic / "0"
    write_all(part / "append.jsonl", b'{"key":"a","value":"1"}\n')
    assert leo(mnt, "c") == 1
    # text lines carry no key: EINVAL, nothing stored
    assert errno_of(write_all, part / "append", b"one\ntwo\n") == errno.EINVAL
    assert errno_of(write_all, topic / "append", b"one\n") == errno.EINVAL
    # one keyless JSON line among keyed ones refuses the whole write
    mixed = b'{"key":"b","value":"2"}\n{"value":"3"}\n{"key":"c","value":"4"}\n'
    assert errno_of(write_all, part / "append.jsonl", mixed) == errno.EINVAL
    assert errno_of(write_all, topic / "append.jsonl", mixed) == errno.EINVAL
    assert errno_of(write_all, part / "append.jsonl", b'{"key":null,"value":"5"}\n') == errno.EINVAL
    # a batch with a keyless record: EBADMSG; the batch before it in the same write is not stored either
    two = keyed_batch((b"d", b"5")) + keyed_batch((b"e", b"6"), (None, b"7"))
    assert errno_of(write_all, part / "batches", two) == errno.EBADMSG
    assert [leo(mnt, "c", p) for p in (0, 1)] == [1, 0]
    # the refusal is kept with Kafka's words
    assert "Compacted topic cannot accept message without key" in (mnt / ".logfs" / "errors").read_text()
    # a batches handle stays usable after the refusal: its framing was intact
    fd = os.open(part / "batches", os.O_WRONLY)
    try:
        assert errno_of(os.write, fd, keyed_batch((None, b"x"))) == errno.EBADMSG
        assert os.write(fd, keyed_batch((b"f", b"8"))) > 0
    finally:
        os.close(fd)
    assert [r["key"] for r in jsonl(part / "at" / "earliest.jsonl")] == ["a", "f"]


def test_tombstones_are_stored_as_null_values(mounted: Mount) -> None:
    mnt = mounted.path
    part = make_topic(mnt, "t", **COMPACT) / "0"
    write_all(part / "append.jsonl", b'{"key":"k","value":"v"}\n{"key":"k","value":null}\n')
    write_all(part / "batches", keyed_batch((b"j", None), (b"j", b"back")))
    rows = jsonl(part / "at" / "earliest.jsonl")
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [
        (0, "k", "v"), (1, "k", None), (2, "j", None), (3, "j", "back"),
    ]  # fmt: skip
    stored = (part / "at" / "earliest.kafka").read_bytes()
    last = len(stored) - len(keyed_batch((b"j", None), (b"j", b"back")))
    records = decode_records(stored, 0) + decode_records(stored, last)
    assert [(r.key, r.value) for r in records] == [(b"k", b"v"), (b"k", None), (b"j", None), (b"j", b"back")]


def test_a_policy_change_from_delete_to_compact_takes_effect_at_once(mounted: Mount) -> None:
    mnt = mounted.path
    mounted.allow_refusals(r"/p/0/append")
    topic = make_topic(mnt, "p")
    write_all(topic / "0" / "append", b"keyless is fine under delete\n")
    (topic / "config").write_text("cleanup.policy=compact\n")
    assert "cleanup.policy=compact" in (topic / "config").read_text().splitlines()
    assert errno_of(write_all, topic / "0" / "append", b"now refused\n") == errno.EINVAL
    write_all(topic / "0" / "append.jsonl", b'{"key":"k","value":"kept"}\n')
    (topic / "config").write_text("cleanup.policy=compact,delete\n")
    assert errno_of(write_all, topic / "0" / "append", b"still refused\n") == errno.EINVAL
    (topic / "config").write_text("cleanup.policy=delete\n")
    write_all(topic / "0" / "append", b"fine again\n")
    values = [r["value"] for r in jsonl(topic / "0" / "at" / "earliest.jsonl")]
    assert values == ["keyless is fine under delete", "kept", "fine again"]


# --- reads across gaps ----------------------------------------------------------------------------------------------

def test_reads_across_gaps_start_at_the_next_record(tmp_path: Path) -> None:
    build_store(tmp_path / "store")
    with running_mount(tmp_path / "store", tmp_path / "mnt") as mount:
        part = mount.path / "g" / "0"
        everything = KEPT
        for start in range(0, 25):
            want = [o for o in everything if o >= start]
            assert [r["offset"] for r in jsonl(part / "at" / f"{start}.jsonl")] == want, start
            assert (part / "at" / str(start)).read_bytes() == b"".join(b"v%d\n" % o for o in want), start
            assert [r["offset"] for r in jsonl(part / "committed" / "at" / f"{start}.jsonl")] == want, start
        # .kafka: whole batches from the first whose last offset is at or after the start
        stored = (part / "at" / "3.kafka").read_bytes()
        assert decode_records(stored, 0)[0].offset == 2
        hw = sorted((part / "hw").iterdir())
        assert [p.name for p in hw] == [f"{0:020d}.jsonl", f"{20:020d}.jsonl"]
        assert [r["offset"] for p in hw for r in jsonl(p)] == everything
        out = os.popen(f"head -n 3 {part / 'follow' / '3'}").read()
        assert out == "v5\nv9\nv15\n"
        st = state(mount.path, "g")
        assert (st["log_start_offset"], st["high_watermark"], st["log_end_offset"]) == (0, 25, 25)
        # below the log start and above the LEO: ENOENT as everywhere; a gap is not an error
        assert errno_of((part / "at" / "26").read_bytes) == errno.ENOENT


def test_hw_files_of_compacted_topics_never_come_from_the_kernel_cache(mounted: Mount) -> None:
    mnt = mounted.path
    part = make_topic(mnt, "h", **COMPACT) / "0"
    write_all(part / "append.jsonl", b"".join(b'{"key":"k%d","value":"v"}\n' % (i % 3) for i in range(30)))
    (hw,) = sorted((part / "hw").iterdir())
    want = (part / "at" / "earliest.jsonl").read_bytes()
    assert hw.read_bytes() == want
    before = render_cache_lookups(mnt)
    for n in range(1, 4):
        assert hw.read_bytes() == want
        assert render_cache_lookups(mnt) > before, f"re-read {n} of a compacted topic's hw/ file was served from cache"
        before = render_cache_lookups(mnt)


# --- the mount's cleaner --------------------------------------------------------------------------------------------

CLEANER = ("log.cleaner.backoff.ms=50",)
SMALL = {"segment.bytes": 4096, "min.cleanable.dirty.ratio": 0.01}


def keyed_lines(start: int, count: int, keys: int, *, unique_every: int = 0) -> tuple[list[bytes], dict[str, str]]:
    """``count`` records over ``keys`` keys (with ``unique_every``: every n-th record's key is its own, so cleaned
    segments keep records and shrink rather than empty); the model of each key's last value."""
    model: dict[str, str] = {}
    lines = []
    for i in range(start, start + count):
        key = f"u{i}" if unique_every and i % unique_every == 0 else f"k{i % keys}"
        val = f"v{i}-" + "x" * 50
        model[key] = val
        lines.append(json.dumps({"key": key, "value": val}).encode() + b"\n")
    return lines, model


def wait_cleaned(mnt: Path, topic: str, timeout_s: float = 20.0) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + timeout_s
    while True:
        st = state(mnt, topic)
        if st["cleaner"] is not None and st["cleaner"]["first_dirty_offset"] > 0:
            return st
        assert time.monotonic() < deadline, f"no clean within {timeout_s} s: {st}"
        time.sleep(0.05)


def test_the_mount_cleans_a_compacted_topic_and_reads_skip_the_gaps(tmp_path: Path) -> None:
    with running_mount(tmp_path / "store", tmp_path / "mnt", *CLEANER) as mount:
        mnt = mount.path
        part = make_topic(mnt, "kv", **COMPACT, **SMALL) / "0"
        lines, model = keyed_lines(0, 600, 10, unique_every=2)
        for n in range(0, len(lines), 20):
            write_all(part / "append.jsonl", b"".join(lines[n : n + 20]))
        st = wait_cleaned(mnt, "kv")
        assert st["log_start_offset"] == 0 and st["log_end_offset"] == 600  # offsets never change
        assert 0 <= st["cleaner"]["dirty_ratio"] <= 1
        rows = jsonl(part / "at" / "earliest.jsonl")
        offsets = [r["offset"] for r in rows]
        assert offsets == sorted(set(offsets)) and len(rows) < 600  # gaps, in order
        assert {r["key"]: r["value"] for r in rows} == model
        more, newer = keyed_lines(600, 200, 10)  # dirty again: the next round groups the segments it shrank
        write_all(part / "append.jsonl", b"".join(more))
        model.update(newer)
        deadline = time.monotonic() + 20
        grouped = re.compile(r"cleaned kv-0 .* (\d+) segments -> (\d+)")
        while not any(int(after) < int(before) for before, after in grouped.findall(mount.log_text())):
            assert time.monotonic() < deadline, f"cleaned segments were never grouped: {state(mnt, 'kv')}"
            time.sleep(0.05)
        assert {r["key"]: r["value"] for r in jsonl(part / "at" / "earliest.jsonl")} == model
        for start in (0, 1, 299, 598, 797):  # at/ of a cleaned-away offset starts at the next record
            for _ in range(100):  # the cleaner may run between two reads: compare reads of one unchanged log
                offsets = [r["offset"] for r in jsonl(part / "at" / "earliest.jsonl")]
                got = [r["offset"] for r in jsonl(part / "at" / f"{start}.jsonl")]
                if offsets == [r["offset"] for r in jsonl(part / "at" / "earliest.jsonl")]:
                    break
            assert got == [o for o in offsets if o >= start], start
        metrics = (mnt / ".logfs" / "metrics").read_text()
        for name in ("kafka_log_logcleaner_max_buffer_utilization_percent",
                     "kafka_log_logcleaner_cleaner_recopy_percent", "kafka_log_logcleaner_max_clean_time_secs",
                     "kafka_log_logcleaner_deadthreadcount", "kafka_log_logcleanermanager_max_dirty_percent",
                     "kafka_log_logcleanermanager_uncleanable_partitions_count"):  # fmt: skip
            assert re.search(rf"^# TYPE {name} gauge$", metrics, re.M), name
        io = re.search(r"^kafka_utils_throttler_cleaner_io_total (\d+)$", metrics, re.M)
        assert io is not None and int(io[1]) > 0
        assert re.search(r"^kafka_log_logcleaner_deadthreadcount 0$", metrics, re.M)
        assert state(mnt, "kv")["cleaner"] is not None
        make_topic(mnt, "plain")
        assert state(mnt, "plain")["cleaner"] is None


def test_an_open_handle_keeps_its_bytes_while_the_cleaner_replaces_its_segment(tmp_path: Path) -> None:
    with running_mount(tmp_path / "store", tmp_path / "mnt", *CLEANER) as mount:
        mnt = mount.path
        topic = make_topic(mnt, "s", **SMALL)  # delete policy first: nothing is cleaned yet
        part = topic / "0"
        lines, _ = keyed_lines(0, 400, 5)
        for n in range(0, len(lines), 20):
            write_all(part / "append.jsonl", b"".join(lines[n : n + 20]))
        first_hw = sorted((part / "hw").iterdir())[0]
        want_at, want_hw = (part / "at" / "earliest.jsonl").read_bytes(), first_hw.read_bytes()
        with open(part / "at" / "earliest.jsonl", "rb") as at, open(first_hw, "rb") as hw:
            head_at, head_hw = at.read(1000), hw.read(1000)
            (topic / "config").write_text("cleanup.policy=compact\n")
            wait_cleaned(mnt, "s")
            assert len((part / "at" / "earliest.jsonl").read_bytes()) < len(want_at)  # the log did change
            assert head_at + at.read() == want_at
            assert head_hw + hw.read() == want_hw
            at.seek(0)
            assert at.read() == want_at  # re-read from the start: still the pre-clean bytes


def test_a_throttled_clean_stalls_no_other_partition_and_an_unmount_stops_it(tmp_path: Path) -> None:
    store, mnt = tmp_path / "store", tmp_path / "mnt"
    with running_mount(store, mnt, *CLEANER, "log.cleaner.io.max.bytes.per.second=50000") as mount:
        part = make_topic(mount.path, "slow", **SMALL) / "0"
        # ~1 MB: the throttler measures periods of 300 ms (Kafka's), so a round must outlast one to be slowed down;
        # then it sleeps ~20 s per period at 50 KB/s, far longer than the test
        lines, _ = keyed_lines(0, 12_000, 5)
        for n in range(0, len(lines), 1000):
            write_all(part / "append.jsonl", b"".join(lines[n : n + 1000]))
        other = make_topic(mount.path, "other") / "0"
        (mount.path / "slow" / "config").write_text("cleanup.policy=compact\n" + "".join(
            f"{k}={v}\n" for k, v in SMALL.items()))  # fmt: skip
        # a round has begun: it may still be building its offset map (throttled too: on a slow machine that read
        # outlasts one period and sleeps before any .cleaned file exists) or writing its first group
        deadline = time.monotonic() + 10
        while "Beginning cleaning of slow-0" not in mount.log_text():
            assert time.monotonic() < deadline, "no round started"
            time.sleep(0.01)
        worst = 0.0
        for i in range(20):  # appends and reads of another partition while it cleans
            started = time.monotonic()
            write_all(other / "append", b"line %d\n" % i)
            assert (other / "at" / str(i)).read_bytes() == b"line %d\n" % i
            worst = max(worst, time.monotonic() - started)
        assert "cleaned slow-0" not in mount.log_text(), "the round ended before the check: throttle it more"
        assert worst < 0.5, f"an append and read of another partition took {worst:.3f} s while the cleaner ran"
        stopped = time.monotonic()
    assert time.monotonic() - stopped < 5, "the unmount waited for the throttled round to finish"
    assert not list((store / "slow-0").glob("*.cleaned")) and not list((store / "slow-0").glob("*.swap"))
    assert "clean aborted" in mount.log_text()
