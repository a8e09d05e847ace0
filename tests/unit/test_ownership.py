"""Shard ownership by lease, the sans-I/O machine (notify/cluster/ownership.py, DESIGN §9).

Driven with a fake clock against `KV`, a tiny model of one JetStream KV bucket: one revision
counter, create / update-with-last-revision / delete-with-last-revision, `max_age` expiry that
emits no watch event (as JetStream's), and a watch stream of every change. The scenarios run the
rules of the module docstring one by one; the property test at the end throws random schedules
(delays, lost answers, operations that land after their timeout, pauses, crashes) at 2-3 nodes
and checks, after every input a node handles, that what it believes it holds is what the KV
holds, and that terms only grow.
"""

from __future__ import annotations

import ast
import inspect
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from notify.cluster import ownership
from notify.cluster.ownership import (
    Acquired,
    Action,
    Campaign,
    Lease,
    Lost,
    NodeDown,
    NodeUp,
    OwnerChanged,
    Ownership,
    Release,
    Renew,
)
from notify.cluster.shards import preferred

TTL, NODE_TTL, SETTLE = 6.0, 3.0, 1.0


# -- the KV model -------------------------------------------------------------------------------


@dataclass
class Entry:
    node: str
    term: int
    revision: int
    put_at: float


@dataclass
class KV:
    ttl: float = TTL
    revision: int = 0
    keys: dict[int, Entry] = field(default_factory=dict)
    #: the watch stream: every change in order (expiry is silent, as JetStream's max_age)
    events: list[tuple[int, Lease | None]] = field(default_factory=list)

    def expire(self, now: float) -> None:
        for shard in [s for s, e in self.keys.items() if now >= e.put_at + self.ttl]:
            del self.keys[shard]

    def current(self, shard: int, now: float) -> Entry | None:
        self.expire(now)
        return self.keys.get(shard)

    def _put(self, shard: int, node: str, term: int | None, now: float) -> int:
        self.revision += 1
        entry = Entry(node, term or self.revision, self.revision, now)
        self.keys[shard] = entry
        self.events.append((shard, Lease(node, entry.term, entry.revision)))
        return self.revision

    def create(self, shard: int, node: str, now: float) -> int | None:
        self.expire(now)
        return None if shard in self.keys else self._put(shard, node, None, now)

    def update(self, shard: int, node: str, term: int, last: int, now: float) -> int | None:
        self.expire(now)
        entry = self.keys.get(shard)
        if entry is None or entry.revision != last:
            return None
        return self._put(shard, node, term, now)

    def delete(self, shard: int, last: int, now: float) -> None:
        self.expire(now)
        entry = self.keys.get(shard)
        if entry is not None and entry.revision == last:
            self.revision += 1
            del self.keys[shard]
            self.events.append((shard, None))


# -- a harness: machines whose KV operations land and are answered at once ----------------------


