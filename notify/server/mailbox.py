"""A single-consumer queue for one worker task: a deque and a wake-up event.

asyncio.Queue does more than a fan-out worker needs (maxsize, putter waits, task_done); this is
the part we need, and `drain()` hands the consumer everything queued at once, which is what lets
a member's sender pack several frames into one `batch`. `put(..., wake=False)` queues without
waking the consumer, for a producer that may take the items itself (`take()`) on the loop's next
turn and wake the consumer (`wake()`) only if it cannot.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class Mailbox(Generic[T]):
    __slots__ = ("_items", "_wake")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._wake = asyncio.Event()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T, *, wake: bool = True) -> None:
        self._items.append(item)
        if wake:
            self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    def take(self) -> list[T]:
        """Everything queued, now (the consumer is not woken for it)."""
        items = list(self._items)
        self._items.clear()
        return items

    async def drain(self, limit: int = 1 << 30) -> list[T]:
        """Wait for at least one item, then take up to `limit` of them."""
        while not self._items:
            self._wake.clear()
            await self._wake.wait()
        items = self._items
        if len(items) <= limit:
            self._items = deque()
            return list(items)
        return [items.popleft() for _ in range(limit)]
