"""Shared KV buckets made by nodes that start together (notify/storage/natsloop.py
`key_value`).

CI runs A (009345e) and D (614abc5) failed two of three notify nodes at start-up: their
read of the revocations bucket ended in `BadRequestError`. Run D's error said why: 10005, "no
suitable peers for placement, peer offline" (the nodes started right after their NATS cluster,
which did not see all its servers yet). That timing did not come back here (22 starts of the
three nodes, idle and under load, all passed), so the refusals are given to `key_value`
directly by a JetStream that refuses; and six clients on the three servers of a real cluster
make the same buckets at once, which must all get them (a smoke test of the race: it has not
failed here against the code before the fix either).
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("nats", reason="the cluster extra (nats-py) is not installed")

import nats
from nats.js.api import KeyValueConfig
from nats.js.errors import BadRequestError, BucketNotFoundError, ServiceUnavailableError

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


IN_USE = BadRequestError(code=400, err_code=10058,
                         description="stream name already in use with a different configuration")
NOT_FOUND = BucketNotFoundError()
UNSUPPORTED = BadRequestError(code=400, err_code=10074,
                              description="replicas > 1 not supported in non-clustered mode")


class RefusingJetStream:
    """A JetStream whose bucket another node may be making: the lookup fails with `lookup`
    (until a create was tried, if `found_after_refusal`), the create with `refusal`."""

    def __init__(self, *, lookup: Exception = NOT_FOUND,
                 refusal: Exception = IN_USE, found_after_refusal: bool = False) -> None:
        self.lookup, self.refusal = lookup, refusal
        self.found_after_refusal = found_after_refusal
        self.calls: list[str] = []

    async def key_value(self, bucket: str) -> str:
        self.calls.append("lookup")
        if "create" in self.calls and self.found_after_refusal:
            return f"kv {bucket}"
        raise self.lookup

    async def create_key_value(self, config: KeyValueConfig) -> str:
        self.calls.append("create")
        raise self.refusal


CONFIG = KeyValueConfig(bucket="b", history=1)


async def test_a_create_refused_because_another_made_it_looks_again() -> None:
    js = RefusingJetStream(found_after_refusal=True)
    assert await key_value(js, CONFIG) == "kv b"  # type: ignore[arg-type]
    assert js.calls == ["lookup", "create", "lookup"]


NO_PEERS = BadRequestError(code=400, err_code=10005,
                           description="no suitable peers for placement, peer offline")


@pytest.mark.parametrize("refusal", [IN_USE, NO_PEERS], ids=["in use", "no peers yet"])
async def test_a_create_refused_for_now_and_still_not_found_says_not_ready(
        refusal: Exception) -> None:
    """CI run D on 614abc5: two notify nodes started right after their NATS cluster were
    refused with 10005 (the cluster did not see all its servers yet) and exited."""
    js = RefusingJetStream(refusal=refusal)
    with pytest.raises(TimeoutError, match="bucket b is not made yet"):  # the caller asks again
        await key_value(js, CONFIG)  # type: ignore[arg-type]


async def test_any_other_refusal_is_raised_as_it_is() -> None:
    js = RefusingJetStream(refusal=UNSUPPORTED)
    with pytest.raises(BadRequestError, match="replicas > 1 not supported"):
        await key_value(js, CONFIG)  # type: ignore[arg-type]


async def test_a_lookup_that_fails_otherwise_does_not_make_the_bucket() -> None:
    js = RefusingJetStream(lookup=ServiceUnavailableError())
    with pytest.raises(ServiceUnavailableError):
        await key_value(js, CONFIG)  # type: ignore[arg-type]
    assert js.calls == ["lookup"]


def test_a_start_asks_again_all_but_the_refusals_known_to_last() -> None:
    """`not_yet`, the start-up retries' rule (leases, the revocation watch): a settling cluster
    answers with 500s too ("cluster can not handle request", a consumer's create failing on
    its peer), so only what is known to be final ends a start at once."""
    from nats.js.errors import APIError, ServerError

    from notify.storage.natsloop import not_yet

    assert not_yet(TimeoutError()) and not_yet(nats.errors.NoRespondersError())
    assert not_yet(ServiceUnavailableError(code=503, err_code=10008))
    assert not_yet(ServerError(code=500, err_code=10009, description="cluster can not handle"))
    assert not_yet(ServerError(code=500, err_code=10012, description="consumer create"))
    assert not_yet(BucketNotFoundError(code=404, err_code=10059))
    assert not_yet(APIError(code=None, err_code=None))  # an answer without a code
    assert not not_yet(BadRequestError(code=400, err_code=10065, description="overlap"))
    assert not not_yet(ServerError(code=500, err_code=10074, description="replicas > 1"))
    assert not not_yet(ServerError(code=500, err_code=10052, description="invalid config"))
    for over_a_limit in (10002, 10027, 10028, 10047, 10113, 10122):
        assert not not_yet(BadRequestError(code=400, err_code=over_a_limit))
    # final-sounding, but answered for a while at start (nats-server 2874), or until the
    # ephemeral consumers of a node's previous life expire
    assert not_yet(ServiceUnavailableError(code=503, err_code=10039, description="JS not enabled"))
    assert not_yet(BadRequestError(code=400, err_code=10026, description="max consumers"))
    for client_side in (nats.errors.ConnectionClosedError(), nats.errors.AuthorizationError(),
                        nats.errors.BadSubjectError(), nats.errors.MaxPayloadError()):
        assert not not_yet(client_side)
    assert not_yet(nats.errors.TimeoutError()) and not_yet(nats.errors.NoServersError())
    assert not not_yet(ValueError("bucket has max_age 3, leases need 4"))
