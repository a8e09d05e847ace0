"""The edge's routing and parking rules (notify/cluster/routing.py), fed events and a clock."""

from __future__ import annotations

import pytest

from notify.cluster.ownership import Lease
from notify.cluster.routing import (
    FULL,
    LINK_LOST,
    MOVED,
    NO_OWNER,
    CloseConns,
    ClosedAt,
    Dispatch,
    EdgeRouter,
    Forward,
)

S = 7  # a shard


def lease(node: str, term: int) -> Lease:
    return Lease(node, term, term)


def router(**kw: float) -> EdgeRouter:
    return EdgeRouter("me", route_timeout=kw.pop("route_timeout", 15.0),
                      max_waiting=int(kw.pop("max_waiting", 100)))


def test_a_held_shard_is_dispatched_here() -> None:
    r = router()
    assert r.acquired(S) == []
    assert r.frame(1, S, b"a", 0.0) == [Dispatch(1, b"a")]
    assert r.holds(S)
    assert r.lost(S) == [] and not r.holds(S)


def test_a_shard_owned_elsewhere_is_forwarded_with_the_session_first_once() -> None:
    r = router()
    r.owner_changed(S, None, lease("n2", 1))
    assert r.frame(1, S, b"a", 0.0) == [Forward("n2", 1, b"a", True)]
    assert r.frame(1, S, b"b", 0.0) == [Forward("n2", 1, b"b", False)]
    assert r.frame(2, S, b"c", 0.0) == [Forward("n2", 2, b"c", True)]
    assert r.opened_at(1) == {"n2"} and r.is_opened(1, "n2") and not r.is_opened(1, "n3")
    assert r.conn_closed(1, 1000, "bye") == [ClosedAt("n2", 1, 1000, "bye")]
    assert r.opened_at(1) == frozenset()
    assert r.conn_closed(1) == []


def test_frames_without_an_owner_wait_in_order_and_go_when_one_appears() -> None:
    r = router()
    assert r.frame(1, S, b"a", 0.0) == []
    assert r.frame(2, S, b"b", 1.0) == []
    r.owner_changed(3, None, lease("n3", 1))  # another shard: nothing moves
    assert r.waiting(S) == 2 and r.next_deadline() == 15.0
    out = r.owner_changed(S, None, lease("n2", 4))
    assert out == [Forward("n2", 1, b"a", True), Forward("n2", 2, b"b", True)]
    assert r.waiting() == 0 and r.next_deadline() is None
    assert r.frame(1, S, b"c", 2.0) == [Forward("n2", 1, b"c", False)]


def test_order_is_kept_per_shard_frames_after_a_wait_queue_behind_it() -> None:
    """While frames wait, a later frame for the shard waits too, even for a known owner."""
    r = router()
    r.frame(1, S, b"a", 0.0)
    r.frame(1, S + 1, b"x", 0.0)  # another shard's queue
    out = r.acquired(S + 1)
    assert out == [Dispatch(1, b"x")]
    r.owner_changed(S, None, lease("me", 5))  # ours, but not acquired yet: still waiting
    assert r.frame(1, S, b"b", 0.1) == []
    assert r.acquired(S) == [Dispatch(1, b"a"), Dispatch(1, b"b")]
    assert r.frame(1, S, b"c", 0.2) == [Dispatch(1, b"c")]


def test_a_shard_that_comes_back_to_this_node() -> None:
    """Owned elsewhere, then nobody (frames wait), then this node acquires it again."""
    r = router()
    r.acquired(S)
    assert r.frame(1, S, b"a", 0.0) == [Dispatch(1, b"a")]
    r.lost(S)
    r.owner_changed(S, lease("me", 1), lease("n2", 2))
    assert r.frame(1, S, b"b", 0.0) == [Forward("n2", 1, b"b", True)]
    assert r.owner_changed(S, lease("n2", 2), None) == [CloseConns((1,), MOVED, S)]
    r.conn_closed(1)
    assert r.frame(2, S, b"c", 1.0) == []
    r.owner_changed(S, None, lease("me", 3))
    assert r.acquired(S) == [Dispatch(2, b"c")]
    assert r.frame(2, S, b"d", 1.0) == [Dispatch(2, b"d")]


