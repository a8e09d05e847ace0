"""One group: Group-Messaging and Group-Membership of seed 003 §4 wired together.

Theory of operation. A `Group` is fed client frames (already checked at the edge), connection
losses and the clock; it returns actions. Members of the current view have a `Slot`: their
connection (None while SUSPECT) and their `accept_from`. Messages get their place from the
`Topic` in batches, are stored (`Append`) and fanned out once stored (`Fanout`), and atomic
ones wait in the `AtomicTracker`. Membership changes go through `Membership`; an install waits
until the log holds every old-view message, is stored (`StoreView`), and only then reaches the
members, behind every old-view message and before any new-view one (G2). `Writes`
(notify/core/writes.py) holds every frame the group decides while a write is under way.

Failure detection (DESIGN §4): a lost connection makes the member SUSPECT; if it is not back
within `suspect_timeout` it is TIMED_OUT and its removal is requested (the member's states and
their table: notify/core/members.py). A member that does not `flush_ok` within
`flush_timeout`, or holds up an atomic message for `ack_timeout`, is removed the same way. A
SUSPECT member that comes back resumes (G7): it is sent exactly what it missed, and a removal
already proposed for it is cancelled (`view_resume`, seed 003 Table 1).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from notify.core.actions import (
    Abort,
    Action,
    Append,
    CatchupDone,
    CatchupLog,
    Close,
    Confirm,
    ConnId,
    Deliver,
    Ephemeral,
    Error,
    Fanout,
    Halt,
    LogEvent,
    Message,
    Outcome,
    Published,
    ReadHistory,
    Rejected,
    RemovalInstall,
    Send,
    ServeCheckpoint,
    StoreView,
    ViewChange,
    ViewInstall,
    ViewResume,
)
from notify.core.atomic import AtomicTracker
from notify.core.catchup import log_gap, lost_to_retention
from notify.core.checkpoint import Checkpoint
from notify.core.config import CoreConfig
from notify.core.errors import CloseCode, ErrorCode, RejectCode
from notify.core.events import (
    AcceptFrom,
    CheckpointChunk,
    History,
    Join,
    Order,
    Publish,
    Req,
    ResumePoint,
    StateChunk,
)
from notify.core.members import MemberEvent, MemberState, Slot
from notify.core.membership import (
    GroupEvent,
    GroupState,
    Membership,
    Proposal,
    Reason,
)
from notify.core.topic import Topic
from notify.core.transfers import GroupTransfers
from notify.core.view import MemberId, View
from notify.core.writes import Writes
from state_transfer.position import includes

#: view installs remembered for members that resume across one (see `_replay`)
_INSTALL_HISTORY = 64
#: how long a member the server API removed is refused a resuming join (`Group.expel`), and at
#: most how many such members a group remembers (G14; in memory: gone if the group leaves it)
EXPELLED_MEMORY = 3600.0
MAX_EXPELLED = 1000


@dataclass(slots=True)
class Intake:
    """A publish that passed every check and waits for the group's next batch, not yet
    numbered (see notify/core/writes.py). Retries of its id while it waits are answered with
    it."""

    sender: MemberId
    conn: ConnId
    publish: Publish
    from_member: bool
    retries: list[tuple[ConnId, Req]]
    #: a trusted sender's (the server API's): in no view
    trusted: bool = False


class Group:
    def __init__(self, name: str, config: CoreConfig, *, epoch: int, view: int = 0,
                 head: int = 0) -> None:
        self.name = name
        self.epoch = epoch
        self.config = config
        t = config.timeouts
        self.membership = Membership(View(name, view, ()), flush_timeout=t.flush_timeout,
                                     install_hold=t.install_hold, clash_hold=t.clash_hold)
        lim = config.limits
        #: what the log keeps of this group (its rule, `CoreConfig.retention_for`)
        self.retention = config.retention_for(name)
        keep = self.retention  # (the window never holds more than the log keeps)
        self.topic = Topic(name, retain=min(lim.window_messages, keep.messages),
                           idempotency_window=lim.idempotency_window, head=head,
                           retain_bytes=min(lim.window_bytes, keep.bytes))
        #: the oldest offset the log still serves (notify/core/catchup.py); a new group's log
        #: has all of it. None: the host's log serves nothing memory does not hold
        self.log_first: int | None = 1 if config.history else None
        self.atomics = AtomicTracker()
        #: unresolved atomic messages per sender (the `max_pending_atomic` limit)
        self.slots: dict[MemberId, Slot] = {}
        #: where to send the install to members that are not (or no longer) in the view's slots
        self._joiner_conns: dict[MemberId, ConnId] = {}
        self._leaver_conns: dict[MemberId, ConnId] = {}
        #: undecided atomic messages of trusted senders (`publish(trusted=)`) -> the connection
        #: that published (or last retried) it: a key's publishes come through every node of
        #: a cluster, each its own connection, and the outcome goes back to the one that asks
        #: (bounded by the undecided atomics; each leaves when decided or retracted)
        self._trusted_conns: dict[int, ConnId] = {}
        self._installs: deque[ViewInstall] = deque(maxlen=_INSTALL_HISTORY)
        self._conns_members: tuple[ConnId, ...] | None = None
        self._conns_any: tuple[ConnId, ...] | None = None
        self._flush_started = 0.0
        #: members the server API removed -> until when a resuming join of theirs is refused
        #: (insertion order is expiry order)
        self._expelled: dict[MemberId, float] = {}
        #: state transfers to joiners, checkpoint uploads and the stored checkpoint's record
        self.transfers = GroupTransfers(self, max_bytes=config.limits.max_state_bytes,
                                        stall_timeout=t.flush_timeout)
        #: the write under way and what waits for it (G10, G2)
        self.writes = Writes()
        #: checked publishes waiting for the next batch, and the same by (sender, id)
        self._intake: list[Intake] = []
        self._intake_ids: dict[tuple[MemberId, str], Intake] = {}
        #: atomic publishes per sender among them (the `max_pending_atomic` limit)
        self._intake_atomic: dict[MemberId, int] = {}
        #: the streams' last offsets before the batch under way (to retract it if it fails)
        self._last_before: dict[str, int | None] = {}
        #: set once the group asked the process to stop: it decides nothing more (G13). Not a
        #: state of GROUP_TRANSITIONS: it is the write pipeline's verdict, can come in any
        #: view-change state and freezes it there, while the hub keeps feeding the group (and
        #: lets nothing of it out), so a HALTED view-change state would have to absorb every
        #: event. One flag, which the hub reads after every call.
        self.halted = False
        #: senders not in the view, and when their publish ids may be forgotten (G14); in
        #: time order (each deadline is now + departed_ids, refreshed by moving to the end)
        self._departed: dict[MemberId, float] = {}
        #: the SUSPECT members and when their removal is due (`suspect_timeout`, or the
        #: recovery window after a restart), in suspicion order: an index of the slots' states
        #: (written only by `_move`) so that a deadline costs nothing to find in a large view
        self._suspects: dict[MemberId, float] = {}

    @classmethod
    def restored(cls, name: str, config: CoreConfig, *, epoch: int, view: int, head: int,
                 seqs: dict[str, int], recent: list[Message],
                 outcomes: dict[int, bool], checkpoint: Checkpoint | None = None,
                 install: ViewInstall | None = None, now: float = 0.0,
                 log_first: int | None = None,
                 ids: Iterable[tuple[MemberId, str, int]] = ()) -> Group:
        """A group brought back after a restart: its view, log head, stream positions and
        recent messages come from storage (G1: the next install is `view + 1`). No connection
        survives a restart, so the view's members (`install.members`) come back SUSPECT: one
        that returns within `recovery_window` resumes like after any lost connection (G7, no
        view change; the install is replayed to it if it missed it), the others are removed.
        An atomic message whose outcome was not stored was never aborted (aborts are stored
        before they are sent): committed. `log_first`: the oldest offset the log retains (not
        given: only what `recent` holds is known to be there)."""
        g = cls(name, config, epoch=epoch, view=view, head=head)
        g.topic.restore(seqs, recent, ids)
        if g.log_first is not None:
            g.log_first = log_first if log_first is not None else (
                recent[0].offset if recent else head + 1)
        g.transfers.checkpoint = checkpoint
        if install is not None:
            g.membership.view = View(name, view, install.members)
            g._installs.append(install)
            deadline = now + config.timeouts.recovery_window
            for member in install.members:
                # No connection survives a restart: each one is lost as of now.
                slot = g.slots[member] = Slot(None, AcceptFrom.MEMBERS, lost_at=now)
                g._move(member, slot, MemberEvent.DISCONNECT, deadline)
        for m in recent:
            if m.atomic:
                g.topic.record_outcome(m.offset, outcomes.get(m.offset, True))
        retained = {m.offset for m in recent}
        for offset in sorted(o for o, ok in outcomes.items() if not ok and o not in retained):
            g.topic.record_outcome(offset, False)  # aborts of what left the window (`decided`)
        return g

    # -- read-only helpers -----------------------------------------------------------------------

    @property
    def view(self) -> View:
        return self.membership.view

    @property
    def state(self) -> GroupState:
        return self.membership.state

    def idle(self) -> bool:
        """Nobody is in the group and nothing is under way: it may leave memory (G14), since
        everything it must remember is in the log (`Group.restored` brings it back)."""
        return not self.halted and not self.slots and self.settled()

    def settled(self) -> bool:
        """Nothing is under way: no view change proposed or asked for, no write, no message
        waiting for its batch or for ACKs, no state transfer. What the group does next then
        depends only on new requests and its members' deadlines (the what-if replay relies
        on it to pass over a gap nobody could notice: spark_analysis/replay.py)."""
        m = self.membership
        return (m.proposal is None and not m.joins and not m.leaves and not self.writes.busy
                and not self.writes.held and not self._intake and self.transfers.idle
                and not len(self.atomics))

    def readable_before(self) -> int:
        """Where a reader of the log that is no member (the server API's history) stops: the
        first offset the log may not hold yet (the write under way), or whose outcome it may
        not hold yet (the oldest atomic message still undecided; an abort is stored with the
        view that decides it)."""
        before = self.topic.durable + 1
        undecided = self.atomics.oldest()
        return before if undecided is None else min(before, undecided)

    def aborted(self, offset: int) -> bool:
        """Is the atomic message at `offset` known here to be aborted? (Known before the log
        holds the abort: the view that stores it may still be under way.)"""
        return self.topic.outcome(offset) is False or self.topic.decided(offset) is False

    def connections(self) -> set[ConnId]:
        """Every connection the group would send to: its members' and its joiners', and every
        one still owed an answer: a leaver's or a publisher's (a member's or not), waiting in
        the intake or held behind the write under way (cluster mode closes them all when the
        group leaves the node, so that each client asks the group's new owner again)."""
        conns = {s.conn for s in self.slots.values() if s.conn is not None}
        conns.update(self._joiner_conns.values())
        conns.update(self._leaver_conns.values())
        for i in self._intake:
            conns.add(i.conn)
            conns.update(c for c, _req in i.retries)
        conns.update(self.writes.waiting())
        return conns

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

    def log(self, out: list[Action], event: str, now: float, **fields: Any) -> None:
        """Record an event-log entry (DESIGN §6) if anyone listens."""
        # Per-message events (msg.accept) are guarded by `event_log` alone at their call site;
        # the rest are rare enough to feed the metrics too.
        if self.config.event_log or self.config.metrics:
            out.append(LogEvent(event, now, {"group": self.name, "view": self.view.version,
                                             **fields}))

    # -- join / leave ----------------------------------------------------------------------------

    def join(self, member: MemberId, conn: ConnId, join: Join, now: float) -> list[Action]:
        out: list[Action] = []
        if self._expelled and member in self._expelled:
            if join.resume is not None and now < self._expelled[member]:
                # removed by the server API: its SDK ends the group (`Removed`) instead of
                # rejoining it by itself; the application may join again (without `resume`)
                out.append(Send(conn, Error(ErrorCode.REMOVED, f"removed from {self.name} by "
                                            "the server API", join.req)))
                return out
            del self._expelled[member]
        slot = self.slots.get(member)
        m = self.membership
        #: already counted against `max_group_members`: its join does not grow the group
        counted = slot is not None and m.may_stay(member)
        if slot is not None and not m.is_leaving(member):
            if join.resume is not None:
                return self._resume(member, slot, conn, join, now)
            if not slot.state.lost:
                out.append(Send(conn, Error(ErrorCode.ALREADY_MEMBER, f"already in {self.name}",
                                            join.req)))
                return out
            # Its connection was lost before it learned of its install, so it cannot resume
            # (it has no resume point): replace its old membership with a fresh join.
            self._request_removal(out, member, Reason.REJOIN, now)
        if slot is not None and join.resume is not None and self._leaving_for_failure(member):
            return self._resume(member, slot, conn, join, now)
        # Not in the view, or on its way out (it left, or an older incarnation is being
        # removed): a fresh join, installed in the view after the removal.
        if m.is_joining(member):
            out.append(Send(conn, Error(ErrorCode.JOIN_PENDING, f"join of {self.name} pending",
                                        join.req)))
            return out
        if not counted and m.size_after() >= (most := self.config.limits.max_group_members):
            out.append(Send(conn, Error(ErrorCode.GROUP_FULL, f"{self.name} has {most} members "
                                        "(max_group_members), with the joins pending",
                                        join.req)))
            return out
        if join.resume is not None:
            err = self._check_resume_point(join.resume, join.accept_from, join.req)
            if err is not None:
                out.append(Send(conn, err))
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
        self._leaver_conns[member] = conn  # (a leave sent again after a reconnect: this one)
        if self.membership.is_leaving(member) and member not in self.membership.leaves:
            # Already on its way out: the install will answer. A removal a resume could call
            # off (it went quiet) becomes one it cannot: the member asked to go.
            self.membership.request_leave(member, Reason.LEAVE, now)
            return out
        self._request_removal(out, member, Reason.LEAVE, now)
        return out

    def remove(self, member: MemberId, reason: Reason, now: float) -> list[Action]:
        """Remove `member` for a reason found outside the group (e.g. a new incarnation)."""
        out: list[Action] = []
        slot = self.slots.get(member)
        if slot is None:
            if self.membership.is_joining(member):
                self.membership.request_leave(member, reason, now)
                self._joiner_conns.pop(member, None)
            return out
        self._move(member, slot, MemberEvent.REMOVE)
        if slot.conn is not None:
            slot.conn = None
            self._slots_changed()
        self._party_lost(out, member, now)
        self._request_removal(out, member, reason, now)
        return out

    def expel(self, member: MemberId, reason: Reason, now: float) -> list[Action]:
        """Remove `member` of the view for a reason from outside that it must hear of (the
        server API's removal, `Reason.REMOVED`). Unlike `remove`, its connection stays in its
        slot: the install that removes it reaches it (a `RemovalInstall` naming `reason`), and
        until then its publishes are refused `leaving`. A removal a resume could call off (it
        went quiet) becomes one it cannot (`Membership.request_leave`). Returns nothing for a
        member not in the view (the caller checked)."""
        out: list[Action] = []
        if member in self.slots:
            # An SDK that resumes the group (it was away, or lost the install on the way) is
            # told it was removed rather than let in again (`join`).
            self._expelled.pop(member, None)
            self._expelled[member] = now + EXPELLED_MEMORY
            while len(self._expelled) > MAX_EXPELLED:
                del self._expelled[next(iter(self._expelled))]
            self._request_removal(out, member, reason, now)
        return out

    def installed(self, version: int) -> bool:
        """Is view `version` (or a later one) installed and stored? (The server API answers a
        removal once it is.)"""
        if self.view.version < version:
            return False
        w = self.writes.in_flight
        return w is None or not isinstance(w.write, StoreView) or w.write.install.view > version

    def _move(self, member: MemberId, slot: Slot, event: MemberEvent,
              due: float = 0.0) -> None:
        """Every change of a member's state (`MEMBER_TRANSITIONS`); `due`: when a SUSPECT
        member's removal is due. Keeps the `_suspects` index in step with the states."""
        slot.on(event)
        if slot.state is MemberState.SUSPECT:
            self._suspects[member] = due
        elif self._suspects:
            self._suspects.pop(member, None)

    def _request_removal(self, out: list[Action], member: MemberId, reason: Reason,
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
        if slot.state is not MemberState.CONNECTED:
            return out
        self._move(member, slot, MemberEvent.DISCONNECT,
                   now + self.config.timeouts.suspect_timeout)
        slot.conn = None
        self._party_lost(out, member, now)
        slot.lost_at = now
        self._slots_changed()
        self.log(out, "member.suspect", now, member=member)
        return out

    def _resume(self, member: MemberId, slot: Slot, conn: ConnId, join: Join,
                now: float) -> list[Action]:
        out: list[Action] = []
        assert join.resume is not None
        err = self._check_resume_point(join.resume, join.accept_from, join.req)
        # Installs from before its latest (re)join are not its views (one may be the install
        # that removed an earlier membership): replay from the install that let it in.
        joined_at = max((i.view for i in self._installs if member in i.joined), default=0)
        since = replace(join.resume, view=max(join.resume.view, joined_at - 1))
        if err is None and self._installs and since.view < self.view.version and \
                since.view + 1 < self._installs[0].view and (
                    self.log_first is None or self._installs[0].offset < since.offset):
            # G1: it missed views no longer remembered (`_INSTALL_HISTORY`) that the log
            # cannot give it either: resuming would skip them silently. It joins afresh
            # instead (the SDK does, with state transfer).
            err = Error(ErrorCode.OFFSET_UNAVAILABLE,
                        f"views {since.view + 1}-{self._installs[0].view - 1} since yours are "
                        "no longer remembered; join afresh", join.req)
        if err is not None:
            out.append(Send(conn, err))
            return out
        gap_ms = 0.0 if slot.lost_at is None else (now - slot.lost_at) * 1000
        self._move(member, slot, MemberEvent.RESUME)
        slot.conn = conn
        slot.lost_at = None
        slot.accept_from = join.accept_from
        self._slots_changed()
        self.log(out, "member.resume", now, member=member, gap_ms=round(gap_ms, 3))
        m = self.membership
        outcome = m.withdraw_leave(member, now) if self._leaving_for_failure(member) else None
        out.append(Send(conn, ViewResume(self.name, self.view.version)))
        count = self._catch_up(out, conn, since, slot.accept_from, held_view=join.resume.view)
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
            self.log(out, "view.resume", now, member=skip, cancelled=self.view.version + 1)
            frame = ViewResume(self.name, self.view.version)
            out.extend(Send(s.conn, frame) for other, s in self.slots.items()
                       if s.conn is not None and other != skip)

    def _leaving_for_failure(self, member: MemberId) -> bool:
        """Removal requested only because the member went quiet: a resume may cancel it."""
        reason = self.membership.leave_reason(member)
        return reason is not None and reason.cancellable

    def _check_resume_point(self, rp: ResumePoint, accept_from: AcceptFrom,
                            req: Req) -> Error | None:
        """The refusal of a resume point (None: it is served). One older than the log's
        retention says how many messages retention dropped (`Error.lost`)."""
        if rp.epoch != self.epoch:
            return Error(ErrorCode.OFFSET_UNAVAILABLE,
                         f"log epoch is {self.epoch}, not {rp.epoch}", req)
        past = max((rp.offset, *rp.held))
        if past > self.topic.head and self.config.shared_log:
            # Another owner may have written past what this copy knows (a deposed owner told
            # late serves from memory until it is fenced, docs/cluster.md): not the client's
            # mistake, and not a reason to reset it. It asks again, and by then this node has
            # dropped the group (its members reconnect to the owner) or was right all along.
            # So does an atomic message it holds past the head (its offset within it): served,
            # it would ACK what it holds and be told `unknown_offset` (simulator seeds 98, 118).
            return Error(ErrorCode.UNAVAILABLE, f"offset {past} is past this owner's "
                         f"head {self.topic.head}; retry", req)
        if rp.offset > self.topic.head or any(s < 0 for s in rp.streams.values()):
            return Error(ErrorCode.BAD_RESUME,
                         f"offset {rp.offset} is past the head {self.topic.head}", req)
        if self.topic.can_replay(rp.offset, rp.streams, external=accept_from is AcceptFrom.ANY):
            return None  # memory holds every message it lacks
        if self.log_first is not None:  # the log serves what memory lacks (catchup.py)
            # retention by count is known here: what it drops is gone, pruned yet or not
            first = max(self.log_first, self.topic.head - self.retention.messages + 1)
            lost = lost_to_retention(rp, first)
            if lost:
                return Error(ErrorCode.OFFSET_UNAVAILABLE,
                             f"offset {rp.offset} is older than the oldest the log retains, "
                             f"{first}: {lost} messages were dropped by retention", req, lost)
            return None
        return Error(ErrorCode.OFFSET_UNAVAILABLE, f"offset {rp.offset} is older than the "
                     f"oldest retained {self.topic.first_retained}", req)

    def _catch_up(self, out: list[Action], conn: ConnId, rp: ResumePoint,
                  accept_from: AcceptFrom, *, held_view: int | None = None) -> int:
        """Replay what `conn` missed since `rp`: from memory, after a `catchup_log` for what
        only the log holds (notify/core/catchup.py). Returns how many messages were replayed
        from memory."""
        if held_view is not None:  # (a rejoin had them ahead of its install)
            out.extend(self._decided_outcomes(conn, rp))
        before = None if self.log_first is None else log_gap(
            self.topic, self._installs, rp, view=self.view.version,
            external=accept_from is AcceptFrom.ANY)
        if before is not None:
            out.append(Send(conn, CatchupLog(self.name, rp.offset, before, rp.view),
                            replay=True))
        return self._replay(out, conn, rp, accept_from, held_view=held_view, gap_before=before)

    def _replay(self, out: list[Action], conn: ConnId, rp: ResumePoint,
                accept_from: AcceptFrom, *, held_view: int | None = None,
                gap_before: int | None = None) -> int:
        """Send `conn` what it missed since `rp`, interleaving the installs it missed (G7/G8);
        with `gap_before`, only the messages and installs from that offset on (what lies
        before it, the member reads from the log: `_catch_up`).

        Atomic outcomes go out as they did live: before the install that followed the message
        (G2, G5). That includes messages the member already holds (it may have lost the confirm
        with its connection), back to the start of the last view it installed (`held_view`, by
        its own resume point, when `rp.view` was moved on to skip installs it was not in); a
        repeated confirm or abort is ignored by a member that does not hold the message.
        """
        floor = rp.offset if gap_before is None else gap_before
        installs: Iterator[ViewInstall] = (i for i in self._installs
                                           if i.view > rp.view and i.offset >= floor)
        after = rp.offset if gap_before is None else max(rp.offset, gap_before - 1)
        nxt = next(installs, None)
        count = 0
        resolved: list[tuple[int, bool]] = []

        def send_resolved() -> None:
            for offset, committed in resolved:
                out.append(Send(conn, self._outcome_frame((offset,), committed), replay=True))
            resolved.clear()

        # Outcomes from the start of the view it last installed: it may hold any atomic of
        # that view. When that install is no longer remembered (a reload keeps the installs
        # after the retained messages; a long run drops old ones), from the oldest retained
        # message: more repeated outcomes, but none it holds is missed (G2, G5).
        start = min(rp.offset, self._view_start(rp.view if held_view is None else held_view))
        accept_any = accept_from is AcceptFrom.ANY
        for m in self.topic.replay(start):
            while nxt is not None and nxt.offset < m.offset:
                send_resolved()
                out.append(Send(conn, nxt, replay=True))
                nxt = next(installs, None)
            if not includes(after, rp.streams, m.offset, m.stream, m.seq) and (
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

    def _view_start(self, view: int) -> int:
        """The offset view `view` was installed at, or, when that install is no longer
        remembered, just below the oldest retained message (from there, every atomic of it a
        member may hold is covered)."""
        began = [i.offset for i in self._installs if i.view == view]
        return began[0] if began else self.topic.first_retained - 1

    def _held_outcomes(self, conn: ConnId, rp: ResumePoint) -> list[Send]:
        """The outcomes of the atomics a member coming back from `rp` in a new membership (G8)
        may still hold: those it received (up to its point) since the start of the view it last
        installed, and whose outcome it may never have got (the install that removed it, and
        its aborts, went out while it was away). Sent before its new install (G2, G5)."""
        out = self._decided_outcomes(conn, rp)
        for m in self.topic.replay(self._view_start(rp.view)):
            if m.offset > rp.offset:
                break
            if m.atomic:
                committed = self.topic.outcome(m.offset)
                if committed is not None:
                    out.append(Send(conn, self._outcome_frame((m.offset,), committed),
                                    replay=True))
        return out

    def _decided_outcomes(self, conn: ConnId, rp: ResumePoint) -> list[Send]:
        """The outcomes of the atomic messages a member coming back says it holds undecided
        (`rp.held`) that have left the window: decided, and not replayed with it."""
        out: list[Send] = []
        for offset in rp.held:
            if offset in self.atomics or self.topic.outcome(offset) is not None:
                continue  # undecided (its outcome goes live), or replayed from the window
            committed = self.topic.decided(offset)
            if committed is not None:
                out.append(Send(conn, self._outcome_frame((offset,), committed), replay=True))
        return out

    def history(self, member: MemberId, conn: ConnId, h: History) -> list[Action]:
        """A page of the log for a member (what a `catchup_log` left out, or scrolling back):
        the host reads it off the event loop (`ReadHistory`). It ends before the oldest atomic
        message still undecided (its outcome is not in the log yet), and it waits behind the
        write under way like a frame (an abort that write stores is then in the log)."""
        slot = self.slots.get(member)
        if slot is None:
            return [Send(conn, Error(ErrorCode.NOT_MEMBER, f"not a member of {self.name}",
                                     h.req))]
        if self.log_first is None:
            return [Send(conn, Error(ErrorCode.UNAVAILABLE, "this server's log keeps no "
                                     "history beyond the in-memory window", h.req))]
        lim = self.config.limits
        before = self.topic.head + 1 if h.before is None else min(h.before, self.topic.head + 1)
        undecided = self.atomics.oldest()
        if undecided is not None:
            before = min(before, undecided)
        return [ReadHistory(conn, h.req, self.name, self.epoch, h.after, before,
                            min(h.limit, lim.history_page), lim.history_page_bytes,
                            h.accept_from is AcceptFrom.ANY)]

    # -- messaging -------------------------------------------------------------------------------

    def publish(self, member: MemberId, conn: ConnId, p: Publish, now: float, *,
                trusted: bool = False) -> list[Action]:
        """`trusted`: the server API's sender (`Hub.trust`), in no view: what it publishes
        reaches every member like a member's message, stamped with the current view."""
        if trusted:
            if p.view != self.view.version:
                p = replace(p, view=self.view.version, same_view=False)
        elif p.ephemeral:
            return self._ephemeral(member, conn, p, now)
        waiting = self._intake_ids.get((member, p.id))
        if waiting is not None:  # a retry of a publish still waiting: answered with it
            waiting.retries.append((conn, p.req))
            return []
        prior = self.topic.known_offset(member, p.id)
        if prior is not None:
            # An idempotent retry: answered as the first time, delivering nothing. The answer
            # is held behind the write under way, which may be the one storing `prior` (G10).
            out: list[Action] = [Send(conn, Published(p.req, p.id, prior))]
            committed = self.topic.outcome(prior)
            if trusted and p.atomic and prior in self.atomics:
                self._trusted_conns[prior] = conn  # its outcome goes to the one asking now
            elif committed is None and trusted and p.atomic and prior <= self.topic.durable:
                # decided and out of the window (a member's SDK asks with `resume.held`; the
                # server API has no resume, so its retry is answered with the outcome)
                committed = self.topic.decided(prior)
            if committed is not None:
                out.append(Send(conn, Outcome(p.id, self.name, prior, committed)))
            return out
        if p.view > self.view.version and self.config.shared_log:
            # A view this copy has not seen: another owner wrote past it (a deposed owner that
            # has not noticed yet), so what it would refuse (`future_view`, or `not_member`
            # for a member that joined since) may be in the log (a retry of one the real owner
            # stored). The client reconnects instead, and asks the owner again, its publish
            # still unanswered (simulator seeds 36 and 429).
            return [Close(conn, CloseCode.SHUTDOWN,
                          "this node's copy of the group is behind; reconnect")]
        code = self._refusal(member, p, trusted)
        if code is not None:
            out = [Send(conn, Rejected(p.req, p.id, code))]
            self.log(out, "msg.reject", now, member=member, code=code.value)
            return out
        item = Intake(member, conn, p, trusted or member in self.slots, [], trusted)
        self._intake.append(item)
        self._intake_ids[(member, p.id)] = item
        if p.atomic:
            self._intake_atomic[member] = self._intake_atomic.get(member, 0) + 1
        out = []
        self._advance(out, now)
        return out

    def _ephemeral(self, member: MemberId, conn: ConnId, p: Publish,
                   now: float) -> list[Action]:
        """Presence and cursors: at most once to the view's other members connected now;
        nothing to store, number or replay, and no `published` (DESIGN §3). Refused like any
        publish (a view change, a stale stamp), and to non-members: presence is the view's."""
        code = self._refusal(member, p) or (
            None if member in self.slots else RejectCode.NOT_MEMBER)
        if code is not None:
            return [Send(conn, Rejected(p.req, p.id, code))]
        frame = Ephemeral(self.name, member, self.view.version, p.payload, now)
        return [Send(c, frame) for c in self._recipients(True) if c != conn]

    def _append_intake(self, out: list[Action], now: float) -> None:
        """Number what waits in the intake and store it as one batch; its fan-out and answers
        are held until the batch is stored (G10)."""
        topic, items = self.topic, self._intake
        self._intake, self._intake_ids, self._intake_atomic = [], {}, {}
        last_before: dict[str, int | None] = {}
        msgs: list[Message] = []
        vacuous: list[Message] = []
        for x in items:
            p = x.publish
            stream = topic.stream_of(p.order, x.sender, x.from_member)
            if stream not in last_before:
                last_before[stream] = topic.last_offset(stream)
            msg = topic.accept(sender=x.sender, publish_id=p.id, order=p.order, view=p.view,
                               atomic=p.atomic, payload=p.payload, now=now,
                               from_member=x.from_member, size=p.size)
            if p.atomic and x.trusted:
                self._trusted_conns[msg.offset] = x.conn
            if p.atomic and self.view.members:
                self.atomics.add(msg, self.view.members, now)
            elif p.atomic:  # a trusted sender's, to a view of nobody: nobody to wait for
                vacuous.append(msg)
            elif not x.from_member:  # a non-member's ids live on from its last publish
                self._departed.pop(x.sender, None)
                self._departed[x.sender] = now + self.config.timeouts.departed_ids
            msgs.append(msg)
        self._last_before = last_before
        out.append(self.writes.start(
            Append(self.name, self.writes.next_ticket(), tuple(msgs)), now))
        log = self.config.event_log
        members = self._recipients(True)
        for x, msg in zip(items, msgs, strict=True):
            p = x.publish
            out.append(Fanout(msg, members if x.from_member else self._recipients(False),
                              Send(x.conn, Published(p.req, p.id, msg.offset))))
            if x.retries:
                out.extend(Send(c, Published(req, p.id, msg.offset)) for c, req in x.retries)
            if log:
                self.log(out, "msg.accept", now, member=x.sender, offset=msg.offset,
                          stream=msg.stream, seq=msg.seq, sender=x.sender,
                          order=p.order.value, atomic=p.atomic)
        if vacuous:  # (its outcome, like its `published`, waits for the append)
            self._resolved(out, vacuous, True, "", now)

    def written(self, ticket: int, error: str | None, now: float) -> list[Action]:
        """Storage finished the write under way (`error` None) or could not do it. Returns the
        frames held behind it, then whatever the group can do next (the next batch, an
        install); the hub sends them as they are (see `Writes.route`)."""
        p = self.membership.proposal
        if p is not None and self.writes.holds(ViewChange):
            # The view change was held behind this write (a log that did not answer: its
            # stream leader died); members hear of it only now, and are blamed for not
            # flushing only a whole flush_timeout later.
            p.deadline = max(p.deadline, now + self.config.timeouts.flush_timeout)
        write, held = self.writes.done(ticket)
        out: list[Action] = []
        if error is None:
            out.extend(held)
            if isinstance(write, Append) and write.messages:
                self.topic.stored(write.messages[-1].offset)
        elif isinstance(write, Append):
            # Nothing after this batch has an offset yet: undo exactly it (G13), and refuse it.
            self.topic.retract(write.messages, self._last_before)
            for m in write.messages:
                if m.atomic:
                    self.atomics.discard(m.offset)
                    self._trusted_conns.pop(m.offset, None)
                self.log(out, "msg.reject", now, member=m.sender,
                          code=RejectCode.STORAGE_FAILED.value, offset=m.offset)
            retracted = {m.offset for m in write.messages}
            out.extend(Writes.fail(held, retracted, self.topic.head))
        else:
            # Members may already act on this view (they flushed for it): it cannot be undone,
            # and it must not be installed unstored (G1). Stop; a restart recovers (G13).
            self.halted = True  # from now on the hub lets nothing of this group out
            return [Halt(f"could not store view {write.install.view} of {self.name}: {error}")]
        rest: list[Action] = []
        self._advance(rest, now)
        out.extend(self.writes.route(rest, busy=False))
        return out

    def _refusal(self, member: MemberId, p: Publish, trusted: bool = False
                 ) -> RejectCode | None:
        m = self.membership
        if m.state is GroupState.INSTALLING:
            # Everyone flushed and the install waits only for the log to catch up: nothing
            # more may join the old view, or a steady sender could hold the install off.
            return RejectCode.VIEW_CHANGING
        if p.atomic and m.proposal is not None:
            # An atomic message needs the ACK of every member of its view, and a member that
            # flushed may not ACK it before the last flush_ok installs the next view, which
            # would abort it though nobody failed (docs/semantics.md). It waits for the
            # install: the SDKs, and the server API, send it again then, with its id.
            return RejectCode.VIEW_CHANGING
        if trusted:
            if p.atomic and self.atomics.pending_from(member) + \
                    self._intake_atomic.get(member, 0) >= self.config.limits.max_pending_atomic:
                return RejectCode.TOO_MANY_PENDING
            return None
        if member not in self.slots:
            # G6: a non-member may only send plain FIFO messages, and only receivers with
            # accept_from "any" get them.
            if p.order is Order.TOTAL or p.atomic or p.same_view or m.is_joining(member):
                return RejectCode.NOT_MEMBER
            return None
        if m.leave_reason(member) in (Reason.LEAVE, Reason.REMOVED):
            return RejectCode.LEAVING
        if m.proposal is not None and member in m.proposal.flushed:
            return RejectCode.VIEW_CHANGING
        if p.view > self.view.version:
            return RejectCode.FUTURE_VIEW
        if p.same_view and p.view != self.view.version:
            return RejectCode.STALE_VIEW
        if p.atomic and self.atomics.pending_from(member) + self._intake_atomic.get(member, 0) \
                >= self.config.limits.max_pending_atomic:
            return RejectCode.TOO_MANY_PENDING
        return None

    def ack(self, member: MemberId, conn: ConnId, offsets: tuple[int, ...],
            now: float) -> list[Action]:
        out: list[Action] = []
        if member not in self.slots:
            out.append(Send(conn, Error(ErrorCode.NOT_MEMBER, f"not a member of {self.name}")))
            return out
        committed, other = self.atomics.ack(member, offsets)
        unknown: list[int] = []
        for offset in other:
            done = self.topic.outcome(offset)
            if done is None:  # it left the window (a resume's ACK of what it held): decided
                done = self.topic.decided(offset)
            if done is None and offset > self.topic.head and self.config.shared_log:
                continue  # another owner wrote it: this copy is stale, and the member resends
                # it (`resume.held`) where the group lives now, once this node lets it go
            if done is None:
                unknown.append(offset)
            else:  # resolved before this ACK arrived (e.g. resent after a resume)
                out.append(Send(conn, self._outcome_frame((offset,), done)))
        if unknown:
            out.append(Send(conn, Error(ErrorCode.UNKNOWN_OFFSET,
                                        f"no pending atomic message at {unknown[:10]}")))
        if committed:
            # A commit is never stored (after a crash an atomic with no stored abort counts as
            # committed), and every member of the sending view delivered the message (it
            # ACKed it): the confirm need not wait for a write under way.
            offs = tuple(m.offset for m in committed)
            frame = self._outcome_frame(offs, True)
            for s in self.slots.values():
                if s.conn is not None:
                    out.append(Send(s.conn, frame, overtakes=True))
            self._resolved(out, committed, True, "", now, overtakes=True)
        return out

    def _outcome_frame(self, offsets: tuple[int, ...], committed: bool) -> Confirm | Abort:
        return Confirm(self.name, offsets) if committed else \
            Abort(self.name, offsets, "member_failed")

    def _resolved(self, out: list[Action], msgs: list[Message], committed: bool, reason: str,
                  now: float, *, overtakes: bool = False) -> None:
        for m in msgs:
            self.topic.record_outcome(m.offset, committed)
            sender = self.slots.get(m.sender)
            conn = sender.conn if sender is not None else (
                self._leaver_conns.get(m.sender) or self._trusted_conns.pop(m.offset, None))
            if conn is not None:
                out.append(Send(conn, Outcome(m.id, self.name, m.offset, committed,
                                              reason or None), overtakes=overtakes))
            if committed:
                self.log(out, "atomic.commit", now, offset=m.offset, sender=m.sender,
                          duration_ms=round((now - m.ts) * 1000, 3))
            else:
                self.log(out, "atomic.abort", now, offset=m.offset, sender=m.sender,
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
        # in a stable order (not the set's, which varies between processes): a seed of the
        # simulators replays exactly
        out.extend(Send(s.conn, frame) for member in sorted(p.flush_set)
                   if (s := self.slots[member]).conn is not None)
        self.log(out, "view.propose", now, proposed=p.version, reason=frame.reason,
                  members=list(frame.members))

    def _advance(self, out: list[Action], now: float) -> None:
        """Propose what is queued, install what is flushed once the log holds every old-view
        message, store what waits in the intake; repeat while something moves."""
        if self.halted:
            return
        m = self.membership
        while True:
            if m.state is GroupState.STABLE and m.propose(now) is not None:
                self._flush_started = now
                self._announce(out, now)
            if m.state is not GroupState.INSTALLING or self._intake or self.writes.busy:
                break
            self._install(out, now)
        if self._intake and not self.writes.busy:
            self._append_intake(out, now)

    def _install(self, out: list[Action], now: float) -> None:
        old = self.view
        committed, aborted = self.atomics.resolve_all()
        view, p = self.membership.install()
        install = ViewInstall(self.name, view.version, view.members, tuple(p.joining),
                              tuple(p.leaving), self.epoch, self.topic.head)
        # Everything below is held until the view (and its aborts) is stored (writes.py).
        out.append(self.writes.start(StoreView(self.writes.next_ticket(), install,
                                               tuple(x.offset for x in aborted)), now))
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
            self._move(mem, s, MemberEvent.REMOVE)  # its slot goes with it
            c = self._leaver_conns.pop(mem, None) or s.conn
            if c is not None:
                leaver_conns[mem] = c
        for mem, join in p.joining.items():
            self.slots[mem] = Slot(self._joiner_conns.pop(mem), join.accept_from)
            self._departed.pop(mem, None)
        for mem in p.leaving:
            if mem not in p.joining and self.topic.remembers(mem):
                self._departed.pop(mem, None)
                self._departed[mem] = now + self.config.timeouts.departed_ids
        self._slots_changed()

        self._installs.append(install)
        for mem, s in self.slots.items():
            if s.conn is not None:
                joined = p.joining.get(mem)
                if joined is not None and joined.resume is not None:
                    # what it holds of its last membership is resolved before this install
                    sends.extend(self._held_outcomes(s.conn, joined.resume))
                sends.append(Send(s.conn, install))
                if joined is not None and joined.resume is not None:
                    catchup: list[Action] = []
                    # The joiner gets this install first: replay no older install (it was not
                    # in those views, and one of them may be the install that removed it).
                    since = replace(joined.resume, view=view.version)
                    n = self._catch_up(catchup, s.conn, since, joined.accept_from)
                    sends.extend(a for a in catchup if isinstance(a, Send))
                    sends.append(Send(s.conn, CatchupDone(self.name, self.topic.head, n)))
                    self.log(logs, "catchup", now, member=mem,
                              from_offset=joined.resume.offset, count=n)
        for mem, c in leaver_conns.items():
            if mem not in p.joining:  # a re-joiner got the install above
                why = p.leaving[mem]
                # one that did not ask to go is told why (its SDK's `Removed.reason`)
                sends.append(Send(c, install if why is Reason.LEAVE else RemovalInstall(
                    install.group, install.view, install.members, install.joined, install.left,
                    install.epoch, install.offset, why.value)))
        for mem in p.leaving:
            sends.extend(self.transfers.lost(mem, now))
            self.transfers.drop_upload(logs, mem)
        joining = frozenset(p.joining)
        for mem, joined in p.joining.items():
            if joined.want_state:
                # Behind the donor's own install: it snapshots exactly the old view's state.
                sends.extend(self.transfers.start(mem, joined.req, now, joining))
        out.extend(sends)
        out.extend(logs)
        self.log(out, "view.install", now, members=list(view.members),
                  duration_ms=round((now - self._flush_started) * 1000, 3),
                  previous=old.version)

    # -- state transfer and checkpoints (G9): notify/core/transfers.py ---------------------------

    def state_chunk(self, member: MemberId, conn: ConnId, f: StateChunk,
                    now: float) -> list[Action]:
        return self.transfers.state_chunk(member, conn, f, now)

    def checkpoint_chunk(self, member: MemberId, conn: ConnId, f: CheckpointChunk,
                         now: float) -> list[Action]:
        return self.transfers.checkpoint_chunk(member, conn, f, now)

    def checkpoint_committed(self, cp: Checkpoint, conn: ConnId, req: Req,
                             now: float) -> list[Action]:
        return self.transfers.committed(cp, conn, req, now)

    def _party_lost(self, out: list[Action], member: MemberId, now: float) -> None:
        """`member` has no connection any more: no transfer waits on it, no upload of its."""
        self.transfers.drop_upload(out, member)
        out.extend(self.transfers.lost(member, now))

    # -- time ------------------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """The earliest time `tick` has something to do (None: nothing is due, ever)."""
        m, t = self.membership, self.config.timeouts
        best = min(self._suspects.values()) if self._suspects else None
        for d in (m.next_deadline(),
                  self.atomics.next_deadline(t.ack_timeout, self._excused) if self.atomics
                  else None,
                  self.transfers.next_deadline(),
                  None if self.writes.in_flight is None or self.halted
                  else self.writes.in_flight.since + t.write_timeout,
                  next(iter(self._departed.values())) if self._departed else None):
            if d is not None and (best is None or d < best):
                best = d
        return best

    def _excused(self, member: MemberId) -> bool:
        """Not to be blamed for a missing ACK any more: gone, or on its way out."""
        return member not in self.slots or self.membership.is_leaving(member)

    def tick(self, now: float) -> list[Action]:
        out: list[Action] = []
        w, limit = self.writes.in_flight, self.config.timeouts.write_timeout
        if w is not None and not self.halted and now >= w.since + limit:
            self.halted = True  # storage stopped answering: nothing this group says is safe
            return [Halt(f"storage did not finish a write of {self.name} in {limit} s")]
        if self.halted:
            return out
        while self._departed:
            sender, when = next(iter(self._departed.items()))
            if when > now:
                break
            del self._departed[sender]
            if sender not in self.slots:
                self.topic.forget_ids(sender)
        m = self.membership
        due = [mem for mem, at in self._suspects.items() if now >= at]  # in suspicion order
        for mem in due:
            if mem not in self._suspects:  # installed away by an earlier one's removal
                continue
            self._move(mem, self.slots[mem], MemberEvent.TIMEOUT)
            if not m.is_leaving(mem):  # G7: not back within suspect_timeout
                self._request_removal(out, mem, Reason.SUSPECT, now)
        p = m.proposal
        if p is not None and now >= p.deadline and self.writes.holds(ViewChange):
            # nobody has been told of it yet (it waits behind a write the log has not
            # answered): nobody can be blamed; the deadline starts again once it leaves
            p.deadline = now + self.config.timeouts.flush_timeout
        if p is not None and now >= p.deadline:
            for mem in sorted(m.unflushed()):
                self._request_removal(out, mem, Reason.FLUSH_TIMEOUT, now)
            p = m.proposal
            if p is not None and now >= p.deadline:  # nothing changed: push the deadline on
                p.deadline = now + self.config.timeouts.flush_timeout
        out.extend(self.transfers.tick(now))  # donors that stopped sending are replaced
        for mem in sorted(self.atomics.overdue(now, self.config.timeouts.ack_timeout)):
            if mem in self.slots and not m.is_leaving(mem):
                self._request_removal(out, mem, Reason.ACK_TIMEOUT, now)
        self._advance(out, now)
        return out
