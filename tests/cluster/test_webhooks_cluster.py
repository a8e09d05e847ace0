"""Webhooks in cluster mode (issue 31, "every node serves it"), on two `notify serve --cluster`
processes over a real 3-node NATS JetStream cluster, posting to a real aiohttp receiver in the
test process that verifies every signature with the `standardwebhooks` library.

Members on both nodes join a group that node A owns (A also delivers the endpoint), publish and
leave: the receiver gets the arrivals, departures, occupancy and messages, in order. Then the
receiver goes down, members come and go again (their events wait in the outbox on JetStream),
and A is SIGKILLed right after the last of them, with no grace for its writer; node B takes the
shards over (the group's and the endpoint's), catches the group up from the log and the stored
cursor, and delivers once the receiver is back: every event arrives, a duplicate carries the
same `webhook-id` (and is the same event), the first arrivals keep the group's order, and more
members at B after the failover are announced too."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("nats", reason="the cluster extra (nats-py) is not installed")

from client_sdk import Client
from notify.cluster.shards import shard_of
from notify.webhooks.jsoutbox import JetStreamOutbox
from notify.webhooks.service import endpoint_shard
from notify_chaos.natsrun import free_ports
from tests.cluster.conftest import NatsCluster
from tests.cluster.nodes import NotifyCluster, NotifyNode, nodes_running
from tests.cluster.test_cluster import TIMEOUT, client
from tests.webhooks.conftest import Receiver, write_config

pytestmark = pytest.mark.timeout(180)

Seen = tuple[str, Any]  # (type, the user, or a message's offset)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.up()
    yield r
    await r.down()


@pytest.fixture
def hooked_cluster(nats_cluster: NatsCluster, receiver: Receiver,
                   tmp_path: Path) -> Iterator[NotifyCluster]:
    cfg = write_config(tmp_path / "hooks.toml", receiver.url)
    ports = free_ports(2)
    nodes = [NotifyNode(f"n{i + 1}", ports[i], nats_cluster.urls, tmp_path / "nodes",
                        ("--config", str(cfg), "--suspect-timeout", "30"))
             for i in range(2)]
    yield from nodes_running(NotifyCluster(nodes))


@pytest.fixture
async def made() -> AsyncIterator[list[Client]]:
    out: list[Client] = []
    yield out
    for c in out:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(c.close(), 10)


def seen(kind: str, data: dict[str, Any]) -> Seen:
    return kind, data.get("user", data.get("offset"))


def arrivals(r: Receiver, group: str) -> list[Seen]:
    """The group's events in order of first arrival (`unique` also checks that a duplicate
    id is the same event)."""
    return [seen(k, d) for k, d in r.unique().values() if d["group"] == group]


def comings(user: str) -> list[Seen]:
    return [("member.arrived", user), ("user.arrived", user)]


def goings(user: str) -> list[Seen]:
    return [("member.left", user), ("user.left", user)]


async def come_and_go(made: list[Client], group: str, first: tuple[str, str],
                      second: tuple[str, str], offsets: tuple[int, int],
                      then: Callable[[], None] | None = None) -> list[Seen]:
    """`first` then `second` (member, node url) join, each publishes once, both leave (and
    `then` runs at once): the events this makes."""
    (u1, url1), (u2, url2) = first, second
    c1 = await client(made, url1, u1)
    c2 = await client(made, url2, u2)
    g1 = await asyncio.wait_for(c1.join(group), TIMEOUT)
    g2 = await asyncio.wait_for(c2.join(group), TIMEOUT)
    got = [(await asyncio.wait_for(g.publish({"by": g is g1}), TIMEOUT)).offset
           for g in (g1, g2)]
    assert tuple(got) == offsets
    await asyncio.wait_for(g1.leave(), TIMEOUT)
    await asyncio.wait_for(g2.leave(), TIMEOUT)
    if then is not None:
        then()
    for c in (c1, c2):
        made.remove(c)
        await asyncio.wait_for(c.close(), TIMEOUT)
    return [("group.occupied", None), *comings(u1), *comings(u2),
            *(("message", o) for o in offsets), *goings(u1), *goings(u2),
            ("group.vacated", None)]


async def until(pred: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


async def test_every_event_reaches_the_endpoint_across_an_owner_sigkill(
        hooked_cluster: NotifyCluster, nats_cluster: NatsCluster, receiver: Receiver,
        made: list[Client]) -> None:
    cluster = hooked_cluster
    # A: the node that delivers the endpoint; the group: one that A owns too
    deliverer = endpoint_shard(receiver.url)
    a = next(n for n in cluster.nodes if deliverer in n.held())
    b = next(n for n in cluster.nodes if n is not a)
    group = next(f"chat:{i}" for i in range(10_000)
                 if shard_of(f"chat:{i}") in a.held())
    outbox = await asyncio.to_thread(JetStreamOutbox, nats_cluster.urls, {},
                                     stream="NOTIFY_WEBHOOKS")
    try:
        # 1. all up: members at A and at B (routed to A) come and go
        expected = await come_and_go(made, group, ("ann", a.url), ("ben", b.url), (1, 2))
        await receiver.until(lambda: arrivals(receiver, group) == expected, timeout=30)

        # 2. the receiver down: more come and go, and their events wait in the outbox
        await receiver.down()
        # 3. A is SIGKILLed the moment the last leave is answered (its writer may or may
        # not have written the last events: either way they must come, from its rows or
        # from B's catch-up)
        expected += await come_and_go(made, group, ("cat", b.url), ("dan", a.url), (3, 4),
                                      then=a.kill)
        assert len(await asyncio.to_thread(outbox.peek, receiver.url, 100)) >= 1
        await asyncio.to_thread(cluster.wait_owner, group, [b], 30.0)
        await until(lambda: deliverer in b.held(), "B holds the endpoint's shard")
        assert len(arrivals(receiver, group)) < len(expected)
        # 4. the receiver back: B delivers everything
        await receiver.up()
        await receiver.until(lambda: arrivals(receiver, group) == expected, timeout=40)

        # 5. the group at its new owner: its events go on
        expected += [("group.occupied", None), *comings("eve"), *goings("eve"),
                     ("group.vacated", None)]
        eve = await client(made, b.url, "eve")
        ge = await asyncio.wait_for(eve.join(group), TIMEOUT)
        await asyncio.wait_for(ge.leave(), TIMEOUT)
        await receiver.until(lambda: arrivals(receiver, group) == expected, timeout=30)
        assert not receiver.bad, receiver.bad  # every signature verified
        # the outbox empties: every row left once its 2xx came
        await until(lambda: outbox.peek(receiver.url, 1) == [], "the outbox empties", 15)
    finally:
        await asyncio.to_thread(outbox.close)
    ids = [i for i, _, _ in receiver.got]
    twice = [seen(k, d) for i, k, d in receiver.got if ids.count(i) > 1]
    caught = [line for line in b.tail().splitlines() if "webhooks_caught_up " in line]
    print(f"{len(ids)} POSTs, {len(set(ids))} events, "
          f"{len(ids) - len(set(ids))} duplicates (same webhook-id); B derived from the log: "
          f"{caught or 'nothing (A had written every event)'}; sent twice: {twice}")
    assert "webhooks_shards_caught_up" in b.tail()
