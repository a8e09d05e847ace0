"""The server API's removals in the core (issue 31): `Hub.remove` (a member or every instance of
a user leaves a group by a view change, told why) and `Hub.disconnect` (every session of a user
ends at once: closed 4007, removed from its groups by the normal path, never resumed)."""

from __future__ import annotations

import pytest

from notify.core import group as group_module
from notify.core.errors import CloseCode
from notify.core.events import Hello, Join, ResumePoint
from tests.unit.drive import G, Net, form, view


def _apply(net: Net, removal: object) -> None:
    net.apply(removal.actions)  # type: ignore[attr-defined]


def test_remove_an_instance_tells_it_why_and_the_others_see_a_view_change() -> None:
    net = Net()
    ana, bob, cid = form(net, "ana", "bob", "cid")
    assert view(net) == (3, ("ana", "bob", "cid"))
    r = net.hub.remove(G, "bob", net.now)
    assert r.members == ("bob",) and r.version == 4
    _apply(net, r)
    # the others flush (bob is not asked: it is leaving), then the install reaches everyone
    (vc,) = net.take(ana, "view_change")
    assert vc["leaving"] == ["bob"] and vc["reason"] == "removed"
    assert net.take(bob, "view_change") == []
    net.send(ana, _flush_ok(vc))
    net.send(cid, _flush_ok(vc))
    assert view(net) == (4, ("ana", "cid"))
    assert net.hub.groups[G].installed(4)
    (told,) = net.take(bob, "view_install")
    assert told["left"] == ["bob"] and told["reason"] == "removed"
    (plain,) = net.take(cid, "view_install")
    assert "reason" not in plain and plain["left"] == ["bob"]
    assert bob not in net.closed  # removed from the group, not disconnected


def test_remove_a_user_removes_every_instance_of_it_in_one_view_change() -> None:
    net = Net()
    (carol,) = form(net, "carol")
    tabs = [net.connect("alice", instance=i) for i in ("t1", "t2")]
    others = [carol]
    for t in tabs:
        net.send(t, Join(f"j{t}", G))
        net.flush(*others)
        others.append(t)
    for c in (carol, *tabs):
        net.take(c)
    assert view(net) == (3, ("carol", "alice#t1", "alice#t2"))
    r = net.hub.remove(G, "alice", net.now)
    assert set(r.members) == {"alice#t1", "alice#t2"} and r.version == 4
    _apply(net, r)
    net.flush(carol)
    assert view(net) == (4, ("carol",))
    for t in tabs:
        (told,) = net.take(t, "view_install")
        assert told["reason"] == "removed"


def test_remove_one_instance_by_its_member_id_keeps_the_user_s_other_instances() -> None:
    net = Net()
    (carol,) = form(net, "carol")
    t1, t2 = (net.connect("alice", instance=i) for i in ("t1", "t2"))
    net.send(t1, Join("j1", G))
    net.flush(carol)
    net.send(t2, Join("j2", G))
    net.flush(carol, t1)
    r = net.hub.remove(G, "alice#t2", net.now)
    assert r.members == ("alice#t2",)
    _apply(net, r)
    net.flush(carol, t1)
    assert view(net)[1] == ("carol", "alice#t1")


def test_remove_nobody_matches_changes_nothing() -> None:
    net = Net()
    form(net, "ana")
    for target in ("bob", "ana#x", "an"):
        r = net.hub.remove(G, target, net.now)
        assert r.members == () and r.version == 0 and r.actions == []
    assert net.hub.remove("nope", "ana", net.now).members == ()
    assert view(net) == (1, ("ana",))


def test_a_removed_member_s_publishes_are_refused_leaving_until_the_install() -> None:
    net = Net()
    _ana, bob = form(net, "ana", "bob")
    _apply(net, net.hub.remove(G, "bob", net.now))
    net.publish(bob, "p1")
    (rej,) = net.take(bob, "rejected")
    assert rej["code"] == "leaving"


def test_removal_of_a_suspect_member_is_not_called_off_by_its_resume() -> None:
    net = Net()
    ana, bob = form(net, "ana", "bob")
    net.drop(bob)
    _apply(net, net.hub.remove(G, "bob", net.now))
    net.flush(ana)
    assert view(net) == (3, ("ana",))


