"""The SQLite log: group commit, answered-after-commit ordering, failures pinned on the write
that caused them, reopen (G10, G13 building blocks)."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import sqlite3
from pathlib import Path
from typing import Any

import orjson

from notify.core.actions import Append, Message, StoreView, ViewInstall, Write
from notify.core.checkpoint import Checkpoint
from notify.core.events import ResumePoint
from notify.storage.sqlite import SqliteLog

_tickets = itertools.count(1)


def plain(m: Message) -> Message:
    """`m` with its payload as a plain value: the log hands it back as an `orjson.Fragment`
    of the stored bytes (never parsed again), which compares by identity; and no size (the
    log counts the stored bytes, a test message has none)."""
    return dataclasses.replace(m, payload=orjson.loads(orjson.dumps(m.payload)), size=0)


def msg(offset: int, group: str = "g", payload: Any = None) -> Message:
    return Message(group, offset, "fifo:a", offset, "a", 1, offset % 7 == 0,
                   {"n": offset} if payload is None else payload, 1000.0 + offset, f"id{offset}")


def append(log: SqliteLog, *messages: Message) -> asyncio.Future[str | None]:
    """Hand one write to the log; the future is its answer (None: stored)."""
    return write(log, Append(messages[0].group, next(_tickets), messages))


def write(log: SqliteLog, w: Write) -> asyncio.Future[str | None]:
    fut: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
    log.write(w, fut.set_result)
    return fut


def offsets(log: SqliteLog, group: str, after: int) -> list[int]:
    """The offsets `read_page` returns after `after`, in one page."""
    page = log.read_page(group, after, 10**6, 1 << 40)
    return [] if page is None else [m.offset for m in page.messages]


def view(group: str, version: int, members: tuple[str, ...], epoch: int = 5,
         aborted: tuple[int, ...] = ()) -> StoreView:
    return StoreView(next(_tickets), ViewInstall(group, version, members, (), (), epoch, 0),
                     aborted)


async def test_batches_commit_together_and_survive_reopen(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "log.db")
    futures = [append(log, msg(i)) for i in range(1, 2001)]
    assert await asyncio.gather(*futures) == [None] * 2000
    # 2000 writes in one event-loop turn: far fewer commits than writes
    assert 1 <= log.commits < 50
    append(log, msg(1, group="other"))
    await append(log, msg(2, group="other"))
    assert await write(log, view("g", 3, ("a", "b"), aborted=(7, 14))) is None
    await log.close()

    again = SqliteLog(tmp_path / "log.db")
    page = again.read_page("g", 1990, 100, 1 << 20)
    assert page is not None
    got = list(page.messages)
    assert [m.offset for m in got] == list(range(1991, 2001))
    assert plain(got[-1]) == msg(2000)
    assert isinstance(got[-1].payload, orjson.Fragment)
    records = {r.group: r for r in again.load(recent=100)}
    g = records["g"]
    assert (g.head, g.view, g.members, g.epoch) == (2000, 3, ("a", "b"), 5)
    assert [m.offset for m in g.recent] == list(range(1901, 2001))
    assert g.seqs == {"fifo:a": 2000}
    assert g.aborted == {7, 14}  # commits are the default: not recorded
    assert "other" not in records  # no view was stored for it
    await again.close()


async def test_every_append_resolves_only_after_its_commit(tmp_path: Path) -> None:
    """When an append's future resolves, its row is already visible to another connection:
    appends racing the writer never ride on a batch that was committed before them."""
    log = SqliteLog(tmp_path / "log.db")
    reader = sqlite3.connect(tmp_path / "log.db")
    missing: list[int] = []

    async def writer(start: int) -> None:
        for i in range(start, start + 300):
            assert await append(log, msg(i)) is None
            row = reader.execute('SELECT 1 FROM messages WHERE grp=? AND "offset"=?',
                                 ("g", i)).fetchone()
            if row is None:
                missing.append(i)
            if i % 50 == 0:
                await asyncio.sleep(0)

    await asyncio.gather(writer(1), writer(1001), writer(2001))
    reader.close()
    await log.close()
    assert missing == []


async def test_retention_by_count_and_age_keeps_offsets_and_seqs_going(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "log.db", retain_messages=50, retain_age=100.0)
    await asyncio.gather(*(append(log, msg(i)) for i in range(1, 201)))  # ts 1001..1200
    other = Message("g", 201, "total", 7, "b", 1, False, None, 1201.0, "t7")
    await append(log, other)
    await write(log, view("g", 3, ("a",)))
    assert log.prune(now=1200.0) == 151  # count: keep 152..201 (the 1100 age cutoff is older)
    assert offsets(log, "g", 0)[:2] == [152, 153]
    assert log.prune(now=1290.0) == 38  # age: only ts >= 1190 stay (offsets 190..201)
    assert log.prune(now=10_000.0) == 11  # everything is old: the head row still stays
    await log.close()
    again = SqliteLog(tmp_path / "log.db")
    (g,) = again.load(recent=100)
    assert g.head == 201 and [m.offset for m in g.recent] == [201]
    assert g.seqs == {"fifo:a": 200, "total": 7}  # fifo:a has no row left, its seq stays
    await again.close()


async def test_retention_by_bytes_keeps_the_newest_payloads_that_fit(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "log.db", retain_bytes=2_500)
    await asyncio.gather(*(append(log, msg(i, payload="x" * 98)) for i in range(1, 101)))
    await write(log, view("g", 3, ("a",)))
    assert log.prune(now=1200.0) == 75  # 100 bytes stored each (the JSON string): 25 fit
    assert offsets(log, "g", 0) == list(range(76, 101))
    assert log.read_page("g", 0, 10, 1 << 20).first == 76  # what catch-up is told
    assert log.prune(now=1200.0) == 0
    (g,) = log.load(recent=10)
    assert g.first == 76 and g.head == 100
    await log.close()


def _checkpoint(key: str, chunks: int) -> Checkpoint:
    return Checkpoint(key, "a", ResumePoint(7, 3, {"fifo:a": 3}, 2), False, 10 * chunks, chunks,
                      "ab" * 32, 1.0)


async def test_checkpoint_staged_committed_replaced_and_orphans_dropped_at_reopen(
        tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    log = SqliteLog(db)
    await append(log, msg(1))
    await write(log, StoreView(next(_tickets), ViewInstall("g", 2, ("a",), ("a",), (), 7, 0)))
    for i in range(3):
        log.stage_checkpoint_chunk("g", "p:a.1", i, f"one-{i}")
    assert list(log.checkpoint_chunks("g", "p:a.1")) == ["one-0", "one-1", "one-2"]
    log.commit_checkpoint("g", _checkpoint("p:a.1", 3))
    log.stage_checkpoint_chunk("g", "p:a.2", 0, "two-0")  # a second upload, cut by a crash
    log.discard_checkpoint("g", "p:a.1")  # never drops the committed one
    assert list(log.checkpoint_chunks("g", "p:a.1"))[2] == "one-2"
    await log.close()

    log = SqliteLog(db)
    (sg,) = log.load(recent=10)
    assert sg.checkpoint == _checkpoint("p:a.1", 3)
    assert list(log.checkpoint_chunks("g", "p:a.2")) == []  # the orphan upload is gone
    log.stage_checkpoint_chunk("g", "q:a.1", 0, "three-0")
    log.commit_checkpoint("g", _checkpoint("q:a.1", 1))
    assert list(log.checkpoint_chunks("g", "p:a.1")) == []  # the replaced one's are deleted
    assert list(log.checkpoint_chunks("g", "q:a.1")) == ["three-0"]
    (sg,) = log.load(recent=10)
    assert sg.checkpoint is not None and sg.checkpoint.id == "q:a.1"
    await log.close()


async def test_a_failing_write_is_answered_alone_and_the_others_commit(tmp_path: Path) -> None:
    """G13: one write that storage refuses (here a trigger, as a full disk would) fails exactly
    that write; the writes sharing its transaction are retried alone and commit."""
    log = SqliteLog(tmp_path / "log.db")
    await append(log, msg(1))
    log._db.execute("CREATE TRIGGER boom BEFORE INSERT ON messages WHEN NEW.grp = 'bad' "
                    "BEGIN SELECT RAISE(ABORT, 'injected I/O error'); END")
    answers = await asyncio.gather(append(log, msg(2)), append(log, msg(1, group="bad")),
                                   append(log, msg(3)), write(log, view("g", 2, ("a",))))
    assert answers[0] is None and answers[2] is None and answers[3] is None
    assert answers[1] is not None and "injected I/O error" in answers[1]
    assert offsets(log, "g", 0) == [1, 2, 3]
    assert log.read_page("bad", 0, 10, 1000) is None
    await log.close()


async def test_the_writer_survives_what_is_not_a_sqlite_error(tmp_path: Path) -> None:
    """A row that cannot even be built (a payload orjson cannot carry) fails its write; the
    writer thread goes on and answers every later write."""
    log = SqliteLog(tmp_path / "log.db")
    bad = await append(log, msg(1, payload={"amount": 10**20}))
    assert bad is not None and "TypeError" in bad
    assert await append(log, msg(1)) is None
    assert log._writer.is_alive()
    await log.close()


async def test_close_answers_everything_queued_before_it(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "log.db")
    futures = [append(log, msg(i)) for i in range(1, 101)]
    await log.close()
    await asyncio.sleep(0)  # the answers were scheduled on the loop before the writer ended
    assert all(f.done() and f.result() is None for f in futures)


async def test_an_old_database_gets_its_latest_install_as_its_view_history(
        tmp_path: Path) -> None:
    """A database from before the `views` table: at open, each group's latest install (the
    `installs` row) becomes its history's first row, once; views stored since are added."""
    db = tmp_path / "log.db"
    log = SqliteLog(db)
    await append(log, *[msg(i) for i in range(1, 11)])
    v2 = ViewInstall("g", 2, ("a", "b"), ("b",), (), 5, 4)
    v3 = ViewInstall("g", 3, ("a",), (), ("b",), 5, 10)
    for i in (v2, v3):
        assert await write(log, StoreView(next(_tickets), i)) is None
    await log.close()
    raw = sqlite3.connect(db)
    raw.execute("DROP TABLE views")  # what an old database has: `groups` and `installs`
    raw.commit()
    raw.close()

    log = SqliteLog(db)
    page = log.read_page("g", 0, 100, 1 << 20)
    assert page is not None and page.installs == (v3,)  # v2 was never kept: only v3 is known
    sg = log.load_group("g", 10)
    assert sg is not None and sg.install == v3
    v4 = ViewInstall("g", 4, ("a", "c"), ("c",), (), 5, 10)
    assert await write(log, StoreView(next(_tickets), v4)) is None
    await log.close()
    raw = sqlite3.connect(db)
    raw.execute("DELETE FROM views WHERE view = 3")
    raw.commit()
    raw.close()

    log = SqliteLog(db)  # the table exists now: nothing is copied again
    page = log.read_page("g", 9, 100, 1 << 20)
    assert page is not None and page.installs == (v4,)
    assert log.load_group("g", 10).install == v4  # type: ignore[union-attr]
    await log.close()


