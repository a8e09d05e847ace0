"""Replay one group's recorded connection timeline through the real core (no Spark here).

Why: the closed-form estimate (`whatif --method estimate`) counts each disconnect gap alone, but
the server merges concurrent requests into one view change (DESIGN §4: removals that come
during a flush join its proposal, joins queue for the next one; a suspect member in the flush
set holds the flush until its own removal joins it). Those rules live in `notify.core`; it is
deterministic and sans-I/O, so the exact answer to "what would timeout T have done to this
history" is to feed the history to it with T and a simulated clock.

Theory of operation. `timeline()` turns what the logs recorded for one group into *inputs*
that do not depend on the timeout the run used (a `Step` per join, leave, drop, return; see its
docstring for which recorded facts become which step). `replay()` builds a real `Hub` with the
candidate's `Timeouts` and runs it with the runtime's `Driver` (notify/runtime, the one every
host runs) with `ReplayHost` as its ports: storage (the memory log)
finishes every write at once, and a group that leaves memory (idle, G14) comes back from it as
on the server; each member is a real `ClientProtocol` (the SDK's sans-I/O client) on a simulated
connection, so it answers `view_change` with `flush_ok`, resumes with its own resume point and
rejoins like the SDK's `Connection.reconnect()`. Frames to a member arrive `flush_rtt` seconds
after they leave (one flush round trip: the window in which concurrent requests merge and a
leaver that comes back cancels the change); frames to the server and writes take no time. Like
an application awaiting the SDK's `join()` or `leave()`, a member that asked to join or leave
does nothing else (its logged drop, leave, join) until that install comes, for at most
`WAIT[kind]` seconds (what bench/fleet.py waits): the logged drop that follows a join by a
millisecond, or the join that follows a leave, happened *because* the install had come, and at
another timeout the install comes at another time.
Between steps the clock jumps to the next thing due, or to the hub's `next_deadline()`, and
`tick` fires there: suspect, flush and ACK timeouts happen exactly as in the server.

What is counted comes from the core's own `LogEvent`s (the ones the server writes to its event
log): `view.install` is a *view change*, as `notify-analyze churn` counts it in a server log;
members that leave a view while their connection is down are *removals*, false ones when the
member came back later, and for members that never came back the time from their drop to that
install is the *detection delay* (the time they were ghosts). Everything is per group
membership: a member in two groups that drops is suspected, and maybe removed, in both.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

import orjson

from client_sdk.events import ServerError
from client_sdk.protocol import ClientProtocol, GroupPhase
from notify.core import ClientFrame, CoreConfig, Hub, LogEvent, Timeouts, Write
from notify.core.actions import Error, Rejected
from notify.core.users import split_member
from notify.runtime import CheckpointAction, Done, Driver, Fetched, Paged
from notify.runtime.frames import unbatch
from notify.storage.memory import MemoryLog
from notify.wire import parse

Kind = Literal["join", "leave", "drop", "return", "publish"]

#: how long a member that asked to join or leave waits for that install before going on
#: (bench/fleet.py's `wait_for`s)
WAIT: dict[str, float] = {"join": 10.0, "leave": 5.0}

#: the order of steps recorded at the same instant: a connection is back before its member
#: acts, and gone after it
_ORDER: dict[str, int] = {"return": 0, "join": 1, "publish": 2, "leave": 3, "drop": 4}


@dataclass(frozen=True, slots=True)
class Step:
    """One input of the replay: `member` joins or leaves the group, its connection drops or
    comes back (it then resumes every group it had not left, as the SDK does), or it publishes
    an atomic message (every member must ACK it: one that cannot, being away, is removed after
    `ack_timeout` whatever the suspect timeout; other messages change no membership and are
    not replayed)."""

    ts: float
    kind: Kind
    member: str


@dataclass(frozen=True, slots=True)
class Candidate:
    """What the replayed server runs with: its timeouts (`suspect_timeout` is what `whatif`
    varies) and `flush_rtt`, seconds from a proposal to its install when nobody holds the flush
    up (the replay charges it all to the frames from server to member)."""

    timeouts: Timeouts = field(default_factory=Timeouts)
    flush_rtt: float = 0.0

    @classmethod
    def of(cls, suspect_timeout: float, flush_rtt: float = 0.0) -> Candidate:
        return cls(Timeouts(suspect_timeout=suspect_timeout), flush_rtt)


@dataclass(slots=True)
class Outcome:
    """What one candidate did to one group's timeline (summed over groups by the Spark job)."""

    view_changes: int = 0  # view.install events: what `churn` counts in a server log
    installs: int = 0  # view_install frames sent to members (each member installs each view)
    proposals: int = 0  # view.propose events (a restarted flush proposes again)
    cancelled: int = 0  # view.resume: a proposal called off because its leaver came back
    removals: int = 0  # members removed while their connection was down
    false_removals: int = 0  # ... that came back later
    returning_gaps: int = 0  # gaps (drop -> return) of members in the group
    never_returned: int = 0  # gaps still open when the log ends
    censored_gaps: int = 0  # ... whose removal would come after the end of the log
    detected: int = 0  # ... whose removal came before it
    detection_delay_s: float = 0.0  # summed over the detected ones
    ghost_member_s: float = 0.0  # never-returned members' time in the view, up to the end

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# -- the timeline ----------------------------------------------------------------------------


