"""websockets' server connection, handing each frame to the server as it is parsed.

`async for data in ws` costs every received message a place in websockets' queue, a future, and
a wake-up of the connection's handler task on a later turn of the loop. The atomic path reads an
ACK from every member for every run of messages, and a publisher's frames wait behind that hop
too (issue 34). The client SDK does the same for the same reason (client_sdk/handshake.py).

Order is kept: a message goes to `direct` only when nothing waits in websockets' queue. One that
cannot go (fragmented, or a text message that is not plain ASCII, whose UTF-8 websockets checks
when `recv()` decodes it: RFC 6455 fails the connection for bad UTF-8 in a text message) is
queued as websockets would, and `direct(None)` tells the reader to take it with `recv()` (as it
does when the connection is lost: so an idle connection's reader waits on one future). Whoever
set `direct` clears it before it raises, and before it stops reading (a group's load holds the
connection): what comes meanwhile waits in the queue, whose flow control stops reading the
socket.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.frames import Frame, Opcode

__all__ = ["DirectServerConnection"]

_DATA = (Opcode.TEXT, Opcode.BINARY, Opcode.CONT)


class DirectServerConnection(ServerConnection):
    #: takes each whole message's bytes, or None: a message waits for `recv()`
    direct: Callable[[bytes | None], None] | None = None

    def process_event(self, event: Any) -> None:
        direct = self.direct
        if direct is None or type(event) is not Frame or event.opcode not in _DATA:
            super().process_event(event)
            return
        if event.fin and not self.recv_messages.frames:
            data = bytes(event.data)  # (a client's frames are unmasked into bytes: no copy)
            if event.opcode is Opcode.BINARY or (event.opcode is Opcode.TEXT and data.isascii()):
                direct(data)
                return
        super().process_event(event)
        direct(None)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        direct = self.direct
        if direct is not None:  # the reader waits on `direct` alone: `recv()` says it is lost
            direct(None)
