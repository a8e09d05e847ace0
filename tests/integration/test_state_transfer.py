"""G9 state transfer over real sockets: a joiner's restored state plus the later messages equals
every other member's state; a donor cut mid-transfer is replaced; a bad transfer restores
nothing."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from typing import Any

from client_sdk import (
    StateReceived,
)
from tests.integration.conftest import (
    TIMEOUT,
    MakeServer,
    OpenRaw,
    Replica,
    apply_until,
    until_state,
)
from tests.integration.proxy import FaultyProxy


async def test_G9_joiner_restored_mid_stream_equals_every_member(
        make_server: MakeServer, sdk: Any) -> None:
    srv = await make_server()
    a, b, c = [await sdk(srv.url, m) for m in "abc"]
    ra, rb, rc = Replica(), Replica(), Replica()
    ga = await a.join("g", state=ra)
    gb = await b.join("g", state=rb)
    apps = [asyncio.get_running_loop().create_task(apply_until(g, r, "end"))
            for g, r in ((ga, ra), (gb, rb))]

    async def stream() -> None:
        for i in range(60):
            await (ga if i % 2 else gb).publish(f"m{i}", order="total" if i % 3 else "fifo")
            await asyncio.sleep(0)

    publishing = asyncio.get_running_loop().create_task(stream())
    await asyncio.sleep(0.01)
    gc = await c.join("g", want_state=True, state=rc)  # lands in the middle of the stream
    app_c = asyncio.get_running_loop().create_task(apply_until(gc, rc, "end"))
    await publishing
    await ga.publish("end", order="total")
    await asyncio.wait_for(asyncio.gather(*apps), TIMEOUT)
    events_c = await asyncio.wait_for(app_c, TIMEOUT)

    received = [e for e in events_c if isinstance(e, StateReceived)]
    assert len(received) == 1 and received[0].snapshot is not None and rc.restored == 1
    assert sorted(map(str, ra.items)) == sorted(map(str, rb.items))
    # the total-order part is identical everywhere, in the same order (G4)
    total = [p for p in ra.items if p == "end" or int(p[1:]) % 3]
    assert [p for p in rc.items if p == "end" or int(p[1:]) % 3] == total
    assert len(rc.items) == len(set(map(str, rc.items)))  # no duplicate, no gap:
    assert set(map(str, rc.items)) == set(map(str, ra.items))


async def test_G9_donor_cut_mid_transfer_is_replaced_and_the_joiner_is_right(
        make_server: MakeServer, sdk: Any) -> None:
    srv = await make_server(suspect_timeout=5.0)
    proxy = await FaultyProxy(srv.port).start()
    try:
        a = await sdk(proxy.url, "a")  # the senior member: the first donor, on a slow link
        b = await sdk(srv.url, "b")
        c = await sdk(srv.url, "c")
        ra, rb, rc = Replica(ballast=2_000_000), Replica(), Replica()
        ga = await a.join("g", state=ra)
        gb = await b.join("g", state=rb)
        await gb.publish("before")
        for g, r in ((ga, ra), (gb, rb)):
            await apply_until(g, r, "before")
        rb.ballast = ra.ballast  # same state everywhere before c comes
        app_a = asyncio.get_running_loop().create_task(apply_until(ga, ra, "never"))
        # b's application keeps reading (it serves the replacement snapshot) until "later"
        app_b = asyncio.get_running_loop().create_task(apply_until(gb, rb, "later"))
        proxy.delay = 0.05  # a's chunks trickle out
        gc = await c.join("g", want_state=True, state=rc)
        await asyncio.sleep(0.3)
        proxy.block()
        proxy.cut()  # the donor is gone mid-transfer
        await gb.publish("after")
        events_c = []
        while not any(isinstance(e, StateReceived) for e in events_c):
            events_c.append(await gc.next_event(TIMEOUT))
        await gb.publish("later")
        events_c += await apply_until(gc, rc, "later")
        await asyncio.wait_for(app_b, TIMEOUT)
        app_a.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await app_a
    finally:
        await proxy.close()
    received = [e for e in events_c if isinstance(e, StateReceived)]
    assert len(received) == 1 and received[0].snapshot is not None
    assert rc.restored == 1
    # "after" is in the replacement donor's snapshot or arrives after it: either way once
    assert rc.items == rb.items[:3] == ["before", "after", "later"]
    assert hashlib.sha256(rc.ballast).digest() == hashlib.sha256(ra.ballast).digest()


async def test_G9_corrupt_transfer_restores_nothing_and_bad_chunks_are_refused(
        make_server: MakeServer, sdk: Any, open_raw: OpenRaw) -> None:
    srv = await make_server()
    donor = await open_raw(srv, "d")
    await donor.join("g")
    donor.auto_flush = True
    c = await sdk(srv.url, "c")
    rc = Replica()
    joining = asyncio.get_running_loop().create_task(c.join("g", want_state=True, state=rc))
    request = await donor.expect("state_request")
    gc = await asyncio.wait_for(joining, TIMEOUT)

    await donor.send({"type": "state_chunk", "group": "g", "transfer": "nope", "index": 0,
                      "last": True, "data": ""})
    assert (await donor.expect("error"))["code"] == "unknown_transfer"
    await donor.send({"type": "state_chunk", "group": "g", "transfer": request["transfer"],
                      "index": 3, "last": False, "data": ""})
    assert (await donor.expect("error"))["code"] == "bad_chunk"
    import base64
    import zlib
    good = zlib.compress(b'{"items": ["forged"], "ballast": ""}')
    await donor.send({"type": "state_chunk", "group": "g", "transfer": request["transfer"],
                      "index": 0, "last": True, "data": base64.b64encode(good).decode(),
                      "sha256": "0" * 64, "streams": {}})
    e = await until_state(gc)
    assert e.snapshot is None and e.reason is not None and "sha256" in e.reason
    assert rc.restored == 0 and rc.items == []


async def test_G9_no_member_to_give_state(make_server: MakeServer, sdk: Any) -> None:
    srv = await make_server()
    c = await sdk(srv.url, "c")
    rc = Replica()
    gc = await c.join("g", want_state=True, state=rc)
    e = await until_state(gc)
    assert e.snapshot is None and e.reason == "state_unavailable" and rc.restored == 0


async def test_G8_G9_unusable_resume_point_falls_back_to_state_transfer(
        make_server: MakeServer, sdk: Any) -> None:
    srv = await make_server()
    a = await sdk(srv.url, "a")
    ra = Replica()
    ga = await a.join("g", state=ra)
    for i in range(3):
        await ga.publish(f"m{i}")
    app_a = asyncio.get_running_loop().create_task(apply_until(ga, ra, "never"))
    c = await sdk(srv.url, "c")
    rc = Replica()
    stale = {"epoch": 12345, "offset": 2, "view": 1, "streams": {"fifo:a": 2}}  # another epoch
    gc = await c.join("g", resume_from=stale, state=rc)
    e = await until_state(gc)
    app_a.cancel()
    assert e.snapshot is not None and rc.items == ["m0", "m1", "m2"]


async def test_G9_snapshot_over_the_limit_is_refused_and_nothing_restored(
        make_server: MakeServer, sdk: Any) -> None:
    from notify.core.config import Limits

    srv = await make_server(limits=Limits(max_state_bytes=100_000))
    a = await sdk(srv.url, "a")
    ra = Replica(ballast=300_000)  # ~ 400 KB of base64 on the wire
    ga = await a.join("g", state=ra)
    app_a = asyncio.get_running_loop().create_task(apply_until(ga, ra, "never"))
    c = await sdk(srv.url, "c")
    rc = Replica()
    gc = await c.join("g", want_state=True, state=rc)
    e = await until_state(gc)
    app_a.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await app_a
    assert e.snapshot is None and e.reason == "state_too_large" and rc.restored == 0


async def test_G8_resume_point_in_the_future_is_refused_then_joined_afresh(
        make_server: MakeServer, sdk: Any) -> None:
    """`bad_resume` (an offset past the log head): the SDK does not trust it and joins afresh."""
    srv = await make_server()
    a = await sdk(srv.url, "a")
    ga = await a.join("g")
    await ga.publish("only")
    epoch = a.protocol.groups["g"].epoch
    c = await sdk(srv.url, "c")
    gc = await c.join("g", resume_from={"epoch": epoch, "offset": 999, "view": 1, "streams": {}})
    assert gc.view is not None and c.member in gc.view.members
    assert c.protocol.groups["g"].base == 1  # its knowledge starts at the real head
