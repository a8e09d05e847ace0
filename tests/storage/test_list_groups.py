"""`MessageLog.list_groups` (issue 31: the server API's group listing), one contract for the
three logs: the groups with a stored view, by name, after a cursor and under a prefix, each with
its latest view and its head; nothing else (a group with only messages has no view yet)."""

from __future__ import annotations

import asyncio

from notify.core.actions import Append, Message, StoreView, ViewInstall
from notify.storage.base import GroupInfo, MessageLog
from tests.storage.test_log_pages import Logs, logs, nats_urls, write

__all__ = ["logs", "nats_urls"]  # (the fixtures, shared with the pages' tests)


async def listed(log: MessageLog, prefix: str, after: str, limit: int) -> list[GroupInfo]:
    return await asyncio.wait_for(asyncio.to_thread(log.list_groups, prefix, after, limit), 60)


async def test_list_groups_by_name_after_a_cursor_under_a_prefix(logs: Logs) -> None:
    log = await logs.open()
    for n, group in enumerate(["b/2", "a:1", "b/1", "b/10", "c", "bz"], 1):
        assert await write(log, StoreView(n, ViewInstall(group, 1, ("u#1", "u#2", "v"),
                                                         ("u#1", "u#2", "v"), (), 5, 0))) is None
        messages = tuple(Message(group, o, "fifo:v", o, "v", 1, False, {"o": o}, 1.0, f"i{o}")
                         for o in range(1, n + 1))
        assert await write(log, Append(group, 100 + n, messages)) is None
        assert await write(log, StoreView(200 + n, ViewInstall(group, 2, ("v",), (),
                                                               ("u#1", "u#2"), 5, n))) is None
    # only messages, no view: not a group the listing knows yet
    assert await write(log, Append("b/0", 300, (Message("b/0", 1, "fifo:v", 1, "v", 1, False,
                                                        1, 1.0, "x"),))) is None

    everything = await listed(log, "", "", 100)
    assert [g.group for g in everything] == ["a:1", "b/1", "b/10", "b/2", "bz", "c"]
    assert everything[0] == GroupInfo("a:1", 2, ("v",), 2)
    assert {g.group: g.head for g in everything} == {"b/2": 1, "a:1": 2, "b/1": 3, "b/10": 4,
                                                     "c": 5, "bz": 6}
    assert [g.group for g in await listed(log, "b/", "", 100)] == ["b/1", "b/10", "b/2"]
    assert [g.group for g in await listed(log, "b/", "b/1", 1)] == ["b/10"]
    assert [g.group for g in await listed(log, "b", "b/2", 100)] == ["bz"]
    assert await listed(log, "b/", "b/2", 100) == []
    assert await listed(log, "zz", "", 100) == []
    if logs.restarts:  # what a restart reads back
        again = await logs.open()
        assert await listed(again, "", "", 100) == everything
