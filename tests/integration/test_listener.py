"""A listener closed while connections it accepted are still being built leaks nothing
(notify/server/listener.py). With a plain `Server.close()`, the connection accepted in the turn
before the close is left half built, its socket open, on CPython 3.11 (two turns after the
connect, here): the garbage collector reports it later, in whatever test runs then."""

from __future__ import annotations

import asyncio
import gc
import socket
import warnings

import pytest

from notify.server.listener import stop_accepting


async def _accept_then_close(turns: int) -> None:
    async def handler(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.transport.abort()

    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    with socket.create_connection(("127.0.0.1", port)):
        for _ in range(turns):  # the connect lands at every point of the accept's two turns
            await asyncio.sleep(0)
        await stop_accepting(server)
        await server.wait_closed()
        for _ in range(5):
            await asyncio.sleep(0)


@pytest.mark.parametrize("turns", range(5))
def test_a_connection_accepted_as_the_listener_closes_is_not_leaked(turns: int) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(_accept_then_close(turns))
        finally:
            loop.close()
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
