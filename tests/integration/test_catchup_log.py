"""Issue 30: a member that comes back from a point older than the server's in-memory window, but
within the log's retention, gets every message it missed, once, in order, and no `Reset`: on
SQLite and on the memory log, for a brief drop (resume), after its group was evicted (rejoin),
after SIGKILL and a restart, and for a raw resume point without `view` after a restart. (The
installs a resume crosses come in their place too: tests/unit/test_catchup.py and the
simulator, which can make a member flush and drop before the install.)

Real `notify serve` processes with a window of 40 messages and 32 KiB, real SDK clients (a
`FaultyProxy` cuts one off), payloads of mixed sizes so that both the count and the byte bound
of the window are passed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import connect

from client_sdk import (
    CaughtUp,
    GroupEvent,
    Message,
    Reset,
    ViewInstalled,
    ViewResumed,
)
from tests.integration.conftest import TIMEOUT, until
from tests.integration.proxy import FaultyProxy
from tests.integration.test_durability import ServerProcess, _free_port
from tests.integration.test_sdk_reset import FAST

WINDOW = ("--window-messages", "40", "--window-bytes", "32768")
MISSED = 300


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    started: list[ServerProcess] = []

    def make(*extra: str) -> ServerProcess:
        sp = ServerProcess(tmp_path / "data", _free_port(), *WINDOW, *extra)
        started.append(sp)
        return sp

    yield make
    for sp in started:
        sp.stop()


def payload(i: int) -> dict[str, Any]:
    """Mixed sizes: every seventh is 2 KiB, so the window's byte bound bites too."""
    return {"i": i, "pad": "x" * (2048 if i % 7 == 0 else 16)}


def numbers(events: list[GroupEvent]) -> list[int]:
    return [e.payload["i"] for e in events if isinstance(e, Message)]


async def publish_missed(group: Any, start: int, n: int) -> None:
    for k in range(start, start + n, 50):
        await asyncio.wait_for(asyncio.gather(
            *(group.publish(payload(i)) for i in range(k, min(k + 50, start + n)))), TIMEOUT)


