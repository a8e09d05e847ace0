"""DESIGN §2 G1-G7 as small scripted scenarios driving the `Hub` directly.

`Net` (drive.py) runs the core's actions through the server's own `Interpreter` and records,
per connection, the frames as the client would receive them. Members answer by hand, so each
test states exactly which frames it expects.
"""

from __future__ import annotations

import pytest
from drive import G, Net, delivered, form, view

from client_sdk.events import Message
from client_sdk.protocol import ClientProtocol
from notify.core.events import AcceptFrom, Ack, FlushOk, History, Join, Leave, Order, Publish
from notify.core.events import ResumePoint as RP

# -- G1 views ---------------------------------------------------------------------------------


def test_G1_every_member_installs_the_same_view_and_versions_go_up_by_one() -> None:
    net = Net()
    a, b = form(net, "a", "b")
    assert view(net) == (2, ("a", "b"))
    c = net.connect("c")
    net.send(c, Join("j", G))
    changes = [net.take(x, "view_change") for x in (a, b)]
    assert changes[0] == changes[1] and changes[0][0]["proposed"] == 3
    assert changes[0][0]["members"] == ["a", "b", "c"]
    net.send(a, FlushOk(G, 3))
    assert net.take(c, "view_install") == []  # b has not flushed yet
    net.send(b, FlushOk(G, 3))
    installs = [net.take(x, "view_install") for x in (a, b, c)]
    assert installs[0] == installs[1] == installs[2]
    assert installs[0][0]["view"] == 3 and installs[0][0]["members"] == ["a", "b", "c"]
    assert installs[0][0]["joined"] == ["c"]


# -- G2 virtual synchrony ---------------------------------------------------------------------


def test_G2_install_comes_behind_every_old_view_message_at_every_member() -> None:
    net = Net()
    a, b, c = form(net, "a", "b", "c")
    net.publish(a, "p1")
    net.publish(b, "p2", order=Order.TOTAL)
    net.send(c, Leave("l", G))
    net.publish(c, "late")  # c is leaving: refused, never delivered in either view
    net.flush(a, b)
    frames = {x: net.take(x) for x in (a, b, c)}
    for x in (a, b):
        kinds = [f["type"] for f in frames[x] if f["type"] in ("deliver", "view_install")]
        assert kinds == ["deliver", "deliver", "view_install"]
        assert delivered(frames[x]) == [1, 2]
    assert [f["code"] for f in frames[c] if f["type"] == "rejected"] == ["leaving"]
    assert delivered(frames[c]) == [1, 2]
    assert view(net) == (4, ("a", "b"))


# -- G3 FIFO ----------------------------------------------------------------------------------


def test_G3_one_senders_messages_arrive_in_send_order_with_consecutive_seqs() -> None:
    net = Net()
    a, b = form(net, "a", "b")
    for i in range(5):
        net.publish(a, f"p{i}")
    got = [(f["stream"], f["seq"], f["payload"]) for f in net.take(b, "deliver")]
    assert got == [("fifo:a", i + 1, f"p{i}") for i in range(5)]


# -- G4 total order ---------------------------------------------------------------------------


def test_G4_total_messages_get_one_order_everywhere_the_sender_included() -> None:
    net = Net()
    a, b, c = form(net, "a", "b", "c")
    net.publish(b, "x", order=Order.TOTAL)
    net.publish(a, "y", order=Order.TOTAL)
    net.publish(c, "z", order=Order.TOTAL)
    orders = [[(f["seq"], f["payload"]) for f in net.take(x, "deliver")] for x in (a, b, c)]
    assert orders[0] == orders[1] == orders[2] == [(1, "x"), (2, "y"), (3, "z")]


# -- G5 atomic --------------------------------------------------------------------------------


def test_G5_atomic_commits_when_every_member_acks_and_the_sender_learns_it() -> None:
    net = Net()
    a, b = form(net, "a", "b")
    net.publish(a, "at", atomic=True)
    assert [f["offset"] for f in net.take(b, "deliver")] == [1]
    net.send(a, Ack(G, (1,)))
    assert net.take(b, "confirm") == []  # b has not acked
    net.send(b, Ack(G, (1,)))
    assert net.take(b, "confirm") == [{"type": "confirm", "group": G, "offsets": [1]}]
    outcome = net.take(a, "outcome")
    assert [(o["id"], o["committed"]) for o in outcome] == [("at", True)]


