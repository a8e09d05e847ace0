"""WebSocket heartbeats for every connection, from the server's timer (issue 34).

`websockets` pings each connection from a task of its own (`keepalive()`): a task, its frame, a
sleep's timer handle and a `wait_for` per ping, about 2 KiB of every idle connection's memory
and a task wake-up per connection per interval. `Heartbeats` keeps the same schedule for all of
them in one heap that the server's timer task walks (`tick`): a connection is pinged `interval`
after its previous ping (or after it opened), or when a pong later than that is seen, and
failed as `keepalive()` fails it
(close 1011 "keepalive ping timeout", the TCP connection dropped after `close_timeout` if the
peer does not close) when a ping is not answered within `timeout`. The hub hears a lost
connection, as before.

A ping is written as `websockets` writes it (its sans-I/O protocol, then the transport), and its
pong is recognised by `websockets` itself: the ping waits in the connection's `pending_pings`,
which the connection clears when the pong arrives, as for its own pings. Nothing waits for the
socket to drain: a ping is 6 bytes, and a socket that backed up is bounded by its outbox (G11).
A closed connection leaves the heap at its next due time (within `interval`, or `timeout`).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
import struct

import structlog
from websockets.asyncio.server import ServerConnection
from websockets.frames import CloseCode
from websockets.protocol import OPEN

log = structlog.get_logger("notify.server")


class Heartbeats:
    """Ping schedule of every open connection; `tick()` sends what is due."""

    __slots__ = ("_due", "_seq", "interval", "timeout")

    def __init__(self, interval: float, timeout: float) -> None:
        #: seconds from a connection's answered ping (or its opening) to its next ping
        self.interval = interval
        #: seconds a ping may wait for its pong before the connection is failed
        self.timeout = timeout
        #: (when, tie-break, connection, the ping awaiting its pong or None, when it was sent)
        self._due: list[tuple[float, int, ServerConnection, bytes | None, float]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._due)

    def add(self, ws: ServerConnection, now: float) -> None:
        """Start pinging `ws` (open) `interval` from `now` (the loop's time). A connection that
        is no longer open leaves at its next due time."""
        heapq.heappush(self._due, (now + self.interval, next(self._seq), ws, None, 0.0))

    def tick(self, now: float) -> None:
        """Ping, check or fail every connection due by `now` (the loop's time)."""
        due = self._due
        while due and due[0][0] <= now:
            _, _, ws, ping, sent = heapq.heappop(due)
            if ws.protocol.state is not OPEN or ws.transport.is_closing():
                continue  # closing or closed: forgotten
            try:
                if ping is not None:
                    if ping in ws.pending_pings:  # not answered yet
                        if now - sent >= self.timeout:
                            self._fail(ws)
                            continue
                        heapq.heappush(due, (sent + self.timeout, next(self._seq), ws, ping,
                                             sent))
                        continue
                    if now < sent + self.interval:  # answered (checked at a timeout shorter
                        # than the interval): the next ping an interval after this one
                        heapq.heappush(due, (sent + self.interval, next(self._seq), ws, None,
                                             0.0))
                        continue
                ping = self._ping(ws, now)
            except Exception:  # a bug of ours: drop this link, the others go on (G13)
                log.exception("heartbeat_failed")
                ws.transport.abort()  # the hub hears a lost connection; the member resumes
                continue
            heapq.heappush(due, (now + min(self.interval, self.timeout), next(self._seq), ws,
                                 ping, now))

    @staticmethod
    def _ping(ws: ServerConnection, now: float) -> bytes:
        """A ping with a payload of its own, as `ServerConnection.ping()` sends one."""
        data = struct.pack("!I", random.getrandbits(32))
        while data in ws.pending_pings:
            data = struct.pack("!I", random.getrandbits(32))
        ws.pending_pings[data] = (ws.loop.create_future(), now)
        ws.protocol.send_ping(data)
        ws.send_data()
        return data

    @staticmethod
    def _fail(ws: ServerConnection) -> None:
        """As `keepalive()` does on a ping timeout: fail the connection with 1011, then drop the
        TCP connection if the peer has not closed it within `close_timeout`."""
        ws.protocol.fail(CloseCode.INTERNAL_ERROR, "keepalive ping timeout")
        ws.send_data()
        transport = ws.transport
        if ws.close_timeout is None:
            transport.abort()
        else:
            ws.loop.call_later(ws.close_timeout, _abort_unless_closed, transport)


def _abort_unless_closed(transport: asyncio.Transport) -> None:
    if not transport.is_closing():
        transport.abort()


__all__ = ["Heartbeats"]
