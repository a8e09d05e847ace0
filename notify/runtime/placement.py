"""The placement port: where a group lives, and how frames reach it and its members.

The asyncio server asks these questions of its placement, always, and never asks whether it
is in a cluster: `LocalPlacement` answers them for a server that owns every group; the
cluster (notify/cluster/node.py) answers them with shard leases, links between nodes and a
fenced log. So the server has no cluster branch, and the cluster is an adapter, not a mode.

A placement serves a `PlacementHost`: what it may ask of the server it runs in (its driver,
its local sockets, a new connection number for a connection another node's edge holds).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from notify.core.auth import Identity
from notify.runtime.driver import Driver

#: one metric a placement exports: (kind, name, help, value), or, with a label, the value per
#: label value; the server turns these into Prometheus families (`notify_<name>`)
Sample = tuple[Literal["gauge", "counter"], str, str, float | tuple[str, dict[str, int]]]
#: a client frame as received, or how to make its text (a frame of a `batch`, notify/wire.py:
#: made only by a placement that sends it on)
RawFrame = str | bytes | Callable[[], bytes]


@dataclass(frozen=True, slots=True)
class EdgeSession:
    """What a connection's hello presented and proved at the edge that holds its socket."""

    member: str | None
    #: the session token the hub gave it
    token: str | None
    #: the resume token its hello presented
    presented: str | None
    identity: Identity | None
    #: when the session was made (`Session.born`)
    born: float | None = None
    #: the trusted sender of one of the server's own connections (`api:NAME`: the server
    #: API's, `Hub.trust`); None for a client's
    trusted: str | None = None


class PlacementHost(Protocol):
    """The server, as a placement sees it."""

    @property
    def url(self) -> str: ...

    @property
    def driver(self) -> Driver: ...

    @property
    def draining(self) -> bool:
        """Its stop began (or it halted): what the placement's own tasks end with from now on
        may be the stop's."""

    def restore_all(self) -> None:
        """Bring back every group the log knows (this process owns them all)."""

    def new_conn_id(self) -> int:
        """A number for a connection another node's edge holds."""

    def is_local(self, conn: int) -> bool:
        """Is `conn`'s socket here?"""

    def edge_session(self, conn: int) -> EdgeSession | None: ...

    def dispatch_raw(self, conn: int, raw: bytes, *, remote: bool = False) -> None:
        """A client frame as received, for this node's driver (see `NotifyServer`)."""

    def push(self, conn: int, data: bytes, *, bounded: bool = True, frames: int = 1) -> None:
        """To a local connection's outbox."""

    def close(self, conn: int, code: int, reason: str, *, drain: bool) -> None:
        """Close a local connection."""

    def halt(self, reason: str) -> None:
        """Fail-stop (G13)."""

    async def answer(self, request: bytes) -> bytes:
        """An operation another node asked of this one as a group's owner (`ask_owner`)."""

    def revoked(self, user: str, at: float) -> None:
        """A disconnect of `user` at `at`, stored by any node: refuse the user's tokens issued
        until then and end its sessions here (once per revocation: a repeat is a no-op)."""


class NoOwner(Exception):
    """`ask_owner` found no node to answer: the group has no owner now (a failover), or its
    owner did not answer in time. The caller may try again."""


class Placement(Protocol):
    @property
    def ready(self) -> bool:
        """May traffic come here (`/readyz`)?"""

    async def start(self, host: PlacementHost) -> None:
        """Once the server listens (its `url` is known)."""

    async def release(self) -> None:
        """Graceful stop, before clients are told to go: hand every group over."""

    async def stop(self) -> None: ...

    def describe(self) -> dict[str, Any] | None:
        """`GET /cluster`: who owns what, as this node sees it (None: no such page)."""

    def route(self, conn: int, group: str, raw: RawFrame) -> bool:
        """A group frame from a local connection: True if it went (or waits to go) to another
        node, False if this node's driver takes it."""

    def owns(self, group: str) -> bool:
        """Whether this node serves `group` now (a load that finishes after its shard moved
        must not bring it back here: cluster review S5)."""

    def refuse(self, conn: int, group: str, raw: bytes, *, remote: bool) -> bool:
        """A group frame that reached this node's driver late (routed here by another edge,
        `remote`, or held for an owner): True if the group is not this node's any more (the
        placement sent it on, or told its edge)."""

    def closed(self, conn: int, code: int, reason: str) -> None:
        """A local connection closed."""

    def refreshed(self, conn: int, identity: Identity) -> None:
        """A local connection's token was refreshed."""

    def push(self, conn: int, data: bytes, *, bounded: bool = True, frames: int = 1) -> None:
        """To a connection whose socket is not here."""

    def close(self, conn: int, code: int, reason: str, *, drain: bool) -> None:
        """Close a connection whose socket is not here."""

    def samples(self) -> Sequence[Sample]:
        """Its metrics, read at scrape time."""

    async def ask_owner(self, group: str, request: bytes, timeout: float) -> bytes:
        """An operation for the node that owns `group` (the server API's removal, which must
        run where the group's members are), answered by that node's `PlacementHost.answer`;
        `NoOwner` when no node answers within `timeout`. Only for a group `owns` says is not
        this node's."""


class LocalPlacement:
    """Every group lives in this process: nothing is routed, every connection is local, and
    the groups the log knows come back at start."""

    ready = True

    async def start(self, host: PlacementHost) -> None:
        host.restore_all()

    async def release(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def describe(self) -> dict[str, Any] | None:
        return None

    def route(self, conn: int, group: str, raw: RawFrame) -> bool:
        return False

    def owns(self, group: str) -> bool:
        return True

    def refuse(self, conn: int, group: str, raw: bytes, *, remote: bool) -> bool:
        return False

    def closed(self, conn: int, code: int, reason: str) -> None:
        pass

    def refreshed(self, conn: int, identity: Identity) -> None:
        pass

    def push(self, conn: int, data: bytes, *, bounded: bool = True, frames: int = 1) -> None:
        pass  # a connection that is gone

    def close(self, conn: int, code: int, reason: str, *, drain: bool) -> None:
        pass

    def samples(self) -> Sequence[Sample]:
        return ()

    async def ask_owner(self, group: str, request: bytes, timeout: float) -> bytes:
        raise NoOwner("every group is this process's")  # (never asked: `owns` is always True)


__all__ = ["EdgeSession", "LocalPlacement", "NoOwner", "Placement", "PlacementHost", "Sample"]
