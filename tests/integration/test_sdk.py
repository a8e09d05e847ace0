"""The SDK against a real server through a fault-injecting proxy: reconnect with resume (G7),
rejoin with catch-up (G8), publishes made while cut delivered exactly once, and every
documented error."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any

import pytest

from client_sdk import (
    Backoff,
    CaughtUp,
    Client,
    ClientOptions,
    ConnectError,
    ConnectionState,
    Group,
    GroupEvent,
    GroupLeftError,
    Message,
    PublishQueueFull,
    RequestTimeout,
    ServerRefused,
    ViewChanging,
    ViewInstalled,
    connect,
)
from notify.core.config import Limits
from notify.server.app import NotifyServer
from tests.integration.conftest import FAST, TIMEOUT, MakeServer, until
from tests.integration.proxy import FaultyProxy


def payloads(events: list[GroupEvent]) -> list[Any]:
    return [e.payload for e in events if isinstance(e, Message)]


async def pair(srv: NotifyServer, proxy: FaultyProxy, sdk: Any,
               **b_options: Any) -> tuple[Client, Client, Group, Group]:
    """`a` connected directly, `b` through the proxy; both in group `g` at view 2, with their
    install events read."""
    a = await sdk(srv.url, "a")
    b = await sdk(proxy.url, "b", **b_options)
    ga = await a.join("g")
    gb = await b.join("g")
    await until(ga, lambda e: isinstance(e, ViewInstalled) and e.view == 2)
    await until(gb, lambda e: isinstance(e, ViewInstalled) and e.view == 2)
    return a, b, ga, gb


async def cut_for(proxy: FaultyProxy, seconds: float) -> None:
    proxy.block()
    proxy.cut()
    await asyncio.sleep(seconds)
    proxy.unblock()


async def test_G7_cut_shorter_than_suspect_timeout_resumes_without_view_change(
        make_server: MakeServer, proxy_to: Any, sdk: Any) -> None:
    srv = await make_server(suspect_timeout=5.0)
    proxy = await proxy_to(srv)
    _a, b, ga, gb = await pair(srv, proxy, sdk)
    states: list[ConnectionState] = []
    b.on_state_change(lambda old, new: states.append(new))
    await ga.publish("before")
    await until(gb, lambda e: isinstance(e, Message) and e.payload == "before")

    proxy.block()
    proxy.cut()
    for i in range(5):  # b misses these
        await ga.publish(f"missed-{i}")
    await asyncio.sleep(0.2)
    proxy.unblock()
    await ga.publish("after")
    evs = await until(gb, lambda e: isinstance(e, Message) and e.payload == "after")
    assert payloads(evs) == [f"missed-{i}" for i in range(5)] + ["after"]
    assert not [e for e in evs if isinstance(e, ViewChanging | ViewInstalled)], evs
    assert states == [ConnectionState.RECONNECTING, ConnectionState.CONNECTED]
    assert gb.view is not None and gb.view.version == 2
    assert ga.view is not None and ga.view.version == 2  # nobody saw a view change


async def test_G8_cut_past_the_install_rejoins_and_the_group_sees_two_view_changes(
        make_server: MakeServer, proxy_to: Any, sdk: Any) -> None:
    srv = await make_server(suspect_timeout=0.2, flush_timeout=1.0)
    proxy = await proxy_to(srv)
    a, b, ga, gb = await pair(srv, proxy, sdk)

    proxy.block()
    proxy.cut()
    evs = await until(ga, lambda e: isinstance(e, ViewInstalled) and e.view == 3)
    assert evs[-1].members == (a.member,)  # type: ignore[union-attr]
    for i in range(4):
        await ga.publish(f"while-removed-{i}")
    proxy.unblock()
    evs = await until(ga, lambda e: isinstance(e, ViewInstalled) and e.view == 4)
    assert evs[-1].members == (a.member, b.member)  # type: ignore[union-attr]
    got = await until(gb, lambda e: isinstance(e, CaughtUp))
    assert payloads(got) == [f"while-removed-{i}" for i in range(4)]  # once, in order
    assert [e.view for e in got if isinstance(e, ViewInstalled)] == [4]
    assert b.protocol.groups["g"].duplicates == 0


async def test_publishes_made_while_cut_are_delivered_exactly_once(
        make_server: MakeServer, proxy_to: Any, sdk: Any) -> None:
    srv = await make_server(suspect_timeout=5.0)
    proxy = await proxy_to(srv)
    _a, _b, ga, gb = await pair(srv, proxy, sdk)

    proxy.block()
    proxy.cut()
    sends = [asyncio.get_running_loop().create_task(gb.publish(f"b-{i}")) for i in range(10)]
    await asyncio.sleep(0.2)
    assert not any(t.done() for t in sends)  # waiting in the queue, not lost, not failed
    proxy.unblock()
    results = await asyncio.wait_for(asyncio.gather(*sends), TIMEOUT)
    assert len({r.offset for r in results}) == 10
    evs = await until(ga, lambda e: isinstance(e, Message) and e.payload == "b-9")
    assert payloads(evs) == [f"b-{i}" for i in range(10)]
    await ga.publish("marker")
    evs = await until(ga, lambda e: isinstance(e, Message) and e.payload == "marker")
    assert payloads(evs) == ["marker"]  # no second copy of anything


async def test_publish_cut_in_flight_is_not_delivered_twice(
        make_server: MakeServer, proxy_to: Any, sdk: Any) -> None:
    """Cut right after sending: the server may have stored the message and lost the reply;
    the retry after the resume carries the same id, so it is answered, not re-delivered."""
    srv = await make_server(suspect_timeout=5.0)
    proxy = await proxy_to(srv)
    _a, _b, ga, gb = await pair(srv, proxy, sdk)
    proxy.delay = 0.05  # replies come back late: the cut lands between request and reply
    tasks = [asyncio.get_running_loop().create_task(gb.publish(f"x-{i}")) for i in range(20)]
    await asyncio.sleep(0.02)
    await cut_for(proxy, 0.1)
    proxy.delay = 0.0
    results = await asyncio.wait_for(asyncio.gather(*tasks), TIMEOUT)
    evs = await until(ga, lambda e: isinstance(e, Message) and e.payload == "x-19")
    assert payloads(evs) == [f"x-{i}" for i in range(20)]
    assert sorted(r.offset for r in results) == [m.offset for m in evs if isinstance(m, Message)]


async def test_a_restarted_client_catches_up_from_its_saved_point(
        make_server: MakeServer, sdk: Any) -> None:
    srv = await make_server(suspect_timeout=0.2)
    a = await sdk(srv.url, "a")
    ga = await a.join("g")
    first = await sdk(srv.url, "b")
    gb = await first.join("g")
    await ga.publish("seen")
    await until(gb, lambda e: isinstance(e, Message) and e.payload == "seen")
    saved = gb.resume_point()
    await first.close()  # the process dies: no leave
    for i in range(3):
        await ga.publish(f"missed-{i}")
    second = await sdk(srv.url, "b")  # a new process of the same member
    gb2 = await second.join("g", resume_from=saved)
    evs = await until(gb2, lambda e: isinstance(e, CaughtUp))
    assert payloads(evs) == ["missed-0", "missed-1", "missed-2"]


async def test_errors_unreachable_bad_member_queue_full_group_left(
        make_server: MakeServer, proxy_to: Any, sdk: Any) -> None:
    with socket_closed_port() as port, pytest.raises(ConnectError):
        await connect(f"ws://127.0.0.1:{port}", member="x",
                      options=ClientOptions(connect_timeout=2))
    srv = await make_server(suspect_timeout=5.0)
    with pytest.raises(ServerRefused) as refused:
        await connect(srv.url, member="no spaces allowed")
    assert refused.value.code == "bad_frame"

    proxy = await proxy_to(srv)
    b = await sdk(proxy.url, "b", options=ClientOptions(max_pending_publishes=2,
                                                         backoff=Backoff(0.02, 0.1)))
    gb = await b.join("g")
    proxy.block()
    proxy.cut()
    waiting = [asyncio.get_running_loop().create_task(gb.publish(i)) for i in range(2)]
    await asyncio.sleep(0.05)
    with pytest.raises(PublishQueueFull):
        await gb.publish("one too many")
    proxy.unblock()
    assert [r.offset for r in await asyncio.wait_for(asyncio.gather(*waiting), TIMEOUT)] == [1, 2]

    await gb.leave()
    with pytest.raises(GroupLeftError):
        await gb.publish("after leave")
    with pytest.raises(ServerRefused) as twice:
        await b.join("g")
        await b.join("g")
    assert twice.value.code == "already_member"


async def test_a_full_group_refuses_a_join_and_its_members_carry_on(
        make_server: MakeServer, sdk: Any) -> None:
    srv = await make_server(limits=Limits(max_group_members=2))
    a, b, c = await sdk(srv.url, "a"), await sdk(srv.url, "b"), await sdk(srv.url, "c")
    ga, gb = await a.join("g"), await b.join("g")
    await until(ga, lambda e: isinstance(e, ViewInstalled) and len(e.members) == 2)
    with pytest.raises(ServerRefused) as refused:
        await c.join("g")
    assert refused.value.code == "group_full"
    await ga.publish("still here")
    assert payloads(await until(gb, lambda e: isinstance(e, Message))) == ["still here"]
    await gb.leave()
    gc = await c.join("g")  # b's place
    installed = await until(gc, lambda e: isinstance(e, ViewInstalled))
    assert installed[-1].members == (a.member, c.member)


@contextlib.contextmanager
def socket_closed_port() -> Any:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]  # bound, not listening: connections are refused


async def test_client_event_log_records_deliveries_views_and_reconnects(
        make_server: MakeServer, proxy_to: Any, sdk: Any, tmp_path: Any) -> None:
    import orjson

    from notify.eventlog import EventLog

    srv = await make_server(suspect_timeout=5.0)
    proxy = await proxy_to(srv)
    log = EventLog(tmp_path, "b")
    b = await sdk(proxy.url, "b", event_log=log)
    gb = await b.join("g")
    await gb.publish("hello")
    await until(gb, lambda e: isinstance(e, Message))
    await cut_for(proxy, 0.05)
    await gb.publish("again")  # waits for the reconnect
    log.close()
    lines = [orjson.loads(x) for x in log.path.read_text().splitlines()]
    kinds = [x["event"] for x in lines]
    assert kinds[:2] == ["client.view", "client.deliver"]
    assert "client.disconnect" in kinds and "client.reconnect" in kinds
    deliver = lines[1]
    assert deliver["offset"] == 1 and deliver["sender"] == b.member and deliver["node"] == "b"
    assert deliver["recv_ts"] >= deliver["sent_ts"] > 0
    reconnect = next(x for x in lines if x["event"] == "client.reconnect")
    assert reconnect["resumed"] is True and reconnect["gap_ms"] > 0


async def test_G7_stalled_link_is_noticed_by_heartbeats_and_resumed(
        make_server: MakeServer, proxy_to: Any, sdk: Any) -> None:
    """No close, no RST: bytes just stop. Both ends' heartbeats notice; the client reconnects
    (through the proxy, on a new link) and resumes within suspect_timeout: no view change."""
    srv = await make_server(suspect_timeout=5.0, heartbeat_interval=0.2, heartbeat_timeout=0.6)
    proxy = await proxy_to(srv)
    opts = ClientOptions(backoff=Backoff(0.02, 0.1), heartbeat_interval=0.2,
                         heartbeat_timeout=0.6)
    _a, b, ga, gb = await pair(srv, proxy, sdk, options=opts)
    states: list[ConnectionState] = []
    b.on_state_change(lambda old, new: states.append(new))
    proxy.stall()
    for i in range(3):
        await ga.publish(f"during-{i}")
    evs = await until(gb, lambda e: isinstance(e, Message) and e.payload == "during-2")
    assert payloads(evs) == ["during-0", "during-1", "during-2"]
    assert not [e for e in evs if isinstance(e, ViewChanging | ViewInstalled)]
    assert states[:2] == [ConnectionState.RECONNECTING, ConnectionState.CONNECTED]
    assert proxy.accepted == 2 and ga.view is not None and ga.view.version == 2


async def test_publish_nowait_pipelines_without_a_task_each_and_survives_a_cut(
        make_server: MakeServer, proxy_to: Any, sdk: Any) -> None:
    """Issue 14: `publish_nowait` returns a future at once; 300 in flight are all answered with
    distinct offsets, in order, each delivered once, though the link is cut in the middle."""
    srv = await make_server(suspect_timeout=5.0)
    proxy = await proxy_to(srv)
    _a, _b, ga, gb = await pair(srv, proxy, sdk)
    futures = [gb.publish_nowait(i, order="total") for i in range(150)]
    assert not all(f.done() for f in futures)  # returned before any answer
    await cut_for(proxy, 0.2)
    futures += [gb.publish_nowait(i, order="total") for i in range(150, 300)]
    results = await asyncio.wait_for(asyncio.gather(*futures), TIMEOUT)
    offsets = [r.offset for r in results]
    assert offsets == sorted(offsets) and len(set(offsets)) == 300
    evs = await until(ga, lambda e: isinstance(e, Message) and e.payload == 299)
    assert payloads(evs) == list(range(300))  # each once, in order


async def test_publish_nowait_checks_at_the_call(make_server: MakeServer, sdk: Any) -> None:
    srv = await make_server()
    a = await sdk(srv.url, "a", dataclasses.replace(FAST, max_pending_publishes=2))
    ga = await a.join("g")
    with pytest.raises(TypeError):
        ga.publish_nowait({1, 2})  # not JSON: refused before anything is queued
    with pytest.raises(ValueError):
        ga.publish_nowait(1, order="random")
    done = [ga.publish_nowait(1), ga.publish_nowait(2)]
    with pytest.raises(PublishQueueFull):
        ga.publish_nowait(3)
    assert [r.offset for r in await asyncio.gather(*done)] == [1, 2]


async def test_publish_nowait_times_out_and_is_not_sent_again(
        make_server: MakeServer, proxy_to: Any, sdk: Any) -> None:
    """A `publish_nowait` with no answer within `request_timeout` fails with RequestTimeout
    and leaves the pending table: it is not sent after the link comes back."""
    srv = await make_server(suspect_timeout=5.0)
    proxy = await proxy_to(srv)
    a = await sdk(srv.url, "a")
    b = await sdk(proxy.url, "b", dataclasses.replace(FAST, request_timeout=0.3))
    ga = await a.join("g")
    gb = await b.join("g")
    await until(ga, lambda e: isinstance(e, ViewInstalled) and e.view == 2)
    proxy.block()
    proxy.cut()
    f = gb.publish_nowait("lost")
    with pytest.raises(RequestTimeout):
        await asyncio.wait_for(f, TIMEOUT)
    assert b.waiting()["publish"] == 0 and not b.protocol.requests.publishes
    proxy.unblock()
    await gb.publish("after")
    evs = await until(ga, lambda e: isinstance(e, Message) and e.payload == "after")
    assert payloads(evs) == ["after"]  # the timed-out one never went out


async def test_publishes_leave_in_batches_within_the_servers_limits(
        make_server: MakeServer, sdk: Any) -> None:
    """Issue 34: what the writer has at hand leaves in `batch` messages (fewer messages than
    frames), each within the server's `max_frame_bytes` (a larger one would be closed 1009):
    with 1 KiB payloads and a 4 KiB limit, 200 publishes are all answered, in order, each
    delivered once, and the client never reconnected."""
    srv = await make_server(limits=Limits(max_frame_bytes=4096))
    a = await sdk(srv.url, "a")
    b = await sdk(srv.url, "b")
    ga, gb = await a.join("g"), await b.join("g")
    await until(ga, lambda e: isinstance(e, ViewInstalled) and e.view == 2)
    frames, batches = srv.stats.frames_in, srv.stats.batches_in
    results = await asyncio.wait_for(
        asyncio.gather(*(gb.publish_nowait({"n": i, "pad": "x" * 1024}) for i in range(200))),
        TIMEOUT)
    assert [r.offset for r in results] == sorted(r.offset for r in results)
    evs = await until(ga, lambda e: isinstance(e, Message) and e.payload["n"] == 199)
    assert [p["n"] for p in payloads(evs)] == list(range(200))
    assert srv.stats.frames_in - frames >= 200
    assert srv.stats.batches_in > batches  # some left together
    assert b.state is ConnectionState.CONNECTED and srv.stats.closes == {}


async def test_no_batch_to_a_server_that_does_not_say_it_takes_them(
        make_server: MakeServer, sdk: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("notify.core.hub.MAX_BATCH_FRAMES", 1)  # as a server that takes none
    srv = await make_server()
    a = await sdk(srv.url, "a")
    ga = await a.join("g")
    results = await asyncio.wait_for(
        asyncio.gather(*(ga.publish_nowait(i) for i in range(100))), TIMEOUT)
    assert len({r.offset for r in results}) == 100
    assert srv.stats.batches_in == 0
