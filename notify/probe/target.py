"""The probe of one target: publish, receive, reconnect on purpose, change the view on purpose,
and count each SLI's events (docs/slo.md).

Theory of operation. A `TargetProbe` owns one `Session` at a time (a sender and a receiver in
the probe group) and five loops, all in one `TaskGroup` (STYLE.md: no task dies alone):
- `_keep_session`: opens a session, waits until it is lost for good, opens another (with backoff);
- `_publish_loop`: at `rate` per second, one SDK publish of a numbered probe message; with no
  session it is counted bad at once (an outage must never *lower* the number of events);
- `_api_loop` (when the server API is configured): the same through `ServerAPI.publish`;
- `_expire_loop`: counts bad every publish, delivery and view change past its deadline (the
  ledgers, ledger.py), so an answer that never comes is counted, and memory stays bounded;
- `_disrupt_loop`: every `reconnect_every`, aborts the receiver's socket and waits for the
  resume (good: `view_resume` with the view unchanged, within `resume_deadline`); every
  `view_change_every`, a third member joins and leaves, and the receiver times the installs.

The receiver's events come to `_on_event` on its reader (no queue): a probe message settles its
delivery; `view_change`/`view_install` time the view change; `view_resume` ends a resume check.

An error the loops do not expect escapes the TaskGroup to `Prober`, which restarts the whole
target probe after a backoff (the failure is logged and counted in `notify_probe_restarts`); what
was outstanding is then counted bad, never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Callable

from client_sdk import (
    GroupEvent,
    Message,
    NotifyError,
    PublishRejected,
    PublishResult,
    ServerAPI,
    ViewChanging,
    ViewInstalled,
    ViewResumed,
    connect,
)
from notify.probe.config import ProbeConfig
from notify.probe.ledger import Ledger
from notify.probe.metrics import ProbeMetrics
from notify.probe.session import Session, _discard, client_options, close_client

__all__ = ["TargetProbe"]

log = logging.getLogger("notify.probe")

#: the outcome of a resume check, set by the receiver's events
_RESUMED, _VIEW_CHANGED = "resumed", "view_changed"


class TargetProbe:
    def __init__(self, target: str, config: ProbeConfig, metrics: ProbeMetrics,
                 run: str | None = None) -> None:
        self.target, self.config, self.metrics = target, config, metrics
        #: tags this prober's messages: others in the group (another prober) are not ours
        self.run_id = run or secrets.token_hex(6)
        self.session: Session | None = None
        #: the last probe message's number (they are numbered 1, 2, ...)
        self._highest = 0
        c = config
        self.publishes = Ledger(c.publish_deadline, c.max_outstanding)
        self.deliveries = Ledger(c.latency_threshold, c.max_outstanding)
        #: view changes the receiver saw proposed, by proposed version
        self.view_changes = Ledger(c.view_change_threshold, 64)
        #: the resume check under way: its future, and the view it must keep
        self._resume: asyncio.Future[str] | None = None
        self._resume_view: int | None = None
        self._options = client_options(c.publish_deadline, c.max_outstanding)
        #: set once the first session opened or failed to: publishing starts then, so the
        #: prober's own start is not counted as an outage (a target down at start still is)
        self._first_attempt = asyncio.Event()

    # -- the loops ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Probe until cancelled; an unexpected error escapes (the `Prober` restarts us)."""
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._keep_session(), name=f"probe-session-{self.target}")
                tg.create_task(self._publish_loop(), name=f"probe-publish-{self.target}")
                tg.create_task(self._expire_loop(), name=f"probe-expire-{self.target}")
                tg.create_task(self._disrupt_loop(), name=f"probe-disrupt-{self.target}")
                if self.config.api_url is not None:
                    tg.create_task(self._api_loop(), name=f"probe-api-{self.target}")
        except Exception:  # what was outstanding will never be answered to us: bad, not lost
            self._count_bad("publish", self.publishes.clear())
            self._count_bad("delivery", self.deliveries.clear())
            self._count_bad("view_change", self.view_changes.clear())
            raise
        finally:  # (the session is closed by `_keep_session`, which ended with the group)
            self._gauge()

    async def _keep_session(self) -> None:
        c, delay = self.config, self.config.backoff
        while True:
            try:
                s = await Session.open(self.target, c.group, self._on_event,
                                       options=self._options, token=c.token,
                                       timeout=c.connect_timeout)
            except (NotifyError, OSError, TimeoutError) as e:
                log.warning("probe %s: cannot open a session: %s", self.target, e or type(e))
                self._first_attempt.set()
                await asyncio.sleep(delay)
                delay = min(delay * 2, c.max_backoff)
                continue
            delay = c.backoff
            self.metrics.sessions.labels(self.target).inc()
            self.session = s
            self._first_attempt.set()
            try:
                await s.lost.wait()
            finally:
                self.session = None
                await asyncio.shield(s.close(c.connect_timeout))
            log.warning("probe %s: session lost; opening another", self.target)

    async def _publish_loop(self) -> None:
        await self._first_attempt.wait()  # (bounded: Session.open has a deadline)
        await _ticks(self.config.rate, self._publish_one)

    async def _api_loop(self) -> None:
        c = self.config
        assert c.api_url is not None and c.api_key is not None
        await self._first_attempt.wait()
        # one publish task per tick, each bounded by the publish deadline
        async with (ServerAPI(c.api_url, c.api_key, timeout=c.publish_deadline) as api,
                    asyncio.TaskGroup() as tg):
            def one() -> None:
                if len(self.publishes) < c.max_outstanding:
                    tg.create_task(self._api_publish(api))
                else:
                    self._count_bad("publish", ["api"])
            await _ticks(c.api_rate, one)

    async def _expire_loop(self) -> None:
        c = self.config
        tick = min(0.25, c.latency_threshold / 4, c.view_change_threshold / 4,
                   c.publish_deadline / 4)
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(tick)
            now = loop.time()
            self._count_bad("publish", self.publishes.expire(now))
            self._count_bad("delivery", self.deliveries.expire(now))
            self._count_bad("view_change", self.view_changes.expire(now))
            self._gauge()

    async def _disrupt_loop(self) -> None:
        """The deliberate faults, one at a time (a drop never overlaps a view change we made,
        which would make a good resume look bad)."""
        c = self.config
        faults = [(every, fault) for every, fault in ((c.reconnect_every, self.check_resume),
                                                      (c.view_change_every, self.change_view))
                  if every > 0]
        if not faults:
            await asyncio.Event().wait()  # nothing to do: wait to be cancelled
        loop = asyncio.get_running_loop()
        due = [loop.time() + every for every, _ in faults]
        while True:
            await asyncio.sleep(max(0.0, min(due) - loop.time()))
            now = loop.time()
            for i, (every, fault) in enumerate(faults):
                if now >= due[i]:
                    await fault()
                    due[i] = loop.time() + every

    # -- publishing --------------------------------------------------------------------------

    def _next(self) -> int:
        self._highest += 1
        return self._highest

    def _publish_one(self) -> None:
        s = self.session
        if s is None:  # no session (the server is down, or refused us): a failed publish
            self._count_bad("publish", ["sdk"])
            return
        seq = self._next()
        try:
            fut = s.send_group.publish_nowait({"probe": self.run_id, "seq": seq, "path": "sdk"})
        except NotifyError as e:  # PublishQueueFull, or the client is closed
            log.debug("probe %s: publish refused at once: %s", self.target, e)
            self._count_bad("publish", ["sdk"])
            return
        now = asyncio.get_running_loop().time()
        self._count_bad("publish", self.publishes.open(seq, "sdk", now))
        self._count_bad("delivery", self.deliveries.open(seq, "sdk", now))
        fut.add_done_callback(lambda f: self._answered(seq, f))

    def _answered(self, seq: int, fut: asyncio.Future[PublishResult]) -> None:
        """(A future's callback.) The SDK's answer to publish `seq`."""
        error = None if fut.cancelled() else fut.exception()
        now = asyncio.get_running_loop().time()
        done = self.publishes.settle(seq, now)
        if isinstance(error, PublishRejected):
            self.deliveries.drop(seq)  # refused: it will never be delivered, and is not owed
        if done is None:
            return  # already counted bad (past its deadline)
        good = error is None and done.elapsed <= self.config.publish_deadline
        self.metrics.event("publish", self.target, good, done.path)
        if error is not None and not fut.cancelled():
            log.debug("probe %s: publish %d failed: %r", self.target, seq, error)

    async def _api_publish(self, api: ServerAPI) -> None:
        seq = self._next()
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._count_bad("publish", self.publishes.open(seq, "api", now))
        self._count_bad("delivery", self.deliveries.open(seq, "api", now))
        ok = False
        try:
            async with asyncio.timeout(self.config.publish_deadline):
                await api.publish(self.config.group, {"probe": self.run_id, "seq": seq,
                                                      "path": "api"}, retries=0)
            ok = True
        except TimeoutError:  # no answer says nothing of the outcome: it may be delivered
            log.debug("probe %s: API publish %d: no answer in time", self.target, seq)
        except NotifyError as e:  # refused, or not sent: it is not owed a delivery
            log.debug("probe %s: API publish %d failed: %r", self.target, seq, e)
            self.deliveries.drop(seq)
        done = self.publishes.settle(seq, loop.time())
        if done is not None:
            self.metrics.event("publish", self.target, ok, done.path)

    # -- the receiver's events ---------------------------------------------------------------

    def _on_event(self, e: GroupEvent) -> None:
        now = asyncio.get_running_loop().time()
        if type(e) is Message:
            self._received(e, now)
            return
        s = self.session
        if s is not None:
            s.watch(e)
        if isinstance(e, ViewChanging):
            if e.proposed not in self.view_changes:
                self._count_bad("view_change", self.view_changes.open(e.proposed, "", now))
        elif isinstance(e, ViewInstalled):
            for proposed in self.view_changes.outstanding():  # (a merged change installs several)
                if proposed > e.view:
                    continue
                done = self.view_changes.settle(proposed, now)
                assert done is not None
                good = done.elapsed <= self.config.view_change_threshold
                self.metrics.event("view_change", self.target, good)
                self.metrics.view_change_seconds.labels(self.target).observe(done.elapsed)
            if self._resume is not None and not self._resume.done() and (
                    self._resume_view is None or e.view != self._resume_view):
                self._resume.set_result(_VIEW_CHANGED)
        elif (isinstance(e, ViewResumed) and self._resume is not None
              and not self._resume.done()):
            same = self._resume_view is None or e.view == self._resume_view
            self._resume.set_result(_RESUMED if same else _VIEW_CHANGED)

    def _received(self, m: Message, now: float) -> None:
        p = m.payload
        if not isinstance(p, dict) or p.get("probe") != self.run_id:
            return  # not ours (another prober, or an application using the group)
        seq, path = p.get("seq"), str(p.get("path"))
        if not isinstance(seq, int):
            return
        done = self.deliveries.settle(seq, now)
        if done is None:  # past the threshold already (counted bad), or a duplicate
            if 0 < seq <= self._highest:
                self.metrics.late.labels(self.target, path).inc()
            return
        good = done.elapsed <= self.config.latency_threshold
        self.metrics.event("delivery", self.target, good, done.path)
        if good:
            self.metrics.latency.labels(self.target, done.path).observe(done.elapsed)

    # -- the deliberate faults ---------------------------------------------------------------

    async def check_resume(self) -> bool | None:
        """Drop the receiver's socket and wait for its resume: good if the group answers
        `view_resume` for the same view within `resume_deadline`, bad if a view is installed
        instead or nothing comes in time. None: there was no connection to drop (not an
        event: the publish and delivery SLIs already count an outage)."""
        s = self.session
        if s is None or not s.connected or s.recv_group.view is None:
            return None
        loop = asyncio.get_running_loop()
        self._resume = fut = loop.create_future()
        self._resume_view = s.recv_group.view.version
        try:
            if not s.drop_receiver():
                return None
            outcome = "timeout"
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.config.resume_deadline):
                    outcome = await fut
        finally:
            self._resume, self._resume_view = None, None
        good = outcome == _RESUMED
        self.metrics.event("resume", self.target, good)
        if not good:
            log.warning("probe %s: the deliberate reconnect did not resume: %s", self.target,
                        outcome)
        return good

    async def change_view(self) -> None:
        """A third member joins the probe group, then leaves: two view changes the receiver
        times (`_on_event`). A join or leave that fails is a bad view change (the change it
        asked for did not happen in time)."""
        c = self.config
        if self.session is None:
            return
        client = None
        try:
            async with asyncio.timeout(c.connect_timeout + c.view_change_threshold):
                client = await connect(self.target, member="probe-churn", token=c.token,
                                       options=self._options)
                g = await client.join(c.group)
                g.on_event(_discard)
                await g.leave()
        except (NotifyError, OSError, TimeoutError) as e:
            log.warning("probe %s: the deliberate view change failed: %s", self.target,
                        e or type(e))
            self.metrics.event("view_change", self.target, False)
        finally:
            if client is not None:
                await close_client(client, c.connect_timeout)

    # -- counting ----------------------------------------------------------------------------

    def _count_bad(self, sli: str, paths: list[str]) -> None:
        for path in paths:
            self.metrics.event(sli, self.target, False, path or None)

    def _gauge(self) -> None:
        self.metrics.outstanding.labels(self.target).set(
            len(self.publishes) + len(self.deliveries) + len(self.view_changes))


async def _ticks(rate: float, tick: Callable[[], None]) -> None:
    """Call `tick()` `rate` times a second, on a fixed schedule; a tick that is more than a
    second behind skips ahead instead of bursting (a paused prober must not flood a server
    that just came back)."""
    loop = asyncio.get_running_loop()
    period = 1.0 / rate
    due = loop.time()
    while True:
        tick()
        due += period
        now = loop.time()
        if due < now - 1.0:
            due = now
        await asyncio.sleep(max(0.0, due - now))
