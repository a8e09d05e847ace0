"""The SDK's callback style (`Group.on_event`): the same events, in the same order, as the
iterator; a handler that raises loses nothing after it; a handler-mode donor serves the state at
the right point (G9)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from client_sdk import Group, GroupEvent, Message, StateReceived, ViewInstalled
from tests.integration.conftest import TIMEOUT, MakeServer, Replica, apply_until


async def _two(make_server: MakeServer, sdk: Any) -> tuple[Group, Group]:
    """a and b in group g: a publishes, b's events are the ones looked at."""
    srv = await make_server()
    a, b = await sdk(srv.url, "a"), await sdk(srv.url, "b")
    ga = await a.join("g")
    return ga, await b.join("g")


async def test_a_handler_gets_every_message_in_order_and_the_views(
        make_server: MakeServer, sdk: Any) -> None:
    ga, gb = await _two(make_server, sdk)
    got: list[GroupEvent] = []
    done = asyncio.Event()

    def handle(e: GroupEvent) -> None:
        got.append(e)
        if isinstance(e, Message) and e.payload == 199:
            done.set()

    gb.on_event(handle)  # the view install with a in it was queued: it comes first
    await asyncio.gather(*(ga.publish(i) for i in range(200)))
    await asyncio.wait_for(done.wait(), TIMEOUT)
    assert isinstance(got[0], ViewInstalled)
    assert [e.payload for e in got if isinstance(e, Message)] == list(range(200))
    with pytest.raises(RuntimeError, match="on_event"):
        await gb.next_event(0.1)


async def test_a_handler_that_raises_misses_nothing_after(
        make_server: MakeServer, sdk: Any) -> None:
    ga, gb = await _two(make_server, sdk)
    seen: list[Any] = []

    def handle(e: GroupEvent) -> None:
        if isinstance(e, Message):
            seen.append(e.payload)
            if e.payload % 3 == 0:
                raise ValueError(f"the application choked on {e.payload}")

    gb.on_event(handle)
    for i in range(30):
        await ga.publish(i)
    async with asyncio.timeout(TIMEOUT):
        while len(seen) < 30:
            await asyncio.sleep(0.01)
    assert seen == list(range(30))
    gb.on_event(None)  # back to the iterator: later events queue again
    await ga.publish("after")
    e = await gb.next_event(TIMEOUT)
    assert isinstance(e, Message) and e.payload == "after"


async def test_a_handler_mode_donor_serves_the_state_at_its_point(
        make_server: MakeServer, sdk: Any) -> None:
    srv = await make_server()
    a, b, c = [await sdk(srv.url, m) for m in "abc"]
    ra, rb, rc = Replica(), Replica(), Replica()
    ga = await a.join("g", state=ra)
    ga.on_event(lambda e: ra.items.append(e.payload) if isinstance(e, Message) else None)
    gb = await b.join("g", state=rb)
    gb.on_event(lambda e: rb.items.append(e.payload) if isinstance(e, Message) else None)

    async def stream() -> None:
        for i in range(60):
            await (ga if i % 2 else gb).publish(f"m{i}", order="total")
            await asyncio.sleep(0)

    publishing = asyncio.get_running_loop().create_task(stream())
    await asyncio.sleep(0.01)
    gc = await c.join("g", want_state=True, state=rc)  # mid-stream: a or b is the donor
    app_c = asyncio.get_running_loop().create_task(apply_until(gc, rc, "end"))
    await publishing
    await ga.publish("end", order="total")
    events_c = await asyncio.wait_for(app_c, TIMEOUT)
    async with asyncio.timeout(TIMEOUT):
        while "end" not in ra.items:
            await asyncio.sleep(0.01)
    assert sum(isinstance(e, StateReceived) for e in events_c) == 1 and rc.restored == 1
    assert rc.items == ra.items  # the snapshot plus what came after: no gap, no duplicate
