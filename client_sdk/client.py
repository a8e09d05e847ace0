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
import sys
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Generator, Sequence
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from client_sdk.batching import batch_limits, pack
from client_sdk.errors import (
    ClientFailed,
    ConnectError,
    Disconnected,
    GroupLeftError,
    NotifyError,
    PayloadTooLarge,
    PublishQueueFull,
    PublishRejected,
    Replaced,
    RequestTimeout,
    ServerRefused,
)
from client_sdk.events import (
    CheckpointStored,
    GroupEvent,
    InstanceReplaced,
    Message,
    Removed,
    Reply,
    Reset,
    ServerError,
    StateRequested,
    ViewInstalled,
    ViewResumed,
)
from client_sdk.group import _END, Group, _Failed
from client_sdk.handshake import DirectConnection, close_ws, handshake, server_urls
from client_sdk.options import (
    Backoff,
    ClientOptions,
    ConnectionState,
    PublishResult,
    StateProvider,
    View,
)
from client_sdk.presence import AUTO, DISCONNECTED_CLOSE, REPLACED_CLOSE, new_instance
from client_sdk.protocol import ClientProtocol, ProtocolViolation
from client_sdk.requests import (
    Answer,
    JoinedAfresh,
    RequestKind,
    RequestOutput,
    RetryJoin,
    StrayError,
)
from state_transfer import encode

log = logging.getLogger("client_sdk")

# What lived here before the split is importable from here still (errors.py, options.py,
# group.py, handshake.py hold it now).
__all__ = [
    "PUBLISH_OVERHEAD",
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
    "handshake",
    "server_urls",
]

#: snapshots larger than this are compressed and cut off the event loop
_THREAD_ENCODE = 1 << 20

#: bytes of a `publish` frame around its payload and group name, at most: the envelope
#: `{"type":"publish","req":…,"group":"","id":…,"view":…,"order":"total","atomic":false,
#: "same_view":false,"payload":}` is 191 bytes with 20-digit counters in `req`, `id` and
#: `view`, and the TypeScript SDK's `"ephemeral":true,` makes it 208. The server refuses (closes
#: on) a message over `max_frame_bytes` as a whole. The same value as web/sdk/src/client.ts.
PUBLISH_OVERHEAD = 256
_PUBLISH_OVERHEAD = PUBLISH_OVERHEAD  # its name before

#: more protocol violations than this within `_VIOLATION_WINDOW` seconds: give up (CLOSED)
_MAX_VIOLATIONS = 3
_VIOLATION_WINDOW = 60.0


# -- the client ---------------------------------------------------------------------------------


