"""`Topic.can_replay`: a resume point is served when every message it lacks is still retained,
whatever its offset (G8), and refused as soon as one it lacks was deleted."""

from __future__ import annotations

from notify.core.events import Order
from notify.core.topic import Topic


def topic_with(sends: list[tuple[str, bool]], retain: int) -> Topic:
    """`sends`: (sender, from_member) in accept order, all FIFO, all stored in the log (the
    window keeps what is not)."""
    t = Topic("g", retain=retain, idempotency_window=100)
    for i, (sender, member) in enumerate(sends):
        t.accept(sender=sender, publish_id=str(i), order=Order.FIFO, view=1, atomic=False,
                 payload=i, now=0.0, from_member=member)
    t.stored(t.head)
    return t


def test_inside_the_window_by_offset() -> None:
    t = topic_with([("a", True)] * 10, retain=4)  # offsets 7-10 retained
    assert t.first_retained == 7
    assert t.can_replay(6, {}, external=False)
    assert not t.can_replay(5, {}, external=False)  # offset 6 is gone and not covered


def test_old_offset_but_streams_current_up_to_the_window() -> None:
    t = topic_with([("a", True)] * 6 + [("b", True)] * 4, retain=4)  # a:1-6, b:1-4 (7-10)
    assert t.can_replay(0, {"fifo:a": 6}, external=False)  # lacks only b's, all retained
    assert not t.can_replay(0, {"fifo:a": 5}, external=False)  # lacks a's 6th (offset 6)
    assert t.can_replay(0, {"fifo:a": 6, "fifo:b": 2}, external=False)


def test_dormant_stream_ended_before_the_point_is_no_obstacle() -> None:
    t = topic_with([("a", True)] * 3 + [("b", True)] * 7, retain=4)  # a: 1-3, b: 4-10
    assert t.can_replay(3, {"fifo:b": 3}, external=False)  # a ended at offset 3
    assert not t.can_replay(2, {"fifo:b": 3}, external=False)  # a's 3rd is after 2, deleted


def test_external_streams_count_only_for_accept_from_any() -> None:
    t = topic_with([("x", False)] * 6 + [("a", True)] * 4, retain=4)  # ext:x at 1-6
    assert t.can_replay(0, {}, external=False)
    assert not t.can_replay(0, {}, external=True)
    assert t.can_replay(0, {"ext:x": 6}, external=True)


def test_restored_topic_without_last_offsets_is_conservative() -> None:
    t = Topic("g", retain=4, idempotency_window=100, head=10)
    t.restore({"fifo:a": 6, "fifo:b": 4}, [])  # nothing retained: every message deleted
    assert t.can_replay(10, {}, external=False)  # at the head: nothing lacking
    assert not t.can_replay(0, {"fifo:a": 6}, external=False)  # b's may be after 0
    assert t.can_replay(0, {"fifo:a": 6, "fifo:b": 4}, external=False)
