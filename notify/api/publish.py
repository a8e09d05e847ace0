"""Publishing through the server API: a backend's message to a group, without joining it
(docs/api.md "Publish", issue 31).

Theory of operation. Each API key publishes as a *trusted sender* `api:NAME`: a connection of
the server's own (`NotifyServer.attach`) that the hub trusts (`Hub.trust`). Its publishes are
ordinary `publish` frames fed to the one driver, so every rule is the core's: a group that left
memory is loaded first (G14), the message is numbered, stored and fanned out like a member's
(the answer waits for the append, G10), an atomic one is confirmed once every member of the view
ACKed it (G5). It reaches every member of the current view, whatever their `accept_from`, in its
own FIFO stream per key (`fifo:api:NAME`) or in the total order.

Answers. `Publisher.publish` resolves once the core answered: `published` (the message is in
the log), then for an atomic message its `outcome` (committed or aborted). Each wait has a
deadline: past it the caller is told 503, and a retry with the same `Idempotency-Key` is safe
(the message is delivered once whether or not the first attempt was stored). A refusal the
caller cannot act on (the group installing a view, which takes milliseconds) is retried here
until the deadline.

Idempotency. The `Idempotency-Key` is the publish id, so the core's own idempotency (a sender's
last `idempotency_window` ids per group, kept in the log across restarts) answers a retry with
the first offset and delivers nothing. A retry must also carry the same request: the key's
recent bodies are kept here (`RECENT` of them, by digest), and a key the core knew but this
process does not (a restart, or older than `RECENT`) is checked against the stored message
itself, read back from the log. Another body answers 409 and publishes nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import structlog

from notify.api.errors import ApiError, ApiErrorCode, unavailable, unknown_group
from notify.core.errors import ErrorCode, RejectCode
from notify.core.events import Order, Publish
from notify.core.topic import TOTAL_STREAM
from notify.core.users import trusted_sender
from notify.runtime.frames import unbatch
from notify.server.app import NotifyServer
from notify.storage.base import LogPage

log = structlog.get_logger("notify.api")

#: request bodies remembered per process for the 409 check (the oldest go first; about
#: 300 B each; a key older than these is checked against the log instead)
RECENT = 10_000
#: how long a refusal that passes by itself (a view being installed) waits before a retry
RETRY_PAUSE = 0.02


@dataclass(frozen=True, slots=True)
class Published:
    offset: int
    id: str
    #: an atomic message's outcome (None for others)
    committed: bool | None
    #: a retry of a publish already stored (its first answer again; nothing was delivered)
    replayed: bool


@dataclass(slots=True)
class _Sender:
    """One key's trusted connection, and the requests waiting for its answers."""

    conn: int
    answers: dict[int, asyncio.Future[dict[str, Any]]] = field(default_factory=dict)
    #: (group, publish id) -> waiters for that atomic message's outcome
    outcomes: dict[tuple[str, str], list[asyncio.Future[dict[str, Any]]]] = field(
        default_factory=dict)


ReadBack = Callable[[str, int], Awaitable[LogPage | None]]


class Conflict(ApiError):
    def __init__(self, key: str) -> None:
        super().__init__(ApiErrorCode.CONFLICT, f"Idempotency-Key {key!r} was used with "
                                                "another request; nothing was published")


