"""Shard ownership by lease: a sans-I/O state machine (DESIGN §9; research note §2, §4).

Who *should* own a shard is rendezvous hashing over the live nodes (`shards.preferred`); who
*does* is a lease, one KV key per shard in the `notify_shards` bucket. This module decides, from
what the adapter (`leases.py`) tells it and a clock `now` (seconds, the node's own monotonic
clock), which KV operations to try and what the node must do. It reads no clock, does no I/O
and imports no asyncio: every rule below is testable with a fake clock.

Inputs: `synced` (the buckets' initial contents are delivered), `node_seen`/`node_gone`
(heartbeat puts/deletes in `notify_nodes`), `lease_seen` (a watch update of one shard's key;
None = deleted or purged), `campaigned`/`renewed` (answers to the KV operations it asked for),
`tick`, `stop`. Each returns a list of actions, in the order they must be carried out. What is
due by time (renewals, expiries, handoffs after `settle`, campaign retries) is done by `tick`,
which the adapter calls at `next_deadline()`; an event applies what it changes at once: an
update of a shard's key re-evaluates that shard, a change of the live nodes every shard. (Every
node sees every renewal of every shard, hundreds a second: that path must not cost O(shards).)

Rules, and why:

1. Liveness. Another node is live while its heartbeat was seen within `node_ttl` by OUR clock,
   counted only once the bucket demonstrably carries heartbeats past its last one (one of
   ours, half a TTL later; after a gap in ours longer than a TTL, counted from the first of
   ours again), or until its key is deleted (`node_gone`, a graceful leave). A bucket without
   a leader (its stream leader's nats-server died: a 3-6 s election) carries nobody's
   heartbeat; declaring every other node dead then would close every routed member (the
   stream-leader-kill chaos run did), so their clocks stop while ours does. KV `max_age`
   expiry emits no watch event, so a crashed node's key vanishing is never observed: its
   death can only be inferred from time. A node that goes down is forgotten at once (its
   entry is removed; a later heartbeat makes it a new node, whose `settle` starts again), so
   the table holds live nodes only. Self is live once synced.
   Node ids must be unique per process incarnation: a lease naming us that we did not win in
   this incarnation is treated as someone else's.

2. Routing view. `owner(shard)` is the latest lease seen for the shard, forgotten when deleted
   or when it was last seen renewed more than `lease_ttl` ago (again: expiry is silent, so it
   is inferred by our clock, and, as in rule 1, only while our own heartbeats arrive: a
   bucket that carries no renewal of anyone must not make every edge close every connection
   it routed, which then wait for an owner nobody can elect; the owner itself still stops at
   its own expiry, rule 5, and the log's fence holds whatever the view says). Watch updates
   carry the KV revision; one older than what we already know (our own CAS answers can
   overtake the watch) is stale and ignored. `OwnerChanged` is emitted whenever the view
   changes node or term, or appears/disappears; renewals (same term, new revision) are not
   changes.

3. Terms. A lease written by `create` carries no term: its term is the revision of that put;
   renewals write `{"node", "term"}`. Revisions of one bucket only grow, so terms strictly
   increase across owners; the node stamps its term on every log record and frame (the log's
   CAS is the fence, the term orders owners). The adapter parses values into `Lease`s.

4. Campaigns. Once synced and settled (`settle` seconds after `synced`: a node starting
   alongside others must see their heartbeats before it decides it is preferred), the node
   campaigns (`create`) for every shard it is preferred for and that has no lease in its view.
   A create on a key that still exists (our view thinks it expired, the server not yet) just
   fails, so attempts per shard are spaced by at least `lease_ttl/6`: no flooding.

5. Holding. A successful campaign is `Acquired(shard, term)`. Renew (`update` with the last
   revision) every `lease_ttl/4` after the last success. Time is counted from when the request
   was SENT (the server's lease clock starts when the put lands, which is after). If no renew
   has succeeded within `0.75 * lease_ttl` of the last success, `Lost("expired_by_own_clock")`:
   the server may already have expired the lease and let someone else in. This check runs
   FIRST on every input, and `check` runs it for one shard before a frame is taken as its
   owner's (asyncio runs I/O callbacks before a timer in the same loop turn), so a process
   that was paused (GC, SIGSTOP, VM) and wakes up stops serving before it acts on anything
   else (cluster review S7). `0.25 * lease_ttl` is the margin for the two clocks' rates. A
   renew may be retried by the adapter until that same moment (`Renew.until`): a bucket whose
   stream leader died answers nothing during its election (3-6 s), and a holding gives up only
   when its own clock says it must, so an election of up to `0.5 * lease_ttl` is survived in
   any renewal phase, and up to `0.75 * lease_ttl` in the best (cluster review S4: it was 0.4
   when the retries had a window of their own). A renew refused or unanswered is
   `Lost("renew_failed")`; a watch update
   showing another node or term on our shard at a newer revision is `Lost("taken")`. A
   successful answer that arrives after the shard was lost (or after `stop`) is released
   (`Release`), never silently re-adopted: a new holding must be a new term.

6. Rebalancing. A held shard whose preferred node is another live node that has been live for
   at least `settle` seconds is handed over: `Lost("handoff")` then `Release`; the preferred
   node sees the delete and campaigns. Waiting `settle` avoids handing shards to a node that is
   flapping or has not yet finished starting.

6a. Standby nodes (seed 000's active-standby, for comparison and for operators who want one
   node to do all the work): a node started as a standby says so with its heartbeat. Rule 2's
   rendezvous hash ranges over the live nodes that are not standbys, or over every live node
   when all of them are: a standby is an edge and holds no shard while an active node lives,
   takes every shard of the last active node that dies (after the lease TTL, as any
   takeover), and hands them back by rule 6 once an active node has been live `settle` s.

7. Stop. `stop` gives `Lost("stopping")` then `Release` for every held shard; afterwards the
   machine campaigns and renews nothing, and releases whatever a late answer hands it.

8. Bounds (G14). Nodes: live ones only. Per shard: one routing entry (fixed array), at most one
   operation in flight, one holding, one last-attempt time (pruned once it no longer delays a
   campaign). The adapter must answer every `Campaign`/`Renew` (its calls are bounded by
   timeouts; an unanswered call is answered None).

Safety in one line: while this machine reports a shard held, the KV bucket holds this node's
lease for it with the same term (the property test checks this against a KV model); the log's
CAS covers the rest (a paused process acts on nothing until its first input, which starts with
the own-clock check).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from notify.cluster.shards import SHARDS, preferred

LostWhy = Literal["renew_failed", "expired_by_own_clock", "taken", "handoff", "stopping"]
_LOST_WHY = frozenset({"renew_failed", "expired_by_own_clock", "taken", "handoff", "stopping"})


@dataclass(frozen=True, slots=True)
class Lease:
    """What the KV bucket says about one shard."""

    node: str
    #: the revision at which `node` created the lease; constant while it renews
    term: int
    #: the revision of the latest put (each renewal changes it)
    revision: int

    def __post_init__(self) -> None:
        if not self.node or not 0 < self.term <= self.revision:
            raise ValueError(f"bad lease {self!r}")


# -- actions: KV operations for the adapter ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Campaign:
    """kv.create(key, {"node": me}); answer `campaigned(shard, revision | None)`."""

    shard: int


@dataclass(frozen=True, slots=True)
class Renew:
    """kv.update(key, {"node": me, "term": term}, last=revision); answer `renewed(...)`.
    Attempts that fail without an answer may be retried until `until` (this machine's clock:
    when the holding ends by its own clock anyway, rule 5)."""

    shard: int
    revision: int
    term: int
    until: float


@dataclass(frozen=True, slots=True)
class Release:
    """kv.delete(key, last=revision), best effort; no answer."""

    shard: int
    revision: int


# -- actions: what the node must do -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Acquired:
    """This node now owns the shard under `term` (fence the groups, then serve them)."""

    shard: int
    term: int


@dataclass(frozen=True, slots=True)
class Lost:
    """This node must stop serving the shard now."""

    shard: int
    term: int
    why: LostWhy

    def __post_init__(self) -> None:
        if self.why not in _LOST_WHY:
            raise ValueError(f"bad reason {self.why!r}")


@dataclass(frozen=True, slots=True)
class OwnerChanged:
    """The routing view of a shard changed (any shard, ours included)."""

    shard: int
    old: Lease | None
    new: Lease | None


@dataclass(frozen=True, slots=True)
class NodeUp:
    node: str


@dataclass(frozen=True, slots=True)
class NodeDown:
    node: str


Action = Campaign | Renew | Release | Acquired | Lost | OwnerChanged | NodeUp | NodeDown


# -- state ------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Node:
    since: float  # start of the current live period (for `settle`)
    seen: float  # last heartbeat
    standby: bool = False  # rule 6a


@dataclass(slots=True)
class _Hold:
    term: int
    revision: int
    ok: float  # when the last successful create/update was SENT


@dataclass(frozen=True, slots=True)
class _Op:
    kind: Literal["campaign", "renew"]
    sent: float
    term: int = 0  # renew: the term renewed


class Ownership:
    def __init__(self, node: str, *, shards: int = SHARDS, lease_ttl: float = 6.0,
                 node_ttl: float = 3.0, settle: float = 1.0, standby: bool = False) -> None:
        if not node:
            raise ValueError("node id must be non-empty")
        if shards < 1 or lease_ttl <= 0 or node_ttl <= 0 or settle < 0:
            raise ValueError("shards, lease_ttl and node_ttl must be positive, settle >= 0")
        self.node, self.shards = node, shards
        self.lease_ttl, self.node_ttl, self.settle = lease_ttl, node_ttl, settle
        #: this node is a standby (rule 6a)
        self.standby = standby
        self._renew_every = lease_ttl / 4
        self._own_expiry = 0.75 * lease_ttl
        self._retry = lease_ttl / 6
        self._synced_at: float | None = None
        self._settled = False
        self._stopped = False
        self._nodes: dict[str, _Node] = {}  # other live nodes
        # our own heartbeats on the watch (rule 1): the last one, and since when they have been
        # arriving without a gap (None: not seen yet, nobody is declared down)
        self._self_seen: float | None = None
        self._beating_since = 0.0
        # routing view, one slot per shard: the lease, when it was last seen, and the highest
        # revision known for the shard (older watch updates are stale)
        self._view: list[Lease | None] = [None] * shards
        self._seen: list[float] = [0.0] * shards
        self._floor: list[int] = [0] * shards
        self._held: dict[int, _Hold] = {}
        self._inflight: dict[int, _Op] = {}
        self._tried: dict[int, float] = {}  # shard -> last campaign sent
        self._preferred: list[str | None] | None = None  # cache, per live set

    # -- queries ---------------------------------------------------------------------------------

    def owner(self, shard: int) -> Lease | None:
        return self._view[self._check(shard)]

    def held(self) -> dict[int, int]:
        """shard -> term, for the shards this node owns."""
        return {s: h.term for s, h in self._held.items()}

    def term(self, shard: int) -> int | None:
        """The term under which this node owns `shard` (None: it does not)."""
        hold = self._held.get(shard)
        return None if hold is None else hold.term

    def live_nodes(self) -> frozenset[str]:
        live = frozenset(self._nodes)
        return live | {self.node} if self._synced_at is not None else live

    @property
    def settled_at(self) -> float | None:
        """When campaigning may start (None before `synced`)."""
        return None if self._synced_at is None else self._synced_at + self.settle

    @property
    def stopped(self) -> bool:
        return self._stopped

    def next_deadline(self) -> float | None:
        """The earliest time at which `tick` has something to do (None: nothing pending)."""
        times = [t for n in self._nodes.values() if (t := self._down_at(n)) is not None]
        for shard, lease in enumerate(self._view):
            if lease is not None and shard not in self._held:
                t = self._expires_at(shard)
                if t is not None:
                    times.append(t)
        if self._synced_at is not None and not self._stopped:
            if not self._settled:
                times.append(self._synced_at + self.settle)
            for shard, hold in self._held.items():
                times.append(hold.ok + self._own_expiry)
                if shard not in self._inflight:
                    times.append(hold.ok + self._renew_every)
                want = self._preferred_of(shard)
                if want is not None and want != self.node and want in self._nodes:
                    times.append(self._nodes[want].since + self.settle)
            times.extend(at + self._retry for at in self._tried.values())
        return min(times, default=None)

    # -- inputs ----------------------------------------------------------------------------------

    def synced(self, now: float) -> list[Action]:
        out = self._expire_own(now)
        if self._synced_at is None:
            self._synced_at = now
            self._preferred = None
        return self._evaluate(now, out)

    def node_seen(self, node: str, now: float, *, standby: bool = False) -> list[Action]:
        """A heartbeat of `node` (ours too); `standby`: it says it is a standby (rule 6a)."""
        out = self._expire_own(now)
        if node == self.node:
            if self._self_seen is None or now - self._self_seen > self.node_ttl:
                self._beating_since = now  # the bucket works again: others' clocks restart
            self._self_seen = max(self._self_seen or now, now)
            return self._evaluate(now, out)
        entry = self._nodes.get(node)
        if entry is None:
            self._nodes[node] = _Node(since=now, seen=now, standby=standby)
            self._preferred = None
            out.append(NodeUp(node))
            return self._evaluate(now, out)  # who is preferred changed
        entry.seen = max(entry.seen, now)
        if entry.standby != standby:  # (a node restarted with the other role)
            entry.standby = standby
            self._preferred = None
            return self._evaluate(now, out)
        return out

    def node_gone(self, node: str, now: float) -> list[Action]:
        out = self._expire_own(now)
        if self._nodes.pop(node, None) is not None:
            self._preferred = None
            out.append(NodeDown(node))
            return self._evaluate(now, out)
        return out

    def lease_seen(self, shard: int, lease: Lease | None, now: float) -> list[Action]:
        self._check(shard)
        out = self._expire_own(now)
        hold = self._held.get(shard)
        if lease is None:
            # Our own holding is never ended by a delete seen on the watch: the watch may be
            # behind our CAS answers (a delete from before our create), and a real delete of
            # our lease fails our next renew anyway.
            if hold is None:
                self._set_view(shard, None, now, out)
        elif lease.revision < self._floor[shard] or (
                lease.revision == self._floor[shard] and self._view[shard] != lease):
            pass  # stale: we already know a newer state of this key (rule 2)
        elif hold is not None:
            self._floor[shard] = lease.revision
            if lease.node == self.node and lease.term == hold.term:
                self._seen[shard] = now  # the echo of our own put
            else:
                del self._held[shard]
                out.append(Lost(shard, hold.term, "taken"))
                self._set_view(shard, lease, now, out)
        else:
            self._floor[shard] = lease.revision
            self._set_view(shard, lease, now, out)
        return self._campaign(shard, now, out)

    def campaigned(self, shard: int, revision: int | None, now: float) -> list[Action]:
        op = self._answer(shard, "campaign")
        out = self._expire_own(now)
        if revision is not None:
            self._floor[shard] = max(self._floor[shard], revision)
            if self._stopped or now >= op.sent + self._own_expiry or shard in self._held:
                out.append(Release(shard, revision))  # too late to serve under it (rule 5)
            else:
                self._held[shard] = _Hold(term=revision, revision=revision, ok=op.sent)
                out.append(Acquired(shard, revision))
                self._set_view(shard, Lease(self.node, revision, revision), now, out)
        return self._campaign(shard, now, out)

    def renewed(self, shard: int, revision: int | None, now: float) -> list[Action]:
        op = self._answer(shard, "renew")
        out = self._expire_own(now)
        hold = self._held.get(shard)
        if revision is not None:
            self._floor[shard] = max(self._floor[shard], revision)
        if hold is None or hold.term != op.term:
            if revision is not None:  # lost meanwhile (or stopped): give the lease back
                out.append(Release(shard, revision))
        elif revision is None:
            del self._held[shard]
            out.append(Lost(shard, hold.term, "renew_failed"))
            self._set_view(shard, None, now, out)
        else:
            hold.revision, hold.ok = revision, op.sent
            self._set_view(shard, Lease(self.node, hold.term, revision), now, out)
        return self._campaign(shard, now, out)

    def tick(self, now: float) -> list[Action]:
        return self._evaluate(now, self._expire_own(now))

    def check(self, shard: int, now: float) -> list[Action]:
        """Rule 5 before a frame is taken as `shard`'s owner's: nothing while the holding is
        current by our clock (O(1)), else the `Lost`s of every holding our clock has ended.
        A woken process may run I/O callbacks before the timer that would `tick` (S7)."""
        hold = self._held.get(self._check(shard))
        if hold is None or now < hold.ok + self._own_expiry:
            return []
        return self._expire_own(now)

    def stop(self, now: float) -> list[Action]:
        out = self._expire_own(now)
        for shard, hold in sorted(self._held.items()):
            out.append(Lost(shard, hold.term, "stopping"))
            out.append(Release(shard, hold.revision))
            self._set_view(shard, None, now, out)
        self._held.clear()
        self._tried.clear()
        self._stopped = True
        return self._evaluate(now, out)

    # -- rules -----------------------------------------------------------------------------------

    def _down_at(self, entry: _Node) -> float | None:
        """When a node is down if no heartbeat of it comes (rule 1); None while no heartbeat
        of our own came well after its last one (half a TTL): the bucket may carry none."""
        if self._self_seen is None or self._self_seen <= entry.seen + self.node_ttl / 2:
            return None
        return max(entry.seen, self._beating_since) + self.node_ttl

    def _expires_at(self, shard: int) -> float | None:
        """When another node's lease is gone if no renewal of it is seen (rule 2, with the
        same proviso as a node's heartbeat)."""
        seen = self._seen[shard]
        if self._self_seen is None or self._self_seen <= seen + self.lease_ttl / 2:
            return None
        return max(seen, self._beating_since) + self.lease_ttl

    def _expire_own(self, now: float) -> list[Action]:
        """Rule 5: before anything else, drop what our own clock says may have expired."""
        out: list[Action] = []
        expired = [s for s, h in sorted(self._held.items()) if now >= h.ok + self._own_expiry]
        for shard in expired:
            out.append(Lost(shard, self._held.pop(shard).term, "expired_by_own_clock"))
        for shard in expired:
            self._set_view(shard, None, now, out)
        return out

    def _evaluate(self, now: float, out: list[Action]) -> list[Action]:
        for node, entry in list(self._nodes.items()):  # rule 1
            down_at = self._down_at(entry)
            if down_at is not None and now >= down_at:
                del self._nodes[node]
                self._preferred = None
                out.append(NodeDown(node))
        for shard, lease in enumerate(self._view):  # rule 2: silent expiry
            if (lease is not None and shard not in self._held
                    and (expires := self._expires_at(shard)) is not None and now >= expires):
                self._set_view(shard, None, now, out)
        for shard, at in list(self._tried.items()):
            if now >= at + self._retry:
                del self._tried[shard]
        if self._stopped or self._synced_at is None:
            return out
        for shard, hold in sorted(self._held.items()):  # rule 5: renew
            if shard not in self._inflight and now >= hold.ok + self._renew_every:
                self._inflight[shard] = _Op("renew", now, hold.term)
                out.append(Renew(shard, hold.revision, hold.term, hold.ok + self._own_expiry))
        if not self._settled:
            if now < self._synced_at + self.settle:
                return out
            self._settled = True
        for shard, hold in sorted(self._held.items()):  # rule 6: hand over
            want = self._preferred_of(shard)
            if (want is not None and want != self.node and want in self._nodes
                    and now >= self._nodes[want].since + self.settle):
                del self._held[shard]
                out.append(Lost(shard, hold.term, "handoff"))
                out.append(Release(shard, hold.revision))
                self._set_view(shard, None, now, out)
        for shard in range(self.shards):  # rule 4: campaign
            self._campaign(shard, now, out)
        return out

    def _campaign(self, shard: int, now: float, out: list[Action]) -> list[Action]:
        """Rule 4 for one shard (all an update of that shard's key can change)."""
        if (self._settled and not self._stopped and self._view[shard] is None
                and shard not in self._held and shard not in self._inflight
                and shard not in self._tried and self._preferred_of(shard) == self.node):
            self._inflight[shard] = _Op("campaign", now)
            self._tried[shard] = now
            out.append(Campaign(shard))
        return out

    # -- helpers ---------------------------------------------------------------------------------

    def _set_view(self, shard: int, lease: Lease | None, now: float,
                  out: list[Action]) -> None:
        old = self._view[shard]
        self._view[shard], self._seen[shard] = lease, now
        if (old is None) != (lease is None) or (
                old is not None and lease is not None
                and (old.node, old.term) != (lease.node, lease.term)):
            out.append(OwnerChanged(shard, old, lease))

    def _preferred_of(self, shard: int) -> str | None:
        if self._preferred is None:
            live = self.live_nodes()
            active = frozenset(n for n in live if not (
                self.standby if n == self.node else self._nodes[n].standby))
            self._preferred = [preferred(s, active or live) for s in range(self.shards)]
        return self._preferred[shard]

    def _answer(self, shard: int, kind: Literal["campaign", "renew"]) -> _Op:
        self._check(shard)
        op = self._inflight.get(shard)
        if op is None or op.kind != kind:
            raise ValueError(f"{kind} answer for shard {shard} without that operation in flight")
        del self._inflight[shard]
        return op

    def _check(self, shard: int) -> int:
        if not 0 <= shard < self.shards:
            raise ValueError(f"shard {shard} out of range 0..{self.shards - 1}")
        return shard
