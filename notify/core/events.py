"""What the core is fed: client frames already validated at the edge, plus connection events.

Frozen dataclasses with slots; the server adapter builds them from pydantic wire models.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from notify.core.view import MemberId

#: A client's correlation id (DESIGN §3): a string or an integer (JSON-RPC style), bounded at the
#: edge (at most 256 characters; a signed 64-bit integer). The core never looks inside it; it only
#: echoes it, exactly as sent, in the replies and errors about that request.
Req = str | int


class Order(StrEnum):
    FIFO = "fifo"
    TOTAL = "total"


class AcceptFrom(StrEnum):
    MEMBERS = "members"  # G6: never deliver messages from non-members (the default)
    ANY = "any"


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """Where a returning member's knowledge of the group log ends.

    `offset` is the log offset its knowledge starts after (the `offset` of the `view_install` it
    joined with, or of the last `catchup_done`); `streams` maps each stream it has received to the
    last `seq` it delivered. The server replays every message after `offset` that is not already
    covered by `streams`, so a member never gets a message twice nor misses one, even though
    different streams reach it out of offset order.
    """

    epoch: int
    offset: int
    streams: dict[str, int] = field(default_factory=dict)
    #: the last view the member installed: installs after it are replayed in their place
    view: int = 0
    #: the atomic messages it holds whose outcome it has not had (it lost the connection
    #: first): their outcomes are replayed first, from memory or, for those that left the
    #: window, as decided (`Topic.decided`)
    held: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Hello:
    """`member` names the user (development mode; with a token its `sub` does), `instance`
    the client instance of that user, if any (notify/core/users.py)."""

    protocol: int
    member: MemberId | None = None
    resume_session: str | None = None
    instance: str | None = None


@dataclass(frozen=True, slots=True)
class Join:
    req: Req
    group: str
    want_state: bool = False
    resume: ResumePoint | None = None
    accept_from: AcceptFrom = AcceptFrom.MEMBERS


@dataclass(frozen=True, slots=True)
class Leave:
    req: Req
    group: str


@dataclass(frozen=True, slots=True)
class Publish:
    req: Req
    group: str
    id: str
    view: int
    order: Order
    #: opaque to the core (never inspected, only carried): see `actions.Message.payload`
    payload: Any
    atomic: bool = False
    same_view: bool = False
    #: the payload's size in bytes, as the edge wrote it (retention counts bytes, G14)
    size: int = 0
    #: presence, cursors: to the current view's other members at most once, never stored,
    #: never replayed, no `published` answer (DESIGN §3)
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class Ping:
    """An application-level heartbeat (browsers cannot see WebSocket pings): answered `pong`,
    with the same `req` if it had one (a client can time the round trip)."""

    req: Req | None = None


@dataclass(frozen=True, slots=True)
class Ack:
    group: str
    offsets: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FlushOk:
    group: str
    view: int


@dataclass(frozen=True, slots=True)
class StateChunk:
    """A piece of a donor's snapshot for a joiner (G9); relayed as is. The last one carries the
    sha256 of the snapshot and the donor's per-stream positions when it took it."""

    group: str
    transfer: str
    index: int
    last: bool
    data: str
    sha256: str | None = None
    streams: dict[str, int] | None = None


@dataclass(frozen=True, slots=True)
class CheckpointChunk:
    """A piece of a member's checkpoint: its state after exactly the messages `position` covers,
    kept by the server so that a joiner still gets the state when no member can give it (an
    empty group, or a donor lost with nobody to replace it). The last chunk carries the sha256
    of the snapshot and the position."""

    req: Req
    group: str
    index: int
    last: bool
    data: str
    sha256: str | None = None
    position: ResumePoint | None = None


@dataclass(frozen=True, slots=True)
class History:
    """A page of the group's durable log, for one of its members: the messages after `after`
    (and before `before`, if given), at most `limit`, with the view installs between them.
    A member reads what a `catchup_log` told it the replay leaves out (a resume point older
    than the in-memory window, G8), or scrolls back (issue 30)."""

    req: Req
    group: str
    after: int
    before: int | None = None
    limit: int = 1000
    #: which messages the page holds, as for a join: "members" (the default) leaves out what
    #: non-members sent (G6). The member's own choice, read by itself (in a cluster the owner
    #: that answers may not have seen the resume that set its `accept_from` yet)
    accept_from: AcceptFrom = AcceptFrom.MEMBERS


ClientFrame = (
    Hello | Join | Leave | Publish | Ack | FlushOk | StateChunk | CheckpointChunk | Ping
    | History
)