def test_G5_atomic_aborts_at_the_next_install_when_a_member_fails_before_its_ack() -> None:
    net = Net()
    a, b, c = form(net, "a", "b", "c")
    net.publish(a, "at", atomic=True)
    net.send(a, Ack(G, (1,)))
    net.send(b, Ack(G, (1,)))
    net.drop(c)
    net.advance(3.1)  # suspect_timeout: c's removal is proposed
    net.flush(a, b)
    fa, fb = net.take(a), net.take(b)
    for frames in (fa, fb):
        kinds = [f["type"] for f in frames if f["type"] in ("abort", "confirm", "view_install")]
        assert kinds == ["abort", "view_install"]  # the outcome comes before the install
    assert [(o["id"], o["committed"]) for o in fa if o["type"] == "outcome"] == [("at", False)]
    assert view(net) == (4, ("a", "b"))


def test_G5_client_never_hands_an_aborted_atomic_to_the_application() -> None:
    p = ClientProtocol("b")
    p.join("1", G)
    p.receive({"type": "view_install", "group": G, "view": 1, "members": ["a", "b"],
               "joined": ["b"], "left": [], "epoch": 1, "offset": 0})
    d = {"type": "deliver", "group": G, "stream": "fifo:a", "sender": "a", "view": 1,
         "payload": None, "ts": 0.0}
    e1, _ = p.receive({**d, "offset": 1, "seq": 1, "atomic": True})
    e2, _ = p.receive({**d, "offset": 2, "seq": 2, "atomic": False})
    e3, _ = p.receive({"type": "abort", "group": G, "offsets": [1], "reason": "member_failed"})
    assert [m.offset for m in e1 + e2 + e3 if isinstance(m, Message)] == [2]


# -- G6 version filtering ---------------------------------------------------------------------


def test_G6_same_view_publish_stamped_with_an_old_view_is_rejected_and_never_delivered() -> None:
    net = Net()
    a, b = form(net, "a", "b")
    old = view(net)[0] - 1
    net.publish(a, "stale", same_view=True, view=old)
    assert net.take(a) == [{"type": "rejected", "req": "r-stale", "id": "stale",
                            "code": "stale_view"}]
    assert net.take(b) == []
    net.publish(a, "fresh", same_view=True)
    assert delivered(net.take(b)) == [1]


def test_G6_accept_from_members_never_gets_a_non_members_message_but_any_does() -> None:
    net = Net()
    (a,) = form(net, "a")
    b = net.connect("b")
    net.send(b, Join("jb", G, accept_from=AcceptFrom.ANY))
    net.flush(a)
    net.take(a), net.take(b)
    x = net.connect("x")
    net.send(x, Publish("r", G, "from-x", 0, Order.FIFO, "hi"))
    assert [f["type"] for f in net.take(x)] == ["published"]
    assert net.take(a) == []
    assert [(f["sender"], f["payload"]) for f in net.take(b, "deliver")] == [("x", "hi")]
    for kind in ({"order": Order.TOTAL}, {"atomic": True}, {"same_view": True}):
        net.send(x, Publish("r", G, f"x-{kind}", 0, kind.get("order", Order.FIFO), "no",
                            kind.get("atomic", False), kind.get("same_view", False)))
        assert [f["code"] for f in net.take(x)] == ["not_member"]
    assert net.take(a) == [] and net.take(b) == []


def test_G3_G6_a_sender_that_publishes_as_a_non_member_then_joins_leaves_no_gap() -> None:
    net = Net()
    (a,) = form(net, "a")
    x = net.connect("x")
    net.send(x, Publish("r", G, "outside", 0, Order.FIFO, 1))  # fifo:x seq 1, a never sees it
    net.send(x, Join("jx", G))
    net.flush(a)
    net.take(x)
    net.publish(x, "inside")
    seqs = [f["seq"] for f in net.take(a, "deliver")]
    assert seqs == [1]  # a must be able to tell this message follows all it should have


# -- G7 fast rejoin ---------------------------------------------------------------------------


