"""The server API (issue 31, docs/api.md) against real `notify serve` processes over real HTTP:
keys and scopes, a group's view and presence, history from the durable log past the in-memory
window, the listing, the error model; the CLI commands that use `client_sdk.ServerAPI`."""

from __future__ import annotations

import asyncio
import hashlib
import sys
from pathlib import Path

import aiohttp
import pytest

from client_sdk import ServerAPI, ServerAPIError, connect
from tests.api.conftest import KEY, SECRET, Serve, Served, cli, get
from tests.integration.conftest import TIMEOUT, Raw

V1 = "/api/v1"


def config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "notify.toml"
    path.write_text(text)
    return str(path)


async def test_keys_scopes_and_group_globs(serve: Serve, http: aiohttp.ClientSession,
                                           tmp_path: Path) -> None:
    hashed = hashlib.sha256(b"reader-secret").hexdigest()
    toml = config(tmp_path, f"""
[[api.keys]]
name = "reader"
sha256 = "{hashed}"
scopes = ["read"]
groups = ["doc-*"]

[[api.keys]]
name = "writer"
secret = "writer-secret"
scopes = ["publish"]
""")
    s = await serve("--config", toml)
    async with connect(s.ws, member="alice") as alice:
        await alice.join("doc-1")
        await alice.join("chat")
        api = f"{s.api}{V1}"
        # 401: no key, a malformed header, an unknown key
        status, body = await get(http, f"{api}/groups/doc-1", key=None)
        assert (status, body["error"]["code"]) == (401, "unauthorized")
        status, body = await get(http, f"{api}/groups/doc-1", key=None,
                                 headers={"Authorization": "Basic cmVhZGVyOng="})
        assert (status, body["error"]["code"]) == (401, "unauthorized")
        status, body = await get(http, f"{api}/groups/doc-1", key="nope")
        assert (status, body) == (401, {"error": {"code": "unauthorized",
                                                  "message": "unknown API key"}})
        # 403: a key without the read scope; a group outside the key's globs
        status, body = await get(http, f"{api}/groups/doc-1", key="writer-secret")
        assert (status, body["error"]["code"]) == (403, "forbidden")
        assert "'read' scope" in body["error"]["message"]
        status, body = await get(http, f"{api}/groups/chat/messages", key="reader-secret")
        assert (status, body["error"]["code"]) == (403, "forbidden")
        status, body = await get(http, f"{api}/groups", key="writer-secret")
        assert status == 403
        # the key given by its sha256 reads what its globs reach, and lists only those
        status, body = await get(http, f"{api}/groups/doc-1", key="reader-secret")
        assert status == 200 and body["group"] == "doc-1"
        status, body = await get(http, f"{api}/groups", key="reader-secret")
        assert status == 200 and [g["group"] for g in body["groups"]] == ["doc-1"]
        # the document needs no key
        async with http.get(f"{api}/openapi.json") as r:
            assert r.status == 200 and (await r.json())["openapi"] == "3.1.0"
    # requests are logged with the key's name, never its secret; and counted
    async with http.get(f"http://127.0.0.1:{s.port}/metrics") as r:
        metrics = await r.text()
    assert 'notify_api_requests_total{code="401",endpoint="getGroup"} 3.0' in metrics
    assert 'notify_api_requests_total{code="403",endpoint="getMessages"} 1.0' in metrics
    out = s.output()
    assert "api_request" in out and "key=reader" in out
    assert "reader-secret" not in out and "writer-secret" not in out


async def test_view_and_presence_by_user_in_memory_and_from_the_log(
        serve: Serve, http: aiohttp.ClientSession) -> None:
    s = await serve(*KEY, "--idle-group", "0.2", "--suspect-timeout", "0.3")
    async with ServerAPI(s.api, SECRET) as api:
        async with connect(s.ws, member="alice") as a1, connect(s.ws, member="alice") as a2, \
                connect(s.ws, member="bob") as b:
            for c in (a1, a2, b):
                await c.join("doc")
            view = await api.group("doc")
            assert view.version == 3 and len(view.members) == 3
            assert set(view.users) == {"alice", "bob"}
            assert sorted(view.users["alice"]) == sorted(
                m for m in view.members if m.startswith("alice#"))
            assert len(view.users["alice"]) == 2 and len(view.users["bob"]) == 1
            assert all(m.startswith(f"{u}#") for u, ms in view.users.items() for m in ms)
        # everyone left (more views); once the group has left memory, the log answers
        await groups_in_memory(http, s, 0)
        view = await api.group("doc")
        assert view.version > 3 and (view.members, view.users) == ((), {})
        with pytest.raises(ServerAPIError) as e:
            await api.group("nobody-here")
        assert (e.value.status, e.value.code) == (404, "unknown_group")


