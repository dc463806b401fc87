"""The directories of the mount: listings (opendir, readdir) and the two changes a directory takes, ``mkdir`` (a topic,
a partition, a transaction) and ``rmdir`` (an empty topic, a consumer group); docs/mount.md, "Files, modes and
caching".

``Operations`` (``mount/operations.py``) answers the FUSE requests and hands directories over here, as it hands files
to ``mount/reads.py`` and ``mount/writes.py``. A listing is fixed at opendir (the names as they were then) and owned
by this module until releasedir. Trio thread; what touches the disk (creating a topic) runs in a worker thread.
"""

from __future__ import annotations

import logging
import time

import pyfuse3

from logfs.core.names import validate_transactional_id
from logfs.core.owners import DEFAULT_MODE, Owner
from logfs.core.store import NewTopic, Store
from logfs.core.topicnames import validate_topic_name
from logfs.mount.access import Access, Caller
from logfs.mount.coordinatorview import coordinator_of
from logfs.mount.direntry import listed_only
from logfs.mount.errors import InvalidName, MountRefusal, NoEntry, NotADirectory, NotPermitted
from logfs.mount.forwarding import DirChange, Forwarder
from logfs.mount.groups import GROUP_DIR_KINDS, Groups
from logfs.mount.internal import refuse_internal
from logfs.mount.names import decode_name, parse_partition_name
from logfs.mount.nodes import Kind, Node
from logfs.mount.reads import Reader
from logfs.mount.runner import Runner
from logfs.mount.transactions import Transactions
from logfs.mount.tree import Tree
from logfs.mount.writes import Writer

_log = logging.getLogger(__name__)


