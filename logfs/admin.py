"""Administration of a running mount through its files: ``logfs create-topic``, ``delete-topic`` and ``errors``.

Why files: a mount is the only way into a store that a ``logfs mount`` process owns (the store is locked), and the
files are the public contract (docs/mount.md, "Files, modes and caching"), so these commands do exactly what a user
could do with ``mkdir``, ``echo … > config`` and ``echo … > .logfs/delete-topic``, with clearer messages. When the mount
refuses a step, the message is the mount's own reason, read back from ``.logfs/errors`` (``mount/refusals.py``), not
only the errno's text.

``create_topic`` is whole or nothing as far as the mount allows: it makes the topic (``mkdir``, which makes the
mount's ``num.partitions`` partitions), writes every ``--config`` line in one write of ``<topic>/config`` (applied
whole or not at all), then adds partitions up to N one ``mkdir`` each. If a step fails it removes the topic again
with ``rmdir`` (the topic holds no record yet, so rmdir may remove it, and its config and partitions go with it).
Between the first mkdir and that rmdir, other users of the mount can see the topic; if one of them wrote a record
into it meanwhile, rmdir refuses (ENOTEMPTY) and the error says the topic was left.

Errors: :class:`AdminError` (exit 1) and :class:`BadArgument` (a topic name outside Kafka's rules, one that collides
with an existing topic's, or a bad config line: exit 2), each with a message for the user. Threads: any (plain
blocking file calls; the CLI's main thread).
"""

from __future__ import annotations

import datetime
import errno
import json
import os
from pathlib import Path
from typing import Any

from logfs.core.configtext import parse_config_lines
from logfs.core.errors import ConfigError, InvalidTopic
from logfs.core.topicnames import validate_topic_name

LOGFS_DIR = ".logfs"
ERRORS_FILE = "errors"
DELETE_TOPIC_FILE = "delete-topic"

TOPIC_MODE = 0o755  # what `mkdir` of a topic by hand gives with the usual umask: others read, the owner writes


class AdminError(Exception):
    """A command the mount refused or could not be run: one line for the user (exit 1)."""


class BadArgument(AdminError):
    """An argument no mount could accept: a topic name, a config line (exit 2)."""


def check_mount(mount: Path) -> None:
    """AdminError unless ``mount`` is a running logfs mount (it has ``.logfs/errors``)."""
    try:
        os.stat(mount / LOGFS_DIR / ERRORS_FILE)
    except FileNotFoundError:
        what = "does not exist" if not mount.exists() else "is not a logfs mount (no .logfs/errors under it)"
        raise AdminError(f"{mount} {what}") from None
    except OSError as exc:  # ENOTCONN: a mount whose process died
        raise AdminError(f"{mount} is not a running logfs mount: {exc.strerror}") from None


def _check_topic_name(topic: str) -> None:
    """Kafka's name rules (core/names.py), checked here before any path is made of the name, so that a name the
    mount would refuse never reaches a system call (``a/../b`` or ``..`` would walk elsewhere first). Whether the
    name collides with an existing topic is the mount's to say (its reason is shown)."""
    try:
        validate_topic_name(topic)
    except InvalidTopic as exc:
        raise BadArgument(str(exc)) from None


def mount_reason(mount: Path, path: str, exc: OSError) -> str:
    """Why the mount refused a request on ``path`` (the newest matching line of ``.logfs/errors``), else the errno's
    text."""
    name = errno.errorcode.get(exc.errno or 0, "")
    try:
        refusals = read_refusals(mount)
    except (AdminError, OSError):
        refusals = []
    for refusal in reversed(refusals):
        if refusal.get("path") == path and refusal.get("errno") == name:
            return str(refusal.get("reason", ""))
    return exc.strerror or str(exc)


