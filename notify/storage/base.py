"""The storage seam: where accepted messages are made durable (G10) before they go out.

The core gives every message its offset; a `MessageLog` stores it. `append` returns None when the
message is already as durable as this store makes it (memory), or an awaitable that completes
when it is (a group commit, issue 4). Stream workers await it before fan-out and before the
publisher hears `published`, so a `published` reply means stored (DESIGN §5).
"""

from __future__ import annotations

from collections.abc import Awaitable, Iterator
from typing import Protocol

from notify.core.actions import Message


class MessageLog(Protocol):
    def append(self, message: Message) -> Awaitable[None] | None: ...

    def read_after(self, group: str, offset: int) -> Iterator[Message]: ...

    async def close(self) -> None: ...
