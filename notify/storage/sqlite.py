"""The embedded durable log: SQLite in WAL mode with group commit (DESIGN §5, G10).

Theory of operation. `append()` is called on the event loop for each accepted message and returns
the future of the *current batch*; a writer thread takes everything queued, writes it in one
transaction, commits, and resolves that one future with one `call_soon_threadsafe`. So a burst
of N messages costs one commit, and the event loop never blocks on disk. Stream workers store a
run of messages, then await once (see notify/server/streams.py), so `published` is sent only
after the commit that holds the message.

`synchronous=NORMAL` in WAL mode survives a killed process (the data is in the OS before the
commit returns); `durability="full"` also survives power loss, at the cost of an fsync per batch.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import orjson

from notify.core.actions import Message, ViewInstall
from notify.core.checkpoint import Checkpoint
from notify.core.events import ResumePoint
from notify.storage.base import StoredGroup

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    grp TEXT NOT NULL, "offset" INTEGER NOT NULL, stream TEXT NOT NULL, seq INTEGER NOT NULL,
    sender TEXT NOT NULL, view INTEGER NOT NULL, atomic INTEGER NOT NULL, payload BLOB,
    ts REAL NOT NULL, id TEXT NOT NULL, from_member INTEGER NOT NULL,
    PRIMARY KEY (grp, "offset")
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS groups (
    grp TEXT PRIMARY KEY, epoch INTEGER NOT NULL, view INTEGER NOT NULL, members TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS installs (
    grp TEXT PRIMARY KEY, joined TEXT NOT NULL, "left" TEXT NOT NULL, "offset" INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS floors (
    grp TEXT NOT NULL, stream TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (grp, stream)
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
"""

_INSERT = "INSERT OR IGNORE INTO messages VALUES (?,?,?,?,?,?,?,?,?,?,?)"


