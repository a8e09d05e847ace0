"""The server API (issue 31, docs/api.md): HTTP/JSON under `/api/v1` for application backends,
on its own listener in the WebSocket server's process and event loop. An adapter on a running
`NotifyServer` (a host layer like notify.server; the core never imports it):

- `keys`: the API keys, their scopes and group globs, the constant-time lookup, rate buckets;
- `errors`: the error model (`{"error": {"code", "message"}}`, stable codes);
- `models`: the answers as pydantic models; `openapi`: the OpenAPI 3.1 document made of them;
- `app`: `ApiServer`, the aiohttp listener and its handlers.

Like `notify.server`, this `__init__` imports nothing: `ApiServer` is in `notify.api.app`.
"""
