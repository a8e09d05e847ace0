"""The SDK: `connect()` → `Client` → `Group`, with reconnect, resume and safe publishing.

    async with connect("ws://127.0.0.1:8765", member="alice") as client:
        doc = await client.join("doc-1")
        result = await doc.publish({"op": "insert"}, order="total", atomic=True)
        async for event in doc:
            ...

Theory of operation. One `ClientProtocol` (sans-I/O) lives as long as the `Client`, across
connections, so the resume point of each group survives a drop. A *supervisor* task owns the
connection: when it is lost (and `reconnect` is on) it waits a backoff delay with full jitter and
presents the old session, to the next of its URLs (a cluster's nodes, DESIGN §9: the node it
was on may be the one that died); the server resumes the member with no view change if it is
back within `suspect_timeout` (G7), otherwise the client rejoins each group from its resume
point and gets what it missed (G8). Either way the application sees one stream per group,
without duplicates or gaps. One *writer* task sends frames in the order the protocol produced
them. Publishes wait in a bounded queue while the connection is down or a view change is under
way, and are sent (again) with their idempotency ids, so a retry is never delivered twice.

No task dies alone (STYLE.md). The reader-supervisor and the writer run in one `TaskGroup`
owned by `_run`, which decides in one place what a failure means:
- a lost connection, or a frame that breaks the protocol (`ProtocolViolation`): reconnect and
  resume, since the resume point is exact (repeated violations: give up, CLOSED);
- anything else is a bug in the SDK: the client goes CLOSED with a `ClientFailed` that every
  pending call and every group iterator raises, and state listeners see CLOSED.
The application's own callbacks (state listeners) are logged and isolated; they never kill a task.

Bounds (TigerBeetle's rule: a limit on everything): every request waits at most
`request_timeout`; publishes wait in a queue of `max_pending_publishes`; each group holds at most
`max_queued_events` events the application has not taken. Past that the reader stops reading the
socket (backpressure) until the application catches up: the server then sees a slow consumer
(G11), cuts it or suspects it, and the SDK resumes from its exact point when reading again —
every message once, in order. The cost: while reading is paused, frames behind the full group's
(`view_change`, `confirm`, replies to other requests) wait too, so a view change may remove this
member (it rejoins with catch-up, G8) and its requests may time out.

A resume point the server refuses (its log was reset, or retention dropped what this member
lacks) makes the group join afresh, with state transfer when it has a `StateProvider`; the
application gets one `Reset` event before the new view's `ViewInstalled` (issue 16).

Connection states (`ConnectionState`): CONNECTING → CONNECTED ⇄ RECONNECTING → CLOSED.

Several URLs (`connect([url1, url2, ...])`, the nodes of one cluster) are tried in turn, one per
attempt: the first connect starts at the first and tries each once, with the backoff delay
between attempts; a reconnect starts at the URL after the one that was lost and wraps around,
for as long as `max_attempts` allows. One URL behaves as it always did.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Generator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol
from urllib.parse import urlsplit

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
    Refreshed,
    Rejected,
    Removed,
    Reply,
    Reset,
    ServerError,
    StateReceived,
    StateRequested,
    ViewChanging,
    ViewInstalled,
    ViewResumed,
)
from client_sdk.events_queue import EventQueue
from client_sdk.protocol import ClientProtocol, GroupPhase, ProtocolViolation
from state_transfer import encode

log = logging.getLogger("client_sdk")

__all__ = [
    "Backoff",
    "Client",
    "ClientFailed",
    "ClientOptions",
    "ConnectError",
    "ConnectionState",
    "Group",
    "GroupLeftError",
    "NotifyError",
    "PayloadTooLarge",
    "PublishQueueFull",
    "PublishRejected",
    "PublishResult",
    "RequestTimeout",
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


class RequestTimeout(NotifyError, TimeoutError):
    """A request (`join`, `publish`, `leave`, `checkpoint`, `refresh_token`) got no answer
    within `ClientOptions.request_timeout`. A publish that timed out may still have been stored:
    publish again with the same `publish_id` to learn its offset (never delivered twice)."""


class PayloadTooLarge(NotifyError, ValueError):
    """The serialised payload does not fit in the server's `max_frame_bytes` (its `welcome`
    says how much): the server would close the connection on it."""


class ClientFailed(NotifyError):
    """The client stopped (state CLOSED) because of a bug in the SDK, or because the server kept
    breaking the protocol; the message says which, `__cause__` is the original error. Pending
    calls and group iterators raise it. Connect again."""


class StateProvider(Protocol):
    """The application's replicated state, for state transfer (G9). `snapshot()` is called when
    this member is the donor, at the exact point of its event stream where the joiner came in
    (every earlier event has been handed to the application, no later one); `restore()` is
    called on a joiner before it gets any event the snapshot does not include."""

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes) -> None: ...


#: snapshots larger than this are compressed and cut off the event loop
_THREAD_ENCODE = 1 << 20

#: bytes of a `publish` frame around its payload, at most (type, req, group, id, view...)
_PUBLISH_OVERHEAD = 200

#: more protocol violations than this within `_VIOLATION_WINDOW` seconds: give up (CLOSED)
_MAX_VIOLATIONS = 3
_VIOLATION_WINDOW = 60.0

#: a join refused `join_pending` (the server is still withdrawing an earlier join of this
#: member) is tried again this many times, after a backoff delay
#: refusals that say "not now" rather than "no": the join is sent again as it was
_RETRIED_JOIN_REFUSALS = frozenset({"join_pending", "unavailable"})
_JOIN_PENDING_RETRIES = 10

#: the events the application gets (and `_next` hands over)
_APP_EVENTS = (Message, ViewInstalled, ViewChanging, ViewResumed, CaughtUp, Removed,
               StateReceived, Reset)


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
    #: seconds a request (join, publish, leave, checkpoint, refresh_token) waits for its answer,
    #: RECONNECTING time included; None: no deadline
    request_timeout: float | None = 30.0
    #: events a group holds that the application has not taken; when one group reaches it the
    #: client stops reading the connection until the application has taken half of them
    #: (backpressure: the server sees a slow consumer). None: no bound.
    max_queued_events: int | None = 10_000


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
    """A publish waiting to be sent or answered: one future, its result. An atomic publish is
    answered twice (`published`, then `outcome`); `offset` keeps the first answer's."""

    group: str
    frame: dict[str, Any]
    atomic: bool
    result: asyncio.Future[PublishResult]
    sent: bool = False
    offset: int = 0
    #: the deadline of a `publish_nowait` (an awaited publish has its own)
    timer: asyncio.TimerHandle | None = None


