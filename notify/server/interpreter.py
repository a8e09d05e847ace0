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
from notify.server.wire import BATCH_BYTES, BATCH_FRAMES, batch, dumps, packed, runs
from notify.storage.base import Done

log = structlog.get_logger("notify.server")

CheckpointAction = StoreCheckpointChunk | CommitCheckpoint | DiscardCheckpoint | ServeCheckpoint


class Push(Protocol):
    def __call__(self, conn: int, data: bytes, *, bounded: bool = True,
                 frames: int = 1) -> None: ...


class Effects(Protocol):
    """What the interpreter asks of its host."""

    def push(self, conn: int, data: bytes, *, bounded: bool = True, frames: int = 1) -> None:
        """Queue a serialised frame for `conn`'s sender (dropped if it is gone): one frame, or
        a `batch` frame of `frames` frames (a run of fan-outs, see `Interpreter._fanout`)."""

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
        effects, stats = self._effects, self.stats
        while queue:
            a = queue.popleft()
            if self.halted is not None:
                queue.clear()
                return
            try:
                if isinstance(a, Fanout):
                    self._fanout(a)
                elif isinstance(a, Send):
                    self._sends(a)
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

    def _fanout(self, first: Fanout) -> None:
        """Fan out `first` and the fan-outs queued right behind it to the same members.

        A group stores what its publishers sent during one write as one batch, and its fan-outs
        come out of the core together, to the same recipients (`Group._append_intake`). They go
        to each member as one `batch` frame, pushed once: the per-member cost (the outbox, its
        bound, its wake-up) is paid once per run instead of once per message, which is most of
        the server's cost of a delivery. Each member still gets every message in offset order,
        and the publishers' `published` answers follow the run, in order."""
        queue, conns = self._queue, first.conns
        frames = [dumps(Deliver.of(first.message))]
        replies = [first.reply]
        size = len(frames[0])
        while queue and len(frames) < BATCH_FRAMES and size < BATCH_BYTES:
            a = queue[0]
            if type(a) is not Fanout or (a.conns is not conns and a.conns != conns):
                break
            queue.popleft()
            data = dumps(Deliver.of(a.message))
            frames.append(data)
            replies.append(a.reply)
            size += len(data)
        n = len(frames)
        run = frames[0] if n == 1 else batch(frames)
        push = self._effects.push
        for conn in conns:
            push(conn, run, frames=n)
        self.stats.deliveries += len(conns) * n
        answers: dict[int, list[tuple[bytes, bool]]] = {}
        for r in replies:
            if r is not None:
                answers.setdefault(r.conn, []).append((dumps(r.frame), False))
                self.stats.messages += 1
        self._push_each(answers)

    def _sends(self, first: Send) -> None:
        """`first` and the sends queued right behind it: each connection's frames of the run in
        as few pushes as the batch limits allow, in the order they were sent.

        The core sends one frame object to many members (a `confirm` of an atomic message, a
        `view_change`, an install), and a replay is a run of frames to one member: each frame
        is serialised once, and each member's outbox is pushed once per run, not once per
        frame. Order matters only per connection, and is kept."""
        queue, stats = self._queue, self.stats
        per: dict[int, list[tuple[bytes, bool]]] = {}
        last: object = None
        data = b""
        a = first
        while True:
            if a.frame is not last:
                try:
                    data = dumps(a.frame)
                except Exception:  # a bug of ours: this frame is lost, the others go (G13)
                    stats.internal_errors += 1
                    log.exception("action_failed", action="Send", frame=type(a.frame).__name__)
                    data = b""
                last = a.frame
                if isinstance(a.frame, Error):
                    stats.errors_out += 1
                    bump(stats.by_code, a.frame.code)
                elif isinstance(a.frame, Rejected):
                    bump(stats.rejected, a.frame.code)
            if data:
                per.setdefault(a.conn, []).append((data, a.replay))
            if not queue or type(queue[0]) is not Send:
                break
            a = queue.popleft()  # type: ignore[assignment]
        self._push_each(per)

    def _push_each(self, per: dict[int, list[tuple[bytes, bool]]]) -> None:
        """Push each connection its frames (serialised, with whether each is part of a replay),
        in order: a lone frame as it is, several as `batch` runs within the batch limits, a
        replay's frames apart from the others (they do not count against the bound). Members
        that get the same frames get the same bytes (a cluster link sends one copy per edge)."""
        push = self._effects.push
        shared: dict[tuple[int, ...], bytes] = {}
        for conn, frames in per.items():
            if len(frames) == 1:
                push(conn, frames[0][0], bounded=not frames[0][1])
                continue
            start = 0
            while start < len(frames):  # segments of the same kind (replay or not)
                replay = frames[start][1]
                end = start + 1
                while end < len(frames) and frames[end][1] == replay:
                    end += 1
                for run, n in runs([(d, 1) for d, _ in frames[start:end]]):
                    key = tuple(map(id, run))
                    data = shared.get(key)
                    if data is None:
                        data = shared[key] = packed(run)
                    push(conn, data, bounded=not replay, frames=n)
                start = end

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
