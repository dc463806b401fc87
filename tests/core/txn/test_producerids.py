"""Producer id allocation (core/txn/producerids.py): ids from 0, a block reserved on disk before any of its ids is
handed out, never reused after a restart or a kill -9, typed errors for a damaged file.

Kafka's counterpart is ``ProducerIdManagerTest`` (ZooKeeper blocks of 1,000 ids); the crash test is logfs's own.
"""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from logfs.core.errors import CorruptCheckpoint, DiskFull, StorageError
from logfs.core.txn import producerids
from logfs.core.txn.producerids import (
    PRODUCER_ID_BLOCK_SIZE,
    PRODUCER_IDS_FILE,
    ProducerIdAllocator,
    ProducerIdBlock,
    decode_block,
    encode_block,
)


def on_disk(root: Path) -> dict[str, object]:
    body = json.loads((root / PRODUCER_IDS_FILE).read_text())
    assert isinstance(body, dict)
    return body


def test_a_fresh_store_hands_out_ids_from_zero_in_order(tmp_path: Path) -> None:
    """ProducerIdManagerTest.testGetProducerId: the first block starts at 0."""
    allocator = ProducerIdAllocator(tmp_path)
    assert not (tmp_path / PRODUCER_IDS_FILE).exists()  # the constructor writes nothing
    assert [allocator.allocate() for _ in range(5)] == [0, 1, 2, 3, 4]


def test_the_block_is_on_disk_before_its_first_id_is_handed_out(tmp_path: Path) -> None:
    allocator = ProducerIdAllocator(tmp_path)
    assert allocator.allocate() == 0
    assert on_disk(tmp_path) == {"version": 1, "block_start": "0", "block_end": str(PRODUCER_ID_BLOCK_SIZE - 1)}
    assert (tmp_path / PRODUCER_IDS_FILE).is_file()
    assert [p.name for p in tmp_path.iterdir()] == [PRODUCER_IDS_FILE]  # a plain file, no directory, no .tmp left


def test_a_restart_starts_after_the_reserved_block_and_loses_its_rest(tmp_path: Path) -> None:
    """ProducerIdManagerTest: a new manager starts at the block after the one recorded."""
    first = ProducerIdAllocator(tmp_path)
    assert [first.allocate() for _ in range(3)] == [0, 1, 2]
    second = ProducerIdAllocator(tmp_path)
    assert second.peek() == PRODUCER_ID_BLOCK_SIZE
    assert second.allocate() == PRODUCER_ID_BLOCK_SIZE
    assert on_disk(tmp_path)["block_end"] == str(2 * PRODUCER_ID_BLOCK_SIZE - 1)


def test_a_restart_before_any_allocation_moves_nothing(tmp_path: Path) -> None:
    ProducerIdAllocator(tmp_path).allocate()
    ProducerIdAllocator(tmp_path)  # opened, never used: no block taken
    assert ProducerIdAllocator(tmp_path).allocate() == PRODUCER_ID_BLOCK_SIZE


def test_the_next_block_is_reserved_when_one_runs_out(tmp_path: Path) -> None:
    """ProducerIdManagerTest.testExceedProducerIdLimit's happy half: blocks follow each other without a gap."""
    allocator = ProducerIdAllocator(tmp_path, block_size=3)
    assert [allocator.allocate() for _ in range(7)] == list(range(7))
    assert on_disk(tmp_path)["block_start"] == "6"
    assert on_disk(tmp_path)["block_end"] == "8"


