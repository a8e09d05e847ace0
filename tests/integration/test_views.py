"""G1 (views) and G2 (virtual synchrony) over real sockets."""

from __future__ import annotations

import asyncio

from client_sdk import Connection, Message, Removed, ViewChanging, ViewInstalled
from tests.integration.conftest import (
    TIMEOUT,
    Connect,
    OpenRaw,
    events_until,
    events_until_payloads,
    is_msg,
    pending_events,
)


def _installs(events: list[object]) -> list[ViewInstalled]:
    return [e for e in events if isinstance(e, ViewInstalled)]


async def test_G1_concurrent_joins_and_leaves_give_consecutive_identical_views(
        server, connect_client: Connect) -> None:
    names = ["m1", "m2", "m3", "m4", "m5"]
    clients = {n: await connect_client(server, n) for n in names}

    # Everyone joins at once: the server may merge requests, but every member must see
    # versions going up by exactly one, and the same member list for the same version.
    await asyncio.wait_for(asyncio.gather(*(c.join("g") for c in clients.values())), TIMEOUT)
    final = max(c.protocol.groups["g"].view for c in clients.values())
    full = tuple(sorted(names))
    seen: dict[str, list[ViewInstalled]] = {}
    for n, c in clients.items():
        evs = await events_until(c, "g", lambda e: isinstance(e, ViewInstalled)
                                 and len(e.members) == len(names))
        seen[n] = _installs(evs)
    by_version: dict[int, tuple[str, ...]] = {}
    for n, installs in seen.items():
        versions = [i.view for i in installs]
        assert versions == list(range(versions[0], versions[0] + len(versions))), (n, versions)
        assert n in installs[0].members and n in installs[0].joined, (n, installs[0])
        for i in installs:
            assert len(set(i.members)) == len(i.members), i
            assert by_version.setdefault(i.view, i.members) == i.members, (n, i, by_version)
    assert tuple(sorted(by_version[final])) == full
    assert server.hub.groups["g"].view.version == final

    # Two leave at once: each leaver is told it is out; the others install views without them.
    leavers, stayers = names[:2], names[2:]
    await asyncio.wait_for(asyncio.gather(*(clients[n].leave("g") for n in leavers)), TIMEOUT)
    removed_at: dict[str, int] = {}
    for n in leavers:
        evs = await events_until(clients[n], "g", lambda e: isinstance(e, Removed))
        removed_at[n] = evs[-1].view
        assert not _installs(evs), f"{n} installed a view while leaving: {evs}"
    after: dict[str, list[ViewInstalled]] = {}
    for n in stayers:
        evs = await events_until(clients[n], "g", lambda e: isinstance(e, ViewInstalled)
                                 and not set(leavers) & set(e.members))
        after[n] = _installs(evs)
    ref = after[stayers[0]]
    versions = [i.view for i in ref]
    assert versions == list(range(final + 1, final + 1 + len(versions))), versions
    for n in stayers:
        assert [(i.view, i.members, i.left) for i in after[n]] == \
            [(i.view, i.members, i.left) for i in ref], n
    assert tuple(sorted(ref[-1].members)) == tuple(sorted(stayers))
    left_in = {m: i.view for i in ref for m in i.left}
    for n in leavers:
        # The leaver's last install is the one that removes it, at the same version.
        assert removed_at[n] == left_in[n], (n, removed_at, left_in)
    for c in clients.values():
        assert c.errors == [], c.member


async def test_G1_leave_gives_leaver_final_install_without_it(
        server, connect_client: Connect, open_raw: OpenRaw) -> None:
    a = await connect_client(server, "a")
    b = await connect_client(server, "b")
    await a.join("g")
    await b.join("g")
    r = await open_raw(server, "r")
    r.auto_flush = True
    joined = await r.join("g")
    assert joined["view"] == 3 and joined["members"] == ["a", "b", "r"]
    for c in (a, b):
        evs = await events_until(c, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 3)
        assert evs[-1].members == ("a", "b", "r")

    await r.send({"type": "leave", "req": "bye", "group": "g"})
    final = await r.expect("view_install")
    assert final["view"] == 4
    assert "r" not in final["members"] and final["left"] == ["r"]
    assert final["members"] == ["a", "b"]
    for c in (a, b):
        evs = await events_until(c, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 4)
        change = [e for e in evs if isinstance(e, ViewChanging)]
        assert change and change[-1].leaving == ("r",) and change[-1].proposed == 4
        assert (evs[-1].members, evs[-1].left) == (("a", "b"), ("r",))

    # The leaver no longer gets the group's messages; the others do.
    await a.publish("g", "after-leave")
    for c in (a, b):
        await events_until(c, "g", is_msg("after-leave"))
    await b.publish("g", "fence")
    await events_until(a, "g", is_msg("fence"))
    assert [f for f in r.seen if f["type"] == "deliver"] == []


async def test_G2_messages_before_join_install_reach_old_members_only(
        server, connect_client: Connect) -> None:
    a = await connect_client(server, "a")
    b = await connect_client(server, "b")
    await a.join("g")
    await b.join("g")
    c = await connect_client(server, "c")
    join_started = asyncio.Event()
    joined = asyncio.Event()
    last: dict[str, str] = {}

    async def publisher(client: Connection, after_join: int) -> None:
        i = 0
        post = 0
        # Keep publishing through the join and a little past its install (bounded either way).
        while post < after_join and i < 5000:
            payload = f"{client.member}-{i}"
            await client.publish("g", payload)
            last[client.member] = payload
            i += 1
            if i == 20:
                join_started.set()
            if joined.is_set():
                post += 1

    async def joiner() -> ViewInstalled:
        await join_started.wait()
        v = await c.join("g")
        joined.set()
        return v

    *_, install = await asyncio.wait_for(
        asyncio.gather(publisher(a, 20), publisher(b, 20), joiner()), 3 * TIMEOUT)
    assert install.view == 3

    streams: dict[str, tuple[list[int], list[int]]] = {}
    for client in (a, b):
        evs = await events_until_payloads(client, "g", set(last.values()))
        evs += pending_events(client, "g")
        pre: list[int] = []
        post: list[int] = []
        target = pre
        for e in evs:
            if isinstance(e, ViewInstalled) and e.view == 3:
                target = post
            elif isinstance(e, Message):
                target.append(e.offset)
        assert len(pre) + len(post) == len(set(pre) | set(post)), "duplicate delivery"
        streams[client.member] = (pre, post)
        assert [e for e in evs if isinstance(e, ViewInstalled) and e.view == 3], client.member

    pre_a, post_a = streams["a"]
    pre_b, post_b = streams["b"]
    # G2: a and b went from view 2 to view 3 having delivered the same set of view-2 messages.
    assert set(pre_a) == set(pre_b)
    assert set(post_a) == set(post_b)
    assert len(pre_a) >= 40  # 20 from each sender were published before the join began

    # The joiner gets only the new view's messages: all of them, none of the old ones.
    evs_c = await events_until_payloads(c, "g", set(last.values())) + pending_events(c, "g")
    got_c = [e.offset for e in evs_c if isinstance(e, Message)]
    assert not set(got_c) & set(pre_a), sorted(set(got_c) & set(pre_a))
    assert sorted(got_c) == sorted(post_a)
    assert len(post_a) >= 20
    for client in (a, b, c):
        assert client.errors == []
