"""Removal and disconnect through the server API (issue 31), against a real `notify serve` with
real SDK clients: `DELETE /groups/{group}/members/{member}` (one instance, or every instance of
a user; its SDK gets `Removed` with reason `removed` and does not join again) and `POST
/users/{user}/disconnect` (every connection closed 4007, the SDK does not reconnect with the
old token, tokens issued before the call refused from then on, also after a restart)."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import jwt
import pytest

from client_sdk import (
    ConnectionState,
    Disconnected,
    GroupLeftError,
    Removed,
    ServerAPI,
    ServerAPIError,
    ServerRefused,
    connect,
)
from client_sdk.group import Group
from tests.api.conftest import KEY, SECRET, Serve, cli
from tests.integration.conftest import TIMEOUT

V1 = "/api/v1"
#: the servers' token key (HS256)
TOKEN_KEY = "removal-test-secret-0123456789-0123456789"
AUTH = ("--auth-hs256-secret", TOKEN_KEY)


def token(sub: str, iat: float) -> str:
    return jwt.encode({"sub": sub, "iat": int(iat), "exp": int(time.time() + 3600)}, TOKEN_KEY,
                      algorithm="HS256")


async def call(http: aiohttp.ClientSession, method: str, url: str,
               key: str | None = SECRET) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    async with http.request(method, url, headers=headers) as r:
        assert r.content_type == "application/json", (r.status, await r.text())
        return r.status, await r.json()


def member_url(api: str, group: str, member: str) -> str:
    return f"{api}{V1}/groups/{quote(group, safe='')}/members/{quote(member, safe='')}"


async def removed_event(g: Group) -> Removed:
    """The group's events up to its `Removed` (bounded)."""
    async with asyncio.timeout(TIMEOUT):
        async for e in g:
            if isinstance(e, Removed):
                return e
    raise AssertionError("the group's events ended without Removed")


async def until(check: Any, what: str) -> None:
    async with asyncio.timeout(TIMEOUT):
        while not await check():
            await asyncio.sleep(0.02)


async def test_removal_is_seen_by_the_member_s_sdk_which_does_not_join_again(
        serve: Serve, http: aiohttp.ClientSession) -> None:
    s = await serve(*KEY, "--suspect-timeout", "0.5")
    async with connect(s.ws, member="alice") as alice, connect(s.ws, member="bob") as bob, \
            ServerAPI(s.api, SECRET) as api:
        doc = await alice.join("doc")
        other = await alice.join("other")
        await bob.join("doc")
        status, body = await call(http, "DELETE", member_url(s.api, "doc", alice.member))
        assert status == 200, body
        assert body["group"] == "doc" and body["removed"] == [alice.member]
        # answered once installed: the view already lacks alice
        view = await api.group("doc")
        assert view.version == body["version"] and view.members == (bob.member,)
        e = await removed_event(doc)
        assert e.reason == "removed" and e.view == body["version"]
        # still connected, still in its other group; doc's handle is done
        assert alice.state is ConnectionState.CONNECTED
        assert (await api.group("other")).members == (alice.member,)
        assert (await other.publish("still here")).offset == 1
        # no rejoin, not even across a reconnect (its groups are rejoined from resume points)
        assert alice._ws is not None
        await alice._ws.close(1001)  # the connection is lost; the client resumes its session
        await until(lambda: _connected_again(alice), "alice reconnected")
        await asyncio.sleep(1.0)  # (past the suspect timeout: a rejoin would have happened)
        assert (await api.group("doc")).members == (bob.member,)
        assert (await api.group("other")).members == (alice.member,)
        # a removed member's group handle says it is over
        with pytest.raises(GroupLeftError):
            await doc.publish("x")
    assert "api_internal_error" not in s.output() and "Traceback" not in s.output()


async def _connected_again(c: Any) -> bool:
    return c.state is ConnectionState.CONNECTED and c._ws is not None


