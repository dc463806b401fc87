"""The follower daemon (``logfs follow``): the fetch protocol's reading side, replicas of partitions, the daemon."""