def test_G7_return_within_suspect_timeout_no_view_change_and_exactly_the_missed_messages() -> None:
    net = Net()
    a, b = form(net, "a", "b")
    net.publish(a, "m1")
    assert delivered(net.take(b)) == [1]
    session = net.sessions[b]
    net.drop(b)
    net.publish(a, "m2")
    net.publish(a, "m3", order=Order.TOTAL)
    net.advance(2.0)
    b2 = net.connect("b", session)
    net.send(b2, Join("jr", G, resume=RP(1, 0, {"fifo:a": 1}, view=2)))
    frames = net.take(b2)
    assert [f["type"] for f in frames] == ["view_resume", "deliver", "deliver", "catchup_done"]
    assert delivered(frames) == [2, 3]
    net.advance(10.0)
    assert net.take(a, "view_change", "view_install") == []
    assert view(net) == (2, ("a", "b"))
    net.publish(a, "m4")
    assert delivered(net.take(b2)) == [4]


def test_G7_return_after_removal_proposed_cancels_it_with_view_resume_to_everyone() -> None:
    net = Net()
    a, b, c = form(net, "a", "b", "c")
    session = net.sessions[c]
    net.drop(c)
    net.publish(a, "m1")
    net.advance(3.1)
    assert [f["leaving"] for f in net.take(a, "view_change")] == [["c"]]
    net.send(a, FlushOk(G, 4))  # b has not flushed: the install is not done
    c2 = net.connect("c", session)
    net.send(c2, Join("jr", G, resume=RP(1, 0, {}, view=3)))
    frames = net.take(c2)
    assert frames[0] == {"type": "view_resume", "group": G, "view": 3}
    assert delivered(frames) == [1]
    for x in (a, b):
        assert net.take(x, "view_resume") == [{"type": "view_resume", "group": G, "view": 3}]
    net.send(b, FlushOk(G, 4))  # a late answer to the cancelled change
    net.advance(20.0)
    assert all(net.take(x, "view_install") == [] for x in (a, b, c2))
    assert view(net) == (3, ("a", "b", "c"))


def test_G7_member_failing_mid_flush_is_dropped_and_the_flush_restarts_without_it() -> None:
    net = Net()
    a, b, c = form(net, "a", "b", "c")
    d = net.connect("d")
    net.send(d, Join("jd", G))
    net.send(a, FlushOk(G, 4))
    net.drop(c)
    net.advance(3.1)  # c is suspected during the flush: it joins the proposal as a leaver
    restarted = net.take(a, "view_change")
    assert restarted[-1]["members"] == ["a", "b", "d"] and restarted[-1]["leaving"] == ["c"]
    net.send(a, FlushOk(G, 4))
    net.send(b, FlushOk(G, 4))
    assert net.take(d, "view_install")[0]["members"] == ["a", "b", "d"]
    assert view(net) == (4, ("a", "b", "d"))


def test_C6_a_leave_sent_again_after_a_reconnect_is_answered_on_the_new_connection() -> None:
    """The leaver's link drops while its removal waits for a flush; the SDK sends the leave
    again on its new connection (issue 32). The install that removes it goes there."""
    net = Net()
    a, b, c = form(net, "a", "b", "c")
    net.send(c, Leave("l", G))
    net.send(a, FlushOk(G, 4))  # b has not flushed yet
    net.drop(c)
    c2 = net.connect("c", session=net.sessions[c])
    net.send(c2, Leave("l", G))
    net.send(b, FlushOk(G, 4))
    assert view(net) == (4, ("a", "b"))
    assert [f["left"] for f in net.take(c2, "view_install")] == [["c"]]


def test_G7_flush_timeout_removes_a_member_that_never_answers() -> None:
    net = Net()
    a, _b, c = form(net, "a", "b", "c")
    net.send(c, Leave("l", G))
    net.send(a, FlushOk(G, 4))  # b stays silent
    net.advance(4.9)
    assert view(net)[0] == 3
    net.advance(0.2)
    net.send(a, FlushOk(G, 4))
    installs = net.take(a, "view_install")
    assert installs[-1]["members"] == ["a"] and sorted(installs[-1]["left"]) == ["b", "c"]
    assert installs[-1]["view"] == 4


def test_G7_ack_timeout_removes_a_member_holding_up_an_atomic_and_aborts_it() -> None:
    net = Net()
    a, _b = form(net, "a", "b")
    net.publish(a, "at", atomic=True)
    net.send(a, Ack(G, (1,)))  # b never acks
    net.advance(9.9)
    assert net.take(a, "view_change") == []
    net.advance(0.2)
    assert [f["leaving"] for f in net.take(a, "view_change")] == [["b"]]
    net.send(a, FlushOk(G, 3))
    assert [f["type"] for f in net.take(a) if f["type"] in ("abort", "view_install")] == \
        ["abort", "view_install"]
    assert view(net) == (3, ("a",))


