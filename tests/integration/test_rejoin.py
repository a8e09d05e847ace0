"""G7 fast rejoin over real sockets: a member that drops and comes back within suspect_timeout
resumes with no view change; one that comes back after its removal was proposed but before the
install makes the server cancel it (view_resume). Either way it gets exactly what it missed."""

from __future__ import annotations

from client_sdk import CaughtUp, Message, ViewChanging, ViewInstalled, ViewResumed
from tests.integration.conftest import (
    Connect,
    OpenRaw,
    events_until,
    events_until_payloads,
    is_msg,
    pending_events,
)


def _msgs(evs: list[object]) -> list[Message]:
    return [e for e in evs if isinstance(e, Message)]


async def test_G7_fast_rejoin_within_suspect_timeout_no_view_change(
        make_server, connect_client: Connect) -> None:
    # A long suspect_timeout: the gap below is certainly shorter, however slow the machine.
    server = await make_server(suspect_timeout=30.0, flush_timeout=5.0)
    a = await connect_client(server, "a")
    b = await connect_client(server, "b")
    m = await connect_client(server, "m")
    for c in (a, b, m):
        await c.join("g")
    for c in (a, b, m):
        await events_until(c, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 3)
    for i in range(3):
        await a.publish("g", f"before-{i}")
    await events_until(m, "g", is_msg("before-2"))

    await m.drop()
    missed = []
    for i in range(10):  # two senders, interleaved, while m is away
        for c in (a, b):
            payload = f"{c.member}-gap-{i}"
            await c.publish("g", payload)
            missed.append(payload)
    await m.reconnect()

    evs = await events_until(m, "g", lambda e: isinstance(e, CaughtUp))
    assert isinstance(evs[0], ViewResumed) and evs[0].view == 3, evs
    assert not [e for e in evs if isinstance(e, ViewInstalled | ViewChanging)], evs
    got = _msgs(evs)
    assert len(got) == evs[-1].count == len(missed)
    for sender in ("a", "b"):  # exactly what it missed, once, each stream in order
        assert [x.payload for x in got if x.sender == sender] == \
            [p for p in missed if p.startswith(f"{sender}-")]
    assert m.protocol.groups["g"].duplicates == 0

    await a.publish("g", "after")
    evs = await events_until(m, "g", is_msg("after"))
    assert [e.payload for e in evs] == ["after"], evs
    for c in (a, b):
        evs = await events_until_payloads(c, "g", {*missed, "after"})
        evs += pending_events(c, "g")
        assert all(isinstance(e, Message) for e in evs), f"{c.member} saw a view event: {evs}"
    group = server.hub.groups["g"]
    assert group.view.version == 3 and group.membership.proposal is None
    for c in (a, b, m):
        assert c.errors == []


