"""What a node that does not lead knows of the cluster's transactions: the open ones and their owners, and the
committed labels it looked up, as the transaction coordinator's node showed them (docs/mount.md, "Transactions
through any node").

A transaction's state lives in the coordinator's store alone (its transaction log is not replicated), so a node
that does not lead cannot answer a lookup under ``.logfs/transactions/`` or ``.logfs/labels/`` from its own store.
The mount asks the coordinator's mount instead (``mount/forwarding.py``: a stat of its twin
``.logfs/forward/.transactions/<id>``, a listing of ``.logfs/forward/.transactions/``, a stat of
``.logfs/forward/.labels/<label>``) and keeps the answer here, where the tree (does ``<id>`` exist?) and the
access rules (whose is it?) read it; every later lookup asks again, so nothing here is older than the kernel's
entry cache (1 s) allows, and an open of a transaction's file asks again whose it is. A transaction this node ended
(its ``control`` written through it) is dropped at once; the whole view at each change of the node's role
(``Tree.forget_coordinator_view``).

Labels stay: a committed label is never taken back (only the oldest are forgotten past the coordinator's
100,000), so one seen is kept, up to ``LABELS_KEPT`` (the oldest dropped first).

Threads: the trio thread only (lookups, opendir, writes).
"""

from __future__ import annotations

from collections.abc import Mapping

from logfs.core.txn.records import TRANSACTION_STATE_TOPIC, partition_for_transactional_id

# Where the listing of open transactions and the committed labels are asked for: with one leader for every partition,
# every transaction's coordinator (labels are not kept per transactional id; a cluster with a coordinator per
# partition would ask each)
ANY_COORDINATOR = (TRANSACTION_STATE_TOPIC, 0)
LABELS_KEPT = 10_000  # committed labels remembered here: a Spark query looks up the last few of its own


class CoordinatorView:
    """The transactions and labels the coordinator's node showed this node. See the module docstring."""

    def __init__(self) -> None:
        self._owners: dict[str, tuple[int, int]] = {}  # open transaction → (uid, gid) of who began it
        self._labels: dict[str, None] = {}  # insertion-ordered set: oldest first

    def owner(self, transactional_id: str) -> tuple[int, int] | None:
        """Who began open transaction ``transactional_id`` (None: not open, as far as this node knows)."""
        return self._owners.get(transactional_id)

    def open_transactions(self) -> list[str]:
        return sorted(self._owners)

    def seen(self, transactional_id: str, owner: tuple[int, int] | None) -> None:
        """The coordinator showed ``transactional_id`` open, begun by ``owner``; or (None) not open."""
        if owner is None:
            self._owners.pop(transactional_id, None)
        else:
            self._owners[transactional_id] = owner

    def listed(self, owners: Mapping[str, tuple[int, int]]) -> None:
        """The coordinator listed these open transactions, and no other."""
        self._owners = dict(owners)

    def has_label(self, label: str) -> bool:
        return label in self._labels

    def label_seen(self, label: str) -> None:
        self._labels[label] = None
        while len(self._labels) > LABELS_KEPT:
            del self._labels[next(iter(self._labels))]


def coordinator_of(transactional_id: str) -> tuple[str, int]:
    """The partition whose leader coordinates ``transactional_id``: its ``__transaction_state`` partition, by the
    hash Kafka's ``TransactionStateManager.partitionFor`` uses (the group coordinator's too). A node asks its
    forward target for that partition's leader; with one leader for every partition, it is the cluster's leader."""
    return TRANSACTION_STATE_TOPIC, partition_for_transactional_id(transactional_id)
