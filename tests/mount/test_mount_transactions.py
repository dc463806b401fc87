"""Idempotent producers and transactions through a real mount (``.logfs/producer-id`` and
``.logfs/transactions/``; docs/mount.md, "Idempotent producers and transactions"): producer ids, duplicates stored once,
EILSEQ and ESTALE, control batches refused, mkdir/commit/abort, fencing, timeouts, and a kill -9 in the middle of a
transaction.

Batches with producer fields are built by kafka-python's ``DefaultRecordBatchBuilder`` (an independent encoder).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from conftest import Mount, errno_of, finish_mount, start_mount, state, write_all
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from logfs.core.format.batch import iter_batch_positions, read_header
from logfs.core.format.control import ControlType
from logfs.core.format.encode import encode_end_txn_marker
from logfs.core.store import Store
from logfs.core.storeconfig import StoreConfig
from logfs.mount.operations import Operations

TXNS = ".logfs/transactions"


@pytest.fixture
def mnt(mounted: Mount) -> Path:
    return mounted.path


def producer_batch(producer_id: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    """An idempotent producer's batch, as kafka-python encodes it."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=producer_id, producer_epoch=epoch,
        base_sequence=sequence, batch_size=1 << 20,
    )  # fmt: skip
    for i, value in enumerate(values):
        builder.append(i, timestamp=int(time.time() * 1000), key=None, value=value, headers=[])
    return bytes(builder.build())


def new_producer(mnt: Path) -> tuple[int, int]:
    producer_id, epoch = (mnt / ".logfs/producer-id").read_text().split()
    return int(producer_id), int(epoch)


def stored_batches(mnt: Path, topic: str, partition: int = 0) -> list[DefaultRecordBatch]:
    """Every stored batch of a partition up to its HW, parsed by kafka-python."""
    data = (mnt / topic / str(partition) / "at/earliest.kafka").read_bytes()
    return [DefaultRecordBatch(data[p : p + n]) for p, n in iter_batch_positions(data)]


def values(mnt: Path, topic: str, partition: int = 0, *, committed: bool = False) -> list[str]:
    base = mnt / topic / str(partition) / ("committed/at" if committed else "at")
    return (base / "earliest").read_text().splitlines()


# --- producer ids ---------------------------------------------------------------------------------------------------


def test_each_open_of_producer_id_gives_a_fresh_id_at_epoch_0(mnt: Path) -> None:
    ids = [new_producer(mnt) for _ in range(5)]
    assert [e for _, e in ids] == [0] * 5
    assert len({p for p, _ in ids}) == 5 and [p for p, _ in ids] == sorted(p for p, _ in ids)
    assert subprocess.run(["cat", str(mnt / ".logfs/producer-id")], capture_output=True).stdout.endswith(b" 0\n")


def test_producer_ids_stay_unique_after_kill_9_of_the_mount(tmp_path: Path) -> None:
    seen: list[int] = []
    for _ in range(3):
        mount = start_mount(tmp_path / "store", tmp_path / "mnt")
        try:
            seen += [new_producer(mount.path)[0] for _ in range(4)]
            mount.proc.send_signal(signal.SIGKILL)
            mount.proc.wait(10)
        finally:
            mount.stop()
    assert len(set(seen)) == len(seen), seen
    assert seen == sorted(seen)


# --- idempotence through batches --------------------------------------------------------------------------------


def test_a_retried_batch_is_acknowledged_and_stored_once(mnt: Path) -> None:
    os.mkdir(mnt / "idem")
    pid, epoch = new_producer(mnt)
    first = producer_batch(pid, epoch, 0, [b"a", b"b"])
    second = producer_batch(pid, epoch, 2, [b"c"])
    fd = os.open(mnt / "idem/0/batches", os.O_RDWR)
    try:
        for batch in (first, second, first, second):  # the last two: retries of stored batches
            assert os.write(fd, batch) == len(batch)
        responses = os.read(fd, 4096).decode().splitlines()
    finally:
        os.close(fd)
    assert responses == ["0 0 1", "0 2 2", "0 0 1", "0 2 2"]  # a duplicate reports the original's offsets
    assert values(mnt, "idem") == ["a", "b", "c"]
    assert [b.producer_id for b in stored_batches(mnt, "idem")] == [pid, pid]


