"""One group: Group-Messaging and Group-Membership of seed 003 §4 wired together.

Theory of operation. A `Group` is fed client frames (already checked at the edge), connection
losses and the clock; it returns actions. Members of the current view have a `Slot`: their
connection (None while SUSPECT) and their `accept_from`. Messages get their place from the
`Topic`, fan out through the adapter's stream workers (`Fanout`), and atomic ones wait in the
`AtomicTracker`. Membership changes go through `Membership`; their install is emitted as one
`AfterStreams` action so that `view_install` reaches every member behind every old-view message
(G2) and before any new-view one.

Failure detection (DESIGN §4): a lost connection makes the member SUSPECT; if it is not back
within `suspect_timeout` its removal is requested. A member that does not `flush_ok` within
`flush_timeout`, or holds up an atomic message for `ack_timeout`, is removed the same way. A
SUSPECT member that comes back resumes (G7): it is sent exactly what it missed, and a removal
already proposed for it is cancelled (`view_resume`, seed 003 Table 1).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from notify.core.actions import (
    Abort,
    Action,
    AfterStreams,
    CatchupDone,
    CheckpointStored,
    CommitCheckpoint,
    Confirm,
    ConnId,
    Deliver,
    DiscardCheckpoint,
    Error,
    Fanout,
    LogEvent,
    Message,
    Outcome,
    Published,
    Rejected,
    Send,
    ServeCheckpoint,
    StateChunkOut,
    StateRequest,
    StoreCheckpointChunk,
    StoreOutcomes,
    StoreView,
    ViewChange,
    ViewInstall,
    ViewResume,
)
from notify.core.atomic import AtomicTracker
from notify.core.checkpoint import Checkpoint, Upload
from notify.core.config import CoreConfig
from notify.core.errors import ErrorCode, RejectCode
from notify.core.events import (
    AcceptFrom,
    CheckpointChunk,
    Join,
    Order,
    Publish,
    Req,
    ResumePoint,
    StateChunk,
)
from notify.core.membership import GroupEvent, GroupState, Membership, Proposal
from notify.core.topic import Topic
from notify.core.view import MemberId, View

#: view installs remembered for members that resume across one (see `_replay`)
_INSTALL_HISTORY = 64


class MemberState(StrEnum):
    CONNECTED = "connected"
    SUSPECT = "suspect"


class MemberEvent(StrEnum):
    DISCONNECT = "disconnect"
    RESUME = "resume"


MEMBER_TRANSITIONS: dict[MemberState, dict[MemberEvent, MemberState]] = {
    MemberState.CONNECTED: {MemberEvent.DISCONNECT: MemberState.SUSPECT,
                            MemberEvent.RESUME: MemberState.CONNECTED},  # resume on a new conn
    MemberState.SUSPECT: {MemberEvent.RESUME: MemberState.CONNECTED},
}


@dataclass(slots=True)
class Slot:
    conn: ConnId | None
    accept_from: AcceptFrom
    state: MemberState = MemberState.CONNECTED
    suspect_deadline: float | None = None
    lost_at: float | None = None  # when the connection was lost (for the resume gap)

    def on(self, event: MemberEvent) -> None:
        self.state = MEMBER_TRANSITIONS[self.state][event]


@dataclass(slots=True)
class Transfer:
    """A snapshot on its way from `donor` to `joiner` (G9); the server only relays and counts."""

    id: str
    joiner: MemberId
    donor: MemberId
    offset: int
    started: float
    req: Req = ""  # the joiner's join request: errors about its state carry it
    attempt: int = 0
    next_index: int = 0
    bytes: int = 0
    #: when the donor last made progress; stalled for `flush_timeout`, it is replaced
    progress: float = 0.0


class Group:
    def __init__(self, name: str, config: CoreConfig, *, epoch: int, view: int = 0,
                 head: int = 0) -> None:
        self.name = name
        self.epoch = epoch
        self._cfg = config
        t = config.timeouts
        self.membership = Membership(View(name, view, ()), flush_timeout=t.flush_timeout,
                                     install_hold=t.install_hold)
        self.topic = Topic(name, retain=config.limits.retain_messages,
                           idempotency_window=config.limits.idempotency_window, head=head)
        self.atomics = AtomicTracker()
        #: unresolved atomic messages per sender (the `max_pending_atomic` limit)
        self.slots: dict[MemberId, Slot] = {}
        #: where to send the install to members that are not (or no longer) in the view's slots
        self._joiner_conns: dict[MemberId, ConnId] = {}
        self._leaver_conns: dict[MemberId, ConnId] = {}
        self._installs: deque[ViewInstall] = deque(maxlen=_INSTALL_HISTORY)
        self._conns_members: tuple[ConnId, ...] | None = None
        self._conns_any: tuple[ConnId, ...] | None = None
        self._flush_started = 0.0
        self._transfers: dict[str, Transfer] = {}
        #: the latest stored checkpoint (its bytes are in storage), and uploads under way
        self.checkpoint: Checkpoint | None = None
        self._uploads: dict[MemberId, Upload] = {}
        self._upload_count = 0

    @classmethod
    def restored(cls, name: str, config: CoreConfig, *, epoch: int, view: int, head: int,
                 seqs: dict[str, int], recent: list[Message],
                 outcomes: dict[int, bool], checkpoint: Checkpoint | None = None,
                 install: ViewInstall | None = None, now: float = 0.0) -> Group:
        """A group brought back after a restart: its view, log head, stream positions and
        recent messages come from storage (G1: the next install is `view + 1`). No connection
        survives a restart, so the view's members (`install.members`) come back SUSPECT: one
        that returns within `recovery_window` resumes like after any lost connection (G7, no
        view change; the install is replayed to it if it missed it), the others are removed.
        An atomic message whose outcome was not stored was never aborted (aborts are stored
        before they are sent): committed."""
        g = cls(name, config, epoch=epoch, view=view, head=head)
        g.topic.restore(seqs, recent)
        g.checkpoint = checkpoint
        if install is not None:
            g.membership.view = View(name, view, install.members)
            g._installs.append(install)
            deadline = now + config.timeouts.recovery_window
            for member in install.members:
                g.slots[member] = Slot(None, AcceptFrom.MEMBERS, MemberState.SUSPECT, deadline,
                                       now)
        for m in recent:
            if m.atomic:
                g.topic.record_outcome(m.offset, outcomes.get(m.offset, True))
        return g

    # -- read-only helpers -----------------------------------------------------------------------

    @property
    def view(self) -> View:
        return self.membership.view

    @property
    def state(self) -> GroupState:
        return self.membership.state

    def involves(self, member: MemberId) -> bool:
        """In the view, or on its way in."""
        return member in self.slots or self.membership.is_joining(member)

    def _recipients(self, from_member: bool) -> tuple[ConnId, ...]:
        if from_member:
            if self._conns_members is None:
                self._conns_members = tuple(s.conn for s in self.slots.values()
                                            if s.conn is not None)
            return self._conns_members
        if self._conns_any is None:
            self._conns_any = tuple(s.conn for s in self.slots.values()
                                    if s.conn is not None and s.accept_from is AcceptFrom.ANY)
        return self._conns_any

    def _slots_changed(self) -> None:
        self._conns_members = self._conns_any = None

    def _log(self, out: list[Action], event: str, now: float, **fields: Any) -> None:
        # Per-message events (msg.accept) are guarded by `event_log` alone at their call site;
        # the rest are rare enough to feed the metrics too.
        if self._cfg.event_log or self._cfg.metrics:
            out.append(LogEvent(event, now, {"group": self.name, "view": self.view.version,
                                             **fields}))

    # -- join / leave ----------------------------------------------------------------------------

    def join(self, member: MemberId, conn: ConnId, join: Join, now: float) -> list[Action]:
        out: list[Action] = []
        slot = self.slots.get(member)
        m = self.membership
        if slot is not None and not m.is_leaving(member):
            if join.resume is not None:
                return self._resume(member, slot, conn, join, now)
            if slot.state is not MemberState.SUSPECT:
                out.append(Send(conn, Error(ErrorCode.ALREADY_MEMBER, f"already in {self.name}",
                                            join.req)))
                return out
            # Its connection was lost before it learned of its install, so it cannot resume
            # (it has no resume point): replace its old membership with a fresh join.
            self._request_removal(out, member, "rejoin", now)
        if slot is not None and join.resume is not None and self._leaving_for_failure(member):
            return self._resume(member, slot, conn, join, now)
        # Not in the view, or on its way out (it left, or an older incarnation is being
        # removed): a fresh join, installed in the view after the removal.
        if m.is_joining(member):
            out.append(Send(conn, Error(ErrorCode.JOIN_PENDING, f"join of {self.name} pending",
                                        join.req)))
            return out
        if join.resume is not None:
            err = self._check_resume_point(join.resume, join.accept_from)
            if err is not None:
                out.append(Send(conn, Error(err[0], err[1], join.req)))
                return out
        self._joiner_conns[member] = conn
        m.request_join(member, join, now)
        self._advance(out, now)
        return out

    def leave(self, member: MemberId, conn: ConnId, req: Req, now: float) -> list[Action]:
        out: list[Action] = []
        if member not in self.slots:
            code = ErrorCode.JOIN_PENDING if self.membership.is_joining(member) else \
                ErrorCode.NOT_MEMBER
            out.append(Send(conn, Error(code, f"not a member of {self.name}", req)))
            return out
        if self.membership.is_leaving(member) and member not in self.membership.leaves:
            return out  # already on its way out: the install will answer
        self._leaver_conns[member] = conn
        self._request_removal(out, member, "leave", now)
        return out

    def remove(self, member: MemberId, reason: str, now: float) -> list[Action]:
        """Remove `member` for a reason found outside the group (e.g. a new incarnation)."""
        out: list[Action] = []
        slot = self.slots.get(member)
        if slot is None:
            if self.membership.is_joining(member):
                self.membership.request_leave(member, reason, now)
                self._joiner_conns.pop(member, None)
            return out
        if slot.conn is not None:
            slot.conn = None
            self._slots_changed()
        self._drop_upload(out, member)
        replaced: list[Send | ServeCheckpoint] = []
        self._transfer_party_lost(replaced, member, now)
        out.extend(replaced)
        self._request_removal(out, member, reason, now)
        return out

    def _request_removal(self, out: list[Action], member: MemberId, reason: str,
                         now: float) -> None:
        restarted = self.membership.request_leave(member, reason, now)
        if restarted:
            self._announce(out, now)
        self._advance(out, now)

    # -- connection loss and resume (G7) ---------------------------------------------------------

    def disconnected(self, member: MemberId, now: float) -> list[Action]:
        out: list[Action] = []
        if self.membership.is_joining(member):
            # A joiner that drops is simply not joining: installing it would make a ghost, in
            # the view with a dead connection. (Its older incarnation may still have a slot.)
            self._joiner_conns.pop(member, None)
            self._after_withdraw(out, self.membership.withdraw_join(member, now), now)
        slot = self.slots.get(member)
        if slot is None:
            self._advance(out, now)
            return out
        self._leaver_conns.pop(member, None)
        if slot.state is MemberState.SUSPECT:
            return out
        slot.on(MemberEvent.DISCONNECT)
        slot.conn = None
        self._drop_upload(out, member)
        replaced: list[Send | ServeCheckpoint] = []
        self._transfer_party_lost(replaced, member, now)
        out.extend(replaced)
        slot.suspect_deadline = now + self._cfg.timeouts.suspect_timeout
        slot.lost_at = now
        self._slots_changed()
        self._log(out, "member.suspect", now, member=member)
        return out

    def _resume(self, member: MemberId, slot: Slot, conn: ConnId, join: Join,
                now: float) -> list[Action]:
        out: list[Action] = []
        assert join.resume is not None
        err = self._check_resume_point(join.resume, join.accept_from)
        if err is not None:
            out.append(Send(conn, Error(err[0], err[1], join.req)))
            return out
        gap_ms = 0.0 if slot.lost_at is None else (now - slot.lost_at) * 1000
        slot.on(MemberEvent.RESUME)
        slot.conn = conn
        slot.suspect_deadline = slot.lost_at = None
        slot.accept_from = join.accept_from
        self._slots_changed()
        self._log(out, "member.resume", now, member=member, gap_ms=round(gap_ms, 3))
        m = self.membership
        outcome = m.withdraw_leave(member, now) if self._leaving_for_failure(member) else None
        out.append(Send(conn, ViewResume(self.name, self.view.version)))
        # Installs from before its latest (re)join are not its views (one may be the install
        # that removed an earlier membership): replay from the install that let it in.
        joined_at = max((i.view for i in self._installs if member in i.joined), default=0)
        since = replace(join.resume, view=max(join.resume.view, joined_at - 1))
        count = self._replay(out, conn, since, slot.accept_from)
        out.append(Send(conn, CatchupDone(self.name, self.topic.head, count)))
        if outcome is not None:
            self._after_withdraw(out, outcome, now, skip=member)
        elif m.proposal is not None and member in m.proposal.flush_set:
            # A flush is under way: ask again even if its flush_ok already came, since the
            # view_resume above told it to send (a repeated flush_ok is harmless).
            out.append(Send(conn, self._view_change(m.proposal)))
        self._advance(out, now)
        return out

    def _after_withdraw(self, out: list[Action], outcome: GroupEvent | None, now: float,
                        skip: MemberId | None = None) -> None:
        """Tell the flush set that the proposal changed (RESTART) or was called off (CANCEL)."""
        if outcome is GroupEvent.RESTART:
            self._announce(out, now)
        elif outcome is GroupEvent.CANCEL:
            # Table 1 ③: cancel v(i+1) and resume v(i) at everyone who was told of the change.
            self._log(out, "view.resume", now, member=skip, cancelled=self.view.version + 1)
            frame = ViewResume(self.name, self.view.version)
            out.append(AfterStreams(self.name, tuple(
                Send(s.conn, frame) for other, s in self.slots.items()
                if s.conn is not None and other != skip)))

    def _leaving_for_failure(self, member: MemberId) -> bool:
        """Removal requested only because the member went quiet: a resume may cancel it."""
        m = self.membership
        reason = m.leaves.get(member) or (m.proposal.leaving.get(member)
                                          if m.proposal is not None else None)
        return reason == "suspect"

    def _check_resume_point(self, rp: ResumePoint,
                            accept_from: AcceptFrom) -> tuple[ErrorCode, str] | None:
        if rp.epoch != self.epoch:
            return ErrorCode.OFFSET_UNAVAILABLE, f"log epoch is {self.epoch}, not {rp.epoch}"
        if rp.offset > self.topic.head or any(s < 0 for s in rp.streams.values()):
            return ErrorCode.BAD_RESUME, f"offset {rp.offset} is past the head {self.topic.head}"
        if not self.topic.can_replay(rp.offset, rp.streams,
                                     external=accept_from is AcceptFrom.ANY):
            return ErrorCode.OFFSET_UNAVAILABLE, (
                f"offset {rp.offset} is older than the oldest retained {self.topic.first_retained}")
        return None

    def _replay(self, out: list[Action], conn: ConnId, rp: ResumePoint,
                accept_from: AcceptFrom) -> int:
        """Send `conn` what it missed since `rp`, interleaving the installs it missed (G7/G8).

        Atomic outcomes go out as they did live: before the install that followed the message
        (G2, G5). That includes messages the member already holds (it may have lost the confirm
        with its connection), back to the start of the last view it installed; a repeated
        confirm or abort is ignored by a member that does not hold the message.
        """
        installs: Iterator[ViewInstall] = (i for i in self._installs
                                           if i.view > rp.view and i.offset >= rp.offset)
        nxt = next(installs, None)
        count = 0
        resolved: list[tuple[int, bool]] = []

        def send_resolved() -> None:
            for offset, committed in resolved:
                out.append(Send(conn, self._outcome_frame((offset,), committed), replay=True))
            resolved.clear()

        start = min([rp.offset] + [i.offset for i in self._installs if i.view == rp.view])
        accept_any = accept_from is AcceptFrom.ANY
        for m in self.topic.replay(start):
            while nxt is not None and nxt.offset < m.offset:
                send_resolved()
                out.append(Send(conn, nxt, replay=True))
                nxt = next(installs, None)
            if m.offset > rp.offset and m.seq > rp.streams.get(m.stream, 0) and (
                    m.from_member or accept_any):
                out.append(Send(conn, Deliver.of(m), replay=True))
                count += 1
            if m.atomic:
                committed = self.topic.outcome(m.offset)
                if committed is not None:
                    resolved.append((m.offset, committed))
        while nxt is not None:  # installs after the last replayed message (or with none)
            send_resolved()
            out.append(Send(conn, nxt, replay=True))
            nxt = next(installs, None)
        send_resolved()
        return count

    # -- messaging -------------------------------------------------------------------------------

    def publish(self, member: MemberId, conn: ConnId, p: Publish, now: float) -> list[Action]:
        prior = self.topic.known_offset(member, p.id)
        if prior is not None:  # an idempotent retry: answer as the first time, deliver nothing
            out: list[Action] = [Send(conn, Published(p.req, p.id, prior))]
            committed = self.topic.outcome(prior)
            if committed is not None:
                out.append(Send(conn, Outcome(p.id, self.name, prior, committed)))
            return out
        code = self._refusal(member, p)
        if code is not None:
            out = [Send(conn, Rejected(p.req, p.id, code))]
            self._log(out, "msg.reject", now, member=member, code=code.value)
            return out
        is_member = member in self.slots
        msg = self.topic.accept(sender=member, publish_id=p.id, order=p.order, view=p.view,
                                atomic=p.atomic, payload=p.payload, now=now,
                                from_member=is_member)
        if p.atomic:
            self.atomics.add(msg, self.view.members, now)
        out = [Fanout(msg, self._recipients(is_member), Send(conn, Published(p.req, p.id,
                                                                              msg.offset)))]
        if self._cfg.event_log:
            self._log(out, "msg.accept", now, member=member, offset=msg.offset, stream=msg.stream,
                      seq=msg.seq, sender=member, order=p.order.value, atomic=p.atomic)
        return out

    def _refusal(self, member: MemberId, p: Publish) -> RejectCode | None:
        m = self.membership
        if member not in self.slots:
            # G6: a non-member may only send plain FIFO messages, and only receivers with
            # accept_from "any" get them.
            if p.order is Order.TOTAL or p.atomic or p.same_view or m.is_joining(member):
                return RejectCode.NOT_MEMBER
            return None
        if m.is_leaving(member) and (m.leaves.get(member) == "leave" or (
                m.proposal is not None and m.proposal.leaving.get(member) == "leave")):
            return RejectCode.LEAVING
        if m.proposal is not None and member in m.proposal.flushed:
            return RejectCode.VIEW_CHANGING
        if p.view > self.view.version:
            return RejectCode.FUTURE_VIEW
        if p.same_view and p.view != self.view.version:
            return RejectCode.STALE_VIEW
        if p.atomic and self.atomics.pending_from(member) >= self._cfg.limits.max_pending_atomic:
            return RejectCode.TOO_MANY_PENDING
        return None

    def ack(self, member: MemberId, conn: ConnId, offsets: tuple[int, ...],
            now: float) -> list[Action]:
        out: list[Action] = []
        if member not in self.slots:
            out.append(Send(conn, Error(ErrorCode.NOT_MEMBER, f"not a member of {self.name}")))
            return out
        committed: list[Message] = []
        unknown: list[int] = []
        for offset in offsets:
            if offset in self.atomics:
                msg = self.atomics.ack(member, offset)
                if msg is not None:
                    committed.append(msg)
                continue
            done = self.topic.outcome(offset)
            if done is None:
                unknown.append(offset)
            else:  # resolved before this ACK arrived (e.g. resent after a resume)
                out.append(Send(conn, self._outcome_frame((offset,), done)))
        if unknown:
            out.append(Send(conn, Error(ErrorCode.UNKNOWN_OFFSET,
                                        f"no pending atomic message at {unknown[:10]}")))
        if committed:
            offs = tuple(m.offset for m in committed)
            out.append(StoreOutcomes(self.name, offs, True))
            frame = self._outcome_frame(offs, True)
            for s in self.slots.values():
                if s.conn is not None:
                    out.append(Send(s.conn, frame))
            self._resolved(out, committed, True, "", now)
        return out

    def _outcome_frame(self, offsets: tuple[int, ...], committed: bool) -> Confirm | Abort:
        return Confirm(self.name, offsets) if committed else \
            Abort(self.name, offsets, "member_failed")

    def _resolved(self, out: list[Action], msgs: list[Message], committed: bool, reason: str,
                  now: float) -> None:
        for m in msgs:
            self.topic.record_outcome(m.offset, committed)
            sender = self.slots.get(m.sender)
            conn = sender.conn if sender is not None else self._leaver_conns.get(m.sender)
            if conn is not None:
                out.append(Send(conn, Outcome(m.id, self.name, m.offset, committed,
                                              reason or None)))
            if committed:
                self._log(out, "atomic.commit", now, offset=m.offset, sender=m.sender,
                          duration_ms=round((now - m.ts) * 1000, 3))
            else:
                self._log(out, "atomic.abort", now, offset=m.offset, sender=m.sender,
                          reason=reason)

    # -- the flush -------------------------------------------------------------------------------

    def flush_ok(self, member: MemberId, conn: ConnId, view: int, now: float) -> list[Action]:
        out: list[Action] = []
        if not self.membership.flush_ok(member, view):
            p = self.membership.proposal
            last = self._installs[-1] if self._installs else None
            involved = member in self.slots or (last is not None and member in last.left)
            current = self.view.version
            if involved and (view == current or (view == current + 1 and (
                    p is None or member in p.leaving))):
                # A benign race, not a wrong view: a late answer to a view_change we sent (it
                # is repeated on a restart) whose view was installed or cancelled since, or
                # the member's own removal joined the proposal after it was asked to flush.
                return out
            expected = "no view change in progress" if p is None else f"proposed is {p.version}"
            out.append(Send(conn, Error(ErrorCode.WRONG_VIEW,
                                        f"flush_ok for view {view}: {expected}")))
            return out
        self._advance(out, now)
        return out

    def _view_change(self, p: Proposal) -> ViewChange:
        members = self.view.successor(frozenset(p.leaving), tuple(p.joining)).members
        return ViewChange(self.name, p.version, members, tuple(p.joining), tuple(p.leaving),
                          p.reason())

    def _announce(self, out: list[Action], now: float) -> None:
        """Tell every member asked to flush what is proposed (at the start and on restarts).

        Behind the streams, like the install: a member must never hear of view v+2 before the
        install of v+1 that is still on its way to it."""
        p = self.membership.proposal
        assert p is not None
        frame = self._view_change(p)
        out.append(AfterStreams(self.name, tuple(
            Send(s.conn, frame) for member in p.flush_set
            if (s := self.slots[member]).conn is not None)))
        self._log(out, "view.propose", now, proposed=p.version, reason=frame.reason,
                  members=list(frame.members))

    def _advance(self, out: list[Action], now: float) -> None:
        """Propose what is queued, install what is flushed; repeat while something moves."""
        m = self.membership
        while True:
            if m.state is GroupState.STABLE:
                if m.propose(now) is None:
                    return
                self._flush_started = now
                self._announce(out, now)
            p = m.proposal
            assert p is not None
            if not p.complete:
                return
            self._install(out, now)

    def _install(self, out: list[Action], now: float) -> None:
        old = self.view
        committed, aborted = self.atomics.resolve_all()
        view, p = self.membership.install()
        if committed:
            out.append(StoreOutcomes(self.name, tuple(x.offset for x in committed), True))
        if aborted:
            out.append(StoreOutcomes(self.name, tuple(x.offset for x in aborted), False))
        install = ViewInstall(self.name, view.version, view.members, tuple(p.joining),
                              tuple(p.leaving), self.epoch, self.topic.head)
        out.append(StoreView(install))
        sends: list[Send | ServeCheckpoint] = []
        staying = [s.conn for mem, s in self.slots.items()
                   if mem not in p.leaving and s.conn is not None]
        for msgs, ok in ((committed, True), (aborted, False)):
            if msgs:
                frame = self._outcome_frame(tuple(x.offset for x in msgs), ok)
                sends.extend(Send(c, frame) for c in staying)
        resolution: list[Action] = []
        self._resolved(resolution, committed, True, "", now)
        self._resolved(resolution, aborted, False, "member_failed", now)
        sends.extend(a for a in resolution if isinstance(a, Send))
        logs: list[Action] = [a for a in resolution if not isinstance(a, Send)]

        leaver_conns: dict[MemberId, ConnId] = {}
        for mem in p.leaving:
            s = self.slots.pop(mem)
            c = self._leaver_conns.pop(mem, None) or s.conn
            if c is not None:
                leaver_conns[mem] = c
        for mem, join in p.joining.items():
            self.slots[mem] = Slot(self._joiner_conns.pop(mem), join.accept_from)
        self._slots_changed()

        self._installs.append(install)
        for mem, s in self.slots.items():
            if s.conn is not None:
                sends.append(Send(s.conn, install))
                joined = p.joining.get(mem)
                if joined is not None and joined.resume is not None:
                    catchup: list[Action] = []
                    # The joiner gets this install first: replay no older install (it was not
                    # in those views, and one of them may be the install that removed it).
                    since = replace(joined.resume, view=view.version)
                    n = self._replay(catchup, s.conn, since, joined.accept_from)
                    sends.extend(a for a in catchup if isinstance(a, Send))
                    sends.append(Send(s.conn, CatchupDone(self.name, self.topic.head, n)))
                    self._log(logs, "catchup", now, member=mem,
                              from_offset=joined.resume.offset, count=n)
        for mem, c in leaver_conns.items():
            if mem not in p.joining:  # a re-joiner got the install above
                sends.append(Send(c, install))
        for mem in p.leaving:
            self._transfer_party_lost(sends, mem, now)
            self._drop_upload(logs, mem)
        for mem, joined in p.joining.items():
            if joined.want_state:
                # Behind the donor's own install: it snapshots exactly the old view's state.
                t = Transfer(f"{view.version}.{mem}.0", mem, "", self.topic.head, now,
                             joined.req)
                sends.extend(self._request_state(t, exclude=frozenset(p.joining)))
        out.append(AfterStreams(self.name, tuple(sends)))
        out.extend(logs)
        self._log(out, "view.install", now, members=list(view.members),
                  duration_ms=round((now - self._flush_started) * 1000, 3),
                  previous=old.version)

    # -- state transfer (G9) ----------------------------------------------------------------------

    def _request_state(self, t: Transfer, exclude: frozenset[MemberId] = frozenset(),
                       ) -> list[Send | ServeCheckpoint]:
        """Ask the longest-standing member that has the state for a snapshot for `t.joiner`;
        if there is none, serve the stored checkpoint; failing that, tell the joiner (it
        starts without state)."""
        waiting = {x.joiner for x in self._transfers.values()}
        donor = next((m for m in self.view.members
                      if m != t.joiner and m not in exclude and m not in waiting
                      and self.slots[m].conn is not None), None)
        joiner_conn = self.slots[t.joiner].conn if t.joiner in self.slots else None
        if donor is None:
            self._transfers.pop(t.id, None)
            if joiner_conn is None:
                return []
            served = self._from_checkpoint(t, joiner_conn)
            if served is not None:
                return served
            return [Send(joiner_conn, Error(
                ErrorCode.STATE_UNAVAILABLE,
                f"no member of {self.name} can give the state, and no usable checkpoint",
                t.req))]
        t.donor, t.progress = donor, t.started
        self._transfers[t.id] = t
        donor_conn = self.slots[donor].conn
        assert donor_conn is not None
        return [Send(donor_conn, StateRequest(self.name, t.id, t.joiner, t.offset))]

    def _from_checkpoint(self, t: Transfer, conn: ConnId) -> list[Send | ServeCheckpoint] | None:
        """The checkpoint, completed by the log up to the view boundary `t.offset`: the messages
        it lacks, as the member that took it received them (aborted ones never were), then the
        snapshot itself. None if there is no checkpoint or the log no longer holds the gap."""
        cp = self.checkpoint
        if cp is None:
            return None
        rp = cp.position
        if rp.epoch != self.epoch or not self.topic.can_replay(rp.offset, rp.streams,
                                                               external=cp.accept_any):
            return None
        out: list[Send | ServeCheckpoint] = []
        for m in self.topic.replay(rp.offset):
            if m.offset > t.offset:
                break
            if m.seq > rp.streams.get(m.stream, 0) and (m.from_member or cp.accept_any) and (
                    not m.atomic or self.topic.outcome(m.offset) is not False):
                out.append(Send(conn, Deliver.of(m), replay=True))
        out.append(ServeCheckpoint(conn, self.name, t.id, t.offset, cp, t.req))
        return out

    def _transfer_party_lost(self, out: list[Send | ServeCheckpoint], member: MemberId,
                             now: float) -> None:
        """A joiner that goes away needs no state; a donor that goes away is replaced."""
        for t in list(self._transfers.values()):
            if t.joiner == member:
                del self._transfers[t.id]
            elif t.donor == member:
                self._replace_donor(out, t, now)

    def _replace_donor(self, out: list[Send | ServeCheckpoint], t: Transfer, now: float) -> None:
        """Ask the next member; the joiner drops the partial snapshot when chunks of the new
        transfer arrive (the new donor's snapshot carries its own stream positions)."""
        del self._transfers[t.id]
        again = Transfer(f"{t.id.rsplit('.', 1)[0]}.{t.attempt + 1}", t.joiner, "", t.offset,
                         now, t.req, t.attempt + 1)
        out.extend(self._request_state(again, exclude=frozenset({t.donor})))

    def state_chunk(self, member: MemberId, conn: ConnId, f: StateChunk,
                    now: float) -> list[Action]:
        out: list[Action] = []
        t = self._transfers.get(f.transfer)
        if t is None or t.donor != member:
            out.append(Send(conn, Error(ErrorCode.UNKNOWN_TRANSFER,
                                        f"no transfer {f.transfer!r} from you in {self.name}")))
            return out
        if f.index != t.next_index:
            out.append(Send(conn, Error(ErrorCode.BAD_CHUNK,
                                        f"chunk {f.index} where {t.next_index} was expected")))
            return out
        t.next_index += 1
        t.bytes += len(f.data)
        t.progress = now
        joiner = self.slots.get(t.joiner)
        if t.bytes > self._cfg.limits.max_state_bytes:
            del self._transfers[t.id]
            msg = f"snapshot over {self._cfg.limits.max_state_bytes} bytes"
            out.append(Send(conn, Error(ErrorCode.STATE_TOO_LARGE, msg)))
            if joiner is not None and joiner.conn is not None:
                out.append(Send(joiner.conn, Error(ErrorCode.STATE_TOO_LARGE, msg, t.req)))
            return out
        if joiner is not None and joiner.conn is not None:
            out.append(Send(joiner.conn, StateChunkOut(
                self.name, t.id, f.index, f.last, f.data, f.sha256, f.streams, t.offset)))
        if f.last:
            del self._transfers[t.id]
            self._log(out, "state.transfer", now, member=t.joiner, bytes=t.bytes,
                      duration_ms=round((now - t.started) * 1000, 3), source=t.donor)
        return out

    # -- checkpoints -------------------------------------------------------------------------------

    def checkpoint_chunk(self, member: MemberId, conn: ConnId, f: CheckpointChunk,
                         now: float) -> list[Action]:
        """Take a member's checkpoint in, chunk by chunk, into storage (staged until the last
        chunk checks out; the group's current checkpoint is untouched until then)."""
        out: list[Action] = []
        slot = self.slots.get(member)
        if slot is None or slot.conn != conn:
            out.append(Send(conn, Error(ErrorCode.NOT_MEMBER,
                                        f"only members of {self.name} send its checkpoint",
                                        f.req)))
            return out
        if f.index == 0:  # a new upload replaces an unfinished one
            self._drop_upload(out, member)
            self._upload_count += 1
            self._uploads[member] = Upload(f"{member}.{self._upload_count}", f.req)
        up = self._uploads.get(member)
        if up is None or f.index != up.next_index:
            self._drop_upload(out, member)
            expected = 0 if up is None else up.next_index
            out.append(Send(conn, Error(ErrorCode.BAD_CHUNK,
                                        f"checkpoint chunk {f.index} where {expected} was "
                                        "expected; start again at 0", f.req)))
            return out
        up.next_index += 1
        up.bytes += len(f.data)
        if up.bytes > self._cfg.limits.max_state_bytes:
            self._drop_upload(out, member)
            out.append(Send(conn, Error(
                ErrorCode.STATE_TOO_LARGE,
                f"checkpoint over {self._cfg.limits.max_state_bytes} bytes", f.req)))
            return out
        out.append(StoreCheckpointChunk(self.name, up.id, f.index, f.data))
        if not f.last:
            return out
        problem = self._check_position(f.position) if f.sha256 else "the last chunk has no sha256"
        if problem is not None:
            self._drop_upload(out, member)
            out.append(Send(conn, Error(ErrorCode.BAD_CHECKPOINT, problem, f.req)))
            return out
        del self._uploads[member]
        assert f.position is not None and f.sha256 is not None
        cp = Checkpoint(up.id, member, f.position, slot.accept_from is AcceptFrom.ANY, up.bytes,
                        up.next_index, f.sha256, now)
        out.append(CommitCheckpoint(self.name, cp, conn, f.req))
        return out

    def _check_position(self, rp: ResumePoint | None) -> str | None:
        """A checkpoint's position must name messages this log has had (never a wrong state)."""
        if rp is None:
            return "the last chunk has no position"
        if rp.epoch != self.epoch:
            return f"log epoch is {self.epoch}, not {rp.epoch}"
        if rp.offset > self.topic.head:
            return f"offset {rp.offset} is past the head {self.topic.head}"
        for stream, seq in rp.streams.items():
            if not 0 <= seq <= self.topic.seq(stream):
                return f"{stream} has no seq {seq}"
        return None

    def checkpoint_committed(self, cp: Checkpoint, conn: ConnId, req: Req,
                             now: float) -> list[Action]:
        """Storage holds `cp` and checked its bytes: it is the group's checkpoint from now on
        (storage commits in the order the core asked, so the last one committed is the latest)."""
        out: list[Action] = []
        self.checkpoint = cp
        out.append(Send(conn, CheckpointStored(req, self.name, cp.position.offset, cp.bytes)))
        self._log(out, "checkpoint.stored", now, member=cp.member, bytes=cp.bytes,
                  offset=cp.position.offset)
        return out

    def _drop_upload(self, out: list[Action], member: MemberId) -> None:
        up = self._uploads.pop(member, None)
        if up is not None:
            out.append(DiscardCheckpoint(self.name, up.id))

    # -- time ------------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        candidates = [s.suspect_deadline for s in self.slots.values()
                      if s.suspect_deadline is not None]
        d = self.membership.next_deadline()
        if d is not None:
            candidates.append(d)
        m = self.membership
        ack = self.atomics.next_deadline(self._cfg.timeouts.ack_timeout,
                                         lambda x: x not in self.slots or m.is_leaving(x))
        if ack is not None:
            candidates.append(ack)
        candidates.extend(t.progress + self._cfg.timeouts.flush_timeout
                          for t in self._transfers.values())
        return min(candidates) if candidates else None

    def tick(self, now: float) -> list[Action]:
        out: list[Action] = []
        m = self.membership
        for mem, s in list(self.slots.items()):
            if s.suspect_deadline is not None and now >= s.suspect_deadline:
                s.suspect_deadline = None
                if not m.is_leaving(mem):
                    self._request_removal(out, mem, "suspect", now)
        p = m.proposal
        if p is not None and now >= p.deadline:
            for mem in sorted(m.unflushed()):
                self._request_removal(out, mem, "flush_timeout", now)
            p = m.proposal
            if p is not None and now >= p.deadline:  # nothing changed: push the deadline on
                p.deadline = now + self._cfg.timeouts.flush_timeout
        stalled = [t for t in self._transfers.values()
                   if now - t.progress >= self._cfg.timeouts.flush_timeout]
        for t in stalled:  # a donor that does not send (e.g. its application stopped reading)
            replaced: list[Send | ServeCheckpoint] = []
            self._replace_donor(replaced, t, now)
            out.extend(replaced)
        for mem in sorted(self.atomics.overdue(now, self._cfg.timeouts.ack_timeout)):
            if mem in self.slots and not m.is_leaving(mem):
                self._request_removal(out, mem, "ack_timeout", now)
        self._advance(out, now)
        return out
