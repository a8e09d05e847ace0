"""The in-memory log: for tests and ephemeral deployments. Nothing survives a restart.

It keeps what the SQLite log keeps (retained messages, stream positions, the last install and
the aborts of each group), so a group that leaves the server's memory when nobody is in it
(G14) comes back the same. Its own memory is therefore bounded by retention per group ever
used, not by what is live: use the SQLite log for long-running servers."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator

from notify.core.actions import Append, Message, ViewInstall, Write
from notify.core.checkpoint import Checkpoint
from notify.runtime.ports import Done
from notify.storage.base import StoredGroup


class MemoryLog:
    def __init__(self, retain: int = 100_000) -> None:
        self._retain = retain
        self._groups: dict[str, deque[Message]] = {}
        #: (group, key) -> chunks, staged or committed; group -> committed key
        self._chunks: dict[tuple[str, str], list[str]] = {}
        self._committed: dict[str, str] = {}
        self._installs: dict[str, ViewInstall] = {}
        self._aborted: dict[str, set[int]] = {}
        self._seqs: dict[str, dict[str, int]] = {}
        self._checkpoints: dict[str, Checkpoint] = {}

    def write(self, write: Write, done: Done) -> None:
        if isinstance(write, Append):
            log = self._groups.get(write.group)
            if log is None:
                log = self._groups[write.group] = deque(maxlen=self._retain)
            log.extend(write.messages)
            seqs = self._seqs.setdefault(write.group, {})
            for m in write.messages:
                seqs[m.stream] = m.seq
        else:
            self._installs[write.group] = write.install
            self._aborted.setdefault(write.group, set()).update(write.aborted)
        # Answered on the loop's next turn, not at once: the publishes that arrive meanwhile
        # form the group's next batch (group commit with nothing to wait for), so a burst costs
        # one round through the core's write pipeline, not one per message.
        loop = asyncio.events._get_running_loop()  # (no exception per write without one)
        if loop is not None:
            loop.call_soon(done, None)
        else:  # no loop (a synchronous caller, the replay): nothing to batch with
            done(None)

    def load_group(self, group: str, recent: int) -> StoredGroup | None:
        i = self._installs.get(group)
        if i is None:
            return None
        log = list(self._groups.get(group, ()))
        kept = {m.offset for m in log}
        return StoredGroup(group, i.epoch, i.view, i.members,
                           log[-1].offset if log else i.offset, dict(self._seqs.get(group, {})),
                           log[-recent:], frozenset(self._aborted.get(group, set()) & kept),
                           self._checkpoints.get(group), i)

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
        self._checkpoints[group] = checkpoint
        if old is not None and old != checkpoint.id:
            self._chunks.pop((group, old), None)

    def discard_checkpoint(self, group: str, key: str) -> None:
        if self._committed.get(group) != key:
            self._chunks.pop((group, key), None)

    def prune(self, now: float) -> int:
        return 0  # bounded by count already (deque maxlen); gone at restart anyway

    def read_after(self, group: str, offset: int) -> Iterator[Message]:
        return (m for m in self._groups.get(group, ()) if m.offset > offset)

    def forget(self, group: str) -> None:
        """Nothing to re-take: one node writes this log."""

    async def close(self) -> None:
        self._groups.clear()
        self._chunks.clear()
