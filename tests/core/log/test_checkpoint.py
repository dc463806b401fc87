"""Checkpoint files: Kafka's text format byte for byte, atomic replacement, and one test per kind of damage."""

from __future__ import annotations

from pathlib import Path

import pytest

from logfs.core.checkpoint import (
    LEADER_EPOCH_CHECKPOINT_FILENAME,
    EpochEntry,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    TopicPartition,
)
from logfs.core.errors import CorruptCheckpoint, StorageError


def write_raw(path: Path, text: str | bytes) -> Path:
    """Damage helper: put exactly these bytes in the file, as a hand edit or a torn disk would."""
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


# --- round trips and exact bytes ---------------------------------------------------------------------------------


def test_offset_checkpoint_round_trip_and_bytes(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / "recovery-point-offset-checkpoint")
    offsets = {TopicPartition("orders", 1): 87, TopicPartition("orders", 0): 1043, TopicPartition("audit", 3): 0}
    checkpoint.write(offsets)
    assert checkpoint.path.read_bytes() == b"0\n3\naudit 3 0\norders 0 1043\norders 1 87\n"  # sorted, one space
    assert checkpoint.read() == offsets


def test_offset_checkpoint_accepts_plain_tuple_keys(tmp_path: Path) -> None:
    checkpoint = OffsetCheckpointFile(tmp_path / "replication-offset-checkpoint")
    checkpoint.write({("t", 0): 5})
    assert checkpoint.read() == {("t", 0): 5}


def test_leader_epoch_checkpoint_round_trip_and_bytes(tmp_path: Path) -> None:
    checkpoint = LeaderEpochCheckpointFile.in_dir(tmp_path)
    assert checkpoint.path == tmp_path / LEADER_EPOCH_CHECKPOINT_FILENAME
    entries = [EpochEntry(0, 0), EpochEntry(3, 1043), EpochEntry(4, 2**40)]
    checkpoint.write(entries)
    assert checkpoint.path.read_bytes() == b"0\n3\n0 0\n3 1043\n4 1099511627776\n"
    assert checkpoint.read() == entries


def test_empty_checkpoint_bytes(tmp_path: Path) -> None:
    checkpoint = LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")
    checkpoint.write([])
    assert checkpoint.path.read_bytes() == b"0\n0\n"
    assert checkpoint.read() == []


def test_kafka_javadoc_example_reads(tmp_path: Path) -> None:
    """LeaderEpochCheckpointFile's class comment: fields separated by two spaces still read."""
    path = write_raw(tmp_path / "leader-epoch-checkpoint", "0\n2\n0  1\n1  2\n")
    assert LeaderEpochCheckpointFile(path).read() == [(0, 1), (1, 2)]


@pytest.mark.parametrize(
    "text",
    [
        "0\n1\nt\t0\t5\n",  # tabs
        "0\n1\nt 0 5   \n",  # trailing whitespace
        "0\r\n1\r\nt 0 5\r\n",  # CRLF line ends
        "0\n1\nt 0 5",  # no final line end
        "0\n1\nt +0 +5\n",  # Java's parseInt takes a sign
    ],
)
def test_lines_read_as_java_reads_them(tmp_path: Path, text: str) -> None:
    path = write_raw(tmp_path / "log-start-offset-checkpoint", text)
    assert OffsetCheckpointFile(path).read() == {("t", 0): 5}


def test_a_partition_listed_twice_keeps_its_last_line(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "c", "0\n2\nt 0 5\nt 0 9\n")
    assert OffsetCheckpointFile(path).read() == {("t", 0): 9}


# --- absent and short files ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [None, "", "0\n", "0"])
def test_absent_empty_or_version_only_file_has_no_entries(tmp_path: Path, text: str | None) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    if text is not None:
        write_raw(path, text)
    assert LeaderEpochCheckpointFile(path).read() == []
    assert OffsetCheckpointFile(path).read() == {}


# --- damage: one per test -----------------------------------------------------------------------------------------


def test_unknown_version_raises_corrupt_checkpoint(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "c", "1\n0\n")
    with pytest.raises(CorruptCheckpoint, match="unrecognised version 1, expected 0") as caught:
        LeaderEpochCheckpointFile(path).read()
    assert (caught.value.path, caught.value.line_number) == (str(path), 1)
    assert isinstance(caught.value, StorageError)


