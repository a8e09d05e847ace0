"""Fixtures for the security tests: servers with token authentication, tokens, raw clients.

`make_auth_server(...)` starts a real server that verifies HS256 tokens signed with `SECRET`
(or whatever `verifier` is given) on a clock the test controls (`Clock`), so `exp` is tested
without sleeping. `Raw` is the integration suite's hand-driven protocol client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import jwt
import pytest

from notify.core import CoreConfig, Limits, Timeouts
from notify.server.app import NotifyServer
from notify.server.auth import TokenVerifier
from tests.integration.conftest import TIMEOUT, Raw

SECRET = "test-secret-0123456789-0123456789-abcdef"
OTHER_SECRET = "another-secret-0123456789-0123456789-xyz"


class Clock:
    """The server's clock: real time plus an offset the test moves forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += seconds


def token(sub: str, groups: dict[str, Any] | None = None, *, ttl: float = 3600,
          key: str = SECRET, alg: str = "HS256", now: float | None = None,
          headers: dict[str, Any] | None = None, **claims: Any) -> str:
    body: dict[str, Any] = {"sub": sub, "exp": int((now or time.time()) + ttl), **claims}
    if groups is not None:
        body["groups"] = groups
    return jwt.encode(body, key, algorithm=alg, headers=headers)


MakeAuthServer = Callable[..., Awaitable[NotifyServer]]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def make_auth_server(clock: Clock) -> AsyncIterator[MakeAuthServer]:
    servers: list[NotifyServer] = []

    async def make(*, verifier: TokenVerifier | None = None, limits: Limits | None = None,
                   auth: bool = True, **kw: Any) -> NotifyServer:
        timeouts = kw.pop("timeouts", Timeouts(suspect_timeout=0.4, flush_timeout=1.0))
        if verifier is None and auth:
            verifier = TokenVerifier(secret=SECRET)
        srv = NotifyServer(CoreConfig(timeouts, limits or Limits()), port=0, clock=clock,
                           verifier=verifier, **kw)
        await srv.start()
        servers.append(srv)
        return srv

    yield make
    for srv in reversed(servers):
        await asyncio.wait_for(srv.stop(), TIMEOUT)
        assert srv.stats.internal_errors == 0


OpenAuthed = Callable[..., Awaitable[Raw]]


@pytest.fixture
async def open_authed() -> AsyncIterator[OpenAuthed]:
    """`await open_authed(server, tok)` → a raw client that said hello with `tok` and got its
    welcome; `expect_welcome=False` leaves the answer to the test."""
    raws: list[Raw] = []

    async def make(srv: NotifyServer, tok: str | None, *, member: str | None = None,
                   expect_welcome: bool = True, **hello: Any) -> Raw:
        r = await Raw.open(srv.url, **hello.pop("connect", {}))
        raws.append(r)
        frame: dict[str, Any] = {"type": "hello", "protocol": 1, **hello}
        if tok is not None:
            frame["token"] = tok
        if member is not None:
            frame["member"] = member
        await r.send(frame)
        if expect_welcome:
            welcome = await r.expect("welcome")
            r.session, r.member = welcome["session"], welcome["member"]
        return r

    yield make
    for r in raws:
        try:
            await asyncio.wait_for(r.close(), TIMEOUT)
        except TimeoutError:
            r.drop()
