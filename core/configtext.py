"""The config as text: ``--config`` arguments, reads and writes of ``<topic>/config``, the overrides file, the docs
table. The keys, their defaults and their rules are ``core/config.py``'s.

Writing ``<topic>/config`` (docs/config.md, "`MOUNT/<topic>/config`", :func:`parse_config_lines`): each line
``key=value`` sets an override, ``key=`` removes it, blank lines are ignored, and a write is applied whole or not at
all: any bad line (no ``=``, an unknown key, a key logfs does not implement, a bad value) refuses the whole write with
one ConfigError that lists every bad line by number, and the overrides stay as they were. Lines apply in order, so a key
set twice keeps its last value. Overrides are kept in canonical form (``segment.bytes= +1024`` is kept as ``1024``).

Reading ``<topic>/config`` (:func:`render_config`) shows every topic key's effective value as ``key=value``,
overrides and defaults alike as the spec asks, sorted by key as ``kafka-configs --describe --all`` sorts them: the
same config always reads as the same bytes, and two topics' configs diff line by line. What was read can be written
back unchanged; that changes no value, though it turns each default into an override.

``--config`` (docs/config.md, "`logfs mount --config key=value`", :func:`parse_store_config`): each argument is
``key=value``; the same key given twice keeps its last value, as in a properties file; every bad argument is reported at
once, in one ConfigError. A topic key may be given under its topic spelling or a broker spelling; when several spellings
of one key are given, the first in the order of the table wins (topic spelling first, then Kafka's order:
``log.retention.ms`` over ``log.retention.minutes`` over ``log.retention.hours``), and as in Kafka the others are
ignored.

Overrides on disk (:func:`save_topic_overrides`, :func:`load_topic_overrides`): one small ``.properties``-style file
per topic, a comment line and then ``key=value`` lines sorted by key, replaced atomically (write ``<file>.tmp``,
fsync, rename, fsync the directory), so a crash leaves either the old overrides or the new ones. The caller (the
store) chooses the path.

Threads: everything here is a pure function of immutable values, except that :func:`load_topic_overrides` and
:func:`save_topic_overrides` block on the disk (keep them off the trio thread); any thread may call anything.
"""

from __future__ import annotations

import dataclasses
import difflib
import errno
import os
import textwrap
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from logfs.core.config import KAFKA_TOPIC_KEYS, LOG_KEYS, LogConfig
from logfs.core.durable import replace_file
from logfs.core.errors import ConfigError, DiskFull, StorageError
from logfs.core.storeconfig import BROKER_SYNONYMS, STORE_KEYS, StoreConfig

# The most a single ``<topic>/config`` write may carry. Every key with a long value is ~60 bytes, so 64 KiB is far
# above any real write and still bounds the parse.
CONFIG_TEXT_BYTES_MAX = 64 * 1024


# --- parsing --------------------------------------------------------------------------------------------------------


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """`` (did you mean <key>?)`` naming the known key closest to a mistyped ``key``, or "" when none is close.

    Keys are case-sensitive, as in Kafka, so a key that differs only in case is named first; otherwise difflib's
    ratio must reach 0.8 (one or two wrong, missing or swapped characters in a Kafka key: ``retention.msx``,
    ``segmnt.bytes``, ``min.insync.replica``), so that an unrelated word gets no suggestion that misleads.
    """
    candidates = sorted(known)
    folded = [k for k in candidates if k.lower() == key.lower()]
    close = folded or difflib.get_close_matches(key, candidates, n=1, cutoff=0.8)
    return f" (did you mean {close[0]}?)" if close else ""


def _topic_key_problem(key: str) -> str | None:
    """Why ``key`` cannot be a topic override, or None when logfs implements it."""
    if key in LOG_KEYS:
        return None
    if key in KAFKA_TOPIC_KEYS:
        return f"{key} is a Kafka topic config that logfs does not implement"
    if key in BROKER_SYNONYMS:
        return f"{key} is a broker setting (logfs mount --config); the topic key is {BROKER_SYNONYMS[key].topic_key}"
    if key in STORE_KEYS:
        return f"{key} is a store setting (logfs mount --config), not a topic config"
    return f"unknown topic config key {key!r}{did_you_mean(key, LOG_KEYS)}"


def _override_value(key: str, text: str) -> Any:
    """The value of override ``key=text``; ConfigError when logfs cannot take it."""
    problem = _topic_key_problem(key)
    if problem is not None:
        raise ConfigError(problem)
    return LOG_KEYS[key].parse(text)


def _canonical_override(key: str, text: str) -> str:
    """``text`` as logfs stores and shows it (``" +1024"`` is ``1024``); ConfigError when logfs cannot take it."""
    value = _override_value(key, text)
    return LOG_KEYS[key].format(value)


