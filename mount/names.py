"""Every file and directory name the mount parses, in one place: plain functions from a name to its parts.

Rules (spec §2):

* Partition directories (and the replica ids under ``.logfs/fetch/``) are canonical decimal numbers: ``0`` … with
  no leading zeros, at most 10 digits, so each partition has exactly one name.
* ``at/`` and ``follow/`` names are a stem and a format suffix: ``<offset>``, ``earliest``, ``@<epoch-ms>`` and (in
  ``at/`` only) ``<start>-<end>``, or (in ``follow/`` only) ``latest``; then nothing (plain lines), ``.jsonl`` or
  ``.kafka``. Offsets in stems may have leading zeros (``at/0017`` is offset 17): they are looked up, never listed.
* ``hw/`` files are ``<20-digit base offset>.jsonl``, one per segment (Kafka's segment file names, so ``ls`` sorts
  them in offset order).
* A fetch file is ``<fetch offset>.<last fetched epoch>`` (epoch -1: none yet).
* Below the root, names starting with ``.`` or ``_`` (Spark's ``.<name>.crc`` and ``_spark_metadata``) name
  nothing.

A name that does not parse is :class:`NoEntry` (ENOENT) where it is looked up; :func:`parse_view_name` raises
ValueError, for callers outside the mount. What a stem *resolves to* (an offset by time index, the HW) needs the log
and lives in ``mount/render/views.py`` (:func:`~logfs.mount.render.views.resolve_start`).

Threads: any (pure functions).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from logfs.mount.errors import MountRefusal, NoEntry
from logfs.mount.render.renderspan import Format

_PARTITION_NAME = re.compile(r"0|[1-9][0-9]{0,9}")
_FETCH_NAME = re.compile(r"(0|[1-9][0-9]{0,18})\.(-1|0|[1-9][0-9]{0,9})")
_STEM = re.compile(r"earliest|latest|[0-9]+|@[0-9]+|[0-9]+-[0-9]+")
_RANGE = re.compile(r"([0-9]+)-([0-9]+)")


def decode_name(name: bytes, error: type[MountRefusal] = NoEntry) -> str:
    """A name from the kernel as text; ``error`` (NoEntry unless the caller says) when it is not UTF-8."""
    try:
        return name.decode("utf-8")
    except UnicodeDecodeError:
        raise error(f"{name!r} is not UTF-8") from None


def is_hidden(name: str) -> bool:
    """Whether ``name`` starts with ``.`` or ``_``: below the root such a name names nothing."""
    return name.startswith((".", "_"))


def parse_partition_name(name: str) -> int | None:
    """``"7"`` → 7; None for anything that is not a partition directory's name (``"07"``, ``"x"``)."""
    return int(name) if _PARTITION_NAME.fullmatch(name) else None


def parse_fetch_name(name: str) -> tuple[int, int]:
    """A fetch file's name ``<fetch offset>.<last fetched epoch>`` → ``(offset, epoch)`` (epoch -1: none); NoEntry
    for anything else."""
    m = _FETCH_NAME.fullmatch(name)
    if m is None:
        raise NoEntry(f"{name!r} is not <fetch offset>.<last fetched epoch>")
    return int(m[1]), int(m[2])


def hw_file_name(base_offset: int) -> str:
    """The ``hw/`` file of the segment at ``base_offset``."""
    return f"{base_offset:020d}{Format.JSONL.value}"


def parse_view_name(name: str) -> tuple[str, Format]:
    """Split an ``at/`` or ``follow/`` name into its stem and format: ``"42.jsonl"`` → ``("42", JSONL)``,
    ``"earliest"`` → ``("earliest", PLAIN)``, ``"@1700000000000.kafka"`` → ``("@1700000000000", KAFKA)``,
    ``"10-20"`` → ``("10-20", PLAIN)``; ``"latest"`` (for ``follow/``) too. ValueError for anything else.

    Which stems a directory accepts (``follow/`` has no ranges, ``at/`` no ``latest``) is the caller's rule.
    """
    stem, fmt = name, Format.PLAIN
    for suffixed in (Format.JSONL, Format.KAFKA):
        if name.endswith(suffixed.value):
            stem, fmt = name[: -len(suffixed.value)], suffixed
            break
    if not _STEM.fullmatch(stem):
        raise ValueError(f"{name!r} is not a view name (<offset>, earliest, @<epoch-ms>, <start>-<end>, latest)")
    return stem, fmt


def parse_range(stem: str) -> tuple[int, int] | None:
    """``"10-20"`` → ``(10, 20)``; None for a stem that is not a range."""
    m = _RANGE.fullmatch(stem)
    return None if m is None else (int(m[1]), int(m[2]))


@dataclass(frozen=True, slots=True)
class ViewName:
    """A parsed ``at/`` or ``follow/`` name: its stem, format, and the range when the stem is ``<start>-<end>``."""

    stem: str
    fmt: Format
    range: tuple[int, int] | None


def parse_at_name(name: str) -> ViewName:
    """An ``at/`` name (no ``latest``); NoEntry for anything else."""
    view = _parse_view(name)
    if view.stem == "latest":
        raise NoEntry("at/ has no 'latest' (its snapshot would be empty)")
    return view


def parse_follow_name(name: str) -> ViewName:
    """A ``follow/`` name (no ranges); NoEntry for anything else."""
    view = _parse_view(name)
    if view.range is not None:
        raise NoEntry("follow/ has no ranges")
    return view


def _parse_view(name: str) -> ViewName:
    try:
        stem, fmt = parse_view_name(name)
    except ValueError as exc:
        raise NoEntry(str(exc)) from None
    return ViewName(stem, fmt, parse_range(stem))