class Cluster:
    def __init__(self, names: Iterable[str], *, shards: int = 16, settle: float = SETTLE,
                 standby: Iterable[str] = ()) -> None:
        self.kv = KV()
        self.shards = shards
        #: nodes started as standbys (rule 6a): their heartbeats say so
        self.standby = set(standby)
        self.m = {n: Ownership(n, shards=shards, lease_ttl=TTL, node_ttl=NODE_TTL,
                               settle=settle, standby=n in self.standby) for n in names}
        self.cursor = dict.fromkeys(self.m, 0)
        self.up = set(self.m)  # processes running (heartbeating, ticking)
        self.log: list[tuple[str, Action]] = []
        self.when: list[float] = []  # the time of each log entry
        self.now = 0.0

    def add(self, name: str, settle: float = SETTLE) -> None:
        self.m[name] = Ownership(name, shards=self.shards, lease_ttl=TTL, node_ttl=NODE_TTL,
                                 settle=settle, standby=name in self.standby)
        self.cursor[name] = 0
        self.up.add(name)

    def feed(self, name: str, actions: list[Action]) -> list[Action]:
        """Carry out `name`'s KV actions against the model at once, answering each; returns
        every action (answers' actions included), in order."""
        m, out, queue = self.m[name], [], list(actions)
        while queue:
            a = queue.pop(0)
            out.append(a)
            self.log.append((name, a))
            self.when.append(self.now)
            if isinstance(a, Campaign):
                queue += m.campaigned(a.shard, self.kv.create(a.shard, name, self.now), self.now)
            elif isinstance(a, Renew):
                rev = self.kv.update(a.shard, name, a.term, a.revision, self.now)
                queue += m.renewed(a.shard, rev, self.now)
            elif isinstance(a, Release):
                self.kv.delete(a.shard, a.revision, self.now)
        return out

    def sync(self, name: str) -> list[Action]:
        return self.feed(name, self.m[name].synced(self.now))

    def deliver(self, name: str) -> list[Action]:
        out: list[Action] = []
        while self.cursor[name] < len(self.kv.events):
            shard, lease = self.kv.events[self.cursor[name]]
            self.cursor[name] += 1
            out += self.feed(name, self.m[name].lease_seen(shard, lease, self.now))
        return out

    def heartbeats(self) -> None:
        for seer in self.up:
            for node in self.up:
                self.feed(seer, self.m[seer].node_seen(node, self.now,
                                                       standby=node in self.standby))

    def run(self, until: float, step: float = 0.25) -> None:
        """Heartbeats every second, watch delivery and ticks every `step`, for the up nodes."""
        while self.now < until - 1e-9:
            self.now = round(self.now + step, 6)
            if abs(self.now - round(self.now)) < 1e-9:
                self.heartbeats()
            for name in sorted(self.up):
                self.deliver(name)
                self.feed(name, self.m[name].tick(self.now))

    def holders(self) -> dict[int, str]:
        out: dict[int, str] = {}
        for name in self.up:
            for shard in self.m[name].held():
                assert shard not in out, f"shard {shard} held by {out[shard]} and {name}"
                out[shard] = name
        return out

    def actions(self, name: str, kind: type) -> list[Action]:
        return [a for n, a in self.log if n == name and isinstance(a, kind)]


def started(*names: str, shards: int = 16) -> Cluster:
    """Nodes that see each other, then sync together and run past `settle`."""
    c = Cluster(names, shards=shards)
    c.heartbeats()
    for n in names:
        c.sync(n)
    c.run(SETTLE + 1)
    return c


# -- scenarios ----------------------------------------------------------------------------------


def test_single_node_takes_every_shard_after_settle_and_renews() -> None:
    c = Cluster(["a"], shards=256)
    assert c.sync("a") == []  # synced, not settled: no campaign yet
    assert c.m["a"].live_nodes() == {"a"}
    c.now = SETTLE - 0.01
    assert c.feed("a", c.m["a"].tick(c.now)) == []
    c.now = SETTLE
    out = c.feed("a", c.m["a"].tick(c.now))
    assert [a.shard for a in out if isinstance(a, Campaign)] == list(range(256))
    assert {a.shard for a in out if isinstance(a, Acquired)} == set(range(256))
    assert len([a for a in out if isinstance(a, OwnerChanged) and a.old is None]) == 256
    terms = c.m["a"].held()
    assert set(terms) == set(range(256))
    assert all(c.m["a"].owner(s) == Lease("a", t, t) for s, t in terms.items())
    c.run(60)  # renewals keep it: same terms, newer revisions, no loss
    assert c.m["a"].held() == terms
    assert not c.actions("a", Lost)
    assert len(c.actions("a", Renew)) >= 256 * 25
    assert all(c.kv.current(s, c.now).term == t for s, t in terms.items())  # type: ignore[union-attr]


def test_two_nodes_split_by_rendezvous_the_earlier_one_hands_shards_over() -> None:
    c = Cluster(["a"], shards=64)
    c.sync("a")
    c.run(3)
    assert set(c.m["a"].held()) == set(range(64))
    c.add("b")
    c.run(4)  # b's first heartbeat at t=4; b syncs at t=4
    c.sync("b")
    b_pref = {s for s in range(64) if preferred(s, ["a", "b"]) == "b"}
    assert 10 < len(b_pref) < 54
    c.run(4.75)  # b live for 0.75 s in a's view: not settled, nothing handed over
    assert set(c.m["a"].held()) == set(range(64))
    c.run(6)
    handed = [a for a in c.actions("a", Lost)]
    assert {a.shard for a in handed} == b_pref
    assert all(isinstance(a, Lost) and a.why == "handoff" for a in handed)
    # each handoff is Lost, then Release of that shard
    seq = [(type(a).__name__, getattr(a, "shard", None)) for n, a in c.log if n == "a"]
    for s in b_pref:
        assert seq.index(("Release", s)) == seq.index(("Lost", s)) + 1
    holders = c.holders()
    assert holders == {s: preferred(s, ["a", "b"]) for s in range(64)}
    for s in b_pref:  # new holdings are new, larger terms
        old = next(a for a in c.actions("a", Acquired) if a.shard == s)
        assert c.m["b"].held()[s] > old.term  # type: ignore[union-attr]
    for name in "ab":  # both routing views agree with the holders
        assert {s: c.m[name].owner(s).node for s in range(64)} == holders  # type: ignore[union-attr]


