"""Catch-up past the in-memory window (issue 30, G8): what memory cannot replay, the log serves.

The core's side (notify/core/catchup.py: `catchup_log`, `history` pages bounded by undecided
atomics, retention refusals), the window's pins (undecided atomics, what the log does not hold
yet, aborts remembered past the window), and the SDK reading a gap (client_sdk/catchup.py)
against the real hub and driver, with the real `MemoryLog` answering the pages."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from client_sdk.events import CaughtUp, GroupEvent, Message, Reset, ViewInstalled, ViewResumed
from client_sdk.protocol import ClientProtocol
from notify.core import Limits, Retention
from notify.core.events import Ack, History, Join, Leave, Order
from notify.core.events import ResumePoint as RP
from notify.core.topic import Topic
from notify.wire import parse
from tests.unit.drive import G, Net, form


def window(n: int, **more: int) -> Limits:
    return Limits(window_messages=n, **more)


# -- the window ---------------------------------------------------------------------------------


def accept(t: Topic, i: int, *, atomic: bool = False) -> int:
    return t.accept(sender="a", publish_id=f"p{i}", order=Order.FIFO, view=1, atomic=atomic,
                    payload=i, now=0.0, from_member=True).offset


def test_the_window_keeps_an_undecided_atomic_and_what_the_log_lacks() -> None:
    t = Topic(G, retain=3, idempotency_window=100)
    offsets = [accept(t, i, atomic=i == 2) for i in range(1, 9)]
    assert t.first_retained == 1  # none of it is in the log yet
    t.stored(offsets[-1])
    assert t.first_retained == 2  # held by the undecided atomic at offset 2
    t.record_outcome(2, False)
    assert t.first_retained == 6  # decided: the window is 3 again
    assert t.decided(2) is False and t.decided(3) is True  # left the window: decided
    assert t.decided(6) is None and t.outcome(6) is None  # in the window: not "decided"


def test_a_quiet_groups_window_goes_and_a_resume_reads_the_log() -> None:
    """G14: memory holds what is hot. A group that accepted nothing for `quiet_group` keeps
    only its newest message in memory; one that goes on publishing keeps its window."""
    net = Net(window(100), suspect_timeout=300.0, quiet_group=60.0)
    a, b = form(net, "a", "b")
    point, b2 = away_while(net, a, b, 20)
    topic = net.hub.groups[G].topic
    net.advance(59.0)
    net.publish(a, "late")  # active again: the window stays past the first 60 s
    net.advance(30.0)
    assert topic.first_retained == 1 and topic.warm
    net.advance(31.0)  # 61 s after the last message
    assert topic.first_retained == topic.head == 21 and not topic.warm
    assert net.hub.next_deadline() is None or net.hub.next_deadline() > net.now + 60
    net.send(b2, Join("r", G, resume=RP(1, 0, {}, point["view"])))
    frames = net.take(b2)
    assert [f["type"] for f in frames] == ["view_resume", "catchup_log", "deliver", "catchup_done"]
    assert frames[1]["before"] == 21
    net.publish(a, "hot")  # the window fills again
    assert topic.warm and topic.first_retained == 21


def test_a_group_that_leaves_memory_leaves_the_quiet_table() -> None:
    """G14: `Hub._warm` (groups whose window may cool) loses its entry when the group is
    evicted as idle or dropped (cluster), before it would cool; nothing is armed for it."""
    net = Net(window(100), quiet_group=60.0, idle_group=5.0)
    (a,) = form(net, "a")
    net.publish(a, "m")
    assert G in net.hub._warm
    net.send(a, Leave("l", G))
    net.advance(6.0)
    assert G not in net.hub.groups and G not in net.hub._warm
    assert net.hub.next_deadline() is None
    (a,) = form(net, "a")  # back from the log, warm again
    net.publish(a, "n")
    assert G in net.hub._warm
    net.hub.drop_groups([G], "moved")
    assert not net.hub._warm


def test_a_retry_after_the_group_cooled_is_answered_not_delivered_again() -> None:
    """Cooling freezes the publish ids the log holds (notify/core/publish_ids.py): a retry of
    one is still answered with its first offset and reaches nobody twice."""
    net = Net(window(100), quiet_group=60.0)
    a, b = form(net, "a", "b")
    for i in range(30):
        net.publish(a, f"m{i}")
    net.take(a), net.take(b)
    net.advance(61.0)
    topic = net.hub.groups[G].topic
    assert not topic.warm and not topic._publish_ids["a"].hot
    net.publish(a, "m7")
    assert [(f["type"], f["offset"]) for f in net.take(a, "published", "deliver")] == [
        ("published", 8)]
    assert net.take(b, "deliver") == []
    net.publish(a, "new")
    assert [f["offset"] for f in net.take(b, "deliver")] == [31]


def test_a_window_never_cools_past_what_it_must_hold() -> None:
    t = Topic(G, retain=100, idempotency_window=100)
    offsets = [accept(t, i, atomic=i == 3) for i in range(1, 11)]
    t.stored(8)
    t.cool()
    assert t.first_retained == 3  # the undecided atomic holds what follows it
    t.record_outcome(3, True)
    t.cool()
    assert t.first_retained == 9  # the log lacks 9 and 10
    t.stored(offsets[-1])
    t.cool()
    assert t.first_retained == 10  # the newest message stays


# -- the core ----------------------------------------------------------------------------------


def away_while(net: Net, a: int, b: int, n: int) -> tuple[dict[str, Any], int]:
    """b's resume point, then b drops while a publishes `n` messages."""
    install = net.hub.groups[G].view.version
    net.drop(b)
    for i in range(n):
        net.publish(a, f"m{i}")
    return {"epoch": 1, "view": install}, net.connect("b", net.sessions[b])


