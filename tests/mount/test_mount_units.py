"""The mount's pure parts, without a mount: the errno table and its decorator, write framing, JSON-lines records,
Kafka's partitioner (against kafka-python and Kafka's own vectors), the tree's names, and the signal check."""

from __future__ import annotations

import errno
import json
import logging
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyfuse3
import pytest
import trio
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from logfs.core import errors as core
from logfs.core.format.batch import decode_records, encode_values, validate_batch
from logfs.core.format.partitioner import murmur2, partition_for_key, to_positive
from logfs.core.store import Store
from logfs.mount import errno as mount_errno
from logfs.mount.framing import (
    BatchFramer,
    InvalidJsonRecord,
    LineFramer,
    LineTooLong,
    encode_record_batches,
    encode_text_batches,
    parse_json_record,
)
from logfs.mount.signals import SignalProbe, signal_pending
from logfs.mount.tree import Kind, Node, Tree

ROOT = Path(__file__).resolve().parents[2]

# --- errno ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (core.CorruptRecord("crc"), errno.EBADMSG),
        (core.ControlRecordNotAllowed("control"), errno.EBADMSG),
        (core.RecordTooLarge(10, 5), errno.EFBIG),
        (core.TopicNameTooLong("long"), errno.ENAMETOOLONG),
        (core.InvalidTopic("bad"), errno.EINVAL),
        (core.OffsetOutOfRange(5, 0, 1), errno.ENOENT),
        (core.StoreLocked("/s", None), errno.EIO),
        (core.DiskFull("full"), errno.ENOSPC),
        (core.CorruptIndex("/i", "bad"), errno.EIO),
        (core.TopicNotEmpty("t"), errno.ENOTEMPTY),
        (core.ProducerFenced("old"), errno.ESTALE),
        (InvalidJsonRecord("x"), errno.EINVAL),
        (LineTooLong(10, 5), errno.EFBIG),
        (OSError(errno.ENOSPC, "full"), errno.ENOSPC),
        (OSError(errno.EROFS, "ro"), errno.EIO),
        (ValueError("a bug"), errno.EIO),
    ],
)
def test_errno_lookup_walks_the_class_hierarchy(exc: Exception, code: int) -> None:
    assert mount_errno.errno_for(exc) == code


def test_errno_table_has_each_type_once_and_every_core_error_maps() -> None:
    types = [t for t, _, _ in mount_errno.ERRNO_TABLE]
    assert len(types) == len(set(types))
    for name in dir(core):
        klass = getattr(core, name)
        if isinstance(klass, type) and issubclass(klass, core.LogfsError):
            assert mount_errno.lookup(klass.__new__(klass)) is not None, name


def test_docs_hold_the_current_errno_table() -> None:
    text = (ROOT / "docs/mount.md").read_text()
    m = re.search(r"<!-- ERRNO_TABLE -->\n(.*?)<!-- /ERRNO_TABLE -->", text, re.S)
    assert m is not None
    assert m[1] == mount_errno.render_table()


class _FakeOps:
    def __init__(self) -> None:
        self.counted: list[int] = []

    def count_error(self, code: int) -> None:
        self.counted.append(code)

    @mount_errno.handler
    async def lookup(self, what: Exception | None) -> str:
        if what is not None:
            raise what
        return "ok"

    @mount_errno.handler
    async def forget(self, what: Exception) -> None:
        raise what


def _run_lookup(ops: _FakeOps, what: Exception | None) -> int | str:
    async def go() -> int | str:
        try:
            return await ops.lookup(what)
        except pyfuse3.FUSEError as exc:
            return -exc.errno

    return trio.run(go)


def test_handler_lets_only_fuse_errors_out(caplog: pytest.LogCaptureFixture) -> None:
    ops = _FakeOps()
    caplog.set_level(logging.INFO, logger="logfs.mount.errno")
    assert _run_lookup(ops, None) == "ok"
    assert _run_lookup(ops, pyfuse3.FUSEError(errno.ENOENT)) == -errno.ENOENT
    assert _run_lookup(ops, core.CorruptRecord("crc")) == -errno.EBADMSG
    assert _run_lookup(ops, KeyError("bug")) == -errno.EIO
    assert ops.counted == [errno.ENOENT, errno.EBADMSG, errno.EIO]
    bug = [r for r in caplog.records if "KeyError" in r.getMessage()]
    assert bug and bug[0].levelno == logging.ERROR and bug[0].exc_info is not None
    refusal = [r for r in caplog.records if "crc" in r.getMessage()]
    assert refusal and refusal[0].levelno == logging.INFO and refusal[0].exc_info is None
    # forget has no reply: nothing may leave it, not even FUSEError
    assert trio.run(ops.forget, pyfuse3.FUSEError(errno.EIO)) is None
    assert trio.run(ops.forget, RuntimeError("bug")) is None


