"""The storage seam: where accepted messages, views and aborts are made durable (G1, G5, G10).

The core gives every message its offset; a `MessageLog` stores it. `append` returns None when the
message is already as durable as this store makes it (memory), or an awaitable that completes
when it is (a group commit). Stream workers await it before fan-out and before the publisher
hears `published`, so a `published` reply means stored (DESIGN §5).

Views and aborts are rare and must be durable *before* anyone hears of them, so their calls are
synchronous: a view version is never reused after a crash (G1), and an abort is never followed,
after a crash, by the same message counted as committed (G5). An atomic message with no stored
outcome is committed: it was never aborted, so no member can have been told otherwise.
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from notify.core.actions import Message, ViewInstall
from notify.core.checkpoint import Checkpoint


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


class MessageLog(Protocol):
    def append(self, message: Message) -> Awaitable[None] | None: ...

    def store_view(self, install: ViewInstall) -> None: ...

    def store_outcomes(self, group: str, offsets: tuple[int, ...], committed: bool) -> None: ...

    def load(self, recent: int) -> list[StoredGroup]: ...

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

    async def close(self) -> None: ...
