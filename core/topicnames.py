"""The names a topic gives to the store: the topic name's rules, its partitions' directory names (and the name of
one on its way out), its overrides file's name, and which topic names collide.

Kafka's rules for a topic name (``Topic.validate``, the rule of every name a user gives: core/names.py) and for a
partition directory (``<topic>-<partition>``, which a Kafka broker parses out of every directory of a log dir), kept
apart from the store (core/store.py) because the check (core/check.py) reads a store's directories by these names
without opening it.

Collisions (Kafka's ``Topic.hasCollision``): two topic names that differ only in ``.`` against ``_`` are refused
together, because Kafka's metric names replace ``.`` with ``_`` and the two topics' metrics would be one. Kafka
refuses to *create* the second; topics that already exist (a store copied from elsewhere, a leader's topics that a
follower copies) are loaded and copied as they are. :class:`TopicCollisions` is the store's index for the check, so
that a creation costs a dict lookup, not a walk of every topic.

Pure functions and one small index (its owner's lock guards it); any thread.
"""

from __future__ import annotations

import hashlib
import re
import uuid

from logfs.core.checkpoint import TopicPartition
from logfs.core.errors import InvalidTopic, TopicNameTooLong
from logfs.core.names import check_name

TOPIC_OVERRIDES_PREFIX = ".logfs-topic."
TOPIC_OVERRIDES_SUFFIX = ".properties"
MAX_FILE_NAME_BYTES = 255  # NAME_MAX of Linux file systems
DELETE_DIR_SUFFIX = "-delete"

_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>0|[1-9][0-9]*)$")


def validate_topic_name(name: str) -> None:
    """Kafka's topic rules (``Topic.validate``), plus no leading ``.`` (reserved for logfs's own names): InvalidTopic,
    or TopicNameTooLong over 249 characters."""
    check_name(name, "topic name", InvalidTopic, TopicNameTooLong)


def unify_collision_chars(name: str) -> str:
    """Kafka's ``Topic.unifyCollisionChars``: the name with every ``.`` made ``_``, as its metric names spell it."""
    return name.replace(".", "_")


class TopicCollisions:
    """The topics whose names hold ``.`` or ``_``, by their unified spelling (:func:`unify_collision_chars`).

    Only those can collide: a name without either unifies to itself, and so does no other name. Several topics may
    share a spelling (a store that already holds both is loaded as it is), hence a set per spelling. Not thread-safe:
    the store changes and asks it under its own lock."""

    def __init__(self) -> None:
        self._by_spelling: dict[str, set[str]] = {}

    def add(self, topic: str) -> None:
        if "." in topic or "_" in topic:
            self._by_spelling.setdefault(unify_collision_chars(topic), set()).add(topic)

    def remove(self, topic: str) -> None:
        spelling = unify_collision_chars(topic)
        topics = self._by_spelling.get(spelling)
        if topics is not None:
            topics.discard(topic)
            if not topics:
                del self._by_spelling[spelling]

    def colliding(self, topic: str) -> list[str]:
        """The topics other than ``topic`` that collide with it (Kafka's ``Topic.hasCollision``), sorted."""
        if "." not in topic and "_" not in topic:
            return []
        return sorted(self._by_spelling.get(unify_collision_chars(topic), set()) - {topic})


def collision_error(topic: str, others: list[str], whose: str = "existing topic") -> InvalidTopic:
    """The refusal of ``topic``, which collides with ``others`` (Kafka's InvalidTopicException, EINVAL)."""
    return InvalidTopic(
        f"topic name {topic!r} collides with {whose} {', '.join(map(repr, others))}: Kafka refuses names that differ "
        "only in '.' and '_' (their metric names would be the same)"
    )


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


