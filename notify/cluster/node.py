"""A cluster node: edge for its own connections, owner of the shards it holds a lease on
(DESIGN §9, docs/cluster.md).

The node is the server's placement (notify/runtime/placement.py): the same server, driver and
core run on one node and on many, and nothing here decides anything about groups. It answers
three questions for the server.

- **Where does a client frame go?** (`route`) A group frame whose shard this node holds is the
  server's own business (its hub, its log). Otherwise it goes to the shard's owner over an
  `Uplink`; before a connection's first frame reaches an owner, the edge sends that owner the
  connection's session (`OPEN`: member, the edge's session token, the identity it verified), so
  the owner's hub knows the connection as a *remote connection* with the same session token
  (`Hub.hello(token=)`): a member that resumes through any edge is found by every owner. A
  shard with no owner at the moment (failover) keeps its frames, in order, until one appears
  or `route_timeout` passes. These rules are the sans-I/O `EdgeRouter` (routing.py); this
  node carries out its actions.
- **Where does a frame for a connection go?** (`push`, `close`) Remote connections are numbered
  from the server's own counter; their frames leave over `Downlinks` to the edge that holds the
  socket, which pushes them to the member's outbox (G11 is kept where the socket is).
- **What happens when ownership moves?** The lease machine (`ownership.py` via `leases.py`)
  says. A shard this node lost (`Lost`): its groups are dropped from the hub at once
  (`Driver.drop_groups`), closing their members' connections so that they resume at the new owner,
  which rebuilt the groups from the log. A shard whose owner changed elsewhere
  (`OwnerChanged`): this edge closes the connections it routed to the old owner for that shard,
  for the same reason; frames from that owner for those connections are dropped with them.
  An edge that died (`NodeDown`): its remote connections are closed in the hub at once, so its
  members are suspected now and not after heartbeats.

Two things cross between nodes besides frames. An operation that must run where a group's
members are (the server API's removal) is asked of the group's owner by a NATS request
(`ask_owner`, answered by that node's server: `PlacementHost.answer`); and every disconnect of
a user, stored by whichever node was asked, reaches every node through a watch of the log's
revocations bucket (revocations.py), each ending the user's sessions it holds.

The fence is the log's, not ours: the log on JetStream (`JetStreamLog(owner=)`) appends a fence
record when it loads a group, so an owner that lost its lease without noticing (paused, cut
off) is refused its next append; the driver drops the group on such a refusal (`Fenced`).

"Close the connection and let the client resume" is the one recovery used for every loss
between nodes (a link that gave up, a gap in an owner's batches, a group that moved): resume is
the path clients already take after any lost connection, and their resume points say exactly
what they hold, which no node in between can know as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import nats
import nats.errors
import orjson
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg

from notify.cluster.leases import ClusterLeases
from notify.cluster.links import (
    DownlinkGaps,
    Downlinks,
    Uplink,
    UplinkDedup,
    in_subject,
    out_subject,
)
from notify.cluster.linkwire import (
    CLOSE,
    CLOSED,
    DATA,
    FRAME,
    OPEN,
    PIECE,
    REFRESH,
    LinkError,
    Pieces,
    decode_down,
    decode_up,
    identity_json,
    identity_of,
)
from notify.cluster.ownership import Acquired, Lost, NodeDown, OwnerChanged
from notify.cluster.revocations import RevocationWatch
from notify.cluster.routing import (
    FULL,
    CloseConns,
    ClosedAt,
    Dispatch,
    EdgeRouter,
    Forward,
    RouteAction,
)
from notify.cluster.shards import SHARDS, shard_of
from notify.core.auth import Identity
from notify.core.errors import CloseCode
from notify.core.events import Hello
from notify.core.users import split_member
from notify.errortext import described
from notify.runtime.driver import MOVED
from notify.runtime.placement import NoOwner, PlacementHost, RawFrame, Sample
from notify.storage.jetstream import revocations_bucket
from notify.storage.natsloop import close_within
from notify.supervision import LongTask, in_own_task

log = structlog.get_logger("notify.cluster")

#: how often the node looks at its deadlines (routing's parked frames, the downlinks' beats)
TICK = 0.25

#: DATA entries that must not count against the member's outbound bound (a resume's replay)
DATA_REPLAY = 3

#: operations other nodes asked of this one that may run at once (`ask_owner`); more are
#: answered "busy" at once rather than queued without bound
CALLS = 16


def call_subject(prefix: str, node: str) -> str:
    """Where a node hears operations asked of it as a group's owner (`ask_owner`)."""
    return f"{prefix}.call.{node}"


