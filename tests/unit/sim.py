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

`Observer` checks DESIGN §2 G1-G6 at every application event a client produces and at the end
(after a quiescent phase in which every queue drains and every timeout fires).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson

from client_sdk.events import (
    Message,
    Outcome,
    Published,
    Rejected,
    Removed,
    ServerError,
    ViewInstalled,
)
from client_sdk.protocol import ClientProtocol, GroupPhase, ProtocolViolation
from notify.core import Append, CoreConfig, Hub, LogEvent, Timeouts, Write
from notify.core.actions import Error
from notify.core.membership import GroupState
from notify.runtime import CheckpointAction, Done, Driver, Fetched
from notify.runtime.frames import unbatch
from notify.storage.memory import MemoryLog
from notify.wire import parse

GROUPS = ("g1", "g2")
EPOCH = 7

#: errors a well-behaved client can get from races it cannot see; anything else is a bug
BENIGN_ERRORS = {
    "not_member",  # an ACK/flush_ok/leave that crossed its removal
    "wrong_view",  # a flush_ok that crossed a cancel or an install
    "join_pending",
    "no_group",
}


class InvariantViolation(AssertionError):
    pass


def wire(frame: object) -> dict[str, Any]:
    """A server frame exactly as the client receives it."""
    out: dict[str, Any] = orjson.loads(orjson.dumps(frame))
    return out


# -- the server's host ---------------------------------------------------------------------------


@dataclass(eq=False)
class Conn:
    id: int
    member: str
    to_server: deque[dict[str, Any]] = field(default_factory=deque)
    to_client: deque[dict[str, Any]] = field(default_factory=deque)
    #: the client still has this connection (False once lost or closed by the server)
    alive: bool = True
    #: the hub has not been told `closed` yet
    server_open: bool = True


# -- members ------------------------------------------------------------------------------------


@dataclass(eq=False)
class SimMember:
    name: str
    proto: ClientProtocol
    conn: Conn | None = None
    slow: bool = False
    accept_from: dict[str, str] = field(default_factory=dict)
    counter: int = 0
    #: publish id -> frame, not yet answered (resent after a reconnect)
    unanswered: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: publish id -> (frame, offset), answered `published`
    published: dict[str, tuple[dict[str, Any], int]] = field(default_factory=dict)
    join_reqs: dict[str, str] = field(default_factory=dict)  # req -> group
    reqs: int = 0

    def req(self) -> str:
        self.reqs += 1
        return f"{self.name}-{self.reqs}"


@dataclass(slots=True)
class MsgInfo:
    group: str
    offset: int
    stream: str
    seq: int
    sender: str
    stamp: int
    sending_view: int
    atomic: bool
    from_member: bool
    id: str
    same_view: bool


@dataclass(eq=False)
class Track:
    """What one member's application has seen of one group."""

    last_view: int | None = None
    removed: bool = False
    delivered: set[int] = field(default_factory=set)
    #: offsets app-delivered, by sending view (messages from members only)
    by_view: dict[int, set[int]] = field(default_factory=dict)
    stream_last: dict[str, int] = field(default_factory=dict)
    total: list[int] = field(default_factory=list)
    #: publish counter per sender stream (G3 in send order)
    sender_n: dict[str, int] = field(default_factory=dict)


