"""The sink's row handling (``logfs.spark.sink.MountWriter``) on a directory laid out like a mount: partitioning as
Kafka's default partitioner, batches cut below ``max.message.bytes``, strings and headers, and the refusals. What
the mount does with the batches (offsets, fsync, produce responses) is tested through a real mount in
tests/spark/test_spark_source.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa
import pytest

from logfs.core.format.batch import Header, iter_batch_positions, read_header
from logfs.core.format.compression import Compression
from logfs.core.format.decode import decode_records
from logfs.core.format.partitioner import partition_for_key
from logfs.spark.sink import MountWriter, SinkError

NOW = 1_790_000_000_000


def fake_mount(root: Path, topic: str, partitions: int, config: str = "") -> Path:
    for p in range(partitions):
        (root / topic / str(p)).mkdir(parents=True)
        (root / topic / str(p) / "batches").write_bytes(b"")
    (root / topic / "config").write_text(config)
    return root


def batches_of(root: Path, topic: str, partition: int) -> list[bytes]:
    data = (root / topic / str(partition) / "batches").read_bytes()
    return [data[pos : pos + size] for pos, size in iter_batch_positions(data)]


def writer(root: Path, topic: str | None = "t", **kw: object) -> MountWriter:
    return MountWriter(root, topic=topic, clock_ms=lambda: NOW, **kw)  # type: ignore[arg-type]


def test_rows_go_where_kafkas_default_partitioner_puts_them(tmp_path: Path) -> None:
    root = fake_mount(tmp_path, "t", 3)
    w = writer(root)
    keys = [b"k%d" % i for i in range(30)]
    w.write(pa.record_batch({"key": keys, "value": [b"v"] * 30}))
    w.write(pa.record_batch({"key": [None] * 4, "value": [b"a", b"b", b"c", b"d"], "partition": [None, None, None, 0]}))
    w.write(pa.record_batch({"key": pa.array([None, None], pa.binary()), "value": [b"e", b"f"]}))
    w.close()
    where = {r.value + (r.key or b""): p for p in range(3) for b in batches_of(root, "t", p) for r in decode_records(b)}
    for k in keys:
        assert where[b"v" + k] == partition_for_key(k, 3)
    assert where[b"a"] == where[b"b"] == where[b"c"] and where[b"d"] == 0  # one partition per batch for null keys
    assert where[b"e"] == where[b"f"] == (where[b"a"] + 1) % 3  # the next batch, the next partition


def test_strings_headers_timestamps_and_the_codec(tmp_path: Path) -> None:
    root = fake_mount(tmp_path, "t", 1)
    w = writer(root, compression=Compression.ZSTD)
    headers = pa.array(
        [[{"key": "h", "value": b"x"}, {"key": "n", "value": None}], None],
        pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
    )
    w.write(pa.record_batch({"key": ["é", None], "value": ["one", None], "headers": headers}))
    w.close()
    (batch,) = batches_of(root, "t", 0)
    assert read_header(batch).compression == Compression.ZSTD
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decode_records(batch)] == [
        (0, NOW, "é".encode(), b"one", (Header("h", b"x"), Header("n", None))),
        (1, NOW, None, None, ()),
    ]


def test_batches_stay_below_max_message_bytes(tmp_path: Path) -> None:
    root = fake_mount(tmp_path, "t", 1, "cleanup.policy=delete\nmax.message.bytes=2000\n")
    w = writer(root)
    w.write(pa.record_batch({"value": [b"%04d" % i + b"x" * 96 for i in range(100)]}))
    w.close()
    batches = batches_of(root, "t", 0)
    assert len(batches) > 5 and all(len(b) <= 2000 for b in batches)
    assert [r.value[:4] for b in batches for r in decode_records(b)] == [b"%04d" % i for i in range(100)]


def test_topic_column_and_option(tmp_path: Path) -> None:
    root = fake_mount(fake_mount(fake_mount(tmp_path, "a", 1), "b", 1), "c", 1)
    w = writer(root, topic=None)
    w.write(pa.record_batch({"value": [b"1", b"2"], "topic": ["a", "b"]}))
    w.close()
    assert [len(batches_of(root, t, 0)) for t in "abc"] == [1, 1, 0]
    w = writer(root, topic="c")  # the option overrides the column
    w.write(pa.record_batch({"value": [b"3"], "topic": ["a"]}))
    w.close()
    assert [[r.value for b in batches_of(root, t, 0) for r in decode_records(b)] for t in "abc"] == [
        [b"1"],
        [b"2"],
        [b"3"],
    ]


@pytest.mark.parametrize(
    ("columns", "topic", "message"),
    [
        ({"value": [b"v"], "partition": pa.array([7], pa.int32())}, "t", "partition 7 of topic 't' does not exist"),
        ({"value": [b"v"], "topic": pa.array([None], pa.string())}, None, "null topic"),
        ({"value": [b"v"]}, None, "needs a topic"),
        ({"key": [b"k"]}, "t", "needs a value column"),
        ({"value": [1]}, "t", "binary or string"),
    ],
)
def test_refusals(tmp_path: Path, columns: dict[str, object], topic: str | None, message: str) -> None:
    root = fake_mount(tmp_path, "t", 2)
    w = writer(root, topic=topic)
    with pytest.raises(SinkError, match=message):
        w.write(pa.record_batch(columns))
    w.abort()


def test_a_rows_topic_outside_kafkas_rules_is_refused_before_any_path_is_made_of_it(tmp_path: Path) -> None:
    """A ``topic`` column is data, not a path: ``../escape`` would have the sink list, mkdir (Kafka's auto-create)
    and open ``batches`` outside the mount; every name outside the rule is refused (core/names.py) first."""
    root = fake_mount(tmp_path / "mnt", "t", 1)
    (tmp_path / "escape" / "0").mkdir(parents=True)  # what "../escape/0/batches" would reach
    (tmp_path / "escape" / "0" / "batches").write_bytes(b"")
    for topic in ("../escape", "..", ".", "a/b", "t\n", "x" * 250, "", "é"):
        w = writer(root, topic=None)
        with pytest.raises(SinkError, match=r"^a row's topic: (a )?topic name"):
            w.write(pa.record_batch({"value": [b"v"], "topic": [topic]}))
        w.close()
    assert (tmp_path / "escape" / "0" / "batches").read_bytes() == b""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["escape", "mnt"]
    assert sorted(p.name for p in root.iterdir()) == ["t"]


# --- delivery: a refused write or fsync is written again (the real leader change: tests/cluster/
# test_cluster_spark_sink.py; here the refusals are injected into fsync(2), to reach every branch) -------------------


def failing(monkeypatch: pytest.MonkeyPatch, name: str, errnos: list[int]) -> list[int]:
    """``os.<name>`` answers each errno of ``errnos`` in turn, then works; the byte counts of writes (or the
    descriptors of other calls) made are recorded, failed ones included."""
    import os

    real, calls = getattr(os, name), []

    def call(*args: object) -> object:
        calls.append(len(args[1]) if name == "write" else args[0])  # type: ignore[arg-type]
        if errnos:
            code = errnos.pop(0)
            raise OSError(code, os.strerror(code))
        return real(*args)

    monkeypatch.setattr(os, name, call)
    return calls


def test_an_unacknowledged_write_is_written_again_until_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    root = fake_mount(tmp_path, "t", 1)
    sleeps: list[float] = []
    syncs = failing(monkeypatch, "fsync", [errno.EIO, errno.EAGAIN, errno.ENOTCONN])
    writes = failing(monkeypatch, "write", [])
    w = writer(root, sleep=sleeps.append)
    w.write(pa.record_batch({"value": [b"v%d" % i for i in range(10)]}))
    w.close()
    assert len(syncs) == 4 and sleeps == [0.1, 0.2, 0.4]  # backoff doubling (retry.backoff.ms), then acknowledged
    assert len(writes) == 4 and len(set(writes)) == 1  # the unacknowledged batch, written again each time
    assert [r.value for b in batches_of(root, "t", 0) for r in decode_records(b)] == [b"v%d" % i for i in range(10)]


def test_a_refused_write_and_a_refused_first_open_are_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    root = fake_mount(tmp_path, "t", 1)
    sleeps: list[float] = []
    opens = failing(monkeypatch, "open", [errno.EAGAIN])  # no leader yet
    writes = failing(monkeypatch, "write", [errno.ECONNABORTED])  # the leader's mount went away under the write
    w = writer(root, sleep=sleeps.append)
    w.write(pa.record_batch({"value": [b"x" * 1000] * 3000}))  # past WRITE_BYTES: written before close
    w.close()
    assert len(opens) == 3 and sleeps == [0.1, 0.1]  # the first open, again; then the open of the delivery
    assert writes[0] == writes[1]  # the refused write, made again on the new handle
    assert sum(1 for b in batches_of(root, "t", 0) for _ in decode_records(b)) == 3000


def test_a_tasks_unacknowledged_bytes_over_every_partition_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import logfs.spark.sink

    root = fake_mount(tmp_path, "t", 2)
    monkeypatch.setattr(logfs.spark.sink, "ACK_BYTES", 3 * logfs.spark.sink.WRITE_BYTES)
    syncs = failing(monkeypatch, "fsync", [])
    w = writer(root)
    for _ in range(3):  # about 1.4 MiB per partition per batch: each batch flushes both partitions once
        w.write(pa.record_batch({"value": [b"x" * 1000] * 2800, "partition": [0, 1] * 1400}))
        assert all(p.unacked_bytes <= 2 * logfs.spark.sink.WRITE_BYTES for p in w._open.values())
    assert len(syncs) >= 2  # both partitions fsync'ed once the task held ACK_BYTES over the two
    w.close()


def test_a_refusal_that_is_final_is_not_tried_again_nor_is_a_transactions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    root = fake_mount(tmp_path, "t", 1)
    sleeps: list[float] = []
    failing(monkeypatch, "fsync", [errno.EFBIG])
    w = writer(root, sleep=sleeps.append)
    w.write(pa.record_batch({"value": [b"v"]}))
    with pytest.raises(SinkError, match=r"max\.message\.bytes \[EFBIG\]"):
        w.close()
    assert sleeps == []
    failing(monkeypatch, "fsync", [errno.EIO] * 100)
    w = writer(root, sleep=lambda s: (sleeps.append(s), time.sleep(0.002)), delivery_timeout_ms=1)
    w.write(pa.record_batch({"value": [b"v"]}))
    with pytest.raises(SinkError, match=r"\[EIO\]; still refused after delivery\.timeout\.ms"):
        w.close()
    assert sleeps  # tried again until the delivery timeout


def test_a_transactions_write_is_not_written_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    import logfs.spark.sink

    root = fake_mount(tmp_path, "t", 1)
    fake_mount(root / ".logfs/transactions/q-1", "t", 1)  # the directory mkdir of a transaction shows
    monkeypatch.setattr(logfs.spark.sink, "new_transaction", lambda mount, transactional_id: "q-1")
    sleeps: list[float] = []
    w = writer(root, sleep=sleeps.append, transactional_id="q")
    w.write(pa.record_batch({"value": [b"v"]}))
    assert w.transaction is not None
    failing(monkeypatch, "fsync", [errno.EIO])
    with pytest.raises(SinkError, match=r"\[EIO\]"):
        w.close()
    assert sleeps == []


def test_a_new_topics_mkdir_is_made_again_when_refused_for_now_and_named_when_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    root = fake_mount(tmp_path, "t", 1)
    sleeps: list[float] = []
    made = failing(monkeypatch, "mkdir", [errno.EAGAIN])  # a node with no leader yet: made again
    w = writer(root, topic="new", sleep=sleeps.append)
    with pytest.raises(SinkError, match="has no partitions"):  # a plain directory: the mkdir itself went through
        w.write(pa.record_batch({"value": [b"v"]}))
    assert len(made) == 2 and sleeps == [0.1] and (root / "new").is_dir()
    failing(monkeypatch, "mkdir", [errno.EACCES])
    w = writer(root, topic="other", sleep=sleeps.append)
    with pytest.raises(SinkError, match=r"cannot create topic 'other' under .*: Permission denied \[EACCES\]"):
        w.write(pa.record_batch({"value": [b"v"]}))
    assert sleeps == [0.1]  # a final refusal: not made again
