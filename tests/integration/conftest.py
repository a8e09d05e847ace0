"""Fixtures for the integration suite: a real `NotifyServer` on 127.0.0.1, SDK clients, and a raw
WebSocket client that speaks the wire protocol (DESIGN §3) frame by frame.

The raw client is how a test plays a member that misbehaves on purpose: one that never ACKs,
never sends `flush_ok`, stops reading, or sends garbage. Every wait is bounded (`TIMEOUT`), and
every server, client and socket a test opens is closed by the fixtures, whatever the test did.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from client_sdk import (
    Backoff,
    Client,
    ClientOptions,
    Connection,
    Group,
    GroupEvent,
    Message,
    StateReceived,
)
from client_sdk import connect as sdk_connect
from notify.core import CoreConfig, Timeouts
from notify.core.config import Limits
from notify.runtime.placement import Placement
from notify.server.app import NotifyServer
from notify.storage.base import MessageLog

#: generous bound for anything that should happen "soon"; never a performance assertion
TIMEOUT = 10.0

Frame = dict[str, Any]
Pred = Callable[[Frame], bool]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.integration)


# -- servers ---------------------------------------------------------------------------------------

MakeServer = Callable[..., Awaitable[NotifyServer]]


@pytest.fixture
async def make_server() -> AsyncIterator[MakeServer]:
    """`await make_server(suspect_timeout=..., limits=Limits(...))` → a started server
    (`store=`, `placement=`: its ports, else SQLite in memory and one node)."""
    servers: list[NotifyServer] = []

    async def make(*, limits: Limits | None = None, store: MessageLog | None = None,
                   placement: Placement | None = None, **timeouts: float) -> NotifyServer:
        t = {"suspect_timeout": 0.4, "flush_timeout": 1.0, **timeouts}
        srv = NotifyServer(CoreConfig(Timeouts(**t), limits or Limits()), port=0, store=store,
                           placement=placement)
        await srv.start()
        servers.append(srv)
        return srv

    yield make
    for srv in reversed(servers):
        await asyncio.wait_for(srv.stop(), TIMEOUT)


@pytest.fixture
async def server(make_server: MakeServer) -> NotifyServer:
    return await make_server()


# -- SDK clients -----------------------------------------------------------------------------------

Connect = Callable[[NotifyServer, str], Awaitable[Connection]]


@pytest.fixture
async def connect_client(make_server: MakeServer) -> AsyncIterator[Connect]:
    """`await connect_client(server, "alice")` → a connected `Connection`, closed at teardown."""
    clients: list[Connection] = []

    async def make(srv: NotifyServer, member: str) -> Connection:
        c = await asyncio.wait_for(Connection.connect(srv.url, member), TIMEOUT)
        clients.append(c)
        return c

    yield make
    for c in clients:
        try:
            await asyncio.wait_for(c.close(), TIMEOUT)
        except (TimeoutError, OSError):
            await c.drop()


# -- SDK applications (state transfer) -------------------------------------------------------------

FAST = ClientOptions(backoff=Backoff(base=0.02, cap=0.1))


class Replica:
    """An application's replicated state: the list of payloads applied so far (+ ballast)."""

    def __init__(self, ballast: int = 0) -> None:
        self.items: list[Any] = []
        self.ballast = os.urandom(ballast)  # incompressible: a snapshot of many chunks
        self.restored = 0

    def snapshot(self) -> bytes:
        return orjson.dumps({"items": self.items, "ballast": self.ballast.hex()})

    def restore(self, data: bytes) -> None:
        state = orjson.loads(data)
        self.items, self.ballast = state["items"], bytes.fromhex(state["ballast"])
        self.restored += 1


@pytest.fixture
async def sdk() -> AsyncIterator[Callable[..., Any]]:
    """`await sdk(url, "alice", options=...)` → a connected SDK `Client` (fast backoff by
    default), closed at teardown."""
    clients: list[Client] = []

    async def make(url: str, member: str, options: ClientOptions = FAST, **kw: Any) -> Client:
        c = await asyncio.wait_for(sdk_connect(url, member=member, options=options,
                                               rng=random.Random(2), **kw), TIMEOUT)
        clients.append(c)
        return c

    yield make
    for c in clients:
        await asyncio.wait_for(c.close(), TIMEOUT)


