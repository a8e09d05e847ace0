"""The embedded durable log: SQLite in WAL mode with group commit (DESIGN §5, G10).

Theory of operation. The core hands over writes (`Append`: a batch of one group's messages;
`StoreView`: an install and its aborts), at most one per group at a time. `write()` queues it; a
writer thread takes everything queued, from every group, writes it in one transaction, commits,
and answers each write's `done` on the event loop. So a burst costs one commit, and the event
loop never touches the disk for a message or a view.

Failure containment (G13). If the shared transaction fails, the writer tries each write in a
transaction of its own, so a failure is pinned on exactly the write that caused it and the others
still commit; each failed write is answered with the reason (the core retracts a failed append
and refuses its publishers, and stops on a failed view). Nothing the writer meets kills it: an
unexpected exception fails the writes at hand and the thread goes on. The core also puts a
deadline on every write (`Timeouts.write_timeout`), in case storage stops answering at all.

Durability: `durability="full"` (the default) is `synchronous=FULL`: a write is answered after
its commit is on disk (fsync), so `published` survives power loss; group commit amortises the
fsync over the batch. `"normal"` survives a killed process (the data is in the OS before the
commit returns) but not power loss; docs/operations.md has the trade-off and docs/benchmarks.md
its cost.

View history. `groups` and `installs` hold each group's latest view (what a restart brings
back, `load_group`); `views` holds every install in retention, one row per (group, view),
written in the same transaction, so `read_page` returns the views a catch-up crosses even after
a restart. `prune` drops a view whose offset is below the message before the oldest retained
one (`first - 1`: a page after any offset retention kept can cross it) and never the latest, in
the transaction that deletes the messages. A database from before `views` existed gets its
table at open, with each group's latest install copied in (once: the table is new).

Disk. `messages` is a rowid table with a unique index on (group, offset), not a `WITHOUT ROWID`
table keyed by them: a `WITHOUT ROWID` row is an index entry, kept inline only up to about
1,000 bytes on 4 KiB pages, and a 1 KiB payload's row then spills onto an overflow page of its
own: 4.7 bytes of file per payload byte, measured, against 1.4 for the rowid table (1.03 at
10 KB, 1.44 at 200 B). A database made before keeps its `WITHOUT ROWID` table: every statement
here reads both alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

import orjson
import structlog

from notify.core.actions import Append, Message, StoreView, ViewInstall, Write
from notify.core.checkpoint import Checkpoint
from notify.core.config import Retention
from notify.core.events import ResumePoint
from notify.errortext import described
from notify.runtime.ports import Done
from notify.storage.base import (
    MAX_LIST,
    RECENT_IDS,
    SENDER_IDS_AGE,
    GroupInfo,
    LogPage,
    StoredGroup,
    page_of,
)

log = structlog.get_logger("notify.storage")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    grp TEXT NOT NULL, "offset" INTEGER NOT NULL, stream TEXT NOT NULL, seq INTEGER NOT NULL,
    sender TEXT NOT NULL, view INTEGER NOT NULL, atomic INTEGER NOT NULL, payload BLOB,
    ts REAL NOT NULL, id TEXT NOT NULL, from_member INTEGER NOT NULL,
    UNIQUE (grp, "offset")
);
CREATE TABLE IF NOT EXISTS groups (
    grp TEXT PRIMARY KEY, epoch INTEGER NOT NULL, view INTEGER NOT NULL, members TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS installs (
    grp TEXT PRIMARY KEY, joined TEXT NOT NULL, "left" TEXT NOT NULL, "offset" INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS views (
    grp TEXT NOT NULL, view INTEGER NOT NULL, epoch INTEGER NOT NULL, members TEXT NOT NULL,
    joined TEXT NOT NULL, "left" TEXT NOT NULL, "offset" INTEGER NOT NULL,
    PRIMARY KEY (grp, view)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS views_by_offset ON views (grp, "offset");
CREATE TABLE IF NOT EXISTS floors (
    grp TEXT NOT NULL, stream TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (grp, stream)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sender_ids (
    grp TEXT NOT NULL, sender TEXT NOT NULL, id TEXT NOT NULL, "offset" INTEGER NOT NULL,
    ts REAL NOT NULL, PRIMARY KEY (grp, sender, "offset")
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS aborts (
    grp TEXT NOT NULL, "offset" INTEGER NOT NULL, PRIMARY KEY (grp, "offset")
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checkpoint_chunks (
    grp TEXT NOT NULL, key TEXT NOT NULL, idx INTEGER NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (grp, key, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS checkpoints (
    grp TEXT PRIMARY KEY, key TEXT NOT NULL, member TEXT NOT NULL, epoch INTEGER NOT NULL,
    "offset" INTEGER NOT NULL, view INTEGER NOT NULL, streams TEXT NOT NULL,
    accept_any INTEGER NOT NULL, bytes INTEGER NOT NULL, chunks INTEGER NOT NULL,
    sha256 TEXT NOT NULL, ts REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS revocations (
    user TEXT PRIMARY KEY, at REAL NOT NULL
) WITHOUT ROWID;
"""

