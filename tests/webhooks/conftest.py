"""Webhook tests: a real `notify serve` (tests/api's `Served`) posting to a real aiohttp
receiver in the test process that verifies every request with the `standardwebhooks` library.
The receiver can be down (its listener closed: connections refused) and up again on its port."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from standardwebhooks.webhooks import Webhook

from notify_chaos.natsrun import free_ports
from tests.api.conftest import Served, serve  # noqa: F401  (the fixture)

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/webhooks" in str(item.path).replace("\\", "/") and \
                "test_units" not in str(item.path):
            item.add_marker(pytest.mark.integration)


class Receiver:
    """An aiohttp endpoint: every request's signature is verified (a bad one is recorded in
    `bad` and answered 400); good ones are kept in `got` (id, type, data) in arrival order."""

    def __init__(self, secret: str = SECRET) -> None:
        self.port = free_ports(1)[0]
        self.verifier = Webhook(secret)
        self.got: list[tuple[str, str, dict[str, Any]]] = []
        self.bad: list[str] = []
        self.status = 200
        #: seconds each answer takes (a slow backend: deliveries are under way for a while)
        self.delay = 0.0
        self._runner: web.AppRunner | None = None
        self._arrived = asyncio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            payload = self.verifier.verify(body, dict(request.headers))
        except Exception as e:  # WebhookVerificationError, or bad JSON
            self.bad.append(repr(e))
            return web.Response(status=400)
        if self.delay:
            await asyncio.sleep(self.delay)
        self.got.append((request.headers["webhook-id"], payload["type"], payload["data"]))
        self._arrived.set()
        return web.Response(status=self.status)

    async def up(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self._handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def down(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def unique(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """By webhook-id (a duplicate must be the same event)."""
        out: dict[str, tuple[str, dict[str, Any]]] = {}
        for i, kind, data in self.got:
            assert out.setdefault(i, (kind, data)) == (kind, data), i
        return out

    async def until(self, pred: Callable[[], bool], timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; got {[(k, d) for _, k, d in self.got]}")
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), 0.2)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.up()
    yield r
    await r.down()


def write_config(path: Path, url: str, **extra: Any) -> Path:
    lines = ["[[webhooks]]", f'url = "{url}"', f'secret = "{SECRET}"',
             'events = ["member.arrived", "member.left", "user.arrived", "user.left", '
             '"group.occupied", "group.vacated", "message"]',
             'groups = ["chat:*"]', "backoff = 0.2", "backoff_max = 1.0", "timeout = 2.0"]
    lines += [f"{k} = {v!r}" for k, v in extra.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


__all__ = ["SECRET", "Receiver", "Served", "write_config"]
