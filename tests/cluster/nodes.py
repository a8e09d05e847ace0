"""Notify cluster nodes as real processes for the cluster tests: `notify serve --cluster ...`.

Each node is its own process so that SIGKILL is a crash and SIGSTOP a pause (a GC, a VM
migration), with its log in the test's tmp dir (shown when a test fails). `/readyz` says when
a node has joined; `/cluster` says who owns which shard, as that node sees it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from devtools.noderun import NotifyProcess, wait_ready
from notify.cluster.shards import shard_of
from notify_chaos.natsrun import free_ports

#: lease TTL of the test clusters: failover takes about this long
LEASE_TTL = 2.0


class NotifyNode(NotifyProcess):
    """A test node: short lease, a suspect timeout longer than a failover, info logs."""

    def __init__(self, name: str, port: int, nats: list[str], dir: Path,
                 extra: tuple[str, ...] = ()) -> None:
        super().__init__(name, port, dir, nats,
                         ["--lease-ttl", str(LEASE_TTL), "--suspect-timeout", "8", *extra])


@dataclass
class NotifyCluster:
    nodes: list[NotifyNode]

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def wait_ready(self, nodes: list[NotifyNode] | None = None, timeout: float = 40.0) -> None:
        """Until every node is ready and they agree on one owner for every shard."""
        try:
            wait_ready(nodes if nodes is not None else self.nodes, timeout=timeout)
        except RuntimeError as e:
            raise AssertionError(str(e)) from None

    def owner_of(self, group: str, among: list[NotifyNode] | None = None) -> NotifyNode:
        """The node that holds `group`'s shard (as the nodes asked say, all agreeing)."""
        shard = shard_of(group)
        for n in among if among is not None else self.nodes:
            if n.alive() and shard in n.view().get("held", []):
                return n
        raise AssertionError(f"nobody holds shard {shard}")

    def wait_owner(self, group: str, among: list[NotifyNode], timeout: float = 30.0,
                   ) -> NotifyNode:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.owner_of(group, among)
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def logs(self) -> str:
        return "\n".join(f"--- {n.name}\n{n.tail()}" for n in self.nodes)

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()


def make_cluster(nats: list[str], tmp: Path, n: int = 3,
                 extra: tuple[str, ...] = ()) -> NotifyCluster:
    """`n` nodes on the NATS cluster `nats`; `extra`: more `notify serve` options for each."""
    ports = free_ports(n)
    return NotifyCluster([NotifyNode(f"n{i + 1}", ports[i], nats, tmp, extra)
                          for i in range(n)])


def nodes_running(cluster: NotifyCluster) -> Iterator[NotifyCluster]:
    """For a fixture: start every node, wait until they are ready, stop them after the test
    (their logs printed: pytest shows them when the test failed)."""
    try:
        for n in cluster.nodes:
            n.start()
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.stop()
        print(cluster.logs())
