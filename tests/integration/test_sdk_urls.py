"""The SDK takes a list of URLs (DESIGN §9: clients connect to any node of a cluster).

Real single-node `NotifyServer`s on free ports stand in for a cluster's nodes: a dead URL (a port
bound but not listening) is skipped on the first connect; a server that stops abruptly (`halt`:
every connection dropped without a goodbye, the listener closed) sends the client to the next
URL, past a dead one, and around the end of the list. The next server is another single-node
server that knows neither the session nor the group's log, so the client cannot resume there:
it rejoins as it does for any refused resume point (issue 16) — one `Reset`, then the new view
— and the group works. Bad inputs raise `ValueError` before anything is tried."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from client_sdk import (
    Backoff,
    Client,
    ClientOptions,
    ConnectError,
    ConnectionState,
    Message,
    Reset,
    ViewInstalled,
    connect,
)
from notify.core import CoreConfig, Timeouts
from notify.server.app import NotifyServer
from tests.integration.conftest import TIMEOUT, MakeServer, until
from tests.integration.test_sdk_reset import the_reset

FAST = ClientOptions(backoff=Backoff(base=0.02, cap=0.1), request_timeout=TIMEOUT,
                     connect_timeout=2.0)


@contextlib.contextmanager
def dead_port() -> Iterator[int]:
    """A port bound but not listening: connections to it are refused, and no one else gets it
    while the test runs."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


async def test_first_url_dead_connects_to_the_second(make_server: MakeServer, sdk: Any) -> None:
    srv = await make_server()
    with dead_port() as port:
        dead = f"ws://127.0.0.1:{port}"
        c = await sdk([dead, srv.url], "a", options=FAST)
        assert c.urls == (dead, srv.url)
        assert c.url == srv.url and c.state is ConnectionState.CONNECTED
        g = await c.join("g")
        await asyncio.wait_for(g.publish("hi"), TIMEOUT)
        await until(g, lambda e: isinstance(e, Message) and e.payload == "hi")


async def test_no_url_reachable_raises_connect_error_naming_each() -> None:
    with dead_port() as p1, dead_port() as p2:
        urls = [f"ws://127.0.0.1:{p1}", f"ws://127.0.0.1:{p2}"]
        with pytest.raises(ConnectError) as failed:
            await asyncio.wait_for(connect(urls, member="a", options=FAST), TIMEOUT)
    assert str(p1) in str(failed.value) and str(p2) in str(failed.value)


async def test_server_stopped_abruptly_client_reconnects_to_the_next_url_and_rejoins(
        make_server: MakeServer, sdk: Any) -> None:
    s1, s2 = await make_server(), await make_server()
    with dead_port() as port:
        dead = f"ws://127.0.0.1:{port}"
        c = await sdk([s1.url, dead, s2.url], "a", options=FAST)
        assert c.url == s1.url
        g = await c.join("g")
        await asyncio.wait_for(g.publish("before"), TIMEOUT)
        await until(g, lambda e: isinstance(e, Message) and e.payload == "before")
        old_epoch = c.protocol.groups["g"].epoch
        states: list[ConnectionState] = []
        c.on_state_change(lambda old, new: states.append(new))

        s1.halt("test: node 1 dies")  # connections dropped, listener closed
        # s2 knows neither the session nor the group's log: the resume point is refused
        evs = await until(g, lambda e: isinstance(e, Reset))
        evs += await until(g, lambda e: isinstance(e, ViewInstalled))
    reset = the_reset(evs)
    assert reset.reason == "offset_unavailable" and reset.old_epoch == old_epoch
    assert c.url == s2.url  # the next URL after s1, past the dead one
    assert states == [ConnectionState.RECONNECTING, ConnectionState.CONNECTED]
    assert g.view is not None and tuple(g.view.users) == ("a",)
    await asyncio.wait_for(g.publish("after"), TIMEOUT)
    got = await until(g, lambda e: isinstance(e, Message) and e.payload == "after")
    assert [e.payload for e in got if isinstance(e, Message)] == ["after"]


async def test_a_lost_connection_moves_to_the_next_url_even_if_the_node_is_up(
        make_server: MakeServer, proxy_to: Any, sdk: Any) -> None:
    """The reconnect does not try the node it lost first (it may be dead, or dying): here that
    node still accepts connections, and the client goes to the next one all the same."""
    s1, s2 = await make_server(), await make_server()
    p1 = await proxy_to(s1)
    c = await sdk([p1.url, s2.url], "a", options=FAST)
    g = await c.join("g")
    assert c.url == p1.url and p1.accepted == 1
    p1.cut()  # the link drops; s1 and the proxy are fine
    evs = await until(g, lambda e: isinstance(e, Reset))
    evs += await until(g, lambda e: isinstance(e, ViewInstalled))
    the_reset(evs)
    assert c.url == s2.url and p1.accepted == 1


async def test_reconnect_starts_after_the_lost_url_and_wraps_around(
        make_server: MakeServer, sdk: Any) -> None:
    """Connected to the last URL (the first was dead), lost: the next try is the first URL,
    where a server has started meanwhile."""
    s1 = await make_server()
    with dead_port() as port:
        later = f"ws://127.0.0.1:{port}"
        c = await sdk([later, s1.url], "a", options=FAST)
        assert c.url == s1.url
    # the port is free again: a server starts there
    s0 = NotifyServer(CoreConfig(Timeouts(suspect_timeout=0.4, flush_timeout=1.0)), port=port)
    await s0.start()
    try:
        g = await c.join("g")
        s1.halt("test: the last node dies")
        evs = await until(g, lambda e: isinstance(e, Reset))
        evs += await until(g, lambda e: isinstance(e, ViewInstalled))
        the_reset(evs)
        assert c.url == later and c.state is ConnectionState.CONNECTED
    finally:
        await asyncio.wait_for(c.close(), TIMEOUT)
        await asyncio.wait_for(s0.stop(), TIMEOUT)


@pytest.mark.parametrize("urls", [
    [],
    (),
    "http://127.0.0.1:8765",
    "127.0.0.1:8765",
    "ws://",
    ["ws://127.0.0.1:8765", "tcp://127.0.0.1:8766"],
    ["ws://127.0.0.1:8765", 8766],
    ["ws://127.0.0.1:notaport"],
])
async def test_bad_urls_raise_value_error_before_connecting(urls: Any) -> None:
    with pytest.raises(ValueError, match="URL"):
        connect(urls, member="a")
    with pytest.raises(ValueError, match="URL"):
        Client(urls, "a")


async def test_one_url_is_still_one_attempt() -> None:
    """A single URL behaves as it always did: one attempt, its own `ConnectError`."""
    with dead_port() as port:
        url = f"ws://127.0.0.1:{port}"
        with pytest.raises(ConnectError, match=f"cannot connect to {url}"):
            await asyncio.wait_for(connect(url, member="a", options=FAST), TIMEOUT)
        c = Client(url, "a")
        assert c.urls == (url,) and c.url == url