def test_out_of_order_sequence_is_eilseq_and_a_fenced_epoch_is_estale(mnt: Path, mounted: Mount) -> None:
    mounted.allow_refusals("/seq/0/batches:", "write")
    os.mkdir(mnt / "seq")
    pid, _ = new_producer(mnt)
    write_all(mnt / "seq/0/batches", producer_batch(pid, 1, 0, [b"epoch-1"]))
    assert errno_of(write_all, mnt / "seq/0/batches", producer_batch(pid, 1, 5, [b"gap"])) == errno.EILSEQ
    assert errno_of(write_all, mnt / "seq/0/batches", producer_batch(pid, 0, 0, [b"old"])) == errno.ESTALE
    assert values(mnt, "seq") == ["epoch-1"]


def test_a_client_control_batch_is_ebadmsg_and_nothing_is_stored(mnt: Path, mounted: Mount) -> None:
    mounted.allow_refusals("/ctl/0/batches:", "write")
    os.mkdir(mnt / "ctl")
    marker = encode_end_txn_marker(ControlType.COMMIT, producer_id=7, producer_epoch=0, coordinator_epoch=0,
                                   timestamp=int(time.time() * 1000))  # fmt: skip
    assert errno_of(write_all, mnt / "ctl/0/batches", marker) == errno.EBADMSG
    assert state(mnt, "ctl")["log_end_offset"] == 0


# --- transactions -------------------------------------------------------------------------------------------------


def markers(mnt: Path, topic: str, partition: int = 0) -> list[tuple[int, int]]:
    """(offset, control type) of the markers stored in a partition."""
    data = (mnt / topic / str(partition) / "at/earliest.kafka").read_bytes()
    out = []
    for position, _ in iter_batch_positions(data):
        h = read_header(data, position)
        if h.is_control:
            key = DefaultRecordBatch(data[position : position + h.size])
            record = next(iter(key))
            out.append((h.base_offset, int.from_bytes(record.key[2:4], "big")))
    return out


def test_a_committed_transaction_end_to_end(mnt: Path, mounted: Mount) -> None:
    mounted.allow_refusals(f"/{TXNS}/tx1: EEXIST", "mkdir")
    os.mkdir(mnt / "orders")
    os.mkdir(mnt / TXNS / "tx1")
    assert os.listdir(mnt / TXNS) == ["tx1"]
    assert errno_of(os.mkdir, mnt / TXNS / "tx1") == errno.EEXIST
    assert sorted(os.listdir(mnt / TXNS / "tx1")) == ["control", "orders"]
    write_all(mnt / TXNS / "tx1/orders/0/append", b"one\ntwo\n")
    write_all(mnt / TXNS / "tx1/orders/0/append.jsonl", b'{"key": "k", "value": "three"}\n')
    write_all(mnt / "orders/0/append", b"plain\n")
    st = state(mnt, "orders")
    assert st["last_stable_offset"] == 0 and st["high_watermark"] == 4  # pinned at the transaction's first offset
    assert st["open_transactions"] == [{"producer_id": st["open_transactions"][0]["producer_id"], "first_offset": 0}]
    write_all(mnt / TXNS / "tx1/control", b"commit\n")
    assert os.listdir(mnt / TXNS) == []
    assert not (mnt / TXNS / "tx1").exists()
    st = state(mnt, "orders")
    assert st["last_stable_offset"] == st["high_watermark"] == 5 and st["open_transactions"] == []
    assert markers(mnt, "orders") == [(4, ControlType.COMMIT)]
    assert values(mnt, "orders") == ["one", "two", "three", "plain"]
    batches = stored_batches(mnt, "orders")
    assert [b.is_transactional for b in batches] == [True, True, False, True]
    assert batches[0].producer_id == batches[1].producer_id == batches[3].producer_id >= 0
    assert [b.base_sequence for b in batches[:2]] == [0, 2]  # the mount numbers the transaction's batches