class Client:
    """Use `connect()`; see the module docstring.

    `urls` are the servers this client may use, in the order it tries them; `url` is the one it
    is connected to, or was last (the first of `urls` before any connection)."""

    def __init__(self, url: str | Sequence[str], member: str, *, token: str | None = None,
                 instance: str | None = AUTO, options: ClientOptions | None = None,
                 event_log: Any = None, rng: random.Random | None = None) -> None:
        self.urls = server_urls(url)
        self.url, self._token = self.urls[0], token
        #: whether the SDK picked the instance (and so may take another after a clash)
        self._own_instance = instance == AUTO
        self.protocol = ClientProtocol(member, new_instance() if instance == AUTO else instance)
        #: the member id views list: `user#instance` (`user` when `instance=None`)
        self.member = self.protocol.me
        #: the index in `urls` of the next attempt, and of the URL connected (or last)
        self._next_url = 0
        self._at = 0
        self.options = options or ClientOptions()
        self.state = ConnectionState.CONNECTING
        self._events_log = event_log
        self._rng = rng or random.Random()
        self._ws: ClientConnection | None = None
        self._limits: dict[str, Any] = {}
        #: how the writer packs frames into `batch` messages (client_sdk/batching.py)
        self._batching = (1, 0)
        self._groups: dict[str, Group] = {}
        # The futures of the requests under way, keyed as the protocol's `Answer`s are (the
        # protocol's request table matches the replies: `client_sdk.requests`).
        #: publishes, by id; and the deadlines of the `publish_nowait` ones
        self._publishes: dict[str, asyncio.Future[PublishResult]] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        #: joins and leaves, by group
        self._joins: dict[str, asyncio.Future[ViewInstalled | ViewResumed]] = {}
        self._leaves: dict[str, asyncio.Future[None]] = {}
        #: checkpoint uploads by req, token refreshes by key
        self._checkpoints: dict[str, asyncio.Future[CheckpointStored]] = {}
        self._refreshes: dict[str, asyncio.Future[None]] = {}
        #: publish ids: random per client, then counted (unique without a UUID per publish)
        self._id_prefix = uuid.uuid4().hex[:16] + "-"
        self._ids = itertools.count(1)
        self._listeners: list[Callable[[ConnectionState, ConnectionState], None]] = []
        self._replaced_listeners: list[Callable[[InstanceReplaced], None]] = []
        self._wake_writer = asyncio.Event()
        self._main: asyncio.Task[None] | None = None
        self._lost_at: float | None = None
        self._closing = False
        self._violations: deque[float] = deque()
        #: the group whose full queue stopped the reader, while it is stopped
        self._paused_by: str | None = None
        #: a group's queue reached `max_queued_events` since the reader last paused for room
        #: (set where events are queued, so the direct read checks one flag per frame, not
        #: every group's queue)
        self._queue_full = False
        bound = self.options.max_queued_events
        self._queue_bound = sys.maxsize if bound is None else bound
        #: why the client is CLOSED, if not by `close()`
        self.failure: NotifyError | None = None
        #: `error` frames that answered no request of ours (e.g. a refused token refresh)
        self.errors: list[ServerError] = []

    @property
    def user(self) -> str:
        """Who this client is logged in as (with authentication, the token's `sub`)."""
        return self.protocol.user

    @property
    def instance(self) -> str | None:
        """This client's instance of its user (None: it named none, `instance=None`)."""
        return self.protocol.instance

    @property
    def session(self) -> str | None:
        """The server's session of this client (from the last `welcome`)."""
        return self.protocol.session

    def waiting(self) -> dict[str, int]:
        """How many requests of each kind (`join`, `leave`, `publish`, `checkpoint`,
        `refresh`) wait for an answer."""
        return {"join": len(self._joins), "leave": len(self._leaves),
                "publish": len(self._publishes), "checkpoint": len(self._checkpoints),
                "refresh": len(self._refreshes)}

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
            if main is not None:
                main.cancel()
                # (wait, not gather: a gather that is cancelled waits for `main` all the same,
                # so the caller's own timeout could not cut this short; `_run` raises nothing)
                await asyncio.wait((main,))
        finally:  # even when the application's own timeout cuts this close short: `main`
            # stops, what waits is answered, the groups end (`_finish` runs once)
            if main is not None:
                main.cancel()
            self._finish(NotifyError("client closed"), by_app=True)

    def _finish(self, error: NotifyError, *, by_app: bool = False) -> None:
        if self.state is ConnectionState.CLOSED:
            return  # (finished already: a close cut short, then `main` failing as it ends)
        if not by_app and self.failure is None:
            self.failure = error
        self._set_state(ConnectionState.CLOSED)
        waiting: list[asyncio.Future[Any]] = [*self._publishes.values(), *self._joins.values(),
                                              *self._leaves.values(),
                                              *self._checkpoints.values(),
                                              *self._refreshes.values()]
        for timer in self._timers.values():
            timer.cancel()
        for table in (self._publishes, self._timers, self._joins, self._leaves,
                      self._checkpoints, self._refreshes):
            table.clear()
        self.protocol.close()
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

    def on_replaced(self, listener: Callable[[InstanceReplaced], None]) -> None:
        """Call `listener(event)` when another connection claims this client's instance (a
        clash, see `InstanceReplaced`): the client took a new instance (`event.new`), or is
        CLOSED with a `Replaced` failure (`event.new` is None). Isolated like state listeners."""
        self._replaced_listeners.append(listener)

    def _replaced(self) -> bool:
        """Close 4002: another connection holds this instance now. Never reconnect into the
        clash (issue 29: two clients replacing each other flush the whole group each time):
        take a new instance if the SDK picked this one, else finish. Returns whether to go on."""
        old = self.member
        if self._own_instance:
            self.protocol.take_instance(new_instance())
            self.member = self.protocol.me
            event = InstanceReplaced(old, self.member)
            log.warning("notify client %s: another connection claimed this instance; "
                        "going on as %s", old, self.member)
        else:
            event = InstanceReplaced(old, None)
            log.warning("notify client %s: another connection claimed this instance "
                        "(close 4002); closing", old)
        self._log("client.replaced", old=old, new=event.new)
        for listener in self._replaced_listeners:
            try:
                listener(event)
            except Exception:
                log.exception("notify client %s: replaced listener %r failed", old, listener)
        if event.new is None:
            self._finish(Replaced(old))
            return False
        return True

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
                                          hello=self.protocol.hello(resume, token=self._token))
        except ConnectError:
            self._next_url = (i + 1) % len(self.urls)
            raise
        if resume and i != self._at:
            log.info("notify client %s: reconnected to %s (was on %s)", self.member, self.urls[i],
                     self.url)
        self._at, self.url = i, self.urls[i]
        self._ws = ws
        self.protocol.receive(welcome)  # its session, for the next resume; its member
        self.member = self.protocol.me  # (with authentication, the token's `sub`)
        self._limits = dict(welcome.get("limits") or {})
        self._batching = batch_limits(self._limits)  # (this server's; none from an older one)
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
            if ws.close_code == REPLACED_CLOSE and not self._replaced():
                return
            if ws.close_code == DISCONNECTED_CLOSE:
                # the backend ended this user's sessions (its token revoked): reconnecting
                # with the same token would only be refused (token_revoked)
                log.warning("notify client %s: disconnected by the server (close 4007)",
                            self.member)
                self._finish(Disconnected(self.member))
                return
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
                if not isinstance(ws, DirectConnection) or ws.recv_messages.frames or \
                        ws.connection_lost_waiter.done():
                    data = await ws.recv(decode=False)  # orjson reads the bytes: no str
                    self._receive(data)
                    await self._backpressure()
                    continue
                # Nothing waits in websockets' queue: the connection hands each frame to
                # `_receive` as it is read, until it is lost, a frame raises, or a group's
                # queue is full (then the frames wait in websockets' queue, whose flow control
                # stops reading the socket, and this loop takes them again once there is room)
                await self._read_direct(ws)
        except ConnectionClosed:
            return f"closed {ws.close_code}" if ws.close_code else "connection lost"
        except ProtocolViolation as e:
            self._violation(e)
            await close_ws(ws, 1002, "protocol violation")
            return f"protocol violation: {e}"

    async def _read_direct(self, ws: DirectConnection) -> None:
        """Let `ws` hand frames to `_receive` (DirectConnection) until the connection is lost
        (returns: `recv()` then says so), a frame raises (raises it here, as `recv()` and
        `_receive` would have), a message waits for `recv()` (one in pieces), or a group holds
        `max_queued_events` events (returns, with the reading paused until it has room)."""
        stop: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue_full = False

        def direct(data: bytes | bytearray | memoryview | None) -> None:
            if data is not None:  # (None: a message waits in websockets' queue for `recv()`)
                try:
                    self._receive(data)
                except Exception as e:  # nothing more is handed over; the reader raises it
                    ws.direct = None
                    if not stop.done():
                        stop.set_exception(e)
                    return
                if not self._queue_full:
                    return
            ws.direct = None  # the next frames wait in websockets' queue
            if not stop.done():
                stop.set_result(None)

        ws.direct = direct
        lost = ws.connection_lost_waiter
        try:
            await asyncio.wait((stop, lost), return_when=asyncio.FIRST_COMPLETED)
        finally:
            ws.direct = None
        if stop.done():
            stop.result()  # raises what a frame raised
            await self._backpressure()
        else:
            stop.cancel()

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
        # unanswered publishes: sent again, with the same id, after the resume; a checkpoint
        # under way fails (part of it may be lost with the connection)
        self.protocol.connection_lost()
        self._answer(self.protocol.answers())
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
                # close() came during the handshake: it closes the connection it saw, then
                # cancels us, and this new one is not the one it saw
                await close_ws(self._ws)
                return False
            gap_ms = 0.0 if self._lost_at is None else (time.time() - self._lost_at) * 1000
            self._log("client.reconnect", gap_ms=round(gap_ms, 3), resumed=resumed)
            # the welcome answered the refreshes waiting (the hello carried the new token)
            self.protocol.rejoin_all()
            self._answer(self.protocol.answers())
            self._set_state(ConnectionState.CONNECTED)
            self._wake_writer.set()
            return True
        return False

    async def _write(self) -> None:
        """The only task that sends: frames leave in the order the protocol made them."""
        while self.state is not ConnectionState.CLOSED:
            await self._wake_writer.wait()
            self._wake_writer.clear()
            ws = self._ws
            if ws is None:
                continue
            frames = self.protocol.data_to_send()  # publishes waiting included
            if not frames:
                continue
            try:
                # Every frame of this run in one write to the socket (websockets' documented
                # `send_context` pattern): under load a publisher sends dozens at once, and a
                # `send()` each cost a lock and a system call each (issue 14).
                async with ws.send_context():
                    send_text = ws.protocol.send_text
                    most, size = self._batching
                    for message in pack([orjson.dumps(f) for f in frames], most, size):
                        send_text(message)
                    # the frames' bytes (the sans-I/O layer's output), joined: one write
                    ws.transport.write(b"".join(ws.protocol.data_to_send()))
            except (ConnectionClosed, OSError):
                continue  # the reader sees it too; unanswered publishes are resent

    def _kick(self) -> None:
        self._wake_writer.set()

    # -- receiving -------------------------------------------------------------------------------

    def _receive(self, data: str | bytes | bytearray | memoryview) -> None:
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
        """Hand the events to the groups, then settle what the protocol answered (`replies`
        are matched to requests by the protocol)."""
        now = time.time()
        for e in events:
            self._on_event(e, now)
        if self.protocol.requests.in_use:
            self._answer(self.protocol.answers())
        if self.protocol.requests.unsent or self.protocol.has_output():
            self._kick()  # ACKs, flush_ok, and publishes a view change was holding

    def _on_event(self, e: GroupEvent, now: float) -> None:
        g = self._groups.get(e.group)
        if type(e) is Message:  # the hot path: no log record unless logging
            is_message = True
            if self._events_log is not None:
                self._log("client.deliver", group=e.group, offset=e.offset, stream=e.stream,
                          seq=e.seq, sender=e.sender, sent_ts=e.ts, recv_ts=now,
                          atomic=e.atomic)
        else:
            is_message = False
            self._noted(e, g)
        if g is None:
            return
        handler = g._handler
        if handler is None:
            q = g._queue
            q.put_nowait(e)
            if q.qsize() >= self._queue_bound:
                self._queue_full = True  # the direct read pauses at the end of this frame
        elif type(e) is Message:  # `Group._hand` for a message, inlined (the hot path)
            g._delivered[e.stream] = e.seq
            try:
                handler(e)
            except Exception:
                g._handler_raised(e)
        else:
            g._hand(e)
        if not is_message and isinstance(e, Removed):  # left, or removed: this handle is done
            g._left = True
            g._room.set()
            g._queue.put_nowait(_END)

    def _noted(self, e: GroupEvent, g: Group | None) -> None:
        """What an event other than a message says to the log and to the group's view."""
        if isinstance(e, ViewInstalled):
            self._log("client.view", group=e.group, view=e.view, members=list(e.members))
            if g is not None:
                g.view = View(e.view, e.members)
        elif isinstance(e, Reset):
            log.warning("notify client %s: %s reset (%s): epoch %d offset %d -> epoch %d "
                        "offset %d", self.member, e.group, e.reason, e.old_epoch, e.old_offset,
                        e.new_epoch, e.new_offset)
            self._log("client.reset", group=e.group, reason=e.reason, old_epoch=e.old_epoch,
                      from_offset=e.old_offset, epoch=e.new_epoch, offset=e.new_offset)
        elif isinstance(e, Removed) and e.reason is not None:
            log.warning("notify client %s: removed from %s (%s)", self.member, e.group,
                        e.reason)

    def _answer(self, outputs: list[RequestOutput]) -> None:
        """Settle the futures of the requests the protocol says are over, and do what it asks
        of the host (a timer for a join to retry)."""
        for a in outputs:
            if type(a) is Answer:
                fut: asyncio.Future[Any] | None
                if a.kind is RequestKind.PUBLISH:  # the hot path of a publisher
                    fut = self._publishes.pop(a.key, None)
                    if self._timers:
                        timer = self._timers.pop(a.key, None)
                        if timer is not None:
                            timer.cancel()
                else:
                    fut = self._waiters(a.kind).pop(a.key, None)
                if fut is None or fut.done():
                    continue
                if a.error is not None:
                    fut.set_exception(a.error)
                else:
                    fut.set_result(a.value)
            elif isinstance(a, RetryJoin):
                handle = self._groups.get(a.group)
                if handle is not None:
                    delay = self.options.backoff.delay(a.attempt, self._rng)
                    asyncio.get_running_loop().call_later(delay, self._retry_join, handle, a.req)
            elif isinstance(a, JoinedAfresh):
                log.info("notify client %s: %s refused our resume point (%s: %s); joining "
                         "afresh", self.member, a.group, a.code, a.message)
                handle = self._groups.get(a.group)
                if handle is not None:
                    handle._awaiting_state = a.want_state
                self._kick()
            elif isinstance(a, StrayError):
                self.errors.append(a.error)

    def _waiters(self, kind: RequestKind) -> dict[str, asyncio.Future[Any]]:
        tables: dict[RequestKind, dict[str, Any]] = {
            RequestKind.JOIN: self._joins, RequestKind.LEAVE: self._leaves,
            RequestKind.CHECKPOINT: self._checkpoints, RequestKind.REFRESH: self._refreshes}
        return tables[kind]

    def _retry_join(self, handle: Group, req: str) -> None:
        """(A loop callback.) Send a join refused "not now" again, unless something else
        happened to the group since."""
        try:
            if self._ws is None or self._groups.get(handle.name) is not handle:
                return  # reconnected (it rejoined), or left or closed meanwhile
            if self.protocol.retry_join(handle.name, req):
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
        group = Group(self, name, accept_from, state)
        group._awaiting_state = want_state
        self._groups[name] = group
        fut: asyncio.Future[ViewInstalled | ViewResumed] = (
            asyncio.get_running_loop().create_future())
        self._joins[name] = fut
        self.protocol.open_join(name, accept_from=accept_from, resume_from=resume_from,
                                want_state=want_state, state_provider=state is not None)
        self._kick()
        try:
            async with self._deadline(f"join {name}"):
                installed = await fut
        except NotifyError as e:
            if self._groups.get(name) is group:
                del self._groups[name]
            if self._joins.get(name) is fut:
                del self._joins[name]
            # (timed out: left if the server installs it after all)
            self.protocol.give_up_join(name, timed_out=isinstance(e, RequestTimeout))
            group._room.set()
            raise
        # (a join with a resume point may be answered by the resume of this member's session:
        # the view goes on, its members as this protocol last knew them)
        members = installed.members if isinstance(installed, ViewInstalled) else (
            self.protocol.groups[name].members)
        group.view = View(installed.view, members)
        return group

    async def refresh_token(self, token: str) -> None:
        """Present a new token before the current one expires (the server closes a connection
        whose token expired with 4005). Later reconnects use it too. Returns when the server
        has it in force; raises `ServerRefused` (`member_mismatch`, `token_invalid`,
        `token_expired`, `token_revoked`: the connection keeps its old token) or
        `RequestTimeout`."""
        if self.state is ConnectionState.CLOSED:
            raise self._closed_error()
        self._token = token
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        key = self.protocol.open_refresh(token)
        self._refreshes[key] = fut
        self._kick()
        try:
            async with self._deadline("refresh_token"):
                await fut
        finally:
            self._refreshes.pop(key, None)
            self.protocol.forget_refresh(key)

    def _check_payload(self, group: Group, data: bytes) -> None:
        limit = self._limits.get("max_frame_bytes")
        if isinstance(limit, int) and len(data) + len(group.name) + PUBLISH_OVERHEAD > limit:
            raise PayloadTooLarge(f"{group.name}: a payload of {len(data)} bytes does not fit "
                                  f"in the server's max_frame_bytes={limit}")

    def _submit(self, group: Group, data: bytes, order: str, atomic: bool, same_view: bool,
                publish_id: str | None) -> tuple[str, asyncio.Future[PublishResult]]:
        """Queue a publish (checked now: it raises before anything is queued)."""
        if group._left:
            raise GroupLeftError(f"left {group.name}")
        if self.state is ConnectionState.CLOSED:
            raise self._closed_error()
        self._check_payload(group, data)
        if len(self._publishes) >= self.options.max_pending_publishes:
            raise PublishQueueFull(f"{len(self._publishes)} publishes already waiting "
                                   f"(max_pending_publishes={self.options.max_pending_publishes})")
        pid = publish_id or f"{self._id_prefix}{next(self._ids)}"
        self.protocol.open_publish(group.name, pid, orjson.Fragment(data), order=order,
                                   atomic=atomic, same_view=same_view)
        fut: asyncio.Future[PublishResult] = asyncio.get_running_loop().create_future()
        self._publishes[pid] = fut
        self._kick()
        return pid, fut

    def _forget_publish(self, pid: str, fut: asyncio.Future[PublishResult]) -> None:
        """Not sent again; a reply that still comes is ignored."""
        if self._publishes.get(pid) is fut:
            del self._publishes[pid]
            self.protocol.forget_publish(pid)

    async def _publish(self, group: Group, data: bytes, order: str, atomic: bool,
                       same_view: bool, publish_id: str | None) -> PublishResult:
        pid, fut = self._submit(group, data, order, atomic, same_view, publish_id)
        try:
            async with self._deadline(f"publish {pid} to {group.name}"):
                return await fut
        except RequestTimeout:
            self._forget_publish(pid, fut)
            raise

    def _publish_nowait(self, group: Group, data: bytes, order: str, atomic: bool,
                        same_view: bool, publish_id: str | None) -> asyncio.Future[PublishResult]:
        pid, fut = self._submit(group, data, order, atomic, same_view, publish_id)
        limit = self.options.request_timeout
        if limit is not None:
            self._timers[pid] = asyncio.get_running_loop().call_later(
                limit, self._expire, pid, group.name, fut, limit)
        return fut

    def _expire(self, pid: str, group: str, fut: asyncio.Future[PublishResult],
                limit: float) -> None:
        """(A loop callback.) A `publish_nowait` got no answer within `request_timeout`."""
        if self._publishes.get(pid) is fut:
            self._timers.pop(pid, None)
            self._forget_publish(pid, fut)
        if not fut.done():
            fut.set_exception(RequestTimeout(
                f"publish {pid} to {group}: no answer within request_timeout={limit} s"
                f" ({self.state.value})"))

    async def _leave(self, group: Group) -> None:
        if group._left:
            return
        group._left = True
        group._room.set()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._leaves[group.name] = fut
        req = self.protocol.open_leave(group.name)
        self._kick()
        try:
            async with self._deadline(f"leave {group.name}"):
                await fut
        finally:
            if self._leaves.get(group.name) is fut:
                del self._leaves[group.name]
                self.protocol.forget_leave(group.name, req)

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
        fut: asyncio.Future[CheckpointStored] = asyncio.get_running_loop().create_future()
        req = self.protocol.open_checkpoint(group.name, chunks, position)
        self._checkpoints[req] = fut
        self._kick()
        try:
            async with self._deadline(f"checkpoint of {group.name}"):
                stored = await fut
        finally:
            self._checkpoints.pop(req, None)
            self.protocol.forget_checkpoint(req)
        self._log("client.checkpoint", group=group.name, offset=stored.offset,
                  bytes=len(snapshot))
        return stored

    def _log(self, event: str, **fields: Any) -> None:
        if self._events_log is not None:
            self._events_log.write(event, time.time(), member=self.member,
                                   session=self.session, **fields)



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
            instance: str | None = AUTO, options: ClientOptions | None = None,
            event_log: Any = None, rng: random.Random | None = None) -> _Connect:
    """Connect to a notify server: `url` is one `ws://`/`wss://` URL, or a non-empty list of
    them (the nodes of a cluster), tried in turn (see the module docstring). Raises
    `ValueError` at once for an empty list or a URL that is not ws(s), `ConnectError` if no
    server can be reached and `ServerRefused` if one refuses the hello (bad member id, bad
    token, too many instances of the user).

    `member` is the user (with a token, its `sub`); `instance` this client's instance of it:
    `"auto"` (the default) picks a random one, so two processes of one user are two members
    (presence by user: `ViewInstalled.users`); a string names it (a clash with another
    connection of the same instance then closes the older with `Replaced`); None names none,
    and the member id is the user's (the protocol before instances)."""
    return _Connect(Client(url, member, token=token, instance=instance, options=options,
                           event_log=event_log, rng=rng))
