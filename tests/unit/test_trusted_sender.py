"""The server API's trusted sender (`Hub.trust`, issue 31) in the core: its messages reach
every member whatever its `accept_from`, in its own FIFO stream or the total order, stamped
with the current view; its atomic messages are confirmed by the view's members; no client may
name itself like it."""

from __future__ import annotations

import pytest
from drive import G, Net, delivered, form

from notify.core import Limits
from notify.core.events import AcceptFrom, Ack, Hello, Join, Leave, Order, Publish

API = "api:app"


def trusted(net: Net) -> int:
    net._conns += 1
    c = net._conns
    net.driver.opened(c)
    net.driver.call(lambda now: net.hub.trust(c, API))
    return c


def publish(net: Net, conn: int, pid: str, *, order: Order = Order.FIFO,
            atomic: bool = False, group: str = G) -> None:
    # the API sends view 0: the core stamps the current view
    net.send(conn, Publish(f"r-{pid}", group, pid, 0, order, {"n": pid}, atomic))


def test_reaches_members_whatever_their_accept_from_in_its_own_stream() -> None:
    net = Net()
    a, b = form(net, "a", "b")  # accept_from: members
    c = net.connect("c")
    net.send(c, Join("j-c", G, accept_from=AcceptFrom.ANY))
    net.flush(a, b)
    for x in (a, b, c):
        net.take(x)
    api = trusted(net)
    publish(net, api, "p1")
    publish(net, api, "p2", order=Order.TOTAL)
    publish(net, api, "p3")
    for x in (a, b, c):
        got = net.take(x, "deliver")
        assert [(f["offset"], f["stream"], f["seq"], f["sender"], f["view"]) for f in got] == [
            (1, f"fifo:{API}", 1, API, 3), (2, "total", 1, API, 3), (3, f"fifo:{API}", 2, API, 3)]
    answers = net.take(api)
    assert [(f["type"], f["id"], f["offset"]) for f in answers] == [
        ("published", "p1", 1), ("published", "p2", 2), ("published", "p3", 3)]
    # it is in no view: nothing of the group's membership reaches it
    assert net.hub.groups[G].view.members == ("a", "b", "c")


def test_a_retry_of_its_id_answers_the_first_offset_and_delivers_nothing() -> None:
    net = Net()
    (a,) = form(net, "a")
    api = trusted(net)
    publish(net, api, "k")
    publish(net, api, "k")
    assert delivered(net.take(a)) == [1]
    assert [(f["type"], f["offset"]) for f in net.take(api)] == [
        ("published", 1), ("published", 1)]


def test_its_answer_waits_for_the_append() -> None:
    net = Net()
    (a,) = form(net, "a")
    api = trusted(net)
    net.writes_held = True
    publish(net, api, "k")
    assert net.take(api) == [] and delivered(net.take(a)) == []
    net.finish_writes()
    assert [f["type"] for f in net.take(api)] == ["published"]
    assert delivered(net.take(a)) == [1]


def test_its_atomic_message_commits_when_every_member_acked_and_it_hears_the_outcome() -> None:
    net = Net()
    a, b = form(net, "a", "b")
    api = trusted(net)
    publish(net, api, "at", atomic=True)
    assert [f["type"] for f in net.take(api)] == ["published"]
    for x in (a, b):
        assert [f["atomic"] for f in net.take(x, "deliver")] == [True]
    net.send(a, Ack(G, (1,)))
    assert net.take(api) == []  # b has not ACKed
    net.send(b, Ack(G, (1,)))
    outcome = net.take(api)
    assert [(f["type"], f["id"], f["offset"], f["committed"]) for f in outcome] == [
        ("outcome", "at", 1, True)]
    assert net.take(a, "confirm") and net.take(b, "confirm")


def test_its_atomic_message_aborts_when_a_member_fails_before_acking() -> None:
    net = Net(suspect_timeout=1.0)
    a, b = form(net, "a", "b")
    api = trusted(net)
    publish(net, api, "at", atomic=True)
    net.take(api)
    net.send(a, Ack(G, (1,)))
    net.drop(b)
    net.advance(1.5)  # b is suspected: a view change, a flushes, the install aborts it
    net.flush(a)
    net.advance(0.1)
    outcome = [f for f in net.take(api) if f["type"] == "outcome"]
    assert [(f["offset"], f["committed"]) for f in outcome] == [(1, False)]


