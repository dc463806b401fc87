"""The one rule for every name a user gives logfs that the kernel's path walk does not vouch for: topic names, consumer
group ids and transactional ids (and the commit labels, which take the transactional ids' rule).

The rule is Kafka's ``Topic.validate``: 1 to 249 characters of ``[A-Za-z0-9._-]``, and not ``.`` or ``..``; logfs
also keeps a leading ``.`` for its own names (``.logfs/``, the ``.logfs-topic.*`` files). Kafka holds only topic
names to it (a group id need only be non-empty, a transactional id anything). logfs holds all three to it because
each becomes a name under the mount (``<topic>/``, ``.logfs/groups/<group>/``, ``.logfs/transactions/<id>/``) and a
topic's becomes a directory of the store: one rule, applied the same way at every door (mkdir, the ``.logfs/``
command files, fetch-session lines, the command line, the Spark options), means no door lets through a name
another refuses, and no name can climb out of the store (``..``, ``/``, a NUL or a control character never pass).

A name over 249 characters raises the kind's *too long* error (the mount answers ENAMETOOLONG), any other breach
its *invalid* error (EINVAL): mount/errno.py maps both, once. Pure functions; any thread.
"""

from __future__ import annotations

import re

from logfs.core.errors import (
    GroupIdTooLong,
    InvalidGroupId,
    InvalidTransactionalId,
    LogfsError,
    TransactionalIdTooLong,
)

NAME_MAX_CHARS = 249  # Kafka's limit, so that "<topic>-<partition>" and its "-delete" name fit a file name
_LEGAL = re.compile(r"[A-Za-z0-9._-]+")


def check_name(name: str, what: str, invalid: type[LogfsError], too_long: type[LogfsError]) -> None:
    """Raise ``too_long`` for a name over 249 characters, ``invalid`` for any other breach of the rule; ``what``
    ("topic name", "group id" …) begins the message. The checks run in the order that names the first fault a
    reader would see: empty, too long, a dot name, a character, a leading dot."""
    if not name:
        raise invalid(f"a {what} cannot be empty")
    if len(name) > NAME_MAX_CHARS:
        raise too_long(f"{what} of {len(name)} characters exceeds {NAME_MAX_CHARS}")
    if name in (".", ".."):
        raise invalid(f"{what} {name!r} is not allowed")
    if not _LEGAL.fullmatch(name):
        raise invalid(f"{what} {name!r} has characters outside [A-Za-z0-9._-]")
    if name.startswith("."):
        raise invalid(f"{what} {name!r} starts with '.', which logfs reserves")


def validate_group_id(group: str) -> None:
    """A consumer group id (``.logfs/groups/<group>``, ``logfs groups --group``, the Spark source's group options)."""
    check_name(group, "group id", InvalidGroupId, GroupIdTooLong)


def validate_transactional_id(transactional_id: str) -> None:
    """A transactional id (``mkdir .logfs/transactions/<id>``), or a commit label (``commit <label>``)."""
    check_name(transactional_id, "transactional id", InvalidTransactionalId, TransactionalIdTooLong)


def is_transactional_id(name: str) -> bool:
    """Whether ``name`` passes :func:`validate_transactional_id` (a name worth asking another node about)."""
    try:
        validate_transactional_id(name)
    except (InvalidTransactionalId, TransactionalIdTooLong):
        return False
    return True


def is_group_id(name: str) -> bool:
    """Whether ``name`` passes :func:`validate_group_id` (a listing shows only the groups a lookup can reach)."""
    try:
        validate_group_id(name)
    except InvalidGroupId:
        return False
    return True