async def test_history_reaches_past_the_in_memory_window(serve: Serve) -> None:
    """200 messages, a window of 20: every one read back from the log, in pages, in order."""
    s = await serve(*KEY, "--window-messages", "20")
    async with connect(s.ws, member="alice") as alice:
        group = await alice.join("feed")
        offsets = [(await group.publish({"n": i})).offset for i in range(200)]
        assert offsets == list(range(1, 201))
        async with ServerAPI(s.api, SECRET) as api:
            page = await api.history("feed", after=0, limit=30)
            assert [m.offset for m in page.messages] == list(range(1, 31))
            assert page.next == 30 and page.first == 1
            read = [m async for m in api.messages("feed", page=30)]
            assert [m.offset for m in read] == list(range(1, 201))  # no gap, no repeat
            assert [m.payload for m in read] == [{"n": i} for i in range(200)]
            assert [m.seq for m in read] == list(range(1, 201))
            assert {(m.sender, m.stream, m.order) for m in read} == {
                (alice.member, f"fifo:{alice.member}", "fifo")}
            last = await api.history("feed", after=190, limit=1000)
            assert [m.offset for m in last.messages] == list(range(191, 201))
            assert last.next is None
            assert (await api.history("feed", after=200)).messages == ()
            listing = await api.groups()
            assert [(g.group, g.head, g.members, g.users) for g in listing.groups] == [
                ("feed", 200, 1, 1)]
    # the window really was 20: the server's memory held only the newest
    assert "window_messages" in s.output() and "'window_messages': 20" in s.output()


async def test_history_leaves_out_aborted_and_undecided_atomic_messages(
        serve: Serve) -> None:
    s = await serve(*KEY, "--suspect-timeout", "0.3", "--ack-timeout", "60")
    async with connect(s.ws, member="a") as a, ServerAPI(s.api, SECRET) as api:
        g = await a.join("g")
        r = await Raw.open(s.ws, "r")  # never ACKs anything
        try:
            await r.join("g")
            await g.publish("before")
            doomed = g.publish_nowait("doomed", atomic=True)
            await r.expect(lambda f: f["type"] == "deliver" and f["atomic"])
            # undecided: the page stops before it
            page = await api.history("g")
            assert [m.payload for m in page.messages] == ["before"] and page.next is None
            r.drop()
            outcome = await asyncio.wait_for(doomed, TIMEOUT)
            assert outcome.committed is False
            await g.publish("after")
            page = await api.history("g")
            assert [m.payload for m in page.messages] == ["before", "after"]
            assert [m.offset for m in page.messages] == [1, 3] and page.next is None
        finally:
            await r.close()


async def all_pages(api: ServerAPI, prefix: str, limit: int) -> list[list[str]]:
    pages, cursor = [], None
    while True:
        page = await api.groups(prefix=prefix, limit=limit, cursor=cursor)
        pages.append([g.group for g in page.groups])
        if page.next is None:
            return pages
        cursor = page.next


async def groups_in_memory(http: aiohttp.ClientSession, s: Served, n: int) -> None:
    async def wait() -> None:
        while True:
            async with http.get(f"http://127.0.0.1:{s.port}/metrics") as r:
                if f"\nnotify_groups {n}.0\n" in await r.text():
                    return
            await asyncio.sleep(0.1)

    await asyncio.wait_for(wait(), TIMEOUT)


async def test_listing_pages_by_name_and_prefix_in_memory_and_from_the_log(
        serve: Serve, http: aiohttp.ClientSession) -> None:
    s = await serve(*KEY, "--idle-group", "0.2", "--suspect-timeout", "0.3")
    names = [f"room-{i:02}" for i in range(12)] + ["other"]
    async with ServerAPI(s.api, SECRET) as api:
        async with connect(s.ws, member="m") as m:
            for name in names:
                await m.join(name)
            assert await all_pages(api, "room-", 5) == [names[0:5], names[5:10], names[10:12]]
            everything = await api.groups(limit=100)
            assert [g.group for g in everything.groups] == sorted(names)
            assert everything.next is None
            assert all((g.version, g.members, g.users, g.head) == (1, 1, 1, 0)
                       for g in everything.groups)
        # all of them leave memory; then one comes back: the log's and the hub's, merged
        await groups_in_memory(http, s, 0)
        async with connect(s.ws, member="x") as x:
            await x.join("room-05")
            await groups_in_memory(http, s, 1)
            assert await all_pages(api, "room-", 5) == [names[0:5], names[5:10], names[10:12]]
            assert await all_pages(api, "", 4) == [sorted(names)[i:i + 4]
                                                    for i in range(0, 13, 4)]
            listed = {g.group: g for g in (await api.groups(limit=100)).groups}
            assert listed["room-05"].members == 1 and listed["room-05"].version == 3
            assert all(g.members == 0 and g.version == 2
                       for name, g in listed.items() if name != "room-05")


