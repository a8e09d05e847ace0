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

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from notify.core.actions import Message, ViewInstall, Write
from notify.core.checkpoint import Checkpoint
from notify.core.config import CoreConfig
from notify.core.group import Group
from notify.runtime.ports import Done


class CheckpointSuperseded(Exception):
    """`commit_checkpoint` found another checkpoint committed meanwhile, or one further on
    (another owner's, in a cluster): this one is not committed, and its chunks are gone."""


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

    def restore(self, config: CoreConfig, now: float) -> Group:
        """The group as the core had it: after a restart (its members SUSPECT for the recovery
        window), or back in memory after it left (G14)."""
        return Group.restored(self.group, config, epoch=self.epoch, view=self.view,
                              head=self.head, seqs=self.seqs, recent=self.recent,
                              outcomes={o: False for o in self.aborted},
                              checkpoint=self.checkpoint, install=self.install, now=now)


class MessageLog(Protocol):
    def write(self, write: Write, done: Done) -> None: ...

    def load(self, recent: int) -> list[StoredGroup]:
        """At start-up: the groups to bring back at once (those whose view has members)."""
        ...

    def load_group(self, group: str, recent: int) -> StoredGroup | None:
        """One group, when it is needed again after it left memory (G14); None if the log
        never had it. Blocking: the adapter calls it off the event loop."""
        ...

    def read_after(self, group: str, offset: int) -> Iterator[Message]: ...

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

    async def close(self) -> None: ...
