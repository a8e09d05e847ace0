"""The asyncio/websockets host of the runtime (notify/runtime): sockets, outboxes, auth, HTTP.

`NotifyServer` is in `notify.server.app`. This package's `__init__` imports nothing, so that one
of its modules (the outbox, the auth) can be used without the whole server's imports.
"""