def timeline(views: list[tuple[float, tuple[str, ...]]],
             gaps: list[tuple[float, Literal["drop", "return"], str]],
             requests: Sequence[tuple[float, Literal["join", "leave"], str]] = (),
             publishes: Sequence[tuple[float, str]] = ()) -> list[Step]:
    """One group's inputs from what was recorded.

    `gaps`: every drop and return of the connections of the members of the group.
    `requests`: joins and leaves the members' applications asked for (`client.join`,
    `client.leave`). They are the inputs themselves: the time a member asked, whatever the
    server was busy with.
    `publishes`: (when, sender) of each atomic message the server accepted.
    `views`: the group's installed views in order, each as (when its change was proposed, its
    members), for members with no recorded requests (a log without client logs): a member that
    appears is taken as a join request at that time, one that disappears as a leave. That is
    approximate: joins the server merged into one install (requested during an earlier flush)
    arrive together, and the first of them is proposed alone.

    Which recorded view changes are inputs, and which are what the recorded timeout did (and
    must be left for the replay to redo): a member disappearing while its connection is down
    was removed for it (suspect or flush timeout), so it is not an input; its reappearance after
    it came back is the SDK's rejoin, which the replay does itself on the return. A member that
    disappears while connected asked to leave (or was cut for a reason no suspect timeout
    changes), and its next appearance is a join."""
    asked = {m for _, _, m in requests}
    away: set[str] = set()
    wants: set[str] = set()  # members that (as far as the timeline knows) mean to be in
    prev: frozenset[str] = frozenset()
    # (ts, rank, index): at one instant, connections change before views
    order = sorted([(ts, 1, i) for i, (ts, _) in enumerate(views)]
                   + [(ts, 0, i) for i, (ts, _, _) in enumerate(gaps)])
    steps: list[Step] = []
    for ts, rank, i in order:
        if rank == 0:
            _, kind, member = gaps[i]
            (away.add if kind == "drop" else away.discard)(member)
            steps.append(Step(ts, kind, member))
            continue
        members = frozenset(views[i][1])
        for m in sorted(prev - members - asked):
            if m not in away and m in wants:
                wants.discard(m)
                steps.append(Step(ts, "leave", m))
        for m in sorted(members - prev - asked):
            if m not in wants:
                wants.add(m)
                steps.append(Step(ts, "join", m))
        prev = members
    steps.extend(Step(ts, kind, m) for ts, kind, m in requests)
    steps.extend(Step(ts, "publish", m) for ts, m in publishes)
    steps.sort(key=lambda s: (s.ts, _ORDER[s.kind]))
    return steps


