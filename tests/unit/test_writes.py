"""The write pipeline (notify/core/writes.py): nothing leaves before the write it speaks of
(G10), the install barrier is the log's order (G2), a failed append is refused exactly and a
view that cannot be stored stops the server (G13). Storage is held by hand (`Net.writes_held`),
so each test chooses when a commit is slow, finishes or fails."""

from __future__ import annotations

from drive import G, Net, delivered, form

from notify.core import Append, StoreView
from notify.core.events import Ack, FlushOk, Join
from notify.core.events import ResumePoint as RP


def held_net() -> tuple[Net, int, int]:
    net = Net()
    a, b = form(net, "a", "b")
    net.writes_held = True
    return net, a, b


def test_G10_a_message_is_delivered_and_published_only_once_stored() -> None:
    net, a, b = held_net()
    net.publish(a, "m1")
    assert net.take(a) == [] and net.take(b) == []
    (w, _), = net.writes
    assert isinstance(w, Append) and [m.id for m in w.messages] == ["m1"]
    net.finish_writes()
    assert [f["type"] for f in net.take(a)] == ["deliver", "published"]
    assert delivered(net.take(b)) == [w.messages[0].offset]


def test_G10_publishes_during_a_commit_form_the_next_batch() -> None:
    net, a, b = held_net()
    net.publish(a, "m1")
    net.publish(a, "m2")
    net.publish(b, "m3")
    assert len(net.writes) == 1  # one write per group at a time: m2, m3 wait un-numbered
    net.finish_writes()
    (w, _), = net.writes
    assert isinstance(w, Append) and [m.id for m in w.messages] == ["m2", "m3"]
    assert delivered(net.take(b)) == [1]  # m1 is out; m2 and m3 wait for their batch
    net.finish_writes()
    assert delivered(net.take(b)) == [2, 3]


def test_G10_a_retry_during_a_slow_commit_is_answered_only_after_it() -> None:
    net, a, _ = held_net()
    net.publish(a, "m1")
    net.publish(a, "m1")  # the SDK retries after a reconnect: same id
    assert net.take(a, "published") == []
    net.finish_writes()
    answers = net.take(a, "published")
    assert [f["offset"] for f in answers] == [1, 1]
    assert len(net.stored[-1].messages) == 1  # type: ignore[union-attr]


def test_G10_a_retry_of_a_publish_waiting_in_the_intake_is_answered_with_it() -> None:
    net, a, _ = held_net()
    net.publish(a, "m0")
    net.publish(a, "m1")  # waits in the intake (m0's write is under way)
    net.publish(a, "m1")
    net.finish_writes()
    net.finish_writes()
    assert [(f["id"], f["offset"]) for f in net.take(a, "published")] == [
        ("m0", 1), ("m1", 2), ("m1", 2)]


def test_G13_a_failed_append_is_refused_exactly_and_the_next_messages_take_its_place() -> None:
    net, a, b = held_net()
    net.publish(a, "lost")
    net.publish(a, "next")  # in the intake: not part of the failed write
    net.finish_writes("disk I/O error")
    assert [(f["type"], f["id"], f.get("code")) for f in net.take(a, "published", "rejected")] \
        == [("rejected", "lost", "storage_failed")]
    assert net.take(b) == []
    net.finish_writes()
    got = net.take(b, "deliver")
    # `next` takes the offset and seq `lost` had: no receiver sees a gap (G3)
    assert [(f["offset"], f["seq"], f["payload"]) for f in got] == [(1, 1, "next")]
    assert [f["id"] for f in net.take(a, "published")] == ["next"]
    net.publish(a, "lost")  # the refused id may be published again
    net.finish_writes()
    assert [(f["id"], f["offset"]) for f in net.take(a, "published")] == [("lost", 2)]


def test_G13_a_failed_append_is_not_replayed_to_a_member_that_resumed_meanwhile() -> None:
    net, a, b = held_net()
    net.finish_writes()
    net.drop(b)
    net.publish(a, "lost")
    b2 = net.connect("b", net.sessions[b])
    net.send(b2, Join("r", G, resume=RP(1, 0, {}, 2)))
    net.finish_writes("disk full")
    frames = net.take(b2)
    assert [f["type"] for f in frames] == ["view_resume", "catchup_done"]
    assert frames[-1]["offset"] == 0  # the head before the failed append


def test_G2_the_install_waits_until_the_log_holds_every_old_view_message() -> None:
    """b's same_view message was sent before its flush_ok but is still in the intake when the
    flush completes: it must be stored and delivered in the old view, not after the install."""
    net, a, b = held_net()
    net.publish(a, "m1")  # under way
    net.publish(b, "m2", same_view=True)  # waits in the intake
    c = net.connect("c")
    net.send(c, Join("jc", G))
    for x in (a, b):
        net.send(x, FlushOk(G, 3))  # the flush is complete while m2 is not yet numbered
    net.finish_writes()  # m1 stored: m2's batch goes first, not the view
    (w, _), = net.writes
    assert isinstance(w, Append) and [m.id for m in w.messages] == ["m2"]
    net.finish_writes()  # m2 stored, then the view
    net.finish_writes()
    frames = net.take(b)
    kinds = [(f["type"], f["offset"] if f["type"] == "deliver" else f["view"]) for f in frames
             if f["type"] in ("deliver", "view_install")]
    assert kinds == [("deliver", 1), ("deliver", 2), ("view_install", 3)]
    assert [f["type"] for f in net.take(b, "rejected")] == []