def parse_store_config(pairs: Iterable[str]) -> StoreConfig:
    """The StoreConfig that ``--config`` arguments ``key=value`` give, over Kafka's defaults. Any thread.

    Raises one ConfigError listing every bad argument: no ``=``, an unknown key (named), a Kafka key logfs does not
    implement, or a bad value (naming key, value and rule).
    """
    given: dict[str, str] = {}
    errors: list[str] = []
    for pair in pairs:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            errors.append(f"expected key=value, got {pair!r}")
        elif key in LOG_KEYS or key in STORE_KEYS or key in BROKER_SYNONYMS:
            given[key] = text  # the last one given wins
        elif key in KAFKA_TOPIC_KEYS:
            errors.append(f"{key} is a Kafka topic config that logfs does not implement")
        else:
            errors.append(f"unknown config key {key!r}{did_you_mean(key, [*LOG_KEYS, *STORE_KEYS, *BROKER_SYNONYMS])}")

    store: dict[str, Any] = {}
    for key, text in given.items():
        if key in STORE_KEYS:
            try:
                store[STORE_KEYS[key].attribute] = STORE_KEYS[key].parse(text)
            except ConfigError as exc:
                errors.append(str(exc))
    topic: dict[str, Any] = {}
    for name, config_key in LOG_KEYS.items():
        spellings = [name, *(s.name for s in BROKER_SYNONYMS.values() if s.topic_key == name)]
        spelling = next((s for s in spellings if s in given), None)
        if spelling is None:
            continue
        try:
            if spelling == name:
                topic[config_key.attribute] = config_key.parse(given[name])
            else:
                topic[config_key.attribute] = BROKER_SYNONYMS[spelling].parse(given[spelling], config_key)
        except ConfigError as exc:
            errors.append(str(exc))
    if not errors:
        try:
            return StoreConfig(**store, topic_defaults=LogConfig(**topic))
        except ConfigError as exc:
            errors.append(str(exc))
    raise ConfigError("; ".join(errors))


def apply_overrides(defaults: LogConfig, overrides: Mapping[str, str]) -> LogConfig:
    """``defaults`` with a topic's ``overrides`` (Kafka key to value text) on top. Any thread.

    Raises one ConfigError listing every override logfs cannot take (unknown, not implemented, bad value).
    """
    changes: dict[str, Any] = {}
    errors: list[str] = []
    for key, text in overrides.items():
        try:
            value = _override_value(key, text)
        except ConfigError as exc:
            errors.append(str(exc))
        else:
            changes[LOG_KEYS[key].attribute] = value
    if errors:
        raise ConfigError("; ".join(errors))
    return dataclasses.replace(defaults, **changes)


def _lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number from 1, line) for each line of ``text`` that is not blank, ``\\r\\n`` taken as ``\\n``."""
    for line_number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            yield line_number, line.removesuffix("\r")


def parse_config_lines(text: str, current_overrides: Mapping[str, str]) -> dict[str, str]:
    """The overrides after one write(2) of ``text`` to ``<topic>/config`` over ``current_overrides``. Any thread.

    ``key=value`` sets an override, ``key=`` (or ``key=`` and blanks) removes it, blank lines are ignored; lines
    apply in order. The write is whole or nothing: one ConfigError lists every bad line by number, and then the
    caller keeps ``current_overrides``, which this never changes.
    """
    size_bytes = len(text.encode())
    if size_bytes > CONFIG_TEXT_BYTES_MAX:
        raise ConfigError(f"config write of {size_bytes} bytes exceeds {CONFIG_TEXT_BYTES_MAX} bytes")
    overrides = dict(current_overrides)
    errors: list[str] = []
    for line_number, line in _lines(text):
        key, sep, value = line.partition("=")
        key = key.strip()
        try:
            if not sep or not key:
                raise ConfigError(f"expected key=value, got {line!r}")
            if not value.strip():
                problem = _topic_key_problem(key)
                if problem is not None:
                    raise ConfigError(problem)
                overrides.pop(key, None)
            else:
                overrides[key] = _canonical_override(key, value)
        except ConfigError as exc:
            errors.append(f"line {line_number} of the write: {exc}")
    if errors:
        raise ConfigError("config not changed: " + "; ".join(errors))
    return overrides


def render_config(effective: LogConfig, overrides: Mapping[str, str]) -> str:
    """What reading ``<topic>/config`` shows: ``key=value`` for every topic key, sorted by key. Any thread.

    Overrides and defaults look alike (docs/config.md, "`MOUNT/<topic>/config`"); ``overrides`` only serves to check
    that ``effective`` includes them (a mismatch is a logfs bug).
    """
    for key, text in overrides.items():
        assert key in LOG_KEYS and LOG_KEYS[key].parse(text) == getattr(effective, LOG_KEYS[key].attribute), (
            f"override {key}={text} is not in the effective config"
        )
    return "".join(
        f"{name}={key.format(getattr(effective, key.attribute))}\n" for name, key in sorted(LOG_KEYS.items())
    )


# --- overrides on disk ----------------------------------------------------------------------------------------------

TOPIC_OVERRIDES_HEADER = "# logfs topic config overrides: written by logfs, changed through MOUNT/<topic>/config"


def load_topic_overrides(path: str | os.PathLike[str]) -> dict[str, str]:
    """A topic's overrides as :func:`save_topic_overrides` wrote them; an absent file holds none. Any thread (blocks).

    ``#`` and ``!`` lines are comments, as in a Java properties file. ConfigError names the file and line of an
    entry logfs cannot take; StorageError when the file cannot be read.
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise StorageError(f"cannot read topic config {path}: {exc.strerror or exc}") from exc
    try:
        text = data.decode()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"topic config {path}: not UTF-8 at byte {exc.start}") from exc
    overrides: dict[str, str] = {}
    for line_number, line in _lines(text):
        if line.lstrip().startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        try:
            if not sep:
                raise ConfigError(f"expected key=value, got {line!r}")
            overrides[key.strip()] = _canonical_override(key.strip(), value)
        except ConfigError as exc:
            raise ConfigError(f"topic config {path} line {line_number}: {exc}") from exc
    return overrides