def test_disconnect_closes_every_connection_of_the_user_and_removes_it_at_once() -> None:
    net = Net()
    (carol,) = form(net, "carol")
    t1, t2 = (net.connect("alice", instance=i) for i in ("t1", "t2"))
    net.send(t1, Join("j1", G))
    net.flush(carol)
    net.send(t2, Join("j2", G))
    net.flush(carol, t1)
    net.take(carol)
    closes: list[tuple[int, int]] = []
    net.close = lambda conn, code, reason, *, drain: (  # type: ignore[method-assign]
        closes.append((conn, code)), net.closed.add(conn))
    r = net.hub.disconnect("alice", net.now)
    assert set(r.members) == {"alice#t1", "alice#t2"}
    _apply(net, r)
    assert sorted(closes) == [(t1, CloseCode.DISCONNECTED), (t2, CloseCode.DISCONNECTED)]
    # no suspect timeout: the view change is proposed now (restarted for the second one)
    *_, vc = net.take(carol, "view_change")
    assert vc["reason"] == "disconnected" and set(vc["leaving"]) == {"alice#t1", "alice#t2"}
    net.send(carol, _flush_ok(vc))
    assert view(net) == (4, ("carol",))
    # the old session cannot be resumed: a hello with its token starts a new one
    c = net._conns + 1
    net._conns = c
    net.driver.opened(c)
    net.send(c, Hello(1, "alice", net.sessions[t1], "t1"))
    (w,) = net.take(c, "welcome")
    assert w["resumed"] is False
    assert net.hub.disconnect("nobody", net.now).members == ()


def _flush_ok(vc: dict[str, object]) -> object:
    from notify.core.events import FlushOk
    return FlushOk(str(vc["group"]), int(vc["proposed"]))  # type: ignore[call-overload]


def test_removal_of_the_only_member_is_installed_at_once_and_names_that_view() -> None:
    net = Net()
    (ana,) = form(net, "ana")
    r = net.hub.remove(G, "ana", net.now)
    _apply(net, r)
    assert r.version == 2 and view(net) == (2, ())
    assert net.hub.groups[G].installed(2) and not net.hub.groups[G].installed(3)
    (told,) = net.take(ana, "view_install")
    assert (told["view"], told["reason"]) == (2, "removed")


def test_a_member_removed_while_away_is_refused_its_resuming_join_but_may_join_afresh() -> None:
    net = Net()
    ana, bob = form(net, "ana", "bob")
    token = net.sessions[bob]
    net.drop(bob)  # away (SUSPECT): it will never see the install that removes it
    _apply(net, net.hub.remove(G, "bob", net.now))
    net.flush(ana)
    assert view(net) == (3, ("ana",))
    # it comes back within its session's life, resumes it, and rejoins from its resume point
    back = net.connect("bob", session=token)
    net.send(back, Join("r1", G, resume=ResumePoint(1, 0, 2, {})))
    (err,) = net.take(back, "error")
    assert (err["code"], err["req"]) == ("removed", "r1")
    assert view(net) == (3, ("ana",))
    # the application may join again: without a resume point it is let in
    net.send(back, Join("j2", G))
    net.flush(ana)
    assert view(net) == (4, ("ana", "bob"))
    # and the memory of the removal went with that join (a later resume is not refused)
    assert net.hub.groups[G]._expelled == {}


def _removed_while_away(net: Net, ana: int, name: str) -> str:
    """`name` joins, drops, and is removed while away: its session token."""
    c = net.connect(name)
    net.send(c, Join(f"j-{name}", G))
    net.flush(ana)
    token = net.sessions[c]
    net.drop(c)
    _apply(net, net.hub.remove(G, name, net.now))
    net.flush(ana)
    return token


def _resume_refused(net: Net, name: str, token: str) -> bool:
    back = net.connect(name, session=token)
    net.send(back, Join("r", G, resume=ResumePoint(1, 0, 2, {})))
    return [e["code"] for e in net.take(back, "error")] == ["removed"]


def test_the_memory_of_removals_is_bounded_and_forgets_the_oldest(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_module, "MAX_EXPELLED", 2)
    net = Net(suspect_timeout=60.0)
    (ana,) = form(net, "ana")
    tokens = {n: _removed_while_away(net, ana, n) for n in ("b1", "b2", "b3")}
    assert list(net.hub.groups[G]._expelled) == ["b2", "b3"]  # (G14) b1 went first
    assert not _resume_refused(net, "b1", tokens["b1"])  # forgotten: let back in
    assert _resume_refused(net, "b3", tokens["b3"])


def test_the_memory_of_a_removal_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_module, "EXPELLED_MEMORY", 5.0)
    net = Net(suspect_timeout=60.0)
    (ana,) = form(net, "ana")
    token = _removed_while_away(net, ana, "bob")
    net.advance(6.0)
    assert not _resume_refused(net, "bob", token)  # past its memory: a resume is let in
    assert "bob" not in net.hub.groups[G]._expelled
