"""The WebSocket adapter: pumps frames and time between `websockets` and the sans-I/O `Hub`.

Everything that decides anything is in `notify.core`; this file owns the sockets, the tasks, the
clock and the serialisation. Each connection has an `Outbox` (its sender worker); each stream of
each group has a worker in `GroupStreams`. Heartbeats are WebSocket pings: `websockets` closes a
connection whose pong is late, and the hub treats that as any other lost connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

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
from notify.core.actions import Error
from notify.core.errors import CloseCode, ErrorCode
from notify.eventlog import EventLog
from notify.server.outbox import Outbox
from notify.server.streams import GroupStreams
from notify.server.wire import dumps, parse
from notify.storage import MemoryLog, MessageLog

log = structlog.get_logger("notify.server")


@dataclass
class ServerStats:
    frames_in: int = 0
    errors_out: int = 0
    slow_consumers: int = 0
    internal_errors: int = 0
    by_code: dict[str, int] = field(default_factory=dict)


class NotifyServer:
    def __init__(self, config: CoreConfig | None = None, *, host: str = "127.0.0.1",
                 port: int = 8765, store: MessageLog | None = None,
                 event_log: EventLog | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config or CoreConfig(event_log=event_log is not None)
        self.host, self.port = host, port
        self.hub = Hub(self.config, new_token=lambda: secrets.token_urlsafe(18),
                       epoch=int(time.time() * 1000))
        self.store: MessageLog = store or MemoryLog(self.config.limits.retain_messages)
        self.events = event_log
        self.stats = ServerStats()
        self._clock = clock
        self._ids = itertools.count(1)
        self._outboxes: dict[int, Outbox] = {}
        self._streams: dict[str, GroupStreams] = {}
        self._server: Server | None = None
        self._timer: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def _restore(self) -> None:
        """Bring back the groups the store knows (after a restart or a crash)."""
        restored = self.store.load(recent=self.config.limits.retain_messages)
        for sg in restored:
            self.hub.restore(Group.restored(
                sg.group, self.config, epoch=sg.epoch, view=sg.view, head=sg.head,
                seqs=sg.seqs, recent=sg.recent,
                outcomes={o: False for o in sg.aborted}))
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
        )
        sock = next(iter(self._server.sockets))
        self.port = sock.getsockname()[1]
        self._timer = asyncio.get_running_loop().create_task(self._run_timer())
        log.info("listening", url=self.url,
                 event_log=str(self.events.path) if self.events else None)

    @property
    def url(self) -> str:
        return f"ws://{self.host}:{self.port}"

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer
        if self._server is not None:
            self._server.close(close_connections=True)
            await self._server.wait_closed()
        for s in self._streams.values():
            await s.stop()
        for o in list(self._outboxes.values()):
            await o.stop()
        await self.store.close()
        if self.events is not None:
            self.events.close()

    async def __aenter__(self) -> NotifyServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- connections -----------------------------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        conn = next(self._ids)
        outbox = Outbox(ws, self.config.limits.max_outbound_frames, on_slow=self._on_slow)
        self._outboxes[conn] = outbox
        self._apply(self.hub.opened(conn, self._clock()))
        try:
            async for data in ws:
                self.stats.frames_in += 1
                frame = parse(data)
                if isinstance(frame, Error):
                    self._count_error(frame.code)
                    outbox.push(dumps(frame))
                    continue
                try:
                    actions = self.hub.handle(conn, frame, self._clock())
                except Exception:  # a bug of ours must not take the server down (G12)
                    self.stats.internal_errors += 1
                    log.exception("core_error", conn=conn, frame=type(frame).__name__)
                    outbox.push(dumps(Error(ErrorCode.INTERNAL, "internal error; frame dropped")))
                    continue
                self._apply(actions)
        except ConnectionClosed:
            pass
        finally:
            del self._outboxes[conn]
            await outbox.stop()
            code = ws.close_code if ws.close_code is not None else 1006
            self._apply(self.hub.closed(conn, self._clock(), code, ws.close_reason or ""))

    def _on_slow(self) -> None:
        self.stats.slow_consumers += 1

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
                self._group_streams(a.message.group).submit(a)
            elif isinstance(a, Send):
                if a.frame is not last_frame:
                    last_frame, data = a.frame, dumps(a.frame)
                    if isinstance(a.frame, Error):
                        self._count_error(a.frame.code)
                self._push(a.conn, data, bounded=not a.replay)
            elif isinstance(a, AfterStreams):
                self._group_streams(a.group).barrier(a.sends)
            elif isinstance(a, Close):
                outbox = self._outboxes.get(a.conn)
                if outbox is not None:
                    outbox.close(a.code, a.reason)
            elif isinstance(a, StoreView):  # durable before the install that follows (G1)
                self.store.store_view(a.group, a.epoch, a.view, a.members)
            elif isinstance(a, StoreOutcomes):  # an abort: durable before its frames (G5)
                self.store.store_outcomes(a.group, a.offsets, a.committed)
            elif isinstance(a, LogEvent) and self.events is not None:
                self.events.write(a.event, a.ts, **a.fields)

    def _group_streams(self, group: str) -> GroupStreams:
        s = self._streams.get(group)
        if s is None:
            s = self._streams[group] = GroupStreams(group, self.store, self._push)
        return s

    async def _run_timer(self) -> None:
        while True:
            now = self._clock()
            try:
                self._apply(self.hub.tick(now))
            except Exception:
                self.stats.internal_errors += 1
                log.exception("tick_error")
            nxt = self.hub.next_deadline()
            delay = 0.05 if nxt is None else min(max(nxt - self._clock(), 0.005), 0.05)
            await asyncio.sleep(delay)


__all__ = ["CloseCode", "ErrorCode", "NotifyServer"]