async def test_G7_rejoin_after_removal_proposed_cancels_it_with_view_resume(
        make_server, connect_client: Connect, open_raw: OpenRaw) -> None:
    # f never answers flush_ok, and flush_timeout is long: the removal of m stays proposed,
    # not installed, until m comes back.
    server = await make_server(suspect_timeout=0.3, flush_timeout=60.0)
    a = await connect_client(server, "a")
    m = await connect_client(server, "m")
    await a.join("g")
    await m.join("g")
    f = await open_raw(server, "f")
    await f.join("g")
    for c in (a, m):
        await events_until(c, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 3)
    await a.publish("g", "before")
    await events_until(m, "g", is_msg("before"))

    await m.drop()
    missed = [f"gap-{i}" for i in range(5)]
    for p in missed:  # sent while m is suspected (or, on a slow machine, after the cancel)
        await a.publish("g", p)
    change = await events_until(a, "g", lambda e: isinstance(e, ViewChanging))
    assert (change[-1].proposed, change[-1].leaving) == (4, ("m",)), change
    vc = await f.expect("view_change")
    assert (vc["proposed"], vc["leaving"]) == (4, ["m"])
    assert server.hub.groups["g"].membership.proposal is not None

    await m.reconnect()
    evs = await events_until_payloads(m, "g", set(missed))
    resumed = [e for e in evs if isinstance(e, ViewResumed)]
    assert resumed and resumed[0].view == 3, evs
    assert not [e for e in evs if isinstance(e, ViewInstalled | ViewChanging)], evs
    assert [x.payload for x in _msgs(evs)] == missed  # once, in order
    assert m.protocol.groups["g"].duplicates == 0

    # Everyone who was told of the change hears it was cancelled, and view 3 goes on.
    evs = await events_until(a, "g", lambda e: isinstance(e, ViewResumed))
    assert evs[-1].view == 3 and not [e for e in evs if isinstance(e, ViewInstalled)], evs
    vr = await f.expect("view_resume")
    assert vr["view"] == 3
    assert [x for x in f.seen if x["type"] == "view_install" and x["view"] > 3] == []
    group = server.hub.groups["g"]
    assert group.view.version == 3 and group.membership.proposal is None

    await a.publish("g", "after")
    for c in (a, m):
        evs = await events_until(c, "g", is_msg("after"))
        assert not [e for e in evs if isinstance(e, ViewInstalled | ViewChanging)], evs
    await f.expect(lambda x: x["type"] == "deliver" and x["payload"] == "after")
    assert [x for x in f.seen if x["type"] == "view_install" and x["view"] > 3] == []
    for c in (a, m):
        assert c.errors == []


async def test_G8_member_back_after_removal_rejoins_new_view_with_only_what_it_missed(
        make_server, connect_client: Connect) -> None:
    server = await make_server(suspect_timeout=0.3, flush_timeout=1.0)
    a = await connect_client(server, "a")
    m = await connect_client(server, "m")
    await a.join("g")
    await m.join("g")
    await events_until(a, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 2)
    for i in range(3):
        await a.publish("g", f"seen-{i}")
    await events_until(m, "g", is_msg("seen-2"))

    await m.drop()
    missed = [f"while-suspect-{i}" for i in range(3)]
    for p in missed:
        await a.publish("g", p)
    evs = await events_until(a, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 3)
    assert (evs[-1].members, evs[-1].left) == (("a",), ("m",))
    for i in range(3):
        p = f"after-removal-{i}"
        await a.publish("g", p)
        missed.append(p)

    await m.reconnect()
    evs = await events_until(m, "g", lambda e: isinstance(e, CaughtUp))
    installs = [e for e in evs if isinstance(e, ViewInstalled)]
    assert [(i.view, i.members) for i in installs] == [(4, ("a", "m"))], evs
    assert [x.payload for x in _msgs(evs)] == missed  # no full transfer, no gap, no duplicate
    assert evs[-1].count == len(missed)
    assert m.protocol.groups["g"].duplicates == 0

    await a.publish("g", "together")
    for c in (a, m):
        await events_until(c, "g", is_msg("together"))
        assert c.errors == []


async def test_G8_long_stable_view_catch_up_needs_only_the_missed_messages_retained(
        make_server, connect_client: Connect) -> None:
    """The resume point's offset is where the member's view began, long before retention's
    start; what must still be in the log is only what it lacks, per stream."""
    from notify.core.config import Limits

    server = await make_server(suspect_timeout=0.3, limits=Limits(retain_messages=6))
    a = await connect_client(server, "a")
    m = await connect_client(server, "m")
    await a.join("g")
    await m.join("g")
    await events_until(a, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 2)
    for i in range(10):  # retention keeps the last 6: offsets 1-4 are gone
        await a.publish("g", f"seen-{i}")
    await events_until(m, "g", is_msg("seen-9"))
    assert m.protocol.groups["g"].base == 0  # its view began before every message

    await m.drop()
    await events_until(a, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 3)
    missed = [f"missed-{i}" for i in range(3)]
    for p in missed:
        await a.publish("g", p)
    await m.reconnect()
    evs = await events_until(m, "g", lambda e: isinstance(e, CaughtUp))
    assert [x.payload for x in _msgs(evs)] == missed
    assert m.errors == []  # no offset_unavailable: no fallback to a full state transfer
