"""A userspace TCP proxy that injects link faults (no root, no `tc`): seed 004's Pumba `netem`.

One `LinkProxy` listens on 127.0.0.1 and forwards every accepted connection to its upstream.
Each direction of each connection is a reader task and a writer task joined by a queue of
(release time, bytes): the reader stamps a chunk when it arrives, the writer sends it at its
release time. So faults act on the bytes in flight without serialising them (a 10 ms delay adds
10 ms to every chunk, not 10 ms per chunk), and TCP's in-order stream is kept.

Faults (set and cleared at run time, on every connection at once):

- `delay(ms, jitter_ms)`: each chunk is released `ms ± U(jitter)` after it arrived, never
  before the chunk ahead of it (a stream does not reorder: jitter delays, it cannot overtake).
- `loss(percent, rto_ms)`: TCP never hands its reader a hole, so a lost segment shows up as a
  retransmission: each chunk is "lost" with that probability and released one retransmission
  timeout later (`rto_ms`, default 200 ms, doubling while it is lost again), holding back
  everything behind it. `lost_chunks` counts the chunks lost at least once, `lost` every loss.
- `slow(bytes_per_s)`: a token bucket per direction; chunks wait for their bytes.
- `cut()`: every current connection is aborted (both ends see a reset) and new ones are refused
  until `uncut()` — a link that is down, not one that blips.
- `stall()` / `unstall()`: bytes stop moving, connections stay open (what only heartbeats see).

Counters (`chunks`, `lost`, `bytes`, `accepted`, `refused`) let tests measure what was done.
`close()` stops everything the proxy started.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from notify.server.listener import stop_accepting


@dataclass
class Faults:
    delay_s: float = 0.0
    jitter_s: float = 0.0
    #: which directions the delay holds: `up` the bytes from the accepted side to upstream,
    #: `down` the bytes back (both by default)
    delay_up: bool = True
    delay_down: bool = True
    loss: float = 0.0  # probability per chunk
    rto_s: float = 0.2
    bytes_per_s: float | None = None
    stalled: bool = False
    cut: bool = False


@dataclass
class Counters:
    accepted: int = 0
    refused: int = 0
    chunks: int = 0
    lost: int = 0  # retransmissions (a chunk can be lost more than once)
    lost_chunks: int = 0  # chunks lost at least once
    bytes: int = 0
    cuts: int = 0
    delays: list[float] = field(default_factory=list)  # sampled added delay per chunk (s)


class LinkProxy:
    def __init__(self, upstream_port: int, *, name: str = "link", upstream_host: str = "127.0.0.1",
                 rng: random.Random | None = None, max_queued_bytes: int = 256 << 10,
                 sock_buf: int | None = 128 << 10) -> None:
        self.name = name
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.faults = Faults()
        self.counters = Counters()
        self._rng = rng or random.Random()
        self._max_queued = max_queued_bytes
        self._sock_buf = sock_buf
        #: local ports of the proxy's own upstream connections: a server behind it sees its
        #: peers at these ports (`notify_chaos.routes` checks the NATS routes against them)
        self.upstream_local_ports: set[int] = set()
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self, port: int = 0) -> LinkProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def close(self) -> None:
        if self._server is not None:
            await stop_accepting(self._server)  # no connection accepted as it closes is leaked
        self._abort_all()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2):
                    await self._server.wait_closed()

    # -- faults ----------------------------------------------------------------------------------

    def delay(self, ms: float, jitter_ms: float = 0.0, *, up: bool = True,
              down: bool = True) -> None:
        """Hold every chunk `ms ± jitter_ms`; with `up` or `down` False, that direction is not
        delayed (`up`: from the side that connected to the proxy towards upstream)."""
        self.faults.delay_s, self.faults.jitter_s = ms / 1000, jitter_ms / 1000
        self.faults.delay_up, self.faults.delay_down = up, down

    def loss(self, percent: float, rto_ms: float = 200.0) -> None:
        self.faults.loss, self.faults.rto_s = percent / 100, rto_ms / 1000

    def slow(self, bytes_per_s: float | None) -> None:
        self.faults.bytes_per_s = bytes_per_s

    def cut(self) -> None:
        self.faults.cut = True
        self.counters.cuts += 1
        self._abort_all()

    def uncut(self) -> None:
        self.faults.cut = False

    def stall(self) -> None:
        self.faults.stalled = True
        self._flowing.clear()

    def unstall(self) -> None:
        self.faults.stalled = False
        self._flowing.set()

    def clear(self) -> None:
        """Every fault off (connections cut earlier stay closed)."""
        self.faults = Faults()
        self._flowing.set()

    def _abort_all(self) -> None:
        for c in list(self._conns):
            c.abort()
        self._conns.clear()

    # -- forwarding ------------------------------------------------------------------------------

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.faults.cut:
            self.counters.refused += 1
            writer.transport.abort()
            return
        try:
            async with asyncio.timeout(5):
                up_r, up_w = await self._connect_upstream()
        except (OSError, TimeoutError):
            self.counters.refused += 1
            writer.transport.abort()
            return
        if self.faults.cut:  # cut while connecting
            up_w.transport.abort()
            writer.transport.abort()
            return
        self.counters.accepted += 1
        with contextlib.suppress(TypeError, IndexError):
            self.upstream_local_ports.add(int(up_w.get_extra_info("sockname")[1]))
        self._bound_buffers(writer.get_extra_info("socket"))
        conn = _Conn(writer, up_w)
        self._conns.add(conn)
        for up, src, dst in ((True, reader, up_w), (False, up_r, writer)):
            q: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
            budget = _Budget(self._max_queued)
            self._spawn(self._read(src, q, budget, conn, up))
            self._spawn(self._write(dst, q, budget, conn))

    def _bound_buffers(self, sock: socket.socket | None) -> None:
        """Kernel socket buffers like a real path's (loopback's autotuning lets them grow to
        tens of MB, which would hide a receiver that stopped reading from the server)."""
        if sock is not None and self._sock_buf:
            for opt in (socket.SO_SNDBUF, socket.SO_RCVBUF):
                sock.setsockopt(socket.SOL_SOCKET, opt, self._sock_buf)

    async def _connect_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._bound_buffers(sock)  # before connecting: the window is set at the handshake
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, self.upstream)
        except BaseException:
            sock.close()
            raise
        return await asyncio.open_connection(sock=sock)

    async def _read(self, src: asyncio.StreamReader, q: asyncio.Queue[tuple[float, bytes] | None],
                    budget: _Budget, conn: _Conn, up: bool = True) -> None:
        last_release = 0.0
        try:
            while data := await src.read(65536):
                await budget.take(len(data))
                f = self.faults
                now = time.monotonic()
                release = now
                if (f.delay_s or f.jitter_s) and (f.delay_up if up else f.delay_down):
                    release += max(0.0, f.delay_s + self._rng.uniform(-f.jitter_s, f.jitter_s))
                if f.loss and self._rng.random() < f.loss:
                    self.counters.lost_chunks += 1
                    rto = f.rto_s
                    self.counters.lost += 1
                    release += rto
                    rto = min(rto * 2, 60.0)
                    while self._rng.random() < f.loss:
                        self.counters.lost += 1
                        release += rto
                        rto = min(rto * 2, 60.0)
                release = max(release, last_release)  # a byte stream never overtakes itself
                last_release = release
                self.counters.chunks += 1
                if len(self.counters.delays) < 100_000:
                    self.counters.delays.append(release - now)
                q.put_nowait((release, data))
        except (ConnectionError, OSError):
            pass
        finally:
            q.put_nowait(None)

    async def _write(self, dst: asyncio.StreamWriter,
                     q: asyncio.Queue[tuple[float, bytes] | None], budget: _Budget,
                     conn: _Conn) -> None:
        tokens, refill_at = 0.0, time.monotonic()
        try:
            while (item := await q.get()) is not None:
                release, data = item
                wait = release - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self._flowing.wait()
                rate = self.faults.bytes_per_s
                if rate:
                    now = time.monotonic()
                    tokens = min(rate, tokens + (now - refill_at) * rate)  # 1 s burst at most
                    refill_at = now
                    tokens -= len(data)
                    if tokens < 0:
                        await asyncio.sleep(-tokens / rate)
                if conn.closed:
                    return
                dst.write(data)
                self.counters.bytes += len(data)
                budget.give(len(data))
                await dst.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            conn.abort()
            self._conns.discard(conn)


class _Budget:
    """Bytes a direction may hold in its queue, like a socket buffer: past it the proxy stops
    reading, so a receiver that does not read pushes back on the sender (a proxy that buffered
    without bound would hide a slow consumer from the server)."""

    def __init__(self, limit: int) -> None:
        self.free = limit
        self._room = asyncio.Event()
        self._room.set()

    async def take(self, n: int) -> None:
        while self.free <= 0:
            self._room.clear()
            await self._room.wait()
        self.free -= n

    def give(self, n: int) -> None:
        self.free += n
        if self.free > 0:
            self._room.set()


class _Conn:
    def __init__(self, a: asyncio.StreamWriter, b: asyncio.StreamWriter) -> None:
        self.a, self.b, self.closed = a, b, False

    def abort(self) -> None:
        if not self.closed:
            self.closed = True
            self.a.transport.abort()
            self.b.transport.abort()
