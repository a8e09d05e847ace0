"""`max_group_members` (docs/protocol.md, `group_full`): a join that would take a group past it
is refused with a clear error, and nobody in the group notices. The count is of the view once
the changes requested so far are installed: pending joins count, certain removals do not, and a
member that only went quiet still does (its resume calls its removal off, G7)."""

from __future__ import annotations

from drive import G, Net, delivered, form, view

from notify.core import Limits
from notify.core.events import FlushOk, Join, Leave
from notify.core.events import ResumePoint as RP


def full(net: Net, conn: int, req: str) -> bool:
    """Whether `conn`'s join `req` was refused `group_full` (and nothing else came)."""
    frames = net.take(conn)
    refused = [f for f in frames if f["type"] == "error" and f["code"] == "group_full"]
    assert len(refused) == len(frames), frames
    return len(refused) == 1 and refused[0]["req"] == req


def back_afresh(net: Net, a: int, b: int) -> int:
    """`b` (of the view `a`, `b`) goes quiet until its removal is proposed (view 3), then comes
    back on its session and joins afresh, without a resume point; returns its connection."""
    session = net.sessions[b]
    net.drop(b)
    net.advance(3.1)
    assert [f["leaving"] for f in net.take(a, "view_change")] == [["b"]]
    b2 = net.connect("b", session)
    net.send(b2, Join("j-b2", G))
    return b2


def test_a_join_past_the_limit_is_refused_and_the_group_goes_on() -> None:
    net = Net(Limits(max_group_members=3))
    a, b, c = form(net, "a", "b", "c")
    before = view(net)
    d = net.connect("d")
    net.send(d, Join("j-d", G))
    frames = net.take(d)
    assert [(f["type"], f["code"], f["req"]) for f in frames] == [("error", "group_full", "j-d")]
    assert "3 members" in frames[0]["message"] and "max_group_members" in frames[0]["message"]
    assert [net.take(x) for x in (a, b, c)] == [[], [], []]  # no view change, no frame at all
    assert view(net) == before
    net.publish(a, "m1")
    assert [delivered(net.take(x)) for x in (a, b, c)] == [[1], [1], [1]]
    assert net.take(d) == []  # d is not in the group: it gets nothing of it


def test_pending_joins_count_against_the_limit() -> None:
    net = Net(Limits(max_group_members=2))
    [a] = form(net, "a")
    b, c = net.connect("b"), net.connect("c")
    net.send(b, Join("j-b", G))
    net.send(c, Join("j-c", G))  # b is not installed yet, but its place is taken
    assert full(net, c, "j-c")
    net.flush(a)
    assert [f["members"] for f in net.take(b, "view_install")] == [["a", "b"]]
    assert view(net)[1] == ("a", "b")


def test_a_member_that_leaves_makes_room_as_soon_as_it_asks() -> None:
    net = Net(Limits(max_group_members=2))
    a, b = form(net, "a", "b")
    c = net.connect("c")
    net.send(c, Join("j-c", G))
    assert full(net, c, "j-c")
    net.send(b, Leave("l-b", G))
    net.send(c, Join("j-c2", G))  # b's removal is certain: c takes its place
    for _ in range(3):  # the leave and the join: one view change, or two
        net.flush(a, b)
        net.take(a)
        net.take(b)
    assert view(net)[1] == ("a", "c")
    assert [f["code"] for f in net.take(c, "error")] == []


def test_a_quiet_member_keeps_its_place_and_its_resume_is_never_refused() -> None:
    net = Net(Limits(max_group_members=2))
    a, b = form(net, "a", "b")
    session = net.sessions[b]
    net.drop(b)
    net.advance(3.1)  # suspected: its removal is proposed, and a resume may call it off
    assert [f["leaving"] for f in net.take(a, "view_change")] == [["b"]]
    c = net.connect("c")
    net.send(c, Join("j-c", G))
    assert full(net, c, "j-c")  # b may come back: the group would be 3
    b2 = net.connect("b", session)
    net.send(b2, Join("jr", G, resume=RP(1, 0, {}, view=2)))
    assert net.take(b2)[0] == {"type": "view_resume", "group": G, "view": 2}
    assert view(net) == (2, ("a", "b"))


def test_a_quiet_member_joining_afresh_is_let_back_in_at_the_limit() -> None:
    """It comes back after its removal was proposed, without a resume point (it lost its
    place in the stream): its fresh join follows its removal, and the group does not grow."""
    net = Net(Limits(max_group_members=2))
    a, b = form(net, "a", "b")
    b2 = back_afresh(net, a, b)
    assert net.take(b2, "error") == []
    net.send(a, FlushOk(G, 3))  # (the view change taken above)
    for _ in range(3):  # its old membership out, the new one in
        net.advance(0.5)
        net.flush(a, b2)
        net.take(a)
    assert view(net)[1] == ("a", "b")
    assert view(net)[0] > 3  # out at 3, in again after


def test_a_quiet_member_joining_afresh_counts_once() -> None:
    """Its old membership may still be called off and its fresh join is pending: one place,
    not two (review of f888967: a third member was refused while the group would be 3)."""
    net = Net(Limits(max_group_members=3))
    a, b = form(net, "a", "b")
    b2 = back_afresh(net, a, b)
    c = net.connect("c")
    net.send(c, Join("j-c", G))
    assert net.take(c, "error") == []
    net.send(a, FlushOk(G, 3))
    for _ in range(4):
        net.advance(0.5)
        net.flush(a, b2, c)
        for x in (a, b2, c):
            net.take(x)
    assert sorted(view(net)[1]) == ["a", "b", "c"]
    d = net.connect("d")
    net.send(d, Join("j-d", G))
    assert full(net, d, "j-d")
