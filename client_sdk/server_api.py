"""The server API's Python client (docs/api.md): what an application backend calls, without
joining any group.

    async with ServerAPI("http://127.0.0.1:8080", key) as api:
        await api.publish("doc-1", {"saved": True})  # ApiPublished: offset, id, committed
        view = await api.group("doc-1")            # GroupPresence: members, users
        page = await api.history("doc-1", after=0)  # HistoryPage: messages, next
        async for m in api.messages("doc-1"):       # every message the log retains, in order
            ...
        listing = await api.groups(prefix="doc-")   # GroupList: groups, next
        await api.remove("doc-1", "ana#tab1")       # Removal (scope admin)
        await api.disconnect("ana")                 # Disconnection: closed 4007, revoked

Results are frozen dataclasses; an error answer raises `ServerAPIError(status, code, message)`
with the API's stable `code` (`unauthorized`, `forbidden`, `unknown_group`, `unknown_member`,
`bad_request`, `rate_limited`, `unavailable`...); a server that cannot be reached raises
`ConnectError`.
One aiohttp session (keep-alive) per `ServerAPI`: close it (`async with`, or `close()`).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
from yarl import URL

from client_sdk.errors import ConnectError, ServerAPIError

PREFIX = "/api/v1"


@dataclass(frozen=True, slots=True)
class GroupPresence:
    """A group's view: its version, its members (instances) and the users present."""

    group: str
    version: int
    members: tuple[str, ...]
    #: each user present, with its instances (member ids), in view order
    users: dict[str, tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """One message of a group's durable log."""

    offset: int
    sender: str
    stream: str
    seq: int
    order: str
    payload: Any
    #: when the server accepted it (Unix seconds)
    time: float


@dataclass(frozen=True, slots=True)
class HistoryPage:
    messages: tuple[StoredMessage, ...]
    #: the `after` of the next page; None: this page reached what the log holds now
    next: int | None
    #: the oldest offset the log retains
    first: int


@dataclass(frozen=True, slots=True)
class GroupSummary:
    group: str
    version: int
    members: int
    users: int
    head: int


@dataclass(frozen=True, slots=True)
class GroupList:
    groups: tuple[GroupSummary, ...]
    #: the `cursor` of the next page; None: no more
    next: str | None


@dataclass(frozen=True, slots=True)
class ApiPublished:
    """A message the server API published: it is in the group's durable log."""

    offset: int
    #: its publish id (the Idempotency-Key)
    id: str
    #: an atomic message's outcome (None for others)
    committed: bool | None
    #: answered from an earlier attempt with the same key (delivered once, by that one)
    replayed: bool


@dataclass(frozen=True, slots=True)
class Removal:
    group: str
    #: the member ids removed
    removed: tuple[str, ...]
    #: the view that no longer holds them (installed)
    version: int


@dataclass(frozen=True, slots=True)
class Disconnection:
    user: str
    #: the member ids whose sessions ended (their connections closed with 4007)
    sessions: tuple[str, ...]
    #: tokens of the user issued at or before this (Unix seconds) are refused; None: the
    #: server has no token authentication (development mode)
    revoked_before: float | None


class ServerAPI:
    def __init__(self, url: str, key: str, *, timeout: float = 10.0) -> None:
        base = url.rstrip("/")
        self.url = base.removesuffix(PREFIX)
        self._headers = {"Authorization": f"Bearer {key}"}
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ServerAPI:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _get(self, path: str, params: dict[str, str | int] | None = None) -> Any:
        return (await self._call("GET", path, params))[0]

    async def _call(self, method: str, path: str, params: dict[str, str | int] | None = None,
                    body: bytes | None = None, headers: dict[str, str] | None = None
                    ) -> tuple[Any, Mapping[str, str]]:
        """(JSON answer, headers) of a 2xx answer; else `ServerAPIError` or `ConnectError`."""
        if self._session is None:
            self._session = aiohttp.ClientSession(headers=self._headers, timeout=self._timeout)
        # encoded: a group name's `/` travels as %2F, as the API reads it
        url = URL(f"{self.url}{PREFIX}{path}", encoded=True)
        if params:
            url = url.with_query(params)
        if body is not None:
            headers = {"Content-Type": "application/json", **(headers or {})}
        try:
            async with self._session.request(method, url, data=body, headers=headers) as r:
                answer = await r.read()
                if 200 <= r.status < 300:
                    return _json(answer, r.status), r.headers
                error = _json(answer, r.status, strict=False)
        except (aiohttp.ClientError, TimeoutError) as e:
            raise ConnectError(f"server API at {self.url}: {e!r}") from e
        detail = error.get("error") if isinstance(error, dict) else None
        if isinstance(detail, dict):
            raise ServerAPIError(r.status, str(detail.get("code")), str(detail.get("message")))
        raise ServerAPIError(r.status, "unexpected_response",
                             answer[:200].decode(errors="replace"))

    async def publish(self, name: str, payload: Any, *, order: str = "fifo",
                      atomic: bool = False, idempotency_key: str | None = None,
                      retries: int = 3) -> ApiPublished:
        """Publish `payload` to group `name` without joining it (scope `publish`): it reaches
        every member of the current view, from the trusted sender `api:KEYNAME`. Returns once
        the message is in the durable log (an atomic one: once committed or aborted).

        Every call has an `Idempotency-Key` (a random one unless given), and a call the server
        could not answer for sure (503, or no answer at all) is retried with it up to
        `retries` times: the message is delivered once either way. A key used before with
        another payload raises `ServerAPIError` 409 `conflict`."""
        key = idempotency_key if idempotency_key is not None else secrets.token_urlsafe(16)
        body = orjson.dumps({"payload": payload, "order": order, "atomic": atomic})
        pause = 0.1
        for attempt in range(retries + 1):
            try:
                d, headers = await self._call("POST", f"/groups/{_segment(name)}/messages",
                                              body=body, headers={"Idempotency-Key": key})
            except (ConnectError, ServerAPIError) as e:
                if attempt == retries or (isinstance(e, ServerAPIError) and e.status != 503):
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
                continue
            return ApiPublished(d["offset"], d["id"], d["committed"],
                             headers.get("Idempotent-Replayed") == "true")
        raise AssertionError("unreachable")

    async def group(self, name: str) -> GroupPresence:
        """The group's current view and presence by user (scope `read`)."""
        d = await self._get(f"/groups/{_segment(name)}")
        return GroupPresence(d["group"], d["version"], tuple(d["members"]),
                             {u: tuple(ms) for u, ms in d["users"].items()})

    async def history(self, name: str, after: int = 0, limit: int = 100) -> HistoryPage:
        """The messages the log holds after offset `after`, at most `limit` (scope `read`)."""
        d = await self._get(f"/groups/{_segment(name)}/messages",
                            {"after": after, "limit": limit})
        return HistoryPage(tuple(StoredMessage(**m) for m in d["messages"]), d["next"],
                           d["first"])

    async def messages(self, name: str, after: int = 0,
                       page: int = 100) -> AsyncIterator[StoredMessage]:
        """Every message the log holds after `after`, in offset order, page by page, up to
        what it holds when the last page is read."""
        while True:
            p = await self.history(name, after, page)
            for m in p.messages:
                yield m
            if p.next is None:
                return
            after = p.next

    async def groups(self, prefix: str = "", limit: int = 100,
                     cursor: str | None = None) -> GroupList:
        """One page of the groups whose names start with `prefix`, after `cursor` (scope
        `read`; only the groups the key reaches)."""
        params: dict[str, str | int] = {"prefix": prefix, "limit": limit}
        if cursor is not None:
            params["cursor"] = cursor
        d = await self._get("/groups", params)
        return GroupList(tuple(GroupSummary(**g) for g in d["groups"]), d["next"])

    async def remove(self, group: str, member: str) -> Removal:
        """Remove `member` from `group` (scope `admin`): one instance (`user#instance`), or
        every instance of a user (a user id). Returns once the view without them is installed;
        its SDK gets `Removed` with reason `removed` and does not join again by itself.
        `ServerAPIError` `unknown_member` / `unknown_group` (404) if there is no such member."""
        d, _ = await self._call("DELETE", f"/groups/{_segment(group)}/members/"
                                          f"{_segment(member)}")
        return Removal(d["group"], tuple(d["removed"]), d["version"])

    async def disconnect(self, user: str) -> Disconnection:
        """Close every connection of `user` (close 4007: the SDKs do not reconnect with the
        same token) and, with token authentication, revoke its tokens issued until now
        (scope `admin`, a key that reaches every group)."""
        d, _ = await self._call("POST", f"/users/{_segment(user)}/disconnect")
        return Disconnection(d["user"], tuple(d["sessions"]), d["revoked_before"])


def _segment(name: str) -> str:
    return quote(name, safe="")


def _json(body: bytes, status: int, *, strict: bool = True) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        if strict:
            raise ServerAPIError(status, "unexpected_response",
                                 body[:200].decode(errors="replace")) from None
        return None


__all__ = [
    "ApiPublished",
    "Disconnection",
    "GroupList",
    "GroupPresence",
    "GroupSummary",
    "HistoryPage",
    "Removal",
    "ServerAPI",
    "StoredMessage",
]