def test_a_resume_past_the_window_is_told_the_gap_and_replayed_the_rest() -> None:
    net = Net(window(5), suspect_timeout=30.0)
    a, b = form(net, "a", "b")
    _, b2 = away_while(net, a, b, 20)
    net.send(b2, Join("r", G, resume=RP(1, 0, {}, 2)))
    frames = net.take(b2)
    kinds = [f["type"] for f in frames]
    assert kinds == ["view_resume", "catchup_log"] + ["deliver"] * 5 + ["catchup_done"]
    gap = frames[1]
    assert gap == {"type": "catchup_log", "group": G, "after": 0, "before": 16, "view": 2}
    assert [f["offset"] for f in frames[2:7]] == [16, 17, 18, 19, 20]
    net.send(b2, History("h", G, 0, 16, limit=10))
    (page,) = net.take(b2)
    assert page["type"] == "history_page" and page["end"] == 10
    assert [m["offset"] for m in page["messages"]] == list(range(1, 11))
    assert (page["first"], page["head"]) == (1, 20)
    net.send(b2, History("h2", G, 10, 16))
    (page,) = net.take(b2)
    assert [m["offset"] for m in page["messages"]] == list(range(11, 16))
    assert page["end"] == 15  # stops before `before`


def test_a_page_stops_before_an_undecided_atomic() -> None:
    net = Net(window(3))
    a, b = form(net, "a", "b")
    for i in range(3):
        net.publish(a, f"m{i}")
    net.publish(a, "atom", atomic=True)  # offset 4, nobody ACKs it
    for i in range(3):
        net.publish(a, f"n{i}")
    net.send(b, History("h", G, 0))
    (page,) = net.take(b, "history_page")
    assert [m["offset"] for m in page["messages"]] == [1, 2, 3] and page["end"] == 3


@pytest.mark.parametrize("shared_log", [False, True])
def test_an_ack_past_the_head_is_an_error_unless_another_owner_wrote_it(shared_log: bool) -> None:
    """Cluster simulator seed 102: a member got offset 35 from the group's new owner and its
    ACK reached the old one, whose copy ends at 34. There the ACK says this copy is stale (the
    member resends it where the group lives now), not that the client is wrong."""
    net = Net(shared_log=shared_log)
    a, _ = form(net, "a", "b")
    net.take(a)
    net.send(a, Ack(G, (net.hub.groups[G].topic.head + 1,)))
    errors = net.take(a, "error")
    assert [e["code"] for e in errors] == ([] if shared_log else ["unknown_offset"])


