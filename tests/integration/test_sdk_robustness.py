"""The SDK's own failure containment (review R5–R7, DESIGN G11/G13/G14, STYLE "no task dies
alone"), against a real server on 127.0.0.1: a payload JSON cannot carry is refused at the call;
a protocol violation reconnects and resumes exactly once; an application callback that raises is
isolated; an SDK bug closes the client loudly; every request has a deadline; a group whose events
are not taken stops the reader (bounded queue) and the server's slow-consumer cut plus resume
deliver every message once, in order."""

from __future__ import annotations

import asyncio
import logging
from decimal import Decimal
from typing import Any

import pytest
from websockets.frames import Frame as WsFrame
from websockets.frames import Opcode

from client_sdk import (
    Backoff,
    Client,
    ClientFailed,
    ClientOptions,
    Connection,
    ConnectionState,
    GroupEvent,
    Message,
    PayloadTooLarge,
    ProtocolViolation,
    RequestTimeout,
    ViewInstalled,
)
from client_sdk import connect as sdk_connect
from client_sdk.handshake import DirectConnection
from notify.core.config import Limits
from tests.integration.conftest import TIMEOUT, MakeServer, OpenRaw, until


def opts(**kw: Any) -> ClientOptions:
    return ClientOptions(backoff=Backoff(base=0.02, cap=0.1), **kw)


def payloads(events: list[GroupEvent]) -> list[Any]:
    return [e.payload for e in events if isinstance(e, Message)]


class MostQueued:
    """The most events `group`'s queue held at once, from now on (its `put_nowait` wrapped)."""

    def __init__(self, group: Any) -> None:
        self.most = 0
        queue = group._queue
        put = queue.put_nowait

        def counting_put(item: Any) -> None:
            put(item)
            self.most = max(self.most, queue.qsize())

        queue.put_nowait = counting_put


async def take_until(group: Any, last: int, timeout: float) -> list[int]:
    """Take `group`'s events until the message whose payload `i` is `last`; every `i` seen."""
    seen: list[int] = []

    def done(e: GroupEvent) -> bool:
        if isinstance(e, Message):
            seen.append(e.payload["i"])
        return bool(seen) and seen[-1] == last

    await until(group, done, timeout=timeout)
    return seen


class States:
    """A state listener that records every change and lets a test await one."""

    def __init__(self, client: Client) -> None:
        self.seen: list[ConnectionState] = []
        self._changed = asyncio.Event()
        client.on_state_change(self)

    def __call__(self, old: ConnectionState, new: ConnectionState) -> None:
        self.seen.append(new)
        self._changed.set()

    async def reach(self, *states: ConnectionState) -> None:
        """Wait until `states` have been seen, in this order."""
        async def run() -> None:
            while not _in_order(self.seen, states):
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(run(), TIMEOUT)


def nothing_waits(c: Client) -> bool:
    """No request waits, neither in the client (futures) nor in its protocol's table."""
    return not any(c.waiting().values()) and not any(c.protocol.requests.waiting().values())


def _in_order(seen: list[ConnectionState], wanted: tuple[ConnectionState, ...]) -> bool:
    it = iter(seen)
    return all(any(s is w for s in it) for w in wanted)


# -- A1: serialise at the call ---------------------------------------------------------------


async def test_unserialisable_payload_raises_at_the_call_and_nothing_is_queued(
        make_server: MakeServer, sdk: Any) -> None:
    srv = await make_server(limits=Limits(max_frame_bytes=64 << 10))
    a = await sdk(srv.url, "a")
    g = await a.join("g")
    for bad in (Decimal("1.5"), {1, 2}, 2**64, {"amount": 10**20}, {1: "non-str key"}):
        with pytest.raises(TypeError):
            await g.publish(bad)
        assert nothing_waits(a) and a.state is ConnectionState.CONNECTED
    with pytest.raises(PayloadTooLarge):  # would be a 1009 close, resent after every resume
        await g.publish("x" * (64 << 10))
    assert nothing_waits(a)
    r = await asyncio.wait_for(g.publish({"ok": 1}), TIMEOUT)
    evs = await until(g, lambda e: isinstance(e, Message))
    assert payloads(evs) == [{"ok": 1}] and evs[-1].offset == r.offset == 1  # type: ignore
    assert a.state is ConnectionState.CONNECTED