def test_owner_dies_survivor_campaigns_only_after_the_lease_looks_expired() -> None:
    c = started("a", "b")
    a_held = c.m["a"].held()
    assert a_held and set(a_held) | set(c.m["b"].held()) == set(range(16))
    c.up.discard("a")  # a crashes: no heartbeats, no renewals, no release
    died = c.now
    c.run(died + NODE_TTL + 0.25)
    assert NodeDown("a") in c.actions("b", NodeDown)
    assert not [a for a in c.actions("b", Campaign) if a.shard in a_held]  # leases still live
    c.run(died + TTL + 2.0)
    won = {a.shard: a.term for a in c.actions("b", Acquired) if a.shard in a_held}
    assert set(won) == set(a_held)
    assert all(won[s] > a_held[s] for s in a_held)
    assert set(c.m["b"].held()) == set(range(16))


def test_a_standby_holds_nothing_takes_all_when_the_active_node_dies_and_hands_back() -> None:
    c = Cluster(["a", "s"], standby=["s"])
    c.heartbeats()
    for n in ("a", "s"):
        c.sync(n)
    c.run(SETTLE + 1)
    assert set(c.m["a"].held()) == set(range(16)) and not c.m["s"].held()
    c.up.discard("a")  # the active node crashes
    died = c.now
    c.run(died + TTL + 2.0)
    assert set(c.m["s"].held()) == set(range(16))  # the last live nodes are all standbys
    c.add("a")  # a comes back: s hands every shard back once a has been live `settle` s
    c.run(c.now + 1)
    c.sync("a")
    c.run(c.now + SETTLE + 2)
    assert set(c.m["a"].held()) == set(range(16)) and not c.m["s"].held()
    assert {a.why for a in c.actions("s", Lost)} == {"handoff"}
    # two active nodes and a standby: the active ones split the shards as without it
    c = Cluster(["a", "b", "s"], standby=["s"])
    c.heartbeats()
    for n in ("a", "b", "s"):
        c.sync(n)
    c.run(SETTLE + 1)
    assert c.holders() == {sh: preferred(sh, ["a", "b"]) for sh in range(16)}


def test_survivor_campaign_waits_for_local_lease_expiry() -> None:
    c = started("a", "b")
    a_held = set(c.m["a"].held())
    c.up.discard("a")
    died, mark = c.now, len(c.log)
    c.run(died + TTL + 2)
    first = min(c.when[i] for i in range(mark, len(c.log))
                if c.log[i][0] == "b" and isinstance(c.log[i][1], Campaign)
                and c.log[i][1].shard in a_held)
    # a's last renewal was seen at most TTL/3 before the crash: its lease looks expired
    # TTL after that, i.e. between 2/3 TTL and TTL after the crash (+ one step)
    assert died + TTL * 2 / 3 <= first <= died + TTL + 0.25


def test_paused_owner_loses_by_its_own_clock_before_anything_else() -> None:
    m = Ownership("a", shards=4, lease_ttl=TTL, node_ttl=NODE_TTL, settle=0)
    out = m.synced(0.0)  # settle=0: campaigns at once
    assert [a for a in out if isinstance(a, Campaign)] == [Campaign(s) for s in range(4)]
    for s, rev in zip(range(4), (11, 12, 13, 14), strict=True):
        assert m.campaigned(s, rev, 0.1)[0] == Acquired(s, rev)
    # the process is paused for a minute; the first thing it handles is a watch update
    out = m.lease_seen(2, Lease("b", 20, 20), 60.0)
    lost = [a for a in out if isinstance(a, Lost)]
    assert out[:4] == lost[:4] and [a.why for a in lost] == ["expired_by_own_clock"] * 4
    assert m.held() == {}
    assert not [a for a in out if isinstance(a, Renew)]