def test_history_is_for_members_only_and_a_log_without_it_says_so() -> None:
    net = Net(window(3))
    form(net, "a", "b")
    c = net.connect("c")
    net.send(c, History("h", G, 0))
    (err,) = net.take(c)
    assert (err["type"], err["code"], err["req"]) == ("error", "not_member", "h")
    net2 = Net(window(3), history=False)
    (a2,) = form(net2, "a")
    net2.send(a2, History("h", G, 0))
    (err,) = net2.take(a2)
    assert err["code"] == "unavailable"


def test_a_point_older_than_retention_is_refused_with_how_much_was_lost() -> None:
    net = Net(window(3, retain_messages=10), suspect_timeout=30.0)
    a, b = form(net, "a", "b")
    _, b2 = away_while(net, a, b, 25)
    net.send(b2, Join("r", G, resume=RP(1, 0, {}, 2)))
    (err,) = net.take(b2)
    assert err["code"] == "offset_unavailable"
    assert "15 messages were dropped by retention" in err["message"]  # 1..15; 16..25 kept


def test_retention_by_group_pattern_is_what_a_point_is_judged_by() -> None:
    """`chat:*` keeps 5 messages, other groups the default: the same point is served in one
    and refused in the other (and the window is never larger than what its log keeps)."""
    net = Net(window(100), suspect_timeout=30.0, retention=(Retention("chat:*", 5, 1 << 20),))
    for group in ("chat:1", "doc"):
        a, b = net.connect(f"a-{group}"), net.connect(f"b-{group}")
        for m in (a, b):
            net.send(m, Join("j", group))
            net.flush(a, b)
        for i in range(10):
            net.publish(a, f"{group}-{i}", group=group)
        net.drop(b)
        b2 = net.connect(f"b-{group}", net.sessions[b])
        net.take(b2)
        net.send(b2, Join("r", group, resume=RP(1, 0, {}, 2)))
        frames = net.take(b2)
        if group == "chat:1":
            assert net.hub.groups[group].topic.first_retained == 6  # its window: 5
            assert frames[0]["code"] == "offset_unavailable"
            assert "5 messages were dropped by retention" in frames[0]["message"]
        else:
            assert frames[0]["type"] == "view_resume"


def test_held_atomics_that_left_the_window_get_their_outcomes_first() -> None:
    """b held two atomic messages when it went; both were decided (one aborted at the
    install that removed c) and left the window; its resume names them, and their outcomes
    come ahead of anything else."""
    net = Net(window(2), suspect_timeout=30.0)
    a, b, c = form(net, "a", "b", "c")
    net.publish(a, "x", atomic=True)  # offset 1: c never ACKs it
    net.send(c, Leave("l", G))
    net.flush(a, b)  # aborted at the install without c
    net.publish(a, "y", atomic=True)  # offset 2, ACKed by both: committed
    for m in (a, b):
        net.send(m, Ack(G, (2,)))
    net.drop(b)
    for i in range(6):
        net.publish(a, f"m{i}")
    b2 = net.connect("b", net.sessions[b])
    net.send(b2, Join("r", G, resume=RP(1, 2, {"fifo:a": 2}, 4, held=(1, 2))))
    frames = net.take(b2)
    assert [(f["type"], f["offsets"]) for f in frames[1:3]] == [("abort", [1]), ("confirm", [2])]
    assert frames[0]["type"] == "view_resume" and frames[3]["type"] == "catchup_log"


# -- the SDK reading a gap ------------------------------------------------------------------------


class Sdk:
    """A `ClientProtocol` wired to `net`: its frames parsed as the edge parses them."""

    def __init__(self, net: Net, member: str) -> None:
        self.net, self.proto = net, ClientProtocol(member)
        self.conn = net.connect(member)
        self.proto.receive(_welcome(net, self.conn, member))
        self.events: list[GroupEvent] = []

    def pump(self) -> None:
        for _ in range(1000):
            out = self.proto.data_to_send()
            for f in out:
                self.net.send(self.conn, parse(orjson.dumps(f)))
            inbox = self.net.take(self.conn)
            for f in inbox:
                ev, _ = self.proto.receive(f)
                self.events += ev
            if not out and not inbox:
                return
        raise AssertionError("no quiet after 1,000 rounds")


