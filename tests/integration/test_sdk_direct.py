"""The SDK's connection hands frames to a callback as they are read (`DirectConnection`, issue
34) and never lets one overtake a frame already waiting for `recv()`; the client's reader then
takes what waits first, in order."""

from __future__ import annotations

import asyncio

from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from client_sdk.handshake import DirectConnection
from tests.integration.conftest import TIMEOUT


async def test_a_frame_never_overtakes_one_waiting_for_recv() -> None:
    go: asyncio.Queue[int] = asyncio.Queue()

    async def send_on_cue(ws: ServerConnection) -> None:
        n = 0
        while (count := await go.get()) > 0:
            for _ in range(count):
                await ws.send(f"f{n}")
                n += 1
        await ws.wait_closed()

    async with serve(send_on_cue, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}",
                           create_connection=DirectConnection) as ws:
            assert isinstance(ws, DirectConnection)
            got: list[bytes] = []
            await go.put(3)  # read while nobody takes them: they wait for recv()
            async with asyncio.timeout(TIMEOUT):
                while len(ws.recv_messages.frames) < 3:
                    await asyncio.sleep(0.01)
            ws.direct = got.append
            await go.put(2)  # these come behind the 3, not to `direct`
            async with asyncio.timeout(TIMEOUT):
                while len(ws.recv_messages.frames) < 5:
                    await asyncio.sleep(0.01)
            assert got == []
            assert [await ws.recv(decode=False) for _ in range(5)] == \
                [f"f{i}".encode() for i in range(5)]
            await go.put(2)  # nothing waits now: straight to `direct`, in order
            async with asyncio.timeout(TIMEOUT):
                while len(got) < 2:
                    await asyncio.sleep(0.01)
            assert [bytes(d) for d in got] == [b"f5", b"f6"]
            assert not ws.recv_messages.frames
            ws.direct = None
            await go.put(-1)
