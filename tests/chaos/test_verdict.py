"""The chaos verdict can fail: planted loss, duplicate, reordering and disagreeing views are each
caught, and the clean histories pass. Built on the Spark tests' hand-made logs
(tests/spark/handmade.py), extended with publish ids and acknowledgements."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from notify_chaos.verdict import check
from tests.spark import handmade

Line = dict[str, Any]
CATS = ("acked_lost", "duplicates", "out_of_order", "view_disagreements")


def _events(h: dict[str, list[Line]]) -> list[Line]:
    return [x for lines in h.values() for x in lines]


def _counts(v: dict[str, Any]) -> dict[str, int]:
    return {k: v[k]["count"] for k in CATS}


def with_acks(h: dict[str, list[Line]]) -> tuple[dict[str, list[Line]], list[Line]]:
    """The hand-made history with a publish id on every delivery and an ack for every message
    that was delivered (acked just after its accept, before anyone delivered it)."""
    h = copy.deepcopy(h)
    acks: dict[int, Line] = {}
    for lines in h.values():
        for x in lines:
            if x["event"] == "client.deliver":
                x["pid"] = f"{x['sender']}-{x['offset']}"
                acks[x["offset"]] = {"pid": x["pid"], "group": x["group"], "offset": x["offset"],
                                     "sent_ts": x["sent_ts"], "ts": x["sent_ts"] + 0.0001}
    return h, sorted(acks.values(), key=lambda a: a["ts"])


def test_clean_history_passes() -> None:
    h, acks = with_acks(handmade.clean_history())
    v = check(_events(h), acks)
    assert v["ok"] and _counts(v) == dict.fromkeys(CATS, 0)
    assert v["checked"]["deliveries"] == 17 and v["checked"]["acks"] == 6


@pytest.mark.parametrize(("variant", "category"), [
    ("reordered_fifo", "out_of_order"),
    ("duplicate", "duplicates"),
    ("missing_in_view", "view_disagreements"),
])
def test_each_planted_violation_is_caught(variant: str, category: str) -> None:
    build, _ = handmade.VARIANTS[variant]
    v = check(_events(build()))
    assert not v["ok"]
    counts = _counts(v)
    assert counts[category] >= 1, counts
    assert all(n == 0 for k, n in counts.items() if k != category), counts
    assert v[category]["examples"]


def test_planted_loss_of_an_acked_message_is_caught() -> None:
    h, acks = with_acks(handmade.clean_history())
    # bob never delivers offset 7 (alice's message in view 2, acked while bob was a member)
    h["bob"] = [x for x in h["bob"] if not (x["event"] == "client.deliver" and x["offset"] == 7)]
    v = check(_events(h), acks)
    assert _counts(v) == {"acked_lost": 1, "duplicates": 0, "out_of_order": 0,
                          "view_disagreements": 0}
    assert "bob never delivered g1 alice-7" in v["acked_lost"]["examples"][0]


def test_a_member_not_in_the_group_throughout_is_not_owed_the_message() -> None:
    h, acks = with_acks(handmade.clean_history())
    # carol was removed (view 2 without her): offset 7 was acked after she stopped being a
    # member; so she is not owed it (she logs no Removed: her last view is 1, and she is not in
    # view 2). Mark her removal explicitly, as the SDK's Removed event would.
    h["carol"].append({"ts": acks[-1]["ts"] - 1, "event": "client.view", "node": "carol",
                       "group": "g1", "member": "carol", "view": 2, "members": [],
                       "removed": True})
    late = {"pid": "alice-99", "group": "g1", "offset": 99, "sent_ts": handmade.T0 - 10,
            "ts": handmade.T0 - 10}  # acked before anyone had joined
    v = check(_events(h), [*acks, late])
    assert v["ok"], v


def test_a_reset_does_not_excuse_a_loss() -> None:
    """After a Reset (the server's log was lost: memory store restarted) a member still owed
    what was acknowledged while it was a member: that is the negative control's loss."""
    h, acks = with_acks(handmade.clean_history())
    t = acks[-1]["ts"]
    h["bob"] = [x for x in h["bob"] if not (x["event"] == "client.deliver" and x["offset"] == 7)]
    h["bob"].append({"ts": t + 1, "event": "client.reset", "node": "bob", "group": "g1",
                     "member": "bob", "reason": "offset_unavailable", "epoch": 42})
    v = check(_events(h), acks)
    assert v["acked_lost"]["count"] == 1


def test_duplicate_by_publish_id_at_two_offsets() -> None:
    """A publish re-sent after its log was reset lands at a new offset: delivered twice."""
    h, acks = with_acks(handmade.clean_history())
    d = next(x for x in h["alice"] if x["event"] == "client.deliver" and x["offset"] == 7)
    h["alice"].append({**d, "offset": 1, "epoch": 42, "seq": 1, "recv_ts": d["recv_ts"] + 1,
                       "n": d["n"] + 1})
    v = check(_events(h), acks)
    assert _counts(v)["duplicates"] == 1
    assert "at 2 places" in v["duplicates"]["examples"][0]


def test_offsets_reused_in_a_new_epoch_are_not_duplicates_or_disorder() -> None:
    h, acks = with_acks(handmade.clean_history())
    d = next(x for x in h["alice"] if x["event"] == "client.deliver" and x["offset"] == 7)
    h["alice"].append({**d, "offset": 7, "seq": 1, "epoch": 42, "pid": "alice-new",
                       "recv_ts": d["recv_ts"] + 1, "n": d["n"] + 1})
    v = check(_events(h), acks)
    assert v["ok"], v


def test_views_with_different_member_lists_disagree() -> None:
    h = handmade.clean_history()
    v2 = next(x for x in h["bob"] if x["event"] == "client.view" and x["view"] == 2)
    v2["members"] = ["alice", "bob", "mallory"]
    v = check(_events(h))
    assert _counts(v)["view_disagreements"] == 1
    assert "view 2" in v["view_disagreements"]["examples"][0]


# -- view-change accounting (issue 29: a user's devices flapping must not cause a storm) ------

def _sv(ts: float, event: str, **f: Any) -> Line:
    return {"ts": ts, "event": event, "node": "server", "group": "g1", **f}


def _install(ts: float, view: int, *members: str) -> Line:
    return _sv(ts, "view.install", view=view, members=list(members))


def _away(ts: float, member: str, *, resumed_after: float | None = None) -> list[Line]:
    """`member`'s link drops at `ts` (its own log and the server's suspicion), and with
    `resumed_after` it is back within the suspect timeout (the server resumes it)."""
    out = [{"ts": ts, "event": "client.disconnect", "node": member, "member": member},
           _sv(ts, "member.suspect", member=member)]
    if resumed_after is not None:
        out.append(_sv(ts + resumed_after, "member.resume", member=member,
                       gap_ms=resumed_after * 1000))
    return out


PUB, A, B = "publisher-1#x", "alice#phone", "alice#laptop"


def _two_devices() -> list[Line]:
    """alice's laptop blips (resumed: no view change), her phone is away long enough to be
    removed and then rejoins: 1 install for the joins, 2 for the phone."""
    return [_install(0.0, 1, PUB, A, B), *_away(1.0, B, resumed_after=1.0),
            *_away(2.0, A), _install(4.0, 2, PUB, B), _install(5.0, 3, PUB, B, A)]


def test_a_users_devices_coming_and_going_explain_its_view_changes() -> None:
    vc = check(_two_devices())["view_changes"]
    assert vc["ok"] and vc["unexplained"]["count"] == 0
    assert (vc["installs"], vc["explained_installs"]) == (3, 3)
    assert vc["changes"] == {"joins": 3, "rejoins": 1, "removals": 1, "leaves": 0}
    assert vc["explained_changes"] == 5 and vc["resumed"] == 1
    assert vc["by_user"]["alice"] == {"instances": 2, "disconnects": 2, "suspects": 2,
                                      "resumed": 1, "removals": 1, "rejoins": 1, "installs": 3}


def test_a_leave_is_its_own_going() -> None:
    ev = [_install(0.0, 1, PUB, A, B),
          _sv(1.0, "view.propose", view=1, proposed=2, reason="leave", members=[PUB, A]),
          _install(1.1, 2, PUB, A)]
    vc = check(ev)["view_changes"]
    assert vc["ok"] and vc["changes"]["leaves"] == 1


@pytest.mark.parametrize(("extra", "rule"), [
    # a view change that changes nobody, again and again
    ([_install(6.0, 4, PUB, B, A), _install(7.0, 5, PUB, B, A)], "no_change"),
    # the laptop removed while its connection was up (never suspected), then back
    ([_install(6.0, 4, PUB, A), _install(7.0, 5, PUB, A, B)], "removed_connected"),
    # the phone removed again: the server suspected it, but its own log lost no connection
    ([_sv(6.0, "member.suspect", member=A), _install(8.0, 4, PUB, B),
      _install(9.0, 5, PUB, B, A)], "more_removals_than_disconnects"),
])
def test_a_view_change_storm_is_flagged(extra: list[Line], rule: str) -> None:
    v = check([*_two_devices(), *extra])
    vc = v["view_changes"]
    assert not vc["ok"] and not v["ok"]
    assert vc["unexplained"]["by_rule"].get(rule, 0) >= 1, vc["unexplained"]
    assert vc["unexplained"]["examples"]
    # the safety categories are clean: only the accounting fails
    assert _counts(v) == dict.fromkeys(CATS, 0)


def test_the_handmade_history_removes_carol_after_her_suspicion() -> None:
    vc = check(_events(handmade.clean_history()))["view_changes"]
    assert vc["ok"] and vc["changes"]["removals"] == 1 and vc["resumed"] == 1


# -- issue 32: the send counter, the SDK's hidden duplicates, the scenario's expectations ----

RULES_32 = ("sender_fifo", "sdk_duplicates", "expectations")


def with_counters(h: dict[str, list[Line]]) -> dict[str, list[Line]]:
    """Every delivery carries its sender's send counter (`ctr`): in the hand-made history each
    sender sends its messages in offset order, so its counters are 1, 2, 3... by offset."""
    h = copy.deepcopy(h)
    offsets: dict[str, list[int]] = {}
    for lines in h.values():
        for x in lines:
            if x["event"] == "client.deliver":
                offsets.setdefault(x["sender"], []).append(x["offset"])
    ctr = {(s, o): i + 1 for s, offs in offsets.items() for i, o in enumerate(sorted(set(offs)))}
    for lines in h.values():
        for x in lines:
            if x["event"] == "client.deliver":
                x["ctr"] = ctr[(x["sender"], x["offset"])]
    return h


def _deliveries(lines: list[Line], sender: str) -> list[Line]:
    return [x for x in lines if x["event"] == "client.deliver" and x["sender"] == sender]


def test_a_clean_history_with_counters_passes_the_new_rules() -> None:
    h, acks = with_acks(with_counters(handmade.clean_history()))
    reports = [{"ts": handmade.T0 + 9, "event": "client.sdk_duplicates", "node": m,
                "member": m, "group": "g1", "dropped": 0} for m in ("alice", "bob")]
    v = check([*_events(h), *reports], acks)  # (carol dropped for good: no report)
    assert v["ok"], v
    assert all(v[k]["count"] == 0 for k in RULES_32)
    assert v["checked"]["with_counter"] == v["checked"]["deliveries"] == 17
    assert v["checked"]["sdk_duplicate_reports"] == 2


def test_a_fifo_senders_counters_going_back_at_a_member_fail_the_verdict() -> None:
    """Server seqs in order, but the sender's own order broken (cluster review S2: a later
    publish accepted before an earlier one): only the counter shows it."""
    h = with_counters(handmade.clean_history())
    first, second = _deliveries(h["bob"], "alice")[:2]
    first["ctr"], second["ctr"] = second["ctr"], first["ctr"]
    v = check(_events(h))
    assert not v["ok"]
    assert v["sender_fifo"]["count"] == 1 and v["sender_fifo"]["by_rule"] == {"went_back": 1}
    assert "bob in g1 from alice: counter 1" in v["sender_fifo"]["examples"][0]
    assert _counts(v) == dict.fromkeys(CATS, 0)  # seqs and offsets are all in order


def test_a_repeated_counter_fails_and_total_order_streams_are_not_fifo_senders() -> None:
    h = with_counters(handmade.clean_history())
    first, second = _deliveries(h["alice"], "alice")[:2]
    second["ctr"] = first["ctr"]
    # bob publishes in total order: his counters are not a FIFO stream's, not checked
    b1, b2 = _deliveries(h["alice"], "bob")[:2]
    b1["ctr"], b2["ctr"] = 9, 1
    v = check(_events(h))
    assert v["sender_fifo"]["count"] == 1 and v["sender_fifo"]["by_rule"] == {"repeated": 1}


def test_duplicates_the_sdk_dropped_fail_the_verdict() -> None:
    h, acks = with_acks(handmade.clean_history())
    reports = [{"ts": handmade.T0 + 9, "event": "client.sdk_duplicates", "node": "bob",
                "member": "bob", "group": "g1", "dropped": 3},
               {"ts": handmade.T0 + 9, "event": "client.sdk_duplicates", "node": "alice",
                "member": "alice", "group": "g1", "dropped": 0}]
    v = check([*_events(h), *reports], acks)
    assert not v["ok"]
    assert v["sdk_duplicates"]["count"] == 3
    assert v["sdk_duplicates"]["examples"] == ["bob's SDK dropped 3 duplicate deliveries of g1"]


def test_a_delivery_later_than_the_stated_bound_after_its_ack_fails() -> None:
    h, acks = with_acks(handmade.clean_history())
    assert check(_events(h), acks, expect={"late_after_ack": 1.0})["ok"]
    d = _deliveries(h["bob"], "alice")[-1]  # alice's view-2 message, 5 s late at bob
    d["recv_ts"] += 5.0
    v = check(_events(h), acks, expect={"late_after_ack": 1.0})
    assert not v["ok"] and v["expectations"]["count"] == 1
    assert v["expectations"]["by_rule"] == {"late_after_ack": 1}
    assert v["expectations"]["measured"]["max_after_ack_s"] > 5.0
    assert check(_events(h), acks)["ok"]  # no bound stated: late is not lost


def test_more_removals_than_the_scenario_expects_fail() -> None:
    ev = _events(handmade.clean_history())  # carol is removed after her suspect timeout
    assert check(ev, expect={"removals": 1})["ok"]
    v = check(ev, expect={"removals": 0})
    assert not v["ok"] and v["expectations"]["by_rule"] == {"removals": 1}
    assert v["expectations"]["measured"] == {"removals": 1}
