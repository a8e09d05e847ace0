"""The server's heartbeats (`Heartbeats`): one schedule for every connection, driven by the
timer, pinging and failing as websockets' per-connection `keepalive()` did (issue 34)."""

from __future__ import annotations

import asyncio

from websockets.protocol import CLOSING, OPEN, State

from notify.server.heartbeat import Heartbeats


class _Protocol:
    def __init__(self) -> None:
        self.state: State = OPEN
        self.pings: list[bytes] = []
        self.failed: tuple[int, str] | None = None

    def send_ping(self, data: bytes) -> None:
        self.pings.append(data)

    def fail(self, code: int, reason: str) -> None:
        self.failed = (code, reason)
        self.state = CLOSING


class _Transport:
    def __init__(self) -> None:
        self.aborted = False

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True


class _Connection:
    """Enough of a `ServerConnection`: the pings it sent and whether a pong answered them."""

    def __init__(self) -> None:
        self.protocol = _Protocol()
        self.transport = _Transport()
        self.pending_pings: dict[bytes, tuple[asyncio.Future[float], float]] = {}
        self.loop = asyncio.get_running_loop()
        self.close_timeout: float | None = 0.01
        self.writes = 0

    def send_data(self) -> None:
        self.writes += 1

    def pong(self) -> None:  # what websockets does when the pong arrives
        self.pending_pings.clear()


async def test_a_connection_is_pinged_each_interval_while_it_answers() -> None:
    beats = Heartbeats(interval=5.0, timeout=10.0)
    ws = _Connection()
    beats.add(ws, 0.0)  # type: ignore[arg-type]
    beats.tick(4.9)
    assert ws.protocol.pings == []
    beats.tick(5.0)
    assert len(ws.protocol.pings) == 1 and ws.writes == 1
    ws.pong()
    beats.tick(9.9)
    assert len(ws.protocol.pings) == 1
    beats.tick(10.0)
    assert len(ws.protocol.pings) == 2 and ws.protocol.failed is None and len(beats) == 1


async def test_a_ping_unanswered_for_the_timeout_fails_the_connection_with_1011() -> None:
    beats = Heartbeats(interval=5.0, timeout=10.0)
    ws = _Connection()
    beats.add(ws, 0.0)  # type: ignore[arg-type]
    beats.tick(5.0)  # pinged; no pong
    beats.tick(10.0)  # late, not yet past the timeout: no second ping
    assert len(ws.protocol.pings) == 1 and ws.protocol.failed is None
    beats.tick(14.9)
    assert ws.protocol.failed is None
    beats.tick(15.0)
    assert ws.protocol.failed == (1011, "keepalive ping timeout") and len(beats) == 0
    await asyncio.sleep(0.05)  # the peer did not close within close_timeout: dropped
    assert ws.transport.aborted


async def test_a_late_pong_within_the_timeout_keeps_the_connection() -> None:
    beats = Heartbeats(interval=5.0, timeout=10.0)
    ws = _Connection()
    beats.add(ws, 0.0)  # type: ignore[arg-type]
    beats.tick(5.0)
    beats.tick(10.0)
    ws.pong()  # 8 s after the ping
    beats.tick(15.0)  # answered: pinged again, not failed
    assert len(ws.protocol.pings) == 2 and ws.protocol.failed is None


async def test_a_connection_that_is_no_longer_open_is_forgotten() -> None:
    beats = Heartbeats(interval=5.0, timeout=10.0)
    ws = _Connection()
    beats.add(ws, 0.0)  # type: ignore[arg-type]
    ws.protocol.state = CLOSING
    beats.tick(5.0)
    assert ws.protocol.pings == [] and len(beats) == 0


async def test_a_ping_that_raises_drops_that_connection_only() -> None:
    # the timer sends the heartbeats: one connection's failure must not end it (G13)
    beats = Heartbeats(interval=5.0, timeout=10.0)
    broken, fine = _Connection(), _Connection()

    def raises() -> None:
        raise RuntimeError("the transport is closed")

    broken.send_data = raises  # type: ignore[method-assign]
    beats.add(broken, 0.0)  # type: ignore[arg-type]
    beats.add(fine, 0.0)  # type: ignore[arg-type]
    beats.tick(5.0)
    assert broken.transport.aborted and len(fine.protocol.pings) == 1 and len(beats) == 1


async def test_a_connection_whose_transport_is_closing_is_forgotten() -> None:
    beats = Heartbeats(interval=5.0, timeout=10.0)
    ws = _Connection()
    beats.add(ws, 0.0)  # type: ignore[arg-type]
    ws.transport.abort()  # (its connection_lost, which closes the protocol, comes later)
    beats.tick(5.0)
    assert ws.protocol.pings == [] and len(beats) == 0


async def test_an_answered_ping_is_followed_by_the_next_one_an_interval_later() -> None:
    # a timeout shorter than the interval (heartbeat_timeout under twice heartbeat_interval):
    # the pong is checked at the timeout, the next ping still waits for the interval, as
    # websockets' keepalive() (not every `timeout` seconds)
    beats = Heartbeats(interval=10.0, timeout=5.0)
    ws = _Connection()
    beats.add(ws, 0.0)  # type: ignore[arg-type]
    beats.tick(10.0)
    ws.pong()
    beats.tick(15.0)
    assert len(ws.protocol.pings) == 1
    beats.tick(19.9)
    assert len(ws.protocol.pings) == 1
    beats.tick(20.0)
    assert len(ws.protocol.pings) == 2 and ws.protocol.failed is None and len(beats) == 1


async def test_G14_a_closed_connection_leaves_the_heap_within_the_longer_of_its_periods() -> None:
    # closed connections are not removed when they close but at their next due time: that
    # bounds the heap by the open connections plus those closed in the last
    # max(interval, timeout) seconds, whatever the phase a connection closed in
    for interval, timeout in ((5.0, 10.0), (10.0, 5.0)):
        beats = Heartbeats(interval, timeout)
        conns = [_Connection() for _ in range(40)]
        for ws in conns:
            beats.add(ws, 0.0)  # type: ignore[arg-type]
        closed_at: dict[int, float] = {}
        for step in range(161):  # 0 to 40 s
            now = step * 0.25
            beats.tick(now)
            for k, ws in enumerate(conns):
                if k % 2 == 0 and ws.pending_pings and now % 1 == 0:
                    ws.pong()  # half answer (once a second), half never do
                if k not in closed_at and now == k * 0.5:  # each closes at its own phase
                    ws.protocol.state = CLOSING
                    closed_at[k] = now
            held = {id(entry[2]) for entry in beats._due}
            bound = max(interval, timeout)
            assert not [k for k, t in closed_at.items()
                        if now - t >= bound and id(conns[k]) in held], (interval, timeout, now)
        assert len(beats) == 0