def create_topic(mount: Path, topic: str, partitions: int | None, config_lines: list[str]) -> int:
    """Create ``topic`` with ``partitions`` partitions (None: the mount's num.partitions) and ``config_lines``
    (``key=value``); the number of partitions made. See the module docstring for what happens on a failure."""
    check_mount(mount)
    _check_topic_name(topic)
    for line in config_lines:  # refused before anything is made
        try:
            parse_config_lines(line, {})
        except ConfigError as exc:
            reason = str(exc).removeprefix("config not changed: line 1 of the write: ")
            raise BadArgument(f"--config {line}: {reason}") from None
    directory = mount / topic
    try:
        os.mkdir(directory, TOPIC_MODE)  # less the caller's umask: a shared mount's owner and mode (docs/mount.md)
    except FileExistsError:
        raise AdminError(f"topic {topic!r} exists in {mount}") from None
    except OSError as exc:
        reason = mount_reason(mount, f"/{topic}", exc)
        if exc.errno in (errno.EINVAL, errno.ENAMETOOLONG):
            raise BadArgument(reason) from None
        raise AdminError(f"topic {topic!r} not created: {reason}") from None
    step = f"/{topic}/config"
    try:
        made = _partition_count(directory)
        wanted = made if partitions is None else partitions
        if made > wanted:
            raise AdminError(
                f"topic {topic!r} not created: mkdir makes {made} partitions (the mount's num.partitions), more than"
                f" {wanted}, and a partition cannot be removed; ask for --partitions {made} or more"
            )
        if config_lines:
            _write_once(directory / "config", "".join(line + "\n" for line in config_lines))
        for p in range(made, wanted):
            step = f"/{topic}/{p}"
            os.mkdir(directory / str(p))
    except AdminError as exc:
        raise AdminError(str(exc) + _remove(directory)) from None
    except OSError as exc:
        reason = mount_reason(mount, step, exc)
        raise AdminError(f"topic {topic!r} not created: {reason}{_remove(directory)}") from None
    return wanted


def _partition_count(directory: Path) -> int:
    return sum(1 for name in os.listdir(directory) if name.isdigit())


def _write_once(path: Path, text: str) -> None:
    """One open, one write(2) of all of ``text`` (the mount applies one write whole or not at all), one close."""
    data = text.encode()
    fd = os.open(path, os.O_WRONLY)
    try:
        written = os.write(fd, data)
    finally:
        os.close(fd)
    if written != len(data):
        raise AdminError(f"{path}: short write ({written} of {len(data)} bytes)")


def _remove(directory: Path) -> str:
    """Undo a half-made topic; what to add to the error message."""
    try:
        os.rmdir(directory)
    except OSError as exc:
        return f"; the topic was left as it is ({_partition_count(directory)} partition(s)): rmdir: {exc.strerror}"
    return "; nothing was created"


def delete_topic(mount: Path, topic: str) -> None:
    """Delete ``topic`` and all its records through ``.logfs/delete-topic``."""
    check_mount(mount)
    _check_topic_name(topic)
    try:
        _write_once(mount / LOGFS_DIR / DELETE_TOPIC_FILE, f"{topic}\n")
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            raise AdminError(f"no topic {topic!r} in {mount}") from None
        raise AdminError(f"topic {topic!r} not deleted: {mount_reason(mount, '/.logfs/delete-topic', exc)}") from None


def refusals_text(mount: Path) -> str:
    """``.logfs/errors`` as it is: the refusals the mount keeps, as JSON lines, oldest first."""
    check_mount(mount)
    return (mount / LOGFS_DIR / ERRORS_FILE).read_text(encoding="utf-8", errors="replace")


def read_refusals(mount: Path) -> list[dict[str, Any]]:
    """The refusals ``.logfs/errors`` keeps, parsed, oldest first. Lines end at ``\n`` only: a reason may quote a
    name holding U+2028 or a control character (kept as they are in the JSON), which ``str.splitlines`` would cut."""
    return [json.loads(line) for line in refusals_text(mount).split("\n") if line.strip()]


def format_refusal(refusal: dict[str, Any]) -> str:
    """One refusal for a human: local time (as the mount's log shows it), errno, op, path and reason."""
    stamp = str(refusal.get("time", ""))
    try:
        when = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone()
        stamp = when.strftime("%Y-%m-%d %H:%M:%S.") + f"{when.microsecond // 1000:03d}"
    except ValueError:
        pass
    return f"{stamp} {refusal.get('errno')} {refusal.get('op')} {refusal.get('path')}: {refusal.get('reason')}"