@pytest.fixture
async def proxy_to() -> AsyncIterator[Callable[[NotifyServer], Any]]:
    """`await proxy_to(server)` → a `FaultyProxy` in front of it (cut, stall, slow)."""
    from tests.integration.proxy import FaultyProxy

    proxies: list[FaultyProxy] = []

    async def make(srv: NotifyServer) -> FaultyProxy:
        p = await FaultyProxy(srv.port).start()
        proxies.append(p)
        return p

    yield make
    for p in proxies:
        await p.close()


async def until(group: Group, pred: Callable[[GroupEvent], bool],
                timeout: float = TIMEOUT) -> list[GroupEvent]:
    """The group's events up to and including the first that matches `pred` (bounded)."""
    out: list[GroupEvent] = []

    async def run() -> None:
        while True:
            e = await group.next_event(timeout)
            out.append(e)
            if pred(e):
                return

    await asyncio.wait_for(run(), timeout)
    return out


async def until_state(group: Group) -> StateReceived:
    """The application loop of a joiner, up to its `StateReceived`."""
    e = await group.next_event(TIMEOUT)
    while not isinstance(e, StateReceived):
        e = await group.next_event(TIMEOUT)
    return e


async def apply_until(group: Group, replica: Replica, last: str) -> list[Any]:
    """Run the application loop: apply every message until the one carrying `last`."""
    events: list[Any] = []
    while True:
        e = await group.next_event(TIMEOUT)
        events.append(e)
        if isinstance(e, Message):
            replica.items.append(e.payload)
            if e.payload == last:
                return events



async def next_event(c: Connection, group: str, timeout: float = TIMEOUT) -> GroupEvent:
    return await c.next_event(group, timeout)


async def events_until(c: Connection, group: str, pred: Callable[[GroupEvent], bool],
                       timeout: float = TIMEOUT) -> list[GroupEvent]:
    """Events of `group` at `c` up to and including the first one matching `pred`."""
    out: list[GroupEvent] = []

    async def run() -> None:
        while True:
            e = await c.events(group).get()
            out.append(e)
            if pred(e):
                return

    try:
        await asyncio.wait_for(run(), timeout)
    except TimeoutError:
        raise AssertionError(f"{c.member}: no matching event in {timeout}s; got {out!r}") from None
    return out


async def events_until_payloads(c: Connection, group: str, payloads: set[Any],
                                timeout: float = TIMEOUT) -> list[GroupEvent]:
    """Events of `group` at `c` until a message with each of `payloads` has been seen."""
    missing = set(payloads)

    def pred(e: GroupEvent) -> bool:
        if isinstance(e, Message):
            missing.discard(e.payload)
        return not missing

    return await events_until(c, group, pred, timeout)


async def messages(c: Connection, group: str, n: int, timeout: float = TIMEOUT) -> list[Message]:
    """The next `n` application messages at `c` (asserting nothing else comes in between)."""
    out: list[Message] = []

    async def run() -> None:
        while len(out) < n:
            e = await c.events(group).get()
            assert isinstance(e, Message), f"{c.member}: expected a message, got {e!r}"
            out.append(e)

    try:
        await asyncio.wait_for(run(), timeout)
    except TimeoutError:
        raise AssertionError(f"{c.member}: {len(out)}/{n} messages in {timeout}s") from None
    return out


def pending_events(c: Connection, group: str) -> list[GroupEvent]:
    """What is queued for the application right now, without waiting."""
    q = c.events(group)
    out: list[GroupEvent] = []
    while not q.empty():
        out.append(q.get_nowait())
    return out


def is_msg(payload: Any) -> Callable[[GroupEvent], bool]:
    return lambda e: isinstance(e, Message) and e.payload == payload


# -- raw WebSocket clients -------------------------------------------------------------------------


