"""The errors the SDK raises: `NotifyError` and its kinds. Pure (no I/O): the sans-I/O request
table (`client_sdk.requests`) makes them, the asyncio client raises them."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from client_sdk.events import GroupEvent, Reply

__all__ = [
    "ClientFailed",
    "ConnectError",
    "Disconnected",
    "GroupLeftError",
    "NotifyError",
    "PayloadTooLarge",
    "PublishQueueFull",
    "PublishRejected",
    "RequestTimeout",
    "ServerAPIError",
    "ServerRefused",
]


class NotifyError(Exception):
    """Base of every error the SDK raises."""


class ConnectError(NotifyError):
    """The server could not be reached (or the connection failed before `welcome`)."""


class ServerAPIError(NotifyError):
    """The server API (`ServerAPI`) answered an error: its HTTP `status`, its stable `code`
    (docs/api.md: `unauthorized`, `forbidden`, `unknown_group`, `bad_request`...) and what
    the server said (`message`)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


class ServerRefused(NotifyError):
    """The server answered a request with an `error` frame; `code` is its stable code
    (docs/protocol.md), e.g. `bad_frame` for a bad member id, `already_member`."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


class PublishRejected(NotifyError):
    """The server refused the message (`rejected` frame); it was delivered to no one.
    `code`: `stale_view`, `not_member`, `leaving`, `future_view`, `no_group`..."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


class PublishQueueFull(NotifyError):
    """More than `ClientOptions.max_pending_publishes` publishes are waiting for an answer."""


class GroupLeftError(NotifyError):
    """The group was left (or the member removed from it) before the publish could be sent."""


class RequestTimeout(NotifyError, TimeoutError):
    """A request (`join`, `publish`, `leave`, `checkpoint`, `refresh_token`) got no answer
    within `ClientOptions.request_timeout`. A publish that timed out may still have been stored:
    publish again with the same `publish_id` to learn its offset (never delivered twice)."""


class PayloadTooLarge(NotifyError, ValueError):
    """The serialised payload does not fit in the server's `max_frame_bytes` (its `welcome`
    says how much): the server would close the connection on it."""


class ClientFailed(NotifyError):
    """The client stopped (state CLOSED) because of a bug in the SDK, or because the server kept
    breaking the protocol; the message says which, `__cause__` is the original error. Pending
    calls and group iterators raise it. Connect again."""



class Replaced(NotifyError):
    """Another connection claimed this client's instance and the server kept the newer one
    (close 4002): two processes were given the same `instance`, or one's saved session was
    copied. The client is CLOSED rather than reconnecting into the same clash; `old` is the
    member id it had. A client whose instance the SDK picked takes a new one instead."""

    def __init__(self, old: str) -> None:
        super().__init__(f"instance {old!r} was claimed by a newer connection (close 4002)")
        self.old = old


class Disconnected(NotifyError):
    """The application's backend disconnected this client's user through the server API (close
    4007): the session is over and, with token authentication, the token it connected with is
    revoked. The client is CLOSED and does not reconnect with that token; pending calls and
    group iterators raise this. To come back, connect again with a token issued after the
    disconnect (a revoked one is refused `token_revoked`)."""

    def __init__(self, member: str) -> None:
        super().__init__(f"{member!r} was disconnected by the server (close 4007); connect "
                         "again with a new token")
        self.member = member


class ProtocolViolation(Exception):
    """The server sent something the protocol does not allow (a bug on its side), or a frame
    that does not parse. `events` and `replies` are what the frames before it produced (the
    protocol state already counts them: hand them over). Not a `NotifyError`: the client
    reconnects on it (`client_sdk.client`), the application never sees it."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.events: list[GroupEvent] = []
        self.replies: list[Reply] = []


class GapUnreadable(ProtocolViolation):
    """A gap's history was refused again and again on this connection: the host reconnects
    and resumes (what a violation makes it do), from the gap's frontier."""