@pytest.mark.parametrize(("first_input", "args"), [
    ("tick", ()), ("node_seen", ("b",)), ("synced", ()),
    ("lease_seen", (3, None)), ("renewed", (0, 99)),
])
def test_own_clock_check_runs_first_on_every_input(first_input: str, args: tuple) -> None:
    m = Ownership("a", shards=4, lease_ttl=TTL, node_ttl=NODE_TTL, settle=0)
    m.synced(0.0)
    for s in range(4):
        m.campaigned(s, 10 + s, 0.0)
    assert [a for a in m.tick(TTL / 3) if isinstance(a, Renew)]  # in flight, unanswered
    out = getattr(m, first_input)(*args, 0.75 * TTL)
    assert [type(a) for a in out[:4]] == [Lost] * 4
    assert all(a.why == "expired_by_own_clock" for a in out[:4])  # type: ignore[union-attr]
    assert m.held() == {}


def test_just_before_the_own_clock_deadline_the_shard_is_still_held() -> None:
    m = Ownership("a", shards=1, lease_ttl=TTL, node_ttl=NODE_TTL, settle=0)
    m.synced(0.0)
    m.campaigned(0, 5, 0.3)  # sent at 0.0: the clock counts from the SEND
    assert m.tick(0.75 * TTL - 0.001) == [Renew(0, 5, 5, 0.75 * TTL)]
    assert m.held() == {0: 5}
    assert Lost(0, 5, "expired_by_own_clock") in m.tick(0.75 * TTL)


def test_renewals_start_at_a_quarter_ttl_and_may_retry_until_the_own_clock_ends_them() -> None:
    """S4: the adapter retries an unanswered renewal until `until`, which is exactly when the
    holding would end anyway, so a stream-leader election that starts just before a renewal
    is survived for half a TTL (it was 0.4 x TTL with a retry window of its own)."""
    m = Ownership("a", shards=1, lease_ttl=TTL, node_ttl=NODE_TTL, settle=0)
    m.synced(0.0)
    m.campaigned(0, 5, 0.0)
    assert m.tick(TTL / 4 - 0.001) == []
    [renew] = m.tick(TTL / 4)
    assert renew == Renew(0, 5, 5, until=0.75 * TTL)
    assert renew.until - TTL / 4 == pytest.approx(0.5 * TTL)
    # answered at the last moment (an election of almost half a TTL): still held, no loss
    out = m.renewed(0, 9, 0.75 * TTL - 0.001)
    assert not [a for a in out if isinstance(a, Lost)] and m.held() == {0: 5}


def test_check_ends_a_holding_the_clock_ended_before_any_tick() -> None:
    """S7: a process woken from a pause takes frames (I/O callbacks run before timers) only
    after `check` has applied its own clock to that shard; O(1) and silent while current."""
    m = Ownership("a", shards=3, lease_ttl=TTL, node_ttl=NODE_TTL, settle=0)
    m.synced(0.0)
    for s in range(3):
        m.campaigned(s, 10 + s, 0.0)
    assert m.check(1, 0.75 * TTL - 0.001) == [] and set(m.held()) == {0, 1, 2}
    out = m.check(1, 0.75 * TTL + 5.0)  # woke 5 s after the holding ended: nothing ticked
    assert [a for a in out if isinstance(a, Lost)] == [
        Lost(s, 10 + s, "expired_by_own_clock") for s in range(3)]
    assert m.held() == {}
    assert m.check(1, 0.75 * TTL + 5.1) == []  # nothing held: nothing to do
    with pytest.raises(ValueError):
        m.check(3, 0.0)


LOSS_TABLE = [
    # (what happens to the held shard 0 of term 5, expected reason)
    ("renew_refused", "renew_failed"),
    ("renew_timed_out", "renew_failed"),
    ("other_node_on_watch", "taken"),
    ("same_node_new_term_on_watch", "taken"),
    ("no_answer_for_too_long", "expired_by_own_clock"),
    ("preferred_node_settled", "handoff"),
    ("stop", "stopping"),
]


