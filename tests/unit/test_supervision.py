"""`notify.supervision.LongTask`: only its owner's `stop()` ends it quietly; a return, an
exception or a cancel from anywhere else is reported once as a death."""

from __future__ import annotations

import asyncio

from notify.supervision import LongTask


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