class Directories:
    """Listings by directory handle, and mkdir / rmdir. Trio thread."""

    def __init__(
        self,
        store: Store,
        tree: Tree,
        reader: Reader,
        writer: Writer,
        groups: Groups,
        access: Access,
        *,
        write_thread: Runner,
    ) -> None:
        self.store = store
        self.access = access
        self.tree = tree
        self.reader = reader
        self.writer = writer
        self.groups = groups
        self._write_thread = write_thread
        self._listings: dict[int, list[tuple[str, Node]]] = {}  # directory handle → its names as of opendir

    async def open(self, fh: int, inode: int) -> None:
        """Fix the listing of directory ``inode`` under handle ``fh``."""
        node = self.tree.entry(inode).node
        if not node.kind.is_dir:
            raise NotADirectory(str(node))
        self.reader.check_exists(node)
        hw_names = self.reader.hw_names(node) if node.kind is Kind.HW_DIR else None
        if node.kind in GROUP_DIR_KINDS:
            self._listings[fh] = await self.groups.children(node)
        else:
            self._listings[fh] = self.tree.children(node, hw_names)

    async def reply(self, fh: int, start_id: int, token: pyfuse3.ReaddirToken) -> None:
        """pyfuse3 answers READDIRPLUS, where an entry sent with attributes is a lookup the kernel caches. A file is
        listed without one (``mount/direntry.py``): its first stat or open looks it up, with attributes exact then,
        and a listing renders no ``state``, sizes no ``hw/`` file and leaves the kernel no inode to forget. A
        directory carries its attributes (cheap), so that ``ls -R`` and ``find`` descend without a lookup; a fresh
        kind gets its own fresh inode (counted only once sent)."""
        listing = self._listings.get(fh, [])
        for i in range(start_id, len(listing)):
            name, child = listing[i]
            if not child.kind.is_dir:
                try:
                    self.reader.check_exists(child)
                except MountRefusal:
                    continue  # gone since opendir (a deleted topic)
                listed = listed_only(self.tree.listed_inode(child), child.kind.mode)
                if listed is not None:
                    if not pyfuse3.readdir_reply(token, name.encode(), listed, i + 1):
                        break
                    continue
            if child.kind.fresh:
                entry = self.tree.add_fresh(child, None, created_ns=time.time_ns())
            else:
                entry = self.tree.entry(self.tree.stable_inode(child))
            try:
                attr = await self.reader.attributes(entry)
            except MountRefusal:
                self.tree.forget(entry.inode, 0)
                continue  # gone since opendir (an hw/ file retention deleted, a deleted topic)
            if not pyfuse3.readdir_reply(token, name.encode(), attr, i + 1):
                self.tree.forget(entry.inode, 0)
                break
            self.tree.remember(entry)

    def release(self, fh: int) -> None:
        self._listings.pop(fh, None)

    async def make(
        self,
        parent_inode: int,
        name: bytes,
        mode: int,
        caller: Caller,
        transactions: Transactions | None,
        forwarder: Forwarder | None = None,
    ) -> pyfuse3.EntryAttributes:
        """mkdir by ``caller``: a topic in the root (``caller``'s, with ``mode``), a partition in a topic (its owner's
        to add), a transaction in ``.logfs/transactions/`` (a leader's ``transactions``); NotPermitted elsewhere.
        With ``forwarder`` (a node that does not lead) a topic or partition is checked here and made on the leader
        (mount/forwarding.py), and answered once this node's replica has it; a transaction is begun on its
        coordinator's node, for the caller."""
        parent = self.tree.entry(parent_inode).node
        text = decode_name(name, InvalidName)
        if parent.kind is Kind.ROOT:
            refuse_internal(text)  # made by their coordinators, with their partitions and config
            owner = self.access.new_topic(caller, mode)
            if forwarder is not None:
                validate_topic_name(text)  # the name's rules here (EINVAL, ENAMETOOLONG), before it is sent anywhere
                await forwarder.change(DirChange("mkdir", text, owner=owner), lambda: self.store.has_topic(text))
            else:
                await self._write_thread(self.store.create_topics, [NewTopic(text, owner=owner)])
                _log.info("created topic %s with %d partition(s)", text, len(self.store.partitions(text)))
                await self.writer.topics_changed()
            node = Node(Kind.TOPIC, text)
        elif parent.kind is Kind.TOPIC:
            partition = parse_partition_name(text)
            if partition is None:
                raise InvalidName(f"{text!r} is not a partition number")
            topic = parent.topic
            refuse_internal(topic)  # a partition more would move every group's or transaction's partition
            self.access.check_topic_owner(caller, topic, "adding a partition")
            if forwarder is not None:
                await forwarder.change(DirChange("mkdir", topic, partition, uid=caller.uid),
                                       lambda: partition in self.store.partitions(topic))  # fmt: skip
            else:
                await self._write_thread(self.store.add_partition, topic, partition)
                _log.info("added partition %d to topic %s", partition, topic)
                await self.writer.topics_changed()
            node = Node(Kind.PARTITION, topic, partition)
        elif parent.kind is Kind.TXN_DIR and not parent.forwarded and transactions is not None:
            await transactions.begin(text, (caller.uid, caller.gid))  # EEXIST while open; EINVAL for a bad id
            node = Node(Kind.TXN, txn=text)
        elif parent.kind is Kind.TXN_DIR and not parent.forwarded and forwarder is not None:
            validate_transactional_id(text)  # EINVAL, ENAMETOOLONG here, before it is sent anywhere
            begin = DirChange("begin", owner=Owner(caller.uid, caller.gid, DEFAULT_MODE), group=text)
            await forwarder.change(begin, None, coordinator_of(text))  # the coordinator's EEXIST while open
            if self.tree.coordinator_view is not None:  # (still not leading)
                self.tree.coordinator_view.seen(text, (caller.uid, caller.gid))
            node = Node(Kind.TXN, txn=text)
        else:
            raise NotPermitted(f"mkdir in {parent}")
        entry = self.tree.entry(self.tree.stable_inode(node))
        return await self.reader.attributes(entry)

    async def remove(self, parent_inode: int, name: bytes, caller: Caller, forwarder: Forwarder | None = None) -> None:
        """rmdir by ``caller``: an empty topic, or a consumer group (on a shared mount, its owner's or root's);
        NotPermitted for everything else (partitions, ``at/``, ``hw/`` …: nothing else is ever removed). With
        ``forwarder`` a topic is checked here and removed by the leader (see :meth:`make`), a group removed by the
        leader of its offsets partition (``mount/groups.py``)."""
        parent = self.tree.entry(parent_inode).node
        text = decode_name(name)
        if parent.kind is Kind.GROUPS_DIR:
            await self.groups.delete(text, caller, forwarder)
            return
        if parent.kind is Kind.ROOT and text != ".logfs":
            refuse_internal(text)
            if not self.store.has_topic(text):
                raise NoEntry(f"no topic {text!r}")
            self.access.check_topic_owner(caller, text, "deleting it")
            if forwarder is not None:
                await forwarder.change(DirChange("rmdir", text, uid=caller.uid), lambda: not self.store.has_topic(text))
                return
            await self.writer.delete_topic(text, only_if_empty=True, invalidate=False)
            await self.writer.topics_changed()
            return
        self.tree.resolve(parent, text)  # ENOENT for what does not exist
        raise NotPermitted(f"rmdir in {parent}")
