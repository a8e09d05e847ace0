"""G11 with catch-up from the log (issue 30): a member reading 100 MB of history, slowly, holds
up nobody. Its pages are read off the event loop, one at a time, at its own pace, while another
member of the same group keeps receiving live messages at full speed (and so does the reader,
behind its gap)."""

from __future__ import annotations

import asyncio
import time

from client_sdk import Message, ViewInstalled
from notify.core.config import Limits
from tests.integration.conftest import TIMEOUT, Connect, OpenRaw, events_until

BIG = "x" * 100_000  # 1,000 of them: 100 MB
LIVE = 100


async def test_G11_a_slow_catch_up_of_100_MB_holds_up_no_other_member(
        make_server, connect_client: Connect, open_raw: OpenRaw) -> None:
    server = await make_server(suspect_timeout=120.0, limits=Limits(max_outbound_bytes=64 << 20))
    a = await connect_client(server, "a")
    c = await connect_client(server, "c")
    await a.join("g")
    await c.join("g")
    b = await open_raw(server, "b")
    b.auto_flush = True
    install = await b.join("g")
    await events_until(c, "g", lambda e: isinstance(e, ViewInstalled) and e.view == 3)
    session = b.session
    b.drop()  # b is away (suspected for two minutes) while 100 MB are published
    for k in range(0, 1000, 100):
        await asyncio.wait_for(asyncio.gather(
            *(a.publish("g", {"i": i, "big": BIG}) for i in range(k, k + 100))), 4 * TIMEOUT)
    await events_until(c, "g", lambda e: isinstance(e, Message) and e.payload["i"] == 999,
                       4 * TIMEOUT)

    b2 = await open_raw(server, "b", resume_session=session)
    b2.auto_flush = True
    await b2.send({"type": "join", "req": "rj", "group": "g", "resume": {
        "epoch": install["epoch"], "offset": install["offset"], "view": install["view"]}})
    gap = await b2.expect("catchup_log", timeout=3 * TIMEOUT)
    await b2.expect("catchup_done", timeout=3 * TIMEOUT)
    read: list[int] = []
    pages = 0

    async def read_slowly() -> None:
        nonlocal pages
        after = gap["after"]
        while after < gap["before"] - 1:
            await b2.send({"type": "history", "req": f"h{pages}", "group": "g",
                           "after": after, "before": gap["before"]})
            page = await b2.expect("history_page", timeout=3 * TIMEOUT)
            read.extend(m["payload"]["i"] for m in page["messages"])
            after, pages = page["end"], pages + 1
            await asyncio.sleep(0.05)  # a slow reader: about 100 pages take 5 s or more

    reader = asyncio.get_running_loop().create_task(read_slowly())
    latencies: list[float] = []
    sent: dict[int, float] = {}

    async def publish_live() -> None:
        for i in range(LIVE):
            sent[i] = time.monotonic()
            await a.publish("g", {"live": i})
            await asyncio.sleep(0.02)

    publisher = asyncio.get_running_loop().create_task(publish_live())
    got = 0
    while got < LIVE:
        for e in await events_until(c, "g", lambda e: isinstance(e, Message), TIMEOUT):
            if isinstance(e, Message) and "live" in e.payload:
                latencies.append(time.monotonic() - sent[e.payload["live"]])
                got += 1
    await publisher
    assert not reader.done(), "the catch-up should still be going on"  # they overlapped
    # c kept receiving at full speed while b read its history
    assert max(latencies) < 0.5, sorted(latencies)[-5:]
    await asyncio.wait_for(reader, 6 * TIMEOUT)
    replayed = [f["payload"]["i"] for f in b2.seen
                if f["type"] == "deliver" and "i" in f["payload"]]
    assert read + replayed == list(range(1000))  # every big one once, in order
    assert pages >= 90  # about 1 MiB a page: it was read in pages, not in one go
    live = [f["payload"]["live"] for f in b2.seen
            if f["type"] == "deliver" and "live" in f["payload"]]
    assert live == list(range(LIVE))  # and b had the live ones too, behind its gap