@dataclass(frozen=True, slots=True)
class Start:
    """The group as the log shows it just before any member of it was first away.

    No timeout can have changed anything before that (nobody was suspect), so the replay starts
    from this view and counts the logged installs up to it as they are. Re-simulating them
    instead would get a group's startup wrong: how many of a burst of joins the server merged
    depends on how slow it was under that burst, which no flush round trip measured later
    says (the fleets' startups merged 6-9 joins per install where a 7 ms flush merges 2-3)."""

    ts: float  # when that view was installed
    members: tuple[str, ...]
    view_changes: int  # logged installs up to it
    installs: int  # their view_install frames (members of each view)


def start_of(installs: Sequence[tuple[float, tuple[str, ...]]],
             gaps: Sequence[tuple[float, str, str]]) -> Start | None:
    """`installs`: the group's logged views as (installed at, members), in order; `gaps` as for
    `timeline`. None if no view was installed before the first drop."""
    first = min((ts for ts, kind, _ in gaps if kind == "drop"), default=math.inf)
    before = [(ts, ms) for ts, ms in installs if ts < first]
    if not before:
        return None
    return Start(before[-1][0], tuple(before[-1][1]), len(before),
                 sum(len(ms) for _, ms in before))


# -- the host --------------------------------------------------------------------------------


@dataclass(eq=False, slots=True)
class _Member:
    name: str
    proto: ClientProtocol
    conn: int | None = None
    reqs: int = 0
    #: when its connection dropped (None: connected or never connected)
    dropped_at: float | None = None
    #: the current gap began while it was in (or joining) the group, and when the group
    #: removed it during that gap
    counted: bool = False
    removed_at: float | None = None
    #: join requests under way: req -> group
    join_reqs: dict[str, str] = field(default_factory=dict)
    #: its own join or leave is under way until then (None: not waiting): its next steps wait
    waiting_until: float | None = None
    waiting_for: str = ""
    deferred: list[Step] = field(default_factory=list)

    def req(self) -> str:
        self.reqs += 1
        return f"{self.name}-{self.reqs}"


