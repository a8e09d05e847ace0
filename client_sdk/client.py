"""The SDK: `connect()` → `Client` → `Group`, with reconnect, resume and safe publishing.

    async with connect("ws://127.0.0.1:8765", member="alice") as client:
        doc = await client.join("doc-1")
        result = await doc.publish({"op": "insert"}, order="total", atomic=True)
        async for event in doc:
            ...

Theory of operation. One `ClientProtocol` (sans-I/O) lives as long as the `Client`, across
connections, so the resume point of each group survives a drop. A *supervisor* task owns the
connection: when it is lost (and `reconnect` is on) it waits a backoff delay with full jitter and
presents the old session; the server resumes the member with no view change if it is back within
`suspect_timeout` (G7), otherwise the client rejoins each group from its resume point and gets
what it missed (G8). Either way the application sees one stream per group, without duplicates
or gaps. One *writer* task sends frames in the order the protocol produced them. Publishes wait
in a bounded queue while the connection is down or a view change is under way, and are sent
(again) with their idempotency ids, so a retry is never delivered twice.

Connection states (`ConnectionState`): CONNECTING → CONNECTED ⇄ RECONNECTING → CLOSED.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
import uuid
from collections.abc import AsyncIterator, Callable, Generator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

import orjson
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from client_sdk.events import (
    CaughtUp,
    CheckpointStored,
    GroupEvent,
    Message,
    Outcome,
    Published,
    Rejected,
    Removed,
    Reply,
    ServerError,
    StateReceived,
    StateRequested,
    ViewChanging,
    ViewInstalled,
    ViewResumed,
)
from client_sdk.protocol import ClientProtocol, GroupPhase
from state_transfer import encode

__all__ = [
    "Backoff",
    "Client",
    "ClientOptions",
    "ConnectError",
    "ConnectionState",
    "Group",
    "GroupLeftError",
    "NotifyError",
    "PublishQueueFull",
    "PublishRejected",
    "PublishResult",
    "ServerRefused",
    "StateProvider",
    "View",
    "connect",
]


# -- errors -------------------------------------------------------------------------------------


class NotifyError(Exception):
    """Base of every error the SDK raises."""


class ConnectError(NotifyError):
    """The server could not be reached (or the connection failed before `welcome`)."""


class ServerRefused(NotifyError):
    """The server answered a request with an `error` frame; `code` is its stable code
    (docs/protocol.md), e.g. `bad_frame` for a bad member id, `already_member`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class PublishRejected(NotifyError):
    """The server refused the message (`rejected` frame); it was delivered to no one.
    `code`: `stale_view`, `not_member`, `leaving`, `future_view`, `no_group`..."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class PublishQueueFull(NotifyError):
    """More than `ClientOptions.max_pending_publishes` publishes are waiting for an answer."""


class GroupLeftError(NotifyError):
    """The group was left (or the member removed from it) before the publish could be sent."""


class StateProvider(Protocol):
    """The application's replicated state, for state transfer (G9). `snapshot()` is called when
    this member is the donor, at the exact point of its event stream where the joiner came in
    (every earlier event has been handed to the application, no later one); `restore()` is
    called on a joiner before it gets any event the snapshot does not include."""

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes) -> None: ...


#: snapshots larger than this are compressed and cut off the event loop
_THREAD_ENCODE = 1 << 20


# -- options and results ------------------------------------------------------------------------


class ConnectionState(StrEnum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"  # lost; waiting for the backoff delay or trying again
    CLOSED = "closed"  # by `close()`, or reconnecting gave up


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter: attempt n waits uniform(0, min(cap, base·2ⁿ))."""

    base: float = 0.05
    cap: float = 5.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0.0, min(self.cap, self.base * (2.0 ** min(attempt, 30))))


