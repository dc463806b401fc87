"""What the follower learns from the leader's root, and the topics it makes here to match.

Discovery lists the leader's mount: its topics (the names not starting with ``.``), each topic's partitions (the
digit names under ``<topic>/``, the count being the highest plus one) and its ``config`` text (:func:`list_leader`);
it also looks up ``.logfs/fetch/<replica id>`` there, so that the leader knows this follower is live even before it
has a partition to fetch (a topic created there starts with the live followers in its ISR).
Then :func:`ensure_topic` makes this store hold the same: the topic, its missing partitions, the leader's config
as this store's topic overrides whenever the text changed, and the owner and mode its directory shows (so a
follower's mount, and this node once it leads, enforce what the leader did: core/owners.py); the root's and the
consumer groups' owners too (:func:`plan_owners`). Names are copied as the leader has them: Kafka's rules still
apply here (core/names.py), but two names that differ only in ``.`` against ``_`` are not refused (the leader
refuses such a pair when one is created; a leader that holds both anyway is copied whole). A topic deleted between
the listing of the root and of the topic is skipped, not an error: the next round sees the truth.

A leader that is not there answers with one of :data:`LEADER_DOWN`'s errors (a dead FUSE mount, an sshfs without its
server, an unmounted mount point) or :class:`LeaderUnavailable` (a mount point with no ``.logfs``); the daemon
retries those with backoff.

Threads: both functions block (on the leader's mount, on this store's disk): worker threads only.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from logfs.core.configtext import parse_config_lines
from logfs.core.errors import ConfigError, LogfsError
from logfs.core.owners import GROUP_MODE_BITS, GROUP_PREFIX, UNCLAIMED_GROUP_MODE, Owner, Owners, default_owner
from logfs.core.store import NewTopic, Store

_log = logging.getLogger(__name__)

LOGFS_DIR = ".logfs"
FETCH_DIR = "fetch"  # .logfs/fetch/<replica id>/: the fetch protocol (docs/replication.md)
LEADER_FILE = "leader"  # .logfs/leader: {"node_id", "mount", "leader_epoch", "shared"}
GROUPS_DIR = "groups"  # .logfs/groups/<group>/: a shared leader shows each claimed group's owner

# Errors of the leader's mount that mean "the leader is gone for now": a dead FUSE mount, an sshfs without its
# server, an unmounted mount point.
LEADER_DOWN = frozenset({
    errno.ENOTCONN, errno.ECONNABORTED, errno.ECONNRESET, errno.ECONNREFUSED, errno.EHOSTDOWN, errno.EHOSTUNREACH,
    errno.ENETUNREACH, errno.ETIMEDOUT, errno.EIO, errno.ESTALE, errno.ENODEV, errno.EPIPE,
})  # fmt: skip


class LeaderUnavailable(OSError):
    """The leader's mount point is there but holds no logfs mount (no ``.logfs``): the leader is not mounted."""


class LeaderTopic(NamedTuple):
    """One topic as the leader's mount shows it: its partition count, its ``config`` text (None: unreadable), and its
    owner and mode as its directory's attributes say (core/owners.py: a shared leader shows each topic's own)."""

    partitions: int
    config: str | None
    owner: Owner | None


@dataclass
class Listing:
    """The leader's root as discovery saw it: each topic, and the root's own owner and mode (who creates topics)."""

    topics: dict[str, LeaderTopic] = field(default_factory=dict)
    root: Owner | None = None  # None: the leader's mount is not shared (its attributes say nothing of owners)
    # every consumer group the leader lists → its owner, None while unclaimed; None: groups not listed this round
    groups: dict[str, Owner | None] | None = None