async def test_removal_of_a_user_removes_all_its_instances_and_one_instance_only_itself(
        serve: Serve, http: aiohttp.ClientSession) -> None:
    s = await serve(*KEY)
    async with connect(s.ws, member="alice") as a1, connect(s.ws, member="alice") as a2, \
            connect(s.ws, member="alice") as a3, connect(s.ws, member="bob") as bob, \
            ServerAPI(s.api, SECRET) as api:
        groups = [await c.join("doc") for c in (a1, a2, a3)]
        await bob.join("doc")
        # one instance by its member id
        r = await api.remove("doc", a3.member)
        assert r.removed == (a3.member,)
        assert (await removed_event(groups[2])).reason == "removed"
        assert set((await api.group("doc")).members) == {a1.member, a2.member, bob.member}
        # the user: every instance left, in one view change
        r = await api.remove("doc", "alice")
        assert set(r.removed) == {a1.member, a2.member}
        for g in groups[:2]:
            e = await removed_event(g)
            assert (e.reason, e.view) == ("removed", r.version)
        assert (await api.group("doc")).members == (bob.member,)
        # nobody left to remove
        status, body = await call(http, "DELETE", member_url(s.api, "doc", "alice"))
        assert (status, body["error"]["code"]) == (404, "unknown_member")


async def test_removal_answers_404_400_and_403(serve: Serve, http: aiohttp.ClientSession,
                                              tmp_path: Path) -> None:
    toml = tmp_path / "notify.toml"
    toml.write_text(f"""
[[api.keys]]
name = "app"
secret = "{SECRET}"
scopes = ["publish", "read", "admin"]

[[api.keys]]
name = "reader"
secret = "reader-secret"
scopes = ["read"]

[[api.keys]]
name = "docs-admin"
secret = "docs-admin-secret"
scopes = ["admin"]
groups = ["doc-*"]
""")
    s = await serve("--config", str(toml))
    async with connect(s.ws, member="alice") as alice, ServerAPI(s.api, SECRET) as api:
        await alice.join("chat")
        await (await alice.join("doc-1")).leave()  # the log knows doc-1: its view is empty
        url = member_url(s.api, "chat", alice.member)
        # 403: no admin scope; a group outside the key's globs; a disconnect needs `*`
        status, body = await call(http, "DELETE", url, key="reader-secret")
        assert (status, body["error"]["code"]) == (403, "forbidden")
        assert "'admin' scope" in body["error"]["message"]
        status, body = await call(http, "DELETE", url, key="docs-admin-secret")
        assert (status, body["error"]["code"]) == (403, "forbidden")
        status, body = await call(http, "POST", f"{s.api}{V1}/users/alice/disconnect",
                                  key="docs-admin-secret")
        assert (status, body["error"]["code"]) == (403, "forbidden")
        status, body = await call(http, "POST", f"{s.api}{V1}/users/alice/disconnect",
                                  key="reader-secret")
        assert status == 403
        status, _ = await call(http, "DELETE", url, key=None)
        assert status == 401
        # 404: no such group; nobody by that name in the view (a member, a user)
        status, body = await call(http, "DELETE", member_url(s.api, "nope", "alice"))
        assert (status, body["error"]["code"]) == (404, "unknown_group")
        for who in ("carol", "alice#nope", "alic"):
            status, body = await call(http, "DELETE", member_url(s.api, "chat", who))
            assert (status, body["error"]["code"]) == (404, "unknown_member"), who
        status, body = await call(http, "DELETE", member_url(s.api, "doc-1", "alice"),
                                  key="docs-admin-secret")
        assert (status, body["error"]["code"]) == (404, "unknown_member")
        # 400: not a member id
        for bad in ("a#b#c", "#x", "a#", "-a", "a" * 300):
            status, body = await call(http, "DELETE", member_url(s.api, "chat", bad))
            assert (status, body["error"]["code"]) == (400, "bad_request"), bad
            assert body["error"]["message"].startswith("member:")
        status, body = await call(http, "POST", f"{s.api}{V1}/users/a%23b/disconnect")
        assert (status, body["error"]["code"]) == (400, "bad_request")
        with pytest.raises(ServerAPIError) as err:
            await api.remove("chat", "carol")
        assert (err.value.status, err.value.code) == (404, "unknown_member")
        assert (await api.group("chat")).members == (alice.member,)  # undisturbed
        # the only member: nobody has to flush, the view is installed within the call
        r = await api.remove("chat", alice.member)
        assert r.removed == (alice.member,) and (await api.group("chat")).version == r.version


async def _closed(c: Any) -> bool:
    return c.state is ConnectionState.CLOSED


