"""The group handle: `Group` (publish, iterate the events, the current view, leave,
checkpoint), and `GroupHost`, the narrow port it reaches its client through (so this module
imports nothing of client.py: no cycle)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from client_sdk.errors import GroupLeftError, NotifyError
from client_sdk.events import (
    CaughtUp,
    CheckpointStored,
    GroupEvent,
    Message,
    Removed,
    Reset,
    StateReceived,
    StateRequested,
    ViewChanging,
    ViewInstalled,
    ViewResumed,
)
from client_sdk.events_queue import EventQueue
from client_sdk.options import ClientOptions, PublishResult, StateProvider, View
from client_sdk.protocol import ClientProtocol

__all__ = ["Group", "GroupHost"]

log = logging.getLogger("client_sdk")

#: the events the application gets (and `_next` hands over)
_APP_EVENTS = (Message, ViewInstalled, ViewChanging, ViewResumed, CaughtUp, Removed,
               StateReceived, Reset)

#: in a group's queue: iteration ends (the group was left, or the app closed the client)
_END = object()


@dataclass(frozen=True, slots=True)
class _Failed:
    """In a group's queue: the client stopped on this error; iteration raises it."""

    error: NotifyError



class GroupHost(Protocol):
    """What a `Group` needs of its client (`Client` is one)."""

    member: str
    options: ClientOptions
    protocol: ClientProtocol

    async def _publish(self, group: Group, data: bytes, order: str, atomic: bool,
                       same_view: bool, publish_id: str | None) -> PublishResult: ...

    def _publish_nowait(self, group: Group, data: bytes, order: str, atomic: bool,
                        same_view: bool, publish_id: str | None
                        ) -> asyncio.Future[PublishResult]: ...

    async def _leave(self, group: Group) -> None: ...

    async def _checkpoint(self, group: Group) -> CheckpointStored: ...

    async def _serve_state(self, group: Group, request: StateRequested) -> None: ...

    async def _send_state(self, group: Group, request: StateRequested, snapshot: bytes,
                          covered: dict[str, int]) -> None: ...


class Group:
    """A joined group: publish to it, iterate its events, read its current view."""

    def __init__(self, client: GroupHost, name: str, accept_from: str,
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
        # kept until the server answers (and resent after a reconnect): an exact copy, because
        # orjson's own bytes keep its whole write buffer (about eight times the payload)
        return memoryview(data).tobytes()

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

    @property
    def duplicates_dropped(self) -> int:
        """Deliveries of this group the SDK dropped as duplicates (a `deliver` whose seq its
        stream had already handed over) since the member joined it; reconnects and resumes
        keep counting. The application never sees them; a server that sends them is still
        worth knowing about (the chaos verdict requires 0). Read-only; 0 before the join."""
        g = self._client.protocol.groups.get(self.name)
        return 0 if g is None else g.duplicates

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
        queue, room = self._queue, self._room
        while True:
            if room.is_set() and self._handler is None:
                # `_next`'s hot path, inlined: a message already queued, while the reader
                # is not held back, costs no coroutine of its own (issue 34, iterator row)
                m = queue.pop_if(Message)
                if m is not None:
                    self._delivered[m.stream] = m.seq  # (a dict an install may replace)
                    yield m
                    continue
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
                async with asyncio.timeout(timeout):
                    e = await self._queue.get()
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
