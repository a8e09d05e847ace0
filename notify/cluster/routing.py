"""Edge routing and parking: a sans-I/O state machine (DESIGN §9, docs/cluster.md "Routing").

Every node is an edge for the connections whose sockets it holds. This module decides where
each of their group frames goes, from what the node tells it (the frames, the ownership changes
the lease machine reports, closed connections) and a clock `now` it is given: it reads no
clock, does no I/O and imports no asyncio, so the simulator (tests/unit/sim_cluster.py) runs
the same rules as `ClusterNode` (node.py, which only carries out the actions).

Inputs: `frame(conn, shard, raw, now)`, `acquired(shard)`, `lost(shard)`,
`owner_changed(shard, old, new)`, `conn_closed(conn)`, `link_lost(owner)`, `tick(now)`.
Each returns the actions to carry out, in order. `next_deadline()` is when `tick` has something
to do next.

Rules, as a table (the shard's state at the edge -> what a frame for it does):

| the shard                                 | a frame                                   |
|-------------------------------------------|-------------------------------------------|
| frames wait for it (`_waiting`)           | waits behind them (`MAX_WAITING`: close)  |
| held by this node (`acquired`)            | `Dispatch`: this node's driver takes it   |
| owned by another node (`owner_changed`)   | `Forward` to it (`open_first` once)       |
| no owner, or ours but not yet acquired    | starts waiting, deadline `now + timeout`  |

1. Order. A connection's frames for one shard reach the owner in the order sent: once one frame
   waits, every later frame for the shard waits behind it, whatever the owner is, until the
   queue drains (`acquired`, or an owner elsewhere): then the frames go in order, and a queue
   that meets "no owner" again stops there and keeps waiting.
2. Sessions. Before a connection's first frame reaches an owner, that owner gets its session
   (`Forward.open_first`): the owner's hub then knows the connection. `conn_closed` tells every
   owner it was opened at (`ClosedAt`).
3. Moves. When a shard's owner changes from another node (a new node, or a new term), the
   connections that routed frames for it to the old owner are closed (`CloseConns`, `MOVED`):
   they resume at the new owner, whose hub rebuilt the group from the log. A link to an owner
   that lost frames (`link_lost`) closes every connection opened at it, for the same reason:
   resume is the one recovery between nodes.
4. Bounds (G14) and deadlines (G13). At most `max_waiting` frames wait per shard, and at most
   `max_waiting_bytes` bytes of them over all shards (a frame over either closes its
   connection: it tries again later), shards are at most `SHARDS`, and
   every waiting frame has a deadline (`route_timeout`): at `tick`, the connections whose
   frames waited too long are closed and their frames dropped. The route tables hold live
   connections only (`conn_closed` empties them); per connection, the owners and shards it
   used.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from notify.cluster.ownership import Lease
from notify.runtime.driver import MOVED

#: frames that may wait at an edge for one shard's owner (a failover)
MAX_WAITING = 10_000
#: bytes of frames that may wait at an edge for owners, all shards together
MAX_WAITING_BYTES = 64 << 20

#: what a connection is told when too many frames wait for its group's owner
FULL = "too many frames wait for this group's node; reconnect"
#: ... when its frames waited for an owner too long
NO_OWNER = "no node serves this group right now; reconnect"
#: ... when frames between this edge and an owner were lost
LINK_LOST = "frames were lost between nodes; reconnect"


# -- actions --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Dispatch:
    """This node owns the frame's shard: its own driver takes the frame."""

    conn: int
    raw: bytes


@dataclass(frozen=True, slots=True)
class Forward:
    """Send the frame to `owner`; with `open_first`, the connection's session goes first."""

    owner: str
    conn: int
    raw: bytes
    open_first: bool


@dataclass(frozen=True, slots=True)
class CloseConns:
    """Close these local connections (their clients reconnect and resume)."""

    conns: tuple[int, ...]
    reason: str
    #: the shard concerned, if one (for the log line)
    shard: int | None = None


@dataclass(frozen=True, slots=True)
class ClosedAt:
    """Tell `owner` that the connection `conn` it knows closed (with `code`, `reason`)."""

    owner: str
    conn: int
    code: int
    reason: str


RouteAction = Dispatch | Forward | CloseConns | ClosedAt


@dataclass(slots=True)
class _Waiting:
    conn: int
    raw: bytes
    deadline: float