class ReplayHost:
    """The ports of the runtime's `Driver`: storage answers at once, frames reach members
    `flush_rtt` later (in order; dropped if the connection is gone by then), and the core's
    `LogEvent`s are counted into an `Outcome`."""

    def __init__(self, group: str, candidate: Candidate) -> None:
        self.group = group
        self.now = 0.0
        tokens = itertools.count(1)
        self.hub = Hub(CoreConfig(timeouts=candidate.timeouts, metrics=True),
                       new_token=lambda: f"s{next(tokens)}", epoch=1)
        self.driver = Driver(self.hub, transport=self, store=self, observer=self,
                             clock=lambda: self.now)
        #: what the log holds, for a group that left memory (idle, G14) and comes back
        self.log = MemoryLog()
        self.rtt = candidate.flush_rtt
        self._suspect_timeout = candidate.timeouts.suspect_timeout
        self.members: dict[str, _Member] = {}
        self.by_conn: dict[int, _Member] = {}
        self.out = Outcome()
        self._conns = itertools.count(1)
        self._seq = itertools.count()
        #: what is due later, in time order: frames to members, write completions, wake-ups
        self._due: list[tuple[float, int, Callable[[], None]]] = []
        self._view: frozenset[str] = frozenset()
        self._last: tuple[bytes, dict[str, Any]] = (b"", {})
        #: the driver's `next_wakeup()`, recomputed after the driver was called
        self._deadline: float | None = None
        self._deadline_stale = True

    # -- the driver's ports ----------------------------------------------------------------------

    def later(self, at: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._due, (at, next(self._seq), fn))

    def push(self, conn: int, data: bytes, *, bounded: bool = True, frames: int = 1) -> None:
        if conn in self.by_conn:
            if data is not self._last[0]:  # one frame to many members: parsed once
                self._last = (data, orjson.loads(data))
            frame = self._last[1]
            self.later(self.now + self.rtt, lambda: self._arrive(conn, frame))

    def close(self, conn: int, code: int, reason: str, *, drain: bool) -> None:
        m = self.by_conn.pop(conn, None)
        if m is not None:  # (no timeline makes the core close a connection; kept for safety)
            m.conn = None

    def write(self, write: Write, done: Done) -> None:
        self.log.write(write, done)  # (no event loop here: answered at once)

    def fetch(self, group: str, answer: Fetched) -> None:
        answer(self.log.load_group(group, self.hub.config.limits.window_messages), None)

    def read(self, group: str, after: int, limit: int, max_bytes: int, answer: Paged) -> None:
        answer(self.log.read_page(group, after, limit, max_bytes), None)

    def forget(self, group: str) -> None:
        pass

    def event(self, e: LogEvent) -> None:
        if e.event == "view.install":
            self._installed(frozenset(e.fields["members"]))
        elif e.event == "view.propose":
            self.out.proposals += 1
        elif e.event == "view.resume":
            self.out.cancelled += 1

    def checkpoint(self, a: CheckpointAction) -> None:  # no member uploads one here
        pass

    def halt(self, reason: str) -> None:
        raise RuntimeError(f"the replayed core halted: {reason}")

    # -- counting ------------------------------------------------------------------------------

    def _installed(self, members: frozenset[str]) -> None:
        out = self.out
        out.view_changes += 1
        out.installs += len(members)
        for name in self._view - members:
            m = self.members.get(name)
            if m is not None and m.dropped_at is not None and m.counted and m.removed_at is None:
                m.removed_at = self.now
                out.removals += 1
        self._view = members

    def _gap_ends(self, m: _Member, end: float | None) -> None:
        """`m`'s gap is over: it came back (`end` None) or the log ended."""
        out = self.out
        if m.counted and m.dropped_at is not None:
            if end is None:
                out.returning_gaps += 1
                out.false_removals += m.removed_at is not None
            else:
                out.never_returned += 1
                if m.removed_at is not None:
                    out.detected += 1
                    out.detection_delay_s += m.removed_at - m.dropped_at
                    out.ghost_member_s += m.removed_at - m.dropped_at
                else:
                    out.censored_gaps += 1
                    out.ghost_member_s += end - m.dropped_at
        m.dropped_at, m.removed_at, m.counted = None, None, False

    # -- driving the core ----------------------------------------------------------------------

    def _send(self, m: _Member) -> None:
        for f in m.proto.data_to_send():
            if m.conn is None:
                return
            self._deadline_stale = True  # (its next wake-up may change)
            self.driver.frame(m.conn, _parsed(f))

    def _connect(self, m: _Member, *, resume: bool) -> None:
        conn = next(self._conns)
        m.conn = conn
        self.by_conn[conn] = m
        self._deadline_stale = True  # (its next wake-up may change)
        self.driver.opened(conn)
        self._deadline_stale = True  # (its next wake-up may change)
        self.driver.frame(conn, _parsed(m.proto.hello(resume)))

    def _arrive(self, conn: int, frame: dict[str, Any]) -> None:
        m = self.by_conn.get(conn)
        if m is None:
            return
        rest = []
        for f in unbatch(frame):  # the driver packs a run of frames to one member
            if f.get("type") == "welcome":
                m.proto.receive(f)  # the session a resume presents
            else:
                rest.append(f)
        if not rest:
            return
        for f in rest:
            _, replies = m.proto.receive(f)
            for r in replies:
                if isinstance(r, ServerError):
                    self._refused(m, r)
        self._send(m)
        if m.waiting_until is not None and self._done_waiting(m):
            self._go_on(m)

    def _done_waiting(self, m: _Member) -> bool:
        g = m.proto.groups.get(self.group)
        if m.waiting_for == "join":
            return g is None or g.phase is not GroupPhase.JOINING
        return g is None or g.phase is GroupPhase.LEFT

    def _wait(self, m: _Member, kind: str) -> None:
        until = m.waiting_until = self.now + WAIT[kind]
        m.waiting_for = kind
        self.later(until, lambda: self._go_on(m) if m.waiting_until == until else None)

    def _go_on(self, m: _Member) -> None:
        """`m`'s join is over (installed, refused, or waited for long enough): it does what it
        did next."""
        m.waiting_until = None
        steps, m.deferred = m.deferred, []
        for s in steps:
            self.step(s)

    def _refused(self, m: _Member, r: ServerError) -> None:
        """A resume point the server no longer takes: join afresh, as the SDK does."""
        group = m.join_reqs.pop(str(r.req), None) if r.req is not None else None
        if group is not None and r.code in ("offset_unavailable", "bad_resume"):
            req = m.req()
            m.join_reqs[req] = group
            m.proto.join_afresh(req, group, r.code)

    def _hub_deadline(self) -> float | None:
        """The driver's `next_wakeup()`, asked again only after a call into the driver
        (nothing else changes it)."""
        if self._deadline_stale:
            self._deadline, self._deadline_stale = self.driver.next_wakeup(), False
        return self._deadline

    def run_until(self, t: float) -> None:
        """Deliver frames and fire deadlines up to `t`, in time order."""
        while True:
            d = self._hub_deadline()
            w = self._due[0][0] if self._due else None
            # the earlier of the two (either may be None); no generator: this loop turns for
            # every frame and deadline of the replay
            nxt = w if d is None or (w is not None and w < d) else d
            if nxt is None or nxt > t:
                break
            self.now = max(self.now, nxt)
            if w is not None and w <= nxt:
                heapq.heappop(self._due)[2]()
            else:
                self._deadline_stale = True  # (its next wake-up may change)
                self.driver.tick()
        self.now = max(self.now, t)

    def unseen_gap(self, name: str, back: float, next_step: float) -> bool:
        """`name`'s connection drops now and is back at `back`, and nothing else is recorded
        until `next_step`: True (and the gap counted) if nobody could tell it happened, so it
        need not be replayed. Then it would go: a `member.suspect`, a resume of the same
        session at the same point, and a `view_resume` and a `catchup_done` one round trip
        later, which leave the member's SDK where it was. That holds when

        - the member is in the view, connected, and waits for nothing (its SDK is active);
        - the group is settled (`Group.settled`: no view change under way or asked for, no
          atomic message waiting for ACKs, no write, no transfer);
        - it is back before its suspect timeout, and nothing is due, no deadline of the core
          and no frame in flight, until its resume has come back to it (`back` + one flush
          round trip), and no step either.

        Everything else would be the same but names, the connection's id and the SDK's request
        counter (which no rule of the core looks at), and the new connection's publish-rate
        bucket, which would start full (the replay's atomic messages come far below the limit).
        `tests/unit/test_replay.py` checks that a replay that passes gaps over counts exactly
        what one that replays them all does."""
        m = self.members.get(name)
        g = self.hub.groups.get(self.group)
        if m is None or m.conn is None or m.waiting_until is not None or g is None:
            return False
        mine = m.proto.groups.get(self.group)
        slot = g.slots.get(name)
        settle = back + self.rtt
        if (mine is None or mine.phase is not GroupPhase.ACTIVE or slot is None
                or slot.conn != m.conn or back >= self.now + self._suspect_timeout
                or next_step <= settle or not g.settled()
                or (self._due and self._due[0][0] <= settle)):
            return False
        d = self._hub_deadline()
        if d is not None and d <= settle:
            return False
        self.out.returning_gaps += 1
        self.now = back
        return True

    def step(self, s: Step) -> None:
        m = self.members.get(s.member)
        if m is None:
            # a member id is `user#instance` (or a user naming none): it says hello as both,
            # as the SDK that wrote the log did (notify/core/users.py)
            m = self.members[s.member] = _Member(s.member,
                                                 ClientProtocol(*split_member(s.member)))
        if m.waiting_until is not None:
            m.deferred.append(s)
            return
        if s.kind == "drop":
            self._drop(m)
        elif s.kind == "return":
            self._return(m)
        elif s.kind == "join":
            self._join(m)
        elif s.kind == "publish":
            self._publish(m)
        else:
            g = m.proto.groups.get(self.group)
            if m.conn is not None and g is not None and g.phase is not GroupPhase.LEFT:
                m.proto.leave(m.req(), self.group)
                self._wait(m, "leave")
                self._send(m)

    def _publish(self, m: _Member) -> None:
        """An atomic message, if `m` may send now (the SDK holds sends during a view change;
        the replay leaves out what the server could not have accepted)."""
        g = m.proto.groups.get(self.group)
        if m.conn is None or g is None or not g.can_send:
            return
        req = m.req()
        m.proto.send(m.proto.publish_frame(req, self.group, req, {}, atomic=True))
        self._send(m)

    def _drop(self, m: _Member) -> None:
        if m.conn is None:
            return
        conn, m.conn = m.conn, None
        del self.by_conn[conn]
        m.dropped_at = self.now
        m.counted = self.hub.groups.get(self.group) is not None and \
            self.hub.groups[self.group].involves(m.name)
        self._deadline_stale = True  # (its next wake-up may change)
        self.driver.closed(conn)

    def _return(self, m: _Member) -> None:
        if m.conn is not None or m.dropped_at is None:
            return  # not away (a return recorded without its drop, or before its first join)
        self._gap_ends(m, None)
        self._connect(m, resume=True)
        for r in m.proto.rejoin_all(m.req):  # Connection.reconnect()
            m.join_reqs[r.req] = r.group
        self._send(m)

    def _join(self, m: _Member) -> None:
        if m.conn is None:
            if m.dropped_at is not None:
                return  # away: it cannot ask anything now
            self._connect(m, resume=False)
        g = m.proto.groups.get(self.group)
        if g is not None and g.phase is not GroupPhase.LEFT:
            return  # already in, or on its way in
        req = m.req()
        m.join_reqs[req] = self.group
        m.proto.join(req, self.group)
        self._wait(m, "join")
        self._send(m)

    def begin(self, start: Start) -> None:
        """Install `start`'s view at once (its members join with no network delay), then count
        from its logged installs."""
        rtt, self.rtt, self.now = self.rtt, 0.0, start.ts
        for name in start.members:
            self.step(Step(start.ts, "join", name))
        self.run_until(start.ts)
        self.rtt = rtt
        assert self._view == frozenset(start.members), (self._view, start)
        self.out = Outcome(view_changes=start.view_changes, installs=start.installs,
                           proposals=start.view_changes)

    def finish(self, end: float) -> Outcome:
        self.run_until(end)
        for m in self.members.values():  # what still waits for a join happened after the end
            m.deferred.clear()
        for m in self.members.values():
            if m.dropped_at is not None:
                self._gap_ends(m, end)
        return self.out


