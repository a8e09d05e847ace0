"""A fault-injecting TCP proxy between a client and the server, on 127.0.0.1.

`cut()` aborts every connection through it at once (both sides see a lost connection, as when a
phone changes cell); `stall()` stops moving bytes on the current connections without closing
them (a dead link only heartbeats can notice), until `unstall()`; `block()` makes it refuse new
connections until `unblock()`; `delay` holds each chunk for that many seconds (a slow link).
Everything it starts, `close()` stops (its listener without leaking a connection accepted as
it closes: notify/server/listener.py).
"""

from __future__ import annotations

import asyncio
import contextlib

from notify.server.listener import stop_accepting


class FaultyProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.delay = 0.0
        self.blocked = False
        self.accepted = 0
        self._flowing: list[asyncio.Event] = []  # one per connection pair: cleared = stalled
        self._server: asyncio.Server | None = None
        self._pairs: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = []
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def start(self) -> FaultyProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.blocked:
            writer.transport.abort()
            return
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.transport.abort()
            return
        self._pairs.append((writer, up_writer))
        flowing = asyncio.Event()
        flowing.set()
        self._flowing.append(flowing)
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.get_running_loop().create_task(self._pump(src, dst, flowing))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                    flowing: asyncio.Event) -> None:
        try:
            while data := await src.read(65536):
                await flowing.wait()
                if self.delay:
                    await asyncio.sleep(self.delay)
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            dst.transport.abort()

    def cut(self) -> None:
        for a, b in self._pairs:
            a.transport.abort()
            b.transport.abort()
        self._pairs.clear()
        self._flowing.clear()

    def stall(self) -> None:
        for f in self._flowing:
            f.clear()

    def unstall(self) -> None:
        for f in self._flowing:
            f.set()

    def block(self) -> None:
        self.blocked = True

    def unblock(self) -> None:
        self.blocked = False

    async def close(self) -> None:
        self.blocked = True  # what is still accepted is aborted by `_accept`
        self.cut()
        if self._server is not None:
            await stop_accepting(self._server)
            await self._server.wait_closed()
        for t in list(self._tasks):
            t.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._tasks, return_exceptions=True)
