"""Every (state, event) pair of the group and member state machines (STYLE.md, after h11)."""

from __future__ import annotations

import itertools

import pytest

from notify.core.group import MEMBER_TRANSITIONS, MemberEvent, MemberState, Slot
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
    (MemberState.SUSPECT, MemberEvent.REMOVE): MemberState.GONE,
    (MemberState.GONE, MemberEvent.REMOVE): MemberState.GONE,
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
