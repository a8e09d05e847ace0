"""Group-Membership (seed 003 §3.1–3.2): views, proposals, the flush, and Table 1's resume.

Everything that moves a group between STABLE and FLUSHING lives here, as data:
`GROUP_TRANSITIONS` is the whole state machine and `step()` the only way to move along it.

Theory of operation. Join, leave and failure are *requests*. In STABLE, queued requests (merged,
after `install_hold`) become one *proposal* of view v+1: its joiners, its leavers and its flush
set (the members of v that stay). Each member of the flush set stops sending, ACKs what it holds
and answers `flush_ok`. When the flush set has answered, the proposal is installed. A member of
the flush set that fails, or does not answer within `flush_timeout`, is moved to the leavers and
the flush restarts with the smaller set (DESIGN §4). A leaver that comes back before the install
is taken out again (seed 003 Table 1, G7): if nothing else was proposed the proposal is cancelled
and v resumes, otherwise the flush restarts with it included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from notify.core.events import Join
from notify.core.view import MemberId, View


class Reason(StrEnum):
    """Why a view changes (`view_change.reason`, the `view_changes_total` metric)."""

    JOIN = "join"
    LEAVE = "leave"  # the member asked
    REJOIN = "rejoin"  # it joined again without a resume point: its old membership goes
    SUSPECT = "suspect"  # its connection was lost and it did not come back in time
    FLUSH_TIMEOUT = "flush_timeout"  # it did not answer a view change
    ACK_TIMEOUT = "ack_timeout"  # it held up an atomic message
    NEW_INCARNATION = "new_incarnation"  # the same member id connected again afresh
    #: a user opened more instances than `max_instances_per_user`: its oldest disconnected
    #: one makes room (notify/core/users.py)
    INSTANCE_LIMIT = "instance_limit"
    #: the app's backend removed it (server API `DELETE .../members/{member}`): it is told,
    #: and its SDK does not join again by itself
    REMOVED = "removed"
    #: the app's backend disconnected its user (server API `POST /users/{user}/disconnect`):
    #: its session ended at once, connection closed with 4007
    DISCONNECTED = "disconnected"

    @property
    def cancellable(self) -> bool:
        """A removal that a resume may call off (seed 003 Table 1, G7): the member only
        went quiet."""
        return self is Reason.SUSPECT


class GroupState(StrEnum):
    STABLE = "stable"
    FLUSHING = "flushing"  # view v+1 proposed: waiting for the flush set's flush_ok
    INSTALLING = "installing"  # everyone flushed: waiting for the log to hold view v (writes.py)


class GroupEvent(StrEnum):
    PROPOSE = "propose"
    FLUSHED = "flushed"  # the last flush_ok came in (or nobody had to flush)
    RESTART = "restart"  # the proposal changed during the flush
    INSTALL = "install"
    CANCEL = "cancel"  # Table 1: the only leaver came back before the install


GROUP_TRANSITIONS: dict[GroupState, dict[GroupEvent, GroupState]] = {
    GroupState.STABLE: {GroupEvent.PROPOSE: GroupState.FLUSHING},
    GroupState.FLUSHING: {
        GroupEvent.FLUSHED: GroupState.INSTALLING,
        GroupEvent.RESTART: GroupState.FLUSHING,
        GroupEvent.CANCEL: GroupState.STABLE,
    },
    GroupState.INSTALLING: {
        GroupEvent.RESTART: GroupState.FLUSHING,  # a member failed or came back meanwhile
        GroupEvent.INSTALL: GroupState.STABLE,
        GroupEvent.CANCEL: GroupState.STABLE,
    },
}


class IllegalTransition(Exception):
    """A programming error: the group was asked to do what its state forbids."""


def _stronger(new: Reason, old: Reason | None) -> bool:
    """Does `new` replace a removal already requested for `old`? Only a removal a resume could
    call off (the member went quiet) by one it cannot (a new incarnation, a leave): the member
    is leaving either way, but nothing may resume it any more."""
    return old is not None and old.cancellable and not new.cancellable


def step(state: GroupState, event: GroupEvent) -> GroupState:
    try:
        return GROUP_TRANSITIONS[state][event]
    except KeyError:
        raise IllegalTransition(f"{event.value} in {state.value}") from None


@dataclass(slots=True)
class Proposal:
    version: int
    joining: dict[MemberId, Join]
    leaving: dict[MemberId, Reason]
    flush_set: set[MemberId]
    flushed: set[MemberId] = field(default_factory=set)
    deadline: float = 0.0

    @property
    def complete(self) -> bool:
        return self.flush_set <= self.flushed

    @property
    def empty(self) -> bool:
        return not self.joining and not self.leaving

    def reason(self) -> str:
        reasons = set(self.leaving.values())
        if self.joining:
            reasons.add(Reason.JOIN)
        return ",".join(sorted(reasons))


class Membership:
    """The view of one group and the change under way, if any. Pure bookkeeping: no I/O, no
    clock reads; callers pass `now`."""

    __slots__ = ("_clash_hold", "_flush_timeout", "_hold", "hold_until", "joins", "leaves",
                 "proposal", "state", "view")

    def __init__(self, view: View, *, flush_timeout: float, install_hold: float,
                 clash_hold: float = 0.0) -> None:
        self.view = view
        self.state = GroupState.STABLE
        self.proposal: Proposal | None = None
        self.joins: dict[MemberId, Join] = {}
        self.leaves: dict[MemberId, Reason] = {}
        self.hold_until: float | None = None
        self._flush_timeout = flush_timeout
        self._hold = install_hold
        self._clash_hold = clash_hold

    # -- requests --------------------------------------------------------------------------------

    def is_joining(self, member: MemberId) -> bool:
        p = self.proposal
        return member in self.joins or (p is not None and member in p.joining)

    def is_leaving(self, member: MemberId) -> bool:
        p = self.proposal
        return member in self.leaves or (p is not None and member in p.leaving)

    def may_stay(self, member: MemberId) -> bool:
        """Whether `member` of the view may still be in it once the changes requested so far
        are installed: it is not leaving, or only because it went quiet (a resume calls that
        removal off, G7)."""
        reason = self.leave_reason(member)
        return reason is None or reason.cancellable

    def size_after(self) -> int:
        """The most members the view may have once every change requested so far is
        installed: its members that may stay, and those joining (a member both leaving and
        joining afresh counts once)."""
        p = self.proposal
        joining = self.joins.keys() | p.joining.keys() if p is not None else self.joins.keys()
        leaving = self.leaves.keys() | p.leaving.keys() if p is not None else self.leaves.keys()
        members = self.view.members
        if not leaving:
            return len(members) + len(joining)
        in_view = set(members)  # (a removal may be recorded for a joiner never installed)
        out = sum(1 for m in leaving if m in in_view and (m in joining or not self.may_stay(m)))
        return len(members) - out + len(joining)

    def request_join(self, member: MemberId, join: Join, now: float) -> None:
        self.joins[member] = join
        self._arm_hold(now)

    def leave_reason(self, member: MemberId) -> Reason | None:
        """Why `member`'s removal was requested (None: it was not)."""
        p = self.proposal
        return self.leaves.get(member) or (p.leaving.get(member) if p is not None else None)

    def request_leave(self, member: MemberId, reason: Reason, now: float) -> bool:
        """Queue `member`'s removal. During a flush it joins the current proposal at once (the
        flush restarts); returns True when that happened."""
        if member in self.joins:  # never installed: just forget the request
            del self.joins[member]
            return False
        p = self.proposal
        if p is not None and _stronger(reason, p.leaving.get(member)):
            p.leaving[member] = reason  # no flush to restart: it was leaving already
        if _stronger(reason, self.leaves.get(member)):
            self.leaves[member] = reason
        if p is not None:
            if member in p.joining:
                del p.joining[member]
                return True
            if member in self.view and member not in p.leaving:
                p.leaving[member] = reason
                p.flush_set.discard(member)
                p.flushed.discard(member)
                self._restart(now)
                return True
            return False
        if member in self.view:
            self.leaves.setdefault(member, reason)
            self._arm_hold(now)
            if reason is Reason.NEW_INCARNATION and self._clash_hold > 0:
                # the newer incarnation's join comes right after its hello: wait for it, so
                # that the old one's removal and its join are one view change, not two
                self.hold_until = max(self.hold_until or now, now + self._clash_hold)
        return False

    def withdraw_join(self, member: MemberId, now: float) -> GroupEvent | None:
        """A joiner went away before its install. Returns CANCEL if that emptied the proposal,
        RESTART if the proposal goes on without it, None if the join was only queued."""
        if self.joins.pop(member, None) is not None:
            return None
        p = self.proposal
        if p is None or p.joining.pop(member, None) is None:
            return None
        if p.empty:
            self.state = step(self.state, GroupEvent.CANCEL)
            self.proposal = None
            return GroupEvent.CANCEL
        self._restart(now)
        return GroupEvent.RESTART

    def withdraw_leave(self, member: MemberId, now: float) -> GroupEvent | None:
        """A leaver for failure came back (G7). Returns CANCEL, RESTART, or None if it was only
        queued (then no one was ever told)."""
        self.leaves.pop(member, None)
        p = self.proposal
        if p is None or member not in p.leaving:
            return None
        del p.leaving[member]
        if p.empty:
            self.state = step(self.state, GroupEvent.CANCEL)
            self.proposal = None
            return GroupEvent.CANCEL
        p.flush_set.add(member)
        self._restart(now)
        return GroupEvent.RESTART

    def _arm_hold(self, now: float) -> None:
        if self.hold_until is None:
            self.hold_until = now + self._hold

    # -- the flush -------------------------------------------------------------------------------

    def propose(self, now: float) -> Proposal | None:
        """Turn queued requests into a proposal if the group is STABLE and the hold has passed."""
        if self.state is not GroupState.STABLE or not (self.joins or self.leaves):
            return None
        if self.hold_until is not None and now < self.hold_until:
            return None
        self.state = step(self.state, GroupEvent.PROPOSE)
        self.hold_until = None
        staying = {m for m in self.view.members if m not in self.leaves}
        self.proposal = Proposal(
            version=self.view.version + 1,
            joining=self.joins,
            leaving=self.leaves,
            flush_set=staying,
            deadline=now + self._flush_timeout,
        )
        self.joins, self.leaves = {}, {}
        self._settle()
        return self.proposal

    def _restart(self, now: float) -> None:
        self.state = step(self.state, GroupEvent.RESTART)
        assert self.proposal is not None
        self.proposal.deadline = now + self._flush_timeout
        self._settle()

    def _settle(self) -> None:
        """FLUSHING with every flush_ok in is INSTALLING."""
        p = self.proposal
        if self.state is GroupState.FLUSHING and p is not None and p.complete:
            self.state = step(self.state, GroupEvent.FLUSHED)

    def flush_ok(self, member: MemberId, version: int) -> bool:
        """Record a flush_ok; False if there is no such proposal or `member` is not asked."""
        p = self.proposal
        if p is None or version != p.version or member not in p.flush_set:
            return False
        p.flushed.add(member)
        self._settle()
        return True

    def unflushed(self) -> set[MemberId]:
        p = self.proposal
        return set() if p is None else p.flush_set - p.flushed

    def install(self) -> tuple[View, Proposal]:
        """Install the completed proposal; returns the new view and what it changed."""
        p = self.proposal
        assert p is not None and self.state is GroupState.INSTALLING
        self.state = step(self.state, GroupEvent.INSTALL)
        self.view = self.view.successor(frozenset(p.leaving), tuple(p.joining))
        self.proposal = None
        if self.joins or self.leaves:
            self.hold_until = None  # requests that came during the flush go next, no extra hold
        return self.view, p

    def next_deadline(self) -> float | None:
        if self.proposal is not None:
            return self.proposal.deadline
        if self.state is GroupState.STABLE and (self.joins or self.leaves):
            return self.hold_until
        return None