#: client frames already parsed, by their bytes: the core's events are frozen, and many frames
#: repeat (every member of a view change sends the same `flush_ok`); cleared when full
_PARSED: dict[bytes, ClientFrame] = {}
_PARSED_MAX = 1 << 16


def _parsed(frame: dict[str, Any]) -> ClientFrame:
    """A client frame as the server's edge hands it to the core (notify/wire.py)."""
    data = orjson.dumps(frame)
    f = _PARSED.get(data)
    if f is not None:
        return f
    parsed = parse(data)
    if isinstance(parsed, Error | Rejected):
        raise AssertionError(f"the server's edge refuses a frame of the SDK: {frame} ({parsed})")
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    _PARSED[data] = parsed
    return parsed


def replay(group: str, steps: list[Step], candidate: Candidate, end: float,
           start: Start | None = None, *, skip_unseen: bool = True) -> Outcome:
    """Run `steps` (sorted by time) through a fresh core with `candidate`'s timeouts until
    `end` (the end of the log: later deadlines never fire), from `start` if given (then the
    steps up to it are already in its view). Gaps nobody could notice are counted, not
    replayed (`ReplayHost.unseen_gap`), unless `skip_unseen` is False."""
    steps = _atomics_that_matter(steps, candidate.timeouts)
    host = ReplayHost(group, candidate)
    if start is not None:
        host.begin(start)
        steps = [s for s in steps if s.ts > start.ts]
    elif steps:
        host.now = steps[0].ts
    i, n = 0, len(steps)
    while i < n:
        s = steps[i]
        host.run_until(s.ts)
        if (skip_unseen and s.kind == "drop" and i + 1 < n and steps[i + 1].kind == "return"
                and steps[i + 1].member == s.member
                and host.unseen_gap(s.member, steps[i + 1].ts,
                                    steps[i + 2].ts if i + 2 < n else end)):
            i += 2  # most gaps of a log: a reconnect no timeout notices (`unseen_gap`)
            continue
        host.step(s)
        i += 1
    return host.finish(max(end, host.now))


