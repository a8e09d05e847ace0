"""The server takes each message as websockets parses it (notify/server/direct.py), and the
messages that path cannot take still arrive, in order: fragmented ones, and text that is not
plain ASCII (whose UTF-8 websockets checks). Bad UTF-8 in a text message still fails the
connection with 1007, as RFC 6455 asks; the same bytes in a binary message are a `bad_frame`."""

from __future__ import annotations

import asyncio

import orjson

from tests.integration.conftest import MakeServer, OpenRaw, Raw


def publish(n: int, payload: object) -> dict[str, object]:
    return {"type": "publish", "req": f"r{n}", "group": "g", "id": f"p{n}", "view": 1,
            "payload": payload}


async def delivered(raw: Raw, count: int) -> list[object]:
    """The payloads of the next `count` deliveries (the `published` answers skipped)."""
    return [(await raw.expect("deliver"))["payload"] for _ in range(count)]


async def test_fragmented_and_non_ascii_messages_arrive_in_order_between_direct_ones(
        make_server: MakeServer, open_raw: OpenRaw) -> None:
    server = await make_server()
    alice = await open_raw(server, "alice")
    assert (await alice.join("g"))["view"] == 1
    text = orjson.dumps(publish(2, "in two pieces")).decode()
    await alice.send(publish(1, "plain"))
    await alice.ws.send(iter([text[:20], text[20:]]))  # one message in two WebSocket frames
    await alice.send(publish(3, "héllo ✓"))  # not ASCII: through websockets' UTF-8 check
    await alice.send(publish(4, "plain again"))
    await alice.ws.send(orjson.dumps(publish(5, "binary")))  # a binary message
    assert await delivered(alice, 5) == ["plain", "in two pieces", "héllo ✓", "plain again",
                                         "binary"]
    assert server.stats.internal_errors == 0


async def test_bad_utf8_fails_a_text_message_but_not_a_binary_one(
        make_server: MakeServer, open_raw: OpenRaw) -> None:
    server = await make_server()
    alice = await open_raw(server, "alice")
    await alice.join("g")
    bad = orjson.dumps(publish(1, "x")).replace(b'"x"', b'"\xff"')
    await alice.ws.send(bad)  # binary: the frame is refused, the connection stays
    refused = await alice.expect("error")
    assert refused["code"] == "bad_frame"
    await alice.send(publish(2, "still here"))
    assert await delivered(alice, 1) == ["still here"]
    await alice.ws.send(bad, text=True)  # text: the connection is failed (RFC 6455 §8.1)
    assert await alice.close_code() == 1007
    assert server.stats.internal_errors == 0


async def test_a_connection_lost_while_its_reader_waits_is_closed_at_once(
        make_server: MakeServer, open_raw: OpenRaw) -> None:
    """An idle connection's reader waits on the direct callback alone; the loss of the
    connection must wake it (`direct(None)`), or the hub would hear of the loss only when the
    heartbeats fail it, 15 s later."""
    server = await make_server()
    alice = await open_raw(server, "alice")
    await alice.join("g")
    assert server.connection_count == 1
    alice.drop()  # no close handshake: the socket just goes
    async with asyncio.timeout(2.0):
        while server.connection_count:
            await asyncio.sleep(0.01)
    assert server.hub.live_sessions() == 0
