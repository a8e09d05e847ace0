"""The client's side of the protocol, sans I/O: fed server frames, it returns application events
and the frames to send back.

Theory of operation (DESIGN §3–§4, seed 003 §3.1):
- On `view_change` a group stops sending (publishes wait), ACKs every atomic message it holds,
  then answers `flush_ok`. On `view_install` or `view_resume` it sends again.
- Atomic messages are ACKed on receipt and held back until `confirm`; every later message of the
  same stream waits behind them, so the application sees a stream in order and never sees an
  aborted message (G5).
- It remembers, per stream, the last `seq` received: that, with the log offset its knowledge
  starts after, is the resume point it presents when it comes back (G7, G8).
- A resume point the server refuses (`offset_unavailable`: another epoch or out of retention;
  `bad_resume`; any other code) cannot be served by any later attempt: the caller joins afresh
  (`join_afresh`), the group forgets its old stream, and the install of the new membership is
  preceded by one `Reset` event, so the application knows to rebuild what it derived.
- A frame it cannot make sense of raises `ProtocolViolation`, carrying the events and replies of
  the frames before it (a `batch` may be cut short): nothing the state already counts is lost.
- A `catchup_log` (a resume point older than the server's in-memory window, G8) opens a gap
  that the protocol reads from the log with `history` requests, page by page, while it goes on
  acting on what comes behind the gap, whose events wait for the application until the gap
  is read (`client_sdk.catchup`).
- The requests the application waits for (joins, leaves, publishes, checkpoints, token
  refreshes), the matching of replies to them and the refusal policy are sans-I/O too: see
  `client_sdk.requests`. Every host says `hello()` and, after a reconnect, `rejoin_all()`
  through the protocol, so one rule serves the SDK, the simulator and the replay.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from client_sdk.catchup import PAGE_RETRIES, Gap
from client_sdk.errors import GapUnreadable as GapUnreadable  # (re-exported: hosts catch them)
from client_sdk.errors import GroupLeftError, NotifyError, PublishRejected, ServerRefused
from client_sdk.errors import ProtocolViolation as ProtocolViolation
from client_sdk.events import (
    CaughtUp,
    CheckpointStored,
    GroupEvent,
    Message,
    Outcome,
    Published,
    Refreshed,
    Rejected,
    Removed,
    Reply,
    Reset,
    ServerError,
    StateReceived,
    StateRequested,
    ViewChanging,
    ViewInstalled,
    ViewResumed,
)
from client_sdk.options import PublishResult
from client_sdk.presence import member_id, user_of
from client_sdk.requests import (
    FINAL_JOIN_REFUSALS,
    JOIN_RETRIES,
    LEFT_LEAVE_REFUSALS,
    REFRESH_REFUSALS,
    RESENT_PUBLISH_REFUSALS,
    RETRIED_JOIN_REFUSALS,
    Answer,
    JoinedAfresh,
    PendingPublish,
    RequestKind,
    RequestOutput,
    Requests,
    RetryJoin,
    StrayError,
)
from state_transfer import Assembler, Chunk, ChunkError
from state_transfer.position import includes

Frame = dict[str, Any]

#: the wire protocol's version, said in `hello`
PROTOCOL_VERSION = 1


def hello_frame(member: str, *, token: str | None = None,
                resume_session: str | None = None, instance: str | None = None) -> Frame:
    """The `hello` that opens a connection (DESIGN §3): `member` names the user, `instance`
    this client instance of it (client_sdk/presence.py); with `resume_session`, the server
    resumes that session (G7) if it still has it."""
    hello: Frame = {"type": "hello", "protocol": PROTOCOL_VERSION, "member": member}
    if instance is not None:
        hello["instance"] = instance
    if token is not None:
        hello["token"] = token
    if resume_session:
        hello["resume_session"] = resume_session
    return hello


class GroupPhase(StrEnum):
    JOINING = "joining"
    ACTIVE = "active"
    FLUSHING = "flushing"
    LEFT = "left"


@dataclass(frozen=True, slots=True)
class _Refusal:
    """Why a group was joined afresh, and where its old stream ended."""

    reason: str
    epoch: int
    offset: int
    lost: int | None = None


@dataclass(frozen=True, slots=True)
class Rejoin:
    """A join `rejoin_all()` queued: its `req`, its group, and whether it presents a resume
    point (False: the group had none, it joins afresh)."""

    req: str
    group: str
    resume: bool


@dataclass(slots=True)
class _Stream:
    received: int = 0  # last seq that arrived
    held: deque[Message] = field(default_factory=deque)


@dataclass(slots=True)
class GroupProtocol:
    name: str
    phase: GroupPhase = GroupPhase.JOINING
    view: int = 0
    members: tuple[str, ...] = ()
    epoch: int = 0
    #: the log offset this member's knowledge starts after (install or catch-up point)
    base: int = 0
    #: the highest offset of a message received (where its knowledge of the log ends)
    top: int = 0
    proposed: int | None = None
    streams: dict[str, _Stream] = field(default_factory=dict)
    #: offset -> resolution (None = waiting) of atomic messages held back
    atomic: dict[int, bool | None] = field(default_factory=dict)
    duplicates: int = 0
    want_state: bool = False
    #: the `accept_from` of this member's joins of the group (a rejoin presents it again)
    accept_from: str = "members"
    #: the `req` of the join under way (the error that refuses it echoes it), and whether that
    #: join presents a resume point
    join_req: str = ""
    resuming: bool = False
    #: joined afresh after a refused resume: the `Reset` to hand over before the next install
    refusal: _Refusal | None = None
    #: while a joiner waits for its snapshot: the events that come after it (None: not waiting)
    state_buffer: list[GroupEvent] | None = None
    #: ... and, for a state served from a checkpoint, the messages that complete it: those at or
    #: below the view boundary (`state_boundary`), keyed by (stream, seq)
    state_replay: dict[tuple[str, int], Message] = field(default_factory=dict)
    state_boundary: int = 0
    assembler: Assembler | None = None
    transfer: str = ""
    #: what a `catchup_log` left out, while it is read from the log (None: no gap)
    gap: Gap | None = None

    def resume_point(self) -> dict[str, Any]:
        gap = self.gap
        if gap is not None:  # what the application has been handed: the gap's frontier
            return {"epoch": self.epoch, "offset": gap.after, "view": gap.view,
                    "streams": dict(gap.streams)}
        return {"epoch": self.epoch, "offset": self.base, "view": self.view,
                "streams": {k: s.received for k, s in self.streams.items() if s.received}}

    def saved_point(self) -> dict[str, Any]:
        """A resume point to keep beyond this process: it stops before any message still held
        back (an unconfirmed atomic and what waits behind it), so a later process gets those
        again and learns their outcome, instead of skipping them. During a gap the point is its
        frontier, and only what was held before the gap is taken off it (what came behind the
        gap is not in the frontier)."""
        point = self.resume_point()
        streams: dict[str, int] = point["streams"]
        gap, lowest = self.gap, None
        for k, s in self.streams.items():
            for m in s.held:
                if gap is not None and m.offset not in gap.held_before:
                    continue
                lowest = m.offset if lowest is None else min(lowest, m.offset)
                streams[k] -= 1
                if not streams[k]:
                    del streams[k]
        if lowest is not None:
            point["offset"] = min(point["offset"], lowest - 1)
        return point

    def snapshot_point(self, base: int, delivered: dict[str, int]) -> dict[str, Any]:
        """The position of a snapshot taken when the application has been handed every message
        at or below `base` and, per stream, up to `delivered`: it stops before any message still
        held back (an atomic replayed before a `catchup_done` may be unresolved while `base` is
        already past it), so a member restoring it gets those messages instead of missing them."""
        held = [m.offset for st in self.streams.values() for m in st.held]
        offset = min(base, min(held) - 1) if held else base
        return {"epoch": self.epoch, "offset": offset, "view": self.view,
                "streams": dict(delivered)}

    def restore_point(self, point: dict[str, Any]) -> None:
        """Start from a point saved by `saved_point()`."""
        self.epoch, self.base = int(point["epoch"]), int(point["offset"])
        self.view = int(point.get("view", 0))
        self.streams = {k: _Stream(received=int(v)) for k, v in point.get("streams", {}).items()}

    @property
    def can_send(self) -> bool:
        return self.phase is GroupPhase.ACTIVE


def _malformed(f: Frame, e: Exception) -> ProtocolViolation:
    return ProtocolViolation(f"malformed frame from the server ({e!r}): {str(f)[:200]}")


def _message(group: str, f: Frame) -> Message:
    return Message(group, f["offset"], f["stream"], f["seq"], f["sender"], f["view"], f["atomic"],
                   f.get("payload"), f["ts"])


class ClientProtocol:
    """All groups of one client connection."""

    def __init__(self, member: str, instance: str | None = None) -> None:
        #: the user (with authentication the server takes the token's `sub`) and this client's
        #: instance of it; `me` is the member id views list: `user#instance`, or `user`
        self.user, self.instance = member, instance
        self.me = member_id(member, instance)
        self.groups: dict[str, GroupProtocol] = {}
        #: the session the server gave (`welcome`): a `hello(resume=True)` presents it
        self.session: str | None = None
        self.requests = Requests()
        self._out: list[Frame] = []
        self._acks: dict[str, list[int]] = {}

    # -- the connection --------------------------------------------------------------------------

    def hello(self, resume: bool = False, *, token: str | None = None) -> Frame:
        """The `hello` frame that opens a connection (the host sends it first, before any
        frame of `data_to_send()`). `resume=True` presents the session of the last `welcome`
        received, if any (G7: the server resumes it, with no view change, if it still has
        it); then call `rejoin_all()`."""
        return hello_frame(self.user, token=token, instance=self.instance,
                           resume_session=self.session if resume else None)

    def take_instance(self, instance: str) -> None:
        """Become another instance of the same user: after a clash (another connection claimed
        this one, close 4002), so as never to reconnect into it. The session is the other
        connection's now, so the next hello starts a new one, and `rejoin_all()` joins each
        group afresh from its resume point (a new member, caught up from where this one was).
        Publishes still unanswered fail with `PublishRejected("replaced")`."""
        self.instance, self.me, self.session = instance, member_id(self.user, instance), None
        # A publish still unanswered may be stored under the old instance: sent again under
        # this one (its ids are per instance) it could be delivered twice. Its outcome is
        # unknown, and the application is told so rather than risk that.
        q = self.requests
        for group in {p.group for p in q.publishes.values()}:
            q.fail_publishes(group, PublishRejected("replaced"), sent_too=True)

    def rejoin_all(self, new_req: Callable[[], str] | None = None) -> list[Rejoin]:
        """After a reconnect: queue a join of every group not left (nor abandoned), with its
        resume point and its own `accept_from`, or afresh when it has no resume point (never
        installed, or refused). A group with a leave still waiting (asked while away, or lost
        with the connection) is not joined again: only its leave is sent again (C6: the server
        may have the leave already, and a join then would let the member in again after it; the
        install that removes it, or `not_member`, answers). What was queued before is dropped:
        it was for the old connection, and the rejoin replaces it (ACKs are sent again at the
        install or resume), except the frames of a checkpoint still waiting, queued after the
        joins. `new_req` makes each join's req (default: `new_req("r")`). Returns the joins
        queued, in order."""
        q = self.requests
        kept = [f for f in self._out if f["type"] == "checkpoint" and f["req"] in q.checkpoints]
        self._out, self._acks = [], {}
        rejoins: list[Rejoin] = []
        for name, g in list(self.groups.items()):
            if g.gap is not None:  # (a host that did not say `connection_lost`)
                self._abandon_gap(g)
            if g.phase is GroupPhase.LEFT or name in q.abandoned:
                continue
            q.join_retries.pop(name, None)
            leave = q.leaves.get(name)
            if leave is not None:
                self.leave(leave, name)
                continue
            req = new_req() if new_req is not None else q.new_req("r")
            self.join(req, name, resume=True, accept_from=g.accept_from)
            rejoins.append(Rejoin(req, name, g.resuming))
        self._out.extend(kept)
        return rejoins

    def connection_lost(self) -> None:
        """The connection is gone: every unanswered publish is sent again (same id) after the
        next `rejoin_all()`; a checkpoint under way fails (part of it may be lost)."""
        q = self.requests
        for p in q.publishes.values():
            p.sent = False
        q.unsent = True
        for g in self.groups.values():
            if g.gap is not None:  # read again from its frontier, after the resume
                self._abandon_gap(g)
        for req in q.checkpoints:
            q.out.append(Answer(RequestKind.CHECKPOINT, req, error=NotifyError(
                "connection lost during the checkpoint; take it again")))
        q.checkpoints.clear()

    def new_req(self, prefix: str = "r") -> str:
        """A request id (see `Requests.new_req`)."""
        return self.requests.new_req(prefix)

    def answers(self) -> list[RequestOutput]:
        """What the requests opened through the protocol came to since the last call: one
        `Answer` per request that is over, and instructions for the host (`RetryJoin`,
        `JoinedAfresh`, `StrayError`). A host that opens requests drains it after every call
        that may answer one (`receive`, `connection_lost`, `rejoin_all`...)."""
        q = self.requests
        out, q.out = q.out, []
        return out

    def close(self) -> None:
        """Forget every request under way (the host fails what waits for them)."""
        self.requests.close()

    # -- requests the application waits for --------------------------------------------------

    def open_join(self, group: str, *, req: str | None = None, accept_from: str = "members",
                  want_state: bool = False, resume_from: dict[str, Any] | None = None,
                  state_provider: bool = False) -> str:
        """The application joins `group` and waits for the first install that has this member
        (`Answer(JOIN, group, ViewInstalled)`, or a `ServerRefused` error). From now on the
        refusal policy applies to the group's joins (`state_provider`: a join afresh asks for
        state). Returns the join's req."""
        q = self.requests
        q.in_use = True
        q.abandoned.discard(group)
        q.held[group] = state_provider
        q.joins.add(group)
        q.join_retries.pop(group, None)
        req = req if req is not None else q.new_req("j")
        self.join(req, group, accept_from=accept_from, resume_from=resume_from,
                  want_state=want_state)
        return req

    def give_up_join(self, group: str, *, timed_out: bool) -> None:
        """The application stopped waiting for its join of `group` (and dropped the handle).
        `timed_out`: the join may still be installed; if it is, the protocol leaves at once."""
        q = self.requests
        q.held.pop(group, None)
        q.joins.discard(group)
        if timed_out:
            q.abandoned.add(group)

    def join_refused(self, group: str) -> None:
        """The server refused a join of `group` that presented no resume point: the group is
        over for this member (phase LEFT); join again to come back."""
        g = self.groups.get(group)
        if g is not None:
            g.phase = GroupPhase.LEFT

    def retry_join(self, group: str, req: str) -> bool:
        """(After a `RetryJoin`'s delay.) Send the join `req` of `group` again, with its resume
        point, unless the group was installed, left or joined again since; returns whether it
        did."""
        g = self.groups.get(group)
        if g is None or g.phase is not GroupPhase.JOINING or g.join_req != req:
            return False
        self.join(self.requests.new_req("r"), group, resume=True, accept_from=g.accept_from)
        return True

    def open_leave(self, group: str, *, req: str | None = None) -> str:
        """Leave `group`; answered (`Answer(LEAVE, group)`) by the install without this
        member, or refused. Returns the req."""
        q = self.requests
        q.in_use = True
        req = req if req is not None else q.new_req("l")
        q.leaves[group] = req
        self.leave(req, group)
        return req

    def forget_leave(self, group: str, req: str) -> None:
        """The application stopped waiting for the leave `req` (its deadline passed): the group
        is given up, as a join that timed out is (`give_up_join`): not rejoined after a
        reconnect, and left again if the server installs it with this member."""
        if self.requests.leaves.get(group) == req:
            del self.requests.leaves[group]
            self.give_up_join(group, timed_out=True)

    def open_publish(self, group: str, publish_id: str, payload: Any, *, order: str = "fifo",
                     atomic: bool = False, same_view: bool = False,
                     req: str | None = None) -> PendingPublish:
        """Queue a publish: sent by `data_to_send()` once the group can send, and again (same
        id) after a lost connection or a `view_changing` refusal, until answered
        (`Answer(PUBLISH, publish_id, PublishResult)` or an error)."""
        q = self.requests
        q.in_use = True
        frame = self.publish_frame(req if req is not None else q.new_req("p"), group,
                                   publish_id, payload, order=order, atomic=atomic,
                                   same_view=same_view)
        p = q.publishes[publish_id] = PendingPublish(group, frame, atomic)
        q.unsent = True
        return p

    def forget_publish(self, publish_id: str) -> None:
        """The application stopped waiting (its deadline): never sent again; a reply that
        still comes is ignored."""
        self.requests.publishes.pop(publish_id, None)

    def open_checkpoint(self, group: str, chunks: list[Chunk], position: dict[str, Any], *,
                        req: str | None = None) -> str:
        """`checkpoint()`, answered by `checkpoint_stored` (`Answer(CHECKPOINT, req, ...)`).
        Returns the req."""
        q = self.requests
        q.in_use = True
        req = req if req is not None else q.new_req("c")
        q.checkpoints.add(req)
        self.checkpoint(req, group, chunks, position)
        return req

    def forget_checkpoint(self, req: str) -> None:
        self.requests.checkpoints.discard(req)

    def open_refresh(self, token: str) -> str:
        """Present a new token; answered (`Answer(REFRESH, key)`) by `refreshed`, by a refusal,
        or by the next `welcome` (a reconnect's hello carries the new token). Returns its
        key."""
        q = self.requests
        q.in_use = True
        key = q.new_req("t")
        q.refreshes.append(key)
        self.send({"type": "refresh", "token": token})
        return key

    def forget_refresh(self, key: str) -> None:
        if key in self.requests.refreshes:
            self.requests.refreshes.remove(key)

    # -- requests from the application -----------------------------------------------------------

    def join(self, req: str, group: str, *, want_state: bool = False,
             accept_from: str | None = None, resume: bool = False,
             resume_from: dict[str, Any] | None = None) -> None:
        """Queue a join. `resume=True` presents this group's own resume point; `resume_from`
        presents one saved earlier (`GroupProtocol.resume_point()`, e.g. by a previous
        process of the same member). `accept_from` defaults to the group's own with
        `resume=True`, "members" otherwise."""
        g = self.groups.get(group)
        if accept_from is None:
            accept_from = g.accept_from if resume and g is not None else "members"
        frame: Frame = {"type": "join", "req": req, "group": group, "want_state": want_state,
                        "accept_from": accept_from}
        if resume_from is not None:
            g = self.groups[group] = GroupProtocol(group, want_state=want_state, join_req=req,
                                                   accept_from=accept_from)
            g.restore_point(resume_from)
            frame["resume"] = g.resume_point()
            g.resuming = True
            self._out.append(frame)
            return
        if resume and g is not None and g.epoch:
            frame["resume"] = g.resume_point()
            held = sorted(o for o, outcome in g.atomic.items() if outcome is None)
            if held:  # their outcomes come first (those that left the server's window too)
                frame["resume"]["held"] = held
        elif resume and g is not None:  # nothing to resume (never installed, or refused)
            frame["want_state"] = g.want_state
        if g is None or not resume:
            g = self.groups[group] = GroupProtocol(group, want_state=want_state, join_req=req,
                                                   accept_from=accept_from)
        else:
            g.phase, g.join_req, g.accept_from = GroupPhase.JOINING, req, accept_from
        g.resuming = "resume" in frame
        self._out.append(frame)

    def join_afresh(self, req: str, group: str, reason: str, *, want_state: bool = False,
                    accept_from: str | None = None, lost: int | None = None) -> None:
        """The server refused this group's resume point (`reason`, its error code): join
        without one (`accept_from`: the group's own by default). The old stream is over: what
        is held back of it is dropped (it cannot be confirmed in a log that no longer has it),
        and the next install is preceded by a `Reset`. A second refusal before that install
        keeps the first reason."""
        g = self.groups[group]
        if accept_from is None:
            accept_from = g.accept_from
        g.accept_from = accept_from
        if g.refusal is None:
            # `lost` counts the offsets after the point presented (`base`); those up to `top`
            # had reached this member already (their streams said so)
            end = max(g.base, g.top)
            g.refusal = _Refusal(reason, g.epoch, end,
                                 None if lost is None else max(0, g.base + lost - end))
        g.phase, g.join_req, g.resuming, g.want_state = GroupPhase.JOINING, req, False, want_state
        g.epoch = g.base = g.top = 0  # knowledge starts at the next install
        g.proposed = None
        g.streams.clear()
        g.atomic.clear()
        g.state_buffer, g.assembler, g.state_replay = None, None, {}
        self._acks.pop(group, None)
        self._out.append({"type": "join", "req": req, "group": group, "want_state": want_state,
                          "accept_from": accept_from})

    def leave(self, req: str, group: str) -> None:
        self._out.append({"type": "leave", "req": req, "group": group})

    def publish_frame(self, req: str, group: str, publish_id: str, payload: Any, *,
                      order: str = "fifo", atomic: bool = False, same_view: bool = False,
                      view: int | None = None) -> Frame:
        g = self.groups.get(group)
        stamp = view if view is not None else (g.view if g is not None else 0)
        return {"type": "publish", "req": req, "group": group, "id": publish_id, "view": stamp,
                "order": order, "atomic": atomic, "same_view": same_view, "payload": payload}

    def checkpoint(self, req: str, group: str, chunks: list[Chunk],
                   position: dict[str, Any]) -> None:
        """Queue a checkpoint: an encoded snapshot that includes exactly the messages
        `position` (a resume point) covers."""
        for c in chunks:
            frame: Frame = {"type": "checkpoint", "req": req, "group": group, "index": c.index,
                            "last": c.last, "data": c.data}
            if c.last:
                frame["sha256"], frame["position"] = c.sha256, position
            self._out.append(frame)

    def send(self, frame: Frame) -> None:
        self._out.append(frame)

    def has_output(self) -> bool:
        """Whether `data_to_send()` would return anything (publishes waiting for their group
        aside: see `requests.unsent`)."""
        return bool(self._acks or self._out)

    def data_to_send(self) -> list[Frame]:
        """Frames to write, ACKs first (they must precede any flush_ok queued after them), then
        the publishes waiting whose group can send, in the order they were opened."""
        if self.requests.unsent:
            self._queue_publishes()
        out = [{"type": "ack", "group": g, "offsets": offs} for g, offs in self._acks.items()]
        self._acks.clear()
        out.extend(self._out)
        self._out = []
        return out

    def _queue_publishes(self) -> None:
        """Queue every waiting publish whose group accepts sends, in order. (Only when some may
        be unsent: a publisher with a thousand in flight must not walk them all for every
        answer it receives.)"""
        q = self.requests
        held = False
        for p in q.publishes.values():
            if p.sent:
                continue
            g = self.groups.get(p.group)
            if g is None or not g.can_send:
                held = True
                continue
            if not p.frame["same_view"] and p.frame["view"] > g.view:
                p.frame["view"] = g.view  # stamped in a view of a log that was reset
            self._out.append(p.frame)
            p.sent = True
        q.unsent = held

    # -- frames from the server ------------------------------------------------------------------

    def receive(self, frame: Frame) -> tuple[list[GroupEvent], list[Reply]]:
        """Events for the application and replies to requests, from one server frame. Raises
        `ProtocolViolation` (with what the frames before the bad one produced) when the frame
        breaks the protocol or is malformed."""
        events: list[GroupEvent] = []
        replies: list[Reply] = []
        try:
            self._receive_frames(frame, events, replies)
        except ProtocolViolation as e:
            if replies and self.requests.in_use:
                self._match_replies(replies, events)
            e.events, e.replies = events, replies
            raise
        if replies and self.requests.in_use:
            self._match_replies(replies, events)
        return events, replies

    def _receive_frames(self, frame: Frame, events: list[GroupEvent],
                        replies: list[Reply]) -> None:
        """One frame, or each frame of a `batch` (nested ones too) in order. The hot path (a
        batch of `deliver`s) makes no list and no generator per frame: a message goes straight
        to `events`, or to its group's state buffer (`_deliver` routes it)."""
        if frame.get("type") != "batch":
            self._receive_one(frame, events, replies)
            return
        inner = frame.get("frames")
        if not isinstance(inner, list):
            raise ProtocolViolation(f"a batch without frames: {str(frame)[:200]}")
        deliver = self._deliver
        for f in inner:
            if not isinstance(f, dict):
                raise ProtocolViolation(f"a batch holding a non-object: {str(f)[:200]}")
            kind = f.get("type")
            if kind == "deliver":  # the hot path, without `_receive_one`'s frame
                try:
                    deliver(f, events)
                except (KeyError, TypeError, ValueError, AttributeError) as e:
                    raise _malformed(f, e) from e
            elif kind == "batch":
                self._receive_frames(f, events, replies)
            else:
                self._receive_one(f, events, replies)

    def _receive_one(self, f: Frame, events: list[GroupEvent], replies: list[Reply]) -> None:
        try:
            kind = f.get("type")
            if kind == "deliver":
                self._deliver(f, events)
                return
            if kind == "confirm" or kind == "abort":
                g = self.groups.get(f["group"])
                if g is not None and g.gap is None and g.state_buffer is None:
                    # what `_route` would do with what they release: the application's now
                    self._decide(g, f["offsets"], kind == "confirm", events)
                    return
            if kind == "history_page":  # for the application now, ahead of the gap
                self._history_page(f, events)
                return
            raw: list[GroupEvent] = []
            try:
                self._receive(f, raw, replies)
            finally:
                # Routed frame by frame: within one batch the install, later messages and the
                # snapshot's last chunk may all come, and what follows the install must wait.
                self._route(raw, events)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise _malformed(f, e) from e

    def _route(self, raw: list[GroupEvent], events: list[GroupEvent]) -> None:
        """A joiner waiting for its state keeps what comes after its install (G9); a member
        reading a gap from the log, what comes behind the gap."""
        for ev in raw:
            g = self.groups.get(ev.group)
            if g is not None and g.gap is not None:
                if isinstance(ev, Removed):  # its gap is moot: a rejoin reads it again
                    self._abandon_gap(g)
                    events.append(ev)
                elif isinstance(ev, Message) and ev.offset in g.gap.held_before:
                    g.gap.held_before.discard(ev.offset)  # received before the gap
                    events.append(ev)
                else:
                    g.gap.events.append(ev)
            elif g is not None and g.state_buffer is not None and not isinstance(
                    ev, StateReceived | StateRequested | ViewInstalled | Removed | Reset):
                g.state_buffer.append(ev)
            else:
                events.append(ev)

    def _receive(self, f: Frame, events: list[GroupEvent], replies: list[Reply]) -> None:
        t = f.get("type")
        if t == "deliver":
            self._deliver(f, events)
        elif t == "confirm" or t == "abort":
            g = self.groups.get(f["group"])
            if g is not None:
                self._decide(g, f["offsets"], t == "confirm", events)
        elif t == "view_change":
            self._view_change(f, events)
        elif t == "view_install":
            self._view_install(f, events)
        elif t == "view_resume":
            g = self.groups.get(f["group"])
            if g is not None:
                if g.phase is GroupPhase.JOINING:  # our own resume: re-ACK what we hold
                    self._reack(g)
                g.phase, g.proposed = GroupPhase.ACTIVE, None
                resumed = ViewResumed(g.name, f["view"])
                events.append(resumed)
                q = self.requests
                if g.name in q.joins:  # a join with a resume point, answered by its session's
                    q.joins.discard(g.name)
                    q.out.append(Answer(RequestKind.JOIN, g.name, resumed))
        elif t == "catchup_done":
            g = self.groups.get(f["group"])
            if g is not None:
                # Everything up to `offset` has now been received: later resumes start there
                # (behind a gap: once the gap is read).
                if g.gap is not None:
                    g.gap.base = max(g.gap.base, f["offset"])
                else:
                    g.base = max(g.base, f["offset"])
                events.append(CaughtUp(g.name, f["offset"], f["count"]))
        elif t == "catchup_log":
            self._catchup_log(f)
        elif t == "published":
            replies.append(Published(f["req"], f["id"], f["offset"]))
        elif t == "rejected":
            replies.append(Rejected(f["req"], f["id"], f["code"]))
        elif t == "outcome":
            replies.append(Outcome(f["id"], f["group"], f["offset"], f["committed"],
                                   f.get("reason")))
        elif t == "state_request":
            events.append(StateRequested(f["group"], f["transfer"], f["joiner"], f["offset"]))
        elif t == "state_chunk":
            self._state_chunk(f, events)
        elif t == "refreshed":
            replies.append(Refreshed(f.get("expires")))
        elif t == "checkpoint_stored":
            replies.append(CheckpointStored(f["req"], f["group"], f["offset"], f["bytes"]))
        elif t == "error":
            reading = self._gap_of(f.get("req"))
            if reading is not None:  # a page refused: asked again, or given up
                self._ask_page(reading)
                return
            g = self.group_of_join(f.get("req"))
            if g is not None and f["code"] in ("state_unavailable", "state_too_large"):
                self._state_done(g, StateReceived(g.name, 0, None, f["code"]), events)
            else:
                replies.append(ServerError(f["code"], f["message"], f.get("req"),
                                           f.get("lost")))
        elif t == "welcome":
            self._welcome(f)

    def _deliver(self, f: Frame, events: list[GroupEvent]) -> None:
        g = self.groups.get(f["group"])
        if g is None or g.phase is GroupPhase.LEFT:
            return
        if g.state_buffer is not None and f["offset"] <= g.state_boundary:
            # Not news: part of the state (a checkpoint's completion, all resolved); it is
            # ordered and handed over with the snapshot, outside the stream bookkeeping.
            m = _message(g.name, f)
            g.state_replay[(m.stream, m.seq)] = m
            return
        stream = f["stream"]
        s = g.streams.get(stream)
        if s is None:
            s = g.streams[stream] = _Stream()
        seq, received = f["seq"], s.received
        if seq <= received:
            g.duplicates += 1
            return
        if received and seq != received + 1:
            raise ProtocolViolation(f"{g.name}/{stream}: seq {seq} after {received}")
        # `_message`, inlined: the hot path (`bench sdkrecv --handler` was slower with the calls
        # in a noisy comparison); a malformed frame raises here, before anything is counted
        m = Message(g.name, f["offset"], stream, seq, f["sender"], f["view"], f["atomic"],
                    f.get("payload"), f["ts"])
        if g.state_buffer is not None:
            events = g.state_buffer  # a joiner waiting for its state keeps it (G9)
        gap = g.gap
        if gap is not None:  # behind a gap being read: kept until the gap is
            events = gap.events
            if stream not in gap.ahead:
                gap.ahead[stream] = seq
        s.received = seq
        if m.offset > g.top:
            g.top = m.offset
        if m.atomic:
            # Held, and nothing is released by it: a stream's held messages start with an
            # undecided atomic one (`_release_stream` stops there, and only `confirm`/`abort`
            # decide one), and this one is undecided too.
            g.atomic[m.offset] = None
            acks = self._acks.get(g.name)
            if acks is None:
                self._acks[g.name] = [m.offset]
            else:
                acks.append(m.offset)
            s.held.append(m)
        elif s.held:
            s.held.append(m)
        else:
            events.append(m)

    def _decide(self, g: GroupProtocol, offsets: list[int], committed: bool,
                events: list[GroupEvent]) -> None:
        """A `confirm` (committed) or an `abort` of the atomic messages at `offsets`."""
        atomic = g.atomic
        for off in offsets:
            if off in atomic:
                atomic[off] = committed
        self._release(g, events)

    def _release(self, g: GroupProtocol, events: list[GroupEvent]) -> None:
        # (called with `raw`: `_route` puts what it releases in the state buffer if need be)
        for s in g.streams.values():
            if s.held:
                self._release_stream(g, s, events)

    @staticmethod
    def _release_stream(g: GroupProtocol, s: _Stream, events: list[GroupEvent]) -> None:
        held = s.held
        while held:
            m = held[0]
            if m.atomic:
                outcome = g.atomic.get(m.offset)
                if outcome is None:
                    return
                del g.atomic[m.offset]
                held.popleft()
                if outcome:
                    events.append(m)
            else:
                events.append(held.popleft())

    def _view_change(self, f: Frame, events: list[GroupEvent]) -> None:
        g = self.groups.get(f["group"])
        if g is None or g.phase is GroupPhase.LEFT:
            return
        g.phase, g.proposed = GroupPhase.FLUSHING, f["proposed"]
        events.append(ViewChanging(g.name, f["proposed"], tuple(f["members"]),
                                   tuple(f["joining"]), tuple(f["leaving"]), f["reason"]))
        # Every atomic message held is already ACKed (acks queued in data_to_send go first).
        self._out.append({"type": "flush_ok", "group": g.name, "view": f["proposed"]})

    def _view_install(self, f: Frame, events: list[GroupEvent]) -> None:
        g = self.groups.get(f["group"])
        if g is None:
            return
        members = tuple(f["members"])
        g.view, g.proposed = f["view"], None
        if self.me in f["left"] and self.me not in members:
            g.phase = GroupPhase.LEFT
            # why, when it did not ask to go (`removed` by the server API, `flush_timeout`...)
            reason = f.get("reason")
            events.append(Removed(g.name, f["view"], reason if isinstance(reason, str) else None))
            self._removed(g.name)
            return
        if g.phase is GroupPhase.JOINING and g.want_state:
            g.state_buffer = []  # everything after this install waits for the snapshot
            g.state_replay, g.state_boundary = {}, f["offset"]
        if g.phase is GroupPhase.JOINING and g.refusal is not None:
            r, g.refusal = g.refusal, None
            events.append(Reset(g.name, r.reason, r.epoch, r.offset, f["epoch"], f["offset"],
                                r.lost))
            if r.epoch != f["epoch"]:
                # The views their stamps name are gone with the old log: a `same_view`
                # publish cannot be checked against them, so it is refused, never misapplied.
                self.requests.fail_publishes(g.name, PublishRejected("stale_view"),
                                             same_view_only=True)
        if g.phase is GroupPhase.JOINING:
            if not g.epoch or g.epoch != f["epoch"] or g.want_state:
                # A fresh start: knowledge begins here
                g.streams.clear()
                g.atomic.clear()
                g.base = f["offset"]
            g.epoch = f["epoch"]
            self._reack(g)
        elif g.gap is not None:
            g.gap.base = max(g.gap.base, f["offset"])  # once the gap is read
        elif g.state_buffer is None:
            # A member of the view before: every message up to the install has reached it, so
            # a later resume point may start here (keeps it inside retention, G8).
            g.base = max(g.base, f["offset"])
        g.phase, g.members = GroupPhase.ACTIVE, members
        installed = ViewInstalled(g.name, f["view"], members, tuple(f["joined"]),
                                  tuple(f["left"]), f["offset"])
        events.append(installed)
        if self.requests.in_use:
            self._installed(installed)

    def group_of_join(self, req: str | None) -> GroupProtocol | None:
        """The group a join request (its `req`) was for."""
        if not req:
            return None
        return next((g for g in self.groups.values() if g.join_req == req), None)

    def _state_chunk(self, f: Frame, events: list[GroupEvent]) -> None:
        g = self.groups.get(f["group"])
        if g is None or g.state_buffer is None:
            return
        if g.assembler is None or f["transfer"] != g.transfer:  # a replacement donor restarts
            g.assembler, g.transfer = Assembler(), f["transfer"]
        try:
            snapshot = g.assembler.feed(f["index"], f["last"], f["data"], f.get("sha256"))
        except ChunkError as e:
            # Never a wrong state: nothing is restored, and what was buffered is dropped with it
            # (the application should leave and join again).
            g.state_buffer = []
            self._state_done(g, StateReceived(g.name, f["offset"], None, f"bad_transfer: {e}"),
                             events)
            return
        if snapshot is not None:
            # The snapshot's position: the streams it covers (state_transfer.position; its
            # offset part is the view boundary, below every message that can reach us here).
            covered = dict(f.get("streams") or {})
            # The replayed messages a checkpoint lacks, in log order (aborted ones were never
            # delivered, so a stream may skip their seqs, as it does live).
            completion = sorted((m for m in g.state_replay.values()
                                 if not includes(0, covered, m.offset, m.stream, m.seq)),
                                key=lambda m: m.offset)
            if g.state_buffer:
                # What the donor had applied when it took the snapshot is in it already.
                g.state_buffer = [e for e in g.state_buffer if not (
                    isinstance(e, Message) and includes(0, covered, e.offset, e.stream, e.seq))]
            g.state_buffer[:0] = completion
            for m in completion:
                covered[m.stream] = m.seq
            self._state_done(g, StateReceived(g.name, f["offset"], snapshot, None, covered),
                             events)


    @staticmethod
    def _state_done(g: GroupProtocol, received: StateReceived, events: list[GroupEvent]) -> None:
        buffered = g.state_buffer or []
        g.state_buffer, g.assembler, g.want_state = None, None, False
        g.state_replay = {}
        events.append(received)
        events.extend(buffered)

    # -- catch-up from the log (client_sdk/catchup.py) ----------------------------------------

    def _catchup_log(self, f: Frame) -> None:
        """`catchup_log`: the messages after `after` and before `before` are read from the log,
        a page at a time; what comes meanwhile waits for the application behind them. Every
        stream's position moves to the gap: what arrives behind it starts each stream afresh,
        and the gap's end checks that the two meet."""
        g = self.groups.get(f["group"])
        if g is None or g.phase is GroupPhase.LEFT:
            return
        if g.gap is not None:  # one per resume or rejoin, and a reconnect ends it
            raise ProtocolViolation(f"{g.name}: a catchup_log while one is being read")
        gap = Gap(g.name, g.epoch, f["after"], f["before"],
                  {k: s.received for k, s in g.streams.items() if s.received},
                  max(g.view, f["view"]),
                  held_before={m.offset for s in g.streams.values() for m in s.held})
        if gap.done:
            return
        for s in g.streams.values():
            s.received = 0  # (what is held back stays: it is older than what comes behind)
        g.gap = gap
        self._ask_page(g)

    def _gap_of(self, req: object) -> GroupProtocol | None:
        if not isinstance(req, str) or not req.startswith("h"):
            return None
        return next((g for g in self.groups.values() if g.gap is not None and g.gap.req == req),
                    None)

    def _history_page(self, f: Frame, events: list[GroupEvent]) -> None:
        g = self._gap_of(f.get("req"))
        if g is None:
            return  # for a gap given up (a lost connection, a removal): read again later
        gap = g.gap
        assert gap is not None
        gap.page(f, events)
        if gap.members is not None and gap.view > g.view:  # the log knew a later view
            g.view, g.members = gap.view, gap.members
        if not gap.done:
            self._ask_page(g)
            return
        gap.check_continuity()
        self._close_gap(g, events)

    def _ask_page(self, g: GroupProtocol) -> None:
        """Ask for the gap's next page, or the same again. A page refused (the log could not
        be read now; in a cluster, a node whose copy of the group is behind answered) or one
        that did not move on counts as a try: after `PAGE_RETRIES` the gap cannot be read on
        this connection, `GapUnreadable`, a protocol violation, so the host reconnects and
        resumes from the gap's frontier (nothing is skipped; a member that was removed learns
        it there)."""
        gap = g.gap
        assert gap is not None
        if gap.tries >= PAGE_RETRIES:
            raise GapUnreadable(f"{g.name}: its history was refused or did not move on past "
                                f"{gap.after}, {gap.tries} times; reconnect and resume")
        self._out.append(gap.request(self.requests.new_req("h"), g.accept_from))

    def _close_gap(self, g: GroupProtocol, events: list[GroupEvent]) -> None:
        """The gap is read: streams continue where what came behind it left them, and its
        events follow the history's; its `CaughtUp` (the replay's `catchup_done` comes before
        any page: the server sends it with the replay) counts the pages' messages too."""
        gap = g.gap
        assert gap is not None
        g.gap = None
        for k, seq in gap.streams.items():
            s = g.streams.get(k)
            if s is None:
                s = g.streams[k] = _Stream()
            s.received = max(s.received, seq)
        g.base = max(g.base, gap.after, gap.base)
        events.extend(replace(e, count=e.count + gap.count) if isinstance(e, CaughtUp) else e
                      for e in gap.events)

    def _abandon_gap(self, g: GroupProtocol) -> None:
        """Stop reading the gap (the connection is lost, or the member was removed): the
        group's knowledge goes back to the gap's frontier, so its next resume point starts
        there, and what came behind the gap (kept, never handed over) comes again."""
        gap = g.gap
        assert gap is not None
        g.gap = None
        held = {k: deque(m for m in s.held if m.offset in gap.held_before)
                for k, s in g.streams.items()}
        g.streams = {k: _Stream(received=v, held=held.get(k, deque()))
                     for k, v in gap.streams.items()}
        kept = {m.offset for q in held.values() for m in q}
        g.atomic = {o: c for o, c in g.atomic.items() if o in kept}
        g.view = gap.view
        g.base = gap.after

    def _reack(self, g: GroupProtocol) -> None:
        """After a resume or rejoin, ACK again what is held: the first ACK may have been lost;
        the server answers with the outcome if it is already known."""
        waiting = [off for off, outcome in g.atomic.items() if outcome is None]
        if waiting:
            self._acks.setdefault(g.name, []).extend(waiting)

    # -- requests: what the server's frames answer ----------------------------------------------

    def _welcome(self, f: Frame) -> None:
        """A connection is open: its session is the one to resume, its member is `me` (with
        authentication, the token's `sub`); the token its hello carried is in force, so every
        refresh waiting is answered."""
        self.session = f["session"]
        if isinstance(f.get("member"), str):
            self.me = f["member"]
            # (a server before instances says only `member`, which is then the user)
            self.user = f["user"] if isinstance(f.get("user"), str) else user_of(self.me)
        q = self.requests
        while q.refreshes:
            q.out.append(Answer(RequestKind.REFRESH, q.refreshes.popleft()))

    def _installed(self, e: ViewInstalled) -> None:
        q, name = self.requests, e.group
        q.join_retries.pop(name, None)
        if self.me not in e.members:
            return
        if name in q.joins:
            q.joins.discard(name)
            q.out.append(Answer(RequestKind.JOIN, name, e))
        elif name in q.abandoned and name not in q.held:
            # a join given up on (timed out) came through after all: undo it
            self.leave(q.new_req("l"), name)

    def _removed(self, group: str) -> None:
        q = self.requests
        q.abandoned.discard(group)
        if q.leaves.pop(group, None) is not None:
            q.out.append(Answer(RequestKind.LEAVE, group))
        q.fail_publishes(group, GroupLeftError(f"no longer a member of {group}"))

    def _match_replies(self, replies: list[Reply], events: list[GroupEvent]) -> None:
        q = self.requests
        for r in replies:
            if type(r) is Published:  # the hot path of a publisher
                p = q.publishes.get(r.id)
                if p is not None:
                    p.offset = r.offset
                    if not p.atomic:
                        del q.publishes[r.id]
                        q.out.append(Answer(RequestKind.PUBLISH, r.id,
                                            PublishResult(r.id, r.offset)))
            elif isinstance(r, Outcome):
                p = q.publishes.pop(r.id, None)
                if p is not None:
                    q.out.append(Answer(RequestKind.PUBLISH, r.id, PublishResult(
                        r.id, p.offset or r.offset, r.committed, r.reason)))
            elif isinstance(r, Rejected):
                p = q.publishes.get(r.id)
                if p is None:
                    continue
                if r.code in RESENT_PUBLISH_REFUSALS:  # crossed a view change: send it after
                    p.sent = False
                    q.unsent = True
                    continue
                del q.publishes[r.id]
                q.out.append(Answer(RequestKind.PUBLISH, r.id, error=PublishRejected(r.code)))
            elif isinstance(r, CheckpointStored):
                if r.req in q.checkpoints:
                    q.checkpoints.discard(r.req)
                    q.out.append(Answer(RequestKind.CHECKPOINT, r.req, r))
            elif isinstance(r, Refreshed):
                if q.refreshes:
                    q.out.append(Answer(RequestKind.REFRESH, q.refreshes.popleft()))
            elif isinstance(r, ServerError):
                self._refused(r, events)

    def _refused(self, r: ServerError, events: list[GroupEvent]) -> None:
        """An `error` frame: the refusal of a join, a checkpoint, a leave or a refresh, or of
        nothing this client waits for (`StrayError`)."""
        q = self.requests
        g = self.group_of_join(r.req)
        if g is not None and g.phase is GroupPhase.JOINING and g.name in q.held:
            self._join_refused(g, r, events)
            return
        if r.req is not None and r.req in q.checkpoints:
            q.checkpoints.discard(r.req)
            q.out.append(Answer(RequestKind.CHECKPOINT, r.req,
                                error=ServerRefused(r.code, r.message)))
            return
        if g is not None and g.name in q.joins:
            q.joins.discard(g.name)
            q.out.append(Answer(RequestKind.JOIN, g.name, error=ServerRefused(r.code, r.message)))
            return
        for group, req in q.leaves.items():
            if r.req != req:
                continue
            if r.code in LEFT_LEAVE_REFUSALS:
                # Already out (removed while away, or the group is gone): the leave is done.
                left = self.groups.get(group)
                if left is not None:
                    left.phase = GroupPhase.LEFT
                events.append(Removed(group, left.view if left is not None else 0, r.code))
                self._removed(group)
            else:
                del q.leaves[group]
                q.out.append(Answer(RequestKind.LEAVE, group,
                                    error=ServerRefused(r.code, r.message)))
            return
        if r.req is None and r.code in REFRESH_REFUSALS and q.refreshes:
            q.out.append(Answer(RequestKind.REFRESH, q.refreshes.popleft(),
                                error=ServerRefused(r.code, r.message)))
            return
        q.out.append(StrayError(r))

    def _join_refused(self, g: GroupProtocol, r: ServerError,
                      events: list[GroupEvent]) -> None:
        """The server refused the join under way of a group the application holds (issue 16:
        never leave a group that looks joined but is not).

        - "Not now" (`RETRIED_JOIN_REFUSALS`): the same join again, resume point included,
          after a backoff delay (`RetryJoin`), a few times. A reset would throw away a resume
          point that is still good.
        - The join presented a resume point: whatever the code (`offset_unavailable`: another
          epoch, or out of retention; `bad_resume`; any other but `removed`, which ends the
          group like a refused join below: the server API removed this member while it was
          away), no later attempt can serve it.
          Join afresh, with state transfer when the group has a `StateProvider` (G8 → G9); the
          application gets a `Reset`, then the new view.
        - A join without one: the application's `join()` fails with `ServerRefused`; a group
          it had already joined is over (`Removed` with the code as `reason`, its publishes
          failed), since nothing can get it back."""
        q, name = self.requests, g.name
        retries = q.join_retries.get(name, 0)
        if r.code in RETRIED_JOIN_REFUSALS and retries < JOIN_RETRIES:
            q.join_retries[name] = retries + 1
            q.out.append(RetryJoin(name, g.join_req, retries + 1))
            return
        if g.resuming and r.code not in FINAL_JOIN_REFUSALS:
            want_state = q.held[name]
            self.join_afresh(q.new_req("r"), name, r.code, want_state=want_state, lost=r.lost)
            q.out.append(JoinedAfresh(name, r.code, r.message, want_state))
            return
        self.join_refused(name)
        if name in q.joins:  # the application's join(): it fails, and drops the handle
            q.joins.discard(name)
            q.out.append(Answer(RequestKind.JOIN, name, error=ServerRefused(r.code, r.message)))
            return
        q.fail_publishes(name, GroupLeftError(
            f"{name}: the server refused to let this member back in ({r.code})"), sent_too=True)
        events.append(Removed(name, g.view, r.code))
        self._removed(name)
