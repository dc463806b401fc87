"""The names a topic gives to the store: the topic name's rules, its partitions' directory names (and the name of
one on its way out), and its overrides file's name.

Kafka's rules for a topic name (``Topic.validate``) and for a partition directory (``<topic>-<partition>``, which a
Kafka broker parses out of every directory of a log dir), kept apart from the store (core/store.py) because the
check (core/check.py) reads a store's directories by these names without opening it. Pure functions; any thread.
"""

from __future__ import annotations

import hashlib
import re
import uuid

from logfs.core.checkpoint import TopicPartition
from logfs.core.errors import InvalidTopic, TopicNameTooLong

TOPIC_OVERRIDES_PREFIX = ".logfs-topic."
TOPIC_OVERRIDES_SUFFIX = ".properties"
MAX_FILE_NAME_BYTES = 255  # NAME_MAX of Linux file systems
DELETE_DIR_SUFFIX = "-delete"

TOPIC_NAME_MAX_CHARS = 249
_TOPIC_CHARS = re.compile(r"[A-Za-z0-9._-]+")
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>0|[1-9][0-9]*)$")


def validate_topic_name(name: str) -> None:
    """Kafka's topic rules (``Topic.validate``), plus no leading ``.`` (reserved for logfs's own names)."""
    if not name:
        raise InvalidTopic("a topic name cannot be empty")
    if len(name) > TOPIC_NAME_MAX_CHARS:
        raise TopicNameTooLong(f"topic name of {len(name)} characters exceeds {TOPIC_NAME_MAX_CHARS}")
    if name in (".", ".."):
        raise InvalidTopic(f"topic name {name!r} is not allowed")
    if not _TOPIC_CHARS.fullmatch(name):
        raise InvalidTopic(f"topic name {name!r} has characters outside [A-Za-z0-9._-]")
    if name.startswith("."):
        raise InvalidTopic(f"topic name {name!r} starts with '.', which logfs reserves")


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> TopicPartition | None:
    """``<topic>-<partition>`` → TopicPartition, or None for any other name (the topic may contain ``-``)."""
    m = _PARTITION_DIR.match(name)
    if m is None:
        return None
    try:
        validate_topic_name(m["topic"])
    except InvalidTopic:
        return None
    return TopicPartition(m["topic"], int(m["partition"]))


def delete_dir_name(tp: TopicPartition) -> str:
    """Kafka's name for a partition directory on its way out: ``<topic>-<p>.<uuid>-delete``, the topic cut short so
    that the name fits a file name (a topic may have 249 characters)."""
    suffix = f"-{tp.partition}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return tp.topic[: MAX_FILE_NAME_BYTES - len(suffix)] + suffix


def overrides_file_name(topic: str) -> str:
    """``.logfs-topic.<topic>.properties`` (see :func:`store_file_name`)."""
    return store_file_name(TOPIC_OVERRIDES_PREFIX, topic, TOPIC_OVERRIDES_SUFFIX)


def store_file_name(prefix: str, name: str, suffix: str) -> str:
    """``<prefix><name><suffix>``, a file of the store root about a topic or group; for a name too long to fit a file
    name with the ``.tmp`` of its atomic replacement, the name's first characters, ``~`` (which no topic or group
    name holds) and a digest of the whole name."""
    full = f"{prefix}{name}{suffix}"
    if len(full.encode()) + len(".tmp") <= MAX_FILE_NAME_BYTES:
        return full
    digest = hashlib.sha256(name.encode()).hexdigest()[:32]
    return f"{prefix}{name[:150]}~{digest}{suffix}"