def test_ack_timeout_deadline_is_not_reported_once_the_late_member_is_on_its_way_out() -> None:
    """Its removal is proposed; the install will abort the message. A deadline in the past that
    no tick acts on would make the server's timer spin until then (found by sim seed 1018)."""
    net = Net()
    a, _b, c = form(net, "a", "b", "c")
    net.publish(a, "at", atomic=True)
    net.send(a, Ack(G, (1,)))
    net.send(c, Ack(G, (1,)))  # b never acks
    net.advance(10.1)  # b is removed for ack_timeout; c is slow to flush
    net.flush(a)
    g = net.hub.groups[G]
    assert g.membership.proposal is not None and "b" in g.membership.proposal.leaving
    deadline = net.hub.next_deadline()
    assert deadline is not None and deadline > net.now  # the flush timeout, not the ACK one


def test_G1_concurrent_joins_merge_into_one_view_change() -> None:
    net = Net(install_hold=0.5)
    a = net.connect("a")
    net.send(a, Join("ja", G))
    net.advance(0.6)
    assert [f["view"] for f in net.take(a, "view_install")] == [1]
    b, c = net.connect("b"), net.connect("c")
    net.send(b, Join("jb", G))
    net.send(c, Join("jc", G))
    net.advance(0.6)
    assert [f["joining"] for f in net.take(a, "view_change")] == [["b", "c"]]
    net.send(a, FlushOk(G, 2))
    assert [f["view"] for f in net.take(b, "view_install")] == [2]
    assert view(net) == (2, ("a", "b", "c"))


def test_G3_idempotent_publish_retry_gets_the_same_offset_and_is_delivered_once() -> None:
    net = Net()
    a, b = form(net, "a", "b")
    net.publish(a, "once")
    net.publish(a, "once")
    assert [(f["id"], f["offset"]) for f in net.take(a, "published")] == [("once", 1),
                                                                          ("once", 1)]
    assert delivered(net.take(b)) == [1]


def test_new_incarnation_removes_the_old_one_at_once() -> None:
    net = Net()
    a, b = form(net, "a", "b")
    b2 = net.connect("b")  # same member id, no session: a new incarnation
    assert b in net.closed
    # its removal waits `clash_hold` (0.25 s) for b2's join, not `suspect_timeout` (3 s)
    net.advance(0.3)
    assert [f["leaving"] for f in net.take(a, "view_change")] == [["b"]]
    net.send(a, FlushOk(G, 3))
    assert view(net) == (3, ("a",))
    net.send(b2, Join("j2", G))
    net.send(a, FlushOk(G, 4))
    assert view(net) == (4, ("a", "b"))


@pytest.mark.parametrize("history", [False, True])
def test_G1_a_resume_across_more_installs_than_remembered_is_refused_not_skipped(
        monkeypatch: pytest.MonkeyPatch, history: bool) -> None:
    """b answered every view change but its connection died with the installs still on their
    way (its resume point says view 2). When the group remembers fewer installs than b missed,
    they are read from the log (`catchup_log`: the installs from view 3 on lie before
    `before`); a log that keeps no history refuses the resume (offset_unavailable: it joins
    afresh). Never are views skipped."""
    import notify.core.group

    monkeypatch.setattr(notify.core.group, "_INSTALL_HISTORY", 2)
    net = Net(history=history)
    a, b = form(net, "a", "b")
    for i in range(2):  # views 3 and 4 (a joins... and leaves) with b flushing blindly
        c = net.connect(f"c{i}")
        net.send(c, Join(f"j{i}", G))
        net.flush(a, b)
        net.send(c, Leave(f"l{i}", G))
        net.flush(a, b)
    assert net.hub.groups[G].view.version == 6
    net.drop(b)
    b2 = net.connect("b", net.sessions[b])
    net.send(b2, Join("r", G, resume=RP(1, 0, {}, 2)))
    if not history:
        (err,) = net.take(b2, "error")
        assert err["code"] == "offset_unavailable" and "no longer remembered" in err["message"]
        assert net.take(b2, "view_resume", "view_install") == []
        return
    remembered = list(net.hub.groups[G]._installs)
    assert [i.view for i in remembered] == [5, 6]
    frames = net.take(b2)
    assert [f["type"] for f in frames] == ["view_resume", "catchup_log", "catchup_done"]
    assert frames[1] == {"type": "catchup_log", "group": G, "after": 0,
                         "before": remembered[0].offset + 1, "view": 2}
    # every install was at offset 0: the page holds them all, and b's SDK hands over those
    # after its view 2 (views 3 to 6), in their place
    net.send(b2, History("h1", G, 0, frames[1]["before"]))
    (page,) = net.take(b2, "history_page")
    assert [i["view"] for i in page["installs"]] == [1, 2, 3, 4, 5, 6]
    assert page["end"] == 0 and page["messages"] == []