async def test_a_reload_knows_the_publish_ids_the_log_keeps_past_the_window(
        tmp_path: Path) -> None:
    """Issue 30: the window is small; a retry of an id the log still holds must be known after
    a reload (restart, eviction), or it would be delivered twice."""
    from notify.core import CoreConfig
    from notify.storage.memory import MemoryLog

    log = SqliteLog(tmp_path / "log.db")
    await asyncio.gather(*(append(log, msg(i)) for i in range(1, 21)))
    await write(log, view("g", 3, ("a",)))
    memory = MemoryLog()
    for i in range(1, 21):
        memory.write(Append("g", i, (msg(i),)), lambda _e: None)
    memory.write(view("g", 3, ("a",)), lambda _e: None)
    for store in (log, memory):
        sg = store.load_group("g", recent=5)
        assert sg is not None and [m.offset for m in sg.recent] == [16, 17, 18, 19, 20]
        assert sg.ids == [("a", f"id{i}", i) for i in range(1, 16)]
        topic = sg.restore(CoreConfig(), 0.0).topic
        assert topic.known_offset("a", "id3") == 3 and topic.known_offset("a", "id20") == 20
    # retention takes the messages, not their ids: a retry after a reload is still known
    log.retain_messages = 4
    assert log.prune(now=2000.0) == 16  # (their ts is 1001-1020: within a day)
    sg = log.load_group("g", recent=2)
    assert sg is not None and [m.offset for m in sg.recent] == [19, 20]
    assert sg.ids == [("a", f"id{i}", i) for i in range(1, 19)]
    assert sg.restore(CoreConfig(), 0.0).topic.known_offset("a", "id1") == 1
    await log.close()
    again = SqliteLog(tmp_path / "log.db")  # and after a restart
    sg = again.load_group("g", recent=2)
    assert sg is not None and [x[1] for x in sg.ids][:2] == ["id1", "id2"]
    await again.close()


