"""What the blocking stores on NATS share: an event loop of their own in a thread, and a stream
found or made on a cluster that may still be settling.

The log on JetStream (jetstream.py) and the webhooks' outbox on JetStream
(notify/webhooks/jsoutbox.py) are called off the server's event loop (`asyncio.to_thread`,
as the SQLite stores are) and keep one NATS connection each on a loop of their own: a store
call is a coroutine run there (`LoopThread.call`), bounded by its timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import nats
import nats.errors
import structlog
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig, StreamConfig
from nats.js.errors import APIError, NotFoundError, ServiceUnavailableError
from nats.js.kv import KeyValue

from notify.errortext import described
from notify.supervision import in_own_task

T = TypeVar("T")

log = structlog.get_logger("notify.storage")


class LoopThread:
    """An event loop running in a daemon thread, for a blocking facade over asyncio code."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """Run `coro` on the loop and wait for it (bounded), from any other thread."""
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            fut.cancel()
            raise

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


async def close_within(nc: Client, seconds: float) -> None:
    """Close `nc`, giving up after `seconds` (a server that is gone cannot hold a stop); an
    error closing is no news to anyone stopping."""
    with contextlib.suppress(Exception):
        await in_own_task(nc.close(), seconds)  # (nats-py's close() swallows a cancel)


async def open_stream(servers: Sequence[str], config: StreamConfig, timeout: float,
                      what: str) -> Client:
    """Connect, and find the stream `config` names or make it. A cluster that just started (or
    just lost a node) can time out a stream request while its meta layer settles, and a new
    stream answers publishes only once its Raft group has a leader: asked again until
    `timeout` (each retry logged as `<what>_stream_retry`), unless the refusal is one that
    lasts (`not_yet`). An existing stream is used as it is."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with asyncio.timeout(timeout):
        nc = await nats.connect(servers=list(servers), connect_timeout=2,
                                max_reconnect_attempts=-1, reconnect_time_wait=0.2,
                                allow_reconnect=True)
    try:
        js = nc.jsm()
        while True:
            try:
                try:
                    info = await js.stream_info(config.name or "")
                except NotFoundError:
                    info = await js.add_stream(config)
                if info.cluster is None or info.cluster.leader:
                    return nc
                raise TimeoutError(f"stream {config.name} has no leader yet")
            except (TimeoutError, nats.errors.Error) as e:
                if not not_yet(e) or loop.time() + 0.2 > deadline:
                    raise
                log.info(f"{what}_stream_retry", stream=config.name, error=described(e))
                await asyncio.sleep(0.2)
    except BaseException:
        await close_within(nc, 5)
        raise


B = TypeVar("B")

#: JetStream's refusals of a make that say "not yet", not "never": another maker was first
#: (10058, "stream name already in use"), or the cluster that just started does not see enough
#: of its servers yet (10005, "no suitable peers for placement, peer offline": CI run D on
#: 614abc5, two notify nodes started right after their NATS cluster), or its meta layer is
#: between leaders (10008, "JetStream system temporarily unavailable")
_NOT_YET = frozenset({10058, 10005, 10008})


async def found_or_made(name: str, lookup: Callable[[], Awaitable[B]],
                        make: Callable[[], Awaitable[B]]) -> B:
    """A shared bucket (`name`), found by `lookup` or made by `make`; an existing one is used
    as it is.

    Nodes that start together make their shared buckets together, and on a cluster the loser
    of that race can be refused (`BadRequestError`) while the winner's bucket is not yet known
    to the server that answers it (CI run A on 009345e: two of three nodes failed their start
    on it). So a refused make looks the bucket up again. Still not there: a refusal that says
    "not yet" (`_NOT_YET`, or any 503) becomes `TimeoutError`, which every caller's bounded
    retry asks again; any other refusal (a config the cluster cannot take) is raised as it
    is. A lookup that fails for any reason but "not found" is not answered by making the
    bucket."""
    try:
        return await lookup()
    except NotFoundError:
        pass
    try:
        return await make()
    except APIError as refused:
        try:
            return await lookup()
        except NotFoundError:
            if _refused_for_now(refused):
                raise TimeoutError(f"bucket {name} is not made yet: {refused}") from refused
            raise refused from None


def _refused_for_now(refused: APIError) -> bool:
    return isinstance(refused, ServiceUnavailableError) or refused.err_code in _NOT_YET


#: JetStream's refusals that are refused again however long one waits: the request is wrong
#: for this cluster or account (10065 subjects another stream holds, 10052 a config it cannot
#: take, 10074 R>1 without a cluster), or over the account's limits (10027 streams, 10113 and
#: 10122 bytes, 10002 resources, 10028 memory, 10047 storage); from nats-server's error table.
#: Not here, though they sound final: 10039 "JetStream not enabled for account", which a
#: cluster's meta leader answers while the account is being set up at start (nats-server
#: issue 2874: retry), and 10026 "maximum consumers", which a restarted node meets until its
#: previous life's ephemeral consumers expire.
_LASTING = frozenset({10065, 10052, 10074, 10027, 10113, 10122, 10002, 10028, 10047})

#: nats-py's own errors that asking again cannot mend: a client that is closed stays closed
#: (it reconnects by itself otherwise), and a refused login, a bad subject or a payload over
#: the server's limit are refused again
_LASTING_CLIENT = (nats.errors.ConnectionClosedError, nats.errors.AuthorizationError,
                   nats.errors.BadSubjectError, nats.errors.MaxPayloadError)


def not_yet(error: BaseException) -> bool:
    """Whether a start-up step that failed with `error` may pass if asked again: a timeout, a
    lost connection, any JetStream answer but the refusals known to last (`_LASTING`,
    `_LASTING_CLIENT`). A cluster that is settling answers with many codes (503s, 500s such
    as "cluster can not handle request" or a consumer's create failing on its peer, a bucket
    not known yet to the server that answers), so what is retried is what is not known to be
    final; a lasting refusal ends the start at once, with what it said."""
    if isinstance(error, APIError):
        return error.err_code not in _LASTING
    return isinstance(error, (TimeoutError, nats.errors.Error)) and \
        not isinstance(error, _LASTING_CLIENT)


async def key_value(js: JetStreamContext, config: KeyValueConfig) -> KeyValue:
    """The KV bucket `config` names, found or made (`found_or_made`)."""
    return await found_or_made(config.bucket, lambda: js.key_value(config.bucket),
                               lambda: js.create_key_value(config))


__all__ = ["LoopThread", "close_within", "found_or_made", "key_value", "not_yet", "open_stream"]
