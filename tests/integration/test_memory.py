"""G14 bounded resources over a real `notify serve` process: memory follows what is live, not
history. A collaborative app with a group per document creates groups all day; every group
nobody is in must leave memory, and come back from the log with its versions and offsets going
on when someone returns."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest
from websockets.asyncio.client import connect

from tests.integration.conftest import TIMEOUT
from tests.integration.test_durability import ServerProcess, _free_port

#: groups created, used and left in the memory test, after a warm-up of WARM_UP groups (the
#: allocator's arenas, SQLite's page cache and the JSON parser's string cache fill up during the
#: first few thousand, then stay: measured 64.5 -> 83.0 MiB over the first 5,000 groups, then
#: +0.1 MiB per 5,000 up to 30,000)
GROUPS = 20_000
WARM_UP = 5_000
#: groups in flight at once (one connection, requests pipelined)
WAVE = 250
#: what the server may keep after GROUPS more groups left, over its RSS after the warm-up
BOUND_MIB = 8


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class Pipe:
    """One raw connection that sends many requests and collects answers by `req`."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def until(self, n: int, kind: str) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        while len(got) < n:
            f = orjson.loads(await asyncio.wait_for(self.ws.recv(), TIMEOUT))
            for x in f["frames"] if f["type"] == "batch" else [f]:
                if x["type"] == "view_change":
                    await self.ws.send(orjson.dumps({"type": "flush_ok", "group": x["group"],
                                                     "view": x["proposed"]}).decode())
                elif x["type"] in ("error", "rejected"):
                    raise AssertionError(x)
                elif x["type"] == kind:
                    got.append(x)
        return got

    async def send_all(self, frames: list[dict[str, Any]]) -> None:
        for f in frames:
            await self.ws.send(orjson.dumps(f).decode())

    async def wave(self, names: list[str]) -> None:
        """Join, publish to and leave every group of `names`."""
        await self.send_all([{"type": "join", "req": f"j{g}", "group": g} for g in names])
        installs = await self.until(len(names), "view_install")
        views = {i["group"]: i["view"] for i in installs}
        await self.send_all([{"type": "publish", "req": f"p{g}", "group": g, "id": f"p{g}",
                              "view": views[g], "payload": {"doc": g}} for g in names])
        await self.until(len(names), "published")
        await self.send_all([{"type": "leave", "req": f"l{g}", "group": g} for g in names])
        await self.until(len(names), "view_install")


async def groups_in_memory(port: int) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    body = (await asyncio.wait_for(reader.read(), TIMEOUT)).decode()
    writer.close()
    line = next(x for x in body.splitlines() if x.startswith("notify_groups "))
    return int(float(line.split()[1]))


async def wait_for_groups(port: int, at_most: int, seconds: float) -> int:
    n = await groups_in_memory(port)
    deadline = asyncio.get_running_loop().time() + seconds
    while n > at_most and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.2)
        n = await groups_in_memory(port)
    return n


@pytest.mark.timeout(180)
async def test_G14_groups_nobody_is_in_leave_memory_and_come_back_with_their_versions(
        tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "data", _free_port(), "--idle-group", "0.5",
                         "--durability", "normal", "--max-groups-per-session", "100000")
    proc.start()
    assert proc.proc is not None
    pid = proc.proc.pid
    try:
        async with connect(proc.url, compression=None, max_size=None) as ws:
            pipe = Pipe(ws)
            await ws.send(orjson.dumps({"type": "hello", "protocol": 1,
                                        "member": "editor"}).decode())
            await pipe.until(1, "welcome")
            names = [f"doc-{i}" for i in range(WARM_UP + GROUPS)]
            for start in range(0, WARM_UP, WAVE):
                await pipe.wave(names[start:start + WAVE])
            assert await wait_for_groups(proc.port, 0, 10) == 0
            baseline = rss_mib(pid)
            for start in range(WARM_UP, WARM_UP + GROUPS, WAVE):
                await pipe.wave(names[start:start + WAVE])
            assert await wait_for_groups(proc.port, 0, 10) == 0
            after = rss_mib(pid)
            print(f"RSS after a warm-up of {WARM_UP} groups: {baseline:.1f} MiB; after {GROUPS} "
                  f"more: {after:.1f} MiB (+{after - baseline:.1f})")
            assert after - baseline < BOUND_MIB, (baseline, after)

            # A group that left memory comes back from the log: versions and offsets go on,
            # and the publish id it remembers is still answered, not delivered again.
            await pipe.send_all([{"type": "join", "req": "again", "group": "doc-7"}])
            (install,) = await pipe.until(1, "view_install")
            assert (install["view"], install["offset"]) == (3, 1)  # joined 1, left 2
            await pipe.send_all([{"type": "publish", "req": "r", "group": "doc-7",
                                  "id": "pdoc-7", "view": 3, "payload": "retry"}])
            (answer,) = await pipe.until(1, "published")
            assert answer["offset"] == 1
    finally:
        proc.stop()