@dataclass(frozen=True)
class ClusterConfig:
    servers: list[str]
    node_id: str
    replicas: int = 3
    #: the JetStream stream of the log
    stream: str = "NOTIFY"
    #: the core NATS subjects between nodes: <prefix>.in.<node>, <prefix>.out.<node>
    prefix: str = "notify"
    lease_ttl: float = 10.0
    node_ttl: float = 3.0
    heartbeat: float = 1.0
    settle: float = 1.0
    #: how long a frame for a shard without an owner waits before its client is told to
    #: reconnect (a failover takes about one lease TTL)
    route_timeout: float = 15.0
    #: how long an edge retries a batch to an owner that does not answer
    give_up_after: float = 15.0
    connect_timeout: float = 15.0
    #: a standby: an edge that owns no shard while a node that is not a standby lives
    #: (notify/cluster/ownership.py rule 6a)
    standby: bool = False


@dataclass
class ClusterStats:
    frames_routed: int = 0
    frames_received: int = 0
    link_gaps: int = 0
    link_give_ups: int = 0
    conns_moved: int = 0


class ClusterNode:
    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self.node = config.node_id
        #: this process's incarnation: links restart with it
        self.inc = secrets.token_hex(6)
        self.stats = ClusterStats()
        self._server: PlacementHost | None = None
        self._nc: Client | None = None
        self.leases: ClusterLeases | None = None
        self._downlinks: Downlinks | None = None
        #: one link per owner node this edge ever routed to: bounded by the node ids in use
        self._uplinks: dict[str, Uplink] = {}
        self._dedup = UplinkDedup()
        self._gaps = DownlinkGaps()
        #: entries in pieces (linkwire), from owners and from edges
        self._pieces_down, self._pieces_up = Pieces(), Pieces()
        self._failed: str | None = None
        #: `stop()` began: the tick's end is no death and an uplink's no give-up any more
        self._stopping = False
        # -- edge side: where the frames of this node's connections go, and those that wait
        #: for an owner (the rules: notify/cluster/routing.py; this node does their I/O)
        self.router = EdgeRouter(self.node, route_timeout=config.route_timeout)
        # -- owner side: connections other edges hold
        #: (edge, edge incarnation, edge conn) -> our number for it
        self._vconns: dict[tuple[str, str, int], int] = {}
        #: our number -> (edge, edge incarnation, edge conn)
        self._remote: dict[int, tuple[str, str, int]] = {}
        self._tick: LongTask | None = None
        self._revocations: RevocationWatch | None = None
        #: operations other nodes asked of this one, under way (at most `CALLS`)
        self._calls: set[asyncio.Task[None]] = set()

    # -- lifecycle -------------------------------------------------------------------------------

    async def start(self, server: PlacementHost) -> None:
        """Connect, watch the revocations, start the leases and the tick. A start that fails
        undoes what it began (the watch, the connection) before it raises: they would end
        with the loop, and be taken for deaths after the error that ended the start."""
        try:
            await self._start(server)
        except BaseException:
            with contextlib.suppress(Exception):
                await self.stop()  # (which marks the node stopping first)
            raise

    async def _start(self, server: PlacementHost) -> None:
        self._server = server
        c = self.config
        async with asyncio.timeout(c.connect_timeout):
            self._nc = await nats.connect(
                servers=c.servers, name=f"notify-{self.node}", connect_timeout=2,
                max_reconnect_attempts=-1, reconnect_time_wait=0.2, allow_reconnect=True)
        header = {"node": self.node, "inc": self.inc}
        self._downlinks = Downlinks(self._nc, c.prefix, header)
        # (unsubscribed by the connection's drain at `stop`)
        await self._nc.subscribe(in_subject(c.prefix, self.node), cb=self._on_in)
        await self._nc.subscribe(out_subject(c.prefix, self.node), cb=self._on_out)
        await self._nc.subscribe(call_subject(c.prefix, self.node), cb=self._on_call)
        self._revocations = RevocationWatch(
            self._nc, revocations_bucket(c.stream), replicas=c.replicas,
            on_revoked=server.revoked, on_failure=self._fail,
            idle_heartbeat=max(0.1, min(1.0, c.node_ttl / 4)),
            owner_stopping=self._stopping_now)
        await self._revocations.start(c.connect_timeout)
        self.leases = ClusterLeases(
            self._nc, self.node,
            info={"url": server.url, "inc": self.inc, **({"standby": True} if c.standby else {})},
            on_actions=self._on_lease_actions, on_failure=self._fail,
            lease_ttl=c.lease_ttl, node_ttl=c.node_ttl, heartbeat=c.heartbeat,
            replicas=c.replicas, settle=c.settle, standby=c.standby)
        await self.leases.start(c.connect_timeout)
        self._tick = LongTask(self._run_tick(), name="cluster tick",
                              on_death=lambda e: self._fail(
                                  f"the cluster tick task died: {described(e)}"),
                              owner_stopping=self._stopping_now)
        log.info("cluster_node_started", node=self.node, inc=self.inc, nats=c.servers)

    def _stopping_now(self) -> bool:
        """This node's stop began, or its server's (whose drain comes before it: a stop cut
        short there ends the node's tasks with the loop)."""
        return self._stopping or (self._server is not None and self._server.draining)

    @property
    def ready(self) -> bool:
        return (self.leases is not None and self.leases.ready.is_set()
                and self._nc is not None and self._nc.is_connected and self._failed is None)

    async def release(self) -> None:
        """Graceful: hand every shard over (their groups are dropped, members told to
        reconnect) without waiting for the leases to expire."""
        if self.leases is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(10):
                    await self.leases.stop()
        if self._downlinks is not None:
            self._downlinks.flush()

    async def stop(self) -> None:
        self._stopping = True  # the tick's and the uplinks' ends from here on are this stop's
        await self.release()
        if self._tick is not None:
            await self._tick.stop()
        for up in list(self._uplinks.values()):
            await up.close()
        if self._revocations is not None:
            await self._revocations.stop()
        for task in list(self._calls):
            task.cancel()
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await in_own_task(self._nc.drain(), 5)  # (nats-py's drain() swallows a cancel)
            await close_within(self._nc, 5)

    def _fail(self, reason: str) -> None:
        """A part of the node died (its lease tasks): it can no longer know what it owns, so
        it stops (G13), and its shards move to the others."""
        self._failed = reason
        log.critical("cluster_node_failed", reason=reason)
        if self._server is not None:
            self._server.halt(f"cluster: {reason}")

    async def _run_tick(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            now = time.monotonic()
            self._apply(self.router.tick(now))
            if self._downlinks is not None:
                self._downlinks.beat(now)

    # -- edge side: routing client frames ---------------------------------------------------------

    def owns(self, group: str) -> bool:
        shard = shard_of(group)
        if self.leases is not None:
            self.leases.check(shard)  # our clock first, then the router's view (S7)
        return self.router.holds(shard)

    def route(self, conn: int, group: str, raw: RawFrame) -> bool:
        """Send a group frame to its owner; False if this node owns it (the server handles
        it). Frames for a shard without an owner wait (in order) for one."""
        if isinstance(raw, str):
            raw = raw.encode()
        elif not isinstance(raw, bytes):  # a frame of a batch: its own text
            raw = raw()
        shard = shard_of(group)
        if self.leases is not None:
            self.leases.check(shard)  # S7, as in `owns`
        actions = self.router.frame(conn, shard, raw, time.monotonic())
        if len(actions) == 1 and isinstance(actions[0], Dispatch):
            return False  # this very frame, which the server has parsed already
        self._apply(actions)
        return True

    def _apply(self, actions: list[RouteAction]) -> None:
        """Carry out what the router decided, in order."""
        assert self._server is not None
        for a in actions:
            if isinstance(a, Dispatch):
                self._server.dispatch_raw(a.conn, a.raw)
            elif isinstance(a, Forward):
                up = self._uplink(a.owner)
                if a.open_first:
                    up.send(a.conn, OPEN, self._open_record(a.conn))
                if up.send(a.conn, FRAME, a.raw):
                    self.stats.frames_routed += 1
                else:  # bounded (G14): its client tries again later, in order
                    self._close_edge_conns((a.conn,), FULL)
            elif isinstance(a, CloseConns):
                if a.shard is not None and a.reason != MOVED:
                    log.warning("no_owner", shard=a.shard, conns=len(a.conns), why=a.reason)
                self._close_edge_conns(a.conns, a.reason)
            elif isinstance(a, ClosedAt) and a.owner in self._uplinks:
                # (opened there through an uplink: through its successor if it died)
                self._uplink(a.owner).send(
                    a.conn, CLOSED, orjson.dumps({"code": a.code, "reason": a.reason}))

    def refuse(self, conn: int, group: str, raw: bytes, *, remote: bool) -> bool:
        """A group frame that reached this node late: if the group is not ours (any more),
        a routed one's edge is told (its client reconnects), a held one is routed again."""
        if self.owns(group):
            return False
        if remote:
            self.not_owner(conn)
        else:
            self.route(conn, group, raw)
        return True

    def _open_record(self, conn: int) -> bytes:
        assert self._server is not None
        s = self._server.edge_session(conn)
        return orjson.dumps({
            "member": s.member if s is not None else None,
            "token": s.token if s is not None else None,
            "resume": s.presented if s is not None else None,
            "born": s.born if s is not None else None,
            "identity": identity_json(s.identity if s is not None else None),
            **({"trusted": s.trusted} if s is not None and s.trusted is not None else {})})

    def _uplink(self, owner: str) -> Uplink:
        up = self._uplinks.get(owner)
        if up is None or up.dead:  # (a dead one was reported: its connections were closed)
            assert self._nc is not None
            up = self._uplinks[owner] = Uplink(
                self._nc, in_subject(self.config.prefix, owner),
                {"edge": self.node, "inc": self.inc}, owner=owner,
                on_give_up=self._gave_up, give_up_after=self.config.give_up_after,
                owner_stopping=self._stopping_now, after=up)
        return up

    def closed(self, conn: int, code: int, reason: str) -> None:
        """The edge's connection `conn` closed: every owner it was opened at hears of it."""
        self._apply(self.router.conn_closed(conn, code, reason))

    def refreshed(self, conn: int, identity: Identity) -> None:
        for owner in sorted(self.router.opened_at(conn)):
            self._uplink(owner).send(conn, REFRESH, orjson.dumps(identity_json(identity)))

    def _close_edge_conns(self, conns: Sequence[int], reason: str) -> None:
        assert self._server is not None
        for conn in sorted(conns):
            self.stats.conns_moved += 1
            self._server.close(conn, int(CloseCode.SHUTDOWN), reason, drain=True)

    def _gave_up(self, owner: str) -> None:
        if self._stopping:  # an uplink made after stop() closed them: ended with the loop
            return
        self.stats.link_give_ups += 1
        for a in self.router.link_lost(owner):
            if isinstance(a, CloseConns):
                self._close_edge_conns(
                    a.conns, "the node serving a group does not answer; reconnect")

    # -- operations asked of a group's owner ----------------------------------------------------

    async def ask_owner(self, group: str, request: bytes, timeout: float) -> bytes:
        lease = self.router.owner(shard_of(group))
        if lease is None or self._nc is None:
            raise NoOwner(f"no node owns {group!r} now (a failover is under way)")
        try:
            reply = await self._nc.request(call_subject(self.config.prefix, lease.node),
                                           request, timeout=timeout)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError,
                nats.errors.ConnectionClosedError) as e:
            raise NoOwner(f"node {lease.node} (the owner of {group!r}) did not answer: "
                          f"{type(e).__name__}") from None
        return reply.data

    async def _on_call(self, msg: Msg) -> None:
        """An operation another node asks of this one as a group's owner: answered by the
        server (which says so if the group is not ours any more), off the subscription's
        callback so that one slow operation does not hold the others."""
        if len(self._calls) >= CALLS:
            await msg.respond(orjson.dumps({"busy": f"node {self.node} is answering {CALLS} "
                                                    "operations already"}))
            return
        task = asyncio.get_running_loop().create_task(self._answer(msg))
        self._calls.add(task)
        task.add_done_callback(self._calls.discard)

    async def _answer(self, msg: Msg) -> None:
        assert self._server is not None
        try:
            reply = await self._server.answer(msg.data)
        except Exception as e:  # (this node has no server API, or it failed): the asker 503s
            log.error("call_failed", error=repr(e), exc_info=e)
            reply = orjson.dumps({"failed": f"node {self.node} could not answer: {e}"})
        with contextlib.suppress(nats.errors.Error):
            await msg.respond(reply)

    # -- edge side: frames from owners ------------------------------------------------------------

    async def _on_out(self, msg: Msg) -> None:
        assert self._server is not None
        try:
            header, entries = decode_down(msg.data)
            owner, inc = str(header["node"]), str(header["inc"])
            beat = int(header["beat"]) if "beat" in header else None
            seq = int(header["seq"]) if beat is None else 0
            to = str(header["to"])
        except (LinkError, KeyError, ValueError, TypeError) as e:
            log.error("bad_owner_batch", error=str(e))
            return
        if to != self.inc:
            return  # for an earlier incarnation of this node: its connections are gone
        if beat is not None:
            # the owner's last batch after a quiet spell: the tail of a burst, if lost, shows
            # here (links.py, cluster review S1)
            if not self._gaps.beat(owner, inc, beat):
                self._link_gap(owner, beat, "beat")
            return
        if not self._gaps.check(owner, inc, seq):
            self._link_gap(owner, seq, "batch")
        server = self._server
        pieces = self._pieces_down
        for kind, conns, data in entries:
            if kind == PIECE:
                try:
                    whole = pieces.join(owner, inc, data)
                except LinkError as e:
                    log.error("bad_owner_batch", error=str(e))
                    self._link_gap(owner, seq, "bad piece")  # (the rest of the batch is lost)
                    return
                if whole is None:
                    continue
                kind, data = whole
            elif pieces:
                pieces.cut(owner)  # (the owner started again: its link too)
            for conn in conns:
                if not self.router.is_opened(conn, owner):
                    continue  # not (or no longer) routed there: an old owner's frame
                if kind == CLOSE:
                    c = orjson.loads(data)
                    server.close(conn, c["code"], c["reason"], drain=c["drain"])
                else:
                    server.push(conn, data, bounded=kind != DATA_REPLAY)

    def _link_gap(self, owner: str, seq: int, seen: str) -> None:
        """Frames for our clients were lost on the way: they resume, and get them again."""
        self.stats.link_gaps += 1
        self._pieces_down.lost(owner)
        log.warning("owner_batch_gap", owner=owner, seq=seq, seen=seen)
        self._apply(self.router.link_lost(owner))

    # -- owner side: frames from edges ------------------------------------------------------------

    async def _on_in(self, msg: Msg) -> None:
        try:
            header, entries = decode_up(msg.data)
            edge, inc, seq = str(header["edge"]), str(header["inc"]), int(header["seq"])
        except (LinkError, KeyError, ValueError, TypeError) as e:
            log.error("bad_edge_batch", error=str(e))
            return
        if self._dedup.fresh(edge, inc, seq):
            pieces = self._pieces_up
            for conn, kind, data in entries:
                try:
                    if kind == PIECE:
                        whole = pieces.join(edge, inc, data)
                        if whole is None:
                            continue
                        kind, data = whole
                    elif pieces:
                        pieces.cut(edge)  # (the edge gave up on the rest of that entry)
                    await self._apply_entry(edge, inc, conn, kind, data)
                except Exception:  # a bug of ours: that frame is lost, not the link (G12)
                    log.exception("edge_entry_failed", edge=edge, kind=kind)
        with contextlib.suppress(Exception):
            await msg.respond(b"")

    async def _apply_entry(self, edge: str, inc: str, conn: int, kind: int,
                           data: bytes) -> None:
        server = self._server
        assert server is not None
        key = (edge, inc, conn)
        if kind == OPEN:
            if key in self._vconns:
                return
            self._forget_incarnations(edge, inc)
            d = orjson.loads(data)
            vid = server.new_conn_id()
            self._vconns[key], self._remote[vid] = vid, key
            trusted = d.get("trusted")
            if isinstance(trusted, str):  # the edge's server API publishing (`Hub.trust`)
                hub = server.driver.hub
                server.driver.call(lambda now: [*hub.opened(vid, now),
                                                *hub.trust(vid, trusted)],
                                   what="trust")
                return
            user, instance = split_member(d["member"]) if d["member"] else (None, None)
            server.driver.opened_remote(vid, Hello(1, user, d["resume"], instance),
                                        identity_of(d["identity"]), d["token"], d.get("born"))
            return
        known = self._vconns.get(key)
        if known is None:
            if kind != CLOSED:  # we do not know that connection (we restarted, or it moved)
                self._downlink_close(edge, inc, conn, int(CloseCode.SHUTDOWN), MOVED)
            return
        vid = known
        if kind == FRAME:
            self.stats.frames_received += 1
            server.dispatch_raw(vid, data, remote=True)
        elif kind == CLOSED:
            c = orjson.loads(data)
            self._drop_vconn(vid)
            server.driver.closed(vid, c["code"], c["reason"])
        elif kind == REFRESH:
            identity = identity_of(orjson.loads(data))
            if identity is not None:
                server.driver.refresh(vid, identity)

    def not_owner(self, vid: int) -> None:
        """A routed frame for a shard this node does not hold (it moved since the edge routed
        it): the client reconnects, and its frames go to the new owner."""
        key = self._remote.get(vid)
        if key is not None:
            self._downlink_close(key[0], key[1], key[2], int(CloseCode.SHUTDOWN), MOVED)

    def _forget_incarnations(self, edge: str, inc: str) -> None:
        """An edge restarted: the connections of its previous incarnation are gone."""
        old = [vid for (e, i, _c), vid in self._vconns.items() if e == edge and i != inc]
        self._close_vconns(old, "edge restarted")

    def _close_vconns(self, vids: list[int], reason: str) -> None:
        server = self._server
        assert server is not None
        for vid in vids:
            self._drop_vconn(vid)
            server.driver.closed(vid, 1006, reason)

    def _drop_vconn(self, vid: int) -> None:
        key = self._remote.pop(vid, None)
        if key is not None:
            self._vconns.pop(key, None)

    def _downlink_close(self, edge: str, inc: str, conn: int, code: int, reason: str) -> None:
        assert self._downlinks is not None
        self._downlinks.push(edge, inc, conn, CLOSE, orjson.dumps(
            {"code": code, "reason": reason, "drain": True}))

    # -- owner side: the server's effects on remote connections -----------------------------------

    def is_remote(self, conn: int) -> bool:
        return conn in self._remote

    def push(self, conn: int, data: bytes, *, bounded: bool = True, frames: int = 1) -> None:
        """`data` crosses to the connection's edge as it is. That edge counts a `batch` of a
        run of fan-outs as one frame against the member's frame bound (the link does not carry
        `frames`); its bytes count in full against the byte bound."""
        key = self._remote.get(conn)
        if key is not None and self._downlinks is not None:
            self._downlinks.push(key[0], key[1], key[2], DATA if bounded else DATA_REPLAY, data)

    def close(self, conn: int, code: int, reason: str, *, drain: bool) -> None:
        key = self._remote.get(conn)
        if key is not None and self._downlinks is not None:
            self._downlinks.push(key[0], key[1], key[2], CLOSE, orjson.dumps(
                {"code": code, "reason": reason, "drain": drain}))

    # -- ownership changes -------------------------------------------------------------------------

    def _on_lease_actions(self, actions: list[Any]) -> None:
        acquired: list[int] = []
        lost: dict[str, list[int]] = {}
        for a in actions:
            if isinstance(a, Acquired):
                acquired.append(a.shard)
                self._apply(self.router.acquired(a.shard))
            elif isinstance(a, Lost):
                lost.setdefault(a.why, []).append(a.shard)
                self._apply(self.router.lost(a.shard))
                self._lost(a.shard, a.why)
            elif isinstance(a, OwnerChanged):
                self._apply(self.router.owner_changed(a.shard, a.old, a.new))
            elif isinstance(a, NodeDown):
                self._node_down(a.node)
        if acquired:
            log.debug("shards_acquired", count=len(acquired), shards=_ranges(acquired),
                     held=self.shards_owned())
        for why, shards in lost.items():
            log.warning("shards_lost", why=why, count=len(shards), shards=_ranges(shards),
                        held=self.shards_owned())

    def _lost(self, shard: int, why: str) -> None:
        server = self._server
        assert server is not None
        driver = server.driver
        groups = [g for g in driver.group_names() if shard_of(g) == shard]
        if groups:
            log.info("shard_groups_dropped", shard=shard, groups=len(groups), why=why)
            driver.drop_groups(groups, MOVED)

    def _node_down(self, node: str) -> None:
        """An edge died: its members' connections are closed in the hub now (they are
        suspected, and resume wherever they reconnect).

        It may only have looked dead (paused, or cut off from NATS for longer than a lease):
        then its clients' sockets are still open, and one that only receives would never send
        the frame that tells this owner's refusal (`MOVED`) to its edge; it would wait forever
        for messages that no longer come. So the edge is also told to close each of them, on a
        fresh link (what it lost of the old one is moot): if it is alive, they reconnect and
        resume; if it is dead, nobody reads it."""
        conns = [(vid, i, c) for (e, i, c), vid in self._vconns.items() if e == node]
        if conns:
            log.warning("edge_down", node=node, conns=len(conns))
        self._close_vconns([vid for vid, _i, _c in conns], "edge down")
        self._dedup.forget(node)
        if self._downlinks is not None:
            self._downlinks.forget(node)
            for _vid, inc, conn in conns:
                self._downlink_close(node, inc, conn, int(CloseCode.SHUTDOWN), MOVED)
        self._gaps.forget(node)
        self._pieces_up.cut(node)
        self._pieces_down.cut(node)

    # -- introspection ----------------------------------------------------------------------------

    def samples(self) -> Sequence[Sample]:
        """This node's cluster metrics (`notify_cluster_*` on `/metrics`)."""
        cs, leases = self.stats, self.leases
        driver = self._server.driver.stats if self._server is not None else None
        out: list[Sample] = [
            ("gauge", "cluster_ready", "1 once this node has joined the cluster",
             int(self.ready)),
            ("gauge", "cluster_shards_owned", "shards this node holds a lease on",
             self.shards_owned())]
        if leases is not None:
            out += [
                ("gauge", "cluster_nodes_live", "nodes this node sees alive",
                 len(leases.live_nodes())),
                ("counter", "cluster_lease_renewals", "lease renewals that succeeded",
                 leases.renewals),
                ("counter", "cluster_lease_renew_failures",
                 "lease renewals refused or unanswered", leases.renew_failures),
                ("counter", "cluster_leases_acquired", "shard leases won", leases.acquired),
                ("counter", "cluster_leases_lost", "shard leases lost, by why",
                 ("why", leases.losses))]
        out += [
            ("counter", "cluster_fence_refusals", "appends refused because another node owns "
             "the group now (the group was dropped here)",
             driver.fence_refusals if driver is not None else 0),
            ("counter", "cluster_frames_routed", "client frames sent to their group's owner",
             cs.frames_routed),
            ("counter", "cluster_frames_received", "client frames routed here by other edges",
             cs.frames_received),
            ("counter", "cluster_link_gaps", "gaps seen in an owner's batches (its clients "
             "resumed)", cs.link_gaps),
            ("counter", "cluster_link_give_ups", "owners that did not answer in time (their "
             "clients resumed)", cs.link_give_ups),
            ("counter", "cluster_link_pieces_dropped", "entries too large for one NATS message "
             "dropped because a piece of theirs was lost (with a gap or a give-up)",
             self._pieces_up.dropped + self._pieces_down.dropped),
            ("counter", "cluster_groups_dropped", "groups dropped (shard lost or fenced)",
             driver.groups_dropped if driver is not None else 0),
            ("counter", "cluster_conns_moved", "client connections told to reconnect because "
             "their group moved", cs.conns_moved),
            ("counter", "cluster_revocations_heard", "users' disconnects heard by the watch "
             "(each ends the user's sessions here once)",
             self._revocations.heard if self._revocations is not None else 0)]
        return out

    def held(self) -> dict[int, int]:
        """shard -> term of the shards this node holds ({} before it joined): what the
        webhooks read (notify/webhooks/service.py, `Shards`)."""
        return {} if self.leases is None else self.leases.held()

    def term(self, shard: int) -> int | None:
        """The term under which this node holds `shard` (None: it does not), without
        building `held` (the webhooks ask it per stored write and per delivery)."""
        return None if self.leases is None else self.leases.term(shard)

    def shards_owned(self) -> int:
        return 0 if self.leases is None else len(self.leases.held())

    def describe(self) -> dict[str, Any]:
        """`GET /cluster`: this node's view of the cluster (operators, tests)."""
        owners: dict[str, list[Any]] = {}
        live: list[str] = []
        if self.leases is not None:
            for shard in range(SHARDS):
                lease = self.leases.owner(shard)
                if lease is not None:
                    owners[str(shard)] = [lease.node, lease.term]
            live = sorted(self.leases.live_nodes())
        return {"node": self.node, "inc": self.inc, "ready": self.ready,
                "held": sorted(self.leases.held()) if self.leases is not None else [],
                "live": live, "owners": owners}


def _ranges(shards: list[int]) -> str:
    """[1, 2, 3, 7] -> "1-3,7": a log line per change, not per shard."""
    out: list[str] = []
    for s in sorted(shards):
        if out and out[-1].split("-")[-1] == str(s - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{s}"
        else:
            out.append(str(s))
    return ",".join(out)


__all__ = ["SHARDS", "ClusterConfig", "ClusterNode", "ClusterStats"]
