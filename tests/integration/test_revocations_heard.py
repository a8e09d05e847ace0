"""A revocation heard from the placement (a cluster's watch of the revocations bucket: every
node hears every disconnect, its own too, and hears them all again when its watch starts) ends
the user's sessions once: hearing it again, or hearing an older one, never ends the sessions of
a later login (`NotifyServer.revoked`)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from client_sdk import ConnectionState, Disconnected
from notify.server.app import NotifyServer
from tests.integration.conftest import TIMEOUT


async def _closed(c: Any) -> None:
    while c.state is not ConnectionState.CLOSED:
        await asyncio.sleep(0.02)


@pytest.mark.timeout(60)
async def test_a_revocation_heard_again_ends_no_later_session(
        server: NotifyServer, sdk: Any) -> None:
    first = await sdk(server.url, "alice")
    await first.join("doc")
    at = time.time()
    server.revoked("alice", at)
    await asyncio.wait_for(_closed(first), TIMEOUT)
    assert isinstance(first.failure, Disconnected)
    again = await sdk(server.url, "alice")  # development mode: nothing refuses it
    bob = await sdk(server.url, "bob")
    g = await again.join("doc")
    await bob.join("doc")
    server.revoked("alice", at)  # the same one, heard again
    server.revoked("alice", at - 10)  # an older one
    await asyncio.sleep(0.3)
    assert again.state is ConnectionState.CONNECTED
    assert (await asyncio.wait_for(g.publish("still here"), TIMEOUT)).offset >= 1
    server.revoked("alice", at + 1)  # a later one ends it
    await asyncio.wait_for(_closed(again), TIMEOUT)
    assert bob.state is ConnectionState.CONNECTED
