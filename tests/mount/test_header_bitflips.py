"""A bit flipped in a stored batch's header outside the CRC, through a real mount (issue 23, point 5).

The CRC-32C of a RecordBatch v2 covers neither the base offset, the batch length, the partition leader epoch nor
the magic. One bit flipped in each of them, in a middle batch of a closed segment and in batches of the active
segment (a middle one and the last one, whose only upper bound is the log end offset): every read view — ``at/``
as text, ``.jsonl`` and ``.kafka``, ``hw/``, ``committed/``, ``follow/`` and a fetch answer under ``.logfs/fetch/`` —
fails with EIO and never answers less silently, the mount's log names the segment and the byte position, ``logfs
dump`` of the segment exits 1 naming the damage, and the views read the original bytes again once the bit is
flipped back. Then a campaign: random single-bit flips anywhere in a segment, each read either the original or
EIO.
"""

from __future__ import annotations

import errno
import json
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Mount, make_topic, running_mount, write_all

from logfs.core.format.batch import iter_batch_positions

LOGFS = str(Path(sys.executable).parent / "logfs")
CORRUPT_LOG = r"stored batch at byte \d+ .*the read fails with EIO"

# (what, byte of the header, mask): base offset (bytes 0-7), length (8-11), leader epoch (12-15), magic (16).
FLIPS = [
    ("base offset, a high bit", 1, 0x40),
    ("base offset, bit 33", 3, 0x02),
    ("base offset, the lowest bit", 7, 0x01),
    ("base offset, bit 4", 7, 0x10),
    ("base offset, the sign bit", 0, 0x80),
    ("length, the lowest bit", 11, 0x01),
    ("length, bit 9", 10, 0x02),
    ("leader epoch, the lowest bit", 15, 0x01),
    ("leader epoch, the sign bit", 12, 0x80),
    ("magic", 16, 0x01),
]


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[Mount]:
    """A mount of its own per test: a fetch read as replica 1 makes that follower live, and a topic created within
    replica.lag.time.max.ms of it starts with it in its ISR (Kafka's creation rule), where its HW would wait for a
    follower that never fetches again. So each test creates its topics before its first fetch."""
    with running_mount(tmp_path / "store", tmp_path / "mnt", "replica.ids=0,1") as m:
        m.allow_log(CORRUPT_LOG)
        yield m


def _fill(mnt: Path, topic: str) -> None:
    """40 writes of 4 lines, one batch each, in segments of about 8 batches."""
    make_topic(mnt, topic, segment_bytes=1000)
    for i in range(40):
        write_all(mnt / topic / "0" / "append", b"".join(b"%s-%03d-%d\n" % (topic.encode(), i, k) for k in range(4)))


def _segments(store: Path, topic: str) -> list[Path]:
    return sorted((store / f"{topic}-0").glob("*.log"))


def _positions(log: Path) -> list[int]:
    return [at for at, _ in iter_batch_positions(log.read_bytes())]


VIEWS = [
    "at/earliest",
    "at/earliest.jsonl",
    "at/earliest.kafka",
    "committed/at/earliest",
    "committed/at/earliest.jsonl",
]


def _views(mnt: Path, topic: str, segment: Path, damaged: int | None = None) -> dict[str, Path]:
    part = mnt / topic / "0"
    views = {v: part / v for v in VIEWS}
    views["hw"] = part / "hw" / f"{segment.name.removesuffix('.log')}.jsonl"
    if damaged is not None:  # a view that starts at the damaged batch's offset, found through the offset index
        views["at/<offset>"] = part / "at" / str(damaged)
    base = int(segment.name.split(".")[0])
    views["fetch"] = mnt / ".logfs/fetch/1" / topic / "0" / f"{base}.-1"
    return views


