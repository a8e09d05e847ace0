"""The simulated network (tests/unit/sim.py): seeded faults, thousands of steps, G1-G6 checked at
every application event and install, liveness checked after a quiescent phase.

A failure message starts with `seed=...`; replay it with `run(seed, steps)` from sim.py (or run
this file with `-k` and that seed)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sim import SimConfig, run

from notify.core.topic import Topic

#: fixed seeds, 10,000 steps each; hypothesis below draws 40 more at 3,000 steps
FIXED_SEEDS = [5, 24, 27, 29, 30, 37]


@pytest.mark.parametrize("seed", FIXED_SEEDS)
def test_simulation_fixed_seed(seed: int) -> None:
    sim = run(seed, 10_000)
    # the run must have exercised what it checks, or it proves nothing
    assert sim.obs.installs_checked > 50
    assert sim.obs.app_delivered > 500
    assert sim.stats.get("drop", 0) > 10
    assert sim.stats.get("fault.reconnect", 0) > 10
    assert sim.stats.get("outcome", 0) > 10


def test_simulation_replays_exactly() -> None:
    a, b = run(5, 2_000), run(5, 2_000)
    assert (a.steps, a.now, a.stats, a.obs.app_delivered) == \
        (b.steps, b.now, b.stats, b.obs.app_delivered)


def test_simulation_without_faults_is_clean() -> None:
    sim = run(1, 3_000, SimConfig(p_fault=0.0, p_non_member_publish=0.0))
    assert sim.obs.app_delivered > 500
    assert not sim.errors


@settings(max_examples=40, deadline=None, derandomize=True, database=None,
          phases=[Phase.explicit, Phase.generate],  # no shrinking: the seed is the repro
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_hunt_for_bugs(seed: int) -> None:
    run(seed, 3_000)


#: seeds with a window of a few messages: members that come back read most of what they missed
#: from the log (`catchup_log`, `history` pages answered at random times while live frames go on)
WINDOW_SEEDS = [3, 14, 18, 24, 55]


@pytest.mark.parametrize("seed", WINDOW_SEEDS)
def test_simulation_with_a_small_window_catches_up_from_the_log(seed: int) -> None:
    sim = run(seed, 6_000, SimConfig(window=4))
    assert sim.obs.installs_checked > 30
    assert sim.obs.app_delivered > 300
    assert sim.stats.get("history.page", 0) > 5  # the log served what memory did not hold


@pytest.mark.parametrize("seed", [0, 7])
def test_simulation_with_quiet_windows_cooling(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """G14: quiet groups' windows cool (`quiet_group` 1 s, `Topic.cool`) and come back with the
    next messages, under the seeded faults; members that resume then read from the log."""
    cooled = 0
    real = Topic.cool

    def cool(self: Topic) -> None:
        nonlocal cooled
        cooled += len(self._log) > 1
        real(self)

    monkeypatch.setattr(Topic, "cool", cool)
    t = SimConfig().timeouts
    sim = run(seed, 6_000, SimConfig(timeouts=replace(t, quiet_group=1.0)))
    assert cooled > 20
    assert sim.obs.app_delivered > 300
    assert sim.stats.get("history.page", 0) > 5


#: seeds of the transitional-set check: 60 runs of 4,000 steps (about 13 s on this machine)
TRANSITIONAL_SEEDS = range(100, 160)


def test_transitional_set_is_the_g2_survivors_under_seeded_faults() -> None:
    """EVS's transitional configuration (docs/semantics.md): at every member, the SDK's
    `transitional` set of each `ViewInstalled` equals the survivors of the views storage holds
    (members of v and v+1, less v+1's leavers: a new incarnation is in both views by name and
    is not one), and every member of it that installs v+1 is checked against the others for
    G2 (the same view-v messages); on each `ViewChanging`, v less the proposal's leavers, with
    the receiver in it. The checks run inside the simulator's `Observer` at every view event
    (tests/unit/sim_clients.py, `Observer.transitional`); here, over a range of seeds, they
    must have met every kind of change."""
    counts: dict[str, int] = {}
    checked = installs = 0
    for seed in TRANSITIONAL_SEEDS:
        sim = run(seed, 4_000)
        checked += sim.obs.transitional_checked
        installs += sim.obs.installs_checked
        for k, n in sim.obs.transitional_counts.items():
            counts[k] = counts.get(k, 0) + n
    assert installs > 5_000
    assert checked > installs  # every install, and the proposals too
    assert counts.get("joined", 0) > 3_000  # joiners outside the set
    assert counts.get("left", 0) > 1_500  # leavers outside it
    assert counts.get("proposal", 0) > 3_000 and counts.get("proposal.joining", 0) > 2_000
    # a member that left and joined again in one change (in both views by name, not a survivor)
    assert counts.get("rejoined", 0) >= 20
