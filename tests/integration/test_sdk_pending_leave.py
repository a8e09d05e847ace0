"""C6 (cluster review 2026-11-26; issue 32): a leave the link loses is answered after the
reconnect, and the member leaves the view, against a real server through a `FaultyProxy`.

- `lost`: the leave frame is still in the proxy when the link is cut (it never reaches the
  server): the SDK sends it again after the group's resume.
- `held`: the server has the leave, but its install waits for a member that has not flushed
  yet when the link is cut (the answer would have been lost): the rejoin must not bring the
  member back, and the install that removes it answers the leave.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from client_sdk import Backoff, ClientOptions, ConnectionState, ViewInstalled
from tests.integration.conftest import TIMEOUT, MakeServer, OpenRaw, until
from tests.integration.test_sdk_robustness import States, nothing_waits

OPTS = ClientOptions(backoff=Backoff(base=0.02, cap=0.1), request_timeout=TIMEOUT)


@pytest.mark.parametrize("where", ["lost", "held"])
async def test_C6_a_leave_cut_off_by_the_link_is_answered_after_the_reconnect(
        make_server: MakeServer, proxy_to: Any, sdk: Any, open_raw: OpenRaw,
        where: str) -> None:
    srv = await make_server(suspect_timeout=5.0, flush_timeout=5.0)
    proxy = await proxy_to(srv)
    a = await sdk(srv.url, "a", OPTS)
    b = await sdk(proxy.url, "b", OPTS)
    ga = await a.join("g")
    gb = await b.join("g")
    me = b.member  # user#instance
    await until(ga, lambda e: isinstance(e, ViewInstalled) and me in e.members)
    mute = None
    change: dict[str, Any] = {}
    if where == "held":
        mute = await open_raw(srv, "mute")
        await mute.join("g")  # in the view; it flushes only when the test says
        joined = mute.member
        await until(ga, lambda e: isinstance(e, ViewInstalled) and joined in e.members)
        await until(gb, lambda e: isinstance(e, ViewInstalled) and joined in e.members)
    states = States(b)
    if where == "lost":
        proxy.stall()  # the leave frame goes no further than the proxy
    leaving = asyncio.create_task(gb.leave())
    if where == "held":
        assert mute is not None
        change = await mute.expect("view_change")  # the server has the leave; its install waits
    else:
        await asyncio.sleep(0.1)
    proxy.cut()
    await states.reach(ConnectionState.RECONNECTING, ConnectionState.CONNECTED)
    if mute is not None:
        # Let the leave sent again reach the server before the install it waits for (were the
        # install first, `not_member` would answer that leave: right too, but not this path).
        await asyncio.sleep(0.3)
        await mute.send({"type": "flush_ok", "group": "g", "view": change["proposed"]})
    await asyncio.wait_for(leaving, TIMEOUT)  # answered, not RequestTimeout
    await until(ga, lambda e: isinstance(e, ViewInstalled) and me not in e.members)
    await asyncio.sleep(0.5)  # nothing brings b back (a rejoin installed after the leave)
    assert me not in srv.hub.groups["g"].view.members
    assert nothing_waits(b)

