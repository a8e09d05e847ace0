"""Per-member sender workers (seed 003 §3.3): one task and one bounded queue per connection.

A member that reads slowly fills only its own queue (G11). When the queue passes its bound, in
frames or in bytes (G14: a few large frames weigh what many small ones do), the member is cut
with close code 4001 (slow consumer); it can then resume from its offsets (G7).
Frames queued together go out as one `batch` frame, which is what makes fan-out to many members
cheaper per message than one WebSocket frame each.

Who writes: while a member's socket keeps up (nothing waits in its transport), a server-wide
`Flusher` writes what each outbox queued during a turn of the loop, in one callback on the next
turn, straight to the transport: one callback for every member instead of a task switch per
member (the fan-out of one message to 50 members was 50 task wake-ups). Once a socket backs up,
the outbox starts its sender task, which writes instead, through websockets' `send()` and its
flow control (it waits for the socket to drain, the queue grows, the bound cuts the member), and
ends once it has written everything queued. The two never reorder frames: both take from the
same queue, each writes what it took before it gives up the loop, and while the task exists the
flusher leaves the writing to it.

An idle connection holds no task and no queue (issue 34: a task, its frame and its wake-up event
were about 2 KiB of each idle connection's memory): the queue is a list made by the first push
and handed over whole when taken, the task is started only when a socket backs up or a draining
close must wait. Without a flusher (tests), the task runs for the outbox's life.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode
from websockets.protocol import OPEN

from notify.core.errors import CloseCode
from notify.runtime.frames import BATCH_FRAMES, packed, runs
from notify.supervision import cancel_and_wait

log = structlog.get_logger("notify.server")

#: how long a draining close waits for the queue to go out
_DRAIN_SECONDS = 2.0
#: queued by a draining close: frames before it go out, then the connection closes
_CLOSE = (b"", 0)


class Flusher:
    """Writes, on the loop's next turn, what the outboxes marked during this one queued (see
    the module docstring). One per server."""

    __slots__ = ("_marked", "_scheduled")

    def __init__(self) -> None:
        self._marked: list[Outbox] = []
        self._scheduled = False

    def mark(self, box: Outbox) -> None:
        self._marked.append(box)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        marked, self._marked = self._marked, []
        framed: dict[int | tuple[int, ...], tuple[list[bytes], bytes]] = {}
        for box in marked:
            box._flush(framed)


def text_frame(data: bytes) -> bytes:
    """`data` as one unmasked WebSocket text frame, as websockets serialises it for a server
    connection without extensions. A server's frames are not masked, so a frame that goes to
    many members is the same bytes for all of them: the flusher serialises it once."""
    return Frame(Opcode.TEXT, data).serialize(mask=False, extensions=[])


class Outbox:
    __slots__ = ("_bound", "_bytes", "_closer", "_closing", "_exempt", "_exempt_bytes",
                 "_flusher", "_frames", "_marked", "_max_bytes", "_queue", "_sent", "_task",
                 "_wake", "_ws", "on_slow")

    def __init__(self, ws: ServerConnection, bound: int, *, max_bytes: int = 1 << 62,
                 on_slow: Callable[[], None] | None = None,
                 sent_bytes: list[int] | None = None, flusher: Flusher | None = None) -> None:
        self._ws = ws
        #: writes for this outbox while its socket keeps up (None: the task always writes)
        self._flusher = flusher
        #: marked with the flusher for its next flush
        self._marked = False
        #: a one-element list shared by all outboxes: bytes written (for metrics)
        self._sent = sent_bytes if sent_bytes is not None else [0]
        self._bound = bound
        #: queued items, oldest first (None while nothing is): a frame, or a `batch` frame of
        #: several, and how many frames it holds
        self._queue: list[tuple[bytes, int]] | None = None
        self._closing = False
        #: the close under way (kept: a task nobody holds may vanish)
        self._closer: asyncio.Task[None] | None = None
        #: queued frames and bytes, and those of them that do not count against the bound (a
        #: resume's replay, see `push`)
        self._frames = 0
        self._bytes = 0
        self._exempt = 0
        self._exempt_bytes = 0
        self._max_bytes = max_bytes
        self.on_slow = on_slow
        #: the sender task (None while the flusher writes: see the module docstring; a task
        #: that ended on a closed connection stays, done) and what wakes it
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        if flusher is None:
            self._start()

    def __len__(self) -> int:
        """Frames queued (a `batch` counts as the frames it holds)."""
        return self._frames

    def _start(self) -> asyncio.Event:
        """The sender task, started unless it exists; returns what wakes it."""
        if self._task is None or self._wake is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(self._wake))
        return self._wake

    def push(self, frame: bytes, *, bounded: bool = True, frames: int = 1) -> None:
        """Queue `frame`: one frame, or a `batch` frame of `frames` frames (a run of fan-outs;
        it counts as that many against the bound). `bounded=False` is for a replay of what the
        member missed: it arrives as one burst that says nothing about how fast the member
        reads, and it can be longer than the bound (a slow consumer missed more than that), so
        it must not cut the member it is meant to resume (G11)."""
        if self._closing:
            return
        queue = self._queue
        if queue is None:
            queue = self._queue = []
        queue.append((frame, frames))
        flusher = self._flusher
        if flusher is None:
            self._start().set()
        elif not self._marked:
            self._marked = True
            flusher.mark(self)
        self._frames += frames
        self._bytes += len(frame)
        if not bounded:
            self._exempt += frames
            self._exempt_bytes += len(frame)
        elif self._frames - self._exempt > self._bound or \
                self._bytes - self._exempt_bytes > self._max_bytes:
            if self.on_slow is not None:
                self.on_slow()
            self.close(CloseCode.SLOW_CONSUMER, "slow consumer: outbound queue over its bound")

    @property
    def closing(self) -> bool:
        """The server decided to close this connection (what it reads now is not acted on)."""
        return self._closing

    def close(self, code: int, reason: str, *, drain: bool = False) -> None:
        """Close the connection. With `drain`, what is queued goes out first (e.g. the `error`
        frame that says why), for at most `_DRAIN_SECONDS`; a slow consumer is never drained."""
        if self._closing:
            return
        self._closing = True
        loop = asyncio.get_running_loop()
        task = self._task
        # (a task that ended has nowhere to write: its connection closed)
        writing = bool(self._queue) if task is None else not task.done()
        if drain and writing:
            # the task writes what is queued (the flusher no longer does), then the close
            queue = self._queue
            if queue is None:
                queue = self._queue = []
            queue.append(_CLOSE)
            self._start().set()
            self._closer = loop.create_task(self._close_after_drain(code, reason))
            return
        if task is not None:
            task.cancel()
        self._closer = loop.create_task(self._ws.close(code, reason))

    def abort(self) -> None:
        """Drop the connection at once, sending nothing more (fail-stop: see NotifyServer.halt)."""
        self._closing = True
        if self._task is not None:
            self._task.cancel()
        self._ws.transport.abort()

    async def _close_after_drain(self, code: int, reason: str) -> None:
        task = self._task
        assert task is not None
        await asyncio.wait((task,), timeout=_DRAIN_SECONDS)  # (however it ends; not cancelled)
        task.cancel()
        await self._ws.close(code, reason)

    async def stop(self) -> None:
        self._closing = True
        task = self._task
        if task is not None and (error := await cancel_and_wait(task)) is not None:
            raise error

    def _flush(self, framed: dict[int | tuple[int, ...], tuple[list[bytes], bytes]]) -> None:
        """The flusher's turn: write what is queued straight to the transport if the socket
        keeps up and no task is writing; otherwise leave it to the task (started if need be).
        `framed` holds the runs packed and serialised during this flush (see `text_frame`), by
        the ids of their items: members that queued the same items (a fan-out, then a view
        change...) get the same bytes, packed once, as the driver's `_push_each` does. It keeps
        the items, so no id is reused during the flush."""
        self._marked = False
        queue = self._queue
        if self._closing or not queue:
            return
        ws = self._ws
        try:
            transport = ws.transport
            protocol = ws.protocol
            if self._task is not None or transport.get_write_buffer_size() or \
                    protocol.state is not OPEN:
                self._start().set()  # the task writes, with websockets' flow control
                return
            self._queue = None
            if protocol.extensions or protocol.expect_continuation_frame or protocol.debug:
                for out in self._frames_out(queue):  # not the plain case `text_frame` is for
                    protocol.send_text(out)
                for data in protocol.data_to_send():
                    transport.write(data)
                return
            self._taken(queue)
            for run in _runs(queue):
                key = id(run[0]) if len(run) == 1 else tuple(map(id, run))
                known = framed.get(key)
                if known is None:
                    known = framed[key] = (run, text_frame(packed(run)))
                transport.write(known[1])
        except Exception:  # a bug of ours: drop this member's link, the others go on (G13)
            log.exception("outbox_failed")
            self._closing = True
            ws.transport.abort()  # the hub hears a lost connection; the member resumes

    def _take(self, limit: int) -> list[tuple[bytes, int]]:
        """Up to `limit` of the queued items, oldest first."""
        queue = self._queue
        assert queue
        if len(queue) <= limit:
            self._queue = None
            return queue
        items = queue[:limit]
        del queue[:limit]
        return items

    async def _run(self, wake: asyncio.Event) -> None:
        ws = self._ws
        try:
            while True:
                if not self._queue:
                    if self._flusher is not None and not self._closing:
                        # everything written: the flusher writes again while the socket keeps
                        # up (and starts a task again when it backs up)
                        self._task = self._wake = None
                        return
                    wake.clear()
                    await wake.wait()
                    continue
                items = self._take(BATCH_FRAMES)
                last = items[-1] is _CLOSE
                if last:
                    items.pop()
                    if not items:
                        return
                for out in self._frames_out(items):
                    await ws.send(out, text=True)
                if last:
                    return
        except ConnectionClosed:
            pass
        except Exception:  # a bug of ours: drop this member's link, the others go on (G13)
            log.exception("outbox_failed")
            self._closing = True
            self._ws.transport.abort()  # the hub hears a lost connection; the member resumes

    def _frames_out(self, items: list[tuple[bytes, int]]) -> list[bytes]:
        """Take `items` off the counts and pack them into as few WebSocket messages as the
        batch limits allow (a lone item goes as it is)."""
        self._taken(items)
        return [packed(run) for run in _runs(items)]

    def _taken(self, items: list[tuple[bytes, int]]) -> None:
        """`items` off the counts: they are being written."""
        count = size = 0
        for data, n in items:
            count += n
            size += len(data)
        self._frames -= count
        self._bytes -= size
        self._exempt = max(self._exempt - count, 0)
        self._exempt_bytes = max(self._exempt_bytes - size, 0)
        self._sent[0] += size


def _runs(items: list[tuple[bytes, int]]) -> list[list[bytes]]:
    """`items` cut into runs that each go as one WebSocket message (`runs`; a lone item
    without that work)."""
    if len(items) == 1:
        return [[items[0][0]]]
    return [run for run, _ in runs(items)]
