"""What a call to ZooKeeper can answer besides its result, as plain types: kazoo's own errors never leave
``logfs/cluster/zksession.py``, the session, which answers in these.

Two audiences. The node, the controller and the ISR recorder (``logfs/cluster/node.py``, ``controller.py``,
``isr.py``) judge what the cluster's operations (``logfs/cluster/zk.py``) answer: nothing decided, a registration to
wait out, a write refused (fenced), refused for a newer epoch naming the same leader (adopt it), or refused by a
partition state's version only (read again). ``zk.py`` judges what the session answers about one znode: the kinds of
Refused.
"""

from __future__ import annotations


class ZkUnavailable(Exception):
    """ZooKeeper did not answer (connection lost, session expired, timeout): nothing was decided."""


class NotAuthorized(ZkUnavailable):
    """A znode's ACL refused this session (ZooKeeper's NoAuth): the cluster is secured (``zookeeper.set.acl``) and this
    node's credential (``zookeeper.auth.file``) is missing or another. Nothing was decided, as for ZkUnavailable, but
    retrying cannot help until the operator fixes the credential: the node says so at ERROR."""


class StillRegistered(Exception):
    """``/brokers/ids/<id>`` belongs to an earlier session of this node (killed before it expired): wait it out."""


class Superseded(Exception):
    """A conditional write was refused because the controller wrote a newer epoch naming this same leader (it
    removed a dead replica): not a fence; the node adopts the epoch."""


class Fenced(Exception):
    """A conditional write was refused: someone else changed the znode (a newer controller or leader)."""


class Conflict(Exception):
    """A conditional write was refused by its znode's version, not by ``/controller_epoch``: the znode changed since it
    was read (a partition state whose leader recorded an ISR, under a controller's multi; a topic's assignment made
    or grown meanwhile). The writer is not deposed: it reads the znode again and tries again."""


class Refused(Exception):
    """ZooKeeper's answer about one znode to a request, or to one op of a multi: the znode is not as the request
    expected. The kinds ``zk.py`` judges are below; another (an op after a refused one in a multi) is this, named."""


class NoNode(Refused):
    """No such znode."""


class NodeExists(Refused):
    """A creation met an existing znode."""


class BadVersion(Refused):
    """A write or check conditional on a version met another."""


class RolledBack(Refused):
    """An op of a refused multi, before the one refused: it would have applied, but a multi is all or nothing."""


class Unimplemented(Refused):
    """The server has no such request (multiRead before ZooKeeper 3.6)."""
