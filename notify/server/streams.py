"""Stream workers (seed 003 §3.3): one task per stream of each group.

A stream worker takes its stream's accepted messages in `seq` order, waits until the log has them
(G10), serialises each `deliver` frame once and hands the same bytes to every recipient's outbox,
then answers the publisher. Streams never wait on each other: a burst on one sender's FIFO stream
or a slow durable write does not hold up the `total` stream or another sender (G11).

The install barrier (DESIGN §4, G2): a view install must reach each member behind every message
of the old view and ahead of every message of the new one. `GroupStreams.barrier()` puts a marker
in every stream of the group; each worker that reaches it stops; the last one sends the install
frames and releases them all. Streams created while a barrier is pending wait for it first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from notify.core.actions import Deliver, Fanout, Send, ServeCheckpoint
from notify.server.mailbox import Mailbox
from notify.server.wire import dumps
from notify.storage.base import MessageLog


@dataclass(slots=True)
class _Barrier:
    remaining: int
    sends: tuple[Send | ServeCheckpoint, ...]
    released: asyncio.Event = field(default_factory=asyncio.Event)


class Push(Protocol):
    def __call__(self, conn: int, data: bytes, *, bounded: bool = True) -> None: ...


class GroupStreams:
    """The stream workers of one group."""

    def __init__(self, group: str, log: MessageLog, push: Push,
                 serve: Callable[[ServeCheckpoint], None]) -> None:
        self.group = group
        self._log = log
        self._push = push
        self._serve = serve
        self._workers: dict[str, Mailbox[Fanout | _Barrier]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._gate: _Barrier | None = None

    def submit(self, item: Fanout) -> None:
        box = self._workers.get(item.message.stream)
        if box is None:
            box = self._workers[item.message.stream] = Mailbox()
            self._tasks.append(asyncio.get_running_loop().create_task(self._run(box, self._gate)))
        box.put(item)

    def barrier(self, sends: tuple[Send | ServeCheckpoint, ...]) -> None:
        if not self._workers:
            self._send_all(sends)
            return
        b = _Barrier(len(self._workers), sends)
        self._gate = b
        for box in self._workers.values():
            box.put(b)

    def _send_all(self, sends: tuple[Send | ServeCheckpoint, ...]) -> None:
        last: object = None
        data = b""
        for s in sends:
            if isinstance(s, ServeCheckpoint):
                self._serve(s)
                continue
            if s.frame is not last:  # one view_install object goes to every member
                last, data = s.frame, dumps(s.frame)
            self._push(s.conn, data, bounded=not s.replay)

    async def _run(self, box: Mailbox[Fanout | _Barrier], gate: _Barrier | None) -> None:
        if gate is not None:
            await gate.released.wait()
        push = self._push
        while True:
            items = await box.drain()
            # Store the whole run first so a group commit covers it, then wait once (G10).
            pending: Awaitable[None] | None = None
            for item in items:
                if isinstance(item, Fanout):
                    pending = self._log.append(item.message) or pending
            if pending is not None:
                await pending
            for item in items:
                if isinstance(item, _Barrier):
                    item.remaining -= 1
                    if item.remaining == 0:
                        self._send_all(item.sends)
                        item.released.set()
                        if self._gate is item:
                            self._gate = None
                    else:
                        await item.released.wait()
                    continue
                data = dumps(Deliver.of(item.message))
                for conn in item.conns:
                    push(conn, data)
                if item.reply is not None:
                    push(item.reply.conn, dumps(item.reply.frame))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