class EdgeRouter:
    """The edge's routing tables and the frames parked for an owner, for one node."""

    def __init__(self, node: str, *, route_timeout: float = 15.0,
                 max_waiting: int = MAX_WAITING,
                 max_waiting_bytes: int = MAX_WAITING_BYTES) -> None:
        if route_timeout <= 0 or max_waiting < 1 or max_waiting_bytes < 1:
            raise ValueError("route_timeout, max_waiting and max_waiting_bytes must be positive")
        self.node = node
        self.route_timeout, self.max_waiting = route_timeout, max_waiting
        self.max_waiting_bytes = max_waiting_bytes
        #: bytes of the frames waiting, all shards together, and per shard
        self._bytes = 0
        self._shard_bytes: dict[int, int] = {}
        #: shards this node holds (`acquired`, until `lost`)
        self._held: set[int] = set()
        #: shard -> its owner, as the lease machine sees it (`owner_changed`)
        self._owner: dict[int, Lease] = {}
        #: shard -> frames waiting for an owner, in the order they came
        self._waiting: dict[int, deque[_Waiting]] = {}
        #: conn -> shard -> how many of its frames wait there (so a close costs its own frames)
        self._parked: dict[int, dict[int, int]] = {}
        #: conn -> the owners it was opened at (its session sent)
        self._opened: dict[int, set[str]] = {}
        #: (owner, shard) -> the conns that sent frames there; conn -> its (owner, shard)s
        self._routes: dict[tuple[str, int], set[int]] = {}
        self._conn_routes: dict[int, set[tuple[str, int]]] = {}

    # -- queries ---------------------------------------------------------------------------------

    def holds(self, shard: int) -> bool:
        return shard in self._held

    def held(self) -> frozenset[int]:
        return frozenset(self._held)

    def owner(self, shard: int) -> Lease | None:
        return self._owner.get(shard)

    def opened_at(self, conn: int) -> frozenset[str]:
        """The owners `conn`'s session was sent to (frames from them for it are taken)."""
        return frozenset(self._opened.get(conn, ()))

    def is_opened(self, conn: int, owner: str) -> bool:
        opened = self._opened.get(conn)
        return opened is not None and owner in opened

    def waiting(self, shard: int | None = None) -> int:
        """Frames waiting for an owner (of `shard`, or of every shard)."""
        if shard is not None:
            return len(self._waiting.get(shard, ()))
        return sum(len(q) for q in self._waiting.values())

    def next_deadline(self) -> float | None:
        """When `tick` has something to do next (None: no frame waits)."""
        return min((q[0].deadline for q in self._waiting.values() if q), default=None)

    # -- inputs ----------------------------------------------------------------------------------

    def frame(self, conn: int, shard: int, raw: bytes, now: float) -> list[RouteAction]:
        """A group frame from the local connection `conn` (rule 1 and the table above)."""
        queue = self._waiting.get(shard)
        if queue is not None:
            if len(queue) >= self.max_waiting or \
                    self._bytes + len(raw) > self.max_waiting_bytes:
                return [CloseConns((conn,), FULL, shard)]  # bounded (G14): it tries again later
            queue.append(_Waiting(conn, raw, now + self.route_timeout))
            self._counted(shard, len(raw))
            self._park(conn, shard, 1)
            return []
        if shard in self._held:
            return [Dispatch(conn, raw)]
        lease = self._owner.get(shard)
        if lease is None or lease.node == self.node:  # nobody, or ours but not yet acquired
            if self._bytes + len(raw) > self.max_waiting_bytes:
                return [CloseConns((conn,), FULL, shard)]
            self._waiting[shard] = deque([_Waiting(conn, raw, now + self.route_timeout)])
            self._counted(shard, len(raw))
            self._park(conn, shard, 1)
            return []
        return [self._forward(conn, shard, lease.node, raw)]

    def acquired(self, shard: int) -> list[RouteAction]:
        """This node holds `shard` now: the frames waiting for it are its own."""
        self._held.add(shard)
        return self._drain(shard)

    def lost(self, shard: int) -> list[RouteAction]:
        """This node stopped serving `shard` (the driver drops its groups)."""
        self._held.discard(shard)
        return []

    def owner_changed(self, shard: int, old: Lease | None,
                      new: Lease | None) -> list[RouteAction]:
        """The lease machine's view of `shard` changed (rule 3, then the waiting frames go)."""
        if new is None:
            self._owner.pop(shard, None)
        else:
            self._owner[shard] = new
        out: list[RouteAction] = []
        if old is not None and old.node != self.node and (
                new is None or (new.node, new.term) != (old.node, old.term)):
            conns = self._routes.pop((old.node, shard), set())
            for conn in conns:
                routes = self._conn_routes.get(conn)
                if routes is not None:
                    routes.discard((old.node, shard))
            if conns:
                out.append(CloseConns(tuple(sorted(conns)), MOVED, shard))
        if new is not None and new.node != self.node:
            out += self._drain(shard)
        return out

    def conn_closed(self, conn: int, code: int = 1006, reason: str = "") -> list[RouteAction]:
        """The local connection `conn` is gone: the owners it was opened at hear of it, and
        its frames that still wait are dropped."""
        out: list[RouteAction] = [ClosedAt(owner, conn, code, reason)
                                  for owner in sorted(self._opened.pop(conn, ()))]
        for key in self._conn_routes.pop(conn, ()):
            conns = self._routes.get(key)
            if conns is not None:
                conns.discard(conn)
                if not conns:
                    del self._routes[key]
        for shard in self._parked.pop(conn, {}):
            self._keep(shard, deque(w for w in self._waiting[shard] if w.conn != conn))
        return out

    def link_lost(self, owner: str) -> list[RouteAction]:
        """Frames between this edge and `owner` were lost (a gap, or it did not answer): every
        connection opened there resumes (rule 3)."""
        conns = sorted(c for c, owners in self._opened.items() if owner in owners)
        return [CloseConns(tuple(conns), LINK_LOST)] if conns else []

    def tick(self, now: float) -> list[RouteAction]:
        """Frames that waited past their deadline: their connections are closed (rule 4)."""
        out: list[RouteAction] = []
        for shard, queue in list(self._waiting.items()):
            if not queue or queue[0].deadline > now:
                continue
            conns = {w.conn for w in queue if w.deadline <= now}
            for conn in conns:
                self._park(conn, shard, -sum(1 for w in queue if w.conn == conn))
            self._keep(shard, deque(w for w in queue if w.conn not in conns))
            out.append(CloseConns(tuple(sorted(conns)), NO_OWNER, shard))
        return out

    # -- rules -----------------------------------------------------------------------------------

    def _drain(self, shard: int) -> list[RouteAction]:
        """The shard has an owner: its waiting frames go, in order; the queue stops where it
        meets "no owner" again (rule 1)."""
        queue = self._waiting.get(shard)
        if queue is None:
            return []
        out: list[RouteAction] = []
        while queue:
            w = queue[0]
            if shard in self._held:
                out.append(Dispatch(w.conn, w.raw))
            else:
                lease = self._owner.get(shard)
                if lease is None or lease.node == self.node:
                    return out  # the owner went again: the rest keeps waiting
                out.append(self._forward(w.conn, shard, lease.node, w.raw))
            queue.popleft()
            self._counted(shard, -len(w.raw))
            self._park(w.conn, shard, -1)
        del self._waiting[shard]
        return out

    def _park(self, conn: int, shard: int, n: int) -> None:
        """Count `n` more (or fewer) frames of `conn` waiting for `shard`."""
        shards = self._parked.setdefault(conn, {})
        left = shards.get(shard, 0) + n
        if left > 0:
            shards[shard] = left
        else:
            shards.pop(shard, None)
            if not shards:
                del self._parked[conn]

    def _keep(self, shard: int, queue: deque[_Waiting]) -> None:
        self._counted(shard, sum(len(w.raw) for w in queue) - self._shard_bytes.get(shard, 0))
        if queue:
            self._waiting[shard] = queue
        else:
            del self._waiting[shard]

    def _counted(self, shard: int, n: int) -> None:
        """`n` more (or fewer) bytes wait for `shard`."""
        self._bytes += n
        left = self._shard_bytes.get(shard, 0) + n
        if left > 0:
            self._shard_bytes[shard] = left
        else:
            self._shard_bytes.pop(shard, None)

    def _forward(self, conn: int, shard: int, owner: str, raw: bytes) -> Forward:
        opened = self._opened.setdefault(conn, set())
        first = owner not in opened
        opened.add(owner)
        key = (owner, shard)
        self._routes.setdefault(key, set()).add(conn)
        self._conn_routes.setdefault(conn, set()).add(key)
        return Forward(owner, conn, raw, first)


__all__ = ["FULL", "LINK_LOST", "MAX_WAITING", "MOVED", "NO_OWNER", "CloseConns", "ClosedAt",
           "Dispatch", "EdgeRouter", "Forward", "RouteAction"]