def test_G2_publishes_are_refused_once_everyone_flushed_and_the_install_waits_on_the_log() -> None:
    net, a, b = held_net()
    net.publish(a, "m1")
    net.send(net.connect("c"), Join("jc", G))
    for x in (a, b):
        net.send(x, FlushOk(G, 3))
    x = net.connect("x")  # a non-member could otherwise keep the install waiting
    net.publish(x, "late", view=2)
    net.finish_writes()  # m1; then the view (the refusal was decided behind m1)
    assert [f["code"] for f in net.take(x, "rejected")] == ["view_changing"]
    (w, _), = net.writes
    assert isinstance(w, StoreView)


def test_G1_a_view_install_leaves_only_once_stored() -> None:
    net, a, b = held_net()
    c = net.connect("c")
    net.send(c, Join("jc", G))
    net.flush(a, b)
    (w, _), = net.writes
    assert isinstance(w, StoreView) and w.install.view == 3
    assert net.take(c, "view_install") == [] and net.take(a, "view_install") == []
    net.finish_writes()
    assert [f["view"] for f in net.take(c, "view_install")] == [3]


def test_G13_a_view_that_cannot_be_stored_halts_and_nothing_of_it_leaves() -> None:
    net, a, b = held_net()
    c = net.connect("c")
    net.send(c, Join("jc", G))
    net.flush(a, b)
    net.take(a), net.take(b)
    net.finish_writes("disk full")
    assert len(net.halts) == 1 and "could not store view 3" in net.halts[0]
    assert net.take(a) == [] and net.take(b) == [] and net.take(c, "view_install") == []
    net.publish(a, "after")  # the process is stopping: nothing more leaves
    assert net.take(a) == [] and net.writes == []


def test_G13_storage_that_stops_answering_halts_at_the_write_deadline() -> None:
    net, a, _ = held_net()
    net.publish(a, "m1")
    deadline = net.hub.config.timeouts.write_timeout
    net.advance(deadline - 1)
    assert net.halts == []
    net.advance(2)
    assert len(net.halts) == 1 and "did not finish a write" in net.halts[0]


def test_G5_a_confirm_does_not_wait_for_an_unrelated_write() -> None:
    """A commit is never stored and the message was delivered to every member that ACKed it:
    its confirm leaves at once, ahead of a batch being written (atomic latency under load)."""
    net, a, b = held_net()
    net.publish(a, "m1", atomic=True)
    net.finish_writes()
    net.take(a), net.take(b)
    net.publish(b, "m2")  # a write under way
    net.send(a, Ack(G, (1,)))
    net.send(b, Ack(G, (1,)))
    assert [f["offsets"] for f in net.take(b, "confirm")] == [[1]]
    assert [f["committed"] for f in net.take(a, "outcome")] == [True]
    assert net.take(b, "deliver", "published") == []  # m2 still waits for its write


def test_G13_members_are_not_blamed_for_a_view_change_held_behind_a_write_the_log_does_not_answer(
        ) -> None:
    """The log stalls (its stream leader died) with an append under way; a join's view change
    is held behind it, so nobody hears of it. The flush timeout must not remove the members
    for not answering what they were never told (chaos run cluster-stream-leader-kill-churn:
    four connected members removed at flush_timeout); they get a whole flush_timeout once it
    leaves."""
    net, a, b = held_net()
    net.publish(a, "m1")  # under way, and the log does not answer
    c = net.connect("c")
    net.send(c, Join("jc", G))
    assert net.take(a, "view_change") == [] and net.take(b, "view_change") == []
    net.advance(6.0)  # past flush_timeout (5 s): nobody was told
    net.advance(4.0)
    assert net.hub.groups[G].view.members == ("a", "b")
    assert net.hub.groups[G].membership.leave_reason("a") is None
    net.finish_writes()  # the log answers: m1, then the view change, leave
    assert [f["proposed"] for f in net.take(a, "view_change")] == [3]
    net.advance(4.0)  # within its new flush_timeout
    for x in (a, b):
        net.send(x, FlushOk(G, 3))
    net.finish_writes()  # the view
    assert net.hub.groups[G].view.members == ("a", "b", "c")


def test_G13_in_a_cluster_a_view_that_cannot_be_stored_stops_its_group_not_the_node() -> None:
    """Cluster review S6: with a shared log, the group whose view the log refused is dropped
    here (its members resume, and it is read again from the log, where that view is not):
    the node and its other groups go on."""
    import dataclasses

    net = Net()
    net.hub.config = dataclasses.replace(net.hub.config, shared_log=True)
    a, b = form(net, "a", "b")
    other = net.connect("o")
    net.send(other, Join("jo", "other"))
    net.writes_held = True
    c = net.connect("c")
    net.send(c, Join("jc", G))
    net.flush(a, b)
    net.finish_writes("refused by JetStream: an atomic batch incomplete")
    assert net.halts == [] and G not in net.hub.groups
    assert {a, b} <= net.closed and other not in net.closed
    net.writes_held = False
    net.publish(other, "still", group="other")
    assert [f["type"] for f in net.take(other, "published")] == ["published"]