@pytest.mark.parametrize(("event", "why"), LOSS_TABLE)
def test_every_way_to_lose_a_shard(event: str, why: str) -> None:
    m = Ownership("a", shards=1, lease_ttl=TTL, node_ttl=NODE_TTL, settle=SETTLE)
    m.synced(0.0)
    assert m.tick(SETTLE) == [Campaign(0)]
    m.campaigned(0, 5, SETTLE)
    t = SETTLE + TTL / 3
    assert m.tick(t) == [Renew(0, 5, 5, SETTLE + 0.75 * TTL)]
    if event == "renew_refused":
        out = m.renewed(0, None, t + 0.1)
    elif event == "renew_timed_out":
        out = m.renewed(0, None, t + 1.5)
    elif event == "other_node_on_watch":
        out = m.lease_seen(0, Lease("b", 9, 9), t + 0.1)
    elif event == "same_node_new_term_on_watch":  # another incarnation of "a"
        out = m.lease_seen(0, Lease("a", 9, 9), t + 0.1)
    elif event == "no_answer_for_too_long":
        out = m.tick(SETTLE + 0.75 * TTL)
    elif event == "preferred_node_settled":
        other = next(n for n in (f"n{i}" for i in range(100)) if preferred(0, ["a", n]) == n)
        m.renewed(0, 6, t + 0.1)
        out = m.node_seen(other, t + 0.2)
        assert not [a for a in out if isinstance(a, Lost)]  # live, not yet settled
        assert m.next_deadline() == pytest.approx(t + 0.2 + SETTLE)
        out = m.tick(t + 0.2 + SETTLE)
    else:
        out = m.stop(t + 0.1)
    lost = [a for a in out if isinstance(a, Lost)]
    assert lost == [Lost(0, 5, why)]  # type: ignore[arg-type]
    assert m.held() == {}
    releases = [a for a in out if isinstance(a, Release)]
    if why in ("handoff", "stopping"):
        assert releases and out.index(releases[0]) > out.index(lost[0])
    else:
        assert not releases
    # the routing view no longer says we serve it
    assert m.owner(0) is None or m.owner(0).node != "a" or m.owner(0).term != 5  # type: ignore[union-attr]


def test_a_late_success_after_the_loss_is_released_not_adopted() -> None:
    m = Ownership("a", shards=1, lease_ttl=TTL, node_ttl=NODE_TTL, settle=0)
    m.synced(0.0)
    m.campaigned(0, 5, 0.0)
    assert m.tick(TTL / 3) == [Renew(0, 5, 5, 0.75 * TTL)]
    assert m.tick(0.75 * TTL)[0] == Lost(0, 5, "expired_by_own_clock")
    out = m.renewed(0, 7, 0.75 * TTL + 0.5)  # the renewal did land, late
    assert Release(0, 7) in out and m.held() == {}
    # ... and a late campaign answer too
    m2 = Ownership("a", shards=1, lease_ttl=TTL, node_ttl=NODE_TTL, settle=0)
    assert m2.synced(0.0) == [Campaign(0)]
    out = m2.campaigned(0, 3, 0.75 * TTL)
    assert out[0] == Release(0, 3) and not [a for a in out if isinstance(a, Acquired)]


def test_stale_watch_updates_do_not_undo_what_our_answers_said() -> None:
    m = Ownership("a", shards=1, lease_ttl=TTL, node_ttl=NODE_TTL, settle=0)
    m.lease_seen(0, Lease("b", 3, 4), 0.0)  # b held it...
    assert m.synced(0.0) == []
    for t in range(int(TTL)):  # our own heartbeats: the bucket works (rule 2)
        assert m.node_seen("a", float(t)) == []
    assert m.tick(TTL) == [OwnerChanged(0, Lease("b", 3, 4), None), Campaign(0)]
    # ...b released it (delete at rev 5, not yet on our watch) and our create got rev 6
    assert m.campaigned(0, 6, TTL)[0] == Acquired(0, 6)
    assert m.lease_seen(0, Lease("b", 3, 4), TTL + 0.1) == []  # stale renewal of b: ignored
    assert m.lease_seen(0, None, TTL + 0.1) == []  # b's delete: ours is unaffected
    assert m.lease_seen(0, Lease("a", 6, 6), TTL + 0.1) == []  # our own echo
    assert m.held() == {0: 6}
    # handoff: after our release, the echo of our last renewal must not bring us back
    other = next(n for n in (f"n{i}" for i in range(100)) if preferred(0, ["a", n]) == n)
    out = m.node_seen(other, TTL + 0.2)  # settle=0: handed over at once
    assert [a for a in out if isinstance(a, Lost)] == [Lost(0, 6, "handoff")]
    assert m.lease_seen(0, Lease("a", 6, 6), TTL + 0.3) == []
    assert m.owner(0) is None


