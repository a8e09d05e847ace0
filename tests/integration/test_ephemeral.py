"""DESIGN §3 for browsers: `ping` → `pong` (an application-level heartbeat, since browsers
cannot see WebSocket pings), and `publish{ephemeral: true}` for presence and cursors: to the
current view's other members at most once, never stored, never replayed, no `published`."""

from __future__ import annotations

import asyncio

from tests.integration.conftest import MakeServer, OpenRaw


async def test_ping_is_answered_pong_with_its_req_even_before_hello(
        make_server: MakeServer, open_raw: OpenRaw) -> None:
    srv = await make_server()
    anon = await open_raw(srv)  # no hello yet
    await anon.send({"type": "ping"})
    assert await anon.recv() == {"type": "pong", "req": None}
    alice = await open_raw(srv, "alice")
    await alice.send({"type": "ping", "req": 41})
    assert await alice.recv() == {"type": "pong", "req": 41}
    await alice.send({"type": "ping", "req": 1, "at": 5})  # strict: no unknown fields
    assert (await alice.recv())["code"] == "bad_frame"


async def test_ephemeral_reaches_the_others_once_and_is_never_stored_or_replayed(
        make_server: MakeServer, open_raw: OpenRaw) -> None:
    srv = await make_server()
    a, b = await open_raw(srv, "a"), await open_raw(srv, "b")
    a.auto_flush = b.auto_flush = True
    await a.join("g")
    await asyncio.gather(b.join("g"), a.expect("view_install"))
    cursor = {"x": 10, "y": 20}
    await a.send({"type": "publish", "req": "c1", "group": "g", "id": "c1", "view": 2,
                  "ephemeral": True, "payload": cursor})
    got = await b.expect("ephemeral")
    assert (got["group"], got["sender"], got["view"], got["payload"]) == ("g", "a", 2, cursor)
    # then a stored message: a got nothing for its cursor (no echo, no `published`)
    await a.send({"type": "publish", "req": "m1", "group": "g", "id": "m1", "view": 2,
                  "payload": "hello"})
    first = await a.expect(lambda f: f["type"] in ("ephemeral", "published", "deliver"))
    assert (first["type"], first["offset"]) == ("deliver", 1)  # the cursor took no offset
    assert srv.hub.groups["g"].topic.head == 1

    # A member that comes back is replayed the stored message only.
    c = await open_raw(srv, "c")
    c.auto_flush = True
    await c.send({"type": "join", "req": "j", "group": "g",
                  "resume": {"epoch": srv.hub.groups["g"].epoch, "offset": 0}})
    await c.expect(lambda f: f["type"] == "view_install" and "c" in f["members"])
    await c.expect("catchup_done")
    assert [f["type"] for f in c.seen if f["type"] in ("deliver", "ephemeral")] == ["deliver"]


async def test_ephemeral_is_refused_to_non_members_and_with_atomic_or_total(
        make_server: MakeServer, open_raw: OpenRaw) -> None:
    srv = await make_server()
    a, x = await open_raw(srv, "a"), await open_raw(srv, "x")
    await a.join("g")
    await x.send({"type": "publish", "req": 1, "group": "g", "id": "e", "view": 1,
                  "ephemeral": True, "payload": {}})
    refused = await x.expect("rejected")
    assert (refused["req"], refused["code"]) == (1, "not_member")
    for extra in ({"atomic": True}, {"order": "total"}):
        await a.send({"type": "publish", "req": "bad", "group": "g", "id": "e2", "view": 1,
                      "ephemeral": True, "payload": {}, **extra})
        err = await a.expect("error")
        assert err["code"] == "bad_frame" and err["req"] == "bad" and "ephemeral" in err["message"]
