"""The WebSocket adapter: pumps frames and time between `websockets` and the sans-I/O `Hub`.

Everything that decides anything is in `notify.core`; this file owns the sockets, the tasks, the
clock, storage and the outboxes; the core is run by the `Driver` (notify/runtime) that every
host shares, and this server implements its ports (`Transport`, `Store`, `Observer`). Each
connection has an `Outbox` (its sender worker). Heartbeats are WebSocket pings, sent by the
timer for every connection (`Heartbeats`): a connection whose pong is late is closed as
`websockets` would (1011), and the hub treats that as any other lost connection.

Security and operations at the edge (docs/security.md, docs/operations.md): tokens in `hello` and
`refresh` are verified here by a `TokenVerifier` (none configured = development mode, every
client names itself); browser `Origin`s are checked against an allow-list and connection counts
against their limits before the WebSocket handshake; plain HTTP `GET /metrics`, `/healthz` and
`/readyz` on the same port are answered by `process_request`; `stop()` is the graceful
shutdown: stop accepting, close every client with 4003 (reconnect elsewhere), then flush the
streams, the log and the event log.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import secrets
import ssl as ssl_module
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import orjson
import structlog
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from notify.core import Action, CoreConfig, Hub, Join, LogEvent, Publish, Send, Write
from notify.core.actions import (
    CommitCheckpoint,
    DiscardCheckpoint,
    Error,
    Rejected,
    StoreCheckpointChunk,
)
from notify.core.auth import Identity
from notify.core.checkpoint import Checkpoint
from notify.core.errors import CloseCode, ErrorCode
from notify.core.events import Ack, CheckpointChunk, FlushOk, History, Leave, Req, StateChunk
from notify.errortext import described
from notify.eventlog import EventLog
from notify.eventloop import loop_name
from notify.runtime import CheckpointAction, Done, Driver, Fetched, Paged, bump
from notify.runtime.placement import EdgeSession, LocalPlacement, Placement, RawFrame
from notify.server.auth import AuthFailure, TokenVerifier
from notify.server.checkpoints import CheckpointIO
from notify.server.direct import DirectServerConnection
from notify.server.heap import release_free_memory
from notify.server.heartbeat import Heartbeats
from notify.server.listener import stop_accepting
from notify.server.metrics import CONTENT_TYPE, Metrics, ServerStats
from notify.server.outbox import Flusher, Outbox
from notify.storage.base import MessageLog, StoredGroup
from notify.storage.memory import MemoryLog
from notify.supervision import LongTask
from notify.wire import Authenticate, Batch, One, Refresh, encode_publish, parse_any, parse_one

T = TypeVar("T")

log = structlog.get_logger("notify.server")

#: client frames that belong to one group: the placement says where the group lives
GROUP_FRAMES = (Join, Publish, Ack, FlushOk, Leave, StateChunk, CheckpointChunk, History)


@dataclass(frozen=True, slots=True)
class _Sink:
    """One of the server's own connections (`NotifyServer.attach`)."""

    #: the trusted sender it publishes as
    sender: str
    #: takes what the core sends it, serialised
    frames: Callable[[bytes], None]
    #: hears that the core closed it
    closed: Callable[[], None]


class StoreError(Exception):
    """A store call run off the loop (`NotifyServer.off_loop`) failed: its message says how."""