def save_topic_overrides(path: str | os.PathLike[str], overrides: Mapping[str, str]) -> None:
    """Replace the file at ``path`` with ``overrides``, atomically and durably. Any thread (blocks: fsync).

    Writes ``<path>.tmp``, fsyncs it, renames it over ``path`` and fsyncs the directory, creating the directory
    (and fsyncing its parent) when it is missing. ConfigError (nothing written) for an override logfs cannot take;
    DiskFull or StorageError (the old file intact, no ``.tmp`` left) when the disk fails.
    """
    path = Path(path)
    lines = [TOPIC_OVERRIDES_HEADER]
    for key, text in sorted(overrides.items()):
        lines.append(f"{key}={_canonical_override(key, text)}")
    data = "".join(f"{line}\n" for line in lines).encode()
    try:
        replace_file(path, data, make_parents=True)
    except OSError as exc:
        error = DiskFull if exc.errno in (errno.ENOSPC, errno.EDQUOT) else StorageError
        raise error(f"cannot write topic config {path}: {exc.strerror or exc}") from exc


# --- the docs table -------------------------------------------------------------------------------------------------


def _table_rows() -> Iterator[tuple[str, str, str, str, str]]:
    """(key, default, valid values, meaning, broker spellings) of every key: topic keys, then store keys."""
    for keys in (LOG_KEYS, STORE_KEYS):
        for name, key in sorted(keys.items()):
            default = key.default_text if key.default_text is not None else key.format(key.default)
            spellings = ", ".join(
                s.name + (f" ({s.conversion()})" if s.conversion() else "")
                for s in BROKER_SYNONYMS.values()
                if s.topic_key == name
            )
            yield name, default, key.valid_values(), key.doc, spellings


def render_key_table(*, markdown: bool = False) -> str:
    """The table of every key: plain text within 116 columns (this docstring) or markdown (docs/config.md).

    Generated from the keys themselves; the tests check that both documents hold it as generated.
    """
    if markdown:
        lines = ["| Key | Level | Default | Valid values | Meaning | Broker spellings |", "|---|---|---|---|---|---|"]
        for name, default, valid, doc, spellings in _table_rows():
            shown = default if name in STORE_KEYS and STORE_KEYS[name].default_text else f"`{default}`"
            level = "topic" if name in LOG_KEYS else "store"
            lines.append(f"| `{name}` | {level} | {shown} | {valid} | {doc} | {spellings} |")
        return "\n".join(lines) + "\n"
    key_width = max(32, 1 + max(len(name) for name in (*LOG_KEYS, *STORE_KEYS)))
    default_width, width = 20, 116
    lines = [f"{'key':<{key_width}}{'default':<{default_width}}valid values; meaning; broker spellings"]
    for name, default, valid, doc, spellings in _table_rows():
        if name == next(iter(sorted(STORE_KEYS))):
            lines.append("")  # the store keys follow the topic keys
        text = f"{valid}. {doc}" + (f" Broker: {spellings}." if spellings else "")
        wrapped = textwrap.wrap(text.replace("`", ""), width - key_width - default_width)
        lines.append(f"{name:<{key_width}}{default:<{default_width}}{wrapped[0]}")
        lines.extend(" " * (key_width + default_width) + more for more in wrapped[1:])
    return "\n".join(line.rstrip() for line in lines) + "\n"