def test_G8_a_new_incarnation_that_resumes_after_its_old_one_timed_out_joins_afresh() -> None:
    """The old incarnation went quiet and its removal was requested (a resume could still
    cancel that); then the member came back as a new incarnation (which removes the old one
    for good) and joined with a saved resume point (G8). It must be let in by a fresh join
    with catch-up, not resumed into the membership being removed (found by the cluster
    simulator, seed 104: the join was answered `internal`)."""
    from notify.core.events import Join, ResumePoint
    from tests.unit.drive import G, Net, form

    net = Net(suspect_timeout=1.0)
    a, b = form(net, "ana", "bob")
    net.publish(b, "p1")
    head = net.hub.groups[G].topic.head
    net.drop(a)
    net.advance(1.5)                       # ana timed out: its removal is proposed
    assert net.inbox[b][-1]["type"] == "view_change"  # (bob does not flush yet)
    c = net.connect("ana")                 # a new incarnation: the old one is gone for good
    net.send(c, Join("j2", G, resume=ResumePoint(1, head, {"fifo:bob": 1})))
    assert not [f for f in net.take(c, "error") if f["code"] == "internal"]
    for _ in range(3):                     # bob flushes whatever is proposed, until settled
        net.flush(b)
        net.take(b)
    installs = net.take(c, "view_install")
    assert installs and "ana" in installs[-1]["members"]


def test_G5_a_resume_from_a_view_whose_install_is_forgotten_still_gets_its_held_outcomes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """b holds atomic 1 (ACKed, unresolved) in view 3, flushes, and loses its connection with
    the abort and the install of view 4 on their way. By the time it resumes, the group no
    longer remembers view 3's install (only view 4's: a reload keeps the installs after the
    retained messages, a long run drops old ones). The abort of 1 must still reach b before
    view 4, or b installs view 4 holding an unresolved atomic (G2, G5) while a, which got the
    abort live, did not deliver it. Found by the cluster simulator (seed 4 at 10,000 steps)."""
    import notify.core.group

    monkeypatch.setattr(notify.core.group, "_INSTALL_HISTORY", 1)
    net = Net()
    a, b, c = form(net, "a", "b", "c")
    net.publish(a, "x", atomic=True)
    (x,) = delivered(net.take(b))
    net.send(a, Ack(G, (x,)))
    net.send(b, Ack(G, (x,)))  # c never ACKs: it is gone
    net.drop(c)
    net.advance(3.1)  # c's removal is proposed
    net.flush(a, b)
    assert view(net) == (4, ("a", "b"))
    assert [f["type"] for f in net.take(a) if f["type"] in ("abort", "view_install")] == [
        "abort", "view_install"]
    session = net.sessions[b]
    net.take(b)  # lost with b's connection
    net.drop(b)
    b2 = net.connect("b", session)
    net.send(b2, Join("jr", G, resume=RP(1, x, {"fifo:a": 1}, view=3)))
    got = [(f["type"], f.get("offsets")) for f in net.take(b2)
           if f["type"] in ("abort", "confirm", "view_install")]
    assert got[:2] == [("abort", [x]), ("view_install", None)], got