_INSERT = "INSERT OR IGNORE INTO messages VALUES (?,?,?,?,?,?,?,?,?,?,?)"

#: a group's newest and oldest offsets: two lookups at the ends of the primary key (one
#: `SELECT MAX(..), MIN(..)` scans every row of the group: the min/max optimisation takes one
#: aggregate per query, and a page of a large group paid for the whole group each time)
_ENDS = ('SELECT (SELECT MAX("offset") FROM messages WHERE grp=?), '
         '(SELECT MIN("offset") FROM messages WHERE grp=?)')

#: a database from before the view history: each group's latest install becomes its first row
_MIGRATE_VIEWS = """
INSERT OR IGNORE INTO views SELECT g.grp, g.view, g.epoch, g.members, i.joined, i."left",
    i."offset" FROM groups g JOIN installs i ON i.grp = g.grp
"""


class SqliteLog:
    def __init__(self, path: str | Path,
                 durability: Literal["normal", "full"] = "full", *,
                 retain_messages: int | None = None, retain_age: float | None = None,
                 retain_bytes: int | None = None,
                 retention: Callable[[str], Retention] | None = None) -> None:
        self.path = Path(path)
        self.retain_messages, self.retain_age = retain_messages, retain_age
        self.retain_bytes = retain_bytes
        #: per group, when given (`CoreConfig.retention_for`): overrides the three above
        self.retention = retention
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={durability.upper()}")
        had_views = self._db.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name='views'").fetchone()
        self._db.executescript(_SCHEMA)
        if had_views is None:
            with self._db:  # (a new database copies nothing)
                self._db.execute(_MIGRATE_VIEWS)
        # Uploads a crash cut short are never completed: their staged chunks go.
        self._db.execute(
            "DELETE FROM checkpoint_chunks WHERE NOT EXISTS (SELECT 1 FROM checkpoints c "
            "WHERE c.grp = checkpoint_chunks.grp AND c.key = checkpoint_chunks.key)")
        self._lock = threading.Lock()  # one statement at a time on the shared connection
        # Writes queued for the writer thread, with whom to answer and on which loop.
        self._pending = threading.Condition()
        self._queue: list[tuple[Write, Done, asyncio.AbstractEventLoop]] = []
        self._stopping = False
        self._writer = threading.Thread(target=self._write_loop, name="sqlite-log", daemon=True)
        self._writer.start()
        self.commits = 0

    # -- event-loop side -------------------------------------------------------------------------

    def write(self, write: Write, done: Done) -> None:
        loop = asyncio.get_running_loop()
        with self._pending:
            if self._stopping:
                raise RuntimeError("the log is closed")
            self._queue.append((write, done, loop))
            self._pending.notify()

    def forget(self, group: str) -> None:
        """Nothing to re-take: one node writes this log."""

    async def close(self) -> None:
        with self._pending:
            self._stopping = True
            self._pending.notify()
        await asyncio.to_thread(self._writer.join)
        self._db.close()

    # -- writer thread ---------------------------------------------------------------------------

    def _write_loop(self) -> None:
        while True:
            with self._pending:
                while not self._queue and not self._stopping:
                    self._pending.wait()
                batch, self._queue = self._queue, []
            if not batch:
                return  # stopping, and everything queued before was answered
            errors = self._commit([w for w, _, _ in batch])
            for (_, done, loop), error in zip(batch, errors, strict=True):
                # a closed loop has nobody waiting any more
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(done, error)
            # (while it waits for the next batch, this thread must not keep the last one's
            # writes and answers alive: they hold their groups, which an eviction let go)
            del batch, errors, done, loop

    def _commit(self, writes: list[Write]) -> list[str | None]:
        """Write everything in one transaction; if that fails, each write alone, so that a
        failure is answered to exactly the write that caused it."""
        try:
            self._transaction(writes)
            return [None] * len(writes)
        except Exception as e:
            if len(writes) == 1:
                return [described(e)]
        errors: list[str | None] = []
        for w in writes:
            try:
                self._transaction([w])
                errors.append(None)
            except Exception as e:
                errors.append(described(e))
        return errors

    def _transaction(self, writes: list[Write]) -> None:
        with self._lock:
            try:
                self._db.execute("BEGIN")
                for w in writes:
                    if isinstance(w, Append):
                        self._db.executemany(_INSERT, [_row(m) for m in w.messages])
                    else:
                        self._store_view(w)
                self._db.execute("COMMIT")
                self.commits += 1
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def _store_view(self, w: StoreView) -> None:
        i = w.install
        self._db.execute("INSERT OR REPLACE INTO groups VALUES (?,?,?,?)",
                         (i.group, i.epoch, i.view, orjson.dumps(list(i.members)).decode()))
        joined, left = orjson.dumps(list(i.joined)).decode(), orjson.dumps(list(i.left)).decode()
        self._db.execute("INSERT OR REPLACE INTO installs VALUES (?,?,?,?)",
                         (i.group, joined, left, i.offset))
        self._db.execute("INSERT OR REPLACE INTO views VALUES (?,?,?,?,?,?,?)",
                         (i.group, i.view, i.epoch, orjson.dumps(list(i.members)).decode(),
                          joined, left, i.offset))
        if w.aborted:
            self._db.executemany("INSERT OR IGNORE INTO aborts VALUES (?,?)",
                                 [(i.group, o) for o in w.aborted])

    # -- reading (recovery, catch-up) ------------------------------------------------------------

    def read_page(self, group: str, after: int, limit: int,
                  max_bytes: int) -> LogPage | None:
        """Under the lock, so a page is one state of the log: the writer's transactions wait
        (for one page's rows at most), and a page never shows half a commit. The rows are read
        as the page takes them: a page cut by `max_bytes` reads one row past it, not `limit`."""
        g = group
        with self._lock:
            top, bottom = self._db.execute(
                _ENDS, (g, g)).fetchone()
            floor = self._db.execute("SELECT seq FROM floors WHERE grp=? AND stream=''",
                                     (g,)).fetchone()
            if top is None and floor is None and self._db.execute(
                    "SELECT 1 FROM groups WHERE grp=?", (g,)).fetchone() is None:
                return None
            head = max(top or 0, floor[0] if floor else 0)
            rows = self._db.execute(
                'SELECT * FROM messages WHERE grp=? AND "offset">? ORDER BY "offset" LIMIT ?',
                (g, after, limit))
            try:
                messages = page_of(map(_message, rows), limit, max_bytes, lambda m: m.size)
            finally:
                rows.close()
            end = messages[-1].offset if messages else head
            aborted = frozenset(o for (o,) in self._db.execute(
                'SELECT "offset" FROM aborts WHERE grp=? AND "offset">? AND "offset"<=?',
                (g, after, end)))
            installs = tuple(_install(g, r) for r in self._db.execute(
                'SELECT view, epoch, members, joined, "left", "offset" FROM views '
                'WHERE grp=? AND "offset">=? AND "offset"<=? ORDER BY view', (g, after, end)))
        return LogPage(g, after, tuple(messages), installs, aborted,
                       head + 1 if bottom is None else bottom, head)

    def prune(self, now: float) -> int:
        """Keep the last `retain_messages` of each group, at most `retain_bytes` of their
        payloads, and nothing older than `retain_age` seconds (or what the group's
        `retention` rule says). Before deleting, the highest
        seq of each stream and the log head are kept in `floors`, so offsets and seqs go on
        where they were after a restart. A member whose resume point falls in what was
        deleted gets `offset_unavailable` and falls back to state transfer (G8 → G9). One
        short transaction per group, so the writer (and so every publish) waits at most for
        one group's deletes, never for the whole pass."""
        deleted = 0
        with self._lock:
            heads = self._db.execute(
                'SELECT grp, MAX("offset") FROM messages GROUP BY grp').fetchall()
        for group, head in heads:
            count, size, age = self.retain_messages, self.retain_bytes, self.retain_age
            if self.retention is not None:
                rule = self.retention(group)
                count, size, age = rule.messages, rule.bytes, rule.age
            below = head - count if count is not None else 0
            cutoff = now - age if age is not None else float("-inf")
            if size is not None:
                below = max(below, self._over_bytes(group, size))
            where = 'grp=? AND "offset"<? AND ("offset"<=? OR ts<?)'
            args = (group, head, below, cutoff)  # the head row always stays
            with self._lock:
                try:
                    self._db.execute("BEGIN")
                    self._db.execute(
                        "INSERT INTO floors SELECT grp, stream, MAX(seq) FROM messages WHERE "
                        + where + " GROUP BY grp, stream ON CONFLICT (grp, stream) "
                        "DO UPDATE SET seq = MAX(seq, excluded.seq)", args)
                    self._db.execute(
                        "INSERT INTO floors VALUES (?, '', ?) ON CONFLICT (grp, stream) "
                        "DO UPDATE SET seq = MAX(seq, excluded.seq)", (group, head))
                    # a sender's recent publish ids outlive its messages (idempotent retries
                    # after a reload do not depend on retention): the last RECENT_IDS each
                    # (and for a day at most: a retry comes within minutes, G14)
                    self._db.execute(
                        'INSERT OR IGNORE INTO sender_ids SELECT grp, sender, id, "offset", ts '
                        "FROM messages WHERE " + where, args)
                    self._db.execute(
                        'DELETE FROM sender_ids WHERE grp=? AND (ts<? OR (sender, "offset") IN '
                        '(SELECT sender, "offset" FROM (SELECT sender, "offset", ROW_NUMBER() '
                        'OVER (PARTITION BY sender ORDER BY "offset" DESC) AS n FROM sender_ids '
                        "WHERE grp=?) WHERE n>?))",
                        (group, now - SENDER_IDS_AGE, group, RECENT_IDS))
                    deleted += self._db.execute("DELETE FROM messages WHERE " + where,
                                                args).rowcount
                    self._db.execute(
                        'DELETE FROM aborts WHERE grp=? AND NOT EXISTS (SELECT 1 FROM messages m '
                        'WHERE m.grp=aborts.grp AND m."offset"=aborts."offset")', (group,))
                    # (module docstring, "View history"; the head row stays, so MIN exists)
                    self._db.execute(
                        'DELETE FROM views WHERE grp=? AND "offset" < (SELECT MIN("offset") - 1 '
                        "FROM messages WHERE grp=?) AND view < (SELECT MAX(view) FROM views "
                        "WHERE grp=?)", (group, group, group))
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:
                        self._db.execute("ROLLBACK")
                    raise
        return deleted

    def _over_bytes(self, group: str, budget: int) -> int:
        """The newest offset of `group` whose payload, with every newer one's, is over
        `budget` bytes: it and everything before it go (0: the group fits)."""
        with self._lock:
            row = self._db.execute(
                'SELECT "offset" FROM (SELECT "offset", SUM(LENGTH(payload)) OVER (ORDER BY '
                '"offset" DESC ROWS UNBOUNDED PRECEDING) AS total FROM messages WHERE grp=?) '
                'WHERE total > ? ORDER BY "offset" DESC LIMIT 1', (group, budget)).fetchone()
        return 0 if row is None else int(row[0])

    # -- checkpoints (blocking; called off the event loop) -----------------------------------------

    def stage_checkpoint_chunk(self, group: str, key: str, index: int, data: str) -> None:
        with self._lock:
            self._db.execute("INSERT INTO checkpoint_chunks VALUES (?,?,?,?)",
                             (group, key, index, data))

    def checkpoint_chunks(self, group: str, key: str) -> Iterator[str]:
        index = 0
        while True:  # one row per step: a checkpoint is never all in memory
            with self._lock:
                row = self._db.execute(
                    "SELECT data FROM checkpoint_chunks WHERE grp=? AND key=? AND idx=?",
                    (group, key, index)).fetchone()
            if row is None:
                return
            yield str(row[0])
            index += 1

    def commit_checkpoint(self, group: str, checkpoint: Checkpoint) -> None:
        cp, rp = checkpoint, checkpoint.position
        with self._lock:
            self._db.execute("BEGIN")
            old = self._db.execute("SELECT key FROM checkpoints WHERE grp=?", (group,)).fetchone()
            self._db.execute(
                "INSERT OR REPLACE INTO checkpoints VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (group, cp.id, cp.member, rp.epoch, rp.offset, rp.view,
                 orjson.dumps(rp.streams).decode(), int(cp.accept_any), cp.bytes, cp.chunks,
                 cp.sha256, cp.ts))
            if old is not None and old[0] != cp.id:
                self._db.execute("DELETE FROM checkpoint_chunks WHERE grp=? AND key=?",
                                 (group, old[0]))
            self._db.execute("COMMIT")

    def revoke(self, user: str, at: float) -> None:
        """One row per user: its latest revocation (an earlier one is covered by it)."""
        with self._lock:
            self._db.execute("BEGIN")
            self._db.execute("INSERT INTO revocations VALUES (?,?) ON CONFLICT (user) DO UPDATE "
                             "SET at=MAX(at, excluded.at)", (user, at))
            self._db.execute("COMMIT")

    def revocations(self) -> dict[str, float]:
        with self._lock:
            return dict(self._db.execute("SELECT user, at FROM revocations").fetchall())

    def discard_checkpoint(self, group: str, key: str) -> None:
        with self._lock:
            self._db.execute(
                "DELETE FROM checkpoint_chunks WHERE grp=? AND key=? AND NOT EXISTS "
                "(SELECT 1 FROM checkpoints WHERE grp=? AND key=?)", (group, key, group, key))

    def _checkpoint(self, group: str) -> Checkpoint | None:
        row = self._db.execute(
            'SELECT key, member, epoch, "offset", view, streams, accept_any, bytes, chunks, '
            "sha256, ts FROM checkpoints WHERE grp=?", (group,)).fetchone()
        if row is None:
            return None
        key, member, epoch, offset, view, streams, accept_any, size, chunks, sha, ts = row
        return Checkpoint(key, member, ResumePoint(epoch, offset, orjson.loads(streams), view),
                          bool(accept_any), size, chunks, sha, ts)

    def load(self, recent: int) -> list[StoredGroup]:
        """At start-up: the groups whose last view has members (they get their recovery
        window). Groups nobody was in come back on demand (`load_group`)."""
        with self._lock:
            names = [g for (g,) in self._db.execute(
                "SELECT grp FROM groups WHERE members != '[]'").fetchall()]
        return [sg for g in names if (sg := self.load_group(g, recent)) is not None]

    def list_groups(self, prefix: str, after: str, limit: int) -> list[GroupInfo]:
        """One range scan of `groups` by name (its primary key), each group's head by the
        (group, offset) index: O(limit) whatever the number of groups."""
        top = prefix + "\U0010ffff"  # above every name that starts with `prefix`
        with self._lock:
            rows = self._db.execute(
                'SELECT g.grp, g.view, g.members, MAX(COALESCE((SELECT MAX("offset") FROM '
                'messages m WHERE m.grp=g.grp), 0), COALESCE((SELECT seq FROM floors f WHERE '
                "f.grp=g.grp AND f.stream=''), 0)) FROM groups g WHERE g.grp>? AND g.grp>=? "
                "AND g.grp<? AND substr(g.grp, 1, ?)=? ORDER BY g.grp LIMIT ?",
                (after, prefix, top, len(prefix), prefix, min(limit, MAX_LIST))).fetchall()
        return [GroupInfo(g, view, tuple(orjson.loads(members)), head)
                for g, view, members, head in rows]

    def load_group(self, group: str, recent: int) -> StoredGroup | None:
        """What the log knows of `group` (None: it never had a view). Blocking: the adapter
        calls it off the event loop."""
        with self._lock:
            row = self._db.execute("SELECT epoch, view, members FROM groups WHERE grp=?",
                                   (group,)).fetchone()
            if row is None:
                return None
            epoch, view, members = row
            g = group
            floors = dict(self._db.execute("SELECT stream, seq FROM floors WHERE grp=?", (g,)))
            seqs = {k: v for k, v in floors.items() if k}
            for stream, seq in self._db.execute(
                    "SELECT stream, MAX(seq) FROM messages WHERE grp=? GROUP BY stream", (g,)):
                seqs[stream] = max(seq, seqs.get(stream, 0))
            rows = self._db.execute(
                'SELECT * FROM messages WHERE grp=? ORDER BY "offset" DESC LIMIT ?',
                (g, recent)).fetchall()
            high, low = self._db.execute(_ENDS, (g, g)).fetchone()
            head = max(high or 0, floors.get("", 0))
            first = low if low is not None else head + 1
            below = rows[-1][1] if rows else head + 1  # the window's first offset
            # the publish ids before the window: of retained messages, and of pruned ones
            ids = [(s, i, o) for s, i, o in self._db.execute(
                'SELECT sender, id, "offset" FROM (SELECT sender, id, "offset", ROW_NUMBER() '
                'OVER (PARTITION BY sender ORDER BY "offset" DESC) AS n FROM (SELECT sender, '
                'id, "offset" FROM messages WHERE grp=? AND "offset"<? UNION ALL SELECT '
                'sender, id, "offset" FROM sender_ids WHERE grp=?)) WHERE n<=? ORDER BY '
                '"offset"', (g, below, g, RECENT_IDS))]
            aborted = frozenset(o for (o,) in self._db.execute(
                'SELECT "offset" FROM aborts WHERE grp=?', (g,)))
            installed = self._db.execute(
                'SELECT joined, "left", "offset" FROM installs WHERE grp=?', (g,)).fetchone()
            install = None if installed is None else ViewInstall(
                g, view, tuple(orjson.loads(members)), tuple(orjson.loads(installed[0])),
                tuple(orjson.loads(installed[1])), epoch, installed[2])
            checkpoint = self._checkpoint(g)
        return StoredGroup(g, epoch, view, tuple(orjson.loads(members)), head, seqs,
                           [_message(r) for r in reversed(rows)], aborted, checkpoint, install,
                           first, ids)


def _install(group: str, r: tuple[object, ...]) -> ViewInstall:
    view, epoch, members, joined, left, offset = r
    return ViewInstall(group, view, tuple(orjson.loads(members)),  # type: ignore[arg-type]
                       tuple(orjson.loads(joined)), tuple(orjson.loads(left)),  # type: ignore[arg-type]
                       epoch, offset)  # type: ignore[arg-type]


def _message(r: tuple[object, ...]) -> Message:
    # The payload column holds the bytes the edge checked and wrote (notify/wire.py):
    # carried on as they are, never parsed again.
    body: bytes = r[7]  # type: ignore[assignment]
    return Message(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]),  # type: ignore[arg-type]
                   orjson.Fragment(body), r[8], r[9], bool(r[10]), len(body))  # type: ignore[arg-type]


def _row(m: Message) -> tuple[object, ...]:
    return (m.group, m.offset, m.stream, m.seq, m.sender, m.view, int(m.atomic),
            orjson.dumps(m.payload), m.ts, m.id, int(m.from_member))

