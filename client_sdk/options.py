"""What an application chooses and gets back: `ClientOptions` (with its `Backoff`), the connection
states, and the results of requests (`View`, `PublishResult`). Pure data, no I/O."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from client_sdk.presence import users

__all__ = [
    "Backoff",
    "ClientOptions",
    "ConnectionState",
    "PublishResult",
    "StateProvider",
    "View",
]


class ConnectionState(StrEnum):
    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"  # lost; waiting for the backoff delay or trying again
    CLOSED = "closed"  # by `close()`, or reconnecting gave up


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter: attempt n waits uniform(0, min(cap, base·2ⁿ))."""

    base: float = 0.05
    cap: float = 5.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        return rng.uniform(0.0, min(self.cap, self.base * (2.0 ** min(attempt, 30))))


@dataclass(frozen=True, slots=True)
class ClientOptions:
    reconnect: bool = True
    backoff: Backoff = field(default_factory=Backoff)
    #: give up (state CLOSED) after this many failed attempts in a row; None: never
    max_attempts: int | None = None
    #: publishes waiting to be sent or answered; one more raises PublishQueueFull
    max_pending_publishes: int = 1_000
    connect_timeout: float = 10.0
    #: WebSocket pings: a link that stalls (no pong within the timeout) counts as lost, and the
    #: client reconnects; the server's defaults are 5 s / 15 s
    heartbeat_interval: float = 5.0
    heartbeat_timeout: float = 15.0
    #: seconds a request (join, publish, leave, checkpoint, refresh_token) waits for its answer,
    #: RECONNECTING time included; None: no deadline
    request_timeout: float | None = 30.0
    #: events a group holds that the application has not taken; when one group reaches it the
    #: client stops reading the connection until the application has taken half of them
    #: (backpressure: the server sees a slow consumer). None: no bound.
    max_queued_events: int | None = 10_000


@dataclass(frozen=True, slots=True)
class View:
    version: int
    members: tuple[str, ...]

    @property
    def users(self) -> dict[str, tuple[str, ...]]:
        """Each user present, with its instances (client_sdk/presence.py)."""
        return users(self.members)


@dataclass(frozen=True, slots=True)
class PublishResult:
    id: str
    offset: int
    #: for atomic messages: True when delivered everywhere, False when aborted; None otherwise
    committed: bool | None = None
    reason: str | None = None



class StateProvider(Protocol):
    """The application's replicated state, for state transfer (G9). `snapshot()` is called when
    this member is the donor, at the exact point of its event stream where the joiner came in
    (every earlier event has been handed to the application, no later one); `restore()` is
    called on a joiner before it gets any event the snapshot does not include."""

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes) -> None: ...

