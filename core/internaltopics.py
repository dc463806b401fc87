"""Kafka's internal topics (``Topic.INTERNAL_TOPICS``), which only their coordinators write: ``__consumer_offsets``
(the groups' commits, core/groups/records.py) and ``__transaction_state`` (the committed labels for now,
core/txn/records.py). A client neither writes nor deletes them, and a pattern subscription leaves them out (Kafka's
``exclude.internal.topics``); each maps to where its records come from, for the refusal's message. Names only:
the Spark source imports this in every worker, so it stays clear of the store (each topic's config is with its
coordinator's code: core/groups/offsets.py, core/txn/labellog.py)."""

from __future__ import annotations

from logfs.core.groups.records import OFFSETS_TOPIC
from logfs.core.txn.records import TRANSACTION_STATE_TOPIC

INTERNAL_TOPICS = {
    OFFSETS_TOPIC: "commits to .logfs/groups/ (rmdir .logfs/groups/<group> deletes a group)",
    TRANSACTION_STATE_TOPIC: "labelled commits under .logfs/transactions/",
}


def internal_refusal(topic: str) -> str:
    """Why ``topic`` (one of :data:`INTERNAL_TOPICS`) is not a client's to write or delete."""
    return f"{topic} is internal: written by {INTERNAL_TOPICS[topic]} only"
