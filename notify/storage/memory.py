"""The in-memory log: for tests and ephemeral deployments. Nothing survives a restart."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from notify.core.actions import Append, Message, Write
from notify.core.checkpoint import Checkpoint
from notify.storage.base import Done, StoredGroup


class MemoryLog:
    def __init__(self, retain: int = 100_000) -> None:
        self._retain = retain
        self._groups: dict[str, deque[Message]] = {}
        #: (group, key) -> chunks, staged or committed; group -> committed key
        self._chunks: dict[tuple[str, str], list[str]] = {}
        self._committed: dict[str, str] = {}

    def write(self, write: Write, done: Done) -> None:
        if isinstance(write, Append):
            log = self._groups.get(write.group)
            if log is None:
                log = self._groups[write.group] = deque(maxlen=self._retain)
            log.extend(write.messages)
        # Views: nothing survives a restart, so there is nothing to keep consistent across one.
        done(None)

    def load(self, recent: int) -> list[StoredGroup]:
        return []

    def stage_checkpoint_chunk(self, group: str, key: str, index: int, data: str) -> None:
        chunks = self._chunks.setdefault((group, key), [])
        if index != len(chunks):
            raise ValueError(f"chunk {index} staged after {len(chunks)}")
        chunks.append(data)

    def checkpoint_chunks(self, group: str, key: str) -> Iterator[str]:
        return iter(list(self._chunks.get((group, key), ())))

    def commit_checkpoint(self, group: str, checkpoint: Checkpoint) -> None:
        old = self._committed.get(group)
        self._committed[group] = checkpoint.id
        if old is not None and old != checkpoint.id:
            self._chunks.pop((group, old), None)

    def discard_checkpoint(self, group: str, key: str) -> None:
        if self._committed.get(group) != key:
            self._chunks.pop((group, key), None)

    def prune(self, now: float) -> int:
        return 0  # bounded by count already (deque maxlen); gone at restart anyway

    def read_after(self, group: str, offset: int) -> Iterator[Message]:
        return (m for m in self._groups.get(group, ()) if m.offset > offset)

    async def close(self) -> None:
        self._groups.clear()
        self._chunks.clear()