@dataclass(frozen=True, slots=True)
class ClientOptions:
    reconnect: bool = True
    backoff: Backoff = field(default_factory=Backoff)
    #: give up (state CLOSED) after this many failed attempts in a row; None: never
    max_attempts: int | None = None
    #: publishes waiting to be sent or answered; one more raises PublishQueueFull
    max_pending_publishes: int = 1_000
    connect_timeout: float = 10.0
    #: WebSocket pings: a link that stalls (no pong within the timeout) counts as lost, and the
    #: client reconnects; the server's defaults are 5 s / 15 s
    heartbeat_interval: float = 5.0
    heartbeat_timeout: float = 15.0


@dataclass(frozen=True, slots=True)
class View:
    version: int
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PublishResult:
    id: str
    offset: int
    #: for atomic messages: True when delivered everywhere, False when aborted; None otherwise
    committed: bool | None = None
    reason: str | None = None


@dataclass(slots=True)
class _Pending:
    group: str
    frame: dict[str, Any]
    published: asyncio.Future[Published]
    outcome: asyncio.Future[Outcome] | None
    sent: bool = False


_END = object()


# -- the client ---------------------------------------------------------------------------------


async def handshake(url: str, member: str, *, options: ClientOptions,
                    token: str | None = None, resume_session: str | None = None,
                    ) -> tuple[ClientConnection, dict[str, Any]]:
    """Open a WebSocket, say `hello`, return it with the `welcome`. Raises `ConnectError` if
    the server cannot be reached or does not answer, `ServerRefused` if it refuses."""
    hello: dict[str, Any] = {"type": "hello", "protocol": 1, "member": member}
    if token is not None:
        hello["token"] = token
    if resume_session:
        hello["resume_session"] = resume_session
    o = options
    try:
        ws = await asyncio.wait_for(
            ws_connect(url, max_size=None, compression=None, open_timeout=None,
                       ping_interval=o.heartbeat_interval,
                       ping_timeout=max(o.heartbeat_timeout - o.heartbeat_interval, 0.05),
                       # a stalled link cannot carry the closing handshake: do not wait
                       # longer for it than for a pong
                       close_timeout=min(o.heartbeat_timeout, 5.0)),
            o.connect_timeout)
    except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as e:
        raise ConnectError(f"cannot connect to {url}: {e}") from e
    try:
        await ws.send(orjson.dumps(hello), text=True)
        welcome = orjson.loads(await asyncio.wait_for(ws.recv(), o.connect_timeout))
    except (ConnectionClosed, TimeoutError, OSError) as e:
        await ws.close()
        raise ConnectError(f"no welcome from {url}: {e}") from e
    if welcome.get("type") != "welcome":
        await ws.close()
        raise ServerRefused(str(welcome.get("code", "?")), str(welcome.get("message", welcome)))
    return ws, welcome


