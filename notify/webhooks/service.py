"""`Webhooks`: the webhooks of a running `NotifyServer`, wired and supervised.

Start (before the server listens): open the outbox (`DATA_DIR/webhooks.db`, or in memory for
`--store memory`), drop the rows of endpoints no longer configured, derive what a crash left
out (`Source.catch_up`), hook `NotifyServer.stored`, register the metrics, start the tasks.

Tasks, and who notices when one dies:
- the writer: takes the events the hook derived (`_pending`, in memory) to the outbox, many
  writes per transaction; a failed transaction is logged and tried again (the batch stays,
  in order), with backoff;
- one sender per endpoint (notify/webhooks/sender.py).
Each runs under `_supervise`: a task that ends by anything but `stop` is logged
(`webhook_task_died`) and started again after a delay that doubles up to 30 s, and
`notify_webhook_task_restarts` counts it. Nothing is lost by a restart: rows leave the outbox
only when delivered, and `_pending` belongs to the service, not to the task.

Memory: `_pending` holds at most `MAX_PENDING` events (the outbox's disk stopped keeping up).
Past it the service falls *behind*: it takes nothing more from the hook (the outbox's cursors
stay where the last written event left them), and once `_pending` is in the outbox, it derives
what it skipped from the log itself (`Source.catch_up`, as after a crash) while it takes the
hook's writes again. So an overflow delays events, and loses none the log still retains; an
event derived both ways has one id (a duplicate the receiver drops). Each fall behind is logged
and counted (`notify_webhook_dropped{reason="overflow"}` counts the events set aside).

Stop (after the server stopped, so its last writes were hooked): the writer empties
`_pending` into the outbox (bounded by `STOP_GRACE`), the senders are cancelled (a request cut
short is sent again after the restart, with the same id), the outbox closes.

Cluster mode (`shards`: the node, which says which shards it holds and under which term; the
outbox on JetStream, notify/webhooks/jsoutbox.py). The source, the senders and the writer are
the same; what differs is *when* a group's events may be written, and *who* delivers:

- **Derivation runs where the group is owned.** The hook sees only the writes this node's log
  stored, which the log's fence allows only to the group's owner. A shard this node acquires
  (or holds under a new term) is first caught up from the log (`Source.catch_up` for that
  `Part`, from the cursors the previous owner left), and until then the hook's batches of its
  groups wait (`_waiting`), then follow the catch-up's rows in order. Without that wait a
  live write's cursor could pass events the previous owner stored and never wrote to the
  outbox (it was SIGKILLed in between): the catch-up would start after them.
- **A group's first write in a holding waits for what the log holds before it**
  (`Source.before`, bounded by that write): the shard's catch-up ran when the lease came, but
  the group is fenced only when this node loads it, so an old owner paused past its lease may
  have stored one more write in between, and died before its writer took it. This node's
  first write comes after its own fence, so the log before it is complete. Usually the stored
  cursor is already there and this costs one read (`_due`, `_known`). For a group nobody
  writes to again, the shard's second catch-up (`recheck_after` later) finds that write.
- **A cursor is written only by a node that caught the shard up in its current holding.** A
  batch whose shard this node no longer holds (lost between the write and the hook, or
  before its catch-up) is written as rows only: its events were derived from a write this node
  stored as the owner, and the next owner's catch-up may have read the log before that write
  landed (the lease moves before the log's fence does), so dropping them could lose them;
  their cursor, though, could pass what that owner has not written yet. Rows alone are always
  safe (a duplicate at worst, with its id). That is the only way a node writes events of a
  group it does not own: events of its own stored writes, never derived from the log.
- **One node delivers an endpoint**: the holder of the shard `shard_of("webhook:" + key)`
  (`Sender(may_send=)`), so each endpoint is delivered in outbox order by one sender at a
  time; when that shard moves, the next holder's sender starts from the endpoint's oldest row
  (a row under way at the old holder may arrive twice, with its id).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, Literal, Protocol

import aiohttp
import structlog

from notify.cluster.shards import shard_of
from notify.core.actions import Write
from notify.server.app import NotifyServer
from notify.supervision import cancel_and_wait
from notify.webhooks.backoff import delay
from notify.webhooks.config import WebhookSettings
from notify.webhooks.metrics import WebhookCollector
from notify.webhooks.outbox import Outbox, OutboxPort
from notify.webhooks.sender import Sender
from notify.webhooks.source import Batch, Part, Source

log = structlog.get_logger("notify.webhooks")

#: events derived and not yet in the outbox, at most
MAX_PENDING = 100_000
#: seconds `stop` waits for the writer to empty `_pending`
STOP_GRACE = 5.0
#: the wait before a dead task is started again: this, doubling with each death, up to the next
RESTART_DELAY, MAX_RESTART_DELAY = 1.0, 30.0
#: a task that ran this long before it died starts again from `RESTART_DELAY` (its deaths
#: before were not a crash loop: in a cluster, a NATS blip ends a sender now and then)
HEALTHY_RUN = 60.0
#: cluster mode: seconds between two looks at the shards held (the writer's), and a sender's
#: look at the outbox when nothing woke it (rows are added by other nodes)
RECONCILE, CLUSTER_IDLE = 0.5, 1.0
#: cluster mode: seconds after a shard's catch-up until its second one (`_recheck_due`)
RECHECK_AFTER = 30.0
#: cluster mode: groups remembered as caught up before their first write here, at most
MAX_KNOWN = 100_000

OutboxOpener = Callable[[dict[str, tuple[int, int]]], OutboxPort]


class Shards(Protocol):
    """The cluster node as the webhooks see it (`ClusterNode.held`)."""

    def held(self) -> Mapping[int, int]:
        """shard -> term, for the shards this node holds now."""
        ...

    def term(self, shard: int) -> int | None:
        """`held().get(shard)`, without building `held` (per write and per delivery)."""
        ...


def endpoint_shard(key: str) -> int:
    """The shard whose holder delivers endpoint `key` (cluster mode)."""
    return shard_of(f"webhook:{key}")


class Webhooks:
    def __init__(self, server: NotifyServer, hooks: list[WebhookSettings],
                 path: str | Path, *, durability: Literal["normal", "full"] = "full",
                 opener: OutboxOpener | None = None, shards: Shards | None = None,
                 recheck_after: float | None = None) -> None:
        """`path`: the outbox's SQLite file, or ":memory:" (or what `opener`, given the caps,
        opens: the cluster's outbox). `shards`: cluster mode (the module docstring)."""
        self.server, self.hooks, self.path, self.durability = server, hooks, path, durability
        self.opener, self.shards = opener, shards
        #: cluster mode: a shard caught up here is caught up once more this long after
        #: (`_recheck_due`: a deposed owner's last write may land after the first catch-up)
        self.recheck_after = RECHECK_AFTER if recheck_after is None else recheck_after
        self.source = Source(hooks)
        self.outbox: OutboxPort | None = None
        self.senders: dict[str, Sender] = {}
        #: per endpoint key, events set aside by an overflow (keys: the configured endpoints
        #: only, so bounded by the configuration; a counter, as the metric it feeds)
        self.overflowed: dict[str, int] = {}
        self.restarts = 0
        self._pending = Batch()
        self._wake_writer = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        #: per task name ("writer", "sender:KEY": fixed by the configuration), its deaths,
        #: which set its next restart delay
        self._failures: dict[str, int] = {}
        #: when each supervised task was (last) started
        self._started: dict[str, float] = {}
        self._session: aiohttp.ClientSession | None = None
        self._stopping = False
        #: the hook's writes are set aside until `_pending` is written (see the docstring)
        self._behind = False
        self._loop: asyncio.AbstractEventLoop | None = None
        #: cluster mode: shard -> the term under which it was caught up here; the hook's
        #: batches of shards held but not caught up yet (shard -> the term they were hooked
        #: under, the batch), and how many events they hold
        self._caught: dict[int, int] = {}
        self._waiting: dict[int, tuple[int, Batch]] = {}
        self._waiting_n = 0
        #: group -> (its shard, the holding's term, its first write hooked in that holding),
        #: until `Source.before` derived what the log holds before it; groups done, -> the
        #: term they were done in
        #: (at most `MAX_KNOWN`, the oldest forgotten: it is done again at its next write)
        self._due: dict[str, tuple[int, int, Write]] = {}
        self._known: dict[str, int] = {}
        self._reconcile_failures = 0
        #: shard -> (the term it was caught up under, when to catch it up once more)
        self._recheck: dict[int, tuple[int, float]] = {}

    @property
    def pending(self) -> int:
        return len(self._pending) + self._waiting_n

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        caps = {h.key: (h.max_backlog, h.max_backlog_bytes) for h in self.hooks}
        if self.opener is not None:
            self.outbox = outbox = await asyncio.to_thread(self.opener, caps)
        else:
            self.outbox = outbox = await asyncio.to_thread(Outbox, self.path, caps,
                                                           durability=self.durability)
        gone = await asyncio.to_thread(outbox.forget_except, set(caps))
        if gone:
            log.warning("webhooks_unconfigured_dropped", events=gone,
                        detail="these endpoints are no longer configured")
        derived = 0
        if self.shards is None:  # (a cluster catches each shard up as it acquires it)
            derived = await asyncio.to_thread(self.source.catch_up, self.server.store, outbox,
                                              time.time(), lambda _: None)
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=max(h.timeout for h in self.hooks) + 1))
        self.senders = {h.key: self._sender(h, outbox) for h in self.hooks}
        self.server.stored.append(self._stored)
        self.server.metrics.registry.register(WebhookCollector(self))
        self._supervise("writer", self._write_loop)
        for key, sender in self.senders.items():
            self._supervise(f"sender:{key}", sender.run)
        log.info("webhooks", endpoints=[h.key for h in self.hooks], outbox=str(self.path),
                 backlog={k: outbox.count.get(k, 0) for k in caps}, caught_up=derived)

    def _sender(self, hook: WebhookSettings, outbox: OutboxPort) -> Sender:
        assert self._session is not None
        shards = self.shards
        if shards is None:
            return Sender(hook, outbox, self._session)
        mine = endpoint_shard(hook.key)
        return Sender(hook, outbox, self._session, may_send=lambda: shards.term(mine) is not None,
                      idle=CLUSTER_IDLE)

    # -- the hook --------------------------------------------------------------------------------

    def _stored(self, write: Write) -> None:
        """`NotifyServer.stored`: a write the log made durable (on the loop; what raises is
        logged there, `stored_hook_failed`, and the group's write goes on)."""
        batch = self.source.of_write(write, time.time())
        if batch is None:
            return
        shard: int | None = None  # (set: held under `term`, not caught up yet)
        term = 0
        if self.shards is not None:
            group = next(iter(batch.cursors or batch.offsets))  # (one write: one group)
            shard = shard_of(group)
            holding = self.shards.term(shard)
            if holding is None:  # not ours any more: rows only (module docstring)
                batch, shard = Batch(rows=batch.rows), None
            else:
                term = holding
                # Every rule below is per holding (shard, term): a shard lost and taken
                # back between two looks is a new holding, whose catch-up and first writes
                # are its own; what waited under the old term goes in as rows only.
                self._end_holding(shard, term)
                due = self._due.get(group)
                if self._known.get(group) != term and (due is None or due[1] != term):
                    self._due[group] = (shard, term, write)  # its first write in this holding
                if self._caught.get(shard) == term and group not in self._due \
                        and shard not in self._waiting:
                    shard = None
        if self._behind or self.pending + len(batch) > MAX_PENDING:
            if self.shards is not None and shard is not None:
                self._due.pop(next(iter(batch.cursors or batch.offsets)), None)  # (read back)
            if not self._behind:
                log.error("webhooks_behind", pending=len(self._pending),
                          detail="the outbox does not keep up: what follows is read back "
                                 "from the log once it has caught up")
                self._behind = True
            for key, _ in batch.rows:
                self.overflowed[key] = self.overflowed.get(key, 0) + 1
            return  # (nor its cursors: the outbox's say where the read-back starts)
        if shard is not None:  # held, not caught up yet
            self._waiting.setdefault(shard, (term, Batch()))[1].extend(batch)
            self._waiting_n += len(batch)
        else:
            self._pending.extend(batch)
        self._wake_writer.set()

    # -- tasks -----------------------------------------------------------------------------------

    async def _write_loop(self) -> None:
        assert self.outbox is not None
        failures = 0
        while True:
            if self.shards is not None and not self._stopping:
                await self._reconcile()
            if not self._pending.cursors and not self._pending.offsets \
                    and not self._pending.rows:
                if self._behind:
                    await self._catch_up()
                    continue
                if self._stopping:
                    return
                self._wake_writer.clear()
                if self.shards is None:
                    await self._wake_writer.wait()
                else:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(RECONCILE):
                            await self._wake_writer.wait()
                continue
            batch, self._pending = self._pending, Batch()
            try:
                got = await asyncio.to_thread(self.outbox.add, batch.rows,
                                              list(batch.cursors.values()), batch.offsets,
                                              time.time())
            except Exception as e:
                failures += 1
                log.error("webhooks_outbox_write_failed", error=repr(e), events=len(batch),
                          attempt=failures)
                batch.extend(self._pending)  # in order: the failed batch first
                self._pending = batch
                await asyncio.sleep(delay(failures, 0.1, 5.0))
                continue
            failures = 0
            for key in got:
                self.senders[key].wake()

    async def _reconcile(self) -> None:
        """Cluster mode: catch up the shards held under a term not caught up yet, then let
        their waiting batches follow; a shard lost before its catch-up leaves its waiting
        batches as rows only (module docstring). A catch-up that fails is logged and tried
        again at the next look (its batches keep waiting; the shards and groups already
        caught up go on)."""
        assert self.shards is not None and self.outbox is not None
        held = dict(self.shards.held())
        for s in [s for s, term in self._caught.items() if held.get(s) != term]:
            del self._caught[s]
        for s in [s for s, (term, _) in self._waiting.items() if held.get(s) != term]:
            self._release(s, rows_only=True)
        for g in [g for g, (s, term, _) in self._due.items() if held.get(s) != term]:
            del self._due[g]
        new = {s: term for s, term in held.items() if self._caught.get(s) != term}
        failed: Exception | None = None
        if new:
            try:
                derived = await asyncio.to_thread(
                    self.source.catch_up, self.server.store, self.outbox, time.time(),
                    self._wake_senders, Part(shard_of, frozenset(new)))
            except Exception as e:
                failed = e
            else:
                held = dict(self.shards.held())
                again = time.monotonic() + self.recheck_after
                for s, term in new.items():
                    if held.get(s) == term:  # (moved meanwhile: the next look, again)
                        self._caught[s] = term
                        self._recheck[s] = (term, again)
                log.info("webhooks_shards_caught_up", shards=len(new), events=derived)
        failed = await self._recheck_due(held) or failed
        # each group's first write here since its shard was acquired: what the log holds
        # before it, from the stored cursor (Source.before); one that fails waits for the
        # next look without holding back the others
        for g, (s, term, write) in list(self._due.items()):
            holding = held.get(s)
            if holding != term or self._caught.get(s) != holding:
                continue
            try:
                derived = await asyncio.to_thread(
                    self.source.before, self.server.store, self.outbox, write, time.time(),
                    self._wake_senders)
            except Exception as e:
                failed = failed or e
                continue
            if derived:
                log.warning("webhooks_caught_up_before_first_write", group=g, events=derived)
            self._due.pop(g, None)  # (`stop` may have emptied it meanwhile)
            self._known[g] = holding
            if len(self._known) > MAX_KNOWN:
                del self._known[next(iter(self._known))]
        # what is caught up goes on, whatever failed elsewhere
        due = {s for s, _, _ in self._due.values()}
        for s in [s for s, (term, _) in self._waiting.items()
                  if self._caught.get(s) == term == held.get(s) and s not in due]:
            self._release(s, rows_only=False)
        if failed is None:
            self._reconcile_failures = 0
            return
        self._reconcile_failures += 1
        wait = delay(self._reconcile_failures, 0.2, 5.0)
        log.error("webhooks_catch_up_failed", shards=len(new), groups=len(self._due),
                  error=repr(failed), retry_in=round(wait, 3))
        if not self._stopping:  # (a stop's grace is for writing what is pending)
            await asyncio.sleep(wait)

    async def _recheck_due(self, held: dict[int, int]) -> Exception | None:
        """The second catch-up of the shards caught up `recheck_after` ago (still held under
        that term). A deposed owner paused past its lease may store one last write after this
        node's catch-up (before this node loads, so fences, the group), and die before writing
        its events: nothing else would derive them until the group's next write here. Its
        write lands within its own deadline after it wakes, which `recheck_after` covers
        (`2 x lease_ttl + write_timeout` in `notify serve`). What this node hooked meanwhile
        may be derived twice (the same ids)."""
        assert self.outbox is not None
        now = time.monotonic()
        for s in [s for s, (term, _) in self._recheck.items() if held.get(s) != term]:
            del self._recheck[s]
        due = frozenset(s for s, (term, at) in self._recheck.items()
                        if now >= at and self._caught.get(s) == term)
        if not due:
            return None
        try:
            derived = await asyncio.to_thread(
                self.source.catch_up, self.server.store, self.outbox, time.time(),
                self._wake_senders, Part(shard_of, due))
        except Exception as e:
            return e
        for s in due:
            self._recheck.pop(s, None)
        if derived:
            log.warning("webhooks_shards_rechecked", shards=len(due), events=derived,
                        detail="events of writes stored after the shards' first catch-up")
        return None

    def _end_holding(self, shard: int, term: int) -> None:
        """`shard` is held under `term` now: what waited under an earlier term of it goes in
        as rows only, and its groups' first writes of that term are not due any more."""
        waiting = self._waiting.get(shard)
        if waiting is not None and waiting[0] != term:
            self._release(shard, rows_only=True)
        if self._caught.get(shard, term) != term:
            del self._caught[shard]

    def _release(self, shard: int, *, rows_only: bool) -> None:
        _term, batch = self._waiting.pop(shard)
        self._waiting_n -= len(batch)
        self._pending.extend(Batch(rows=batch.rows) if rows_only else batch)

    async def _catch_up(self) -> None:
        """After falling behind: take the hook's writes again, and derive from the log what
        was set aside meanwhile (from the outbox's cursors to the log's head now: it overlaps
        what the hook takes from now on, by the same ids)."""
        assert self.outbox is not None
        self._behind = False
        if self.shards is not None:
            # every held shard is caught up again, from the cursors (what waited with them
            # is derived again there)
            self._caught.clear()
            self._waiting.clear()
            self._waiting_n = 0
            self._due.clear()
            self._known.clear()
            log.warning("webhooks_catching_up_after_overflow")
            return
        try:
            derived = await asyncio.to_thread(self.source.catch_up, self.server.store,
                                              self.outbox, time.time(), self._wake_senders)
        except BaseException:
            # behind again, and what the hook took meanwhile is read back with the rest:
            # written first, its cursors would pass what is still set aside (the writer dies
            # of this and its restart tries again)
            for key, _ in self._pending.rows:
                self.overflowed[key] = self.overflowed.get(key, 0) + 1
            self._pending, self._behind = Batch(), True
            raise
        log.warning("webhooks_caught_up_after_overflow", events=derived)

    def _wake_senders(self, keys: list[str]) -> None:
        """`catch_up`'s `added`, from its thread."""
        loop = self._loop
        assert loop is not None
        for key in keys:
            loop.call_soon_threadsafe(self.senders[key].wake)

    def _supervise(self, name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        loop = asyncio.get_running_loop()
        task = loop.create_task(run(), name=f"webhooks-{name}")
        self._tasks[name] = task
        self._started[name] = loop.time()
        task.add_done_callback(lambda t: self._ended(name, run, t))

    def _ended(self, name: str, run: Callable[[], Coroutine[Any, Any, None]],
               task: asyncio.Task[None]) -> None:
        if self._stopping:
            return
        # (cancelled by anything but `stop` is a death too: a sender nobody restarts would
        # leave its endpoint's rows undelivered, silently)
        error = asyncio.CancelledError() if task.cancelled() else task.exception()
        if asyncio.get_running_loop().time() - self._started.get(name, 0.0) > HEALTHY_RUN:
            self._failures[name] = 0
        n = self._failures[name] = self._failures.get(name, 0) + 1
        wait = delay(n, RESTART_DELAY, MAX_RESTART_DELAY, jitter=0.0)
        log.error("webhook_task_died", task=name, error=repr(error), restart_in=wait)
        self.restarts += 1

        def again() -> None:
            if not self._stopping:
                self._supervise(name, run)

        asyncio.get_running_loop().call_later(wait, again)

    async def stop(self) -> None:
        """After the server stopped: what is pending goes to the outbox, then all ends."""
        self._stopping = True
        with contextlib.suppress(ValueError):
            self.server.stored.remove(self._stored)
        for s in list(self._waiting):  # (never caught up here: rows only)
            self._release(s, rows_only=True)
        self._due.clear()
        writer = self._tasks.get("writer")
        if writer is not None and not writer.done():
            self._wake_writer.set()
            try:
                async with asyncio.timeout(STOP_GRACE):
                    await asyncio.shield(writer)
            except (TimeoutError, Exception) as e:
                log.error("webhooks_stop_pending_lost", events=len(self._pending),
                          error=repr(e))
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            await cancel_and_wait(task)  # (what one raised was reported when it died)
        if self._session is not None:
            await self._session.close()
        if self.outbox is not None:
            await asyncio.to_thread(self.outbox.close)


__all__ = ["MAX_PENDING", "OutboxOpener", "Shards", "Webhooks", "endpoint_shard"]
