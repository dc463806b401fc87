"""The rest of the mount's test list (issue 4), through a real mount with real tools.

tests/mount/test_mount_files.py and tests/mount/test_mount_concurrency.py hold most of the list; this file holds
what they did not cover: `cat` of every `at/<offset>` (and kafka-python on every `.kafka`), `cp` of several `hw/`
files, kafka-python batches read back field by field, Ctrl-C latency of blocked readers, hostile names, `rm -rf`
over a whole mount, O_SYNC writes, a full disk (ENOSPC), retention under open readers, and `logfs umount` with files
open.

Every mount is unmounted in a fixture or a ``finally`` (conftest.finish_mount); every blocking read runs in a
subprocess.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import (
    LOGFS,
    LOGFS_LISTING,
    Mount,
    default_signals,
    errno_of,
    finish_mount,
    sh,
    start_mount,
    state,
    write_all,
)
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

SEGMENT_ZERO = "00000000000000000000"


def metric(mnt: Path, name: str, topic: str, partition: int = 0) -> int:
    """One sample of ``.logfs/metrics`` for a partition; fails the test when the sample is missing."""
    prefix = f'{name}{{topic="{topic}",partition="{partition}"}} '
    for line in (mnt / ".logfs/metrics").read_text().splitlines():
        if line.startswith(prefix):
            return int(line[len(prefix) :])
    raise AssertionError(f"no sample {prefix!r} in .logfs/metrics")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def kafka_batch(records: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]], *,
                compression: int = 0, ts: int | None = None) -> bytes:  # fmt: skip
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=2**30,
    )  # fmt: skip
    ts = now_ms() if ts is None else ts
    for i, (key, value, headers) in enumerate(records):
        builder.append(i, timestamp=ts + i, key=key, value=value, headers=headers)
    return bytes(builder.build())


def kafka_records(data: bytes) -> list:  # type: ignore[type-arg]
    """Every record of a run of RecordBatch v2 bytes, parsed by kafka-python (CRC checked)."""
    records = []
    while data:
        size = int.from_bytes(data[8:12], "big") + 12
        batch = DefaultRecordBatch(data[:size])
        assert batch.validate_crc()
        records.extend(batch)
        data = data[size:]
    return records


def decoded(row: dict, field: str) -> bytes | None:  # type: ignore[type-arg]
    """A key or value of a JSON-lines record as bytes (base64 when its ``…Encoding`` says so)."""
    value = row[field]
    if value is None:
        return None
    if row.get(field + "Encoding") == "base64":
        return base64.b64decode(value)
    return value.encode()


@pytest.fixture
def mnt(shared_mount: Mount) -> Path:
    return shared_mount.path


# --- reading with the shell ---------------------------------------------------------------------------------------


def test_cat_of_every_at_offset_and_kafka_python_on_every_kafka_view(mnt: Path, tmp_path: Path) -> None:
    os.mkdir(mnt / "every")
    values = [f"v{i:02d}-" + "ü" * (i % 3) for i in range(24)]
    for start in (0, 5, 6, 17):  # four batches: most offsets fall inside a batch
        end = {0: 5, 5: 6, 6: 17, 17: 24}[start]
        write_all(mnt / "every/0/append", "".join(v + "\n" for v in values[start:end]).encode())
    out = tmp_path / "out"
    out.mkdir()
    done = sh(
        f"for i in $(seq 0 {len(values)}); do cat every/0/at/$i > {out}/$i && cat every/0/at/$i.jsonl > {out}/$i.jsonl"
        f" && cat every/0/at/$i.kafka > {out}/$i.kafka || exit 1; done",
        mnt,
    )
    assert done.returncode == 0, done.stderr
    for offset in range(len(values) + 1):
        assert (out / str(offset)).read_text().splitlines() == values[offset:]
        rows = [json.loads(line) for line in (out / f"{offset}.jsonl").read_text().splitlines()]
        assert [(r["offset"], r["value"]) for r in rows] == list(enumerate(values))[offset:]
        records = kafka_records((out / f"{offset}.kafka").read_bytes())
        shown = [(r.offset, r.value.decode()) for r in records if r.offset >= offset]  # a consumer skips the rest
        assert shown == list(enumerate(values))[offset:]
    assert errno_of(os.stat, mnt / f"every/0/at/{len(values) + 1}") == errno.ENOENT


def test_cp_of_several_hw_files_equals_at_earliest_jsonl(mnt: Path, tmp_path: Path) -> None:
    os.mkdir(mnt / "copied")
    write_all(mnt / "copied/config", b"segment.bytes=2048\n")
    for n in range(12):
        write_all(mnt / "copied/0/append", b"".join(b"batch %02d line %03d\n" % (n, i) for i in range(40)))
    segments = [s["base_offset"] for s in state(mnt, "copied")["segments"]]
    assert len(segments) > 3
    done = sh(f"cp -r copied/0/hw {tmp_path}/hw && cat copied/0/hw/* > {tmp_path}/cat.jsonl", mnt)
    assert done.returncode == 0, done.stderr
    names = sorted(os.listdir(tmp_path / "hw"))
    assert names == [f"{base:020d}.jsonl" for base in segments]
    copied = b"".join((tmp_path / "hw" / name).read_bytes() for name in names)
    earliest = (mnt / "copied/0/at/earliest.jsonl").read_bytes()
    assert copied == earliest == (tmp_path / "cat.jsonl").read_bytes()
    assert len(earliest.splitlines()) == 12 * 40


def test_each_at_lookup_is_a_fresh_inode_so_cp_refuses_and_cat_copies(mnt: Path, tmp_path: Path) -> None:
    """docs/mount.md, "Files, modes and caching": each lookup of an at/ name gives a fresh inode (whose size and bytes
    never change). GNU cp stats, then opens (two lookups, two inodes) and refuses the file as replaced; `cat >` copies
    it (docs/mount.md)."""
    os.mkdir(mnt / "fresh")
    write_all(mnt / "fresh/0/append", b"".join(b"line %02d\n" % i for i in range(10)))
    at = mnt / "fresh/0/at/earliest"
    first, second = os.stat(at), os.stat(at)
    assert first.st_ino != second.st_ino and first.st_size == second.st_size == 80
    done = sh(f"cp fresh/0/at/earliest {tmp_path}/cp", mnt)
    assert done.returncode != 0 and "replaced while being copied" in done.stderr
    done = sh(f"cat fresh/0/at/earliest > {tmp_path}/cat", mnt)
    assert done.returncode == 0 and (tmp_path / "cat").read_bytes() == at.read_bytes()


def test_kafka_python_batches_read_back_identical_field_by_field(mnt: Path) -> None:
    os.mkdir(mnt / "fields")
    ts = now_ms() - 1000
    batches = [
        kafka_batch(
            [(b"k0", b"plain", [("h", b"1")]), (None, None, []), (b"\xff\x00", b"\x80bin", [("n", None)])], ts=ts
        ),
        *(
            kafka_batch(
                [
                    (b"key-%d" % i, b"codec %d value %d" % (codec, i), [("c", b"%d" % codec), ("x", b"\xfe")])
                    for i in range(20)
                ],
                compression=codec,
                ts=ts + 100 * codec,
            )
            for codec in (1, 2, 3, 4)  # gzip, snappy, lz4, zstd
        ),
    ]
    written = kafka_records(b"".join(batches))
    write_all(mnt / "fields/0/batches", b"".join(batches))
    assert state(mnt, "fields")["log_end_offset"] == len(written) == 83
    for start in (0, 2, 40, 82):
        rows = [json.loads(line) for line in (mnt / f"fields/0/at/{start}.jsonl").read_text().splitlines()]
        assert len(rows) == len(written) - start
        for offset, (row, record) in enumerate(zip(rows, written[start:], strict=True), start=start):
            assert (row["topic"], row["partition"], row["offset"]) == ("fields", 0, offset)
            assert (row["timestamp"], row["timestampType"]) == (record.timestamp, 0)
            assert decoded(row, "key") == record.key
            assert decoded(row, "value") == record.value
            headers = [(h["key"], decoded(h, "value")) for h in row["headers"]]
            assert headers == list(record.headers)
    stored = kafka_records((mnt / "fields/0/at/0.kafka").read_bytes())
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in stored] == [
        (offset, r.timestamp, r.key, r.value, list(r.headers)) for offset, r in enumerate(written)
    ]


# --- follow: Ctrl-C -----------------------------------------------------------------------------------------------


def test_ctrl_c_of_blocked_follow_readers_within_100_ms(mnt: Path) -> None:
    os.mkdir(mnt / "ctrlc")
    readers = [
        subprocess.Popen(
            ["cat", str(mnt / "ctrlc/0/follow/latest")], stdout=subprocess.DEVNULL, preexec_fn=default_signals
        )
        for _ in range(5)
    ]
    try:
        deadline = time.monotonic() + 10
        while "logfs_follow_readers 5\n" not in (mnt / ".logfs/metrics").read_text():
            assert time.monotonic() < deadline, "the readers did not open"
            time.sleep(0.02)
        time.sleep(0.2)  # each is blocked in a read now
        latencies = []
        for r in readers:
            assert r.poll() is None
            start = time.monotonic()
            r.send_signal(signal.SIGINT)
            assert r.wait(timeout=10) == -signal.SIGINT
            latencies.append(time.monotonic() - start)
        print("Ctrl-C latencies (ms):", [round(s * 1000, 1) for s in latencies])
        assert statistics.median(latencies) < 0.1  # the spec's bound
        assert max(latencies) < 0.5  # one outlier of a noisy machine at most
    finally:
        for r in readers:
            r.kill()
            r.wait()


# --- hostile names ------------------------------------------------------------------------------------------------


def topic_files(store: Path) -> list[str]:
    """What a store holds per topic: partition directories and topic override files (checkpoints come and go)."""
    return sorted(p.name for p in store.iterdir() if p.is_dir() or p.name.startswith(".logfs-topic."))


def test_hostile_names_that_reach_the_daemon_are_refused_and_create_nothing(shared_mount: Mount) -> None:
    store, mnt = shared_mount
    shared_mount.allow_refusals("/", "mkdir")  # every hostile name below, each with its reason
    shared_mount.allow_refusals("/.logfs/delete-(topic|records):", "write")
    shared_mount.allow_refusals("/victim/0/new: EPERM", "open for writing")
    os.mkdir(mnt / "victim")
    write_all(mnt / "victim/0/append", b"safe\n")
    before_store = topic_files(store)
    before_root = sorted(os.listdir(mnt))
    os.mkdir(
        mnt / ("b" * 200)
    )  # a long valid name works (249 characters: see test_a_topic_name_of_249_characters_works) …
    os.rmdir(mnt / ("b" * 200))
    refused_mkdir = {
        "a" * 250: errno.ENAMETOOLONG,  # … one over Kafka's limit is too long
        "x" * 255: errno.ENAMETOOLONG,  # the longest a name can be and still reach the daemon
        ".hidden": errno.EINVAL,
        "...": errno.EINVAL,
        "sp ace": errno.EINVAL,
        "tab\there": errno.EINVAL,
        "new\nline": errno.EINVAL,
        "uml\u00e4ut": errno.EINVAL,
        "star*": errno.EINVAL,
        "back\\slash": errno.EINVAL,
        "colon:": errno.EINVAL,
        "\x01ctl": errno.EINVAL,
        "victim": errno.EEXIST,
    }
    for name, code in refused_mkdir.items():
        assert errno_of(os.mkdir, mnt / name) == code, name
    for name in ("a" * 250, ".hidden", "sp ace", "\x01ctl"):  # lookups of such names: nothing is there
        assert errno_of(os.stat, mnt / name) == errno.ENOENT, name
        assert errno_of(os.open, mnt / name / "0/append", os.O_WRONLY) == errno.ENOENT, name
    assert errno_of(os.mkdir, mnt / "victim/-1") == errno.EINVAL
    assert errno_of(os.mkdir, mnt / "victim/one") == errno.EINVAL
    assert errno_of(os.mkdir, mnt / "victim/0/x") == errno.EPERM
    assert errno_of(os.mkdir, mnt / ".logfs/x") == errno.EPERM
    assert errno_of(os.open, mnt / "victim/0/new", os.O_WRONLY | os.O_CREAT, 0o644) == errno.EPERM
    for name in ("victim/0/at/-1", "victim/0/at/1x", "victim/0/at/2-1", "victim/0/at/" + "9" * 30, "victim/0/follow/x",
                 "victim/0/hw/x.jsonl", "victim/0/at/0.json", "victim/0/at/@x"):  # fmt: skip
        assert errno_of(os.stat, mnt / name) == errno.ENOENT, name
    for line, code in ((b"..\n", errno.EINVAL), (b"../victim\n", errno.EINVAL), (b"victim/0\n", errno.EINVAL),
                       (b"a" * 250 + b"\n", errno.ENAMETOOLONG), (b".logfs\n", errno.EINVAL),
                       (b"victim \x00\n", errno.EINVAL), (b"nosuch\n", errno.ENOENT)):  # fmt: skip
        assert errno_of(write_all, mnt / ".logfs/delete-topic", line) == code, line
    for line in (b"../victim 0 1\n", b"victim -1 1\n", b"victim 0 x\n", b"victim 0\n", b"victim 7 0\n"):
        assert errno_of(write_all, mnt / ".logfs/delete-records", line) in (errno.ENOENT, errno.EINVAL), line
    assert topic_files(store) == before_store
    assert sorted(os.listdir(mnt)) == before_root
    assert (mnt / "victim/0/at/earliest").read_bytes() == b"safe\n"
    assert state(mnt, "victim")["log_start_offset"] == 0


def test_a_topic_name_of_249_characters_works(shared_mount: Mount) -> None:
    mnt = shared_mount.path
    name = "L" * 249  # Kafka's longest topic name: its overrides file and its deletion's directory name are shortened
    os.mkdir(mnt / name)
    write_all(mnt / name / "0/append", b"long\n")
    write_all(mnt / name / "config", b"retention.ms=3600000\n")
    assert "retention.ms=3600000\n" in (mnt / name / "config").read_text()
    assert (mnt / name / "0/at/0").read_bytes() == b"long\n"
    write_all(mnt / ".logfs/delete-topic", name.encode() + b"\n")
    assert name not in os.listdir(mnt)


# --- rm -rf -------------------------------------------------------------------------------------------------------


def test_rm_rf_over_the_whole_mount_loses_no_record(mounted: Mount) -> None:
    store, mnt = mounted
    mounted.allow_refusals("/", "rmdir")  # rm -rf: every directory it tries
    for topic, partitions in (("alpha", 2), ("beta", 1)):
        os.mkdir(mnt / topic)
        for p in range(1, partitions):
            os.mkdir(mnt / topic / str(p))
        write_all(mnt / topic / "config", b"segment.bytes=200\n")  # several segments, several hw/ files
        for p in range(partitions):
            write_all(mnt / f"{topic}/{p}/append", b"".join(b"%s %d %d\n" % (topic.encode(), p, i) for i in range(30)))
    os.mkdir(mnt / "empty")  # a topic without records
    partitions = [("alpha", 0), ("alpha", 1), ("beta", 0)]
    before = {tp: (mnt / f"{tp[0]}/{tp[1]}/at/earliest.jsonl").read_bytes() for tp in partitions}
    logs_before = sorted(p.relative_to(store) for p in store.rglob("*.log"))
    assert len(logs_before) > 3
    done = sh(f"rm -rf {mnt}/* {mnt}/.logfs", mnt.parent)
    assert done.returncode != 0
    assert "Operation not permitted" in done.stderr
    for tp, data in before.items():
        assert (mnt / f"{tp[0]}/{tp[1]}/at/earliest.jsonl").read_bytes() == data
        assert state(mnt, *tp)["log_start_offset"] == 0 and state(mnt, *tp)["log_end_offset"] == 30
    assert sorted(p.relative_to(store) for p in store.rglob("*.log")) == logs_before
    assert sorted(os.listdir(mnt)) == [".logfs", "alpha", "beta", "empty"]  # its files stay, so it stays too
    assert sorted(os.listdir(mnt / ".logfs")) == LOGFS_LISTING


# --- O_SYNC -------------------------------------------------------------------------------------------------------


def test_o_sync_and_o_dsync_writes_are_flushed_when_they_return(mounted: Mount) -> None:
    mnt = mounted.path
    os.mkdir(mnt / "sync")
    write_all(mnt / "sync/0/append", b"acks=1\n")  # a plain write: in the log, not flushed (flush.ms: never)
    assert metric(mnt, "logfs_log_end_offset", "sync") == 1
    assert metric(mnt, "logfs_recovery_point", "sync") == 0
    for n, flag in enumerate((os.O_SYNC, os.O_DSYNC)):
        fd = os.open(mnt / "sync/0/append", os.O_WRONLY | flag)
        try:
            os.write(fd, b"synced %d\n" % n)
            # read while the handle is still open: a close must not be what flushed it
            assert metric(mnt, "logfs_durable_offset", "sync") == metric(mnt, "logfs_log_end_offset", "sync") == n + 2
        finally:
            os.close(fd)
    write_all(mnt / "sync/0/append", b"acks=1 again\n")
    assert metric(mnt, "logfs_durable_offset", "sync") == 3
    fd = os.open(mnt / "sync/0/append", os.O_WRONLY)
    try:
        os.write(fd, b"fsynced\n")
        assert metric(mnt, "logfs_durable_offset", "sync") == 3
        os.fsync(fd)
        assert metric(mnt, "logfs_durable_offset", "sync") == 5
        # the records only: the indexes (and so the recovery point) follow with the periodic flush
        assert metric(mnt, "logfs_recovery_point", "sync") == 0
    finally:
        os.close(fd)


# --- a full disk --------------------------------------------------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs to put a store on (skips when this machine cannot mount one, e.g. not root)."""
    root = tmp_path / "small"
    root.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0755", "logfs-test", str(root)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs: {done.stderr.strip()}")
    try:
        yield root
    finally:
        if subprocess.run(["umount", str(root)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(root)], capture_output=True, check=False)


