"""Arrivals, departures and occupancy from real SDK clients, by instance and by user, through a
real `notify serve`, every request's Standard Webhooks signature verified by the receiver."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from client_sdk import connect
from tests.webhooks.conftest import Receiver, write_config

pytestmark = pytest.mark.timeout(60)


def _kinds(r: Receiver, group: str) -> list[tuple[str, str | None]]:
    return [(kind, data.get("member") or data.get("user")) for _, kind, data in r.got
            if data["group"] == group]


async def test_arrivals_leaves_occupancy(serve, receiver: Receiver, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "hooks.toml", receiver.url)
    s = await serve("--config", str(cfg), "--suspect-timeout", "0.2", api=False)
    g = "room-1"
    async with connect(s.ws, member="alice", instance="tab1") as a1:
        ga1 = await a1.join(g)
        await receiver.until(lambda: ("user.arrived", "alice") in _kinds(receiver, g))
        async with connect(s.ws, member="alice", instance="tab2") as a2:
            ga2 = await a2.join(g)
            async with connect(s.ws, member="bob", instance="x") as b:
                gb = await b.join(g)
                await receiver.until(lambda: ("user.arrived", "bob") in _kinds(receiver, g))
                await gb.leave()
            await receiver.until(lambda: ("user.left", "bob") in _kinds(receiver, g))
            await ga2.leave()
        await receiver.until(lambda: ("member.left", "alice#tab2") in _kinds(receiver, g))
        await ga1.leave()
    await receiver.until(lambda: ("group.vacated", None) in _kinds(receiver, g))
    assert _kinds(receiver, g) == [
        ("group.occupied", None), ("member.arrived", "alice#tab1"), ("user.arrived", "alice"),
        ("member.arrived", "alice#tab2"),  # a second instance: no user.arrived
        ("member.arrived", "bob#x"), ("user.arrived", "bob"),
        ("member.left", "bob#x"), ("user.left", "bob"),
        ("member.left", "alice#tab2"),  # alice is still there (tab1): no user.left
        ("member.left", "alice#tab1"), ("user.left", "alice"), ("group.vacated", None)]
    assert not receiver.bad
    assert len(receiver.unique()) == len(receiver.got)  # nothing was sent twice
    views = [d["view"] for _, k, d in receiver.got if k.startswith("group.")]
    assert views[0] < views[1]
    await asyncio.sleep(0)


async def test_flag_and_metrics(serve, receiver: Receiver) -> None:
    """`--webhook URL=whsec_...`: membership events (no messages); `/metrics` counts them."""
    import aiohttp

    from tests.webhooks.conftest import SECRET

    s = await serve("--webhook", f"{receiver.url}={SECRET}", api=False)
    async with connect(s.ws, member="carol", instance="p") as c:
        g = await c.join("chat:9")
        await g.publish({"x": 1})
        await receiver.until(lambda: ("user.arrived", "carol") in _kinds(receiver, "chat:9"))
    await receiver.until(lambda: ("group.vacated", None) in _kinds(receiver, "chat:9"))
    assert "message" not in [k for k, _ in _kinds(receiver, "chat:9")]
    ep = receiver.url
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http:
        for _ in range(50):  # (the last answer may still be on its way back to the server)
            async with http.get(f"http://127.0.0.1:{s.port}/metrics") as r:
                text = await r.text()
            if f'notify_webhook_delivered_total{{endpoint="{ep}"}} 6.0' in text:
                break
            await asyncio.sleep(0.1)
    assert f'notify_webhook_delivered_total{{endpoint="{ep}"}} 6.0' in text, text
    assert f'notify_webhook_backlog{{endpoint="{ep}"}} 0.0' in text
    assert f'notify_webhook_dropped_total{{endpoint="{ep}",reason="backlog"}} 0.0' in text
