"""The server API's tests run real `notify serve` processes (free ports, a data directory of
their own) and speak real HTTP to them: `await serve("--api-key", "app=secret")` → a started
`Served`, stopped (SIGTERM, then SIGKILL past its bound) at teardown whatever the test did."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from notify_chaos.natsrun import free_ports
from tests.integration.conftest import TIMEOUT

SECRET = "app-secret-0123456789"
KEY = ("--api-key", f"app={SECRET}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/api" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.integration)


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


class Served:
    """One `notify serve` process: its WebSocket URL (`ws`) and its server API (`api`)."""

    def __init__(self, data_dir: Path, *args: str, api: bool = True) -> None:
        self.port, self.api_port = free_ports(2)  # (two calls may get one port twice)
        self.data_dir = data_dir
        data_dir.mkdir(parents=True, exist_ok=True)
        self.args = ["--port", str(self.port), "--data-dir", str(data_dir),
                     "--durability", "normal", "--log-level", "debug", *args]
        if api:
            self.args += ["--api-port", str(self.api_port)]
        self.log = data_dir / "serve.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("NOTIFY_")}
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "notify.cli", "serve", *self.args],
                stdout=out, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"notify serve exited {self.proc.returncode}: "
                                     f"{self.output()}")
            if _listening(self.port) and ("--api-port" not in self.args
                                          or _listening(self.api_port)):
                return
            time.sleep(0.05)
        self.stop()
        raise AssertionError(f"notify serve did not listen: {self.output()}")

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> int | None:
        """SIGTERM (a graceful stop), SIGKILL if it takes more than TIMEOUT; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(TIMEOUT)
        return self.proc.returncode


Serve = Callable[..., Awaitable[Served]]


@pytest.fixture
async def serve(tmp_path: Path) -> AsyncIterator[Serve]:
    started: list[Served] = []

    async def make(*args: str, api: bool = True, data_dir: Path | None = None) -> Served:
        s = Served(data_dir or tmp_path / f"data{len(started)}", *args, api=api)
        started.append(s)
        await asyncio.to_thread(s.start)
        return s

    yield make
    for s in started:
        await asyncio.to_thread(s.stop)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT)) as session:
        yield session


async def get(http: aiohttp.ClientSession, url: str, key: str | None = SECRET,
              **kw: Any) -> tuple[int, Any]:
    """(status, JSON body) of a GET, with `key` as the bearer secret (None: no header)."""
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    headers.update(kw.pop("headers", {}))
    async with http.get(url, headers=headers, **kw) as r:
        assert r.content_type == "application/json", (r.status, await r.text())
        return r.status, await r.json()


async def cli(*args: str) -> tuple[int, str]:
    """`notify ARGS...` as a user runs it: (exit code, stdout and stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "notify.cli", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), TIMEOUT * 3)
    assert proc.returncode is not None
    return proc.returncode, out.decode()
