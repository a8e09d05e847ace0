"""`Client.close()` leaves no socket open, whatever the client was doing when it came.

A WebSocket the SDK lets go of without closing stays registered with the event loop until the
loop closes; the garbage collector then reports it (an unclosed-transport `ResourceWarning`)
at some later test, which `filterwarnings = error` turns into that test's failure. These tests
watch the socket itself, at once: the server's end must see it closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from websockets.asyncio.server import Server, ServerConnection, serve

from client_sdk import Backoff, ClientOptions, ConnectionState
from tests.integration.conftest import TIMEOUT, MakeServer


class SilentOnReconnect:
    """A stub server: it welcomes the first connection and drops it at once; every later one it
    accepts, reads the `hello`, and never answers (a server that hangs mid-handshake)."""

    def __init__(self) -> None:
        self.connections: list[ServerConnection] = []
        self.hello_unanswered = asyncio.Event()
        self.server: Server | None = None

    async def handler(self, ws: ServerConnection) -> None:
        self.connections.append(ws)
        hello = orjson.loads(await ws.recv())
        if len(self.connections) == 1:
            await ws.send(orjson.dumps({"type": "welcome", "session": "s1",
                                        "member": hello["member"]}).decode())
            await ws.close()
            return
        self.hello_unanswered.set()
        await ws.wait_closed()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"ws://127.0.0.1:{next(iter(self.server.sockets)).getsockname()[1]}"


@pytest.fixture
async def silent_on_reconnect() -> AsyncIterator[SilentOnReconnect]:
    stub = SilentOnReconnect()
    async with serve(stub.handler, "127.0.0.1", 0) as server:
        stub.server = server
        yield stub


async def test_close_while_reconnecting_mid_handshake_closes_that_connection(
        silent_on_reconnect: SilentOnReconnect, sdk: Any) -> None:
    """close() cancels the reconnect while it waits for the `welcome`: the connection it had
    opened must be closed with it, not dropped."""
    stub = silent_on_reconnect
    fast = ClientOptions(backoff=Backoff(base=0.01, cap=0.01))
    client = await sdk(stub.url, "a", options=fast)
    await asyncio.wait_for(stub.hello_unanswered.wait(), TIMEOUT)
    assert client.state is ConnectionState.RECONNECTING
    await asyncio.wait_for(client.close(), TIMEOUT)
    await asyncio.wait_for(stub.connections[-1].wait_closed(), TIMEOUT)


async def test_close_cut_short_still_closes_the_socket(
        make_server: MakeServer, proxy_to: Any, sdk: Any) -> None:
    """A close whose handshake cannot finish (a stalled link) and that the application gives up
    on (its own timeout cancels `close()`): the socket is closed all the same, and the client
    is CLOSED."""
    srv = await make_server(suspect_timeout=30.0)
    proxy = await proxy_to(srv)
    client = await sdk(proxy.url, "a")
    ws = client._ws
    assert ws is not None
    proxy.stall()  # the close frame goes nowhere, and no answer comes back
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(client.close(), 0.2)
    assert ws.transport.is_closing()
    assert client.state is ConnectionState.CLOSED  # what waited is answered, the groups end
