"""The in-memory log: for tests and ephemeral deployments. Nothing survives a restart.

It keeps what the SQLite log keeps (retained messages, stream positions, the installs and the
aborts of each group), so a group that leaves the server's memory when nobody is in it (G14)
comes back the same, and `read_page` pages through it as through the SQLite log. Its own memory
is therefore bounded by retention per group ever used, not by what is live: use the SQLite log
for long-running servers.

View history: every install whose offset is at or after the message before the oldest retained
one (`first - 1`: a page after an offset retention kept can cross it), and always the latest;
older ones go as their messages do (the `retain` newest messages per group).

Threads: writes come from the event loop, `read_page` from a worker thread; a lock keeps a
reader from iterating a group's messages while an append extends them."""

from __future__ import annotations

import asyncio
import bisect
import itertools
import threading
from collections import deque
from collections.abc import Iterator

import orjson

from notify.core.actions import Append, Message, ViewInstall, Write
from notify.core.checkpoint import Checkpoint
from notify.runtime.ports import Done
from notify.storage.base import (
    MAX_LIST,
    GroupInfo,
    LogPage,
    StoredGroup,
    installs_between,
    page_of,
    recent_ids,
)


class MemoryLog:
    def __init__(self, retain: int = 100_000) -> None:
        self._retain = retain
        self._groups: dict[str, deque[Message]] = {}
        #: (group, key) -> chunks, staged or committed; group -> committed key
        self._chunks: dict[tuple[str, str], list[str]] = {}
        self._committed: dict[str, str] = {}
        #: user -> when its tokens were revoked (one per user; gone at restart, like the log)
        self._revoked: dict[str, float] = {}
        #: each group's installs in retention, ascending by view (the last is the latest)
        self._installs: dict[str, list[ViewInstall]] = {}
        self._aborted: dict[str, set[int]] = {}
        self._seqs: dict[str, dict[str, int]] = {}
        self._checkpoints: dict[str, Checkpoint] = {}
        self._lock = threading.Lock()  # writes (event loop) against `read_page` (a worker)

    def write(self, write: Write, done: Done) -> None:
        with self._lock:
            if isinstance(write, Append):
                log = self._groups.get(write.group)
                if log is None:
                    log = self._groups[write.group] = deque(maxlen=self._retain)
                log.extend(write.messages)
                seqs = self._seqs.setdefault(write.group, {})
                for m in write.messages:
                    seqs[m.stream] = m.seq
            else:
                self._installs.setdefault(write.group, []).append(write.install)
                self._aborted.setdefault(write.group, set()).update(write.aborted)
            self._trim_installs(write.group)
        # Answered on the loop's next turn, not at once: the publishes that arrive meanwhile
        # form the group's next batch (group commit with nothing to wait for), so a burst costs
        # one round through the core's write pipeline, not one per message.
        loop = asyncio.events._get_running_loop()  # (no exception per write without one)
        if loop is not None:
            loop.call_soon(done, None)
        else:  # no loop (a synchronous caller, the replay): nothing to batch with
            done(None)

    def _trim_installs(self, group: str) -> None:
        """Drop the installs retention took the messages around (module docstring)."""
        installs, log = self._installs.get(group), self._groups.get(group)
        if not installs or not log:
            return
        keep_from = log[0].offset - 1
        drop = 0
        while drop < len(installs) - 1 and installs[drop].offset < keep_from:
            drop += 1
        del installs[:drop]

    def load_group(self, group: str, recent: int) -> StoredGroup | None:
        with self._lock:
            installs = self._installs.get(group)
            if not installs:
                return None
            i = installs[-1]
            log = list(self._groups.get(group, ()))
            kept = {m.offset for m in log}
            head = log[-1].offset if log else i.offset
            window = log[-recent:] if recent > 0 else []
            return StoredGroup(group, i.epoch, i.view, i.members, head,
                               dict(self._seqs.get(group, {})), window,
                               frozenset(self._aborted.get(group, set()) & kept),
                               self._checkpoints.get(group), i,
                               log[0].offset if log else head + 1,
                               recent_ids(log[:len(log) - len(window)]))

    def list_groups(self, prefix: str, after: str, limit: int) -> list[GroupInfo]:
        with self._lock:
            names = sorted(g for g, installs in self._installs.items()
                           if installs and g > after and g.startswith(prefix))
            out = []
            for g in names[:min(limit, MAX_LIST)]:
                i, log = self._installs[g][-1], self._groups.get(g)
                out.append(GroupInfo(g, i.view, i.members, log[-1].offset if log else i.offset))
            return out

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

    def read_page(self, group: str, after: int, limit: int,
                  max_bytes: int) -> LogPage | None:
        with self._lock:
            log, installs = self._groups.get(group), self._installs.get(group, [])
            if log is None and not installs:
                return None
            head = log[-1].offset if log else 0
            first = log[0].offset if log else head + 1
            start = bisect.bisect_right(log, after, key=_offset) if log else 0
            messages = page_of(itertools.islice(log or (), start, None), limit, max_bytes, _size)
            end = messages[-1].offset if messages else head
            aborted = self._aborted.get(group, set())
            return LogPage(group, after, tuple(messages), installs_between(installs, after, end),
                           frozenset(m.offset for m in messages if m.offset in aborted),
                           first, head)

    def forget(self, group: str) -> None:
        """Nothing to re-take: one node writes this log."""

    def revoke(self, user: str, at: float) -> None:
        with self._lock:
            self._revoked[user] = max(at, self._revoked.get(user, at))

    def revocations(self) -> dict[str, float]:
        with self._lock:
            return dict(self._revoked)

    async def close(self) -> None:
        self._groups.clear()
        self._chunks.clear()


def _offset(m: Message) -> int:
    return m.offset


def _size(m: Message) -> int:
    """The payload's bytes as the other logs store them (a message built without its size,
    in a test, counts its serialised payload)."""
    return m.size or len(orjson.dumps(m.payload))