def list_leader(leader: Path, replica_id: int | None = None, known: dict[str, LeaderTopic] | None = None,
                groups: GroupsKnown | None = None) -> Listing:  # fmt: skip
    """The leader's topics, partition counts and configs. Worker thread (blocks on the leader's mount).

    With ``known`` (topic → what an earlier round found), a topic of the root listing that ``known`` holds is taken
    as it says, without listing it or reading its config: the caller passes all but a slice of the topics it knows,
    so that a round costs O(topics) names of the root plus a slice of topics, not two requests per topic (4,000 a
    second at 2,000 topics).

    With ``replica_id``, also a look-up of ``.logfs/fetch/<replica_id>``: a request of the fetch protocol that tells
    the leader this follower is live even while it has no partition to fetch, so a topic created there starts with
    this replica in its ISR (core/replication/replica.py, ``LeaderReplicas.follower_heard``). The kernel keeps that
    entry 1 s (mount/reads.py's STABLE_TIMEOUT_S), so with a listing every second the leader hears of it at least
    every 2 s or so. A refusal (EPERM: not one of the leader's replicas) is the fetches' to report.

    ``groups`` does for a shared leader's consumer groups what ``known`` does for topics: a listed group it holds
    and does not name again is taken as it was, without a stat."""
    names = os.listdir(leader)
    if LOGFS_DIR not in names:
        raise LeaderUnavailable(errno.ENOENT, f"no {LOGFS_DIR} in {leader}: the leader is not mounted")
    if replica_id is not None:
        try:
            os.stat(leader / LOGFS_DIR / FETCH_DIR / str(replica_id))
        except OSError as exc:
            if exc.errno in LEADER_DOWN:
                raise
    shared = _leader_is_shared(leader)
    listing = Listing(root=_owner_of(leader) if shared else None,
                      groups=_group_owners(leader, groups or GroupsKnown()) if shared else None)  # fmt: skip
    for topic in sorted(n for n in names if not n.startswith(".")):
        if known is not None and topic in known:
            listing.topics[topic] = known[topic]
            continue
        try:
            partitions = [int(n) for n in os.listdir(leader / topic) if n.isdigit()]
        except (FileNotFoundError, NotADirectoryError):
            continue  # deleted since the root was listed
        except PermissionError:
            # A shared leader's topic whose mode keeps this follower's user out (docs/replication.md, "Securing
            # ZooKeeper and followers"): not a leader that is down. The others go on.
            _log.warning("cannot list topic %s of %s as uid %d: its mode keeps this follower out", topic, leader,
                         os.getuid())  # fmt: skip
            continue
        try:
            config: str | None = (leader / topic / "config").read_text()
        except FileNotFoundError:
            continue
        except OSError as exc:
            if exc.errno in LEADER_DOWN:
                raise
            _log.error("cannot read %s: %s", leader / topic / "config", exc)
            config = None
        if partitions:
            owner = _owner_of(leader / topic) if shared else None
            listing.topics[topic] = LeaderTopic(max(partitions) + 1, config, owner)
    return listing


def _leader_is_shared(leader: Path) -> bool:
    """Whether the leader's mount is shared (``--allow-other``, as its ``.logfs/leader`` says): only then do its
    attributes say who owns what; an unshared mount shows its own user and the default modes for everything."""
    try:
        return bool(json.loads((leader / LOGFS_DIR / LEADER_FILE).read_bytes()).get("shared", False))
    except OSError as exc:
        if exc.errno in LEADER_DOWN:
            raise
        return False
    except (ValueError, AttributeError):
        return False


@dataclass(frozen=True)
class GroupsKnown:
    """What discovery knew of a shared leader's groups after its last round (group → owner, None: unclaimed), and
    which of them to look at again this round."""

    previous: dict[str, Owner | None] = field(default_factory=dict)
    again: frozenset[str] = frozenset()


def _group_owners(leader: Path, known: GroupsKnown) -> dict[str, Owner | None] | None:
    """Every consumer group a shared leader lists, with its owner, None while unclaimed (an unclaimed group shows
    01777, a mode no claimed group has: mount/access.py). A group ``known`` holds and does not name again is taken
    as it was; one whose stat fails (but for ENOENT: deleted since listed) stays as it was. None when
    ``.logfs/groups/`` cannot be listed: nothing is known of them this round (not "none is claimed")."""
    try:
        names = os.listdir(leader / LOGFS_DIR / GROUPS_DIR)
    except OSError as exc:
        if exc.errno in LEADER_DOWN:
            raise
        return None
    owners: dict[str, Owner | None] = {}
    for name in names:
        if name in known.previous and name not in known.again:
            owners[name] = known.previous[name]
            continue
        try:
            st = os.stat(leader / LOGFS_DIR / GROUPS_DIR / name)
        except OSError as exc:
            if exc.errno in LEADER_DOWN:
                raise
            if exc.errno != errno.ENOENT:
                owners[name] = known.previous.get(name)
            continue
        mode = stat.S_IMODE(st.st_mode)
        owners[name] = None if mode == UNCLAIMED_GROUP_MODE else Owner(st.st_uid, st.st_gid, mode & GROUP_MODE_BITS)
    return owners