class Client:
    """Use `connect()`; see the module docstring."""

    def __init__(self, url: str, member: str, *, token: str | None = None,
                 options: ClientOptions | None = None, event_log: Any = None,
                 rng: random.Random | None = None) -> None:
        self.url, self.member, self._token = url, member, token
        self.options = options or ClientOptions()
        self.state = ConnectionState.CONNECTING
        self.session: str | None = None
        self.protocol = ClientProtocol(member)
        self._events_log = event_log
        self._rng = rng or random.Random()
        self._ws: ClientConnection | None = None
        self._groups: dict[str, Group] = {}
        self._pending: dict[str, _Pending] = {}
        self._joins: dict[str, tuple[str, asyncio.Future[ViewInstalled]]] = {}
        self._leaves: dict[str, tuple[str, asyncio.Future[None]]] = {}
        #: checkpoint uploads waiting for `checkpoint_stored`, by request id
        self._checkpoints: dict[str, asyncio.Future[CheckpointStored]] = {}
        self._reqs = itertools.count(1)
        self._listeners: list[Callable[[ConnectionState, ConnectionState], None]] = []
        self._wake_writer = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._lost_at: float | None = None
        self._closing = False
        #: `error` frames that answered no request of ours (e.g. a refused token refresh)
        self.errors: list[ServerError] = []

    # -- lifecycle -------------------------------------------------------------------------------

    async def _start(self) -> None:
        await self._open(resume=False)
        self._set_state(ConnectionState.CONNECTED)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._supervise()), loop.create_task(self._write())]

    async def close(self) -> None:
        """Leave nothing running. Groups are not left: the server removes this member after
        `suspect_timeout` (call `Group.leave()` first for a clean exit)."""
        if self.state is ConnectionState.CLOSED:
            return
        self._closing = True
        ws = self._ws
        if ws is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(), 5)
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._finish(NotifyError("client closed"))

    def _finish(self, error: NotifyError) -> None:
        self._set_state(ConnectionState.CLOSED)
        waiting: list[asyncio.Future[Any]] = []
        for p in self._pending.values():
            waiting.append(p.published)
            if p.outcome is not None:
                waiting.append(p.outcome)
        waiting.extend(fut for _, fut in self._joins.values())
        waiting.extend(fut for _, fut in self._leaves.values())
        waiting.extend(self._checkpoints.values())
        self._checkpoints.clear()
        self._pending.clear()
        self._joins.clear()
        self._leaves.clear()
        for fut in waiting:
            if not fut.done():
                fut.set_exception(error)
        for g in self._groups.values():
            g._queue.put_nowait(_END)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def on_state_change(self, listener: Callable[[ConnectionState, ConnectionState], None]) -> None:
        """Call `listener(old, new)` on every change of `state`."""
        self._listeners.append(listener)

    def _set_state(self, new: ConnectionState) -> None:
        old, self.state = self.state, new
        if old is not new:
            for listener in self._listeners:
                listener(old, new)

    # -- the connection --------------------------------------------------------------------------

    async def _open(self, *, resume: bool) -> bool:
        """Connect and say hello; returns whether the server resumed the session."""
        ws, welcome = await handshake(self.url, self.member, options=self.options,
                                      token=self._token,
                                      resume_session=self.session if resume else None)
        self.session, self._ws = welcome["session"], ws
        return bool(welcome.get("resumed"))

    async def _supervise(self) -> None:
        """Read while connected; when the connection is lost, reconnect (or finish)."""
        while True:
            ws = self._ws
            assert ws is not None
            try:
                async for data in ws:
                    self._receive(orjson.loads(data))
            except ConnectionClosed:
                pass
            if self._closing:
                return
            self._lost(f"closed {ws.close_code}" if ws.close_code else "connection lost")
            if not self.options.reconnect:
                self._finish(ConnectError("connection lost (reconnect is off)"))
                return
            if not await self._reconnect():
                return

    def _lost(self, reason: str) -> None:
        self._ws = None
        self._lost_at = time.time()
        self._set_state(ConnectionState.RECONNECTING)
        for p in self._pending.values():
            p.sent = False  # unanswered: sent again, with the same id, after the resume
        for fut in self._checkpoints.values():  # part of it may be lost with the connection
            if not fut.done():
                fut.set_exception(NotifyError("connection lost during the checkpoint; "
                                              "take it again"))
        self._checkpoints.clear()
        self._log("client.disconnect", reason=reason)

    async def _reconnect(self) -> bool:
        attempt = 0
        while not self._closing:
            await asyncio.sleep(self.options.backoff.delay(attempt, self._rng))
            attempt += 1
            try:
                resumed = await self._open(resume=True)
            except ServerRefused as e:
                self._finish(e)  # e.g. the token is no longer valid: retrying will not help
                return False
            except ConnectError:
                limit = self.options.max_attempts
                if limit is not None and attempt >= limit:
                    self._finish(ConnectError(f"gave up after {attempt} attempts"))
                    return False
                continue
            gap_ms = 0.0 if self._lost_at is None else (time.time() - self._lost_at) * 1000
            self._log("client.reconnect", gap_ms=round(gap_ms, 3), resumed=resumed)
            for name, g in self.protocol.groups.items():
                if g.phase is not GroupPhase.LEFT and name in self._groups:
                    self.protocol.join(f"r{next(self._reqs)}", name, resume=True,
                                       accept_from=self._groups[name].accept_from)
            self._set_state(ConnectionState.CONNECTED)
            self._wake_writer.set()
            return True
        return False

    async def _write(self) -> None:
        """The only task that sends: frames leave in the order the protocol made them."""
        while True:
            await self._wake_writer.wait()
            self._wake_writer.clear()
            ws = self._ws
            if ws is None:
                continue
            self._queue_publishes()
            frames = self.protocol.data_to_send()
            try:
                for f in frames:
                    await ws.send(orjson.dumps(f), text=True)
            except ConnectionClosed:
                continue  # the supervisor sees it too; unanswered publishes are resent

    def _queue_publishes(self) -> None:
        """Hand the protocol every waiting publish whose group accepts sends, in order."""
        for p in self._pending.values():
            if p.sent:
                continue
            g = self.protocol.groups.get(p.group)
            if g is None or not g.can_send:
                continue
            self.protocol.send(p.frame)
            p.sent = True

    def _kick(self) -> None:
        self._wake_writer.set()

    # -- receiving -------------------------------------------------------------------------------

    def _receive(self, frame: dict[str, Any]) -> None:
        events, replies = self.protocol.receive(frame)
        now = time.time()
        for e in events:
            self._on_event(e, now)
        for r in replies:
            self._on_reply(r)
        self._kick()  # ACKs, flush_ok, and publishes a view change was holding

    def _on_event(self, e: GroupEvent, now: float) -> None:
        g = self._groups.get(e.group)
        if isinstance(e, Message):
            self._log("client.deliver", group=e.group, offset=e.offset, stream=e.stream,
                      seq=e.seq, sender=e.sender, sent_ts=e.ts, recv_ts=now, atomic=e.atomic)
        elif isinstance(e, ViewInstalled):
            self._log("client.view", group=e.group, view=e.view, members=list(e.members))
            if g is not None:
                g.view = View(e.view, e.members)
            waiter = self._joins.get(e.group)
            if waiter is not None and self.member in e.members:
                del self._joins[e.group]
                if not waiter[1].done():
                    waiter[1].set_result(e)
        elif isinstance(e, Removed):
            leave = self._leaves.pop(e.group, None)
            if leave is not None and not leave[1].done():
                leave[1].set_result(None)
            self._fail_group(e.group, GroupLeftError(f"no longer a member of {e.group}"))
        if g is not None:
            g._queue.put_nowait(e)
            if isinstance(e, Removed):  # left, or removed by the group: this handle is done
                g._left = True
                g._queue.put_nowait(_END)

    def _fail_group(self, group: str, error: NotifyError) -> None:
        for pid, p in list(self._pending.items()):
            if p.group == group and not p.sent:
                del self._pending[pid]
                p.published.set_exception(error)
                if p.outcome is not None:
                    p.outcome.cancel()

    def _on_reply(self, r: Reply) -> None:
        if isinstance(r, Published):
            p = self._pending.get(r.id)
            if p is not None:
                if not p.published.done():
                    p.published.set_result(r)
                if p.outcome is None:
                    del self._pending[r.id]
        elif isinstance(r, Outcome):
            p = self._pending.pop(r.id, None)
            if p is not None and p.outcome is not None and not p.outcome.done():
                p.outcome.set_result(r)
        elif isinstance(r, Rejected):
            p = self._pending.get(r.id)
            if p is None:
                return
            if r.code == "view_changing":  # it crossed a view change: send it after it
                p.sent = False
                return
            del self._pending[r.id]
            p.published.set_exception(PublishRejected(r.code))
            if p.outcome is not None:
                p.outcome.cancel()
        elif isinstance(r, CheckpointStored):
            fut = self._checkpoints.pop(r.req, None)
            if fut is not None and not fut.done():
                fut.set_result(r)
        elif isinstance(r, ServerError):
            self._on_error(r)

    def _on_error(self, r: ServerError) -> None:
        if r.code in ("offset_unavailable", "bad_resume") and self._fresh_join(r.req):
            return
        refused = self._checkpoints.pop(r.req, None) if r.req else None
        if refused is not None:
            if not refused.done():
                refused.set_exception(ServerRefused(r.code, r.message))
            return
        tables: tuple[dict[str, tuple[str, Any]], ...] = (self._joins, self._leaves)
        for table in tables:
            for group, (req, fut) in list(table.items()):
                if r.req == req and not fut.done():
                    del table[group]
                    fut.set_exception(ServerRefused(r.code, r.message))
                    return
        self.errors.append(r)

    def _fresh_join(self, req: str | None) -> bool:
        """The server cannot serve this join's resume point (out of retention, another epoch):
        join afresh instead, with state transfer when the application keeps state (G8 → G9).
        The caller's `join()` completes on the new view; the application sees a
        `ViewInstalled` (and a `StateReceived`)."""
        g = self.protocol.group_of_join(req)
        handle = self._groups.get(g.name) if g is not None else None
        if handle is None:
            return False
        again = f"r{next(self._reqs)}"
        waiting = self._joins.get(handle.name)
        if waiting is not None:
            self._joins[handle.name] = (again, waiting[1])
        self.protocol.join(again, handle.name, accept_from=handle.accept_from,
                           want_state=handle._state is not None)
        handle._awaiting_state = handle._state is not None
        self._kick()
        return True

    # -- requests --------------------------------------------------------------------------------

    async def join(self, name: str, *, accept_from: str = "members",
                   resume_from: dict[str, Any] | None = None, want_state: bool = False,
                   state: StateProvider | None = None) -> Group:
        """Join `name` and wait for the first view that has this member.

        `resume_from` is a `Group.resume_point()` saved by an earlier process of this member:
        the server then sends only what was missed since (durable catch-up, G8).
        `state` is this member's `StateProvider`: it serves joiners, and with `want_state=True`
        it is restored from a member's snapshot before any later event (G9)."""
        if want_state and state is None:
            raise ValueError("want_state=True needs a StateProvider to restore into")
        if self.state is ConnectionState.CLOSED:
            raise NotifyError("client closed")
        if name in self._groups and not self._groups[name]._left:
            raise ServerRefused("already_member", f"already joined {name}")
        group = Group(self, name, accept_from, state)
        group._awaiting_state = want_state
        self._groups[name] = group
        req = f"j{next(self._reqs)}"
        fut: asyncio.Future[ViewInstalled] = asyncio.get_running_loop().create_future()
        self._joins[name] = (req, fut)
        self.protocol.join(req, name, accept_from=accept_from, resume_from=resume_from,
                           want_state=want_state)
        self._kick()
        try:
            installed = await fut
        except NotifyError:
            del self._groups[name]
            raise
        group.view = View(installed.view, installed.members)
        return group

    async def refresh_token(self, token: str) -> None:
        """Present a new token before the current one expires (the server closes a connection
        whose token expired with 4005). Later reconnects use it too. A refused refresh shows up
        in `errors` (`member_mismatch`, `token_invalid`, `token_expired`)."""
        self._token = token
        self.protocol.send({"type": "refresh", "token": token})
        self._kick()

    async def _publish(self, group: Group, payload: Any, order: str, atomic: bool,
                       same_view: bool, publish_id: str | None) -> PublishResult:
        if group._left:
            raise GroupLeftError(f"left {group.name}")
        if self.state is ConnectionState.CLOSED:
            raise NotifyError("client closed")
        if len(self._pending) >= self.options.max_pending_publishes:
            raise PublishQueueFull(f"{len(self._pending)} publishes already waiting "
                                   f"(max_pending_publishes={self.options.max_pending_publishes})")
        pid = publish_id or uuid.uuid4().hex
        loop = asyncio.get_running_loop()
        frame = self.protocol.publish_frame(f"p{next(self._reqs)}", group.name, pid, payload,
                                            order=order, atomic=atomic, same_view=same_view)
        p = _Pending(group.name, frame, loop.create_future(),
                     loop.create_future() if atomic else None)
        self._pending[pid] = p
        self._kick()
        published = await p.published
        if p.outcome is None:
            return PublishResult(pid, published.offset)
        outcome = await p.outcome
        return PublishResult(pid, published.offset, outcome.committed, outcome.reason)

    async def _leave(self, group: Group) -> None:
        if group._left:
            return
        group._left = True
        req = f"l{next(self._reqs)}"
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._leaves[group.name] = (req, fut)
        self.protocol.leave(req, group.name)
        self._kick()
        await fut

    async def _serve_state(self, group: Group, request: StateRequested) -> None:
        """Be the donor: snapshot now (the iterator is exactly at the joiner's point) and send
        it as chunks, with the per-stream positions the snapshot covers."""
        snapshot = group._state.snapshot() if group._state is not None else b""
        covered = dict(group._delivered)
        chunks = (await asyncio.to_thread(encode, snapshot)) if len(snapshot) > _THREAD_ENCODE \
            else encode(snapshot)
        for c in chunks:
            frame: dict[str, Any] = {"type": "state_chunk", "group": group.name,
                                     "transfer": request.transfer, "index": c.index,
                                     "last": c.last, "data": c.data}
            if c.last:
                frame["sha256"], frame["streams"] = c.sha256, covered
            self.protocol.send(frame)
        self._log("client.state_served", group=group.name, joiner=request.joiner,
                  bytes=len(snapshot))
        self._kick()

    async def _checkpoint(self, group: Group) -> CheckpointStored:
        if group._left:
            raise GroupLeftError(f"left {group.name}")
        if group._state is None:
            raise ValueError("a checkpoint needs the group's StateProvider (join(state=...))")
        if group._awaiting_state:
            raise NotifyError(f"{group.name}: the state has not arrived yet")
        if self.state is not ConnectionState.CONNECTED:
            raise NotifyError(f"not connected ({self.state.value})")
        # The snapshot and the position it claims are taken at the same point of the events
        # handed to the application.
        snapshot = group._state.snapshot()
        position = {"epoch": self.protocol.groups[group.name].epoch, "offset": group._base,
                    "view": group.view.version if group.view is not None else 0,
                    "streams": dict(group._delivered)}
        chunks = (await asyncio.to_thread(encode, snapshot)) if len(snapshot) > _THREAD_ENCODE \
            else encode(snapshot)
        req = f"c{next(self._reqs)}"
        fut: asyncio.Future[CheckpointStored] = asyncio.get_running_loop().create_future()
        self._checkpoints[req] = fut
        self.protocol.checkpoint(req, group.name, chunks, position)
        self._kick()
        stored = await fut
        self._log("client.checkpoint", group=group.name, offset=stored.offset,
                  bytes=len(snapshot))
        return stored

    def _log(self, event: str, **fields: Any) -> None:
        if self._events_log is not None:
            self._events_log.write(event, time.time(), member=self.member,
                                   session=self.session, **fields)


