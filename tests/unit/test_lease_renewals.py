"""The lease adapter's renewal retries (cluster review S4), with a KV that answers nothing for
a while, as a bucket whose stream leader died does during its election, on a fake clock."""

from __future__ import annotations

from typing import Any

import nats.errors
import pytest

from notify.cluster.leases import ClusterLeases
from notify.cluster.ownership import Action, Lost, Renew

TTL = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class ElectingKV:
    """`update` times out until `until` (the election), each attempt costing `step` s of the
    clock; then it succeeds."""

    def __init__(self, clock: Clock, until: float, step: float) -> None:
        self.clock, self.until, self.step = clock, until, step
        self.attempts = 0

    async def update(self, key: str, value: bytes, last: int) -> int:
        self.attempts += 1
        self.clock.now += self.step
        if self.clock.now < self.until:
            raise nats.errors.TimeoutError
        return last + 1


async def _renewal_during_an_election(election: float) -> tuple[ClusterLeases, list[Action],
                                                                   ElectingKV]:
    clock = Clock()
    seen: list[Action] = []
    leases = ClusterLeases(Any, "a", info={}, on_actions=seen.extend,  # type: ignore[arg-type]
                           on_failure=lambda why: None, lease_ttl=TTL, node_ttl=3.0,
                           shards=1, settle=0.0, clock=clock)
    m = leases.machine
    m.synced(0.0)
    m.campaigned(0, 5, 0.0)
    clock.now = TTL / 4
    [renew] = m.tick(clock.now)
    assert isinstance(renew, Renew)
    # the bucket's leader dies just as the renewal is sent: no answer for `election` s
    kv = ElectingKV(clock, clock.now + election, step=0.25)
    leases._shards_kv = kv  # type: ignore[assignment]
    await leases._renew(renew)
    return leases, seen, kv


async def test_an_election_of_almost_half_a_ttl_in_the_worst_phase_loses_nothing() -> None:
    leases, seen, kv = await _renewal_during_an_election(0.45 * TTL)
    assert kv.attempts > 1
    assert not [a for a in seen if isinstance(a, Lost)]
    assert leases.machine.held() == {0: 5} and leases.renew_failures == 0


async def test_an_election_past_the_own_clock_deadline_is_a_loss_not_a_late_adoption() -> None:
    leases, seen, _kv = await _renewal_during_an_election(0.6 * TTL)
    assert leases.machine.held() == {} and leases.renew_failures == 1
    assert [a.why for a in seen if isinstance(a, Lost)] == ["expired_by_own_clock"]


@pytest.fixture(autouse=True)
def _no_tasks_left(monkeypatch: pytest.MonkeyPatch) -> None:
    # a successful renewal spawns nothing; a loss would ask the node to act, not the adapter
    monkeypatch.setattr(ClusterLeases, "_spawn", lambda self, coro, what: coro.close())


async def test_check_applies_the_own_clock_before_a_frame_is_taken_as_the_owners() -> None:
    """S7: after a pause, the node asks `check` before acting as a shard's owner, and the
    shards the clock ended are lost then (the node drops their groups), not at the next tick."""
    clock = Clock()
    seen: list[Action] = []
    leases = ClusterLeases(Any, "a", info={}, on_actions=seen.extend,  # type: ignore[arg-type]
                           on_failure=lambda why: None, lease_ttl=TTL, node_ttl=3.0,
                           shards=2, settle=0.0, clock=clock)
    leases.machine.synced(0.0)
    leases.machine.campaigned(0, 5, 0.0)
    leases.machine.campaigned(1, 6, 0.0)
    clock.now = 0.75 * TTL - 0.01
    leases.check(0)
    assert seen == [] and leases.held() == {0: 5, 1: 6}
    clock.now = 30.0  # SIGCONT: no tick has run yet
    leases.check(1)
    assert [(a.shard, a.why) for a in seen if isinstance(a, Lost)] == [
        (0, "expired_by_own_clock"), (1, "expired_by_own_clock")]
    assert leases.held() == {}