class Raw:
    """A hand-driven protocol client: frames in and out exactly as the test says.

    `recv()` unpacks `batch` frames. With `auto_flush` it answers `view_change` with `flush_ok`
    (as a well-behaved member would) while reading; with `auto_ack` it ACKs atomic deliveries.
    Both are off by default: a raw member does only what the test makes it do.
    """

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.buffer: deque[Frame] = deque()
        self.seen: list[Frame] = []
        self.auto_flush = False
        self.auto_ack = False
        self.session: str | None = None
        self.member: str | None = None

    @classmethod
    async def open(cls, url: str, member: str | None = None, *, resume_session: str | None = None,
                   **kw: Any) -> Raw:
        # A raw client may have stopped reading on purpose: then the server's answer to its
        # close frame is stuck behind unread data, so do not wait long for it at teardown.
        kw.setdefault("close_timeout", 0.5)
        ws = await asyncio.wait_for(connect(url, compression=None, max_size=None, **kw), TIMEOUT)
        raw = cls(ws)
        if member is not None:
            hello: Frame = {"type": "hello", "protocol": 1, "member": member}
            if resume_session:
                hello["resume_session"] = resume_session
            await raw.send(hello)
            welcome = await raw.expect("welcome")
            raw.session, raw.member = welcome["session"], welcome["member"]
        return raw

    async def send(self, frame: Frame | str | bytes) -> None:
        data = frame if isinstance(frame, str | bytes) else orjson.dumps(frame).decode()
        await self.ws.send(data, text=True)

    async def recv(self, timeout: float = TIMEOUT) -> Frame:
        while not self.buffer:
            data = await asyncio.wait_for(self.ws.recv(), timeout)
            f = orjson.loads(data)
            frames = f["frames"] if f.get("type") == "batch" else [f]
            for inner in frames:
                self.seen.append(inner)
                self.buffer.append(inner)
                await self._auto(inner)
        return self.buffer.popleft()

    async def _auto(self, f: Frame) -> None:
        if self.auto_flush and f["type"] == "view_change":
            await self.send({"type": "flush_ok", "group": f["group"], "view": f["proposed"]})
        if self.auto_ack and f["type"] == "deliver" and f["atomic"]:
            await self.send({"type": "ack", "group": f["group"], "offsets": [f["offset"]]})

    async def expect(self, what: str | Pred, timeout: float = TIMEOUT) -> Frame:
        """Read until a frame matches (a `type` name or a predicate); the others are skipped."""
        pred: Pred = (lambda f: f.get("type") == what) if isinstance(what, str) else what
        skipped: list[Frame] = []

        async def run() -> Frame:
            while True:
                f = await self.recv(timeout)
                if pred(f):
                    return f
                skipped.append(f)

        try:
            return await asyncio.wait_for(run(), timeout)
        except TimeoutError:
            raise AssertionError(f"raw {self.member}: no {what!r} in {timeout}s; "
                                 f"skipped {skipped!r}") from None

    async def join(self, group: str, accept_from: str = "members", req: str = "j1") -> Frame:
        await self.send({"type": "join", "req": req, "group": group, "accept_from": accept_from})
        return await self.expect(lambda f: f["type"] == "view_install"
                                 and self.member in f["members"])

    async def close_code(self, timeout: float = TIMEOUT) -> int | None:
        """Read everything left until the server closes the connection; its close code."""
        async def run() -> None:
            with contextlib.suppress(ConnectionClosed):
                while True:
                    await self.recv(timeout)

        await asyncio.wait_for(run(), timeout)
        return None if self.ws.close_code is None else int(self.ws.close_code)

    def drop(self) -> None:
        """Lose the connection abruptly, with no close handshake."""
        self.ws.transport.abort()

    async def close(self) -> None:
        with contextlib.suppress(ConnectionClosed, OSError):
            await self.ws.close()


OpenRaw = Callable[..., Awaitable[Raw]]


@pytest.fixture
async def open_raw(make_server: MakeServer) -> AsyncIterator[OpenRaw]:
    """`await open_raw(server, "mallory")` (hello sent) or `open_raw(server)` (no hello)."""
    raws: list[Raw] = []

    async def make(srv: NotifyServer, member: str | None = None, **kw: Any) -> Raw:
        r = await Raw.open(srv.url, member, **kw)
        raws.append(r)
        return r

    yield make
    for r in raws:
        try:
            await asyncio.wait_for(r.close(), TIMEOUT)
        except TimeoutError:
            r.drop()


def small_rcvbuf_socket(srv: NotifyServer, size: int = 4096) -> socket.socket:
    """A connected TCP socket with a small receive buffer: a reader that stops reading backs the
    server up after a few KiB instead of several MiB of kernel buffers."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, size)
    s.settimeout(TIMEOUT)
    s.connect((srv.host, srv.port))
    s.setblocking(False)
    return s