class Publisher:
    def __init__(self, server: NotifyServer, read_back: ReadBack) -> None:
        self.server = server
        self._read_back = read_back
        self._senders: dict[str, _Sender] = {}
        self._reqs = itertools.count(1)
        #: (key, group, Idempotency-Key) -> digest of the request it was first used with
        self._recent: OrderedDict[tuple[str, str, str], bytes] = OrderedDict()

    def close(self) -> None:
        for name in list(self._senders):
            sender = self._senders.pop(name)
            self.server.detach(sender.conn)
            _fail_all(sender, unavailable("the server API is stopping"))

    async def publish(self, key: str, group: str, payload: bytes, order: Order, atomic: bool,
                      idempotency_key: str | None) -> Published:
        """`payload`: the JSON value's bytes, checked (G12) and written once."""
        digest = _digest(payload, order, atomic)
        seen: bytes | None = None
        if idempotency_key is not None:
            seen = self._recent.get((key, group, idempotency_key))
            if seen is not None and seen != digest:
                raise Conflict(idempotency_key)
            self._remember((key, group, idempotency_key), digest)
        publish_id = idempotency_key if idempotency_key is not None else \
            f"api.{secrets.token_urlsafe(12)}"
        t = self.server.config.timeouts
        deadline = asyncio.get_running_loop().time() + t.write_timeout + t.flush_timeout
        g = self.server.hub.groups.get(group)
        head_before = g.topic.head if g is not None else None
        sender = self._sender(key)
        outcome: asyncio.Future[dict[str, Any]] | None = None
        if atomic:
            outcome = asyncio.get_running_loop().create_future()
            sender.outcomes.setdefault((group, publish_id), []).append(outcome)
        try:
            answer = await self._send(sender, group, publish_id, payload, order, atomic,
                                      deadline)
            offset = int(answer["offset"])
            replayed = head_before is not None and offset <= head_before
            if idempotency_key is not None and (head_before is None or replayed) and \
                    seen is None:
                await self._check_stored(group, offset, idempotency_key, payload, order,
                                         atomic)
            committed: bool | None = None
            if outcome is not None:
                committed = await self._outcome(outcome, deadline)
            return Published(offset, publish_id, committed, replayed)
        finally:
            if outcome is not None:
                waiters = sender.outcomes.get((group, publish_id), [])
                if outcome in waiters:
                    waiters.remove(outcome)
                if not waiters:
                    sender.outcomes.pop((group, publish_id), None)

    # -- the core's answers ------------------------------------------------------------------------

    def _sender(self, key: str) -> _Sender:
        sender = self._senders.get(key)
        if sender is None:
            sender = self._senders[key] = _Sender(0)
            sender.conn = self.server.attach(trusted_sender(key),
                                             lambda data: self._frames(sender, data),
                                             lambda: self._closed(key, sender))
        return sender

    async def _send(self, sender: _Sender, group: str, publish_id: str, payload: bytes,
                    order: Order, atomic: bool, deadline: float) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        while True:
            req = next(self._reqs)
            answer: asyncio.Future[dict[str, Any]] = loop.create_future()
            sender.answers[req] = answer
            try:
                self.server.submit(sender.conn, Publish(
                    req, group, publish_id, 0, order, orjson.Fragment(payload), atomic,
                    False, len(payload)))
                async with asyncio.timeout_at(deadline):
                    frame = await answer
            except TimeoutError:
                raise unavailable("the publish was not answered in time; retry it with the "
                                  "same Idempotency-Key (it is delivered once)") from None
            finally:
                sender.answers.pop(req, None)
            kind = frame.get("type")
            if kind == "published":
                return frame
            code = str(frame.get("code"))
            if kind == "rejected" and code == RejectCode.VIEW_CHANGING and \
                    loop.time() + RETRY_PAUSE < deadline:
                await asyncio.sleep(RETRY_PAUSE)  # a view is being installed: it passes
                continue
            raise _refusal(kind, code, str(frame.get("message", "")), group)

    async def _outcome(self, waiter: asyncio.Future[dict[str, Any]], deadline: float) -> bool:
        """An atomic message's outcome, from its `outcome` frame (the core sends one to the
        connection that published or last retried it, also for a retry of one decided long
        ago: `Group.publish`)."""
        t = self.server.config.timeouts
        try:
            async with asyncio.timeout_at(deadline + t.ack_timeout + t.flush_timeout):
                frame = await waiter
        except TimeoutError:
            raise unavailable("the atomic message was stored but not decided in time; its "
                              "outcome will be; a retry with the same Idempotency-Key answers "
                              "it") from None
        return bool(frame["committed"])

    async def _check_stored(self, group: str, offset: int, key: str, payload: bytes,
                            order: Order, atomic: bool) -> None:
        """A key this process has no record of, answered with an offset the group already had:
        the stored message must be this request's (409 otherwise)."""
        page = await self._read_back(group, offset)
        stored = next((m for m in page.messages if m.offset == offset), None) \
            if page is not None else None
        if stored is None:
            return  # retention dropped it: nothing left to compare (the core took the id)
        same = stored.id == key and stored.atomic == atomic and \
            (stored.stream == TOTAL_STREAM) == (order is Order.TOTAL) and \
            orjson.dumps(stored.payload) == payload
        if not same:
            raise Conflict(key)

    def _frames(self, sender: _Sender, data: bytes) -> None:
        for frame in unbatch(orjson.loads(data)):
            kind = frame.get("type")
            if kind == "outcome":
                for waiter in sender.outcomes.get((frame["group"], frame["id"]), []):
                    if not waiter.done():
                        waiter.set_result(frame)
                continue
            req = frame.get("req")
            answer = sender.answers.get(req) if isinstance(req, int) else None
            if answer is not None and not answer.done():
                answer.set_result(frame)
            elif kind == "error":
                log.warning("api_sender_error", code=frame.get("code"),
                            message=frame.get("message"))

    def _closed(self, key: str, sender: _Sender) -> None:
        """The core closed a key's connection (a load it waited for overflowed, G14): the
        requests waiting are answered 503, and the next publish opens a new one."""
        if self._senders.get(key) is sender:
            del self._senders[key]
        log.warning("api_sender_closed", key=key)
        _fail_all(sender, unavailable("the publish was interrupted; retry it with the same "
                                      "Idempotency-Key"))

    def _remember(self, k: tuple[str, str, str], digest: bytes) -> None:
        self._recent[k] = digest
        self._recent.move_to_end(k)
        while len(self._recent) > RECENT:
            self._recent.popitem(last=False)


def _digest(payload: bytes, order: Order, atomic: bool) -> bytes:
    return hashlib.sha256(b"%s %d " % (order.value.encode(), atomic) + payload).digest()


def _fail_all(sender: _Sender, error: ApiError) -> None:
    for future in [*sender.answers.values(), *(w for ws in sender.outcomes.values()
                                               for w in ws)]:
        if not future.done():
            future.set_exception(error)


def _refusal(kind: Any, code: str, message: str, group: str) -> ApiError:
    """What a core's refusal of the trusted sender's publish means to the API's caller."""
    if code in (RejectCode.NO_GROUP, ErrorCode.NO_GROUP):
        return unknown_group(group)
    if code == RejectCode.TOO_MANY_PENDING:
        return ApiError(ApiErrorCode.RATE_LIMITED, "too many atomic messages of this key are "
                        "undecided in this group (max_pending_atomic)", {"Retry-After": "1"})
    if code == RejectCode.BAD_PAYLOAD:
        return ApiError(ApiErrorCode.BAD_REQUEST, "payload: cannot be carried as is")
    if code in (RejectCode.STORAGE_FAILED, RejectCode.VIEW_CHANGING, ErrorCode.UNAVAILABLE):
        return unavailable(f"the group cannot take it now ({code}); retry with the same "
                           "Idempotency-Key")
    log.error("api_publish_refused", kind=kind, code=code, message=message)
    return ApiError(ApiErrorCode.INTERNAL, f"the publish was refused: {code}")


__all__ = ["RECENT", "Conflict", "Published", "Publisher"]