# --- framing --------------------------------------------------------------------------------------------------------


def test_line_framer_keeps_partial_lines_across_any_split() -> None:
    text = b"one\ntwo\n\nthree\nfour"
    rng = random.Random(7)
    print("seed 7")
    for _ in range(200):
        framer = LineFramer(1000)
        cuts = sorted(rng.sample(range(1, len(text)), rng.randrange(0, 6)))
        lines: list[bytes] = []
        for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True):
            lines += framer.feed(text[a:b])
        assert lines == [b"one", b"two", b"", b"three"]
        assert framer.take_tail() == b"four"
        assert framer.take_tail() is None


def test_line_framer_refuses_a_line_longer_than_a_record_can_be() -> None:
    framer = LineFramer(10)
    assert framer.feed(b"12345") == []
    with pytest.raises(LineTooLong):
        framer.feed(b"1234567")
    assert framer.pending_bytes == 0


def test_batch_framer_cuts_batches_across_any_split() -> None:
    batches = [encode_values([b"v%d" % i] * (i + 1), 1000 + i) for i in range(5)]
    data = b"".join(batches)
    rng = random.Random(11)
    print("seed 11")
    for _ in range(100):
        framer = BatchFramer(1 << 20)
        cuts = sorted(rng.sample(range(1, len(data)), 8))
        got: list[bytes] = []
        for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
            got += [bytes(x) for x in framer.feed(data[a:b])]
        assert got == batches
        assert framer.pending_bytes == 0


def test_batch_framer_refuses_oversized_and_corrupt_lengths_at_once() -> None:
    batch = encode_values([b"x" * 100], 0)
    framer = BatchFramer(50)
    assert framer.feed(batch[:12]) == [] and isinstance(framer.failure, core.RecordTooLarge)
    bad = bytearray(batch)
    bad[8:12] = (3).to_bytes(4, "big")
    framer = BatchFramer(1 << 20)
    assert framer.feed(batch + bytes(bad)) == [bytearray(batch)]  # the batch before the damage still goes in
    assert isinstance(framer.failure, core.CorruptRecord)


def test_text_batches_respect_the_limit_and_refuse_a_line_too_large() -> None:
    values = [b"x" * 100] * 1000
    batches = encode_text_batches(values, 5, 10_000)
    assert len(batches) > 1 and all(len(b) <= 10_000 for b in batches)
    assert [r.value for b in batches for r in decode_records(b)] == values
    for b in batches:
        validate_batch(b, client=True)
    with pytest.raises(core.RecordTooLarge):
        encode_text_batches([b"ok", b"y" * 20_000], 5, 10_000)
    rng = random.Random(5)
    print("seed 5")
    for _ in range(50):
        values = [b"v" * rng.randrange(0, 300) for _ in range(rng.randrange(1, 400))]
        limit = rng.randrange(400, 20_000)
        batches = encode_text_batches(values, 5, limit)
        assert all(len(b) <= limit for b in batches)
        assert [r.value for b in batches for r in decode_records(b)] == values


def test_json_records() -> None:
    r = parse_json_record(
        json.dumps({"key": "k", "value": [1, {"b": True}], "timestamp": 7, "partition": 2,
                    "headers": [{"key": "h", "value": "AP8=", "valueEncoding": "base64"}]}).encode(),
        99,
    )  # fmt: skip
    assert r.partition == 2
    assert (r.record.key, r.record.value, r.record.timestamp) == (b"k", b'[1,{"b":true}]', 7)
    assert r.record.headers[0].value == b"\x00\xff"
    assert parse_json_record(b'{"value":null}', 99).record.value is None
    assert parse_json_record(b'{"value":"x"}', 99).record.timestamp == 99
    assert parse_json_record('{"value":"é"}'.encode(), 99).record.value == "é".encode()
    for bad in (b"[1]", b"{", b'{"timestamp":-1}', b'{"timestamp":true}', b'{"headers":{}}',
                b'{"value":"!!","valueEncoding":"base64"}', b'{"value":"x","valueEncoding":"hex"}',
                b'{"value":"\\ud800"}', b'{"partition":"1"}'):  # fmt: skip
        with pytest.raises(InvalidJsonRecord):
            parse_json_record(bad, 0)
    records = [parse_json_record(b'{"key":"k","value":"%d"}' % i, 5).record for i in range(300)]
    batches = encode_record_batches(records, 2000)
    assert len(batches) > 1 and all(len(b) <= 2000 for b in batches)
    assert [r.value for b in batches for r in decode_records(b)] == [b"%d" % i for i in range(300)]


