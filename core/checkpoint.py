"""Kafka's checkpoint files: small text files that are rewritten whole and replaced atomically.

Format (Kafka's CheckpointFile): UTF-8 text, one item per line, each line ended by ``\\n``::

    0                    version: CURRENT_VERSION, the only one either format has
    2                    the number of entry lines that follow
    orders 0 1043        OffsetCheckpointFile:      topic partition offset
    orders 1 87
                         LeaderEpochCheckpointFile: epoch startOffset   (e.g. "3 1043")

Fields are written with one space and read as Java's ``line.split("\\\\s+")`` reads them: any run of ASCII
whitespace separates, trailing whitespace is ignored, and leading whitespace makes an empty first field, so such a
line is malformed in Kafka and here alike. Numbers are Java's ``parseInt``/``parseLong``: an optional sign and ASCII
digits within int32 (partition, epoch) or int64 (offsets).

Writing goes to ``<file>.tmp``, which is fsynced, renamed over the file, and the directory fsynced: a crash leaves
either the old checkpoint or the new one, never a mix (a stale ``.tmp`` may remain; the next write truncates it).
Reading follows Kafka's rules: an empty file (or one holding only the version line) has no entries; an absent file
reads as empty too, because Kafka creates the file whenever it opens a checkpoint. A version other than
CURRENT_VERSION, a malformed line, or an entry count that does not match the lines raises CorruptCheckpoint. What a
reader does then depends on the file: LogManager treats the recovery-point and log-start checkpoints as empty, while
a damaged leader-epoch checkpoint takes the log directory offline.

Where the files live (docs/storage.md, "On disk"): ``leader-epoch-checkpoint`` in each partition directory; the three
offset checkpoints (recovery point, log start offset, replication offset = high watermark) at the store root, one line
per partition. The offset checkpoints are written sorted by topic and partition so that the same state gives the same
bytes (Kafka writes them in hash-map order, which it never relies on).

Threads: reads and writes of one file are serialised by a lock, so any thread may call them; each ``write``
replaces the whole file with what it was given, so callers that write from several threads must hand over a
snapshot taken in the order they want the writes to land (the epoch cache does).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Generic, NamedTuple, TypeVar

from logfs.core.durable import replace_file
from logfs.core.errors import CorruptCheckpoint, StorageError
from logfs.core.format.varint import INT64_MAX, INT64_MIN

CURRENT_VERSION = 0

LEADER_EPOCH_CHECKPOINT_FILENAME = "leader-epoch-checkpoint"
RECOVERY_POINT_CHECKPOINT_FILENAME = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILENAME = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT_FILENAME = "replication-offset-checkpoint"  # high watermarks

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_JAVA_WHITESPACE = re.compile(r"[ \t\n\x0b\f\r]+")  # Java's \s
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")
_LINE_END = re.compile(r"\r\n|\r|\n")  # what Java's BufferedReader.readLine ends a line at

_Entry = TypeVar("_Entry")


class TopicPartition(NamedTuple):
    """The key of an offset checkpoint line: a topic and one of its partitions."""

    topic: str
    partition: int


class EpochEntry(NamedTuple):
    """A leader epoch checkpoint line: leader epoch ``epoch`` wrote its first record at ``start_offset``."""

    epoch: int
    start_offset: int


def _fields(line: str) -> list[str]:
    """Java's ``line.split("\\\\s+")``: a leading separator gives an empty first field; trailing empties are dropped."""
    fields = _JAVA_WHITESPACE.split(line)
    while fields and not fields[-1]:
        fields.pop()
    return fields


def _parse_int(text: str, low: int, high: int) -> int | None:
    """Java's parseInt/parseLong over ASCII: None for anything else or a value outside [low, high]."""
    if not _JAVA_INTEGER.fullmatch(text):
        return None
    value = int(text)
    return value if low <= value <= high else None


