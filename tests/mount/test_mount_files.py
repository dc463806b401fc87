"""The filesystem contract (docs/mount.md: "Files, modes and caching", "Writes", "Reads", "Lifecycle") through a real
mount, with real tools: bash, cat, dd, stat, Python's os.

Most tests share one mount (``shared_mount``), each with topics of its own; the lifecycle tests start their own.
Every blocking read runs in a subprocess with a timeout (a FUSE read blocked in the test process cannot be
interrupted).
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import (
    LOGFS_LISTING,
    Mount,
    default_signals,
    errno_of,
    finish_mount,
    make_topic,
    sh,
    start_mount,
    state,
    write_all,
)
from kafka.partitioner.default import murmur2 as kafka_python_murmur2
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from logfs.core.format.encode import encode_values
from logfs.core.store import Store


def now_ms() -> int:
    return time.time_ns() // 1_000_000  # old timestamps would let retention.ms (7 days) delete the records under us


def kafka_batch(values: list[bytes], *, key: bytes | None = None, compression: int = 0, ts: int | None = None):
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=compression, is_transactional=False, producer_id=-1, producer_epoch=-1,
        base_sequence=-1, batch_size=2**30,
    )  # fmt: skip
    ts = now_ms() if ts is None else ts
    for i, value in enumerate(values):
        builder.append(i, timestamp=ts + i, key=key, value=value, headers=[("h", b"x%d" % i)])
    return bytes(builder.build())


@pytest.fixture
def mnt(shared_mount: Mount) -> Path:
    return shared_mount.path


# --- appends and reads -------------------------------------------------------------------------------------------


def test_echo_append_and_cat_round_trip(mnt: Path) -> None:
    make_topic(mnt, "echo")
    done = sh("echo hello >> echo/0/append && echo world >> echo/0/append && cat echo/0/at/0", mnt)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello\nworld\n"
    assert (mnt / "echo/0/at/1").read_bytes() == b"world\n"
    rows = [json.loads(line) for line in (mnt / "echo/0/at/0.jsonl").read_text().splitlines()]
    assert [(r["topic"], r["partition"], r["offset"], r["key"], r["value"]) for r in rows] == [
        ("echo", 0, 0, None, "hello"),
        ("echo", 0, 1, None, "world"),
    ]
    assert list(rows[0]) == ["topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers"]


def test_partial_line_is_stored_at_close(mnt: Path) -> None:
    make_topic(mnt, "printf")
    done = sh("printf 'a\\nb' > printf/0/append", mnt)
    assert done.returncode == 0, done.stderr
    assert (mnt / "printf/0/at/earliest").read_bytes() == b"a\nb\n"
    assert state(mnt, "printf")["log_end_offset"] == 2


def test_lines_split_across_writes_and_kernel_requests_stay_whole(mnt: Path) -> None:
    make_topic(mnt, "split")
    fd = os.open(mnt / "split/0/append", os.O_WRONLY)
    try:
        for piece in (b"on", b"e\ntw", b"o\n", b"\n", b"x" * 5000 + b"\nlast"):
            os.write(fd, piece)
    finally:
        os.close(fd)
    assert (mnt / "split/0/at/0").read_bytes() == b"one\ntwo\n\n" + b"x" * 5000 + b"\nlast\n"


def test_every_offset_readable_and_sizes_exact(mnt: Path) -> None:
    make_topic(mnt, "sizes")
    values = [f"value-{i}-" + "é" * (i % 5) for i in range(30)]
    write_all(mnt / "sizes/0/append", "".join(v + "\n" for v in values).encode())
    for offset in range(30):
        for suffix in ("", ".jsonl", ".kafka"):
            path = mnt / f"sizes/0/at/{offset}{suffix}"
            with open(path, "rb") as f:
                data = f.read()
                assert os.fstat(f.fileno()).st_size == len(data)
            if suffix == "":
                assert data.decode().splitlines() == values[offset:]
    assert (mnt / "sizes/0/at/30").read_bytes() == b""  # the HW: an empty file
    assert errno_of(os.stat, mnt / "sizes/0/at/31") == errno.ENOENT  # past the LEO
    assert (mnt / "sizes/0/at/5-8").read_bytes().decode().splitlines() == values[5:8]
    assert errno_of(os.stat, mnt / "sizes/0/at/5-31") == errno.ENOENT  # end past the HW
    hw = mnt / "sizes/0/hw/00000000000000000000.jsonl"
    assert hw.stat().st_size == len(hw.read_bytes()) == len((mnt / "sizes/0/at/earliest.jsonl").read_bytes())
    assert hw.read_bytes() == (mnt / "sizes/0/at/earliest.jsonl").read_bytes()


def test_at_kafka_parses_with_kafka_python(mnt: Path) -> None:
    make_topic(mnt, "kafkaview")
    write_all(mnt / "kafkaview/0/append", b"a\nb\nc\n")
    data = (mnt / "kafkaview/0/at/0.kafka").read_bytes()
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    assert [r.value for r in batch] == [b"a", b"b", b"c"]


def test_listings(mnt: Path) -> None:
    make_topic(mnt, "listing", partitions=2)
    assert ".logfs" in os.listdir(mnt) and "listing" in os.listdir(mnt)
    assert sorted(os.listdir(mnt / "listing")) == ["0", "1", "append", "append.jsonl", "config"]
    assert sorted(os.listdir(mnt / "listing/0")) == [
        "append", "append.jsonl", "at", "batches", "committed", "follow", "hw", "leader", "state",
    ]  # fmt: skip
    # without ZooKeeper every partition's leader is the mount's (.logfs/leader: this mount, naming itself)
    leader = json.loads((mnt / ".logfs/leader").read_text())
    assert leader["node_id"] == 0 and leader["mount"] == str(mnt)
    assert json.loads((mnt / "listing/1/leader").read_text()) == leader
    assert os.listdir(mnt / "listing/0/at") == [] and os.listdir(mnt / "listing/0/follow") == []
    assert sorted(os.listdir(mnt / ".logfs")) == LOGFS_LISTING
    assert errno_of(os.stat, mnt / "listing/0/hw/.x.jsonl.crc") == errno.ENOENT
    assert errno_of(os.stat, mnt / "listing/0/hw/_spark_metadata") == errno.ENOENT


# --- modes and refusals ------------------------------------------------------------------------------------------


def test_open_modes_and_refusals(mnt: Path, shared_mount: Mount) -> None:
    shared_mount.allow_refusals(r"/(modes|empty)\b")
    make_topic(mnt, "modes")
    write_all(mnt / "modes/0/append", b"keep\n")
    assert errno_of(os.open, mnt / "modes/0/append", os.O_RDONLY) == errno.EACCES
    assert errno_of(os.open, mnt / "modes/0/at/0", os.O_WRONLY) == errno.EACCES
    assert errno_of(os.open, mnt / "modes/0/state", os.O_RDWR) == errno.EACCES
    assert errno_of(os.unlink, mnt / "modes/0/append") == errno.EPERM
    assert errno_of(os.rename, mnt / "modes/0/append", mnt / "modes/0/x") == errno.EPERM
    assert errno_of(os.chmod, mnt / "modes/0/append", 0o777) == errno.EPERM
    assert errno_of(os.truncate, mnt / "modes/0/append", 0) == errno.EPERM
    assert errno_of(os.rmdir, mnt / "modes/0") == errno.EPERM
    assert errno_of(os.rmdir, mnt / "modes") == errno.ENOTEMPTY
    assert errno_of(os.symlink, "x", mnt / "modes/link") == errno.EPERM
    assert errno_of(os.mkdir, mnt / "modes/5") == errno.EINVAL  # not the next partition
    done = sh("rm -rf modes", mnt)
    assert done.returncode != 0
    assert (mnt / "modes/0/at/0").read_bytes() == b"keep\n"
    assert (mnt / "modes/0/append").stat().st_mode & 0o777 == 0o660
    assert (mnt / "modes/0/state").stat().st_mode & 0o777 == 0o444
    os.mkdir(mnt / "empty")
    os.rmdir(mnt / "empty")  # a topic with no record may go
    assert "empty" not in os.listdir(mnt)


@pytest.mark.parametrize(
    ("name", "code"),
    [("a" * 250, errno.ENAMETOOLONG), ("bad name!", errno.EINVAL), (".hidden", errno.EINVAL), ("é", errno.EINVAL)],
)
def test_hostile_topic_names_are_refused(mnt: Path, shared_mount: Mount, name: str, code: int) -> None:
    shared_mount.allow_refusals(re.escape(f"/{name}:"), "mkdir")
    assert errno_of(os.mkdir, mnt / name) == code


def test_bad_batch_is_ebadmsg_and_nothing_is_stored(mnt: Path, shared_mount: Mount) -> None:
    shared_mount.allow_refusals("/badbatch/0/batches:", "write")
    make_topic(mnt, "badbatch")
    good = kafka_batch([b"ok"])
    bad = bytearray(kafka_batch([b"bad"]))
    bad[-1] ^= 0xFF  # the CRC no longer matches
    fd = os.open(mnt / "badbatch/0/batches", os.O_WRONLY)
    try:
        assert os.write(fd, good) == len(good)
        assert errno_of(os.write, fd, bytes(bad)) == errno.EBADMSG
        assert errno_of(os.write, fd, good) == errno.EBADMSG  # the handle's framing is lost
    finally:
        os.close(fd)
    assert state(mnt, "badbatch")["log_end_offset"] == 1
    assert (mnt / "badbatch/0/at/0").read_bytes() == b"ok\n"
    fd = os.open(mnt / "badbatch/0/batches", os.O_WRONLY)
    try:  # one request: a good batch, a bad one, a good one: the first stays, nothing after the bad one
        assert errno_of(os.write, fd, good + bytes(bad) + good) == errno.EBADMSG
    finally:
        os.close(fd)
    assert (mnt / "badbatch/0/at/0").read_bytes() == b"ok\nok\n"


def test_a_record_too_large_is_efbig_and_nothing_of_the_write_is_stored(mnt: Path, shared_mount: Mount) -> None:
    shared_mount.allow_refusals("/big/0/", "write")
    make_topic(mnt, "big")
    write_all(mnt / "big/config", b"max.message.bytes=1000\n")
    assert errno_of(write_all, mnt / "big/0/append", b"small\n" + b"x" * 2000 + b"\n") == errno.EFBIG
    assert errno_of(write_all, mnt / "big/0/append.jsonl", b'{"value":"%s"}\n' % (b"y" * 2000)) == errno.EFBIG
    assert errno_of(write_all, mnt / "big/0/batches", kafka_batch([b"z" * 2000])) == errno.EFBIG
    assert state(mnt, "big")["log_end_offset"] == 0
    write_all(mnt / "big/0/append", b"".join(b"%04d\n" % i for i in range(500)))  # cut into batches under 1000
    assert (mnt / "big/0/at/0").read_bytes() == b"".join(b"%04d\n" % i for i in range(500))
    data, sizes = (mnt / "big/0/at/0.kafka").read_bytes(), []
    while data:
        sizes.append(int.from_bytes(data[8:12], "big") + 12)
        data = data[sizes[-1] :]
    assert len(sizes) > 1 and max(sizes) <= 1000


def test_bad_json_is_einval_and_nothing_of_the_write_is_stored(mnt: Path, shared_mount: Mount) -> None:
    shared_mount.allow_refusals("/badjson/0/append.jsonl:", "write")
    make_topic(mnt, "badjson")
    payload = b'{"value":"fine"}\n{"value": oops}\n'
    fd = os.open(mnt / "badjson/0/append.jsonl", os.O_WRONLY)
    try:
        assert errno_of(os.write, fd, payload) == errno.EINVAL
    finally:
        os.close(fd)
    assert state(mnt, "badjson")["log_end_offset"] == 0


def test_append_jsonl_fields(mnt: Path) -> None:
    make_topic(mnt, "jsonl")
    lines = [
        {"key": "k", "value": {"a": [1, 2]}, "timestamp": now_ms() - 5, "headers": [{"key": "h", "value": None}]},
        {"value": "//4A", "valueEncoding": "base64", "topic": "ignored", "offset": 99},
        {"value": 42},
    ]
    write_all(mnt / "jsonl/0/append.jsonl", b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    rows = [json.loads(line) for line in (mnt / "jsonl/0/at/0.jsonl").read_text().splitlines()]
    assert rows[0]["key"] == "k" and rows[0]["value"] == '{"a":[1,2]}' and rows[0]["timestamp"] < rows[1]["timestamp"]
    assert rows[0]["headers"] == [{"key": "h", "value": None}]
    assert rows[1]["value"] == "//4A" and rows[1]["valueEncoding"] == "base64" and rows[1]["offset"] == 1
    assert rows[2]["value"] == "42"


def test_kafka_python_batches_read_back_identical(mnt: Path) -> None:
    make_topic(mnt, "interop")
    batches = [
        kafka_batch([b"v1", b"v2"], key=b"key"),
        kafka_batch([b"z%d" % i for i in range(50)], compression=1),  # gzip
        kafka_batch([b"\xff\xfe binary"], key=b"\x00k"),
    ]
    fd = os.open(mnt / "interop/0/batches", os.O_RDWR)
    try:
        data = b"".join(batches)
        os.write(fd, data[:7])  # a batch split across writes
        os.write(fd, data[7:])
        assert os.read(fd, 4096) == b"0 0 1\n0 2 51\n0 52 52\n"  # produce responses (O_RDWR)
        assert os.read(fd, 4096) == b""
    finally:
        os.close(fd)
    expected = [r for b in batches for r in DefaultRecordBatch(b)]
    rows = [json.loads(line) for line in (mnt / "interop/0/at/0.jsonl").read_text().splitlines()]
    assert len(rows) == len(expected) == 53
    for offset, (row, record) in enumerate(zip(rows, expected, strict=True)):
        assert row["offset"] == offset
        assert row["timestamp"] == record.timestamp
        value = record.value.decode() if record.value.isascii() else None
        if value is not None:
            assert row["value"] == value
        else:
            assert "valueEncoding" in row
        assert [h["key"] for h in row["headers"]] == [k for k, _ in record.headers]


def test_dd_of_a_10_mib_batches_file_arrives_whole(mnt: Path, tmp_path: Path) -> None:
    make_topic(mnt, "dd")
    values = [b"%08d" % i + b"." * 92 for i in range(100_000)]  # 100-byte records
    batches = [encode_values(values[i : i + 1000], now_ms()) for i in range(0, len(values), 1000)]
    source = tmp_path / "batches.bin"
    source.write_bytes(b"".join(batches))
    assert source.stat().st_size > 10 * 1024 * 1024
    done = sh(f"dd if={source} of=dd/0/batches bs=1M status=none", mnt, timeout=60)
    assert done.returncode == 0, done.stderr
    assert state(mnt, "dd")["log_end_offset"] == len(values)
    assert (mnt / "dd/0/at/earliest").read_bytes() == b"".join(v + b"\n" for v in values)


def test_topic_level_append_partitions_like_kafka(mnt: Path) -> None:
    make_topic(mnt, "keyed", partitions=3)
    keys = [f"key-{i}".encode() for i in range(40)]
    write_all(mnt / "keyed/append.jsonl", b"".join(json.dumps({"key": k.decode(), "value": "v"}).encode() + b"\n"
                                                  for k in keys))  # fmt: skip

    def oracle(key: bytes) -> int:  # kafka-python's DefaultPartitioner, independent of logfs's murmur2
        return (kafka_python_murmur2(key) & 0x7FFFFFFF) % 3

    for p in range(3):
        rows = [json.loads(line) for line in (mnt / f"keyed/{p}/at/earliest.jsonl").read_text().splitlines()]
        assert {r["key"].encode() for r in rows} == {k for k in keys if oracle(k) == p}
    for _ in range(3):  # null keys: each write to the next partition in turn
        write_all(mnt / "keyed/append", b"n\n")
    assert sorted(state(mnt, "keyed", p)["log_end_offset"] for p in range(3)) == sorted(
        len([k for k in keys if oracle(k) == p]) + 1 for p in range(3)
    )


def test_config_delete_records_and_delete_topic(mnt: Path, shared_mount: Mount) -> None:
    shared_mount.allow_refusals("/admin/config:", "config write")
    shared_mount.allow_refusals("/.logfs/delete-records: EINVAL: offset 99 of admin-0", "write")
    make_topic(mnt, "admin")
    write_all(mnt / "admin/0/append", b"".join(b"%d\n" % i for i in range(10)))
    done = sh("echo retention.ms=123456 > admin/config", mnt)
    assert done.returncode == 0, done.stderr
    assert "retention.ms=123456\n" in (mnt / "admin/config").read_text()
    assert errno_of(write_all, mnt / "admin/config", b"retention.ms=1\nbogus=2\n") == errno.EINVAL
    assert "retention.ms=123456\n" in (mnt / "admin/config").read_text()  # whole write or nothing
    write_all(mnt / ".logfs/delete-records", b"admin 0 4\n")
    assert state(mnt, "admin")["log_start_offset"] == 4
    assert (mnt / "admin/0/at/earliest").read_bytes() == b"".join(b"%d\n" % i for i in range(4, 10))
    assert errno_of(os.stat, mnt / "admin/0/at/2") == errno.ENOENT
    assert errno_of(write_all, mnt / ".logfs/delete-records", b"admin 0 99\n") == errno.EINVAL  # past the HW
    write_all(mnt / ".logfs/delete-topic", b"admin\n")
    assert "admin" not in os.listdir(mnt)
    assert errno_of(os.stat, mnt / "admin/0/state") == errno.ENOENT


def test_metrics(mnt: Path) -> None:
    make_topic(mnt, "metered")
    write_all(mnt / "metered/0/append", b"x\ny\n")
    text = (mnt / ".logfs/metrics").read_text()
    for needle in (
        'logfs_appended_records_total{topic="metered",partition="0"} 2',
        'logfs_high_watermark{topic="metered",partition="0"} 2',
        'logfs_log_end_offset{topic="metered",partition="0"} 2',
        "logfs_appended_bytes_total",
        "logfs_fetched_bytes_total",
        "logfs_errors_total",
    ):
        assert needle in text


# --- follow ------------------------------------------------------------------------------------------------------


@pytest.mark.alone  # Ctrl-C answered within 0.5 s
def test_follow_delivers_new_records_and_ctrl_c_interrupts(mnt: Path) -> None:
    make_topic(mnt, "live")
    reader = subprocess.Popen(["head", "-n", "1", str(mnt / "live/0/follow/latest")], stdout=subprocess.PIPE)
    try:
        time.sleep(0.3)
        write_all(mnt / "live/0/append", b"first\n")
        out, _ = reader.communicate(timeout=10)
        assert out == b"first\n"
    finally:
        reader.kill()
    blocked = subprocess.Popen(
        ["cat", str(mnt / "live/0/follow/latest")], stdout=subprocess.DEVNULL, preexec_fn=default_signals
    )
    try:
        time.sleep(0.3)
        assert blocked.poll() is None
        start = time.monotonic()
        blocked.send_signal(signal.SIGINT)
        blocked.wait(timeout=10)
        assert time.monotonic() - start < 0.5
    finally:
        blocked.kill()


# --- lifecycle ---------------------------------------------------------------------------------------------------


def test_sigterm_shuts_down_cleanly_and_the_store_reopens_clean(mounted: Mount) -> None:
    store, path = mounted
    os.mkdir(path / "t")
    write_all(path / "t/0/append", b"durable\n")
    mounted.proc.send_signal(signal.SIGTERM)
    assert mounted.proc.wait(timeout=20) == 0
    assert not os.path.ismount(path)
    reopened = Store.open(store)
    try:
        assert reopened.had_clean_shutdown
        assert reopened.log("t", 0).log_end_offset == 1
    finally:
        reopened.close()


def test_kill_9_then_mount_clears_the_stale_mount(tmp_path: Path) -> None:
    store, path = tmp_path / "store", tmp_path / "mnt"
    first = start_mount(store, path)
    try:
        os.mkdir(path / "t")
        fd = os.open(path / "t/0/append", os.O_WRONLY)
        os.write(fd, b"acked\n")
        os.fsync(fd)
        os.close(fd)
        first.proc.kill()
        first.proc.wait(timeout=10)
        assert errno_of(os.stat, path) == errno.ENOTCONN
        second = start_mount(store, path, log_path=tmp_path / "second.log")
        try:
            second.allow_log("stale mount")
            assert "stale mount" in second.log_text()
            assert (path / "t/0/at/0").read_bytes() == b"acked\n"
        finally:
            finish_mount(second)
    finally:
        first.stop()  # kills it if still running and lazily unmounts a mount left stale


def test_second_mount_of_a_store_fails_with_a_clear_message(mounted: Mount, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    done = subprocess.run(
        [str(Path(os.sys.executable).with_name("logfs")), "mount", str(mounted.store), str(other)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 1
    assert "in use by another logfs process" in done.stderr


def test_bad_config_exits_2(tmp_path: Path) -> None:
    (tmp_path / "mnt").mkdir()
    done = subprocess.run(
        [str(Path(os.sys.executable).with_name("logfs")), "mount", str(tmp_path / "s"), str(tmp_path / "mnt"),
         "--config", "segment.bytes=nope"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 2
    assert "segment.bytes" in done.stderr
