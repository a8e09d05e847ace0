"""The report's per-group takeover times after an owner fault (issue 32): from the fault to
the answer of the first publish made after it, for the victim's groups against 2 x lease TTL."""

from __future__ import annotations

from typing import Any

from notify_chaos.report import takeover, takeover_lines

T0 = 1_800_000_000.0


def _ack(group: str, sent: float, ts: float) -> dict[str, Any]:
    return {"pid": f"p-{group}-{sent}", "group": group, "offset": 1, "sent_ts": T0 + sent,
            "ts": T0 + ts}


def test_takeover_times_each_group_from_the_fault_to_a_later_publish_answered() -> None:
    acks = [
        _ack("a", 9.0, 12.5),   # made before the fault, answered after: not counted
        _ack("a", 10.2, 13.0),  # the victim's group a serves again 3.0 s after the fault
        _ack("a", 10.4, 13.1),
        _ack("b", 10.1, 16.5),  # the victim's group b: 6.5 s, past 2 x TTL = 4 s
        _ack("c", 10.3, 10.35),  # another node's group: at once
        {"pid": "x", "group": "d", "sent_ts": T0 + 10.5, "ts": T0 + 20, "error": "Timeout"},
    ]
    victim = {"ts": T0 + 10.0, "node": "node-2", "groups": ["a", "b", "d"]}
    t = takeover({"acks": acks, "t0": T0}, victim, ["a", "b", "c", "d"], 4.0)
    assert t["groups"] == {"a": {"owned": True, "serves_again_s": 3.0},
                           "b": {"owned": True, "serves_again_s": 6.5},
                           "c": {"owned": False, "serves_again_s": 0.35},
                           "d": {"owned": True, "serves_again_s": None}}
    assert (t["owned"], t["owned_served_again"], t["owned_within_bound"]) == (3, 2, 1)
    assert (t["owned_max_s"], t["others_max_s"], t["fault_t"]) == (6.5, 0.35, 10.0)
    (line,) = takeover_lines({"actions": [{"label": "kill-owner", "takeover": t}]})
    assert "2 of its 3 groups served again, 1 within 2 x lease TTL = 4 s" in line
