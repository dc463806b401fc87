"""The refusals the mount makes on its own, as typed errors (the core's are in ``logfs.core.errors``).

A handler raises one of these, or lets a core error rise; ``mount/errno.py`` maps both to errno in its one table,
so no module of the mount names an errno. These are the rules of the filesystem itself (names, modes, the
read-only follower mount, signals), not of the log: a refusal whose reason is the log's (an offset out of range, a
topic that exists, a record too large) stays the core's error.

::

    MountRefusal
    ├── NoEntry                 an unknown or vanished name, an offset outside the log (ENOENT)
    ├── NotPermitted            what an ordinary command must never do here: unlink, rename, chmod … (EPERM)
    ├── ReadOnlyMount           a change on a follower's mount (EROFS)
    ├── NoLeader                a write to forward when no leader took it within request.timeout.ms (EAGAIN)
    ├── ForwardFailed           a forwarded request the leader refused (the leader's errno)
    ├── NotShownHere            a forwarded change the leader made, not shown here in request.timeout.ms (ETIMEDOUT)
    ├── NotRecorded             a leader's topic change ZooKeeper did not record in request.timeout.ms (ETIMEDOUT)
    ├── BadFileHandle           an unknown handle, or one not open for that request (EBADF)
    ├── NotADirectory           opendir of a file (ENOTDIR)
    ├── IsADirectory            open of a directory (EISDIR)
    ├── WrongAccessMode         a write file opened for reading, or a read file for writing (EACCES)
    ├── AccessDenied            on a shared mount, what only a topic's owner, root or a replica user may do (EACCES)
    ├── TooManyReaders          one follow/ reader beyond max.follow.readers, or a user's share of them (EMFILE)
    ├── ReadInProgress          a second read of one follow/ handle while its first waits (EBUSY)
    ├── Interrupted             a waiting follow/ read whose opener got a signal (EINTR)
    ├── InvalidName             mkdir of a name that cannot be one (undecodable, not a partition number) (EINVAL)
    ├── InvalidCommand          a command-file line that is not one (EINVAL)
    ├── KeylessLines            a text or JSON line without a key for a compacted topic (EINVAL)
    ├── UnfinishedBatch         close of a ``batches`` handle holding part of a batch (EBADMSG)
    └── BrokenFraming           a write handle whose framing an earlier write lost (EBADMSG) …
        └── BrokenByTooLarge    … to a line or batch too large (EFBIG)

Each is raised with a message a user can act on ("/t/0/state is for reading", "no topic 'x'"): for a refused
change it is the reason the WARNING line and ``.logfs/errors`` show (``mount/refusals.py``), so say what was wrong,
not only what failed.

Threads: any (plain exceptions).
"""

from __future__ import annotations


class MountRefusal(Exception):
    """Base of every refusal the mount makes on its own."""


class NoEntry(MountRefusal):
    """No such name (now): unknown, hidden, vanished, or an offset the log does not hold."""


class NotPermitted(MountRefusal):
    """An operation nothing here allows (it could destroy data), or a fetch by an id that is not a follower."""


class ReadOnlyMount(MountRefusal):
    """A change on a follower's mount."""


class NoLeader(MountRefusal):
    """A write on a node that does not lead its partition, when no leader took it within ``request.timeout.ms``
    (none elected, or none reachable): nothing of it is stored (mount/forwarding.py)."""


class NotShownHere(MountRefusal):
    """A mkdir, rmdir or delete-* line made through a node that does not lead: the leader made it, and this node's
    replica did not show it within ``request.timeout.ms`` (mount/forwarding.py). Not to be made again."""


class NotRecorded(MountRefusal):
    """A topic made, grown or deleted on a cluster's leader that ZooKeeper did not record within
    ``request.timeout.ms``: made here, but a node elected after this one's death may not know of it (the cluster
    node, logfs/cluster/node.py). Not to be made again."""


class ForwardFailed(MountRefusal):
    """The leader's refusal of a forwarded request: its errno is the answer (mount/forwarding.py), or EIO when the
    request could not be carried to the new leader (part of a record went to the old one)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class BadFileHandle(MountRefusal):
    """A handle the mount does not know, or one whose mode does not allow the request."""


class NotADirectory(MountRefusal):
    """opendir of a file."""


class IsADirectory(MountRefusal):
    """open of a directory."""


class AccessDenied(MountRefusal):
    """On a shared mount, a request the caller may not make whatever the modes say: a change to a topic (its
    config, a partition, deleting it or its records) by someone other than its owner or root, a fetch by someone
    not in ``replica.users`` (mount/access.py)."""


class WrongAccessMode(MountRefusal):
    """A write-only file opened for reading, or a read-only file for writing."""


class TooManyReaders(MountRefusal):
    """One ``follow/`` reader more than ``max.follow.readers`` (each may hold a pyfuse3 task while it waits)."""


class ReadInProgress(MountRefusal):
    """A read of a ``follow/`` stream while another read of the same handle is in progress: each waiting read holds
    a pyfuse3 task, so one handle read by many threads at once could take every task of the mount (whose number
    ``max.follow.readers`` sizes, one per handle)."""


class Interrupted(MountRefusal):
    """A waiting ``follow/`` read whose opener has a deliverable signal pending (pyfuse3 drops the kernel's
    interrupt, so the mount looks for itself)."""


class InvalidName(MountRefusal):
    """A name mkdir cannot create: not UTF-8, or not a canonical partition number."""


class InvalidCommand(MountRefusal):
    """A line written to a command file (``.logfs/delete-records``, a transaction's ``control``) that is not a
    command."""


class KeylessLines(MountRefusal):
    """Text lines (which carry no key) or a JSON line without a key written to a compacted topic: the core's
    NoKeyOnCompactedTopic, which the spec answers with EINVAL for lines (a line is not a batch: EBADMSG is for
    ``batches``). Nothing of the write is stored."""


class UnfinishedBatch(MountRefusal):
    """close(2) of a ``batches`` handle with part of a batch written: that part is not stored."""


class BrokenFraming(MountRefusal):
    """A write handle whose framing an earlier write lost (a corrupt batch): it refuses every further write, since
    what follows is no longer at a record boundary."""


class BrokenByTooLarge(BrokenFraming):
    """As :class:`BrokenFraming`, lost to a line or batch too large (the rest of that line would otherwise become a
    record of its own)."""
