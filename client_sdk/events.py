"""Typed events the SDK hands to the application, and replies to its requests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Message:
    group: str
    offset: int
    stream: str
    seq: int
    sender: str
    view: int
    atomic: bool
    payload: Any
    ts: float


@dataclass(frozen=True, slots=True)
class ViewInstalled:
    group: str
    view: int
    members: tuple[str, ...]
    joined: tuple[str, ...]
    left: tuple[str, ...]
    offset: int


@dataclass(frozen=True, slots=True)
class ViewChanging:
    group: str
    proposed: int
    members: tuple[str, ...]
    joining: tuple[str, ...]
    leaving: tuple[str, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class ViewResumed:
    group: str
    view: int


@dataclass(frozen=True, slots=True)
class CaughtUp:
    group: str
    offset: int
    count: int


@dataclass(frozen=True, slots=True)
class StateReceived:
    """The group's state for this joiner (G9): `snapshot` is the donor's bytes, verified, or
    None when no member could give it (`reason` says why); the SDK has already passed it to the
    `StateProvider.restore`. Every later event is one the snapshot does not include."""

    group: str
    offset: int
    snapshot: bytes | None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class StateRequested:
    """For the SDK, not the application: a joiner needs this member's state, now."""

    group: str
    transfer: str
    joiner: str
    offset: int


@dataclass(frozen=True, slots=True)
class Removed:
    """This member is no longer in the group (it left, or the group removed it)."""

    group: str
    view: int


GroupEvent = (Message | ViewInstalled | ViewChanging | ViewResumed | CaughtUp | Removed
              | StateReceived | StateRequested)


# -- replies to requests (matched by `req` or publish `id`) ------------------------------------


@dataclass(frozen=True, slots=True)
class Published:
    req: str
    id: str
    offset: int


@dataclass(frozen=True, slots=True)
class Rejected:
    req: str
    id: str
    code: str


@dataclass(frozen=True, slots=True)
class Outcome:
    id: str
    group: str
    offset: int
    committed: bool
    reason: str | None


@dataclass(frozen=True, slots=True)
class ServerError:
    code: str
    message: str
    req: str | None


Reply = Published | Rejected | Outcome | ServerError
