"""A group's queue of events for the application: `asyncio.Queue`'s behaviour for this one use,
at a fraction of its cost per event.

Every delivered message passes through one put and one get, so the queue is on the SDK's hot
path; `asyncio.Queue` pays there for what this use never needs (a `maxsize`, `task_done`
accounting, waking a putter). The bound is the reader's (`Client._backpressure` stops reading
the socket), not the queue's. Getters wait in order, as with `asyncio.Queue`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class EventQueue(Generic[T]):
    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._getters: deque[asyncio.Future[None]] = deque()

    def put_nowait(self, item: T) -> None:
        self._items.append(item)
        if self._getters:
            self._wake_next()

    def get_nowait(self) -> T:
        """The oldest item; `IndexError` when empty (check `empty()` first)."""
        return self._items.popleft()

    async def get(self) -> T:
        while not self._items:
            getter = asyncio.get_running_loop().create_future()
            self._getters.append(getter)
            try:
                await getter
            except BaseException:
                getter.cancel()
                # A getter given up on (a timeout) leaves the table, or a consumer that polls
                # with a timeout would grow it by one entry per poll.
                with contextlib.suppress(ValueError):
                    self._getters.remove(getter)
                if self._items and not getter.cancelled():
                    self._wake_next()  # it was woken, then cancelled: pass the turn on
                raise
        return self._items.popleft()

    def _wake_next(self) -> None:
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
                return

    def pop_if(self, kind: type[T]) -> T | None:
        """The oldest item if it is exactly of type `kind` (taken), else None (nothing taken)."""
        items = self._items
        if items and type(items[0]) is kind:
            return items.popleft()
        return None

    def empty(self) -> bool:
        return not self._items

    def qsize(self) -> int:
        return len(self._items)
