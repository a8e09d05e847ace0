"""`notify.supervision.LongTask`: only its owner's `stop()` ends it quietly; a return, an
exception or a cancel from anywhere else is reported once as a death. `cancel_and_wait` and
`in_own_task`: a cancel of the caller while it waits reaches the caller (the idioms they replace
swallowed it)."""

from __future__ import annotations

import asyncio
import gc

import pytest

from notify.supervision import LongTask, cancel_and_wait, in_own_task


async def forever() -> None:
    await asyncio.Event().wait()


async def test_stop_is_the_only_quiet_end() -> None:
    deaths: list[BaseException] = []
    t = LongTask(forever(), name="loop", on_death=deaths.append)
    await asyncio.sleep(0)
    await t.stop()
    await asyncio.sleep(0)
    assert t.done() and deaths == []


async def test_a_cancel_from_elsewhere_is_a_death() -> None:
    deaths: list[BaseException] = []
    t = LongTask(forever(), name="loop", on_death=deaths.append)
    await asyncio.sleep(0)
    t.task.cancel()
    await asyncio.sleep(0.01)
    assert len(deaths) == 1 and isinstance(deaths[0], asyncio.CancelledError)
    assert "loop was cancelled, not by its owner" in str(deaths[0])
    await t.stop()  # after a death: quiet, nothing raised, nothing reported again
    assert len(deaths) == 1


async def test_an_exception_or_a_return_is_a_death() -> None:
    deaths: list[BaseException] = []

    async def fails() -> None:
        raise ValueError("broken")

    async def returns() -> None:
        return None

    a = LongTask(fails(), name="a", on_death=deaths.append)
    b = LongTask(returns(), name="b", on_death=deaths.append)
    await asyncio.sleep(0.01)
    assert [type(e) for e in deaths] == [ValueError, RuntimeError]
    assert str(deaths[1]) == "b returned"
    await a.stop()
    await b.stop()
    assert len(deaths) == 2


async def test_a_cancel_once_the_owner_is_stopping_is_no_death() -> None:
    """The owner's stop began (its own mark, read by `owner_stopping`) but has not reached
    `stop()`: a cancel meanwhile, as the loop's end does to what is left, is its stop's."""
    deaths: list[BaseException] = []
    owner = {"stopping": False}
    t = LongTask(forever(), name="loop", on_death=deaths.append,
                 owner_stopping=lambda: owner["stopping"])
    await asyncio.sleep(0)
    owner["stopping"] = True
    t.task.cancel()
    await asyncio.sleep(0.01)
    assert t.done() and deaths == []


async def test_an_exception_while_the_owner_is_stopping_is_still_a_death() -> None:
    """The owner drains (its stop began) and still needs the task until it stops it: a
    crash then is reported, not taken for the stop."""
    deaths: list[BaseException] = []

    async def fails_later() -> None:
        await asyncio.sleep(0.01)
        raise ValueError("broken while draining")

    t = LongTask(fails_later(), name="timer", on_death=deaths.append,
                 owner_stopping=lambda: True)
    await asyncio.sleep(0.05)
    assert [str(e) for e in deaths] == ["broken while draining"]
    await t.stop()


async def slow_to_end(ended: asyncio.Event) -> None:
    """Takes a moment to end once cancelled (a drain, a close), then ends cancelled."""
    try:
        await asyncio.Event().wait()
    finally:
        await asyncio.sleep(0.05)
        ended.set()


async def swallows_a_cancel() -> str:
    """As nats-py's drain() and close(): a cancel is caught, and it goes on to its end."""
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        await asyncio.sleep(0.05)
    return "closed"


async def test_a_caller_stopped_while_it_waits_for_a_task_it_cancelled_is_stopped() -> None:
    """`task.cancel()` then `await task` under `suppress(CancelledError)` returned normally
    here: the caller's own cancel was taken for the task's."""
    ended = asyncio.Event()
    task = asyncio.get_running_loop().create_task(slow_to_end(ended))
    await asyncio.sleep(0)
    caller = asyncio.get_running_loop().create_task(cancel_and_wait(task))
    await asyncio.sleep(0.01)
    caller.cancel()
    await asyncio.wait((caller,), timeout=2)
    assert caller.cancelled()
    await asyncio.wait_for(ended.wait(), 2)  # (the task still ends; nothing is left running)
    assert task.cancelled()


async def test_cancel_and_wait_says_what_the_task_raised() -> None:
    async def fails_on_cancel() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            raise RuntimeError("broke while stopping") from None

    task = asyncio.get_running_loop().create_task(fails_on_cancel())
    await asyncio.sleep(0)
    error = await cancel_and_wait(task)
    assert isinstance(error, RuntimeError) and str(error) == "broke while stopping"


async def test_in_own_task_a_call_that_swallows_a_cancel_cannot_swallow_the_callers() -> None:
    caller = asyncio.get_running_loop().create_task(in_own_task(swallows_a_cancel(), 5))
    await asyncio.sleep(0.01)
    caller.cancel()
    await asyncio.wait((caller,), timeout=2)
    assert caller.cancelled()
    # without a task of its own, the same call ends the caller normally (the cancel is lost)
    plain = asyncio.get_running_loop().create_task(swallows_a_cancel())
    await asyncio.sleep(0.01)
    plain.cancel()
    await asyncio.wait((plain,), timeout=2)
    assert not plain.cancelled() and plain.result() == "closed"


async def test_in_own_task_gives_up_at_its_bound_and_cancels_the_call() -> None:
    ended = asyncio.Event()
    with pytest.raises(TimeoutError):
        await in_own_task(slow_to_end(ended), 0.05)
    await asyncio.wait_for(ended.wait(), 2)
    assert await in_own_task(asyncio.sleep(0, "done"), 1) == "done"


async def breaks_as_it_stops() -> None:
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        await asyncio.sleep(0.05)
        raise RuntimeError("broke while stopping") from None


@pytest.mark.parametrize("how", ["cancel_and_wait", "in_own_task"])
async def test_what_a_task_given_up_on_raises_later_is_retrieved(how: str) -> None:
    """The caller is stopped (or its bound passes) before the task ends, and the task then
    raises: nothing logs "Task exception was never retrieved" when it is collected."""
    loop = asyncio.get_running_loop()
    contexts: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _, context: contexts.append(context))
    try:
        if how == "cancel_and_wait":
            task = loop.create_task(breaks_as_it_stops())
            await asyncio.sleep(0)
            caller = loop.create_task(cancel_and_wait(task))
            await asyncio.sleep(0.01)
            caller.cancel()
            await asyncio.wait((caller,), timeout=2)
            assert caller.cancelled()
            await asyncio.wait((task,), timeout=2)
            del task, caller  # (the caller's cancel holds its frame, which holds the task)
        else:
            with pytest.raises(TimeoutError):
                await in_own_task(breaks_as_it_stops(), 0.01)
            await asyncio.sleep(0.2)  # (it ends, and raises, after we gave up on it)
        gc.collect()
        await asyncio.sleep(0)
        assert not [c for c in contexts if "never retrieved" in str(c.get("message"))], contexts
    finally:
        loop.set_exception_handler(None)