def _welcome(net: Net, conn: int, member: str) -> dict[str, Any]:
    return {"type": "welcome", "session": net.sessions[conn], "member": member,
            "heartbeat_ms": 5000, "limits": {}, "resumed": False, "user": member,
            "instance": None}


@pytest.mark.parametrize("live", [False, True])
def test_the_sdk_reads_the_gap_and_hands_over_everything_once_in_order(live: bool) -> None:
    """b flushed for c's join and lost its connection before the install reached it; 30
    messages later it resumes, with a window of 4: the pages give it the install in its place
    and the messages it lacks, then come what the replay (and, with `live`, a publish made
    while it reads) brought, held back meanwhile, then `CaughtUp`, counting all 30."""
    net = Net(window(4, history_page=7), suspect_timeout=30.0)
    (a,) = form(net, "a")
    b = Sdk(net, "b")
    b.proto.join("j", G)
    b.pump()
    net.flush(a)
    net.take(a)
    b.pump()
    for i in range(10):
        net.publish(a, f"m{i}")
    c = net.connect("c")
    net.send(c, Join("jc", G))
    net.flush(a)
    for f in net.take(b.conn):  # b reads m0-m9 and the view change ...
        b.proto.receive(f)
    for f in b.proto.data_to_send():  # ... and answers flush_ok: c is installed
        net.send(b.conn, parse(orjson.dumps(f)))
    assert net.hub.groups[G].view.version == 3
    b.events.clear()
    net.drop(b.conn)  # ... before b read the install
    for i in range(10, 40):
        net.publish(a, f"m{i}")
    b.conn = net.connect("b", net.sessions[b.conn])
    b.proto.connection_lost()
    b.proto.rejoin_all()
    if live:  # a message published while b reads its gap: it waits behind the gap
        for f in b.proto.data_to_send():
            net.send(b.conn, parse(orjson.dumps(f)))
        for f in net.take(b.conn):
            ev, _ = b.proto.receive(f)
            b.events += ev
        assert b.proto.groups[G].gap is not None
        net.publish(a, "live")
    b.pump()
    payloads = [e.payload for e in b.events if isinstance(e, Message)]
    assert payloads == [f"m{i}" for i in range(10, 40)] + (["live"] if live else [])
    assert isinstance(b.events[0], ViewResumed)
    assert [e.view for e in b.events if isinstance(e, ViewInstalled)] == [3]
    assert isinstance(b.events[1], ViewInstalled)  # in its place: before m10
    caught = [i for i, e in enumerate(b.events) if isinstance(e, CaughtUp)]
    last_replayed = max(i for i, e in enumerate(b.events)
                        if isinstance(e, Message) and e.payload == "m39")
    assert len(caught) == 1 and caught[0] > last_replayed
    # it counts every message handed over in the catch-up, the pages' too (not the live one)
    done = b.events[caught[0]]
    assert isinstance(done, CaughtUp) and done.count == 30
    assert not any(isinstance(e, Reset) for e in b.events)
    g = b.proto.groups[G]
    assert g.gap is None and g.view == 3
    assert g.resume_point()["offset"] >= 40


def test_a_saved_point_during_a_gap_starts_at_its_frontier_before_what_was_held() -> None:
    """The point a page saves while a gap is read (to resume in another process): the gap's
    frontier, less what was held back before the gap (an atomic without its outcome); what
    came behind the gap is not in it."""
    p = ClientProtocol("b")
    p.join("j", G)
    p.receive({"type": "view_install", "group": G, "view": 2, "members": ["a", "b"],
               "joined": ["b"], "left": [], "epoch": 1, "offset": 0})
    d = {"type": "deliver", "group": G, "stream": "fifo:a", "sender": "a", "view": 2,
         "payload": None, "ts": 0.0}
    p.receive({**d, "offset": 1, "seq": 1, "atomic": True})  # held: no outcome yet
    p.receive({"type": "catchup_log", "group": G, "after": 1, "before": 10, "view": 2})
    p.receive({**d, "offset": 10, "seq": 10, "atomic": False})  # behind the gap
    g = p.groups[G]
    assert g.resume_point() == {"epoch": 1, "offset": 1, "view": 2, "streams": {"fifo:a": 1}}
    assert g.saved_point() == {"epoch": 1, "offset": 0, "view": 2, "streams": {}}


