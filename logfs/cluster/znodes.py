"""Where the cluster's state lives in ZooKeeper: the znodes' paths, Kafka's layout (docs/replication.md, "The
znodes"), and a partition state with its znode version. Plain names and values, no kazoo: ``logfs/cluster/zk.py``
reads and writes them, the rest of ``logfs/cluster`` and the tests name them.

Znodes (under the chroot of ``zookeeper.connect``):

* ``/brokers/ids/<id>`` — ephemeral, one per live node (``rules.Broker``: its advertised mount and the highest epoch
  its store saw). Its czxid is the node's *broker epoch*: a restarted node registers with a larger one.
* ``/controller`` — ephemeral, ``{"version":1,"brokerid":…,"timestamp":"…"}``; ``/controller_epoch`` — persistent,
  decimal text. A node becomes controller with Kafka's multi: create ``/controller`` and set ``/controller_epoch``
  to E+1 expecting its version; every later controller write carries a check of that version, so a deposed
  controller can change nothing.
* ``/brokers/topics/<t>/partitions/<p>/state`` — Kafka's partition state JSON (``rules.PartitionState``).
* ``/logfs/leadership`` — who leads every partition in which epoch (``rules.Leadership``): the one znode every node
  watches and acts on. One leader leads every partition, so it is one small record (about 150 bytes) whatever the
  number of partitions; it never approaches ``jute.maxbuffer``.
* ``/admin/delete_topics/<t>`` — a topic deleted on the leader, until every replica has deleted it (its data: the
  ids that did, JSON).
"""

from __future__ import annotations

from dataclasses import dataclass

from logfs.cluster.rules import PartitionState

BROKERS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
LEADERSHIP = "/logfs/leadership"
DELETE_TOPICS = "/admin/delete_topics"


@dataclass(frozen=True, slots=True)
class Versioned:
    """A partition state and its znode version (Kafka's zkVersion, the expected version of the next write)."""

    state: PartitionState
    version: int


def split_connect(connect: str) -> tuple[str, str]:
    """``"h1:1,h2:2/chroot"`` → ``("h1:1,h2:2", "/chroot")`` (``""`` for no chroot)."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, ("/" + chroot.strip("/")) if slash and chroot.strip("/") else ""


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"