def test_campaigns_against_a_live_key_are_spaced_not_flooded() -> None:
    m = Ownership("a", shards=1, lease_ttl=TTL, node_ttl=NODE_TTL, settle=0)
    assert m.synced(0.0) == [Campaign(0)]
    m.campaigned(0, None, 0.01)
    sent = [0.0]
    t = 0.05
    while t < 10 * TTL:
        if m.tick(t) == [Campaign(0)]:
            sent.append(t)
            m.campaigned(0, None, t + 0.01)  # the key still exists: create fails
        t = round(t + 0.05, 6)
    gaps = [b - a for a, b in itertools.pairwise(sent)]
    assert len(sent) > 10 and min(gaps) >= TTL / 6 - 1e-9


def test_nodes_come_and_go_and_are_forgotten() -> None:
    m = Ownership("a", shards=8, lease_ttl=TTL, node_ttl=NODE_TTL, settle=SETTLE)
    assert m.live_nodes() == frozenset()
    assert m.node_seen("b", 0.0) == [NodeUp("b")]
    assert m.node_seen("a", 0.0) == []  # our own heartbeat
    m.synced(0.0)
    assert m.live_nodes() == {"a", "b"}

    def liveness(actions: list[Action]) -> list[Action]:
        return [a for a in actions if isinstance(a, (NodeUp, NodeDown))]

    assert liveness(m.node_seen("b", 1.0)) == []
    for t in (1.0, 2.0, 3.0):  # our own heartbeats, each second: the bucket works
        assert liveness(m.node_seen("a", t)) == []
    assert m.next_deadline() == 1.0 + NODE_TTL
    assert liveness(m.tick(1.0 + NODE_TTL - 0.01)) == []
    assert liveness(m.tick(1.0 + NODE_TTL)) == [NodeDown("b")]
    assert m.live_nodes() == {"a"}
    assert liveness(m.node_seen("c", 5.0)) == [NodeUp("c")]
    assert liveness(m.node_gone("c", 5.5)) == [NodeDown("c")]
    assert m.node_gone("c", 5.6) == []
    for i in range(1000):  # nodes that come and go leave nothing behind (G14)
        m.node_seen(f"x{i}", 10.0 + i)
        m.node_gone(f"x{i}", 10.0 + i)
    assert m.live_nodes() == {"a"} and not m._nodes


def test_a_bucket_that_carries_no_heartbeat_declares_nobody_down() -> None:
    """Rule 1: the nodes bucket lost its stream leader (an election of 3-6 s): nobody's
    heartbeat arrives, ours neither. No other node is declared down meanwhile (the chaos run
    `cluster-stream-leader-kill-churn` saw an owner close every routed member), and once
    ours arrive again each other node has a full node TTL to show its own."""
    m = Ownership("a", shards=8, lease_ttl=TTL, node_ttl=NODE_TTL, settle=SETTLE)
    m.node_seen("a", 0.0)
    m.node_seen("b", 0.0)
    m.synced(0.0)
    m.node_seen("a", 1.0)
    m.node_seen("b", 1.0)
    for t in (2.0, 4.0, 6.0, 8.0):  # the bucket is down: no heartbeat of anyone
        out = m.tick(t)
        assert not [a for a in out if isinstance(a, NodeDown)] and m.live_nodes() == {"a", "b"}
        assert m.next_deadline() is None or m.next_deadline() > t  # never a busy loop
    # it is back: ours first; b's comes a little later (it retried its put later)
    assert not [a for a in m.node_seen("a", 9.0) if isinstance(a, NodeDown)]
    assert m.next_deadline() is None or m.next_deadline() >= 9.0 + NODE_TTL / 2
    m.node_seen("a", 10.0)
    assert not [a for a in m.node_seen("b", 10.5) if isinstance(a, NodeDown)]
    assert m.live_nodes() == {"a", "b"}
    # and a node that really died is still found: b is silent while we beat
    for t in (11.0, 12.0, 13.0):
        m.node_seen("a", t)
    assert [a for a in m.tick(10.5 + NODE_TTL) if isinstance(a, NodeDown)] == [NodeDown("b")]