class NotifyServer:
    def __init__(self, config: CoreConfig | None = None, *, host: str = "127.0.0.1",
                 port: int = 8765, store: MessageLog | None = None,
                 event_log: EventLog | None = None,
                 clock: Callable[[], float] | None = None,
                 verifier: TokenVerifier | None = None,
                 origins: Sequence[str] | None = None,
                 ssl: ssl_module.SSLContext | None = None,
                 max_connections: int = 0, max_connections_per_ip: int = 0,
                 listen_backlog: int = 4096, shutdown_grace: float = 5.0, drain_delay: float = 0.0,
                 on_halt: Callable[[str], None] | None = None,
                 placement: Placement | None = None) -> None:
        config = config or CoreConfig(event_log=event_log is not None)
        self.config = replace(config, metrics=True)
        self.host, self.port = host, port
        #: None: development mode (no authentication; clients name themselves)
        self.verifier = verifier
        #: allowed browser origins (None: any); a client that sends no Origin is not a browser
        self.origins = None if origins is None else list(origins)
        self.ssl = ssl
        self.max_connections, self.max_connections_per_ip = max_connections, max_connections_per_ip
        if listen_backlog < 1:  # (asyncio's loop would then accept nothing, and spin)
            raise ValueError(f"listen_backlog must be at least 1, not {listen_backlog}")
        #: `listen`'s backlog (ServerSettings.listen_backlog says why not asyncio's 100)
        self.listen_backlog = listen_backlog
        self.shutdown_grace, self.drain_delay = shutdown_grace, drain_delay
        self.draining = False
        self.metrics = Metrics(self)
        self._per_ip: dict[str, int] = {}
        #: the reason of each group's latest proposal (metrics count it at the install)
        self._proposed: dict[str, str] = {}
        self.hub = Hub(self.config, new_token=lambda: secrets.token_urlsafe(18),
                       # A new log's epoch: random, never a clock reading (a clock stepped
                       # back could give a memory store's new log an old epoch, and a resume
                       # point of the old log would be taken for one of the new). 53 bits:
                       # exact in JavaScript numbers.
                       epoch=secrets.randbits(53) | 1)
        self.store: MessageLog = store or MemoryLog(self.config.limits.retain_messages)
        self.checkpoints = CheckpointIO(self.store, self._push, self._checkpoint_committed,
                                        self._checkpoint_served,
                                        max_snapshot=self.config.limits.max_state_bytes)
        self.events = event_log
        self.stats = ServerStats()
        self._clock = clock if clock is not None else steady_clock()
        self._ids = itertools.count(1)
        self._outboxes: dict[int, Outbox] = {}
        #: the server's own connections (`attach`: the server API's trusted senders)
        self._sinks: dict[int, _Sink] = {}
        #: writes the outboxes' frames while their sockets keep up (notify/server/outbox.py)
        self._flusher = Flusher()
        #: the core's one driver; this server is its transport, store and observer
        self.driver = Driver(self.hub, transport=self, store=self, observer=self,
                             clock=self._clock, stats=self.stats)
        #: set with the reason when the core halted (fail-stop, G13); see `halt`
        self.halted: asyncio.Event = asyncio.Event()
        self.halt_reason: str | None = None
        self._on_halt = on_halt
        self._server: Server | None = None
        #: where groups live: this process (the default), or a cluster (docs/cluster.md)
        self.placement: Placement = placement if placement is not None else LocalPlacement()
        #: edge: what each connection's hello presented (resume token) and proved (identity)
        self._edge: dict[int, tuple[str | None, Identity | None]] = {}
        #: reads the driver asked for (`fetch`, `read`); each leaves when it ends
        self._fetches: set[asyncio.Task[Any]] = set()
        #: set (and replaced) when a load ended or a connection closed: connections whose
        #: reading waits for a load look again (`_while_held`)
        self._loads_moved = asyncio.Event()
        self._pruning: asyncio.Task[int] | None = None
        #: the heap's free pages handed back after groups left memory or cooled (`hub.freed`)
        self._trimming: asyncio.Task[bool] | None = None
        self._freed_seen, self._next_trim = 0, 0.0
        self._timer: LongTask | None = None
        #: WebSocket pings of every connection, sent by the timer (notify/server/heartbeat.py)
        t = self.config.timeouts
        self._heartbeats = Heartbeats(t.heartbeat_interval,
                                      max(t.heartbeat_timeout - t.heartbeat_interval, 0.1))
        #: called with each write the log made durable, before the frames held behind it
        #: leave (the webhooks' source, notify/webhooks/source.py); a hook must not raise
        self.stored: list[Callable[[Write], None]] = []
        #: answers what another node asks of this one as a group's owner (`answer`): the server
        #: API's, which sets it; None: nothing to answer
        self.answers: Callable[[bytes], Awaitable[bytes]] | None = None
        #: user -> its latest disconnect this node acted on (`revoked`), from the log's
        #: revocations at start (one entry per user ever disconnected, as the log keeps them)
        self._revoked: dict[str, float] = {}
        #: this node's disconnects whose revocation is being stored (`disconnect_user`)
        self._storing: set[tuple[str, float]] = set()

    # -- lifecycle -------------------------------------------------------------------------------

    def restore_all(self) -> None:
        """Bring back the groups the store knows (after a restart or a crash)."""
        restored = self.store.load(recent=self.config.limits.window_messages)
        for sg in restored:
            self._adopt(sg)
        if restored:
            log.info("restored", groups=len(restored),
                     messages=sum(sg.head for sg in restored))

    def _adopt(self, sg: StoredGroup) -> None:
        self.driver.adopt(sg)

    def fetch(self, group: str, answer: Fetched) -> None:
        """Store port: read a group that left memory (G14) off the event loop; the driver
        holds its frames until `answer`, and gives up on a read that takes too long."""

        def done(stored: StoredGroup | None, error: str | None) -> None:
            if error is not None:
                log.error("load_group_failed", group=group, error=error)
                answer(None, error)
            elif not self.placement.owns(group):
                # its shard moved while it was read (cluster review S5): adopted, it would be a
                # zombie here, with timers that write; its frames are refused (`unavailable`)
                # and asked again, by then of the new owner
                log.info("load_group_moved", group=group)
                answer(None, "the group moved to another node while it was read")
            else:
                answer(stored, None)
            self._pulse()

        self._off_loop(done, self.store.load_group, group, self.config.limits.window_messages)

    def read(self, group: str, after: int, limit: int, max_bytes: int, answer: Paged) -> None:
        """Store port: a page of `group`'s log, read off the event loop (a catch-up of
        gigabytes is many such reads, each answered before the next is asked: G11)."""
        self._off_loop(answer, self.store.read_page, group, after, limit, max_bytes)

    def _off_loop(self, answer: Callable[[T | None, str | None], None],
                  call: Callable[..., T], *args: Any) -> None:
        """Run a blocking store call in a thread, then `answer(result, None)` or
        `answer(None, what went wrong)` on the loop; the task is kept until it ends (and
        cancelled at stop, when nobody waits for the answer any more)."""
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(call, *args))
        self._fetches.add(task)

        def done(t: asyncio.Task[T]) -> None:
            self._fetches.discard(t)
            if t.cancelled():
                return
            error = t.exception()
            if error is not None:
                answer(None, described(error))
            else:
                answer(t.result(), None)

        task.add_done_callback(done)

    async def off_loop(self, call: Callable[..., T], *args: Any) -> T:
        """A blocking store call for another adapter of this server (the server API, notify/api),
        run as the driver's reads are: in a thread, kept until it ends, so that `stop` closes
        the store only after it. Raises `StoreError` with what went wrong."""
        answered: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        def answer(result: T | None, error: str | None) -> None:
            if answered.done():  # (its caller gave up waiting)
                return
            if error is not None:
                answered.set_exception(StoreError(error))
            else:
                answered.set_result(result)  # type: ignore[arg-type]

        self._off_loop(answer, call, *args)
        return await answered

    async def disconnect_user(self, user: str) -> tuple[tuple[str, ...], float | None]:
        """The server API's disconnect: store the user's revocation beside the log first (so
        that a restart, and every other node of a cluster, keeps refusing its tokens issued
        until now; `StoreError` if it cannot be), then end every session of the user here
        (`Hub.disconnect`: closed 4007, removed from its groups at once). The other nodes of a
        cluster end theirs when their placement hears of the revocation (`revoked`). Returns
        the members whose sessions ended here and the revocation time (None in development
        mode: there are no tokens to revoke, only sessions to end)."""
        at = self._clock()
        # (the placement may hear of it before the store answers: this call acts on it)
        self._storing.add((user, at))
        try:
            await self.off_loop(self.store.revoke, user, at)
        finally:
            self._storing.discard((user, at))
        ended = self._revoke_here(user, at)
        return ended, at if self.verifier is not None else None

    def revoked(self, user: str, at: float) -> None:
        if (user, at) not in self._storing:
            self._revoke_here(user, at)

    def _revoke_here(self, user: str, at: float) -> tuple[str, ...]:
        """A revocation of `user`'s tokens at `at` (this node's disconnect, or another node's
        heard by the placement): its tokens issued until then are refused from now on, and its
        sessions here end. A revocation already acted on (or an older one) changes nothing, so
        hearing one again never ends the sessions of a later login."""
        if self._revoked.get(user, -math.inf) >= at:
            return ()
        self._revoked[user] = at
        if self.verifier is not None:
            self.verifier.revoked[user] = max(at, self.verifier.revoked.get(user, at))
        ended: list[str] = []

        def call(now: float) -> list[Action]:
            removal = self.hub.disconnect(user, now)
            ended.extend(removal.members)
            return removal.actions

        self.driver.call(call, what="Disconnect")
        return tuple(ended)

    async def answer(self, request: bytes) -> bytes:
        if self.answers is None:
            raise RuntimeError("this node serves no operations for other nodes (no server API)")
        return await self.answers(request)

    def _pulse(self) -> None:
        moved, self._loads_moved = self._loads_moved, asyncio.Event()
        moved.set()

    async def _while_held(self, conn: int) -> None:
        """Reading `conn` pauses while its frames wait for a group's load (the driver holds
        them): the socket's backpressure bounds what a client can queue meanwhile, as one
        frame at a time did before the driver held frames. Every wait ends: the load is
        answered or given up at its deadline, or the connection is closed."""
        while self.driver.holds(conn):
            await self._loads_moved.wait()

    def forget(self, group: str) -> None:
        self.store.forget(group)

    async def start(self) -> None:
        # before the first hello: revoked tokens stay refused
        self._revoked.update(await self.off_loop(self.store.revocations))
        if self.verifier is not None:
            self.verifier.revoked.update(self._revoked)
        self._server = await serve(
            self._handle, self.host, self.port,
            max_size=self.config.limits.max_frame_bytes,
            # heartbeats: `self._heartbeats`, from the timer (not a task per connection)
            ping_interval=None, ping_timeout=None,
            compression=None,
            # a client that does not answer the close handshake holds a graceful stop no longer
            # than its grace period
            close_timeout=max(0.1, min(self.shutdown_grace, 10.0)),
            # A client without an Origin header is not a browser: the allow-list guards
            # against cross-site WebSocket hijacking, which only browsers can be used for.
            origins=None if self.origins is None else [*self.origins, None],  # type: ignore[list-item]
            process_request=self._process_request,
            create_connection=DirectServerConnection,
            ssl=self.ssl,
            backlog=self.listen_backlog,
        )
        sock = next(iter(self._server.sockets))
        self.port = sock.getsockname()[1]
        self._timer = LongTask(self._run_timer(), name="server timer", on_death=self._timer_died,
                               owner_stopping=lambda: self.draining)
        try:
            # (a local placement restores every group here; a cluster node a group when it
            # owns its shard)
            await self.placement.start(self)
        except BaseException:  # not started: nothing of it stays (the caller sees why)
            await self._timer.stop()
            self._server.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.shutdown_grace):
                    await self._server.wait_closed()
            raise
        log.info("listening", url=self.url, event_loop=loop_name(),
                 event_log=str(self.events.path) if self.events else None)
        if self.verifier is None:
            log.warning("insecure_development_mode",
                        detail="no token key configured: clients name themselves and may join "
                               "and publish anywhere. Configure auth (docs/security.md) before "
                               "exposing this server.")
        else:
            log.info("auth", kind=self.verifier.kind)

    @property
    def url(self) -> str:
        return f"{'wss' if self.ssl else 'ws'}://{self.host}:{self.port}"

    @property
    def connection_count(self) -> int:
        return len(self._outboxes)

    def queue_depths(self) -> tuple[int, int]:
        depths = [len(o) for o in self._outboxes.values()]
        return sum(depths), max(depths, default=0)

    async def stop(self) -> None:
        """Graceful shutdown: not ready (`/readyz` 503) for `drain_delay`, stop accepting, tell
        every client to reconnect elsewhere (4003),
        wait up to `shutdown_grace` for them to go, then flush the streams, the log and the
        event log."""
        self.draining = True  # the timer's end from here on is this stop's (even if cut short)
        if self._server is not None:
            if self.drain_delay > 0:  # /readyz says 503 while load balancers take us out
                await asyncio.sleep(self.drain_delay)
            await stop_accepting(self._server.server)
            self._server.close(close_connections=False)
            await self.placement.release()  # hand the groups over before the clients go
            for conn, outbox in list(self._outboxes.items()):
                bump(self.stats.closes, int(CloseCode.SHUTDOWN))
                log.debug("close", conn=conn, code=int(CloseCode.SHUTDOWN))
                outbox.close(CloseCode.SHUTDOWN, "server shutting down; reconnect")
            try:
                async with asyncio.timeout(self.shutdown_grace):
                    await self._server.wait_closed()
            except TimeoutError:
                log.warning("shutdown_grace_expired", connections=len(self._outboxes))
        if self._timer is not None:
            await self._timer.stop()  # (a timer that died was reported already: stop goes on)
        for o in list(self._outboxes.values()):
            await o.stop()
        await self.checkpoints.stop()
        await self.placement.stop()
        if self._pruning is not None:  # the store must not close under a running prune
            with contextlib.suppress(Exception):
                await self._pruning
        for fetch in list(self._fetches):  # nor under a read of a group
            with contextlib.suppress(Exception):
                await fetch
        await self.store.close()
        if self.events is not None:
            self.events.close()

    async def __aenter__(self) -> NotifyServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- connections -----------------------------------------------------------------------------

    def _process_request(self, ws: ServerConnection, request: Request) -> Response | None:
        """Plain HTTP on the WebSocket port: metrics and health; connection limits."""
        path = request.path.split("?", 1)[0]
        if path == "/metrics":
            r = ws.respond(200, "")
            r.body = self.metrics.render()
            del r.headers["Content-Type"], r.headers["Content-Length"]
            r.headers["Content-Type"] = CONTENT_TYPE
            r.headers["Content-Length"] = str(len(r.body))
            return r
        placement = self.placement.describe() if path == "/cluster" else None
        if placement is not None:  # who owns what, as this node sees it
            r = ws.respond(200, "")
            r.body = orjson.dumps(placement)
            del r.headers["Content-Type"], r.headers["Content-Length"]
            r.headers["Content-Type"] = "application/json"
            r.headers["Content-Length"] = str(len(r.body))
            return r
        if path == "/healthz":  # the process is alive and its loop answers
            return ws.respond(200, "ok\n")
        if path == "/readyz":  # send traffic here (not while shutting down)
            if self.draining:
                return ws.respond(503, "shutting down\n")
            if not self.placement.ready:
                return ws.respond(503, "not in the cluster yet\n")
            return ws.respond(200, "ready\n")
        if self.draining:
            return self._refuse_conn(ws, "shutdown", 503, "shutting down\n")
        if self.max_connections and len(self._outboxes) >= self.max_connections:
            return self._refuse_conn(ws, "max_connections", 503, "too many connections\n")
        if self.max_connections_per_ip and \
                self._per_ip.get(_ip(ws), 0) >= self.max_connections_per_ip:
            return self._refuse_conn(ws, "max_connections_per_ip", 429,
                                     "too many connections from this address\n")
        return None

    def _refuse_conn(self, ws: ServerConnection, why: str, status: int, text: str) -> Response:
        bump(self.stats.connections_refused, why)
        return ws.respond(status, text)

    async def _handle(self, ws: ServerConnection) -> None:
        conn = next(self._ids)
        ip = _ip(ws)
        self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        self.stats.connections_total += 1
        outbox = Outbox(ws, self.config.limits.max_outbound_frames,
                        max_bytes=self.config.limits.max_outbound_bytes,
                        on_slow=lambda: self._on_slow(conn),
                        sent_bytes=self.stats.bytes_out, flusher=self._flusher)
        self._outboxes[conn] = outbox
        self._heartbeats.add(ws, ws.loop.time())
        log.debug("conn_open", conn=conn, ip=ip, origin=ws.request.headers.get("Origin")
                  if ws.request is not None else None)
        # The handshake's headers were read (origins, limits, the line above) and are not read
        # again: kept, they were about 3 KiB of every idle connection (issue 34). (The request
        # stays: websockets takes a connection without one for one still in its handshake.)
        ws.response = None
        if ws.request is not None:
            ws.request.headers.clear()
        self.driver.opened(conn)
        try:
            assert isinstance(ws, DirectServerConnection)
            while True:
                if ws.recv_messages.frames or ws.connection_lost_waiter.done():
                    rest = self._message(conn, outbox, await ws.recv())
                else:  # (the usual case: each message taken as it is parsed)
                    rest = await self._read_direct(ws, conn, outbox)
                while rest is not None:  # a load holds the connection: read nothing meanwhile
                    await self._while_held(conn)
                    rest = self._take(conn, outbox, rest)
        except ConnectionClosed:
            pass
        finally:
            del self._outboxes[conn]
            self._edge.pop(conn, None)
            left = self._per_ip.pop(ip, 1) - 1
            if left > 0:
                self._per_ip[ip] = left
            try:
                await outbox.stop()
            finally:  # (even when this handler is cancelled meanwhile)
                code = ws.close_code if ws.close_code is not None else 1006
                session = self.hub.session_of(conn)
                log.debug("conn_close", conn=conn, code=code,
                          member=session.member if session is not None else None)
                self.driver.closed(conn, code, ws.close_reason or "")
                self.placement.closed(conn, code, ws.close_reason or "")

    async def _read_direct(self, ws: DirectServerConnection, conn: int,
                           outbox: Outbox) -> Iterator[tuple[One, RawFrame]] | None:
        """Take `ws`'s messages as they are parsed (notify/server/direct.py), until it is
        lost or a message waits in websockets' queue (both: `direct(None)`), a frame raises
        (raised here, as `recv()` would have), or a load holds the connection (returns the
        frames it holds back)."""
        stop: asyncio.Future[Iterator[tuple[One, RawFrame]] | None] = ws.loop.create_future()

        def direct(data: bytes | None) -> None:
            try:
                rest = None if data is None else self._message(conn, outbox, data)
            except Exception as e:  # nothing more is handed over; the reader raises it
                ws.direct = None
                if not stop.done():  # (a future takes any exception but StopIteration)
                    stop.set_exception(RuntimeError(repr(e)) if isinstance(e, StopIteration)
                                       else e)
                return
            if (data is None or rest is not None) and not stop.done():
                ws.direct = None  # what comes next waits in websockets' queue
                stop.set_result(rest)

        ws.direct = direct
        try:
            return await stop
        finally:
            ws.direct = None

    def _message(self, conn: int, outbox: Outbox,
                 data: str | bytes) -> Iterator[tuple[One, RawFrame]] | None:
        """One WebSocket message from `conn`: its frames to the driver, each as if it had
        come alone. Returns those a load holds back (see `_take`)."""
        self.stats.frames_in += 1
        if outbox.closing:
            # We are closing it (its group moved, a link gave up, it was replaced): acting on
            # what it sent meanwhile could put a publish ahead of earlier ones lost on the way
            # to a group's old owner (S2). Its client sends again, in order, whatever was not
            # answered, once it has resumed.
            return None
        frame = parse_any(data, self.config.limits)
        if isinstance(frame, Batch):  # (notify/wire.py `BatchFrame`)
            self.stats.frames_in += len(frame.frames) - 1
            self.stats.batches_in += 1
            return self._take(conn, outbox, iter(frame.frames))
        return self._take(conn, outbox, iter(((frame, data),)))

    def _take(self, conn: int, outbox: Outbox,
              frames: Iterator[tuple[One, RawFrame]]) -> Iterator[tuple[One, RawFrame]] | None:
        """Hand `frames` to the driver until they end (None) or it holds `conn`'s frames
        for a group's load: then the rest, which wait until it lets go (`_while_held`)."""
        for one, raw in frames:
            if outbox.closing:
                return None  # (see `_message`)
            self._received(conn, one, raw)
            if self.driver.holds(conn):
                return frames
        return None

    def _received(self, conn: int, frame: One, raw: RawFrame) -> None:
        """One frame from a local connection (`raw`: as it came, or how to make it)."""
        if isinstance(frame, Error | Rejected):  # refused at the edge (G12)
            self.driver.run([Send(conn, frame)])
            return
        if isinstance(frame, GROUP_FRAMES) and self.hub.session_of(conn) is not None \
                and self.placement.route(conn, frame.group, raw):
            return  # another node owns the group (never before hello: S14)
        if isinstance(frame, Authenticate):
            self._edge[conn] = (frame.hello.resume_session, None)
        self._dispatch(conn, frame)

    def _dispatch(self, conn: int, frame: object) -> None:
        """A parsed client frame for this node's hub (from a local connection, or routed here
        from another node's edge in cluster mode)."""
        if isinstance(frame, Authenticate):
            self.driver.call(lambda now: self._hello(conn, frame, now), conn, "Authenticate")
        elif isinstance(frame, Refresh):
            self.driver.call(lambda now: self._refresh(conn, frame, now), conn, "Refresh")
        else:
            self.driver.frame(conn, frame)  # type: ignore[arg-type]

    def dispatch_raw(self, conn: int, raw: bytes, *, remote: bool = False) -> None:
        """A client frame as received, for this node's driver, from the placement: routed here
        by another edge (`remote`, `conn` is our number for that connection), or one that
        waited for its group's owner. A frame for a group this node does not own (any more)
        goes back to the placement (the client reconnects)."""
        frame = parse_one(raw, self.config.limits)
        if isinstance(frame, Error | Rejected):
            self.driver.run([Send(conn, frame)])
            return
        if isinstance(frame, Authenticate | Refresh):
            return  # an edge answers those itself
        if isinstance(frame, GROUP_FRAMES) and \
                self.placement.refuse(conn, frame.group, raw, remote=remote):
            return
        self._dispatch(conn, frame)

    def attach(self, sender: str, frames: Callable[[bytes], None],
               closed: Callable[[], None]) -> int:
        """A connection of the server's own that publishes as the trusted `sender` (the
        server API's, `api:NAME`: notify/core/hub.py `Hub.trust`). Frames go in by
        `driver.frame` like a client's (so a group not in memory is loaded first); what the
        core answers comes back to `frames`, serialised as a client would get it (a `batch`
        too). `closed` hears that the core closed it (it is forgotten then)."""
        conn = next(self._ids)
        self._sinks[conn] = _Sink(sender, frames, closed)
        self.driver.call(lambda now: [*self.hub.opened(conn, now),
                                      *self.hub.trust(conn, sender)], what="attach")
        return conn

    def submit(self, conn: int, frame: Publish) -> None:
        """A frame of one of the server's own connections (`attach`), for the group's owner:
        this node's driver, or in a cluster the owner's, over the link like a client's frame
        (the owner trusts the connection too: `edge_session`)."""
        if self.config.shared_log and self.placement.route(conn, frame.group,
                                                           encode_publish(frame)):
            return
        self.driver.frame(conn, frame)

    def detach(self, conn: int) -> None:
        if self._sinks.pop(conn, None) is not None:
            self.driver.closed(conn, 1000, "detached")
            self.placement.closed(conn, 1000, "detached")

    # -- what the placement asks of the server (notify/runtime/placement.py PlacementHost) -------

    def new_conn_id(self) -> int:
        return next(self._ids)

    def is_local(self, conn: int) -> bool:
        return conn in self._outboxes

    def edge_session(self, conn: int) -> EdgeSession | None:
        """What a local connection's hello presented and proved, and the session it got."""
        sink = self._sinks.get(conn)
        if sink is not None:
            return EdgeSession(None, None, None, None, trusted=sink.sender)
        session = self.hub.session_of(conn)
        presented, identity = self._edge.get(conn, (None, None))
        return EdgeSession(session.member if session is not None else None,
                           session.token if session is not None else None,
                           presented, identity,
                           session.born if session is not None else None)

    def _hello(self, conn: int, frame: Authenticate, now: float) -> list[Action]:
        # in a cluster a session's birth is by the wall clock, which every node shares (an
        # owner orders two incarnations of a member by it); else the hub's own clock
        born = time.time() if self.config.shared_log else None
        if self.verifier is None:
            return self.hub.hello(conn, frame.hello, now, None, born=born)
        try:
            identity = self.verifier.verify(frame.token, now)
        except AuthFailure as e:
            log.info("auth_refused", conn=conn, code=e.code.value, reason=e.message)
            return self.hub.refuse(conn, e.code, e.message)
        if conn in self._edge:
            self._edge[conn] = (frame.hello.resume_session, identity)
        return self.hub.hello(conn, frame.hello, now, identity, born=born)

    def _refresh(self, conn: int, frame: Refresh, now: float) -> list[Action]:
        if self.verifier is None:  # nothing expires in development mode
            self._push(conn, orjson.dumps({"type": "refreshed", "expires": None}))
            return []
        try:
            identity = self.verifier.verify(frame.token, now)
        except AuthFailure as e:
            return [Send(conn, Error(e.code, e.message))]
        actions = self.hub.refresh(conn, identity, now)
        if not actions:
            if conn in self._edge:
                self._edge[conn] = (self._edge[conn][0], identity)
            self.placement.refreshed(conn, identity)
            self._push(conn, orjson.dumps({"type": "refreshed", "expires": identity.expires}))
        return actions

    def _on_slow(self, conn: int) -> None:
        """A member over its outbound bound is gone for the hub at once (SUSPECT: it may resume
        from its offsets, G11), even though its socket may take until the client reads again,
        or the heartbeat gives up, to let the 4001 close frame through its full buffers."""
        self.stats.slow_consumers += 1
        bump(self.stats.closes, int(CloseCode.SLOW_CONSUMER))
        asyncio.get_running_loop().call_soon(self._slow_gone, conn)

    def _slow_gone(self, conn: int) -> None:
        self.driver.closed(conn, int(CloseCode.SLOW_CONSUMER), "slow consumer")

    # -- actions ---------------------------------------------------------------------------------

    def _push(self, conn: int, data: bytes, *, bounded: bool = True, frames: int = 1) -> None:
        outbox = self._outboxes.get(conn)
        if outbox is not None:
            outbox.push(data, bounded=bounded, frames=frames)
        elif (sink := self._sinks.get(conn)) is not None:
            sink.frames(data)
        else:  # a connection another node's edge holds, or one that is gone
            self.placement.push(conn, data, bounded=bounded, frames=frames)

    # -- the driver's ports: Transport (push, close), Store (write, fetch), Observer --------------

    push = _push

    def close(self, conn: int, code: int, reason: str, *, drain: bool) -> None:
        outbox = self._outboxes.get(conn)
        if outbox is not None:
            # with `drain`, the frames queued before (the `error` that says why) go out first
            outbox.close(code, reason, drain=drain)
            if self.driver.loading:  # a reader paused for a load stops pausing
                self._pulse()
        elif conn in self._sinks:  # (the driver tells the hub; the placement forgets it)
            self._sinks.pop(conn).closed()
            self.placement.closed(conn, code, reason)
        else:
            self.placement.close(conn, code, reason, drain=drain)

    def write(self, write: Write, done: Done) -> None:
        started = time.monotonic()
        observe = self.metrics.write_seconds.observe

        def timed(error: str | None) -> None:
            observe(time.monotonic() - started)
            if error is None:
                # before `done`: a store that answers inside `write` (memory) starts the
                # group's next write from `done`, whose hooks must come after this one's
                for hook in self.stored:
                    try:
                        hook(write)
                    except Exception:  # a listener's bug must not hold the group's write
                        log.exception("stored_hook_failed", group=write.group)
            done(error)

        self.store.write(write, timed)

    def event(self, e: LogEvent) -> None:
        self._observe(e)
        if self.events is not None and self.config.event_log:
            self.events.write(e.event, e.ts, **e.fields)

    def checkpoint(self, a: CheckpointAction) -> None:
        if isinstance(a, StoreCheckpointChunk):
            self.checkpoints.stage(a)
        elif isinstance(a, CommitCheckpoint):
            self.checkpoints.commit(a)
        elif isinstance(a, DiscardCheckpoint):
            self.checkpoints.discard(a)
        else:
            self.checkpoints.serve(a)

    def halt(self, reason: str) -> None:
        """Fail-stop (G13): the core can no longer keep a promise (a view it cannot store,
        storage that stopped answering). Nothing more leaves: every connection is dropped
        without a goodbye (clients reconnect to the restarted server and resume), the listener
        closes, and `halted` is set; `notify serve` then exits non-zero. A restart recovers
        from the log with nothing published lost (G10)."""
        if self.halt_reason is not None:
            return
        self.halt_reason = reason
        self.draining = True
        if self._server is not None:
            self._server.close(close_connections=False)
        for outbox in self._outboxes.values():
            outbox.abort()
        self.halted.set()
        if self._on_halt is not None:
            self._on_halt(reason)

    def _checkpoint_committed(self, group: str, cp: Checkpoint, conn: int, req: Req) -> None:
        self.driver.call(lambda now: self.hub.checkpoint_committed(group, cp, conn, req, now),
                         conn, "checkpoint_committed")

    def _checkpoint_served(self, group: str, transfer: str, conn: int, size: int,
                           seconds: float) -> None:
        session = self.hub.session_of(conn)
        g = self.hub.groups.get(group)
        self.driver.run([LogEvent("state.transfer", self._clock(), {
            "group": group, "view": g.view.version if g is not None else None,
            "member": session.member if session is not None else None, "transfer": transfer,
            "bytes": size, "duration_ms": round(seconds * 1000, 3), "source": "checkpoint"})])

    def _observe(self, e: LogEvent) -> None:
        """Metrics from the core's group events (CoreConfig.metrics)."""
        st, f = self.stats, e.fields
        if e.event == "view.propose":  # again on a restart, maybe with more reasons
            self._proposed[str(f.get("group"))] = str(f.get("reason", ""))
        elif e.event == "view.install":
            # counted once per install, by the reasons of the proposal that was installed
            st.view_installs += 1
            for reason in self._proposed.pop(str(f.get("group")), "").split(","):
                bump(st.view_changes, reason or "unknown")
            self.metrics.install_seconds.observe(float(f.get("duration_ms", 0.0)) / 1000)
        elif e.event == "atomic.commit":
            bump(st.atomic, "commit")
            self.metrics.commit_seconds.observe(float(f.get("duration_ms", 0.0)) / 1000)
        elif e.event == "atomic.abort":
            bump(st.atomic, "abort")

    async def _run_timer(self) -> None:
        """Tick the driver at its `next_wakeup()`, and at least every `MAX_SLEEP`: a frame
        may arm an earlier deadline while this sleeps, and asking the driver again after every
        frame would cost more than waking now and then. Retention runs here too, off the loop."""
        next_prune = self._clock() + PRUNE_INTERVAL
        while True:
            now = self._clock()
            if now >= next_prune and (self._pruning is None or self._pruning.done()):
                next_prune = now + PRUNE_INTERVAL  # retention, off the event loop
                self._pruning = asyncio.get_running_loop().create_task(
                    asyncio.to_thread(_prune_and_trim, self.store, now))
                self._pruning.add_done_callback(_log_prune)
            loading = self.driver.loading
            self.driver.tick()
            self._heartbeats.tick(asyncio.get_running_loop().time())
            if self.hub.freed != self._freed_seen and now >= self._next_trim and (
                    self._trimming is None or self._trimming.done()):
                # groups left memory or cooled: what they held back to the system, off the
                # loop, at most every TRIM_INTERVAL (a retention pass may take minutes)
                self._freed_seen, self._next_trim = self.hub.freed, now + TRIM_INTERVAL
                self._trimming = asyncio.get_running_loop().create_task(
                    asyncio.to_thread(release_free_memory))
                self._trimming.add_done_callback(_log_trim)
            if self.driver.loading < loading:  # loads given up: their readers look again
                self._pulse()
            wakeup = self.driver.next_wakeup()
            delay = MAX_SLEEP if wakeup is None else wakeup - self._clock()
            await asyncio.sleep(min(max(delay, MIN_SLEEP), MAX_SLEEP))

    def _timer_died(self, error: BaseException) -> None:
        """The timer drives every deadline (suspect, flush, ACK, write) and the heartbeats:
        without it groups would wait forever and dead connections would stay, so its death
        stops the server (G13) instead of going unnoticed."""
        if self.halt_reason is not None:
            return
        log.critical("timer_died", error=described(error))
        self.halt(f"the timer task died: {described(error)}")


