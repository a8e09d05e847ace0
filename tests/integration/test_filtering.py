"""G6 version filtering over real sockets: a same_view message stamped with another view is
rejected and delivered nowhere; non-members reach only receivers with accept_from "any"."""

from __future__ import annotations

import pytest

from client_sdk import Message, PublishRejected, ViewInstalled
from tests.integration.conftest import Connect, OpenRaw, events_until, is_msg, pending_events


async def test_G6_same_view_publish_with_stale_view_is_rejected_and_never_delivered(
        server, connect_client: Connect) -> None:
    a = await connect_client(server, "a")
    b = await connect_client(server, "b")
    await a.join("g")
    await b.join("g")  # view 2
    for c in (a, b):
        await events_until(c, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 2)

    with pytest.raises(PublishRejected) as info:
        await a.publish("g", "stale", same_view=True, view=1)
    assert info.value.code == "stale_view"
    # Without same_view an old stamp is fine (the default is not to filter).
    await a.publish("g", "old-stamp-ok", view=1)
    fresh = await a.publish("g", "fresh", same_view=True)  # stamped with the current view, 2
    for c in (a, b):
        evs = await events_until(c, "g", is_msg("fresh"))
        got = [(e.payload, e.view) for e in evs if isinstance(e, Message)]
        assert got == [("old-stamp-ok", 1), ("fresh", 2)], (c.member, got)
        assert evs[-1].offset == fresh.offset
        assert c.errors == [] and pending_events(c, "g") == []


async def test_G6_non_member_reaches_accept_any_but_not_accept_members(
        server, connect_client: Connect, open_raw: OpenRaw) -> None:
    anyone = await connect_client(server, "anyone")
    strict = await connect_client(server, "strict")
    await anyone.join("g", accept_from="any")
    await strict.join("g")  # accept_from="members" is the default
    for c in (anyone, strict):
        await events_until(c, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 2)
    outsider = await open_raw(server, "outsider")

    await outsider.send({"type": "publish", "req": "p1", "group": "g", "id": "o-1", "view": 0,
                         "payload": "from-outside"})
    reply = await outsider.expect(lambda f: f["type"] in ("published", "rejected"))
    assert reply["type"] == "published" and reply["id"] == "o-1", reply
    [m] = [e for e in await events_until(anyone, "g", is_msg("from-outside"))
           if isinstance(e, Message)]
    assert (m.sender, m.offset) == ("outsider", reply["offset"])

    # The outsider's message was handed to every recipient at once; a later member message
    # reaching `strict` shows that `strict` was not among them.
    await anyone.publish("g", "fence")
    evs = await events_until(strict, "g", is_msg("fence"))
    assert [e.payload for e in evs if isinstance(e, Message)] == ["fence"], evs
    await events_until(anyone, "g", is_msg("fence"))
    # A non-member is not a recipient of the group's messages either: had "fence" been sent
    # to it, it would be queued ahead of the reply to a later publish.
    await outsider.send({"type": "publish", "req": "p2", "group": "g", "id": "o-2", "view": 0,
                         "payload": "again"})
    await outsider.expect(lambda f: f["type"] == "published" and f["id"] == "o-2")
    assert [f for f in outsider.seen if f["type"] == "deliver"] == []
    await events_until(anyone, "g", is_msg("again"))
    for c in (anyone, strict):
        assert c.errors == [] and pending_events(c, "g") == []