def _read(path: Path) -> bytes | int:
    """The whole file, or the errno of the open or a read that failed."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        return exc.errno or -1
    try:
        data = b""
        while chunk := os.read(fd, 1 << 16):
            data += chunk
        return data
    except OSError as exc:
        return exc.errno or -1
    finally:
        os.close(fd)


def _follow(mnt: Path, topic: str) -> subprocess.CompletedProcess[bytes]:
    """``cat follow/earliest`` for at most 5 s: it must stop at the damage with EIO, not wait at a silent end."""
    return subprocess.run(
        ["timeout", "5", "cat", str(mnt / topic / "0" / "follow" / "earliest")], capture_output=True, check=False
    )


def _flip(log: Path, at: int, mask: int) -> None:
    with open(log, "r+b") as f:
        f.seek(at)
        byte = f.read(1)[0]
        f.seek(at)
        f.write(bytes([byte ^ mask]))


@pytest.mark.parametrize("where", ["closed middle", "active middle", "active last"])
def test_one_flipped_header_bit_fails_every_view_with_eio_and_names_the_batch(mount: Mount, where: str) -> None:
    store, mnt = mount
    for n in range(len(FLIPS)):  # every topic before the first fetch (see the fixture)
        _fill(mnt, f"flip-{where.replace(' ', '-')}-{n}")
    for n, (what, byte, mask) in enumerate(FLIPS):
        topic = f"flip-{where.replace(' ', '-')}-{n}"
        segments = _segments(store, topic)
        assert len(segments) >= 3, "the topic needs closed segments"
        segment = segments[1] if where == "closed middle" else segments[-1]
        positions = _positions(segment)
        assert len(positions) >= 3, f"{segment} holds {len(positions)} batches"
        position = positions[-1] if where == "active last" else positions[len(positions) // 2]
        views = _views(mnt, topic, segment, int.from_bytes(segment.read_bytes()[position : position + 8], "big"))
        _flip(segment, position + byte, mask)
        for name, path in views.items():
            got = _read(path)
            assert got == errno.EIO, f"{what} at byte {position} of {segment.name}: {name} answered {got!r:.200}"
        follow = _follow(mnt, topic)
        assert follow.returncode == 1 and b"Input/output error" in follow.stderr, (what, follow)
        log = mount.log_text()
        named = [line for line in log.splitlines() if segment.name in line and re.search(CORRUPT_LOG, line)]
        assert named, f"{what}: no log line names {segment.name}"
        assert any(f"byte {position}" in line for line in named), f"{what}: no log line names byte {position}"
        if where != "active last":  # offline, nothing bounds the last batch of a log from above (docs/storage.md)
            dump = subprocess.run([LOGFS, "dump", str(segment)], capture_output=True, text=True, check=False)
            damage = [line for line in dump.stdout.splitlines() if re.search(r"invalid|corrupt at|torn tail", line)]
            assert dump.returncode == 1 and damage, f"{what}: logfs dump exited {dump.returncode}:\n{dump.stdout}"
        _flip(segment, position + byte, mask)  # back: the same views read the original bytes
        got_back = {name: _read(path) for name, path in views.items()}
        for name, data in got_back.items():
            assert isinstance(data, bytes) and data, f"{what}, flipped back: {name} answered {data!r:.200}"
        text = got_back["at/earliest"]
        assert isinstance(text, bytes)
        assert text.count(b"\n") == 160 and text.startswith(f"{topic}-000-0\n".encode())


def test_random_single_bit_flips_anywhere_in_a_segment_read_the_original_or_fail(mount: Mount) -> None:
    """The campaign: 150 rounds (seeded, reproducible) of one bit flipped at a random byte of a random segment of
    a topic — headers, CRCs, records alike — then every view read (``at/`` from the start and from an offset in
    text, ``.jsonl`` and ``.kafka``, ``committed/``, each segment's ``hw/`` file and a fetch from each segment's
    base): each answer is the original bytes exactly or EIO, never a different or shorter answer. The bit goes back
    after each round."""
    store, mnt = mount
    topic = "campaign"
    _fill(mnt, topic)
    segments = _segments(store, topic)
    part = mnt / topic / "0"
    views = {v: part / v for v in [*VIEWS, "at/77", "at/77.jsonl", "at/77.kafka"]}
    for segment in segments:
        base = int(segment.name.split(".")[0])
        views[f"hw/{base}"] = part / "hw" / f"{segment.name.removesuffix('.log')}.jsonl"
        views[f"fetch {base}"] = mnt / ".logfs/fetch/1" / topic / "0" / f"{base}.-1"
    original = {name: _answer(name, _read(path)) for name, path in views.items()}
    assert all(isinstance(v, bytes) and v for v in original.values())
    rng = random.Random(23)
    failed = served = 0
    for _ in range(150):
        segment = rng.choice(segments)
        size = segment.stat().st_size
        at, mask = rng.randrange(size), 1 << rng.randrange(8)
        _flip(segment, at, mask)
        try:
            for name, path in views.items():
                got = _answer(name, _read(path))
                if got == errno.EIO:
                    failed += 1
                    continue
                assert got == original[name], f"bit {mask:#x} of byte {at} of {segment.name}: {name} differs"
                served += 1
        finally:
            _flip(segment, at, mask)
    print(f"campaign: {failed} reads EIO, {served} reads the original")
    assert failed > 0 and served > 0, (failed, served)


def _answer(name: str, got: bytes | int) -> bytes | int:
    """What a read answered, for comparison: a fetch answer's records (its JSON head holds times and the HW)."""
    if name.startswith("fetch") and isinstance(got, bytes):
        return got.partition(b"\n")[2]
    return got


