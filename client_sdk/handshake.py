"""Opening a connection: the WebSocket handshake and `hello` → `welcome` (`handshake`), closing
one without leaving its socket open (`close_ws`), and the check of the URLs a client is given
(`server_urls`). The connection is a `DirectConnection`: websockets' own, which can hand each
frame to a callback as it is parsed instead of to `recv()` (see its docstring)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import orjson
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.frames import Frame as WsFrame
from websockets.frames import Opcode

from client_sdk.errors import ConnectError, ServerRefused
from client_sdk.options import ClientOptions
from client_sdk.protocol import Frame, hello_frame

__all__ = ["DirectConnection", "close_ws", "handshake", "server_urls"]


_DATA = (Opcode.TEXT, Opcode.BINARY, Opcode.CONT)


class DirectConnection(ClientConnection):
    """websockets' client connection, which hands each whole data frame to `direct` (when set)
    as soon as it is parsed, in the loop's read callback, instead of queuing it for `recv()`.

    Why (issue 34): with `recv()`, every frame costs a queue, a future and a wake-up of the
    reading task on the next turn of the loop. A subscriber process of `bench sdkfanout` at
    1,000 msg/s gets a frame per member per message, one at a time; that hop was about a
    quarter of its CPU per frame (about 7 of 26 µs in a bare websockets test), and its frames
    waited behind it.

    Order is kept: a frame goes to `direct` only when nothing waits for `recv()` (the welcome's
    followers, what came while `direct` was unset) and it is not part of a fragmented message;
    otherwise it is queued behind them, as websockets does, and `direct(None)` says that a
    message now waits for `recv()` (our server sends none in pieces, but a proxy may split
    one). `direct` is cleared by whoever set it before it raises (see `Client._read`): nothing
    is handed over after that."""

    direct: Callable[[bytes | bytearray | memoryview | None], None] | None = None

    def process_event(self, event: Any) -> None:
        direct = self.direct
        if direct is None or type(event) is not WsFrame or event.opcode not in _DATA:
            super().process_event(event)
            return
        if event.fin and event.opcode is not Opcode.CONT and not self.recv_messages.frames:
            direct(event.data)
            return
        super().process_event(event)
        direct(None)


async def handshake(url: str, member: str, *, options: ClientOptions,
                    token: str | None = None, resume_session: str | None = None,
                    hello: Frame | None = None) -> tuple[ClientConnection, dict[str, Any]]:
    """Open a WebSocket, say `hello` (the frame given, from `ClientProtocol.hello()`, or one
    made of `member`, `token` and `resume_session`), return it with the `welcome`. Raises
    `ConnectError` if the server cannot be reached or does not answer, `ServerRefused` if it
    refuses."""
    if hello is None:
        hello = hello_frame(member, token=token, resume_session=resume_session)
    o = options
    try:
        # (asyncio.timeout, never wait_for: Python 3.11's wait_for returns the result when a
        # cancel lands as the awaited ends, and the caller's cancel is lost: pyproject's TID251)
        async with asyncio.timeout(o.connect_timeout):
            ws = await ws_connect(
                url, max_size=None, compression=None, open_timeout=None,
                create_connection=DirectConnection,
                ping_interval=o.heartbeat_interval,
                ping_timeout=max(o.heartbeat_timeout - o.heartbeat_interval, 0.05),
                # a stalled link cannot carry the closing handshake: do not wait longer for
                # it than for a pong
                close_timeout=min(o.heartbeat_timeout, 5.0))
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as e:
        raise ConnectError(f"cannot connect to {url}: {e}") from e
    try:
        await ws.send(orjson.dumps(hello), text=True)
        async with asyncio.timeout(o.connect_timeout):
            welcome = orjson.loads(await ws.recv())
    except (ConnectionClosed, TimeoutError, OSError) as e:
        await close_ws(ws)
        raise ConnectError(f"no welcome from {url}: {e}") from e
    except BaseException:
        # cancelled (`close()` while reconnecting) or a garbled welcome: nobody else holds
        # `ws`, so close it here, or it stays open until the garbage collector complains
        ws.transport.abort()
        raise
    if welcome.get("type") != "welcome":
        await close_ws(ws)
        raise ServerRefused(str(welcome.get("code", "?")), str(welcome.get("message", welcome)))
    return ws, welcome


async def close_ws(ws: ClientConnection, code: int = 1000, reason: str = "") -> None:
    """Close `ws` with the closing handshake if it completes within 5 s, and leave no socket
    open in any case: a close cut short (a stalled peer, the bound, a cancelled `close()`)
    aborts the transport instead of leaving it registered with the loop, unclosed."""
    try:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(5):
                await ws.close(code, reason)
    finally:
        ws.transport.abort()  # nothing left to do once the handshake has closed it


def server_urls(url: str | Sequence[str]) -> tuple[str, ...]:
    """`url` as a non-empty tuple of ws:// or wss:// URLs; `ValueError` otherwise, at once,
    rather than a `ConnectError` for a mistake no retry can mend."""
    urls = (url,) if isinstance(url, str) else tuple(url)
    if not urls:
        raise ValueError("no server URL: give one ws:// or wss:// URL, or a non-empty list of "
                         "them (the nodes of one cluster)")
    for u in urls:
        if not isinstance(u, str):
            raise ValueError(f"server URLs are strings, not {u!r}")
        try:
            parts = urlsplit(u)
            ok = parts.scheme in ("ws", "wss") and bool(parts.hostname)
            parts.port  # noqa: B018 -- raises ValueError on a port that is not a number
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(f"{u!r} is not a WebSocket URL (ws://host:port or wss://host:port)")
    return urls
