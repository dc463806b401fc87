"""Idempotent producers and transactions: producer state and snapshots, producer ids, the transaction index, the
coordinator and its log, the last stable offset."""
