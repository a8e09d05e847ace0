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
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Literal

import aiohttp
import structlog

from notify.core.actions import Write
from notify.server.app import NotifyServer
from notify.webhooks.backoff import delay
from notify.webhooks.config import WebhookSettings
from notify.webhooks.metrics import WebhookCollector
from notify.webhooks.outbox import Outbox
from notify.webhooks.sender import Sender
from notify.webhooks.source import Batch, Source

log = structlog.get_logger("notify.webhooks")

#: events derived and not yet in the outbox, at most
MAX_PENDING = 100_000
#: seconds `stop` waits for the writer to empty `_pending`
STOP_GRACE = 5.0
#: the wait before a dead task is started again: this, doubling with each death, up to the next
RESTART_DELAY, MAX_RESTART_DELAY = 1.0, 30.0


class Webhooks:
    def __init__(self, server: NotifyServer, hooks: list[WebhookSettings],
                 path: str | Path, *, durability: Literal["normal", "full"] = "full") -> None:
        """`path`: the outbox's SQLite file, or ":memory:"."""
        self.server, self.hooks, self.path, self.durability = server, hooks, path, durability
        self.source = Source(hooks)
        self.outbox: Outbox | None = None
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
        self._session: aiohttp.ClientSession | None = None
        self._stopping = False
        #: the hook's writes are set aside until `_pending` is written (see the docstring)
        self._behind = False
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        caps = {h.key: (h.max_backlog, h.max_backlog_bytes) for h in self.hooks}
        self.outbox = outbox = await asyncio.to_thread(Outbox, self.path, caps,
                                                       durability=self.durability)
        gone = await asyncio.to_thread(outbox.forget_except, set(caps))
        if gone:
            log.warning("webhooks_unconfigured_dropped", events=gone,
                        detail="these endpoints are no longer configured")
        derived = await asyncio.to_thread(self.source.catch_up, self.server.store, outbox,
                                          time.time(), lambda _: None)
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=max(h.timeout for h in self.hooks) + 1))
        self.senders = {h.key: Sender(h, outbox, self._session) for h in self.hooks}
        self.server.stored.append(self._stored)
        self.server.metrics.registry.register(WebhookCollector(self))
        self._supervise("writer", self._write_loop)
        for key, sender in self.senders.items():
            self._supervise(f"sender:{key}", sender.run)
        log.info("webhooks", endpoints=[h.key for h in self.hooks], outbox=str(self.path),
                 backlog={k: outbox.count.get(k, 0) for k in caps}, caught_up=derived)

    # -- the hook --------------------------------------------------------------------------------

    def _stored(self, write: Write) -> None:
        """`NotifyServer.stored`: a write the log made durable (on the loop; what raises is
        logged there, `stored_hook_failed`, and the group's write goes on)."""
        batch = self.source.of_write(write, time.time())
        if batch is None:
            return
        if self._behind or len(self._pending) + len(batch) > MAX_PENDING:
            if not self._behind:
                log.error("webhooks_behind", pending=len(self._pending),
                          detail="the outbox does not keep up: what follows is read back "
                                 "from the log once it has caught up")
                self._behind = True
            for key, _ in batch.rows:
                self.overflowed[key] = self.overflowed.get(key, 0) + 1
            return  # (nor its cursors: the outbox's say where the read-back starts)
        self._pending.extend(batch)
        self._wake_writer.set()

    # -- tasks -----------------------------------------------------------------------------------

    async def _write_loop(self) -> None:
        assert self.outbox is not None
        failures = 0
        while True:
            if not self._pending.cursors and not self._pending.offsets \
                    and not self._pending.rows:
                if self._behind:
                    await self._catch_up()
                    continue
                if self._stopping:
                    return
                self._wake_writer.clear()
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

    async def _catch_up(self) -> None:
        """After falling behind: take the hook's writes again, and derive from the log what
        was set aside meanwhile (from the outbox's cursors to the log's head now: it overlaps
        what the hook takes from now on, by the same ids)."""
        assert self.outbox is not None
        self._behind = False
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
        task = asyncio.get_running_loop().create_task(run(), name=f"webhooks-{name}")
        self._tasks[name] = task
        task.add_done_callback(lambda t: self._ended(name, run, t))

    def _ended(self, name: str, run: Callable[[], Coroutine[Any, Any, None]],
               task: asyncio.Task[None]) -> None:
        if self._stopping:
            return
        # (cancelled by anything but `stop` is a death too: a sender nobody restarts would
        # leave its endpoint's rows undelivered, silently)
        error = asyncio.CancelledError() if task.cancelled() else task.exception()
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
        writer = self._tasks.get("writer")
        if writer is not None and not writer.done():
            self._wake_writer.set()
            try:
                await asyncio.wait_for(asyncio.shield(writer), STOP_GRACE)
            except (TimeoutError, Exception) as e:
                log.error("webhooks_stop_pending_lost", events=len(self._pending),
                          error=repr(e))
        for task in self._tasks.values():
            task.cancel()
        for task in self._tasks.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._session is not None:
            await self._session.close()
        if self.outbox is not None:
            await asyncio.to_thread(self.outbox.close)


__all__ = ["MAX_PENDING", "Webhooks"]