#: seconds between two retention passes over the log
PRUNE_INTERVAL = 60.0
#: at most how often the heap's free pages are handed back after groups freed memory
TRIM_INTERVAL = 5.0
#: the timer's longest and shortest sleep (see `NotifyServer._run_timer`)
MAX_SLEEP, MIN_SLEEP = 0.05, 0.001


def _prune_and_trim(store: MessageLog, now: float) -> int:
    """A retention pass, then the heap's free pages back to the system (notify/server/heap.py):
    groups that left memory since are given back too."""
    deleted = store.prune(now)
    release_free_memory()
    return deleted


def _log_trim(task: asyncio.Task[bool]) -> None:
    if not task.cancelled() and task.exception() is not None:  # (tried again at the next freeing)
        log.error("trim_failed", error=repr(task.exception()))


def _log_prune(task: asyncio.Task[int]) -> None:
    if task.cancelled():
        return
    if task.exception() is not None:
        log.error("prune_failed", error=repr(task.exception()))
    elif task.result():
        log.info("pruned", messages=task.result())


def steady_clock() -> Callable[[], float]:
    """Unix time that never jumps: the wall clock at start-up plus the monotonic time since.
    Deadlines (suspect, flush, ACK, write) must not all fire when the system clock is stepped
    forward, nor wait for hours when it is stepped back; timestamps stay close to wall time."""
    wall, mono = time.time(), time.monotonic()
    return lambda: wall + (time.monotonic() - mono)


def _ip(ws: ServerConnection) -> str:
    addr = ws.remote_address
    return str(addr[0]) if isinstance(addr, tuple) and addr else "?"


__all__ = ["CloseCode", "ErrorCode", "NotifyServer", "ServerStats", "StoreError"]
