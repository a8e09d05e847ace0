"""Cluster mode on NATS JetStream (DESIGN §9, docs/cluster.md): the same core on many nodes,
with shard leases, routing between edges and owners, and the log as the fence."""