def test_allocate_is_thread_safe(tmp_path: Path) -> None:
    allocator = ProducerIdAllocator(tmp_path, block_size=50)
    results: list[list[int]] = [[] for _ in range(8)]

    def run(out: list[int]) -> None:
        for _ in range(400):
            out.append(allocator.allocate())

    threads = [threading.Thread(target=run, args=(out,)) for out in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [pid for out in results for pid in out]
    assert sorted(every) == list(range(8 * 400))
    assert all(out == sorted(out) for out in results)


def test_advance_past_moves_the_counter_durably_and_never_back(tmp_path: Path) -> None:
    allocator = ProducerIdAllocator(tmp_path)
    allocator.advance_past(41_999)
    assert allocator.allocate() == 42_000
    allocator.advance_past(10)  # below: nothing moves
    assert allocator.allocate() == 42_001
    assert ProducerIdAllocator(tmp_path).allocate() > 42_001
    with pytest.raises(ValueError):
        allocator.advance_past(-1)


def test_a_failed_reservation_hands_out_nothing_and_the_next_call_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    allocator = ProducerIdAllocator(tmp_path)
    real = producerids.replace_file

    def full(path: Path, data: bytes, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(producerids, "replace_file", full)
    with pytest.raises(DiskFull):
        allocator.allocate()
    monkeypatch.setattr(producerids, "replace_file", lambda p, d, **k: (_ for _ in ()).throw(OSError(errno.EIO, "EIO")))
    with pytest.raises(StorageError):
        allocator.allocate()
    monkeypatch.setattr(producerids, "replace_file", real)
    assert allocator.allocate() == 0
    assert on_disk(tmp_path)["block_start"] == "0"


def test_encode_and_decode_round_trip(tmp_path: Path) -> None:
    block = ProducerIdBlock(2000, 2999)
    assert encode_block(block) == b'{"version":1,"block_start":"2000","block_end":"2999"}\n'
    assert decode_block(tmp_path / "x", encode_block(block)) == block


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "not a producer id block"),
        (b"\xff\xfe", "not a producer id block"),
        (b"{", "not a producer id block"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"version":2,"block_start":"0","block_end":"999"}', "unrecognised version"),
        (b'{"block_start":"0","block_end":"999"}', "unrecognised version"),
        (b'{"version":1,"block_start":0,"block_end":"999"}', "block_start is 0"),
        (b'{"version":1,"block_start":"0","block_end":"-1"}', "block_end is '-1'"),
        (b'{"version":1,"block_start":"0"}', "block_end is None"),
        (b'{"version":1,"block_start":"1000","block_end":"999"}', "not a valid range"),
        (b'{"version":1,"block_start":"0","block_end":"9223372036854775808"}', "not a valid range"),
        (b" " * 5000, "larger than"),
    ],
)
def test_a_damaged_file_raises_corrupt_checkpoint_and_is_left_alone(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    """Never restart at 0 over a damaged file: that would reuse ids the logs hold."""
    path = tmp_path / PRODUCER_IDS_FILE
    path.write_bytes(content)
    with pytest.raises(CorruptCheckpoint, match=reason) as info:
        ProducerIdAllocator(tmp_path)
    assert info.value.path == str(path)
    assert path.read_bytes() == content


def test_a_directory_in_place_of_the_file_is_a_storage_error(tmp_path: Path) -> None:
    (tmp_path / PRODUCER_IDS_FILE).mkdir()
    with pytest.raises(StorageError):
        ProducerIdAllocator(tmp_path)


# --- kill -9 -----------------------------------------------------------------------------------------------------

_CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from logfs.core.txn.producerids import ProducerIdAllocator

    allocator = ProducerIdAllocator(Path(sys.argv[1]), block_size=int(sys.argv[2]))
    for _ in range(1_000_000):
        print(allocator.allocate(), flush=True)
    """
)


def test_ids_acknowledged_before_a_kill_9_are_never_handed_out_again(tmp_path: Path) -> None:
    """Several rounds: a child allocates and prints ids until SIGKILL; every id it printed, in every round, is
    below the next allocation, and no id was printed twice."""
    seed = random.randrange(2**32)
    print(f"seed={seed}")
    rng = random.Random(seed)
    acknowledged: list[int] = []
    for _ in range(5):
        block_size = rng.choice([1, 7, 100, PRODUCER_ID_BLOCK_SIZE])
        wanted = rng.randint(1, 400)
        child = subprocess.Popen(
            [sys.executable, "-u", "-c", _CHILD, str(tmp_path), str(block_size)],
            stdout=subprocess.PIPE,
            cwd=tmp_path,
        )
        assert child.stdout is not None
        try:
            round_ids: list[int] = []
            deadline = time.monotonic() + 30
            while len(round_ids) < wanted and time.monotonic() < deadline:
                line = child.stdout.readline()
                assert line, "the child ended early"
                round_ids.append(int(line))
            os.kill(child.pid, signal.SIGKILL)
            rest = child.stdout.read()  # the same buffered reader: communicate() would skip what it holds
            child.wait(30)
            round_ids.extend(int(line) for line in rest.split())  # printed before the kill landed: acknowledged
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert child.returncode == -signal.SIGKILL
        assert round_ids == sorted(round_ids)
        acknowledged.extend(round_ids)
        nxt = ProducerIdAllocator(tmp_path, block_size=1).peek()
        assert max(acknowledged) < nxt, f"seed={seed}"
    assert len(set(acknowledged)) == len(acknowledged), f"seed={seed}"