# --- partitioner ----------------------------------------------------------------------------------------------------


def test_murmur2_matches_kafkas_vectors_and_kafka_python() -> None:
    # org.apache.kafka.common.utils.UtilsTest.testMurmur2
    vectors = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for key, expected in vectors.items():
        assert murmur2(key) == expected
    rng = random.Random(3)
    print("seed 3")
    for _ in range(2000):
        key = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40)))
        assert to_positive(murmur2(key)) == kafka_python_murmur2(key) & 0x7FFFFFFF
        assert partition_for_key(key, 7) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % 7


# --- tree -----------------------------------------------------------------------------------------------------------


def test_tree_names(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    try:
        store.create_topic("t", 2)
        tree = Tree(store)
        root = Node(Kind.ROOT)
        topic = tree.resolve(root, "t")
        assert topic == Node(Kind.TOPIC, "t")
        part = tree.resolve(topic, "1")
        assert tree.resolve(part, "batches").kind is Kind.BATCHES
        at = tree.resolve(part, "at")
        assert tree.resolve(at, "5.jsonl").kind is Kind.AT_FILE
        committed_at = tree.resolve(tree.resolve(part, "committed"), "at")
        assert committed_at.committed and tree.parent(committed_at).kind is Kind.COMMITTED
        for parent, name in ((root, "u"), (root, ".x"), (topic, "2"), (topic, "01"), (part, ".a.crc"),
                             (at, "latest"), (at, "x"), (tree.resolve(part, "follow"), "1-2"),
                             (part, "_spark_metadata")):  # fmt: skip
            with pytest.raises(pyfuse3.FUSEError) as info:
                tree.resolve(parent, name)
            assert info.value.errno == errno.ENOENT
        released = []
        tree = Tree(store, on_release=released.append)
        entry = tree.add_fresh(Node(Kind.APPEND, "t", 0))
        tree.remember(entry)
        tree.opened(entry)
        tree.forget(entry.inode, 1)
        assert released == []  # still open
        tree.closed(entry)
        assert released == [entry]
        assert tree.stable_inode(topic) == tree.stable_inode(Node(Kind.TOPIC, "t"))
    finally:
        store.close()


# --- signals --------------------------------------------------------------------------------------------------------


def _child(code: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def test_signal_pending_sees_deliverable_signals_only() -> None:
    """Also through one long-lived probe, as the watcher uses it."""
    blocking = _child(
        "import os, signal, time; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1}); "
        "os.kill(os.getpid(), signal.SIGUSR1); print('ready', flush=True); time.sleep(30)"
    )
    ignoring = _child("import signal, time; signal.signal(signal.SIGUSR1, signal.SIG_IGN); "
                      "print('ready', flush=True); time.sleep(30)")  # fmt: skip
    stopped = _child("import time; print('ready', flush=True); time.sleep(30)")
    try:
        ignoring.send_signal(signal.SIGUSR1)
        assert not signal_pending(blocking.pid)  # pending but blocked
        assert not signal_pending(ignoring.pid)  # ignored
        probe = SignalProbe(stopped.pid)
        assert not probe.pending()
        stopped.send_signal(signal.SIGSTOP)
        time.sleep(0.05)
        stopped.send_signal(signal.SIGTERM)  # stays pending while the process is stopped
        assert probe.pending() and signal_pending(stopped.pid)
    finally:
        for proc in (blocking, ignoring, stopped):
            proc.kill()
            proc.wait()
    assert probe.pending()  # a process that is gone: its reader is gone too
    probe.close()
    assert signal_pending(stopped.pid)
