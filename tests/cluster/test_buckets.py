"""Shared KV buckets made by nodes that start together (notify/storage/natsloop.py
`key_value`).

CI run A on 009345e failed two of three notify nodes at start-up: their read of the
revocations bucket ended in `BadRequestError` (a create refused: the bucket was being made,
or already made, by the third node). That run's timing did not come back here (22 starts of
the three nodes, idle and under load, all passed), so the refused create is also given to
`key_value` directly by a JetStream that refuses it; and six clients on the three servers of
a real cluster make the same buckets at once, which must all get them.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("nats", reason="the cluster extra (nats-py) is not installed")

import nats
from nats.js.api import KeyValueConfig
from nats.js.errors import BadRequestError, BucketNotFoundError

from notify.storage.natsloop import key_value
from tests.cluster.conftest import NatsCluster

MAKERS = 6  # two clients on each server
BUCKETS = 4


async def made(js: nats.js.JetStreamContext, config: KeyValueConfig) -> str:
    """As a node's start-up does (JetStreamLog._again): asked again while not ready, for a
    bounded time. A bucket just made can still be unknown to the server that answers
    (`NotFoundError` from its status): that is not ready yet too."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while True:
        try:
            kv = await key_value(js, config)
            return (await kv.status()).bucket
        except (TimeoutError, nats.errors.TimeoutError, nats.js.errors.NoStreamResponseError,
                nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError,
                nats.js.errors.NotFoundError):
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.1)


@pytest.mark.timeout(90)
async def test_nodes_that_make_the_same_buckets_at_once_all_get_them(
        nats_cluster: NatsCluster) -> None:
    clients = [await nats.connect(servers=[nats_cluster.urls[i % 3]]) for i in range(MAKERS)]
    try:
        configs = [KeyValueConfig(bucket=f"race_{b}", history=1, replicas=3)
                   for b in range(BUCKETS)]
        got = await asyncio.wait_for(asyncio.gather(*(
            made(c.jetstream(timeout=5), config) for config in configs for c in clients)), 60)
        assert sorted(set(got)) == [f"race_{b}" for b in range(BUCKETS)]
        assert len(got) == MAKERS * BUCKETS
    finally:
        for c in clients:
            await c.close()


class RefusingJetStream:
    """A JetStream whose bucket another node is making: not found, then the create refused
    (400), then found."""

    def __init__(self, found_after_refusal: bool) -> None:
        self.found_after_refusal = found_after_refusal
        self.calls: list[str] = []

    async def key_value(self, bucket: str) -> str:
        self.calls.append("lookup")
        if "create" in self.calls and self.found_after_refusal:
            return f"kv {bucket}"
        raise BucketNotFoundError

    async def create_key_value(self, config: KeyValueConfig) -> str:
        self.calls.append("create")
        raise BadRequestError(code=400, err_code=10058,
                              description="stream name already in use with a different "
                                          "configuration")


async def test_a_refused_create_looks_again_and_otherwise_says_not_ready() -> None:
    js = RefusingJetStream(found_after_refusal=True)
    config = KeyValueConfig(bucket="b", history=1)
    assert await key_value(js, config) == "kv b"  # type: ignore[arg-type]
    assert js.calls == ["lookup", "create", "lookup"]
    js = RefusingJetStream(found_after_refusal=False)
    with pytest.raises(TimeoutError, match="bucket b is not made yet"):  # the caller asks again
        await key_value(js, config)  # type: ignore[arg-type]
