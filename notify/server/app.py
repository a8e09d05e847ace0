"""The WebSocket adapter: pumps frames and time between `websockets` and the sans-I/O `Hub`.

Everything that decides anything is in `notify.core`; this file owns the sockets, the tasks, the
clock and the serialisation. Each connection has an `Outbox` (its sender worker); each stream of
each group has a worker in `GroupStreams`. Heartbeats are WebSocket pings: `websockets` closes a
connection whose pong is late, and the hub treats that as any other lost connection.

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
import secrets
import ssl as ssl_module
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

import orjson
import structlog
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from notify.core import (
    Action,
    AfterStreams,
    Close,
    CoreConfig,
    Fanout,
    Group,
    Hub,
    LogEvent,
    Send,
    StoreOutcomes,
    StoreView,
)
from notify.core.actions import (
    CommitCheckpoint,
    DiscardCheckpoint,
    Error,
    Rejected,
    ServeCheckpoint,
    StoreCheckpointChunk,
)
from notify.core.checkpoint import Checkpoint
from notify.core.errors import CloseCode, ErrorCode
from notify.core.events import Req
from notify.eventlog import EventLog
from notify.server.auth import AuthFailure, TokenVerifier
from notify.server.checkpoints import CheckpointIO
from notify.server.metrics import CONTENT_TYPE, Metrics, ServerStats, bump
from notify.server.outbox import Outbox
from notify.server.streams import GroupStreams
from notify.server.wire import Authenticate, Refresh, dumps, parse_any
from notify.storage import MemoryLog, MessageLog

log = structlog.get_logger("notify.server")


class NotifyServer:
    def __init__(self, config: CoreConfig | None = None, *, host: str = "127.0.0.1",
                 port: int = 8765, store: MessageLog | None = None,
                 event_log: EventLog | None = None,
                 clock: Callable[[], float] = time.time,
                 verifier: TokenVerifier | None = None,
                 origins: Sequence[str] | None = None,
                 ssl: ssl_module.SSLContext | None = None,
                 max_connections: int = 0, max_connections_per_ip: int = 0,
                 shutdown_grace: float = 5.0, drain_delay: float = 0.0) -> None:
        config = config or CoreConfig(event_log=event_log is not None)
        self.config = replace(config, metrics=True)
        self.host, self.port = host, port
        #: None: development mode (no authentication; clients name themselves)
        self.verifier = verifier
        #: allowed browser origins (None: any); a client that sends no Origin is not a browser
        self.origins = None if origins is None else list(origins)
        self.ssl = ssl
        self.max_connections, self.max_connections_per_ip = max_connections, max_connections_per_ip
        self.shutdown_grace, self.drain_delay = shutdown_grace, drain_delay
        self.draining = False
        self.metrics = Metrics(self)
        self._per_ip: dict[str, int] = {}
        #: the reason of each group's latest proposal (metrics count it at the install)
        self._proposed: dict[str, str] = {}
        self.hub = Hub(self.config, new_token=lambda: secrets.token_urlsafe(18),
                       epoch=int(time.time() * 1000))
        self.store: MessageLog = store or MemoryLog(self.config.limits.retain_messages)
        self.checkpoints = CheckpointIO(self.store, self._push, self._checkpoint_committed,
                                        self._checkpoint_served,
                                        max_snapshot=self.config.limits.max_state_bytes)
        self.events = event_log
        self.stats = ServerStats()
        self._clock = clock
        self._ids = itertools.count(1)
        self._outboxes: dict[int, Outbox] = {}
        self._streams: dict[str, GroupStreams] = {}
        self._server: Server | None = None
        self._pruning: asyncio.Task[int] | None = None
        self._timer: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def _restore(self) -> None:
        """Bring back the groups the store knows (after a restart or a crash)."""
        restored = self.store.load(recent=self.config.limits.retain_messages)
        for sg in restored:
            self.hub.restore(Group.restored(
                sg.group, self.config, epoch=sg.epoch, view=sg.view, head=sg.head,
                seqs=sg.seqs, recent=sg.recent,
                outcomes={o: False for o in sg.aborted}, checkpoint=sg.checkpoint,
                install=sg.install, now=self._clock()))
        if restored:
            log.info("restored", groups=len(restored),
                     messages=sum(sg.head for sg in restored))

    async def start(self) -> None:
        self._restore()
        t = self.config.timeouts
        self._server = await serve(
            self._handle, self.host, self.port,
            max_size=self.config.limits.max_frame_bytes,
            ping_interval=t.heartbeat_interval,
            ping_timeout=max(t.heartbeat_timeout - t.heartbeat_interval, 0.1),
            compression=None,
            # A client without an Origin header is not a browser: the allow-list guards
            # against cross-site WebSocket hijacking, which only browsers can be used for.
            origins=None if self.origins is None else [*self.origins, None],  # type: ignore[list-item]
            process_request=self._process_request,
            ssl=self.ssl,
        )
        sock = next(iter(self._server.sockets))
        self.port = sock.getsockname()[1]
        self._timer = asyncio.get_running_loop().create_task(self._run_timer())
        log.info("listening", url=self.url,
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
        self.draining = True
        if self._server is not None:
            if self.drain_delay > 0:  # /readyz says 503 while load balancers take us out
                await asyncio.sleep(self.drain_delay)
            self._server.close(close_connections=False)  # stop accepting
            for conn, outbox in list(self._outboxes.items()):
                bump(self.stats.closes, int(CloseCode.SHUTDOWN))
                log.debug("close", conn=conn, code=int(CloseCode.SHUTDOWN))
                outbox.close(CloseCode.SHUTDOWN, "server shutting down; reconnect")
            try:
                await asyncio.wait_for(self._server.wait_closed(), self.shutdown_grace)
            except TimeoutError:
                log.warning("shutdown_grace_expired", connections=len(self._outboxes))
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
        for s in self._streams.values():
            await s.stop()
        for o in list(self._outboxes.values()):
            await o.stop()
        await self.checkpoints.stop()
        if self._pruning is not None:  # the store must not close under a running prune
            with contextlib.suppress(Exception):
                await self._pruning
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
        if path == "/healthz":  # the process is alive and its loop answers
            return ws.respond(200, "ok\n")
        if path == "/readyz":  # send traffic here (not while shutting down)
            return ws.respond(503, "shutting down\n") if self.draining else \
                ws.respond(200, "ready\n")
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
        outbox = Outbox(ws, self.config.limits.max_outbound_frames, on_slow=self._on_slow,
                        sent_bytes=self.stats.bytes_out)
        self._outboxes[conn] = outbox
        log.debug("conn_open", conn=conn, ip=ip, origin=ws.request.headers.get("Origin")
                  if ws.request is not None else None)
        self._apply(self.hub.opened(conn, self._clock()))
        try:
            async for data in ws:
                self.stats.frames_in += 1
                frame = parse_any(data, self.config.limits)
                if isinstance(frame, Error | Rejected):  # refused at the edge (G12)
                    self._apply([Send(conn, frame)])
                    continue
                try:
                    if isinstance(frame, Authenticate):
                        actions = self._hello(conn, frame)
                    elif isinstance(frame, Refresh):
                        actions = self._refresh(conn, frame, outbox)
                    else:
                        actions = self.hub.handle(conn, frame, self._clock())
                except Exception:  # a bug of ours must not take the server down (G12)
                    self.stats.internal_errors += 1
                    log.exception("core_error", conn=conn, frame=type(frame).__name__)
                    outbox.push(dumps(Error(ErrorCode.INTERNAL, "internal error; frame dropped",
                                            getattr(frame, "req", None))))
                    continue
                self._apply(actions)
        except ConnectionClosed:
            pass
        finally:
            del self._outboxes[conn]
            left = self._per_ip.pop(ip, 1) - 1
            if left > 0:
                self._per_ip[ip] = left
            await outbox.stop()
            code = ws.close_code if ws.close_code is not None else 1006
            session = self.hub.session_of(conn)
            log.debug("conn_close", conn=conn, code=code,
                      member=session.member if session is not None else None)
            self._apply(self.hub.closed(conn, self._clock(), code, ws.close_reason or ""))

    def _hello(self, conn: int, frame: Authenticate) -> list[Action]:
        now = self._clock()
        if self.verifier is None:
            return self.hub.hello(conn, frame.hello, now, None)
        try:
            identity = self.verifier.verify(frame.token, now)
        except AuthFailure as e:
            log.info("auth_refused", conn=conn, code=e.code.value, reason=e.message)
            return self.hub.refuse(conn, e.code, e.message)
        return self.hub.hello(conn, frame.hello, now, identity)

    def _refresh(self, conn: int, frame: Refresh, outbox: Outbox) -> list[Action]:
        now = self._clock()
        if self.verifier is None:  # nothing expires in development mode
            outbox.push(orjson.dumps({"type": "refreshed", "expires": None}))
            return []
        try:
            identity = self.verifier.verify(frame.token, now)
        except AuthFailure as e:
            return [Send(conn, Error(e.code, e.message))]
        actions = self.hub.refresh(conn, identity, now)
        if not actions:
            outbox.push(orjson.dumps({"type": "refreshed", "expires": identity.expires}))
        return actions

    def _on_slow(self) -> None:
        self.stats.slow_consumers += 1
        bump(self.stats.closes, int(CloseCode.SLOW_CONSUMER))

    def _count_error(self, code: str) -> None:
        self.stats.errors_out += 1
        self.stats.by_code[code] = self.stats.by_code.get(code, 0) + 1

    # -- actions ---------------------------------------------------------------------------------

    def _push(self, conn: int, data: bytes, *, bounded: bool = True) -> None:
        outbox = self._outboxes.get(conn)
        if outbox is not None:
            outbox.push(data, bounded=bounded)

    def _apply(self, actions: list[Action]) -> None:
        # The core sends one frame object to many members (confirm, view_change): serialise
        # it once per run of sends, not once per member.
        last_frame: object = None
        data = b""
        for a in actions:
            if isinstance(a, Fanout):
                if a.reply is not None:
                    self.stats.messages += 1
                self.stats.deliveries += len(a.conns)
                self._group_streams(a.message.group).submit(a)
            elif isinstance(a, Send):
                if a.frame is not last_frame:
                    last_frame, data = a.frame, dumps(a.frame)
                    if isinstance(a.frame, Error):
                        self._count_error(a.frame.code)
                    elif isinstance(a.frame, Rejected):
                        bump(self.stats.rejected, a.frame.code)
                self._push(a.conn, data, bounded=not a.replay)
            elif isinstance(a, AfterStreams):
                self._group_streams(a.group).barrier(a.sends)
            elif isinstance(a, Close):
                outbox = self._outboxes.get(a.conn)
                if outbox is not None:
                    bump(self.stats.closes, int(a.code))
                    # the frames queued before (the `error` that says why) go out first
                    outbox.close(a.code, a.reason, drain=a.code != CloseCode.SLOW_CONSUMER)
            elif isinstance(a, StoreView):  # durable before the install that follows (G1)
                self.store.store_view(a.install)
            elif isinstance(a, StoreOutcomes):  # an abort: durable before its frames (G5)
                self.store.store_outcomes(a.group, a.offsets, a.committed)
            elif isinstance(a, LogEvent):
                self._observe(a)
                if self.events is not None and self.config.event_log:
                    self.events.write(a.event, a.ts, **a.fields)
            elif isinstance(a, StoreCheckpointChunk):
                self.checkpoints.stage(a)
            elif isinstance(a, CommitCheckpoint):
                self.checkpoints.commit(a)
            elif isinstance(a, DiscardCheckpoint):
                self.checkpoints.discard(a)
            elif isinstance(a, ServeCheckpoint):
                self.checkpoints.serve(a)

    def _checkpoint_committed(self, group: str, cp: Checkpoint, conn: int, req: Req) -> None:
        self._apply(self.hub.checkpoint_committed(group, cp, conn, req, self._clock()))

    def _checkpoint_served(self, group: str, transfer: str, conn: int, size: int,
                           seconds: float) -> None:
        session = self.hub.session_of(conn)
        g = self.hub.groups.get(group)
        self._apply([LogEvent("state.transfer", self._clock(), {
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

    def _group_streams(self, group: str) -> GroupStreams:
        s = self._streams.get(group)
        if s is None:
            s = self._streams[group] = GroupStreams(group, self.store, self._push,
                                                    self.checkpoints.serve)
        return s

    async def _run_timer(self) -> None:
        next_prune = self._clock() + PRUNE_INTERVAL
        while True:
            now = self._clock()
            if now >= next_prune and (self._pruning is None or self._pruning.done()):
                next_prune = now + PRUNE_INTERVAL  # retention, off the event loop
                self._pruning = asyncio.get_running_loop().create_task(
                    asyncio.to_thread(self.store.prune, now))
                self._pruning.add_done_callback(_log_prune)
            try:
                self._apply(self.hub.tick(now))
            except Exception:
                self.stats.internal_errors += 1
                log.exception("tick_error")
            nxt = self.hub.next_deadline()
            delay = 0.05 if nxt is None else min(max(nxt - self._clock(), 0.005), 0.05)
            await asyncio.sleep(delay)


#: seconds between two retention passes over the log
PRUNE_INTERVAL = 60.0


def _log_prune(task: asyncio.Task[int]) -> None:
    if task.cancelled():
        return
    if task.exception() is not None:
        log.error("prune_failed", error=repr(task.exception()))
    elif task.result():
        log.info("pruned", messages=task.result())


def _ip(ws: ServerConnection) -> str:
    addr = ws.remote_address
    return str(addr[0]) if isinstance(addr, tuple) and addr else "?"


__all__ = ["CloseCode", "ErrorCode", "NotifyServer", "ServerStats"]