async def test_bad_requests_are_400_naming_the_field(serve: Serve,
                                                    http: aiohttp.ClientSession) -> None:
    s = await serve(*KEY)
    api = f"{s.api}{V1}"
    async with connect(s.ws, member="m") as m:
        await m.join("g")
        for query, field in [("after=-1", "after"), ("after=abc", "after"),
                             ("after=1.5", "after"), ("after=%2B1", "after"),
                             ("after=99999999999999999999", "after"), ("limit=0", "limit"),
                             ("limit=1001", "limit"), ("limit=", "limit"),
                             ("limt=5", "limt"), ("after=1&after=2", "after")]:
            status, body = await get(http, f"{api}/groups/g/messages?{query}")
            assert status == 400, (query, body)
            assert body["error"]["code"] == "bad_request"
            assert body["error"]["message"].startswith(f"{field}: "), (query, body)
        for bad in ["-x", "a%20b", "a%00", "x" * 201, "caf%C3%A9"]:
            status, body = await get(http, f"{api}/groups/{bad}")
            assert (status, body["error"]["code"]) == (400, "bad_request"), bad
            assert body["error"]["message"].startswith("group: ")
        status, body = await get(http, f"{api}/groups?limit=9999")
        assert status == 400 and body["error"]["message"].startswith("limit: ")
        status, body = await get(http, f"{api}/groups?cursor={'x' * 300}")
        assert status == 400 and body["error"]["message"].startswith("cursor: ")
        # a name with a `/` travels percent-encoded
        await m.join("team/a")
        status, body = await get(http, f"{api}/groups/team%2Fa")
        assert status == 200 and body["group"] == "team/a"
        # not an endpoint, not a method: still the error model
        status, body = await get(http, f"{api}/nothing")
        assert (status, body["error"]["code"]) == (404, "not_found")
        async with http.post(f"{api}/groups/g", headers={"Authorization": f"Bearer {SECRET}"}
                             ) as r:
            assert r.status == 405 and (await r.json())["error"]["code"] == "method_not_allowed"
            assert "GET" in r.headers["Allow"]


async def test_a_key_over_its_rate_is_answered_429(serve: Serve,
                                                  http: aiohttp.ClientSession) -> None:
    s = await serve(*KEY, "--api-rate", "0.1", "--api-burst", "2")
    statuses = [(await get(http, f"{s.api}{V1}/groups"))[0] for _ in range(3)]
    assert statuses == [200, 200, 429]
    async with http.get(f"{s.api}{V1}/groups",
                        headers={"Authorization": f"Bearer {SECRET}"}) as r:
        assert r.status == 429 and (await r.json())["error"]["code"] == "rate_limited"
        assert int(r.headers["Retry-After"]) >= 1


async def test_the_api_needs_a_port_and_a_key_together(tmp_path: Path) -> None:
    async def exits(*args: str) -> str:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "notify.cli", "serve", "--port", "0", "--store", "memory",
            "--data-dir", str(tmp_path), *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), TIMEOUT)
        assert proc.returncode not in (0, None)
        return out.decode()

    assert "needs a key: --api-key NAME=SECRET" in await exits("--api-port", "0")
    assert "no port: give --api-port" in await exits(*KEY)
    assert "--api-key takes NAME=SECRET" in await exits("--api-port", "0", "--api-key", "x")
    toml = config(tmp_path, '[[api.keys]]\nname = "k"\nscopes = ["read"]\n')
    assert "give one of secret, sha256" in await exits("--config", toml, "--api-port", "0")


async def test_cli_presence_and_history(serve: Serve) -> None:
    s = await serve(*KEY, "--window-messages", "5")
    async with connect(s.ws, member="alice") as a, connect(s.ws, member="alice") as a2:
        g = await a.join("doc")
        await a2.join("doc")
        for i in range(12):
            await g.publish({"i": i})

        async def run(*args: str) -> tuple[int, str]:
            return await cli(*args, "--api", s.api, "--key", SECRET)

        code, out = await run("presence", "doc")
        assert code == 0 and out.splitlines()[0] == "view 2: 1 users, 2 instances"
        assert out.splitlines()[1].startswith("alice: alice#")
        code, out = await run("history", "doc", "--after", "2")
        lines = out.splitlines()
        assert code == 0 and len(lines) == 10
        assert lines[0] == f'3 fifo:{a.member}#3 {a.member}: {{"i":2}}'
        code, out = await run("history", "nope")
        assert code == 2 and "404 unknown_group" in out


async def test_the_api_serves_https_with_the_servers_certificate(serve: Serve,
                                                                 tmp_path: Path) -> None:
    import ssl

    from tests.security.test_tls import self_signed

    cert, key = self_signed(tmp_path)
    s = await serve(*KEY, "--tls-cert", str(cert), "--tls-key", str(key))
    trust = ssl.create_default_context(cafile=str(cert))
    async with aiohttp.ClientSession() as http:
        url = f"https://localhost:{s.api_port}/api/v1/groups"
        async with http.get(url, ssl=trust, headers={"Authorization": f"Bearer {SECRET}"}) as r:
            assert r.status == 200 and await r.json() == {"groups": [], "next": None}
        with pytest.raises(aiohttp.ClientError):  # no plain HTTP on it
            async with http.get(f"http://127.0.0.1:{s.api_port}/api/v1/groups"):
                pass
