"""G14 bounded resources in the core: what is not live costs nothing after a bounded time."""

from __future__ import annotations

from drive import G, Net, form

from notify.core.auth import ALLOW_ALL, Identity
from notify.core.events import Hello, Join, Leave


def test_G14_a_group_nobody_is_in_leaves_memory_after_idle_group() -> None:
    net = Net(idle_group=30.0)
    (a,) = form(net, "a")
    net.advance(100)
    assert G in net.hub.groups  # a member is in it
    net.send(a, Leave("l", G))
    assert G in net.hub.groups
    net.advance(29)
    assert G in net.hub.groups
    net.advance(2)
    assert G not in net.hub.groups
    assert net.forgotten == [G]  # and the store forgets what it keeps of it (JetStream's tables)
    net.drop(a)  # the session still names the group: nothing breaks
    assert net.hub.tick(net.now + 1) == []


def test_G14_a_group_with_a_write_under_way_stays() -> None:
    net = Net(idle_group=1.0, write_timeout=1000.0)
    (a,) = form(net, "a")
    net.writes_held = True
    net.send(a, Leave("l", G))  # the view without a is being stored
    net.advance(5)
    assert G in net.hub.groups
    net.finish_writes()
    net.advance(2)
    assert G not in net.hub.groups


def test_G14_publish_ids_of_a_sender_that_left_are_forgotten_after_departed_ids() -> None:
    net = Net(departed_ids=100.0)
    a, b = form(net, "a", "b")
    net.publish(a, "pa")
    net.publish(b, "pb")
    net.send(b, Leave("l", G))
    net.flush(a)
    topic = net.hub.groups[G].topic
    net.advance(99)
    assert topic.known_offset("b", "pb") == 2 and topic.known_offset("a", "pa") == 1
    net.advance(2)
    assert topic.known_offset("b", "pb") is None  # gone with its sender
    assert topic.known_offset("a", "pa") == 1  # a member's ids stay


def test_G14_a_sender_back_in_time_keeps_its_ids() -> None:
    net = Net(departed_ids=100.0)
    a, b = form(net, "a", "b")
    net.publish(b, "pb")
    net.send(b, Leave("l", G))
    net.flush(a)
    net.advance(50)
    net.send(b, Join("j2", G))
    net.flush(a)
    net.advance(60)
    assert net.hub.groups[G].topic.known_offset("b", "pb") == 1


def test_G14_token_entries_of_closed_connections_do_not_pile_up() -> None:
    net = Net()
    hub = net.hub
    for i in range(1000):
        conn = 10_000 + i
        net.apply(hub.opened(conn, net.now))
        net.apply(hub.hello(conn, Hello(1, f"m{i}"), net.now,
                            Identity(f"m{i}", ALLOW_ALL, net.now + 3600)))
        net.drop(conn)
    assert len(hub._token_heap) <= 2 * len(hub._conns) + 65


def test_G14_retention_in_memory_counts_payload_bytes() -> None:
    from notify.core.events import Order
    from notify.core.topic import Topic

    t = Topic("g", retain=1000, idempotency_window=10, retain_bytes=250)
    for i in range(10):
        t.accept(sender="a", publish_id=f"p{i}", order=Order.FIFO, view=1, atomic=False,
                 payload=None, now=0.0, from_member=True, size=100)
    assert t.first_retained == 1  # nothing is in the log yet: the window keeps it all
    t.stored(10)
    assert t.first_retained == 9  # two messages of 100 bytes fit in 250
    assert not t.can_replay(5, {}, external=False)
    assert t.can_replay(8, {}, external=False)
    big = t.accept(sender="a", publish_id="big", order=Order.FIFO, view=1, atomic=False,
                   payload=None, now=0.0, from_member=True, size=10_000)
    t.stored(big.offset)
    assert t.first_retained == big.offset  # the newest one always stays
