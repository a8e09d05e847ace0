"""Resource limits (docs/security.md, "resource exhaustion"): each has its own code, and the
members that stay within them keep being served."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from notify.core import Limits, Timeouts
from notify.core.errors import CloseCode
from tests.integration.conftest import TIMEOUT, Raw
from tests.security.conftest import MakeAuthServer, OpenAuthed, token

ALL = {"*": ["*"]}


async def test_publish_flood_is_throttled_while_others_keep_receiving_in_order(
        make_auth_server: MakeAuthServer, open_authed: OpenAuthed) -> None:
    srv = await make_auth_server(limits=Limits(publish_rate=20, publish_burst=10))
    alice = await open_authed(srv, token("alice", ALL))
    await alice.join("g")
    alice.auto_flush = True
    bob = await open_authed(srv, token("bob", ALL))
    await asyncio.gather(bob.join("g"), alice.expect("view_install"))
    flooder = await open_authed(srv, token("flooder", ALL))  # not a member: plain FIFO only

    # the flood: 300 publishes sent back to back, never waiting for an answer
    for i in range(300):
        await flooder.send({"type": "publish", "req": f"f{i}", "group": "g", "id": f"f{i}",
                            "view": 0, "payload": i})
    # meanwhile alice, within her own budget, publishes 8 messages: bob gets all, in order
    for i in range(8):
        await alice.send({"type": "publish", "req": f"a{i}", "group": "g", "id": f"a{i}",
                          "view": 2, "payload": f"a{i}"})
    got = [await bob.expect("deliver") for _ in range(8)]
    assert [f["payload"] for f in got] == [f"a{i}" for i in range(8)]
    assert [f["seq"] for f in got] == list(range(1, 9))

    answers = [await flooder.expect(lambda f: f["type"] in ("published", "rejected"))
               for _ in range(300)]
    published = [a for a in answers if a["type"] == "published"]
    rejected = [a for a in answers if a["type"] == "rejected"]
    assert {a["code"] for a in rejected} == {"rate_limited"}
    # at most the burst plus what refilled while the flood was read (well under 300)
    assert 10 <= len(published) < 100, len(published)
    assert srv.stats.rejected["rate_limited"] == len(rejected)
    assert bob.buffer == type(bob.buffer)()  # bob (members only) saw none of the flood


async def test_pending_atomic_per_sender_is_bounded(make_auth_server: MakeAuthServer,
                                                    open_authed: OpenAuthed) -> None:
    srv = await make_auth_server(limits=Limits(max_pending_atomic=2))
    alice = await open_authed(srv, token("alice", ALL))
    await alice.join("g")
    alice.auto_flush = True
    silent = await open_authed(srv, token("silent", ALL))  # a member that never ACKs
    await asyncio.gather(silent.join("g"), alice.expect("view_install"))
    codes = []
    for i in range(3):
        await alice.send({"type": "publish", "req": f"p{i}", "group": "g", "id": f"p{i}",
                          "view": 2, "atomic": True, "payload": i})
        f = await alice.expect(lambda f: f["type"] in ("published", "rejected"))
        codes.append(f.get("code", f["type"]))
    assert codes == ["published", "published", "too_many_pending"]
    # the limit is per sender: silent may still publish atomically
    await silent.send({"type": "publish", "req": "s", "group": "g", "id": "s", "view": 2,
                       "atomic": True, "payload": "s"})
    assert (await silent.expect(lambda f: f["type"] in ("published", "rejected")))["type"] == \
        "published"


async def test_connection_without_hello_is_closed_4006(make_auth_server: MakeAuthServer) -> None:
    srv = await make_auth_server(timeouts=Timeouts(hello_timeout=0.3))
    idle = await Raw.open(srv.url)
    assert await idle.close_code() == CloseCode.HELLO_TIMEOUT
    # a connection that said hello in time is not affected
    ok = await Raw.open(srv.url)
    await ok.send({"type": "hello", "protocol": 1, "token": token("a", ALL)})
    await ok.expect("welcome")
    await asyncio.sleep(0.5)
    assert ok.ws.close_code is None
    await ok.close()
    await idle.close()


def _handshake(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
              b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
              b"Sec-WebSocket-Version: 13\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(4096)
    assert head.startswith(b"HTTP/1.1 101"), head
    return s


async def test_oversized_frame_is_refused_from_its_header_alone(
        make_auth_server: MakeAuthServer) -> None:
    """A frame announcing 1 GiB is refused with 1009 as soon as its header is read: the server
    never waits for (or buffers) the payload, which is never sent."""
    srv = await make_auth_server(limits=Limits(max_frame_bytes=4096))

    def attempt() -> int:
        s = _handshake(srv.port)
        # FIN + text opcode; MASK bit + 127 → 64-bit length; masking key; no payload at all
        s.sendall(bytes([0x81, 0x80 | 127]) + struct.pack("!Q", 1 << 30) + b"\0\0\0\0")
        data = b""
        while len(data) < 4:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        s.close()
        assert data[0] & 0x0F == 0x8, data  # a close frame
        return int(struct.unpack("!H", data[2:4])[0])

    assert await asyncio.to_thread(attempt) == 1009


async def test_origin_allow_list(make_auth_server: MakeAuthServer) -> None:
    srv = await make_auth_server(origins=["https://app.example"])
    with pytest.raises(InvalidStatus) as e:
        await connect(srv.url, origin="https://evil.example")  # type: ignore[arg-type]
    assert e.value.response.status_code == 403
    for origin in ("https://app.example", None):  # allowed, and not a browser
        ws = await connect(srv.url, origin=origin)  # type: ignore[arg-type]
        await ws.close()


async def test_connections_per_address_are_limited(make_auth_server: MakeAuthServer) -> None:
    srv = await make_auth_server(max_connections_per_ip=2)
    a, b = await connect(srv.url), await connect(srv.url)
    with pytest.raises(InvalidStatus) as e:
        await connect(srv.url)
    assert e.value.response.status_code == 429
    await a.close()
    await asyncio.sleep(0.1)  # the server sees the close
    c = await connect(srv.url)
    for ws in (b, c):
        await ws.close()
    assert srv.stats.connections_refused == {"max_connections_per_ip": 1}