def plan_owners(
    store: Store, root: Owner, groups: dict[str, Owner | None] | None
) -> tuple[dict[str, Owner], list[str]]:
    """What this store must take to match a shared leader's ``root`` and ``groups`` (``Listing``): the owner files to
    write (name → owner) and the group owner files to remove, those of groups the leader does not show as claimed
    (deleted there, or never claimed), also ones recorded before this process started. With ``groups`` None (not
    listed this round) the groups are left as they are. Reads the store's in-memory record only: any thread."""
    changed: dict[str, Owner] = {}
    if (store.owners.get(Owners.root_file()) or default_owner()) != root:
        changed[Owners.root_file()] = root
    if groups is None:
        return changed, []
    wanted = {Owners.group_file(g): owner for g, owner in groups.items() if owner is not None}
    changed.update({name: owner for name, owner in wanted.items() if store.owners.get(name) != owner})
    return changed, sorted(store.owners.recorded(GROUP_PREFIX) - wanted.keys())


def _owner_of(path: Path) -> Owner | None:
    """The owner and mode ``path`` shows (a topic's directory, the root); None when it is gone or unreadable."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno in LEADER_DOWN:
            raise
        return None
    return Owner(st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode))


def take_owner(store: Store, name: str, owner: Owner | None) -> bool:
    """Record the leader's ``owner`` for owner file ``name`` (core/owners.py) when it differs from what this store
    shows now (its record, or the default every unrecorded name has); True if it wrote. Worker thread."""
    if owner is None or (store.owners.get(name) or default_owner()) == owner:
        return False
    store.owners.set(name, owner)
    return True


def create_topics(store: Store, topics: dict[str, LeaderTopic]) -> list[str]:
    """Create the ``topics`` (name → partition count and the leader's config text) this store lacks, all in one
    :meth:`Store.create_topics`: one fsync of the store directory for the lot, not one per topic (a follower that
    starts beside a leader of thousands of topics; docs/storage.md, "Many partitions"). The names created. A batch
    that cannot be made as one (a config this store refuses, a topic made meanwhile) is left to :func:`ensure_topic`,
    topic by topic, which reports each refusal on its own. Worker thread."""
    batch: list[NewTopic] = []
    for topic, (count, config, owner) in topics.items():
        if store.has_topic(topic):
            continue
        try:
            overrides = parse_config_lines(config, {}) if config is not None else None
        except ConfigError:
            return []
        batch.append(NewTopic(topic, count, overrides or None, owner))
    if not batch:
        return []
    try:
        store.create_topics(batch, copied=True)  # the leader's names as they are, collisions included
    except (LogfsError, OSError) as exc:
        _log.info("creating %d topics at once failed (%s): one by one", len(batch), exc)
        return []
    _log.info("created %d topic(s) here with the leader's partitions and configs", len(batch))
    return [new.name for new in batch]


def ensure_topic(store: Store, topic: str, seen: LeaderTopic, copied_config: str | None) -> None:
    """Create ``topic`` in ``store`` with the leader's partition count (or add the missing ones), take the leader's
    config when it differs from ``copied_config``, the text last taken, and its owner and mode. Worker thread."""
    count, config, owner = seen
    overrides = None
    if config is not None and config != copied_config:
        try:
            overrides = parse_config_lines(config, {})
        except ConfigError as exc:
            _log.error("topic %s: this store cannot take the leader's config (%s): keeping its own", topic, exc)
    if not store.has_topic(topic):
        store.create_topics([NewTopic(topic, count, overrides or None, owner)], copied=True)
        _log.info("topic %s: created here with %d partition(s) and the leader's config", topic, count)
        overrides = None
    if take_owner(store, Owners.topic_file(topic), owner):
        _log.info("topic %s: took the leader's owner and mode %s", topic, owner)
    if overrides is not None and overrides != store.topic_overrides(topic):
        store.set_topic_overrides(topic, overrides)
        _log.info("topic %s: took the leader's config", topic)
    for p in range(len(store.partitions(topic)), count):
        store.add_partition(topic, p)
        _log.info("topic %s: added partition %d", topic, p)
