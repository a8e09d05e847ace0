"""A simulated cluster, in the style of tests/unit/sim.py (trio's fake network, seeded).

N nodes, each one incarnation of a real `Hub` run by the real `Driver` (notify/runtime), with
its own ports, and each an edge whose routing is the real sans-I/O `EdgeRouter`
(notify/cluster/routing.py) fed by a seeded owner table (the lease machine's `Acquired`, `Lost`
and `OwnerChanged`, in the order `ownership.py` emits them). Clients are the real SDK protocol
(`ClientProtocol`, as in sim.py), each connected to one edge; their group frames go where the
router says: the edge's own driver, or over a FIFO link to the owner, which knows the connection
as a remote one (`Driver.opened_remote`, then `Driver.frame`, `Driver.closed`); the owner's frames
for it come back over the link to the edge, which hands them on only while the connection is
opened at that owner (node.py's rule).

One log for all (`MemoryLog`) that fences: the last load of a group (a node's fetch) is the
only one whose writes to it are accepted; the others, another node's or an earlier load's of the
same node, are answered `Fenced`, and their driver drops the group. A seeded `random.Random`
decides every step and injects the cluster's faults, besides sim.py's client faults (drops,
resumes, new incarnations, joins, leaves, pauses):

- **Owner changes**: a shard moves to another node, or to nobody for a while (frames wait at the
  edges, and their clients are told to reconnect after `route_timeout`). The old owner drops
  the shard's groups at once, or, now and then, only later (a paused owner): meanwhile it still
  serves them, and the log's fence is what stops it.
- **Node kills**: the node's hub, driver and router vanish, with its links; its clients
  reconnect elsewhere, the owners close its remote connections (`NodeDown`), its shards move.
  A write it had in flight may still land in the log, unanswered.
- **Link losses**: what is in flight from one node to another is lost; the edge closes the
  connections opened at that owner (a gap, or a give-up), and they resume.
- **Lost write answers** (issue 32): the log stores a write, or not, and its answer is lost; it
  is resolved later as JetStreamLog resolves it (notify/storage/jetstream.py, "Ambiguous
  answers"): stored and still the group's last record, a success; not stored and the fence
  still the writer's, sent again and stored (a success) or, for an append, a plain refusal;
  under another writer's fence, `Fenced`; now and then unresolved, `Fenced` (the driver drops
  the group, its next load rebuilds it from the log, its members resume). Now and then what
  lost the answer also costs the writer its shard.
- **Lost owner -> edge batches** (cluster review S1): one batch (or beat) is lost and nobody
  closes anything; the edge notices at the owner's next batch (`DownlinkGaps`, numbered per
  link as `Downlinks` does) or at the link's beat (`DownlinkBeats`, on the node's tick), and
  does what node.py does: closes the connections opened at that owner. The quiescent phase
  may end with a *quiet tail*: one last message whose batch to one edge is lost with nothing
  after it, so only a beat can recover it (`beats=False` is the negative control).
- **Members moving between edges** (S11): a client drops and resumes at another edge with its
  session token; a shard goes back to the node that held it before (a paused owner taking it
  back). The hub is the real one, with a window (`SimHub`) for the S11 check.

The clients (the SDK protocol, the application, the client faults and the checks of what clients
are told) are tests/unit/sim_clients.py's `ClientSim`, shared with sim.py; this file is the
cluster around them.

Checked: G1-G6 by sim_clients.py's `Observer` at every application event, every frame that leaves an
owner against what the log holds (durable before sent: `deliver`, `published`,
`view_install`, `abort`), every stored view the next version, outcomes of one atomic never
contradicting each other across owners, a refused publish never stored (nor delivered), a
session never retired as an older incarnation by a hello of the same client session (S11),
and after a quiescent phase liveness (every group stable, every member in the view its client
has, and every member has every stored message it is owed since its join). A failure says
`seed=...`: `run(seed, steps)` replays it exactly. A range of seeds:
`PYTHONPATH=.:tests/unit python tests/unit/sim_cluster.py FIRST LAST STEPS`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson
from sim_clients import ClientSim, Conn, SimMember, _pick

from notify.cluster.links import DownlinkBeats, DownlinkGaps
from notify.cluster.ownership import Lease
from notify.cluster.routing import (
    CloseConns,
    ClosedAt,
    Dispatch,
    EdgeRouter,
    Forward,
    RouteAction,
)
from notify.core import Append, CoreConfig, Hub, Limits, LogEvent, Timeouts, Write
from notify.core.actions import Error
from notify.core.auth import Identity
from notify.core.events import (
    Ack,
    CheckpointChunk,
    FlushOk,
    Hello,
    Join,
    Leave,
    Publish,
    StateChunk,
)
from notify.core.group import Group
from notify.core.hub import Session
from notify.core.membership import Reason
from notify.core.users import split_member
from notify.runtime import CheckpointAction, Done, Driver, Fetched, Paged
from notify.runtime.driver import MOVED
from notify.runtime.frames import unbatch
from notify.runtime.ports import Fenced
from notify.storage.memory import MemoryLog
from notify.wire import parse

GROUP_FRAMES = (Join, Publish, Ack, FlushOk, Leave, StateChunk, CheckpointChunk)
EPOCH = 7


@dataclass(frozen=True)
class ClusterSimConfig:
    nodes: int = 3
    members: int = 5
    #: one shard per group (the owner table is per shard; shards.py's hash is not needed here)
    groups: tuple[str, ...] = ("g1", "g2", "g3")
    timeouts: Timeouts = field(default_factory=lambda: Timeouts(
        suspect_timeout=3.0, flush_timeout=5.0, ack_timeout=10.0, install_hold=0.0))
    route_timeout: float = 4.0
    p_fault: float = 0.05
    p_publish: float = 0.15
    p_non_member_publish: float = 0.02
    outsiders: int = 1
    p_accept_any: float = 0.5
    p_write_fail: float = 0.02
    #: cluster faults, as weights among the faults
    w_owner_change: float = 1.5
    w_kill: float = 0.3
    w_link_loss: float = 0.6
    #: how often a deposed owner notices only later (it goes on serving until fenced)
    p_late_notice: float = 0.3
    #: a write whose answer is lost (stored or not), resolved later as JetStreamLog does
    p_lost_answer: float = 0.03
    w_tail_loss: float = 0.6
    w_owner_back: float = 0.5
    w_hop: float = 1.0
    #: the owners' DownlinkBeats (False: a negative control, a lost tail goes unnoticed)
    beats: bool = True
    #: how often the quiescent phase ends with a last message whose batch to one edge is lost
    p_quiet_tail: float = 0.5
    #: the groups' in-memory window (a small one: members read the rest from the log)
    window: int = Limits().window_messages


@dataclass(eq=False)
class ClientConn(Conn):
    node: SimNode | None = None
    #: the resume token its hello presented
    presented: str | None = None


# -- the shared, fencing log ----------------------------------------------------------------------


class FencedLog:
    """The one log: the load of a group that came last is the only writer. Each load fences
    the group anew (as JetStream's fence record does, notify/storage/jetstream.py), so a write
    issued before it is refused even when the same node loaded the group again (it dropped the
    group with that write in flight, then took its shard back)."""

    def __init__(self) -> None:
        self.log = MemoryLog()
        #: group -> (the node, its load) that fenced it last
        self.fence: dict[str, tuple[SimNode, int]] = {}
        self.loads = 0

    def load(self, node: SimNode, group: str) -> tuple[SimNode, int]:
        self.loads += 1
        fence = self.fence[group] = (node, self.loads)
        return fence


class SimHub(Hub):
    """The real hub, with one window for the checks: a session retired as an older incarnation
    of its member (a clash, DESIGN §4) by a hello that presented a session token must belong to
    another incarnation of the client than that hello (S11: a client that only moved between
    edges, or whose owner missed its moves, is never retired)."""

    def __init__(self, sim: ClusterSimulation, name: str, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.sim, self.name = sim, name
        #: the client incarnation (member, number) of the hello being handled
        self._hello_inc: tuple[str, int] | None = None

    def hello(self, conn: int, hello: Hello, now: float, identity: Identity | None, *,
              token: str | None = None, born: float | None = None) -> list[Any]:
        inc = self.sim.conn_inc.get(conn)
        # (a hello that presents no session cannot be told from a new incarnation's: a client
        # that lost its first connection before its welcome came)
        self._hello_inc = inc if hello.resume_session is not None else None
        try:
            out = super().hello(conn, hello, now, identity, token=token, born=born)
        finally:
            self._hello_inc = None
        s = self._conns.get(conn)
        if s is not None and inc is not None:
            self.sim.token_inc.setdefault(s.token, inc)
        return out

    def _retire(self, old: Session, reason: Reason, now: float) -> list[Any]:
        if reason is Reason.NEW_INCARNATION:
            sim = self.sim
            sim.count("retire.new_incarnation")
            inc = self._hello_inc
            if inc is not None and sim.token_inc.get(old.token) == inc:
                sim.obs.fail(f"S11: {self.name} retired {old.member}'s session {old.token} "
                             f"(groups {sorted(old.groups)}) as an older incarnation, on a "
                             f"hello of the same client incarnation {inc}")
        return super()._retire(old, reason, now)


# -- one node ------------------------------------------------------------------------------------


class SimNode:
    """One incarnation of a node: hub, driver, router, and its ports."""

    def __init__(self, sim: ClusterSimulation, name: str, inc: int) -> None:
        self.sim, self.name, self.inc = sim, name, inc
        self.dead = False
        tokens = iter(range(1, 1 << 30))
        self.hub = SimHub(sim, f"{name}#{inc}",
                          CoreConfig(timeouts=sim.cfg.timeouts, shared_log=True,
                                     limits=Limits(window_messages=sim.cfg.window)),
                          new_token=lambda: f"{name}.{inc}.s{next(tokens)}", epoch=EPOCH)
        self.driver = Driver(self.hub, transport=self, store=self, observer=self,
                             clock=lambda: sim.now)
        self.router = EdgeRouter(name, route_timeout=sim.cfg.route_timeout)
        #: owner side: our number -> (edge node, edge conn); and back
        self.remote: dict[int, tuple[str, int]] = {}
        self.vconns: dict[tuple[str, int], int] = {}
        #: group -> the fence of this node's load of it (its writes carry it)
        self.loaded: dict[str, tuple[SimNode, int]] = {}
        #: ownership notices this node has not acted on yet (a paused owner)
        self.late: list[tuple[int, Lease | None, Lease | None]] = []
        #: owner side of the links to edges (links.py's `Downlinks`): the last batch number
        #: sent to each edge, and when to beat; edge side: the gaps in owners' batches
        self.down_seq: dict[str, int] = {}
        self.beats = DownlinkBeats()
        self.gaps = DownlinkGaps()

    def __repr__(self) -> str:
        return f"{self.name}#{self.inc}"

    # -- Transport ----------------------------------------------------------------------------

    def push(self, conn: int, data: bytes, *, bounded: bool = True, frames: int = 1) -> None:
        if self.dead:
            return
        out = list(unbatch(orjson.loads(data)))
        for f in out:
            self.sim.check_durable(f, self.sim.conn_member.get(conn), f"{self} ")
        key = self.remote.get(conn)
        if key is not None:
            self.downlink(key[0], ("data", key[1], out))
            return
        c = self.sim.conns.get(conn)
        if c is not None and c.node is self and c.alive and c.server_open:
            c.to_client.extend(out)

    def close(self, conn: int, code: int, reason: str, *, drain: bool) -> None:
        if self.dead:
            return
        key = self.remote.get(conn)
        if key is not None:
            self.downlink(key[0], ("close", key[1], code, reason))
            return
        c = self.sim.conns.get(conn)
        if c is not None and c.node is self and c.server_open:
            c.server_open = False  # the driver tells the hub
            self.sim.client_lost(c)
            self.apply(self.router.conn_closed(conn, code, reason))

    def downlink(self, edge: str, entry: tuple[Any, ...]) -> None:
        """One batch to `edge` (`Downlinks._publish`): numbered per link, and the link beats
        after it while quiet."""
        seq = self.down_seq[edge] = self.down_seq.get(edge, 0) + 1
        if self.sim.cfg.beats:
            self.beats.sent(edge, seq, self.sim.now)
        self.sim.link(self.name, edge).append((*entry, seq))

    def beat(self) -> None:
        """`Downlinks.beat`, on the node's tick: the last batch number, to a quiet link."""
        for edge, last in self.beats.due(self.sim.now):
            self.sim.link(self.name, edge).append(("beat", last))
            self.sim.count("beat")

    def link_gap(self, owner: str, seen: str) -> None:
        """`ClusterNode._link_gap`: frames from `owner` were lost; its connections resume."""
        self.sim.count(f"gap.{seen}")
        self.apply(self.router.link_lost(owner))

    # -- Store --------------------------------------------------------------------------------

    def write(self, write: Write, done: Done) -> None:
        if self.dead:
            return
        g = self.hub.groups.get(write.group)
        view = g.view.version if g is not None else -1
        self.sim.writes.append((self, write, done, view, self.loaded.get(write.group)))

    def fetch(self, group: str, answer: Fetched) -> None:
        if self.dead:
            return
        self.loaded[group] = self.sim.log.load(self, group)
        sg = self.sim.log.log.load_group(group, self.hub.config.limits.window_messages)
        if sg is not None:
            self.sim.count("group.fetched")
        answer(sg, None)

    def read(self, group: str, after: int, limit: int, max_bytes: int, answer: Paged) -> None:
        if self.dead:
            return
        self.sim.count("history.page")
        answer(self.sim.log.log.read_page(group, after, limit, max_bytes), None)

    def forget(self, group: str) -> None:
        pass

    # -- Observer -----------------------------------------------------------------------------

    def event(self, e: LogEvent) -> None:
        pass

    def checkpoint(self, a: CheckpointAction) -> None:
        self.sim.obs.fail(f"{self}: no checkpoint was asked for: {a}")

    def halt(self, reason: str) -> None:
        self.sim.obs.fail(f"{self} halted: {reason}")

    # -- the host: what node.py and the server do around the router --------------------------

    def apply(self, actions: list[RouteAction]) -> None:
        sim = self.sim
        for a in actions:
            if self.dead:
                return
            if isinstance(a, Dispatch):
                self.dispatch(a.conn, a.raw, remote=False)
            elif isinstance(a, Forward):
                up = sim.link(self.name, a.owner)
                if a.open_first:
                    c = sim.conns[a.conn]
                    s = self.hub.session_of(a.conn)
                    up.append(("open", a.conn, s.member if s else None,
                               s.token if s else None, c.presented, s.born if s else None))
                up.append(("frame", a.conn, a.raw))
                sim.count("routed")
            elif isinstance(a, CloseConns):
                sim.count(f"router.close.{a.reason[:12]}")
                for conn in a.conns:
                    self.close_local(conn, a.reason)
            elif isinstance(a, ClosedAt):
                sim.link(self.name, a.owner).append(("closed", a.conn, a.code, a.reason))

    def close_local(self, conn: int, reason: str) -> None:
        """The edge closes a connection it holds (the server's `close` of a local socket)."""
        c = self.sim.conns.get(conn)
        if c is None or c.node is not self or not c.server_open:
            return
        self.sim.client_lost(c)
        c.server_open = False
        self.driver.closed(conn, 4003, reason)
        self.apply(self.router.conn_closed(conn, 4003, reason))

    def shard_of(self, frame: Any) -> int:
        return self.sim.cfg.groups.index(frame.group)

    def dispatch(self, conn: int, raw: bytes, *, remote: bool) -> None:
        """`NotifyServer.dispatch_raw`: a frame for this node's driver, unless its group is not
        this node's (any more): a routed one's edge is told, a held one is routed again."""
        frame = parse(raw)
        if isinstance(frame, Error):
            self.sim.obs.fail(f"{self}: cannot parse {raw!r}")
            return
        assert isinstance(frame, GROUP_FRAMES)
        shard = self.shard_of(frame)
        if not self.router.holds(shard):
            if remote:
                key = self.remote.get(conn)
                if key is not None:
                    self.sim.count("owner.not_owner")
                    self.downlink(key[0], ("close", key[1], 4003, MOVED))
            else:
                self.apply(self.router.frame(conn, shard, raw, self.sim.now))
            return
        self.driver.frame(conn, frame)

    def client_frame(self, c: ClientConn, f: dict[str, Any]) -> None:
        raw = orjson.dumps(f)
        frame = parse(raw)
        if isinstance(frame, Error):
            self.sim.obs.fail(f"the client sent a frame the server cannot parse: {f} ({frame})")
            return
        if isinstance(frame, GROUP_FRAMES):
            actions = self.router.frame(c.id, self.shard_of(frame), raw, self.sim.now)
            if len(actions) == 1 and isinstance(actions[0], Dispatch):
                self.driver.frame(c.id, frame)
            else:
                self.apply(actions)
            return
        self.driver.frame(c.id, frame)

    def link_in(self, src: str, entry: tuple[Any, ...]) -> None:
        """An entry from node `src`'s link (edge -> owner, or owner -> edge)."""
        kind = entry[0]
        sim = self.sim
        if kind == "open":
            _, conn, member, token, presented, born = entry
            if (src, conn) in self.vconns:
                return
            vid = sim.new_conn_id()
            sim.conn_member[vid] = member
            if conn in sim.conn_inc:
                sim.conn_inc[vid] = sim.conn_inc[conn]
            self.vconns[(src, conn)], self.remote[vid] = vid, (src, conn)
            user, instance = split_member(member)
            self.driver.opened_remote(vid, Hello(1, user, presented, instance), None, token,
                                      born)
        elif kind in ("frame", "closed"):
            vid = self.vconns.get((src, entry[1]))
            if vid is None:
                if kind == "frame":  # not a connection we know (it moved, or we restarted)
                    self.downlink(src, ("close", entry[1], 4003, MOVED))
                return
            if kind == "frame":
                self.dispatch(vid, entry[2], remote=True)
            else:
                del self.vconns[(src, entry[1])], self.remote[vid]
                self.driver.closed(vid, entry[2], entry[3])
        elif kind == "beat":
            if not self.gaps.beat(src, str(sim.nodes[src].inc), entry[1]):
                self.link_gap(src, "beat")
        elif kind == "data":
            _, conn, frames, seq = entry
            if not self.gaps.check(src, str(sim.nodes[src].inc), seq):
                self.link_gap(src, "batch")
            c = sim.conns.get(conn)
            if (self.router.is_opened(conn, src) and c is not None and c.node is self
                    and c.alive and c.server_open):
                c.to_client.extend(frames)
        else:
            assert kind == "close"
            if not self.gaps.check(src, str(sim.nodes[src].inc), entry[4]):
                self.link_gap(src, "batch")
            if self.router.is_opened(conn := entry[1], src):
                self.close_local(conn, entry[3])

    def node_down(self, node: str) -> None:
        """`ClusterNode._node_down`: an edge died; its connections are closed here now."""
        for (edge, conn), vid in sorted(self.vconns.items()):
            if edge == node:
                del self.vconns[(edge, conn)], self.remote[vid]
                self.driver.closed(vid, 1006, "edge down")
        self.down_seq.pop(node, None)  # `Downlinks.forget`: a new link to its next incarnation
        self.beats.forget(node)
        self.gaps.forget(node)

    def remember_outcomes(self) -> None:
        """What this node's copies of its groups decided, before they go (dropped, fenced,
        killed), read as `ClusterSimulation.outcome` reads a live copy: the outcomes in the
        window, and those of the stored atomic messages that left it (`Topic.decided`; a copy
        answers a resent ACK, or a resume's held offsets, with that). An abort counts once
        stored (an unstored one dies with its owner)."""
        sim = self.sim
        for name, g in self.hub.groups.items():
            atomic = (off for (grp, off), info in sim.obs.msgs.items()
                      if grp == name and info.atomic)
            for off in sorted({*g.topic._outcomes, *atomic}):
                oc = copy_outcome(g, off)
                if oc is not None and (oc or (name, off) in sim.stored_aborts):
                    sim.note_outcome(name, off, oc)


def copy_outcome(g: Group, offset: int) -> bool | None:
    """The outcome of the atomic at `offset` as one copy of its group has it: in its window, or,
    once it left the window, decided (`Topic.decided`, issue 30). None: undecided, or unknown."""
    oc = g.topic.outcome(offset)
    if oc is None and offset <= g.topic.head:
        oc = g.topic.decided(offset)
    return oc


# -- the simulation ---------------------------------------------------------------------------


class ClusterSimulation(ClientSim):
    """The nodes, the links between them, the owner table and the log; through `ClientSim`, the
    clients at the edges."""

    cfg: ClusterSimConfig
    conns: dict[int, ClientConn]  # type: ignore[assignment]

    def __init__(self, seed: int, cfg: ClusterSimConfig | None = None) -> None:
        super().__init__(seed, cfg or ClusterSimConfig())
        self.names = [f"n{i}" for i in range(self.cfg.nodes)]
        self.incs = dict.fromkeys(self.names, 0)
        self.nodes = {n: SimNode(self, n, 0) for n in self.names}
        #: (src, dst) -> entries in flight, FIFO
        self.links: dict[tuple[str, str], deque[tuple[Any, ...]]] = {}
        self.writes: deque[tuple[SimNode, Write, Done, int, tuple[SimNode, int] | None]] = \
            deque()
        self.log = FencedLog()
        #: shard -> its lease (the truth the lease machine would see); terms only grow
        self.owners: dict[int, Lease | None] = {}
        self.term = 0
        self.outcomes: dict[tuple[str, int], bool] = {}
        #: conn (local or remote) -> its member, for checking `published`
        self.conn_member: dict[int, str] = {}
        #: writes whose answer was lost, waiting to be resolved against the log (as
        #: JetStreamLog does): (node, write, done, view, fence, stored)
        self.unclear: deque[tuple[SimNode, Write, Done, int, tuple[SimNode, int] | None,
                                  bool]] = deque()
        #: the client's sessions (S11): member -> the number of its session (a new one at
        #: every hello that presents none: a new incarnation, or a client that never read its
        #: welcome), conn (local or remote) -> (member, number), session token -> the same
        self.incarnation: dict[str, int] = {}
        self.conn_inc: dict[int, tuple[str, int]] = {}
        self.token_inc: dict[str, tuple[str, int]] = {}
        #: shard -> the node that held it before its current owner (to give it back)
        self.prev_owner: dict[int, str] = {}
        #: the edge the next connection opens at (a member hopping), else the rng's
        self.next_edge: str | None = None
        #: the quiescent phase: no more faults
        self.calm = False

    def link(self, src: str, dst: str) -> deque[tuple[Any, ...]]:
        return self.links.setdefault((src, dst), deque())

    # -- outcomes and durability --------------------------------------------------------------

    def note_outcome(self, group: str, offset: int, oc: bool) -> None:
        prior = self.outcomes.setdefault((group, offset), oc)
        if prior != oc:
            self.obs.fail(f"G5: atomic {group}@{offset} decided {prior} and then {oc}")

    def outcome(self, group: str, offset: int) -> bool | None:
        for node in self.nodes.values():
            g = node.hub.groups.get(group)
            oc = copy_outcome(g, offset) if g is not None else None
            if oc is not None:
                if oc or (group, offset) in self.stored_aborts:
                    self.note_outcome(group, offset, oc)
                return oc
        oc = self.outcomes.get((group, offset))
        if oc is None and (group, offset) in self.stored_aborts:
            return False
        return oc

    def store(self) -> None:
        """The log takes the oldest write: a fenced writer is refused, appends fail now and
        then, a dead node's write lands (if its fence holds) but nobody hears of it."""
        node, w, done, view, fence = self.writes.popleft()
        if fence is None or self.log.fence.get(w.group) != fence:
            self.count("write.fenced")
            if not node.dead:
                node.remember_outcomes()
                done(Fenced(f"{w.group} is fenced by another node"))
            return
        if isinstance(w, Append) and self.rng.random() < self.cfg.p_write_fail:
            self.count("write.failed")
            if not node.dead:
                done("injected: disk I/O error")
            return
        if self.rng.random() < self.cfg.p_lost_answer:  # stored or not, nobody hears yet
            stored = self.rng.random() < 0.5
            if stored:
                self.keep(node, w, view)
            self.count(f"write.answer_lost.{'stored' if stored else 'not_stored'}")
            self.unclear.append((node, w, done, view, fence, stored))
            if not self.calm and self.rng.random() < 0.3:
                # what lost the answer cost the writer its lease too
                self.count("write.answer_lost.shard_moved")
                self.set_owner(self.cfg.groups.index(w.group),
                               self.rng.choice([n for n in self.names if n != node.name]))
            return
        self.keep(node, w, view)
        if node.dead:
            self.count("write.landed_dead")
            return
        done(None)

    def keep(self, node: SimNode, w: Write, view: int) -> None:
        """The log stores `w`."""
        self.log.log.write(w, lambda error: None)
        self.stored(w, view, f"{node} ")  # G1 across owners rests on it (and on the fence)
        if not isinstance(w, Append):
            for o in w.aborted:
                self.note_outcome(w.group, o, False)

    def resolve(self) -> None:
        """The oldest write whose answer was lost is resolved against the log, as JetStreamLog
        does (its module docstring, "Ambiguous answers"): by then another writer may have
        fenced the group; or the log cannot say in time (`UNRESOLVED`).

        - stored, and still the group's last record: a success; stored, and another writer
          appended after it: `Fenced` (the new owner delivers it);
        - not stored, and the fence still ours: sent again, stored now (a success), or, for
          an append, resolved as not stored (a plain refusal: the core retracts it and refuses
          its publishers; a refused view would halt the node, and JetStreamLog never refuses
          one after an unclear answer); not stored and fenced: `Fenced`;
        - either way, now and then: unresolved, `Fenced` (the driver drops the group and its
          next load rebuilds it from the log, with the write or without it)."""
        node, w, done, view, fence, stored = self.unclear.popleft()
        if node.dead:
            return
        ours = fence is not None and self.log.fence.get(w.group) == fence
        r = self.rng.random()
        if r < 0.3:
            how = "unresolved"
        elif not ours:
            how = "fenced"
        elif stored:
            how = "stored"
        elif isinstance(w, Append) and r < 0.65:
            how = "refused"
        else:
            how = "resent"
        self.count(f"write.resolved.{how}")
        if how in ("unresolved", "fenced"):
            node.remember_outcomes()
            done(Fenced(f"{w.group}: {how} (the answer was lost)"))
        elif how == "refused":
            done("not stored (the answer was lost; the log does not have it)")
        else:
            if how == "resent":
                self.keep(node, w, view)
            done(None)

    # -- ownership ------------------------------------------------------------------------------

    def set_owner(self, shard: int, new_node: str | None) -> None:
        """The lease of `shard` moves to `new_node` (None: nobody holds it for a while)."""
        for n in self.nodes.values():  # a node acts on older notices first
            self.notice(n)
        old = self.owners.get(shard)
        if old is not None and old.node != new_node:
            self.prev_owner[shard] = old.node
        new: Lease | None = None
        if new_node is not None:
            self.term += 1
            new = Lease(new_node, self.term, self.term)
        self.owners[shard] = new
        self.count("owner_change" if new is not None else "owner_change.none")
        for n in list(self.nodes.values()):
            if n.dead:
                continue
            if old is not None and old.node == n.name:
                if (new is None or new.node != n.name) and \
                        self.rng.random() < self.cfg.p_late_notice:
                    n.late.append((shard, old, new))  # paused: it serves on until fenced
                    self.count("owner.late_notice")
                    continue
                self.lose(n, shard)
            if new is not None and new.node == n.name:
                n.apply(n.router.acquired(shard))
            n.apply(n.router.owner_changed(shard, old, new))

    def lose(self, n: SimNode, shard: int) -> None:
        """`ClusterNode._lost`: the router stops dispatching, the driver drops the groups."""
        n.apply(n.router.lost(shard))
        groups = [g for g in n.driver.group_names() if self.cfg.groups.index(g) == shard]
        n.remember_outcomes()
        n.driver.drop_groups(groups, MOVED)

    def notice(self, n: SimNode) -> None:
        """A paused owner wakes up and acts on what it missed."""
        late, n.late = n.late, []
        for shard, old, new in late:
            if not n.dead:
                self.lose(n, shard)
                n.apply(n.router.owner_changed(shard, old, new))

    def kill(self, name: str) -> None:
        """The node dies: its state vanishes; a new incarnation starts, owning nothing."""
        old = self.nodes[name]
        old.remember_outcomes()
        old.dead = True
        self.count("kill")
        for (a, b), q in self.links.items():
            if name in (a, b):
                q.clear()
        for c in list(self.conns.values()):
            if c.node is old and c.alive:  # the client sees its socket die
                c.server_open = False
                self.client_lost(c)
        self.incs[name] += 1
        new = self.nodes[name] = SimNode(self, name, self.incs[name])
        for shard, lease in sorted(self.owners.items()):  # it syncs the current table
            if lease is not None and lease.node != name:
                new.apply(new.router.owner_changed(shard, None, lease))
        for n in self.nodes.values():
            if n is not new:
                n.node_down(name)
                n.apply(n.router.link_lost(name))
        for shard, lease in sorted(self.owners.items()):
            if lease is not None and lease.node == name:
                self.set_owner(shard, self.rng.choice(self.names))

    def lose_link(self) -> None:
        busy = sorted(k for k, q in self.links.items() if q)
        if not busy:
            return
        src, dst = self.rng.choice(busy)
        q = self.links[(src, dst)]
        # An edge's `closed` notices are kept: the uplink resends until it gives up, and a
        # notice lost then would leave the owner a connection nobody closes (see the report).
        lost = [e for e in q if e[0] != "closed"]
        kept = deque(e for e in q if e[0] == "closed")
        self.count("link_loss")
        q.clear()
        q.extend(kept)
        if any(e[0] in ("open", "frame") for e in lost):  # src's uplink to dst gave up
            self.nodes[src].apply(self.nodes[src].router.link_lost(dst))
        seqs = [e[-1] for e in lost if e[0] in ("data", "close")]
        if seqs:  # dst sees a gap in src's batches (once: it goes on from the last one lost)
            d = self.nodes[dst]
            d.gaps.check(src, str(self.nodes[src].inc), max(seqs))
            d.apply(d.router.link_lost(src))

    def lose_batch(self) -> None:
        """One owner -> edge batch (or beat) is lost, and nobody notices now (cluster review
        S1): the edge sees the gap at the owner's next batch, or at the link's next beat; the
        lost one is often the link's tail (nothing follows but beats)."""
        busy = sorted(k for k, q in self.links.items()
                      if any(e[0] in ("data", "close", "beat") for e in q))
        if not busy:
            return
        q = self.links[self.rng.choice(busy)]
        at = [i for i, e in enumerate(q) if e[0] in ("data", "close", "beat")]
        i = at[-1] if self.rng.random() < 0.6 else self.rng.choice(at)
        e = q[i]
        del q[i]
        self.count("beat_lost" if e[0] == "beat" else
                   "tail_lost" if i == at[-1] else "batch_lost")

    # -- the server side of the clients (sim_clients.ClientSim's hooks) -------------------------

    def open_conn(self, m: SimMember, hello: dict[str, Any]) -> Conn:
        """At an edge the rng picks (or the one a hop goes to)."""
        edge, self.next_edge = self.next_edge, None
        node = self.nodes[edge if edge is not None else self.rng.choice(self.names)]
        c = ClientConn(self.new_conn_id(), m.name, node=node, presented=hello.get("resume_session"))
        self.conns[c.id] = c
        self.conn_member[c.id] = m.name
        if c.presented is None:  # a new session: the client restarted, or never had a welcome
            self.incarnation[m.name] = self.incarnation.get(m.name, 0) + 1
        self.conn_inc[c.id] = (m.name, self.incarnation[m.name])
        node.driver.opened(c.id)
        return c

    def server_closed(self, c: Conn) -> None:
        assert isinstance(c, ClientConn)
        node = c.node
        assert node is not None
        if c.server_open and not node.dead:
            c.server_open = False
            node.driver.closed(c.id)
            node.apply(node.router.conn_closed(c.id))

    def pauses(self) -> list[float]:
        return [*super().pauses(), self.cfg.route_timeout]

    retry_first = True

    # -- the scheduler --------------------------------------------------------------------------

    def timers(self) -> None:
        for n in list(self.nodes.values()):
            if n.dead:
                continue
            n.driver.tick()
            n.apply(n.router.tick(self.now))
            n.beat()

    def next_wakeup(self) -> float | None:
        times = []
        for n in self.nodes.values():
            for t in (n.driver.next_wakeup(), n.router.next_deadline(),
                      n.beats.next_deadline()):
                if t is not None:
                    times.append(t)
        return min(times, default=None)

    def queues(self) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = []
        out += [("s", c) for c in self.conns.values()
                if c.to_server and c.server_open and c.alive]
        out += [("w", None)] if self.writes else []
        out += [("u", None)] if self.unclear else []
        out += [("c", m) for m in self.everyone if m.conn is not None and m.conn.to_client]
        out += [("l", k) for k, q in sorted(self.links.items()) if q]
        return out

    def move(self, kind: str, x: Any, n: int) -> None:
        if kind == "s":
            f = x.to_server.popleft()
            x.node.client_frame(x, f)
        elif kind == "w":
            self.store()
        elif kind == "u":
            self.resolve()
        elif kind == "c":
            self.client_in(x, n)
        else:
            src, dst = x
            entry = self.links[x].popleft()
            self.nodes[dst].link_in(src, entry)

    def step(self) -> None:
        self.steps += 1
        rng = self.rng
        self.advance(rng.expovariate(1 / 0.01))
        options = self.queues()
        choices: list[tuple[float, str]] = []
        if options:
            choices.append((12.0, "move"))
        choices.append((self.cfg.p_publish * 10, "publish"))
        choices.append((self.cfg.p_fault * 10, "fault"))
        kind = _pick(rng, choices)
        self.trace.append((self.steps, kind))
        if kind == "move":
            k, x = rng.choice(options)
            slow = k == "c" and x.slow
            if slow and rng.random() < 0.9:
                return
            if k == "u" and rng.random() < 0.9:  # resolving takes the log a while (seconds)
                return
            self.move(k, x, 1000 if slow else rng.randint(1, 3))
        elif kind == "publish":
            self.app_publish()
        else:
            self.fault()

    def server_faults(self) -> list[tuple[float, str]]:
        cfg = self.cfg
        return [(cfg.w_owner_change, "owner"), (cfg.w_kill, "kill"), (cfg.w_link_loss, "link"),
                (1, "wake"), (cfg.w_tail_loss, "batch"), (cfg.w_owner_back, "back"),
                (cfg.w_hop, "hop")]

    def server_fault(self, kind: str) -> None:
        rng = self.rng
        if kind == "owner":
            shard = rng.randrange(len(self.cfg.groups))
            self.set_owner(shard, None if rng.random() < 0.25 else rng.choice(self.names))
        elif kind == "kill":
            self.kill(rng.choice(self.names))
        elif kind == "link":
            self.lose_link()
        elif kind == "batch":
            self.lose_batch()
        elif kind == "back":  # the shard goes back to the node before (rendezvous hashing
            # prefers it again once it is back: a paused owner takes its shard back)
            back = sorted((s, n) for s, n in self.prev_owner.items()
                          if (lease := self.owners.get(s)) is None or lease.node != n)
            if back:
                shard, node = rng.choice(back)
                self.count("owner_back")
                self.set_owner(shard, node)
        elif kind == "hop":
            self.hop()
        elif kind == "wake":
            late = [n for n in self.nodes.values() if n.late]
            if late:
                self.notice(rng.choice(late))
            orphans = [s for s in range(len(self.cfg.groups)) if self.owners.get(s) is None]
            if orphans:  # a lease machine campaigns for what nobody holds
                self.set_owner(rng.choice(orphans), rng.choice(self.names))

    def hop(self) -> None:
        """A member's client moves to another edge (a network change) with its session: the
        old connection is lost (noticed now or later), the new one resumes (S11)."""
        who = [m for m in self.members if m.conn is not None]
        if not who:
            return
        m = self.rng.choice(who)
        c = m.conn
        assert isinstance(c, ClientConn) and c.node is not None
        self.drop(m)
        self.next_edge = self.rng.choice([n for n in self.names if n != c.node.name])
        self.connect(m, resume=True)
        self.count("hop")

    # -- running --------------------------------------------------------------------------------

    def start(self) -> None:
        for shard in range(len(self.cfg.groups)):
            self.set_owner(shard, self.rng.choice(self.names))
        self.start_clients()

    def quiesce(self) -> None:
        """No more faults: every node acts on what it missed, every shard gets an owner, some
        absent members come back, then every queue drains and every timer fires."""
        self.calm = True  # (no more owner changes)
        for n in self.nodes.values():
            self.notice(n)
        for shard in range(len(self.cfg.groups)):
            if self.owners.get(shard) is None:
                self.set_owner(shard, self.rng.choice(self.names))
        self.calm_clients()
        self.settle(300, reconnect=True)  # a client whose connection was closed reconnects
        if self.rng.random() < self.cfg.p_quiet_tail:
            self.quiet_tail()

    def quiet_tail(self) -> None:
        """The last burst's tail is lost (cluster review S1): all is quiet; a member publishes
        once more, and the owner's batch that carries that message to one edge (where the
        sender is not, so nothing follows it there) is lost. Only the link's beats can tell
        that edge; its members resume and get the message (`check_complete`), or they never
        do (without beats: a negative control)."""
        senders = [(m, g) for m in self.members if m.conn is not None for g in self.active(m)]
        if not senders:
            return
        m, g = self.rng.choice(senders)
        assert isinstance(m.conn, ClientConn) and m.conn.node is not None
        edge = m.conn.node.name
        self.publish(m, g)
        pid = f"{m.name}.{m.counter}"
        lost = False
        for _ in range(10_000):
            options = self.queues()
            if not options:
                break
            self.steps += 1
            kind, x = self.rng.choice(options)
            self.move(kind, x, 1000)
            offset = self.durable_ids.get((m.name, pid))
            if lost or offset is None:
                continue
            for (_src, dst), q in sorted(self.links.items()):
                hit = [e for e in q if dst != edge and e[0] == "data" and any(
                    f["type"] == "deliver" and f["group"] == g and f["offset"] == offset
                    for f in e[2])]
                if hit:
                    q.remove(hit[0])
                    self.count("quiet_tail_lost")
                    lost = True
                    break
        self.settle(300, reconnect=True)

    def final_checks(self) -> None:
        for shard, name in enumerate(self.cfg.groups):
            lease = self.owners[shard]
            assert lease is not None
            owner = self.nodes[lease.node]
            for n in self.nodes.values():
                if n is not owner and name in n.hub.groups:
                    self.obs.fail(f"{n} still serves {name}, owned by {owner}")
            g = owner.hub.groups.get(name)
            if g is not None:
                self.check_group(name, g, f"owner {owner}")
                self.check_complete(name, g)
        self.check_total_order()


def run(seed: int, steps: int, cfg: ClusterSimConfig | None = None) -> ClusterSimulation:
    """Run one cluster simulation; a failure starts with `seed=...` so it replays exactly."""
    return ClusterSimulation(seed, cfg).run(steps)


def main(argv: list[str]) -> int:
    """`python tests/unit/sim_cluster.py FIRST LAST STEPS`: run seeds FIRST..LAST (inclusive),
    print each failure (with its seed), the faults exercised and the wall time."""
    import logging
    import sys
    import time

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    first, last, steps = (int(a) for a in argv)
    totals: dict[str, int] = {}
    failed = 0
    t0 = time.monotonic()
    for seed in range(first, last + 1):
        try:
            sim = run(seed, steps)
        except Exception as e:
            failed += 1
            print(str(e).splitlines()[0][:400], flush=True)
            continue
        for k, v in sim.stats.items():
            totals[k] = totals.get(k, 0) + v
    keys = ("write.answer_lost", "write.resolved", "tail_lost", "quiet_tail", "batch_lost",
            "beat_lost", "gap.", "hop", "owner_back", "retire.", "write.fenced", "kill",
            "link_loss")
    print({k: v for k, v in sorted(totals.items()) if k.startswith(keys)})
    print(f"seeds {first}-{last} at {steps} steps: {failed} failed, "
          f"{time.monotonic() - t0:.0f} s", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    import sys
    sys.exit(main(sys.argv[1:]))
