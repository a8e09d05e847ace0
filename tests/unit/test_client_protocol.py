"""The client protocol core: flush discipline, atomic holdback, resume points (G5, G7)."""

from __future__ import annotations

from typing import Any

import pytest

from client_sdk import (
    ClientProtocol,
    GroupPhase,
    Message,
    ProtocolViolation,
    PublishRejected,
    Reset,
    ViewInstalled,
)
from client_sdk.events import Removed, ViewChanging
from state_transfer import encode


def install(view: int, members: list[str], offset: int = 0, left: list[str] | None = None,
            epoch: int = 1) -> dict[str, Any]:
    return {"type": "view_install", "group": "g", "view": view, "members": members,
            "joined": [], "left": left or [], "epoch": epoch, "offset": offset}


def deliver(offset: int, seq: int, *, stream: str = "fifo:b",
            atomic: bool = False) -> dict[str, Any]:
    return {"type": "deliver", "group": "g", "offset": offset, "stream": stream, "seq": seq,
            "sender": stream.split(":")[-1], "view": 1, "atomic": atomic, "payload": offset,
            "ts": 0.0}


@pytest.fixture
def proto() -> ClientProtocol:
    p = ClientProtocol("a")
    p.join("1", "g")
    p.data_to_send()
    events, _ = p.receive(install(1, ["a", "b"], offset=5))
    assert isinstance(events[0], ViewInstalled)
    return p


def delivered(events: list[Any]) -> list[int]:
    return [e.offset for e in events if isinstance(e, Message)]


def test_atomic_holds_back_its_stream_until_confirm(proto: ClientProtocol) -> None:
    ev1, _ = proto.receive(deliver(6, 1, atomic=True))
    ev2, _ = proto.receive(deliver(7, 2))
    ev3, _ = proto.receive(deliver(8, 1, stream="total"))  # another stream is not held
    assert delivered(ev1 + ev2) == []
    assert delivered(ev3) == [8]
    assert proto.data_to_send() == [{"type": "ack", "group": "g", "offsets": [6]}]
    ev4, _ = proto.receive({"type": "confirm", "group": "g", "offsets": [6]})
    assert delivered(ev4) == [6, 7]


def test_aborted_atomic_is_never_delivered(proto: ClientProtocol) -> None:
    proto.receive(deliver(6, 1, atomic=True))
    proto.receive(deliver(7, 2))
    ev, _ = proto.receive({"type": "abort", "group": "g", "offsets": [6], "reason": "x"})
    assert delivered(ev) == [7]


def test_view_change_acks_then_flush_ok_then_blocks(proto: ClientProtocol) -> None:
    proto.receive(deliver(6, 1, atomic=True))
    ev, _ = proto.receive({"type": "view_change", "group": "g", "proposed": 2,
                           "members": ["a"], "joining": [], "leaving": ["b"],
                           "reason": "suspect"})
    assert isinstance(ev[0], ViewChanging)
    assert not proto.groups["g"].can_send
    assert proto.data_to_send() == [{"type": "ack", "group": "g", "offsets": [6]},
                                    {"type": "flush_ok", "group": "g", "view": 2}]
    proto.receive({"type": "view_resume", "group": "g", "view": 1})
    assert proto.groups["g"].can_send


def test_duplicates_are_dropped_and_gaps_are_violations(proto: ClientProtocol) -> None:
    assert delivered(proto.receive(deliver(6, 1))[0]) == [6]
    assert delivered(proto.receive(deliver(6, 1))[0]) == []
    assert proto.groups["g"].duplicates == 1
    with pytest.raises(ProtocolViolation):
        proto.receive(deliver(9, 3))


def test_resume_point_tracks_streams_and_catchup(proto: ClientProtocol) -> None:
    proto.receive({"type": "batch", "frames": [deliver(6, 1), deliver(7, 4, stream="total")]})
    assert proto.groups["g"].resume_point() == {"epoch": 1, "offset": 5, "view": 1,
                                                "streams": {"fifo:b": 1, "total": 4}}
    proto.join("2", "g", resume=True)
    frames = proto.data_to_send()
    assert frames[0]["resume"]["streams"] == {"fifo:b": 1, "total": 4}
    proto.receive({"type": "view_resume", "group": "g", "view": 1})
    proto.receive({"type": "catchup_done", "group": "g", "offset": 7, "count": 0})
    assert proto.groups["g"].resume_point()["offset"] == 7


def test_resume_reacks_held_atomics(proto: ClientProtocol) -> None:
    proto.receive(deliver(6, 1, atomic=True))
    proto.data_to_send()
    proto.join("2", "g", resume=True)
    proto.data_to_send()
    proto.receive({"type": "view_resume", "group": "g", "view": 1})
    assert proto.data_to_send() == [{"type": "ack", "group": "g", "offsets": [6]}]


