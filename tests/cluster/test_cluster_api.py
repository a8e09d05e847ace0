"""The server API in cluster mode (issue 31: "every node serves it and routes to owners"), on two
`notify serve --cluster` processes over a real 3-node NATS JetStream cluster: a publish to a
node that does not own the group crosses the link to its owner as the key's trusted sender and
reaches members on both nodes; retries through either node are delivered once; the view and
the history are answered by any node (from the stream when it does not own the group); a
removal is answered by the owner (503 elsewhere: not routed yet)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("nats", reason="the cluster extra (nats-py) is not installed")

from client_sdk import Client, ServerAPI, ServerAPIError
from notify_chaos.natsrun import free_ports
from tests.cluster.conftest import NatsCluster
from tests.cluster.nodes import NotifyCluster, NotifyNode, nodes_running
from tests.cluster.test_cluster import TIMEOUT, Collector, client, clients, group_on

SECRET = "cluster-api-secret"
__all__ = ["clients"]  # (the fixture, used by name)


@pytest.fixture
def api_cluster(nats_cluster: NatsCluster, tmp_path: Path) -> Iterator[NotifyCluster]:
    ports = free_ports(4)
    nodes = [NotifyNode(f"n{i + 1}", ports[i], nats_cluster.urls, tmp_path / "nodes",
                        ("--api-port", str(ports[2 + i]), "--api-key", f"app={SECRET}",
                         "--suspect-timeout", "30"))
             for i in range(2)]
    yield from nodes_running(NotifyCluster(nodes))


def api_url(node: NotifyNode) -> str:
    return f"http://127.0.0.1:{node.extra[node.extra.index('--api-port') + 1]}"


@pytest.mark.timeout(150)
async def test_a_publish_through_any_node_reaches_the_owners_group_once(
        api_cluster: NotifyCluster, clients: list[Client]) -> None:
    cluster = api_cluster
    owner, edge = cluster.nodes
    g = group_on(cluster, owner.name)
    a = await client(clients, owner.url, "a")
    b = await client(clients, edge.url, "b")
    ga = await asyncio.wait_for(a.join(g), TIMEOUT)
    gb = await asyncio.wait_for(b.join(g), TIMEOUT)
    cols = [Collector(ga), Collector(gb)]
    try:
        await asyncio.gather(*(c.wait_for(lambda s: s.views and s.views[-1][0] == 2)
                               for c in cols))
        async with ServerAPI(api_url(edge), SECRET) as via_edge, \
                ServerAPI(api_url(owner), SECRET) as via_owner:
            first = await via_edge.publish(g, {"n": 1}, idempotency_key="k1")
            total = await via_edge.publish(g, {"n": 2}, order="total")
            atomic = await via_edge.publish(g, {"n": 3}, atomic=True)
            assert (first.offset, total.offset, atomic.offset) == (1, 2, 3)
            assert atomic.committed is True
            # a retry through the other node: the owner knows the key
            again = await via_owner.publish(g, {"n": 1}, idempotency_key="k1")
            assert (again.offset, again.replayed) == (1, True)
            again = await via_edge.publish(g, {"n": 1}, idempotency_key="k1")
            assert again.offset == 1
            with pytest.raises(ServerAPIError) as e:  # read back from the stream
                await via_edge.publish(g, {"n": "other"}, idempotency_key="k1")
            assert (e.value.status, e.value.code) == (409, "conflict")
            for c in cols:
                await c.wait_for(lambda s: len(s.messages) >= 3)
            await asyncio.sleep(0.5)  # nothing more, nothing twice
            for c in cols:
                assert [(m.payload, m.sender, m.stream) for m in c.messages] == [
                    ({"n": 1}, "api:app", "fifo:api:app"), ({"n": 2}, "api:app", "total"),
                    ({"n": 3}, "api:app", "fifo:api:app")]
                assert c.views[-1] == (2, ("a", "b"))  # no view change
            # any node answers the view and the history
            for api in (via_edge, via_owner):
                view = await api.group(g)
                assert (view.version, set(view.users)) == (2, {"a", "b"})
                page = await api.history(g)
                assert [m.offset for m in page.messages] == [1, 2, 3]
                assert {m.sender for m in page.messages} == {"api:app"}
            # a removal is not routed yet: the node that does not own the group says so (503,
            # not a wrong 404), and the owner removes
            with pytest.raises(ServerAPIError) as e:
                await via_edge.remove(g, "b")
            assert (e.value.status, e.value.code) == (503, "unavailable")
            removal = await via_owner.remove(g, "b")
            assert (removal.removed, removal.version) == ((b.member,), 3)  # every tab of b
    finally:
        for c in cols:
            await c.stop()