def _absences(steps: Sequence[Step]) -> list[tuple[float, float]]:
    """Every time a member was away in `steps`: (drop, return), the return `inf` for one that
    never came back. A drop while already away changes nothing (the host ignores it too)."""
    away: dict[str, float] = {}
    spans: list[tuple[float, float]] = []
    for s in steps:
        if s.kind == "drop":
            away.setdefault(s.member, s.ts)
        elif s.kind == "return" and s.member in away:
            spans.append((away.pop(s.member), s.ts))
    spans.extend((d, math.inf) for d in away.values())
    return spans


def away_horizon(steps: Sequence[Step], end: float) -> float:
    """The longest time any member was away in `steps`: drop to return, or to `end` for one
    that never came back (0 if nobody was). A suspect timeout longer than that never fires."""
    return max((min(r, end) - d for d, r in _absences(steps)), default=0.0)


def replay_candidates(group: str, steps: list[Step], candidates: Sequence[Candidate],
                      end: float, start: Start | None = None
                      ) -> list[tuple[Outcome, float | None]]:
    """`replay` for each candidate, in the same order, each with the CPU seconds its replay took
    (None: it shared another candidate's, being provably the same).

    Two candidates that differ only in `suspect_timeout`, both longer than every gap of the
    timeline (`away_horizon`), replay identically: no suspect timer of either ever fires
    (every member is back, or the log has ended, before it is due), a session's expiry comes
    later still, and the atomic messages that matter are the same (their windows end at the
    member's return or past the end of the log). So all those candidates share one replay (the
    first of them's); the others are replayed one by one."""
    horizon = away_horizon(steps, end)
    done: dict[Candidate, Outcome] = {}
    outs: list[tuple[Outcome, float | None]] = []
    for c in candidates:
        key = c
        if c.timeouts.suspect_timeout > horizon:
            key = with_timeout(c, math.inf)  # the class of every such candidate (same rest)
        if key in done:
            outs.append((done[key], None))
            continue
        t0 = time.process_time()
        done[key] = replay(group, steps, c, end, start)
        outs.append((done[key], time.process_time() - t0))
    return outs