def test_install_without_me_means_removed(proto: ClientProtocol) -> None:
    ev, _ = proto.receive(install(2, ["b"], left=["a"]))
    assert isinstance(ev[0], Removed)
    assert proto.groups["g"].phase is GroupPhase.LEFT
    assert delivered(proto.receive(deliver(9, 1))[0]) == []


def test_saved_point_stops_before_held_messages(proto: ClientProtocol) -> None:
    proto.receive(deliver(6, 1))
    proto.receive(deliver(7, 2, atomic=True))
    proto.receive(deliver(8, 3))
    proto.receive({"type": "catchup_done", "group": "g", "offset": 8, "count": 0})
    g = proto.groups["g"]
    assert g.resume_point()["streams"] == {"fifo:b": 3}
    saved = g.saved_point()
    assert saved["streams"] == {"fifo:b": 1} and saved["offset"] == 6
    fresh = ClientProtocol("a")
    fresh.join("9", "g", resume_from=saved)
    (frame,) = fresh.data_to_send()
    assert frame["resume"] == {"epoch": 1, "offset": 6, "view": 1, "streams": {"fifo:b": 1}}


def test_G9_a_batch_with_install_messages_and_the_snapshot_holds_the_messages_back() -> None:
    """One `batch` may carry the joiner's install, a message of the new view and the
    snapshot's last chunk: the message is one the snapshot lacks, so it comes after
    `StateReceived` (handed before it, `restore()` would wipe it)."""
    p = ClientProtocol("c")
    p.join("1", "g", want_state=True)
    p.data_to_send()
    (chunk,) = encode(b"state")
    joined = {**install(3, ["a", "c"], offset=18), "joined": ["c"]}
    ev, _ = p.receive({"type": "batch", "frames": [
        joined, deliver(19, 4),
        {"type": "state_chunk", "group": "g", "transfer": "t", "index": 0, "last": True,
         "data": chunk.data, "sha256": chunk.sha256, "streams": {"fifo:b": 3}, "offset": 18}]})
    assert [type(e).__name__ for e in ev] == ["ViewInstalled", "StateReceived", "Message"]


def test_violation_in_a_batch_hands_over_what_came_before_and_counts_nothing_after(
        proto: ClientProtocol) -> None:
    bad = deliver(7, 2)
    del bad["payload"], bad["ts"]  # malformed: it must not count as received
    with pytest.raises(ProtocolViolation) as v:
        proto.receive({"type": "batch", "frames": [deliver(6, 1), bad, deliver(8, 3)]})
    assert delivered(v.value.events) == [6]
    assert proto.groups["g"].resume_point()["streams"] == {"fifo:b": 1}  # resume resends 7, 8
    assert delivered(proto.receive(deliver(7, 2))[0]) == [7]


def test_refused_resume_joins_afresh_and_says_reset_before_the_new_view(
        proto: ClientProtocol) -> None:
    """Issue 16: the server's log was reset (another epoch): the group joins without a resume
    point, forgets its old stream (held atomics included), and the next install comes after a
    `Reset` that says where the old stream ended and the new one starts."""
    proto.receive(deliver(6, 1))
    proto.receive(deliver(7, 2, atomic=True))
    proto.join("2", "g", resume=True)
    (ack, frame) = proto.data_to_send()
    assert ack["type"] == "ack"
    assert frame["resume"]["epoch"] == 1 and proto.groups["g"].resuming
    _, replies = proto.receive({"type": "error", "req": "2", "code": "offset_unavailable",
                                "message": "log epoch is 9, not 1"})
    assert [r.code for r in replies] == ["offset_unavailable"]  # type: ignore[union-attr]
    assert proto.group_of_join("2") is proto.groups["g"]  # the client can match the refusal
    proto.join_afresh("3", "g", "offset_unavailable")
    assert proto.data_to_send() == [{"type": "join", "req": "3", "group": "g",
                                     "want_state": False, "accept_from": "members"}]
    ev, _ = proto.receive({**install(1, ["a"], offset=0, epoch=9), "joined": ["a"]})
    assert ev[0] == Reset("g", "offset_unavailable", 1, 7, 9, 0)
    assert isinstance(ev[1], ViewInstalled) and len(ev) == 2
    assert proto.groups["g"].resume_point() == {"epoch": 9, "offset": 0, "view": 1,
                                                "streams": {}}
    assert proto.groups["g"].can_send
    assert delivered(proto.receive(deliver(1, 1))[0]) == [1]  # seq 1 again: a new log
    ev, _ = proto.receive(install(2, ["a", "b"], offset=1, epoch=9))
    assert not any(isinstance(e, Reset) for e in ev)  # once


