"""A member of a group's current view, as the group sees it: its slot and its state machine.

Everything that moves a member between CONNECTED, SUSPECT, TIMED_OUT and GONE lives here, as
data: `MEMBER_TRANSITIONS` is the whole state machine and `Slot.on` the only way to move along
it (STYLE.md, after h11). The group (notify/core/group.py) keeps one index next to the slots,
`Group._suspects` (the SUSPECT members by removal deadline, so that a deadline costs nothing to
find in a large view); it follows the states and is written only by `Group._move`.

Failure detection (DESIGN §4, G7): a lost connection makes a member SUSPECT until a deadline
(`suspect_timeout`, or `recovery_window` after a restart). Back before it, it resumes with no
view change. Not back by then, it is TIMED_OUT and its removal is requested; a resume before the
install still cancels that removal (seed 003 Table 1). A member removed for a reason found
outside the group (a new incarnation) is GONE and resumes nothing. The install that removes a
member drops its slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from notify.core.actions import ConnId
from notify.core.events import AcceptFrom
from notify.core.membership import IllegalTransition


class MemberState(StrEnum):
    CONNECTED = "connected"
    SUSPECT = "suspect"  # its connection was lost: it may resume, removal due at a deadline
    TIMED_OUT = "timed_out"  # not back in time: removal requested, a resume still cancels it
    GONE = "gone"  # removed for a reason found outside the group (a new incarnation): no resume

    @property
    def lost(self) -> bool:
        """Without a connection since it was lost (not since it was removed)."""
        return self is MemberState.SUSPECT or self is MemberState.TIMED_OUT


class MemberEvent(StrEnum):
    DISCONNECT = "disconnect"  # its connection closed (or the server restarted)
    RESUME = "resume"  # a join with a resume point, on a new connection (G7)
    TIMEOUT = "timeout"  # its SUSPECT deadline passed
    REMOVE = "remove"  # removed from outside the group, or by the install that drops its slot


MEMBER_TRANSITIONS: dict[MemberState, dict[MemberEvent, MemberState]] = {
    MemberState.CONNECTED: {MemberEvent.DISCONNECT: MemberState.SUSPECT,
                            MemberEvent.RESUME: MemberState.CONNECTED,  # on a new connection
                            MemberEvent.REMOVE: MemberState.GONE},
    MemberState.SUSPECT: {MemberEvent.RESUME: MemberState.CONNECTED,
                          MemberEvent.TIMEOUT: MemberState.TIMED_OUT,
                          MemberEvent.REMOVE: MemberState.GONE},
    MemberState.TIMED_OUT: {MemberEvent.RESUME: MemberState.CONNECTED,  # Table 1: cancelled
                            MemberEvent.REMOVE: MemberState.GONE},
    MemberState.GONE: {MemberEvent.REMOVE: MemberState.GONE},
}


@dataclass(slots=True)
class Slot:
    conn: ConnId | None
    accept_from: AcceptFrom
    state: MemberState = MemberState.CONNECTED
    lost_at: float | None = None  # when the connection was lost (for the resume gap)

    def on(self, event: MemberEvent) -> None:
        try:
            self.state = MEMBER_TRANSITIONS[self.state][event]
        except KeyError:
            raise IllegalTransition(f"member {event.value} in {self.state.value}") from None
