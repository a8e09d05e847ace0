"""The ports: what the driver asks of the host it runs in, and nothing more.

A host is the driver plus I/O. The asyncio server answers these with sockets, outboxes, SQLite
and a thread pool; the cluster with links between nodes and a fenced JetStream log; the
simulator with seeded queues; the Spark replay with a simulated clock. Because every rule is in
the core or the driver, and a host only implements these few methods, the simulator and the
replay test exactly the rules the server runs.

Each port is a `Protocol`: a host implements it by having the methods, without importing
anything from here but the types.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from notify.core.actions import (
    CommitCheckpoint,
    DiscardCheckpoint,
    LogEvent,
    Message,
    ServeCheckpoint,
    StoreCheckpointChunk,
    ViewInstall,
    Write,
)
from notify.core.config import CoreConfig
from notify.core.group import Group

#: storage's answer to a write: None when it is durable, else what went wrong
Done = Callable[[str | None], None]


class Fenced(str):
    """A write's answer that means this node's copy of the group can no longer be trusted:
    another node owns the group now (the log is the fence, DESIGN §9, and a deposed owner that
    wrote is told so), or the log could not say whether the write is stored (it may be: it
    must not be retracted). The driver then drops the group here (its members reconnect and
    resume, at the owner, which rebuilds it from the log) instead of failing the write."""

    __slots__ = ()

CheckpointAction = StoreCheckpointChunk | CommitCheckpoint | DiscardCheckpoint | ServeCheckpoint


class Restorable(Protocol):
    """What the log gives back of one group (notify.storage's `StoredGroup`)."""

    def restore(self, config: CoreConfig, now: float) -> Group: ...


#: the log's answer to a fetch: the group (None if the log never had it), or what went wrong
Fetched = Callable[[Restorable | None, str | None], None]


class Page(Protocol):
    """One page of a group's log (notify.storage's `LogPage`)."""

    @property
    def messages(self) -> Sequence[Message]: ...

    @property
    def installs(self) -> Sequence[ViewInstall]: ...

    @property
    def aborted(self) -> frozenset[int]: ...

    @property
    def first(self) -> int: ...

    @property
    def head(self) -> int: ...

    @property
    def end(self) -> int: ...


#: the log's answer to a page read: the page (None if the log never had the group), or what
#: went wrong
Paged = Callable[[Page | None, str | None], None]


class Transport(Protocol):
    """Bytes to a member's connection, wherever its socket is."""

    def push(self, conn: int, data: bytes, *, bounded: bool = True, frames: int = 1) -> None:
        """Queue a serialised frame for `conn` (dropped if it is gone): one frame, or a `batch`
        frame of `frames` frames. `bounded` False for a replay, which does not count against
        the member's outbound bound (G11)."""

    def close(self, conn: int, code: int, reason: str, *, drain: bool) -> None:
        """Close `conn` with `code`; with `drain`, the frames queued before go out first. The
        driver tells the hub at once: the host need not report this close back."""


class Store(Protocol):
    """The durable log (G1, G5, G10), as the driver uses it."""

    def write(self, write: Write, done: Done) -> None:
        """Make `write` durable, then call `done` once (at once, or later on the loop)."""

    def fetch(self, group: str, answer: Fetched) -> None:
        """Read `group` back from the log (it left memory, G14), then call `answer` once: at
        once or later. The driver holds the group's frames meanwhile, and gives up after its
        load deadline (a late answer is ignored)."""

    def forget(self, group: str) -> None:
        """`group` left this node (its shard moved, or a write was `Fenced`): a log that
        fences takes it over again if it comes back. Nothing to do for a log of one node."""

    def read(self, group: str, after: int, limit: int, max_bytes: int, answer: Paged) -> None:
        """Read the page of `group`'s log after offset `after` (at most `limit` messages and
        about `max_bytes` of payload), off the event loop, then call `answer` once: at once or
        later. The driver asks one page at a time per connection."""


class Observer(Protocol):
    """What the core reports and asks that is neither a frame nor a write."""

    def event(self, e: LogEvent) -> None:
        """A delivery-log event (DESIGN §6), also what metrics count."""

    def checkpoint(self, a: CheckpointAction) -> None:
        """A state checkpoint chunk to stage, commit, discard or serve (state_transfer)."""

    def halt(self, reason: str) -> None:
        """Stop: the core can no longer keep a promise (G13 fail-stop)."""


__all__ = ["CheckpointAction", "Done", "Fenced", "Fetched", "Observer", "Page", "Paged",
           "Restorable", "Store", "Transport"]
