"""The server API in cluster mode (issue 31: "every node serves it and routes to owners"), on two
`notify serve --cluster` processes over a real 3-node NATS JetStream cluster: a publish to a
node that does not own the group crosses the link to its owner as the key's trusted sender and
reaches members on both nodes; retries through either node are delivered once; the view and
the history are answered by any node (from the stream when it does not own the group); a
removal asked of any node runs at the owner; a disconnect asked of any node ends the user's
sessions on every node, and its tokens are refused by every node, one started later too."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("nats", reason="the cluster extra (nats-py) is not installed")

import jwt

from client_sdk import (
    Client,
    ConnectionState,
    Disconnected,
    ServerAPI,
    ServerAPIError,
    ServerRefused,
    connect,
)
from notify_chaos.natsrun import free_ports
from tests.cluster.conftest import NatsCluster
from tests.cluster.nodes import NotifyCluster, NotifyNode, nodes_running
from tests.cluster.test_cluster import TIMEOUT, Collector, client, clients, group_on

SECRET = "cluster-api-secret"
TOKEN_KEY = "cluster-api-token-secret-0123456789-0123456789"
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
            # a removal asked of the node that does not own the group runs at the owner
            removal = await via_edge.remove(g, "b")
            assert (removal.removed, removal.version) == ((b.member,), 3)  # every tab of b
            await cols[0].wait_for(lambda s: s.views[-1] == (3, ("a",)))
            with pytest.raises(ServerAPIError) as e:  # the owner's answers, through the edge
                await via_edge.remove(g, "b")
            assert (e.value.status, e.value.code) == (404, "unknown_member")
            for api in (via_edge, via_owner):  # a group nobody ever made: its owner says so
                with pytest.raises(ServerAPIError) as e:
                    await api.remove("never-made", "b")
                assert (e.value.status, e.value.code) == (404, "unknown_group")
    finally:
        for c in cols:
            await c.stop()


def token(sub: str, iat: float) -> str:
    return jwt.encode({"sub": sub, "iat": int(iat), "exp": int(time.time() + 3600)}, TOKEN_KEY,
                      algorithm="HS256")


@pytest.fixture
def auth_cluster(nats_cluster: NatsCluster,
                 tmp_path: Path) -> Iterator[tuple[NotifyCluster, NotifyNode]]:
    """Two running nodes with tokens and the API, and a third one not started."""
    ports = free_ports(6)
    nodes = [NotifyNode(f"n{i + 1}", ports[i], nats_cluster.urls, tmp_path / "nodes",
                        ("--api-port", str(ports[3 + i]), "--api-key", f"app={SECRET}",
                         "--auth-hs256-secret", TOKEN_KEY, "--suspect-timeout", "30"))
             for i in range(3)]
    try:
        for cluster in nodes_running(NotifyCluster(nodes[:2])):
            yield cluster, nodes[2]
    finally:
        nodes[2].stop()
        print(f"--- n3\n{nodes[2].tail()}")


async def _refused(url: str, old: str) -> None:
    with pytest.raises(ServerRefused) as e:
        async with connect(url, member="alice", token=old):
            pass
    assert e.value.code == "token_revoked"


@pytest.mark.timeout(150)
async def test_a_disconnect_through_any_node_ends_the_users_sessions_on_every_node(
            auth_cluster: tuple[NotifyCluster, NotifyNode], clients: list[Client]) -> None:
    cluster, later = auth_cluster
    owner, edge = cluster.nodes
    g = group_on(cluster, owner.name)
    old = token("alice", time.time() - 60)
    # alice in two tabs, one at each node; bob at the owner
    a1 = await client(clients, owner.url, "alice", token=old)
    a2 = await client(clients, edge.url, "alice", token=old)
    bob = await client(clients, owner.url, "bob", token=token("bob", time.time()))
    groups = [await asyncio.wait_for(c.join(g), TIMEOUT) for c in (a1, a2, bob)]
    watch = Collector(groups[2])
    try:
        await watch.wait_for(lambda s: bool(s.views) and s.views[-1][0] == 3)
        async with ServerAPI(api_url(edge), SECRET) as via_edge:
            r = await via_edge.disconnect("alice")
        # answered once stored; the asked node ended the session it holds, the other node
        # the one it holds when its watch heard of the revocation
        assert r.sessions == (a2.member,)
        assert r.revoked_before is not None and abs(r.revoked_before - time.time()) < 30
        for c in (a1, a2):
            await asyncio.wait_for(_until_closed(c), TIMEOUT)
            assert isinstance(c.failure, Disconnected)
        # both instances left the view at once (the suspect timeout is 30 s)
        await watch.wait_for(lambda s: s.views[-1][1] == ("bob",))
        assert bob.state is ConnectionState.CONNECTED
        # every node refuses the old tokens, and accepts a newer one
        for node in (owner, edge):
            await _refused(node.url, old)
            newer = token("alice", math.floor(r.revoked_before) + 1)
            async with connect(node.url, member="alice", token=newer) as again:
                await asyncio.wait_for(again.join(g), TIMEOUT)
    finally:
        await watch.stop()
    # a node started after the disconnect refuses them too (it read the revocations)
    later.start()
    await asyncio.to_thread(cluster.wait_ready, [owner, edge, later])
    await _refused(later.url, old)


async def _until_closed(c: Client) -> None:
    while c.state is not ConnectionState.CLOSED:
        await asyncio.sleep(0.05)
