"""The SQLite log: group commit, published-after-commit ordering, reopen (G10 building block)."""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
from pathlib import Path

import orjson

from notify.core.actions import Message, ViewInstall
from notify.core.checkpoint import Checkpoint
from notify.core.events import ResumePoint
from notify.storage.sqlite import SqliteLog


def plain(m: Message) -> Message:
    """`m` with its payload as a plain value: the log hands it back as an `orjson.Fragment`
    of the stored bytes (never parsed again), which compares by identity."""
    return dataclasses.replace(m, payload=orjson.loads(orjson.dumps(m.payload)))


def msg(offset: int, group: str = "g") -> Message:
    return Message(group, offset, "fifo:a", offset, "a", 1, offset % 7 == 0, {"n": offset},
                   1000.0 + offset, f"id{offset}")


async def test_batches_commit_together_and_survive_reopen(tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "log.db")
    futures = [log.append(msg(i)) for i in range(1, 2001)]
    await asyncio.gather(*futures)
    # 2000 appends in one event-loop turn: far fewer commits than messages
    assert 1 <= log.commits < 50
    log.append(msg(1, group="other"))
    await log.append(msg(2, group="other"))
    log.store_view(ViewInstall("g", 3, ("a", "b"), (), (), 5, 0))
    log.store_outcomes("g", (7, 14), committed=False)
    log.store_outcomes("g", (21,), committed=True)
    await log.close()

    again = SqliteLog(tmp_path / "log.db")
    got = list(again.read_after("g", 1990))
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
            await log.append(msg(i))
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
    await asyncio.gather(*(log.append(msg(i)) for i in range(1, 201)))  # ts 1001..1200
    other = Message("g", 201, "total", 7, "b", 1, False, None, 1201.0, "t7")
    await log.append(other)
    log.store_view(ViewInstall("g", 3, ("a",), (), (), 5, 0))
    assert log.prune(now=1200.0) == 151  # count: keep 152..201 (the 1100 age cutoff is older)
    assert [m.offset for m in log.read_after("g", 0)][:2] == [152, 153]
    assert log.prune(now=1290.0) == 38  # age: only ts >= 1190 stay (offsets 190..201)
    assert log.prune(now=10_000.0) == 11  # everything is old: the head row still stays
    await log.close()
    again = SqliteLog(tmp_path / "log.db")
    (g,) = again.load(recent=100)
    assert g.head == 201 and [m.offset for m in g.recent] == [201]
    assert g.seqs == {"fifo:a": 200, "total": 7}  # fifo:a has no row left, its seq stays
    await again.close()


def _checkpoint(key: str, chunks: int) -> Checkpoint:
    return Checkpoint(key, "a", ResumePoint(7, 3, {"fifo:a": 3}, 2), False, 10 * chunks, chunks,
                      "ab" * 32, 1.0)


async def test_checkpoint_staged_committed_replaced_and_orphans_dropped_at_reopen(
        tmp_path: Path) -> None:
    db = tmp_path / "log.db"
    log = SqliteLog(db)
    await log.append(msg(1))
    log.store_view(ViewInstall("g", 2, ("a",), ("a",), (), 7, 0))
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
