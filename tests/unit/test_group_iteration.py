"""`async for event in group` (client_sdk/group.py): its hot path takes a queued message without
a coroutine of its own; what it hands over must be what `next_event` would, in order, with the
group's record of what the application holds (a state snapshot's position) kept the same way."""

from __future__ import annotations

from typing import Any

from bench.sdkrecv import frames, joined
from client_sdk.events import Message, ViewInstalled


async def test_async_for_hands_over_every_message_in_order_and_records_what_it_gave() -> None:
    client, group = joined()  # (its own install: the record starts afresh there, a new dict)
    for d in frames(10, 4, "g", b'{"x":1}'):
        client._receive(d)  # 10 messages queued ahead of the reader: the hot path's case
    got: list[Any] = []
    async for e in group:
        got.append(e)
        if isinstance(e, Message) and e.seq == 7:
            assert group._delivered == {"fifo:pub": 7}  # what the application holds, no more
        if len(got) == 11:
            break
    assert isinstance(got[0], ViewInstalled)
    assert [(e.offset, e.seq) for e in got[1:]] == [(i, i) for i in range(1, 11)]
    assert group._delivered == {"fifo:pub": 10}