def test_refused_resume_with_the_same_epoch_starts_at_the_new_install(
        proto: ClientProtocol) -> None:
    """Out of retention (same log, a gap): the new knowledge starts at the new install, not
    at the old base, so a later resume point does not ask for the gap again."""
    proto.receive(deliver(6, 1))
    proto.join("2", "g", resume=True)
    proto.data_to_send()
    proto.join_afresh("3", "g", "offset_unavailable")
    ev, _ = proto.receive({**install(4, ["a", "b"], offset=40), "joined": ["a"]})
    assert ev[0] == Reset("g", "offset_unavailable", 1, 6, 1, 40)
    assert proto.groups["g"].resume_point() == {"epoch": 1, "offset": 40, "view": 4,
                                                "streams": {}}


def test_snapshot_point_stops_before_messages_still_held_back(proto: ClientProtocol) -> None:
    """A checkpoint taken while an atomic message is unresolved (replayed before a
    `catchup_done` that moved the base past it) must not claim it: a member restoring the
    checkpoint would never be given it (found by the browser SDK's tests, issue 13)."""
    proto.receive(deliver(6, 1, atomic=True))  # held, with what follows in its stream
    proto.receive(deliver(7, 2))
    ev, _ = proto.receive(deliver(8, 1, stream="total"))
    assert delivered(ev) == [8]
    proto.receive({"type": "catchup_done", "group": "g", "offset": 8, "count": 3})
    g = proto.groups["g"]
    point = g.snapshot_point(8, {"total": 1})
    assert point["offset"] == 5  # before the held atomic, not the catch-up's 8
    assert point["streams"] == {"total": 1} and point["epoch"] == 1
    proto.receive({"type": "confirm", "group": "g", "offsets": [6]})
    assert g.snapshot_point(8, {"total": 1, "fifo:b": 2})["offset"] == 8  # nothing held now


def test_rejoin_all_replaces_what_was_queued_for_the_old_connection(
        proto: ClientProtocol) -> None:
    """After a reconnect the rejoin replaces the frames queued for the old connection (an ACK,
    a flush_ok, a refresh the hello carries): the joins go first, then a checkpoint still
    waiting (asked while away), whose frames are kept; one failed by the loss is not sent."""
    proto.receive(deliver(6, 1, atomic=True))  # an ACK queued
    proto.open_checkpoint("g", encode(b"lost"), {"epoch": 1, "offset": 5}, req="c1")
    proto.connection_lost()
    assert [a.key for a in proto.answers()] == ["c1"]  # failed: part of it may be lost
    proto.receive({"type": "view_change", "group": "g", "proposed": 2, "members": ["a", "b"],
                   "joining": [], "leaving": [], "reason": "join"})  # a flush_ok queued
    proto.open_refresh("t-2")
    proto.open_checkpoint("g", encode(b"state"), {"epoch": 1, "offset": 5}, req="c2")
    proto.rejoin_all(lambda: "r1")
    frames = proto.data_to_send()
    assert [(f["type"], f.get("req")) for f in frames] == [("join", "r1"), ("checkpoint", "c2")]
    proto.receive({"type": "view_resume", "group": "g", "view": 1})
    assert proto.data_to_send() == [{"type": "ack", "group": "g", "offsets": [6]}]  # again


# -- issue 32: a request the link drops is sent again, or fails to the application ------------

WELCOME = {"type": "welcome", "session": "s-1", "member": "a", "heartbeat_ms": 5000,
           "limits": {}}
POINT = {"epoch": 1, "offset": 5, "view": 1, "streams": {}}

#: kind -> (joined first?, open the request (returns its answer's key), the frames the client
#: sends after the reconnect (by type; no `kind` among them: it failed at the loss, or the
#: welcome answered it), the server's frames that answer it after the reconnect)
LOST_REQUESTS: dict[str, tuple[bool, Any, list[str], list[dict[str, Any]]]] = {
    "join": (False, lambda p: (p.open_join("g", req="j1"), "g")[1], ["join"],
             [install(1, ["a", "b"], offset=5)]),
    "leave": (True, lambda p: (p.open_leave("g", req="l1"), "g")[1], ["leave"],  # C6: no join
              [install(2, ["b"], offset=6, left=["a"])]),
    "checkpoint": (True, lambda p: p.open_checkpoint("g", encode(b"s"), POINT, req="c1"),
                   ["join"], [{"type": "view_resume", "group": "g", "view": 1}]),
    "refresh": (False, lambda p: p.open_refresh("t-2"), [], []),  # the welcome answers it
    "publish": (True, lambda p: p.open_publish("g", "x-1", 1, req="p1").frame["id"],
                ["join", "publish"],
                [{"type": "view_resume", "group": "g", "view": 1},
                 {"type": "published", "req": "p1", "id": "x-1", "offset": 7}]),
}


