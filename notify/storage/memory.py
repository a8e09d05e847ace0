"""The in-memory log: for tests and ephemeral deployments. Nothing survives a restart."""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Iterator

from notify.core.actions import Message
from notify.storage.base import StoredGroup


class MemoryLog:
    def __init__(self, retain: int = 100_000) -> None:
        self._retain = retain
        self._groups: dict[str, deque[Message]] = {}

    def append(self, message: Message) -> Awaitable[None] | None:
        log = self._groups.get(message.group)
        if log is None:
            log = self._groups[message.group] = deque(maxlen=self._retain)
        log.append(message)
        return None

    def store_view(self, group: str, epoch: int, view: int, members: tuple[str, ...]) -> None:
        pass  # nothing survives a restart, so there is nothing to keep consistent across one

    def store_outcomes(self, group: str, offsets: tuple[int, ...], committed: bool) -> None:
        pass

    def load(self, recent: int) -> list[StoredGroup]:
        return []

    def prune(self, now: float) -> int:
        return 0  # bounded by count already (deque maxlen); gone at restart anyway

    def read_after(self, group: str, offset: int) -> Iterator[Message]:
        return (m for m in self._groups.get(group, ()) if m.offset > offset)

    async def close(self) -> None:
        self._groups.clear()
