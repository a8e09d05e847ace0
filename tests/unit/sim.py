"""A simulated network for the sans-I/O core, in the style of trio's fake DTLS network.

One `Hub` and N simulated members, each a real `ClientProtocol` on a simulated connection. A
seeded `random.Random` decides everything: which queue moves next, when time advances, and which
faults happen (connection loss, resume on a new connection, new incarnations, joins, leaves, slow
readers, publishes of every kind, idempotent retries, non-member publishes, long pauses past the
suspect, flush and ACK timeouts). Nothing reads the wall clock, so a seed replays exactly.

The core runs under the runtime's `Driver` (notify/runtime), the one every host runs: the
simulation is only its ports. Storage is a FIFO of writes (like the SQLite writer) that the
rng finishes whenever it likes, so commits are slow or fast at random, and fails an append now
and then (`p_write_fail`): the core must retract it and refuse its publishers. Every frame that
leaves is checked against what storage holds: a `deliver` or a `published` only for a stored
message, a `view_install` only for a stored view, an `abort` only once stored (G10, G1, G5).
A `Close` drops what is queued on the connection (the driver tells the hub `closed`).
Connections are FIFO both ways. Frames of a lost connection are dropped. A lost connection may be
noticed by the server only later (a dead TCP peer), so a resume can arrive first.

The clients (the SDK protocol, the application's actions, the client faults, the checks of all
they are told) are tests/unit/sim_clients.py's, shared with the cluster simulator (sim_cluster.py):
this file is the server side. `Observer` checks DESIGN §2 G1-G6 at every application event a
client produces and at the end (after a quiescent phase in which every queue drains and every
timeout fires).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson
from sim_clients import (
    BENIGN_ERRORS,
    ClientSim,
    Conn,
    InvariantViolation,
    MsgInfo,
    Observer,
    SimMember,
    Track,
    _pick,
)

from notify.core import Append, CoreConfig, Hub, Limits, LogEvent, Timeouts, Write
from notify.core.actions import Error
from notify.runtime import CheckpointAction, Done, Driver, Fetched, Paged
from notify.runtime.frames import unbatch
from notify.storage.memory import MemoryLog
from notify.wire import parse

__all__ = [  # sim_clients' names, as they were here before it
    "BENIGN_ERRORS", "EPOCH", "GROUPS", "Conn", "InvariantViolation", "MsgInfo", "Observer",
    "SimConfig", "SimMember", "Simulation", "Track", "run", "wire"]

GROUPS = ("g1", "g2")
EPOCH = 7


def wire(frame: object) -> dict[str, Any]:
    """A server frame exactly as the client receives it."""
    out: dict[str, Any] = orjson.loads(orjson.dumps(frame))
    return out


# -- the simulation ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SimConfig:
    members: int = 5
    groups: tuple[str, ...] = GROUPS
    timeouts: Timeouts = field(default_factory=lambda: Timeouts(
        suspect_timeout=3.0, flush_timeout=5.0, ack_timeout=10.0, install_hold=0.0))
    p_fault: float = 0.05
    p_publish: float = 0.15
    p_non_member_publish: float = 0.03
    outsiders: int = 1
    p_accept_any: float = 0.5
    #: how likely storage fails an append (the core retracts it and refuses its publishers)
    p_write_fail: float = 0.02
    #: the groups' in-memory window (messages); a small one makes members that come back
    #: read the rest from the log (`catchup_log`, `history` pages)
    window: int = Limits().window_messages


class Simulation(ClientSim):
    """One hub under the runtime's driver; this object is its ports (transport, store,
    observer) and, through `ClientSim`, its clients."""

    cfg: SimConfig

    def __init__(self, seed: int, cfg: SimConfig | None = None) -> None:
        super().__init__(seed, cfg or SimConfig())
        tokens = iter(range(1, 1 << 30))
        self.hub = Hub(CoreConfig(timeouts=self.cfg.timeouts,
                                  limits=Limits(window_messages=self.cfg.window)),
                       new_token=lambda: f"s{next(tokens)}", epoch=EPOCH)
        self.driver = Driver(self.hub, transport=self, store=self, observer=self,
                             clock=lambda: self.now)
        #: writes handed to storage, answered in order when the rng says so
        self.writes: deque[tuple[Write, Done]] = deque()
        #: history pages asked for, read (from what is stored then) when the rng says so
        self.reads: deque[tuple[str, int, int, int, Paged]] = deque()
        #: what storage holds, as the memory log keeps it (to bring back evicted groups)
        self.log = MemoryLog()

    # -- the driver's ports (notify/runtime/ports.py) --------------------------------------------

    def push(self, conn: int, data: bytes, *, bounded: bool = True, frames: int = 1) -> None:
        for frame in unbatch(orjson.loads(data)):
            c = self.conns.get(conn)
            self.check_durable(frame, c.member if c is not None else None)
            if c is not None and c.alive and c.server_open:
                c.to_client.append(frame)

    def close(self, conn: int, code: int, reason: str, *, drain: bool) -> None:
        c = self.conns.get(conn)
        if c is not None and c.alive:
            c.server_open = False  # the driver tells the hub
            self.client_lost(c)

    def write(self, write: Write, done: Done) -> None:
        self.writes.append((write, done))

    def fetch(self, group: str, answer: Fetched) -> None:
        """A group that left memory (G14) comes back from what storage holds."""
        sg = self.log.load_group(group, self.hub.config.limits.window_messages)
        if sg is not None:
            self.count("group.reloaded")
        answer(sg, None)

    def read(self, group: str, after: int, limit: int, max_bytes: int, answer: Paged) -> None:
        self.reads.append((group, after, limit, max_bytes, answer))

    def page(self) -> None:
        """Storage reads the oldest page asked for, as the log is now."""
        group, after, limit, max_bytes, answer = self.reads.popleft()
        self.count("history.page")
        answer(self.log.read_page(group, after, limit, max_bytes), None)

    def forget(self, group: str) -> None:
        pass

    def event(self, e: LogEvent) -> None:
        pass

    def checkpoint(self, a: CheckpointAction) -> None:
        self.obs.fail(f"no checkpoint was asked for: {a}")

    def halt(self, reason: str) -> None:
        self.obs.fail(f"halted: {reason}")

    def store(self) -> None:
        """Storage finishes the oldest write (appends fail now and then)."""
        w, done = self.writes.popleft()
        if isinstance(w, Append) and self.rng.random() < self.cfg.p_write_fail:
            self.count("write.failed")
            done("injected: disk I/O error")
            return
        self.log.write(w, lambda error: None)  # no loop here: stored at once
        self.stored(w, self.hub.groups[w.group].view.version if isinstance(w, Append) else 0)
        done(None)

    # -- the server side of the clients (sim_clients.ClientSim's hooks) -------------------------

    def open_conn(self, m: SimMember, hello: dict[str, Any]) -> Conn:
        c = self.conns[cid] = Conn(cid := self.new_conn_id(), m.name)
        self.driver.opened(c.id)
        return c

    def server_closed(self, c: Conn) -> None:
        if c.server_open:
            c.server_open = False
            self.driver.closed(c.id)

    def server_in(self, c: Conn) -> None:
        f = c.to_server.popleft()
        frame = parse(orjson.dumps(f))
        if isinstance(frame, Error):
            self.obs.fail(f"the client sent a frame the server cannot parse: {f} ({frame})")
            return
        self.driver.frame(c.id, frame)

    def outcome(self, group: str, offset: int) -> bool | None:
        topic = self.hub.groups[group].topic
        known = topic.outcome(offset)
        return known if known is not None else topic.decided(offset)

    def droppable(self) -> list[SimMember]:
        """Only while some member is connected (as it always was here: the seeds replay)."""
        return super().droppable() if self.connected_members() else []

    def publish_groups(self) -> list[str]:
        return [g for g in self.cfg.groups if g in self.hub.groups]

    def queues(self) -> list[tuple[str, Any]]:
        options: list[tuple[str, Any]] = []
        options += [("s", c) for c in self.conns.values() if c.to_server and c.server_open]
        options += [("w", None)] if self.writes else []
        options += [("r", None)] if self.reads else []
        options += [("c", m) for m in self.everyone if m.conn is not None and m.conn.to_client]
        return options

    def move(self, kind: str, x: Any, n: int) -> None:
        if kind == "s":
            self.server_in(x)
        elif kind == "w":
            self.store()
        elif kind == "r":
            self.page()
        else:
            self.client_in(x, n)

    def next_wakeup(self) -> float | None:
        return self.driver.next_wakeup()

    def timers(self) -> None:
        self.driver.tick()

    # -- the scheduler -------------------------------------------------------------------------

    def step(self) -> None:
        self.steps += 1
        rng = self.rng
        self.advance(rng.expovariate(1 / 0.01))
        choices: list[tuple[float, str]] = []
        to_server = [c for c in self.conns.values() if c.to_server and c.server_open]
        if to_server:
            choices.append((4.0, "server_in"))
        if self.writes:
            choices.append((4.0, "store"))
        if self.reads:
            choices.append((4.0, "page"))
        readers = [m for m in self.everyone if m.conn is not None and m.conn.to_client]
        if readers:
            choices.append((4.0, "client_in"))
        choices.append((self.cfg.p_publish * 10, "publish"))
        choices.append((self.cfg.p_fault * 10, "fault"))
        kind = _pick(rng, choices)
        self.trace.append((self.steps, kind))
        if kind == "server_in":
            self.server_in(rng.choice(to_server))
        elif kind == "store":
            self.store()
        elif kind == "page":
            self.page()
        elif kind == "client_in":
            weights = [0.1 if m.slow else 1.0 for m in readers]
            m = rng.choices(readers, weights)[0]
            n = 1000 if m.slow else rng.randint(1, 3)
            self.client_in(m, n)
        elif kind == "publish":
            self.app_publish()
        else:
            self.fault()

    # -- running -------------------------------------------------------------------------------

    def quiesce(self) -> None:
        """No more faults: bring back some absent members, then let every timeout fire."""
        self.calm_clients()
        self.reconnect_some()
        self.settle(200, reconnect=False)

    def final_checks(self) -> None:
        for name, g in self.hub.groups.items():
            self.check_group(name, g, "server")
        self.check_total_order()


def run(seed: int, steps: int, cfg: SimConfig | None = None) -> Simulation:
    """Run one simulation; any failure message starts with `seed=...` so it replays exactly."""
    return Simulation(seed, cfg).run(steps)
