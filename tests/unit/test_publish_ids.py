"""A sender's publish ids (notify/core/publish_ids.py) against a plain model: the newest
`window` ids are always known at their offsets, a retracted id is not, an id never given is
never taken for a retry; freezing (a quiet group's cooling) changes none of it, also when
ids' hashes collide."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from notify.core import publish_ids
from notify.core.publish_ids import SenderIds

WINDOW = 8

#: add a new id, retract the newest not yet durable, mark more durable and freeze
ops = st.lists(st.one_of(st.just(("add",)), st.just(("retract",)),
                         st.tuples(st.just("freeze"), st.integers(0, 3))), max_size=80)


def check(ops: list[tuple[Any, ...]]) -> None:
    ids, added, retracted = SenderIds(), [], set()  # added: (id, offset), in order
    every: list[tuple[str, int]] = []  # every add, retracted ones too: each took a slot
    durable = offset = 0
    for op in ops:
        if op[0] == "add":
            offset += 1
            pid = f"p{offset}-{'x' * (offset % 5)}"
            ids.add(pid, offset, WINDOW)
            added.append((pid, offset))
            every.append((pid, offset))
        elif op[0] == "retract" and added and added[-1][1] > durable:
            pid, o = added.pop()
            ids.retract(pid)
            retracted.add(pid)
            offset = o - 1  # its offset goes to the next message (Topic.retract)
        elif op[0] == "freeze":
            durable = min(offset, durable + op[1])
            ids.freeze(durable)
        live = set(added)
        for pid, o in every[-WINDOW:]:
            if (pid, o) in live:
                assert ids.get(pid) == o, (pid, o)
        for pid, o in added:
            assert ids.get(pid) in (None, o)  # remembered longer, or not: never another
        for pid in retracted - {p for p, _ in added}:
            assert ids.get(pid) is None
        assert ids.get("never") is None and ids.get("p1") in (None, 1)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_the_newest_ids_are_known_and_no_other(ops: list[tuple[Any, ...]]) -> None:
    check(ops)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_colliding_hashes_are_told_apart_by_the_id(ops: list[tuple[Any, ...]]) -> None:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(publish_ids, "hash", lambda s: len(s) % 3, raising=False)
        check(ops)


def test_frozen_ids_take_less_than_half_the_room() -> None:
    """What cooling buys: 10,000 SDK-style ids (16 hex digits, a dash, a counter)."""
    def size(freeze: bool) -> int:
        tracemalloc.start()
        try:
            ids = SenderIds()
            for i in range(10_000):
                ids.add(f"{i * 7919:016x}-{i}", 100_000 + i, 10_000)
            if freeze:
                ids.freeze(200_000)
            return tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()

    hot, frozen = size(False), size(True)  # frozen: ~41 B an id, and freed tuples Python keeps
    assert frozen * 2 < hot, (hot, frozen)
    assert frozen < 70 * 10_000
