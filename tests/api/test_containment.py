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