@contextlib.contextmanager
def append_in_transaction(mnt: Path, txn: str) -> Iterator[int]:
    """Topic ``t`` and transaction ``txn`` made; a write handle on the transaction's ``t/0/append``, always closed."""
    os.mkdir(mnt / "t")
    os.mkdir(mnt / TXNS / txn)
    fd = os.open(mnt / TXNS / txn / "t/0/append", os.O_WRONLY)
    try:
        yield fd
    finally:
        os.close(fd)


def test_an_aborted_transaction_is_marked_and_its_handles_are_fenced(mnt: Path, mounted: Mount) -> None:
    mounted.allow_refusals(f"/{TXNS}/gone/t/0/append: ESTALE", "write")
    with append_in_transaction(mnt, "gone") as fd:
        os.write(fd, b"doomed\n")
        write_all(mnt / TXNS / "gone/control", b"abort\n")
        assert errno_of(os.write, fd, b"late\n") == errno.ESTALE  # the transaction ended under the handle
    assert markers(mnt, "t") == [(1, ControlType.ABORT)]
    assert values(mnt, "t") == ["doomed"]
    assert state(mnt, "t")["last_stable_offset"] == 2


def test_a_new_holder_takes_over_with_abort_then_mkdir_and_fences_the_old_one(mnt: Path, mounted: Mount) -> None:
    mounted.allow_refusals(f"/{TXNS}/job/t/0/append: ESTALE", "write")
    with append_in_transaction(mnt, "job") as old:
        os.write(old, b"old holder\n")
        write_all(mnt / TXNS / "job/control", b"abort\n")  # the new holder: the stuck one is aborted
        os.mkdir(mnt / TXNS / "job")  # and begun again, in a new producer epoch
        write_all(mnt / TXNS / "job/t/0/append", b"new holder\n")
        assert errno_of(os.write, old, b"zombie\n") == errno.ESTALE
        write_all(mnt / TXNS / "job/control", b"commit\n")
    assert values(mnt, "t") == ["old holder", "new holder"]
    assert [t for _, t in markers(mnt, "t")] == [ControlType.ABORT, ControlType.COMMIT]


def test_control_takes_commit_or_abort_only(mnt: Path, mounted: Mount) -> None:
    mounted.allow_refusals(f"/{TXNS}/")
    os.mkdir(mnt / TXNS / "c")
    assert errno_of(write_all, mnt / TXNS / "c/control", b"maybe\n") == errno.EINVAL
    assert os.listdir(mnt / TXNS) == ["c"]
    assert errno_of(os.mkdir, mnt / TXNS / "bad name!") == errno.EINVAL
    assert errno_of(os.rmdir, mnt / TXNS / "c") == errno.EPERM
    write_all(mnt / TXNS / "c/control", b"abort\n")


@pytest.fixture
def short_timeout(tmp_path: Path) -> Iterator[Mount]:
    mount = start_mount(tmp_path / "store", tmp_path / "mnt", "transaction.timeout.ms=1000")
    mount.allow_log(r"timed out and aborted")
    try:
        yield mount
    finally:
        finish_mount(mount)


