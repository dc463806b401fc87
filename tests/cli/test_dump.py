"""`logfs dump` on real segment files, through the installed console script (exit codes included)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from logfs.core.format.batch import Record, assign_offset_and_epoch
from logfs.core.format.compression import Compression
from logfs.core.format.encode import encode_batch
from logfs.core.log.index import OffsetIndex, TimeIndex

LOGFS = str(Path(sys.executable).parent / "logfs")


def run_dump(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LOGFS, "dump", *args], capture_output=True, text=True, timeout=60)


def write_segment(directory: Path) -> tuple[Path, list[int]]:
    """Three batches (none, gzip, zstd) at offsets 0, 2 and 5, as a leader would store them."""
    log = bytearray()
    positions = []
    offset = 0
    for codec, n in ((Compression.NONE, 2), (Compression.GZIP, 3), (Compression.ZSTD, 1)):
        batch = bytearray(encode_batch([Record(i, 1000 + i, None, f"v{offset + i}".encode()) for i in range(n)],
                                       compression=codec))  # fmt: skip
        assign_offset_and_epoch(batch, 0, offset, 3)
        positions.append(len(log))
        log += batch
        offset += n
    path = directory / f"{0:020d}.log"
    path.write_bytes(bytes(log))
    return path, positions


def test_dump_prints_one_line_per_batch_with_offsets_positions_and_crc(tmp_path: Path) -> None:
    path, positions = write_segment(tmp_path)
    out = run_dump(str(path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"Dumping {path}"
    assert len(lines) == 4
    for line, pos, (base, last) in zip(lines[1:], positions, [(0, 1), (2, 4), (5, 5)], strict=True):
        assert f"baseOffset: {base} lastOffset: {last} " in line
        assert f" position: {pos} " in line
        assert line.endswith("crc=ok")
        assert "partitionLeaderEpoch: 3" in line
    assert "compresscodec: gzip" in lines[2]


def test_dump_records_lists_every_record(tmp_path: Path) -> None:
    path, _ = write_segment(tmp_path)
    out = run_dump("--records", str(path))
    assert out.returncode == 0, out.stderr
    records = [line for line in out.stdout.splitlines() if line.startswith("| ")]
    assert [r.split("payload: ")[1] for r in records] == [f"v{i}" for i in range(6)]
    assert records[3].startswith("| offset: 3 CreateTime: 1001 keySize: -1 valueSize: 2")


def test_dump_flags_a_flipped_byte_as_crc_invalid_and_exits_1(tmp_path: Path) -> None:
    path, positions = write_segment(tmp_path)
    data = bytearray(path.read_bytes())
    data[positions[1] + 70] ^= 0xFF  # inside the second batch's compressed records
    path.write_bytes(bytes(data))
    out = run_dump(str(path))
    assert out.returncode == 1
    lines = out.stdout.splitlines()
    assert lines[1].endswith("crc=ok") and lines[3].endswith("crc=ok")
    assert "crc=invalid" in lines[2] and "CRC-32C mismatch" in lines[2]
    assert "damage found" in out.stderr


def test_dump_reports_a_torn_tail_where_the_scan_stops(tmp_path: Path) -> None:
    path, positions = write_segment(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: positions[2] + 30])
    out = run_dump(str(path))
    assert out.returncode == 1
    assert out.stdout.splitlines()[-1] == f"torn tail at position {positions[2]}: 30 bytes, less than a whole batch"


def test_dump_prints_index_entries_and_stops_at_the_preallocated_tail(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / f"{100:020d}.index", 100, max_index_bytes=4096)
    index.append(105, 4200)
    index.append(120, 9000)
    index.flush()
    index.close_handler()  # keep the preallocated, zero-filled tail, as an active segment's index has
    tindex = TimeIndex(tmp_path / f"{100:020d}.timeindex", 100, max_index_bytes=4096)
    tindex.maybe_append(5000, 105)
    tindex.maybe_append(6000, 120)
    tindex.flush()
    tindex.close_handler()
    out = run_dump(str(tmp_path / f"{100:020d}.index"), str(tmp_path / f"{100:020d}.timeindex"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"Dumping {tmp_path / f'{100:020d}.index'}",
        "offset: 105 position: 4200",
        "offset: 120 position: 9000",
        f"Dumping {tmp_path / f'{100:020d}.timeindex'}",
        "timestamp: 5000 offset: 105",
        "timestamp: 6000 offset: 120",
    ]


def test_dump_refuses_a_file_that_is_not_a_segment_file_with_exit_2(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    out = run_dump(str(other))
    assert out.returncode == 2
    assert "not a .log, .index or .timeindex file" in out.stderr


def _flip(path: Path, at: int, mask: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= mask
    path.write_bytes(bytes(data))


def test_dump_flags_header_fields_the_crc_does_not_cover_and_exits_1(tmp_path: Path) -> None:
    """Issue 23: a base offset that goes back, a leader epoch the partition's epoch checkpoint does not allow, a
    negative epoch below -1 and a magic other than 2 are damage at their batch (crc=ok: the CRC does not cover them)."""
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n1\n3 0\n")
    cases = [
        (7, 0x02, "offsets 0..2 outside [2,"),  # the second batch's base 2 -> 0: overlaps the first (0..1)
        (15, 0x04, "partition leader epoch 7 is not one"),  # epoch 3 -> 7, the checkpoint knows only 3
        (12, 0x80, "partition leader epoch -2147483645"),  # the sign bit
        (16, 0x01, "magic"),
    ]
    for byte, mask, reason in cases:
        path, positions = write_segment(tmp_path)
        _flip(path, positions[1] + byte, mask)
        out = run_dump(str(path))
        assert out.returncode == 1, (reason, out.stdout)
        lines = out.stdout.splitlines()
        assert "invalid=" not in lines[1] and "invalid=" not in lines[3], out.stdout
        assert f"position: {positions[1]} " in lines[2] and "invalid=" in lines[2] and reason in lines[2], lines[2]
        assert "damage found" in out.stderr


def test_dump_calls_a_gap_a_gap_without_the_cleaners_checkpoint(tmp_path: Path) -> None:
    """Offsets 0..1, then 10: without a cleaner-offset-checkpoint covering them, offsets 2..9 are a gap, not
    "removed by compaction", and not damage."""
    log = bytearray()
    for base, n in ((0, 2), (10, 1)):
        batch = bytearray(encode_batch([Record(i, 1000, None, b"v") for i in range(n)]))
        assign_offset_and_epoch(batch, 0, base, 0)
        log += batch
    path = tmp_path / "t-0" / f"{0:020d}.log"
    path.parent.mkdir()
    path.write_bytes(bytes(log))
    out = run_dump(str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "gap: offsets 2..9 (8) hold no batch" in out.stdout and "compaction" not in out.stdout
    (tmp_path / "cleaner-offset-checkpoint").write_text("0\n1\nt 0 11\n")
    out = run_dump(str(path))
    assert out.returncode == 0 and "gap: offsets 2..9 (8) hold no batch (removed by compaction)" in out.stdout
