"""The one interpreter of the core's actions, shared by the server and the simulator.

Every rule lives in `notify.core`: when a frame may leave (after the write it depends on, see
notify/core/writes.py), who gets it, when to stop. What is left is mechanical, and it is the
same for the WebSocket server and for the deterministic simulator in tests/unit/sim.py, so the
simulator exercises exactly the code the server runs: serialise each frame once (one
`view_install` or `deliver` object goes to many members), hand bytes to the host's per-member
senders, hand writes to storage and feed their completion back to the hub, and stop the host
on `Halt`.

A host implements `Effects`. Storage may finish a write at once (inside `write`, as the tests'
hosts do), on the loop's next turn (the memory log) or later (SQLite, from its writer thread):
a completion that comes while actions are being applied is queued behind them, so the hub is
never re-entered.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Protocol

import structlog

from notify.core import Action, Close, CloseCode, Fanout, Halt, Hub, LogEvent, Send, Write
from notify.core.actions import (
    CommitCheckpoint,
    Deliver,
    DiscardCheckpoint,
    Error,
    Rejected,
    ServeCheckpoint,
    StoreCheckpointChunk,
)
from notify.server.metrics import ServerStats, bump
from notify.server.wire import dumps
from notify.storage.base import Done

log = structlog.get_logger("notify.server")

CheckpointAction = StoreCheckpointChunk | CommitCheckpoint | DiscardCheckpoint | ServeCheckpoint


class Push(Protocol):
    def __call__(self, conn: int, data: bytes, *, bounded: bool = True) -> None: ...


class Effects(Protocol):
    """What the interpreter asks of its host."""

    def push(self, conn: int, data: bytes, *, bounded: bool = True) -> None:
        """Queue serialised frame(s) for `conn`'s sender (dropped if it is gone)."""

    def close(self, conn: int, code: int, reason: str, *, drain: bool) -> None: ...

    def write(self, write: Write, done: Done) -> None:
        """Make `write` durable, then call `done` once (at once, or later on the loop)."""

    def event(self, e: LogEvent) -> None: ...

    def checkpoint(self, a: CheckpointAction) -> None: ...

    def halt(self, reason: str) -> None:
        """Stop: the server can no longer keep a promise (G13 fail-stop)."""


class Interpreter:
    __slots__ = ("_clock", "_effects", "_hub", "_queue", "_running", "halted", "stats")

    def __init__(self, hub: Hub, effects: Effects, clock: Callable[[], float],
                 stats: ServerStats | None = None) -> None:
        self._hub = hub
        self._effects = effects
        self._clock = clock
        self.stats = stats if stats is not None else ServerStats()
        self._queue: deque[Action] = deque()
        self._running = False
        #: the reason, once a `Halt` was applied: nothing more is done after it
        self.halted: str | None = None

    def run(self, actions: list[Action]) -> None:
        """Apply `actions` in order (and whatever storage completes meanwhile, after them)."""
        self._queue.extend(actions)
        if self._running:
            return
        self._running = True
        try:
            self._drain()
        finally:
            self._running = False

    def _drain(self) -> None:
        queue = self._queue
        # The core sends one frame object to many members (confirm, view_change, install):
        # serialise it once per run of sends, not once per member.
        last_frame: object = None
        data = b""
        effects, stats = self._effects, self.stats
        while queue:
            a = queue.popleft()
            if self.halted is not None:
                queue.clear()
                return
            try:
                if isinstance(a, Fanout):
                    msg_data = dumps(Deliver.of(a.message))
                    for conn in a.conns:
                        effects.push(conn, msg_data)
                    stats.deliveries += len(a.conns)
                    if a.reply is not None:
                        stats.messages += 1
                        effects.push(a.reply.conn, dumps(a.reply.frame))
                elif isinstance(a, Send):
                    if a.frame is not last_frame:
                        last_frame, data = a.frame, dumps(a.frame)
                        if isinstance(a.frame, Error):
                            stats.errors_out += 1
                            bump(stats.by_code, a.frame.code)
                        elif isinstance(a.frame, Rejected):
                            bump(stats.rejected, a.frame.code)
                    effects.push(a.conn, data, bounded=not a.replay)
                elif isinstance(a, Write):
                    effects.write(a, self._completion(a))
                elif isinstance(a, LogEvent):
                    effects.event(a)
                elif isinstance(a, Close):
                    bump(stats.closes, int(a.code))
                    effects.close(a.conn, a.code, a.reason, drain=a.code != CloseCode.SLOW_CONSUMER)
                elif isinstance(a, Halt):
                    self.halted = a.reason
                    queue.clear()
                    log.critical("halt", reason=a.reason)
                    effects.halt(a.reason)
                    return
                else:
                    effects.checkpoint(a)
            except Exception:  # a bug of ours: the others' frames must still go (G13)
                stats.internal_errors += 1
                log.exception("action_failed", action=type(a).__name__)

    def _completion(self, w: Write) -> Done:
        group, ticket = w.group, w.ticket

        def done(error: str | None) -> None:
            if self.halted is not None:
                return
            if error is not None:
                log.error("write_failed", group=group, ticket=ticket, error=error)
            self.run(self._hub.written(group, ticket, error, self._clock()))

        return done


__all__ = ["CheckpointAction", "Done", "Effects", "Interpreter", "Push"]
