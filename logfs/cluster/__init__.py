"""Automatic failover through ZooKeeper (issue 17; docs/replication.md, "Automatic failover")."""