@pytest.mark.parametrize("kind", list(LOST_REQUESTS))
def test_a_request_the_link_drops_is_sent_again_or_fails(kind: str) -> None:
    """Issue 32: the connection drops after the request's frame left and before its answer.
    After the reconnect (hello, welcome, `rejoin_all`) the request is either sent again and
    then answered, or it failed to the application at the loss; never left waiting for the
    host's `request_timeout`."""
    joined, ask, resent, answer = LOST_REQUESTS[kind]
    p = ClientProtocol("a")
    p.receive(WELCOME)
    if joined:
        p.open_join("g", req="j1")
        p.receive(install(1, ["a", "b"], offset=5))
    p.data_to_send()
    p.answers()
    key = ask(p)
    assert any(f["type"] == kind for f in p.data_to_send())  # the frame left
    p.connection_lost()
    answers = p.answers()
    p.hello(True)
    p.receive(WELCOME)
    p.rejoin_all(lambda: "r1")
    answers += p.answers()
    frames = p.data_to_send()
    for f in answer:
        p.receive(f)
        frames += p.data_to_send()
        answers += p.answers()
    assert [f["type"] for f in frames] == resent
    assert [(str(a.kind), a.key) for a in answers] == [(kind, key)]
    # a checkpoint fails (part of it may be lost: take it again); the others are answered
    assert (answers[0].error is not None) == (kind == "checkpoint")
    assert not any(p.requests.waiting().values())


def test_a_leave_asked_while_away_is_sent_alone_after_the_reconnect(
        proto: ClientProtocol) -> None:
    """C6: a leave asked while the link is down goes out once, after the hello, and the group
    is not joined again (a join could let the member back in after the leave)."""
    proto.connection_lost()
    proto.open_leave("g", req="l1")
    proto.hello(True)
    proto.rejoin_all(lambda: "r1")
    assert proto.data_to_send() == [{"type": "leave", "req": "l1", "group": "g"}]
    events, _ = proto.receive(install(2, ["b"], offset=6, left=["a"]))
    assert [type(e) for e in events] == [Removed]
    assert [a.key for a in proto.answers()] == ["g"]
    proto.connection_lost()
    assert proto.rejoin_all() == [] and proto.data_to_send() == []  # left: nothing again


def test_a_clash_fails_the_unanswered_publishes_instead_of_sending_them_as_another_instance(
        ) -> None:
    """Issue 29: a publish may be stored under the old instance when the clash (4002) comes.
    Sent again under the new instance (publish ids are per instance) it could be delivered
    twice; so `take_instance` fails it with `PublishRejected("replaced")`, and the rejoin does
    not send it."""
    p = ClientProtocol("alice", "A")
    p.receive({**WELCOME, "member": "alice#A", "user": "alice", "instance": "A"})
    p.open_join("g", req="j1")
    p.receive(install(1, ["alice#A", "b"], offset=5))
    p.data_to_send()
    p.answers()
    pid = p.open_publish("g", "x-1", 1, req="p1").frame["id"]
    assert [f["type"] for f in p.data_to_send()] == ["publish"]
    p.connection_lost()
    p.answers()
    p.take_instance("B")
    (answer,) = [a for a in p.answers() if getattr(a, "key", None) == pid]
    assert isinstance(answer.error, PublishRejected) and answer.error.code == "replaced"
    p.rejoin_all()
    assert [f["type"] for f in p.data_to_send()] == ["join"]
    assert p.me == "alice#B" and p.requests.publishes == {}


def test_a_groups_duplicates_dropped_counts_what_the_sdk_hid(proto: ClientProtocol) -> None:
    """`Group.duplicates_dropped`: the protocol's count of deliveries dropped as duplicates,
    read through the public handle (the chaos clients log it; it must stay 0)."""
    from types import SimpleNamespace

    from client_sdk.client import Group

    group = Group(SimpleNamespace(protocol=proto, member="a"), "g", "members")  # type: ignore[arg-type]
    other = Group(SimpleNamespace(protocol=proto, member="a"), "never-joined", "members")  # type: ignore[arg-type]
    assert (group.duplicates_dropped, other.duplicates_dropped) == (0, 0)
    proto.receive(deliver(6, 1))
    proto.receive(deliver(6, 1))
    proto.receive({"type": "batch", "frames": [deliver(6, 1), deliver(7, 2)]})
    assert group.duplicates_dropped == 2 == proto.groups["g"].duplicates
    with pytest.raises(AttributeError):
        group.duplicates_dropped = 0  # type: ignore[misc]