def test_owner_changes_mid_queue_stop_the_drain_where_the_owner_went() -> None:
    """The queue drains to the owner in order; it keeps the rest when the owner goes again."""
    r = router()
    for i in range(3):
        r.frame(i, S, bytes([97 + i]), 0.0)
    r.owner_changed(S, None, lease("me", 1))  # ours, not yet acquired: nothing moves
    assert r.waiting(S) == 3
    assert r.owner_changed(S, lease("me", 1), None) == []
    out = r.owner_changed(S, None, lease("n2", 2))
    assert [a.raw for a in out if isinstance(a, Forward)] == [b"a", b"b", b"c"]
    # n2 loses it to n3 (a new term): the conns routed to n2 for S are closed
    assert r.owner_changed(S, lease("n2", 2), lease("n3", 3)) == \
        [CloseConns((0, 1, 2), MOVED, S)]
    # a renewal (same node and term) is no change
    assert r.owner_changed(S, lease("n3", 3), lease("n3", 3)) == []


def test_a_drain_that_meets_no_owner_keeps_the_rest() -> None:
    r = router()
    r.frame(1, S, b"a", 0.0)
    r.frame(2, S, b"b", 0.0)
    # the owner appears and is gone again before the router drains (both in one batch)
    r.owner_changed(S, None, None)
    assert r.waiting(S) == 2


def test_closed_conns_leave_every_table() -> None:
    r = router()
    r.frame(1, S, b"a", 0.0)
    r.frame(2, S, b"b", 0.0)
    r.frame(1, S, b"c", 0.0)
    r.frame(1, S + 1, b"d", 0.0)
    r.conn_closed(1)
    assert r.waiting() == 1
    assert r.owner_changed(S, None, lease("n2", 1)) == [Forward("n2", 2, b"b", True)]
    r.conn_closed(2)
    assert r._routes == {} and r._conn_routes == {} and r._opened == {}
    assert r._parked == {}


def test_the_queue_is_bounded() -> None:
    r = router(max_waiting=3)
    for i in range(3):
        assert r.frame(i, S, b"x", 0.0) == []
    assert r.frame(9, S, b"y", 0.0) == [CloseConns((9,), FULL, S)]
    assert r.waiting(S) == 3


def test_the_bytes_waiting_are_bounded_over_all_shards_and_counted_back_down() -> None:
    """Cluster review S9: a frame count alone let 10,000 frames of 1 MiB wait per shard."""
    r = EdgeRouter("me", max_waiting_bytes=10)
    assert r.frame(1, S, b"aaaa", 0.0) == [] and r.frame(2, S + 1, b"bbbb", 0.0) == []
    assert r.frame(3, S + 2, b"ccc", 0.0) == [CloseConns((3,), FULL, S + 2)]  # 11 > 10
    assert r.frame(1, S, b"dd", 0.0) == []  # 10: at the bound
    assert r.conn_closed(1) == [] and r._bytes == 4  # its frames no longer count
    assert r.frame(3, S + 2, b"ccc", 0.0) == []
    assert r.owner_changed(S + 1, None, lease("n2", 5))[0] == Forward("n2", 2, b"bbbb", True)
    assert r.tick(100.0) and r._bytes == 0 and r._shard_bytes == {}  # drained, expired


def test_waiting_frames_have_a_deadline() -> None:
    r = router(route_timeout=10.0)
    r.frame(1, S, b"a", 0.0)
    r.frame(2, S, b"b", 5.0)
    r.frame(1, S, b"c", 6.0)  # conn 1's later frame goes with it
    assert r.next_deadline() == 10.0
    assert r.tick(9.9) == []
    assert r.tick(10.0) == [CloseConns((1,), NO_OWNER, S)]
    assert r.waiting(S) == 1 and r.next_deadline() == 15.0
    assert r.tick(15.0) == [CloseConns((2,), NO_OWNER, S)]
    assert r.waiting() == 0 and r.next_deadline() is None and r._parked == {}


def test_a_lost_link_closes_the_conns_opened_there() -> None:
    r = router()
    r.owner_changed(S, None, lease("n2", 1))
    r.owner_changed(S + 1, None, lease("n3", 1))
    r.frame(1, S, b"a", 0.0)
    r.frame(2, S + 1, b"b", 0.0)
    r.frame(3, S, b"c", 0.0)
    assert r.link_lost("n2") == [CloseConns((1, 3), LINK_LOST)]
    assert r.link_lost("n9") == []


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        EdgeRouter("me", route_timeout=0)
    with pytest.raises(ValueError):
        EdgeRouter("me", max_waiting=0)