class CheckpointFile(Generic[_Entry]):
    """One checkpoint file: a version, a count and one line per entry, formatted by the two functions given.

    ``format_entry`` turns an entry into its line; ``parse_entry`` turns a line back into an entry or None when it
    is malformed (Kafka's EntryFormatter).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        format_entry: Callable[[_Entry], str],
        parse_entry: Callable[[str], _Entry | None],
        version: int = CURRENT_VERSION,
    ) -> None:
        """Describe the file; touch nothing on disk. Any thread."""
        self._path = Path(path)
        self._format_entry = format_entry
        self._parse_entry = parse_entry
        self._version = version
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        """The checkpoint file. Any thread."""
        return self._path

    def write(self, entries: Iterable[_Entry], *, sync: bool = True) -> None:
        """Replace the file with ``entries``, atomically; with ``sync`` the file and its directory are fsynced.

        Any thread (serialised with other reads and writes of this file).
        """
        try:
            self._write(entries, sync)
        except OSError as exc:
            raise StorageError(f"cannot write checkpoint {self._path}: {exc.strerror or exc}") from exc

    def write_if_dir_exists(self, entries: Iterable[_Entry], *, sync: bool = True) -> bool:
        """Like :meth:`write`, but do nothing and answer False when the directory is gone.

        For deferred writes that may run after their partition was deleted (Kafka's writeIfDirExists). Any thread.
        """
        try:
            self._write(entries, sync)
        except FileNotFoundError as exc:
            if not self._path.parent.is_dir():
                return False
            raise StorageError(f"cannot write checkpoint {self._path}: {exc.strerror or exc}") from exc
        except OSError as exc:
            raise StorageError(f"cannot write checkpoint {self._path}: {exc.strerror or exc}") from exc
        return True

    def read(self) -> list[_Entry]:
        """The entries in the file, in file order; an absent or empty file has none. Any thread.

        Raises CorruptCheckpoint for a version other than this file's, a malformed line or a wrong entry count.
        """
        with self._lock:
            try:
                data = self._path.read_bytes()
            except FileNotFoundError:
                return []
            except OSError as exc:
                raise StorageError(f"cannot read checkpoint {self._path}: {exc.strerror or exc}") from exc
        return self._parse(data)

    def _write(self, entries: Iterable[_Entry], sync: bool) -> None:
        entries = list(entries)
        lines = [self._format_entry(entry) for entry in entries]
        for entry, line in zip(entries, lines, strict=True):  # validate twice: each line must read back as its entry
            assert _LINE_END.search(line) is None and self._parse_entry(line) == entry, f"unreadable line {line!r}"
        data = "".join(f"{line}\n" for line in [str(self._version), str(len(lines)), *lines]).encode()
        with self._lock:
            replace_file(self._path, data, sync=sync)

    def _parse(self, data: bytes) -> list[_Entry]:
        path = str(self._path)
        try:
            text = data.decode()
        except UnicodeDecodeError as exc:
            raise CorruptCheckpoint(path, f"not UTF-8 at byte {exc.start}") from exc
        lines = _LINE_END.split(text)
        if lines[-1] == "":  # the terminator of the last line, or an empty file
            lines.pop()
        if not lines:
            return []
        version = _parse_int(lines[0], _INT32_MIN, _INT32_MAX)
        if version is None:
            raise CorruptCheckpoint(path, f"malformed version line {lines[0]!r}", 1)
        if version != self._version:
            raise CorruptCheckpoint(path, f"unrecognised version {version}, expected {self._version}", 1)
        if len(lines) == 1:
            return []
        expected = _parse_int(lines[1], 0, _INT32_MAX)
        if expected is None:
            raise CorruptCheckpoint(path, f"malformed entry count line {lines[1]!r}", 2)
        entries: list[_Entry] = []
        for line_number, line in enumerate(lines[2:], start=3):
            entry = self._parse_entry(line)
            if entry is None:
                raise CorruptCheckpoint(path, f"malformed line {line!r}", line_number)
            entries.append(entry)
        if len(entries) != expected:
            raise CorruptCheckpoint(path, f"expected {expected} entries but found {len(entries)}")
        return entries


def _format_offset_line(entry: tuple[TopicPartition, int]) -> str:
    (topic, partition), offset = entry
    return f"{topic} {partition} {offset}"


def _parse_offset_line(line: str) -> tuple[TopicPartition, int] | None:
    fields = _fields(line)
    if len(fields) != 3 or not fields[0]:
        return None
    partition = _parse_int(fields[1], _INT32_MIN, _INT32_MAX)
    offset = _parse_int(fields[2], INT64_MIN, INT64_MAX)
    if partition is None or offset is None:
        return None
    return TopicPartition(fields[0], partition), offset


class OffsetCheckpointFile:
    """``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``, ``replication-offset-checkpoint``.

    One ``topic partition offset`` line per partition, read back as a dict keyed by (topic, partition); a partition
    listed twice keeps its last line, as Kafka's HashMap does.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Describe the file; touch nothing on disk. Any thread."""
        self._checkpoint = CheckpointFile(path, _format_offset_line, _parse_offset_line)

    @property
    def path(self) -> Path:
        """The checkpoint file. Any thread."""
        return self._checkpoint.path

    def write(
        self, offsets: Mapping[TopicPartition, int] | Mapping[tuple[str, int], int], *, sync: bool = True
    ) -> None:
        """Replace the file with ``offsets``, sorted by topic and partition. Any thread."""
        self._checkpoint.write(
            sorted((TopicPartition(*key), offset) for key, offset in offsets.items()),
            sync=sync,
        )

    def read(self) -> dict[TopicPartition, int]:
        """The offsets in the file; CorruptCheckpoint if it is damaged. Any thread."""
        return dict(self._checkpoint.read())


def _format_epoch_line(entry: EpochEntry) -> str:
    return f"{entry.epoch} {entry.start_offset}"


def _parse_epoch_line(line: str) -> EpochEntry | None:
    fields = _fields(line)
    if len(fields) != 2:
        return None
    epoch = _parse_int(fields[0], _INT32_MIN, _INT32_MAX)
    start_offset = _parse_int(fields[1], INT64_MIN, INT64_MAX)
    if epoch is None or start_offset is None:
        return None
    return EpochEntry(epoch, start_offset)


class LeaderEpochCheckpointFile(CheckpointFile[EpochEntry]):
    """``leader-epoch-checkpoint``: one ``epoch startOffset`` line per leader epoch, oldest first."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Describe the file; touch nothing on disk. Any thread."""
        super().__init__(path, _format_epoch_line, _parse_epoch_line)

    @classmethod
    def in_dir(cls, partition_dir: str | os.PathLike[str]) -> LeaderEpochCheckpointFile:
        """The checkpoint of the partition stored in ``partition_dir``. Any thread."""
        return cls(Path(partition_dir) / LEADER_EPOCH_CHECKPOINT_FILENAME)
