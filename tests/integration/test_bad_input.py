"""G12 bad input over real sockets: each mistake gets an `error` (or `rejected`) frame with a
stable code, or a documented close code; the same connection keeps working where that is safe,
and another member of the same group keeps receiving normally and sees nothing odd."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from websockets.exceptions import ConnectionClosed

from client_sdk import Connection, Message, ViewInstalled
from notify.core.config import Limits
from notify.server.app import NotifyServer
from tests.integration.conftest import (
    Connect,
    MakeServer,
    OpenRaw,
    Raw,
    events_until,
    is_msg,
    pending_events,
)

MAX_FRAME = 4096
_markers = itertools.count(1)


@dataclass
class Scene:
    server: NotifyServer
    bob: Connection  # a well-behaved member that must not notice anything
    raw: Raw  # a raw member of the same group: it sends the bad frames
    view: int


@pytest.fixture
async def scene(make_server: MakeServer, connect_client: Connect,
                open_raw: OpenRaw) -> AsyncIterator[Scene]:
    server = await make_server(limits=Limits(max_frame_bytes=MAX_FRAME))
    bob = await connect_client(server, "bob")
    await bob.join("g")
    raw = await open_raw(server, "mallory")
    install = await raw.join("g")
    await events_until(bob, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 2)
    yield Scene(server, bob, raw, install["view"])
    assert server.stats.internal_errors == 0


async def assert_group_unaffected(s: Scene) -> None:
    """The raw member's connection still works (a valid publish is published and delivered to
    itself), and bob's next event is that message: nothing else, no error."""
    n = next(_markers)
    pid, payload = f"marker-{n}", f"marker {n}"
    await s.raw.send({"type": "publish", "req": f"mk{n}", "group": "g", "id": pid,
                      "view": s.view, "payload": payload})
    got = [await s.raw.recv(), await s.raw.recv()]
    kinds = sorted(f["type"] for f in got)
    assert kinds == ["deliver", "published"], got
    assert {f.get("id") for f in got if f["type"] == "published"} == {pid}
    assert [f["payload"] for f in got if f["type"] == "deliver"] == [payload]
    evs = await events_until(s.bob, "g", is_msg(payload))
    assert len(evs) == 1 and isinstance(evs[0], Message) and evs[0].sender == "mallory", evs
    assert pending_events(s.bob, "g") == [] and s.bob.errors == []
    assert s.server.hub.groups["g"].view.version == s.view


async def test_G12_malformed_json_gets_bad_frame(scene: Scene) -> None:
    for junk in ("{not json", "", "[1, 2, 3]", '"just a string"', "null"):
        await scene.raw.send(junk)
        err = await scene.raw.recv()
        assert (err["type"], err["code"]) == ("error", "bad_frame"), (junk, err)
        assert err.get("req") is None
    await assert_group_unaffected(scene)


async def test_G12_unknown_type_gets_unknown_type_with_req(scene: Scene) -> None:
    await scene.raw.send({"type": "frobnicate", "req": "r-unknown", "group": "g"})
    err = await scene.raw.recv()
    assert (err["type"], err["code"], err["req"]) == ("error", "unknown_type", "r-unknown")
    await scene.raw.send({"req": "r-notype", "group": "g"})
    err = await scene.raw.recv()
    assert (err["type"], err["code"], err["req"]) == ("error", "bad_frame", "r-notype")
    await assert_group_unaffected(scene)


async def test_G12_missing_or_wrong_fields_get_bad_frame_with_req_echoed(scene: Scene) -> None:
    cases = [
        ({"type": "publish", "req": "r-pub", "group": "g"}, "r-pub"),  # no id, no view
        ({"type": "join", "req": "r-join"}, "r-join"),  # no group
        ({"type": "leave", "group": "g"}, None),  # no req: nothing to echo
        ({"type": "ack", "group": "g", "offsets": "all"}, None),
        ({"type": "ack", "group": "g", "offsets": [-1]}, None),
        ({"type": "flush_ok", "group": "g"}, None),
        ({"type": "publish", "req": "r-order", "group": "g", "id": "x", "view": 2,
          "order": "random"}, "r-order"),
    ]
    for frame, req in cases:
        await scene.raw.send(frame)
        err = await scene.raw.recv()
        assert (err["type"], err["code"], err.get("req")) == ("error", "bad_frame", req), \
            (frame, err)
    # Nothing of those frames took effect: still a member, nothing published.
    assert scene.server.hub.groups["g"].topic.head == 0
    await assert_group_unaffected(scene)


