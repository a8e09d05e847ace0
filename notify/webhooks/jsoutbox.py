"""The webhooks' outbox in a cluster: a JetStream stream (`OutboxPort`, notify/webhooks/outbox.py).

Why a stream and not a node's SQLite file: the node that derived an event may die before it is
delivered (SIGKILL), and the node that takes its shard over must find both the undelivered rows
and how far the group's events were derived. So the outbox lives where the log lives: one R3
stream beside it (`<log stream>_WEBHOOKS`, `allow_atomic`, `allow_direct`,
`allow_rollup_hdrs`), with three kinds of subjects (`<token>` is `escape_group`'s one-token
escape of an endpoint key or a group name):

- `<prefix>.e.<endpoint>`: one row per (endpoint, event) not yet delivered, in stream order (the
  endpoint's delivery order). The body is the POST's body; the headers carry the event's id and
  type. A row leaves (`STREAM.MSG.DELETE`) only after its endpoint answered 2xx;
- `<prefix>.c.<group>`: the group's cursor (the last view notified, the offset covered), each
  record with `Nats-Rollup: sub`, so a group keeps only its latest one;
- `<prefix>.b.<shard>`: a shard's baseline marker (the first node that owned the shard with
  webhooks on recorded its groups' state then: no events for the history before it).

Theory of operation. `add` writes the rows of some writes and the cursors they advance in ONE
JetStream atomic batch (`Nats-Batch-Id/-Sequence/-Commit`, as the log's own writes,
notify/storage/jetstream.py), so a stored cursor always comes with the rows of every event up to
it: after a crash, the next owner's catch-up (notify/webhooks/source.py) starts exactly where
the cursor says, and loses nothing. A write larger than `max_batch` records is several batches,
one after the other, the rows first and the cursors last, so a part that fails leaves rows
without their cursor (sent again, same ids), never a cursor without its rows. A batch nobody
answers for (a stream electing its leader) stored nothing, and is sent again, bounded.
Cursors are never written by a node for a group whose catch-up it has not done in its current
holding of the shard (the service's rule, notify/webhooks/service.py); a cursor that goes
backwards (a deposed owner's late write) only makes the next catch-up derive some events
twice, with their ids.

Reads (`peek`, `cursors`, `baselined`) go to the stream leader (`STREAM.MSG.GET`): a direct get
may be answered by a follower that is behind, which could hide the last cursor from a catch-up
(and its events would be derived again) or a deleted row (delivered again). The rows of an
endpoint are read oldest first with `next_by_subj`.

Bounds. The row cap per endpoint (`max_backlog`) is applied after an `add` that may have passed
it: the count is read from the stream (`STREAM.INFO` of that subject) and the oldest rows are
purged (`STREAM.PURGE` with `keep`), counted in `dropped`. The byte cap (`max_backlog_bytes`) is
not applied in a cluster (the stream does not count bytes per subject). `count` is read from
the stream every `RECOUNT` seconds when rows are added or read here (in between, this process
adds and subtracts its own); `bytes` stays empty (the metric says 0).

Blocking: every method is called off the event loop; the NATS connection lives on a private
event loop in a thread of the outbox's own (as `JetStreamLog` does), each call bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import OrderedDict
from collections.abc import Collection, Coroutine, Iterable, Sequence
from typing import Any, TypeVar

import nats
import nats.errors
import orjson
import structlog
from nats.aio.client import Client
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError

from notify.storage.jetstream import escape_group, unescape_group
from notify.storage.natsloop import LoopThread, open_stream
from notify.webhooks.events import Event
from notify.webhooks.outbox import Cursor, Row

log = structlog.get_logger("notify.webhooks")

T = TypeVar("T")

#: the cursors kept in memory (a cache of the stream's: `_remember`)
MAX_CURSORS = 50_000
#: seconds between two reads of the rows per endpoint from the stream (`count`)
RECOUNT = 10.0
#: the row headers: the event's id (`webhook-id`) and type
_ID, _TYPE = "Webhook-Id", "Webhook-Type"


class JetStreamOutbox:
    """The cluster's outbox (`OutboxPort`) on a JetStream stream."""

    def __init__(self, servers: str | Sequence[str], caps: dict[str, tuple[int, int]], *,
                 stream: str = "NOTIFY_WEBHOOKS", prefix: str = "nwh", replicas: int = 3,
                 timeout: float = 5.0, connect_timeout: float = 15.0,
                 max_batch: int = 500) -> None:
        """`caps`: per endpoint key, (max rows, max body bytes: not applied, see above)."""
        self.servers = [servers] if isinstance(servers, str) else list(servers)
        self.stream, self.prefix, self.replicas = stream, prefix, replicas
        self.timeout, self.max_batch = timeout, max_batch
        self.caps = dict(caps)
        self.count: dict[str, int] = {}
        self.bytes: dict[str, int] = {}
        self.dropped: dict[str, int] = {}
        self.dropped_through: dict[str, int] = {}
        #: (no bytes per endpoint: the module docstring, "Bounds")
        #: the cursors this process read or wrote (a message's cursor moves only its offset,
        #: on top of the group's cursor); refreshed by `cursors` (each catch-up)
        self._cursors: OrderedDict[str, Cursor] = OrderedDict()
        self.batches = 0
        self._counted = 0.0
        self._runner = LoopThread("webhooks-outbox")
        try:
            self._nc: Client = self._call(self._connect(connect_timeout), connect_timeout + 5)
            self._call(self._recount(), self.timeout * 2)
        except BaseException:
            self._stop_loop()
            raise

    # -- plumbing --------------------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        return self._runner.call(coro, timeout)

    async def _connect(self, timeout: float) -> Client:
        return await open_stream(self.servers, StreamConfig(
            name=self.stream, subjects=[f"{self.prefix}.>"], num_replicas=self.replicas,
            allow_atomic=True, allow_direct=True, allow_rollup_hdrs=True,
            duplicate_window=120.0), timeout, "webhooks")

    def _rows(self, endpoint: str) -> str:
        return f"{self.prefix}.e.{escape_group(endpoint)}"

    def _cursor_subject(self, group: str) -> str:
        return f"{self.prefix}.c.{escape_group(group)}"

    def _baseline(self, part: int | None) -> str:
        return f"{self.prefix}.b.{'all' if part is None else part}"

    async def _last(self, subject: str) -> tuple[int, bytes] | None:
        """The subject's last record, from the stream leader: (seq, data), or None."""
        try:
            async with asyncio.timeout(self.timeout):
                m = await self._nc.jsm().get_msg(self.stream, subject=subject)
        except NotFoundError:
            return None
        return m.seq or 0, m.data or b""

    async def _subject_counts(self, subjects: str) -> dict[str, int]:
        async with asyncio.timeout(self.timeout):
            info = await self._nc.jsm().stream_info(self.stream, subjects_filter=subjects)
        return dict(info.state.subjects or {})

    async def _recount(self) -> None:
        counts = await self._subject_counts(f"{self.prefix}.e.*")
        self._counted = asyncio.get_running_loop().time()
        for endpoint in self.count:
            self.count[endpoint] = 0
        self.count.update((unescape_group(s.split(".")[-1]), n) for s, n in counts.items())

    async def _recount_now_and_then(self) -> None:
        """The rows per endpoint from the stream, every `RECOUNT` seconds at most (what this
        process adds and deletes is only part of it: other nodes add and deliver)."""
        if asyncio.get_running_loop().time() - self._counted > RECOUNT:
            try:
                await self._recount()
            except Exception as e:  # (a metric: never a reason to fail a write or a read)
                self._counted = asyncio.get_running_loop().time()
                log.warning("webhooks_recount_failed", error=repr(e))

    async def _batch(self, records: list[tuple[str, bytes, dict[str, str]]]) -> None:
        """One atomic batch: all of `records`, or none (raises if not acknowledged)."""
        batch = uuid.uuid4().hex
        n = len(records)
        for i, (subject, body, extra) in enumerate(records, 1):
            headers = {"Nats-Batch-Id": batch, "Nats-Batch-Sequence": str(i), **extra}
            if i < n:
                await self._nc.publish(subject, body, headers=headers)
                continue
            headers["Nats-Batch-Commit"] = "1"
            reply = await self._nc.request(subject, body, headers=headers,
                                           timeout=self.timeout)
            ack = orjson.loads(reply.data) if reply.data else {}
            if "error" in ack or "seq" not in ack:
                raise RuntimeError(f"webhook outbox batch refused: {reply.data!r}")
        self.batches += 1

    async def _write(self, rows: list[tuple[str, bytes, dict[str, str]]],
                     last: list[tuple[str, bytes, dict[str, str]]]) -> None:
        """`rows`, then `last` (the cursors, a baseline marker), in atomic batches of at most
        `max_batch` records, in that order: a batch with some of `last` comes after every row
        (each earlier batch is stored before the next is sent)."""
        records = rows + last
        for i in range(0, len(records), self.max_batch):
            await self._again(records[i:i + self.max_batch])

    async def _again(self, records: list[tuple[str, bytes, dict[str, str]]]) -> None:
        """A batch, sent again (as a new batch) while nobody answers for the stream (a leader
        being elected, a stream just made): then nothing of it was stored. Bounded: twice
        `timeout`."""
        loop = asyncio.get_running_loop()
        deadline, wait = loop.time() + 2 * self.timeout, 0.05
        while True:
            try:
                return await self._batch(records)
            except nats.errors.NoRespondersError:
                if loop.time() + wait > deadline:
                    raise
                await asyncio.sleep(wait)
                wait = min(wait * 2, 1.0)

    @staticmethod
    def _encode(c: Cursor) -> bytes:
        return orjson.dumps({"epoch": c.epoch, "view": c.view, "offset": c.offset,
                             "members": list(c.members)})

    @staticmethod
    def _decode(group: str, data: bytes) -> Cursor:
        d = orjson.loads(data)
        return Cursor(group, int(d["epoch"]), int(d["view"]), int(d["offset"]),
                      tuple(d["members"]))

    def _cursor_record(self, c: Cursor) -> tuple[str, bytes, dict[str, str]]:
        return self._cursor_subject(c.group), self._encode(c), {"Nats-Rollup": "sub"}

    # -- baseline and cursors --------------------------------------------------------------------

    def baselined(self, part: int | None = None) -> bool:
        return self._call(self._last(self._baseline(part)), self.timeout * 2) is not None

    def set_baseline(self, cursors: list[Cursor], part: int | None = None) -> None:
        marker = (self._baseline(part), b"1", {"Nats-Rollup": "sub"})
        self._call(self._write([], [*(self._cursor_record(c) for c in cursors), marker]),
                   self.timeout * (2 + len(cursors) // self.max_batch))
        self._remember(cursors)

    def _remember(self, cursors: Iterable[Cursor]) -> None:
        """Into the cache of cursors, newest last; the least recently written or read go past
        `MAX_CURSORS` (a group forgotten here is read from the stream at its next write)."""
        for c in cursors:
            self._cursors[c.group] = c
            self._cursors.move_to_end(c.group)
        while len(self._cursors) > MAX_CURSORS:
            self._cursors.popitem(last=False)

    def cursors(self, groups: Collection[str] | None = None) -> dict[str, Cursor]:
        """The stored cursors of `groups` (None: every group's, from one listing)."""
        # (about one round of 64 gets per 64 groups: the budget grows with them)
        n = 100_000 if groups is None else len(groups)
        return self._call(self._read_cursors(groups), self.timeout * (6 + n // 64))

    async def _read_cursors(self, groups: Collection[str] | None) -> dict[str, Cursor]:
        if groups is None:
            counts = await self._subject_counts(f"{self.prefix}.c.*")
            groups = [unescape_group(s.split(".")[-1]) for s in counts]
        names = list(groups)
        out: dict[str, Cursor] = {}
        for i in range(0, len(names), 64):
            part = names[i:i + 64]
            got = await asyncio.gather(*(self._last(self._cursor_subject(g)) for g in part))
            for g, record in zip(part, got, strict=True):
                if record is None:
                    self._cursors.pop(g, None)
                else:
                    out[g] = self._decode(g, record[1])
            self._remember(out[g] for g in part if g in out)
        return out

    # -- the writer ------------------------------------------------------------------------------

    def add(self, rows: list[tuple[str, Event]], cursors: list[Cursor],
            offsets: dict[str, int], now: float) -> list[str]:
        return self._call(self._add(rows, cursors, offsets),
                          self.timeout * (4 + (len(rows) + len(cursors)) // self.max_batch))

    async def _add(self, rows: list[tuple[str, Event]], cursors: list[Cursor],
                   offsets: dict[str, int]) -> list[str]:
        final = {c.group: c for c in cursors}
        for g, o in offsets.items():
            c = final.get(g) or self._cursors.get(g)
            if c is None:  # (not read by a catch-up here: the stored one, if any)
                record = await self._last(self._cursor_subject(g))
                c = self._decode(g, record[1]) if record is not None else \
                    Cursor(g, 0, 0, 0, ())
            final[g] = Cursor(g, c.epoch, c.view, max(c.offset, o), c.members)
        bodies: dict[str, bytes] = {}
        records: list[tuple[str, bytes, dict[str, str]]] = []
        added: dict[str, int] = {}
        for endpoint, e in rows:
            body = bodies.get(e.id)
            if body is None:
                body = bodies[e.id] = e.body()
            records.append((self._rows(endpoint), body, {_ID: e.id, _TYPE: e.type}))
            added[endpoint] = added.get(endpoint, 0) + 1
        await self._write(records, [self._cursor_record(c) for c in final.values()])
        self._remember(final.values())
        # Stored: from here `add` must succeed, or its caller would write the batch again
        # (duplicates, and a stream that grows while the count or the cap keeps failing). The
        # count and the cap are best effort: the next write or recount tries again.
        for endpoint, n in added.items():
            self.count[endpoint] = self.count.get(endpoint, 0) + n
        try:
            if added:
                await self._recount_now_and_then()
            for endpoint in added:
                rows_max = self.caps.get(endpoint, (1 << 62, 0))[0]
                if self.count.get(endpoint, 0) > rows_max:
                    await self._cap(endpoint, rows_max)
        except (TimeoutError, nats.errors.Error, RuntimeError) as e:
            log.warning("webhooks_outbox_cap_later", error=str(e) or type(e).__name__)
        return list(added)

    async def _cap(self, endpoint: str, rows_max: int) -> None:
        """The endpoint's oldest rows past `rows_max`, purged (its count read first: this
        process's estimate may be stale)."""
        subject = self._rows(endpoint)
        n = (await self._subject_counts(subject)).get(subject, 0)
        self.count[endpoint] = n
        if n <= rows_max:
            return
        reply = await self._nc.request(
            f"$JS.API.STREAM.PURGE.{self.stream}",
            orjson.dumps({"filter": subject, "keep": rows_max}), timeout=self.timeout)
        answer = orjson.loads(reply.data or b"{}")
        if "error" in answer:
            raise RuntimeError(f"webhook outbox purge refused: {answer['error']}")
        gone = int(answer.get("purged", 0))
        self.count[endpoint] = n - gone
        self.dropped[endpoint] = self.dropped.get(endpoint, 0) + gone
        first = await self._next(subject, 1)
        if first is not None:
            self.dropped_through[endpoint] = first.seq - 1
        log.error("webhooks_backlog_dropped", endpoint=endpoint, events=gone, cap=rows_max)

    # -- the senders -----------------------------------------------------------------------------

    async def _next(self, subject: str, seq: int) -> Row | None:
        try:
            async with asyncio.timeout(self.timeout):
                m = await self._nc.jsm().get_msg(self.stream, seq=seq, subject=subject,
                                                 next=True)
        except NotFoundError:
            return None
        headers = m.headers or {}
        return Row(m.seq or 0, headers.get(_ID, ""), headers.get(_TYPE, ""), m.data or b"")

    def peek(self, endpoint: str, limit: int) -> list[Row]:
        return self._call(self._peek(endpoint, limit), self.timeout * (2 + limit))

    async def _peek(self, endpoint: str, limit: int) -> list[Row]:
        await self._recount_now_and_then()
        subject, seq = self._rows(endpoint), 1
        out: list[Row] = []
        while len(out) < limit:
            row = await self._next(subject, seq)
            if row is None:
                break
            out.append(row)
            seq = row.seq + 1
        return out

    def delete(self, endpoint: str, seq: int) -> None:
        """A delivered row leaves (already gone: another node delivered it, or the cap)."""
        if self._call(self._delete(seq), self.timeout * 2):
            self.count[endpoint] = max(self.count.get(endpoint, 1) - 1, 0)

    async def _delete(self, seq: int) -> bool:
        try:
            async with asyncio.timeout(self.timeout):
                return bool(await self._nc.jsm().delete_msg(self.stream, seq))
        except NotFoundError:
            return False
        except nats.js.errors.APIError as e:
            if e.err_code in (10037, 10057):  # no message found
                return False
            raise

    def forget_except(self, endpoints: set[str]) -> dict[str, int]:
        """Purge the rows of endpoints no longer configured (every node has the same
        `[[webhooks]]`)."""
        return self._call(self._forget_except(endpoints), self.timeout * 6)

    async def _forget_except(self, endpoints: set[str]) -> dict[str, int]:
        gone: dict[str, int] = {}
        for subject, n in (await self._subject_counts(f"{self.prefix}.e.*")).items():
            endpoint = unescape_group(subject.split(".")[-1])
            if endpoint in endpoints:
                continue
            await self._nc.request(f"$JS.API.STREAM.PURGE.{self.stream}",
                                   orjson.dumps({"filter": subject}), timeout=self.timeout)
            self.count.pop(endpoint, None)
            self.bytes.pop(endpoint, None)
            gone[endpoint] = n
        return gone

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._call(self._nc.close(), 5)
        self._stop_loop()

    def _stop_loop(self) -> None:
        self._runner.stop()


__all__ = ["JetStreamOutbox"]
