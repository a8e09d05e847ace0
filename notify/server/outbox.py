"""Per-member sender workers (seed 003 §3.3): one task and one bounded queue per connection.

A member that reads slowly fills only its own queue (G11). When the queue passes its bound, in
frames or in bytes (G14: a few large frames weigh what many small ones do), the member is cut
with close code 4001 (slow consumer); it can then resume from its offsets (G7).
Frames queued together go out as one `batch` frame, which is what makes fan-out to many members
cheaper per message than one WebSocket frame each.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from notify.core.errors import CloseCode
from notify.server.mailbox import Mailbox
from notify.server.wire import batch

log = structlog.get_logger("notify.server")

#: frames per batch frame, and bytes: keeps a batch well under any client's max message size
_BATCH_FRAMES = 512
_BATCH_BYTES = 256 * 1024
#: how long a draining close waits for the queue to go out
_DRAIN_SECONDS = 2.0
#: queued by a draining close: frames before it go out, then the connection closes
_CLOSE = b""


class Outbox:
    __slots__ = ("_bound", "_bytes", "_closer", "_closing", "_exempt", "_exempt_bytes",
                 "_mailbox", "_max_bytes", "_sent", "_task", "_ws", "on_slow")

    def __init__(self, ws: ServerConnection, bound: int, *, max_bytes: int = 1 << 62,
                 on_slow: Callable[[], None] | None = None,
                 sent_bytes: list[int] | None = None) -> None:
        self._ws = ws
        #: a one-element list shared by all outboxes: bytes written (for metrics)
        self._sent = sent_bytes if sent_bytes is not None else [0]
        self._bound = bound
        self._mailbox: Mailbox[bytes] = Mailbox()
        self._closing = False
        #: the close under way (kept: a task nobody holds may vanish)
        self._closer: asyncio.Task[None] | None = None
        #: queued frames (and their bytes) that do not count against the bound (a resume's
        #: replay, see `push`)
        self._exempt = 0
        self._exempt_bytes = 0
        self._bytes = 0
        self._max_bytes = max_bytes
        self.on_slow = on_slow
        self._task = asyncio.get_running_loop().create_task(self._run())

    def __len__(self) -> int:
        return len(self._mailbox)

    def push(self, frame: bytes, *, bounded: bool = True) -> None:
        """Queue `frame`. `bounded=False` is for a replay of what the member missed: it arrives
        as one burst that says nothing about how fast the member reads, and it can be longer
        than the bound (a slow consumer missed more than that), so it must not cut the member
        it is meant to resume (G11)."""
        if self._closing:
            return
        self._mailbox.put(frame)
        self._bytes += len(frame)
        if not bounded:
            self._exempt += 1
            self._exempt_bytes += len(frame)
        elif len(self._mailbox) - self._exempt > self._bound or \
                self._bytes - self._exempt_bytes > self._max_bytes:
            if self.on_slow is not None:
                self.on_slow()
            self.close(CloseCode.SLOW_CONSUMER, "slow consumer: outbound queue over its bound")

    def close(self, code: int, reason: str, *, drain: bool = False) -> None:
        """Close the connection. With `drain`, what is queued goes out first (e.g. the `error`
        frame that says why), for at most `_DRAIN_SECONDS`; a slow consumer is never drained."""
        if self._closing:
            return
        self._closing = True
        loop = asyncio.get_running_loop()
        if drain and not self._task.done():
            self._mailbox.put(_CLOSE)
            self._closer = loop.create_task(self._close_after_drain(code, reason))
            return
        self._task.cancel()
        self._closer = loop.create_task(self._ws.close(code, reason))

    def abort(self) -> None:
        """Drop the connection at once, sending nothing more (fail-stop: see NotifyServer.halt)."""
        self._closing = True
        self._task.cancel()
        self._ws.transport.abort()

    async def _close_after_drain(self, code: int, reason: str) -> None:
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(self._task), _DRAIN_SECONDS)
        self._task.cancel()
        await self._ws.close(code, reason)

    async def stop(self) -> None:
        self._closing = True
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _run(self) -> None:
        ws = self._ws
        sent = self._sent
        try:
            while True:
                frames = await self._mailbox.drain(_BATCH_FRAMES)
                last = frames[-1] == _CLOSE
                if last:
                    frames.pop()
                    if not frames:
                        return
                self._exempt = max(self._exempt - len(frames), 0)
                size = sum(map(len, frames))
                self._bytes -= size
                self._exempt_bytes = max(self._exempt_bytes - size, 0)
                sent[0] += size
                if len(frames) == 1:
                    await ws.send(frames[0], text=True)
                    if last:
                        return
                    continue
                start = 0
                size = 0
                for i, f in enumerate(frames):
                    size += len(f)
                    if size > _BATCH_BYTES and i > start:
                        await ws.send(batch(frames[start:i]), text=True)
                        start, size = i, len(f)
                await ws.send(batch(frames[start:]) if len(frames) - start > 1 else frames[start],
                              text=True)
                if last:
                    return
        except ConnectionClosed:
            pass
        except Exception:  # a bug of ours: drop this member's link, the others go on (G13)
            log.exception("outbox_failed")
            self._closing = True
            self._ws.transport.abort()  # the hub hears a lost connection; the member resumes
