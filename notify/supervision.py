"""Background tasks meant to run until their owner stops them, and what any other end means.

The server's timer, a cluster node's tick, the leases' loops, an uplink to an owner and the
revocation watch each run for their owner's life. If one ends while its owner still runs, the
promises it keeps stop being kept (deadlines, heartbeats, revocations), so that end is a death
and whoever must act is told: the server halts, the node fails, the edge closes what it routed.

The rule is one, here: only the owner's `stop()` ends such a task quietly. A return, an
exception, or a cancel that came from anywhere else is a death. (`task.cancelled()` alone does
not say who cancelled: read as "stopped by us", it hid a cancel from elsewhere in four places.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


async def cancel_and_wait(task: asyncio.Task[Any]) -> BaseException | None:
    """Cancel `task` and wait for its end; what it raised (None: cancelled, or it returned).

    Not `task.cancel()` then `await task` under `suppress(CancelledError)`: that also swallows
    a cancel of the caller itself while it waits, and the caller's own stop then goes on as if
    never asked (the same lost cancel as Python 3.11's `wait_for`: pyproject's TID251)."""
    task.cancel()
    try:
        await asyncio.wait((task,))
    except asyncio.CancelledError:  # we are stopped too: what it raises is still retrieved
        task.add_done_callback(_retrieved)
        raise
    return None if task.cancelled() else task.exception()


def _retrieved(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        task.exception()


#: the tasks `in_own_task` gave up on, until they end (the loop keeps only weak references)
_given_up: set[asyncio.Task[Any]] = set()


async def in_own_task(coro: Coroutine[Any, Any, T], seconds: float) -> T:
    """`await coro` in a task of its own, given up after `seconds` (TimeoutError): for a
    library call that swallows a cancel (nats-py's `drain()` and `close()` catch
    CancelledError and go on), so that it cannot swallow ours. (What `wait_for` was for,
    without 3.11's lost cancel.) A task given up on, past the bound or because we are
    cancelled, is cancelled, which such a call may ignore: it is kept until it ends, and what
    it raises then is retrieved."""
    task = asyncio.ensure_future(coro)
    try:
        done, _ = await asyncio.wait((task,), timeout=seconds)
    except asyncio.CancelledError:
        _give_up(task)
        raise
    if not done:
        _give_up(task)
        raise TimeoutError(f"not done within {seconds} s")
    return task.result()


def _give_up(task: asyncio.Task[Any]) -> None:
    task.cancel()
    _given_up.add(task)
    task.add_done_callback(_given_up.discard)
    task.add_done_callback(_retrieved)


def death_of(task: asyncio.Task[Any]) -> BaseException:
    """Why `task` ended, as an error, for an end its owner did not ask for."""
    if task.cancelled():
        return asyncio.CancelledError(f"{task.get_name()} was cancelled, not by its owner")
    error = task.exception()
    return error if error is not None else RuntimeError(f"{task.get_name()} returned")


class LongTask:
    """A task run until `stop()`; `on_death(error)` is called once if it ends any other way.

    `owner_stopping` says whether its owner's stop has begun: from then on a cancel is
    expected, also before the owner reaches `stop()` (a stop cut short, whose loop then
    cancels what is left). It reads the owner's own mark, so that the fact is kept once. An
    exception or a return is a death even then: the task still kept its promises while its
    owner drained (the server's timer fires the deadlines of its last seconds)."""

    def __init__(self, coro: Coroutine[Any, Any, None], *, name: str,
                 on_death: Callable[[BaseException], None],
                 owner_stopping: Callable[[], bool] = lambda: False) -> None:
        self._stopping = False
        self._owner_stopping = owner_stopping
        self._on_death = on_death
        self.task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro, name=name)
        self.task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        if self._stopping or (task.cancelled() and self._owner_stopping()):
            return
        self._on_death(death_of(task))

    def done(self) -> bool:
        return self.task.done()

    async def stop(self) -> None:
        """End it (a death reported earlier stays reported; what it raised is not raised
        again here)."""
        self._stopping = True
        await cancel_and_wait(self.task)
