"""The revocation watch (notify/cluster/revocations.py) on a real 3-node NATS JetStream cluster:
who notices when it dies (G13). Every end but `stop()` reaches `on_failure` (the node stops):
its subscription ended under it, the server's handler failing, a cancel from elsewhere. An
unreadable record is logged and skipped; `stop()` is quiet."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("nats", reason="the cluster extra (nats-py) is not installed")

import nats
import orjson
from nats.aio.client import Client

from notify.cluster.revocations import RevocationWatch
from notify.storage.jetstream import JetStreamLog
from tests.cluster.conftest import NatsCluster

BUCKET = "TEST_revocations"


class Node:
    """What the watch tells the node: revocations heard, and a failure (the node would stop)."""

    def __init__(self, *, fail_on: str | None = None) -> None:
        self.revoked: list[tuple[str, float]] = []
        self.failed = asyncio.get_running_loop().create_future()
        self.fail_on = fail_on

    def on_revoked(self, user: str, at: float) -> None:
        if user == self.fail_on:
            raise RuntimeError(f"cannot act on {user}")
        self.revoked.append((user, at))

    def on_failure(self, why: str) -> None:
        if not self.failed.done():
            self.failed.set_result(why)


@pytest.fixture
async def nc(nats_cluster: NatsCluster, tmp_path: Path) -> AsyncIterator[Client]:
    c = await nats.connect(servers=nats_cluster.urls)
    yield c
    await c.close()


async def watching(nc: Client, node: Node) -> RevocationWatch:
    w = RevocationWatch(nc, BUCKET, replicas=3, on_revoked=node.on_revoked,
                        on_failure=node.on_failure, idle_heartbeat=0.2)
    await w.start(20.0)
    return w


async def revoke(nc: Client, user: str, at: float) -> None:
    """Put `user`'s revocation, asked again while the bucket the watch just made has no stream
    leader yet ("no response from stream": CI run N, 2026-11-28), for up to 10 s, as the log
    asks again its own puts of the same value."""
    kv = await nc.jetstream().key_value(BUCKET)
    await JetStreamLog._again(lambda: kv.put(user, orjson.dumps({"user": user, "at": at})), 10)


async def heard(node: Node, n: int) -> None:
    async with asyncio.timeout(10):
        while len(node.revoked) < n:
            await asyncio.sleep(0.02)


@pytest.mark.timeout(90)
async def test_the_watch_hears_revocations_and_stop_is_no_failure(nc: Client) -> None:
    node = Node()
    w = await watching(nc, node)
    await revoke(nc, "alice", 10.0)
    kv = await nc.jetstream().key_value(BUCKET)
    await kv.put("mallory", b"not json")  # logged and skipped: the watch goes on
    await revoke(nc, "bob", 11.0)
    await heard(node, 2)
    assert node.revoked == [("alice", 10.0), ("bob", 11.0)]
    await w.stop()
    await asyncio.sleep(0.3)
    assert not node.failed.done()


@pytest.mark.timeout(90)
async def test_a_subscription_ended_under_the_watch_stops_the_node(nc: Client) -> None:
    node = Node()
    w = await watching(nc, node)
    assert w._sub is not None
    await w._sub.unsubscribe()  # as a lost consumer the client gives up on
    why = await asyncio.wait_for(node.failed, 10)
    assert "ended" in why
    await w.stop()


@pytest.mark.timeout(90)
async def test_a_handler_that_fails_stops_the_node(nc: Client) -> None:
    node = Node(fail_on="carol")
    w = await watching(nc, node)
    await revoke(nc, "carol", 12.0)
    why = await asyncio.wait_for(node.failed, 10)
    assert "cannot act on carol" in why
    await w.stop()


@pytest.mark.timeout(90)
async def test_a_watch_cancelled_by_anyone_but_stop_stops_the_node(nc: Client) -> None:
    node = Node()
    w = await watching(nc, node)
    assert w._task is not None
    w._task.task.cancel()
    why = await asyncio.wait_for(node.failed, 10)
    assert "was cancelled, not by its owner" in why
    await w.stop()