def test_a_lease_is_not_taken_for_expired_while_the_bucket_carries_nothing() -> None:
    """Rule 2, for the same reason as rule 1: during the bucket's election nobody's renewal
    arrives; the edges keep routing to the owner they know (it stops by its own clock, and the
    log fences it) instead of closing every routed connection at once."""
    m = Ownership("a", shards=1, lease_ttl=TTL, node_ttl=NODE_TTL, settle=SETTLE)
    m.lease_seen(0, Lease("b", 3, 4), 0.0)
    m.node_seen("a", 0.0)
    m.synced(0.0)
    for t in (1.0, 3.0, 6.0, 9.0):  # our heartbeats stop after t=0
        assert not [a for a in m.tick(t) if isinstance(a, OwnerChanged)]
    assert m.owner(0) == Lease("b", 3, 4)
    for t in (10.0, 11.0, 12.0, 13.0, 14.0, 15.0):  # the bucket is back; b never renews again
        m.node_seen("a", t)
    assert OwnerChanged(0, Lease("b", 3, 4), None) in m.tick(10.0 + TTL)


def test_next_deadline_is_never_in_the_past_after_handling_it() -> None:
    c = started("a", "b", "c")
    for _ in range(200):
        c.run(c.now + 0.25)
        for name in c.up:
            d = c.m[name].next_deadline()
            assert d is None or d > c.now


def test_terms_strictly_increase_across_owners() -> None:
    c = started("a", "b", "c")
    c.up.discard("b")  # crash
    c.run(c.now + 2 * TTL)
    c.feed("a", c.m["a"].stop(c.now))  # graceful
    c.up.discard("a")
    c.run(c.now + 2 * TTL)
    assert set(c.m["c"].held()) == set(range(16))
    acquired = [a for _, a in c.log if isinstance(a, Acquired)]
    for s in range(16):
        terms = [a.term for a in acquired if a.shard == s]
        assert len(terms) >= 2 or preferred(s, "abc") == "c"
        assert terms == sorted(set(terms))


def test_stop_releases_every_held_shard_and_then_does_nothing() -> None:
    c = started("a", "b")
    held = c.m["a"].held()
    assert held
    out = c.feed("a", c.m["a"].stop(c.now))
    lost = [a for a in out if isinstance(a, Lost)]
    assert {a.shard: a.term for a in lost} == held and {a.why for a in lost} == {"stopping"}
    assert {a.shard for a in out if isinstance(a, Release)} == set(held)
    for a in lost:  # Lost before its Release
        assert out.index(a) < out.index(next(r for r in out if isinstance(r, Release)
                                              and r.shard == a.shard))
    assert c.m["a"].held() == {} and all(c.kv.current(s, c.now) is None or
                                         c.kv.current(s, c.now).node != "a"  # type: ignore[union-attr]
                                         for s in held)
    later = c.m["a"].tick(c.now + 100)
    assert not [a for a in later if isinstance(a, (Campaign, Renew, Acquired))]
    # b takes them as soon as a's node key is deleted (graceful leave), not after a TTL
    c.up.discard("a")
    c.feed("b", c.m["b"].node_gone("a", c.now))
    c.deliver("b")
    assert set(c.m["b"].held()) == set(range(16))


def test_bad_inputs_are_refused() -> None:
    m = Ownership("a", shards=4)
    with pytest.raises(ValueError, match="out of range"):
        m.lease_seen(4, None, 0.0)
    with pytest.raises(ValueError, match="without that operation"):
        m.campaigned(0, 3, 0.0)
    with pytest.raises(ValueError, match="bad lease"):
        Lease("b", 5, 4)
    with pytest.raises(ValueError, match="bad reason"):
        Lost(0, 1, "bored")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Ownership("", shards=4)


def test_the_machine_is_pure() -> None:
    tree = ast.parse(inspect.getsource(ownership))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom)}
    assert imported <= {"__future__", "dataclasses", "typing", "notify"}


# -- property: what a node believes it holds, the KV holds --------------------------------------


@dataclass
class Op:
    node: str
    action: Campaign | Renew | Release
    landed: bool = False
    result: int | None = None
    answered: bool = False  # the machine got an answer (maybe None: a timeout)


