"""The follower daemon (``logfs follow``): the fetch protocol's reading side, discovery of the leader's topics,
replicas of partitions, the daemon."""
