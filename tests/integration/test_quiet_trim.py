"""What a quiet group's cooled window freed goes back to the system soon (G14), not only after
the next retention pass, which may take minutes on a big log (notify/server/app.py `_run_timer`,
notify/server/heap.py)."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from websockets.asyncio.client import connect

from notify.core import CoreConfig, Timeouts
from notify.server import app
from notify.server.app import NotifyServer
from notify.storage.memory import MemoryLog
from tests.integration.conftest import TIMEOUT


async def test_G14_a_cooled_window_is_handed_back_without_waiting_for_retention(
        monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    monkeypatch.setattr(app, "release_free_memory", lambda: trims.append(1) or True)
    srv = NotifyServer(CoreConfig(Timeouts(quiet_group=0.3)), port=0, store=MemoryLog(1000))
    await srv.start()
    try:
        async with connect(srv.url) as ws:
            await ws.send(orjson.dumps({"type": "hello", "protocol": 1, "member": "ana"}))
            assert orjson.loads(await ws.recv())["type"] == "welcome"
            await ws.send(orjson.dumps({"type": "join", "req": "j", "group": "g"}))
            view = orjson.loads(await ws.recv())
            await ws.send(orjson.dumps({"type": "publish", "req": "p", "group": "g", "id": "m",
                                        "view": view["view"], "payload": "x" * 1000}))
            assert srv.hub.freed == 0
            deadline = asyncio.get_running_loop().time() + TIMEOUT
            while not trims and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.05)
            assert srv.hub.freed == 1 and trims  # cooled, and handed back
            assert not srv.hub.groups["g"].topic.warm
    finally:
        await srv.stop()
