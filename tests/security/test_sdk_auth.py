"""The SDK against a server that checks tokens: every documented refusal surfaces as
`ServerRefused` with its code, and a refreshed token keeps the connection past the first one's
expiry."""

from __future__ import annotations

import asyncio

import pytest

from client_sdk import ConnectionState, Message, ServerRefused, connect
from tests.integration.conftest import TIMEOUT
from tests.security.conftest import OTHER_SECRET, Clock, MakeAuthServer, token


@pytest.mark.parametrize(("tok", "member", "code"), [
    (lambda: token("alice", key=OTHER_SECRET), "alice", "token_invalid"),
    (lambda: token("alice", ttl=-60), "alice", "token_expired"),
    (lambda: token("alice"), "mallory", "member_mismatch"),
    (lambda: "not.a.token", "alice", "token_invalid"),
])
async def test_connect_refused_with_its_code(make_auth_server: MakeAuthServer, tok: object,
                                             member: str, code: str) -> None:
    srv = await make_auth_server()
    with pytest.raises(ServerRefused) as refused:
        await connect(srv.url, member=member, token=tok())  # type: ignore[operator]
    assert refused.value.code == code


async def test_refreshed_token_outlives_the_first(make_auth_server: MakeAuthServer,
                                                  clock: Clock) -> None:
    srv = await make_auth_server()
    async with connect(srv.url, member="alice", token=token("alice", ttl=30)) as client:
        group = await client.join("doc-1")
        await client.refresh_token(token("alice", ttl=3600))
        await asyncio.sleep(0.1)
        clock.advance(60)  # past the first token's exp
        await asyncio.sleep(0.3)  # the server ticks: it would close with 4005 now
        await group.publish("still here")
        e = await group.next_event(TIMEOUT)
        while not isinstance(e, Message):
            e = await group.next_event(TIMEOUT)
        assert e.payload == "still here"
        assert client.state is ConnectionState.CONNECTED and client.errors == []
