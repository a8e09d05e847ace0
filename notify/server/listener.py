"""Closing a listening socket without leaking the connection accepted just before.

asyncio (CPython 3.11) accepts a connection in one loop turn and builds its transport in the
next. If the server was closed in between, `Server._attach` fails its assertion while the
transport is half built: the accepted socket is never closed, and the garbage collector reports
an unclosed transport much later (a `ResourceWarning`, which the test suite treats as an error,
seen as a flake in whichever test was running). So a listener stops accepting first, lets the
connections already accepted be built (they are then served or refused like any other), and
only then closes.
"""

from __future__ import annotations

import asyncio

#: loop turns after which the connections accepted before `stop_accepting` are built
_TURNS = 3


async def stop_accepting(server: asyncio.Server) -> None:
    """Take no more connections on `server`, and close it once those already accepted exist."""
    loop = asyncio.get_running_loop()
    for sock in server.sockets:
        loop.remove_reader(sock.fileno())
    for _ in range(_TURNS):
        await asyncio.sleep(0)
    server.close()


__all__ = ["stop_accepting"]
