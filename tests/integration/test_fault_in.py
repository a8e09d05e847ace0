"""A group read back from the log (G14) while its connection keeps sending: the driver holds
the connection's frames until the read ends, and the server stops reading the connection
meanwhile, so what waits in memory stays bounded by one frame (the socket holds the rest)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import orjson
from websockets.asyncio.client import connect

from notify.core import CoreConfig, Timeouts
from notify.runtime.frames import unbatch
from notify.server.app import NotifyServer
from notify.storage.base import StoredGroup
from notify.storage.memory import MemoryLog
from tests.integration.conftest import TIMEOUT


class _SlowLog(MemoryLog):
    """`load_group` waits until the test lets it go (a log that is slow to read)."""

    def __init__(self) -> None:
        super().__init__(1000)
        self.go = threading.Event()
        self.asked = threading.Event()

    def load_group(self, group: str, recent: int) -> StoredGroup | None:
        self.asked.set()
        self.go.wait(TIMEOUT)
        return super().load_group(group, recent)


async def _hello_and_join(ws: Any) -> None:
    """ana says hello, then asks to join `g` (req `j`), which needs the group's load."""
    await ws.send(orjson.dumps({"type": "hello", "protocol": 1, "member": "ana"}))
    assert orjson.loads(await ws.recv())["type"] == "welcome"
    await ws.send(orjson.dumps({"type": "join", "req": "j", "group": "g"}))


async def test_G14_a_connection_is_not_read_while_its_frames_wait_for_a_load() -> None:
    store = _SlowLog()
    srv = NotifyServer(CoreConfig(Timeouts()), port=0, store=store)
    await srv.start()
    try:
        async with connect(srv.url) as ws:
            await _hello_and_join(ws)
            for i in range(200):  # while the group is read: these wait in the socket
                await ws.send(orjson.dumps({"type": "ping", "req": i}))
            await asyncio.wait_for(asyncio.to_thread(store.asked.wait, TIMEOUT), TIMEOUT)
            await asyncio.sleep(0.2)
            conn = next(iter(srv._outboxes))
            assert srv.driver.holds(conn)
            assert srv.stats.frames_in == 2  # the hello and the join: nothing read since
            store.go.set()
            got: list[dict[str, Any]] = []
            while len([f for f in got if f["type"] == "pong"]) < 200:
                got.extend(unbatch(orjson.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))))
            assert got[0]["type"] == "view_install"  # the join first, in order
            assert [f["req"] for f in got if f["type"] == "pong"] == list(range(200))
    finally:
        store.go.set()
        await srv.stop()


async def test_G13_a_load_that_never_ends_is_refused_at_its_deadline_and_reading_goes_on(
        ) -> None:
    store = _SlowLog()
    srv = NotifyServer(CoreConfig(Timeouts(write_timeout=0.5)), port=0, store=store)
    await srv.start()
    try:
        async with connect(srv.url) as ws:
            await _hello_and_join(ws)
            await ws.send(orjson.dumps({"type": "ping", "req": "p"}))
            got: list[dict[str, Any]] = []
            while not any(f["type"] == "pong" for f in got):
                got.extend(unbatch(orjson.loads(await asyncio.wait_for(ws.recv(), TIMEOUT))))
            assert [(f["type"], f.get("code"), f["req"]) for f in got] == [
                ("error", "unavailable", "j"), ("pong", None, "p")]
    finally:
        store.go.set()
        await srv.stop()


async def test_a_group_whose_shard_moved_while_it_was_read_is_not_adopted() -> None:
    """Cluster review S5: the shard is lost while a load is under way. The load must not bring
    the group back here (a zombie with timers that write: it removed members the new owner
    serves); the join that waited is refused `unavailable`, and asked again goes elsewhere."""
    from notify.runtime.placement import LocalPlacement

    class Moving(LocalPlacement):
        owned = True

        def owns(self, group: str) -> bool:
            return self.owned

    store, placement = _SlowLog(), Moving()
    srv = NotifyServer(CoreConfig(Timeouts()), port=0, store=store, placement=placement)
    await srv.start()
    try:
        async with connect(srv.url) as ws:
            await _hello_and_join(ws)
            await asyncio.wait_for(asyncio.to_thread(store.asked.wait, TIMEOUT), TIMEOUT)
            placement.owned = False  # the shard moved meanwhile
            store.go.set()
            got = unbatch(orjson.loads(await asyncio.wait_for(ws.recv(), TIMEOUT)))
            assert [(f["type"], f.get("code"), f["req"]) for f in got] == [
                ("error", "unavailable", "j")]
            assert "g" not in srv.hub.groups
    finally:
        store.go.set()
        await srv.stop()