class Group:
    """A joined group: publish to it, iterate its events, read its current view."""

    def __init__(self, client: Client, name: str, accept_from: str,
                 state: StateProvider | None = None) -> None:
        self.name = name
        self.accept_from = accept_from
        self.view: View | None = None
        self._client = client
        self._state = state
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._left = False
        #: last seq handed to the application, per stream (what a snapshot taken now covers),
        #: and the offset at or below which it has been handed every message
        self._delivered: dict[str, int] = {}
        self._base = 0
        #: joined with want_state and the StateReceived is not handed over yet
        self._awaiting_state = False

    async def publish(self, payload: Any, *, order: str = "fifo", atomic: bool = False,
                      same_view: bool = False, publish_id: str | None = None) -> PublishResult:
        """Send `payload` to the group (this member receives it too). Returns once the server
        stored it; for `atomic=True`, once it is committed or aborted (`committed`).

        While the connection is down or a view change is under way the publish waits (bounded
        by `max_pending_publishes`) and is sent after, with the same id: never twice."""
        if order not in ("fifo", "total"):
            raise ValueError(f"order must be 'fifo' or 'total', not {order!r}")
        return await self._client._publish(self, payload, order, atomic, same_view, publish_id)

    async def leave(self) -> None:
        await self._client._leave(self)

    async def checkpoint(self) -> CheckpointStored:
        """Store this member's state (its `StateProvider.snapshot()`, taken now, between the
        events already handed over and the next) as the group's checkpoint. Joiners get it,
        completed from the log, when no member can give them the state: in an empty group,
        or when a donor fails with nobody to replace it. Call it between events, e.g. every few
        thousand messages; the server keeps the latest. Raises `ServerRefused` (`forbidden`,
        `state_too_large`, `bad_checkpoint`) or `NotifyError` (connection lost: call again)."""
        return await self._client._checkpoint(self)

    def resume_point(self) -> dict[str, Any]:
        """Where this member's knowledge of the group ends; save it to come back later with
        `Client.join(name, resume_from=...)` and receive only what was missed."""
        return self._client.protocol.groups[self.name].saved_point()

    def __aiter__(self) -> AsyncIterator[GroupEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[GroupEvent]:
        while True:
            e = await self._next(None)
            if e is None:
                return
            yield e

    async def next_event(self, timeout: float | None = None) -> GroupEvent:
        e = await self._next(timeout)
        if e is None:
            raise GroupLeftError(f"{self.name}: no more events")
        return e

    async def _next(self, timeout: float | None) -> GroupEvent | None:
        """The next event for the application. State requests are served here, between the
        events the application has taken and the ones it has not: that is the view boundary."""
        while True:
            if not self._queue.empty():  # the common case under load: no timer, no task
                e = self._queue.get_nowait()
            elif timeout is None:
                e = await self._queue.get()
            else:
                e = await asyncio.wait_for(self._queue.get(), timeout)
            if e is _END:
                return None
            if isinstance(e, StateRequested):
                await self._client._serve_state(self, e)
                continue
            if isinstance(e, StateReceived):
                if e.snapshot is not None and self._state is not None:
                    self._state.restore(e.snapshot)
                for stream, seq in e.streams.items():
                    self._delivered[stream] = max(seq, self._delivered.get(stream, 0))
                self._awaiting_state = False
            if isinstance(e, Message):
                self._delivered[e.stream] = e.seq
            elif isinstance(e, ViewInstalled):
                if self._client.member in e.joined:  # (re)joined: its knowledge starts here
                    self._delivered, self._base = {}, e.offset
                else:  # every message up to the install was handed over before it
                    self._base = max(self._base, e.offset)
            elif isinstance(e, CaughtUp):
                self._base = max(self._base, e.offset)
            assert isinstance(e, (Message, ViewInstalled, ViewChanging, ViewResumed, CaughtUp,
                                  Removed, StateReceived))
            return e


class _Connect:
    """`await connect(...)` or `async with connect(...) as client:`."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def __await__(self) -> Generator[Any, None, Client]:
        return self._connect().__await__()

    async def _connect(self) -> Client:
        await self._client._start()
        return self._client

    async def __aenter__(self) -> Client:
        return await self._connect()

    async def __aexit__(self, *exc: object) -> None:
        await self._client.close()


def connect(url: str, *, member: str, token: str | None = None,
            options: ClientOptions | None = None, event_log: Any = None,
            rng: random.Random | None = None) -> _Connect:
    """Connect to a notify server. Raises `ConnectError` if it cannot be reached and
    `ServerRefused` if it refuses the hello (bad member id, bad token)."""
    return _Connect(Client(url, member, token=token, options=options, event_log=event_log,
                           rng=rng))
