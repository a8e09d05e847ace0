"""The SDK's group queue (`client_sdk/events_queue.py`): order, waiting getters, and a getter
that gives up (a timeout) leaving no entry behind."""

from __future__ import annotations

import asyncio

import pytest

from client_sdk.events_queue import EventQueue


async def test_items_come_out_in_order_and_a_waiting_getter_is_woken() -> None:
    q: EventQueue[int] = EventQueue()
    waiter = asyncio.ensure_future(q.get())
    await asyncio.sleep(0)
    q.put_nowait(1)
    q.put_nowait(2)
    assert await asyncio.wait_for(waiter, 1) == 1
    assert q.qsize() == 1 and q.get_nowait() == 2 and q.empty()
    with pytest.raises(IndexError):
        q.get_nowait()


async def test_getters_that_time_out_leave_no_entry() -> None:
    q: EventQueue[int] = EventQueue()
    for _ in range(200):  # a consumer polling with a timeout on a quiet group
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(q.get(), 0.001)
    assert len(q._getters) == 0
    q.put_nowait(7)
    assert await asyncio.wait_for(q.get(), 1) == 7


def test_pop_if_takes_the_oldest_only_when_it_is_of_that_very_type() -> None:
    class Sub(int):
        pass

    q: EventQueue[object] = EventQueue()
    assert q.pop_if(int) is None  # empty
    q.put_nowait(1)
    q.put_nowait("two")
    assert q.pop_if(str) is None and q.qsize() == 2  # the oldest is not a str: nothing taken
    assert q.pop_if(int) == 1
    assert q.pop_if(int) is None and q.get_nowait() == "two"
    q.put_nowait(Sub(3))
    assert q.pop_if(int) is None and q.qsize() == 1  # exactly the type, not a subclass