async def test_G12_frame_before_hello_gets_hello_required(
        scene: Scene, open_raw: OpenRaw) -> None:
    newcomer = await open_raw(scene.server)  # no hello
    await newcomer.send({"type": "join", "req": "r-early", "group": "g"})
    err = await newcomer.recv()
    assert (err["type"], err["code"], err["req"]) == ("error", "hello_required", "r-early")
    await newcomer.send({"type": "publish", "req": "r-pub", "group": "g", "id": "p", "view": 2,
                         "payload": "sneaky"})
    err = await newcomer.recv()
    assert (err["code"], err["req"]) == ("hello_required", "r-pub")

    # The same connection can still say hello and then use the group like anyone else.
    await newcomer.send({"type": "hello", "protocol": 1, "member": "newcomer"})
    welcome = await newcomer.recv()
    assert welcome["type"] == "welcome" and welcome["member"] == "newcomer"
    newcomer.member = "newcomer"
    scene.raw.auto_flush = True  # the join is a view change: mallory must flush
    await newcomer.send({"type": "join", "req": "r-join", "group": "g"})
    await scene.raw.expect("view_install")
    install = await newcomer.expect("view_install")
    assert install["members"] == ["bob", "mallory", "newcomer"]
    evs = await events_until(scene.bob, "g", lambda e: isinstance(e, ViewInstalled))
    assert evs[-1].members == ("bob", "mallory", "newcomer")
    scene.view = install["view"]
    assert not [e for e in evs if isinstance(e, Message)], evs  # "sneaky" went nowhere
    assert scene.server.hub.groups["g"].topic.head == 0
    await assert_group_unaffected(scene)


async def test_G12_oversized_frame_closes_with_1009(scene: Scene, open_raw: OpenRaw) -> None:
    big = await open_raw(scene.server, "big")
    await big.send({"type": "publish", "req": "r-big", "group": "g", "id": "big", "view": 0,
                    "payload": "x" * (2 * MAX_FRAME)})
    with pytest.raises(ConnectionClosed):
        await big.recv()
    assert big.ws.close_code == 1009
    assert scene.server.hub.groups["g"].topic.head == 0
    # The server is fine: the same member connects again, and the group never noticed.
    again = await open_raw(scene.server, "big")
    assert again.session is not None
    await assert_group_unaffected(scene)


async def test_G12_publish_to_missing_group_rejected_no_group(scene: Scene) -> None:
    await scene.raw.send({"type": "publish", "req": "r-ng", "group": "nowhere", "id": "ng-1",
                          "view": 1, "payload": "lost"})
    rej = await scene.raw.recv()
    assert (rej["type"], rej["code"], rej["req"], rej["id"]) == \
        ("rejected", "no_group", "r-ng", "ng-1")
    assert "nowhere" not in scene.server.hub.groups
    await assert_group_unaffected(scene)


async def test_G12_total_or_atomic_publish_by_non_member_rejected_not_member(
        scene: Scene, open_raw: OpenRaw) -> None:
    outsider = await open_raw(scene.server, "outsider")
    for i, extra in enumerate([{"order": "total"}, {"atomic": True}, {"same_view": True}]):
        await outsider.send({"type": "publish", "req": f"r{i}", "group": "g", "id": f"o{i}",
                             "view": scene.view, "payload": "nope", **extra})
        rej = await outsider.recv()
        assert (rej["type"], rej["code"], rej["id"]) == ("rejected", "not_member", f"o{i}"), rej
    # Not a member either for ACKs and flushes.
    await outsider.send({"type": "ack", "group": "g", "offsets": [1]})
    err = await outsider.recv()
    assert (err["type"], err["code"]) == ("error", "not_member")
    assert scene.server.hub.groups["g"].topic.head == 0
    # What a non-member may do still works on that connection: a plain FIFO publish (which
    # bob, who accepts members only, never gets).
    await outsider.send({"type": "publish", "req": "ok", "group": "g", "id": "fine",
                         "view": 0, "payload": "plain"})
    ok = await outsider.recv()
    assert (ok["type"], ok["id"]) == ("published", "fine")
    await assert_group_unaffected(scene)


async def test_G12_ack_for_unknown_offset_gets_unknown_offset(scene: Scene) -> None:
    await scene.raw.send({"type": "ack", "group": "g", "offsets": [999]})
    err = await scene.raw.recv()
    assert (err["type"], err["code"]) == ("error", "unknown_offset")
    await scene.raw.send({"type": "ack", "group": "nowhere", "offsets": [1]})
    err = await scene.raw.recv()
    assert (err["type"], err["code"]) == ("error", "no_group")
    await assert_group_unaffected(scene)
    # ACKing an offset that is a plain (non-atomic) message is just as unknown.
    head = scene.server.hub.groups["g"].topic.head
    await scene.raw.send({"type": "ack", "group": "g", "offsets": [head]})
    err = await scene.raw.recv()
    assert (err["type"], err["code"]) == ("error", "unknown_offset")
    await assert_group_unaffected(scene)


async def test_G12_flush_ok_for_wrong_view_gets_wrong_view(scene: Scene,
                                                           connect_client: Connect) -> None:
    for view in (99, 0):
        await scene.raw.send({"type": "flush_ok", "group": "g", "view": view})
        err = await scene.raw.recv()
        assert (err["type"], err["code"]) == ("error", "wrong_view"), (view, err)
    await assert_group_unaffected(scene)
    # The group is not wedged by it: a newcomer joins through a normal flush.
    scene.raw.auto_flush = True
    carol = await connect_client(scene.server, "carol")
    _, install = await asyncio.gather(scene.raw.expect("view_install"), carol.join("g"))
    assert install.members == ("bob", "mallory", "carol")
    evs = await events_until(scene.bob, "g", lambda e: isinstance(e, ViewInstalled))
    assert evs[-1].view == install.view == scene.view + 1
    assert scene.bob.errors == []