# -- A2: supervised tasks ----------------------------------------------------------------------


async def test_protocol_violation_reconnects_and_resumes_exactly_once(
        make_server: MakeServer, sdk: Any) -> None:
    srv = await make_server(suspect_timeout=5.0)
    a = await sdk(srv.url, "a")
    b = await sdk(srv.url, "b")
    ga, gb = await a.join("g"), await b.join("g")
    await until(gb, lambda e: isinstance(e, ViewInstalled) and e.view == 2)
    states = States(b)
    tripped: list[int] = []
    real = b.protocol._deliver

    def flaky(f: dict[str, Any], events: list[GroupEvent]) -> None:
        if f.get("payload") == "m2" and not tripped:  # as if the server had skipped a seq
            tripped.append(1)
            raise ProtocolViolation("injected by the test")
        real(f, events)

    b.protocol._deliver = flaky  # type: ignore[method-assign]
    for i in range(5):
        await ga.publish(f"m{i}")
    evs = await until(gb, lambda e: isinstance(e, Message) and e.payload == "m4")
    assert tripped and payloads(evs) == [f"m{i}" for i in range(5)]  # once, in order
    await states.reach(ConnectionState.RECONNECTING, ConnectionState.CONNECTED)
    assert not [e for e in evs if isinstance(e, ViewInstalled)]  # resumed within suspect


async def test_a_state_listener_that_raises_is_logged_and_isolated(
        make_server: MakeServer, proxy_to: Any, sdk: Any,
        caplog: pytest.LogCaptureFixture) -> None:
    srv = await make_server(suspect_timeout=5.0)
    proxy = await proxy_to(srv)
    a = await sdk(srv.url, "a")
    b = await sdk(proxy.url, "b")
    ga, gb = await a.join("g"), await b.join("g")

    def broken(old: ConnectionState, new: ConnectionState) -> None:
        raise RuntimeError("application bug")

    b.on_state_change(broken)
    states = States(b)  # registered after the broken one: still called
    with caplog.at_level(logging.ERROR, logger="client_sdk"):
        proxy.cut()
        await states.reach(ConnectionState.RECONNECTING, ConnectionState.CONNECTED)
    assert any("state listener" in r.message for r in caplog.records)
    await asyncio.wait_for(gb.publish("still working"), TIMEOUT)
    evs = await until(ga, lambda e: isinstance(e, Message))
    assert payloads(evs) == ["still working"]