class SqliteLog:
    def __init__(self, path: str | Path,
                 durability: Literal["normal", "full"] = "normal", *,
                 retain_messages: int | None = None, retain_age: float | None = None) -> None:
        self.path = Path(path)
        self.retain_messages, self.retain_age = retain_messages, retain_age
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={durability.upper()}")
        self._db.executescript(_SCHEMA)
        # Uploads a crash cut short are never completed: their staged chunks go.
        self._db.execute(
            "DELETE FROM checkpoint_chunks WHERE NOT EXISTS (SELECT 1 FROM checkpoints c "
            "WHERE c.grp = checkpoint_chunks.grp AND c.key = checkpoint_chunks.key)")
        self._lock = threading.Lock()  # one statement at a time on the shared connection
        # The batch being filled: its rows and the future they all resolve with. The writer
        # swaps both out under `_pending` so no row can join a batch after it was taken.
        self._pending = threading.Condition()
        self._rows: list[tuple[object, ...]] = []
        self._batch: asyncio.Future[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False
        self._writer = threading.Thread(target=self._write_loop, name="sqlite-log", daemon=True)
        self._writer.start()
        self.commits = 0

    # -- event-loop side -------------------------------------------------------------------------

    def append(self, message: Message) -> asyncio.Future[None]:
        m = message
        row = (m.group, m.offset, m.stream, m.seq, m.sender, m.view, int(m.atomic),
               orjson.dumps(m.payload), m.ts, m.id, int(m.from_member))
        with self._pending:
            if self._batch is None:
                self._loop = asyncio.get_running_loop()
                self._batch = self._loop.create_future()
                self._pending.notify()
            self._rows.append(row)
            return self._batch

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
                while self._batch is None and not self._stopping:
                    self._pending.wait()
                rows, batch, loop = self._rows, self._batch, self._loop
                self._rows, self._batch = [], None
                stopping = self._stopping
            if batch is not None and loop is not None:
                error: BaseException | None = None
                try:
                    with self._lock:
                        self._db.execute("BEGIN")
                        self._db.executemany(_INSERT, rows)
                        self._db.execute("COMMIT")
                    self.commits += 1
                except sqlite3.Error as e:  # disk full, I/O error: fail the batch, loudly
                    error = e
                    with self._lock:
                        if self._db.in_transaction:
                            self._db.execute("ROLLBACK")
                loop.call_soon_threadsafe(_resolve, batch, error)
            if stopping:
                return

    # -- reading (recovery, catch-up) ------------------------------------------------------------

    def read_after(self, group: str, offset: int) -> Iterator[Message]:
        with self._lock:
            rows = self._db.execute(
                'SELECT * FROM messages WHERE grp=? AND "offset">? ORDER BY "offset"',
                (group, offset)).fetchall()
        for r in rows:
            yield _message(r)

    def prune(self, now: float) -> int:
        """Keep the last `retain_messages` of each group and nothing older than `retain_age`
        seconds. Before deleting, the highest seq of each stream and the log head are kept in
        `floors`, so offsets and seqs go on where they were after a restart. A member whose
        resume point falls in what was deleted gets `offset_unavailable` and falls back to
        state transfer (G8 → G9)."""
        deleted = 0
        with self._lock:
            self._db.execute("BEGIN")
            for group, head in self._db.execute(
                    'SELECT grp, MAX("offset") FROM messages GROUP BY grp').fetchall():
                below = head - self.retain_messages if self.retain_messages is not None else 0
                cutoff = now - self.retain_age if self.retain_age is not None else float("-inf")
                where = 'grp=? AND "offset"<? AND ("offset"<=? OR ts<?)'
                args = (group, head, below, cutoff)  # the head row always stays
                self._db.execute(
                    "INSERT INTO floors SELECT grp, stream, MAX(seq) FROM messages WHERE "
                    + where + " GROUP BY grp, stream ON CONFLICT (grp, stream) "
                    "DO UPDATE SET seq = MAX(seq, excluded.seq)", args)
                self._db.execute(
                    "INSERT INTO floors VALUES (?, '', ?) ON CONFLICT (grp, stream) "
                    "DO UPDATE SET seq = MAX(seq, excluded.seq)", (group, head))
                deleted += self._db.execute("DELETE FROM messages WHERE " + where,
                                            args).rowcount
            self._db.execute(
                'DELETE FROM aborts WHERE NOT EXISTS (SELECT 1 FROM messages m '
                'WHERE m.grp=aborts.grp AND m."offset"=aborts."offset")')
            self._db.execute("COMMIT")
        return deleted

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

    def store_view(self, install: ViewInstall) -> None:
        i = install
        with self._lock:
            self._db.execute("BEGIN")
            self._db.execute("INSERT OR REPLACE INTO groups VALUES (?,?,?,?)",
                             (i.group, i.epoch, i.view, orjson.dumps(list(i.members)).decode()))
            self._db.execute("INSERT OR REPLACE INTO installs VALUES (?,?,?,?)",
                             (i.group, orjson.dumps(list(i.joined)).decode(),
                              orjson.dumps(list(i.left)).decode(), i.offset))
            self._db.execute("COMMIT")

    def store_outcomes(self, group: str, offsets: tuple[int, ...], committed: bool) -> None:
        if committed:
            return  # the default after a restart: only aborts need a record (see base.py)
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany('INSERT OR IGNORE INTO aborts VALUES (?,?)',
                                 [(group, o) for o in offsets])
            self._db.execute("COMMIT")

    def load(self, recent: int) -> list[StoredGroup]:
        out: list[StoredGroup] = []
        with self._lock:
            groups = self._db.execute("SELECT grp, epoch, view, members FROM groups").fetchall()
            for g, epoch, view, members in groups:
                floors = dict(self._db.execute("SELECT stream, seq FROM floors WHERE grp=?",
                                               (g,)))
                seqs = {k: v for k, v in floors.items() if k}
                for stream, seq in self._db.execute(
                        "SELECT stream, MAX(seq) FROM messages WHERE grp=? GROUP BY stream",
                        (g,)):
                    seqs[stream] = max(seq, seqs.get(stream, 0))
                rows = self._db.execute(
                    'SELECT * FROM messages WHERE grp=? ORDER BY "offset" DESC LIMIT ?',
                    (g, recent)).fetchall()
                head = max(self._db.execute('SELECT MAX("offset") FROM messages WHERE grp=?',
                                            (g,)).fetchone()[0] or 0, floors.get("", 0))
                aborted = frozenset(o for (o,) in self._db.execute(
                    'SELECT "offset" FROM aborts WHERE grp=?', (g,)))
                installed = self._db.execute(
                    'SELECT joined, "left", "offset" FROM installs WHERE grp=?', (g,)).fetchone()
                install = None if installed is None else ViewInstall(
                    g, view, tuple(orjson.loads(members)), tuple(orjson.loads(installed[0])),
                    tuple(orjson.loads(installed[1])), epoch, installed[2])
                out.append(StoredGroup(g, epoch, view, tuple(orjson.loads(members)), head, seqs,
                                       [_message(r) for r in reversed(rows)], aborted,
                                       self._checkpoint(g), install))
        return out


def _message(r: tuple[object, ...]) -> Message:
    # The payload column holds the bytes the edge checked and wrote (notify/server/wire.py):
    # carried on as they are, never parsed again.
    return Message(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]),  # type: ignore[arg-type]
                   orjson.Fragment(r[7]), r[8], r[9], bool(r[10]))  # type: ignore[arg-type]


def _resolve(batch: asyncio.Future[None], error: BaseException | None) -> None:
    if batch.done():
        return
    if error is None:
        batch.set_result(None)
    else:
        batch.set_exception(error)
