"""What the core returns: frames to send, messages to fan out, connections to close, log records.

Out-frames are frozen dataclasses whose fields are exactly the wire fields of DESIGN §3 (the `type`
field included), so the adapter serialises them with orjson as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from notify.core.checkpoint import Checkpoint
from notify.core.events import Req
from notify.core.view import MemberId

ConnId = int


@dataclass(frozen=True, slots=True)
class Message:
    """An accepted message: it has its place in the group log and in its stream."""

    group: str
    offset: int
    stream: str
    seq: int
    sender: MemberId
    view: int
    atomic: bool
    #: opaque to the core: from the server's edge, an `orjson.Fragment` of bytes checked and
    #: written once (notify/server/wire.py), which the log and every `deliver` reuse as they are
    payload: Any
    ts: float
    id: str
    from_member: bool = True


# --- server -> client frames -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Welcome:
    session: str
    member: MemberId
    heartbeat_ms: int
    limits: dict[str, int]
    resumed: bool
    type: str = field(default="welcome", init=False)


@dataclass(frozen=True, slots=True)
class Published:
    req: Req
    id: str
    offset: int
    type: str = field(default="published", init=False)


@dataclass(frozen=True, slots=True)
class Rejected:
    req: Req
    id: str
    code: str
    type: str = field(default="rejected", init=False)


@dataclass(frozen=True, slots=True)
class Outcome:
    id: str
    group: str
    offset: int
    committed: bool
    reason: str | None = None
    type: str = field(default="outcome", init=False)


@dataclass(frozen=True, slots=True)
class Confirm:
    group: str
    offsets: tuple[int, ...]
    type: str = field(default="confirm", init=False)


@dataclass(frozen=True, slots=True)
class Abort:
    group: str
    offsets: tuple[int, ...]
    reason: str
    type: str = field(default="abort", init=False)


@dataclass(frozen=True, slots=True)
class ViewChange:
    group: str
    proposed: int
    members: tuple[MemberId, ...]
    joining: tuple[MemberId, ...]
    leaving: tuple[MemberId, ...]
    reason: str
    type: str = field(default="view_change", init=False)


@dataclass(frozen=True, slots=True)
class ViewInstall:
    group: str
    view: int
    members: tuple[MemberId, ...]
    joined: tuple[MemberId, ...]
    left: tuple[MemberId, ...]
    epoch: int
    offset: int
    type: str = field(default="view_install", init=False)


@dataclass(frozen=True, slots=True)
class ViewResume:
    group: str
    view: int
    type: str = field(default="view_resume", init=False)


@dataclass(frozen=True, slots=True)
class CatchupDone:
    group: str
    offset: int
    count: int
    type: str = field(default="catchup_done", init=False)


@dataclass(frozen=True, slots=True)
class Error:
    code: str
    message: str
    req: Req | None = None
    type: str = field(default="error", init=False)


@dataclass(frozen=True, slots=True)
class Deliver:
    """One message as a `deliver` frame, for replay to a single member (resume, catch-up)."""

    group: str
    offset: int
    stream: str
    seq: int
    sender: MemberId
    view: int
    atomic: bool
    payload: Any
    ts: float
    type: str = field(default="deliver", init=False)

    @classmethod
    def of(cls, m: Message) -> Deliver:
        return cls(m.group, m.offset, m.stream, m.seq, m.sender, m.view, m.atomic, m.payload, m.ts)


@dataclass(frozen=True, slots=True)
class StateRequest:
    """To the donor: snapshot your state now, at this point of your event stream, and send it
    as `state_chunk`s of `transfer`."""

    group: str
    transfer: str
    joiner: MemberId
    offset: int
    type: str = field(default="state_request", init=False)


@dataclass(frozen=True, slots=True)
class StateChunkOut:
    group: str
    transfer: str
    index: int
    last: bool
    data: str
    sha256: str | None
    streams: dict[str, int] | None
    offset: int
    type: str = field(default="state_chunk", init=False)


@dataclass(frozen=True, slots=True)
class CheckpointStored:
    """To the member that sent a checkpoint: it is durable and now the group's latest."""

    req: Req
    group: str
    offset: int
    bytes: int
    type: str = field(default="checkpoint_stored", init=False)


OutFrame = (
    Welcome | Published | Rejected | Outcome | Confirm | Abort | ViewChange | ViewInstall
    | ViewResume | CatchupDone | Error | Deliver | StateRequest | StateChunkOut
    | CheckpointStored
)

# --- actions -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    conn: ConnId
    frame: OutFrame
    #: part of a replay to a member that resumes: one burst that says nothing about how fast
    #: the member reads, so it does not count toward its slow-consumer bound (G11)
    replay: bool = False


@dataclass(frozen=True, slots=True)
class Fanout:
    """Hand `message` to its stream's worker, which delivers it to `conns` (sender included).

    `reply` goes to the publisher once the message is safely stored (G10), before or with the
    fan-out; it is None for replays.
    """

    message: Message
    conns: tuple[ConnId, ...]
    reply: Send | None


@dataclass(frozen=True, slots=True)
class ServeCheckpoint:
    """Stream the stored `checkpoint` to `conn` as the `state_chunk`s of `transfer` (the
    snapshot's `offset` is the view boundary). The adapter reads it from storage chunk by chunk,
    off the event loop; the log replay that completes it was sent by the core."""

    conn: ConnId
    group: str
    transfer: str
    offset: int
    checkpoint: Checkpoint
    #: the joiner's join request (an error about its state carries it)
    req: Req


@dataclass(frozen=True, slots=True)
class AfterStreams:
    """Send `sends` in order once every stream of `group` has handed over all messages accepted
    before this action, and only then let the streams go on (DESIGN §4: `view_install` goes out
    behind all old-view messages, and no new-view message overtakes it)."""

    group: str
    sends: tuple[Send | ServeCheckpoint, ...]


@dataclass(frozen=True, slots=True)
class Close:
    conn: ConnId
    code: int
    reason: str


@dataclass(frozen=True, slots=True)
class StoreView:
    """Make this view durable before anyone hears of it (G1 across restarts). The whole
    install is kept, so that a restart can resend it to a member that missed it."""

    install: ViewInstall


@dataclass(frozen=True, slots=True)
class StoreOutcomes:
    """Record how atomic messages ended. An abort must be durable before the frames that follow
    this action leave (after a crash, an atomic with no stored outcome counts as committed)."""

    group: str
    offsets: tuple[int, ...]
    committed: bool


@dataclass(frozen=True, slots=True)
class LogEvent:
    """A delivery event-log record (DESIGN §6); the adapter adds `node`."""

    event: str
    ts: float
    fields: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StoreCheckpointChunk:
    """Stage one chunk of checkpoint upload `upload` (not the group's checkpoint yet)."""

    group: str
    upload: str
    index: int
    data: str


@dataclass(frozen=True, slots=True)
class CommitCheckpoint:
    """Every chunk of `checkpoint` is staged: check the snapshot (sha256, compression), make it
    the group's latest, drop the one before, then feed `Hub.checkpoint_committed` (or answer
    `bad_checkpoint` to `conn`)."""

    group: str
    checkpoint: Checkpoint
    conn: ConnId
    req: Req


@dataclass(frozen=True, slots=True)
class DiscardCheckpoint:
    """Drop the staged chunks of an upload that will not complete."""

    group: str
    upload: str


Action = (
    Send | Fanout | AfterStreams | Close | StoreView | StoreOutcomes | LogEvent
    | ServeCheckpoint | StoreCheckpointChunk | CommitCheckpoint | DiscardCheckpoint
)
