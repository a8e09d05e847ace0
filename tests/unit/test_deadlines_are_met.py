"""A tick at exactly the time `next_deadline()` gave does what was due there.

Each deadline is a sum (`since + timeout`) and the check used to be a difference
(`now - since < timeout`): in floats those disagree for about 1 % of times (118.01 + 10.0 -
118.01 < 10.0). The server's clock moves on by itself and only ticked once more, but a simulated
clock (the replay, the simulator) jumps to the deadline, finds nothing due and jumps there again,
forever: `whatif` hung on such a timeline. Times here are chosen where the two disagree."""

from __future__ import annotations

from drive import G, Net, form

from notify.core.actions import Message
from notify.core.atomic import AtomicTracker
from notify.core.events import Ack, Leave
from state_transfer.relay import Ask, Relay, Transfer

#: (since, timeout) where `since + timeout - since < timeout` in floats
FRAGILE = ((118.01, 10.0), (100.01, 30.0), (59.85, 10.0))


def test_the_sums_disagree_with_the_differences_here() -> None:
    for since, timeout in FRAGILE:
        assert (since + timeout) - since < timeout  # else these tests test nothing


def test_an_ack_overdue_at_its_deadline_is_named() -> None:
    for since, timeout in FRAGILE:
        atomics = AtomicTracker()
        atomics.add(Message(G, 1, "total", 1, "a", 2, True, {}, since, "id1"), ("b",), since)
        deadline = atomics.next_deadline(timeout, lambda m: False)
        assert deadline == since + timeout
        assert atomics.overdue(deadline, timeout) == {"b"}


def test_a_member_that_does_not_ack_is_removed_by_the_tick_at_its_deadline() -> None:
    net = Net(ack_timeout=10.0)
    a, _ = form(net, "a", "b")
    net.now = 118.01
    net.publish(a, "p", atomic=True)
    net.send(a, Ack(G, (1,)))  # b never ACKs it
    deadline = net.hub.next_deadline()
    assert deadline == 118.01 + 10.0
    net.now = deadline
    net.apply(net.hub.tick(deadline))
    assert net.take(a, "view_change")[0]["leaving"] == ["b"]
    assert net.hub.next_deadline() != deadline  # the timer moves on


def test_a_donor_stalled_until_the_deadline_is_replaced_at_it() -> None:
    for since, stall in FRAGILE:
        r = Relay(max_bytes=1000, stall_timeout=stall)
        assert isinstance(r.start(Transfer("5.j.0", "j", "", 40, since), ["a", "b"]), Ask)
        deadline = r.next_deadline()
        assert deadline is not None
        (d,) = r.stalled(deadline, ["a", "b"])
        assert isinstance(d, Ask) and d.transfer.donor == "b"


def test_an_idle_group_is_evicted_at_its_deadline() -> None:
    net = Net(idle_group=30.0)
    (a,) = form(net, "a")
    net.now = 100.01
    net.send(a, Leave("l", G))
    assert G in net.hub.groups
    deadline = net.hub.next_deadline()
    assert deadline == 100.01 + 30.0
    net.apply(net.hub.tick(deadline))
    assert G not in net.hub.groups