def pages_served(server: ServerProcess) -> float:
    """`notify_history_pages_total` from the server's /metrics."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("notify_history_pages_total"))


async def members(server: ServerProcess, proxy: FaultyProxy, sdk: Any) -> tuple[Any, Any]:
    """a on the server, b behind `proxy`, both in group `g`: their group handles."""
    a, b = await sdk(server.url, "a", options=FAST), await sdk(proxy.url, "b", options=FAST)
    ga, gb = await a.join("g"), await b.join("g")
    await until(ga, lambda e: isinstance(e, ViewInstalled) and len(e.members) == 2)
    return ga, gb


@pytest.mark.parametrize("store", ["sqlite", "memory"])
async def test_a_brief_drop_past_the_window_is_caught_up_from_the_log(
        processes: Callable[..., ServerProcess], sdk: Any, store: str) -> None:
    server = processes("--store", store, "--suspect-timeout", "30")
    server.start()
    proxy = await FaultyProxy(server.port).start()
    try:
        ga, gb = await members(server, proxy, sdk)
        await ga.publish(payload(-1))
        await until(gb, lambda e: isinstance(e, Message) and e.payload["i"] == -1)

        proxy.block()
        proxy.cut()
        await publish_missed(ga, 0, MISSED)
        proxy.unblock()

        evs = await until(gb, lambda e: isinstance(e, CaughtUp), timeout=3 * TIMEOUT)
        assert isinstance(evs[0], ViewResumed)  # a resume: no view change for b
        assert numbers(evs) == list(range(MISSED))  # every one, once, in order
        assert not any(isinstance(e, Reset | ViewInstalled) for e in evs)
        assert pages_served(server) >= 1  # the log served what memory did not hold
        await ga.publish(payload(MISSED))  # and b is live again
        evs = await until(gb, lambda e: isinstance(e, Message))
        assert numbers(evs) == [MISSED]
    finally:
        await proxy.close()


@pytest.mark.parametrize("store", ["sqlite", "memory"])
async def test_a_member_back_after_its_group_was_evicted_is_caught_up_from_the_log(
        processes: Callable[..., ServerProcess], sdk: Any, store: str) -> None:
    """b is removed (its suspect timeout passes), a leaves: the group leaves memory. b comes
    back with its resume point: the group is read back (the window only), b rejoins in a new
    view and gets everything after its point from the log."""
    server = processes("--store", store, "--suspect-timeout", "0.5", "--idle-group", "0.5")
    server.start()
    proxy = await FaultyProxy(server.port).start()
    try:
        ga, gb = await members(server, proxy, sdk)
        proxy.block()
        proxy.cut()
        await until(ga, lambda e: isinstance(e, ViewInstalled) and len(e.members) == 1)
        await publish_missed(ga, 0, MISSED)
        await ga.leave()
        await asyncio.sleep(2.0)  # idle past idle_group: evicted (G14)
        proxy.unblock()
        evs = await until(gb, lambda e: isinstance(e, CaughtUp), timeout=3 * TIMEOUT)
        assert numbers(evs) == list(range(MISSED))
        assert not any(isinstance(e, Reset) for e in evs)
        assert pages_served(server) >= 1
    finally:
        await proxy.close()


async def test_after_sigkill_and_a_restart_a_member_is_caught_up_from_the_log(
        processes: Callable[..., ServerProcess], sdk: Any) -> None:
    server = processes("--store", "sqlite", "--suspect-timeout", "30")
    server.start()
    proxy = await FaultyProxy(server.port).start()
    try:
        ga, gb = await members(server, proxy, sdk)
        proxy.block()
        proxy.cut()
        await publish_missed(ga, 0, MISSED)
        server.kill()
        server.start()  # same port, same data directory
        proxy.unblock()
        evs = await until(gb, lambda e: isinstance(e, CaughtUp), timeout=3 * TIMEOUT)
        assert numbers(evs) == list(range(MISSED))
        assert not any(isinstance(e, Reset) for e in evs)
    finally:
        await proxy.close()


async def test_a_raw_resume_without_view_after_a_restart_is_served(
        processes: Callable[..., ServerProcess]) -> None:
    """The issue's own try: members in view 2, SIGKILL, restart, then a raw `join` with
    `resume: {epoch, offset}` (no `view`): served, views and messages from the log."""
    server = processes("--store", "sqlite", "--suspect-timeout", "30")
    server.start()

    async def member(name: str) -> Any:
        ws = await connect(server.url)
        await ws.send(orjson.dumps({"type": "hello", "protocol": 1, "member": name}))
        return ws

    async def frames(ws: Any, until: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
        """Every frame up to the end of the message holding the first that `until` likes
        (view changes answered on the way, as a member does)."""
        out: list[dict[str, Any]] = []
        while True:
            f = orjson.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))
            for x in f["frames"] if f["type"] == "batch" else [f]:
                out.append(x)
                if x["type"] == "view_change":
                    await ws.send(orjson.dumps({"type": "flush_ok", "group": "g",
                                                "view": x["proposed"]}))
            if any(until(x) for x in out):
                return out

    def kind(name: str) -> Callable[[dict[str, Any]], bool]:
        return lambda f: f["type"] == name

    a = await member("a")
    await a.send(orjson.dumps({"type": "join", "req": "j", "group": "g"}))
    install = [f for f in await frames(a, kind("view_install"))][-1]
    b = await member("b")
    await b.send(orjson.dumps({"type": "join", "req": "j", "group": "g"}))
    await frames(a, kind("view_install"))
    await frames(b, kind("view_install"))
    for i in range(100):
        await a.send(orjson.dumps({"type": "publish", "req": i, "group": "g", "id": f"p{i}",
                                   "view": 2, "payload": i}))
    await frames(a, lambda f: f["type"] == "published" and f["id"] == "p99")
    await a.close()
    await b.close()
    server.kill()
    server.start()

    b = await member("b")
    await b.send(orjson.dumps({"type": "join", "req": "r", "group": "g", "resume": {
        "epoch": install["epoch"], "offset": 0}}))
    seen = await frames(b, kind("catchup_done"))
    kinds = [f["type"] for f in seen if f["type"] != "welcome"]
    assert "error" not in kinds, seen
    assert kinds[:2] == ["view_resume", "catchup_log"], kinds  # a resume: b was in view 2
    gap = [f for f in seen if f["type"] == "catchup_log"]
    replayed = [f["payload"] for f in seen if f["type"] == "deliver"]
    assert len(replayed) == 40  # the window, restored from the log
    history: list[int] = []
    if gap:
        after = gap[0]["after"]
        while after < gap[0]["before"] - 1:
            await b.send(orjson.dumps({"type": "history", "req": f"h{after}", "group": "g",
                                       "after": after, "before": gap[0]["before"]}))
            (page,) = [f for f in await frames(b, kind("history_page"))
                       if f["type"] == "history_page"]
            history += [m["payload"] for m in page["messages"]]
            after = page["end"]
    assert history + replayed == list(range(100))
    await b.close()
