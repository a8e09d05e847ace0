"""The link proxy's faults, measured through it against an echo server on 127.0.0.1.

Time enters only as lower bounds (a delay cannot make a round trip faster than itself) and
generous upper bounds; loss is seeded and counted, not timed."""

from __future__ import annotations

import asyncio
import contextlib
import random
import statistics
import time
from collections.abc import AsyncIterator

import pytest

from notify.server.listener import stop_accepting
from notify_chaos.proxy import LinkProxy

pytestmark = pytest.mark.integration


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@pytest.fixture
async def proxy() -> AsyncIterator[LinkProxy]:
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    p = await LinkProxy(port, rng=random.Random(4)).start()
    try:
        yield p
    finally:
        await p.close()
        await stop_accepting(server)
        await server.wait_closed()


async def _rtts(p: LinkProxy, n: int, size: int = 64) -> list[float]:
    r, w = await asyncio.open_connection("127.0.0.1", p.port)
    out = []
    try:
        for i in range(n):
            msg = bytes([i % 256]) * size
            t = time.monotonic()
            w.write(msg)
            await w.drain()
            got = await asyncio.wait_for(r.readexactly(size), 10)
            out.append(time.monotonic() - t)
            assert got == msg  # intact and in order, whatever the fault
    finally:
        w.close()
    return out


async def test_no_fault_is_transparent(proxy: LinkProxy) -> None:
    rtts = await _rtts(proxy, 50)
    assert statistics.median(rtts) < 0.05
    assert proxy.counters.accepted == 1 and proxy.counters.lost == 0


async def test_delay_is_added_each_way_with_bounded_jitter(proxy: LinkProxy) -> None:
    proxy.delay(30, jitter_ms=10)
    rtts = await _rtts(proxy, 20)
    # each way 30 ± 10 ms (never overtaking): a round trip takes at least 2 × 20 ms
    assert min(rtts) >= 0.040
    assert statistics.median(rtts) >= 0.055
    assert statistics.median(rtts) < 0.5
    added = proxy.counters.delays
    assert len(added) == 40
    assert all(0.020 - 1e-3 <= d <= 0.040 + 0.05 for d in added)  # + ordering waits
    assert statistics.pstdev(added) > 0.001  # jitter is there
    proxy.delay(0)
    assert statistics.median(await _rtts(proxy, 10)) < 0.05


async def test_delay_one_direction(proxy: LinkProxy) -> None:
    """`up=False`: only the bytes back from upstream are held (and the other way round)."""
    for up, down in ((False, True), (True, False)):
        proxy.delay(40, up=up, down=down)
        rtts = await _rtts(proxy, 10)
        assert 0.040 <= statistics.median(rtts) < 0.075, (up, down, rtts)
    proxy.delay(40)
    assert statistics.median(await _rtts(proxy, 10)) >= 0.080


async def test_delay_pipelines_instead_of_serialising(proxy: LinkProxy) -> None:
    """100 chunks sent at once arrive about one delay later, not 100 delays later."""
    proxy.delay(50)
    r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
    t = time.monotonic()
    for i in range(100):
        w.write(bytes([i]) * 10)
        await w.drain()
        await asyncio.sleep(0.001)
    await asyncio.wait_for(r.readexactly(1000), 10)
    assert 0.1 <= time.monotonic() - t < 2.0  # 2 × 50 ms + sending, far below 100 × 50 ms
    w.close()


async def test_loss_hits_the_asked_proportion_of_chunks_and_delays_them(proxy: LinkProxy) -> None:
    proxy.loss(20, rto_ms=1)
    await _rtts(proxy, 600, size=16)  # 1,200 chunks (one each way per round trip)
    c = proxy.counters
    assert c.chunks == 1200
    assert 0.15 <= c.lost_chunks / c.chunks <= 0.25, (c.lost_chunks, c.chunks)
    assert c.lost >= c.lost_chunks
    assert all(d >= 0 for d in c.delays)
    # (a 1 ms timer measured by differences of the loop's float clock can come out a few
    # picoseconds short of 0.001)
    assert sum(1 for d in c.delays if d >= 0.001 - 1e-6) >= c.lost_chunks * 0.9
    proxy.loss(0)
    before = c.lost
    await _rtts(proxy, 50, size=16)
    assert c.lost == before


async def test_cut_resets_connections_and_refuses_new_ones_until_uncut(proxy: LinkProxy) -> None:
    r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
    w.write(b"hi")
    assert await asyncio.wait_for(r.readexactly(2), 5) == b"hi"
    proxy.cut()
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        await asyncio.wait_for(r.readexactly(1), 5)  # reset (or EOF): the link is gone
    w.close()
    r2, w2 = await asyncio.open_connection("127.0.0.1", proxy.port)  # the listener accepts...
    with pytest.raises((ConnectionError, asyncio.IncompleteReadError)):
        w2.write(b"x")
        await asyncio.wait_for(r2.readexactly(1), 5)  # ...and drops it at once
    w2.close()
    assert proxy.counters.refused >= 1
    proxy.uncut()
    assert len(await _rtts(proxy, 3)) == 3
    assert proxy.counters.cuts == 1


async def test_slow_limits_bandwidth(proxy: LinkProxy) -> None:
    proxy.slow(50_000)  # bytes per second, each direction
    r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
    t = time.monotonic()
    w.write(b"z" * 50_000)
    await w.drain()
    await asyncio.wait_for(r.readexactly(50_000), 20)
    assert time.monotonic() - t >= 0.8  # 50 kB at 50 kB/s
    w.close()


async def test_stall_holds_bytes_without_closing(proxy: LinkProxy) -> None:
    r, w = await asyncio.open_connection("127.0.0.1", proxy.port)
    proxy.stall()
    w.write(b"held")
    await w.drain()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(r.readexactly(4), 0.3)
    proxy.unstall()
    assert await asyncio.wait_for(r.readexactly(4), 5) == b"held"
    w.close()
