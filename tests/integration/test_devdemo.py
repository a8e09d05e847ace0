"""`./dev demo` (devtools/devdemo.py) as a developer runs it: both servers start on free ports, the
page learns the WebSocket URL from /config.json, only the page's origin may open a WebSocket,
and Ctrl-C stops everything with exit 0."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

TIMEOUT = 30


def get(url: str) -> tuple[int, str, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        with e:
            return e.code, e.headers.get("Content-Type", ""), e.read()


class Demo:
    def __init__(self, proc: asyncio.subprocess.Process, page: str, ws: str, out: list[str]):
        self.proc, self.page, self.ws, self.out = proc, page, ws, out


@contextlib.asynccontextmanager
async def demo(*args: str) -> AsyncIterator[Demo]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "devtools.devdemo", "--port", "0", "--http-port", "0",
        "--store", "memory", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    assert proc.stdout is not None
    out: list[str] = []
    try:
        async with asyncio.timeout(TIMEOUT):
            while not (m := re.search(r"open (http://\S+)/ +\(WebSocket (ws://\S+),",
                                      out[-1] if out else "")):
                line = await proc.stdout.readline()
                assert line, "devdemo exited before it was ready:\n" + "".join(out)
                out.append(line.decode())
        yield Demo(proc, m[1], m[2], out)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(TIMEOUT):
                    rest, _ = await proc.communicate()
                    out.append(rest.decode())
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_devdemo_serves_the_page_and_config_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<h1>notify board</h1>")
    async with demo("--static-dir", str(tmp_path), "--suspect-timeout", "7") as d:
        status, ctype, body = await asyncio.to_thread(get, d.page + "/config.json")
        assert (status, ctype) == (200, "application/json")
        assert orjson.loads(body) == {"url": d.ws}
        status, ctype, body = await asyncio.to_thread(get, d.page + "/")
        assert (status, body) == (200, b"<h1>notify board</h1>")
        assert ctype.startswith("text/html")
        status, _, _ = await asyncio.to_thread(get, d.page + "/missing.js")
        assert status == 404
        # the WebSocket server is notify serve's, ready, and lets the page's origin in...
        status, _, _ = await asyncio.to_thread(get, d.ws.replace("ws:", "http:") + "/readyz")
        assert status == 200
        async with connect(d.ws, origin=d.page) as ws:  # type: ignore[arg-type]
            await ws.send(orjson.dumps({"type": "ping", "req": 1}).decode())
            async with asyncio.timeout(10):
                assert orjson.loads(await ws.recv()) == {"type": "pong", "req": 1}
        # ...but not another one
        with pytest.raises(InvalidStatus):
            async with connect(d.ws, origin="http://evil.example"):  # type: ignore[arg-type]
                pass
        d.proc.send_signal(signal.SIGINT)
        async with asyncio.timeout(TIMEOUT):
            rest, _ = await d.proc.communicate()
        d.out.append(rest.decode())
        assert d.proc.returncode == 0, "".join(d.out)
    log = "".join(d.out)
    assert "'suspect_timeout': 7.0" in log and "stopped" in log


async def test_devdemo_without_a_build_says_how_to_make_one(tmp_path: Path) -> None:
    missing = tmp_path / "dist"
    async with demo("--static-dir", str(missing)) as d:
        status, _, body = await asyncio.to_thread(get, d.page + "/")
        assert status == 503 and b"npm run -w notify-board build" in body
        status, _, body = await asyncio.to_thread(get, d.page + "/config.json")
        assert status == 200 and orjson.loads(body) == {"url": d.ws}
    assert "the demo is not built" in "".join(d.out)
