"""`notify pub` / `notify watch` as a user runs them, against a real server."""

from __future__ import annotations

import asyncio
import sys

from tests.integration.conftest import MakeServer


async def run(*args: str, timeout: float = 30) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "notify.cli", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_pub_and_watch(make_server: MakeServer) -> None:
    srv = await make_server()
    watcher = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "notify.cli", "watch", "doc", "--url", srv.url,
        "--member", "w", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        assert watcher.stdout is not None
        first = await asyncio.wait_for(watcher.stdout.readline(), 20)
        assert b"view 1: w arrived: w (+w#" in first
        code, out = await run("pub", "doc", '{"op": 1}', "--url", srv.url, "--member", "p",
                              "--atomic", "--order", "total")
        assert code == 0 and "published offset=1" in out and "committed=True" in out
        lines = []
        while not any("total#1 p: " in x for x in lines):
            lines.append((await asyncio.wait_for(watcher.stdout.readline(), 20)).decode())
        assert '1 total#1 p: {"op":1}' in lines[-1]
    finally:
        watcher.terminate()
        await watcher.wait()


async def test_unreachable_server_exits_2_with_a_clear_message() -> None:
    code, out = await run("pub", "doc", "x", "--url", "ws://127.0.0.1:9")
    assert code == 2 and "cannot connect to ws://127.0.0.1:9" in out
