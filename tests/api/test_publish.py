"""Publishing through the server API (issue 31, docs/api.md "Publish") against real
`notify serve` processes, with real SDK members: delivery to every member whatever its
`accept_from`, without a view change; idempotent retries delivered once, also across a
SIGKILL; 409 for a key reused with another body; atomic messages committed and aborted; a
group that left memory; scopes and bad bodies; `notify pub --api`."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from client_sdk import Message, NotifyError, ServerAPI, ServerAPIError, ViewInstalled, connect
from client_sdk.group import Group
from notify.api import publish as publish_module
from notify.server.app import NotifyServer
from tests.api.conftest import KEY, SECRET, Serve, cli
from tests.integration.conftest import TIMEOUT, Raw

V1 = "/api/v1"
AUTH = {"Authorization": f"Bearer {SECRET}"}


async def messages(group: Group, n: int, timeout: float = TIMEOUT) -> list[Message]:
    """The next `n` messages `group` delivers (failing the test past `timeout`); no view
    may be installed after the one the member joined with."""
    got: list[Message] = []
    joined = group.view.version if group.view is not None else 0

    async def read() -> None:
        async for e in group:
            if isinstance(e, Message):
                got.append(e)
                if len(got) == n:
                    return
            assert not (isinstance(e, ViewInstalled) and e.view > joined), f"a view change: {e}"

    await asyncio.wait_for(read(), timeout)
    return got


async def nothing_more(group: Group, wait: float = 0.5) -> None:
    """No message arrives within `wait` seconds."""
    with pytest.raises(TimeoutError):
        await messages(group, 1, wait)


async def post(http: aiohttp.ClientSession, url: str, body: Any, key: str = SECRET,
               **headers: str) -> tuple[int, Any, Any]:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    async with http.post(url, data=data, headers={"Authorization": f"Bearer {key}",
                                                  **headers}) as r:
        return r.status, await r.json(), r.headers


async def test_reaches_every_member_whatever_its_accept_from_without_a_view_change(
        serve: Serve) -> None:
    s = await serve(*KEY)
    async with connect(s.ws, member="alice") as a, connect(s.ws, member="bob") as b, \
            ServerAPI(s.api, SECRET) as api:
        ga = await a.join("doc")  # accept_from: members
        gb = await b.join("doc", accept_from="any")
        view = await api.group("doc")
        p1 = await api.publish("doc", {"n": 1})
        p2 = await api.publish("doc", {"n": 2}, order="total")
        p3 = await api.publish("doc", None)
        assert (p1.offset, p2.offset, p3.offset) == (1, 2, 3)
        assert p1.committed is None and not p1.replayed
        for g in (ga, gb):
            got = await messages(g, 3)
            assert [(m.payload, m.sender, m.stream, m.seq, m.view) for m in got] == [
                ({"n": 1}, "api:app", "fifo:api:app", 1, view.version),
                ({"n": 2}, "api:app", "total", 1, view.version),
                (None, "api:app", "fifo:api:app", 2, view.version)]
        # no view change: the API's sender is in no view
        assert (await api.group("doc")).version == view.version
        page = await api.history("doc")
        assert [(m.offset, m.sender, m.order) for m in page.messages] == [
            (1, "api:app", "fifo"), (2, "api:app", "total"), (3, "api:app", "fifo")]


async def test_an_idempotent_retry_is_delivered_once_even_across_a_sigkill(
        serve: Serve, http: aiohttp.ClientSession, tmp_path: Path) -> None:
    data = tmp_path / "data"
    s = await serve(*KEY, "--durability", "full", data_dir=data)
    url = f"{s.api}{V1}/groups/doc/messages"
    async with connect(s.ws, member="alice") as a:
        g = await a.join("doc")
        status, first, headers = await post(http, url, {"payload": "once"},
                                            **{"Idempotency-Key": "order-17"})
        assert status == 200 and first == {"offset": 1, "id": "order-17", "committed": None}
        assert "Idempotent-Replayed" not in headers
        status, again, headers = await post(http, url, {"payload": "once"},
                                            **{"Idempotency-Key": "order-17"})
        assert (status, again, headers.get("Idempotent-Replayed")) == (200, first, "true")
        # the same key with another body: 409, nothing published
        status, body, _ = await post(http, url, {"payload": "other"},
                                     **{"Idempotency-Key": "order-17"})
        assert (status, body["error"]["code"]) == (409, "conflict")
        status, body, _ = await post(http, url, {"payload": "once", "order": "total"},
                                     **{"Idempotency-Key": "order-17"})
        assert status == 409
        got = await messages(g, 1)
        assert [m.payload for m in got] == ["once"]
        await nothing_more(g)
    # killed: the retry after the restart still finds the first (the log keeps the ids)
    assert s.proc is not None
    s.proc.kill()
    s.proc.wait(TIMEOUT)
    s2 = await serve(*KEY, data_dir=data)
    url = f"{s2.api}{V1}/groups/doc/messages"
    status, again, _ = await post(http, url, {"payload": "once"},
                                  **{"Idempotency-Key": "order-17"})
    assert (status, again) == (200, first)
    # a process that never saw the key: the stored message decides (read back from the log)
    status, body, _ = await post(http, url, {"payload": "changed"},
                                 **{"Idempotency-Key": "order-17"})
    assert (status, body["error"]["code"]) == (409, "conflict")
    async with ServerAPI(s2.api, SECRET) as api:
        page = await api.history("doc")
        assert [(m.offset, m.payload) for m in page.messages] == [(1, "once")]


async def test_concurrent_retries_of_one_key_get_one_offset(serve: Serve) -> None:
    s = await serve(*KEY)
    async with connect(s.ws, member="alice") as a, ServerAPI(s.api, SECRET) as api:
        g = await a.join("doc")
        answers = await asyncio.gather(*(api.publish("doc", {"k": 1}, idempotency_key="same")
                                         for _ in range(10)))
        assert {p.offset for p in answers} == {1}
        assert [m.payload for m in await messages(g, 1)] == [{"k": 1}]
        await nothing_more(g)


async def test_atomic_through_the_api_committed_and_aborted(serve: Serve) -> None:
    s = await serve(*KEY, "--suspect-timeout", "0.3", "--ack-timeout", "60")
    async with connect(s.ws, member="alice") as a, ServerAPI(s.api, SECRET) as api:
        ga = await a.join("g")
        done = await api.publish("g", {"all": True}, atomic=True)
        assert done.committed is True
        got = await messages(ga, 1)
        assert got[0].atomic and got[0].payload == {"all": True}
        # a member that never ACKs, then fails: the message is aborted
        r = await Raw.open(s.ws, "r")
        try:
            await r.join("g")
            await asyncio.sleep(0.1)
            doomed = asyncio.create_task(api.publish("g", {"all": False}, atomic=True))
            await r.expect(lambda f: f["type"] == "deliver" and f["atomic"])
            await asyncio.sleep(0.2)
            assert not doomed.done()  # it waits for the outcome
            r.drop()
            aborted = await asyncio.wait_for(doomed, TIMEOUT)
            assert aborted.committed is False and aborted.offset == 2
        finally:
            await r.close()
        # the same key answers the outcome again
        again = await api.publish("g", {"all": False}, atomic=True,
                                  idempotency_key=aborted.id)
        assert (again.offset, again.committed, again.replayed) == (2, False, True)


async def test_a_group_that_left_memory_is_loaded_to_publish(serve: Serve,
                                                             http: aiohttp.ClientSession) -> None:
    s = await serve(*KEY, "--idle-group", "0.2")
    async with connect(s.ws, member="alice") as a:
        g = await a.join("quiet")
        await g.publish("from alice")
        alice = a.member
    # alice left: the group is empty and leaves memory
    async with ServerAPI(s.api, SECRET) as api:
        async def evicted() -> None:
            while True:
                async with http.get(f"http://127.0.0.1:{s.port}/metrics") as r:
                    if "\nnotify_groups 0.0\n" in await r.text():
                        return
                await asyncio.sleep(0.1)

        await asyncio.wait_for(evicted(), TIMEOUT)
        p = await api.publish("quiet", "from the backend", atomic=True)
        assert (p.offset, p.committed) == (2, True)  # nobody to wait for
        page = await api.history("quiet")
        assert [(m.payload, m.sender) for m in page.messages] == [
            ("from alice", alice), ("from the backend", "api:app")]
        with pytest.raises(ServerAPIError) as e:
            await api.publish("never-joined", 1)
        assert (e.value.status, e.value.code) == (404, "unknown_group")


async def test_scopes_and_bad_bodies(serve: Serve, http: aiohttp.ClientSession,
                                     tmp_path: Path) -> None:
    toml = tmp_path / "notify.toml"
    toml.write_text(f'[[api.keys]]\nname = "app"\nsecret = "{SECRET}"\n\n'
                    '[[api.keys]]\nname = "reader"\nsecret = "reader-secret"\n'
                    'scopes = ["read"]\n\n[[api.keys]]\nname = "docs"\nsecret = "docs-secret"\n'
                    'scopes = ["publish"]\ngroups = ["doc-*"]\n')
    s = await serve("--config", str(toml), "--max-frame-bytes", "4096")
    url = f"{s.api}{V1}/groups/doc-1/messages"
    async with connect(s.ws, member="m") as m:
        g = await m.join("doc-1")
        await m.join("chat")
        status, body, _ = await post(http, url, {"payload": 1}, key="reader-secret")
        assert (status, body["error"]["code"]) == (403, "forbidden")
        assert "'publish' scope" in body["error"]["message"]
        status, body, _ = await post(http, f"{s.api}{V1}/groups/chat/messages",
                                     {"payload": 1}, key="docs-secret")
        assert (status, body["error"]["code"]) == (403, "forbidden")
        status, body, _ = await post(http, url, {"payload": 1}, key="docs-secret")
        assert status == 200 and body["offset"] == 1
        for raw, field in [(b"not json", "body"), (b"[1]", "body"), (b"{}", "payload"),
                           (b'{"payload": 1, "extra": 2}', "extra"),
                           (b'{"payload": 1, "order": "random"}', "order"),
                           (b'{"payload": 1, "atomic": "yes"}', "atomic"),
                           (b'{"payload": 1, "atomic": 1}', "atomic"),
                           (b'{"payload": 123456789012345678901234567890}', "payload"),
                           (b'{"payload": 1e400}', "payload"),
                           (b'{"payload": NaN}', "body"),
                           (b'{"payload": "\\ud800"}', "body"),
                           (b'{"payload": ' + b"[" * 100 + b"]" * 100 + b"}", "payload")]:
            status, body, _ = await post(http, url, raw)
            assert (status, body["error"]["code"]) == (400, "bad_request"), raw
            assert body["error"]["message"].startswith(f"{field}: "), (raw, body)
        for bad in ["has space", "x" * 257, "caf\u00e9".encode().decode("latin-1")]:
            status, body, _ = await post(http, url, {"payload": 1},
                                         **{"Idempotency-Key": bad})
            assert status == 400 and body["error"]["message"].startswith("Idempotency-Key")
        status, body, _ = await post(http, url, {"payload": "x" * 5000})
        assert (status, body["error"]["code"]) == (413, "too_large")
        # none of it reached the member; the good one did, once
        assert [x.payload for x in await messages(g, 1)] == [1]
        await nothing_more(g)


async def test_cli_pub_through_the_api(serve: Serve) -> None:
    s = await serve(*KEY)
    async with connect(s.ws, member="alice") as a:
        g = await a.join("doc")

        async def run(*args: str) -> tuple[int, str]:
            return await cli("pub", *args)

        code, out = await run("doc", '{"x": 1}', "--api", s.api, "--key", SECRET,
                              "--idempotency-key", "cli-1")
        assert (code, out.strip()) == (0, "published offset=1 id=cli-1")
        code, out = await run("doc", '{"x": 1}', "--api", s.api, "--key", SECRET,
                              "--idempotency-key", "cli-1")
        assert (code, out.strip()) == (0, "published offset=1 id=cli-1 (replayed)")
        code, out = await run("doc", '"all"', "--api", s.api, "--key", SECRET, "--atomic")
        assert code == 0 and out.strip().endswith("committed=True")
        code, out = await run("doc", "1", "--api", s.api, "--key", "wrong")
        assert code == 2 and "401 unauthorized" in out
        got = await messages(g, 2)
        assert [(m.payload, m.sender) for m in got] == [({"x": 1}, "api:app"),
                                                       ("all", "api:app")]


async def test_the_example_backend_notifies_a_member_from_its_web_handler(serve: Serve) -> None:
    s = await serve(*KEY)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(Path(__file__).parents[2] / "examples" / "backend.py"), "demo",
        "--api", s.api, "--key", SECRET, "--url", s.ws,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), TIMEOUT * 3)
    text = out.decode()
    assert proc.returncode == 0, text
    assert "backend answered 201 {'comment': 1, 'offset': 1}" in text
    assert "reader got {'comment': 1, 'text': 'looks good'} from api:app at offset 1" in text


async def test_publishes_in_flight_at_a_graceful_stop_are_answered_and_kept(
        serve: Serve, tmp_path: Path) -> None:
    """SIGTERM while 1,000 publishes are under way (once 20 are answered): every call ends
    (answered, or refused: no call waits for its deadline), and what was answered 200 is in the
    log after the restart (G10 through the API), at the offset it was answered with."""
    data = tmp_path / "stop"
    s = await serve(*KEY, "--api-rate", "0", data_dir=data)
    async with connect(s.ws, member="alice") as a:
        await a.join("doc")
    answered: dict[str, int] = {}
    some = asyncio.Event()
    async with ServerAPI(s.api, SECRET, timeout=TIMEOUT) as api:
        async def one(i: int) -> None:
            with contextlib.suppress(NotifyError):
                p = await api.publish("doc", {"i": i}, idempotency_key=f"k{i}", retries=0)
                answered[p.id] = p.offset
                if len(answered) >= 20:
                    some.set()

        calls = [asyncio.create_task(one(i)) for i in range(1_000)]
        await asyncio.wait_for(some.wait(), TIMEOUT)
        assert s.proc is not None
        s.proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(asyncio.gather(*calls), TIMEOUT)
    assert s.proc.wait(TIMEOUT) == 0
    assert 20 <= len(answered) < 1_000  # the stop came mid-way
    print(f"answered {len(answered)} of 1,000")
    s2 = await serve(*KEY, data_dir=data)
    async with ServerAPI(s2.api, SECRET) as api:
        stored = {m.offset: m for m in [m async for m in api.messages("doc")]}
    for key, offset in answered.items():
        assert stored[offset].payload == {"i": int(key[1:])}


async def test_the_409_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """The request digests kept for the 409 check (G14): past `RECENT` the oldest go (a retry
    with an older key is checked against the log instead)."""
    monkeypatch.setattr(publish_module, "RECENT", 3)
    p = publish_module.Publisher(NotifyServer(), read_back=None)  # type: ignore[arg-type]
    for i in range(5):
        p._remember(("app", "g", f"k{i}"), b"d")
    assert list(p._recent) == [("app", "g", f"k{i}") for i in (2, 3, 4)]
