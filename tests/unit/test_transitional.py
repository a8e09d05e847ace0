"""The transitional set (docs/semantics.md, EVS's transitional configuration): on `ViewChanging`
the members expected to move together into the proposed view, on `ViewInstalled` those that did
(the previous view less `left`: every one of them delivered the same previous-view messages,
G2). Computed from what the frames carry (`members` less `joined`/`joining`), in view order. The
TypeScript SDK's tests of the same are web/sdk/test/transitional.test.ts; both replay the shared
cases `transitional_*` of tests/fixtures/protocol_cases.json. The simulator checks it against
the survivors of every stored view under seeded faults (test_simulation.py)."""

from __future__ import annotations

from typing import Any

from client_sdk.events import ViewChanging, ViewInstalled
from client_sdk.protocol import ClientProtocol

G = "g"


def install(view: int, members: list[str], joined: list[str], left: list[str]) -> dict[str, Any]:
    return {"type": "view_install", "group": G, "view": view, "members": members,
            "joined": joined, "left": left, "epoch": 7, "offset": 10 * view}


def change(proposed: int, members: list[str], joining: list[str],
           leaving: list[str]) -> dict[str, Any]:
    return {"type": "view_change", "group": G, "proposed": proposed, "members": members,
            "joining": joining, "leaving": leaving, "reason": "x"}


def joined() -> ClientProtocol:
    """`me` joined G in view 1 with a, b and c (seniority order: a, b, me, c)."""
    p = ClientProtocol("me")
    p.open_join(G, req="j1")
    p.receive(install(1, ["a", "b", "me", "c"], ["me", "c"], []))
    p.data_to_send()
    return p


def views(p: ClientProtocol, frame: dict[str, Any]) -> list[ViewInstalled]:
    return [e for e in p.receive(frame)[0] if isinstance(e, ViewInstalled)]


def changes(p: ClientProtocol, frame: dict[str, Any]) -> list[ViewChanging]:
    return [e for e in p.receive(frame)[0] if isinstance(e, ViewChanging)]


def test_a_joiners_first_view_has_the_members_already_there_not_the_joiner() -> None:
    p = ClientProtocol("me")
    p.open_join(G, req="j1")
    [v] = views(p, install(1, ["a", "b", "me", "c"], ["me", "c"], []))
    assert v.transitional == ("a", "b")


def test_a_failure_the_view_before_less_the_leavers_in_view_order() -> None:
    p = joined()
    [c] = changes(p, change(2, ["a", "me", "c"], [], ["b"]))
    assert c.transitional == ("a", "me", "c")
    [v] = views(p, install(2, ["a", "me", "c"], [], ["b"]))
    assert v.transitional == ("a", "me", "c")


def test_joins_and_leaves_in_one_change_joiners_and_leavers_are_outside_it() -> None:
    p = joined()
    [c] = changes(p, change(2, ["b", "me", "d", "e"], ["d", "e"], ["a", "c"]))
    assert c.transitional == ("b", "me")
    [v] = views(p, install(2, ["b", "me", "d", "e"], ["d", "e"], ["a", "c"]))
    assert v.transitional == ("b", "me")


def test_a_member_that_left_and_joined_again_in_one_change_did_not_move_together() -> None:
    p = joined()
    # b is in both views by name, but its old membership left and a new one joined
    [v] = views(p, install(2, ["a", "me", "c", "b"], ["b"], ["b"]))
    assert "b" in v.members
    assert v.transitional == ("a", "me", "c")


def test_a_restarted_flush_may_shrink_it_and_the_install_says_who_moved() -> None:
    p = joined()
    [first] = changes(p, change(2, ["a", "b", "me", "c", "d"], ["d"], []))
    assert first.transitional == ("a", "b", "me", "c")
    [again] = changes(p, change(2, ["a", "me", "c", "d"], ["d"], ["b"]))
    assert again.transitional == ("a", "me", "c")
    [v] = views(p, install(2, ["a", "me", "c", "d"], ["d"], ["b"]))
    assert v.transitional == ("a", "me", "c")


def test_installs_read_from_the_log_during_a_catch_up_carry_it_too() -> None:
    p = joined()
    p.receive({"type": "catchup_log", "group": G, "after": 10, "before": 31, "view": 1})
    [hist] = p.data_to_send()
    assert hist["type"] == "history"
    page = {"type": "history_page", "req": hist["req"], "group": G, "epoch": 7,
            "messages": [], "aborted": [], "end": 30, "first": 1, "head": 30,
            "installs": [install(2, ["a", "me", "c", "x"], ["x"], ["b"]),
                         install(3, ["me", "c", "x"], [], ["a"])]}
    assert [v.transitional for v in views(p, page)] == [("a", "me", "c"), ("me", "c", "x")]
