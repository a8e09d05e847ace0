"""The server API's listener: aiohttp on its own port, in the WebSocket server's process and
event loop, reading what that server holds (docs/api.md, issue 31).

Theory of operation. `ApiServer` is an adapter on a running `NotifyServer`: it decides nothing
about groups. A group's view comes from the hub when the group is in memory (what its members
see), else from the log (`MessageLog.list_groups`: the latest stored view, without loading the
group, so a read never brings a group back into memory nor fences it). History is read from
the durable log (`read_page`), never from the in-memory window, so it reaches as far back as
retention; each read runs off the event loop like the driver's (`NotifyServer.off_loop`, at
most `READERS` at a time, each bounded by `write_timeout`, so the API never takes the threads
the server's own loads need). A page stops where the log may not be final yet for a group in
memory (`Group.readable_before`: the write under way, an atomic message still undecided), and
leaves out aborted atomic messages (the log's aborts, and those the group knows of before
its view with the abort is stored).

Every request goes through one middleware, in this order: the key (401), its rate (429), the
handler (403 scope or group, 400 a parameter, 404, 503), and whatever goes wrong becomes an
`{"error": ...}` answer (notify/api/errors.py): aiohttp's own 404/405/413 too, and an
unexpected exception a logged 500. Each request is logged at debug with its key's name and
counted in `notify_api_requests_total{endpoint,code}`.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import re
import ssl as ssl_module
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, TypeVar

import orjson
import pydantic_core
import structlog
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from pydantic import BaseModel

from notify.api.errors import (
    ApiError,
    ApiErrorCode,
    bad_request,
    unavailable,
    unknown_group,
    unknown_member,
)
from notify.api.keys import ApiKey, Bucket, Keyring, Scope
from notify.api.models import (
    I64_MAX,
    Disconnection,
    GroupList,
    GroupSummary,
    GroupView,
    MessagePage,
    PublishAnswer,
    Removal,
    StoredMessage,
)
from notify.api.openapi import (
    DEFAULT_LIMIT,
    IDEMPOTENCY_PATTERN,
    MAX_IDEMPOTENCY_KEY,
    MAX_LIMIT,
    MAX_MEMBER,
    MAX_TEXT,
    MEMBER_PATTERN,
    PREFIX,
    QUERY,
    USER_PATTERN,
    document,
)
from notify.api.publish import Publisher
from notify.core.actions import Action, Message
from notify.core.events import Order
from notify.core.group import Group
from notify.core.hub import Removal as HubRemoval
from notify.core.hub import valid_group_name
from notify.core.topic import TOTAL_STREAM
from notify.core.users import user_of
from notify.runtime.frames import exact
from notify.runtime.placement import NoOwner
from notify.server.app import NotifyServer, StoreError
from notify.server.listener import stop_accepting
from notify.storage.base import GroupInfo, LogPage
from notify.wire import payload_problem

T = TypeVar("T")

log = structlog.get_logger("notify.api")

#: store reads the API runs at once (the others wait their turn, within their deadline)
READERS = 4
#: groups one listing reads from the log when the key's globs may filter them out
LIST_SCAN = 1_000
_DIGITS = re.compile(r"[0-9]{1,19}")
_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_PATTERN[1:-1])
_PUBLISH_FIELDS = frozenset(("payload", "order", "atomic"))
_MEMBER = re.compile(MEMBER_PATTERN)
_USER = re.compile(USER_PATTERN)
#: how often a removal looks whether its view change is installed
INSTALL_POLL = 0.02
#: a request's API key, once the middleware knows it
_REQUEST_KEY = web.RequestKey("key", ApiKey)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(model: BaseModel | Mapping[str, Any], status: int = 200,
          headers: Mapping[str, str] | None = None) -> web.Response:
    data = model.model_dump() if isinstance(model, BaseModel) else model
    return web.Response(body=orjson.dumps(data), status=status, headers=headers,
                        content_type="application/json")


def _error(e: ApiError) -> web.Response:
    return web.Response(body=e.body(), status=e.status, headers=e.headers,
                        content_type="application/json")


def _count(name: str, text: str, low: int, high: int) -> int:
    """A non-negative decimal integer query parameter, strictly: `+1`, ` 1`, `1.0` are not."""
    if not _DIGITS.fullmatch(text) or not low <= int(text) <= high:
        raise bad_request(name, f"an integer from {low} to {high}, not {text[:40]!r}")
    return int(text)


def _query(request: web.Request, op: str) -> dict[str, str]:
    """The query parameters of operation `op`, each at most once, and no other (a misspelt
    one must not silently become its default)."""
    known = QUERY[op]
    out: dict[str, str] = {}
    for name, value in request.query.items():
        if name not in known:
            raise bad_request(name[:40], f"not a parameter of this call (it takes "
                                         f"{', '.join(known) or 'none'})")
        if name in out:
            raise bad_request(name, "given twice")
        out[name] = value
    return out


def _order(m: Message) -> Literal["fifo", "total"]:
    return "total" if m.stream == TOTAL_STREAM else "fifo"


def _users(members: tuple[str, ...]) -> dict[str, list[str]]:
    users: dict[str, list[str]] = {}
    for m in members:
        users.setdefault(user_of(m), []).append(m)
    return users


class ApiServer:
    def __init__(self, server: NotifyServer, keys: Keyring, *, host: str = "127.0.0.1",
                 port: int = 0, ssl: ssl_module.SSLContext | None = None,
                 rate: float = 1_000.0, burst: int = 2_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not len(keys):
            raise ValueError("the server API needs at least one key")
        self.server, self.keys = server, keys
        self.host, self.port, self.ssl = host, port, ssl
        self.rate, self.burst = rate, burst
        self._clock = clock
        self._buckets: dict[str, Bucket] = {}
        self._readers = asyncio.Semaphore(READERS)
        self._counter = server.metrics.api_requests
        #: each (endpoint, status)'s counter, looked up once (a labels() call per request was
        #: a few percent of a publish)
        self._counted: dict[tuple[str, int], Any] = {}
        #: the logger as configured now, bound once: a debug line per request is then a no-op
        #: call when debug is off, not a lazy proxy's bind per request
        self._log = log.bind()
        self.publisher = Publisher(server, self._read_message)
        # client_max_size: a publish's body is at most a frame's worth (413 past it)
        self.app = web.Application(middlewares=[self._middleware],
                                   client_max_size=server.config.limits.max_frame_bytes)
        r = self.app.router
        r.add_get(f"{PREFIX}/groups", self._list, name="listGroups")
        r.add_get(f"{PREFIX}/groups/{{group}}", self._group, name="getGroup")
        r.add_get(f"{PREFIX}/groups/{{group}}/messages", self._messages, name="getMessages")
        r.add_post(f"{PREFIX}/groups/{{group}}/messages", self._publish,
                   name="publishMessage")
        r.add_delete(f"{PREFIX}/groups/{{group}}/members/{{member}}", self._remove,
                     name="removeMember")
        r.add_post(f"{PREFIX}/users/{{user}}/disconnect", self._disconnect,
                   name="disconnectUser")
        r.add_get(f"{PREFIX}/openapi.json", self._openapi, name="getOpenAPI")
        self._document = orjson.dumps(document())
        # what other nodes of a cluster ask of this one as a group's owner (`_answer_call`)
        server.answers = self._answer_call
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        grace = max(0.1, min(self.server.shutdown_grace, 10.0))
        self._runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=grace,
                                     logger=_HttpLog(logging.getLogger("aiohttp.server")))
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self.host, self.port, ssl_context=self.ssl)
        await self._site.start()
        self.port = int(self._runner.addresses[0][1])
        log.info("api_listening", url=self.url, keys=[k.name for k in self.keys.keys])

    async def stop(self) -> None:
        """Stop accepting, let the requests under way finish (up to the shutdown grace)."""
        if self._runner is None:
            return
        server = getattr(self._site, "_server", None)
        if isinstance(server, asyncio.Server):  # (not a half-built connection left behind)
            await stop_accepting(server)
        await self._runner.cleanup()
        self._runner = None
        self.publisher.close()

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl else 'http'}://{self.host}:{self.port}"

    # -- every request -----------------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.monotonic()
        route = request.match_info.route.name
        endpoint = route or "other"
        key: ApiKey | None = None
        try:
            if route is not None and route != "getOpenAPI":
                key = self._authenticate(request)
                self._take(key)
                request[_REQUEST_KEY] = key
            response = await handler(request)
        except ApiError as e:
            response = _error(e)
        except web.HTTPException as e:  # aiohttp's own: no route, wrong method, too large
            response = _error(_http_error(e))
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("api_internal_error", method=request.method, path=request.path,
                          key=key.name if key is not None else None)
            response = _error(ApiError(ApiErrorCode.INTERNAL, "internal error"))
        counter = self._counted.get((endpoint, response.status))
        if counter is None:  # (bounded: the routes times the statuses they answer)
            counter = self._counted[(endpoint, response.status)] = self._counter.labels(
                endpoint, str(response.status))
        counter.inc()
        self._log.debug("api_request", method=request.method, path=request.path,
                  key=key.name if key is not None else None, status=response.status,
                  ms=round((time.monotonic() - started) * 1000, 3))
        return response

    def _authenticate(self, request: web.Request) -> ApiKey:
        header = request.headers.get("Authorization", "")
        scheme, _, secret = header.partition(" ")
        challenge = {"WWW-Authenticate": 'Bearer realm="notify"'}
        if not header:
            raise ApiError(ApiErrorCode.UNAUTHORIZED,
                           "no API key: send Authorization: Bearer SECRET", challenge)
        secret = secret.strip()
        if scheme.lower() != "bearer" or not secret:
            raise ApiError(ApiErrorCode.UNAUTHORIZED,
                           "the Authorization header is not `Bearer SECRET`", challenge)
        key = self.keys.find(secret)
        if key is None:
            raise ApiError(ApiErrorCode.UNAUTHORIZED, "unknown API key", challenge)
        return key

    def _take(self, key: ApiKey) -> None:
        if self.rate <= 0:
            return
        now = self._clock()
        bucket = self._buckets.get(key.name)
        if bucket is None:  # (one per configured key: bounded)
            bucket = self._buckets[key.name] = Bucket(tokens=self.burst, at=now,
                                                      rate=self.rate, burst=self.burst)
        wait = bucket.take(now)
        if wait > 0:
            raise ApiError(ApiErrorCode.RATE_LIMITED,
                           f"key {key.name!r} is over its {self.rate:g} requests/s",
                           {"Retry-After": str(max(1, math.ceil(wait)))})

    def _key(self, request: web.Request, scope: Scope, group: str | None = None) -> ApiKey:
        key: ApiKey = request[_REQUEST_KEY]
        if not key.allows(scope):
            raise ApiError(ApiErrorCode.FORBIDDEN, f"key {key.name!r} lacks the "
                                                   f"{scope.value!r} scope")
        if group is not None and not key.reaches(group):
            raise ApiError(ApiErrorCode.FORBIDDEN, f"key {key.name!r} does not reach group "
                                                   f"{group!r}")
        return key

    def _group_name(self, request: web.Request) -> str:
        name = request.match_info["group"]
        limits = self.server.config.limits
        if not valid_group_name(name, limits):
            raise bad_request("group", f"group names are 1-{limits.max_group_name} of "
                                       "A-Za-z0-9_.:/@-, starting with a letter or digit")
        return name

    def _serving(self) -> None:
        if self.server.draining:
            raise unavailable("the server is shutting down")

    async def _read(self, call: Callable[..., T], *args: Any) -> T:
        """A store call off the loop, bounded (503 when it fails or takes too long). A read
        answered 503 at its deadline holds its slot until its thread ends: `READERS` bounds
        the threads, not the waits."""
        try:
            async with asyncio.timeout(self.server.config.timeouts.write_timeout):
                await self._readers.acquire()
                read = asyncio.ensure_future(self.server.off_loop(call, *args))
                read.add_done_callback(self._read_ended)
                return await asyncio.shield(read)
        except TimeoutError:
            raise unavailable("the log did not answer in time; try again") from None
        except StoreError:
            raise unavailable("the log cannot be read right now; try again") from None

    def _read_ended(self, read: asyncio.Future[Any]) -> None:
        self._readers.release()
        if not read.cancelled() and read.exception() is not None:  # (also after its deadline)
            log.error("api_read_failed", error=str(read.exception()))

    async def _stored(self, name: str) -> GroupInfo | None:
        """The log's view of `name` (the first group at or after it under its own prefix)."""
        found = await self._read(self.server.store.list_groups, name, "", 1)
        return found[0] if found and found[0].group == name else None

    async def _read_message(self, group: str, offset: int) -> LogPage | None:
        page: LogPage | None = await self._read(self.server.store.read_page, group,
                                                offset - 1, 1,
                                                self.server.config.limits.history_page_bytes)
        return page

    # -- the endpoints -----------------------------------------------------------------------------

    async def _publish(self, request: web.Request) -> web.Response:
        self._key(request, Scope.PUBLISH)
        name = self._group_name(request)
        key = self._key(request, Scope.PUBLISH, name)
        _query(request, "publishMessage")
        idempotency_key = request.headers.get("Idempotency-Key")
        if idempotency_key is not None and not _IDEMPOTENCY_KEY.fullmatch(idempotency_key):
            raise bad_request("Idempotency-Key", f"1-{MAX_IDEMPOTENCY_KEY} printable ASCII "
                                                 "characters, no spaces")
        payload, order, atomic = self._publish_body(await request.read())
        self._serving()
        done = await self.publisher.publish(key.name, name, payload, order, atomic,
                                            idempotency_key)
        return _json(PublishAnswer(offset=done.offset, id=done.id, committed=done.committed),
                     headers={"Idempotent-Replayed": "true"} if done.replayed else None)

    def _publish_body(self, body: bytes) -> tuple[bytes, Order, bool]:
        """The request body, checked as the WebSocket edge checks a publish (G12): the
        payload's bytes as they will be stored, its order, whether atomic."""
        try:  # (pydantic's reader: an integer past 64 bits stays one, to be refused below)
            data = pydantic_core.from_json(body, allow_inf_nan=False)
        except ValueError as e:
            raise bad_request("body", f"not JSON: {str(e)[:200]}") from None
        if type(data) is not dict:
            raise bad_request("body", "a JSON object {\"payload\", \"order\"?, \"atomic\"?}")
        for field in data:
            if field not in _PUBLISH_FIELDS:
                raise bad_request(str(field)[:40], "not a field of a publish (it takes "
                                                   "payload, order, atomic)")
        if "payload" not in data:
            raise bad_request("payload", "required (null is a payload)")
        order = data.get("order", "fifo")
        if order not in ("fifo", "total"):
            raise bad_request("order", "\"fifo\" or \"total\"")
        atomic = data.get("atomic", False)
        if type(atomic) is not bool:
            raise bad_request("atomic", "true or false")
        limits = self.server.config.limits
        problem = payload_problem(data["payload"], limits.max_payload_depth)
        if problem is not None:
            raise bad_request("payload", problem)
        payload = exact(orjson.dumps(data["payload"]))
        if len(payload) > limits.max_frame_bytes:
            raise ApiError(ApiErrorCode.TOO_LARGE, f"payload: {len(payload)} bytes written, "
                                                   f"over max_frame_bytes "
                                                   f"({limits.max_frame_bytes})")
        return payload, Order(order), atomic

    async def _openapi(self, request: web.Request) -> web.Response:
        return web.Response(body=self._document, content_type="application/json")

    async def _group(self, request: web.Request) -> web.Response:
        self._key(request, Scope.READ)
        name = self._group_name(request)
        self._key(request, Scope.READ, name)
        _query(request, "getGroup")
        self._serving()
        g = self.server.hub.groups.get(name)
        if g is None:
            stored = await self._stored(name)
            g = self.server.hub.groups.get(name)  # (loaded meanwhile: the hub's is newer)
            if g is None:
                if stored is None:
                    raise unknown_group(name)
                return _json(GroupView(group=name, version=stored.view,
                                       members=list(stored.members),
                                       users=_users(stored.members)))
        members = g.view.members
        return _json(GroupView(group=name, version=g.view.version, members=list(members),
                               users=_users(members)))

    async def _messages(self, request: web.Request) -> web.Response:
        self._key(request, Scope.READ)
        name = self._group_name(request)
        self._key(request, Scope.READ, name)
        q = _query(request, "getMessages")
        after = _count("after", q["after"], 0, I64_MAX) if "after" in q else 0
        limit = _count("limit", q["limit"], 1, MAX_LIMIT) if "limit" in q else DEFAULT_LIMIT
        self._serving()
        page = await self._read(self.server.store.read_page, name, after, limit,
                                self.server.config.limits.history_page_bytes)
        # what the group in memory says now (after the read: it is at least as far on as the
        # log was when read)
        g: Group | None = self.server.hub.groups.get(name)
        if page is None:
            if g is None:
                raise unknown_group(name)
            return _json(MessagePage(messages=[], next=None, first=g.topic.first_retained))
        bound = g.readable_before() if g is not None else None
        readable = page.head if bound is None else min(page.head, bound - 1)
        covered = max(after, min(page.end, readable))
        messages = [
            StoredMessage(offset=m.offset, sender=m.sender, stream=m.stream, seq=m.seq,
                          order=_order(m), payload=m.payload, time=m.ts)
            for m in page.messages
            if m.offset <= covered and not (m.atomic and (
                m.offset in page.aborted or (g is not None and g.aborted(m.offset))))]
        return _json(MessagePage(messages=messages,
                                 next=covered if covered < readable else None,
                                 first=page.first))

    async def _list(self, request: web.Request) -> web.Response:
        key = self._key(request, Scope.READ)
        q = _query(request, "listGroups")
        prefix, cursor = q.get("prefix", ""), q.get("cursor", "")
        for field, value in (("prefix", prefix), ("cursor", cursor)):
            if len(value) > MAX_TEXT:
                raise bad_request(field, f"at most {MAX_TEXT} characters")
        limit = _count("limit", q["limit"], 1, MAX_LIMIT) if "limit" in q else DEFAULT_LIMIT
        self._serving()
        scan = limit + 1 if "*" in key.groups else max(limit + 1, LIST_SCAN)
        rows = await self._read(self.server.store.list_groups, prefix, cursor, scan)
        # the log's groups up to the last one read, and those in memory in that range (a group
        # in memory is answered from the hub: its view is the current one)
        boundary = rows[-1].group if len(rows) >= scan else None
        hub = self.server.hub.groups
        loaded = heapq.nsmallest(scan + 1, (  # (one more: says whether more follow)
            n for n in hub if n > cursor and n.startswith(prefix)
            and (boundary is None or n <= boundary)))
        stored = {r.group: r for r in rows}
        names = sorted(stored.keys() | set(loaded))
        more = boundary is not None or len(names) > scan
        names = names[:scan]
        out: list[GroupSummary] = []
        last = None
        for name in names:
            last = name
            if not key.reaches(name):
                continue
            g = hub.get(name)
            if g is not None:
                version, members, head = g.view.version, g.view.members, g.topic.durable
            else:
                r = stored[name]
                version, members, head = r.view, r.members, r.head
            out.append(GroupSummary(group=name, version=version, members=len(members),
                                    users=len({user_of(m) for m in members}), head=head))
            if len(out) == limit:
                break
        more = more or (last is not None and last != names[-1])
        return _json(GroupList(groups=out, next=last if more else None))


    # -- removal and disconnect (scope admin) ------------------------------------------------------

    def _name(self, request: web.Request, field: str, rule: re.Pattern[str], most: int) -> str:
        text = request.match_info[field]
        if len(text) > most or not rule.fullmatch(text):
            raise bad_request(field, f"1-{most} characters matching {rule.pattern}")
        return text

    async def _remove(self, request: web.Request) -> web.Response:
        self._key(request, Scope.ADMIN)
        name = self._group_name(request)
        self._key(request, Scope.ADMIN, name)
        member = self._name(request, "member", _MEMBER, MAX_MEMBER)
        _query(request, "removeMember")
        self._serving()
        if self.server.placement.owns(name):
            removal = await self._remove_here(name, member)
        else:
            removal = await self._remove_at_owner(name, member)
        return _json(removal)

    async def _remove_here(self, name: str, member: str) -> Removal:
        """The core decides who goes (`Hub.remove`, through the driver); this waits for the
        view without them to be installed and stored, or answers 503 at the deadline."""
        if name not in self.server.hub.groups:
            stored = await self._stored(name)
            if name not in self.server.hub.groups:  # (not loaded meanwhile)
                if stored is None:
                    raise unknown_group(name)
                # it left memory because its view was empty: nobody to remove
                raise unknown_member(name, member)
        done: list[HubRemoval] = []

        def call(now: float) -> list[Action]:
            removal = self.server.hub.remove(name, member, now)
            done.append(removal)
            return removal.actions

        self.server.driver.call(call, what="Remove")
        if not done:  # the core failed (logged by the driver)
            raise ApiError(ApiErrorCode.INTERNAL, "internal error")
        removal = done[0]
        if not removal.members:
            raise unknown_member(name, member)
        await self._installed(name, removal.version)
        return Removal(group=name, removed=list(removal.members), version=removal.version)

    async def _remove_at_owner(self, name: str, member: str) -> Removal:
        """Cluster mode, a group another node owns: the removal runs there, where its members
        are (`Placement.ask_owner`, answered by that node's `_answer_call`), with the same
        answers as here; 503 when no node owns the group now or its owner does not answer."""
        request = orjson.dumps({"op": "remove", "group": name, "member": member})
        try:
            raw = await self.server.placement.ask_owner(name, request, self._install_wait() + 2)
        except NoOwner as e:
            raise unavailable(f"{e}; try again") from None
        reply = orjson.loads(raw)
        if "error" in reply:
            raise ApiError(ApiErrorCode(reply["error"]["code"]), reply["error"]["message"],
                           {"Retry-After": "1"} if reply["error"]["code"] == "unavailable"
                           else None)
        if "busy" in reply or "failed" in reply:  # (notify/cluster/node.py `_on_call`)
            raise unavailable(f"{reply.get('busy') or reply['failed']}; try again")
        return Removal.model_validate(reply["ok"])

    async def _answer_call(self, request: bytes) -> bytes:
        """What another node of the cluster asks of this one as a group's owner (its server
        API's `_remove_at_owner`). A group this node does not own (any more) is answered 503,
        never done here: its members are elsewhere."""
        try:
            op = orjson.loads(request)
            if op.get("op") != "remove":
                raise ApiError(ApiErrorCode.BAD_REQUEST, f"no such operation {op.get('op')!r}")
            name, member = str(op["group"]), str(op["member"])
            self._serving()
            if not self.server.placement.owns(name):
                raise unavailable(f"{name!r} moved to another node while the removal crossed")
            removal = await self._remove_here(name, member)
        except ApiError as e:
            return orjson.dumps({"error": {"code": e.code.value, "message": e.message}})
        except (orjson.JSONDecodeError, KeyError, AttributeError, TypeError):
            return orjson.dumps({"error": {"code": "bad_request",
                                           "message": "an unreadable operation"}})
        return orjson.dumps({"ok": removal.model_dump()})

    def _install_wait(self) -> float:
        t = self.server.config.timeouts
        return 2 * t.flush_timeout + t.write_timeout  # a flush, a restart of it, the store

    async def _installed(self, name: str, version: int) -> None:
        wait = self._install_wait()
        try:
            async with asyncio.timeout(wait):
                while True:
                    g = self.server.hub.groups.get(name)
                    if g is None or g.halted:
                        raise unavailable(f"group {name!r} stopped before view {version} was "
                                          "installed")
                    if g.installed(version):
                        return
                    await asyncio.sleep(INSTALL_POLL)
        except TimeoutError:
            raise unavailable(f"view {version} of {name!r} was not installed within "
                              f"{wait:g} s; the removal goes on (read the group's view)"
                              ) from None

    async def _disconnect(self, request: web.Request) -> web.Response:
        key = self._key(request, Scope.ADMIN)
        if "*" not in key.groups:
            raise ApiError(ApiErrorCode.FORBIDDEN, f"key {key.name!r} does not reach every "
                                                   "group (`*`), which a disconnect acts on")
        user = self._name(request, "user", _USER, self.server.config.limits.max_group_name)
        _query(request, "disconnectUser")
        self._serving()
        try:
            async with asyncio.timeout(self.server.config.timeouts.write_timeout):
                ended, at = await self.server.disconnect_user(user)
        except TimeoutError:
            raise unavailable("the revocation was not stored in time; nothing was closed "
                              "(try again)") from None
        except StoreError:
            raise unavailable("the revocation could not be stored; nothing was closed "
                              "(try again)") from None
        return _json(Disconnection(user=user, sessions=list(ended), revoked_before=at))


