"""What a call to ZooKeeper (``logfs/cluster/zk.py``) can answer besides its result, as types the node, the controller
and the ISR recorder (``logfs/cluster/node.py``, ``controller.py``, ``isr.py``) judge: nothing decided, a
registration to wait out, a write refused (fenced), refused for a newer epoch naming the same leader (adopt it), or
refused by a partition state's version only (read again). No kazoo: kazoo's own errors never leave ``zk.py``.
"""

from __future__ import annotations


class ZkUnavailable(Exception):
    """ZooKeeper did not answer (connection lost, session expired, timeout): nothing was decided."""


class StillRegistered(Exception):
    """``/brokers/ids/<id>`` belongs to an earlier session of this node (killed before it expired): wait it out."""


class Superseded(Exception):
    """A conditional write was refused because the controller wrote a newer epoch naming this same leader (it
    removed a dead replica): not a fence; the node adopts the epoch."""


class Fenced(Exception):
    """A conditional write was refused: someone else changed the znode (a newer controller or leader)."""


class Conflict(Exception):
    """A controller multi was refused by a partition state's version, not by ``/controller_epoch``: the state changed
    since the controller read it (the leader recorded an ISR). The controller is still the controller: it reads the
    states again and tries again."""
