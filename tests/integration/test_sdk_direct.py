"""The SDK's connection hands frames to a callback as they are read (`DirectConnection`, issue
34) and never lets one overtake a frame already waiting for `recv()`; the client's reader then
takes what waits first, in order."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from client_sdk.handshake import DirectConnection
from tests.integration.conftest import TIMEOUT


@asynccontextmanager
async def direct_client(
        handler: Callable[[ServerConnection], Awaitable[None]]) -> AsyncIterator[DirectConnection]:
    """A `DirectConnection` to a bare websockets server that runs `handler`."""
    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}", create_connection=DirectConnection) as ws:
            assert isinstance(ws, DirectConnection)
            yield ws


async def test_a_frame_never_overtakes_one_waiting_for_recv() -> None:
    go: asyncio.Queue[int] = asyncio.Queue()

    async def send_on_cue(ws: ServerConnection) -> None:
        n = 0
        while (count := await go.get()) > 0:
            for _ in range(count):
                await ws.send(f"f{n}")
                n += 1
        await ws.wait_closed()

    async with direct_client(send_on_cue) as ws:
        got: list[bytes | bytearray | memoryview | None] = []
        await go.put(3)  # read while nobody takes them: they wait for recv()
        async with asyncio.timeout(TIMEOUT):
            while len(ws.recv_messages.frames) < 3:
                await asyncio.sleep(0.01)
        ws.direct = got.append
        await go.put(2)  # these come behind the 3, not to `direct`
        async with asyncio.timeout(TIMEOUT):
            while len(ws.recv_messages.frames) < 5:
                await asyncio.sleep(0.01)
        assert got == [None, None]  # only "a message waits for recv()"
        got.clear()
        assert [await ws.recv(decode=False) for _ in range(5)] == \
            [f"f{i}".encode() for i in range(5)]
        await go.put(2)  # nothing waits now: straight to `direct`, in order
        async with asyncio.timeout(TIMEOUT):
            while len(got) < 2:
                await asyncio.sleep(0.01)
        assert [bytes(d) for d in got if d is not None] == [b"f5", b"f6"]
        assert not ws.recv_messages.frames
        ws.direct = None
        await go.put(-1)


async def test_a_message_in_pieces_waits_for_recv_and_the_reader_is_told() -> None:
    """Our server sends no message in pieces, but a proxy may split one: it cannot go to
    `direct` (websockets assembles it), so it waits for `recv()`, and so does what follows it,
    and `direct(None)` tells the reader to go and take them."""
    go = asyncio.Event()

    async def send_in_pieces(ws: ServerConnection) -> None:
        await go.wait()
        await ws.send(iter(["f", "0"]))  # one message, two WebSocket frames
        await ws.send("f1")
        await ws.wait_closed()

    async with direct_client(send_in_pieces) as ws:
        got: list[bytes | bytearray | memoryview | None] = []
        ws.direct = got.append
        go.set()
        async with asyncio.timeout(TIMEOUT):
            assert [await ws.recv(decode=False) for _ in range(2)] == [b"f0", b"f1"]
        # each of their frames (the pieces, websockets' empty last one, f1) only said
        # "a message waits for recv()"
        assert len(got) >= 3 and all(d is None for d in got), got
