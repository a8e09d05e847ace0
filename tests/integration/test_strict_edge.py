"""G12 at the edge, over real sockets: what JSON allows and the server cannot carry, and what a
lax parser would silently misread, is refused before any stream sees it, with the request's
`req` echoed, and the group goes on: its members keep receiving and a joiner is installed.

Each test here failed on the server before the edge was made strict (see the PR notes): a
64-bit-overflowing integer killed the sender's stream worker and froze every later view change;
a lone surrogate or a 10,000-level nesting got a `bad_frame` with no `req`; `NaN` came out as
`null`; `req: 7` was refused; `view: "3"` and `atomic: "yes"` were coerced; `sameView` was
ignored (and with it G6).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from client_sdk import Connection, Message, ViewInstalled
from notify.server.app import NotifyServer
from tests.integration.conftest import (
    Connect,
    MakeServer,
    OpenRaw,
    Raw,
    events_until,
    events_until_payloads,
)
from tests.schema_check import CHECK

_n = itertools.count(1)


@dataclass
class Scene:
    server: NotifyServer
    bob: Connection  # an SDK member: must see every good message and every install
    carol: Raw  # a well-behaved raw member that keeps publishing
    mallory: Raw  # a member that sends the bad frames
    view: int


@pytest.fixture
async def scene(make_server: MakeServer, connect_client: Connect,
                open_raw: OpenRaw) -> AsyncIterator[Scene]:
    server = await make_server()  # default limits: a 10,000-level nesting fits in a frame
    bob = await connect_client(server, "bob")
    await bob.join("g")
    carol = await open_raw(server, "carol")
    carol.auto_flush = True
    await carol.join("g")
    mallory = await open_raw(server, "mallory")
    mallory.auto_flush = True
    _, install = await asyncio.gather(carol.expect("view_install"), mallory.join("g"))
    await events_until(bob, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 3)
    yield Scene(server, bob, carol, mallory, install["view"])
    assert server.stats.internal_errors == 0


def frame_text(req: Any, pid: str, view: int, payload: str, **extra: Any) -> str:
    """A publish written by hand: `payload` is JSON text as a JavaScript client sends it."""
    more = "".join(f",{json.dumps(k)}:{json.dumps(v)}" for k, v in extra.items())
    return (f'{{"type":"publish","req":{json.dumps(req)},"group":"g","id":"{pid}",'
            f'"view":{view}{more},"payload":{payload}}}')


async def answer(raw: Raw) -> dict[str, Any]:
    return await raw.expect(lambda f: f["type"] in ("published", "rejected", "error"))


async def assert_group_goes_on(s: Scene, connect_client: Connect) -> None:
    """Both raw members publish and bob gets both messages (mallory's own FIFO stream is the
    one a bad payload used to kill); then a newcomer joins and everyone installs it."""
    n = next(_n)
    marks = {f"carol-{n}", f"mallory-{n}"}
    for raw in (s.carol, s.mallory):
        await raw.send({"type": "publish", "req": f"ok{n}", "group": "g", "id": f"ok{n}",
                        "view": s.view, "payload": f"{raw.member}-{n}"})
        assert (await raw.expect("published"))["id"] == f"ok{n}"
    evs = await events_until_payloads(s.bob, "g", marks)
    got = [e.payload for e in evs if isinstance(e, Message)]
    assert sorted(got) == sorted(marks), got  # and nothing else: no bad message got through
    assert s.bob.errors == []

    newcomer = await connect_client(s.server, f"dave{n}")
    _, _, install = await asyncio.gather(
        s.carol.expect("view_install"), s.mallory.expect("view_install"),
        asyncio.wait_for(newcomer.join("g"), 5.0))
    assert f"dave{n}" in install.members
    seen = await events_until(s.bob, "g", lambda e: isinstance(e, ViewInstalled))
    assert f"dave{n}" in seen[-1].members
    s.view = install.view


# -- payloads JSON allows and the server cannot carry ---------------------------------------------

DEEP = 10_000
UNCARRYABLE = {
    "big_integer": '{"amount":100000000000000000000}',  # JSON.stringify({amount: 1e20})
    "lone_surrogate": '{"text":"split \\ud83d"}',  # JSON.stringify of half an emoji
    "nan": '{"x":NaN}',
    "deep_nesting": "[" * DEEP + "]" * DEEP,
}


@pytest.mark.parametrize("payload", UNCARRYABLE.values(), ids=UNCARRYABLE.keys())
async def test_G12_uncarryable_payload_rejected_with_req_and_the_group_goes_on(
        scene: Scene, connect_client: Connect, payload: str) -> None:
    head = scene.server.hub.groups["g"].topic.head
    for req in ("r-bad", 77):
        pid = f"bad-{req}"
        await scene.mallory.send(frame_text(req, pid, scene.view, payload))
        assert await answer(scene.mallory) == {"type": "rejected", "req": req, "id": pid,
                                               "code": "bad_payload"}
    assert scene.server.hub.groups["g"].topic.head == head  # never accepted into a stream
    await assert_group_goes_on(scene, connect_client)


async def test_G12_big_integer_from_a_non_member_does_not_freeze_the_group(
        scene: Scene, connect_client: Connect, open_raw: OpenRaw) -> None:
    """The review's R1 path: a non-member's FIFO publish goes to its own `ext:` stream."""
    outsider = await open_raw(scene.server, "outsider")
    await outsider.send(frame_text("x1", "ext-1", 0, UNCARRYABLE["big_integer"]))
    assert (await answer(outsider))["code"] == "bad_payload"
    await assert_group_goes_on(scene, connect_client)


# -- req: a string or an integer, echoed exactly ---------------------------------------------------


async def test_integer_req_is_echoed_in_replies_and_errors(scene: Scene) -> None:
    m = scene.mallory
    await m.send(frame_text(7, "int-req", scene.view, '"hello"'))
    published = await m.expect("published")
    assert published["req"] == 7 and type(published["req"]) is int
    await m.send({"type": "leave", "req": 8, "group": "nowhere"})
    err = await m.expect("error")
    assert (err["code"], err["req"]) == ("no_group", 8)
    await m.send({"type": "join", "req": 9, "group": "g"})
    err = await m.expect("error")
    assert (err["code"], err["req"]) == ("already_member", 9)
    await m.send({"type": "publish", "req": 10, "group": "g", "id": "x"})
    err = await m.expect("error")
    assert (err["code"], err["req"]) == ("bad_frame", 10)
    assert "view" in err["message"] and "payload" in err["message"]


# -- strict types and unknown fields ---------------------------------------------------------------


@pytest.mark.parametrize(("extra", "field"), [
    ({"view": "3"}, "view"),
    ({"atomic": "yes"}, "atomic"),
    ({"same_view": 1}, "same_view"),
    ({"sameView": True}, "sameView"),  # misspelt: would have turned G6 off without a word
    ({"order": "TOTAL"}, "order"),
])
async def test_mistyped_or_unknown_field_is_refused_naming_it(
        scene: Scene, connect_client: Connect, extra: dict[str, Any], field: str) -> None:
    frame = {"type": "publish", "req": "r-strict", "group": "g", "id": "strict",
             "view": scene.view - 1, "payload": "stale?", **extra}  # a stale view stamp
    head = scene.server.hub.groups["g"].topic.head
    await scene.mallory.send(frame)
    err = await answer(scene.mallory)
    assert (err["type"], err["code"], err["req"]) == ("error", "bad_frame", "r-strict"), err
    assert f"{field}:" in err["message"], err["message"]
    assert scene.server.hub.groups["g"].topic.head == head
    await assert_group_goes_on(scene, connect_client)


# -- the adapter's own error -----------------------------------------------------------------------


@pytest.mark.parametrize("req", ["r-boom", 41])
async def test_internal_error_echoes_req(make_server: MakeServer, open_raw: OpenRaw,
                                         monkeypatch: pytest.MonkeyPatch, req: Any) -> None:
    srv = await make_server()
    raw = await open_raw(srv, "m")
    handle = srv.hub.handle

    def buggy(conn: int, frame: Any, now: float) -> Any:
        if getattr(frame, "group", None) == "boom":
            raise RuntimeError("a bug of ours")
        return handle(conn, frame, now)

    monkeypatch.setattr(srv.hub, "handle", buggy)
    await raw.send({"type": "join", "req": req, "group": "boom"})
    err = await raw.expect("error")
    assert (err["code"], err["req"]) == ("internal", req)
    assert srv.stats.internal_errors == 1
    install = await raw.join("g")  # the connection is still usable
    assert install["members"] == ["m"]
    srv.stats.internal_errors = 0


# -- the schema hook itself ------------------------------------------------------------------------


async def test_schema_hook_catches_a_frame_the_schema_refuses(server: NotifyServer,
                                                              open_raw: OpenRaw) -> None:
    """tests/conftest.py checks what server connections write: a frame outside the schema,
    written where the outboxes write, is caught (then forgiven: it was sent on purpose)."""
    raw = await open_raw(server, "m")
    failures = len(CHECK.failures)
    (outbox,) = server._outboxes.values()  # m's connection
    ws = outbox._ws
    assert ws.protocol in CHECK._conns
    await ws.send('{"type":"view_install","group":"g"}', text=True)
    got = await raw.expect("view_install")
    assert got == {"type": "view_install", "group": "g"}
    assert len(CHECK.failures) == failures + 1 and "view_install" in CHECK.failures[-1]
    del CHECK.failures[failures:]


# -- a batch: each frame as if it had come alone --------------------------------------------------


async def test_a_batch_is_its_frames_one_by_one_and_a_bad_one_costs_only_itself(
        scene: Scene, connect_client: Connect) -> None:
    """mallory sends one `batch` holding: a good publish, one with an uncarryable payload, a
    misspelt field, a batch inside the batch, a leave of a group she is not in, and a second
    good publish. Each is answered for itself with its `req`, the good ones are delivered in
    order, nothing bad reaches a stream, and the group goes on."""
    v = scene.view
    parts = [
        frame_text("b1", "batch-1", v, '"first"'),
        frame_text("b2", "batch-2", v, UNCARRYABLE["nan"]),
        frame_text("b3", "batch-3", v, '"typo"', sameView=True),
        '{"type":"batch","req":"b4","frames":[{"type":"ping"}]}',
        '{"type":"leave","req":"b5","group":"nowhere"}',
        frame_text("b6", "batch-6", v, '"second"'),
    ]
    head = scene.server.hub.groups["g"].topic.head
    await scene.mallory.send('{"type":"batch","frames":[' + ",".join(parts) + "]}")
    # (in any order, as for frames sent one by one: a publish is answered once stored)
    answers = sorted([await answer(scene.mallory) for _ in range(6)], key=lambda a: a["req"])
    assert [(a["type"], a["req"], a.get("code")) for a in answers] == [
        ("published", "b1", None), ("rejected", "b2", "bad_payload"),
        ("error", "b3", "bad_frame"), ("error", "b4", "bad_frame"),
        ("error", "b5", "no_group"), ("published", "b6", None)]
    assert "sameView" in answers[2]["message"]
    assert scene.server.hub.groups["g"].topic.head == head + 2
    evs = await events_until_payloads(scene.bob, "g", {"first", "second"})
    assert [e.payload for e in evs if isinstance(e, Message)] == ["first", "second"]
    # a batch that is not a list of frames is refused whole, and says why
    await scene.mallory.send({"type": "batch", "frames": []})
    err = await answer(scene.mallory)
    assert (err["code"], err.get("req")) == ("bad_frame", None) and "frames" in err["message"]
    await assert_group_goes_on(scene, connect_client)
