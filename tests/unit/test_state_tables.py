"""Every (state, event) pair of the group, member and hub session state machines (STYLE.md,
after h11)."""

from __future__ import annotations

import itertools

import pytest
from drive import G, Net, form

from notify.core.events import Join
from notify.core.events import ResumePoint as RP
from notify.core.group import Group
from notify.core.hub import SESSION_TRANSITIONS, Hub, Session, SessionEvent, SessionState
from notify.core.members import MEMBER_TRANSITIONS, MemberEvent, MemberState, Slot
from notify.core.membership import (
    GROUP_TRANSITIONS,
    GroupEvent,
    GroupState,
    IllegalTransition,
    step,
)

GROUP_EXPECTED = {
    (GroupState.STABLE, GroupEvent.PROPOSE): GroupState.FLUSHING,
    (GroupState.FLUSHING, GroupEvent.FLUSHED): GroupState.INSTALLING,
    (GroupState.FLUSHING, GroupEvent.RESTART): GroupState.FLUSHING,
    (GroupState.FLUSHING, GroupEvent.CANCEL): GroupState.STABLE,
    (GroupState.INSTALLING, GroupEvent.RESTART): GroupState.FLUSHING,
    (GroupState.INSTALLING, GroupEvent.INSTALL): GroupState.STABLE,
    (GroupState.INSTALLING, GroupEvent.CANCEL): GroupState.STABLE,
}
MEMBER_EXPECTED = {
    (MemberState.CONNECTED, MemberEvent.DISCONNECT): MemberState.SUSPECT,
    (MemberState.CONNECTED, MemberEvent.RESUME): MemberState.CONNECTED,
    (MemberState.CONNECTED, MemberEvent.REMOVE): MemberState.GONE,
    (MemberState.SUSPECT, MemberEvent.RESUME): MemberState.CONNECTED,
    (MemberState.SUSPECT, MemberEvent.TIMEOUT): MemberState.TIMED_OUT,
    (MemberState.SUSPECT, MemberEvent.REMOVE): MemberState.GONE,
    (MemberState.TIMED_OUT, MemberEvent.RESUME): MemberState.CONNECTED,
    (MemberState.TIMED_OUT, MemberEvent.REMOVE): MemberState.GONE,
    (MemberState.GONE, MemberEvent.REMOVE): MemberState.GONE,
}

SESSION_EXPECTED = {
    (SessionState.CONNECTED, SessionEvent.DISCONNECT): SessionState.DISCONNECTED,
    (SessionState.CONNECTED, SessionEvent.RETIRE): SessionState.RETIRED,
    (SessionState.DISCONNECTED, SessionEvent.RESUME): SessionState.CONNECTED,
    (SessionState.DISCONNECTED, SessionEvent.RETIRE): SessionState.RETIRED,
    (SessionState.DISCONNECTED, SessionEvent.EXPIRE): SessionState.EXPIRED,
}


def test_group_table_is_exactly_the_expected_one() -> None:
    table = {(s, e): t for s, row in GROUP_TRANSITIONS.items() for e, t in row.items()}
    assert table == GROUP_EXPECTED


def test_member_table_is_exactly_the_expected_one() -> None:
    table = {(s, e): t for s, row in MEMBER_TRANSITIONS.items() for e, t in row.items()}
    assert table == MEMBER_EXPECTED


@pytest.mark.parametrize(("state", "event"), list(itertools.product(GroupState, GroupEvent)))
def test_group_step(state: GroupState, event: GroupEvent) -> None:
    expected = GROUP_EXPECTED.get((state, event))
    if expected is None:
        with pytest.raises(IllegalTransition, match=f"{event.value} in {state.value}"):
            step(state, event)
    else:
        assert step(state, event) is expected


@pytest.mark.parametrize(("state", "event"), list(itertools.product(MemberState, MemberEvent)))
def test_member_slot_transition(state: MemberState, event: MemberEvent) -> None:
    slot = Slot(conn=1, accept_from="members", state=state)  # type: ignore[arg-type]
    expected = MEMBER_EXPECTED.get((state, event))
    if expected is None:
        with pytest.raises(IllegalTransition, match=f"member {event.value} in {state.value}"):
            slot.on(event)
        assert slot.state is state
    else:
        slot.on(event)
        assert slot.state is expected


def _suspicion(group: Group) -> dict[str, MemberState]:
    """The members' states, checking on the way that the `_suspects` index follows them."""
    states = {m: s.state for m, s in group.slots.items()}
    assert set(group._suspects) == {m for m, s in states.items() if s is MemberState.SUSPECT}
    return states