#: in a group's queue: iteration ends (the group was left, or the app closed the client)
_END = object()


@dataclass(frozen=True, slots=True)
class _Failed:
    """In a group's queue: the client stopped on this error; iteration raises it."""

    error: NotifyError


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
            await asyncio.wait_for(ws.close(code, reason), 5)
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


class Client:
    """Use `connect()`; see the module docstring.

    `urls` are the servers this client may use, in the order it tries them; `url` is the one it
    is connected to, or was last (the first of `urls` before any connection)."""

    def __init__(self, url: str | Sequence[str], member: str, *, token: str | None = None,
                 options: ClientOptions | None = None, event_log: Any = None,
                 rng: random.Random | None = None) -> None:
        self.urls = server_urls(url)
        self.url, self.member, self._token = self.urls[0], member, token
        #: the index in `urls` of the next attempt, and of the URL connected (or last)
        self._next_url = 0
        self._at = 0
        self.options = options or ClientOptions()
        self.state = ConnectionState.CONNECTING
        self.session: str | None = None
        self.protocol = ClientProtocol(member)
        self._events_log = event_log
        self._rng = rng or random.Random()
        self._ws: ClientConnection | None = None
        self._limits: dict[str, Any] = {}
        self._groups: dict[str, Group] = {}
        self._pending: dict[str, _Pending] = {}
        self._joins: dict[str, tuple[str, asyncio.Future[ViewInstalled]]] = {}
        self._leaves: dict[str, tuple[str, asyncio.Future[None]]] = {}
        #: checkpoint uploads waiting for `checkpoint_stored`, by request id
        self._checkpoints: dict[str, asyncio.Future[CheckpointStored]] = {}
        #: `refresh_token` calls waiting for `refreshed`, oldest first (the frame has no req)
        self._refreshes: deque[asyncio.Future[None]] = deque()
        #: joins given up on (`request_timeout`): left as soon as the server installs them
        self._abandoned: set[str] = set()
        self._reqs = itertools.count(1)
        #: publish ids: random per client, then counted (unique without a UUID per publish)
        self._id_prefix = uuid.uuid4().hex[:16] + "-"
        self._ids = itertools.count(1)
        self._listeners: list[Callable[[ConnectionState, ConnectionState], None]] = []
        self._wake_writer = asyncio.Event()
        #: some publish in `_pending` may not be sent yet (False: none is)
        self._unsent = False
        self._main: asyncio.Task[None] | None = None
        self._lost_at: float | None = None
        self._closing = False
        self._violations: deque[float] = deque()
        #: the group whose full queue stopped the reader, while it is stopped
        self._paused_by: str | None = None
        #: why the client is CLOSED, if not by `close()`
        self.failure: NotifyError | None = None
        #: `error` frames that answered no request of ours (e.g. a refused token refresh)
        self.errors: list[ServerError] = []

    # -- lifecycle -------------------------------------------------------------------------------

    async def _start(self) -> None:
        """The first connection: each URL once, in order, with the backoff delay between
        attempts (one URL: one attempt, as ever). `ConnectError` says why each failed; a
        `ServerRefused` is raised at once (the same hello would be refused anywhere)."""
        failures: list[str] = []
        for attempt in range(len(self.urls)):
            if attempt:
                await asyncio.sleep(self.options.backoff.delay(attempt - 1, self._rng))
            try:
                await self._open(resume=False)
                break
            except ConnectError as e:
                if len(self.urls) == 1:
                    raise
                failures.append(str(e))
        else:
            raise ConnectError(f"none of the {len(self.urls)} servers could be reached: "
                               + "; ".join(failures))
        self._set_state(ConnectionState.CONNECTED)
        self._main = asyncio.get_running_loop().create_task(
            self._run(), name=f"notify-client-{self.member}")

    async def _run(self) -> None:
        """The owner of the long-lived tasks: the reader-supervisor and the writer. Whatever
        escapes them is a bug (the expected failures are handled inside): CLOSED, loudly."""
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._supervise(), name=f"notify-read-{self.member}")
                tg.create_task(self._write(), name=f"notify-write-{self.member}")
        except Exception as e:
            cause: BaseException = e
            while isinstance(cause, BaseExceptionGroup) and cause.exceptions:
                cause = cause.exceptions[0]
            if isinstance(cause, ClientFailed):
                error = cause
            else:
                log.error("notify client %s: internal error, closing", self.member,
                          exc_info=cause)
                error = ClientFailed(f"internal error in the SDK: {cause!r}")
                error.__cause__ = cause
            await self._fail(error)

    async def _fail(self, error: NotifyError) -> None:
        self._closing = True
        ws, self._ws = self._ws, None
        if ws is not None:
            await close_ws(ws, 1011, "client error")
        self._finish(error)

    async def close(self) -> None:
        """Leave nothing running. Groups are not left: the server removes this member after
        `suspect_timeout` (call `Group.leave()` first for a clean exit)."""
        self._closing = True
        ws, main = self._ws, self._main
        if main is asyncio.current_task():
            main = None
        try:
            if ws is not None:
                await close_ws(ws)
        finally:  # even when the application's own timeout cuts this close short
            if main is not None:
                main.cancel()
        if main is not None:
            await asyncio.gather(main, return_exceptions=True)
        if self.state is not ConnectionState.CLOSED:
            self._finish(NotifyError("client closed"), by_app=True)

    def _finish(self, error: NotifyError, *, by_app: bool = False) -> None:
        if not by_app and self.failure is None:
            self.failure = error
        self._set_state(ConnectionState.CLOSED)
        waiting: list[asyncio.Future[Any]] = []
        for p in self._pending.values():
            waiting.append(p.result)
            if p.timer is not None:
                p.timer.cancel()
        waiting.extend(fut for _, fut in self._joins.values())
        waiting.extend(fut for _, fut in self._leaves.values())
        waiting.extend(self._checkpoints.values())
        waiting.extend(self._refreshes)
        self._checkpoints.clear()
        self._pending.clear()
        self._joins.clear()
        self._leaves.clear()
        self._refreshes.clear()
        for fut in waiting:
            if not fut.done():
                fut.set_exception(error)
        for g in self._groups.values():
            g._queue.put_nowait(_END if by_app else _Failed(error))
            g._room.set()
        self._wake_writer.set()  # the writer sees CLOSED and ends

    def _closed_error(self) -> NotifyError:
        return self.failure or NotifyError("client closed")

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def on_state_change(self, listener: Callable[[ConnectionState, ConnectionState], None]) -> None:
        """Call `listener(old, new)` on every change of `state`. An exception it raises is
        logged (logger `client_sdk`) and does not reach the SDK."""
        self._listeners.append(listener)

    def _set_state(self, new: ConnectionState) -> None:
        old, self.state = self.state, new
        if old is not new:
            for listener in self._listeners:
                try:
                    listener(old, new)
                except Exception:
                    log.exception("notify client %s: state listener %r failed (%s -> %s)",
                                  self.member, listener, old.value, new.value)

    # -- the connection --------------------------------------------------------------------------

    async def _open(self, *, resume: bool) -> bool:
        """Connect to the next URL and say hello; returns whether the server resumed the
        session. A server that cannot be reached moves the next attempt to the URL after it."""
        i = self._next_url
        try:
            ws, welcome = await handshake(self.urls[i], self.member, options=self.options,
                                          token=self._token,
                                          resume_session=self.session if resume else None)
        except ConnectError:
            self._next_url = (i + 1) % len(self.urls)
            raise
        if resume and i != self._at:
            log.info("notify client %s: reconnected to %s (was on %s)", self.member, self.urls[i],
                     self.url)
        self._at, self.url = i, self.urls[i]
        self.session, self._ws = welcome["session"], ws
        self._limits = dict(welcome.get("limits") or {})
        return bool(welcome.get("resumed"))

    async def _supervise(self) -> None:
        """Read while connected; when the connection is lost, reconnect (or finish)."""
        while True:
            ws = self._ws
            assert ws is not None
            reason = await self._read(ws)
            if self._closing:
                return
            self._lost(reason)
            if not self.options.reconnect:
                self._finish(ConnectError(f"connection lost ({reason}; reconnect is off)"))
                return
            if not await self._reconnect():
                return

    async def _read(self, ws: ClientConnection) -> str:
        """Hand every frame of `ws` to the protocol until the connection is lost, or the server
        breaks the protocol (then close it: the resume point is exact, so a new connection
        resumes without a gap or a duplicate). Returns why it stopped."""
        try:
            while True:
                data = await ws.recv(decode=False)  # orjson reads the bytes: no str
                self._receive(data)
                await self._backpressure()
        except ConnectionClosed:
            return f"closed {ws.close_code}" if ws.close_code else "connection lost"
        except ProtocolViolation as e:
            self._violation(e)
            await close_ws(ws, 1002, "protocol violation")
            return f"protocol violation: {e}"

    def _violation(self, e: ProtocolViolation) -> None:
        log.warning("notify client %s: %s; reconnecting", self.member, e)
        now = time.monotonic()
        self._violations.append(now)
        while self._violations and self._violations[0] < now - _VIOLATION_WINDOW:
            self._violations.popleft()
        if len(self._violations) > _MAX_VIOLATIONS:
            failed = ClientFailed(f"the server broke the protocol {len(self._violations)} times "
                                  f"in {_VIOLATION_WINDOW:.0f} s; last: {e}")
            raise failed from e

    async def _backpressure(self) -> None:
        """Stop reading while a group holds `max_queued_events` events the application has not
        taken (G11, G14): unread frames stay in the socket, and the server's bounds take over."""
        bound = self.options.max_queued_events
        if bound is None:
            return
        for g in list(self._groups.values()):
            if g._left or g._queue.qsize() < bound:
                continue
            g._room.clear()
            self._paused_by = g.name
            log.log(logging.DEBUG if g._paused else logging.WARNING,
                    "notify client %s: %d events of %s not taken by the application; "
                    "reading paused until it takes %d", self.member, g._queue.qsize(), g.name,
                    g._queue.qsize() - bound // 2)
            g._paused += 1
            try:
                await g._room.wait()
            finally:
                self._paused_by = None

    def _lost(self, reason: str) -> None:
        self._ws = None
        # start with the next server: the one this connection was on may be the one that died
        self._next_url = (self._at + 1) % len(self.urls)
        self._lost_at = time.time()
        self._set_state(ConnectionState.RECONNECTING)
        for p in self._pending.values():
            p.sent = False  # unanswered: sent again, with the same id, after the resume
        self._unsent = True
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
            if self._closing and self._ws is not None:
                # close() came as the handshake ended, and Python 3.11's wait_for() can return
                # the result instead of the cancellation: close() no longer sees this connection
                await close_ws(self._ws)
                return False
            gap_ms = 0.0 if self._lost_at is None else (time.time() - self._lost_at) * 1000
            self._log("client.reconnect", gap_ms=round(gap_ms, 3), resumed=resumed)
            while self._refreshes:  # the hello carried the new token: it is in force
                fut = self._refreshes.popleft()
                if not fut.done():
                    fut.set_result(None)
            for name, g in self.protocol.groups.items():
                handle = self._groups.get(name)
                if g.phase is not GroupPhase.LEFT and handle is not None:
                    handle._join_retries = 0
                    self._rejoin(handle)
            self._set_state(ConnectionState.CONNECTED)
            self._wake_writer.set()
            return True
        return False

    def _rejoin(self, handle: Group) -> None:
        """Join `handle`'s group again on this connection: with its resume point, or afresh
        when it has none (never installed, or its resume point was refused)."""
        req = f"r{next(self._reqs)}"
        self.protocol.join(req, handle.name, resume=True, accept_from=handle.accept_from)
        waiter = self._joins.get(handle.name)
        if waiter is not None:
            self._joins[handle.name] = (req, waiter[1])

    async def _write(self) -> None:
        """The only task that sends: frames leave in the order the protocol made them."""
        while self.state is not ConnectionState.CLOSED:
            await self._wake_writer.wait()
            self._wake_writer.clear()
            ws = self._ws
            if ws is None:
                continue
            self._queue_publishes()
            frames = self.protocol.data_to_send()
            if not frames:
                continue
            try:
                # Every frame of this run in one write to the socket (websockets' documented
                # `send_context` pattern): under load a publisher sends dozens at once, and a
                # `send()` each cost a lock and a system call each (issue 14).
                async with ws.send_context():
                    send_text = ws.protocol.send_text
                    for f in frames:
                        send_text(orjson.dumps(f))
                    # the frames' bytes (the sans-I/O layer's output), joined: one write
                    ws.transport.write(b"".join(ws.protocol.data_to_send()))
            except (ConnectionClosed, OSError):
                continue  # the reader sees it too; unanswered publishes are resent

    def _queue_publishes(self) -> None:
        """Hand the protocol every waiting publish whose group accepts sends, in order. (Only
        when some may be unsent: a publisher with a thousand in flight must not walk them all
        for every answer it receives.)"""
        if not self._unsent:
            return
        held = False
        for p in self._pending.values():
            if p.sent:
                continue
            g = self.protocol.groups.get(p.group)
            if g is None or not g.can_send:
                held = True
                continue
            if not p.frame["same_view"] and p.frame["view"] > g.view:
                p.frame["view"] = g.view  # stamped in a view of a log that was reset
            self.protocol.send(p.frame)
            p.sent = True
        self._unsent = held

    def _kick(self) -> None:
        self._wake_writer.set()

    # -- receiving -------------------------------------------------------------------------------

    def _receive(self, data: str | bytes) -> None:
        """One frame from the server. Raises `ProtocolViolation` (after handing over what the
        frames before the bad one produced) when it breaks the protocol."""
        try:
            frame = orjson.loads(data)
        except orjson.JSONDecodeError as e:
            raise ProtocolViolation(f"a frame that is not JSON: {e}") from e
        if not isinstance(frame, dict):
            raise ProtocolViolation(f"a frame that is not an object: {str(frame)[:200]}")
        try:
            events, replies = self.protocol.receive(frame)
        except ProtocolViolation as e:
            self._dispatch(e.events, e.replies)
            raise
        self._dispatch(events, replies)

    def _dispatch(self, events: list[GroupEvent], replies: list[Reply]) -> None:
        now = time.time()
        for e in events:
            self._on_event(e, now)
        for r in replies:
            self._on_reply(r)
        if self._unsent or self.protocol.has_output():
            self._kick()  # ACKs, flush_ok, and publishes a view change was holding

    def _on_event(self, e: GroupEvent, now: float) -> None:
        g = self._groups.get(e.group)
        if type(e) is Message:  # the hot path: one check, and no log record unless logging
            if self._events_log is not None:
                self._log("client.deliver", group=e.group, offset=e.offset, stream=e.stream,
                          seq=e.seq, sender=e.sender, sent_ts=e.ts, recv_ts=now,
                          atomic=e.atomic)
            if g is not None:
                handler = g._handler
                if handler is None:
                    g._queue.put_nowait(e)
                else:  # `Group._hand` for a message, inlined (the hot path)
                    g._delivered[e.stream] = e.seq
                    try:
                        handler(e)
                    except Exception:
                        g._handler_raised(e)
            return
        if isinstance(e, ViewInstalled):
            self._log("client.view", group=e.group, view=e.view, members=list(e.members))
            if g is not None:
                g.view = View(e.view, e.members)
                g._join_retries = 0
            elif e.group in self._abandoned and self.member in e.members:
                # a join given up on (timed out) came through after all: undo it
                self.protocol.leave(f"l{next(self._reqs)}", e.group)
            waiter = self._joins.get(e.group)
            if waiter is not None and self.member in e.members:
                del self._joins[e.group]
                if not waiter[1].done():
                    waiter[1].set_result(e)
        elif isinstance(e, Reset):
            log.warning("notify client %s: %s reset (%s): epoch %d offset %d -> epoch %d "
                        "offset %d", self.member, e.group, e.reason, e.old_epoch, e.old_offset,
                        e.new_epoch, e.new_offset)
            self._log("client.reset", group=e.group, reason=e.reason, old_epoch=e.old_epoch,
                      from_offset=e.old_offset, epoch=e.new_epoch, offset=e.new_offset)
            if e.new_epoch != e.old_epoch:
                # The views their stamps name are gone with the old log: a `same_view`
                # publish cannot be checked against them, so it is refused, never misapplied.
                self._fail_group(e.group, PublishRejected("stale_view"), same_view_only=True)
        elif isinstance(e, Removed):
            self._abandoned.discard(e.group)
            leave = self._leaves.pop(e.group, None)
            if leave is not None and not leave[1].done():
                leave[1].set_result(None)
            self._fail_group(e.group, GroupLeftError(f"no longer a member of {e.group}"))
        if g is not None:
            if g._handler is None:
                g._queue.put_nowait(e)
            else:
                g._hand(e)
            if isinstance(e, Removed):  # left, or removed by the group: this handle is done
                g._left = True
                g._room.set()
                g._queue.put_nowait(_END)

    def _fail_group(self, group: str, error: NotifyError, *, sent_too: bool = False,
                    same_view_only: bool = False) -> None:
        for pid, p in list(self._pending.items()):
            if p.group != group or (p.sent and not sent_too) or (
                    same_view_only and not p.frame["same_view"]):
                continue
            del self._pending[pid]
            self._settle(p, error=error)

    def _on_reply(self, r: Reply) -> None:
        if type(r) is Published:  # the hot path of a publisher
            p = self._pending.get(r.id)
            if p is not None:
                p.offset = r.offset
                if not p.atomic:
                    del self._pending[r.id]
                    self._settle(p, PublishResult(r.id, r.offset))
        elif isinstance(r, Outcome):
            p = self._pending.pop(r.id, None)
            if p is not None:
                self._settle(p, PublishResult(r.id, p.offset or r.offset, r.committed, r.reason))
        elif isinstance(r, Rejected):
            p = self._pending.get(r.id)
            if p is None:
                return
            if r.code == "view_changing":  # it crossed a view change: send it after it
                p.sent = False
                self._unsent = True
                return
            del self._pending[r.id]
            self._settle(p, error=PublishRejected(r.code))
        elif isinstance(r, CheckpointStored):
            fut = self._checkpoints.pop(r.req, None)
            if fut is not None and not fut.done():
                fut.set_result(r)
        elif isinstance(r, Refreshed):
            if self._refreshes:
                waiting = self._refreshes.popleft()
                if not waiting.done():
                    waiting.set_result(None)
        elif isinstance(r, ServerError):
            self._on_error(r)

    #: `error` codes without `req` that answer a `refresh`
    _REFRESH_REFUSALS = frozenset({"token_invalid", "token_expired", "member_mismatch"})

    def _on_error(self, r: ServerError) -> None:
        g = self.protocol.group_of_join(r.req)
        if g is not None and g.phase is GroupPhase.JOINING and g.name in self._groups:
            self._join_refused(self._groups[g.name], r)
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
        if r.req is None and r.code in self._REFRESH_REFUSALS and self._refreshes:
            waiting = self._refreshes.popleft()
            if not waiting.done():
                waiting.set_exception(ServerRefused(r.code, r.message))
        self.errors.append(r)

    def _join_refused(self, handle: Group, r: ServerError) -> None:
        """The server refused the join under way for `handle` (issue 16: never leave a group
        that looks joined but is not).

        - `join_pending` (an earlier join of this member is still being withdrawn) and
          `unavailable` (the group cannot be read from the log right now: a cluster node is
          taking it over, or the log is electing a leader): the same join again, resume point
          included, after a backoff delay (a few times). Both pass; a reset would throw away
          a resume point that is still good.
        - The join presented a resume point: whatever the code (`offset_unavailable`: another
          epoch, or out of retention; `bad_resume`; any other), no later attempt can serve it.
          Join afresh, with state transfer when the group has a `StateProvider` (G8 → G9); the
          application gets a `Reset`, then the new view.
        - A join without one: the application's `join()` raises `ServerRefused`; a group it had
          already joined is over (`Removed` with the code as `reason`), since the SDK cannot
          get it back."""
        g = self.protocol.groups[handle.name]
        if r.code in _RETRIED_JOIN_REFUSALS and handle._join_retries < _JOIN_PENDING_RETRIES:
            handle._join_retries += 1
            delay = self.options.backoff.delay(handle._join_retries, self._rng)
            asyncio.get_running_loop().call_later(delay, self._retry_join, handle, g.join_req)
            return
        if g.resuming:
            log.info("notify client %s: %s refused our resume point (%s: %s); joining afresh",
                     self.member, handle.name, r.code, r.message)
            req = f"r{next(self._reqs)}"
            self.protocol.join_afresh(req, handle.name, r.code,
                                      want_state=handle._state is not None,
                                      accept_from=handle.accept_from)
            handle._awaiting_state = handle._state is not None
            waiter = self._joins.get(handle.name)
            if waiter is not None:
                self._joins[handle.name] = (req, waiter[1])
            self._kick()
            return
        g.phase = GroupPhase.LEFT
        waiter = self._joins.pop(handle.name, None)
        if waiter is not None:  # the application's join(): it raises, and drops the handle
            if not waiter[1].done():
                waiter[1].set_exception(ServerRefused(r.code, r.message))
            return
        log.warning("notify client %s: %s refused to let this member back in (%s: %s)",
                    self.member, handle.name, r.code, r.message)
        self._fail_group(handle.name, GroupLeftError(
            f"{handle.name}: the server refused to let this member back in ({r.code})"),
            sent_too=True)
        self._on_event(Removed(handle.name, g.view, r.code), time.time())

    def _retry_join(self, handle: Group, req: str) -> None:
        """(A loop callback.) Send a join refused `join_pending` again, unless something else
        happened to the group since."""
        try:
            g = self.protocol.groups.get(handle.name)
            if (self._ws is None or self._groups.get(handle.name) is not handle or g is None
                    or g.phase is not GroupPhase.JOINING or g.join_req != req):
                return  # reconnected (it rejoined), installed, left or closed meanwhile
            self._rejoin(handle)
            self._kick()
        except Exception:  # a loop callback has no owner to tell: log it, never lose it
            log.exception("notify client %s: retrying the join of %s failed", self.member,
                          handle.name)

    # -- requests --------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _deadline(self, what: str) -> AsyncIterator[None]:
        """Bound a request's wait by `request_timeout` (RequestTimeout)."""
        limit = self.options.request_timeout
        try:
            async with asyncio.timeout(limit):
                yield
        except TimeoutError:
            hint = ""
            if self._paused_by is not None:
                hint = (f" (reading is paused: the application is not taking the events of "
                        f"{self._paused_by})")
            elif self.state is not ConnectionState.CONNECTED:
                hint = f" ({self.state.value})"
            raise RequestTimeout(f"{what}: no answer within request_timeout={limit} s"
                                 f"{hint}") from None

    async def join(self, name: str, *, accept_from: str = "members",
                   resume_from: dict[str, Any] | None = None, want_state: bool = False,
                   state: StateProvider | None = None) -> Group:
        """Join `name` and wait for the first view that has this member.

        `resume_from` is a `Group.resume_point()` saved by an earlier process of this member:
        the server then sends only what was missed since (durable catch-up, G8); if it can no
        longer do so, the group is joined afresh and the first event is a `Reset`.
        `state` is this member's `StateProvider`: it serves joiners, and with `want_state=True`
        it is restored from a member's snapshot before any later event (G9).
        Raises `RequestTimeout` after `request_timeout`."""
        if want_state and state is None:
            raise ValueError("want_state=True needs a StateProvider to restore into")
        if self.state is ConnectionState.CLOSED:
            raise self._closed_error()
        if name in self._groups and not self._groups[name]._left:
            raise ServerRefused("already_member", f"already joined {name}")
        self._abandoned.discard(name)
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
            async with self._deadline(f"join {name}"):
                installed = await fut
        except NotifyError as e:
            if self._groups.get(name) is group:
                del self._groups[name]
            if self._joins.get(name, (None, None))[1] is fut:
                del self._joins[name]
            if isinstance(e, RequestTimeout):
                self._abandoned.add(name)  # left if the server installs it after all
            group._room.set()
            raise
        group.view = View(installed.view, installed.members)
        return group

    async def refresh_token(self, token: str) -> None:
        """Present a new token before the current one expires (the server closes a connection
        whose token expired with 4005). Later reconnects use it too. Returns when the server
        has it in force; raises `ServerRefused` (`member_mismatch`, `token_invalid`,
        `token_expired`: the connection keeps its old token) or `RequestTimeout`."""
        if self.state is ConnectionState.CLOSED:
            raise self._closed_error()
        self._token = token
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._refreshes.append(fut)
        self.protocol.send({"type": "refresh", "token": token})
        self._kick()
        try:
            async with self._deadline("refresh_token"):
                await fut
        finally:
            with contextlib.suppress(ValueError):
                self._refreshes.remove(fut)

    def _check_payload(self, group: Group, data: bytes) -> None:
        limit = self._limits.get("max_frame_bytes")
        if isinstance(limit, int) and len(data) + len(group.name) + _PUBLISH_OVERHEAD > limit:
            raise PayloadTooLarge(f"{group.name}: a payload of {len(data)} bytes does not fit "
                                  f"in the server's max_frame_bytes={limit}")

    def _submit(self, group: Group, data: bytes, order: str, atomic: bool, same_view: bool,
                publish_id: str | None) -> tuple[str, _Pending]:
        """Queue a publish (checked now: it raises before anything is queued)."""
        if group._left:
            raise GroupLeftError(f"left {group.name}")
        if self.state is ConnectionState.CLOSED:
            raise self._closed_error()
        self._check_payload(group, data)
        if len(self._pending) >= self.options.max_pending_publishes:
            raise PublishQueueFull(f"{len(self._pending)} publishes already waiting "
                                   f"(max_pending_publishes={self.options.max_pending_publishes})")
        pid = publish_id or f"{self._id_prefix}{next(self._ids)}"
        frame = self.protocol.publish_frame(f"p{next(self._reqs)}", group.name, pid,
                                            orjson.Fragment(data), order=order, atomic=atomic,
                                            same_view=same_view)
        p = _Pending(group.name, frame, atomic, asyncio.get_running_loop().create_future())
        self._pending[pid] = p
        self._unsent = True
        self._kick()
        return pid, p

    @staticmethod
    def _settle(p: _Pending, result: PublishResult | None = None, *,
                error: BaseException | None = None) -> None:
        if p.timer is not None:
            p.timer.cancel()
        if p.result.done():
            return
        if error is not None:
            p.result.set_exception(error)
        else:
            p.result.set_result(result)  # type: ignore[arg-type]

    async def _publish(self, group: Group, data: bytes, order: str, atomic: bool,
                       same_view: bool, publish_id: str | None) -> PublishResult:
        pid, p = self._submit(group, data, order, atomic, same_view, publish_id)
        try:
            async with self._deadline(f"publish {pid} to {group.name}"):
                return await p.result
        except RequestTimeout:
            if self._pending.get(pid) is p:
                del self._pending[pid]  # not sent again; a reply that still comes is ignored
            raise

    def _publish_nowait(self, group: Group, data: bytes, order: str, atomic: bool,
                        same_view: bool, publish_id: str | None) -> asyncio.Future[PublishResult]:
        pid, p = self._submit(group, data, order, atomic, same_view, publish_id)
        limit = self.options.request_timeout
        if limit is not None:
            p.timer = asyncio.get_running_loop().call_later(limit, self._expire, pid, p, limit)
        return p.result

    def _expire(self, pid: str, p: _Pending, limit: float) -> None:
        """(A loop callback.) A `publish_nowait` got no answer within `request_timeout`."""
        if self._pending.get(pid) is p:
            del self._pending[pid]  # not sent again; a reply that still comes is ignored
        p.timer = None
        self._settle(p, error=RequestTimeout(
            f"publish {pid} to {p.group}: no answer within request_timeout={limit} s"
            f" ({self.state.value})"))

    async def _leave(self, group: Group) -> None:
        if group._left:
            return
        group._left = True
        group._room.set()
        req = f"l{next(self._reqs)}"
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._leaves[group.name] = (req, fut)
        self.protocol.leave(req, group.name)
        self._kick()
        try:
            async with self._deadline(f"leave {group.name}"):
                await fut
        finally:
            if self._leaves.get(group.name, (None, None))[1] is fut:
                del self._leaves[group.name]

    async def _serve_state(self, group: Group, request: StateRequested) -> None:
        """Be the donor: snapshot now (the iterator is exactly at the joiner's point) and send
        it as chunks, with the per-stream positions the snapshot covers."""
        snapshot = group._state.snapshot() if group._state is not None else b""
        await self._send_state(group, request, snapshot, dict(group._delivered))

    async def _send_state(self, group: Group, request: StateRequested, snapshot: bytes,
                          covered: dict[str, int]) -> None:
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
        position = self.protocol.groups[group.name].snapshot_point(group._base, group._delivered)
        position["view"] = group.view.version if group.view is not None else 0
        chunks = (await asyncio.to_thread(encode, snapshot)) if len(snapshot) > _THREAD_ENCODE \
            else encode(snapshot)
        req = f"c{next(self._reqs)}"
        fut: asyncio.Future[CheckpointStored] = asyncio.get_running_loop().create_future()
        self._checkpoints[req] = fut
        self.protocol.checkpoint(req, group.name, chunks, position)
        self._kick()
        try:
            async with self._deadline(f"checkpoint of {group.name}"):
                stored = await fut
        finally:
            self._checkpoints.pop(req, None)
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
        #: events for the application; bounded by the reader (`Client._backpressure`), which
        #: waits for `_room` when the queue reaches `max_queued_events`
        self._queue: EventQueue[Any] = EventQueue()
        self._room = asyncio.Event()
        self._room.set()
        self._paused = 0  # times the reader waited for this group
        self._join_retries = 0
        self._left = False
        #: last seq handed to the application, per stream (what a snapshot taken now covers),
        #: and the offset at or below which it has been handed every message
        self._delivered: dict[str, int] = {}
        self._base = 0
        #: joined with want_state and the StateReceived is not handed over yet
        self._awaiting_state = False
        #: set by `on_event`: events go to it as they arrive instead of to `_queue`
        self._handler: Callable[[GroupEvent], object] | None = None
        #: state sends started from a handler (kept: a task nobody holds may vanish)
        self._serving: set[asyncio.Task[None]] = set()

    async def publish(self, payload: Any, *, order: str = "fifo", atomic: bool = False,
                      same_view: bool = False, publish_id: str | None = None) -> PublishResult:
        """Send `payload` to the group (this member receives it too). Returns once the server
        stored it; for `atomic=True`, once it is committed or aborted (`committed`).

        While the connection is down or a view change is under way the publish waits (bounded
        by `max_pending_publishes`) and is sent after, with the same id: never twice.

        The payload is serialised here: one JSON cannot carry (a `Decimal`, a `set`, an integer
        beyond 64 bits...) raises `TypeError` at once and nothing is sent; one over the
        server's frame limit raises `PayloadTooLarge`. Raises `RequestTimeout` when there is
        no answer within `request_timeout`."""
        data = self._encode(payload, order)
        return await self._client._publish(self, data, order, atomic, same_view, publish_id)

    def publish_nowait(self, payload: Any, *, order: str = "fifo", atomic: bool = False,
                       same_view: bool = False,
                       publish_id: str | None = None) -> asyncio.Future[PublishResult]:
        """`publish`, without waiting: queue it and return a future of its result at once, so
        a publisher can have many publishes in flight without a task for each (pipelining).
        The same checks raise here, before anything is queued (`PublishQueueFull` bounds how
        many wait); the future fails with `RequestTimeout` after `request_timeout`. Await the
        futures (or `asyncio.gather` them) to learn their offsets and outcomes."""
        data = self._encode(payload, order)
        return self._client._publish_nowait(self, data, order, atomic, same_view, publish_id)

    def _encode(self, payload: Any, order: str) -> bytes:
        """The checks of a publish that need no connection: at the call, before anything is
        queued."""
        if order not in ("fifo", "total"):
            raise ValueError(f"order must be 'fifo' or 'total', not {order!r}")
        try:
            data = orjson.dumps(payload)
        except TypeError as e:
            raise TypeError(f"{self.name}: the payload cannot be sent as JSON: {e}") from e
        return data

    async def leave(self) -> None:
        """Leave; returns when the group installed a view without this member (or raises
        `RequestTimeout`)."""
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

    def on_event(self, handler: Callable[[GroupEvent], object] | None) -> None:
        """Hand this group's events to `handler` as they arrive, in order, instead of queueing
        them for `async for` / `next_event` (the callback style: no queue and no task switch
        per event, for hot paths; `bench sdkrecv --handler` measures the difference).

        Events already queued are handed over first, before this returns. `handler` runs on the
        connection's reader: while it runs, nothing more is read, so a slow handler slows the
        reading (and the server's bounds apply, G11) rather than growing a queue. An exception
        it raises is logged and the next event comes anyway. The SDK answers state requests
        itself (the snapshot is taken between two handler calls, which is the joiner's point).
        `None` goes back to queueing. Iterating the group while a handler is set raises."""
        self._handler = handler
        if handler is None:
            return
        while not self._queue.empty():
            e = self._queue.get_nowait()
            if e is _END or isinstance(e, _Failed):
                self._queue.put_nowait(e)  # still there for a later iterator
                break
            self._hand(e)
        self._room.set()

    def _call(self, e: GroupEvent) -> None:
        assert self._handler is not None
        try:
            self._handler(e)
        except Exception:
            self._handler_raised(e)

    def _handler_raised(self, e: GroupEvent) -> None:
        log.exception("notify client %s: %s: the event handler raised on %s",
                      self._client.member, self.name, type(e).__name__)

    def _hand(self, e: GroupEvent) -> None:
        """What `_next` does with an event it takes off the queue, for the handler."""
        if isinstance(e, StateRequested):
            snapshot = self._state.snapshot() if self._state is not None else b""
            task = asyncio.get_running_loop().create_task(
                self._client._send_state(self, e, snapshot, dict(self._delivered)))
            self._serving.add(task)
            task.add_done_callback(self._served)
            return
        try:
            taken = self._taken(e)  # may run the StateProvider's restore()
        except Exception:
            self._handler_raised(e)
            taken = True
        if taken:
            self._call(e)

    def _served(self, task: asyncio.Task[None]) -> None:
        self._serving.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("notify client %s: %s: serving a state request failed: %r",
                      self._client.member, self.name, task.exception())

    def _taken(self, e: GroupEvent) -> bool:
        """The bookkeeping of an event handed to the application (not a state request): what
        a snapshot taken after it covers. False for what the application never sees."""
        if type(e) is Message:
            self._delivered[e.stream] = e.seq
            return True
        if isinstance(e, StateReceived):
            if e.snapshot is not None and self._state is not None:
                self._state.restore(e.snapshot)
            for stream, seq in e.streams.items():
                self._delivered[stream] = max(seq, self._delivered.get(stream, 0))
            self._awaiting_state = False
        if isinstance(e, ViewInstalled):
            if self._client.member in e.joined:  # (re)joined: its knowledge starts here
                self._delivered, self._base = {}, e.offset
            else:  # every message up to the install was handed over before it
                self._base = max(self._base, e.offset)
        elif isinstance(e, CaughtUp):
            self._base = max(self._base, e.offset)
        return isinstance(e, _APP_EVENTS)

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
        if self._handler is not None:
            raise RuntimeError(f"{self.name}: its events go to the handler set with on_event")
        while True:
            if not self._queue.empty():  # the common case under load: no timer, no task
                e = self._queue.get_nowait()
            elif timeout is None:
                e = await self._queue.get()
            else:
                e = await asyncio.wait_for(self._queue.get(), timeout)
            if not self._room.is_set() and self._queue.qsize() <= self._low_water():
                self._room.set()  # the reader may go on
            if type(e) is Message:  # the hot path
                self._delivered[e.stream] = e.seq
                return e
            if e is _END or isinstance(e, _Failed):
                self._queue.put_nowait(e)  # for the next call too
                if isinstance(e, _Failed):
                    raise e.error
                return None
            if isinstance(e, StateRequested):
                await self._client._serve_state(self, e)
                continue
            taken = self._taken(e)
            assert taken
            event: GroupEvent = e
            return event

    def _low_water(self) -> int:
        bound = self._client.options.max_queued_events
        return 0 if bound is None else bound // 2


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


def connect(url: str | Sequence[str], *, member: str, token: str | None = None,
            options: ClientOptions | None = None, event_log: Any = None,
            rng: random.Random | None = None) -> _Connect:
    """Connect to a notify server: `url` is one `ws://`/`wss://` URL, or a non-empty list of
    them (the nodes of a cluster), tried in turn (see the module docstring). Raises
    `ValueError` at once for an empty list or a URL that is not ws(s), `ConnectError` if no
    server can be reached and `ServerRefused` if one refuses the hello (bad member id, bad
    token)."""
    return _Connect(Client(url, member, token=token, options=options, event_log=event_log,
                           rng=rng))
