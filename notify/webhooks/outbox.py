"""The webhooks' durable outbox: the port (`OutboxPort`) and its single-node adapter, SQLite
beside the log (`DATA_DIR/webhooks.db`). The cluster's adapter, on JetStream, is
notify/webhooks/jsoutbox.py; the source and the senders know only the port.

Theory of operation. Two tables. `events` holds one row per (endpoint, event) not yet
delivered, in `seq` order (an endpoint's delivery order); a row leaves when its endpoint answered
2xx. `cursors` holds, per group, how far into the group's log events have been derived: the
last view notified (version, members, the log's epoch) and the offset covered. Rows and the
cursor they advance are written in one transaction, so after a crash the cursor says exactly
what the outbox holds, and `source.catch_up` derives the rest from the log.

Bounds (a backend down for a day must not fill the disk): per endpoint at most `max_backlog`
rows and `max_backlog_bytes` of bodies; past either, the oldest rows are deleted in the same
transaction, logged and counted (`dropped`). The counts are kept in memory (read once at open),
so the bound costs no query per insert.

Blocking: every method is called off the event loop (asyncio.to_thread); one connection, one
lock, so the writer's inserts and the senders' deletes take turns. `path=":memory:"` is the
outbox of a server whose log is in memory too (`--store memory`): it lives and dies with the
process, as that log does.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

import orjson

from notify.webhooks.events import Event

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cursors (
    grp TEXT PRIMARY KEY, epoch INTEGER NOT NULL, view INTEGER NOT NULL,
    "offset" INTEGER NOT NULL, members TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, endpoint TEXT NOT NULL, id TEXT NOT NULL,
    type TEXT NOT NULL, body BLOB NOT NULL, size INTEGER NOT NULL, created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_endpoint ON events (endpoint, seq);
"""


@dataclass(frozen=True, slots=True)
class Cursor:
    """How far a group's events were derived: its last view notified and the offset covered
    (every message at or before it, every install up to `view`)."""

    group: str
    epoch: int
    view: int
    offset: int
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Row:
    seq: int
    id: str
    type: str
    body: bytes


class OutboxPort(Protocol):
    """What the source (notify/webhooks/source.py), the senders and the service ask of an
    outbox. Blocking: every method is called off the event loop. The one rule every adapter
    keeps: a cursor is stored only with (or after) the rows of every event up to it, so the
    stored cursor of a group says "everything before me is in the outbox", and the catch-up
    from it loses nothing (duplicates allowed: they carry their ids).

    `part`: the unit a baseline is recorded for. None: the whole log (one node); in a cluster,
    a shard (each is baselined by the first node that owns it with webhooks on)."""

    #: per endpoint: rows and body bytes kept (as this process knows them), rows dropped by
    #: the caps since start, and the highest row dropped (a sender gives such a row up)
    count: dict[str, int]
    bytes: dict[str, int]
    dropped: dict[str, int]
    dropped_through: dict[str, int]

    def baselined(self, part: int | None = None) -> bool: ...

    def set_baseline(self, cursors: list[Cursor], part: int | None = None) -> None: ...

    def cursors(self, groups: Collection[str] | None = None) -> dict[str, Cursor]:
        """The stored cursors (of `groups` only, when given)."""
        ...

    def add(self, rows: list[tuple[str, Event]], cursors: list[Cursor],
            offsets: dict[str, int], now: float) -> list[str]: ...

    def peek(self, endpoint: str, limit: int) -> list[Row]: ...

    def delete(self, endpoint: str, seq: int) -> None: ...

    def forget_except(self, endpoints: set[str]) -> dict[str, int]: ...

    def close(self) -> None: ...