def test_G7_suspicion_is_a_member_state_and_its_deadline_index_follows_it() -> None:
    net = Net()
    a, _, c = form(net, "a", "b", "c")
    g = net.hub.groups[G]
    session = net.sessions[c]
    net.drop(c)
    assert _suspicion(g)["c"] is MemberState.SUSPECT
    assert g.next_deadline() == net.now + 3.0  # suspect_timeout
    net.advance(3.1)
    assert _suspicion(g)["c"] is MemberState.TIMED_OUT  # its removal is proposed
    assert [f["leaving"] for f in net.take(a, "view_change")] == [["c"]]
    c2 = net.connect("c", session)
    net.send(c2, Join("jr", G, resume=RP(1, 0, {}, view=3)))
    assert _suspicion(g)["c"] is MemberState.CONNECTED  # Table 1: the removal is cancelled
    net.connect("b")  # a new incarnation of b: the old one is removed at once
    assert _suspicion(g)["b"] is MemberState.GONE
    net.advance(0.3)  # (its removal is proposed after `clash_hold`)
    net.flush(a, c2)
    assert set(_suspicion(g)) == {"a", "c"}


def test_a_restored_groups_members_are_suspect_until_the_recovery_window_ends() -> None:
    net = Net()
    form(net, "a", "b")
    old = net.hub.groups[G]
    install = old._installs[-1]
    g = Group.restored(G, old.config, epoch=1, view=install.view, head=old.topic.head,
                       seqs={}, recent=[], outcomes={}, install=install, now=50.0)
    assert _suspicion(g) == {"a": MemberState.SUSPECT, "b": MemberState.SUSPECT}
    assert g.next_deadline() == 50.0 + old.config.timeouts.recovery_window


# -- hub sessions ---------------------------------------------------------------------------------


def test_session_table_is_exactly_the_expected_one() -> None:
    table = {(s, e): t for s, row in SESSION_TRANSITIONS.items() for e, t in row.items()}
    assert table == SESSION_EXPECTED
    assert set(SESSION_TRANSITIONS) == set(SessionState)


@pytest.mark.parametrize(("state", "event"), list(itertools.product(SessionState, SessionEvent)))
def test_session_transition(state: SessionState, event: SessionEvent) -> None:
    session = Session("tok", "m", None, "m", None, state)
    expected = SESSION_EXPECTED.get((state, event))
    if expected is None:
        with pytest.raises(IllegalTransition, match=f"session {event.value} in {state.value}"):
            session.on(event)
        assert session.state is state
    else:
        session.on(event)
        assert session.state is expected


def _sessions(hub: Hub) -> dict[str, SessionState]:
    """The known sessions' states by token, checking on the way that every index of the hub
    follows them."""
    known = hub._sessions
    assert all(s.state in (SessionState.CONNECTED, SessionState.DISCONNECTED)
               for s in known.values())
    assert {t for t, s in known.items() if s.state is SessionState.DISCONNECTED} == \
        set(hub._disconnected)
    assert {(c, s.token) for c, s in hub._conns.items() if s is not None} == \
        {(s.conn, t) for t, s in known.items() if s.state is SessionState.CONNECTED}
    assert all(s.conn is None for s in known.values() if s.state is SessionState.DISCONNECTED)
    assert all(known[s.token] is s for s in hub._members.values())
    return {t: s.state for t, s in known.items()}


def test_G7_a_sessions_life_moves_along_its_table_and_the_hubs_indexes_follow_it() -> None:
    net = Net()
    a, b = form(net, "a", "b")
    ta, tb = net.sessions[a], net.sessions[b]
    assert _sessions(net.hub) == {ta: SessionState.CONNECTED, tb: SessionState.CONNECTED}
    net.drop(b)
    assert _sessions(net.hub)[tb] is SessionState.DISCONNECTED
    b2 = net.connect("b", tb)  # resumed (G7)
    assert _sessions(net.hub)[tb] is SessionState.CONNECTED
    net.connect("b", tb)  # resumed again while b2 is not known dead: b2 is replaced
    assert b2 in net.closed and net.hub.session_of(b2) is None
    assert _sessions(net.hub)[tb] is SessionState.CONNECTED
    old = net.hub._sessions[ta]
    a2 = net.connect("a")  # a new incarnation of a: the old session is retired at once
    assert old.state is SessionState.RETIRED and a in net.closed
    ta2 = net.sessions[a2]
    assert _sessions(net.hub) == {tb: SessionState.CONNECTED, ta2: SessionState.CONNECTED}
    net.drop(a2)
    gone = net.hub._sessions[ta2]
    net.advance(3.0 + 5.0)  # suspect_timeout + flush_timeout: nobody resumed it
    assert gone.state is SessionState.EXPIRED
    assert _sessions(net.hub) == {tb: SessionState.CONNECTED}
    assert "a" not in net.hub._members