def fill(path: Path) -> int:
    """Write zeros to ``path`` until the file system is full; the bytes written."""
    written = 0
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 16, 1 << 12, 1):
            block = bytes(chunk)
            while True:
                try:
                    n = f.write(block)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
                written += n or 0
                if not n:
                    break
    return written


def test_a_full_disk_is_enospc_with_nothing_partial_stored(small_fs: Path, tmp_path: Path) -> None:
    mount = start_mount(small_fs / "store", tmp_path / "mnt")
    try:
        mount.allow_log(r"[Nn]o space left|periodic store work failed|ENOSPC")
        mnt = mount.path
        os.mkdir(mnt / "full")
        for n in range(5):
            write_all(mnt / "full/0/append", b"".join(b"before %d %03d %s\n" % (n, i, b"." * 80) for i in range(50)))
        before = (mnt / "full/0/at/earliest").read_bytes()
        segment = small_fs / "store/full-0" / f"{SEGMENT_ZERO}.log"
        size_before = segment.stat().st_size
        assert fill(small_fs / "filler") > 0
        payload = b"".join(b"too much %04d %s\n" % (i, b"x" * 90) for i in range(600))  # ~60 KB, one request
        fd = os.open(mnt / "full/0/append", os.O_WRONLY)
        try:
            assert errno_of(os.write, fd, payload) == errno.ENOSPC
        finally:
            os.close(fd)
        batch = kafka_batch([(None, b"y" * 1000, []) for _ in range(40)])
        assert errno_of(write_all, mnt / "full/0/batches", batch) == errno.ENOSPC
        # nothing partial: the segment file, the offsets and the records are as before
        assert segment.stat().st_size == size_before
        assert state(mnt, "full")["log_end_offset"] == 250
        assert (mnt / "full/0/at/earliest").read_bytes() == before
        assert len((mnt / f"full/0/hw/{SEGMENT_ZERO}.jsonl").read_bytes().splitlines()) == 250
        assert 'logfs_errors_total{errno="ENOSPC"} 2' in (mnt / ".logfs/metrics").read_text()
        os.unlink(small_fs / "filler")  # space again: the same mount takes the same writes
        write_all(mnt / "full/0/append", payload)
        write_all(mnt / "full/0/batches", batch)
        assert state(mnt, "full")["log_end_offset"] == 250 + 600 + 40
        assert (mnt / "full/0/at/250").read_bytes() == payload + (b"y" * 1000 + b"\n") * 40
    finally:
        finish_mount(mount)
    done = subprocess.run([LOGFS, "check", str(small_fs / "store")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


# --- retention under open readers ---------------------------------------------------------------------------------


def read_rest(fd: int) -> bytes:
    parts = []
    while chunk := os.read(fd, 1 << 16):
        parts.append(chunk)
    return b"".join(parts)


def test_retention_does_not_pull_segments_from_under_open_readers(tmp_path: Path) -> None:
    mount = start_mount(tmp_path / "store", tmp_path / "mnt", "segment.bytes=262144", "file.delete.delay.ms=0",
                        "log.retention.check.interval.ms=100")  # fmt: skip
    try:
        mnt, store = mount.path, mount.store
        os.mkdir(mnt / "kept")
        for n in range(16):  # ~1.1 MB of records: five segments
            write_all(mnt / "kept/0/append", b"".join(b"%02d %04d %s\n" % (n, i, b"r" * 90) for i in range(700)))
        segments = [s["base_offset"] for s in state(mnt, "kept")["segments"]]
        assert len(segments) >= 4
        hw = state(mnt, "kept")["high_watermark"]
        expected_hw_file = (mnt / f"kept/0/at/0-{segments[1]}.jsonl").read_bytes()  # the same rendering, own inode
        expected_at = (mnt / f"kept/0/at/0-{hw}.jsonl").read_bytes()
        expected_plain = (mnt / f"kept/0/at/{segments[1] - 5}-{hw}").read_bytes()
        handles = {}
        for name in (f"hw/{SEGMENT_ZERO}.jsonl", "at/0.jsonl", f"at/{segments[1] - 5}"):
            fd = os.open(mnt / "kept/0" / name, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no readahead: later bytes come after the deletion
            handles[name] = (fd, os.read(fd, 100))
        try:
            fetched_before = metric(mnt, "logfs_fetched_bytes_total", "kept")
            write_all(mnt / "kept/config", b"retention.bytes=1\n")  # every closed segment must go
            deadline = time.monotonic() + 15
            while True:
                files = sorted(p.name for p in (store / "kept-0").iterdir() if ".log" in p.name)
                if state(mnt, "kept")["log_start_offset"] == segments[-1] and files == [f"{segments[-1]:020d}.log"]:
                    break
                assert time.monotonic() < deadline, f"retention did not delete the segments: {files}"
                time.sleep(0.1)
            gone = mnt / f"kept/0/hw/{SEGMENT_ZERO}.jsonl"
            assert errno_of(os.open, gone, os.O_RDONLY) == errno.ENOENT  # gone for new opens
            assert gone.name not in os.listdir(mnt / "kept/0/hw")
            assert errno_of(os.stat, mnt / "kept/0/at/0") == errno.ENOENT
            got = {name: head + read_rest(fd) for name, (fd, head) in handles.items()}
        finally:
            for fd, _ in handles.values():
                os.close(fd)
        assert got[f"hw/{SEGMENT_ZERO}.jsonl"] == expected_hw_file
        assert got["at/0.jsonl"] == expected_at
        assert got[f"at/{segments[1] - 5}"] == expected_plain
        fetched = metric(mnt, "logfs_fetched_bytes_total", "kept") - fetched_before
        total = len(expected_hw_file) + len(expected_at) + len(expected_plain)
        print(f"served after the deletion: {fetched} of {total} bytes")
        assert fetched > total * 0.5  # most of it read from the pinned segments after they were deleted
    finally:
        finish_mount(mount)


# --- logfs umount with files open ---------------------------------------------------------------------------------


def test_umount_with_files_open_says_busy_and_points_to_lazy(mounted: Mount) -> None:
    mnt = mounted.path
    os.mkdir(mnt / "held")
    write_all(mnt / "held/0/append", b"still here\n")
    fd = os.open(mnt / "held/0/at/0", os.O_RDONLY)
    try:
        done = subprocess.run([LOGFS, "umount", str(mnt)], capture_output=True, text=True, timeout=30)
        assert done.returncode == 1
        assert "busy" in done.stderr.lower() and f"logfs umount --lazy {mnt}" in done.stderr
        assert os.path.ismount(mnt) and mounted.proc.poll() is None  # nothing happened
        assert os.pread(fd, 100, 0) == b"still here\n"
        done = subprocess.run([LOGFS, "umount", "--lazy", str(mnt)], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert not os.path.ismount(mnt)
        assert os.pread(fd, 100, 6) == b"here\n"  # the open file keeps working …
        assert mounted.proc.poll() is None
    finally:
        os.close(fd)
    assert mounted.proc.wait(timeout=20) == 0  # … and the last close ends the mount cleanly
