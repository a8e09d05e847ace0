"""The ledger (notify/probe/ledger.py): every probe event is counted exactly once, good or bad,
and memory stays bounded whatever the outage. Sans-I/O: time is passed by hand."""

from __future__ import annotations

from notify.probe import Ledger


def test_settled_in_time_reports_the_elapsed_time() -> None:
    ledger = Ledger(deadline=1.0, bound=10)
    assert ledger.open(1, "sdk", now=10.0) == []
    done = ledger.settle(1, now=10.25)
    assert done is not None and done.path == "sdk" and done.elapsed == 0.25
    assert len(ledger) == 0


def test_past_the_deadline_expires_once_and_a_late_answer_finds_nothing() -> None:
    ledger = Ledger(deadline=1.0, bound=10)
    ledger.open(1, "sdk", now=0.0)
    ledger.open(2, "api", now=0.5)
    assert ledger.expire(now=1.0) == []  # (exactly at the deadline: still in time)
    assert ledger.expire(now=1.2) == ["sdk"]
    assert ledger.settle(1, now=1.3) is None  # counted bad already: never twice
    assert ledger.expire(now=1.6) == ["api"]
    assert ledger.expire(now=100.0) == []


def test_memory_is_bounded_the_oldest_is_evicted_as_bad() -> None:
    ledger = Ledger(deadline=60.0, bound=3)
    evicted: list[str] = []
    for i in range(10):
        evicted += ledger.open(i, "sdk" if i % 2 else "api", now=float(i))
        assert len(ledger) <= 3
    assert len(evicted) == 7 and evicted[0] == "api"
    assert ledger.outstanding() == [7, 8, 9]
    assert ledger.settle(0, now=10.0) is None


def test_drop_forgets_without_counting_and_clear_returns_the_rest() -> None:
    ledger = Ledger(deadline=1.0, bound=10)
    ledger.open(1, "sdk", now=0.0)
    ledger.open(2, "sdk", now=0.0)
    assert ledger.drop(1) and not ledger.drop(1)
    assert ledger.clear() == ["sdk"]
    assert len(ledger) == 0 and ledger.expire(now=5.0) == []