def test_a_compacted_topic_reads_and_dumps_cleanly_with_its_gaps(tmp_path: Path) -> None:
    """Gaps are not damage: a topic the mount's cleaner compacted reads through every view (offsets rising with
    gaps) and ``logfs dump`` of every segment exits 0, each gap "removed by compaction" (the cleaner's checkpoint
    covers it)."""
    compact = {"cleanup.policy": "compact", "segment.bytes": 4096, "min.cleanable.dirty.ratio": 0.01}
    with running_mount(tmp_path / "store", tmp_path / "mnt", "log.cleaner.backoff.ms=50", "replica.ids=0,1") as mount:
        store, mnt = mount
        part = make_topic(mnt, "kv", **compact) / "0"
        lines = [json.dumps({"key": f"k{i % 10}", "value": f"v{i}-" + "x" * 50}).encode() + b"\n" for i in range(600)]
        for n in range(0, len(lines), 20):
            write_all(part / "append.jsonl", b"".join(lines[n : n + 20]))
        deadline = time.monotonic() + 30
        while (cleaner := json.loads((part / "state").read_text())["cleaner"]) is None or not cleaner[
            "first_dirty_offset"
        ]:
            assert time.monotonic() < deadline, "no clean within 30 s"
            time.sleep(0.05)
        rows = [json.loads(line) for line in (part / "at" / "earliest.jsonl").read_bytes().splitlines()]
        offsets = [r["offset"] for r in rows]
        assert offsets == sorted(set(offsets)) and len(offsets) < 600 and offsets[-1] == 599
        for view in ("at/earliest", "at/earliest.kafka", "committed/at/earliest", ".logfs/fetch/1/kv/0/0.-1"):
            path = part / view if not view.startswith(".") else mnt / view
            got = _read(path)
            assert isinstance(got, bytes) and got, f"{view}: {got!r:.200}"
    segments = _segments(store, "kv")  # unmounted: the cleaner no longer replaces segments under the dump
    command = [LOGFS, "dump", "--records", *map(str, segments)]
    dump = subprocess.run(command, capture_output=True, text=True, check=False)
    assert dump.returncode == 0, dump.stdout + dump.stderr
    # Where the removed offsets show depends on how the rounds fell: a whole batch removed is a gap between batches, a
    # kept batch's removed records a gap inside it (``| gap: …``); the cleaner always leaves one or the other here.
    gaps = [line.removeprefix("| ") for line in dump.stdout.splitlines() if line.removeprefix("| ").startswith("gap: ")]
    assert gaps and all(g.endswith("(removed by compaction)") for g in gaps), dump.stdout[-4000:]
    assert "invalid" not in dump.stdout
