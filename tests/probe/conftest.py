"""The prober's tests probe real `notify serve` processes (tests/api/conftest.py's `Served`:
free ports, a data directory of their own, stopped at teardown whatever the test did), and run
the prober in the test's event loop so they can read its counters directly."""

from __future__ import annotations

import asyncio
import io
import os
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from notify.probe import ProbeConfig, ProbeMetrics, Prober
from tests.api.conftest import KEY, SECRET, Served
from tests.integration.conftest import TIMEOUT

__all__ = ["KEY", "SECRET", "TIMEOUT", "Served", "running", "until"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = str(item.path).replace("\\", "/")
        if "tests/probe" in path and "test_ledger" not in path and "test_rules" not in path:
            item.add_marker(pytest.mark.integration)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Served]:
    """One `notify serve` with a server API key; continued (SIGCONT) and stopped at teardown."""
    s = Served(tmp_path / "data", *KEY)
    await asyncio.to_thread(s.start)
    try:
        yield s
    finally:
        if s.proc is not None and s.proc.poll() is None:
            os.kill(s.proc.pid, signal.SIGCONT)  # (a test may have left it stopped)
        await asyncio.to_thread(s.stop)


async def until(what: str, cond: Callable[[], bool], timeout: float = TIMEOUT,
                state: Callable[[], object] | None = None) -> None:
    """Poll `cond` until it holds; fail naming `what` (and `state()`, when given) after
    `timeout` seconds."""
    try:
        async with asyncio.timeout(timeout):
            while not cond():
                await asyncio.sleep(0.05)
    except TimeoutError:
        pass
    assert cond(), f"{what}: not within {timeout} s" + (f"; {state()}" if state else "")


class running:
    """`async with running(prober) as p:` runs `p.run()` in a task and cancels it at exit
    (bounded), re-raising whatever made it end early."""

    def __init__(self, prober: Prober) -> None:
        self.prober = prober
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Prober:
        self.task = asyncio.get_running_loop().create_task(self.prober.run())
        return self.prober

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        # (wait, not gather under a timeout: a cancelled gather waits for its task anyway, so
        # a prober that swallowed its cancel hung the test past every bound)
        await asyncio.wait((self.task,), timeout=TIMEOUT)
        if not self.task.done():
            stack = io.StringIO()
            for t in asyncio.all_tasks():
                t.print_stack(file=stack)
            raise AssertionError(f"the prober did not end when cancelled: {stack.getvalue()}")
        error = None if self.task.cancelled() else self.task.exception()
        if error is not None:  # (ended early, or raised as it was cancelled)
            raise error


def prober(target: str, **kw: object) -> Prober:
    """A prober of `target` with the tests' fast settings (overridden by `kw`)."""
    settings: dict[str, object] = dict(rate=20.0, publish_deadline=2.0, latency_threshold=1.0,
                                       reconnect_every=0.0, view_change_every=0.0,
                                       resume_deadline=5.0, view_change_threshold=1.0,
                                       connect_timeout=5.0, backoff=0.2, max_backoff=1.0)
    settings.update(kw)
    return Prober([target], ProbeConfig(**settings), ProbeMetrics())  # type: ignore[arg-type]