def wait_for(check, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.alone  # the timeout acted on within 4 s
def test_a_forgotten_transaction_is_aborted_after_its_timeout(short_timeout: Mount) -> None:
    mnt = short_timeout.path
    os.mkdir(mnt / "t")
    os.mkdir(mnt / TXNS / "slow")
    write_all(mnt / TXNS / "slow/t/0/append", b"forgotten\n")
    assert state(mnt, "t")["last_stable_offset"] == 0
    began = time.monotonic()
    wait_for(lambda: not os.listdir(mnt / TXNS))
    assert time.monotonic() - began < 4  # 1 s timeout, checked every second
    wait_for(lambda: state(mnt, "t")["last_stable_offset"] == 2)
    assert markers(mnt, "t") == [(1, ControlType.ABORT)]


def test_kill_9_in_the_middle_of_a_transaction_then_timeout_abort(tmp_path: Path) -> None:
    mount = start_mount(tmp_path / "store", tmp_path / "mnt", "transaction.timeout.ms=1500")
    try:
        mnt = mount.path
        os.mkdir(mnt / "t")
        write_all(mnt / "t/0/append", b"before\n")
        os.mkdir(mnt / TXNS / "crash")
        write_all(mnt / TXNS / "crash/t/0/append", b"in flight\n")
        mount.proc.send_signal(signal.SIGKILL)
        mount.proc.wait(10)
    finally:
        mount.stop()
    mount = start_mount(tmp_path / "store", tmp_path / "mnt", "transaction.timeout.ms=1500")
    mount.allow_log(r"timed out and aborted")
    mount.allow_log(r"the segment will be recovered")  # after the kill: the active segment's index is rebuilt
    try:
        mnt = mount.path
        wait_for(lambda: not os.listdir(mnt / TXNS))
        wait_for(lambda: state(mnt, "t")["last_stable_offset"] == 3)
        assert values(mnt, "t") == ["before", "in flight"]
        assert markers(mnt, "t") == [(2, ControlType.ABORT)]
        assert json.loads((mnt / "t/0/state").read_text())["open_transactions"] == []
    finally:
        finish_mount(mount)


def test_interleaved_transactions_across_two_partitions_one_committed_one_aborted(mnt: Path) -> None:
    """Two transactions writing to both partitions of a topic in turns, with plain records between: after one
    commits and the other aborts, ``committed/at/earliest`` holds the committed and the plain records in offset
    order and ``at/earliest`` every data record; the LSO stays at the first open transaction's first offset until
    both ended."""
    os.mkdir(mnt / "pairs")
    os.mkdir(mnt / "pairs/1")
    os.mkdir(mnt / TXNS / "keep")
    os.mkdir(mnt / TXNS / "drop")
    expected_all: dict[int, list[str]] = {0: [], 1: []}
    expected_committed: dict[int, list[str]] = {0: [], 1: []}
    for step in range(3):
        for p in (0, 1):
            for txn in ("keep", "drop"):
                line = f"{txn}-{p}-{step}"
                write_all(mnt / TXNS / txn / f"pairs/{p}/append", line.encode() + b"\n")
                expected_all[p].append(line)
                if txn == "keep":
                    expected_committed[p].append(line)
            plain = f"plain-{p}-{step}"
            write_all(mnt / f"pairs/{p}/append", plain.encode() + b"\n")
            expected_all[p].append(plain)
            expected_committed[p].append(plain)
    for p in (0, 1):
        assert state(mnt, "pairs", p)["last_stable_offset"] == 0
        assert values(mnt, "pairs", p, committed=True) == []  # pinned under the open transactions
    write_all(mnt / TXNS / "drop/control", b"abort\n")
    assert state(mnt, "pairs", 0)["last_stable_offset"] == 0  # "keep" is still open from offset 0
    write_all(mnt / TXNS / "keep/control", b"commit\n")
    for p in (0, 1):
        st = state(mnt, "pairs", p)
        assert st["last_stable_offset"] == st["high_watermark"] == st["log_end_offset"]
        assert values(mnt, "pairs", p) == expected_all[p]
        assert values(mnt, "pairs", p, committed=True) == expected_committed[p]
        jsonl = (mnt / f"pairs/{p}/committed/at/earliest.jsonl").read_text().splitlines()
        assert [json.loads(line)["value"] for line in jsonl] == expected_committed[p]


def test_commit_with_a_label_makes_the_label_exist(mnt: Path, mounted: Mount) -> None:
    """``commit <label>`` records the label with the decision: ``.logfs/labels/<label>`` exists from then on (how a
    writer that retries learns its commit happened); an abort records none; a bad label is EINVAL."""
    mounted.allow_refusals(f"/{TXNS}/w/control: EINVAL", "write")
    os.mkdir(mnt / "t")
    assert not (mnt / ".logfs/labels/job.7.0").exists()
    os.mkdir(mnt / TXNS / "w")
    write_all(mnt / TXNS / "w/t/0/append", b"x\n")
    assert errno_of(write_all, mnt / TXNS / "w/control", b"commit bad/label\n") == errno.EINVAL
    assert errno_of(write_all, mnt / TXNS / "w/control", b"commit a b\n") == errno.EINVAL
    write_all(mnt / TXNS / "w/control", b"commit job.7.0\n")
    assert (mnt / ".logfs/labels/job.7.0").exists()
    assert (mnt / ".logfs/labels/job.7.0").read_bytes() == b""
    assert os.listdir(mnt / ".logfs/labels") == []  # looked up, never listed
    os.mkdir(mnt / TXNS / "w")
    write_all(mnt / TXNS / "w/control", b"abort\n")
    assert not (mnt / ".logfs/labels/job.8.0").exists()


def test_a_committed_label_is_a_kafka_record_of_transaction_state_and_survives_the_loss_of_the_file(
    tmp_path: Path,
) -> None:
    """The label of a commit is also a record of ``__transaction_state`` (the id's partition by Kafka's hash), read
    back here by kafka-python: key version 32767 and the label, value version 0 and the commit time. A store
    whose own transaction log never knew the commit (a node that replicated the topic and leads now; here the file
    removed between two mounts) still shows the label, so a replayed micro-batch is not committed twice."""
    store = tmp_path / "store"
    mount = start_mount(store, tmp_path / "mnt")
    try:
        mnt = mount.path
        assert errno_of(os.mkdir, mnt / "__transaction_state") == errno.EPERM  # made by the first labelled commit
        os.mkdir(mnt / "t")
        os.mkdir(mnt / TXNS / "job")
        write_all(mnt / TXNS / "job/t/0/append", b"x\n")
        before = int(time.time() * 1000)
        write_all(mnt / TXNS / "job/control", b"commit q.1.7\n")
        records = [r for b in stored_batches(mnt, "__transaction_state", partition_of("job"))
                   for r in b]  # fmt: skip
        assert [(r.key, len(r.value)) for r in records] == [(b"\x7f\xff\x00\x05q.1.7", 10)]
        assert records[0].value[:2] == b"\x00\x00" and int.from_bytes(records[0].value[2:], "big") >= before
        mount.allow_refusals("/__transaction_state(/50)?: EPERM", "(rmdir|mkdir)")
        mount.allow_refusals("/__transaction_state/0/append: EPERM", "open for writing")
        mount.allow_refusals("/.logfs/delete-(topic|records): EPERM", "write")
        # internal: only its coordinator writes it (no client's mkdir, rmdir, write or deletion)
        assert errno_of(os.rmdir, mnt / "__transaction_state") == errno.EPERM
        assert errno_of(os.mkdir, mnt / "__transaction_state/50") == errno.EPERM
        assert errno_of(write_all, mnt / "__transaction_state/0/append", b"forged\n") == errno.EPERM
        assert errno_of(write_all, mnt / ".logfs/delete-topic", b"__transaction_state\n") == errno.EPERM
        assert errno_of(write_all, mnt / ".logfs/delete-records", b"__transaction_state 0 1\n") == errno.EPERM
    finally:
        finish_mount(mount)
    (store / ".logfs-transactions.log").unlink()
    mount = start_mount(store, tmp_path / "mnt")
    mount.allow_refusals(r"/(\.logfs/delete-(topic|records)|__transaction_state[/0-9append]*): EPERM",
                         "(rmdir|mkdir|open for writing|write)")  # the first mount's lines, in the same log
    try:
        assert (mount.path / ".logfs/labels/q.1.7").exists()
        assert not (mount.path / ".logfs/labels/q.1.8").exists()
    finally:
        finish_mount(mount)


def partition_of(transactional_id: str) -> int:
    """Kafka's partitionFor, computed here: abs(Java's String.hashCode) % 50."""
    h = 0
    for ch in transactional_id:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return abs(h) % 50

def test_a_decision_recorded_before_a_crash_is_completed_at_the_next_mount(tmp_path: Path) -> None:
    """The commit decision is durable in the transaction log but no marker was written (the process died between
    the two): the next mount writes the markers, and the records become visible in ``committed/``; the commit's
    label is then recorded in ``__transaction_state`` as a commit's own is (only then does it exist)."""
    from logfs.core.store import Store

    mount = start_mount(tmp_path / "store", tmp_path / "mnt")
    try:
        os.mkdir(mount.path / "t")
        os.mkdir(mount.path / TXNS / "decided")
        write_all(mount.path / TXNS / "decided/t/0/append", b"a\nb\n")
        epoch = state(mount.path, "t")["open_transactions"][0]["producer_id"]
    finally:
        finish_mount(mount)
    store = Store.open(tmp_path / "store")
    try:
        coordinator = store.transactions
        assert coordinator is not None
        info = coordinator.get("decided")
        assert info is not None and info.producer_id == epoch

        def crash(*_: object) -> None:
            raise OSError(errno.EIO, "the process died here")

        with pytest.raises(OSError):
            coordinator.end("decided", info.producer_epoch, commit=True, marker_writer=crash, now_ms=0,
                            label="decided.1.0")
    finally:
        store.abandon()
    mount = start_mount(tmp_path / "store", tmp_path / "mnt")
    mount.allow_log(r"transaction decided completed|the segment will be recovered")
    try:
        wait_for(lambda: state(mount.path, "t")["last_stable_offset"] == 3)
        assert values(mount.path, "t", committed=True) == ["a", "b"]
        assert markers(mount.path, "t") == [(2, ControlType.COMMIT)]
        labels = mount.path / "__transaction_state" / str(partition_of("decided")) / "at/earliest.kafka"
        wait_for(lambda: labels.exists() and labels.stat().st_size > 0)
        records = [r for b in stored_batches(mount.path, "__transaction_state", partition_of("decided")) for r in b]
        assert [r.key for r in records] == [b"\x7f\xff\x00\x0bdecided.1.0"]
        assert (mount.path / ".logfs/labels/decided.1.0").exists()
    finally:
        finish_mount(mount)


def test_a_transaction_unknown_to_the_store_is_aborted_and_its_producer_id_never_reused(tmp_path: Path) -> None:
    """A store whose log holds an open transaction of producer 5000 that its own transaction log never saw (a
    promoted follower's: the coordinator was the old leader's): the mount aborts it (nothing else could ever end
    it, and it would hold the LSO for good), and ``.logfs/producer-id`` answers above 5000 from then on."""
    from logfs.core.format.batch import Record
    from logfs.core.format.encode import encode_batch
    from logfs.core.store import Store

    store = Store.open(tmp_path / "store")
    try:
        store.create_topic("t", 1)
        log = store.log("t", 0)
        now = int(time.time() * 1000)
        log.append_as_leader(bytearray(encode_batch([Record(0, now, None, b"plain")])), 0)
        batch = encode_batch([Record(0, now, None, b"orphan")], producer_id=5000, producer_epoch=3, base_sequence=0,
                             is_transactional=True)  # fmt: skip
        log.append_as_leader(bytearray(batch), 0)
        assert log.open_transactions() == [(5000, 1)]
    finally:
        store.close()
    mount = start_mount(tmp_path / "store", tmp_path / "mnt")
    mount.allow_log(r"producer 5000's transaction from offset 1")
    try:
        mnt = mount.path
        wait_for(lambda: state(mnt, "t")["last_stable_offset"] == 3)
        assert values(mnt, "t", committed=True) == ["plain"]
        assert markers(mnt, "t") == [(2, ControlType.ABORT)]
        assert new_producer(mnt)[0] > 5000
    finally:
        finish_mount(mount)


def test_a_sweep_that_fails_unexpectedly_is_logged_with_its_traceback_and_the_mount_serves_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The transaction sweeps run in the server's nursery beside the FUSE main loop: an exception escaping one
    would end the mount. Core and OS errors were always caught; anything else (a bug) is now logged with its
    traceback and the sweep returns, so the next one retries. Driven directly on the mount's Operations (not
    mounted: the sweep's failure path needs a fault only a bug would cause)."""
    store = Store.open(tmp_path / "store", StoreConfig())
    try:
        ops = Operations(store)
        assert ops.transactions is not None and store.transactions is not None
        store.transactions.begin("t1", timeout_ms=60_000, now_ms=0)

        def buggy(writer: object) -> list[str]:
            raise RuntimeError("a bug in a sweep")

        with caplog.at_level(logging.ERROR, logger="logfs.mount.transactions"):
            trio.run(ops.transactions._sweep, buggy, "timed out and aborted")
        failed = [r for r in caplog.records if "failed unexpectedly" in r.getMessage()]
        assert len(failed) == 1 and failed[0].exc_info is not None
        assert [t.transactional_id for t in store.transactions.open_transactions()] == ["t1"]  # left for the next
        ops.close()
    finally:
        store.close()
