"""The storage seam: where accepted messages, views and aborts are made durable (G1, G5, G10).

The core decides what to store and when (notify/core/writes.py): each group has at most one
write under way, an `Append` (a batch of consecutive messages) or a `StoreView` (an install and
the atomic messages it aborted). `write(w, done)` makes it durable and then calls `done(None)`,
or `done(reason)` if it could not; `done` is called exactly once, either inside `write` (a store
with nothing to wait for) or later on the event loop (a group commit). Until then the group
holds every frame it decides, so a `published`, a `deliver`, a replay or a `view_install` never
speaks of something the log does not hold (DESIGN §5).

A failed `Append` is retracted by the core and its publishers refused; a failed `StoreView` stops
the server (fail-stop, G13). An atomic message with no stored outcome is committed: it was never
aborted, so no member can have been told otherwise.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from notify.core.actions import Message, ViewInstall, Write
from notify.core.checkpoint import Checkpoint
from notify.core.config import CoreConfig, Limits
from notify.core.group import Group
from notify.runtime.ports import Done


class CheckpointSuperseded(Exception):
    """`commit_checkpoint` found another checkpoint committed meanwhile, or one further on
    (another owner's, in a cluster): this one is not committed, and its chunks are gone."""


#: publish ids a reload brings back per sender, besides those of the window's messages (the
#: core's default `idempotency_window`)
RECENT_IDS = Limits().idempotency_window
#: seconds the publish ids of pruned messages are kept for idempotent retries (a retry comes
#: within minutes; G14): the SQLite log's `sender_ids`, the JetStream log's pruned records
SENDER_IDS_AGE = 86_400.0


def recent_ids(older: Iterable[Message]) -> list[tuple[str, str, int]]:
    """`StoredGroup.ids` from the retained messages before the window (in offset order): the
    last `RECENT_IDS` of each sender."""
    return last_ids((m.sender, m.id, m.offset) for m in older)


def last_ids(ids: Iterable[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """The last `RECENT_IDS` of each sender of `ids` ((sender, id, offset), in offset order),
    oldest first."""
    per: dict[str, deque[tuple[str, str, int]]] = {}
    for x in ids:
        q = per.get(x[0])
        if q is None:
            q = per[x[0]] = deque(maxlen=RECENT_IDS)
        q.append(x)
    return sorted((x for q in per.values() for x in q), key=lambda x: x[2])


@dataclass(frozen=True, slots=True)
class StoredGroup:
    """What a restart brings back of one group."""

    group: str
    epoch: int
    view: int
    members: tuple[str, ...]
    head: int
    seqs: dict[str, int] = field(default_factory=dict)
    recent: list[Message] = field(default_factory=list)
    aborted: frozenset[int] = frozenset()
    checkpoint: Checkpoint | None = None
    #: the install of `view` (members, joined, left, offset), when stored
    install: ViewInstall | None = None
    #: the oldest offset the log retains (`head + 1`: none); None: not known, only `recent`
    #: is then known to be there (catch-up past it is refused, notify/core/catchup.py)
    first: int | None = None
    #: the publish ids of the retained messages before `recent` (sender, id, offset; oldest
    #: first; at most `RECENT_IDS` per sender): a retry of one is known after a reload
    ids: list[tuple[str, str, int]] = field(default_factory=list)

    def restore(self, config: CoreConfig, now: float) -> Group:
        """The group as the core had it: after a restart (its members SUSPECT for the recovery
        window), or back in memory after it left (G14)."""
        return Group.restored(self.group, config, epoch=self.epoch, view=self.view,
                              head=self.head, seqs=self.seqs, recent=self.recent,
                              outcomes={o: False for o in self.aborted},
                              checkpoint=self.checkpoint, install=self.install, now=now,
                              log_first=self.first, ids=self.ids)


@dataclass(frozen=True, slots=True)
class LogPage:
    """One page of a group's log after an offset, in log order: catch-up's and history's read
    (`MessageLog.read_page`). Paging with `after = page.end` until `end == head` returns every
    retained message exactly once, each install whose offset the pages cover, and the aborts
    of their atomic messages, so a member far behind is caught up from the log alone (issue 30).

    `first > after + 1` says retention took messages the caller asked for: `first - after - 1`
    of them are gone (the page starts at `first`)."""

    group: str
    #: the offset the page was asked for after
    after: int
    #: offsets > `after`, ascending and consecutive as stored; at most `limit` of them, and no
    #: more payload bytes than `max_bytes` unless the first message alone is larger (a page has
    #: at least one message when any is stored after `after`)
    messages: tuple[Message, ...]
    #: every stored install with `after <= offset <= end`, ascending by view (an install at
    #: offset o came after message o; one at `after` is there too: the caller dedupes by view)
    installs: tuple[ViewInstall, ...]
    #: the offsets among `messages` whose atomic message was aborted
    aborted: frozenset[int]
    #: the oldest offset the log retains for the group now (`head + 1` when it retains none)
    first: int
    #: the group's last stored offset when read (0: none)
    head: int

    @property
    def end(self) -> int:
        """The offset the page covers up to: its last message's, or `head` when it has none
        (the page reached the head)."""
        return self.messages[-1].offset if self.messages else self.head


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """What the log says of a group without loading it (`MessageLog.list_groups`): its latest
    stored view and its head."""

    group: str
    view: int
    members: tuple[str, ...]
    #: the group's last stored offset (0: none)
    head: int


#: the most groups one `list_groups` call returns
MAX_LIST = 10_000


def page_of(candidates: Iterable[Message], limit: int, max_bytes: int,
            size: Callable[[Message], int]) -> list[Message]:
    """The messages of a page out of `candidates` (offsets > `after`, ascending): at most
    `limit`, and no more than `max_bytes` of payloads unless the first alone is larger. Shared
    by the stores, so they cut pages alike; `candidates` is consumed only as far as needed."""
    if limit < 1:
        raise ValueError(f"a page holds at least one message (limit {limit})")
    out: list[Message] = []
    total = 0
    for m in candidates:
        n = size(m)
        if out and (len(out) >= limit or total + n > max_bytes):
            break
        out.append(m)
        total += n
        if len(out) >= limit or total >= max_bytes:
            break
    return out


def installs_between(installs: Iterable[ViewInstall], after: int,
                     end: int) -> tuple[ViewInstall, ...]:
    """The installs a page covers (`after <= offset <= end`), ascending by view."""
    return tuple(sorted((i for i in installs if after <= i.offset <= end), key=lambda i: i.view))


class MessageLog(Protocol):
    def write(self, write: Write, done: Done) -> None: ...

    def load(self, recent: int) -> list[StoredGroup]:
        """At start-up: the groups to bring back at once (those whose view has members)."""
        ...

    def load_group(self, group: str, recent: int) -> StoredGroup | None:
        """One group, when it is needed again after it left memory (G14); None if the log
        never had it. Blocking: the adapter calls it off the event loop."""
        ...

    def read_page(self, group: str, after: int, limit: int,
                  max_bytes: int) -> LogPage | None:
        """Up to `limit` messages of `group` after offset `after` (None: the log never had the
        group), with the installs and aborts they cross (`LogPage`). Blocking: the adapter
        calls it off the event loop; safe to call concurrently with writes."""
        ...

    def list_groups(self, prefix: str, after: str, limit: int) -> list[GroupInfo]:
        """The groups with a stored view whose names start with `prefix` and sort after
        `after` (by code point), in name order, at most `limit` (<= `MAX_LIST`): the server
        API's listing. Blocking: the adapter calls it off the event loop."""
        ...

    # Checkpoints (blocking: the adapter calls these off the event loop, one at a time). An
    # upload is staged under `key` chunk by chunk and becomes the group's checkpoint only at
    # `commit_checkpoint`, which also drops the previous one's chunks.

    def stage_checkpoint_chunk(self, group: str, key: str, index: int, data: str) -> None: ...

    def checkpoint_chunks(self, group: str, key: str) -> Iterator[str]:
        """The chunks stored under `key`, in order, read as they are iterated (a checkpoint
        replaced since has none left)."""
        ...

    def commit_checkpoint(self, group: str, checkpoint: Checkpoint) -> None: ...

    def discard_checkpoint(self, group: str, key: str) -> None: ...

    def prune(self, now: float) -> int:
        """Apply retention (count and age); returns how many messages were deleted. Blocking:
        the adapter calls it off the event loop."""
        ...

    def forget(self, group: str) -> None:
        """`group` left this node (notify/runtime/ports.py `Store.forget`)."""
        ...

    # Token revocation (the server API's `POST /users/{user}/disconnect`, docs/api.md): one row
    # per user, the time of its latest revocation; a token of that user issued (`iat`) at or
    # before it is refused. Kept beside the log so that a restart keeps refusing them.

    def revoke(self, user: str, at: float) -> None:
        """Record that `user`'s tokens issued at or before `at` are refused (replaces an
        earlier revocation of the user). Blocking: the adapter calls it off the event loop."""
        ...

    def revocations(self) -> dict[str, float]:
        """Every user's revocation time (read at start-up)."""
        ...

    async def close(self) -> None: ...