def test_pages_refused_or_not_moving_on_make_the_client_reconnect_not_skip() -> None:
    """A page refused (the log cannot be read now; in a cluster, a node whose copy is behind
    answered, even `not_member`) or one that does not move on is asked again; the third time
    the protocol raises `GapUnreadable`, a violation: the host reconnects and resumes from the
    gap's frontier. Nothing is skipped and no `Reset` is made up."""
    from client_sdk.protocol import GapUnreadable

    p = ClientProtocol("b")
    p.join("j", G)
    p.receive({"type": "view_install", "group": G, "view": 2, "members": ["a", "b"],
               "joined": ["b"], "left": [], "epoch": 1, "offset": 0})
    p.data_to_send()  # the join
    p.receive({"type": "catchup_log", "group": G, "after": 0, "before": 9, "view": 2})
    assert [f["req"] for f in p.data_to_send()] == ["h1"]
    p.receive({"type": "error", "req": "h1", "code": "not_member", "message": "", "lost": None})
    assert [f["req"] for f in p.data_to_send()] == ["h2"]
    page = {"type": "history_page", "req": "h2", "group": G, "epoch": 1, "messages": [],
            "installs": [], "aborted": [], "end": 0, "first": 1, "head": 9}
    events, _ = p.receive(page)  # no progress: a copy behind bounds it
    assert events == [] and [f["req"] for f in p.data_to_send()] == ["h3"]
    with pytest.raises(GapUnreadable):
        p.receive({**page, "req": "h3"})
    p.connection_lost()
    assert p.groups[G].gap is None and p.groups[G].resume_point()["offset"] == 0


def test_one_page_read_at_a_time_per_connection_and_group() -> None:
    """G14: the driver's table of reads under way. A second request while a page of that group
    is being read for that connection is refused `unavailable`; its entry leaves with the
    answer, and the next request is read."""
    net = Net(window(3))
    (a,) = form(net, "a")
    for i in range(5):
        net.publish(a, f"m{i}")
    net.take(a)
    waiting: list[Any] = []

    def held_read(group: str, after: int, limit: int, max_bytes: int, answer: Any) -> None:
        waiting.append(lambda: answer(net.log.read_page(group, after, limit, max_bytes), None))

    net.read = held_read  # type: ignore[method-assign]
    net.send(a, History("h1", G, 0))
    net.send(a, History("h2", G, 0))
    (refused,) = net.take(a)
    assert (refused["code"], refused["req"]) == ("unavailable", "h2")
    waiting.pop()()
    (page,) = net.take(a)
    assert page["req"] == "h1" and len(page["messages"]) == 5
    net.send(a, History("h3", G, 0))
    waiting.pop()()
    assert [f["req"] for f in net.take(a)] == ["h3"]
    assert not net.driver._reading


def test_aborts_remembered_past_the_window_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """G14: the topic's aborted offsets past the window, at most MAX_ABORTS: the oldest go, and
    an offset older than every one remembered is no longer said to be decided."""
    import notify.core.topic as topic

    monkeypatch.setattr(topic, "MAX_ABORTS", 3)
    t = Topic(G, retain=1, idempotency_window=100)
    offsets = [accept(t, i, atomic=True) for i in range(1, 7)]
    t.stored(offsets[-1])
    for o in offsets[:-1]:
        t.record_outcome(o, False)  # 1-5 aborted: 3, 4 and 5 are remembered
    assert (t.decided(5), t.decided(3)) == (False, False)
    assert t.decided(2) is None and t.decided(1) is None