class Observer:
    """The checker of DESIGN §2 guarantees over everything clients hand to their application."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.msgs: dict[tuple[str, int], MsgInfo] = {}
        self.by_seq: dict[tuple[str, str, int], int] = {}
        self.tracks: dict[tuple[str, str], Track] = {}
        self.views: dict[tuple[str, int], tuple[str, ...]] = {}
        #: (group, v) -> the set of view-v messages delivered by the first member installing v+1
        self.g2: dict[tuple[str, int], tuple[str, frozenset[int]]] = {}
        self.rejected_ids: set[str] = set()
        self.retried_ids: set[str] = set()
        self.installs_checked = 0
        self.app_delivered = 0

    def fail(self, what: str) -> None:
        sim = self.sim
        raise InvariantViolation(f"seed={sim.seed} step={sim.steps} t={sim.now:.3f}: {what}")

    def track(self, member: str, group: str) -> Track:
        return self.tracks.setdefault((member, group), Track())

    def fresh_join(self, member: str, group: str) -> None:
        """The client starts knowing nothing of `group` (a join without a resume point)."""
        t = self.track(member, group)
        t.last_view, t.removed = None, False
        t.stream_last.clear()
        t.sender_n.clear()

    def outcome(self, group: str, offset: int) -> bool | None:
        return self.sim.hub.groups[group].topic.outcome(offset)

    def accepted(self, msg: Any, sending_view: int) -> None:
        p = orjson.loads(orjson.dumps(msg.payload))  # the edge hands the core a Fragment
        info = MsgInfo(msg.group, msg.offset, msg.stream, msg.seq, msg.sender, msg.view,
                       sending_view, msg.atomic, msg.from_member, msg.id, p["sv"])
        self.msgs[(msg.group, msg.offset)] = info
        self.by_seq[(msg.group, msg.stream, msg.seq)] = msg.offset
        if info.same_view and info.stamp != sending_view:  # G6
            self.fail(f"G6: same_view message {info} accepted in view {sending_view}")

    # -- application events --------------------------------------------------------------------

    def events(self, member: SimMember, events: list[Any]) -> None:
        for e in events:
            if isinstance(e, Message):
                self.message(member, e)
            elif isinstance(e, ViewInstalled):
                self.install(member.name, e)
            elif isinstance(e, Removed):
                t = self.track(member.name, e.group)
                if t.last_view is not None and e.view <= t.last_view:
                    self.fail(f"G1: {member.name} removed from {e.group} in view {e.view} "
                              f"after installing {t.last_view}")
                t.last_view, t.removed = e.view, True

    def message(self, member: SimMember, e: Message) -> None:
        self.app_delivered += 1
        who = member.name
        info = self.msgs.get((e.group, e.offset))
        if info is None:
            self.fail(f"{who} delivered unknown message {e}")
            return
        if (info.stream, info.seq, info.sender) != (e.stream, e.seq, e.sender):
            self.fail(f"{who} delivered {e} but the server accepted {info}")
        t = self.track(who, e.group)
        if e.offset in t.delivered:
            self.fail(f"duplicate: {who} delivered offset {e.offset} of {e.group} twice")
        t.delivered.add(e.offset)
        if t.removed or t.last_view is None:
            self.fail(f"{who} delivered {e.offset} of {e.group} while not in a view")
        # G6: accept_from "members" never sees a non-member's message
        if not info.from_member and member.accept_from.get(e.group, "members") == "members":
            self.fail(f"G6: {who} (accept_from members) delivered non-member message {info}")
        if info.id in self.rejected_ids:
            self.fail(f"G6: {who} delivered rejected publish {info}")
        # G5: only committed atomics reach the application
        if info.atomic and self.outcome(e.group, e.offset) is not True:
            self.fail(f"G5: {who} delivered atomic {e.offset} with outcome "
                      f"{self.outcome(e.group, e.offset)}")
        # G3 (and G4 for the total stream): seqs in order, skipping only what may be skipped
        last = t.stream_last.get(e.stream)
        if last is not None:
            if e.seq <= last:
                self.fail(f"G3/G4: {who} delivered {e.stream} seq {e.seq} after {last}")
            for s in range(last + 1, e.seq):
                off = self.by_seq.get((e.group, e.stream, s))
                skipped = self.msgs[(e.group, off)] if off is not None else None
                ok = skipped is not None and (
                    (skipped.atomic and self.outcome(e.group, skipped.offset) is False)
                    or (not skipped.from_member
                        and member.accept_from.get(e.group, "members") == "members"))
                if not ok:
                    self.fail(f"G3: {who} skipped {e.stream} seq {s} ({skipped}) "
                              f"going from {last} to {e.seq}")
        t.stream_last[e.stream] = e.seq
        if e.stream == "total":
            t.total.append(e.seq)
        elif info.id not in self.retried_ids:
            n = e.payload["n"]
            if n <= t.sender_n.get(e.stream, 0):
                self.fail(f"G3: {who} delivered {e.stream} publish #{n} after "
                          f"#{t.sender_n[e.stream]}")
            t.sender_n[e.stream] = n
        if info.from_member:
            t.by_view.setdefault(info.sending_view, set()).add(e.offset)

    def install(self, who: str, e: ViewInstalled) -> None:
        self.installs_checked += 1
        t = self.track(who, e.group)
        key = (e.group, e.view)
        seen = self.views.setdefault(key, e.members)
        if seen != e.members:  # G1: one member list per view
            self.fail(f"G1: {who} installed {e.group} v{e.view} as {e.members}, others {seen}")
        if who not in e.members:
            self.fail(f"G1: {who} installed {e.group} v{e.view} without being in it")
        if who in e.joined:  # a (re)join starts a new run of views
            if t.last_view is not None and e.view <= t.last_view:
                self.fail(f"G1: {who} joined {e.group} v{e.view} after v{t.last_view}")
        elif t.last_view is None or t.removed:
            self.fail(f"G1: {who} installed {e.group} v{e.view} (not as a joiner) while outside "
                      f"(last view {t.last_view}, removed={t.removed})")
        else:
            if e.view != t.last_view + 1:
                self.fail(f"G1: {who} installed {e.group} v{e.view} after v{t.last_view}")
            self.check_flush(who, e.group, t.last_view, t)
        t.last_view, t.removed = e.view, False

    def check_flush(self, who: str, group: str, v: int, t: Track) -> None:
        """G2 and G5 for a member going from view v to v+1."""
        got = frozenset(t.by_view.get(v, ()))
        first = self.g2.setdefault((group, v), (who, got))
        if first[1] != got:
            a, b = sorted(first[1] - got), sorted(got - first[1])
            self.fail(f"G2: view {group} v{v}: {first[0]} delivered {len(first[1])} msgs, "
                      f"{who} {len(got)}; only {first[0]}: {a[:10]}, only {who}: {b[:10]}")
        for (g, off), info in self.msgs.items():
            if g == group and info.atomic and info.sending_view == v and info.from_member:
                oc = self.outcome(g, off)
                if oc is None:
                    self.fail(f"G5: atomic {off} of {g} v{v} unresolved at install of v{v + 1}")
                if oc and off not in got:
                    self.fail(f"G5: {who} installed v{v + 1} without committed atomic {off}")


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


class Simulation:
    def __init__(self, seed: int, cfg: SimConfig | None = None) -> None:
        self.seed = seed
        self.cfg = cfg or SimConfig()
        self.rng = random.Random(seed)
        self.now = 1000.0
        self.steps = 0
        tokens = iter(range(1, 1 << 30))
        self.hub = Hub(CoreConfig(timeouts=self.cfg.timeouts),
                       new_token=lambda: f"s{next(tokens)}", epoch=EPOCH)
        self.obs = Observer(self)
        #: members join and leave groups; outsiders never join and publish as non-members (G6)
        self.members = [SimMember(f"m{i}", ClientProtocol(f"m{i}"))
                        for i in range(self.cfg.members)]
        self.outsiders = [SimMember(f"x{i}", ClientProtocol(f"x{i}"))
                          for i in range(self.cfg.outsiders)]
        self.everyone = self.members + self.outsiders
        self._by_name = {m.name: m for m in self.everyone}
        self.conns: dict[int, Conn] = {}
        self.driver = Driver(self.hub, transport=self, store=self, observer=self,
                             clock=lambda: self.now)
        #: writes handed to storage, answered in order when the rng says so
        self.writes: deque[tuple[Write, Done]] = deque()
        #: what storage holds, as the memory log keeps it (to bring back evicted groups)
        self.log = MemoryLog()
        #: what storage holds: (group, offset) -> (stream, seq, sender), (member, id) -> offset
        self.durable: dict[tuple[str, int], tuple[str, int, str]] = {}
        self.durable_ids: dict[tuple[str, str], int] = {}
        self._next_conn = 0
        #: connections lost on the client side that the server has not noticed yet
        self.unnoticed: list[Conn] = []
        self.stats: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        #: the last frames each member received and sent, for reading a failure
        self.stored_views: dict[str, int] = {}
        self.stored_aborts: set[tuple[str, int]] = set()
        self.trace: dict[str, deque[tuple[int, str, Any]]] = {
            m.name: deque(maxlen=600) for m in self.everyone}

    def member(self, name: str) -> SimMember:
        return self._by_name[name]

    def count(self, what: str) -> None:
        self.stats[what] = self.stats.get(what, 0) + 1

    # -- the adapter ---------------------------------------------------------------------------

    # -- the driver's ports (notify/runtime/ports.py) --------------------------------------------

    def push(self, conn: int, data: bytes, *, bounded: bool = True, frames: int = 1) -> None:
        for frame in unbatch(orjson.loads(data)):
            self.check_durable(frame, conn)
            c = self.conns.get(conn)
            if c is not None and c.alive and c.server_open:
                c.to_client.append(frame)

    def close(self, conn: int, code: int, reason: str, *, drain: bool) -> None:
        c = self.conns.get(conn)
        if c is not None and c.alive:
            c.alive = False
            c.server_open = False  # the driver tells the hub
            c.to_client.clear()
            c.to_server.clear()
            m = self.member(c.member)
            if m.conn is c:
                m.conn = None

    def write(self, write: Write, done: Done) -> None:
        self.writes.append((write, done))

    def fetch(self, group: str, answer: Fetched) -> None:
        """A group that left memory (G14) comes back from what storage holds."""
        sg = self.log.load_group(group, self.hub.config.limits.retain_messages)
        if sg is not None:
            self.count("group.reloaded")
        answer(sg, None)

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
        if isinstance(w, Append):
            if self.rng.random() < self.cfg.p_write_fail:
                self.count("write.failed")
                done("injected: disk I/O error")
                return
            self.log.write(w, lambda error: None)  # no loop here: stored at once
            g = self.hub.groups[w.group]
            for m in w.messages:
                self.durable[(m.group, m.offset)] = (m.stream, m.seq, m.sender)
                self.durable_ids[(m.sender, m.id)] = m.offset
                self.obs.accepted(m, g.view.version)
        else:
            # G1 across restarts rests on this: each stored view is the next version
            i = w.install
            last = self.stored_views.get(i.group, 0)
            if i.view != last + 1:
                self.obs.fail(f"G1: stored view {i.view} of {i.group} after {last}")
            self.stored_views[i.group] = i.view
            self.stored_aborts.update((i.group, o) for o in w.aborted)
            self.log.write(w, lambda error: None)
        done(None)

    def check_durable(self, f: dict[str, Any], conn: int) -> None:
        """Nothing leaves that speaks of what storage does not hold (G10, G1, G5)."""
        kind = f["type"]
        if kind == "deliver":
            stored = self.durable.get((f["group"], f["offset"]))
            if stored != (f["stream"], f["seq"], f["sender"]):
                self.obs.fail(f"G10: deliver {f} sent, storage holds {stored}")
        elif kind == "published":
            member = self.conns[conn].member
            if self.durable_ids.get((member, f["id"])) != f["offset"]:
                self.obs.fail(f"G10: {f} sent to {member}, storage holds "
                              f"{self.durable_ids.get((member, f['id']))}")
        elif kind == "view_install":
            if self.stored_views.get(f["group"], 0) < f["view"]:
                self.obs.fail(f"G1: {f} sent before it was stored")
        elif kind == "abort":  # an abort leaves only once it is durable (crash safety)
            for off in f["offsets"]:
                if (f["group"], off) not in self.stored_aborts:
                    self.obs.fail(f"G5: abort of {f['group']}@{off} sent before it was stored")

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

    # -- clients -------------------------------------------------------------------------------

    def connect(self, m: SimMember, *, resume: bool) -> None:
        self._next_conn += 1
        c = self.conns[self._next_conn] = Conn(self._next_conn, m.name)
        m.conn = c
        self.driver.opened(c.id)
        c.to_server.append(m.proto.hello(resume))
        if resume:  # Client.reconnect: rejoin every group from where it was
            for r in m.proto.rejoin_all(m.req):
                if not r.resume:
                    self.obs.fresh_join(m.name, r.group)
                m.join_reqs[r.req] = r.group
            for f in list(m.unanswered.values()):  # retry what got no answer (idempotent)
                self.obs.retried_ids.add(f["id"])
                m.proto.send(f)
        else:  # a new incarnation knows nothing
            m.proto = ClientProtocol(m.name)
            m.unanswered.clear()
            for g in self.cfg.groups:
                self.obs.fresh_join(m.name, g)
        self.flush(m)

    def flush(self, m: SimMember) -> None:
        out = m.proto.data_to_send()
        self.trace[m.name].extend((self.steps, "out", f) for f in out)
        if m.conn is not None and m.conn.alive:
            m.conn.to_server.extend(out)

    def client_in(self, m: SimMember, n: int) -> None:
        c = m.conn
        assert c is not None
        events: list[Any] = []
        replies: list[Any] = []
        for _ in range(min(n, len(c.to_client))):
            f = c.to_client.popleft()
            self.trace[m.name].append((self.steps, "in", f))
            if f["type"] == "welcome":
                m.proto.receive(f)  # the session a resume presents
                continue
            try:
                ev, rep = m.proto.receive(f)
            except ProtocolViolation as e:
                self.obs.fail(f"{m.name}: the client protocol refused {f}: {e}")
                raise
            events.extend(ev)
            replies.extend(rep)
        self.obs.events(m, events)
        for r in replies:
            self.reply(m, r)
        self.flush(m)

    def reply(self, m: SimMember, r: Any) -> None:
        if isinstance(r, Published):
            frame = m.unanswered.pop(r.id, None)
            prior = m.published.get(r.id)
            if prior is not None and prior[1] != r.offset:
                self.obs.fail(f"idempotency: {r.id} published at {prior[1]} then {r.offset}")
            if frame is not None:
                m.published[r.id] = (frame, r.offset)
        elif isinstance(r, Rejected):
            m.unanswered.pop(r.id, None)
            if r.id in m.published:
                self.obs.fail(f"idempotency: {r.id} published then rejected")
            self.obs.rejected_ids.add(r.id)
            self.count(f"rejected.{r.code}")
        elif isinstance(r, Outcome):
            oc = self.obs.outcome(r.group, r.offset)
            if oc is not r.committed:
                self.obs.fail(f"G5: sender {m.name} told {r} but the server recorded {oc}")
            self.count("outcome")
        else:
            assert isinstance(r, ServerError)
            self.errors[r.code] = self.errors.get(r.code, 0) + 1
            if r.code not in BENIGN_ERRORS:
                self.obs.fail(f"{m.name} got an unexpected error {r}")
            group = m.join_reqs.pop(r.req, None) if r.req else None
            if group is not None and group in m.proto.groups and \
                    m.proto.groups[group].phase is GroupPhase.JOINING:
                m.proto.join_refused(group)  # the join failed; the app may try again

    # -- application actions -------------------------------------------------------------------

    def active(self, m: SimMember) -> list[str]:
        return [n for n, g in m.proto.groups.items() if g.can_send]

    def publish(self, m: SimMember, group: str, *, member: bool = True) -> None:
        r = self.rng.random()
        order = "total" if r < 0.3 else "fifo"
        atomic = member and self.rng.random() < 0.25
        same_view = member and self.rng.random() < 0.2
        m.counter += 1
        pid = f"{m.name}.{m.counter}"
        payload = {"m": m.name, "n": m.counter, "sv": same_view}
        f = m.proto.publish_frame(m.req(), group, pid, payload, order=order if member else "fifo",
                                  atomic=atomic, same_view=same_view)
        m.unanswered[pid] = f
        m.proto.send(f)
        self.flush(m)
        self.count("publish")

    def join(self, m: SimMember, group: str) -> None:
        # Both kinds of receiver: "members" ones must never see a non-member's message (G6)
        # nor a seq gap when such a sender later joins (its outside messages are `ext:`).
        accept = "any" if self.rng.random() < self.cfg.p_accept_any else "members"
        m.accept_from[group] = accept
        self.obs.fresh_join(m.name, group)
        req = m.req()
        m.join_reqs[req] = group
        m.proto.join(req, group, accept_from=accept)
        self.flush(m)
        self.count("join")

    def drop(self, m: SimMember) -> None:
        c = m.conn
        assert c is not None
        c.alive = False
        c.to_client.clear()
        c.to_server.clear()
        m.conn = None
        if self.rng.random() < 0.7:
            self.server_closed(c)
        else:
            self.unnoticed.append(c)
        self.count("drop")

    # -- the scheduler -------------------------------------------------------------------------

    def advance(self, dt: float) -> None:
        self.now += dt
        self.driver.tick()

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
        readers = [m for m in self.everyone if m.conn is not None and m.conn.to_client]
        if readers:
            choices.append((4.0, "client_in"))
        choices.append((self.cfg.p_publish * 10, "publish"))
        choices.append((self.cfg.p_fault * 10, "fault"))
        kind = _pick(rng, choices)
        if kind == "server_in":
            self.server_in(rng.choice(to_server))
        elif kind == "store":
            self.store()
        elif kind == "client_in":
            weights = [0.1 if m.slow else 1.0 for m in readers]
            m = rng.choices(readers, weights)[0]
            n = 1000 if m.slow else rng.randint(1, 3)
            self.client_in(m, n)
        elif kind == "publish":
            self.app_publish()
        else:
            self.fault()

    def app_publish(self) -> None:
        rng = self.rng
        if rng.random() < self.cfg.p_non_member_publish / max(self.cfg.p_publish, 1e-9):
            senders = [x for x in self.outsiders if x.conn is not None]
            groups = [g for g in self.cfg.groups if g in self.hub.groups]
            if senders and groups:
                self.publish(rng.choice(senders), rng.choice(groups), member=False)
                self.count("publish.non_member")
            return
        connected = [m for m in self.members if m.conn is not None]
        if not connected:
            return
        m = rng.choice(connected)
        active = self.active(m)
        if active:
            g = rng.choice(active)
            if m.published and rng.random() < 0.05:  # an idempotent retry of an answered id
                pid = rng.choice(sorted(m.published))
                self.obs.retried_ids.add(pid)
                m.proto.send(m.published[pid][0])
                self.flush(m)
                self.count("publish.retry")
                return
            self.publish(m, g)

    def fault(self) -> None:
        rng = self.rng
        kind = _pick(rng, [(3, "drop"), (3, "reconnect"), (1, "new_incarnation"),
                           (3, "join"), (1.5, "leave"), (1, "slow"), (1, "notice"),
                           (1, "pause")])
        self.count(f"fault.{kind}")
        connected = [m for m in self.members if m.conn is not None]
        away = [m for m in self.everyone if m.conn is None]
        if kind == "drop" and connected:
            self.drop(rng.choice(connected + [x for x in self.outsiders if x.conn is not None]))
        elif kind == "reconnect" and away:
            self.connect(rng.choice(away), resume=True)
        elif kind == "new_incarnation":
            m = rng.choice(self.everyone)
            if m.conn is not None:
                self.drop(m)
            self.connect(m, resume=False)
        elif kind == "join" and connected:
            m = rng.choice(connected)
            free = [g for g in self.cfg.groups if g not in m.proto.groups
                    or m.proto.groups[g].phase is GroupPhase.LEFT]
            if free:
                self.join(m, rng.choice(free))
        elif kind == "leave" and connected:
            m = rng.choice(connected)
            active = self.active(m)
            if active:
                m.proto.leave(m.req(), rng.choice(active))
                self.flush(m)
        elif kind == "slow":
            m = rng.choice(self.members)
            m.slow = not m.slow
        elif kind == "notice" and self.unnoticed:
            c = self.unnoticed.pop(rng.randrange(len(self.unnoticed)))
            self.server_closed(c)
        elif kind == "pause":
            t = self.cfg.timeouts
            self.advance(rng.choice([t.suspect_timeout, t.flush_timeout, t.ack_timeout])
                         * rng.uniform(0.5, 1.3))

    # -- running -------------------------------------------------------------------------------

    def start(self) -> None:
        for x in self.outsiders:
            self.connect(x, resume=False)
        for m in self.members:
            self.connect(m, resume=False)
            for g in self.cfg.groups:
                if self.rng.random() < 0.7:
                    self.join(m, g)

    def run(self, steps: int) -> Simulation:
        try:
            self.start()
            for _ in range(steps):
                self.step()
            self.quiesce()
            self.final_checks()
        except InvariantViolation:
            raise
        except Exception as e:  # a crash in the core or the client: still say how to replay it
            raise InvariantViolation(f"seed={self.seed} step={self.steps} t={self.now:.3f}: "
                                     f"{type(e).__name__}: {e}") from e
        return self

    def drain(self) -> bool:
        """Move every queue until all are empty (in rng order). Returns whether anything moved."""
        moved = False
        for _ in range(100_000):
            options: list[Any] = []
            options += [("s", c) for c in self.conns.values() if c.to_server and c.server_open]
            options += [("w", None)] if self.writes else []
            options += [("c", m) for m in self.everyone if m.conn is not None and m.conn.to_client]
            if not options:
                return moved
            moved = True
            self.steps += 1
            kind, x = self.rng.choice(options)
            if kind == "s":
                self.server_in(x)
            elif kind == "w":
                self.store()
            else:
                self.client_in(x, 1000)
        self.obs.fail("the network never went quiet")
        return moved

    def quiesce(self) -> None:
        """No more faults: bring back some absent members, then let every timeout fire."""
        for c in self.unnoticed:
            self.server_closed(c)
        self.unnoticed.clear()
        for m in self.everyone:
            m.slow = False
            if m.conn is None and self.rng.random() < 0.5:
                self.connect(m, resume=True)
        for _ in range(200):
            self.drain()
            d = self.driver.next_wakeup()
            if d is None:
                break
            self.now = max(self.now, d)  # exactly there, as the replay does (and may the server)
            self.driver.tick()
        else:
            self.obs.fail("timers never stopped (a flush or an atomic is stuck)")
        self.drain()

    def final_checks(self) -> None:
        fail = self.obs.fail
        for name, g in self.hub.groups.items():
            if g.state is not GroupState.STABLE:
                fail(f"liveness: group {name} is {g.state} after quiescence")
            if len(g.atomics):
                fail(f"liveness: group {name} has {len(g.atomics)} unresolved atomics")
            if g.writes.busy or g.writes.held:
                fail(f"liveness: group {name} still waits on a write ({g.writes.held} held)")
            view = g.view
            for mem in view.members:
                m = self.member(mem)
                slot = g.slots[mem]
                if slot.conn is None:
                    fail(f"liveness: {mem} is in {name} v{view.version} without a connection")
                gp = m.proto.groups.get(name)
                if gp is None or gp.phase is not GroupPhase.ACTIVE or gp.view != view.version:
                    fail(f"G1: {mem} client has {name} as {gp and (gp.phase, gp.view)}, server "
                         f"view v{view.version} {view.members}")
                    continue
                if gp.members != view.members:
                    fail(f"G1: {mem} sees {gp.members}, server {view.members}")
                held = [m for s in gp.streams.values() for m in s.held]
                if held:
                    fail(f"G5: {mem} still holds back {[h.offset for h in held]} in {name}")
                # the end is a virtual install: every member in view v has the same view-v set
                self.obs.check_flush(mem, name, view.version, self.obs.track(mem, name))
            for m in self.members:
                gp = m.proto.groups.get(name)
                if gp is not None and gp.phase is GroupPhase.ACTIVE and m.conn is not None \
                        and m.name not in view.members:
                    fail(f"G1: {m.name} thinks it is in {name} v{gp.view}, server has "
                         f"{view.members} at v{view.version}")
        self.check_total_order()

    def check_total_order(self) -> None:
        """G4: the total stream is delivered in one order everywhere (prefix-consistent)."""
        for (who, group), t in self.obs.tracks.items():
            if any(b <= a for a, b in zip(t.total, t.total[1:], strict=False)):
                self.obs.fail(f"G4: {who} delivered {group}'s total stream out of order")


def _pick(rng: random.Random, choices: list[tuple[float, str]]) -> str:
    total = sum(w for w, _ in choices)
    x = rng.uniform(0, total)
    for w, k in choices:
        x -= w
        if x <= 0:
            return k
    return choices[-1][1]


def run(seed: int, steps: int, cfg: SimConfig | None = None) -> Simulation:
    """Run one simulation; any failure message starts with `seed=...` so it replays exactly."""
    return Simulation(seed, cfg).run(steps)