@pytest.mark.timeout(120)
async def test_disconnect_closes_every_connection_and_revokes_older_tokens_durably(
        serve: Serve, http: aiohttp.ClientSession) -> None:
    s = await serve(*KEY, *AUTH, "--suspect-timeout", "30")
    old = token("alice", time.time() - 60)
    async with connect(s.ws, member="alice", token=old) as a1, \
            connect(s.ws, member="alice", token=old) as a2, \
            connect(s.ws, member="bob", token=token("bob", time.time())) as bob, \
            ServerAPI(s.api, SECRET) as api:
        for c in (a1, a2, bob):
            await c.join("doc")
        await a1.join("chat")
        states: list[ConnectionState] = []
        a1.on_state_change(lambda _old, new: states.append(new))
        r = await api.disconnect("alice")
        assert set(r.sessions) == {a1.member, a2.member}
        assert r.revoked_before is not None and abs(r.revoked_before - time.time()) < 30
        # both clients are closed for good with Disconnected, without a reconnect attempt
        await until(lambda: _closed(a1), "a1 closed")
        await until(lambda: _closed(a2), "a2 closed")
        assert isinstance(a1.failure, Disconnected) and isinstance(a2.failure, Disconnected)
        assert states == [ConnectionState.RECONNECTING, ConnectionState.CLOSED]
        # their instances left the views at once (the suspect timeout is 30 s)
        t0 = time.monotonic()

        async def gone() -> bool:
            return (await api.group("doc")).members == (bob.member,) and \
                (await api.group("chat")).members == ()

        await until(gone, "alice's instances removed")
        assert time.monotonic() - t0 < 10
    await _revoked(s, r.revoked_before, old)

    # after a restart on the same data directory, still refused; a newer token still accepted
    assert s.stop() == 0
    s2 = await serve(*KEY, *AUTH, data_dir=s.data_dir)
    await _revoked(s2, r.revoked_before, old)


async def _revoked(s: Any, at: float, old: str) -> None:
    with pytest.raises(ServerRefused) as err:
        async with connect(s.ws, member="alice", token=old):
            pass
    assert err.value.code == "token_revoked"
    assert "revoked" in str(err.value)
    # issued in the second of the call: refused too (iat <= the call's time)
    with pytest.raises(ServerRefused):
        async with connect(s.ws, member="alice", token=token("alice", math.floor(at))):
            pass
    newer = token("alice", math.floor(at) + 1)
    async with connect(s.ws, member="alice", token=newer) as again:
        g = await again.join("doc")
        assert (await g.publish("back")).offset >= 1
        # a refresh with a revoked token is refused; the connection keeps its newer token
        with pytest.raises(ServerRefused) as err:
            await again.refresh_token(old)
        assert err.value.code == "token_revoked"
        assert again.state is ConnectionState.CONNECTED


async def test_disconnect_in_development_mode_closes_and_revokes_nothing(
        serve: Serve) -> None:
    s = await serve(*KEY)
    async with connect(s.ws, member="alice") as alice, connect(s.ws, member="bob") as bob, \
            ServerAPI(s.api, SECRET) as api:
        await alice.join("doc")
        await bob.join("doc")
        r = await api.disconnect("alice")
        assert r.sessions == (alice.member,) and r.revoked_before is None
        await until(lambda: _closed(alice), "alice closed")
        assert isinstance(alice.failure, Disconnected)

        async def gone() -> bool:
            return (await api.group("doc")).members == (bob.member,)

        await until(gone, "alice removed")
        # nobody connected: answered all the same
        r = await api.disconnect("nobody")
        assert r.sessions == () and r.revoked_before is None
        # (no tokens: a new client of the user is accepted)
        async with connect(s.ws, member="alice") as again:
            await again.join("doc")


async def test_cli_remove(serve: Serve) -> None:
    s = await serve(*KEY)
    async with connect(s.ws, member="alice") as alice, connect(s.ws, member="bob") as bob:
        g = await alice.join("doc")
        await bob.join("doc")

        async def run(*args: str) -> tuple[int, str]:
            return await cli(*args, "--api", s.api, "--key", SECRET)

        code, out = await run("remove", "doc", "alice")
        assert code == 0, out
        assert out.strip() == f"removed from doc (view 3): {alice.member}"
        assert (await removed_event(g)).reason == "removed"
        code, out = await run("remove", "doc", "alice")
        assert code == 2 and "404 unknown_member" in out