def test_G5_a_removed_member_rejoining_from_its_point_gets_the_outcome_of_the_atomic_it_holds(
        ) -> None:
    """b received atomic 1 (its resume point is at 1: the SDK's offset counts what it received,
    held or not) and went away before the outcome; the view that removed it aborted 1. b comes
    back with that point: a new membership (G8). It still holds 1, so the abort must reach it,
    and before its new install: else it installs the new view holding an atomic of the old one
    (and, once its first view is installed, a later resume replays outcomes from that view's
    start only, so it holds 1, and its FIFO stream behind it, for good). The catch-up replayed
    only the outcomes above the point. Found by the cluster simulator (seed 26 at 3,000 steps,
    issue 32's faults)."""
    net = Net()
    a, b = form(net, "a", "b")
    net.publish(a, "x", atomic=True)
    (x,) = delivered(net.take(b))
    net.send(a, Ack(G, (x,)))  # b never ACKs: it is gone
    session = net.sessions[b]
    net.drop(b)
    net.advance(3.1)  # b's removal is proposed
    net.flush(a)
    assert view(net) == (3, ("a",))
    assert [f["offsets"] for f in net.take(a, "abort")] == [[x]]
    b2 = net.connect("b", session)
    net.send(b2, Join("jr", G, resume=RP(1, x, {"fifo:a": 1}, view=2)))
    net.flush(a)
    assert view(net) == (4, ("a", "b"))
    got = [(f["type"], f.get("offsets")) for f in net.take(b2)
           if f["type"] in ("abort", "confirm", "view_install")]
    assert got[:2] == [("abort", [x]), ("view_install", None)], got


def _back_after_one_message(shared_log: bool) -> tuple[Net, int]:
    """b dropped after a's one message (offset 1), and its new connection (same session)."""
    net = Net(shared_log=shared_log)
    a, b = form(net, "a", "b")
    net.publish(a, "x")
    session = net.sessions[b]
    net.take(b)
    net.drop(b)
    return net, net.connect("b", session)


@pytest.mark.parametrize(("shared_log", "code"), [(False, "bad_resume"), (True, "unavailable")])
def test_a_resume_past_the_head_is_a_retry_where_another_owner_may_have_written(
        shared_log: bool, code: str) -> None:
    """Single node: a resume point past the head is the client's mistake (`bad_resume`: the SDK
    joins afresh). Cluster (`shared_log`): it may be this owner's copy that is behind (a
    deposed owner told late answers from memory until it is fenced; cluster simulator seed 75
    at 10,000 steps), so it is `unavailable` and the SDK asks again, with its point intact."""
    net, b2 = _back_after_one_message(shared_log)
    net.send(b2, Join("jr", G, resume=RP(1, 5, {}, view=3)))  # the head is 1
    (err,) = net.take(b2, "error")
    assert (err["code"], err["req"]) == (code, "jr")


@pytest.mark.parametrize("shared_log", [False, True])
def test_a_resume_holding_an_atomic_past_the_head_is_a_retry_where_another_owner_may_have_written(
        shared_log: bool) -> None:
    """The same for an atomic message the member holds (`held`) past this copy's head, its
    offset within it: the member got it from the real owner, and this copy, a deposed owner's
    told late, has never seen it. It used to resume the member, which then ACKed what it holds
    (as after every resume) and was told `unknown_offset` (cluster simulator, window 3, seeds
    98 and 118 at 3,000 steps). On one node the resume is served as before."""
    net, b2 = _back_after_one_message(shared_log)
    net.send(b2, Join("jr", G, resume=RP(1, 1, {"fifo:a": 1}, view=2, held=(2,))))  # head 1
    got = [(f["type"], f.get("code"), f.get("req")) for f in net.take(b2)
           if f["type"] in ("error", "view_resume")]
    assert got == ([("error", "unavailable", "jr")] if shared_log else
                   [("view_resume", None, None)]), got


def test_C6_a_leave_sent_again_while_suspected_is_not_called_off_by_a_resume() -> None:
    """b went quiet, and its removal for that is proposed; it comes back on a new connection
    and asks to leave (its leave lost with the old one), then presents a resume point (as an
    SDK before C6 did). The resume used to call off the removal (a suspicion is cancellable)
    and the leave was never answered; now the leave makes the removal one a resume cannot
    call off, and the install that removes b answers it."""
    net = Net()
    a, b = form(net, "a", "b")
    session = net.sessions[b]
    net.drop(b)
    net.advance(3.1)  # suspect_timeout: b's removal is proposed
    assert [f["leaving"] for f in net.take(a, "view_change")] == [["b"]]
    b2 = net.connect("b", session)
    net.send(b2, Leave("l-again", G))
    net.send(b2, Join("jr", G, resume=RP(1, 0, {}, view=2)))
    net.send(a, FlushOk(G, 3))
    assert view(net) == (3, ("a",))
    installs = net.take(b2, "view_install")
    assert installs and installs[-1]["left"] == ["b"]