def test_malformed_version_line_raises_corrupt_checkpoint(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "c", "zero\n0\n")
    with pytest.raises(CorruptCheckpoint, match="malformed version") as caught:
        LeaderEpochCheckpointFile(path).read()
    assert caught.value.line_number == 1


def test_malformed_count_line_raises_corrupt_checkpoint(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "c", "0\n-1\n")
    with pytest.raises(CorruptCheckpoint, match="malformed entry count") as caught:
        LeaderEpochCheckpointFile(path).read()
    assert caught.value.line_number == 2


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("3", "one field"),
        ("3 10 7", "three fields"),
        (" 3 10", "leading whitespace makes an empty first field, as Java's split does"),
        ("3 ten", "not a number"),
        ("3 1e3", "not an integer"),
        ("2147483648 10", "epoch above int32"),
        ("3 9223372036854775808", "offset above int64"),
        ("", "an empty line"),
    ],
)
def test_malformed_epoch_line_raises_corrupt_checkpoint(tmp_path: Path, line: str, why: str) -> None:
    path = write_raw(tmp_path / "c", f"0\n2\n1 5\n{line}\n")
    with pytest.raises(CorruptCheckpoint, match="malformed line") as caught:
        LeaderEpochCheckpointFile(path).read()
    assert caught.value.line_number == 4, why


@pytest.mark.parametrize("line", ["t 0", "t 0 5 6", "t zero 5", "t 0 five", "t 2147483648 5"])
def test_malformed_offset_line_raises_corrupt_checkpoint(tmp_path: Path, line: str) -> None:
    path = write_raw(tmp_path / "c", f"0\n1\n{line}\n")
    with pytest.raises(CorruptCheckpoint, match="malformed line") as caught:
        OffsetCheckpointFile(path).read()
    assert caught.value.line_number == 3


@pytest.mark.parametrize("text", ["0\n3\n1 5\n2 9\n", "0\n1\n1 5\n2 9\n"])
def test_count_mismatch_raises_corrupt_checkpoint(tmp_path: Path, text: str) -> None:
    path = write_raw(tmp_path / "c", text)
    with pytest.raises(CorruptCheckpoint, match="entries but found 2") as caught:
        LeaderEpochCheckpointFile(path).read()
    assert caught.value.line_number is None


def test_bytes_that_are_not_utf8_raise_corrupt_checkpoint(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "c", b"0\n1\n\xff 0 5\n")
    with pytest.raises(CorruptCheckpoint, match="not UTF-8 at byte 4"):
        OffsetCheckpointFile(path).read()


def test_unreadable_file_raises_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "c"
    path.mkdir()  # a directory where the file should be
    with pytest.raises(StorageError) as caught:
        OffsetCheckpointFile(path).read()
    assert not isinstance(caught.value, CorruptCheckpoint)


# --- atomic replacement ------------------------------------------------------------------------------------------


def test_write_replaces_through_a_temporary_file_and_leaves_none(tmp_path: Path) -> None:
    checkpoint = LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")
    stale = write_raw(tmp_path / "leader-epoch-checkpoint.tmp", "half a file from a crash")
    checkpoint.write([EpochEntry(1, 5)])
    checkpoint.write([EpochEntry(1, 5), EpochEntry(2, 9)], sync=False)
    assert not stale.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["leader-epoch-checkpoint"]
    assert checkpoint.read() == [(1, 5), (2, 9)]


def test_write_if_dir_exists_skips_a_deleted_directory(tmp_path: Path) -> None:
    checkpoint = LeaderEpochCheckpointFile(tmp_path / "gone-0" / "leader-epoch-checkpoint")
    assert not checkpoint.write_if_dir_exists([EpochEntry(1, 5)])
    with pytest.raises(StorageError):
        checkpoint.write([EpochEntry(1, 5)])
    (tmp_path / "gone-0").mkdir()
    assert checkpoint.write_if_dir_exists([EpochEntry(1, 5)])
    assert checkpoint.read() == [(1, 5)]
