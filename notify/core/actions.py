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
    #: written once (notify/wire.py), which the log and every `deliver` reuse as they are
    payload: Any
    ts: float
    id: str
    from_member: bool = True
    #: the payload's size in bytes (what `Limits.retain_bytes` counts)
    size: int = 0


# --- server -> client frames -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Welcome:
    session: str
    member: MemberId
    heartbeat_ms: int
    limits: dict[str, int]
    resumed: bool
    #: who the member is: its user, and its instance of that user (None: it named none)
    user: str
    instance: str | None
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
class RemovalInstall:
    """`view_install` as a member it removes without its asking gets it: the same fields, and
    `reason` (a `membership.Reason`: `removed` by the server API, `flush_timeout`...), so its
    SDK can say why (`Removed.reason`). Everyone else gets the plain `ViewInstall`."""

    group: str
    view: int
    members: tuple[MemberId, ...]
    joined: tuple[MemberId, ...]
    left: tuple[MemberId, ...]
    epoch: int
    offset: int
    reason: str
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
    #: `offset_unavailable` for a point older than retention: how many messages it dropped
    #: after the point (None otherwise)
    lost: int | None = None
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
class CatchupLog:
    """To a member that resumes or rejoins from a point older than the group's in-memory
    window, but within the log's retention (G8): the messages after `after` and before
    `before`, and the installs between, are not in the replay that follows; the member reads
    them with `history` requests. Its views among those installs are the ones after `view`
    (it was not in the earlier ones: it joined again since). Everything sent after this frame
    (the replay from `before`, then live frames) comes later in the log than they do."""

    group: str
    after: int
    before: int
    view: int
    type: str = field(default="catchup_log", init=False)


@dataclass(frozen=True, slots=True)
class HistoryPage:
    """The answer to `history`: the messages of the page (`deliver` frames, those the member's
    `accept_from` admits), the installs among them, which atomic ones were aborted, and `end`,
    the offset it covers up to (the next page's `after`). `first` is the oldest offset the log
    still retains (`after + 1 < first`: retention dropped what lay between), `head` its newest
    stored one. No page holds an atomic message whose outcome is not decided yet."""

    req: Req
    group: str
    epoch: int
    messages: tuple[Deliver, ...]
    installs: tuple[ViewInstall, ...]
    aborted: tuple[int, ...]
    end: int
    first: int
    head: int
    type: str = field(default="history_page", init=False)


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


@dataclass(frozen=True, slots=True)
class Ephemeral:
    """An ephemeral publish (presence, cursors): to the current view's members but its sender,
    at most once; it has no offset or seq because it is in no log and no stream."""

    group: str
    sender: MemberId
    view: int
    payload: Any
    ts: float
    type: str = field(default="ephemeral", init=False)


@dataclass(frozen=True, slots=True)
class Pong:
    """The answer to `ping` (`req` as the ping had it, or null)."""

    req: Req | None = None
    type: str = field(default="pong", init=False)


OutFrame = (
    Welcome | Published | Rejected | Outcome | Confirm | Abort | ViewChange | ViewInstall
    | RemovalInstall | ViewResume | CatchupDone | Error | Deliver | StateRequest | StateChunkOut
    | CheckpointStored | Ephemeral | Pong | CatchupLog | HistoryPage
)

# --- actions -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Send:
    conn: ConnId
    frame: OutFrame
    #: part of a replay to a member that resumes: one burst that says nothing about how fast
    #: the member reads, so it does not count toward its slow-consumer bound (G11)
    replay: bool = False
    #: speaks only of what is stored already, and changes nothing storage must keep (the
    #: commit of a delivered atomic message: commits are never stored): it may leave ahead of
    #: the frames held behind a write under way (notify/core/writes.py)
    overtakes: bool = False


@dataclass(frozen=True, slots=True)
class Fanout:
    """Deliver `message` to `conns` (the sender's own connection included), then answer the
    publisher with `reply`. The core emits it only once the message is durable (G10), so the
    adapter sends it as it is, serialising the `deliver` frame once for every recipient."""

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
class ReadHistory:
    """Read a page of `group`'s log for `conn` (its `history` request), off the event loop,
    and answer it with a `HistoryPage`: messages after `after` and before `before` (bounded by
    the group: never an atomic message still undecided), at most `limit` and about `max_bytes`
    of payload; with `accept_any` False, none a non-member sent (G6)."""

    conn: ConnId
    req: Req
    group: str
    epoch: int
    after: int
    before: int
    limit: int
    max_bytes: int
    accept_any: bool


@dataclass(frozen=True, slots=True)
class Close:
    conn: ConnId
    code: int
    reason: str


@dataclass(frozen=True, slots=True)
class Append:
    """Store `messages` (consecutive offsets of one group) in one transaction, then feed
    `Hub.written(group, ticket, error)`. Until then the group holds every frame it decides
    (see notify/core/writes.py); a failed append is retracted, its publishers refused."""

    group: str
    ticket: int
    messages: tuple[Message, ...]


@dataclass(frozen=True, slots=True)
class StoreView:
    """Make a view install durable, with the atomic messages it aborted, before anyone hears
    of it (G1 across restarts: a version is never reused; G5: after a crash an atomic message
    with no stored abort counts as committed, so an abort is stored before it is sent). The
    whole install is kept so a restart can resend it to a member that missed it. A failure
    is fatal: the core answers it with `Halt`."""

    ticket: int
    install: ViewInstall
    aborted: tuple[int, ...] = ()

    @property
    def group(self) -> str:
        return self.install.group


Write = Append | StoreView


@dataclass(frozen=True, slots=True)
class Halt:
    """Stop the process (fail-stop, G13): the server can no longer keep a promise (a view or
    an abort it cannot store, storage that stopped answering). A restart recovers from the
    log with nothing published lost (G10)."""

    reason: str


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
    Send | Fanout | Close | Append | StoreView | Halt | LogEvent
    | ServeCheckpoint | StoreCheckpointChunk | CommitCheckpoint | DiscardCheckpoint
    | ReadHistory
)
