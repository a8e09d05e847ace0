"""The what-if replay driver (spark_analysis/replay.py): hand-built timelines whose outcome
through the real core is known exactly, without Spark."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import spark_analysis.replay as replay_module
from spark_analysis.replay import (
    Candidate,
    Outcome,
    Start,
    Step,
    away_horizon,
    replay,
    replay_candidates,
    start_of,
    timeline,
)

RTT = 0.01


def joins(*members: str) -> list[Step]:
    """One join a second (each its own view change: nothing to merge)."""
    return [Step(float(i), "join", m) for i, m in enumerate(members)]


def test_two_removals_in_one_flush_are_one_view_change() -> None:
    # a and b drop 1 s apart and never return. a's removal (due at 13) proposes v5; b, still
    # SUSPECT, is in its flush set and cannot answer, so the flush waits until b's own removal
    # (due at 14) joins the proposal: ONE install at 14 removes both (DESIGN §4). Counting each
    # gap alone would say 2 view changes and 3 s of detection delay each.
    steps = [*joins("a", "b", "c", "d"), Step(10.0, "drop", "a"), Step(11.0, "drop", "b")]
    o = replay("g", steps, Candidate.of(3.0, RTT), end=100.0)
    assert o.view_changes == 4 + 1
    assert o.removals == 2 and o.never_returned == 2 and o.detected == 2
    assert o.false_removals == 0 and o.censored_gaps == 0
    assert o.detection_delay_s == pytest.approx((14.0 - 10.0) + (14.0 - 11.0))
    assert o.ghost_member_s == pytest.approx(7.0)
    assert o.installs == 1 + 2 + 3 + 4 + 2  # view_install frames: each member, each view
    assert o.proposals == 4 + 2  # b's removal restarted the flush: proposed again


def test_a_suspect_that_resumes_during_the_flush_lets_it_finish() -> None:
    # a is gone; b drops 2 s later and comes back at 14, inside its 3 s: it resumes, answers
    # the view_change repeated to it, and the install removes a alone, at 14 + RTT.
    steps = [*joins("a", "b", "c"), Step(10.0, "drop", "a"), Step(12.0, "drop", "b"),
             Step(14.0, "return", "b")]
    o = replay("g", steps, Candidate.of(3.0, RTT), end=100.0)
    assert o.view_changes == 3 + 1
    assert o.returning_gaps == 1 and o.false_removals == 0
    assert o.removals == 1 and o.detected == 1
    assert o.detection_delay_s == pytest.approx(4.0 + RTT)


def test_the_only_leaver_back_before_the_install_cancels_the_change() -> None:
    # c drops at 10 and returns at 13.005, while the flush that removes it (proposed at 13)
    # waits for a and b's flush_ok (RTT): Table 1, the proposal is called off, v3 resumes.
    steps = [*joins("a", "b", "c"), Step(10.0, "drop", "c"), Step(13.005, "return", "c")]
    o = replay("g", steps, Candidate.of(3.0, RTT), end=100.0)
    assert o.view_changes == 3 and o.cancelled == 1
    assert o.returning_gaps == 1 and o.false_removals == 0 and o.removals == 0


@pytest.mark.parametrize(("timeout", "view_changes", "false_removals", "ghost"),
                         [(3.0, 5 + 2 + 1, 1, 3.0), (10.0, 5 + 1, 0, 10.0),
                          (60.0, 5, 0, 40.0)])
def test_gaps_far_apart_cost_what_the_closed_form_says(timeout: float, view_changes: int,
                                                       false_removals: int, ghost: float) -> None:
    # Nothing can merge: each gap is alone. A 1 s hand-off resumes; a 6 s gap is a removal and
    # a rejoin when longer than T; e never returns (removed T after its drop, or, at T=60,
    # not before the log ends 40 s later: censored, charged the 40 s it was seen away).
    steps = [*joins("a", "b", "c", "d", "e"), Step(10.0, "drop", "a"), Step(11.0, "return", "a"),
             Step(30.0, "drop", "b"), Step(36.0, "return", "b"), Step(60.0, "drop", "e")]
    o = replay("g", steps, Candidate.of(timeout, 0.0), end=100.0)
    assert o.view_changes == view_changes
    assert o.false_removals == false_removals and o.returning_gaps == 2
    assert o.never_returned == 1 and o.censored_gaps == (1 if timeout > 40 else 0)
    assert o.ghost_member_s == pytest.approx(ghost)
    if timeout <= 40:
        assert o.detection_delay_s == pytest.approx(timeout)


def test_a_voluntary_leave_and_rejoin_are_two_view_changes() -> None:
    steps = [*joins("a", "b"), Step(5.0, "leave", "b"), Step(6.0, "join", "b")]
    o = replay("g", steps, Candidate.of(3.0, RTT), end=20.0)
    assert o.view_changes == 4 and o.removals == 0


def test_timeline_keeps_requests_and_leaves_what_the_timeout_did_to_the_replay() -> None:
    views = [(0.0, ("a", "b", "c")),
             (5.0, ("a", "b")),  # c left while connected: a leave
             (8.0, ("a", "b", "c")),  # ... and joined again
             (23.0, ("a", "c")),  # b was removed while away (dropped at 20): not an input
             (26.0, ("a", "b", "c"))]  # b's rejoin after its return at 25.9: not an input
    conns = [(20.0, "drop", "b"), (25.9, "return", "b")]
    steps = timeline(views, conns)  # type: ignore[arg-type]
    assert [(s.ts, s.kind, s.member) for s in steps] == [
        (0.0, "join", "a"), (0.0, "join", "b"), (0.0, "join", "c"), (5.0, "leave", "c"),
        (8.0, "join", "c"), (20.0, "drop", "b"), (25.9, "return", "b")]
    # with the client's own requests, those are the inputs for that member
    asked = timeline(views, conns, [(4.5, "leave", "c"), (7.0, "join", "c")])  # type: ignore[list-item]
    assert [(s.ts, s.kind, s.member) for s in asked if s.member == "c"] == [
        (4.5, "leave", "c"), (7.0, "join", "c")]


def test_an_atomic_message_a_member_away_cannot_ack_removes_it_after_ack_timeout() -> None:
    # T = 30 s, but c is away when a sends an atomic message: c cannot ACK it, and after
    # ack_timeout (10 s) it is removed (DESIGN §4) long before its suspect timeout.
    steps = [*joins("a", "b", "c"), Step(10.0, "drop", "c"), Step(11.0, "publish", "a"),
             Step(35.0, "return", "c")]
    o = replay("g", steps, Candidate.of(30.0, RTT), end=100.0)
    assert o.view_changes == 3 + 2 and o.false_removals == 1 and o.returning_gaps == 1
    assert replay("g", [s for s in steps if s.kind != "publish"], Candidate.of(30.0, RTT),
                  end=100.0).view_changes == 3


@pytest.mark.timeout(20)
def test_an_ack_deadline_where_float_sum_and_difference_disagree_is_met() -> None:
    # 118.01 + 10.0 - 118.01 < 10.0: the core used to find nothing due at the deadline it had
    # named, and the replay's clock stayed there for ever (tests/unit/test_deadlines_are_met.py)
    steps = [*joins("a", "b", "c"), Step(117.0, "drop", "c"), Step(118.01, "publish", "a"),
             Step(200.0, "return", "c")]
    o = replay("g", steps, Candidate.of(30.0, RTT), end=300.0)
    assert o.view_changes == 3 + 2 and o.removals == 1 and o.false_removals == 1


def test_the_logged_start_is_taken_as_it_is_up_to_the_first_drop() -> None:
    # Five joins the server merged into two installs (a burst at startup) before anyone was
    # away: no timeout changes that, so the replay starts from the second view and counts two.
    installs = [(0.01, ("a",)), (0.03, ("a", "b", "c", "d", "e")), (12.0, ("a", "b", "c", "e"))]
    conns = [(9.0, "drop", "d")]
    start = start_of(installs, conns)  # type: ignore[arg-type]
    assert start == Start(0.03, ("a", "b", "c", "d", "e"), 2, 1 + 5)
    steps = [*(Step(0.0, "join", m) for m in "abcde"), Step(9.0, "drop", "d")]
    o = replay("g", steps, Candidate.of(3.0, RTT), end=100.0, start=start)
    assert o.view_changes == 2 + 1 and o.installs == 6 + 4 and o.detected == 1
    assert o.detection_delay_s == pytest.approx(3.0 + RTT)
    # re-simulated, the five joins at one instant are three installs, not two
    assert replay("g", steps, Candidate.of(3.0, RTT), end=100.0).view_changes == 3 + 1
    assert start_of(installs, []) == Start(12.0, ("a", "b", "c", "e"), 3, 1 + 5 + 4)
    assert start_of(installs, [(0.005, "drop", "a")]) is None


def test_the_replay_driver_imports_no_spark() -> None:
    # It runs on Spark's executors but must stay plain Python: testable here, usable anywhere.
    from test_core_is_pure import imported

    import spark_analysis.replay as driver

    assert imported(Path(driver.__file__)) & {"pyspark", "pandas", "pyarrow"} == set()


def test_away_horizon_is_the_longest_gap_open_ones_up_to_the_end() -> None:
    steps = [*joins("a", "b", "c"), Step(10.0, "drop", "a"), Step(12.5, "return", "a"),
             Step(20.0, "drop", "b"), Step(21.0, "return", "b"), Step(90.0, "drop", "c")]
    assert away_horizon(steps, end=100.0) == pytest.approx(10.0)  # c, still away at the end
    assert away_horizon(steps, end=91.0) == pytest.approx(2.5)  # a's
    assert away_horizon(joins("a", "b"), end=100.0) == 0.0


def test_candidates_longer_than_every_gap_share_one_replay_with_the_same_outcome(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # gaps of 0.5, 2 and 4 s (and an atomic message): 1, 3 and 4 s each see some gap go past
    # them; 5, 10 and 60 s see none, so their replays are the same one, run once.
    steps = [*joins("a", "b", "c"), Step(10.0, "drop", "a"), Step(10.5, "return", "a"),
             Step(20.0, "drop", "b"), Step(20.1, "publish", "c"), Step(22.0, "return", "b"),
             Step(30.0, "drop", "c"), Step(34.0, "return", "c")]
    timeouts = (1.0, 60.0, 3.0, 5.0, 4.0, 10.0)
    cands = [Candidate.of(t, RTT) for t in timeouts]
    alone = [replay("g", steps, c, end=100.0) for c in cands]
    assert len({o.view_changes for o in alone}) > 1  # the short ones do differ

    ran: list[float] = []

    def counted(group: str, steps: list[Step], c: Candidate, end: float,
                start: Start | None = None) -> Outcome:
        ran.append(c.timeouts.suspect_timeout)
        return replay(group, steps, c, end, start)

    monkeypatch.setattr(replay_module, "replay", counted)
    shared = replay_candidates("g", steps, cands, end=100.0)
    assert [o.as_dict() for o, _ in shared] == [o.as_dict() for o in alone]
    assert sorted(ran) == [1.0, 3.0, 4.0, 60.0]  # 60 s stands for 5 and 10 s too
    assert [cpu is None for _, cpu in shared] == [False, False, False, True, False, True]


def test_the_parsed_frames_memo_stays_within_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replay_module, "_PARSED", {})
    monkeypatch.setattr(replay_module, "_PARSED_MAX", 3)
    frames = [{"type": "flush_ok", "group": "g", "view": v} for v in range(10)]
    for f in frames * 2:
        parsed = replay_module._parsed(f)
        assert parsed == replay_module._parsed(dict(f))  # a repeat: the memo's answer, same
        assert len(replay_module._PARSED) <= 3
    assert replay_module._parsed(frames[0]) is replay_module._parsed(frames[0])


def test_a_gap_nobody_could_notice_is_counted_not_replayed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # b's 1 s gap at 20 comes while the group is settled and nothing else happens until it
    # is back (and its resume back to it): passed over. c's at 30 comes back 1 ms before a's
    # drop: replayed (a's drop would come before c's resume reached c).
    steps = [*joins("a", "b", "c"), Step(20.0, "drop", "b"), Step(21.0, "return", "b"),
             Step(30.0, "drop", "c"), Step(31.0, "return", "c"), Step(31.001, "drop", "a")]
    passed: list[tuple[str, bool]] = []
    unseen = replay_module.ReplayHost.unseen_gap

    def spy(self: replay_module.ReplayHost, name: str, back: float, nxt: float) -> bool:
        passed.append((name, ok := unseen(self, name, back, nxt)))
        return ok

    monkeypatch.setattr(replay_module.ReplayHost, "unseen_gap", spy)
    fast = replay("g", steps, Candidate.of(3.0, RTT), end=100.0)
    assert passed == [("b", True), ("c", False)]
    full = replay("g", steps, Candidate.of(3.0, RTT), end=100.0, skip_unseen=False)
    assert fast == full
    assert fast.returning_gaps == 2 and fast.view_changes == 3 + 1 and fast.detected == 1


_MEMBERS = ("a", "b", "c", "d")


@st.composite
def timelines(draw: st.DrawFn) -> list[Step]:
    """Joins, then drops, returns, atomic messages, leaves and rejoins at spacings that land
    around one flush round trip and around the suspect timeouts tried (so that a gap comes
    back just before or after another member acts, its own timeout, or a flush ends)."""
    steps = joins(*_MEMBERS[:draw(st.integers(2, 4))])
    ts = 10.0
    for _ in range(draw(st.integers(1, 30))):
        ts += draw(st.sampled_from((0.0, 0.002, RTT, 0.012, 0.3, 0.9, 1.0, 2.0, 3.0, 3.02,
                                    6.0, 11.0)))
        kind = draw(st.sampled_from(("drop", "return", "drop", "return", "publish", "leave",
                                     "join")))
        steps.append(Step(round(ts, 6), kind, draw(st.sampled_from(_MEMBERS))))
    return steps


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=timelines(), timeout=st.sampled_from((0.5, 1.0, 3.0, 5.0)))
def test_passing_unseen_gaps_over_changes_no_count(steps: list[Step], timeout: float) -> None:
    c = Candidate.of(timeout, RTT)
    end = steps[-1].ts + 20.0
    fast = replay("g", steps, c, end)
    assert fast == replay("g", steps, c, end, skip_unseen=False)
