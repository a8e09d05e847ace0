"""G5 atomic multicast over real sockets: all ACK → confirm everywhere; a member lost before its
ACK → abort at the next install, delivered nowhere, and the sender told so."""

from __future__ import annotations

import asyncio

from client_sdk import Message, ViewChanging, ViewInstalled
from tests.integration.conftest import (
    TIMEOUT,
    Connect,
    OpenRaw,
    events_until,
    is_msg,
    messages,
    pending_events,
)


async def test_G5_atomic_commit_confirmed_and_delivered_at_every_member(
        server, connect_client: Connect, open_raw: OpenRaw) -> None:
    a = await connect_client(server, "a")
    b = await connect_client(server, "b")
    await a.join("g")
    await b.join("g")
    r = await open_raw(server, "r")  # a raw member that ACKs: it sees the confirm frame itself
    r.auto_ack = True
    await r.join("g")
    for c in (a, b):
        await events_until(c, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 3)

    res = await a.publish("g", {"atomic": 1}, atomic=True)

    async def raw_side() -> tuple[dict, dict]:  # reading is what makes the raw member ACK
        return await r.expect("deliver"), await r.expect("confirm")

    (d, conf), outcome = await asyncio.gather(
        raw_side(), asyncio.wait_for(a.outcome(res.id), TIMEOUT))
    assert outcome.committed is True and outcome.offset == res.offset and outcome.reason is None
    assert (d["offset"], d["atomic"], d["sender"], d["payload"]) == \
        (res.offset, True, "a", {"atomic": 1})
    assert res.offset in conf["offsets"]
    for c in (a, b):  # the SDK releases an atomic message only on its confirm
        [m] = await messages(c, "g", 1)
        assert (m.offset, m.atomic, m.payload) == (res.offset, True, {"atomic": 1})

    # A second atomic message from another member, and a FIFO one queued behind it.
    res2 = await b.publish("g", "second", atomic=True)
    res3 = await b.publish("g", "after")
    _, outcome2 = await asyncio.gather(
        r.expect(lambda f: f["type"] == "confirm" and res2.offset in f["offsets"]),
        asyncio.wait_for(b.outcome(res2.id), TIMEOUT))
    assert outcome2.committed is True
    for c in (a, b):
        got = await messages(c, "g", 2)
        assert [(m.offset, m.payload) for m in got] == [(res2.offset, "second"),
                                                         (res3.offset, "after")]
    assert [f["offset"] for f in r.seen if f["type"] == "abort"] == []
    for c in (a, b):
        assert c.errors == [] and pending_events(c, "g") == []


async def test_G5_atomic_abort_when_member_drops_before_ack(
        make_server, connect_client: Connect, open_raw: OpenRaw) -> None:
    server = await make_server(suspect_timeout=0.3, flush_timeout=1.0, ack_timeout=60.0)
    a = await connect_client(server, "a")
    b = await connect_client(server, "b")
    await a.join("g")
    await b.join("g")
    r = await open_raw(server, "r")  # never ACKs anything
    await r.join("g")
    for c in (a, b):
        await events_until(c, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 3)

    res = await a.publish("g", {"atomic": "doomed"}, atomic=True)
    d = await r.expect("deliver")  # it has the message, and will never ACK it
    assert d["offset"] == res.offset and d["atomic"] is True
    assert not a._outcomes[res.id].done()
    r.drop()

    outcome = await asyncio.wait_for(a.outcome(res.id), TIMEOUT)
    assert outcome.committed is False and outcome.offset == res.offset
    assert outcome.reason == "member_failed"

    for c in (a, b):
        evs = await events_until(c, "g", lambda e: isinstance(e, ViewInstalled)
                                 and e.view == 4)
        assert evs[-1].members == ("a", "b") and evs[-1].left == ("r",)
        change = [e for e in evs if isinstance(e, ViewChanging)]
        assert change and change[-1].leaving == ("r",), evs
        assert [e for e in evs if isinstance(e, Message)] == [], \
            f"{c.member} delivered an aborted message: {evs}"
        assert c.protocol.groups["g"].atomic == {}  # nothing still held back

    # The group goes on: the next message is the next thing everyone delivers.
    await b.publish("g", "next")
    for c in (a, b):
        evs = await events_until(c, "g", is_msg("next"))
        assert [e for e in evs if isinstance(e, Message)] == [evs[-1]], evs
        assert c.errors == []


async def test_G5_G7_atomic_commits_when_member_resumes_in_time_and_acks(
        make_server, connect_client: Connect, open_raw: OpenRaw) -> None:
    # A member that drops before its ACK but resumes within suspect_timeout is still a member:
    # the message waits for it, and commits once it ACKs on its new connection.
    server = await make_server(suspect_timeout=30.0, flush_timeout=5.0, ack_timeout=60.0)
    a = await connect_client(server, "a")
    b = await connect_client(server, "b")
    await a.join("g")
    await b.join("g")
    r = await open_raw(server, "r")
    install = await r.join("g")
    for c in (a, b):
        await events_until(c, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 3)

    res = await a.publish("g", "held", atomic=True)
    d = await r.expect("deliver")
    assert d["offset"] == res.offset
    r.drop()

    r2 = await open_raw(server, "r", resume_session=r.session)
    await r2.send({"type": "join", "req": "rj", "group": "g", "resume": {
        "epoch": install["epoch"], "offset": install["offset"], "view": install["view"],
        "streams": {"fifo:a": d["seq"]}}})
    assert (await r2.recv())["type"] == "view_resume"
    done = await r2.expect("catchup_done")
    assert done["count"] == 0 and [f for f in r2.seen if f["type"] == "deliver"] == []
    assert not a._outcomes[res.id].done()

    await r2.send({"type": "ack", "group": "g", "offsets": [res.offset]})
    conf = await r2.expect("confirm")
    assert res.offset in conf["offsets"]
    outcome = await asyncio.wait_for(a.outcome(res.id), TIMEOUT)
    assert outcome.committed is True
    for c in (a, b):
        [m] = await messages(c, "g", 1)
        assert (m.offset, m.payload) == (res.offset, "held")
        assert pending_events(c, "g") == [] and c.errors == []
    assert server.hub.groups["g"].view.version == 3