async def test_a_cancel_that_lands_as_the_welcome_is_read_is_not_lost(
        make_server: MakeServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task awaiting `connect()` that is cancelled while it waits ends cancelled, even when
    the cancel lands in the loop turn the welcome arrives in; and the socket it opened is
    closed. Python 3.11's `wait_for` (which the handshake used) returned the welcome then and
    dropped the cancel: the caller went on as if never cancelled (a prober whose stop hung,
    CI 2026-11-28). The cancel is made as the welcome's frame is taken off the socket, before
    anything that waits for it has run."""
    srv = await make_server()
    process_event = DirectConnection.process_event
    task: asyncio.Task[Client] | None = None
    asked: list[bool] = []
    sockets: list[DirectConnection] = []

    def take_then_cancel(self: DirectConnection, event: Any) -> None:
        process_event(self, event)
        if not asked and isinstance(event, WsFrame) and event.opcode is Opcode.TEXT:
            assert task is not None
            sockets.append(self)
            asked.append(task.cancel())  # (the welcome: the server's first frame)

    monkeypatch.setattr(DirectConnection, "process_event", take_then_cancel)

    async def connecting() -> Client:
        return await sdk_connect(srv.url, member="a", options=opts())

    task = asyncio.get_running_loop().create_task(connecting())
    done, _ = await asyncio.wait((task,), timeout=TIMEOUT)
    assert task in done
    if not task.cancelled():
        await task.result().close()
    assert asked == [True], "the cancel came after connect() had ended: the test missed"
    assert task.cancelled(), "the cancel was lost: connect() returned a client"
    assert sockets[0].transport.is_closing()  # (aborted by the handshake: nobody holds it)


@pytest.mark.parametrize("task", ["reader", "writer"])
async def test_an_sdk_bug_closes_the_client_loudly(make_server: MakeServer, sdk: Any,
                                                   task: str) -> None:
    """A bug in a long-lived task is never a silent CONNECTED client: CLOSED, the listener
    sees it, the pending call and the iterator raise ClientFailed with the cause."""
    srv = await make_server()
    c = await sdk(srv.url, "c")
    g = await c.join("g")
    await until(g, lambda e: isinstance(e, ViewInstalled))
    states = States(c)

    def bug(*args: Any) -> Any:
        raise RuntimeError(f"bug in the {task}")

    if task == "reader":
        c.protocol.answers = bug  # type: ignore[method-assign]
    else:
        c.protocol.data_to_send = bug  # type: ignore[method-assign]
    with pytest.raises(ClientFailed) as failed:
        await asyncio.wait_for(g.publish("x"), TIMEOUT)
    assert isinstance(failed.value.__cause__, RuntimeError)
    await states.reach(ConnectionState.CLOSED)
    assert c.state is ConnectionState.CLOSED and c.failure is failed.value
    with pytest.raises(ClientFailed):
        await until(g, lambda e: False)
    with pytest.raises(ClientFailed):  # and again: the iterator does not hang after it
        await g.next_event(TIMEOUT)


# -- A3: deadlines ---------------------------------------------------------------------------


async def test_join_leave_publish_time_out_behind_a_stuck_flush(
        make_server: MakeServer, open_raw: OpenRaw, sdk: Any) -> None:
    """A member that never answers `view_change` holds the flush for `flush_timeout` (30 s
    here): every request waiting on it ends at `request_timeout` with RequestTimeout."""
    srv = await make_server(flush_timeout=30.0, suspect_timeout=30.0)
    a = await sdk(srv.url, "a", opts(request_timeout=0.3))
    ga = await a.join("g")
    mute = await open_raw(srv, "mute")
    await mute.join("g")  # a's SDK flushes; mute is in view 2 and will never flush
    await until(ga, lambda e: isinstance(e, ViewInstalled) and e.view == 2)
    c = await sdk(srv.url, "c", opts(request_timeout=0.3))
    with pytest.raises(RequestTimeout):
        await asyncio.wait_for(c.join("g"), TIMEOUT)
    # the handle is dropped; the join is abandoned (left if the server installs it after all)
    assert "g" not in c.protocol.requests.held and "g" in c.protocol.requests.abandoned
    assert nothing_waits(c) and c.state is ConnectionState.CONNECTED
    with pytest.raises(RequestTimeout):  # queued while the group flushes, still bounded
        await asyncio.wait_for(ga.publish("during the flush"), TIMEOUT)
    assert nothing_waits(a)
    with pytest.raises(RequestTimeout):
        await asyncio.wait_for(ga.leave(), TIMEOUT)
    assert nothing_waits(a) and a.state is ConnectionState.CONNECTED


class Blob:
    def snapshot(self) -> bytes:
        return b"state"

    def restore(self, data: bytes) -> None:
        pass


async def test_publish_checkpoint_refresh_time_out_on_a_stalled_link_and_are_not_resent(
        make_server: MakeServer, proxy_to: Any, sdk: Any) -> None:
    srv = await make_server(suspect_timeout=30.0)
    proxy = await proxy_to(srv)
    a = await sdk(srv.url, "a")
    b = await sdk(proxy.url, "b", opts(request_timeout=0.3))
    ga = await a.join("g")
    gb = await b.join("g", state=Blob())
    await until(ga, lambda e: isinstance(e, ViewInstalled) and e.view == 2)
    proxy.stall()  # no close, no RST: nothing comes back
    with pytest.raises(RequestTimeout):
        await asyncio.wait_for(gb.publish("lost in the stall"), TIMEOUT)
    with pytest.raises(RequestTimeout):
        await asyncio.wait_for(gb.checkpoint(), TIMEOUT)
    with pytest.raises(RequestTimeout):
        await asyncio.wait_for(b.refresh_token("t"), TIMEOUT)
    assert nothing_waits(b)
    proxy.unstall()
    await asyncio.wait_for(gb.publish("marker"), TIMEOUT)
    evs = await until(ga, lambda e: isinstance(e, Message) and e.payload == "marker")
    # the stalled frames did arrive once unstalled: the timed-out publish was sent once,
    # before the stall was noticed, and never again
    assert payloads(evs).count("lost in the stall") <= 1
    assert payloads(evs)[-1] == "marker"


# -- A4: bounded event queue, backpressure ---------------------------------------------------


async def test_the_direct_read_stops_at_the_frame_that_fills_a_group(
        make_server: MakeServer, sdk: Any) -> None:
    """The SDK's direct read (frames handed over in websockets' read callback) stops handing
    frames over at the frame that brings a group's queue to `max_queued_events`, even while
    another group of the same client is taken by a handler; the reader then waits for room,
    and once the application takes the events every message arrives once, in order. Without
    the check the queue would take all `n` (the server's bound is far above them here)."""
    bound, n = 20, 300
    srv = await make_server()
    b = await sdk(srv.url, "b", opts(max_queued_events=bound))
    assert isinstance(b._ws, DirectConnection)  # the path under test
    handled: list[Any] = []
    g1 = await b.join("g1")
    g1.on_event(lambda e: handled.append(e))
    g2 = await b.join("g2")
    queued = MostQueued(g2)
    pub = await asyncio.wait_for(Connection.connect(srv.url, "pub"), TIMEOUT)
    try:
        await asyncio.wait_for(pub.join("g1"), TIMEOUT)
        await asyncio.wait_for(pub.join("g2"), TIMEOUT)
        for i in range(n):
            await asyncio.wait_for(pub.publish("g1", {"i": i}), TIMEOUT)
            await asyncio.wait_for(pub.publish("g2", {"i": i}), TIMEOUT)
        async with asyncio.timeout(TIMEOUT):
            while b._paused_by != "g2":
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # frames keep arriving at the socket meanwhile
        most = queued.most
        assert bound <= g2._queue.qsize() <= most <= bound + 8, (g2._queue.qsize(), most)
        seen = await take_until(g2, n - 1, 30)
        assert seen == list(range(n))  # every message once, in order
        async with asyncio.timeout(TIMEOUT):
            while sum(isinstance(e, Message) for e in handled) < n:
                await asyncio.sleep(0.01)
        assert [e.payload["i"] for e in handled if isinstance(e, Message)] == list(range(n))
        assert b._paused_by is None and b.state is ConnectionState.CONNECTED
    finally:
        await asyncio.wait_for(pub.close(), TIMEOUT)


async def test_G11_G14_unconsumed_group_stops_the_reader_and_resumes_exactly_once(
        make_server: MakeServer, sdk: Any) -> None:
    """The application does not take its events: the SDK holds at most `max_queued_events`
    (plus what one server frame carried), stops reading, the server cuts it as a slow
    consumer (4001), and once the application reads again every message arrives once, in
    order (resume or rejoin from the exact point)."""
    bound, n = 50, 1500
    srv = await make_server(limits=Limits(max_outbound_frames=20), suspect_timeout=0.5)
    b = await sdk(srv.url, "b", opts(max_queued_events=bound))
    gb = await b.join("g")
    queued = MostQueued(gb)
    pub = await asyncio.wait_for(Connection.connect(srv.url, "pub"), TIMEOUT)
    try:
        await asyncio.wait_for(pub.join("g"), TIMEOUT)
        pad = "x" * 16_000  # the socket buffers fill long before n messages
        for i in range(n):
            await asyncio.wait_for(pub.publish("g", {"i": i, "pad": pad}, order="total"),
                                   TIMEOUT)
        assert srv.stats.slow_consumers >= 1  # the server's bound did its job
        assert queued.most <= bound + 64, queued.most  # bounded: not n
        seen = await take_until(gb, n - 1, 60)
        assert seen == list(range(n))  # every message once, in order
        assert b.state is ConnectionState.CONNECTED
    finally:
        await asyncio.wait_for(pub.close(), TIMEOUT)
