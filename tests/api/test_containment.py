"""What goes wrong inside the server API stays an answer (G13 for the API): a bug in a handler
is a logged 500 and the next request is served; a log that cannot be read is a 503; the
WebSocket server goes on either way. In-process (a `NotifyServer` and its `ApiServer` on one
loop, real HTTP), so that the test can break one function."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from notify.api import app as api_app
from notify.api.app import ApiServer
from notify.api.keys import ApiKey, Keyring
from notify.core import CoreConfig
from notify.server.app import NotifyServer
from tests.integration.conftest import Raw

SECRET = "in-process-secret"


@pytest.fixture
async def served() -> AsyncIterator[tuple[NotifyServer, ApiServer]]:
    server = NotifyServer(CoreConfig(), port=0)
    await server.start()
    api = ApiServer(server, Keyring([ApiKey.of("k", secret=SECRET)]), port=0, rate=0)
    await api.start()
    try:
        yield server, api
    finally:
        await api.stop()
        await server.stop()


async def call(api: ApiServer, path: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.get(
            f"{api.url}/api/v1{path}", headers={"Authorization": f"Bearer {SECRET}"}) as r:
        return r.status, await r.json()


async def test_a_bug_in_a_handler_is_a_500_and_the_next_request_is_served(
        served: tuple[NotifyServer, ApiServer], monkeypatch: pytest.MonkeyPatch) -> None:
    server, api = served
    raw = await Raw.open(server.url, "alice")
    await raw.join("doc")

    def broken(members: tuple[str, ...]) -> dict[str, list[str]]:
        raise RuntimeError("a bug")

    monkeypatch.setattr(api_app, "_users", broken)
    assert await call(api, "/groups/doc") == (
        500, {"error": {"code": "internal", "message": "internal error"}})
    monkeypatch.undo()
    status, body = await call(api, "/groups/doc")
    assert status == 200 and body["members"] == ["alice"]
    await raw.send({"type": "ping", "req": 1})
    assert (await raw.expect("pong"))["req"] == 1  # the WebSocket side never noticed
    await raw.close()


async def test_a_log_that_cannot_be_read_is_a_503(
        served: tuple[NotifyServer, ApiServer], monkeypatch: pytest.MonkeyPatch) -> None:
    server, api = served

    def unreadable(*args: object) -> None:
        raise OSError("disk I/O error")

    monkeypatch.setattr(server.store, "read_page", unreadable)
    monkeypatch.setattr(server.store, "list_groups", unreadable)
    for path in ("/groups/doc/messages", "/groups/doc", "/groups"):
        status, body = await call(api, path)
        assert (status, body["error"]["code"]) == (503, "unavailable"), path


async def test_a_read_past_its_deadline_keeps_its_thread_slot_until_it_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`READERS` store reads at most run in threads: one answered 503 at its deadline still
    holds its slot while its thread runs, so a stuck log never takes the threads the
    server's own loads need; the slots come back when the reads end."""
    import asyncio
    import threading

    from notify.core import Timeouts

    server = NotifyServer(CoreConfig(Timeouts(write_timeout=0.3)), port=0)
    await server.start()
    api = ApiServer(server, Keyring([ApiKey.of("k", secret=SECRET)]), port=0, rate=0)
    await api.start()
    go, running = threading.Event(), []

    def stuck(*args: object) -> list[object]:
        running.append(1)
        go.wait(10)
        running.pop()
        return []

    monkeypatch.setattr(server.store, "list_groups", stuck)
    try:
        for _ in range(api_app.READERS + 2):
            assert (await call(api, "/groups"))[0] == 503
        assert len(running) == api_app.READERS  # the rest never got a thread
        go.set()
        for _ in range(100):
            if api._readers._value == api_app.READERS:
                break
            await asyncio.sleep(0.02)
        assert api._readers._value == api_app.READERS and not running
        assert (await call(api, "/groups"))[0] == 200
    finally:
        go.set()
        await api.stop()
        await server.stop()
