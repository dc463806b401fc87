"""Replication in the core: the leader's replicas, ISR and high watermark, fetch answers, promotion."""
