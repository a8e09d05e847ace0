"""One endpoint's delivery loop: its outbox rows, in order, as signed POSTs (Standard Webhooks).

Ordering. Strictly in order per endpoint: one request at a time, the oldest row first, and a
row that fails is retried (same `webhook-id`, same body, a fresh `webhook-timestamp` and
signature per attempt, as the specification has it) until it succeeds, before any later row is
sent. So a backend sees each group's events in the order the views were installed, and a
failing endpoint blocks only itself. The price: one slow endpoint is one request per round trip.

Retries wait `backoff.delay` (exponential with jitter, capped at `backoff_max`), forever: a row
leaves only when answered 2xx, or when the endpoint's backlog cap drops it (the oldest go
first, so a row being retried is the first to go when the cap is reached; see
notify/webhooks/outbox.py).
Any other status (3xx included: redirects are not followed), a timeout or a connection error is
a failed attempt, logged and counted. Every request has a deadline (`timeout`).

In a cluster one node at a time delivers an endpoint (`may_send`: it holds the lease of the
shard the endpoint's name hashes to; notify/webhooks/service.py). A sender that is not (or no
longer) that node sends nothing, leaves its row in the outbox for the node that is, and looks
again every `IDLE_ASIDE` seconds.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import structlog
from standardwebhooks.webhooks import Webhook

from notify.webhooks.backoff import delay
from notify.webhooks.config import WebhookSettings
from notify.webhooks.outbox import OutboxPort, Row

log = structlog.get_logger("notify.webhooks")

#: rows read from the outbox at a time
BATCH = 64
#: seconds between two looks at the outbox when nothing woke the sender (a safety net)
IDLE = 5.0
#: the most of a response body read (and thrown away) before the connection is reused
MAX_RESPONSE = 64 * 1024
#: seconds between two looks at whether this node delivers the endpoint (cluster mode)
IDLE_ASIDE = 0.5


@dataclass(slots=True)
class EndpointStats:
    delivered: int = 0
    #: failed attempts (each retry that fails counts)
    failed: int = 0
    #: consecutive failed attempts of the row at the head (0: healthy)
    failing: int = 0


class Sender:
    def __init__(self, hook: WebhookSettings, outbox: OutboxPort,
                 session: aiohttp.ClientSession,
                 may_send: Callable[[], bool] | None = None, idle: float = IDLE) -> None:
        """`may_send`: whether this node delivers the endpoint now (None: always). `idle`:
        the look at the outbox when nothing woke the sender (in a cluster, rows are added by
        other nodes, which cannot wake it: shorter)."""
        self.idle = idle
        self.hook, self.key = hook, hook.key
        self._outbox, self._session = outbox, session
        self._may_send = may_send or (lambda: True)
        self._signer = Webhook(hook.secret.get_secret_value())
        self._wake = asyncio.Event()
        self.stats = EndpointStats()

    def wake(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            if not self._may_send():
                await asyncio.sleep(IDLE_ASIDE)
                continue
            self._wake.clear()  # (before the read: a row added after it wakes the next wait)
            rows = await asyncio.to_thread(self._outbox.peek, self.key, BATCH)
            if not rows:
                try:
                    async with asyncio.timeout(self.idle):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                continue
            for row in rows:
                if not await self._deliver(row):
                    break  # (no later row before this one: the order per endpoint)

    async def _deliver(self, row: Row) -> bool:
        """True: delivered or dropped by the cap; False: left for the node that delivers
        the endpoint now."""
        attempt = 0
        while True:
            if row.seq <= self._outbox.dropped_through.get(self.key, 0):
                return True  # the backlog cap dropped it meanwhile (counted there)
            if not self._may_send():
                self.stats.failing = 0  # (the node that delivers it now says how it goes)
                return False
            error = await self.post(row)
            if error is None:
                await asyncio.to_thread(self._outbox.delete, self.key, row.seq)
                self.stats.delivered += 1
                if self.stats.failing:
                    log.info("webhook_recovered", endpoint=self.key, after=self.stats.failing)
                self.stats.failing = 0
                return True
            attempt += 1
            self.stats.failed += 1
            self.stats.failing = attempt
            wait = delay(attempt, self.hook.backoff, self.hook.backoff_max)
            log.warning("webhook_failed", endpoint=self.key, id=row.id, type=row.type,
                        attempt=attempt, error=error, retry_in=round(wait, 3))
            await asyncio.sleep(wait)

    async def post(self, row: Row) -> str | None:
        """One attempt: None if the endpoint answered 2xx, else what went wrong."""
        now = time.time()
        signature = self._signer.sign(row.id, dt.datetime.fromtimestamp(now, dt.UTC),
                                      row.body.decode())
        headers = {"webhook-id": row.id, "webhook-timestamp": str(int(now)),
                   "webhook-signature": signature, "content-type": "application/json",
                   "user-agent": "notify-webhooks"}
        try:
            async with asyncio.timeout(self.hook.timeout), self._session.post(
                    self.hook.url, data=row.body, headers=headers,
                    allow_redirects=False) as r:
                await r.content.read(MAX_RESPONSE)
                return None if 200 <= r.status < 300 else f"HTTP {r.status}"
        except TimeoutError:
            return f"no answer in {self.hook.timeout} s"
        except (aiohttp.ClientError, OSError) as e:
            return repr(e)


__all__ = ["EndpointStats", "Sender"]