#: weighted: the KV and watch steps often, time in small and large jumps (large ones are pauses
#: of everybody not driven meanwhile)
KINDS = ["tick"] * 4 + ["deliver"] * 4 + ["heartbeat"] * 2 + ["land"] * 4 + ["answer"] * 4 + [
    "timeout", "time", "time", "time"]
step_st = st.tuples(st.sampled_from(KINDS), st.integers(0, 2),
                    st.sampled_from([0.05, 0.1, 0.3, 0.5, 1.0, 2.0, 5.0]))
#: each node may crash (stops for good, its leases unreleased) or stop gracefully, once
fate_st = st.tuples(st.sampled_from(["crash", "stop"]), st.integers(0, 400))


@pytest.mark.timeout(300)  # only a failure's shrinking takes long; a pass is ~10 s
@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate, Phase.shrink],
          suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 3), steps=st.lists(step_st, min_size=100, max_size=300),
       fates=st.lists(st.none() | fate_st, min_size=3, max_size=3))
def test_a_node_never_believes_it_holds_what_the_kv_gives_another(
        n: int, steps: list[tuple[str, int, float]],
        fates: list[tuple[str, int] | None]) -> None:
    names = [f"n{i}" for i in range(n)]
    kv = KV()
    m = {x: Ownership(x, shards=4, lease_ttl=TTL, node_ttl=NODE_TTL, settle=SETTLE)
         for x in names}
    cursor = dict.fromkeys(names, 0)
    ops: list[Op] = []
    crashed: set[str] = set()
    acquired: dict[int, list[tuple[str, int]]] = {}
    now = 0.0

    def handle(x: str, actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, (Campaign, Renew, Release)):
                ops.append(Op(x, a))
            elif isinstance(a, Acquired):
                history = acquired.setdefault(a.shard, [])
                assert all(t < a.term for _, t in history), (a, history)  # terms only grow
                history.append((x, a.term))
        for shard, term in m[x].held().items():  # the invariant, after every input
            entry = kv.current(shard, now)
            assert entry is not None and (entry.node, entry.term) == (x, term), (
                x, shard, term, entry, now)

    for x in names:
        for y in names:
            handle(x, m[x].node_seen(y, now))
        handle(x, m[x].synced(now))
    for i, (kind, which, dt) in enumerate(steps):
        for x, fate in zip(names, fates, strict=False):
            if fate is not None and fate[1] == i and x not in crashed:
                if fate[0] == "stop":
                    handle(x, m[x].stop(now))
                else:
                    crashed.add(x)
        if kind == "time":
            now = round(now + dt, 6)
            continue
        x = names[which % n]
        if x in crashed:
            continue
        if kind == "tick":
            handle(x, m[x].tick(now))
        elif kind == "deliver" and cursor[x] < len(kv.events):
            shard, lease = kv.events[cursor[x]]
            cursor[x] += 1
            handle(x, m[x].lease_seen(shard, lease, now))
        elif kind == "heartbeat":
            for y in names:
                if y not in crashed:
                    handle(y, m[y].node_seen(x, now))
        elif kind == "land":  # the oldest of x's operations not yet applied reaches the KV
            op = next((o for o in ops if o.node == x and not o.landed), None)
            if op is not None:
                op.landed = True
                a = op.action
                if isinstance(a, Campaign):
                    op.result = kv.create(a.shard, x, now)
                elif isinstance(a, Renew):
                    op.result = kv.update(a.shard, x, a.term, a.revision, now)
                else:
                    kv.delete(a.shard, a.revision, now)
                    op.answered = True
        elif kind in ("answer", "timeout"):
            op = next((o for o in ops if o.node == x and not o.answered
                       and isinstance(o.action, (Campaign, Renew))
                       and (o.landed or kind == "timeout")), None)
            if op is not None:  # a timeout may leave the operation to land later
                op.answered = True
                rev = op.result if kind == "answer" else None
                a = op.action
                if isinstance(a, Campaign):
                    handle(x, m[x].campaigned(a.shard, rev, now))
                elif isinstance(a, Renew):
                    handle(x, m[x].renewed(a.shard, rev, now))
    # and at most one holder per shard per term, with terms that are KV revisions of creates
    for history in acquired.values():
        assert len({t for _, t in history}) == len(history)