class Outbox:
    """The SQLite outbox (one node; `OutboxPort`)."""

    def __init__(self, path: str | Path, caps: dict[str, tuple[int, int]], *,
                 durability: Literal["normal", "full"] = "full") -> None:
        """`caps`: per endpoint key, (max rows, max body bytes)."""
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self.caps = dict(caps)
        with self._lock:
            if str(path) != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={'FULL' if durability == 'full' else 'NORMAL'}")
            self._db.executescript(_SCHEMA)
            self.count: dict[str, int] = {}
            self.bytes: dict[str, int] = {}
            self._recount()
        #: per endpoint, the highest seq dropped by the caps (a sender gives such a row up)
        self.dropped_through: dict[str, int] = {}
        #: per endpoint, rows dropped by the caps since start
        self.dropped: dict[str, int] = {}

    # -- baseline and cursors --------------------------------------------------------------------

    def baselined(self, part: int | None = None) -> bool:
        assert part is None, "one node: the whole log is one part"
        with self._lock:
            return self._db.execute("SELECT 1 FROM meta WHERE key='baseline'").fetchone() \
                is not None

    def set_baseline(self, cursors: list[Cursor], part: int | None = None) -> None:
        """The first start with webhooks: what the log holds now is the starting point (no
        events for history), recorded once."""
        assert part is None, "one node: the whole log is one part"
        with self._lock, self._tx():
            self._put_cursors(cursors)
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('baseline', '1')")

    def cursors(self, groups: Collection[str] | None = None) -> dict[str, Cursor]:
        with self._lock:
            out = {r[0]: Cursor(r[0], r[1], r[2], r[3], tuple(orjson.loads(r[4])))
                   for r in self._db.execute(
                       'SELECT grp, epoch, view, "offset", members FROM cursors')}
        if groups is None:
            return out
        return {g: out[g] for g in groups if g in out}

    # -- the writer ------------------------------------------------------------------------------

    def add(self, rows: list[tuple[str, Event]], cursors: list[Cursor],
            offsets: dict[str, int], now: float) -> list[str]:
        """Insert `rows` (endpoint key, event), the cursors they advance and the offsets of
        the groups whose messages they hold, in one transaction; then apply the caps. Returns
        the endpoints that got rows."""
        with self._lock:
            try:
                return self._add(rows, cursors, offsets, now)
            except BaseException:
                self._recount()  # (the counts of a rolled-back insert)
                raise

    def _add(self, rows: list[tuple[str, Event]], cursors: list[Cursor],
             offsets: dict[str, int], now: float) -> list[str]:
        got: dict[str, None] = {}
        #: each event serialised once, however many endpoints want it
        bodies: dict[str, bytes] = {}
        with self._tx():
            for endpoint, e in rows:
                body = bodies.get(e.id)
                if body is None:
                    body = bodies[e.id] = e.body()
                self._db.execute("INSERT INTO events (endpoint, id, type, body, size, created) "
                                 "VALUES (?,?,?,?,?,?)",
                                 (endpoint, e.id, e.type, body, len(body), now))
                self.count[endpoint] = self.count.get(endpoint, 0) + 1
                self.bytes[endpoint] = self.bytes.get(endpoint, 0) + len(body)
                got[endpoint] = None
            self._put_cursors(cursors)
            # a message's cursor moves its offset only (a group's first rows may be messages
            # of a non-member, before any view of it was notified)
            self._db.executemany(
                'INSERT INTO cursors (grp, epoch, view, "offset", members) '
                "VALUES (?, 0, 0, ?, '[]') ON CONFLICT (grp) DO UPDATE SET "
                '"offset" = MAX("offset", excluded."offset")', list(offsets.items()))
            capped = {endpoint: self._cap(endpoint) for endpoint in got}
        # (after the commit: a sender gives up the rows up to `dropped_through` without
        # deleting them, so it must not name rows a rolled-back transaction kept)
        for endpoint, (last, n) in capped.items():
            if n:
                self.dropped_through[endpoint] = last
                self.dropped[endpoint] = self.dropped.get(endpoint, 0) + n
        return list(got)

    def _recount(self) -> None:
        self.count, self.bytes = {}, {}
        for endpoint, n, size in self._db.execute(
                "SELECT endpoint, COUNT(*), COALESCE(SUM(size), 0) FROM events "
                "GROUP BY endpoint"):
            self.count[endpoint], self.bytes[endpoint] = n, size

    def _cap(self, endpoint: str) -> tuple[int, int]:
        """Delete the endpoint's oldest rows past its caps: (the last seq deleted, how many)."""
        rows_max, bytes_max = self.caps.get(endpoint, (1 << 62, 1 << 62))
        dropped, last = 0, 0
        while self.count.get(endpoint, 0) > rows_max or self.bytes.get(endpoint, 0) > bytes_max:
            excess = max(self.count[endpoint] - rows_max, 1)
            oldest = self._db.execute(
                "SELECT seq, size FROM events WHERE endpoint=? ORDER BY seq LIMIT ?",
                (endpoint, min(excess, 1000) if self.count[endpoint] > rows_max else 1)
            ).fetchall()
            if not oldest:
                self.count[endpoint], self.bytes[endpoint] = 0, 0
                break
            last = oldest[-1][0]
            self._db.execute("DELETE FROM events WHERE endpoint=? AND seq<=?", (endpoint, last))
            self.count[endpoint] -= len(oldest)
            self.bytes[endpoint] -= sum(size for _, size in oldest)
            dropped += len(oldest)
        return last, dropped

    def _put_cursors(self, cursors: list[Cursor]) -> None:
        self._db.executemany(
            'INSERT OR REPLACE INTO cursors (grp, epoch, view, "offset", members) '
            "VALUES (?,?,?,?,?)",
            [(c.group, c.epoch, c.view, c.offset, orjson.dumps(list(c.members)).decode())
             for c in cursors])

    # -- the senders -----------------------------------------------------------------------------

    def peek(self, endpoint: str, limit: int) -> list[Row]:
        """The endpoint's oldest undelivered rows, in order."""
        with self._lock:
            return [Row(*r) for r in self._db.execute(
                "SELECT seq, id, type, body FROM events WHERE endpoint=? ORDER BY seq LIMIT ?",
                (endpoint, limit))]

    def delete(self, endpoint: str, seq: int) -> None:
        """A delivered row leaves (a crash before this commit sends it again: at least once)."""
        with self._lock:
            cur = self._db.execute("DELETE FROM events WHERE seq=? RETURNING size", (seq,))
            gone = cur.fetchall()
            if gone:
                self.count[endpoint] = self.count.get(endpoint, 1) - 1
                self.bytes[endpoint] = self.bytes.get(endpoint, gone[0][0]) - gone[0][0]

    def forget_except(self, endpoints: set[str]) -> dict[str, int]:
        """Drop the rows of endpoints no longer configured; how many of each."""
        with self._lock, self._tx():
            gone = {e: n for e, n in self.count.items() if e not in endpoints and n}
            for e in list(self.count):
                if e not in endpoints:
                    self._db.execute("DELETE FROM events WHERE endpoint=?", (e,))
                    del self.count[e]
                    self.bytes.pop(e, None)
            return gone

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextlib.contextmanager
    def _tx(self) -> Iterator[None]:
        """BEGIN IMMEDIATE … COMMIT, and ROLLBACK when anything fails, the COMMIT too, as the
        log's transactions do (notify/storage/sqlite.py): a transaction left open would take
        every later statement into it, never committed (the caller holds the lock)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise


__all__ = ["Cursor", "Outbox", "OutboxPort", "Row"]
