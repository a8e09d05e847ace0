"""The webhooks' tasks are supervised (G13, notify/webhooks/service.py `_supervise`): a sender
whose `run` raises, a sender task killed (cancelled) by anything but `stop`, and a killed writer
are each logged, counted and started again, and delivery goes on, nothing lost. A real receiver
(tests/webhooks/conftest.py) verifies every request; no server listens (writes go through
`NotifyServer.write` into its memory log and its `stored` hooks)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from notify.core.actions import StoreView, ViewInstall
from notify.server.app import NotifyServer
from notify.webhooks import service
from notify.webhooks.config import WebhookSettings
from notify.webhooks.sender import Sender
from tests.webhooks.conftest import SECRET, Receiver

pytestmark = pytest.mark.timeout(30)


async def _until(pred: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_a_dead_task_is_restarted_and_delivery_goes_on(
        receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "RESTART_DELAY", 0.05)
    runs = 0
    real_run = Sender.run

    async def run(self: Sender) -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            raise RuntimeError("the sender's first run dies")
        await real_run(self)

    monkeypatch.setattr(Sender, "run", run)
    server = NotifyServer()
    hook = WebhookSettings(url=receiver.url, secret=SECRET,  # type: ignore[arg-type]
                           backoff=0.05, backoff_max=0.1, timeout=2.0)
    hooks = service.Webhooks(server, [hook], ":memory:")
    await hooks.start()
    task = f"sender:{hook.key}"
    members: list[str] = []

    async def arrive(m: str) -> None:
        """`m` joins group g (a stored install); wait for its `member.arrived`."""
        members.append(m)
        v = len(members)
        server.write(StoreView(v, ViewInstall("g", v, tuple(members), (m,), (), 1, 0)),
                     lambda e: None)
        await receiver.until(lambda: any(k == "member.arrived" and d["member"] == m
                                         for _, k, d in receiver.got), timeout=10)

    try:
        # run raised: restarted, and the first events are delivered by the second run
        await _until(lambda: hooks.restarts == 1 and runs == 2)
        await arrive("a")
        # the sender task killed (waiting, or mid-request): restarted, delivery goes on
        hooks._tasks[task].cancel()
        await _until(lambda: hooks.restarts == 2 and runs == 3)
        await arrive("b")
        # the writer killed: restarted, what the hook took meanwhile is written and delivered
        hooks._tasks["writer"].cancel()
        await _until(lambda: hooks.restarts == 3 and not hooks._tasks["writer"].done())
        await arrive("c")
        assert not receiver.bad
        # (a sender killed mid-request sends that row again, with its id: at least once)
        assert [d["member"] for k, d in receiver.unique().values() if k == "member.arrived"] \
            == ["a", "b", "c"]
    finally:
        await hooks.stop()
    assert all(t.done() for t in hooks._tasks.values())
