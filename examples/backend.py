"""An application backend that notifies a group from a web handler, through the server API
(docs/api.md): a comment saved by `POST /docs/{doc}/comments` reaches everyone in the group
`doc-{doc}` at once, without the backend joining anything.

    ./dev serve --api-port 8080 --api-key backend=dev-secret-123 &
    .venv/bin/python examples/backend.py demo     # a member watches, the backend publishes

or by hand:

    .venv/bin/python examples/backend.py run --port 8000 &
    .venv/bin/notify watch doc-1 &
    curl -X POST -H 'Content-Type: application/json' -d '{"text": "looks good"}' \\
         http://127.0.0.1:8000/docs/1/comments

The comment's row id is the publish's `Idempotency-Key`: the backend saves first, then
publishes, and a request retried after a timeout (by the browser, a proxy or this handler)
notifies the group once. `ServerAPI.publish` itself retries a 503 with the same key.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
from typing import Any

import aiohttp
from aiohttp import web

from client_sdk import Message, ServerAPI, ServerAPIError, connect

API_URL, API_KEY = "http://127.0.0.1:8080", "dev-secret-123"
WS_URL = "ws://127.0.0.1:8765"
NOTIFY = web.AppKey("notify", ServerAPI)
DB = web.AppKey("db", sqlite3.Connection)


async def add_comment(request: web.Request) -> web.Response:
    doc = request.match_info["doc"]
    body: Any = await request.json()
    text = body.get("text") if isinstance(body, dict) else None
    if not isinstance(text, str) or not text:
        raise web.HTTPBadRequest(text="a JSON body {\"text\": ...} is needed")
    db = request.app[DB]
    with db:  # the app's own write first: what the notification announces exists
        row = db.execute("INSERT INTO comments (doc, text) VALUES (?, ?)", (doc, text)).lastrowid
    try:
        sent = await request.app[NOTIFY].publish(
            f"doc-{doc}", {"comment": row, "text": text}, idempotency_key=f"comment-{row}")
    except ServerAPIError as e:
        if e.code != "unknown_group":
            raise
        sent = None  # nobody ever opened this document: nobody to tell
    return web.json_response({"comment": row, "offset": sent.offset if sent else None},
                             status=201)


def make_app(api_url: str, api_key: str) -> web.Application:
    app = web.Application()
    app.router.add_post("/docs/{doc}/comments", add_comment)

    async def lifecycle(app: web.Application) -> Any:
        db = sqlite3.connect(":memory:")
        db.execute("CREATE TABLE comments (id INTEGER PRIMARY KEY, doc TEXT, text TEXT)")
        app[DB] = db
        async with ServerAPI(api_url, api_key) as api:  # one keep-alive session
            app[NOTIFY] = api
            yield
        db.close()

    app.cleanup_ctx.append(lifecycle)
    return app


async def demo(a: argparse.Namespace) -> int:
    """A member joins `doc-1`; the backend saves a comment; the member sees it."""
    runner = web.AppRunner(make_app(a.api, a.key))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with connect(a.url, member="reader") as c:
            group = await c.join("doc-1")
            async with aiohttp.ClientSession() as http, http.post(
                    f"http://127.0.0.1:{port}/docs/1/comments",
                    json={"text": "looks good"}) as r:
                print("backend answered", r.status, await r.json())

            async def first_message() -> Message:
                async for e in group:
                    if isinstance(e, Message):
                        return e
                raise AssertionError("the group ended")

            async with asyncio.timeout(10):
                m = await first_message()
            print(f"reader got {m.payload} from {m.sender} at offset {m.offset}")
            return 0 if m.payload.get("text") == "looks good" else 1
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cmd", choices=["run", "demo"])
    p.add_argument("--api", default=API_URL, help="the notify server API")
    p.add_argument("--key", default=API_KEY, help="an API key with the publish scope")
    p.add_argument("--url", default=WS_URL, help="the notify WebSocket (demo's member)")
    p.add_argument("--port", type=int, default=8000, help="run: this backend's port")
    a = p.parse_args(argv)
    if a.cmd == "demo":
        return asyncio.run(demo(a))
    web.run_app(make_app(a.api, a.key), host="127.0.0.1", port=a.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