class _HttpLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's own log (what it met before any handler ran): a request it could not parse is
    the client's fault, already answered 400, and one line at info here rather than a traceback
    at error level for every malformed request a client sends (Schemathesis sends a NUL in a
    header). Anything else aiohttp logs stays an error, with its traceback."""

    def exception(self, msg: object, *args: object, exc_info: Any = True,
                  **kwargs: Any) -> None:
        if isinstance(exc_info, HttpProcessingError):
            log.info("api_bad_http", peer=args[0] if args else None,
                     error=str(exc_info).splitlines()[0][:200])
            return
        self.logger.exception(msg, *args, exc_info=exc_info, **kwargs)


def _http_error(e: web.HTTPException) -> ApiError:
    """aiohttp's own answers (no such route, wrong method, body too large) as API errors."""
    if isinstance(e, web.HTTPMethodNotAllowed):
        return ApiError(ApiErrorCode.METHOD_NOT_ALLOWED, f"{e.method} is not allowed here",
                        {"Allow": ", ".join(sorted(e.allowed_methods))})
    if isinstance(e, web.HTTPRequestEntityTooLarge):
        return ApiError(ApiErrorCode.TOO_LARGE, "the request body is too large")
    if isinstance(e, web.HTTPNotFound):
        return ApiError(ApiErrorCode.NOT_FOUND, "no such endpoint (see /api/v1/openapi.json)")
    if 400 <= e.status < 500:
        return ApiError(ApiErrorCode.BAD_REQUEST, e.reason)
    return ApiError(ApiErrorCode.INTERNAL, "internal error")


__all__ = ["ApiServer"]
