"""Driving the `Hub` by hand in unit tests.

`Net` runs the core through the runtime's `Driver` (the one every host runs), with a log that stores
every write at once unless a test holds them (`Net.writes_held`), in a real `MemoryLog` that
answers `history` pages, and records, per connection, the frames as the client would receive
them. `stored()` does the same for a bare action list.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from notify.core import CoreConfig, Hub, Limits, LogEvent, Retention, Timeouts, Write
from notify.core.actions import Action
from notify.core.events import AcceptFrom, FlushOk, Hello, Join, Order, Publish
from notify.runtime import CheckpointAction, Driver, Fetched, Paged
from notify.runtime.frames import unbatch
from notify.storage.memory import MemoryLog

G = "g"


def stored(hub: Hub, actions: list[Action], now: float = 0.0) -> list[Action]:
    """`actions` with every write stored as soon as it is issued, followed in place by what
    the hub then lets go (the frames it held behind the write, the next write...)."""
    out: list[Action] = []
    todo = list(actions)
    while todo:
        a = todo.pop(0)
        out.append(a)
        if isinstance(a, Write):
            todo[0:0] = hub.written(a.group, a.ticket, None, now)
    return out


class Net:
    def __init__(self, limits: Limits | None = None, *, history: bool = True,
                 retention: tuple[Retention, ...] = (), shared_log: bool = False,
                 **timeouts: float) -> None:
        t = Timeouts(**{"suspect_timeout": 3.0, "flush_timeout": 5.0, "ack_timeout": 10.0,
                        **timeouts})
        tokens = iter(range(1, 10_000))
        self.hub = Hub(CoreConfig(timeouts=t, limits=limits or Limits(), history=history,
                                  retention=retention, shared_log=shared_log),
                       new_token=lambda: f"tok{next(tokens)}", epoch=1)
        #: what was stored, as a log that pages (`read`)
        self.log = MemoryLog()
        self.now = 100.0
        self.inbox: dict[int, list[dict[str, Any]]] = {}
        self.closed: set[int] = set()
        self.sessions: dict[int, str] = {}
        self._conns = 0
        self.driver = Driver(self.hub, transport=self, store=self, observer=self,
                             clock=lambda: self.now)
        #: while True, writes wait in `self.writes` until `finish_writes()`
        self.writes_held = False
        self.writes: list[tuple[Write, Callable[[str | None], None]]] = []
        self.stored: list[Write] = []
        self.halts: list[str] = []
        #: the groups the store was told to forget (dropped, or evicted as idle)
        self.forgotten: list[str] = []
        #: every push, as (connection, frames it holds)
        self.pushes: list[tuple[int, int]] = []
        #: `check_deadlines()` after every step (off where a test counts the groups asked)
        self.check_every_step = True

    def apply(self, actions: list[Any]) -> None:
        self.driver.run(actions)
        self.check_deadlines()

    def check_deadlines(self) -> None:
        """The hub's earliest group deadline is the minimum over every group's, asked now:
        no call that moves a group's deadline may bypass the hub's bookkeeping
        (notify/core/deadlines.py). Checked after every step of every test that drives a `Net`."""
        if not self.check_every_step:
            return
        deadlines = self.hub._deadlines
        deadlines.settle(self.hub._deadline_of)
        asked = [d for g in self.hub.groups.values() if (d := g.next_deadline()) is not None]
        assert deadlines.earliest() == min(asked, default=None)
        assert len(deadlines) == len(asked)

    # -- the driver's ports -----------------------------------------------------------------------

    def push(self, conn: int, data: bytes, *, bounded: bool = True, frames: int = 1) -> None:
        self.pushes.append((conn, frames))
        if conn not in self.closed:
            self.inbox.setdefault(conn, []).extend(unbatch(orjson.loads(data)))

    def close(self, conn: int, code: int, reason: str, *, drain: bool) -> None:
        self.closed.add(conn)

    def write(self, write: Write, done: Callable[[str | None], None]) -> None:
        if self.writes_held:
            self.writes.append((write, done))
        else:
            self.stored.append(write)
            self.log.write(write, lambda _error: None)
            done(None)

    def finish_writes(self, error: str | None = None) -> None:
        """Storage answers the writes held now (`error`: they fail); the writes that their
        completion starts stay held."""
        todo, self.writes = self.writes, []
        for w, done in todo:
            if error is None:
                self.stored.append(w)
                self.log.write(w, lambda _error: None)
            done(error)
        self.check_deadlines()

    def fetch(self, group: str, answer: Fetched) -> None:
        answer(None, None)  # nothing leaves memory here

    def forget(self, group: str) -> None:
        self.forgotten.append(group)

    def read(self, group: str, after: int, limit: int, max_bytes: int, answer: Paged) -> None:
        answer(self.log.read_page(group, after, limit, max_bytes), None)

    def event(self, e: LogEvent) -> None:
        pass

    def checkpoint(self, a: CheckpointAction) -> None:
        raise AssertionError(f"unexpected {a}")

    def halt(self, reason: str) -> None:
        self.halts.append(reason)

    def connect(self, member: str, session: str | None = None, instance: str | None = None) -> int:
        self._conns += 1
        c = self._conns
        self.driver.opened(c)
        self.send(c, Hello(1, member, session, instance))
        welcome = self.take(c, "welcome")[0]
        self.sessions[c] = welcome["session"]
        return c

    def send(self, conn: int, frame: Any) -> None:
        self.driver.frame(conn, frame)
        self.check_deadlines()

    def drop(self, conn: int) -> None:
        self.closed.add(conn)
        self.driver.closed(conn)
        self.check_deadlines()

    def advance(self, dt: float) -> None:
        self.now += dt
        self.driver.tick()
        self.check_deadlines()

    def take(self, conn: int, *types: str) -> list[dict[str, Any]]:
        """The frames received since the last take (only `types`, if given)."""
        frames = self.inbox.pop(conn, [])
        return [f for f in frames if not types or f["type"] in types]

    def flush(self, *conns: int) -> None:
        """Each member answers the view_change it holds with flush_ok (frames kept)."""
        for c in conns:
            for f in self.inbox.get(c, []):
                if f["type"] == "view_change":
                    self.send(c, FlushOk(f["group"], f["proposed"]))

    def publish(self, conn: int, pid: str, *, order: Order = Order.FIFO, atomic: bool = False,
                same_view: bool = False, view: int | None = None, group: str = G) -> None:
        v = self.hub.groups[group].view.version if view is None else view
        self.send(conn, Publish(f"r-{pid}", group, pid, v, order, pid, atomic, same_view))


def delivered(frames: list[dict[str, Any]]) -> list[int]:
    return [f["offset"] for f in frames if f["type"] == "deliver"]


def form(net: Net, *members: str, accept_from: AcceptFrom = AcceptFrom.MEMBERS) -> list[int]:
    """Connect and join `members` one by one; returns their connections, inboxes emptied."""
    conns: list[int] = []
    for m in members:
        c = net.connect(m)
        net.send(c, Join(f"j-{m}", G, accept_from=accept_from))
        net.flush(*conns)
        conns.append(c)
    for c in conns:
        net.take(c)
    return conns


def view(net: Net) -> tuple[int, tuple[str, ...]]:
    v = net.hub.groups[G].view
    return v.version, v.members
