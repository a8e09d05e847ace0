"""`AtomicTracker.ack` takes a member's whole ACK frame at once (issue 34: one call per frame,
not per offset): what it commits, and what it hands back as not pending here."""

from __future__ import annotations

from notify.core.actions import Message
from notify.core.atomic import AtomicTracker


def _message(offset: int) -> Message:
    return Message("g", offset, "fifo:s", offset, "s", 1, True, None, 0.0, f"id{offset}")


def test_a_frame_of_acks_commits_what_its_last_member_completes_in_ack_order() -> None:
    t = AtomicTracker()
    one, two = _message(1), _message(2)
    t.add(one, ("a", "b", "s"), 0.0)
    t.add(two, ("a", "b", "s"), 0.0)
    assert t.ack("s", [1, 2]) == ([], [])
    assert t.ack("a", [1, 2, 9]) == ([], [9])  # 9: never pending here
    assert t.is_waiting_for("b", 1) and not t.is_waiting_for("a", 1)
    # b's ACKs complete both, in the order b gave them; its repeat of 1 is no longer pending
    assert t.ack("b", [2, 1, 1]) == ([two, one], [1])
    assert len(t) == 0 and t.pending_from("s") == 0 and t.oldest() is None


def test_an_ack_twice_or_from_a_non_member_changes_nothing() -> None:
    t = AtomicTracker()
    m = _message(5)
    t.add(m, ("a", "b"), 0.0)
    assert t.ack("a", [5, 5]) == ([], [])
    assert t.ack("x", [5]) == ([], [])
    assert t.is_waiting_for("b", 5) and t.pending_from("s") == 1
    assert t.ack("b", (5,)) == ([m], [])
