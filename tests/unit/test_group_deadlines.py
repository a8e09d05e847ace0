"""The hub's timer asks only the groups called since its last turn (notify/core/deadlines.py).

Before, every turn asked every group that had a deadline, twice; a group keeps one for ten
minutes after a member leaves, so a server with thousands of such groups spent a millisecond
and more per turn. The model check holds `Deadlines` to the brute-force answer (the minimum
over every group's deadline) through any sequence of changes, and the hub tests count the
groups asked."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from drive import Net
from hypothesis import given, settings
from hypothesis import strategies as st

from notify.core.actions import Action
from notify.core.deadlines import SLACK, Deadlines
from notify.core.events import Join, Leave
from notify.core.group import Group

NAMES = st.sampled_from([f"g{i}" for i in range(8)])
TIMES = st.one_of(st.none(), st.integers(0, 40).map(float))
STEPS = st.lists(st.one_of(
    st.tuples(st.just("set"), NAMES, TIMES),      # a call moved a group's deadline
    st.tuples(st.just("forget"), NAMES, TIMES),   # the group left memory
    st.tuples(st.just("tick"), NAMES, TIMES),     # a timer turn at that time (the name unused)
), max_size=80)


@settings(max_examples=300, deadline=None)
@given(STEPS)
def test_the_earliest_deadline_is_always_the_minimum_over_every_group(steps: list[
        tuple[str, str, float | None]]) -> None:
    truth: dict[str, float | None] = {}
    deadlines = Deadlines()
    for op, name, t in steps:
        if op == "set":
            truth[name] = t
            deadlines.touch(name)
        elif op == "forget":
            truth.pop(name, None)
            deadlines.forget(name)
        else:
            now = 20.0 if t is None else t
            deadlines.settle(truth.get)
            live = {g: d for g, d in truth.items() if d is not None}
            assert deadlines.earliest() == min(live.values(), default=None)
            assert len(deadlines) == len(live)
            due = deadlines.pop_due(now)
            assert due == sorted(g for g, d in live.items() if d <= now)
            for g in due:  # the hub ticks each, which moves its deadline past `now` or ends it
                if g in ("g3", "g6"):
                    continue  # a tick before it raised: never ticked, still due, not touched
                truth[g] = None if g in ("g1", "g5") else now + 5.0
                deadlines.touch(g)
        assert len(deadlines._heap) <= 2 * len(truth) + SLACK + len(deadlines._touched) + 1


def test_stale_entries_do_not_pile_up_behind_a_distant_deadline() -> None:
    """One group due in ten minutes stays on top; another's deadline moves at every turn. Each
    move leaves a stale entry below the top, and the heap is rebuilt before they pile up."""
    deadlines = Deadlines()
    truth = {"far": 600.0, "busy": 1.0}
    for name in truth:
        deadlines.touch(name)
    for turn in range(10_000):
        truth["busy"] = 700.0 + turn
        deadlines.touch("busy")
        deadlines.settle(truth.get)
        assert deadlines.earliest() == 600.0
    assert len(deadlines._heap) <= 2 * len(truth) + SLACK


@contextmanager
def counting_deadline_asks() -> Iterator[list[str]]:
    asked: list[str] = []
    original = Group.next_deadline

    def counted(self: Group) -> float | None:
        asked.append(self.name)
        return original(self)

    Group.next_deadline = counted  # type: ignore[method-assign]
    try:
        yield asked
    finally:
        Group.next_deadline = original  # type: ignore[method-assign]


def test_a_timer_turn_asks_only_the_groups_called_since_the_last_one() -> None:
    net = Net(suspect_timeout=3.0)
    net.check_every_step = False  # (it asks every group: this test counts the asks)
    groups = [f"g{i}" for i in range(300)]
    a, b = net.connect("a"), net.connect("b")
    for name in groups:
        net.send(a, Join(f"j-{name}", name))
    net.send(b, Join("j-b", "g7"))
    net.flush(a)
    net.drop(a)  # a is suspected in all 300 groups: each has a deadline now
    lost_at = net.now
    with counting_deadline_asks() as asked:
        assert net.hub.next_deadline() == lost_at + 3.0
        assert len(asked) == 300  # asked once, after the calls that armed them
        asked.clear()
        for _ in range(5):  # timer turns with nothing due and nothing called
            net.advance(0.5)
            assert net.driver.next_wakeup() == lost_at + 3.0
        assert asked == []
        net.take(b)
        net.send(b, Join("j-b2", "g8"))  # one call: one group asked at the next turn
        net.driver.next_wakeup()
        assert asked == ["g8"]
        asked.clear()
        net.advance(1.0)  # past the deadline: every group is ticked, and so asked again
        net.driver.next_wakeup()
        assert sorted(asked) == sorted(groups)
    assert net.take(b, "view_change")  # g7 and g8 drop a: the deadlines did their work
    assert net.hub.next_deadline() is not None  # (the flushes wait for b)


def test_lost_sessions_expire_in_the_order_they_were_lost_each_at_its_time() -> None:
    """The tick stops at the first lost session not yet expired (they are kept in loss order)
    instead of looking at every one on every turn."""
    net = Net(suspect_timeout=3.0, flush_timeout=5.0)  # resumable for 8 s
    conns = [net.connect(f"m{i}") for i in range(3)]
    for i, c in enumerate(conns):
        net.now = 100.0 + i
        net.drop(c)
    resumable = net.hub._disconnected
    for now, kept in ((107.9, 3), (108.0, 2), (109.5, 1), (110.0, 0)):
        net.now = now
        net.driver.tick()
        assert [s.member for s in resumable.values()] == [f"m{i}" for i in range(3 - kept, 3)]


def test_idle_groups_leave_memory_in_the_order_they_became_idle() -> None:
    net = Net(idle_group=30.0)
    c = net.connect("a")
    for i in range(3):
        net.now = 100.0 + i
        net.send(c, Join(f"j{i}", f"g{i}"))
        net.send(c, Leave(f"l{i}", f"g{i}"))
    for now, kept in ((129.9, 3), (130.0, 2), (131.5, 1), (132.0, 0)):
        net.now = now
        net.driver.tick()
        assert sorted(net.hub.groups) == [f"g{i}" for i in range(3 - kept, 3)]


def test_a_tick_that_raises_loses_no_group_s_deadline() -> None:
    """The driver contains a failing call (G12); the groups due with the one that raised, and
    that one too, are found due again at the next turn."""
    net = Net(suspect_timeout=3.0)
    a, b = net.connect("a"), net.connect("b")
    for name in ("g0", "g1"):
        net.send(a, Join(f"ja-{name}", name))
        net.send(b, Join(f"jb-{name}", name))
        net.flush(a)
    net.take(b)
    net.drop(a)  # suspected in both groups
    original, failed = Group.tick, []

    def tick_once_failing(self: Group, now: float) -> list[Action]:
        if not failed:
            failed.append(self.name)
            raise RuntimeError("a bug in a group's tick")
        return original(self, now)

    Group.tick = tick_once_failing  # type: ignore[method-assign]
    try:
        net.advance(3.5)  # g0's tick raises: g1, due too, is not ticked in this turn
        assert failed == ["g0"] and net.take(b, "view_change") == []
        net.advance(0.1)
    finally:
        Group.tick = original  # type: ignore[method-assign]
    assert sorted(f["group"] for f in net.take(b, "view_change")) == ["g0", "g1"]
