"""Every node hears every disconnect: a watch of the log's revocations bucket (docs/cluster.md).

The server API's `POST /users/{user}/disconnect` may reach any node, and the user's connections
may be held by every node. The node that is asked stores the revocation first (the JetStream
log's `revoke`: a KV put on a quorum, notify/storage/jetstream.py `revocations_bucket`), ends
the sessions it holds and answers; every node, that one included, watches the bucket and hands
each revocation to its server (`PlacementHost.revoked`), which refuses the user's tokens issued
until then and ends the user's sessions it holds. A revocation heard twice, or one older than
what the server already knows, changes nothing there (so a watch that starts again, or the
values every watch delivers first, never end a later login's sessions).

Why a watch and not a broadcast: a node cut off from NATS when the disconnect was made would
miss a broadcast and keep serving the user's old connections and tokens. The watch is an
ordered consumer of the bucket's stream (as the leases' watches are, notify/cluster/leases.py:
a short idle heartbeat, so a consumer lost with a NATS server is made again within about two
heartbeats), and it resumes after the last revocation it delivered: nothing stored is missed,
however long the node was away. If the watch itself ends (it must not), the node can no longer
keep that promise and stops (`on_failure`: G13), like a node whose lease tasks died.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import orjson
import structlog
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy, KeyValueConfig

from notify.errortext import described
from notify.storage.natsloop import key_value, not_yet
from notify.supervision import LongTask

log = structlog.get_logger("notify.cluster")


class RevocationWatch:
    def __init__(self, nc: Client, bucket: str, *, replicas: int,
                 on_revoked: Callable[[str, float], None],
                 on_failure: Callable[[str], None],
                 idle_heartbeat: float = 0.5, op_timeout: float = 5.0,
                 owner_stopping: Callable[[], bool] = lambda: False) -> None:
        self.nc, self.bucket, self.replicas = nc, bucket, replicas
        self._owner_stopping = owner_stopping
        self._on_revoked, self._on_failure = on_revoked, on_failure
        self.idle_heartbeat, self.op_timeout = idle_heartbeat, op_timeout
        #: revocations delivered by the watch (a metric)
        self.heard = 0
        self._sub: JetStreamContext.PushSubscription | None = None
        self._task: LongTask | None = None
        self._closed = False

    async def start(self, timeout: float) -> None:
        """Find or make the bucket and start the watch (asked again while the meta layer is
        busy, until `timeout`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        js = self.nc.jetstream(timeout=self.op_timeout)
        while True:
            try:
                await self._bucket(js)
                self._sub = await js.subscribe(
                    f"$KV.{self.bucket}.>", stream=f"KV_{self.bucket}", ordered_consumer=True,
                    deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
                    idle_heartbeat=self.idle_heartbeat, inactive_threshold=60.0)
                break
            except Exception as e:
                if not not_yet(e) or loop.time() + 0.2 > deadline:
                    raise
                log.info("revocation_watch_retry", bucket=self.bucket, error=described(e))
                await asyncio.sleep(0.2)
        self._task = LongTask(self._run(self._sub), name=f"revocation watch of {self.bucket}",
                              on_death=self._died, owner_stopping=self._owner_stopping)

    async def _bucket(self, js: JetStreamContext) -> None:
        await key_value(js, KeyValueConfig(bucket=self.bucket, history=1, replicas=self.replicas))

    async def _run(self, sub: JetStreamContext.PushSubscription) -> None:
        async for msg in sub.messages:
            if not msg.data:  # a delete or purge marker: nothing is un-revoked
                continue
            try:
                record = orjson.loads(msg.data)
                user, at = str(record["user"]), float(record["at"])
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                log.error("revocation_unreadable", subject=msg.subject, error=described(e))
                continue
            self.heard += 1
            self._on_revoked(user, at)
        if not self._closed:
            raise RuntimeError(f"the watch of {self.bucket} ended")

    def _died(self, error: BaseException) -> None:
        log.critical("revocation_watch_died", bucket=self.bucket, error=described(error),
                     exc_info=error)
        self._on_failure(f"the revocation watch died: {described(error)}")

    async def stop(self) -> None:
        self._closed = True
        if self._task is not None:
            await self._task.stop()
        if self._sub is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(self.op_timeout):
                    await self._sub.unsubscribe()


__all__ = ["RevocationWatch"]