def _atomics_that_matter(steps: list[Step], t: Timeouts) -> list[Step]:
    """Leave out the atomic messages that cannot change the membership, which is most of them
    (the replay's cost at scale is theirs). One matters only through a member that cannot ACK
    it for `ack_timeout` (a connected member ACKs at once, one that resumes ACKs what it is
    replayed): a member away from before it until after `ack_timeout` has run out, and not
    yet removed for its suspect timeout by then (`suspect_timeout` after its drop, plus one
    `flush_timeout` for a flush held up). The others are dropped here, exactly."""
    spans = sorted((d, min(r - t.ack_timeout, d + t.suspect_timeout + t.flush_timeout))
                   for d, r in _absences(steps))
    spans = [(a, b) for a, b in spans if b >= a]
    starts = [a for a, _ in spans]
    ends = list(itertools.accumulate((b for _, b in spans), max))  # furthest end so far

    def matters(ts: float) -> bool:
        i = bisect.bisect_right(starts, ts) - 1
        return i >= 0 and ends[i] >= ts

    return [s for s in steps if s.kind != "publish" or matters(s.ts)]


def with_timeout(c: Candidate, suspect_timeout: float) -> Candidate:
    return replace(c, timeouts=replace(c.timeouts, suspect_timeout=suspect_timeout))