def test_its_atomic_message_to_a_view_of_nobody_commits_once_stored() -> None:
    net = Net()
    (a,) = form(net, "a")
    net.send(a, Leave("l", G))
    net.take(a)
    assert net.hub.groups[G].view.members == ()
    api = trusted(net)
    net.writes_held = True
    publish(net, api, "at", atomic=True)
    assert net.take(api) == []  # neither answer before the append
    net.finish_writes()
    assert [(f["type"], f.get("committed")) for f in net.take(api)] == [
        ("published", None), ("outcome", True)]


def test_a_failed_append_refuses_it_and_says_no_outcome() -> None:
    net = Net()
    (a,) = form(net, "a")
    net.send(a, Leave("l", G))
    net.take(a)
    api = trusted(net)
    net.writes_held = True
    publish(net, api, "at", atomic=True)
    net.finish_writes("disk full")
    assert [(f["type"], f.get("code")) for f in net.take(api)] == [
        ("rejected", "storage_failed")]


def test_it_only_publishes() -> None:
    net = Net()
    form(net, "a")
    api = trusted(net)
    net.send(api, Join("j", G))
    assert [f["code"] for f in net.take(api)] == ["bad_frame"]
    net.send(api, Publish("r", "nowhere", "x", 0, Order.FIFO, 1))
    assert [(f["type"], f["code"]) for f in net.take(api)] == [("rejected", "no_group")]


@pytest.mark.parametrize("member", ["api:app", "api:x"])
def test_no_client_may_name_itself_a_trusted_sender(member: str) -> None:
    net = Net()
    net._conns += 1
    c = net._conns
    net.driver.opened(c)
    net.send(c, Hello(1, member))
    assert [(f["type"], f["code"]) for f in net.take(c)] == [("error", "bad_frame")]
    assert net.hub.session_of(c) is None


def test_trust_refuses_a_client_connection_and_a_non_api_name() -> None:
    net = Net()
    c = net.connect("a")
    with pytest.raises(ValueError):
        net.hub.trust(c, API)
    net._conns += 1
    net.driver.opened(net._conns)
    with pytest.raises(ValueError):
        net.hub.trust(net._conns, "app")


def test_each_atomic_outcome_goes_to_the_connection_that_published_it() -> None:
    """One key publishes through every node of a cluster: at the owner, each edge is its own
    connection of the same trusted sender. Each outcome goes back to the one that asked (it
    went to whichever published last)."""
    net = Net()
    (a,) = form(net, "a")
    one, two = trusted(net), trusted(net)
    publish(net, one, "x", atomic=True)
    publish(net, two, "y", atomic=True)
    net.take(one), net.take(two)
    net.send(a, Ack(G, (1, 2)))
    assert [(f["type"], f["id"]) for f in net.take(one)] == [("outcome", "x")]
    assert [(f["type"], f["id"]) for f in net.take(two)] == [("outcome", "y")]


def test_a_retry_of_an_undecided_atomic_hears_its_outcome() -> None:
    net = Net()
    (a,) = form(net, "a")
    one, two = trusted(net), trusted(net)
    publish(net, one, "x", atomic=True)
    publish(net, two, "x", atomic=True)  # a retry through another node, still undecided
    assert [(f["type"], f["offset"]) for f in net.take(two)] == [("published", 1)]
    net.take(one)
    net.send(a, Ack(G, (1,)))
    assert [(f["type"], f["committed"]) for f in net.take(two)] == [("outcome", True)]


def test_a_retry_of_an_atomic_decided_long_ago_is_answered_with_its_outcome() -> None:
    """The server API has no resume point to name the atomics it holds: a retry of one that
    left the in-memory window is answered with its outcome too (the log decided it)."""
    net = Net(Limits(window_messages=2))
    (a,) = form(net, "a")
    api = trusted(net)
    publish(net, api, "x", atomic=True)
    net.send(a, Ack(G, (1,)))
    for i in range(5):  # the window moves on
        publish(net, api, f"p{i}")
    net.take(api)
    assert net.hub.groups[G].topic.outcome(1) is None  # not in the window any more
    publish(net, api, "x", atomic=True)
    assert [(f["type"], f.get("committed")) for f in net.take(api)] == [
        ("published", None), ("outcome", True)]
