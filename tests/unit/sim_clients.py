"""The client side of the simulators (tests/unit/sim.py, one node; tests/unit/sim_cluster.py, a
cluster), written once.

Members are the real SDK `ClientProtocol` on a simulated connection (`Conn`: FIFO both ways, what
a lost one holds is dropped). `ClientSim` is what a simulator does for them: open a connection
and say `hello` (a resume rejoins every group from where it was and retries unanswered publishes,
as `Client.reconnect` does; a new incarnation knows nothing), move the frames the server sent into
the protocol, check its replies (idempotent `published`, `rejected`, atomic outcomes, errors only
from races a client cannot see), the application's actions (joins with either `accept_from`,
publishes of every kind, idempotent retries, non-member publishes, leaves), the client faults
(connection loss noticed by the server now or later, resumes, new incarnations, slow readers,
pauses past the timeouts), what storage holds against what clients are told (G10, G1, G5), and
the final checks of every group against its members' clients. `Observer` checks DESIGN §2 G1-G6
at every application event, and the transitional set of every view event (docs/semantics.md)
against the views storage holds.

A simulator subclasses `ClientSim` and fills in the server side, through these hooks:

- `open_conn(m, hello)`: a new connection for `m` (at which node), the server told it opened;
- `queues()` and `move(kind, x, n)`: what can move, and moving it (a frame reaching the server
  side: "s"; a client reading `n` frames: "c", which `client_in` does);
- `server_closed(c)`: the server side notices a lost connection;
- `outcome(group, offset)`: an atomic's outcome, as the server side decided it;
- `publish_groups()`: where a non-member may publish; `pauses()`: how long a pause may be;
- `server_faults()` and `server_fault(kind)`: the simulator's own faults, besides the clients';
- `start()`, `quiesce()`, `final_checks()`, `next_wakeup()`, `timers()`.

Every random choice is the seeded `self.rng`'s, in a fixed order, so a seed replays exactly.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Self

import orjson

from client_sdk.events import (
    Message,
    Outcome,
    Published,
    Rejected,
    Removed,
    ServerError,
    ViewChanging,
    ViewInstalled,
)
from client_sdk.protocol import ClientProtocol, GapUnreadable, GroupPhase, ProtocolViolation
from notify.core import Append, Timeouts, Write
from notify.core.group import Group
from notify.core.membership import GroupState

#: errors a well-behaved client can get from races it cannot see; anything else is a bug
BENIGN_ERRORS = {
    "not_member",  # an ACK/flush_ok/leave that crossed its removal
    "wrong_view",  # a flush_ok that crossed a cancel or an install
    "join_pending",
    "no_group",
    "unavailable",  # (cluster) a resume past a deposed owner's head: the SDK asks again
}


class InvariantViolation(AssertionError):
    pass


# -- connections and members ----------------------------------------------------------------


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
    #: the view this run of the member's membership began in (its join's install)
    joined_view: int | None = None
    delivered: set[int] = field(default_factory=set)
    #: offsets app-delivered, by sending view (messages from members only)
    by_view: dict[int, set[int]] = field(default_factory=dict)
    stream_last: dict[str, int] = field(default_factory=dict)
    total: list[int] = field(default_factory=list)
    #: publish counter per sender stream (G3 in send order)
    sender_n: dict[str, int] = field(default_factory=dict)


class Observer:
    """The checker of DESIGN §2 guarantees over everything clients hand to their application."""

    def __init__(self, sim: ClientSim) -> None:
        self.sim = sim
        self.msgs: dict[tuple[str, int], MsgInfo] = {}
        self.by_seq: dict[tuple[str, str, int], int] = {}
        self.tracks: dict[tuple[str, str], Track] = {}
        self.views: dict[tuple[str, int], tuple[str, ...]] = {}
        #: (group, v) -> the set of view-v messages delivered by the first member installing v+1
        self.g2: dict[tuple[str, int], tuple[str, frozenset[int]]] = {}
        #: publish id -> when it was refused (a publish the sender was told was not taken)
        self.rejected_ids: dict[str, float] = {}
        #: publish id -> when it was stored
        self.stored_at: dict[str, float] = {}
        self.retried_ids: set[str] = set()
        self.installs_checked = 0
        self.app_delivered = 0
        #: (group, v) -> (members, left) of view v as storage holds it (the server's record)
        self.stored: dict[tuple[str, int], tuple[tuple[str, ...], frozenset[str]]] = {}
        #: view events whose transitional set was checked, and of those: installs where it
        #: was not the whole view (someone joined), where someone left, and where a member
        #: was in both views by name without moving (it left and joined again in one change)
        self.transitional_checked = 0
        self.transitional_counts: dict[str, int] = {}

    def fail(self, what: str) -> None:
        """Raises, and keeps the first failure: a check that fails inside the driver's actions
        (a frame pushed) is contained there (G13), so the run stops at the end of the step."""
        sim = self.sim
        e = InvariantViolation(f"seed={sim.seed} step={sim.steps} t={sim.now:.3f}: {what}")
        if sim.failure is None:
            sim.failure = e
        raise e

    def track(self, member: str, group: str) -> Track:
        return self.tracks.setdefault((member, group), Track())

    def fresh_join(self, member: str, group: str) -> None:
        """The client starts knowing nothing of `group` (a join without a resume point)."""
        t = self.track(member, group)
        t.last_view, t.removed, t.joined_view = None, False, None
        t.stream_last.clear()
        t.sender_n.clear()

    def outcome(self, group: str, offset: int) -> bool | None:
        return self.sim.outcome(group, offset)

    def stored_view(self, group: str, view: int, members: tuple[str, ...],
                    left: tuple[str, ...]) -> None:
        self.stored[(group, view)] = (tuple(members), frozenset(left))

    def survivors(self, group: str, v: int, new_members: tuple[str, ...],
                  leaving: tuple[str, ...] | frozenset[str]) -> tuple[str, ...] | None:
        """The members that go from view v to the next as the same membership, from the views
        storage holds: in view v and in the next one, and not among its leavers (a member that
        left and joined again in one change, a new incarnation, is in both by name; G2 does not
        hold across it, the checker starts a new run of views for it). In v's order, which the
        next view keeps (the server appends joiners). None if v was never stored."""
        if v == 0:
            return ()
        got = self.stored.get((group, v))
        if got is None:
            return None
        return tuple(m for m in got[0] if m in new_members and m not in leaving)

    def transitional(self, who: str, e: ViewInstalled | ViewChanging) -> None:
        """The SDK's transitional set of a view event (docs/semantics.md) is the set of
        survivors of the views storage holds: for an install of v+1, the members of both v and
        v+1 less v+1's leavers, exactly those whose install `install` checks against each other
        for G2; for a proposal of v+1, v less its leavers (the flush set, which `who` is in)."""
        if isinstance(e, ViewInstalled):
            v, new, what = e.view - 1, e.members, f"install of {e.group} v{e.view}"
            rec = self.stored.get((e.group, e.view))
            if rec is None:
                self.fail(f"{who} got the {what}, never stored")
                return
            leaving: tuple[str, ...] | frozenset[str] = rec[1]
        else:
            v, new, what = e.proposed - 1, e.members, f"proposal of {e.group} v{e.proposed}"
            leaving = e.leaving
            if who not in e.transitional:
                self.fail(f"EVS: {who} was asked to flush for the {what} but is not in its "
                          f"transitional set {e.transitional}")
        want = self.survivors(e.group, v, new, leaving)
        if want is None:
            self.fail(f"{who} got the {what}, but v{v} was never stored")
            return
        if tuple(e.transitional) != want:
            self.fail(f"EVS: {who}'s {what} has transitional set {e.transitional}; the "
                      f"survivors of the stored views are {want} (members {e.members})")
        self.transitional_checked += 1
        c = self.transitional_counts
        if isinstance(e, ViewInstalled):
            kinds = [k for k, hit in (("joined", bool(e.joined)), ("left", bool(e.left)),
                                      ("rejoined", bool(set(e.joined) & set(e.left))))
                     if hit]
        else:
            kinds = ["proposal"] + (["proposal.joining"] if e.joining else [])
        for k in kinds:
            c[k] = c.get(k, 0) + 1

    def accepted(self, msg: Any, sending_view: int) -> None:
        p = orjson.loads(orjson.dumps(msg.payload))  # the edge hands the core a Fragment
        info = MsgInfo(msg.group, msg.offset, msg.stream, msg.seq, msg.sender, msg.view,
                       sending_view, msg.atomic, msg.from_member, msg.id, p["sv"])
        self.msgs[(msg.group, msg.offset)] = info
        self.stored_at.setdefault(msg.id, self.sim.now)
        self.by_seq[(msg.group, msg.stream, msg.seq)] = msg.offset
        if info.same_view and info.stamp != sending_view:  # G6
            self.fail(f"G6: same_view message {info} accepted in view {sending_view}")

    # -- application events --------------------------------------------------------------------

    def events(self, member: SimMember, events: list[Any]) -> None:
        for e in events:
            if isinstance(e, Message):
                self.message(member, e)
            elif isinstance(e, ViewInstalled):
                self.transitional(member.name, e)
                self.install(member.name, e)
            elif isinstance(e, ViewChanging):
                self.transitional(member.name, e)
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
        refused = self.rejected_ids.get(info.id)
        # (a retry that comes after the server forgot the sender's ids, `departed_ids` after
        # it left, is a new publish: the server can no longer know it took the first one)
        if refused is not None and refused - self.stored_at.get(info.id, refused) < \
                self.sim.cfg.timeouts.departed_ids:
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
            if who in e.transitional:
                self.fail(f"EVS: {who} joined {e.group} v{e.view} but is in its transitional "
                          f"set {e.transitional}")
            if t.last_view is not None and e.view <= t.last_view:
                self.fail(f"G1: {who} joined {e.group} v{e.view} after v{t.last_view}")
            t.joined_view = e.view
        elif t.last_view is None or t.removed:
            self.fail(f"G1: {who} installed {e.group} v{e.view} (not as a joiner) while outside "
                      f"(last view {t.last_view}, removed={t.removed})")
        else:
            if e.view != t.last_view + 1:
                self.fail(f"G1: {who} installed {e.group} v{e.view} after v{t.last_view}")
            # G2 is checked for exactly the members of the transitional set that install v+1:
            # each delivered the same view-v messages as the first of them to install it
            if who not in e.transitional:
                self.fail(f"EVS: {who} moved from {e.group} v{t.last_view} to v{e.view} but is "
                          f"not in its transitional set {e.transitional}")
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




# -- what a simulator does for its clients -------------------------------------------------------

#: the client faults, as weights among the faults (a simulator adds its own: `server_faults`)
CLIENT_FAULTS: list[tuple[float, str]] = [
    (3, "drop"), (3, "reconnect"), (1, "new_incarnation"), (3, "join"), (1.5, "leave"),
    (1, "slow"), (1, "notice"), (1, "pause")]


class ClientSim:
    """Members and outsiders, their connections, their application, and the checks of all they
    are told; the server side is the subclass's (see the module's docstring for the hooks)."""

    cfg: Any  # members, outsiders, groups, timeouts, p_fault, p_publish, ... (SimConfig's)
    #: an application publish draws whether it is a retry before its group (the cluster's
    #: order; sim.py's draws the group first): kept apart so that each replays as before
    retry_first = False

    def __init__(self, seed: int, cfg: Any) -> None:
        self.seed = seed
        self.cfg = cfg
        self.rng = random.Random(seed)
        self.now = 1000.0
        self.steps = 0
        #: members join and leave groups; outsiders never join and publish as non-members (G6)
        #: members come in pairs of one user (`m0#0` and `m0#1` are two tabs of user `m0`, the
        #: last may be alone): instances are members like any other (issue 29)
        self.members = [SimMember(p.me, p) for p in (
            ClientProtocol(f"m{i // 2 * 2}", str(i % 2)) for i in range(cfg.members))]
        self.outsiders = [SimMember(f"x{i}", ClientProtocol(f"x{i}"))
                          for i in range(cfg.outsiders)]
        self.everyone = self.members + self.outsiders
        self._by_name = {m.name: m for m in self.everyone}
        self.conns: dict[int, Conn] = {}
        self._next_conn = 0
        #: connections lost on the client side that the server has not noticed yet
        self.unnoticed: list[Conn] = []
        #: what storage holds: (group, offset) -> (stream, seq, sender), (member, id) -> offset
        self.durable: dict[tuple[str, int], tuple[str, int, str]] = {}
        self.durable_ids: dict[tuple[str, str], int] = {}
        self.stored_views: dict[str, int] = {}
        self.stored_aborts: set[tuple[str, int]] = set()
        self.stats: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        #: every step's kind (and every fault's), for the replay tests
        self.trace: list[tuple[int, str]] = []
        #: the last frames each member received and sent, for reading a failure
        self.frames: dict[str, deque[tuple[int, str, Any]]] = {
            m.name: deque(maxlen=600) for m in self.everyone}
        #: the first invariant that failed (raised again after the step it failed in)
        self.failure: InvariantViolation | None = None
        self.obs = Observer(self)

    def member(self, name: str) -> SimMember:
        return self._by_name[name]

    def count(self, what: str) -> None:
        self.stats[what] = self.stats.get(what, 0) + 1

    def new_conn_id(self) -> int:
        self._next_conn += 1
        return self._next_conn

    # -- hooks: the server side ----------------------------------------------------------------

    def open_conn(self, m: SimMember, hello: dict[str, Any]) -> Conn:
        """A new connection for `m`, in `self.conns`, the server side told it opened (`hello`
        is the frame it will read first)."""
        raise NotImplementedError

    def server_closed(self, c: Conn) -> None:
        """The server side notices that the client lost `c`."""
        raise NotImplementedError

    def outcome(self, group: str, offset: int) -> bool | None:
        """The outcome of the atomic at `offset`, as the server side decided it (None: open)."""
        raise NotImplementedError

    def queues(self) -> list[tuple[str, Any]]:
        """What can move now: ("c", member) for a client with frames to read, and the server
        side's own kinds."""
        raise NotImplementedError

    def move(self, kind: str, x: Any, n: int) -> None:
        """Move one of `queues()` (a client reads up to `n` frames)."""
        raise NotImplementedError

    def next_wakeup(self) -> float | None:
        raise NotImplementedError

    def timers(self) -> None:
        raise NotImplementedError

    def publish_groups(self) -> list[str]:
        """Where a non-member may publish."""
        return list(self.cfg.groups)

    def pauses(self) -> list[float]:
        """How long a `pause` fault is, before a random factor (past one timeout or another)."""
        t: Timeouts = self.cfg.timeouts
        return [t.suspect_timeout, t.flush_timeout, t.ack_timeout]

    def server_faults(self) -> list[tuple[float, str]]:
        return []

    def server_fault(self, kind: str) -> None:
        raise NotImplementedError(kind)

    def start(self) -> None:
        self.start_clients()

    def quiesce(self) -> None:
        raise NotImplementedError

    def final_checks(self) -> None:
        raise NotImplementedError

    # -- clients -------------------------------------------------------------------------------

    def connect(self, m: SimMember, *, resume: bool) -> None:
        hello = m.proto.hello(resume)  # the SDK's own reconnect (`Client.reconnect`)
        c = self.open_conn(m, hello)
        m.conn = c
        c.to_server.append(hello)
        if resume:
            for r in m.proto.rejoin_all(m.req):  # every group from where it was
                if not r.resume:
                    self.obs.fresh_join(m.name, r.group)
                m.join_reqs[r.req] = r.group
            for f in list(m.unanswered.values()):  # retry what got no answer (idempotent)
                self.obs.retried_ids.add(f["id"])
                m.proto.send(f)
        else:  # a new incarnation knows nothing
            m.proto = ClientProtocol(m.proto.user, m.proto.instance)  # the same instance
            m.unanswered.clear()
            for g in self.cfg.groups:
                self.obs.fresh_join(m.name, g)
        self.flush(m)

    def client_lost(self, c: Conn) -> None:
        """The connection is gone for the client: what it holds is lost."""
        if c.alive:
            c.alive = False
            c.to_client.clear()
            c.to_server.clear()
            m = self.member(c.member)
            if m.conn is c:
                m.conn = None

    def flush(self, m: SimMember) -> None:
        out = m.proto.data_to_send()
        self.frames[m.name].extend((self.steps, "out", f) for f in out)
        if m.conn is not None and m.conn.alive:
            m.conn.to_server.extend(out)

    def client_in(self, m: SimMember, n: int) -> None:
        c = m.conn
        assert c is not None
        events: list[Any] = []
        replies: list[Any] = []
        for _ in range(min(n, len(c.to_client))):
            f = c.to_client.popleft()
            self.frames[m.name].append((self.steps, "in", f))
            if f["type"] == "welcome":
                m.proto.receive(f)  # the session a resume presents
                continue
            try:
                ev, rep = m.proto.receive(f)
            except GapUnreadable as e:
                # what `Client` does: close, reconnect and resume from the gap's frontier
                self.count("gap.unreadable")
                self.obs.events(m, events + e.events)
                for r in replies + e.replies:
                    self.reply(m, r)
                self.client_lost(c)
                self.server_closed(c)
                self.connect(m, resume=True)
                return
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
            at = self.obs.stored_at.get(r.id)
            if (m.name, r.id) in self.durable_ids and at is not None and \
                    self.now - at < self.cfg.timeouts.departed_ids:
                self.obs.fail(f"{m.name}'s publish {r.id} refused ({r.code}) but stored at "
                              f"{self.durable_ids[(m.name, r.id)]}")
            self.obs.rejected_ids.setdefault(r.id, self.now)
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

    def connected_members(self) -> list[SimMember]:
        return [m for m in self.members if m.conn is not None]

    def droppable(self) -> list[SimMember]:
        """Whom a `drop` fault may hit: anyone connected."""
        return [m for m in self.everyone if m.conn is not None]

    def publish(self, m: SimMember, group: str, *, member: bool = True) -> None:
        order = "total" if self.rng.random() < 0.3 else "fifo"
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
        """The client loses its connection; the server side notices now or later."""
        c = m.conn
        assert c is not None
        self.client_lost(c)
        if self.rng.random() < 0.7:
            self.server_closed(c)
        else:
            self.unnoticed.append(c)
        self.count("drop")

    def app_publish(self) -> None:
        rng = self.rng
        if rng.random() < self.cfg.p_non_member_publish / max(self.cfg.p_publish, 1e-9):
            senders = [x for x in self.outsiders if x.conn is not None]
            groups = self.publish_groups()
            if senders and groups:
                self.publish(rng.choice(senders), rng.choice(groups), member=False)
                self.count("publish.non_member")
            return
        connected = self.connected_members()
        if not connected:
            return
        m = rng.choice(connected)
        active = self.active(m)
        if not active:
            return
        g = None if self.retry_first else rng.choice(active)
        if m.published and rng.random() < 0.05:  # an idempotent retry of an answered id
            pid = rng.choice(sorted(m.published))
            self.obs.retried_ids.add(pid)
            m.proto.send(m.published[pid][0])
            self.flush(m)
            self.count("publish.retry")
            return
        self.publish(m, g if g is not None else rng.choice(active))

    # -- faults --------------------------------------------------------------------------------

    def fault(self) -> None:
        kind = _pick(self.rng, CLIENT_FAULTS + self.server_faults())
        self.trace.append((self.steps, f"fault.{kind}"))
        self.count(f"fault.{kind}")
        if any(kind == k for _, k in CLIENT_FAULTS):
            self.client_fault(kind)
        else:
            self.server_fault(kind)

    def client_fault(self, kind: str) -> None:
        rng = self.rng
        connected = self.connected_members()
        away = [m for m in self.everyone if m.conn is None]
        if kind == "drop":
            who = self.droppable()
            if who:
                self.drop(rng.choice(who))
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
            self.server_closed(self.unnoticed.pop(rng.randrange(len(self.unnoticed))))
        elif kind == "pause":
            self.advance(rng.choice(self.pauses()) * rng.uniform(0.5, 1.3))

    # -- running -------------------------------------------------------------------------------

    def advance(self, dt: float) -> None:
        self.now += dt
        self.timers()

    def start_clients(self) -> None:
        for x in self.outsiders:
            self.connect(x, resume=False)
        for m in self.members:
            self.connect(m, resume=False)
            for g in self.cfg.groups:
                if self.rng.random() < 0.7:
                    self.join(m, g)

    def step(self) -> None:
        raise NotImplementedError

    def run(self, steps: int) -> Self:
        try:
            self.start()
            for _ in range(steps):
                self.step()
                if self.failure is not None:
                    raise self.failure
            self.quiesce()
            self.final_checks()
            if self.failure is not None:
                raise self.failure
        except InvariantViolation:
            raise
        except Exception as e:  # a crash in the core or the client: still say how to replay it
            raise InvariantViolation(f"seed={self.seed} step={self.steps} t={self.now:.3f}: "
                                     f"{type(e).__name__}: {e}") from e
        return self

    def drain(self) -> None:
        """Move every queue until all are empty (in rng order)."""
        for _ in range(200_000):
            options = self.queues()
            if not options:
                return
            self.steps += 1
            kind, x = self.rng.choice(options)
            self.move(kind, x, 1000)
        self.obs.fail("the network never went quiet")

    def calm_clients(self) -> None:
        """No more client faults: the server side notices every lost connection, nobody is slow."""
        for c in self.unnoticed:
            self.server_closed(c)
        self.unnoticed.clear()
        for m in self.everyone:
            m.slow = False

    def reconnect_some(self) -> None:
        for m in self.everyone:
            if m.conn is None and self.rng.random() < 0.5:
                self.connect(m, resume=True)

    def settle(self, rounds: int, *, reconnect: bool) -> None:
        """Drain, then run to the next timer, until none is left (`reconnect`: some absent
        clients come back in every round)."""
        for _ in range(rounds):
            self.drain()
            if reconnect:
                self.reconnect_some()
                self.drain()
            d = self.next_wakeup()
            if d is None:
                break
            self.now = max(self.now, d)  # exactly there, as the replay does (and may the server)
            self.timers()
        else:
            self.obs.fail("timers never stopped (a flush or an atomic is stuck)")
        self.drain()

    # -- checks --------------------------------------------------------------------------------

    def stored(self, w: Write, view: int, who: str = "") -> None:
        """Storage took `w` (appended in `view`): G1 across restarts and owners rests on each
        stored view being the next version."""
        if isinstance(w, Append):
            for m in w.messages:
                self.durable[(m.group, m.offset)] = (m.stream, m.seq, m.sender)
                self.durable_ids[(m.sender, m.id)] = m.offset
                self.obs.accepted(m, view)
            return
        i = w.install
        last = self.stored_views.get(i.group, 0)
        if i.view != last + 1:
            self.obs.fail(f"G1: {who}stored view {i.view} of {i.group} after {last}")
        self.stored_views[i.group] = i.view
        self.obs.stored_view(i.group, i.view, i.members, i.left)
        self.stored_aborts.update((i.group, o) for o in w.aborted)

    def check_durable(self, f: dict[str, Any], member: str | None, who: str = "") -> None:
        """Nothing leaves that speaks of what storage does not hold (G10, G1, G5)."""
        kind = f["type"]
        if kind == "deliver":
            stored = self.durable.get((f["group"], f["offset"]))
            if stored != (f["stream"], f["seq"], f["sender"]):
                self.obs.fail(f"G10: {who}sent deliver {f}, storage holds {stored}")
        elif kind == "published":
            held = self.durable_ids.get((str(member), f["id"]))
            if held != f["offset"]:
                self.obs.fail(f"G10: {who}sent {f} to {member}, storage holds {held}")
        elif kind == "view_install":
            if self.stored_views.get(f["group"], 0) < f["view"]:
                self.obs.fail(f"G1: {who}sent {f} before it was stored")
        elif kind == "abort":  # an abort leaves only once it is durable (crash safety)
            for off in f["offsets"]:
                if (f["group"], off) not in self.stored_aborts:
                    self.obs.fail(f"G5: {who}sent abort of {f['group']}@{off} unstored")

    def check_group(self, name: str, g: Group, server: str) -> None:
        """After quiescence: `g` (as `server` has it) is stable, and its view is the one every
        member's client has (and no other client thinks it is in)."""
        fail = self.obs.fail
        if g.state is not GroupState.STABLE:
            fail(f"liveness: group {name} is {g.state} after quiescence")
        if len(g.atomics):
            fail(f"liveness: group {name} has {len(g.atomics)} unresolved atomics")
        if g.writes.busy or g.writes.held:
            fail(f"liveness: group {name} still waits on a write ({g.writes.held} held)")
        view = g.view
        for mem in view.members:
            m = self.member(mem)
            if g.slots[mem].conn is None:
                fail(f"liveness: {mem} is in {name} v{view.version} without a connection")
            gp = m.proto.groups.get(name)
            if gp is None or gp.phase is not GroupPhase.ACTIVE or gp.view != view.version:
                fail(f"G1: {mem} client has {name} as {gp and (gp.phase, gp.view)}, {server} "
                     f"view v{view.version} {view.members}")
                continue
            if gp.members != view.members:
                fail(f"G1: {mem} sees {gp.members}, {server} {view.members}")
            held = [h for s in gp.streams.values() for h in s.held]
            if held:
                fail(f"G5: {mem} still holds back {[h.offset for h in held]} in {name}")
            # the end is a virtual install: every member in view v has the same view-v set
            self.obs.check_flush(mem, name, view.version, self.obs.track(mem, name))
        for m in self.members:
            gp = m.proto.groups.get(name)
            if gp is not None and gp.phase is GroupPhase.ACTIVE and m.conn is not None \
                    and m.name not in view.members:
                fail(f"G1: {m.name} thinks it is in {name} v{gp.view}, {server} has "
                     f"{view.members} at v{view.version}")

    def check_complete(self, name: str, g: Group) -> None:
        """After quiescence: every member of `g`'s view has every stored message it is owed:
        each one stored in a view of its current run of membership (from its join on), from a
        member or (with `accept_from: any`) from anyone, committed if atomic. A message lost on
        its way to a member (a lost tail batch nobody noticed) fails here, even when every
        member missed it (which G2's check cannot see)."""
        for mem in g.view.members:
            t = self.obs.track(mem, name)
            if t.joined_view is None:
                continue  # (its join install is older than what this run saw: not checked)
            anyone = self.member(mem).accept_from.get(name, "members") == "any"
            missing = sorted(
                off for (grp, off), info in self.obs.msgs.items()
                if grp == name and info.sending_view >= t.joined_view
                and (info.from_member or anyone) and off not in t.delivered
                and self.durable.get((grp, off)) == (info.stream, info.seq, info.sender)
                and (not info.atomic or self.outcome(grp, off) is True))
            if missing:
                self.obs.fail(f"liveness: {mem} (in {name} since v{t.joined_view}) never "
                              f"delivered stored messages {missing[:10]} "
                              f"({self.obs.msgs[(name, missing[0])]})")

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
