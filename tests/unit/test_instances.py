"""Identity = (user, instance) in the core (issue 29, notify/core/users.py): two tabs of one
user are two members; a clash (two connections claiming one instance) is settled by the newer
winning, once; a user has at most `max_instances_per_user` instances."""

from __future__ import annotations

from notify.core import Limits
from notify.core.actions import Error, Send
from notify.core.auth import ALLOW_ALL, Identity
from notify.core.events import Hello, Join
from notify.core.users import member_id, split_member, user_of
from tests.unit.drive import G, Net, delivered, form, view


def join(net: Net, conn: int, *others: int) -> None:
    net.send(conn, Join(f"j{conn}", G))
    net.flush(*others)


def two_tabs(net: Net) -> tuple[int, int, int]:
    """carol, then two instances of alice (t1, t2), each joined in turn: views 1-3."""
    (carol,) = form(net, "carol")
    tab1 = net.connect("alice", instance="t1")
    tab2 = net.connect("alice", instance="t2")
    join(net, tab1, carol)
    join(net, tab2, carol, tab1)
    return carol, tab1, tab2


def test_member_ids_say_user_and_instance() -> None:
    assert member_id("alice", "t1") == "alice#t1"
    assert member_id("alice", None) == "alice"
    assert user_of("alice#t1") == "alice" and user_of("alice") == "alice"
    assert split_member("alice#t1") == ("alice", "t1") and split_member("bob") == ("bob", None)


def test_two_instances_of_one_user_are_two_members_with_their_own_streams() -> None:
    net = Net()
    carol, tab1, tab2 = two_tabs(net)
    assert view(net) == (3, ("carol", "alice#t1", "alice#t2"))
    assert net.closed == set()
    for c in (carol, tab1, tab2):
        net.take(c)
    net.publish(tab1, "x1")
    net.publish(tab2, "y1")
    net.publish(tab1, "x2")
    got = [(f["sender"], f["stream"], f["seq"]) for f in net.take(carol, "deliver")]
    assert got == [("alice#t1", "fifo:alice#t1", 1), ("alice#t2", "fifo:alice#t2", 1),
                   ("alice#t1", "fifo:alice#t1", 2)]


def test_welcome_names_the_user_and_the_instance() -> None:
    net = Net()
    net.driver.opened(1)
    net.send(1, Hello(1, "alice", None, "t1"))
    (w,) = net.take(1, "welcome")
    assert (w["member"], w["user"], w["instance"]) == ("alice#t1", "alice", "t1")
    net.driver.opened(2)
    net.send(2, Hello(1, "bob"))
    (w,) = net.take(2, "welcome")
    assert (w["member"], w["user"], w["instance"]) == ("bob", "bob", None)


def test_an_instance_id_outside_its_alphabet_is_refused() -> None:
    net = Net()
    for bad in ("", "a#b", "x" * 65, "tab 1"):
        net.driver.opened(1)
        net.send(1, Hello(1, "alice", None, bad))
        (e,) = net.take(1)
        assert (e["type"], e["code"]) == ("error", "bad_frame"), bad
        assert net.hub.session_of(1) is None


def test_a_clash_closes_the_older_once_and_the_newer_stays() -> None:
    net = Net()
    (carol,) = form(net, "carol")
    old = net.connect("alice", instance="t1")
    join(net, old, carol)
    before = view(net)[0]
    net.take(carol)
    new = net.connect("alice", instance="t1")  # a copied instance, without its session
    assert old in net.closed and new not in net.closed
    net.send(new, Join("j-new", G))  # its join, right after its hello
    net.advance(0.3)  # past clash_hold
    net.flush(carol, new)
    version, members = view(net)
    assert members == ("carol", "alice#t1") and net.hub.session_of(new) is not None
    # the old instance's removal and the new one's join: one view change
    assert version == before + 1
    (install,) = net.take(carol, "view_install")
    assert install["joined"] == install["left"] == ["alice#t1"]
    (mine,) = net.take(new, "view_install")
    assert mine["view"] == version


