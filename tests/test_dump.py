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