async def test_the_ids_of_pruned_messages_are_kept_a_day_at_most(tmp_path: Path) -> None:
    """G14: `sender_ids` keeps a pruned message's publish id for `SENDER_IDS_AGE` after its
    time, then a prune removes it."""
    from notify.storage.sqlite import SENDER_IDS_AGE

    log = SqliteLog(tmp_path / "log.db", retain_messages=2)
    await asyncio.gather(*(append(log, msg(i)) for i in range(1, 11)))  # ts 1001..1010
    await write(log, view("g", 3, ("a",)))
    log.prune(now=1100.0)
    sg = log.load_group("g", recent=2)
    assert sg is not None and [x[1] for x in sg.ids] == [f"id{i}" for i in range(1, 9)]
    log.prune(now=1005.5 + SENDER_IDS_AGE)  # the ids of messages 1-5 are over a day old
    sg = log.load_group("g", recent=2)
    assert sg is not None and [x[1] for x in sg.ids] == [f"id{i}" for i in range(6, 9)]
    await log.close()


async def test_a_1_kib_message_takes_less_than_twice_its_size_on_disk(tmp_path: Path) -> None:
    """A `WITHOUT ROWID` row of about 1 KiB spills onto an overflow page of its own (4.7 bytes
    of file per payload byte); the rowid table keeps it inline (module docstring, "Disk")."""
    log = SqliteLog(tmp_path / "log.db", "normal")
    for k in range(0, 2000, 100):
        await asyncio.gather(*(append(log, msg(i, f"g{i % 20}", "x" * 1000))
                               for i in range(k + 1, k + 101)))
    await log.close()
    with sqlite3.connect(tmp_path / "log.db") as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    on_disk = (tmp_path / "log.db").stat().st_size
    assert on_disk < 2 * 2000 * 1002, f"{on_disk / (2000 * 1002):.2f} bytes per payload byte"
