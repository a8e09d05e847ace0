"""A bare asyncio connection around `ClientProtocol`, driven by hand: tests, benchmarks and
fault scenarios use it to drop and resume on purpose (`drop()`, `reconnect()`). Applications
use `client_sdk.connect()` (client.py), which reconnects, resumes and queues publishes itself.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from client_sdk.errors import PublishRejected, ServerRefused
from client_sdk.events import (
    CheckpointStored,
    GroupEvent,
    Outcome,
    Published,
    Rejected,
    Removed,
    Reply,
    ServerError,
    ViewInstalled,
    ViewResumed,
)
from client_sdk.handshake import handshake
from client_sdk.options import ClientOptions
from client_sdk.protocol import ClientProtocol
from state_transfer import encode


@dataclass(frozen=True, slots=True)
class PublishResult:
    id: str
    offset: int


class Connection:
    def __init__(self, url: str, member: str) -> None:
        self.url = url
        self.member = member
        self.protocol = ClientProtocol(member)
        self.session: str | None = None
        self.welcome: dict[str, Any] = {}
        self.errors: list[ServerError] = []
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._reqs = itertools.count(1)
        self._queues: dict[str, asyncio.Queue[GroupEvent]] = {}
        #: join/leave requests: req -> (group, future); they complete on the group's next install
        self._req_waiters: dict[str, tuple[str, asyncio.Future[Any]]] = {}
        self._id_waiters: dict[str, asyncio.Future[Reply]] = {}
        self._outcomes: dict[str, asyncio.Future[Outcome]] = {}
        self._can_send: dict[str, asyncio.Event] = {}

    @classmethod
    async def connect(cls, url: str, member: str) -> Connection:
        c = cls(url, member)
        await c._open(resume=False)
        return c

    async def _open(self, *, resume: bool) -> None:
        ws, welcome = await handshake(self.url, self.member, options=ClientOptions(),
                                      hello=self.protocol.hello(resume))
        self.protocol.receive(welcome)  # its session: the next `hello(resume=True)` presents it
        self.welcome, self.session, self._ws = welcome, welcome["session"], ws
        self._reader = asyncio.get_running_loop().create_task(self._read(ws))

    # -- requests --------------------------------------------------------------------------------

    def _req(self) -> str:
        return str(next(self._reqs))

    async def join(self, group: str, *, accept_from: str = "members") -> ViewInstalled:
        """Join `group`; returns the install of the first view that has this member."""
        req = self._req()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._req_waiters[req] = (group, fut)
        self._queues.setdefault(group, asyncio.Queue())
        self._can_send.setdefault(group, asyncio.Event())
        self.protocol.join(req, group, accept_from=accept_from)
        await self._flush()
        while True:
            result = await fut
            if isinstance(result, ViewInstalled) and self.member in result.members:
                return result
            fut = asyncio.get_running_loop().create_future()
            self._req_waiters[req] = (group, fut)

    async def leave(self, group: str) -> None:
        req = self._req()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._req_waiters[req] = (group, fut)
        self.protocol.leave(req, group)
        await self._flush()
        await fut

    async def publish(self, group: str, payload: Any, *, order: str = "fifo",
                      atomic: bool = False, same_view: bool = False,
                      publish_id: str | None = None, view: int | None = None) -> PublishResult:
        """Publish once `group` accepts sends (waits out a flush); returns when stored."""
        await self._can_send[group].wait()
        pid = publish_id or uuid.uuid4().hex
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._id_waiters[pid] = fut
        if atomic:
            self._outcomes[pid] = asyncio.get_running_loop().create_future()
        self.protocol.send(self.protocol.publish_frame(self._req(), group, pid, payload,
                                                       order=order, atomic=atomic,
                                                       same_view=same_view, view=view))
        await self._flush()
        reply = await fut
        if isinstance(reply, Rejected):
            self._outcomes.pop(pid, None)
            raise PublishRejected(reply.code)
        assert isinstance(reply, Published)
        return PublishResult(pid, reply.offset)

    async def checkpoint(self, group: str, snapshot: bytes,
                         position: dict[str, Any] | None = None) -> CheckpointStored:
        """Store `snapshot` as the group's checkpoint; by default it claims to include every
        message this connection has received (`saved_point()`)."""
        req = self._req()
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._req_waiters[req] = (group, fut)
        point = position if position is not None else self.protocol.groups[group].saved_point()
        self.protocol.checkpoint(req, group, encode(snapshot), point)
        await self._flush()
        stored = await fut
        assert isinstance(stored, CheckpointStored)
        return stored

    async def outcome(self, publish_id: str) -> Outcome:
        return await self._outcomes[publish_id]

    def events(self, group: str) -> asyncio.Queue[GroupEvent]:
        return self._queues.setdefault(group, asyncio.Queue())

    async def next_event(self, group: str, timeout: float = 5.0) -> GroupEvent:
        async with asyncio.timeout(timeout):
            return await self._queues[group].get()

    async def stream(self, group: str) -> AsyncIterator[GroupEvent]:
        q = self.events(group)
        while True:
            yield await q.get()

    # -- connection ------------------------------------------------------------------------------

    async def drop(self) -> None:
        """Lose the connection abruptly (no close handshake): what a phone changing cell does."""
        ws = self._ws
        if ws is not None:
            ws.transport.abort()
        await self._reader_ended()
        for ev in self._can_send.values():
            ev.clear()

    async def reconnect(self) -> None:
        """Resume the session on a new connection and rejoin each group from where it was (with
        the `accept_from` it joined with)."""
        await self._open(resume=True)
        self.protocol.rejoin_all(self._req)
        await self._flush()

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        await self._reader_ended()

    async def _reader_ended(self) -> None:
        """Wait for the reader to end (its socket is closed); raise what it raised but the
        close. (`asyncio.wait`, not `await` under `suppress(CancelledError)`, which would also
        swallow a cancel of the caller.)"""
        reader = self._reader
        if reader is None:
            return
        await asyncio.wait((reader,))
        error = None if reader.cancelled() else reader.exception()
        if error is not None and not isinstance(error, ConnectionClosed):
            raise error

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _flush(self) -> None:
        ws = self._ws
        if ws is None:
            return
        frames = self.protocol.data_to_send()
        for f in frames:
            await ws.send(orjson.dumps(f), text=True)

    async def _read(self, ws: ClientConnection) -> None:
        try:
            async for data in ws:
                events, replies = self.protocol.receive(orjson.loads(data))
                for e in events:
                    self._on_event(e)
                for r in replies:
                    self._on_reply(r)
                await self._flush()
        except ConnectionClosed:
            pass

    def _on_event(self, e: GroupEvent) -> None:
        group = e.group
        if isinstance(e, (ViewInstalled, ViewResumed)):
            self._can_send.setdefault(group, asyncio.Event()).set()
        else:
            g = self.protocol.groups.get(group)
            if g is not None and not g.can_send:
                self._can_send.setdefault(group, asyncio.Event()).clear()
        if isinstance(e, (ViewInstalled, Removed)):
            for req, (g_name, fut) in list(self._req_waiters.items()):
                if g_name == group:
                    del self._req_waiters[req]
                    if not fut.done():
                        fut.set_result(e)
        self._queues.setdefault(group, asyncio.Queue()).put_nowait(e)

    def _on_reply(self, r: Reply) -> None:
        if isinstance(r, (Published, Rejected)):
            fut = self._id_waiters.pop(r.id, None)
            if fut is not None and not fut.done():
                fut.set_result(r)
        elif isinstance(r, Outcome):
            of = self._outcomes.get(r.id)
            if of is not None and not of.done():
                of.set_result(r)
        elif isinstance(r, CheckpointStored):
            waiter = self._req_waiters.pop(r.req, None)
            if waiter is not None and not waiter[1].done():
                waiter[1].set_result(r)
        elif isinstance(r, ServerError):
            self.errors.append(r)
            waiter = self._req_waiters.pop(r.req, None) if r.req else None
            if waiter is not None and not waiter[1].done():
                waiter[1].set_exception(ServerRefused(r.code, r.message))


#: the name this class had before the SDK proper existed
Client = Connection