def test_a_clash_without_a_join_removes_the_older_after_the_hold() -> None:
    net = Net()
    (carol,) = form(net, "carol")
    old = net.connect("alice", instance="t1")
    join(net, old, carol)
    before = view(net)[0]
    net.connect("alice", instance="t1")  # connects, joins nothing
    net.advance(0.1)
    assert view(net)[0] == before  # held for the newer one's join...
    net.advance(0.2)
    net.flush(carol)
    assert view(net) == (before + 1, ("carol",))  # ...which did not come


def test_a_session_token_for_another_instance_resumes_nothing() -> None:
    net = Net()
    tab1 = net.connect("alice", instance="t1")
    token = net.sessions[tab1]
    net.drop(tab1)
    tab2 = net.connect("alice", token, instance="t2")
    session = net.hub.session_of(tab2)
    assert session is not None and session.member == "alice#t2" and session.token != token
    again = net.connect("alice", token, instance="t1")
    resumed = net.hub.session_of(again)
    assert resumed is not None and resumed.token == token and resumed.member == "alice#t1"


def test_instances_per_user_are_bounded_and_a_disconnected_one_makes_room() -> None:
    net = Net(Limits(max_instances_per_user=2))
    (carol,) = form(net, "carol")
    a = net.connect("alice", instance="a")
    b = net.connect("alice", instance="b")
    join(net, a, carol)
    join(net, b, carol, a)
    net.driver.opened(99)
    net.send(99, Hello(1, "alice", None, "c"))
    (e,) = net.take(99)
    assert (e["type"], e["code"]) == ("error", "too_many_instances")
    assert net.hub.session_of(99) is None
    net.connect("bob", instance="a")  # another user's instances are not counted
    net.drop(a)  # a closed laptop: its session waits to be resumed...
    c = net.connect("alice", instance="c")  # ...until a third instance needs its room
    assert net.hub.session_of(c) is not None
    changes = [f for f in net.take(carol) if f["type"] == "view_change"]
    assert changes and changes[-1]["leaving"] == ["alice#a"]
    assert changes[-1]["reason"] == "instance_limit"


def test_grants_are_the_users_and_a_token_names_the_user_not_the_instance() -> None:
    net = Net()
    net.driver.opened(1)
    net.driver.run(net.hub.hello(1, Hello(1, None, None, "phone"), net.now,
                                 Identity("alice", ALLOW_ALL, None)))
    (w,) = net.take(1, "welcome")
    assert (w["member"], w["user"]) == ("alice#phone", "alice")
    # a refreshed token is for the user: the instance keeps its session
    assert net.hub.refresh(1, Identity("alice", ALLOW_ALL, None), net.now) == []
    (refused,) = net.hub.refresh(1, Identity("bob", ALLOW_ALL, None), net.now)
    assert isinstance(refused, Send) and isinstance(refused.frame, Error)
    assert refused.frame.code == "member_mismatch"


def test_each_instance_gets_every_message_once_in_order() -> None:
    net = Net()
    carol, tab1, tab2 = two_tabs(net)
    for c in (carol, tab1, tab2):
        net.take(c)
    for i in range(5):
        net.publish(carol, f"m{i}")
    got1, got2 = delivered(net.take(tab1)), delivered(net.take(tab2))
    assert got1 == got2 and len(got1) == 5 and got1 == sorted(set(got1))


def test_a_user_id_may_not_hold_the_separator() -> None:
    net = Net()
    net.driver.opened(1)
    net.send(1, Hello(1, "alice#t1"))
    (e,) = net.take(1)
    assert (e["type"], e["code"]) == ("error", "bad_frame")


def test_G14_the_per_user_index_forgets_a_user_whose_instances_are_gone() -> None:
    """The hub indexes sessions by user (`max_instances_per_user`); a user whose instances
    expired or were replaced leaves nothing in that index."""
    net = Net()
    a = net.connect("alice", instance="a")
    b = net.connect("alice", instance="b")
    net.connect("alice", instance="b")  # a clash: the older b is retired at once
    assert list(net.hub._users) == ["alice"] and len(net.hub._users["alice"]) == 2
    net.drop(a)
    net.drop(max(net.sessions))  # the newer b
    assert b in net.closed
    net.advance(60.0)  # past suspect_timeout + flush_timeout: both expire
    assert net.hub._users == {}
