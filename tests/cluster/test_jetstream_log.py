"""The log on JetStream against a real 3-node cluster (DESIGN §9): a round trip that loads what
the SQLite log loads for the same writes, the fence against a second writer, R3 under a killed
node, and a server that comes back from the stream."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from notify.core.actions import Append, Write
from notify.storage.base import StoredGroup
from notify.storage.sqlite import SqliteLog
from tests.cluster.conftest import NatsCluster
from tests.storage.test_sqlite_log import msg, plain, view

pytest.importorskip("nats", reason="the cluster extra (nats-py) is not installed")

from notify.storage.jetstream import (  # noqa: E402
    JetStreamLog,
    escape_group,
    unescape_group,
)

_ticket = iter(range(10**6, 10**9))


def write(log: JetStreamLog | SqliteLog, w: Write) -> asyncio.Future[str | None]:
    fut: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
    log.write(w, fut.set_result)
    return fut


def append(log: JetStreamLog | SqliteLog, *messages: object) -> asyncio.Future[str | None]:
    ms = tuple(messages)
    return write(log, Append(ms[0].group, next(_ticket), ms))  # type: ignore[attr-defined]


def comparable(sg: StoredGroup) -> StoredGroup:
    return dataclasses.replace(sg, recent=[plain(m) for m in sg.recent])


def test_group_names_escape_into_one_token_reversibly() -> None:
    for g in ("g", "a.b", "room:42/x@y-z", "ünï cødé", "_5F", "", "*", ">", "a b"):
        token = escape_group(g)
        assert "." not in token and " " not in token and "*" not in token
        assert ">" not in token and token
        assert unescape_group(token) == g


@pytest.mark.timeout(90)
async def test_round_trip_loads_what_sqlite_loads(nats_cluster: NatsCluster,
                                                  tmp_path: Path) -> None:
    js = await asyncio.to_thread(JetStreamLog, nats_cluster.urls, stream="RT")
    sq = SqliteLog(tmp_path / "log.db")
    groups = ("g", "room.1:a/b@c-d")
    try:
        for log in (js, sq):
            for g in groups:
                assert await write(log, view(g, 1, ("a",))) is None
                for start in range(1, 60, 10):  # batches of 10
                    batch = [msg(o, group=g) for o in range(start, start + 10)]
                    assert await append(log, *batch) is None
                assert await write(log, view(g, 2, ("a", "b"), aborted=(7, 14))) is None
                assert await append(log, msg(61, group=g, payload={"x": [1, "é"]})) is None
            assert await write(log, view("empty", 1, ())) is None  # nobody in it
        await js.close()
        again = await asyncio.to_thread(JetStreamLog, nats_cluster.urls, stream="RT")
        try:
            got = {sg.group: sg for sg in await asyncio.to_thread(again.load, 25)}
            want = {sg.group: sg for sg in sq.load(25)}
            assert set(got) == set(want) == set(groups)
            for g in groups:
                assert comparable(got[g]) == comparable(want[g])
                assert got[g].head == 61 and [m.offset for m in got[g].recent] == list(
                    range(37, 62))
                assert got[g].recent[-1].size == len(b'{"x":[1,"\xc3\xa9"]}')
            empty = await asyncio.to_thread(again.load_group, "empty", 10)
            assert empty is not None and empty.members == () and empty.head == 0
            assert await asyncio.to_thread(again.load_group, "never", 10) is None
            assert [m.offset for m in await asyncio.to_thread(
                lambda: list(again.read_after("g", 58)))] == [59, 60, 61]
        finally:
            await again.close()
    finally:
        await js.close()
        await sq.close()


@pytest.mark.timeout(90)
async def test_a_second_writer_is_fenced_and_stores_nothing(nats_cluster: NatsCluster) -> None:
    a = await asyncio.to_thread(JetStreamLog, nats_cluster.urls, stream="FENCE")
    b = await asyncio.to_thread(JetStreamLog, nats_cluster.urls, stream="FENCE")
    try:
        assert await write(a, view("g", 1, ("a",))) is None
        assert await append(a, *[msg(o) for o in (1, 2, 3)]) is None
        # both now load the group: each knows the same last record
        assert (await asyncio.to_thread(a.load_group, "g", 10)).head == 3  # type: ignore[union-attr]
        assert (await asyncio.to_thread(b.load_group, "g", 10)).head == 3  # type: ignore[union-attr]
        # b takes over and appends: a is now stale
        assert await append(b, msg(4, payload="from b")) is None
        reason = await append(a, msg(4, payload="from a"), msg(5, payload="from a"))
        assert reason is not None and "10071" in reason
        reason = await write(a, view("g", 2, ("a", "x")))
        assert reason is not None and "10071" in reason
        # b goes on; nothing of a's refused writes is stored
        assert await append(b, msg(5, payload="from b")) is None
        sg = await asyncio.to_thread(b.load_group, "g", 10)
        assert sg is not None and sg.view == 1 and sg.head == 5
        assert [plain(m).payload for m in sg.recent[-2:]] == ["from b", "from b"]
    finally:
        await a.close()
        await b.close()
