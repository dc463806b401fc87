"""Every file and directory name the mount parses, in one place: plain functions from a name to its parts.

Rules (docs/mount.md, "Reads"):

* Partition directories (and the replica ids under ``.logfs/fetch/``) are canonical decimal numbers: ``0`` … with
  no leading zeros, at most 10 digits, so each partition has exactly one name.
* ``at/`` and ``follow/`` names are a stem and a format suffix: ``<offset>``, ``earliest``, ``@<time>`` and (in
  ``at/`` only) ``<start>-<end>``, or (in ``follow/`` only) ``latest``; then nothing (plain lines), ``.jsonl`` or
  ``.kafka``. Offsets in stems may have leading zeros (``at/0017`` is offset 17): they are looked up, never listed.
* ``<time>`` is epoch milliseconds (``@1700000000000``, what Kafka's ListOffsets takes) or an ISO-8601 time that a
  person types: ``@2026-11-26T10:00:00Z``, ``@2026-11-26T10:00:00.250+01:00``, ``@2026-11-26T10:00`` (no offset:
  UTC, never the mount's local zone, so a name means the same on every machine), ``@2026-11-26`` (midnight UTC).
  :func:`parse_time` turns it into epoch ms; a fraction finer than a millisecond rounds up (the first record at or
  after the time the name gives), a time before 1970 is 0. An impossible date (``@2026-02-30``) names nothing.
* ``hw/`` files are ``<20-digit base offset>.jsonl``, one per segment (Kafka's segment file names, so ``ls`` sorts
  them in offset order).
* A fetch file is ``<fetch offset>.<last fetched epoch>`` (epoch -1: none yet).
* Below the root, names starting with ``.`` or ``_`` (Spark's ``.<name>.crc`` and ``_spark_metadata``) name
  nothing, except a ``_`` where a topic, group or transactional id is looked up (``mount/tree.py``).

A name that does not parse is :class:`NoEntry` (ENOENT) where it is looked up; :func:`parse_view_name` raises
ValueError, for callers outside the mount. What a stem *resolves to* (an offset by time index, the HW) needs the log
and lives in ``mount/render/views.py`` (:func:`~logfs.mount.render.views.resolve_start`).

Threads: any (pure functions).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from logfs.mount.errors import MountRefusal, NoEntry
from logfs.mount.render.renderspan import Format

_PARTITION_NAME = re.compile(r"0|[1-9][0-9]{0,9}")
_FETCH_NAME = re.compile(r"(0|[1-9][0-9]{0,18})\.(-1|0|[1-9][0-9]{0,9})(?:\.(0|[1-9][0-9]{0,9}))?")
_STEM = re.compile(r"earliest|latest|[0-9]+|@[^@]+|[0-9]+-[0-9]+")  # @<time>: parse_time says which times
_RANGE = re.compile(r"([0-9]+)-([0-9]+)")
_EPOCH_MS = re.compile(r"[0-9]+")
_ISO_TIME = re.compile(
    r"(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})"
    r"(?:T(?P<time>[0-9]{2}:[0-9]{2}(?::[0-9]{2})?)(?:[.,](?P<fraction>[0-9]{1,9}))?(?P<zone>Z|[+-][0-9]{2}:[0-9]{2})?)?"
)
_NS_PER_MS = 1_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


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


def parse_fetch_name(name: str) -> tuple[int, int, int | None]:
    """A fetch file's name ``<fetch offset>.<last fetched epoch>[.<current leader epoch>]`` → ``(offset, epoch,
    current leader epoch)`` (epoch -1: none; the current leader epoch None when the name has two parts, as
    ``logfs follow`` sends); NoEntry for anything else."""
    m = _FETCH_NAME.fullmatch(name)
    if m is None:
        raise NoEntry(f"{name!r} is not <fetch offset>.<last fetched epoch>[.<current leader epoch>]")
    return int(m[1]), int(m[2]), None if m[3] is None else int(m[3])


def hw_file_name(base_offset: int) -> str:
    """The ``hw/`` file of the segment at ``base_offset``."""
    return f"{base_offset:020d}{Format.JSONL.value}"


def parse_view_name(name: str) -> tuple[str, Format]:
    """Split an ``at/`` or ``follow/`` name into its stem and format: ``"42.jsonl"`` → ``("42", JSONL)``,
    ``"earliest"`` → ``("earliest", PLAIN)``, ``"@1700000000000.kafka"`` → ``("@1700000000000", KAFKA)``,
    ``"@2026-11-26T10:00:00Z.jsonl"`` → ``("@2026-11-26T10:00:00Z", JSONL)``, ``"10-20"`` → ``("10-20", PLAIN)``;
    ``"latest"`` (for ``follow/``) too. ValueError for anything else, a time :func:`parse_time` refuses included.

    Which stems a directory accepts (``follow/`` has no ranges, ``at/`` no ``latest``) is the caller's rule.
    """
    stem, fmt = name, Format.PLAIN
    for suffixed in (Format.JSONL, Format.KAFKA):
        if name.endswith(suffixed.value):
            stem, fmt = name[: -len(suffixed.value)], suffixed
            break
    if not _STEM.fullmatch(stem):
        raise ValueError(f"{name!r} is not a view name (<offset>, earliest, @<time>, <start>-<end>, latest)")
    if stem.startswith("@"):
        parse_time(stem[1:])
    return stem, fmt


def parse_time(text: str) -> int:
    """The epoch ms of an ``@<time>`` stem's ``<time>``: ``"1700000000000"`` as is; ``"2026-11-26T10:00:00Z"``,
    ``"2026-11-26T10:00:00.250+01:00"``, ``"2026-11-26T10:00"`` (UTC), ``"2026-11-26"`` (midnight UTC) converted.
    ValueError for anything else, an impossible date or time included."""
    if _EPOCH_MS.fullmatch(text):
        return int(text)
    m = _ISO_TIME.fullmatch(text)
    if m is None:
        raise ValueError(f"{text!r} is neither epoch ms nor an ISO-8601 time (2026-11-26T10:00:00Z)")
    zone = m["zone"] or "Z"
    stamp = datetime.fromisoformat(f"{m['date']}T{m['time'] or '00:00'}{'+00:00' if zone == 'Z' else zone}")
    seconds = (stamp - _EPOCH) // timedelta(seconds=1)  # exact: the stamp has no fraction
    fraction_ns = int((m["fraction"] or "0").ljust(9, "0"))
    return max(0, seconds * 1000 + -(-fraction_ns // _NS_PER_MS))


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
