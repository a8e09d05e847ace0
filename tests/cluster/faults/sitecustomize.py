"""Loaded by a test node's interpreter (PYTHONPATH): drops the first owner → edge batch
(a NATS publish on `<prefix>.out.<edge>`) whose bytes contain `$NOTIFY_TEST_DROP_OUT`, as if it
were lost in a reset of the edge's NATS connection (cluster review S1). Test-only: nothing in
`notify` knows of it."""

from __future__ import annotations

import os

_MARKER = os.environ.get("NOTIFY_TEST_DROP_OUT", "").encode()

if _MARKER:
    from nats.aio.client import Client

    _publish = Client.publish
    _dropped = False

    async def _lossy(self: Client, subject: str, payload: bytes = b"", *args: object,
                     **kw: object) -> None:
        global _dropped
        if not _dropped and ".out." in subject and _MARKER in payload:
            _dropped = True
            print(f"fault: dropped an owner batch to {subject}", flush=True)
            return
        await _publish(self, subject, payload, *args, **kw)  # type: ignore[arg-type]

    Client.publish = _lossy  # type: ignore[method-assign]
